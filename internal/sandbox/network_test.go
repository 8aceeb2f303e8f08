package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/netpolicy"
	"github.com/cove-sandbox/cove/internal/runtime"
)

// fakeNet is a Network that records what it is asked. A policy that
// allows the CIDR "bad" is invalid.
type fakeNet struct {
	mu       sync.Mutex
	attached map[string]netpolicy.Policy // by sandbox id
	ns       map[string]string           // namespace each was attached in
	attaches int
	updates  int
	detaches []string
}

func newFakeNet() *fakeNet {
	return &fakeNet{attached: map[string]netpolicy.Policy{}, ns: map[string]string{}}
}

func (n *fakeNet) Validate(p netpolicy.Policy) error {
	if slices.Contains(p.AllowCIDRs, "bad") {
		return fmt.Errorf("%w: allow_cidrs: %q is not a CIDR", netpolicy.ErrInvalid, "bad")
	}
	return nil
}

func (n *fakeNet) Attach(ctx context.Context, id, ns string, p netpolicy.Policy) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.attaches++
	n.attached[id], n.ns[id] = p, ns
	return nil
}

func (n *fakeNet) Update(id string, p netpolicy.Policy) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.attached[id]; !ok {
		return fmt.Errorf("sandbox %s: %w", id, netpolicy.ErrNotAttached)
	}
	n.updates++
	n.attached[id] = p
	return nil
}

func (n *fakeNet) Detach(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.attached, id)
	n.detaches = append(n.detaches, id)
}

// policy returns the policy id is attached with, and whether it is.
func (n *fakeNet) policy(id string) (netpolicy.Policy, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.attached[id]
	return p, ok
}

// netnsOf is the namespace id was attached in: the pool filler attaches
// others meanwhile.
func (n *fakeNet) netnsOf(id string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ns[id]
}

func (n *fakeNet) count() (attaches, updates int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.attaches, n.updates
}

func (n *fakeNet) ids() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for id := range n.attached {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func newNetEnv(t *testing.T, opts ...func(*Config)) (*testEnv, *fakeNet) {
	n := newFakeNet()
	return newEnv(t, append([]func(*Config){func(c *Config) { c.Network = n }}, opts...)...), n
}

var (
	policyA = netpolicy.Policy{AllowDomains: []string{"pypi.org"}}
	policyB = netpolicy.Policy{AllowCIDRs: []string{"192.0.2.0/24"}}
	policyC = netpolicy.Policy{Presets: []string{"npm"}}
)

func wantAttached(t *testing.T, n *fakeNet, e *testEnv, id string, want netpolicy.Policy) {
	t.Helper()
	got, ok := n.policy(id)
	if !ok || !samePolicy(got, want) {
		t.Fatalf("%s attached = %v with %+v, want %+v", id, ok, got, want)
	}
	if ns := n.netnsOf(id); ns != e.rt.Netns(id) {
		t.Errorf("%s attached in %q, want %q", id, ns, e.rt.Netns(id))
	}
}

// A sandbox's network is attached while it runs, with the policy it was
// given (none: deny all), and detached on every way it ends.
func TestNetworkLifecycle(t *testing.T) {
	e, n := newNetEnv(t, func(c *Config) { c.StartTimeout = time.Second })
	ctx := testCtx(t)
	a := e.createOne(t, CreateOptions{Network: &policyA})
	wantAttached(t, n, e, a.ID, policyA)
	if !samePolicy(a.Network, policyA) {
		t.Errorf("Info.Network = %+v", a.Network)
	}
	if got := e.svc.decodePolicy("", e.row(t, a.ID).NetworkJSON); !samePolicy(got, policyA) {
		t.Errorf("stored policy = %+v", got)
	}
	deny := e.createOne(t, CreateOptions{})
	wantAttached(t, n, e, deny.ID, netpolicy.Policy{})

	// Delete, death and expiry detach.
	if err := e.svc.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	e.rt.Kill(deny.ID, runtime.Exit{})
	waitFor(t, "the dead sandbox to detach", func() bool { _, ok := n.policy(deny.ID); return !ok })
	short := e.createOne(t, CreateOptions{TTL: 300 * time.Millisecond})
	waitFor(t, "the expired sandbox to detach", func() bool { _, ok := n.policy(short.ID); return !ok })

	// A create that fails after the network was attached detaches it.
	e.rt.DeafNthStart(1)
	if _, err := e.svc.Create(ctx, CreateOptions{Network: &policyB}); err == nil {
		t.Fatal("a sandbox whose agent never answers was created")
	}
	if left := n.ids(); len(left) != 0 {
		t.Errorf("still attached: %v", left)
	}
}

// An invalid policy is refused before anything is made, with an error the
// API maps to 400; a daemon without a network refuses any opening.
func TestNetworkInvalid(t *testing.T) {
	e, n := newNetEnv(t)
	ctx := testCtx(t)
	bad := netpolicy.Policy{AllowCIDRs: []string{"bad"}}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrInvalid) || !errors.Is(err, netpolicy.ErrInvalid) || !strings.Contains(err.Error(), `"bad"`) {
			t.Errorf("%s: error = %v, want ErrInvalid and netpolicy.ErrInvalid", what, err)
		}
	}
	_, err := e.svc.Create(ctx, CreateOptions{Network: &bad})
	check("Create", err)
	_, err = e.svc.BuildSnapshot(ctx, BuildOptions{Tag: "x", Network: &bad})
	check("BuildSnapshot", err)
	info := e.createOne(t, CreateOptions{Network: &policyA})
	_, err = e.open(t, info.ID, info.Token).Branch(ctx, BranchOptions{N: 1, Network: &bad})
	check("Branch", err)
	_, err = e.svc.SetNetwork(ctx, info.ID, bad)
	check("SetNetwork", err)
	if e.rt.Starts() != 1 || len(e.rt.Checkpoints()) != 0 || len(e.svc.Snapshots(context.Background())) != 0 {
		t.Errorf("bad policies made something: %d starts, %d checkpoints", e.rt.Starts(), len(e.rt.Checkpoints()))
	}
	wantAttached(t, n, e, info.ID, policyA)
	if got, _ := e.svc.Get(context.Background(), info.ID); !samePolicy(got.Network, policyA) {
		t.Errorf("policy after a refused change: %+v", got.Network)
	}

	none := newEnv(t)
	_, err = none.svc.Create(ctx, CreateOptions{Network: &policyA})
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("a policy on a daemon without a network: %v", err)
	}
	none.createOne(t, CreateOptions{Network: &netpolicy.Policy{}})
}

