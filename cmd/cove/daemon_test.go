package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/client"
)

func TestBaseURL(t *testing.T) {
	tests := []struct{ flag, env, want string }{
		{"", "", defaultURL},
		{"", "http://h:1/", "http://h:1"},
		{"h:2", "http://h:1", "http://h:2"},
		{"https://h/cove/", "", "https://h/cove"},
	}
	for _, tt := range tests {
		t.Setenv("COVE_URL", tt.env)
		c := &clientConfig{url: tt.flag}
		if got := c.baseURL(); got != tt.want {
			t.Errorf("flag %q env %q: %q, want %q", tt.flag, tt.env, got, tt.want)
		}
	}
}

func TestKey(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	os.WriteFile(file, []byte("from-file\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	tests := []struct {
		name, flag, env, oldEnv, file string
		want                          string
		wantErr                       string
	}{
		{"flag wins", "from-flag", "from-env", "from-old-env", file, "from-flag", ""},
		{"COVE_API_KEY next", "", "from-env", "from-old-env", file, "from-env", ""},
		{"COVE_TOKEN next", "", "", "from-old-env", file, "from-old-env", ""},
		{"blank env is unset", "", "  ", "", file, "from-file", ""},
		{"file last", "", "", "", file, "from-file", ""},
		{"no file", "", "", "", filepath.Join(dir, "missing"), "", "make up"},
		{"empty file", "", "", "", empty, "", "is empty"},
		{"no file flag", "", "", "", "", "", "COVE_API_KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("COVE_API_KEY", tt.env)
			t.Setenv("COVE_TOKEN", tt.oldEnv)
			c := &clientConfig{apiKey: tt.flag, apiKeyFile: tt.file}
			got, err := c.key()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("key() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestKeyFlags: the key's flags and environment as the verbs see them,
// through cobra, including the old --token-file spelling.
func TestKeyFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	os.WriteFile(file, []byte("from-file\n"), 0o600)
	tests := []struct {
		name     string
		args     []string
		env, old string
		want     string
	}{
		{"--api-key", []string{"--api-key", "from-flag", "--api-key-file", file}, "from-env", "from-old-env", "from-flag"},
		{"COVE_API_KEY", []string{"--api-key-file", file}, "from-env", "from-old-env", "from-env"},
		{"COVE_TOKEN", []string{"--api-key-file", file}, "", "from-old-env", "from-old-env"},
		{"--api-key-file", []string{"--api-key-file", file}, "", "", "from-file"},
		{"--token-file", []string{"--token-file", file}, "", "", "from-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("COVE_API_KEY", tt.env)
			t.Setenv("COVE_TOKEN", tt.old)
			var got string
			root := newRootCmd()
			probe := &cobra.Command{Use: "probe", RunE: func(cmd *cobra.Command, _ []string) error {
				cfg := &clientConfig{}
				cfg.apiKey, _ = cmd.Flags().GetString("api-key")
				cfg.apiKeyFile, _ = cmd.Flags().GetString("api-key-file")
				var err error
				got, err = cfg.key()
				return err
			}}
			root.AddCommand(probe)
			root.SetArgs(append([]string{"probe"}, tt.args...))
			root.SetOut(io.Discard) // the deprecation warning
			root.SetErr(io.Discard)
			if err := root.Execute(); err != nil || got != tt.want {
				t.Errorf("key = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestExplain(t *testing.T) {
	if err := explain(nil, "u"); err != nil {
		t.Errorf("explain(nil) = %v", err)
	}
	plain := errors.New("x")
	if err := explain(plain, "u"); err != plain {
		t.Errorf("explain changed an error it has no hint for: %v", err)
	}
}

func TestExplainDeadSandbox(t *testing.T) {
	// A dead sandbox's 410 says it died, not that the daemon is busy.
	err := explain(&client.Error{Status: 410, Code: "gone", Message: "sandbox s1 is dead (exited, 3s ago)"}, "u")
	if msg := err.Error(); !strings.Contains(msg, "sandbox died") || strings.Contains(msg, "busy") {
		t.Errorf("explain(410) = %q", msg)
	}
}
