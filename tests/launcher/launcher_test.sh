#!/usr/bin/env bash
# Tests of dtr-exec, one case per invocation (ctest runs each as its own test).
# Usage: launcher_test.sh CASE DTR_EXEC [DTR_WORKER QUICKSTART]
# Every dtr-exec run is bounded by `timeout`, every wait loop by a count.
set -euo pipefail
case_name="$1"
exec_bin="$2"
worker_bin="${3:-}"
quickstart_bin="${4:-}"
work="$(mktemp -d /tmp/dtr-exec-test.XXXXXX)"
trap 'rm -rf "${work}"' EXIT

fail() {
  echo "launcher_test ${case_name}: $*" >&2
  echo "--- stdout:" >&2
  cat "${work}/out" >&2 2>/dev/null || true
  echo "--- stderr:" >&2
  cat "${work}/err" >&2 2>/dev/null || true
  exit 1
}
# run EXPECTED_RC dtr-exec-args...: runs dtr-exec (bounded), output in ${work}/out, /err.
run() {
  local expected="$1"
  shift
  local rc=0
  timeout 60 "${exec_bin}" "$@" >"${work}/out" 2>"${work}/err" || rc=$?
  [[ "${rc}" == "${expected}" ]] || fail "exit status ${rc}, expected ${expected}"
}
has_out() { grep -qxF -- "$1" "${work}/out" || fail "stdout lacks the line: $1"; }
has_err() { grep -qF -- "$1" "${work}/err" || fail "stderr lacks: $1"; }
# wait_files N PATTERN: waits (bounded, 20 s) until N files match PATTERN.
wait_files() {
  local n="$1" pattern="$2"
  for _ in $(seq 400); do
    # shellcheck disable=SC2086
    [[ "$(ls ${pattern} 2>/dev/null | wc -l)" -ge "${n}" ]] && return 0
    sleep 0.05
  done
  fail "timed out waiting for ${n} files ${pattern}"
}
# wait_exit PID: waits (bounded) for a background job; sets rc to its exit status.
wait_exit() {
  local pid="$1"
  for _ in $(seq 600); do
    kill -0 "${pid}" 2>/dev/null || break
    sleep 0.05
  done
  rc=0
  wait "${pid}" || rc=$?
}

case "${case_name}" in
env)
  # Each rank sees its RANK and LOCAL_RANK, and all see the same WORLD_SIZE, address, port.
  run 0 -n 3 bash -c 'echo "R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE A=$MASTER_ADDR P=$MASTER_PORT S=${SLURM_PROCID-unset}"'
  port="$(sed -n 's/^\[0\] .* P=\([0-9]*\) .*/\1/p' "${work}/out")"
  [[ "${port}" =~ ^[0-9]+$ ]] || fail "no MASTER_PORT in rank 0's line"
  for r in 0 1 2; do has_out "[${r}] R=${r} W=3 L=${r} LW=3 A=127.0.0.1 P=${port} S=unset"; done
  [[ "$(wc -l <"${work}/out")" == 3 ]] || fail "expected 3 lines"
  # --master-addr and --master-port are passed through; cluster variables are removed.
  SLURM_PROCID=7 OMPI_COMM_WORLD_RANK=7 run 0 -n 2 --master-addr 127.0.0.2 --master-port 29999 \
    bash -c 'echo "A=$MASTER_ADDR P=$MASTER_PORT S=${SLURM_PROCID-unset} O=${OMPI_COMM_WORLD_RANK-unset}"'
  has_out "[0] A=127.0.0.2 P=29999 S=unset O=unset"
  has_out "[1] A=127.0.0.2 P=29999 S=unset O=unset"
  ;;
prefix)
  # stdout and stderr lines are prefixed and stay on their stream; a partial last line is
  # flushed with a newline; long output arrives complete.
  run 0 -n 2 bash -c 'echo "out $RANK"; echo "err $RANK" >&2; seq 1 20000 | tail -n 1; printf "tail $RANK"'
  for r in 0 1; do
    has_out "[${r}] out ${r}"
    has_out "[${r}] 20000"
    has_out "[${r}] tail ${r}"
    has_err "[${r}] err ${r}"
  done
  grep -q "err" "${work}/out" && fail "stderr lines on stdout"
  run 0 -n 2 bash -c 'seq 1 5000'
  [[ "$(grep -c '^\[1\] ' "${work}/out")" == 5000 ]] || fail "rank 1 lost lines"
  [[ "$(grep -c '^\[0\] ' "${work}/out")" == 5000 ]] || fail "rank 0 lost lines"
  run 0 -n 2 --no-prefix bash -c 'echo "plain $RANK"'
  has_out "plain 0"
  has_out "plain 1"
  ;;
failure)
  # Rank 1 fails once the others are up; dtr-exec names it, stops the others, exits with 3.
  run 3 -n 3 --grace-ms 5000 bash -c '
    if [[ $RANK == 1 ]]; then
      for _ in $(seq 400); do [[ -e '"${work}"'/pid0 && -e '"${work}"'/pid2 ]] && break; sleep 0.05; done
      exit 3
    fi
    echo $$ > '"${work}"'/pid$RANK.tmp && mv '"${work}"'/pid$RANK.tmp '"${work}"'/pid$RANK
    sleep 300 & wait $!'
  has_err "rank 1 (pid"
  has_err "failed with exit status 3; stopping the other ranks"
  for r in 0 2; do
    pid="$(cat "${work}/pid${r}")"
    kill -0 "${pid}" 2>/dev/null && fail "rank ${r} (pid ${pid}) still runs"
  done
  ;;
