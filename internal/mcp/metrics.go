package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func (s *Server) addMetricsTools() {
	add(s, tool("get_sandbox_metrics", "Get a sandbox's resource use",
		"Show what a sandbox uses now, from its cgroup on the host: cpu_seconds used, memory_bytes (and peak and limit), disk_written_bytes, disk_bytes of saved state and pids. Call it twice to see a rate.",
		readOnly()), s.getSandboxMetrics)
}

func (s *Server) getSandboxMetrics(ctx context.Context, _ *sdk.CallToolRequest, in SandboxRef) (*sdk.CallToolResult, apitype.SandboxMetrics, error) {
	m, err := s.apiOf(ctx).SandboxMetrics(ctx, in.SandboxID)
	if err != nil {
		return nil, apitype.SandboxMetrics{}, s.explain(ctx, err, in.SandboxID)
	}
	return nil, m, nil
}
