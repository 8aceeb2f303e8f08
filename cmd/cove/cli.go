package main

// Helpers shared by the client commands (create, ls, exec, cp, kill, info,
// bench): common flags, finding the daemon and its API key, the store of
// sandbox tokens, error hints and output formatting.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

const (
	defaultURL       = "http://127.0.0.1:8080"
	defaultTokenFile = "/etc/cove/token"
)

// common holds the flags every client command takes.
type common struct {
	url          string
	apiKey       string
	tokenFile    string
	json         bool
	sandboxToken string // data-plane commands only; see addSandboxToken
}

// newFlagSet returns a flag set for command name with the common flags.
// usage is the synopsis after "cove ", e.g. "kill [flags] ID... | --all".
//
// Flag defaults are not taken from the environment at definition time, so
// that -h never prints a secret such as COVE_TOKEN.
func newFlagSet(name, usage string) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	c := new(common)
	fs.StringVar(&c.url, "url", "", "daemon URL (default $COVE_URL, else "+defaultURL+")")
	fs.StringVar(&c.apiKey, "api-key", "", "API key (default $COVE_TOKEN, else the contents of --token-file)")
	fs.StringVar(&c.tokenFile, "token-file", defaultTokenFile, "the daemon's API key file, read when no key is given")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: cove %s\n\nflags:\n", usage)
		fs.PrintDefaults()
	}
	return fs, c
}

// addSandboxToken adds --sandbox-token, for commands that talk to a
// sandbox's data plane.
func (c *common) addSandboxToken(fs *flag.FlagSet) {
	fs.StringVar(&c.sandboxToken, "sandbox-token", "",
		"the sandbox's token (default $COVE_SANDBOX_TOKEN, else the one saved by cove create)")
}

