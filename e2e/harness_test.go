// Package e2e drives the real cove daemon, with real gVisor sandboxes,
// through its public API. It needs root, runsc and a built image
// (make image); under CI a missing prerequisite fails the suite.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/image"
	"github.com/cove-sandbox/cove/internal/testnet"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// env is what every test shares: the built binary, the image directory and
// one daemon most tests use.
type env struct {
	bin      string
	imageDir string
	tmp      string
	shared   *daemon
	// net is the test network every daemon's sandboxes may be allowed
	// to reach: the only servers a network test talks to.
	net *testnet.Net
	// base is a snapshot of the default image on the shared daemon, which
	// newSandbox restores from: a restore costs a fraction of a cold boot
	// (under TCG, seconds less a test). Tests of cold boots create their own.
	base string
}

var suite env // set once by TestMain, read-only after

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ci := os.Getenv("CI") == "true"
	if why := missingPrereq(); why != "" {
		if ci {
			fmt.Fprintf(os.Stderr, "e2e: FAIL: missing prerequisite under CI: %s\n", why)
			return 1
		}
		fmt.Fprintf(os.Stderr, "e2e: skipping: %s (run `make test` to set everything up)\n", why)
		return 0
	}
	tmp, err := os.MkdirTemp("", "cove-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	suite.tmp = tmp
	suite.imageDir = imageDir()
	suite.bin = filepath.Join(tmp, "cove")
	build := exec.Command("go", "build", "-o", suite.bin, "github.com/cove-sandbox/cove/cmd/cove")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: build cove: %v\n", err)
		return 1
	}
	tn, err := testnet.Start(context.Background(), testnet.Config{Base: "cove-e2e"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: test network: %v\n", err)
		return 1
	}
	defer tn.Close()
	suite.net = tn
	// HTTPS preview URLs on a port the kernel picks: the daemon reports
	// it in /v1/info.
	d, err := startDaemon(filepath.Join(tmp, "shared"), "--preview-https-addr", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	suite.shared = d
	if err := buildBase(d); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n%s", err, d.logTail())
		d.stop()
		return 1
	}
	images := imageEntries()
	code := m.Run()
	if left := newImageEntries(images); len(left) > 0 {
		// The image directory is shared with every other run: a test
		// removes what it imported or pulled.
		fmt.Fprintf(os.Stderr, "e2e: FAIL: the suite left %v in %s\n", left, suite.imageDir)
		code = 1
	}
	if code != 0 {
		// What the daemon warned of is often the cause; CI shows only
		// the end of the output.
		fmt.Fprintf(os.Stderr, "e2e: the shared daemon's warnings and errors:\n%s", d.warnings(60))
	}
	if err := d.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: stop daemon: %v\n", err)
		code = 1
	}
	return code
}

// imageEntries are the names in the image directory.
func imageEntries() map[string]bool {
	ents, _ := os.ReadDir(suite.imageDir)
	names := map[string]bool{}
	for _, e := range ents {
		names[e.Name()] = true
	}
	return names
}

// newImageEntries lists the names in the image directory that before lacks.
func newImageEntries(before map[string]bool) []string {
	var out []string
	for name := range imageEntries() {
		if !before[name] {
			out = append(out, name)
		}
	}
	return out
}

func imageDir() string {
	if d := os.Getenv("COVE_IMAGE_DIR"); d != "" {
		return d
	}
	return "/var/lib/cove/images"
}

// backend is the isolation backend the suite runs against:
// COVE_E2E_BACKEND=gvisor (default) or qemu (under TCG: --accel tcg).
func backend() string {
	if b := os.Getenv("COVE_E2E_BACKEND"); b != "" {
		return b
	}
	return "gvisor"
}

// apiLayer marks a test of what sits above the runtime (keys, tenancy and
// quotas, MCP, the E2B facade, Dockerfile errors): it drives the same
// sandbox service whichever backend runs, and the runtime paths it touches
// have tests of their own on both. Under QEMU (TCG, where every test costs
// several times more) it runs only with COVE_E2E_FULL=1, so that make
// test's QEMU suite is what tells the backends apart.
func apiLayer(t *testing.T) {
	t.Helper()
	if backend() == "qemu" && os.Getenv("COVE_E2E_FULL") != "1" {
		t.Skip("above the runtime: run on gVisor; COVE_E2E_FULL=1 runs it under QEMU too")
	}
}

