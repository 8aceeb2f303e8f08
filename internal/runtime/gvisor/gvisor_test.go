package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cove-sandbox/cove/internal/cgroup"
	"github.com/cove-sandbox/cove/internal/netns"
	"github.com/cove-sandbox/cove/internal/runtime"
)

func TestOCISpec(t *testing.T) {
	s := ociSpec(runtime.Spec{ID: "sb-1", ImageFiles: runtime.ImageFiles{Rootfs: "/images/x/rootfs"}, CPUs: 2, MemoryMiB: 256, Hostname: "sb-1", Env: []string{"A=b"}})
	if s.Root.Path != "/images/x/rootfs" || s.Root.Readonly {
		t.Errorf("root %+v: want the image, writable so that --overlay2 applies", s.Root)
	}
	if s.Hostname != "sb-1" || s.Process.Args[0] != "/usr/local/bin/cove-agent" {
		t.Errorf("hostname %q args %v", s.Hostname, s.Process.Args)
	}
	r := s.Linux.Resources
	if *r.Memory.Limit != 256<<20 || *r.CPU.Quota != 2*cgroup.CPUPeriod || *r.CPU.Period != cgroup.CPUPeriod {
		t.Errorf("limits: memory %d quota %d period %d", *r.Memory.Limit, *r.CPU.Quota, *r.CPU.Period)
	}
	var ns string
	for _, n := range s.Linux.Namespaces {
		if n.Type == specs.NetworkNamespace {
			ns = n.Path
		}
	}
	if want := filepath.Join(netns.Dir, "cove-sb-1-g"); ns != want {
		t.Errorf("network namespace %q, want %q: the sandbox must run in its own", ns, want)
	}
	env := map[string]bool{}
	for _, e := range s.Process.Env {
		env[e] = true
	}
	if !env["A=b"] || !env["COVE_SANDBOX_ID=sb-1"] {
		t.Errorf("env %v", s.Process.Env)
	}
	for _, c := range s.Process.Capabilities.Bounding {
		if c == "CAP_SYS_ADMIN" || c == "CAP_NET_ADMIN" || c == "CAP_SYS_PTRACE" {
			t.Errorf("capability %s granted", c)
		}
	}
}

func TestStragglerMatch(t *testing.T) {
	root := "/state/sandboxes/.runsc"
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"runsc", "--root", root, "kill", "sb-1"}, true},
		{[]string{"runsc-sandbox", "--root=" + root, "--log=/state/sandboxes/sb-1/runsc.log"}, true},
		{[]string{"runsc", "--root", root, "kill", "sb-10"}, false},
		{[]string{"runsc", "--root", "/other", "kill", "sb-1"}, false},
	}
	for _, tt := range tests {
		if got := containsArg(tt.args, root) && containsID(tt.args, "sb-1"); got != tt.want {
			t.Errorf("%v: match = %v, want %v", tt.args, got, tt.want)
		}
	}
}

// TestListFindsRunscState: a sandbox whose directory is gone is still
// listed while runsc holds its state, socket or lock in its root, so that
// recovery destroys it; runsc's own entries are not sandboxes.
func TestListFindsRunscState(t *testing.T) {
	dir := t.TempDir()
	r := &Runtime{dir: dir, root: RootDir(dir)}
	if err := os.MkdirAll(filepath.Join(dir, "sb-dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range append(r.rootFiles("sb-lost"), filepath.Join(r.root, nullNetns)) {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := r.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if want := []string{"sb-dir", "sb-lost"}; !slices.Equal(ids, want) {
		t.Fatalf("List = %v, want %v", ids, want)
	}
}
