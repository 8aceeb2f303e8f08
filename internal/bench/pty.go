package bench

// The terminal benchmark: a keystroke's round trip through a terminal's
// WebSocket to a program in the sandbox and back, beside a ping's round
// trip to the agent through the API.

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// ptyReady is what the benchmark's program prints once its terminal is
// raw (no CR added to its newline): from then on a byte comes back only
// from cat.
const ptyReady = "pty-ready"

func (b *bencher) benchPTY(ctx context.Context, sb apitype.SandboxInfo) result {
	s, err := b.cl.Terminal(ctx, sb.ID, sb.Token, client.TerminalOptions{
		Cmd: []string{"sh", "-c", "stty raw -echo; echo " + ptyReady + "; exec cat"}})
	if err != nil {
		return failedResult("pty_echo", unitMs, err)
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	buf := make([]byte, 4096)
	if err := readUntil(s, buf, []byte(ptyReady+"\n")); err != nil {
		return failedResult("pty_echo", unitMs, err)
	}
	key := []byte{'x'}
	once := func() (time.Duration, error) {
		t0 := time.Now()
		if _, err := s.Write(key); err != nil {
			return 0, err
		}
		err := readUntil(s, buf, key)
		return time.Since(t0), err
	}
	lat, err := b.sample("pty_echo", 10, b.o.PTYEchoes, once)
	if err != nil {
		return failedResult("pty_echo", unitMs, err)
	}
	r := latencyResult("pty_echo", lat)
	ping := func() (time.Duration, error) {
		t0 := time.Now()
		_, err := b.cl.Ping(ctx, sb.ID, sb.Token)
		return time.Since(t0), err
	}
	if pl, err := b.sample("ping", 3, b.o.PTYEchoes, ping); err == nil {
		p := latencyResult("ping", pl)
		r.Baseline = &baseline{Name: "ping (API round trip to the agent)", P50: p.P50, P99: p.P99, N: p.N}
	} else {
		b.logf("no ping baseline: %v", err)
	}
	return r
}

// readUntil reads from r until what it read ends with want.
func readUntil(r interface{ Read([]byte) (int, error) }, buf, want []byte) error {
	var got []byte
	for !bytes.HasSuffix(got, want) {
		n, err := r.Read(buf)
		if err != nil {
			return fmt.Errorf("read the terminal: %w (read %q)", err, got)
		}
		got = append(got, buf[:n]...)
		if len(got) > 1<<16 {
			return fmt.Errorf("no %q in %d bytes of the terminal's output", want, len(got))
		}
	}
	return nil
}