// parseArgs parses flags wherever they appear among args, so that
// `cove kill ID --json` works, and returns the positional arguments. "--"
// ends flag parsing. Once maxPos positional arguments are collected
// (maxPos < 0: never), the next positional argument also ends flag
// parsing, so that in `cove exec ID ls -la` the "-la" belongs to ls.
func parseArgs(fs *flag.FlagSet, args []string, maxPos int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		// Parse consumes a "--" and stops; a positional argument it only
		// stops at. (A flag whose value is literally "--" fools this.)
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		if maxPos >= 0 && len(pos) >= maxPos {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// baseURL returns the daemon's URL from --url, $COVE_URL or the default.
func (c *common) baseURL() string {
	u := c.url
	if u == "" {
		u = os.Getenv("COVE_URL")
	}
	if u == "" {
		u = defaultURL
	}
	if !strings.Contains(u, "://") {
		u = "http://" + u // "127.0.0.1:8080" is what people type
	}
	return strings.TrimRight(u, "/")
}

// key returns the API key from --api-key, $COVE_TOKEN or --token-file.
func (c *common) key() (string, error) {
	if c.apiKey != "" {
		return c.apiKey, nil
	}
	if k := strings.TrimSpace(os.Getenv("COVE_TOKEN")); k != "" {
		return k, nil
	}
	const how = "set COVE_TOKEN or pass --api-key"
	if c.tokenFile == "" {
		return "", fmt.Errorf("no API key: %s", how)
	}
	b, err := os.ReadFile(c.tokenFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("no API key: %s does not exist; start the daemon with `make up` (it writes the key there), or %s", c.tokenFile, how)
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("no API key: %s is not readable by you; run `export COVE_TOKEN=$(sudo cat %s)`, or pass --api-key", c.tokenFile, c.tokenFile)
	case err != nil:
		return "", fmt.Errorf("no API key: %w; %s", err, how)
	}
	k := strings.TrimSpace(string(b))
	if k == "" {
		return "", fmt.Errorf("no API key: %s is empty; %s", c.tokenFile, how)
	}
	return k, nil
}

// client returns a client for the daemon and its URL, which keys the
// token store.
func (c *common) client(opts ...client.Option) (*client.Client, string, error) {
	key, err := c.key()
	if err != nil {
		return nil, "", err
	}
	u := c.baseURL()
	opts = append([]client.Option{client.WithUserAgent("cove-cli/" + version)}, opts...)
	return client.New(u, key, opts...), u, nil
}

// tokenFor returns the token of sandbox id on the daemon at daemonURL:
// from --sandbox-token, $COVE_SANDBOX_TOKEN or the token store.
func (c *common) tokenFor(daemonURL, id string) (string, error) {
	if c.sandboxToken != "" {
		return c.sandboxToken, nil
	}
	if t := os.Getenv("COVE_SANDBOX_TOKEN"); t != "" {
		return t, nil
	}
	st, err := defaultTokenStore()
	if err != nil {
		return "", fmt.Errorf("no token for sandbox %s: %w; pass --sandbox-token or set COVE_SANDBOX_TOKEN", id, err)
	}
	tok, err := st.get(daemonURL, id)
	if err != nil {
		return "", err
	}
	if tok == "" {
		return "", fmt.Errorf("no token for sandbox %s at %s in %s: only sandboxes made by your `cove create` are remembered; pass --sandbox-token or set COVE_SANDBOX_TOKEN", id, daemonURL, st.path)
	}
	return tok, nil
}

// rememberTokens saves the tokens of newly made sandboxes in the token
// store, warning on stderr (as command name) if it can't: they exist only
// in the answer that made the sandboxes, and failing the command for this
// would make scripts believe no sandbox was made.
func rememberTokens(name, daemonURL string, sbs []apitype.SandboxInfo) {
	toks := make(map[string]string, len(sbs))
	for _, sb := range sbs {
		if sb.Token != "" {
			toks[sb.ID] = sb.Token
		}
	}
	if len(toks) == 0 {
		return
	}
	st, err := defaultTokenStore()
	if err == nil {
		err = st.add(daemonURL, toks)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cove %s: warning: sandbox tokens not saved: %v; use --json to see them\n", name, err)
	}
}

// printMade prints newly made sandboxes as JSON (with their tokens), as
// bare ids (quiet, for scripts), or as a table.
func printMade(asJSON, quiet bool, sbs []apitype.SandboxInfo) error {
	switch {
	case asJSON:
		return printJSON(os.Stdout, sbs)
	case quiet:
		for _, sb := range sbs {
			fmt.Println(sb.ID)
		}
		return nil
	}
	return printSandboxes(os.Stdout, sbs)
}

// printSandboxes writes a table of newly made sandboxes.
func printSandboxes(w io.Writer, sbs []apitype.SandboxInfo) error {
	now := time.Now()
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tSTATUS\tBACKEND\tEXPIRES")
	for _, sb := range sbs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", sb.ID, sb.Status, sb.Backend, fmtUntil(now, sb.ExpiresAtUnix))
	}
	return tw.Flush()
}

// explain adds what to do next to errors that have a usual cause.
func explain(err error, daemonURL string) error {
	if err == nil {
		return nil
	}
	var dnsErr *net.DNSError
	var hint string
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		hint = fmt.Sprintf("is the daemon running at %s? start it with `make up` or `cove serve`, or point --url / COVE_URL at it", daemonURL)
	case errors.As(err, &dnsErr):
		hint = fmt.Sprintf("check the daemon URL %s (--url or COVE_URL)", daemonURL)
	case errors.Is(err, client.ErrUnauthorized):
		hint = "the daemon refused the API key: check COVE_TOKEN or --api-key (the daemon's key is in " + defaultTokenFile + ")"
	case errors.Is(err, client.ErrForbidden):
		hint = "the daemon refused the sandbox token: the right one is in `cove create --json`'s output; pass it with --sandbox-token or COVE_SANDBOX_TOKEN"
	case errors.Is(err, client.ErrLimit):
		hint = "the daemon is at a limit (see `cove info`); kill sandboxes you no longer need (`cove ls`, `cove kill`)"
	case errors.Is(err, client.ErrUnavailable):
		hint = "the daemon is busy or still starting; try again shortly, or see `cove info`"
	case errors.Is(err, context.DeadlineExceeded):
		hint = "the daemon did not answer in time; is it overloaded? see `cove info`"
	default:
		return err
	}
	return fmt.Errorf("%w\n  hint: %s", err, hint)
}

// noSuchSandbox adds a hint to a not-found error about a sandbox.
func noSuchSandbox(err error, id string) error {
	if errors.Is(err, client.ErrNotFound) {
		return fmt.Errorf("%w\n  hint: sandbox %s may have expired or been killed; `cove ls` lists those alive", err, id)
	}
	return err
}

// notFoundIn is noSuchSandbox for calls where not found may mean a file
// in the sandbox instead: it asks the daemon which.
func notFoundIn(ctx context.Context, cl *client.Client, err error, id string) error {
	if !errors.Is(err, client.ErrNotFound) {
		return err
	}
	if _, gerr := cl.GetSandbox(ctx, id); errors.Is(gerr, client.ErrNotFound) {
		return noSuchSandbox(err, id)
	}
	return err
}

// tokenStore remembers the tokens of the sandboxes this user created, per
// daemon, in a JSON file only the user can read. Writers hold an flock on
// a lock file beside it, so that parallel `cove create`s don't lose each
// other's tokens; readers need no lock, since writes are atomic renames.
type tokenStore struct {
	path string
}

// tokenFile is the store's file format.
type tokenFile struct {
	// Daemons maps a daemon URL to its sandboxes by id.
	Daemons map[string]map[string]tokenEntry `json:"daemons"`
}

