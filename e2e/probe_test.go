package e2e

// Network probes run inside a sandbox, many in one exec (an exec is what
// costs under TCG): curl for HTTP and HTTPS, Python for raw TCP and UDP,
// name lookups and raw DNS queries. Every one is bounded by a short
// timeout, so a probe that is dropped rather than refused still answers.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// probe is one attempt from inside a sandbox.
type probe struct {
	Kind   string   `json:"kind"` // curl, tcp, udp, resolve, dns
	Args   []string `json:"args,omitempty"`
	Host   string   `json:"host,omitempty"`
	Port   int      `json:"port,omitempty"`
	Send   string   `json:"send,omitempty"`
	Name   string   `json:"name,omitempty"`
	Family int      `json:"family,omitempty"` // resolve: 4 or 6
}

// probeResult is what a probe saw. OK means: curl exited 0, a TCP or UDP
// echo came back, a name resolved, a DNS server answered.
type probeResult struct {
	OK     bool    `json:"ok"`
	Out    string  `json:"out"`
	Err    string  `json:"err"`
	Code   int     `json:"code"`   // curl's exit code
	Status int     `json:"status"` // HTTP status
	Rcode  int     `json:"rcode"`  // DNS
	Ms     float64 `json:"ms"`
}

// probeTimeout bounds every connection attempt of a probe, in seconds; a
// refusal must come well within it.
const probeTimeout = 3

const probeScript = `import json, socket, struct, subprocess, sys, time
T = float(sys.argv[2])

def curl(p):
    cmd = ["curl", "-sS", "--connect-timeout", str(T), "-m", str(T + 2), "-w", "\n%{http_code}"] + p["args"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    out, _, status = r.stdout.rpartition("\n")
    return {"ok": r.returncode == 0, "out": out, "err": r.stderr.strip(), "code": r.returncode,
            "status": int(status) if status.isdigit() else 0}

def tcp(p):
    s = socket.create_connection((p["host"], p["port"]), timeout=T)
    try:
        s.settimeout(T)
        want = p["send"].encode()
        s.sendall(want)
        got = b""
        while len(got) < len(want):
            b = s.recv(4096)
            if not b:
                break
            got += b
        if not got:
            return {"ok": False, "err": "closed without an answer"}
        return {"ok": got == want, "out": got.decode(errors="replace")}
    finally:
        s.close()

def udp(p):
    fam = socket.AF_INET6 if ":" in p["host"] else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    try:
        s.settimeout(T / 2)
        s.sendto(p["send"].encode(), (p["host"], p["port"]))
        b, _ = s.recvfrom(4096)
        return {"ok": True, "out": b.decode(errors="replace")}
    finally:
        s.close()

def resolve(p):
    fam = socket.AF_INET6 if p.get("family") == 6 else socket.AF_INET
    infos = socket.getaddrinfo(p["name"], 80, fam, socket.SOCK_STREAM)
    return {"ok": True, "out": " ".join(sorted({i[4][0] for i in infos}))}

def dns(p):
    qid = 0x1234
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in p["name"].split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00" + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.settimeout(T / 2)
        s.sendto(q, (p["host"], p.get("port") or 53))
        b, _ = s.recvfrom(4096)
        rid, flags, _, an = struct.unpack(">HHHH", b[:8])
        return {"ok": rid == qid, "rcode": flags & 0xF, "out": "answers=%d" % an}
    finally:
        s.close()

out = []
for p in json.loads(sys.argv[1]):
    t0 = time.monotonic()
    try:
        r = globals()[p["kind"]](p)
    except Exception as e:
        r = {"ok": False, "err": "%s: %s" % (type(e).__name__, e)}
    r["ms"] = (time.monotonic() - t0) * 1000
    out.append(r)
print(json.dumps(out))
`

// runProbes runs ps inside sb, in one exec, and returns their results in
// order.
func runProbes(t *testing.T, d *daemon, sb sandbox, ps ...probe) []probeResult {
	t.Helper()
	specs, err := json.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := d.c.Exec(ctx, sb.id, sb.token, apitype.ExecRequest{
		Args:        []string{"python3", "-c", probeScript, string(specs), strconv.Itoa(probeTimeout)},
		TimeoutSecs: float64(30 + len(ps)*2*(probeTimeout+2)),
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probes in %s: %+v %v", sb.id, res, err)
	}
	var out []probeResult
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil || len(out) != len(ps) {
		t.Fatalf("probes in %s: %v: %q", sb.id, err, res.Stdout)
	}
	return out
}

// httpGet is a curl probe of url, with more curl arguments.
func httpGet(url string, args ...string) probe {
	return probe{Kind: "curl", Args: append(args, url)}
}

func tcpEcho(addr netip.Addr, port int) probe {
	return probe{Kind: "tcp", Host: addr.String(), Port: port, Send: "echo-" + randomHex(4)}
}

func (p probe) String() string {
	switch p.Kind {
	case "curl":
		return "curl " + strings.Join(p.Args, " ")
	case "resolve":
		return fmt.Sprintf("resolve %s (IPv%d)", p.Name, max(p.Family, 4))
	case "dns":
		return fmt.Sprintf("DNS query for %s to %s", p.Name, p.Host)
	}
	return fmt.Sprintf("%s %s", p.Kind, net.JoinHostPort(p.Host, strconv.Itoa(p.Port)))
}

// expectation is what a probe must see.
type expectation int

const (
	reach    expectation = iota // it got its answer
	refused                     // it failed, and fast: refused, not left to time out
	unanswer                    // it failed, however (a dropped UDP datagram can only time out)
)

// check runs the probes in sb and checks each against its expectation;
// for a reach of an HTTP server it also wants contains in the body.
func check(t *testing.T, d *daemon, sb sandbox, cases ...probeCase) {
	t.Helper()
	ps := make([]probe, len(cases))
	for i, c := range cases {
		ps[i] = c.p
	}
	for i, r := range runProbes(t, d, sb, ps...) {
		c := cases[i]
		switch {
		case c.want == reach && !r.OK:
			t.Errorf("%s: %s: want it answered, got %+v", c.why, c.p, r)
		case c.want == reach && c.contains != "" && !strings.Contains(r.Out, c.contains):
			t.Errorf("%s: %s: answer %q lacks %q", c.why, c.p, r.Out, c.contains)
		case c.want != reach && r.OK:
			t.Errorf("%s: %s: want it to fail, it answered %q", c.why, c.p, r.Out)
		case c.want == refused && (r.Ms >= probeTimeout*1000*0.8 || r.Code == 28 || strings.Contains(r.Err, "timed out")):
			t.Errorf("%s: %s: failed only by timing out (%.0f ms, %s): want it refused at once", c.why, c.p, r.Ms, r.Err)
		}
	}
}

// probeCase is a probe, what it must see and why.
type probeCase struct {
	p        probe
	want     expectation
	contains string
	why      string
}