// backendArgs are the daemon flags that select the backend.
func backendArgs() []string {
	if backend() == "qemu" {
		// Concurrent TCG boots on a small host outlast the default 60 s.
		return []string{"--backend", "qemu", "--accel", "tcg", "--start-timeout", "3m"}
	}
	return nil
}

// netnsPerSandbox is how many network namespaces a sandbox holds.
func netnsPerSandbox() int {
	if backend() == "qemu" {
		return 1
	}
	return 2
}

// isBackendNetns reports whether a network namespace name is of the
// kind the backend makes (cove-<id>-v for QEMU, -g and -h for gVisor), so
// that a run against the other backend on the same host does not count.
func isBackendNetns(name string) bool {
	if backend() == "qemu" {
		return strings.HasSuffix(name, "-v")
	}
	return strings.HasSuffix(name, "-g") || strings.HasSuffix(name, "-h")
}

// isBackendProc reports whether a command line is one of the backend's
// processes (runsc, or QEMU).
func isBackendProc(args []string) bool {
	base := filepath.Base(args[0])
	if backend() == "qemu" {
		return strings.HasPrefix(base, "qemu-system")
	}
	return strings.Contains(base, "runsc")
}

// networkArgs are the daemon flags that point sandboxes' DNS at the test
// network's zone server and let allowed names resolve into it.
func networkArgs() []string {
	return []string{"--dns-upstream", suite.net.DNS.String(), "--resolvable-private", "10.99.0.0/16"}
}

func missingPrereq() string {
	if os.Geteuid() != 0 {
		return "not root"
	}
	img, err := image.Resolve(imageDir(), "default")
	if err != nil {
		return fmt.Sprintf("no default image in %s: %v", imageDir(), err)
	}
	switch backend() {
	case "gvisor":
		if _, err := exec.LookPath("runsc"); err != nil {
			return "runsc not installed"
		}
	case "qemu":
		if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
			return "qemu-system-x86_64 not installed"
		}
		if !image.VMFilesFor(img.Rootfs).Exists() {
			return "the default image has no VM artifacts (make image-vm)"
		}
	default:
		return "COVE_E2E_BACKEND=" + backend() + ": want gvisor or qemu"
	}
	return ""
}

// daemon is one running `cove serve`.
type daemon struct {
	dir       string // state dir, token file and log live here
	url       string
	key       string
	addr      string
	cmd       *exec.Cmd
	log       *os.File
	c         *client.Client
	extraArgs []string
	// healthyAfter is how long the last start took to answer /healthz.
	healthyAfter time.Duration
}

func startDaemon(dir string, extra ...string) (*daemon, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	d := &daemon{dir: dir, addr: addr, url: "http://" + addr, extraArgs: extra}
	return d, d.start()
}

func (d *daemon) start() error {
	log, err := os.OpenFile(filepath.Join(d.dir, "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	args := append([]string{"serve", "--addr", d.addr, "--state-dir", filepath.Join(d.dir, "state"),
		"--image-dir", suite.imageDir, "--api-key-file", filepath.Join(d.dir, "token"), "--log-level", "debug",
		"--default-snapshot="}, append(append(backendArgs(), networkArgs()...), d.extraArgs...)...)
	cmd := exec.Command(suite.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	d.cmd, d.log = cmd, log
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(d.url + "/healthz"); err == nil {
			resp.Body.Close()
			d.healthyAfter = time.Since(t0)
			key, err := os.ReadFile(filepath.Join(d.dir, "token"))
			if err != nil {
				return err
			}
			d.key = strings.TrimSpace(string(key))
			d.c = client.New(d.url, d.key)
			return d.waitRecovered(deadline)
		}
		if cmd.ProcessState != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("daemon did not come up; log:\n%s", d.logTail())
}

// waitRecovered waits until the daemon has checked the sandboxes an
// earlier one left, which it does after it starts serving.
func (d *daemon) waitRecovered(deadline time.Time) error {
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		info, err := d.c.Info(ctx)
		cancel()
		if err == nil && info.Recovering == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("daemon did not finish recovery (%+v, %v); log:\n%s", info, err, d.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *daemon) logTail() string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "daemon.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// warnings returns the last n WARN and ERROR lines of the daemon's log.
func (d *daemon) warnings(n int) string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "daemon.log"))
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			lines = append(lines, l)
		}
	}
	lines = lines[max(0, len(lines)-n):]
	return strings.Join(lines, "\n") + "\n"
}

