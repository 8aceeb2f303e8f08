package mcp

import (
	"context"
	"errors"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// templateLister is the part of the API list_templates needs: an API
// without it (an older client) has no templates to list.
type templateLister interface {
	ListTemplates(ctx context.Context) ([]apitype.TemplateInfo, error)
}

// Template is a template as list_templates reports it.
type Template = apitype.TemplateInfo

type listTemplatesOut struct {
	Templates []Template `json:"templates"`
}

func (s *Server) addTemplateTools() {
	add(s, tool("list_templates", "List templates",
		"List the templates built from Dockerfiles (cove template build): name, base image, steps, size, build time and Dockerfile digest. A template is a snapshot of the same name: spawn from it with spawn_sandboxes or create_sandbox (snapshot_tag).",
		readOnly()), s.listTemplates)
}

func (s *Server) listTemplates(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, listTemplatesOut, error) {
	tl, ok := s.api.(templateLister)
	if !ok {
		return nil, listTemplatesOut{}, errors.New("this daemon's API lists no templates")
	}
	list, err := tl.ListTemplates(ctx)
	if err != nil {
		return nil, listTemplatesOut{}, s.explain(ctx, err, "")
	}
	if list == nil {
		list = []Template{}
	}
	return nil, listTemplatesOut{Templates: list}, nil
}
