package mcp

import (
	"context"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func (f *fakeAPI) ListTemplates(ctx context.Context) ([]apitype.TemplateInfo, error) {
	return []apitype.TemplateInfo{{Name: "tools", Base: "cove:default", Digest: "sha256:ab", Steps: []apitype.TemplateStep{{Line: 1, Text: "FROM cove:default"}}}}, nil
}

func TestListTemplates(t *testing.T) {
	_, cs := connect(t, newFake())
	out := decode[listTemplatesOut](t, call(t, cs, "list_templates", map[string]any{}, false))
	if len(out.Templates) != 1 || out.Templates[0].Name != "tools" || len(out.Templates[0].Steps) != 1 {
		t.Fatalf("templates: %+v", out)
	}
}
