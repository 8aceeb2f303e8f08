package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// addLabelFlag adds a repeatable --label K=V to fs, collected in labels.
func addLabelFlag(fs *pflag.FlagSet, labels map[string]string, usage string) {
	fs.Func("label", usage+", `K=V`; repeatable", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("want K=V, got %q", s)
		}
		labels[k] = v
		return nil
	})
}

// fmtLabels is labels as k=v,k=v in key order, "-" for none.
func fmtLabels(labels map[string]string) string {
	if len(labels) == 0 {
		return "-"
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + labels[k])
	}
	return b.String()
}
