package mcp

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func (s *Server) pingSandbox(ctx context.Context, req *sdk.CallToolRequest, in DataRef) (*sdk.CallToolResult, apitype.PingResponse, error) {
	token, err := s.token(req, in)
	if err != nil {
		return nil, apitype.PingResponse{}, err
	}
	res, err := s.apiOf(ctx).Ping(ctx, in.SandboxID, token)
	if err != nil {
		return nil, apitype.PingResponse{}, s.explain(ctx, err, in.SandboxID)
	}
	return nil, res, nil
}

type usageOut struct {
	SandboxesAlive     int       `json:"sandboxes_alive" jsonschema:"sandboxes alive on the daemon, from every client"`
	MaxSandboxes       int       `json:"max_sandboxes"`
	RemainingSandboxes int       `json:"remaining_sandboxes" jsonschema:"how many more can be created now"`
	Limits             Limits    `json:"limits"`
	SessionSandboxes   []Sandbox `json:"session_sandboxes" jsonschema:"the live sandboxes whose tokens this session holds"`
	// Metered is absent from a daemon that meters no usage.
	Metered *apitype.Usage `json:"metered,omitempty" jsonschema:"the tenant's metered use in the range (sandbox_seconds, vcpu_seconds, gib_seconds, bytes_in, bytes_out, execs) in total, by template and by sandbox, with its quota, in_use and remaining, as GET /v1/usage answers"`
}

type usageIn struct {
	From   string `json:"from,omitempty" jsonschema:"start of the range, RFC 3339 or unix seconds; default the start of this UTC month"`
	To     string `json:"to,omitempty" jsonschema:"end of the range, RFC 3339 or unix seconds; default now"`
	Tenant string `json:"tenant,omitempty" jsonschema:"another tenant's usage (admin keys only); default the caller's"`
}

// Limits are the daemon's bounds on one request.
type Limits = apitype.Limits

func (s *Server) getUsage(ctx context.Context, req *sdk.CallToolRequest, in usageIn) (*sdk.CallToolResult, usageOut, error) {
	info, err := s.apiOf(ctx).Info(ctx)
	if err != nil {
		return nil, usageOut{}, s.explain(ctx, err, "")
	}
	list, err := s.apiOf(ctx).ListSandboxes(ctx)
	if err != nil {
		return nil, usageOut{}, s.explain(ctx, err, "")
	}
	st, now := s.session(req), time.Now()
	out := usageOut{
		SandboxesAlive: len(list), MaxSandboxes: info.Limits.MaxSandboxes, Limits: info.Limits,
		RemainingSandboxes: max(0, info.Limits.MaxSandboxes-len(list)),
		SessionSandboxes:   []Sandbox{},
	}
	for _, sb := range list {
		if st.hasToken(sb.ID) {
			sb.Token = ""
			out.SessionSandboxes = append(out.SessionSandboxes, toSandbox(sb, st, now))
		}
	}
	sort.Slice(out.SessionSandboxes, func(i, j int) bool {
		return out.SessionSandboxes[i].CreatedAtUnix < out.SessionSandboxes[j].CreatedAtUnix
	})
	u, err := s.apiOf(ctx).Usage(ctx, client.UsageQuery{From: in.From, To: in.To, Tenant: in.Tenant})
	switch {
	case err == nil:
		// Never null: the output schema says arrays.
		if u.ByTemplate == nil {
			u.ByTemplate = []apitype.TemplateUsage{}
		}
		if u.BySandbox == nil {
			u.BySandbox = []apitype.SandboxUsage{}
		}
		out.Metered = &u
	case errors.Is(err, client.ErrNotFound) && in.Tenant == "": // a daemon that meters nothing
	default:
		return nil, usageOut{}, s.explain(ctx, err, "")
	}
	return nil, out, nil
}

type serviceInfoOut struct {
	Version       string `json:"version" jsonschema:"the cove daemon's version"`
	MCPVersion    string `json:"mcp_server_version" jsonschema:"this MCP server's version"`
	URL           string `json:"url" jsonschema:"the daemon this MCP server talks to"`
	Backend       string `json:"backend" jsonschema:"the isolation backend, such as gvisor"`
	BackendReason string `json:"backend_reason"`
	RuntimeVer    string `json:"runtime_version"`
	DefaultImage  string `json:"default_image"`
	Network       string `json:"network" jsonschema:"what sandboxes may reach, and how to open it"`
	// NetworkPresets are the named policies a network policy may add.
	NetworkPresets []string `json:"network_presets,omitempty" jsonschema:"the daemon's named policies (presets in a network policy), such as pypi"`
	Limits         Limits   `json:"limits"`
}

func (s *Server) getServiceInfo(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, serviceInfoOut, error) {
	info, err := s.apiOf(ctx).Info(ctx)
	if err != nil {
		return nil, serviceInfoOut{}, s.explain(ctx, err, "")
	}
	ver := info.Version
	if v, err := s.apiOf(ctx).Version(ctx); err == nil && v.Version != "" {
		ver = v.Version
	}
	return nil, serviceInfoOut{
		Version: ver, MCPVersion: s.cfg.Version, URL: s.api.BaseURL(),
		Backend: info.Backend, BackendReason: info.BackendReason, RuntimeVer: info.RuntimeVer,
		DefaultImage: info.DefaultImage, Limits: info.Limits,
		Network: networkSummary(info.Network), NetworkPresets: info.Network.Presets,
	}, nil
}

// networkSummary says what sandboxes may reach, for a model.
func networkSummary(n apitype.NetworkInfo) string {
	if !n.Enabled {
		return "none: this daemon runs sandboxes without a network, so nothing can be downloaded in them and expose_port does not work"
	}
	s := "egress denied by default: a sandbox reaches only what its network policy allows (create_sandbox's or spawn_sandboxes' network, " +
		"or set_network on a running one: allow_domains, allow_cidrs, presets)"
	if n.PreviewDomain != "" {
		s += fmt.Sprintf("; expose_port serves a port at http://PORT-ID.%s", n.PreviewDomain)
	}
	return s
}
