package bench

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestE2BRowNeeds: the e2b row fails, naming what is missing, without the
// facade's listeners or without the SDK installed; it never reports a
// number it did not measure.
func TestE2BRowNeeds(t *testing.T) {
	tests := []struct {
		name string
		o    E2BOptions
		want string
	}{
		{"no listeners", E2BOptions{SDK: t.TempDir()}, "--e2b-api and --e2b-envd"},
		{"no envd", E2BOptions{API: "127.0.0.1:1", SDK: t.TempDir()}, "--e2b-api and --e2b-envd"},
		{"no SDK", E2BOptions{API: "127.0.0.1:1", Envd: "127.0.0.1:2", SDK: t.TempDir()}, "make e2b-sdk"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &bencher{o: Options{E2BCreates: 1, E2B: tt.o}, log: io.Discard}
			r := b.benchE2B(context.Background(), apitype.Info{})
			if r.Name != "e2b_sdk_create_run" || !strings.Contains(r.Error, tt.want) || r.N != 0 {
				t.Fatalf("row %+v, want an error naming %q", r, tt.want)
			}
		})
	}
}
