package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

func TestWait(t *testing.T) {
	e := newTestEnv(t)
	appendTo := func(p, s string) {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Error(err)
			return
		}
		f.WriteString(s)
		f.Close()
	}
	tests := []struct {
		name      string
		initial   *string      // nil: the file does not exist at first
		later     func(string) // run 100ms into the wait, given the path
		text      string
		timeoutMs int64
		found     bool
	}{
		{name: "already there", initial: ptr("a\nREADY\n"), text: "READY", found: true},
		{name: "appended later", initial: ptr("starting\n"), later: func(p string) { appendTo(p, "listening on :8080\n") }, text: "listening", found: true},
		{name: "split across writes", initial: ptr("xx lis"), later: func(p string) {
			appendTo(p, "ten")
			time.Sleep(50 * time.Millisecond)
			appendTo(p, "ing")
		}, text: "listening", found: true},
		{name: "created later", later: func(p string) { appendTo(p, "done") }, text: "done", found: true},
		{name: "truncated and rewritten shorter", initial: ptr("a long first line without the marker\n"), later: func(p string) {
			os.WriteFile(p, []byte("ok\n"), 0o644)
		}, text: "ok", found: true},
		{name: "replaced by rename", initial: ptr("old old old old old old\n"), later: func(p string) {
			os.WriteFile(p+".new", []byte("new"), 0o644)
			os.Rename(p+".new", p)
		}, text: "new", found: true},
		{name: "large file, marker at the end", initial: ptr(string(make([]byte, 3<<20)) + "END"), text: "END", found: true},
		{name: "times out", initial: ptr("nothing"), text: "never", timeoutMs: 200},
		{name: "missing file times out", text: "x", timeoutMs: 200},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(e.dir, "log"+string(rune('a'+i)))
			if tt.initial != nil {
				if err := os.WriteFile(p, []byte(*tt.initial), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tt.later != nil {
				go func() {
					time.Sleep(100 * time.Millisecond)
					tt.later(p)
				}()
			}
			timeout := tt.timeoutMs
			if timeout == 0 {
				timeout = 5000
			}
			start := time.Now()
			r, err := e.c.Wait(testCtx(t), agentproto.WaitRequest{Path: p, Text: tt.text, TimeoutMs: timeout})
			if err != nil {
				t.Fatal(err)
			}
			if r.Found != tt.found {
				t.Errorf("found = %v, want %v", r.Found, tt.found)
			}
			elapsed := time.Since(start)
			if !tt.found && (elapsed < time.Duration(timeout)*time.Millisecond || r.ElapsedMs < timeout) {
				t.Errorf("gave up after %v (reported %dms), before the %dms timeout", elapsed, r.ElapsedMs, timeout)
			}
			if tt.found && elapsed > 2*time.Second {
				t.Errorf("found only after %v", elapsed)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestWaitErrors(t *testing.T) {
	e := newTestEnv(t)
	tests := []struct {
		name string
		req  agentproto.WaitRequest
		code string
	}{
		{"empty text", agentproto.WaitRequest{Path: "f"}, agentproto.CodeInvalid},
		{"negative timeout", agentproto.WaitRequest{Path: "f", Text: "x", TimeoutMs: -1}, agentproto.CodeInvalid},
		{"directory", agentproto.WaitRequest{Path: ".", Text: "x"}, agentproto.CodeIsDir},
		{"dotdot", agentproto.WaitRequest{Path: "../f", Text: "x"}, agentproto.CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.c.Wait(testCtx(t), tt.req)
			wantCode(t, err, tt.code)
		})
	}
}
