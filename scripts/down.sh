#!/usr/bin/env bash
# down.sh stops the daemon started by up.sh. Without --keep-sandboxes it
# first destroys every sandbox, so nothing is left running.
set -euo pipefail
PIDFILE=/run/cove.pid
ADDR=${COVE_ADDR:-127.0.0.1:8080}

pid=$(cat "$PIDFILE" 2>/dev/null || true)
if [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null; then
	rm -f "$PIDFILE"
	exit 0
fi
if [[ ${1:-} != --keep-sandboxes ]]; then
	COVE_URL="http://$ADDR" cove kill --all || true
fi
kill -TERM "$pid"
for _ in $(seq 1 100); do
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
rm -f "$PIDFILE"
echo "down: daemon stopped"
