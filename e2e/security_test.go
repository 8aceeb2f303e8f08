package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// TestSandboxIsolation tries, from inside a sandbox, to reach what it must
// not: the daemon's API, the host side of its own link, other sandboxes,
// the host's processes, and any route out. No packet leaves the sandbox's
// own namespaces: every address tried is on its own link or its loopback.
func TestSandboxIsolation(t *testing.T) {
	d := suite.shared
	sbs := create(t, d, apitype.CreateSandboxRequest{N: 2})
	a, b := sbs[0], sbs[1]
	t.Cleanup(func() {
		d.c.DeleteSandbox(context.Background(), a.id)
		d.c.DeleteSandbox(context.Background(), b.id)
	})
	port := d.addr[strings.LastIndexByte(d.addr, ':')+1:]

	// A marker only b serves: a must not be able to reach it.
	// Wait until it listens: under TCG on a busy host the server takes
	// seconds to start.
	execOK(t, d, b, "cd /tmp && echo secret-of-b > marker && (python3 -m http.server 8000 >/dev/null 2>&1 &) ; "+
		"for i in $(seq 300); do ss -ltn | grep -q ':8000 ' && break; sleep 0.1; done")

	probe := `import socket, sys
def tryconnect(host, port):
    s = socket.socket()
    s.settimeout(1)
    try:
        s.connect((host, port))
        s.sendall(b"GET /marker HTTP/1.0\r\n\r\n")
        return s.recv(4096).decode(errors="replace")
    except Exception as e:
        return "blocked: %s" % type(e).__name__
for host, port in [("127.0.0.1", int(sys.argv[1])), ("10.77.0.1", int(sys.argv[1])), ("10.77.0.1", 22), ("10.77.0.1", 8000), ("10.77.0.2", 8000)]:
    print(host, port, tryconnect(host, port))
`
	res, err := d.c.Exec(context.Background(), a.id, a.token, apitype.ExecRequest{Args: []string{"python3", "-c", probe, port}, TimeoutSecs: 60})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probe: %+v %v", res, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		if !strings.Contains(line, "blocked") {
			t.Errorf("sandbox reached something: %s", line)
		}
	}
	// The probe itself works: b reaches its own server.
	own := strings.Replace(probe, `for host, port in [`, `for host, port in [("127.0.0.1", 8000)] or [`, 1)
	res, err = d.c.Exec(context.Background(), b.id, b.token, apitype.ExecRequest{Args: []string{"python3", "-c", own, port}, TimeoutSecs: 60})
	if err != nil || !strings.Contains(res.Stdout, "200 OK") {
		t.Fatalf("control probe inside b did not reach b's own server: %+v %v", res, err)
	}

	// The only way out is the link's host end, where cove's resolver and
	// egress proxy judge every connection (TestNetworkDeny and the other
	// network tests); IPv6 has no route at all. Asking the routing table
	// sends nothing.
	routes := execOK(t, d, a, "ip route; ip -6 route")
	for _, r := range strings.Split(strings.TrimSpace(routes), "\n") {
		if strings.HasPrefix(r, "default") && !strings.HasPrefix(r, "default via 10.77.0.1 dev eth0") ||
			!strings.HasPrefix(r, "default") && !strings.Contains(r, "scope link") {
			t.Errorf("sandbox has a route beyond its own link and its host end: %q", r)
		}
	}
	for _, addr := range []string{"192.0.2.1", "169.254.169.254"} {
		if out := execOK(t, d, a, "ip route get "+addr+" 2>&1 || true"); !strings.Contains(out, "via 10.77.0.1 dev eth0") {
			t.Errorf("ip route get %s: %q, want via the link's host end", addr, out)
		}
	}
	// gVisor has IPv6 without a route; the VM's kernel none at all.
	if out := strings.ToLower(execOK(t, d, a, "ip -6 route get 2001:db8::1 2>&1 || true")); !strings.Contains(out, "unreachable") && !strings.Contains(out, "not supported") {
		t.Errorf("ip -6 route get 2001:db8::1: %q, want unreachable", out)
	}

	// Only the sandbox's own processes are visible, with the agent as PID 1.
	ps := execOK(t, d, a, "ps -eo pid,comm --no-headers")
	for _, bad := range []string{"runsc", "cove serve", "sshd", "systemd"} {
		if strings.Contains(ps, bad) {
			t.Errorf("sandbox sees host process %q:\n%s", bad, ps)
		}
	}
	if f := strings.Fields(ps); len(f) < 2 || f[0] != "1" || f[1] != "cove-agent" {
		t.Errorf("PID 1 is not cove-agent:\n%s", ps)
	}

	// One sandbox's token opens no other sandbox.
	status, _ := rawCall(t, http.MethodPost, d.url+"/v1/sandboxes/"+b.id+"/exec",
		map[string]string{"Authorization": "Bearer " + d.key, apitype.SandboxTokenHeader: a.token}, `{"args":["true"]}`)
	if status != http.StatusForbidden {
		t.Errorf("sandbox a's token on sandbox b: status %d, want 403", status)
	}
}

