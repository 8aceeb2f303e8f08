package mcp

import (
	"context"
	"fmt"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// Policy is a sandbox's egress policy as the tools take and show it.
// Its fields are apitype.NetworkPolicy's, in its order, so that each
// converts to the other.
type Policy struct {
	AllowCIDRs   []string `json:"allow_cidrs,omitempty" jsonschema:"addresses it may reach, such as 203.0.113.0/24 or 203.0.113.7"`
	DenyCIDRs    []string `json:"deny_cidrs,omitempty" jsonschema:"addresses it may never reach"`
	AllowDomains []string `json:"allow_domains,omitempty" jsonschema:"names the sandbox may reach: example.org, or *.example.org for every name below it"`
	DenyDomains  []string `json:"deny_domains,omitempty" jsonschema:"names it may never reach, whatever else allows them"`
	Presets      []string `json:"presets,omitempty" jsonschema:"the daemon's named policies to add, such as pypi, npm, github, debian, goproxy (get_service_info lists them)"`
}

func (p Policy) api() apitype.NetworkPolicy { return apitype.NetworkPolicy(p) }

// apiPolicy is p for a request; nil stays nil (the daemon's default).
func apiPolicy(p *Policy) *apitype.NetworkPolicy {
	if p == nil {
		return nil
	}
	ap := p.api()
	return &ap
}

// Port is an exposed port as get_sandbox shows it.
type Port struct {
	Port     int    `json:"port"`
	Public   bool   `json:"public" jsonschema:"reachable without the port's token"`
	URL      string `json:"url"`
	HTTPSURL string `json:"https_url,omitempty"`
}

func toPorts(ps []apitype.PortInfo) []Port {
	out := make([]Port, len(ps))
	for i, p := range ps {
		out[i] = Port{Port: p.Port, Public: p.Public, URL: p.URL, HTTPSURL: p.HTTPSURL}
	}
	return out
}

type exposeIn struct {
	DataRef
	Port   int  `json:"port" jsonschema:"the TCP port a server listens on inside the sandbox, on 0.0.0.0"`
	Public bool `json:"public,omitempty" jsonschema:"serve it to anyone who has the URL, without the token; default false"`
}

type exposeOut struct {
	Port       int    `json:"port"`
	Public     bool   `json:"public"`
	URL        string `json:"url" jsonschema:"the preview URL; unless public, send the token in the X-Cove-Preview-Token header"`
	HTTPSURL   string `json:"https_url,omitempty" jsonschema:"the same over HTTPS, if the daemon serves it"`
	Token      string `json:"token,omitempty" jsonschema:"the port's token (none if public)"`
	BrowserURL string `json:"browser_url,omitempty" jsonschema:"url with ?token=, to open in a browser (which then keeps a cookie); give this to the user"`
}

func (s *Server) exposePort(ctx context.Context, req *sdk.CallToolRequest, in exposeIn) (*sdk.CallToolResult, exposeOut, error) {
	if in.Port < 1 || in.Port > 65535 {
		return nil, exposeOut{}, fmt.Errorf("port %d: give the TCP port (1-65535) a server in the sandbox listens on", in.Port)
	}
	token, err := s.token(req, in.DataRef)
	if err != nil {
		return nil, exposeOut{}, err
	}
	p, err := s.apiOf(ctx).ExposePort(ctx, in.SandboxID, token, in.Port, in.Public)
	if err != nil {
		return nil, exposeOut{}, s.explain(ctx, err, in.SandboxID)
	}
	out := exposeOut{Port: p.Port, Public: p.Public, URL: p.URL, HTTPSURL: p.HTTPSURL, Token: p.Token}
	if p.URL == "" {
		return nil, out, fmt.Errorf("port %d is exposed, but this daemon serves no preview URLs; reach it from inside the sandbox (exec_command `curl -s localhost:%d/`)", p.Port, p.Port)
	}
	out.BrowserURL = p.URL
	if !p.Public {
		out.BrowserURL = client.URLWithToken(p.URL, p.Token)
	}
	return nil, out, nil
}

type setNetworkIn struct {
	SandboxRef
	Policy
}

func (s *Server) setNetwork(ctx context.Context, req *sdk.CallToolRequest, in setNetworkIn) (*sdk.CallToolResult, Sandbox, error) {
	info, err := s.apiOf(ctx).SetNetwork(ctx, in.SandboxID, in.Policy.api())
	if err != nil {
		return nil, Sandbox{}, s.explain(ctx, err, in.SandboxID)
	}
	info.Token = ""
	return nil, toSandbox(info, s.session(req), time.Now()), nil
}
