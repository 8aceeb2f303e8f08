package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TemplateBuild is what BuildTemplate sends: the options and the build
// context, a tar stream holding the Dockerfile at Dockerfile ("":
// "Dockerfile").
type TemplateBuild struct {
	Name       string
	Dockerfile string
	BuildArgs  map[string]string
	Start      string
	Ready      string
	CPUs       int
	MemoryMiB  int
	DiskMiB    int
	PoolSize   *int // nil: the daemon's default
	Network    *apitype.NetworkPolicy
	Context    io.Reader
}

func (b TemplateBuild) query() (url.Values, error) {
	q := url.Values{"name": {b.Name}}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("dockerfile", b.Dockerfile)
	set("start", b.Start)
	set("ready", b.Ready)
	for k, v := range b.BuildArgs {
		q.Add("build_arg", k+"="+v)
	}
	for k, v := range map[string]int{"cpus": b.CPUs, "memory_mib": b.MemoryMiB, "disk_mib": b.DiskMiB} {
		if v != 0 {
			q.Set(k, strconv.Itoa(v))
		}
	}
	if b.PoolSize != nil {
		q.Set("pool_size", strconv.Itoa(*b.PoolSize))
	}
	if b.Network != nil {
		j, err := json.Marshal(b.Network)
		if err != nil {
			return nil, fmt.Errorf("cove: encode the network policy: %w", err)
		}
		q.Set("network", string(j))
	}
	return q, nil
}

// BuildTemplate builds a template, calling progress (which may be nil)
// with each event of the build as it comes: steps starting, RUN output.
// The context is sent once: a build is not retried.
func (c *Client) BuildTemplate(ctx context.Context, b TemplateBuild, progress func(apitype.TemplateBuildEvent)) (apitype.TemplateInfo, error) {
	q, err := b.query()
	if err != nil {
		return apitype.TemplateInfo{}, err
	}
	req, err := c.newRequest(ctx, http.MethodPost, "/v1/templates", q, "")
	if err != nil {
		return apitype.TemplateInfo{}, err
	}
	if b.Context != nil {
		req.Body = io.NopCloser(b.Context)
	}
	req.Header.Set("Content-Type", "application/x-tar")
	req.Header.Set("Accept", apitype.ContentTypeNDJSON+", application/json")
	return readResult(c, req, "template build", func(ev apitype.TemplateBuildEvent) (*apitype.TemplateInfo, error) {
		if ev.Error != nil {
			return nil, streamError(*ev.Error)
		}
		if ev.Template == nil && progress != nil {
			progress(ev)
		}
		return ev.Template, nil
	})
}

// ListTemplates lists the templates.
func (c *Client) ListTemplates(ctx context.Context) ([]apitype.TemplateInfo, error) {
	var out []apitype.TemplateInfo
	err := c.call(ctx, 0, http.MethodGet, "/v1/templates", nil, "", nil, &out)
	return out, err
}

// GetTemplate describes one template.
func (c *Client) GetTemplate(ctx context.Context, name string) (apitype.TemplateInfo, error) {
	var out apitype.TemplateInfo
	err := c.call(ctx, 0, http.MethodGet, "/v1/templates/"+url.PathEscape(name), nil, "", nil, &out)
	return out, err
}

// DeleteTemplate deletes a template with its step caches; the daemon
// refuses with a conflict while sandboxes spawned from it run.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	return c.call(ctx, 0, http.MethodDelete, "/v1/templates/"+url.PathEscape(name), nil, "", nil, nil)
}
