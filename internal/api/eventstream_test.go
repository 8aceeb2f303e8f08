package api

import (
	"net/http/httptest"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func TestEventStream(t *testing.T) {
	tests := []struct {
		accept, wantType, wantBody string
		stream                     bool
	}{
		{"", apitype.ContentTypeNDJSON, "{\"stream\":\"stdout\",\"data\":\"hi\"}\n", false},
		{"application/x-ndjson, application/json", apitype.ContentTypeNDJSON, "{\"stream\":\"stdout\",\"data\":\"hi\"}\n", true},
		{"text/event-stream", apitype.ContentTypeSSE, "data: {\"stream\":\"stdout\",\"data\":\"hi\"}\n\n", true},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Accept", tt.accept)
		w := httptest.NewRecorder()
		if got := wantsStream(r); got != tt.stream {
			t.Errorf("Accept %q: wantsStream %v, want %v", tt.accept, got, tt.stream)
		}
		if err := newEventStream(w, r).send(apitype.OutputEvent{Stream: "stdout", Data: "hi"}); err != nil {
			t.Fatal(err)
		}
		if ct := w.Header().Get("Content-Type"); ct != tt.wantType || w.Body.String() != tt.wantBody {
			t.Errorf("Accept %q: %s %q, want %s %q", tt.accept, ct, w.Body.String(), tt.wantType, tt.wantBody)
		}
	}
}
