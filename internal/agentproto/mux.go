package agentproto

import (
	"io"
	"time"

	"github.com/hashicorp/yamux"
)

// muxConfig is shared by both ends. The stream window is large so that one
// stream can carry a file at full speed across a link with some latency.
func muxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.MaxStreamWindowSize = 4 << 20
	c.EnableKeepAlive = true
	c.KeepAliveInterval = 10 * time.Second
	c.ConnectionWriteTimeout = 30 * time.Second
	c.StreamOpenTimeout = 30 * time.Second
	c.LogOutput = io.Discard
	return c
}
