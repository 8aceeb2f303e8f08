package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// WithAPIKey returns a Client like c that authenticates with key instead,
// sharing c's connections.
func (c *Client) WithAPIKey(key string) *Client {
	cc := *c
	cc.apiKey = key
	return &cc
}

// CreateKey makes an API key (an admin key's call). The answer is the only
// place its secret appears.
func (c *Client) CreateKey(ctx context.Context, req apitype.CreateKeyRequest) (apitype.CreateKeyResponse, error) {
	var out apitype.CreateKeyResponse
	err := c.call(ctx, 0, http.MethodPost, "/v1/keys", nil, "", req, &out)
	return out, err
}

// ListKeys lists every API key, revoked ones too, without their secrets.
func (c *Client) ListKeys(ctx context.Context) ([]apitype.KeyInfo, error) {
	var out []apitype.KeyInfo
	err := c.call(ctx, 0, http.MethodGet, "/v1/keys", nil, "", nil, &out)
	return out, err
}

// RevokeKey revokes key id: it stops working at once, and what it has
// open (streams, MCP sessions) ends.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.call(ctx, 0, http.MethodDelete, "/v1/keys/"+url.PathEscape(id), nil, "", nil, nil)
}

// SandboxToken asks for sandbox id's token again: only a key of its tenant
// with reveal_tokens gets it (403 otherwise; 409 if the daemon kept no
// sealed copy).
func (c *Client) SandboxToken(ctx context.Context, id string) (string, error) {
	var out apitype.SandboxTokenResponse
	if err := c.call(ctx, 0, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id)+"/token", nil, "", nil, &out); err != nil {
		return "", err
	}
	return out.Token, nil
}
