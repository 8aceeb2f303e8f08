package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/internal/mcp"
	"github.com/cove-sandbox/cove/pkg/client"
)

func newMCPCmd(cfg *clientConfig) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve cove's tools to an MCP client over stdio",
		Long: `Serve cove's tools to one MCP client (Claude Code, Cursor, Cline, ...) over
standard input and output. It is configured like the reference servers,
by environment: COVE_URL, COVE_API_KEY (COVE_TOKEN also works; else the
daemon's API key file) and COVE_HTTP_TIMEOUT, the seconds a call to the
daemon may take (default 60). See docs/MCP.md.`,
		Example:           `  claude mcp add cove -e COVE_URL=http://127.0.0.1:8080 -e COVE_API_KEY=KEY -- cove mcp`,
		Args:              nArgs(0, 0, "takes no arguments: configure it with COVE_URL and COVE_API_KEY"),
		ValidArgsFunction: completeNothing,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runMCP(cmd.Context(), cfg)
		},
	}
}

// runMCP serves cove's tools to one MCP client over stdin and stdout.
func runMCP(ctx context.Context, cfg *clientConfig) error {
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
	key, err := cfg.key()
	if err != nil {
		// Serve anyway: the tools then explain the missing key to the
		// model and the user, which a server that never starts cannot.
		log.Warn("cove mcp: no API key; every tool will fail until COVE_API_KEY is set", "err", err)
	}
	cl := client.New(cfg.baseURL(), key, client.WithTimeout(timeout), client.WithUserAgent("cove-mcp/"+version))
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
