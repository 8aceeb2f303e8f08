package sandbox

import (
	"bytes"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// FuzzCreateOptions checks a create request the API decoded as the
// service does (validate, then metaFor): what it accepts is within the
// limits, validates again unchanged, and records labels, env and cwd that
// read back as they were given.
func FuzzCreateOptions(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"n":3,"ttl_secs":60,"cpus":2,"memory_mib":512,"disk_mib":2048,"pids":300}`,
		`{"labels":{"team":"a","x/y.z-_":""},"env":{"A":"1","B":"x=y"},"cwd":"/srv","user":"user"}`,
		`{"labels":{"Bad":"x"}}`,
		`{"env":{"A=B":"1"}}`,
		`{"env":{"A":"\u0000"}}`,
		`{"n":-1}`, `{"ttl_secs":99999999999}`, `{"on_expiry":"pause","auto_resume":true}`,
		`{"user":"../etc"}`, `{"cwd":"rel\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	svc := &Service{cfg: Config{Limits: testLimits, DefaultImage: "default"}}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req apitype.CreateSandboxRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if dec.Decode(&req) != nil {
			return
		}
		o := CreateOptions{Image: req.Image, N: req.N, TTL: time.Duration(min(max(req.TTLSecs, -1<<32), 1<<32)) * time.Second,
			CPUs: req.CPUs, MemoryMiB: req.MemoryMiB, DiskMiB: req.DiskMiB, Pids: req.Pids,
			Labels: req.Labels, User: req.User, Env: req.Env, Cwd: req.Cwd, AutoResume: req.AutoResume, OnExpiry: req.OnExpiry}
		if svc.validate(&o) != nil {
			return
		}
		l := testLimits
		if o.N < 1 || o.N > MaxN || o.TTL <= 0 || o.TTL > l.MaxTTL || o.CPUs < 1 || o.CPUs > l.MaxCPUs ||
			o.MemoryMiB > l.MaxMemoryMiB || o.DiskMiB > l.MaxDiskMiB || o.Pids > l.MaxPids || o.Image == "" {
			t.Fatalf("accepted options outside the limits: %+v", o)
		}
		again := o
		if err := svc.validate(&again); err != nil {
			t.Fatalf("validated options no longer validate: %v", err)
		}
		if !optionsEqual(again, o) {
			t.Fatalf("validating twice changed the options:\n%+v\n%+v", o, again)
		}
		m, err := metaFor(o, store.Meta{})
		if err != nil {
			return
		}
		if len(o.Labels) > 0 && !maps.Equal(decodeLabels(m.LabelsJSON), o.Labels) {
			t.Fatalf("labels %q recorded as %q", o.Labels, m.LabelsJSON)
		}
		if len(o.Env) > 0 && !maps.Equal(envMap(m.EnvJSON), o.Env) {
			t.Fatalf("env %q recorded as %q", o.Env, m.EnvJSON)
		}
		if o.Cwd != "" && m.Cwd != o.Cwd {
			t.Fatalf("cwd %q recorded as %q", o.Cwd, m.Cwd)
		}
	})
}

// optionsEqual compares the fields validate reads and fills in.
func optionsEqual(a, b CreateOptions) bool {
	return a.Image == b.Image && a.N == b.N && a.TTL == b.TTL && a.CPUs == b.CPUs && a.MemoryMiB == b.MemoryMiB &&
		a.DiskMiB == b.DiskMiB && a.Pids == b.Pids && a.OnExpiry == b.OnExpiry
}
