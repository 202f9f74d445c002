#!/usr/bin/env bash
# Builds dtr into build/ (scripts/setup.sh installs what is missing), starts two local
# dtr-worker daemons on free loopback ports, runs the quickstart master program
# (examples/quickstart.cpp) against them, and stops them.
#
# Usage: scripts/demo.sh [CMAKE_ARG...]
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${repo_root}/build"
bash "${repo_root}/scripts/setup.sh" --build-dir "${build_dir}" -DDTR_BUILD_EXAMPLES=ON "$@"
echo

work="$(mktemp -d /tmp/dtr-demo.XXXXXX)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "${pid}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "${pid}" 2>/dev/null || true; done
  rm -rf "${work}"
}
trap cleanup EXIT

endpoints=()
for i in 0 1; do
  "${build_dir}/worker/dtr-worker" --listen 'tcp://127.0.0.1:*' --name "demo-${i}" \
    --endpoint-file "${work}/endpoint-${i}" --log-level warn &
  pids+=($!)
done
for i in 0 1; do
  for _ in $(seq 100); do [[ -s "${work}/endpoint-${i}" ]] && break; sleep 0.1; done
  [[ -s "${work}/endpoint-${i}" ]] || { echo "demo.sh: worker ${i} did not start" >&2; exit 1; }
  endpoints+=("$(cat "${work}/endpoint-${i}")")
done
echo "demo.sh: workers at ${endpoints[*]}"
echo
DTR_WORKERS="$(IFS=,; echo "${endpoints[*]}")" "${build_dir}/examples/quickstart"
