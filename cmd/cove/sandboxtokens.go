package main

// Sandbox tokens: the per-sandbox credential that exec, cp, branch and
// snapshot save present besides the API key. The daemon hands a sandbox's
// token out once, in the answer that made the sandbox, so the CLI
// remembers the tokens of the sandboxes it makes, and, for the snapshots
// it saves from a sandbox, that sandbox's token, which spawning from them
// takes.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// addSandboxTokenFlag adds --sandbox-token, for verbs that talk to a
// sandbox's data plane.
func addSandboxTokenFlag(fs *pflag.FlagSet, tok *string) {
	fs.StringVar(tok, "sandbox-token", "",
		"the sandbox's token (default $COVE_SANDBOX_TOKEN, else the one saved by cove create, spawn or branch)")
}

// addSnapshotTokenFlag adds --sandbox-token, for verbs that spawn from a
// snapshot.
func addSnapshotTokenFlag(fs *pflag.FlagSet, tok *string) {
	fs.StringVar(tok, "sandbox-token", "",
		"for a snapshot saved from a sandbox, that sandbox's token (default $COVE_SANDBOX_TOKEN, else the one saved by cove branch or snapshot save)")
}

// sandboxTokenFor returns the token of sandbox id on the daemon at
// daemonURL: flagValue (--sandbox-token), else $COVE_SANDBOX_TOKEN, else
// the one remembered.
func sandboxTokenFor(flagValue, daemonURL, id string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if t := os.Getenv("COVE_SANDBOX_TOKEN"); t != "" {
		return t, nil
	}
	st, err := defaultSandboxTokens()
	if err != nil {
		return "", fmt.Errorf("no token for sandbox %s: %w; pass --sandbox-token or set COVE_SANDBOX_TOKEN", id, err)
	}
	tok, err := st.get(daemonURL, id)
	if err != nil {
		return "", err
	}
	if tok == "" {
		return "", fmt.Errorf("no token for sandbox %s at %s in %s: only sandboxes made by your `cove create`, `spawn` or `branch` are remembered; pass --sandbox-token or set COVE_SANDBOX_TOKEN", id, daemonURL, st.path)
	}
	return tok, nil
}

// snapshotTokenFor returns the token that spawning from snapshot tag on
// the daemon at daemonURL presents: flagValue (--sandbox-token), else
// $COVE_SANDBOX_TOKEN, else the one remembered when this user saved it,
// else none (a snapshot built from an image takes none).
func snapshotTokenFor(stderr io.Writer, flagValue, daemonURL, tag string) string {
	if flagValue != "" {
		return flagValue
	}
	if t := os.Getenv("COVE_SANDBOX_TOKEN"); t != "" {
		return t
	}
	st, err := defaultSandboxTokens()
	if err == nil {
		var tok string
		if tok, err = st.getSnapshot(daemonURL, tag); err == nil {
			return tok
		}
	}
	fmt.Fprintf(stderr, "cove: warning: %v\n", err)
	return ""
}

// rememberSnapshotToken saves the token that spawning from snapshot tag,
// just saved from a sandbox, takes: that sandbox's. A failure is only
// warned about, as in rememberSandboxTokens.
func rememberSnapshotToken(stderr io.Writer, name, daemonURL, tag, token string) {
	st, err := defaultSandboxTokens()
	if err == nil {
		err = st.addSnapshot(daemonURL, tag, token)
	}
	if err != nil {
		fmt.Fprintf(stderr, "cove %s: warning: the token for spawning from snapshot %s was not saved: %v; pass --sandbox-token to cove spawn\n", name, tag, err)
	}
}

// rememberSandboxTokens saves the tokens of newly made sandboxes, warning
// on stderr (as verb name) if it can't: they exist only in the answer that
// made the sandboxes, and failing the verb for this would make scripts
// believe no sandbox was made.
func rememberSandboxTokens(stderr io.Writer, name, daemonURL string, sbs []apitype.SandboxInfo) {
	toks := make(map[string]string, len(sbs))
	for _, sb := range sbs {
		if sb.Token != "" {
			toks[sb.ID] = sb.Token
		}
	}
	if len(toks) == 0 {
		return
	}
	st, err := defaultSandboxTokens()
	if err == nil {
		err = st.add(daemonURL, toks)
	}
	if err != nil {
		fmt.Fprintf(stderr, "cove %s: warning: sandbox tokens not saved: %v; use --json to see them\n", name, err)
	}
}

// sandboxTokens remembers the tokens of the sandboxes this user made, per
// daemon, in a JSON file only the user can read. Writers hold an flock on
// a lock file beside it, so that parallel `cove create`s don't lose each
// other's tokens; readers need no lock, since writes are atomic renames.
type sandboxTokens struct {
	path string
}

// sandboxTokensFile is the store's file format.
type sandboxTokensFile struct {
	// Daemons maps a daemon URL to its sandboxes by id.
	Daemons map[string]map[string]sandboxTokenEntry `json:"daemons"`
	// Snapshots maps a daemon URL to the tokens that spawning from its
	// snapshots takes, by tag.
	Snapshots map[string]map[string]sandboxTokenEntry `json:"snapshots,omitempty"`
}

