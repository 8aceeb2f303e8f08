package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// qmpTimeout bounds a QMP call whose context has no earlier deadline.
const qmpTimeout = 15 * time.Second

// qmp is a QEMU Machine Protocol client: one synchronous command at a
// time. Of the events it reads, it keeps when each one last came.
type qmp struct {
	mu      sync.Mutex
	conn    *net.UnixConn
	r       *bufio.Reader
	id      int
	events  map[string]time.Time // event name -> QEMU's timestamp of its last one
	partial []byte               // a line cut short by a deadline
}

// qmpTimestamp is an event's time as QEMU stamped it when it happened.
type qmpTimestamp struct {
	Seconds      int64 `json:"seconds"`
	Microseconds int64 `json:"microseconds"`
}

// qmpError is an error QEMU returned for a command.
type qmpError struct {
	Cmd   string
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *qmpError) Error() string { return fmt.Sprintf("qmp %s: %s: %s", e.Cmd, e.Class, e.Desc) }

// dialQMP connects to a QMP socket and leaves capabilities negotiation.
func dialQMP(ctx context.Context, path string) (*qmp, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	q := &qmp{conn: c.(*net.UnixConn), r: bufio.NewReaderSize(c, 64<<10)}
	q.setDeadline(ctx)
	var greet struct {
		QMP json.RawMessage `json:"QMP"`
	}
	line, err := q.r.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &greet)
	}
	if err == nil && greet.QMP == nil {
		err = fmt.Errorf("not a QMP greeting: %.100s", line)
	}
	if err == nil {
		err = q.Execute(ctx, "qmp_capabilities", nil, nil)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("qmp %s: %w", path, err)
	}
	return q, nil
}

func (q *qmp) setDeadline(ctx context.Context) {
	dl, ok := ctx.Deadline()
	if !ok || time.Until(dl) > qmpTimeout {
		dl = time.Now().Add(qmpTimeout)
	}
	q.conn.SetDeadline(dl)
}

// Close closes the connection.
func (q *qmp) Close() error { return q.conn.Close() }

// Execute runs cmd with args (nil for none) and decodes its return value
// into out (nil to discard it).
func (q *qmp) Execute(ctx context.Context, cmd string, args, out any) error {
	return q.execute(ctx, cmd, args, out, -1)
}

// ExecuteFD runs cmd passing the file descriptor fd along (SCM_RIGHTS), as
// getfd and add-fd want.
func (q *qmp) ExecuteFD(ctx context.Context, cmd string, args any, fd int) error {
	return q.execute(ctx, cmd, args, nil, fd)
}

func (q *qmp) execute(ctx context.Context, cmd string, args, out any, fd int) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.setDeadline(ctx)
	q.id++
	id := strconv.Itoa(q.id)
	req := map[string]any{"execute": cmd, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if fd >= 0 {
		if _, _, err := q.conn.WriteMsgUnix(b, unix.UnixRights(fd), nil); err != nil {
			return fmt.Errorf("qmp %s: %w", cmd, err)
		}
	} else if _, err := q.conn.Write(b); err != nil {
		return fmt.Errorf("qmp %s: %w", cmd, err)
	}
	for {
		m, err := q.next()
		if err != nil {
			return fmt.Errorf("qmp %s: %w", cmd, deadlineErr(ctx, err))
		}
		if m.Event != "" || string(m.ID) != strconv.Quote(id) {
			continue
		}
		if m.Error != nil {
			m.Error.Cmd = cmd
			return m.Error
		}
		if out != nil && m.Return != nil {
			return json.Unmarshal(m.Return, out)
		}
		return nil
	}
}

