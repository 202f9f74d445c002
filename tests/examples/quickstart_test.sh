#!/usr/bin/env bash
# Runs examples/quickstart against two local dtr-worker daemons and checks what it prints.
# Usage: quickstart_test.sh WORKER_BIN QUICKSTART_BIN
set -euo pipefail
worker="$1"
quickstart="$2"
work="$(mktemp -d /tmp/dtr-quickstart-test.XXXXXX)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "${pid}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "${pid}" 2>/dev/null || true; done
  rm -rf "${work}"
}
trap cleanup EXIT
for i in 0 1; do
  "${worker}" --listen 'tcp://127.0.0.1:*' --endpoint-file "${work}/e${i}" --log-level warn &
  pids+=($!)
done
for i in 0 1; do
  for _ in $(seq 200); do [[ -s "${work}/e${i}" ]] && break; sleep 0.05; done
done
out="$(DTR_WORKERS="$(cat "${work}/e0"),$(cat "${work}/e1")" timeout 60 "${quickstart}")"
echo "${out}"
expect() {
  grep -qF -- "$1" <<<"${out}" || { echo "quickstart_test: missing output: $1" >&2; exit 1; }
}
expect "nodes: 2"
expect "z lives on node 0, device -1"
expect "a lives on node 1"
expect "w: [64, 4] on node 1"
expect "caught on the master: add: shapes [20, 20] and [3] are not broadcastable"
expect "remote error: pow failed on node 0 (cpu)"
expect "negative integer powers"
expect "node 0 still works: 8"