type sandboxTokenEntry struct {
	Token string `json:"token"`
	// SavedUnixMs lets `cove ls` prune only entries older than its list.
	SavedUnixMs int64 `json:"saved_unix_ms"`
}

// defaultSandboxTokens is the store in $XDG_CONFIG_HOME/cove/tokens.json,
// by default ~/.config/cove/tokens.json.
func defaultSandboxTokens() (*sandboxTokens, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return nil, fmt.Errorf("sandbox token store: %w", err)
	}
	return &sandboxTokens{path: filepath.Join(dir, "cove", "tokens.json")}, nil
}

// A store holds two kinds of entry: sandboxes' tokens by id, and by tag
// the tokens spawning from snapshots takes.
type tokenKind func(*sandboxTokensFile) map[string]map[string]sandboxTokenEntry

func sandboxEntries(tf *sandboxTokensFile) map[string]map[string]sandboxTokenEntry { return tf.Daemons }
func snapshotEntries(tf *sandboxTokensFile) map[string]map[string]sandboxTokenEntry {
	return tf.Snapshots
}

// get returns the token of sandbox id at daemonURL, or "" if unknown.
func (s *sandboxTokens) get(daemonURL, id string) (string, error) {
	return s.lookup(sandboxEntries, daemonURL, id)
}

// getSnapshot returns the token for spawning from snapshot tag at
// daemonURL, or "" if unknown.
func (s *sandboxTokens) getSnapshot(daemonURL, tag string) (string, error) {
	return s.lookup(snapshotEntries, daemonURL, tag)
}

func (s *sandboxTokens) lookup(kind tokenKind, daemonURL, key string) (string, error) {
	tf, err := s.read()
	if err != nil {
		return "", err
	}
	return kind(tf)[daemonURL][key].Token, nil
}

// add remembers tokens, by sandbox id, of sandboxes at daemonURL.
func (s *sandboxTokens) add(daemonURL string, tokens map[string]string) error {
	return s.put(sandboxEntries, daemonURL, tokens)
}

// addSnapshot remembers the token for spawning from snapshot tag at
// daemonURL.
func (s *sandboxTokens) addSnapshot(daemonURL, tag, token string) error {
	return s.put(snapshotEntries, daemonURL, map[string]string{tag: token})
}

func (s *sandboxTokens) put(kind tokenKind, daemonURL string, tokens map[string]string) error {
	now := time.Now().UnixMilli()
	return s.update(func(tf *sandboxTokensFile) bool {
		m := kind(tf)[daemonURL]
		if m == nil {
			m = make(map[string]sandboxTokenEntry)
			kind(tf)[daemonURL] = m
		}
		for key, tok := range tokens {
			m[key] = sandboxTokenEntry{Token: tok, SavedUnixMs: now}
		}
		return len(tokens) > 0
	})
}

// remove forgets sandboxes ids at daemonURL.
func (s *sandboxTokens) remove(daemonURL string, ids ...string) error {
	return s.drop(sandboxEntries, daemonURL, ids)
}

// removeSnapshots forgets the tokens of snapshots tags at daemonURL.
func (s *sandboxTokens) removeSnapshots(daemonURL string, tags ...string) error {
	return s.drop(snapshotEntries, daemonURL, tags)
}

func (s *sandboxTokens) drop(kind tokenKind, daemonURL string, keys []string) error {
	return s.update(func(tf *sandboxTokensFile) bool {
		m := kind(tf)[daemonURL]
		changed := false
		for _, key := range keys {
			if _, ok := m[key]; ok {
				delete(m, key)
				changed = true
			}
		}
		if changed && len(m) == 0 {
			delete(kind(tf), daemonURL)
		}
		return changed
	})
}

// prune forgets the sandboxes at daemonURL that are not in live and were
// saved before asOf, the time the list live was asked for: a sandbox
// created since may be missing from live yet be alive.
func (s *sandboxTokens) prune(daemonURL string, live map[string]bool, asOf time.Time) error {
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
func (s *sandboxTokens) read() (*sandboxTokensFile, error) {
	tf := &sandboxTokensFile{Daemons: make(map[string]map[string]sandboxTokenEntry),
		Snapshots: make(map[string]map[string]sandboxTokenEntry)}
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return tf, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox token store: %w", err)
	}
	if err := json.Unmarshal(b, tf); err != nil {
		return nil, fmt.Errorf("sandbox token store %s is corrupt (%v); remove it to start over", s.path, err)
	}
	if tf.Daemons == nil {
		tf.Daemons = make(map[string]map[string]sandboxTokenEntry)
	}
	if tf.Snapshots == nil {
		tf.Snapshots = make(map[string]map[string]sandboxTokenEntry)
	}
	return tf, nil
}

// update applies fn to the store under the lock and saves the result if
// fn reports a change.
func (s *sandboxTokens) update(fn func(*sandboxTokensFile) bool) error {
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("sandbox token store: %w", err)
	}
	lock, err := os.OpenFile(s.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("sandbox token store: %w", err)
	}
	defer lock.Close() // releases the flock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("sandbox token store: lock: %w", err)
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
		return fmt.Errorf("sandbox token store: %w", err)
	}
	return fsutil.WriteFile(s.path, append(b, '\n'), 0o600)
}
