package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/cove-sandbox/cove/internal/mcp"
	"github.com/cove-sandbox/cove/pkg/client"
)

// runMCP serves cove's tools to one MCP client over stdin and stdout. It is
// configured like the reference servers, by environment: COVE_URL,
// COVE_TOKEN (else the daemon's token file) and COVE_HTTP_TIMEOUT.
func runMCP(ctx context.Context, args []string) error {
	fs, c := newFlagSet("mcp", "mcp [flags]   (stdio MCP server; configure with COVE_URL, COVE_TOKEN, COVE_HTTP_TIMEOUT)")
	pos, err := parseArgs(fs, args, 0)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("takes no arguments, got %q: configure it with COVE_URL and COVE_TOKEN", pos)
	}
	// stdout carries the protocol: everything else goes to stderr, which
	// MCP clients show in their logs.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	timeout := 60 * time.Second
	if v := os.Getenv("COVE_HTTP_TIMEOUT"); v != "" {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil || secs <= 0 {
			return fmt.Errorf("COVE_HTTP_TIMEOUT=%q: want a positive number of seconds", v)
		}
		timeout = time.Duration(secs * float64(time.Second))
	}
	key, err := c.key()
	if err != nil {
		// Serve anyway: the tools then explain the missing key to the
		// model and the user, which a server that never starts cannot.
		log.Warn("cove mcp: no API key; every tool will fail until COVE_TOKEN is set", "err", err)
	}
	cl := client.New(c.baseURL(), key, client.WithTimeout(timeout), client.WithUserAgent("cove-mcp/"+version))
	srv := mcp.New(mcp.Config{API: cl, Version: version, Logger: log})
	return srv.RunStdio(ctx)
}

// loopbackURL is the URL at which the daemon reaches its own listener: a
// wildcard address (":8080") is reached on 127.0.0.1.
func loopbackURL(addr net.Addr) string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String()
	}
	ip := ta.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(ta.Port))
}