// stop deletes every sandbox and stops the daemon gracefully.
func (d *daemon) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if list, err := d.c.ListSandboxes(ctx); err == nil {
		for _, sb := range list {
			d.c.DeleteSandbox(ctx, sb.ID)
		}
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	err := d.cmd.Wait()
	d.log.Close()
	return err
}

// ownDaemon starts a daemon of the test's own under suite.tmp/name. When
// the test ends it is stopped, and every resource its sandboxes held must
// be gone.
func ownDaemon(t *testing.T, name string) *daemon {
	t.Helper()
	d, err := startDaemon(filepath.Join(suite.tmp, name))
	if err != nil {
		t.Fatal(err)
	}
	base := countResources(t, d.stateDir())
	t.Cleanup(func() {
		d.stop()
		waitResources(t, d.stateDir(), base)
	})
	return d
}

// kill9 kills the daemon without warning.
func (d *daemon) kill9() {
	d.cmd.Process.Kill()
	d.cmd.Wait()
	d.log.Close()
}

func (d *daemon) stateDir() string { return filepath.Join(d.dir, "state") }

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// sandbox is a created sandbox and its token.
type sandbox struct {
	id, token string
}

func create(t *testing.T, d *daemon, req apitype.CreateSandboxRequest) []sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	infos, err := d.c.CreateSandboxes(ctx, req)
	if err != nil {
		t.Fatalf("create %+v: %v\ndaemon log:\n%s", req, err, d.logTail())
	}
	out := make([]sandbox, len(infos))
	for i, info := range infos {
		if info.Token == "" || info.Status != apitype.StatusRunning {
			t.Fatalf("created sandbox %+v: want a token and status running", info)
		}
		out[i] = sandbox{info.ID, info.Token}
	}
	return out
}

// newSandbox creates one sandbox on the shared daemon, deleted at the end
// of the test.
func newSandbox(t *testing.T) sandbox {
	t.Helper()
	sb := create(t, suite.shared, apitype.CreateSandboxRequest{SnapshotTag: suite.base})[0]
	t.Cleanup(func() { suite.shared.c.DeleteSandbox(context.Background(), sb.id) })
	return sb
}

// buildBase builds suite.base on d, without a warm pool: pooled sandboxes
// would come and go behind the tests that count what the daemon holds.
func buildBase(d *daemon) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	none := 0
	sn, err := d.c.CreateSnapshot(ctx, apitype.CreateSnapshotRequest{Tag: "e2e-base", PoolSize: &none})
	if err != nil {
		return fmt.Errorf("build the suite's base snapshot: %w", err)
	}
	suite.base = sn.Tag
	return nil
}