// TestStateNeedsSandboxToken: the API key alone copies no sandbox. Branch
// and snapshot, and spawning from a snapshot saved from a sandbox, need
// that sandbox's token as the data plane does; refused, they make nothing.
func TestStateNeedsSandboxToken(t *testing.T) {
	d, victim := suite.shared, newSandbox(t)
	ctx := context.Background()
	execOK(t, d, victim, "echo secret-of-victim > /work/secret")
	key := "Bearer " + d.key
	wrong := randomHex(24) // shaped like a token
	sandboxesBefore, _ := d.c.ListSandboxes(ctx)
	snapshotsBefore, _ := d.c.ListSnapshots(ctx)

	for _, route := range []struct{ path, body string }{
		{"/branch", `{"n":1}`},
		{"/snapshot", `{}`},
	} {
		for _, cred := range []struct {
			name    string
			headers map[string]string
		}{
			{"API key only", map[string]string{"Authorization": key}},
			{"a wrong token", map[string]string{"Authorization": key, apitype.SandboxTokenHeader: wrong}},
			{"a wrong token in forkd's header", map[string]string{"Authorization": key, apitype.SandboxTokenHeaderAlt: wrong}},
		} {
			status, body := rawCall(t, http.MethodPost, d.url+"/v1/sandboxes/"+victim.id+route.path, cred.headers, route.body)
			if status != http.StatusForbidden || !strings.Contains(string(body), `"code":"forbidden"`) {
				t.Errorf("%s with %s: %d %s, want 403 forbidden", route.path, cred.name, status, body)
			}
		}
		// No API key at all is a 401, as on the data plane.
		status, _ := rawCall(t, http.MethodPost, d.url+"/v1/sandboxes/"+victim.id+route.path,
			map[string]string{apitype.SandboxTokenHeader: victim.token}, route.body)
		if status != http.StatusUnauthorized {
			t.Errorf("%s without the API key: %d, want 401", route.path, status)
		}
	}
	sandboxesAfter, _ := d.c.ListSandboxes(ctx)
	snapshotsAfter, _ := d.c.ListSnapshots(ctx)
	if len(sandboxesAfter) != len(sandboxesBefore) || len(snapshotsAfter) != len(snapshotsBefore) {
		t.Fatalf("refused calls made something: sandboxes %d -> %d, snapshots %d -> %d",
			len(sandboxesBefore), len(sandboxesAfter), len(snapshotsBefore), len(snapshotsAfter))
	}

	// With the token (forkd's header name works too) branch works.
	status, body := rawCall(t, http.MethodPost, d.url+"/v1/sandboxes/"+victim.id+"/branch",
		map[string]string{"Authorization": key, apitype.SandboxTokenHeaderAlt: victim.token}, `{"n":1}`)
	if status != http.StatusCreated {
		t.Fatalf("branch with the victim's token: %d %s", status, body)
	}
	var br apitype.BranchResponse
	if err := json.Unmarshal(body, &br); err != nil || len(br.Children) != 1 {
		t.Fatalf("branch answer %s: %v", body, err)
	}
	t.Cleanup(func() { deleteSnapshotEventually(t, d, br.Tag) })
	kid := sandbox{br.Children[0].ID, br.Children[0].Token}
	t.Cleanup(func() { d.c.DeleteSandbox(context.Background(), kid.id) })
	if got := execOK(t, d, kid, "cat /work/secret"); got != "secret-of-victim\n" {
		t.Fatalf("the branch's child reads %q", got)
	}
	// The branch's snapshot holds the victim's files: spawning from it
	// takes the victim's token, not the key alone nor another sandbox's.
	for _, headers := range []map[string]string{
		{"Authorization": key},
		{"Authorization": key, apitype.SandboxTokenHeader: kid.token},
	} {
		status, body := rawCall(t, http.MethodPost, d.url+"/v1/sandboxes", headers, `{"snapshot_tag":"`+br.Tag+`"}`)
		if status != http.StatusForbidden {
			t.Errorf("spawn from the victim's snapshot without its token: %d %s, want 403", status, body)
		}
	}
	if sandboxesAfter, _ = d.c.ListSandboxes(ctx); len(sandboxesAfter) != len(sandboxesBefore)+1 {
		t.Fatalf("a branch with n=1 and refused spawns made %d sandboxes", len(sandboxesAfter)-len(sandboxesBefore))
	}
}
