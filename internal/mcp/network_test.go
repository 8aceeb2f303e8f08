package mcp

import (
	"slices"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestNetworkTools(t *testing.T) {
	f := newFake()
	_, cs := connect(t, f)

	sb := decode[Sandbox](t, call(t, cs, "create_sandbox", map[string]any{"network": map[string]any{"presets": []string{"pypi"}, "allow_domains": []string{"example.org"}}}, false))
	if !slices.Equal(sb.Network.Presets, []string{"pypi"}) || !slices.Equal(sb.Network.AllowDomains, []string{"example.org"}) {
		t.Errorf("create_sandbox with a network: %+v", sb.Network)
	}
	plain := decode[Sandbox](t, call(t, cs, "create_sandbox", map[string]any{}, false))
	if !plain.Network.api().IsZero() {
		t.Errorf("create_sandbox without one: %+v", plain.Network)
	}
	spawned := decode[sandboxesOut](t, call(t, cs, "spawn_sandboxes", map[string]any{"snapshot_tag": "base", "n": 2, "network": map[string]any{"allow_cidrs": []string{"192.0.2.0/24"}}}, false))
	for _, c := range spawned.Sandboxes {
		if !slices.Equal(c.Network.AllowCIDRs, []string{"192.0.2.0/24"}) {
			t.Errorf("spawn_sandboxes with a network: %+v", c.Network)
		}
	}
	br := decode[branchOut](t, call(t, cs, "branch_sandbox", map[string]any{"sandbox_id": sb.ID}, false))
	if len(br.Children) != 1 || !slices.Equal(br.Children[0].Network.Presets, []string{"pypi"}) {
		t.Errorf("a branch's children: %+v", br.Children)
	}

	// set_network replaces the policy; a bad one is a tool error that says
	// what to fix, and changes nothing.
	got := decode[Sandbox](t, call(t, cs, "set_network", map[string]any{"sandbox_id": sb.ID, "deny_domains": []string{"evil.example"}}, false))
	if !slices.Equal(got.Network.DenyDomains, []string{"evil.example"}) || len(got.Network.Presets) != 0 || got.Token != "" {
		t.Errorf("set_network: %+v", got)
	}
	res := call(t, cs, "set_network", map[string]any{"sandbox_id": sb.ID, "allow_cidrs": []string{"bad"}}, true)
	if msg := text(res); !strings.Contains(msg, "invalid network policy") || !strings.Contains(msg, "Fix the arguments") {
		t.Errorf("set_network with a bad CIDR: %s", msg)
	}
	call(t, cs, "set_network", map[string]any{"sandbox_id": sb.ID}, false)
	if got := decode[Sandbox](t, call(t, cs, "get_sandbox", map[string]any{"sandbox_id": sb.ID}, false)); !got.Network.api().IsZero() {
		t.Errorf("set_network with nothing: %+v, want deny-all", got.Network)
	}

	// expose_port: a URL and its token, and get_sandbox lists the port.
	ex := decode[exposeOut](t, call(t, cs, "expose_port", map[string]any{"sandbox_id": sb.ID, "port": 8000}, false))
	if ex.URL != "http://8000-"+sb.ID+".localhost:8080" || ex.Token == "" || ex.BrowserURL != ex.URL+"/?token="+ex.Token {
		t.Errorf("expose_port: %+v", ex)
	}
	pub := decode[exposeOut](t, call(t, cs, "expose_port", map[string]any{"sandbox_id": sb.ID, "port": 3000, "public": true}, false))
	if !pub.Public || pub.Token != "" || pub.BrowserURL != pub.URL {
		t.Errorf("expose_port public: %+v", pub)
	}
	res = call(t, cs, "get_sandbox", map[string]any{"sandbox_id": sb.ID}, false)
	if got := decode[Sandbox](t, res); len(got.Ports) != 2 || got.Ports[0].URL != ex.URL || strings.Contains(text(res), ex.Token) {
		t.Errorf("get_sandbox after expose_port: %s", text(res))
	}
}

func TestServiceInfoNetwork(t *testing.T) {
	f := newFake()
	_, cs := connect(t, f)
	out := decode[serviceInfoOut](t, call(t, cs, "get_service_info", nil, false))
	if !strings.HasPrefix(out.Network, "none") {
		t.Errorf("without a network: %q", out.Network)
	}
	f.network = apitype.NetworkInfo{Enabled: true, Presets: []string{"npm", "pypi"}, PreviewDomain: "preview.example.org"}
	out = decode[serviceInfoOut](t, call(t, cs, "get_service_info", nil, false))
	if !strings.Contains(out.Network, "set_network") || !strings.Contains(out.Network, "PORT-ID.preview.example.org") ||
		!slices.Equal(out.NetworkPresets, []string{"npm", "pypi"}) || strings.Contains(out.Network, "no network") {
		t.Errorf("with one: %+v", out)
	}
}
