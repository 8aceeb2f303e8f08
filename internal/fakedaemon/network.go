package fakedaemon

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/cove-sandbox/cove/internal/preview"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// setNetwork replaces a sandbox's policy; a CIDR "bad" is refused, as an
// invalid one is.
func (f *Daemon) setNetwork(sb *sandbox, r *http.Request) (int, any) {
	var p apitype.NetworkPolicy
	decode(r, &p)
	if slices.Contains(p.AllowCIDRs, "bad") || slices.Contains(p.DenyCIDRs, "bad") {
		return fail(400, apitype.CodeBadRequest, `invalid network policy: "bad" is not a CIDR`)
	}
	sb.info.Network = p
	return 200, sb.public()
}

// portInfo is port p of sandbox id, as the daemon at localhost:8080 with
// no HTTPS previews would serve it.
func portInfo(id string, p int, public bool) apitype.PortInfo {
	return apitype.PortInfo{Port: p, Public: public, URL: fmt.Sprintf("http://%d-%s.localhost:8080", p, id), Token: fmt.Sprintf("pt-%s-%d", id, p)}
}

func (f *Daemon) exposePort(sb *sandbox, r *http.Request) (int, any) {
	var req apitype.ExposePortRequest
	decode(r, &req)
	if req.Port < 1 || req.Port > 65535 {
		return fail(400, apitype.CodeBadRequest, "invalid request: bad port")
	}
	p := portInfo(sb.info.ID, req.Port, req.Public)
	sb.ports[req.Port] = p
	return 201, p
}

func (f *Daemon) listPorts(sb *sandbox, _ *http.Request) (int, any) {
	out := apitype.PortsResponse{Ports: []apitype.PortInfo{}}
	for _, p := range slices.Sorted(maps.Keys(sb.ports)) {
		out.Ports = append(out.Ports, sb.ports[p])
	}
	return 200, out
}

func (f *Daemon) unexposePort(sb *sandbox, r *http.Request) (int, any) {
	p, _ := strconv.Atoi(r.PathValue("port"))
	if _, ok := sb.ports[p]; !ok {
		return fail(404, apitype.CodeNotFound, "port not exposed")
	}
	delete(sb.ports, p)
	return 204, nil
}

// connect tunnels to an echo server that answers every port but 9, where
// nothing listens.
func (f *Daemon) connect(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	sb := f.sandboxes[r.PathValue("id")]
	f.mu.Unlock()
	fail := func(status int, code, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":%q,"code":%q}`, msg, code)
	}
	switch {
	case sb == nil:
		fail(404, apitype.CodeNotFound, "no sandbox")
		return
	case r.Header.Get(apitype.SandboxTokenHeader) != sb.info.Token:
		fail(403, apitype.CodeForbidden, "wrong token")
		return
	case !strings.EqualFold(r.Header.Get("Upgrade"), "cove-tcp"):
		fail(400, apitype.CodeBadRequest, "not a tunnel")
		return
	case r.PathValue("port") == "9":
		fail(502, apitype.CodeBadGateway, "nothing answers on port 9")
		return
	}
	guest, daemon := net.Pipe()
	go func() {
		defer guest.Close()
		io.Copy(guest, guest)
	}()
	preview.Tunnel(w, r, daemon)
}
