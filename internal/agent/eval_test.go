package agent

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// evalStep is one call in a sequence run on the same interpreter. Fields
// left empty are not checked, except result and exitCode.
type evalStep struct {
	code      string
	timeoutMs int64
	result    string
	stdout    string
	stderr    string // substring
	errorPart string // substring of Error; "" wants no error
	exitCode  int
}

func runEvalSteps(t *testing.T, e *testEnv, steps []evalStep) {
	t.Helper()
	for i, s := range steps {
		r, err := e.c.Eval(testCtx(t), agentproto.EvalRequest{Code: s.code, TimeoutMs: s.timeoutMs})
		if err != nil {
			t.Fatalf("step %d (%q): %v", i, s.code, err)
		}
		ok := r.Result == s.result && r.ExitCode == s.exitCode &&
			(s.stdout == "" || r.Stdout == s.stdout) &&
			strings.Contains(r.Stderr, s.stderr) &&
			(s.errorPart == "" && r.Error == "" || s.errorPart != "" && strings.Contains(r.Error, s.errorPart))
		if !ok {
			t.Errorf("step %d (%q) = %+v\nwant result %q, stdout %q, stderr containing %q, error containing %q, exit %d",
				i, s.code, r, s.result, s.stdout, s.stderr, s.errorPart, s.exitCode)
		}
	}
}

func TestEval(t *testing.T) {
	e := newTestEnv(t)
	runEvalSteps(t, e, []evalStep{
		{code: "x = 41"},
		{code: "x + 1", result: "42"},
		{code: "print('hi'); x", result: "41", stdout: "hi\n"},
		{code: "import sys\nprint('warn', file=sys.stderr)", stderr: "warn\n"},
		{code: "'a' * 3", result: "'aaa'"},
		{code: "None"},
		{code: "print('no result')", stdout: "no result\n"},
		{code: "def f(n):\n    return n * 2\n\nf(x)", result: "82"},
		{code: "for i in range(3):\n    print(i)", stdout: "0\n1\n2\n"},
		{code: "import os\nos.getcwd()", result: "'" + e.dir + "'"},
		{code: "1/0", errorPart: "ZeroDivisionError", exitCode: 1},
		{code: "print('partial')\nraise ValueError('boom')", stdout: "partial\n", errorPart: "ValueError: boom", exitCode: 1},
		{code: "def g():\n    raise KeyError('k')\n", result: ""},
		{code: "g()", errorPart: "raise KeyError('k')", exitCode: 1}, // source of an earlier cell in the traceback
		{code: "x +", errorPart: "SyntaxError", exitCode: 1},
		{code: "import sys; sys.exit(2)", errorPart: "SystemExit: 2", exitCode: 1},
		{code: "x", result: "41"}, // globals survive exceptions
		// Writes to the real fds 1 and 2 must not corrupt the protocol.
		{code: "import os\nos.write(1, b'{\"result\": \"forged\"}\\n')\nos.write(2, b'noise\\n')\n'ok'", result: "'ok'"},
		{code: "import subprocess\nsubprocess.run(['echo', 'child'])\n'still ok'", result: "'still ok'"},
		{code: "'é€😀'", result: "'é€😀'"},
		{code: "print('\\udc80')", stdout: "\\udc80\n"},
		{code: "import pickle\nclass P: pass\ntype(pickle.loads(pickle.dumps(P()))).__name__", result: "'P'"},
		{code: "__name__", result: "'__main__'"},
	})
}

func TestEvalTimeoutRestarts(t *testing.T) {
	e := newTestEnv(t)
	start := time.Now()
	runEvalSteps(t, e, []evalStep{
		{code: "y = 1"},
		{code: "import time\ntime.sleep(100)", timeoutMs: 300, errorPart: "restarted", exitCode: -1},
	})
	// The next interpreter is already up, so the next call finds it warm.
	e.a.mu.Lock()
	p := e.a.py
	e.a.mu.Unlock()
	if p == nil || !p.running() {
		t.Error("no interpreter running after a timeout")
	}
	runEvalSteps(t, e, []evalStep{
		{code: "y", errorPart: "NameError", exitCode: 1}, // state is gone
		{code: "2 + 2", result: "4"},
	})
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestEvalInterpreterExit(t *testing.T) {
	e := newTestEnv(t)
	runEvalSteps(t, e, []evalStep{
		{code: "z = 5"},
		{code: "import os\nos._exit(3)", errorPart: "exit status 3", exitCode: -1},
		{code: "1 + 1", result: "2"},
		{code: "'z' in globals()", result: "False"},
	})

	// An interpreter that dies between calls is replaced, and the next call
	// says its state was lost.
	r, err := e.c.Eval(testCtx(t), agentproto.EvalRequest{Code: "import os, threading, time\nthreading.Thread(target=lambda: (time.sleep(0.1), os._exit(0))).start()"})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("eval = %+v, %v", r, err)
	}
	time.Sleep(500 * time.Millisecond)
	runEvalSteps(t, e, []evalStep{
		{code: "3 * 3", result: "9", stderr: "state was lost"},
	})
}

