package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeQMP serves one QMP connection: the greeting, then canned replies
// by command, with events interleaved; it records commands and any file
// descriptor passed along.
func fakeQMP(t *testing.T, replies map[string]string) (string, chan string, chan int) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	cmds, fds := make(chan string, 100), make(chan int, 10)
	go func() {
		defer close(cmds)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		uc := c.(*net.UnixConn)
		w := bufio.NewWriter(c)
		w.WriteString(`{"QMP": {"version": {"qemu": {"major": 7}}, "capabilities": []}}` + "\n")
		w.Flush()
		buf, oob := make([]byte, 4096), make([]byte, 128)
		var pending string
		for {
			n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
			if err != nil {
				return
			}
			if oobn > 0 {
				msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
				for _, m := range msgs {
					if rights, err := unix.ParseUnixRights(&m); err == nil {
						for _, fd := range rights {
							fds <- fd
						}
					}
				}
			}
			pending += string(buf[:n])
			for {
				line, rest, ok := strings.Cut(pending, "\n")
				if !ok {
					break
				}
				pending = rest
				var req struct {
					Execute string          `json:"execute"`
					ID      json.RawMessage `json:"id"`
				}
				json.Unmarshal([]byte(line), &req)
				cmds <- req.Execute
				w.WriteString(`{"event": "STOP", "timestamp": {"seconds": 1}}` + "\n")
				if req.Execute == "query-migrate" {
					w.WriteString(`{"event": "MIGRATION", "data": {"status": "completed"}, "timestamp": {"seconds": 1, "microseconds": 5000}}` + "\n")
				}
				if req.Execute == "cont" {
					w.WriteString(`{"event": "RESUME", "timestamp": {"seconds": 1, "microseconds": 7500}}` + "\n")
				}
				ret, ok := replies[req.Execute]
				if !ok {
					ret = `"return": {}`
				}
				w.WriteString(`{` + ret + `, "id": ` + string(req.ID) + "}\n")
				w.Flush()
			}
		}
	}()
	return sock, cmds, fds
}

func TestQMP(t *testing.T) {
	sock, cmds, fds := fakeQMP(t, map[string]string{
		"query-migrate": `"return": {"status": "completed", "downtime": 3}`,
		"cont":          `"error": {"class": "GenericError", "desc": "nope"}`,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q, err := dialQMP(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	st, err := q.waitMigration(ctx, time.Millisecond, "completed")
	if err != nil || st.Status != "completed" || st.Downtime != 3 {
		t.Fatalf("waitMigration = %+v, %v", st, err)
	}
	err = q.Execute(ctx, "cont", nil, nil)
	var qe *qmpError
	if err == nil || !strings.Contains(err.Error(), "nope") || !errorsAs(err, &qe) {
		t.Fatalf("cont: %v", err)
	}
	if at, ok := q.lastEvent("MIGRATION:completed"); !ok || at.Sub(time.Unix(1, 0)) != 5*time.Millisecond {
		t.Fatalf("MIGRATION completed event at %v, %v", at, ok)
	}
	// The pause is QEMU's STOP to its RESUME, whatever the caller saw.
	if got := pausedFor(q, time.Now().Add(-time.Hour)); got != 7500*time.Microsecond {
		t.Fatalf("pausedFor = %v, want 7.5ms", got)
	}
	f, err := os.CreateTemp(t.TempDir(), "state")
	if err != nil {
		t.Fatal(err)
	}
	if err := q.passFD(ctx, "state", f); err != nil {
		t.Fatal(err)
	}
	select {
	case fd := <-fds:
		unix.Close(fd)
	case <-time.After(2 * time.Second):
		t.Fatal("no file descriptor arrived with getfd")
	}
	var got []string
	for len(cmds) > 0 {
		got = append(got, <-cmds)
	}
	if want := []string{"qmp_capabilities", "query-migrate", "cont", "getfd"}; !slices.Equal(got, want) {
		t.Fatalf("commands %v, want %v", got, want)
	}
}

// TestAwaitEvent waits for an event that arrives in two pieces, the first
// before a deadline cuts the wait short: the next wait still reads it whole.
func TestAwaitEvent(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	second := make(chan struct{})
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte(`{"QMP": {}}` + "\n"))
		bufio.NewReader(c).ReadBytes('\n') // qmp_capabilities
		c.Write([]byte(`{"return": {}, "id": "1"}` + "\n" + `{"event": "MIGRATION", "data": {"sta`))
		<-second
		c.Write([]byte(`tus": "completed"}, "timestamp": {"seconds": 2}}` + "\n"))
		time.Sleep(time.Second)
	}()
	ctx := context.Background()
	q, err := dialQMP(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := q.awaitEvent(short, "MIGRATION:completed"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first wait: %v", err)
	}
	close(second)
	ev, err := q.awaitEvent(ctx, "MIGRATION:failed", "MIGRATION:completed")
	if err != nil || ev != "MIGRATION:completed" {
		t.Fatalf("second wait = %q, %v", ev, err)
	}
	if at, _ := q.lastEvent(ev); !at.Equal(time.Unix(2, 0)) {
		t.Fatalf("event time %v", at)
	}
}

func TestQMPTimeout(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // accepts and never greets: a wedged QEMU
		c, err := l.Accept()
		if err == nil {
			time.Sleep(3 * time.Second)
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if _, err := dialQMP(ctx, sock); err == nil {
		t.Fatal("dial of a silent QMP socket succeeded")
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("a silent QMP socket held the caller %v", d)
	}
}

func errorsAs(err error, target **qmpError) bool {
	e, ok := err.(*qmpError)
	if ok {
		*target = e
	}
	return ok
}
