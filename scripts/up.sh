#!/usr/bin/env bash
# up.sh installs the freshly built cove, (re)starts the daemon and proves a
# sandbox works. Sandboxes of an earlier daemon survive the restart.
set -euo pipefail
cd "$(dirname "$0")/.."

LOG=/var/log/cove.log
PIDFILE=/run/cove.pid
ADDR=${COVE_ADDR:-127.0.0.1:8080}

install -m 0755 bin/cove /usr/local/bin/cove.new && mv -f /usr/local/bin/cove.new /usr/local/bin/cove
install -m 0755 bin/cove-agent /usr/local/bin/cove-agent.new && mv -f /usr/local/bin/cove-agent.new /usr/local/bin/cove-agent
# The named network policies (presets) that sandboxes' policies may name;
# the daemon reads them at start.
if [[ -f deploy/network-presets.json ]]; then
	install -D -m 0644 deploy/network-presets.json /etc/cove/network-presets.json
fi

bash scripts/down.sh --keep-sandboxes
echo "up: starting cove serve on $ADDR (log: $LOG)"
setsid nohup /usr/local/bin/cove serve --addr "$ADDR" >>"$LOG" 2>&1 < /dev/null &
echo $! > "$PIDFILE"
for _ in $(seq 1 100); do
	curl -fsS "http://$ADDR/healthz" >/dev/null 2>&1 && break
	sleep 0.1
done
curl -fsS "http://$ADDR/healthz" >/dev/null || { tail -n 30 "$LOG"; echo "up: daemon did not start" >&2; exit 1; }

export COVE_URL="http://$ADDR"
cove info
id=$(cove create -q --ttl 5m)
trap 'cove kill "$id" >/dev/null 2>&1 || true' EXIT
echo "up: sandbox $id created; running python3 inside it"
out=$(cove exec "$id" -- python3 -c 'import platform; print("hello from", platform.node())')
echo "up: $out"
[[ $out == "hello from $id" ]] || { echo "up: unexpected output" >&2; exit 1; }
kid=$(cove spawn default -q --ttl 5m)
trap 'cove kill "$id" "$kid" >/dev/null 2>&1 || true' EXIT
out=$(cove exec "$kid" -- python3 -c 'print("spawned from the default snapshot")')
echo "up: $kid: $out"
echo "up: cove is running at $COVE_URL; API key in /etc/cove/token. Try: cove create, cove ls, cove exec ID -- CMD"