sigkill)
  # A rank that ignores SIGTERM is killed after --grace-ms.
  run 1 -n 2 --grace-ms 200 bash -c '
    if [[ $RANK == 1 ]]; then
      for _ in $(seq 400); do [[ -e '"${work}"'/ready0 ]] && break; sleep 0.05; done
      exit 1
    fi
    trap "" TERM
    touch '"${work}"'/ready0
    for _ in $(seq 1200); do sleep 0.05; done'
  has_err "rank 1 (pid"
  has_err "failed with exit status 1"
  has_err "rank 0 (pid"
  has_err "did not stop within 200 ms; sending SIGKILL"
  ;;
signal_exit)
  # A rank killed by a signal fails the job with 128 + the signal number.
  run 137 -n 2 bash -c '[[ $RANK == 0 ]] && kill -KILL $$; sleep 300 & wait $!'
  has_err "rank 0 (pid"
  has_err "failed with signal 9 (SIGKILL)"
  ;;
forward_term | forward_int)
  sig=TERM
  [[ "${case_name}" == forward_int ]] && sig=INT
  # Each rank records dtr-exec's pid (its parent) once its trap is set.
  # (A background command in a script ignores SIGINT: the trap stops the sleep itself.)
  timeout 60 "${exec_bin}" -n 3 bash -c '
    trap "echo got '"${sig}"'; kill \$child; exit 0" '"${sig}"'
    sleep 300 & child=$!
    echo $PPID > '"${work}"'/ready$RANK.tmp && mv '"${work}"'/ready$RANK.tmp '"${work}"'/ready$RANK
    wait $child' >"${work}/out" 2>"${work}/err" &
  job=$!
  wait_files 3 "${work}/ready*[0-9]"
  kill "-${sig}" "$(cat "${work}/ready0")"
  wait_exit "${job}"
  expected=$((128 + $(kill -l "${sig}")))
  [[ "${rc}" == "${expected}" ]] || fail "exit status ${rc}, expected ${expected}"
  for r in 0 1 2; do has_out "[${r}] got ${sig}"; done
  has_err "got SIG${sig}; forwarding it to the ranks"
  ;;
same_signal_twice)
  # timeout(1) sends its signal to dtr-exec and again to its process group: one request,
  # forwarded once, and the ranks get their grace period (no SIGKILL, no "again").
  for attempt in 1 2 3 4 5; do
    rc=0
    timeout -s INT 0.5 "${exec_bin}" -n 2 bash -c '
      trap "sleep 0.2; echo stopped \$RANK; kill \$child; exit 0" INT
      sleep 300 & child=$!
      wait $child' >"${work}/out" 2>"${work}/err" || rc=$?
    [[ "${rc}" == 124 ]] || fail "attempt ${attempt}: exit status ${rc}, expected 124"
    for r in 0 1; do has_out "[${r}] stopped ${r}"; done
    has_err "got SIGINT; forwarding it to the ranks"
    grep -qE "again|SIGKILL" "${work}/err" && fail "attempt ${attempt}: the repeat killed the ranks"
  done
  ;;
timeout)
  run 124 -n 2 --timeout 1 bash -c 'sleep 300 & wait $!'
  has_err "--timeout of 1000 ms expired; stopping the ranks"
  ;;
not_found)
  run 127 -n 2 /nonexistent/program
  has_err "cannot run '/nonexistent/program'"
  run 2 -n 2
  run 2 bash -c true
  ;;
workers_env)
  # The program sees DTR_WORKERS (two loopback endpoints) and its status is dtr-exec's.
  run 5 --workers 2 --worker-bin "${worker_bin}" bash -c 'echo "W=$DTR_WORKERS"; exit 5'
  grep -qE '^W=tcp://127\.0\.0\.1:[0-9]+,tcp://127\.0\.0\.1:[0-9]+$' "${work}/out" ||
    fail "DTR_WORKERS is not two loopback endpoints"
  # Found through $DTR_WORKER_BIN too; a worker's log lines carry its prefix.
  DTR_WORKER_BIN="${worker_bin}" run 0 --workers 1 --worker-log-level info bash -c 'true'
  has_err "[w0] [dtr-worker"
  # The workers stopped cleanly: dtr-exec had nothing to report.
  grep -q "^dtr-exec:" "${work}/err" && fail "dtr-exec reported a problem"
  ;;
workers_forward)
  # SIGTERM to dtr-exec reaches the program; the workers are stopped afterwards.
  timeout 60 "${exec_bin}" --workers 2 --worker-bin "${worker_bin}" bash -c '
    trap "echo got TERM; exit 0" TERM
    echo $PPID > '"${work}"'/ready.tmp && mv '"${work}"'/ready.tmp '"${work}"'/ready
    sleep 300 & wait $!' >"${work}/out" 2>"${work}/err" &
  job=$!
  wait_files 1 "${work}/ready"
  kill -TERM "$(cat "${work}/ready")"
  wait_exit "${job}"
  [[ "${rc}" == 143 ]] || fail "exit status ${rc}, expected 143"
  has_out "got TERM"
  has_err "got SIGTERM; forwarding it to the program"
  ;;
workers_quickstart)
  # examples/quickstart against two workers started by dtr-exec (as quickstart_test.sh).
  run 0 --workers 2 --worker-bin "${worker_bin}" "${quickstart_bin}"
  for line in "nodes: 2" "z lives on node 0, device -1" "a lives on node 1" \
    "w: [64, 4] on node 1" \
    "caught on the master: add: shapes [20, 20] and [3] are not broadcastable" \
    "remote error: pow failed on node 0 (cpu)" "negative integer powers" \
    "node 0 still works: 8"; do
    grep -qF -- "${line}" "${work}/out" || fail "quickstart output lacks: ${line}"
  done
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "launcher_test ${case_name}: ok"
