package netpolicy

import (
	"net"
	"testing"
)

// TestProxyBound: past maxConns open connections, a new one is refused,
// and once one closes there is room again.
func TestProxyBound(t *testing.T) {
	p := &proxy{conns: map[*net.TCPConn]*net.TCPConn{}}
	conns := make([]*net.TCPConn, maxConns+1)
	for i := range conns {
		conns[i] = &net.TCPConn{}
	}
	for _, c := range conns[:maxConns] {
		if !p.track(c) {
			t.Fatal("refused below the bound")
		}
	}
	if p.track(conns[maxConns]) {
		t.Fatal("tracked past the bound")
	}
	p.untrack(conns[0])
	if !p.track(conns[maxConns]) {
		t.Fatal("refused after a connection closed")
	}
	p.done = true
	p.untrack(conns[1])
	if p.track(conns[1]) || p.joined(conns[2], conns[1]) {
		t.Fatal("tracked after close")
	}
}
