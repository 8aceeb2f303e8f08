package main

import (
	"net"
	"testing"
)

func TestLoopbackURL(t *testing.T) {
	for _, c := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 9}, "http://127.0.0.1:9"},
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 80}, "http://10.1.2.3:80"},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 80}, "http://[::1]:80"},
	} {
		if got := loopbackURL(c.addr); got != c.want {
			t.Errorf("loopbackURL(%v) = %q, want %q", c.addr, got, c.want)
		}
	}
}
