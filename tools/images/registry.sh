#!/usr/bin/env bash
# A loopback OCI registry (Debian's docker-registry, plain HTTP) for image builds when none runs yet:
#   registry.sh up    reuse the registry named in .envtest/registry if it answers, else start one on a free
#                     127.0.0.1 port (storage under .envtest/registry-data), record its PID, write the address
#   registry.sh down  stop the registry this script started (by its recorded PID only)
# The node launcher (make node-up) writes .envtest/registry too; whichever runs first, the other reuses it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
state="${ENVTEST_DIR:-$root/.envtest}"
pidfile="$state/images-registry.pid"
case "${1:-}" in
  up)
    if [ -s "$state/registry" ] && curl -fsS --max-time 5 "http://$(cat "$state/registry")/v2/" >/dev/null 2>&1; then
      cat "$state/registry"; exit 0
    fi
    command -v docker-registry >/dev/null || { echo "error: docker-registry missing: run tools/images/ensure-deps.sh" >&2; exit 1; }
    mkdir -p "$state/registry-data"
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    cat > "$state/images-registry.yml" <<CONF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $state/registry-data}
  delete: {enabled: true}
http: {addr: 127.0.0.1:$port}
CONF
    nohup docker-registry serve "$state/images-registry.yml" > "$state/images-registry.log" 2>&1 &
    echo $! > "$pidfile"
    for _ in $(seq 1 100); do
      curl -fsS --max-time 2 "http://127.0.0.1:$port/v2/" >/dev/null 2>&1 && break
      sleep 0.1
    done
    curl -fsS --max-time 2 "http://127.0.0.1:$port/v2/" >/dev/null || { echo "error: registry did not start (see $state/images-registry.log)" >&2; exit 1; }
    echo "127.0.0.1:$port" > "$state/registry"
    echo "127.0.0.1:$port"
    ;;
  down)
    if [ -s "$pidfile" ]; then
      pid="$(cat "$pidfile")"
      if kill -0 "$pid" 2>/dev/null && grep -q docker-registry "/proc/$pid/cmdline" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      fi
      rm -f "$pidfile" "$state/registry"
    fi
    ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
