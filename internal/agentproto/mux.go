package agentproto

import (
	"io"
	"time"

	"github.com/hashicorp/yamux"
)

// muxConfig is shared by both ends. The stream window is large so that one
// stream can carry a file at full speed across a link with some latency.
// Keepalives are rare: each wakes an idle sandbox's agent and netstack,
// which hundreds of idle sandboxes pay for in host CPU, and nothing waits
// on them to find a connection dead: the daemon watches the sandbox's
// process, a daemon's exit closes its connections, and a restored agent
// closes the connections from before its checkpoint (sessions, server.go).
func muxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.MaxStreamWindowSize = 4 << 20
	c.EnableKeepAlive = true
	c.KeepAliveInterval = 2 * time.Minute
	c.ConnectionWriteTimeout = 30 * time.Second
	c.StreamOpenTimeout = 30 * time.Second
	c.LogOutput = io.Discard
	return c
}
