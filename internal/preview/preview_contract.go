package preview

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
)

var ErrNotFound = errors.New("no such exposed port")

type Backend interface {
	// Exposure of port on sandbox id: its token and whether it is public; ErrNotFound-wrapped if the
	// sandbox is unknown, dead, or the port is not exposed.
	Exposure(id string, port int) (token string, public bool, err error)
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
}

type Config struct {
	Domain  string // preview domain; "" means "localhost"
	Backend Backend
	Logger  *slog.Logger
}

type Proxy struct{}

func New(cfg Config) *Proxy { panic("contract") }

// Match reports whether r is a preview request: Host "PORT-ID.<domain>[:p]" or headers
// E2b-Sandbox-Id + E2b-Sandbox-Port.
func (p *Proxy) Match(r *http.Request) (id string, port int, ok bool) { panic("contract") }

// ServeHTTP serves a matched request: auth, proxy (HTTP, streaming, WebSocket).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { panic("contract") }

// URL is a preview URL: "http://8000-ID.localhost:7070".
func (p *Proxy) URL(scheme string, listenPort int, id string, port int) string { panic("contract") }

type CA struct{}

// LoadOrCreateCA loads or creates dir/ca.pem (to trust) and dir/ca-key.pem (0600).
func LoadOrCreateCA(dir string) (*CA, error) { panic("contract") }

func (ca *CA) PEMPath() string { panic("contract") }

// Certificate is for "*.<domain>" and "<domain>".
func (ca *CA) Certificate(domain string) (tls.Certificate, error) { panic("contract") }

// Tunnel hijacks w after answering 101 (Upgrade: cove-tcp) and copies bytes both ways with conn.
func Tunnel(w http.ResponseWriter, r *http.Request, conn net.Conn) { panic("contract") }

// DialTunnel sends req (a GET of a tunnel route, its other headers set) through hc with
// Connection: Upgrade and Upgrade: cove-tcp. On a 101 it returns the raw connection; on any
// other answer, that response (its body for the caller to read and close) and no connection;
// err only when no answer came.
func DialTunnel(ctx context.Context, hc *http.Client, req *http.Request) (net.Conn, *http.Response, error) {
	panic("contract")
}

const TokenHeader = "X-Cove-Preview-Token"
