package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/store"
)

// Bounds of a sandbox's labels.
const (
	MaxLabels      = 64
	MaxLabelKey    = 63
	MaxLabelValue  = 256
	labelKeyDigits = "abcdefghijklmnopqrstuvwxyz0123456789._/-"
)

// RootUser is the account commands run as unless a call or the sandbox
// names another.
const RootUser = "root"

// ValidateLabels checks a sandbox's labels against the bounds above.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return invalidf("%d labels, over the limit of %d", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if err := checkLabelKey(k); err != nil {
			return err
		}
		if len(v) > MaxLabelValue {
			return invalidf("label %s: the value is %d bytes, over the limit of %d", k, len(v), MaxLabelValue)
		}
	}
	return nil
}

func checkLabelKey(k string) error {
	if k == "" || len(k) > MaxLabelKey {
		return invalidf("label key %.80q must be 1 to %d characters", k, MaxLabelKey)
	}
	if i := strings.IndexFunc(k, func(r rune) bool { return !strings.ContainsRune(labelKeyDigits, r) }); i >= 0 {
		return invalidf("label key %.80q has %q: keys are lower-case letters, digits and . _ / -", k, k[i])
	}
	return nil
}

// ParseLabelFilter reads filters of the form key=value, as GET
// /v1/sandboxes?label=k=v takes them; a sandbox matches when it has every
// one.
func ParseLabelFilter(filters []string) (map[string]string, error) {
	out := make(map[string]string, len(filters))
	for _, f := range filters {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, invalidf("label filter %.80q is not key=value", f)
		}
		if err := checkLabelKey(k); err != nil {
			return nil, err
		}
		if old, dup := out[k]; dup && old != v {
			return nil, invalidf("label filter names %s twice, with different values", k)
		}
		out[k] = v
	}
	return out, nil
}

// MatchLabels reports whether labels has every key of filter with its value.
func MatchLabels(labels, filter map[string]string) bool {
	for k, v := range filter {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// metaFor is what sandboxes made by o record: o's labels, user, env and
// cwd where it gives them, else inherited's (a snapshot's, for its
// children).
func metaFor(o CreateOptions, inherited store.Meta) (store.Meta, error) {
	m := inherited
	if o.Labels != nil {
		if err := ValidateLabels(o.Labels); err != nil {
			return m, err
		}
		m.LabelsJSON = encodeLabels(o.Labels)
	}
	if o.User != "" {
		if err := agentproto.CheckUser(o.User); err != nil {
			return m, mapErr(err)
		}
		m.User = o.User
		if o.User == RootUser {
			m.User = ""
		}
	}
	if err := setRunEnv(&m, o.Env, o.Cwd); err != nil {
		return m, err
	}
	return m, nil
}

func encodeLabels(l map[string]string) string {
	if len(l) == 0 {
		return ""
	}
	b, err := json.Marshal(l)
	if err != nil {
		panic("sandbox: marshal labels: " + err.Error()) // plain data; cannot fail
	}
	return string(b)
}

// decodeLabels reads stored labels; ones that do not decode are none.
func decodeLabels(v string) map[string]string {
	var l map[string]string
	if v != "" {
		_ = json.Unmarshal([]byte(v), &l)
	}
	return l
}

// userOr is the user a call runs as: its own, else the sandbox's default.
func (b *box) userOr(user string) string {
	if user != "" {
		return user
	}
	return b.rec.User // set before the sandbox is handed out, never changed
}

// setMeta gives b the labels and default user of the call that hands it
// out (a pooled sandbox was restored with its snapshot's).
func (b *box) setMeta(m store.Meta) {
	b.mu.Lock()
	b.rec.Meta = m
	b.mu.Unlock()
}

// checkUser makes sure a sandbox's default user is one of its accounts, so
// that a create naming an unknown one fails whole rather than every call
// after it. It reads /etc/passwd rather than run a command.
func checkUser(ctx context.Context, a *agentproto.Client, user string) error {
	if user == "" {
		return nil
	}
	if a == nil {
		return fmt.Errorf("%w: the sandbox's agent is not connected", ErrUnavailable)
	}
	_, rc, err := a.Get(ctx, agentproto.GetRequest{Path: "/etc/passwd"})
	if err != nil {
		return fmt.Errorf("read the sandbox's accounts: %w", mapErr(err))
	}
	defer rc.Close()
	sc := bufio.NewScanner(io.LimitReader(rc, 4<<20))
	for sc.Scan() {
		if name, _, _ := strings.Cut(sc.Text(), ":"); name == user {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read the sandbox's accounts: %w", err)
	}
	return invalidf("no user %s in the sandbox", user)
}

// client is b's agent connection.
func (b *box) client() *agentproto.Client {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.agent
}

// branchMeta is what a branch of b records for its snapshot and children:
// b's labels and user unless o gives its own. A user is looked for in b,
// whose accounts its children have, before anything is saved.
func (s *Service) branchMeta(ctx context.Context, b *box, o BranchOptions) (store.Meta, error) {
	m, err := metaFor(CreateOptions{Labels: o.Labels, User: o.User, Env: o.Env, Cwd: o.Cwd}, b.rec.Meta)
	if err != nil {
		return m, err
	}
	if o.User != "" || o.Cwd != "" {
		if err := checkMeta(ctx, b.client(), m); err != nil {
			return m, err
		}
	}
	return m, nil
}