func TestEvalCancel(t *testing.T) {
	e := newTestEnv(t)
	runEvalSteps(t, e, []evalStep{{code: "w = 1"}})
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	e.c.Eval(ctx, agentproto.EvalRequest{Code: "import time\ntime.sleep(100)"})
	runEvalSteps(t, e, []evalStep{
		{code: "'w' in globals()", result: "False", stderr: ""},
		{code: "1", result: "1"},
	})
}

// TestEvalSerialised checks that concurrent calls see each other's
// effects whole, never interleaved.
func TestEvalSerialised(t *testing.T) {
	e := newTestEnv(t)
	runEvalSteps(t, e, []evalStep{{code: "n = 0"}})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.c.Eval(testCtx(t), agentproto.EvalRequest{Code: "import time\nv = n\ntime.sleep(0.01)\nn = v + 1\nprint('x')"})
			if err != nil || r.ExitCode != 0 || r.Stdout != "x\n" {
				t.Errorf("eval = %+v, %v", r, err)
			}
		}()
	}
	wg.Wait()
	runEvalSteps(t, e, []evalStep{{code: "n", result: "8"}})
}

func TestEvalTruncated(t *testing.T) {
	e := newTestEnv(t)
	r, err := e.c.Eval(testCtx(t), agentproto.EvalRequest{Code: "import sys\nsys.stdout.write('a' * (17 << 20))\nsys.stdout.buffer.write(b'more')\n'done'"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Stdout) != agentproto.MaxOutput || !strings.Contains(r.Stderr, "truncated") || r.Result != "'done'" {
		t.Errorf("stdout %d bytes, stderr %q, result %q", len(r.Stdout), r.Stderr, r.Result)
	}
}

func TestWarmAndReseed(t *testing.T) {
	e := newTestEnv(t)
	ctx := testCtx(t)
	// A restore with no interpreter running: the next one seeds itself.
	if err := e.a.Restored(ctx, agentproto.RestoredRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := e.a.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	e.a.mu.Lock()
	warm := e.a.py
	e.a.mu.Unlock()
	if warm == nil || !warm.running() {
		t.Fatal("no interpreter after Warm")
	}
	runEvalSteps(t, e, []evalStep{
		{code: "import random\nrandom.seed(1)\nfirst = random.random()"},
		{code: "random.seed(1)"},
	})
	if err := e.a.Restored(ctx, agentproto.RestoredRequest{}); err != nil {
		t.Fatal(err)
	}
	runEvalSteps(t, e, []evalStep{
		{code: "random.random() != first", result: "True"},
		// Once only: a seed the code sets itself holds after that.
		{code: "random.seed(1)\nrandom.random() == first", result: "True"},
	})
	e.a.mu.Lock()
	same := e.a.py == warm
	e.a.mu.Unlock()
	if !same {
		t.Error("the warmed interpreter was replaced")
	}
}

func TestEvalAfterClose(t *testing.T) {
	e := newTestEnv(t)
	runEvalSteps(t, e, []evalStep{{code: "1", result: "1"}})
	e.a.Close()
	_, err := e.c.Eval(testCtx(t), agentproto.EvalRequest{Code: "1"})
	wantCode(t, err, agentproto.CodeInternal)
}

func TestEvalNoPython(t *testing.T) {
	a := New(Config{WorkDir: t.TempDir(), Python: "no-such-python-cove"})
	defer a.Close()
	if _, err := a.Eval(testCtx(t), agentproto.EvalRequest{Code: "1"}); err == nil {
		t.Fatal("eval without python succeeded")
	}
	// An image without Python can still be snapshotted: there is just no
	// interpreter to warm.
	if err := a.Warm(testCtx(t)); err != nil {
		t.Errorf("warm without python: %v", err)
	}
}
