package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/testnet"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// buildStreamed builds a snapshot with Accept: application/x-ndjson and
// returns the warm command's output, when each part of it arrived (since
// the call began) and the snapshot. The snapshot is deleted at the end of
// the test.
func buildStreamed(t *testing.T, d *daemon, tag, warm string, p apitype.NetworkPolicy) (string, func(s string) time.Duration, apitype.SnapshotInfo) {
	t.Helper()
	body, _ := json.Marshal(apitype.CreateSnapshotRequest{Tag: tag, Warm: warm, PoolSize: intp(0), Network: &p})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v1/snapshots", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+d.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", apitype.ContentTypeNDJSON)
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), apitype.ContentTypeNDJSON) {
		t.Fatalf("streamed build: status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	t.Cleanup(func() { deleteSnapshotEventually(t, d, tag) })
	var out strings.Builder
	type part struct {
		end int
		at  time.Duration
	}
	var parts []part
	var snap *apitype.SnapshotInfo
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l apitype.SnapshotBuildEvent
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("streamed build: line %q: %v", sc.Text(), err)
		}
		switch {
		case l.Snapshot != nil:
			snap = l.Snapshot
		case l.Error != nil:
			t.Fatalf("streamed build failed: %+v; output so far %q", *l.Error, out.String())
		case l.Output != "":
			out.WriteString(l.Output)
			parts = append(parts, part{out.Len(), time.Since(t0)})
		default:
			t.Fatalf("streamed build: line %q is none of output, snapshot, error", sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if snap == nil {
		t.Fatalf("streamed build ended without a snapshot line; output %q", out.String())
	}
	all := out.String()
	arrived := func(s string) time.Duration {
		i := strings.Index(all, s)
		if i < 0 {
			return -1
		}
		for _, p := range parts {
			if p.end >= i+len(s) {
				return p.at
			}
		}
		return -1
	}
	return all, arrived, *snap
}

// TestNetworkInheritance: a snapshot built with a policy downloads from an
// allowed test server during its warm step, whose output streams while it
// runs; the snapshot records the policy; a spawned child and a branched
// child inherit it (GET shows it, and it holds); a spawn can override it.
func TestNetworkInheritance(t *testing.T) {
	d, tn := suite.shared, suite.net
	p := apitype.NetworkPolicy{AllowDomains: []string{testnet.AllowedName}}
	tag := "net-" + randomHex(4)
	warm := "curl -fsS http://" + testnet.AllowedName + "/ | tee /work/fetched; sleep 2; echo warm-done"
	out, arrived, snap := buildStreamed(t, d, tag, warm, p)
	if !strings.Contains(out, banner(tn.Allowed)) || !strings.Contains(out, "warm-done") {
		t.Fatalf("warm output %q: want the test server's answer, then warm-done", out)
	}
	if first, last := arrived(testnet.Banner), arrived("warm-done"); last-first < time.Second {
		t.Errorf("warm output did not stream: the download's answer came at %v, warm-done at %v (2 s later in the sandbox)", first, last)
	}
	if !samePolicy(snap.Network, p) {
		t.Errorf("streamed snapshot has %+v, want %+v", snap.Network, p)
	}
	var got apitype.SnapshotInfo
	d.call(t, http.MethodGet, "/v1/snapshots/"+tag, "", nil, http.StatusOK, &got)
	if !samePolicy(got.Network, p) {
		t.Errorf("GET snapshot shows %+v, want %+v", got.Network, p)
	}

	holds := func(sb sandbox, why string) {
		t.Helper()
		if got := getNet(t, d, sb.id).Network; !samePolicy(got, p) {
			t.Errorf("%s: GET shows %+v, want %+v", why, got, p)
		}
		check(t, d, sb,
			probeCase{httpGet("http://" + testnet.AllowedName + "/"), reach, banner(tn.Allowed), why + ": the allowed name"},
			probeCase{probe{Kind: "resolve", Name: testnet.OtherName}, refused, "", why + ": a name not allowed"},
			probeCase{httpGet(webURL("http", tn.Other)), refused, "", why + ": a raw IP"},
		)
	}
	child := createNet(t, d, apitype.CreateSandboxRequest{SnapshotTag: tag}, nil)[0]
	if got := execOK(t, d, child, "cat /work/fetched"); !strings.Contains(got, banner(tn.Allowed)) {
		t.Errorf("the child's /work/fetched is %q: the warm step's download did not land in the snapshot", got)
	}
	holds(child, "spawned child")

	var br apitype.BranchResponse
	d.call(t, http.MethodPost, "/v1/sandboxes/"+child.id+"/branch", child.token, apitype.BranchRequest{N: 1}, http.StatusCreated, &br)
	t.Cleanup(func() { deleteSnapshotEventually(t, d, br.Tag) })
	if len(br.Children) != 1 {
		t.Fatalf("branch: %d children, want 1", len(br.Children))
	}
	branched := sandbox{br.Children[0].ID, br.Children[0].Token}
	t.Cleanup(func() { d.c.DeleteSandbox(context.Background(), branched.id) })
	if !samePolicy(br.Network, p) {
		t.Errorf("the branch's snapshot has %+v, want %+v", br.Network, p)
	}
	holds(branched, "branched child")

	// A spawn that gives a policy gets that one.
	override := apitype.NetworkPolicy{AllowCIDRs: []string{cidr(tn.Other)}}
	other := createNet(t, d, apitype.CreateSandboxRequest{SnapshotTag: tag}, &override)[0]
	if got := getNet(t, d, other.id).Network; !samePolicy(got, override) {
		t.Errorf("spawn with a policy: GET shows %+v, want %+v", got, override)
	}
	check(t, d, other,
		probeCase{httpGet(webURL("http", tn.Other)), reach, banner(tn.Other), "spawn's own policy"},
		probeCase{probe{Kind: "resolve", Name: testnet.AllowedName}, refused, "", "spawn's own policy: the snapshot's name"},
	)
}
