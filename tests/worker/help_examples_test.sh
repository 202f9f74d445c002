#!/usr/bin/env bash
# Every example of `dtr-worker --help` runs as written (the first one failed: a listen on
# every interface without a key is refused). Examples are run in a scratch directory, in
# order; a worker example must come up and keep running (it is stopped with SIGTERM and must
# exit 0). Only what a test cannot reach is substituted: a fixed port becomes a free one
# (`*`, with --endpoint-file to learn it), the master's host name 127.0.0.1, and /tmp/ the
# scratch directory.
# Usage: help_examples_test.sh DTR_WORKER DTR_KEYGEN
set -euo pipefail
worker_bin="$1"
keygen_bin="$2"
work="$(mktemp -d /tmp/dtr-help-examples.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "${p}" 2>/dev/null || true; done
  rm -rf "${work}"
}
trap cleanup EXIT
cd "${work}"

fail() {
  echo "help_examples_test: $*" >&2
  cat "${work}/err" >&2 2>/dev/null || true
  exit 1
}

mapfile -t examples < <("${worker_bin}" --help | sed -n '/^Examples:/,$p' | tail -n +2 |
  sed -e 's/#.*$//' -e 's/^ *//' -e 's/ *$//' | grep -v '^$')
[[ ${#examples[@]} -ge 2 ]] || fail "dtr-worker --help lists fewer than 2 examples"

n=0
for line in "${examples[@]}"; do
  read -r -a argv <<<"${line}"
  case "${argv[0]}" in
    dtr-keygen)
      timeout 30 "${keygen_bin}" "${argv[@]:1}" 2>"${work}/err" || fail "'${line}' failed"
      ;;
    dtr-worker)
      n=$((n + 1))
      args=()
      for a in "${argv[@]:1}"; do
        a="${a//:5555/:*}"
        a="${a//head-node/127.0.0.1}"
        a="${a//\/tmp\//${work}/}"
        args+=("${a}")
      done
      endpoint_file="${work}/endpoint-${n}"
      [[ " ${args[*]} " == *" --endpoint-file "* ]] || args+=(--endpoint-file "${endpoint_file}")
      "${worker_bin}" "${args[@]}" 2>"${work}/err" &
      pid=$!
      pids+=("${pid}")
      # Up (bounded, 20 s): a listening worker has written its endpoint, a dialing one has
      # logged that it dials; a refused option or key exits instead.
      if [[ " ${args[*]} " == *" --listen "* ]]; then
        f="$(sed -n 's/.*--endpoint-file \([^ ]*\).*/\1/p' <<<" ${args[*]} ")"
        up() { [[ -s "${f}" ]]; }
      else
        up() { grep -q "dialing master" "${work}/err"; }
      fi
      for _ in $(seq 400); do
        up && break
        kill -0 "${pid}" 2>/dev/null || fail "'${line}' exited at once"
        sleep 0.05
      done
      up || fail "'${line}' did not come up in 20 s"
      sleep 0.5  # running, not only started
      kill -0 "${pid}" 2>/dev/null || fail "'${line}' exited after it came up"
      kill -TERM "${pid}"
      rc=0
      for _ in $(seq 200); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.05; done
      wait "${pid}" || rc=$?
      [[ "${rc}" == 0 ]] || fail "'${line}' exited with ${rc} on SIGTERM"
      ;;
    *) fail "an example runs an unknown program: ${line}" ;;
  esac
done
[[ ${n} -ge 2 ]] || fail "fewer than 2 worker examples ran"
echo "help_examples_test: ${n} worker examples ran"
