package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/internal/netpolicy"
	"github.com/cove-sandbox/cove/internal/preview"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// dialTimeout bounds the dial of a sandbox's port for a tunnel: a port
// nothing listens on is refused at once, one that drops packets is not.
const dialTimeout = 2 * time.Second

// tunnelProtocol is the Upgrade a tunnel request asks for.
const tunnelProtocol = "cove-tcp"

// policy is the service's form of an API policy; nil stays nil (the
// service's default).
func policy(p *apitype.NetworkPolicy) *netpolicy.Policy {
	if p == nil {
		return nil
	}
	np := netpolicy.Policy(*p)
	return &np
}

func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) {
	var req apitype.NetworkPolicy
	if err := decode(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	info, err := s.svc.SetNetwork(r.Context(), r.PathValue("id"), netpolicy.Policy(req))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.sandboxInfo(info))
}

// portInfo is an exposed port as the API shows it, with its preview URLs.
func (s *Server) portInfo(id string, p sandbox.PortInfo) apitype.PortInfo {
	out := apitype.PortInfo{Port: p.Port, Public: p.Public, Token: p.Token}
	if pr := s.cfg.Preview; pr != nil {
		scheme := s.cfg.PreviewScheme
		if scheme == "" {
			scheme = "http"
		}
		out.URL = pr.URL(scheme, s.cfg.PreviewPort, id, p.Port)
		if s.cfg.PreviewHTTPSPort != 0 {
			out.HTTPSURL = pr.URL("https", s.cfg.PreviewHTTPSPort, id, p.Port)
		}
	}
	return out
}

// checkPort refuses a port outside 1-65535.
func checkPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("%w: port %d: want a TCP port from 1 to 65535", sandbox.ErrInvalid, port)
	}
	return nil
}

// pathPort is the {port} of the request's path.
func pathPort(r *http.Request) (int, error) {
	v := r.PathValue("port")
	port, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%w: port %.20q: want a TCP port from 1 to 65535", sandbox.ErrInvalid, v)
	}
	return port, checkPort(port)
}

func (s *Server) exposePort(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	var req apitype.ExposePortRequest
	if err := decode(w, r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := checkPort(req.Port); err != nil {
		s.fail(w, r, err)
		return
	}
	p, err := sb.ExposePort(r.Context(), req.Port, req.Public)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.portInfo(sb.ID(), p))
}

func (s *Server) listPorts(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	info, err := s.svc.Get(r.Context(), sb.ID())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apitype.PortsResponse{Ports: make([]apitype.PortInfo, len(info.Ports))}
	for i, p := range info.Ports {
		out.Ports[i] = s.portInfo(info.ID, p)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) unexposePort(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	port, err := pathPort(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := sb.UnexposePort(r.Context(), port); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connectPort is a raw TCP tunnel to a port of the sandbox (cove
// port-forward): the request upgrades to cove-tcp, and the connection then
// carries the bytes both ways. The port need not be exposed: the sandbox's
// token is the credential.
func (s *Server) connectPort(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	port, err := pathPort(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", tunnelProtocol) {
		s.fail(w, r, fmt.Errorf("%w: a tunnel takes 'Connection: Upgrade' and 'Upgrade: %s'", sandbox.ErrInvalid, tunnelProtocol))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dialTimeout)
	conn, err := sb.DialPort(ctx, port)
	cancel()
	if err != nil {
		s.failDial(w, r, err, sb.ID(), port)
		return
	}
	defer conn.Close()
	// Hijacked, the tunnel is no longer the server's to end: it ends with
	// the request's context too, which its key's revocation cancels.
	stop := context.AfterFunc(r.Context(), func() { conn.Close() })
	defer stop()
	preview.Tunnel(w, r, conn)
}

// failDial writes the error of a dial of a sandbox's port: one that nothing
// answered is a 502 that says what to start; any other, as fail does.
func (s *Server) failDial(w http.ResponseWriter, r *http.Request, err error, id string, port int) {
	var opErr *net.OpError
	unanswered := errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.As(err, &opErr) || errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil
	if !unanswered {
		s.fail(w, r, err)
		return
	}
	writeError(w, http.StatusBadGateway, apitype.CodeBadGateway, fmt.Sprintf(
		"nothing answers on port %d in sandbox %s (%v): start the server first, in the background and listening on 0.0.0.0:%d", port, id, err, port))
}

// headerHas reports whether header name of h lists token (a comma-separated
// list, compared without case, each element's parameters aside).
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			t, _, _ = strings.Cut(t, ";")
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
