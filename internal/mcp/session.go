package mcp

import (
	"fmt"
	"sync"
)

// session is what one MCP session remembers: the tokens of the sandboxes
// it created (the daemon shows a token only once, in the create answer),
// the tokens that spawning from the snapshots it saved takes (their source
// sandbox's), and the sandbox sandbox_run uses.
type session struct {
	api API // its caller's, for what it does after its last call

	mu         sync.Mutex
	tokens     map[string]string // sandbox id -> token
	snapTokens map[string]string // snapshot tag -> its source sandbox's token
	runID      string            // sandbox_run's sandbox, "" until first use

	// runMu serialises sandbox_run's lazy create, so that parallel calls
	// share one sandbox instead of each making their own.
	runMu sync.Mutex
}

func newSession() *session {
	return &session{tokens: make(map[string]string), snapTokens: make(map[string]string)}
}

// remember stores a sandbox's token.
func (st *session) remember(id, token string) {
	if id == "" || token == "" {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.tokens[id] = token
}

// rememberSnapshot stores the token that spawning from snapshot tag takes.
func (st *session) rememberSnapshot(tag, token string) {
	if tag == "" || token == "" {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.snapTokens[tag] = token
}

// snapshotToken returns the token to spawn from snapshot tag with: given,
// if the caller passed one, else the one this session remembers, else ""
// (a snapshot built from an image takes none).
func (st *session) snapshotToken(tag, given string) string {
	if given != "" {
		return given
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.snapTokens[tag]
}

// forget drops what the session knows of sandbox id.
func (st *session) forget(id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.tokens, id)
	if st.runID == id {
		st.runID = ""
	}
}

// hasToken reports whether the session holds sandbox id's token.
func (st *session) hasToken(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.tokens[id] != ""
}

// ids returns the sandboxes whose tokens the session holds.
func (st *session) ids() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]string, 0, len(st.tokens))
	for id := range st.tokens {
		out = append(out, id)
	}
	return out
}

// token returns the token to use for sandbox id: given, if the caller
// passed one, else the one this session remembers.
func (st *session) token(id, given string) (string, error) {
	if given != "" {
		return given, nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if t := st.tokens[id]; t != "" {
		return t, nil
	}
	return "", fmt.Errorf("missing sandbox token for sandbox %s: this MCP session did not create it, so it does not know its token. "+
		"Pass it as sandbox_token (create_sandbox, spawn_sandboxes and branch_sandbox return each new sandbox's token once; "+
		"get_sandbox and list_sandboxes never show tokens), or create your own sandbox with create_sandbox", id)
}

func (st *session) runSandbox() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.runID
}

func (st *session) setRunSandbox(id, token string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.runID = id
	st.tokens[id] = token
}

// takeRunSandbox returns sandbox_run's sandbox and forgets it.
func (st *session) takeRunSandbox() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	id := st.runID
	st.runID = ""
	delete(st.tokens, id)
	return id
}
