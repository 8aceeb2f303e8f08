package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/cove-sandbox/cove/internal/preview"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// SetNetwork replaces sandbox id's egress policy, at once for its new
// connections and lookups. The zero policy denies everything.
func (c *Client) SetNetwork(ctx context.Context, id string, p apitype.NetworkPolicy) (apitype.SandboxInfo, error) {
	var out apitype.SandboxInfo
	err := c.call(ctx, 0, http.MethodPut, sandboxPath(id, "/network"), nil, "", p, &out)
	return out, err
}

// ExposePort makes port in the sandbox reachable at the daemon's preview
// URLs, behind the token the answer carries unless public. Exposing a port
// again changes nothing and answers the same token.
func (c *Client) ExposePort(ctx context.Context, id, sandboxToken string, port int, public bool) (apitype.PortInfo, error) {
	var out apitype.PortInfo
	err := c.call(ctx, 0, http.MethodPost, sandboxPath(id, "/ports"), nil, sandboxToken,
		apitype.ExposePortRequest{Port: port, Public: public}, &out)
	return out, err
}

// ListPorts returns the sandbox's exposed ports, with their tokens.
func (c *Client) ListPorts(ctx context.Context, id, sandboxToken string) ([]apitype.PortInfo, error) {
	var out apitype.PortsResponse
	err := c.call(ctx, 0, http.MethodGet, sandboxPath(id, "/ports"), nil, sandboxToken, nil, &out)
	return out.Ports, err
}

// UnexposePort stops serving port's preview URLs.
func (c *Client) UnexposePort(ctx context.Context, id, sandboxToken string, port int) error {
	return c.call(ctx, 0, http.MethodDelete, portPath(id, port, ""), nil, sandboxToken, nil, nil)
}

// URLWithToken is preview URL u carrying token as ?token=, for a browser,
// which trades it for a cookie; u itself for no token.
func URLWithToken(u, token string) string {
	if token == "" {
		return u
	}
	pu, err := url.Parse(u)
	if err != nil {
		return u
	}
	if pu.Path == "" {
		pu.Path = "/"
	}
	q := pu.Query()
	q.Set("token", token)
	pu.RawQuery = q.Encode()
	return pu.String()
}

func portPath(id string, port int, suffix string) string {
	return sandboxPath(id, "/ports/"+strconv.Itoa(port)+suffix)
}

// DialPort opens a TCP connection to port in the sandbox, tunnelled
// through the daemon; the port need not be exposed. Only ctx bounds the
// dial; the connection is the caller's to close.
func (c *Client) DialPort(ctx context.Context, id, sandboxToken string, port int) (net.Conn, error) {
	req, err := c.newRequest(ctx, http.MethodGet, portPath(id, port, "/connect"), nil, sandboxToken)
	if err != nil {
		return nil, err
	}
	conn, err := preview.DialTunnel(ctx, req.URL.String(), req.Header)
	if ue, ok := errors.AsType[*preview.UpgradeError](err); ok {
		return nil, errorFrom(ue.Response)
	}
	return conn, err
}

// PortForward serves l until ctx ends: each connection accepted is
// tunnelled to port in the sandbox. A connection whose tunnel fails is
// closed, and the error given to onError (if not nil), which may be called
// from several goroutines at once. It returns when ctx ends, after closing
// l and every connection, or with the error of an Accept that failed.
func (c *Client) PortForward(ctx context.Context, l net.Listener, id, sandboxToken string, port int, onError func(error)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	for {
		local, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer local.Close()
			remote, err := c.DialPort(ctx, id, sandboxToken, port)
			if err != nil {
				if onError != nil && ctx.Err() == nil {
					onError(err)
				}
				return
			}
			defer remote.Close()
			stop := context.AfterFunc(ctx, func() {
				local.Close()
				remote.Close()
			})
			defer stop()
			splice(local, remote)
		}()
	}
}

// splice copies between a and b both ways until both directions end. An
// end of one direction is passed on as a half-close where the connection
// has one, else by closing it.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			if cw.CloseWrite() == nil {
				return
			}
		}
		dst.Close()
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}