type tokenEntry struct {
	Token string `json:"token"`
	// SavedUnixMs lets `cove ls` prune only entries older than its list.
	SavedUnixMs int64 `json:"saved_unix_ms"`
}

// defaultTokenStore is the store in $XDG_CONFIG_HOME/cove/tokens.json,
// by default ~/.config/cove/tokens.json.
func defaultTokenStore() (*tokenStore, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return nil, fmt.Errorf("token store: %w", err)
	}
	return &tokenStore{path: filepath.Join(dir, "cove", "tokens.json")}, nil
}

// get returns the token of sandbox id at daemonURL, or "" if unknown.
func (s *tokenStore) get(daemonURL, id string) (string, error) {
	tf, err := s.read()
	if err != nil {
		return "", err
	}
	return tf.Daemons[daemonURL][id].Token, nil
}

// add remembers tokens, by sandbox id, of sandboxes at daemonURL.
func (s *tokenStore) add(daemonURL string, tokens map[string]string) error {
	now := time.Now().UnixMilli()
	return s.update(func(tf *tokenFile) bool {
		m := tf.Daemons[daemonURL]
		if m == nil {
			m = make(map[string]tokenEntry)
			tf.Daemons[daemonURL] = m
		}
		for id, tok := range tokens {
			m[id] = tokenEntry{Token: tok, SavedUnixMs: now}
		}
		return len(tokens) > 0
	})
}

// remove forgets sandboxes ids at daemonURL.
func (s *tokenStore) remove(daemonURL string, ids ...string) error {
	return s.update(func(tf *tokenFile) bool {
		m := tf.Daemons[daemonURL]
		changed := false
		for _, id := range ids {
			if _, ok := m[id]; ok {
				delete(m, id)
				changed = true
			}
		}
		if changed && len(m) == 0 {
			delete(tf.Daemons, daemonURL)
		}
		return changed
	})
}

// prune forgets the sandboxes at daemonURL that are not in live and were
// saved before asOf, the time the list live was asked for: a sandbox
// created since may be missing from live yet be alive.
func (s *tokenStore) prune(daemonURL string, live map[string]bool, asOf time.Time) error {
	var stale []string
	tf, err := s.read()
	if err != nil {
		return err
	}
	for id, e := range tf.Daemons[daemonURL] {
		if !live[id] && e.SavedUnixMs < asOf.UnixMilli() {
			stale = append(stale, id)
		}
	}
	if len(stale) == 0 {
		return nil // the common case: don't take the lock
	}
	return s.remove(daemonURL, stale...)
}

// read returns the store's contents; a missing file is an empty store.
func (s *tokenStore) read() (*tokenFile, error) {
	tf := &tokenFile{Daemons: make(map[string]map[string]tokenEntry)}
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return tf, nil
	}
	if err != nil {
		return nil, fmt.Errorf("token store: %w", err)
	}
	if err := json.Unmarshal(b, tf); err != nil {
		return nil, fmt.Errorf("token store %s is corrupt (%v); remove it to start over", s.path, err)
	}
	if tf.Daemons == nil {
		tf.Daemons = make(map[string]map[string]tokenEntry)
	}
	return tf, nil
}

// update applies fn to the store under the lock and saves the result if
// fn reports a change.
func (s *tokenStore) update(fn func(*tokenFile) bool) error {
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	lock, err := os.OpenFile(s.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	defer lock.Close() // releases the flock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("token store: lock: %w", err)
	}
	tf, err := s.read()
	if err != nil {
		return err
	}
	if !fn(tf) {
		return nil
	}
	b, err := json.MarshalIndent(tf, "", "  ")
	if err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	return writeFileAtomic(s.path, append(b, '\n'), 0o600)
}

// writeFileAtomic writes data to path through a temporary file in the
// same directory and a rename, so readers see the old or the new file.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable returns a writer for a column-aligned table; Flush it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
}

// isTerminal reports whether f is a terminal (or another character
// device, which is close enough to decide whether to draw progress).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// fmtDuration formats d for a table: two units at most, whole seconds.
func fmtDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	d = d.Round(time.Second)
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	case d >= time.Hour:
		return fmt.Sprintf("%dh%dm", d/time.Hour, d%time.Hour/time.Minute)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%ds", d/time.Minute, d%time.Minute/time.Second)
	default:
		return fmt.Sprintf("%ds", d/time.Second)
	}
}

// fmtUntil formats the time from now to unix seconds, "expired" if past.
func fmtUntil(now time.Time, unix int64) string {
	if unix == 0 {
		return "-"
	}
	d := time.Unix(unix, 0).Sub(now)
	if d <= 0 {
		return "expired"
	}
	return fmtDuration(d)
}

// fmtBytes formats n bytes with a binary unit.
func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// mbPerSec is a throughput in MB/s, decimal megabytes as network and disk
// speeds are usually quoted.
func mbPerSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / 1e6 / d.Seconds()
}
