package client

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestEachRecord(t *testing.T) {
	tests := []struct {
		ctype, body string
		want        []string
		wantErr     bool
	}{
		{apitype.ContentTypeNDJSON, "{\"a\":1}\n\n{\"b\":2}\n", []string{`{"a":1}`, `{"b":2}`}, false},
		{apitype.ContentTypeSSE, "data: {\"a\":1}\n\n: comment\ndata: {\"b\":2}\n\n", []string{`{"a":1}`, `{"b":2}`}, false},
		{"application/json", "{}", nil, true},
	}
	for _, tt := range tests {
		resp := &http.Response{Header: http.Header{"Content-Type": {tt.ctype}}, Body: io.NopCloser(strings.NewReader(tt.body))}
		var got []string
		err := eachRecord(resp, func(line []byte) error { got = append(got, string(line)); return nil })
		if (err != nil) != tt.wantErr || strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%s: %q, %v; want %q (error %v)", tt.ctype, got, err, tt.want, tt.wantErr)
		}
	}
}
