package agentproto

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// fakePTY echoes what is typed in upper case, records control calls and
// ends with code 7 when it reads "q".
type fakePTY struct {
	out    chan []byte
	mu     sync.Mutex
	ctrl   []string
	closed chan struct{}
	once   sync.Once
}

func (f *fakePTY) Read(p []byte) (int, error) {
	select {
	case b, ok := <-f.out:
		if !ok {
			return 0, io.EOF
		}
		return copy(p, b), nil
	case <-f.closed:
		return 0, io.ErrClosedPipe
	}
}

func (f *fakePTY) Write(p []byte) (int, error) {
	if string(p) == "q" {
		close(f.out)
		return 1, nil
	}
	b := make([]byte, len(p))
	for i, c := range p {
		b[i] = c &^ 0x20
	}
	f.out <- b
	return len(p), nil
}

func (f *fakePTY) Resize(cols, rows uint16) error {
	f.mu.Lock()
	f.ctrl = append(f.ctrl, "resize")
	f.mu.Unlock()
	f.out <- []byte{byte(cols), byte(rows)}
	return nil
}

func (f *fakePTY) Signal(sig unix.Signal) error {
	f.out <- []byte(SignalName(sig))
	return nil
}

func (f *fakePTY) Exit() PTYExit { return PTYExit{ExitCode: 7} }
func (f *fakePTY) Close() error  { f.once.Do(func() { close(f.closed) }); return nil }

type ptyStub struct {
	stubHandler
	last *fakePTY
}

func (h *ptyStub) StartPTY(_ context.Context, req PTYRequest) (PTY, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	h.last = &fakePTY{out: make(chan []byte, 8), closed: make(chan struct{})}
	return h.last, nil
}

func (stubHandler) StartPTY(context.Context, PTYRequest) (PTY, error) {
	return nil, Errorf(CodeInvalid, "no terminals here")
}

func TestPTYStream(t *testing.T) {
	h := &ptyStub{}
	host, guest := net.Pipe()
	go ServeConn(context.Background(), guest, h)
	c, err := NewClient(host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := boundedCtx(t)
	if _, err := c.OpenPTY(ctx, PTYRequest{Cols: 0, Rows: 1}); CodeOf(err) != CodeInvalid {
		t.Fatalf("a zero size: %v, want invalid", err)
	}
	p, err := c.OpenPTY(ctx, PTYRequest{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	read := func(want string) {
		t.Helper()
		b := make([]byte, 64)
		n, err := p.Read(b)
		if err != nil || string(b[:n]) != want {
			t.Fatalf("read %q, %v; want %q", b[:n], err, want)
		}
	}
	p.Write([]byte("abc"))
	read("ABC")
	p.Control(PTYControl{Type: PTYResize, Cols: 9, Rows: 8})
	read("\x09\x08")
	p.Control(PTYControl{Type: PTYResize, Cols: 0, Rows: 8}) // refused, ignored
	p.Control(PTYControl{Type: "bogus"})
	p.Control(PTYControl{Type: PTYSignal, Signal: "int"})
	read("SIGINT")
	p.Write([]byte("q"))
	if n, err := p.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("after the end: %d, %v; want io.EOF", n, err)
	}
	if ex, ok := p.Exit(); !ok || ex.ExitCode != 7 {
		t.Errorf("exit %+v, %v", ex, ok)
	}
	p.Close()
	select {
	case <-h.last.closed:
	case <-ctx.Done():
		t.Fatal("the terminal was not closed")
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]unix.Signal{"INT": unix.SIGINT, "sigterm": unix.SIGTERM, "SIGKILL": unix.SIGKILL, " hup ": unix.SIGHUP} {
		if got, err := ParseSignal(in); err != nil || got != want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "SIG", "NOPE", "9"} {
		if _, err := ParseSignal(in); CodeOf(err) != CodeInvalid {
			t.Errorf("ParseSignal(%q): %v, want invalid", in, err)
		}
	}
}
