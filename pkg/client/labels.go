package client

import (
	"context"
	"net/http"
	"net/url"
	"sort"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// ListSandboxesLabeled returns the sandboxes that have every label of
// labels (all of them for none), without sandbox tokens.
func (c *Client) ListSandboxesLabeled(ctx context.Context, labels map[string]string) ([]apitype.SandboxInfo, error) {
	var q url.Values
	if len(labels) > 0 {
		q = url.Values{}
		keys := make([]string, 0, len(labels))
		for k := range labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			q.Add("label", k+"="+labels[k])
		}
	}
	var out []apitype.SandboxInfo
	err := c.call(ctx, 0, http.MethodGet, "/v1/sandboxes", q, "", nil, &out)
	return out, err
}
