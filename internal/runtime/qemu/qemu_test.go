package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestArgs(t *testing.T) {
	c := vmConfig{Dir: vmDir{path: "/s/vm1"}, Kernel: "/i/vmlinux", Initrd: "/i/initrd", Base: "/i/rootfs.ext4",
		Layers:  []string{"/s/vm1/disk-0.qcow2", "/s/vm1/disk-3.qcow2"},
		MemPath: "/snap/mem", MemShared: false, MemoryMiB: 256, CPUs: 2, Accel: "tcg", Hostname: "h", ID: "vm1",
		Incoming: true, Sandbox: true}
	a := strings.Join(c.args(), " ")
	for _, want := range []string{
		"-M microvm,isa-serial=on,rtc=on,pic=off,memory-backend=mem",
		"-accel tcg,tb-size=256 -cpu max -m 256 -smp 2",
		"cove.hostname=h cove.id=vm1",
		"memory-backend-file,id=mem,size=256M,mem-path=/snap/mem,share=off",
		"-netdev tap,id=net0,ifname=tap0,script=no,downscript=no",
		"virtio-net-device,netdev=net0,mac=02:c0:7e:00:00:02",
		"-blockdev driver=raw,node-name=base,read-only=on,cache.direct=off,cache.no-flush=on,file.drop-cache=off,file.driver=file,file.filename=/i/rootfs.ext4",
		"-blockdev driver=qcow2,node-name=root,backing=base,read-only=on,cache.direct=off,cache.no-flush=on,file.drop-cache=off,file.driver=file,file.filename=/s/vm1/disk-0.qcow2",
		"-blockdev driver=qcow2,node-name=root3,backing=root,read-only=off,cache.direct=off,cache.no-flush=on,file.drop-cache=off,file.driver=file,file.filename=/s/vm1/disk-3.qcow2",
		"-device virtio-blk-device,drive=root3",
		"-qmp unix:/s/vm1/qmp.sock,server=on,wait=off",
		"-sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-incoming defer",
	} {
		if !strings.Contains(a, want) {
			t.Errorf("command line lacks %q:\n%s", want, a)
		}
	}
	c.Accel, c.Incoming, c.Sandbox, c.MemShared = "kvm", false, false, true
	a = strings.Join(c.args(), " ")
	if !strings.Contains(a, "-accel kvm -cpu host,-arch-capabilities") || strings.Contains(a, "-incoming") ||
		strings.Contains(a, "-sandbox") || !strings.Contains(a, "share=on") {
		t.Errorf("kvm, shared, no incoming, no sandbox:\n%s", a)
	}
}

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

func TestContAfterMigration(t *testing.T) {
	sock, cmds, _ := fakeQMP(t, map[string]string{
		"cont": `"error": {"class": "GenericError", "desc": "Migration is not finalized yet"}`,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	q, err := dialQMP(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	conts := make(chan int)
	go func() {
		n := 0
		for c := range cmds {
			if c == "cont" {
				n++
			}
		}
		conts <- n
	}()
	// Refused until the deadline: retried, then an error.
	if err := contAfterMigration(ctx, q); err == nil {
		t.Fatal("contAfterMigration succeeded against a QEMU that refuses cont")
	}
	q.Close()
	if n := <-conts; n < 2 {
		t.Fatalf("cont sent %d times, want retries", n)
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

func TestLayerNames(t *testing.T) {
	for _, tc := range []struct {
		chain      []string
		next       int
		activeNode string
	}{
		{[]string{"disk-0.qcow2"}, 1, "root"},
		{[]string{"disk-0.qcow2", "disk-1.qcow2"}, 2, "root1"},
		// A flattened chain skips numbers: the next stays above them all.
		{[]string{"disk-0.qcow2", "disk-7.qcow2"}, 8, "root7"},
		{[]string{"disk-2.qcow2", "disk-10.qcow2"}, 11, "root10"},
	} {
		if got := nextLayer(tc.chain); got != tc.next {
			t.Errorf("nextLayer(%v) = %d, want %d", tc.chain, got, tc.next)
		}
		if got := activeNode(&vmState{Layers: tc.chain}); got != tc.activeNode {
			t.Errorf("activeNode(%v) = %q, want %q", tc.chain, got, tc.activeNode)
		}
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

func TestListAndDestroyIdempotent(t *testing.T) {
	dir := t.TempDir()
	r := &Runtime{cfg: Config{Dir: dir}, uid: -1, gid: -1}
	r.log = discardLogger()
	for _, n := range []string{"sb-1", "sb-2", ".tmp", "BAD"} {
		os.Mkdir(filepath.Join(dir, n), 0o700)
	}
	ids, err := r.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"sb-1", "sb-2"}) {
		t.Fatalf("List = %v", ids)
	}
	if os.Geteuid() != 0 {
		return // Destroy runs ip netns only for namespaces that exist
	}
	for range 2 {
		if err := r.Destroy(context.Background(), "sb-1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Destroy(context.Background(), "never-was"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sb-1")); !os.IsNotExist(err) {
		t.Fatalf("sb-1 still there: %v", err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestMajorVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1) (tcg)", 10},
		{"QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3) (kvm)", 7},
		{"unknown", 0},
		{"QEMU emulator version x.y", 0},
	} {
		if got := majorVersion(tc.in); got != tc.want {
			t.Errorf("majorVersion(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
