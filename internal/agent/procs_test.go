package agent

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

func TestRingWrapsAndIndexes(t *testing.T) {
	r, err := newRing(filepath.Join(t.TempDir(), "ring"), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	r.append(agentproto.Stdout, []byte("abc"))
	r.append(agentproto.Stderr, []byte("DE"))
	r.append(agentproto.Stdout, []byte("fgh"))
	for _, tc := range []struct {
		offset   int64
		limit    int
		want     string // stream letter and data per chunk: o:abc e:DE
		start    int64
		lost     int64
		segsLeft int
	}{
		{0, 100, "o:abc e:DE o:fgh", 0, 0, 3},
		{2, 2, "o:c e:D", 2, 0, 3},
		{8, 10, "", 8, 0, 3},
		{99, 10, "", 8, 0, 3},
	} {
		chunks, start, lost, err := r.read(tc.offset, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := describe(chunks); got != tc.want || start != tc.start || lost != tc.lost {
			t.Errorf("read(%d, %d) = %q from %d lost %d, want %q from %d lost %d", tc.offset, tc.limit, got, start, lost, tc.want, tc.start, tc.lost)
		}
	}
	// Wrap: 4 more bytes push the first 4 out.
	r.append(agentproto.Stderr, []byte("IJKL"))
	chunks, start, lost, err := r.read(0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := describe(chunks), "e:E o:fgh e:IJKL"; got != want || start != 4 || lost != 4 {
		t.Errorf("after the wrap read = %q from %d lost %d, want %q from 4 lost 4", got, start, lost, want)
	}
	if len(r.segs) != 3 {
		t.Errorf("index holds %d segments, want 3 (the first wholly gone)", len(r.segs))
	}
	// A write larger than the ring keeps its end.
	r.append(agentproto.Stdout, []byte("0123456789"))
	chunks, start, _, _ = r.read(0, 100)
	if got := describe(chunks); got != "o:23456789" || start != 14 {
		t.Errorf("after an oversized write read = %q from %d, want o:23456789 from 14", got, start)
	}
}

func describe(chunks []chunk) string {
	var parts []string
	for _, c := range chunks {
		parts = append(parts, agentproto.StreamName(c.stream)[3:4]+":"+string(c.data))
	}
	return strings.Join(parts, " ")
}

// readAll reads a process's output records to the end.
func readAll(t *testing.T, st *agentproto.Stream) (out string, last agentproto.ProcMark) {
	t.Helper()
	defer st.Close()
	var b bytes.Buffer
	for {
		rec, err := st.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch rec.Kind {
		case agentproto.RecordChunk:
			b.Write(rec.Data)
		case agentproto.RecordJSON:
			if err := rec.Decode(&last); err != nil {
				t.Fatal(err)
			}
		case agentproto.RecordEnd:
			return b.String(), last
		}
	}
}

func TestProcLifecycle(t *testing.T) {
	e := newTestEnv(t)
	ctx := testCtx(t)
	info, err := e.c.ProcStart(ctx, agentproto.ProcStartRequest{ExecRequest: agentproto.ExecRequest{Args: []string{"cat"}}, Tag: "cat"})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Running || info.Pid == 0 || !info.StdinOpen {
		t.Fatalf("started %+v, want running with stdin open", info)
	}
	if _, err := e.c.ProcStart(ctx, agentproto.ProcStartRequest{ExecRequest: agentproto.ExecRequest{Args: []string{"cat"}}, Tag: "cat"}); agentproto.CodeOf(err) != agentproto.CodeState {
		t.Errorf("a second running tag cat: %v, want code %s", err, agentproto.CodeState)
	}
	// A follow opened before any input sees what arrives after.
	st, mark, err := e.c.ProcOutput(ctx, agentproto.ProcOutputRequest{ProcRef: agentproto.ProcRef{Tag: "cat"}, Follow: true})
	if err != nil || mark.Offset != 0 {
		t.Fatalf("follow: %v at %d", err, mark.Offset)
	}
	for _, piece := range []string{"one ", "two ", "three"} {
		if _, err := e.c.ProcStdin(ctx, agentproto.ProcStdinRequest{ProcRef: agentproto.ProcRef{Pid: info.Pid}}, strings.NewReader(piece)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := e.c.ProcStdin(ctx, agentproto.ProcStdinRequest{ProcRef: agentproto.ProcRef{Pid: info.Pid}, Close: true}, strings.NewReader(""))
	if err != nil || !res.Closed {
		t.Fatalf("close stdin: %+v %v", res, err)
	}
	out, last := readAll(t, st)
	if out != "one two three" || last.Exit == nil || last.Exit.ExitCode != 0 || last.Offset != 13 {
		t.Errorf("followed %q, last %+v; want the pieces and exit 0 at 13", out, last)
	}
	if _, err := e.c.ProcStdin(ctx, agentproto.ProcStdinRequest{ProcRef: agentproto.ProcRef{Pid: info.Pid}}, strings.NewReader("x")); agentproto.CodeOf(err) != agentproto.CodeState {
		t.Errorf("stdin after close: %v, want code %s", err, agentproto.CodeState)
	}
	if _, err := e.c.ProcSignal(ctx, agentproto.ProcSignalRequest{ProcRef: agentproto.ProcRef{Pid: info.Pid}, Signal: "TERM"}); agentproto.CodeOf(err) != agentproto.CodeState {
		t.Errorf("signal after exit: %v, want code %s", err, agentproto.CodeState)
	}
	if _, err := e.c.ProcGet(ctx, agentproto.ProcRef{Pid: 1 << 30}); agentproto.CodeOf(err) != agentproto.CodeNoProcess {
		t.Errorf("unknown pid: %v, want code %s", err, agentproto.CodeNoProcess)
	}
	// A poll from an offset gets the rest.
	st, mark, err = e.c.ProcOutput(ctx, agentproto.ProcOutputRequest{ProcRef: agentproto.ProcRef{Tag: "cat"}, Offset: 4, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if out, last := readAll(t, st); out != "two" || last.Offset != 7 || last.Exit != nil {
		t.Errorf("poll 4+3 = %q, last %+v; want two, next 7, no exit yet", out, last)
	}
}

func TestProcSignalAndStreams(t *testing.T) {
	e := newTestEnv(t)
	ctx := testCtx(t)
	info, err := e.c.ProcStart(ctx, agentproto.ProcStartRequest{ExecRequest: agentproto.ExecRequest{
		Shell: "echo out; read x; echo err >&2; exec sleep 60"}})
	if err != nil {
		t.Fatal(err)
	}
	ref := agentproto.ProcRef{Pid: info.Pid}
	// The two streams are two pipes, ordered as the agent reads them:
	// stderr is written only once stdout's line is in.
	awaitSize := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			got, err := e.c.ProcGet(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			if got.OutputSize == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("output size %d, want %d", got.OutputSize, n)
			}
		}
	}
	awaitSize(4)
	if _, err := e.c.ProcStdin(ctx, agentproto.ProcStdinRequest{ProcRef: ref}, strings.NewReader("go\n")); err != nil {
		t.Fatal(err)
	}
	awaitSize(8)
	if _, err := e.c.ProcSignal(ctx, agentproto.ProcSignalRequest{ProcRef: ref, Signal: "bogus"}); agentproto.CodeOf(err) != agentproto.CodeInvalid {
		t.Errorf("bogus signal: %v, want invalid", err)
	}
	if _, err := e.c.ProcSignal(ctx, agentproto.ProcSignalRequest{ProcRef: ref, Signal: "SIGTERM"}); err != nil {
		t.Fatal(err)
	}
	st, _, err := e.c.ProcOutput(ctx, agentproto.ProcOutputRequest{ProcRef: ref, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var streams []string
	var last agentproto.ProcMark
	for done := false; !done; {
		rec, err := st.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch rec.Kind {
		case agentproto.RecordChunk:
			streams = append(streams, agentproto.StreamName(rec.Stream)+"="+strings.TrimSpace(string(rec.Data)))
		case agentproto.RecordJSON:
			rec.Decode(&last)
		case agentproto.RecordEnd:
			done = true
		}
	}
	if strings.Join(streams, ",") != "stdout=out,stderr=err" {
		t.Errorf("chunks %v, want stdout=out then stderr=err", streams)
	}
	if last.Exit == nil || last.Exit.Signal != "SIGTERM" || last.Exit.ExitCode != -1 {
		t.Errorf("exit %+v, want SIGTERM", last.Exit)
	}
	list, err := e.c.ProcList(ctx, agentproto.ProcListRequest{All: true})
	if err != nil || len(list.Procs) == 0 || !list.Procs[0].Cove || list.Procs[0].Running {
		t.Errorf("list %+v %v: want the exited process first", list, err)
	}
}

// TestProcFollowCancel: a host that closes a follow frees the agent's
// side, and a host gone mid-stdin does not leave the copy waiting.
func TestProcFollowCancel(t *testing.T) {
	e := newTestEnv(t)
	ctx := testCtx(t)
	info, err := e.c.ProcStart(ctx, agentproto.ProcStartRequest{ExecRequest: agentproto.ExecRequest{Args: []string{"sleep", "60"}}})
	if err != nil {
		t.Fatal(err)
	}
	ref := agentproto.ProcRef{Pid: info.Pid}
	fctx, cancel := context.WithCancel(ctx)
	st, _, err := e.c.ProcOutput(fctx, agentproto.ProcOutputRequest{ProcRef: ref, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := st.Next(); err == nil {
		t.Error("a canceled follow still reads records")
	}
	// sleep never reads its stdin: a large write blocks until the call is
	// canceled, and a later call still works.
	sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel()
	_, err = e.c.ProcStdin(sctx, agentproto.ProcStdinRequest{ProcRef: ref}, io.LimitReader(zeros{}, 8<<20))
	if err == nil {
		t.Fatal("a write of 8 MiB to a process that does not read succeeded")
	}
	if _, err := e.c.ProcSignal(ctx, agentproto.ProcSignalRequest{ProcRef: ref, Signal: "9"}); err != nil {
		t.Fatal(err)
	}
	e.a.closeProcs()
	if ents, _ := os.ReadDir(e.a.procTable().dir); len(ents) != 0 {
		t.Errorf("rings left after close: %v", ents)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestProcOutputLost: a reader from an offset the ring wrapped past gets
// the oldest byte kept and is told how many it lost.
func TestProcOutputLost(t *testing.T) {
	e := newTestEnv(t)
	ctx := testCtx(t)
	info, err := e.c.ProcStart(ctx, agentproto.ProcStartRequest{ExecRequest: agentproto.ExecRequest{
		Shell: "head -c 10000 /dev/zero | tr '\\0' a; printf end"}, OutputLimit: agentproto.MinOutputLimit})
	if err != nil {
		t.Fatal(err)
	}
	st, mark, err := e.c.ProcOutput(ctx, agentproto.ProcOutputRequest{ProcRef: agentproto.ProcRef{Pid: info.Pid}, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	out, last := readAll(t, st)
	if last.Exit == nil || last.Offset != 10003 || !strings.HasSuffix(out, "aend") {
		t.Fatalf("followed %d bytes from %d, last %+v", len(out), mark.Offset, last)
	}
	st, mark, err = e.c.ProcOutput(ctx, agentproto.ProcOutputRequest{ProcRef: agentproto.ProcRef{Pid: info.Pid}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ = readAll(t, st)
	if want := int64(10003 - agentproto.MinOutputLimit); mark.Lost != want || mark.Offset != want || len(out) != agentproto.MinOutputLimit {
		t.Errorf("read from 0: lost %d, starting at %d, %d bytes; want %d lost and the last %d bytes", mark.Lost, mark.Offset, len(out), want, agentproto.MinOutputLimit)
	}
}