func execOK(t *testing.T, d *daemon, sb sandbox, shell string) string {
	t.Helper()
	res, err := d.c.Exec(context.Background(), sb.id, sb.token, apitype.ExecRequest{Shell: shell, TimeoutSecs: 60})
	if err != nil {
		t.Fatalf("exec %q: %v", shell, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d, stderr %q", shell, res.ExitCode, res.Stderr)
	}
	return res.Stdout
}

// resources counts what a daemon's sandboxes hold on the host.
type resources struct {
	RunscProcs int // the backend's processes (runsc or QEMU)
	Mounts     int
	Dirs       int
	Netns      int
	ShmFiles   int // QEMU guest RAM files in /dev/shm
	// Sandbox cgroups (cove/<id>, any daemon's) with no task left: a live
	// sandbox's has its processes, so an empty one is a leak.
	EmptyCgroups int
}

// backendProcs are the runtime processes (runsc, QEMU) whose command line
// names stateDir: their arguments by pid.
func backendProcs(stateDir string) map[string][]string {
	out := map[string][]string{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if isBackendProc(args) && bytes.Contains(cmdline, []byte(stateDir)) {
			out[p.Name()] = args
		}
	}
	return out
}

func countResources(t *testing.T, stateDir string) resources {
	t.Helper()
	var r resources
	r.RunscProcs = len(backendProcs(stateDir))
	r.Mounts = len(sandboxMounts(stateDir))
	ents, _ := os.ReadDir(filepath.Join(stateDir, "sandboxes"))
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			r.Dirs++
		}
	}
	// Namespaces and cgroups are named by sandbox id alone: only those of
	// this daemon's sandboxes count, whatever else runs on the host.
	ids := daemonIDs(stateDir)
	ns, _ := os.ReadDir("/var/run/netns")
	for _, e := range ns {
		if isBackendNetns(e.Name()) && ids[netnsID(e.Name())] {
			r.Netns++
		}
	}
	// The QEMU runtime names a VM's RAM file by a hash of its state
	// directory and the sandbox id.
	h := sha256.Sum256([]byte(filepath.Join(stateDir, "sandboxes")))
	shm, _ := filepath.Glob(fmt.Sprintf("/dev/shm/cove-%x-*.mem", h[:4]))
	r.ShmFiles = len(shm)
	v1, _ := filepath.Glob("/sys/fs/cgroup/*/cove/*/cgroup.procs")
	v2, _ := filepath.Glob("/sys/fs/cgroup/cove/*/cgroup.procs")
	for _, f := range append(v1, v2...) {
		if !ids[filepath.Base(filepath.Dir(f))] {
			continue
		}
		if b, err := os.ReadFile(f); err == nil && len(bytes.TrimSpace(b)) == 0 {
			r.EmptyCgroups++
		}
	}
	return r
}

// sandboxMounts are the mounts below stateDir but runsc's null-netns: the
// one empty namespace its gofers share, pinned under the state root at its
// first start (runsc stacks a few when sandboxes start at once), which
// belongs to no sandbox.
func sandboxMounts(stateDir string) []string {
	var out []string
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		if strings.Contains(line, stateDir+"/") && !strings.Contains(line, "/.runsc/null-netns ") {
			out = append(out, line)
		}
	}
	return out
}

// sandboxIDPattern matches the ids the daemon logs (at debug level it logs
// every sandbox it starts, before anything is made for it).
var sandboxIDPattern = regexp.MustCompile(`id=(sb-[0-9a-f]{12})\b`)

// daemonIDs returns the ids of every sandbox the daemon whose state
// directory is stateDir has started, from its log.
func daemonIDs(stateDir string) map[string]bool {
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(stateDir), "daemon.log"))
	ids := map[string]bool{}
	for _, m := range sandboxIDPattern.FindAllSubmatch(b, -1) {
		ids[string(m[1])] = true
	}
	return ids
}

// netnsID is the sandbox id in a namespace's name, cove-<id>-<role>.
func netnsID(name string) string {
	s, ok := strings.CutPrefix(name, "cove-")
	if !ok {
		return ""
	}
	if i := strings.LastIndexByte(s, '-'); i > 0 {
		return s[:i]
	}
	return ""
}

// waitResources polls until the daemon's resources match want: teardown
// may finish a moment after the API answers.
func waitResources(t *testing.T, stateDir string, want resources) {
	t.Helper()
	var got resources
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = countResources(t, stateDir); got == want {
			return
		}
	}
	t.Fatalf("resources leaked: have %+v, want %+v", got, want)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// rawCall sends one HTTP request and returns the status and body.
func rawCall(t *testing.T, method, url string, headers map[string]string, body string) (int, []byte) {
	t.Helper()
	resp, b := callWithHeaders(t, method, url, headers, body)
	return resp.StatusCode, b
}

// callWithHeaders sends one HTTP request and returns the response (its
// body read) and the body.
func callWithHeaders(t *testing.T, method, url string, headers map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}