// deadlineErr is ctx's error for a read that timed out at ctx's deadline
// (which the connection's deadline is, unless later than qmpTimeout).
func deadlineErr(ctx context.Context, err error) error {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

// qmpMessage is a line from QEMU: a command's reply or an event.
type qmpMessage struct {
	ID     json.RawMessage `json:"id"`
	Return json.RawMessage `json:"return"`
	Error  *qmpError       `json:"error"`
	Event  string          `json:"event"`
	When   qmpTimestamp    `json:"timestamp"`
	Data   struct {
		Status string `json:"status"`
	} `json:"data"`
}

// next reads QEMU's next message and notes when an event came. A read cut
// short by the deadline keeps what it read for the next one.
func (q *qmp) next() (qmpMessage, error) {
	var m qmpMessage
	line, err := q.r.ReadBytes('\n')
	if err != nil {
		q.partial = append(q.partial, line...)
		return m, err
	}
	if len(q.partial) > 0 {
		line = append(q.partial, line...)
		q.partial = nil
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return m, fmt.Errorf("bad message %.200q: %w", line, err)
	}
	if m.Event != "" {
		if q.events == nil {
			q.events = make(map[string]time.Time)
		}
		name := m.Event
		if name == "MIGRATION" {
			name += ":" + m.Data.Status
		}
		q.events[name] = time.Unix(m.When.Seconds, m.When.Microseconds*1000)
	}
	return m, nil
}

// awaitEvent waits until QEMU has sent one of the events named (as
// lastEvent names them) on this connection and returns which.
func (q *qmp) awaitEvent(ctx context.Context, names ...string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.setDeadline(ctx)
	for {
		for _, n := range names {
			if _, ok := q.events[n]; ok {
				return n, nil
			}
		}
		if _, err := q.next(); err != nil {
			return "", fmt.Errorf("qmp: waiting for %v: %w", names, deadlineErr(ctx, err))
		}
	}
}

// lastEvent reports when QEMU last sent event name on this connection,
// as of the replies read so far. A MIGRATION event is named for its
// status too: "MIGRATION:completed".
func (q *qmp) lastEvent(name string) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	t, ok := q.events[name]
	return t, ok
}

// migrationStatus is the part of query-migrate the runtime reads.
// blockInfo is an entry of QEMU's query-block answer.
type blockInfo struct {
	Inserted *struct {
		NodeName string `json:"node-name"`
		Depth    int    `json:"backing_file_depth"`
	} `json:"inserted"`
}

type migrationStatus struct {
	Status    string `json:"status"`
	ErrorDesc string `json:"error-desc"`
	Downtime  int64  `json:"downtime"`
	TotalTime int64  `json:"total-time"`
	SetupTime int64  `json:"setup-time"`
	RAM       *struct {
		Transferred int64 `json:"transferred"`
	} `json:"ram"`
}

// waitMigration polls query-migrate until the migration reaches one of
// the wanted states, fails, or ctx ends. It polls ever less often, up to
// every maxDelay: what a VM waits for, stopped or not yet started, is
// polled often, so that the wait ends soon after the migration does.
func (q *qmp) waitMigration(ctx context.Context, maxDelay time.Duration, want ...string) (migrationStatus, error) {
	delay := min(250*time.Microsecond, maxDelay)
	for {
		var st migrationStatus
		if err := q.Execute(ctx, "query-migrate", nil, &st); err != nil {
			return st, err
		}
		for _, w := range want {
			if st.Status == w {
				return st, nil
			}
		}
		switch st.Status {
		case "failed", "cancelled":
			return st, fmt.Errorf("migration %s: %s", st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("migration still %q: %w", st.Status, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, maxDelay)
	}
}

// setCaps sets migration capabilities: they are sticky, so every one the
// runtime uses is always set explicitly.
func (q *qmp) setCaps(ctx context.Context, caps map[string]bool) error {
	var list []map[string]any
	for k, v := range caps {
		list = append(list, map[string]any{"capability": k, "state": v})
	}
	return q.Execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": list}, nil)
}

// passFD hands f to QEMU under name (QMP getfd).
func (q *qmp) passFD(ctx context.Context, name string, f *os.File) error {
	return q.ExecuteFD(ctx, "getfd", map[string]any{"fdname": name}, int(f.Fd()))
}