// Spawned children start with their snapshot's policy, a branch's
// snapshot and children with the source's, unless the call says otherwise.
func TestNetworkInheritance(t *testing.T) {
	e, n := newNetEnv(t)
	ctx := testCtx(t)
	sn := e.build(t, BuildOptions{Tag: "py", Network: &policyA})
	if !samePolicy(sn.Network, policyA) {
		t.Fatalf("built snapshot's policy = %+v", sn.Network)
	}
	child := e.createOne(t, CreateOptions{SnapshotTag: "py"})
	wantAttached(t, n, e, child.ID, policyA)
	other := e.createOne(t, CreateOptions{SnapshotTag: "py", Network: &policyB})
	wantAttached(t, n, e, other.ID, policyB)
	image := e.createOne(t, CreateOptions{})
	wantAttached(t, n, e, image.ID, netpolicy.Policy{})

	// A branch without a policy takes the source's current one.
	if _, err := e.svc.SetNetwork(ctx, child.ID, policyC); err != nil {
		t.Fatal(err)
	}
	br, err := e.open(t, child.ID, child.Token).Branch(ctx, BranchOptions{Tag: "br", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !samePolicy(br.Snapshot.Network, policyC) {
		t.Errorf("branch snapshot's policy = %+v, want the source's", br.Snapshot.Network)
	}
	wantAttached(t, n, e, br.Children[0].ID, policyC)
	grandchild := e.createOne(t, CreateOptions{SnapshotTag: "br", SnapshotToken: child.Token})
	wantAttached(t, n, e, grandchild.ID, policyC)

	br2, err := e.open(t, child.ID, child.Token).Branch(ctx, BranchOptions{Tag: "br2", N: 1, Network: &policyB})
	if err != nil {
		t.Fatal(err)
	}
	if !samePolicy(br2.Snapshot.Network, policyB) {
		t.Errorf("branch snapshot's policy = %+v, want the call's", br2.Snapshot.Network)
	}
	wantAttached(t, n, e, br2.Children[0].ID, policyB)

	// The snapshots keep their policies across a restart.
	e.restart(t)
	for tag, want := range map[string]netpolicy.Policy{"py": policyA, "br": policyC, "br2": policyB} {
		if got, err := e.svc.Snapshot(context.Background(), tag); err != nil || !samePolicy(got.Network, want) {
			t.Errorf("after restart, snapshot %s: %+v, %v; want %+v", tag, got.Network, err, want)
		}
	}
}

// A policy changes on a running sandbox at once, is kept, and is applied
// again after a restart; a dead sandbox's cannot change.
func TestSetNetwork(t *testing.T) {
	e, n := newNetEnv(t)
	ctx := testCtx(t)
	info := e.createOne(t, CreateOptions{})
	got, err := e.svc.SetNetwork(ctx, info.ID, policyB)
	if err != nil {
		t.Fatal(err)
	}
	if !samePolicy(got.Network, policyB) {
		t.Errorf("SetNetwork returned %+v", got.Network)
	}
	wantAttached(t, n, e, info.ID, policyB)
	if _, updates := n.count(); updates != 1 {
		t.Errorf("%d updates, want 1", updates)
	}
	_, err = e.svc.SetNetwork(ctx, "sb-none", policyB)
	wantErr(t, err, ErrNotFound)

	// A restart attaches every live sandbox again; the closing daemon
	// detached them.
	e.restart(t)
	wantAttached(t, n, e, info.ID, policyB)
	if got, _ := e.svc.Get(context.Background(), info.ID); !samePolicy(got.Network, policyB) {
		t.Errorf("after restart: %+v", got.Network)
	}
	// One whose network is not attached (it failed at recovery) is
	// attached by the change.
	n.Detach(info.ID)
	if _, err := e.svc.SetNetwork(ctx, info.ID, policyA); err != nil {
		t.Fatal(err)
	}
	wantAttached(t, n, e, info.ID, policyA)

	e.rt.Kill(info.ID, runtime.Exit{})
	waitFor(t, "the sandbox to die", func() bool { i, _ := e.svc.Get(context.Background(), info.ID); return i.Status == StatusDead })
	_, err = e.svc.SetNetwork(ctx, info.ID, policyB)
	wantErr(t, err, ErrDead)
	// A death is recorded first and released after: the network goes
	// with the rest of what the runtime held, and no change brings it back.
	waitFor(t, "the dead sandbox's network to be released", func() bool { _, ok := n.policy(info.ID); return !ok })
	_, err = e.svc.SetNetwork(ctx, info.ID, policyB)
	wantErr(t, err, ErrDead)
	if _, ok := n.policy(info.ID); ok {
		t.Error("a change attached a dead sandbox's network again")
	}
}

// A pooled sandbox runs with its snapshot's policy; a claim that asks for
// another one updates it, one that asks for none keeps it.
func TestNetworkPool(t *testing.T) {
	e, n := newNetEnv(t, func(c *Config) { c.PoolMemoryMiB = 4 * testLimits.DefaultMemoryMiB })
	e.build(t, BuildOptions{Tag: "warm", PoolSize: 2, Network: &policyA})
	poolReady := func() int { s, _ := e.svc.Snapshot(context.Background(), "warm"); return s.PoolReady }
	waitFor(t, "the pool to fill", func() bool { return poolReady() == 2 })
	for _, id := range e.rt.IDs() {
		wantAttached(t, n, e, id, policyA)
	}
	_, updates0 := n.count()
	same := e.createOne(t, CreateOptions{SnapshotTag: "warm"})
	other := e.createOne(t, CreateOptions{SnapshotTag: "warm", Network: &policyB})
	if n := e.svc.Stats().PoolHits.Load(); n != 2 {
		t.Fatalf("%d pool hits, want 2", n)
	}
	wantAttached(t, n, e, same.ID, policyA)
	wantAttached(t, n, e, other.ID, policyB)
	if _, updates := n.count(); updates != updates0+1 {
		t.Errorf("%d updates for two claims, want 1", updates-updates0)
	}
	if got := e.svc.decodePolicy("", e.row(t, other.ID).NetworkJSON); !samePolicy(got, policyB) {
		t.Errorf("claimed sandbox's stored policy = %+v", got)
	}
	// Closing the service destroys the pool, and detaches everything.
	waitFor(t, "the pool to refill", func() bool { return poolReady() == 2 })
	e.svc.Close()
	if left := n.ids(); len(left) != 0 {
		t.Errorf("attached after Close: %v", left)
	}
}

// Exposed ports are recorded, kept across a restart, reached through the
// sandbox's host-side namespace, and go with the sandbox.
func TestPorts(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello"))
			c.Close()
		}
	}()
	type dial struct{ ns, addr string }
	var mu sync.Mutex
	var dials []dial
	fakeDial := func(ctx context.Context, ns, addr string) (net.Conn, error) {
		mu.Lock()
		dials = append(dials, dial{ns, addr})
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", l.Addr().String())
	}
	e.svc.dialIn = fakeDial
	info := e.createOne(t, CreateOptions{})
	sb := e.open(t, info.ID, info.Token)
	for _, bad := range []int{0, -1, 65536} {
		_, err := sb.ExposePort(ctx, bad, false)
		wantErr(t, err, ErrInvalid)
	}
	p1, err := sb.ExposePort(ctx, 8000, false)
	if err != nil {
		t.Fatal(err)
	}
	if p1.Port != 8000 || p1.Public || len(p1.Token) < 16 {
		t.Fatalf("ExposePort = %+v", p1)
	}
	p2, err := sb.ExposePort(ctx, 8000, true)
	if err != nil || p2.Token != p1.Token || !p2.Public {
		t.Fatalf("exposing again = %+v, %v; want the same token, public", p2, err)
	}
	if _, err := sb.ExposePort(ctx, 3000, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.svc.Get(context.Background(), info.ID); len(got.Ports) != 2 || got.Ports[0].Port != 3000 || got.Ports[1] != p2 {
		t.Errorf("Info.Ports = %+v", got.Ports)
	}
	if tok, public, err := e.svc.Exposure(info.ID, 8000); err != nil || tok != p1.Token || !public {
		t.Errorf("Exposure = %q %v %v", tok, public, err)
	}
	_, _, err = e.svc.Exposure(info.ID, 9999)
	wantErr(t, err, ErrNotFound)
	_, _, err = e.svc.Exposure("sb-none", 8000)
	wantErr(t, err, ErrNotFound)
	_, err = e.svc.DialPort(ctx, info.ID, 9999)
	wantErr(t, err, ErrNotFound)

	c, err := e.svc.DialPort(ctx, info.ID, 8000)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := c.Read(buf); err != nil || string(buf) != "hello" {
		t.Errorf("read %q, %v", buf, err)
	}
	c.Close()
	// The token holder reaches any port, exposed or not.
	c, err = sb.DialPort(ctx, 5432)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	want := []dial{{e.rt.Netns(info.ID), "10.77.0.2:8000"}, {e.rt.Netns(info.ID), "10.77.0.2:5432"}}
	if !slices.Equal(dials, want) {
		t.Errorf("dialled %+v, want %+v", dials, want)
	}

	if err := sb.UnexposePort(ctx, 3000); err != nil {
		t.Fatal(err)
	}
	wantErr(t, sb.UnexposePort(ctx, 3000), ErrNotFound)

	// Kept across a restart.
	e.restart(t)
	if got, _ := e.svc.Get(context.Background(), info.ID); len(got.Ports) != 1 || got.Ports[0] != p2 {
		t.Errorf("after restart, Info.Ports = %+v", got.Ports)
	}

	// Gone with the sandbox: dead, then deleted.
	sb = e.open(t, info.ID, info.Token)
	e.rt.Kill(info.ID, runtime.Exit{})
	waitFor(t, "the sandbox to die", func() bool { i, _ := e.svc.Get(context.Background(), info.ID); return i.Status == StatusDead })
	_, _, err = e.svc.Exposure(info.ID, 8000)
	wantErr(t, err, ErrNotFound)
	_, err = sb.ExposePort(ctx, 8001, false)
	wantErr(t, err, ErrDead)
	_, err = sb.DialPort(ctx, 8000)
	wantErr(t, err, ErrDead)
	if err := e.svc.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if ports, err := e.st.Ports(ctx); err != nil || len(ports) != 0 {
		t.Errorf("ports left in the store: %v, %v", ports, err)
	}
}

// A warm command's output reaches BuildOptions.Output while it runs, and a
// failing one's last line is in the error; no log is left behind.
func TestBuildOutput(t *testing.T) {
	e := newEnv(t)
	first := make(chan time.Time, 1)
	out := &syncBuf{first: first}
	t0 := time.Now()
	e.build(t, BuildOptions{Tag: "out", Warm: "echo one; sleep 1; echo two >&2", Output: out})
	took := time.Since(t0)
	if got := out.String(); got != "one\ntwo\n" {
		t.Errorf("output = %q", got)
	}
	if at := (<-first).Sub(t0); at > took-500*time.Millisecond {
		t.Errorf("first output after %s of a %s build: not streamed", at, took)
	}
	_, err := e.svc.BuildSnapshot(testCtx(t), BuildOptions{Tag: "fail", Warm: "echo boom; exit 3"})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "exited 3: boom") {
		t.Errorf("failing warm: %v", err)
	}
	// The snapshot was taken without the log: its child has none.
	child := e.createOne(t, CreateOptions{SnapshotTag: "out"})
	if got := e.exec(t, child.ID, child.Token, "ls -A"); strings.Contains(got, ".cove-warm") {
		t.Errorf("the warm log is in the snapshot: %q", got)
	}
}

// syncBuf is a writer safe for concurrent use that reports when it was
// first written.
type syncBuf struct {
	mu    sync.Mutex
	b     strings.Builder
	first chan time.Time
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() == 0 && len(p) > 0 {
		s.first <- time.Now()
	}
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
