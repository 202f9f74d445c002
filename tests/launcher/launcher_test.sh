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
port_reserved)
  # The MASTER_PORT dtr-exec picks stays reserved while the job runs: a plain bind fails (so
  # the kernel hands it to no other process as a free port), while a server that binds with
  # SO_REUSEADDR, as rank 0's store does, listens on it and takes connections.
  run 0 -n 2 python3 -c '
import errno, os, socket
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
plain = socket.socket()
try:
    plain.bind((addr, port))
    print("plain bind: succeeded")
except OSError as e:
    print("plain bind:", errno.errorcode.get(e.errno, e.errno))
if os.environ["RANK"] == "0":
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((addr, port))
    server.listen(4)
    client = socket.create_connection((addr, port), timeout=10)
    server.accept()
    print("reuseaddr listen: connected")'
  has_out "[0] plain bind: EADDRINUSE"
  has_out "[1] plain bind: EADDRINUSE"
  has_out "[0] reuseaddr listen: connected"
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
  # timeout(1) passes a signal it gets to dtr-exec and again to its process group, dtr-exec
  # included: one request, forwarded once, and the ranks get their grace period (no SIGKILL,
  # no "again").
  for attempt in $(seq 10); do
    rm -f "${work}"/ready*
    timeout 60 "${exec_bin}" -n 2 bash -c '
      trap "sleep 0.2; echo stopped \$RANK; kill \$child; exit 0" INT
      sleep 300 & child=$!
      touch '"${work}"'/ready$RANK.tmp && mv '"${work}"'/ready$RANK.tmp '"${work}"'/ready$RANK
      wait $child' >"${work}/out" 2>"${work}/err" &
    job=$!
    wait_files 2 "${work}/ready*[0-9]"
    kill -INT "${job}"
    wait_exit "${job}"
    [[ "${rc}" == 130 ]] || fail "attempt ${attempt}: exit status ${rc}, expected 130"
    for r in 0 1; do has_out "[${r}] stopped ${r}"; done
    has_err "got SIGINT; forwarding it to the ranks"
    grep -qE "again|SIGKILL" "${work}/err" && fail "attempt ${attempt}: the repeat killed the ranks"
  done
  ;;
launched_port)
  # --launched under Slurm (its variables set by hand): MASTER_PORT is derived from the job
  # id, below Linux's ephemeral ports (32768-), which other connections hold at any time.
  for job in 1 77 4242 987654; do
    rc=0
    env -u OMPI_COMM_WORLD_RANK -u RANK -u PMI_RANK -u MASTER_ADDR -u MASTER_PORT SLURM_PROCID=0 \
      SLURM_NTASKS=3 SLURM_NNODES=1 SLURM_JOB_ID="${job}" SLURM_STEP_ID=0 timeout 60 "${exec_bin}" \
      --launched bash -c 'echo "P=$MASTER_PORT W=$WORLD_SIZE A=$MASTER_ADDR"' \
      >"${work}/out" 2>"${work}/err" || rc=$?
    [[ "${rc}" == 0 ]] || fail "job ${job}: exit status ${rc}"
    port="$(sed -n 's/^P=\([0-9]*\) W=3 A=127\.0\.0\.1$/\1/p' "${work}/out")"
    [[ -n "${port}" && "${port}" -ge 20000 && "${port}" -lt 32768 ]] ||
      fail "job ${job}: MASTER_PORT '${port}' is not in [20000, 32768)"
  done
  # A port in use on rank 0's host is named before the master starts, with what to set.
  timeout 30 python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(25)' "${work}/busy" &
  holder=$!
  wait_files 1 "${work}/busy"
  rc=0
  env -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID -u PMI_RANK -u MASTER_ADDR RANK=0 WORLD_SIZE=2 \
    LOCAL_WORLD_SIZE=2 MASTER_PORT="$(cat "${work}/busy")" timeout 60 "${exec_bin}" --launched bash -c 'echo ran' \
    >"${work}/out" 2>"${work}/err" || rc=$?
  kill "${holder}" 2>/dev/null || true
  [[ "${rc}" != 0 ]] || fail "--launched on a port in use exited 0"
  grep -q "ran" "${work}/out" && fail "the master ran on a port in use"
  has_err "port $(cat "${work}/busy") on 127.0.0.1 (MASTER_PORT) is in use on this host; set MASTER_PORT"
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
bad_options)
  # Out-of-range numbers and mistyped endpoints are named as such (CLI11's own range check
  # printed "not in range 0.000000 to 1797693...", and ZeroMQ bound port 70000 as 4464).
  run 2 --timeout -1 -n 1 true
  has_err "--timeout: expected 0 or a number above 0, got -1"
  run 2 --worker-start-timeout-ms 0 -n 1 true
  has_err "--worker-start-timeout-ms: expected a number above 0, got 0"
  [[ -n "${worker_bin}" ]] || exit 0
  worker() {  # EXPECTED_RC dtr-worker-args...: like run, for dtr-worker
    local expected="$1" rc=0
    shift
    timeout 20 "${worker_bin}" "$@" >"${work}/out" 2>"${work}/err" || rc=$?
    [[ "${rc}" == "${expected}" ]] || fail "dtr-worker $*: exit status ${rc}, expected ${expected}"
  }
  worker 1 --listen tcp://127.0.0.1:* --heartbeat-ms 0
  has_err "--heartbeat-ms: expected a number above 0, got 0"
  worker 1 --listen tcp://127.0.0.1:70000
  has_err "worker listen endpoint: expected tcp://HOST:PORT or ipc://PATH, got 'tcp://127.0.0.1:70000' (port 70000 is not 1 to 65535)"
  worker 1 --listen tpc://127.0.0.1:7000
  has_err "(unknown transport)"
  worker 1 --master 127.0.0.1:7000
  has_err "worker's master endpoint: expected tcp://HOST:PORT or ipc://PATH, got '127.0.0.1:7000' (no transport: write tcp:// before the host)"
  worker 1 --insecure --listen tcp://no-such-host-xyz:7000
  has_err "No such device (a listen address is an address of this machine, an interface name such as eth0, or *)"
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
  # In the build tree (build/launcher/dtr-exec, build/worker/dtr-worker) nothing else is
  # needed: no --worker-bin, no $DTR_WORKER_BIN, no dtr-worker on PATH.
  if [[ "$(dirname "$(dirname "${exec_bin}")")/worker/dtr-worker" -ef "${worker_bin}" ]]; then
    env -u DTR_WORKER_BIN PATH=/usr/bin:/bin timeout 60 "${exec_bin}" --workers 1 bash -c true \
      >"${work}/out" 2>"${work}/err" || fail "not found in the build tree: $(cat "${work}/err")"
  fi
  # Not found anywhere: the error names where it looked and the option.
  mkdir -p "${work}/bin"
  cp "${exec_bin}" "${work}/bin/dtr-exec"
  rc=0
  env -u DTR_WORKER_BIN PATH=/usr/bin:/bin "${work}/bin/dtr-exec" --workers 1 bash -c true \
    >"${work}/out" 2>"${work}/err" || rc=$?
  [[ "${rc}" != 0 ]] || fail "a missing dtr-worker was not reported"
  has_err "cannot find dtr-worker"
  has_err "pass --worker-bin PATH"
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
