package qemu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPanicLine(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, console, want string }{
		{"panic", "[    1.0] booting\n[   12.43] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000009\n[   12.44] CPU: 0 PID: 1\n[   12.45] Kernel Offset: disabled",
			"Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000009"},
		{"no panic", "[    1.0] booting\ncove-agent listening\n", ""},
		{"no console", "", ""},
		{"long backtrace", "Kernel panic - not syncing: oops\n" + strings.Repeat("[   12.4] stack line\n", 200), "Kernel panic - not syncing: oops"},
	} {
		p := filepath.Join(dir, tc.name)
		if tc.console != "" {
			os.WriteFile(p, []byte(tc.console), 0o600)
		}
		if got := panicLine(p); got != tc.want {
			t.Errorf("%s: panicLine = %q, want %q", tc.name, got, tc.want)
		}
	}
}
