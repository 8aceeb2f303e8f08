package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// UsageQuery selects GET /v1/usage's range and tenant. From and To are
// RFC 3339 or unix seconds ("": the start of the UTC month, now); Tenant
// ("": the caller's) takes an admin key for another tenant.
type UsageQuery struct {
	From, To, Tenant string
}

// Usage returns a tenant's metered usage over a range, with its quota.
func (c *Client) Usage(ctx context.Context, q UsageQuery) (apitype.Usage, error) {
	v := url.Values{}
	for k, s := range map[string]string{"from": q.From, "to": q.To, "tenant": q.Tenant} {
		if s != "" {
			v.Set(k, s)
		}
	}
	var out apitype.Usage
	err := c.call(ctx, 0, http.MethodGet, "/v1/usage", v, "", nil, &out)
	return out, err
}
