#!/usr/bin/env bash
# Runs the process-group examples under dtr-exec and checks what they print.
# Usage: pg_examples_test.sh CASE DTR_EXEC EXAMPLE_BIN
#   CASE: point_to_point | reduce_broadcast | reduce_broadcast_2 | sgd | sgd_fractions
set -euo pipefail
case_name="$1"
exec_bin="$2"
example="$3"
out=""

fail() {
  echo "pg_examples_test ${case_name}: $*" >&2
  exit 1
}
# launch ARGS...: dtr-exec, bounded; its stdout in $out, echoed for the test log.
launch() {
  local rc=0
  out="$(timeout 120 "${exec_bin}" --timeout 100 "$@")" || rc=$?
  echo "${out}"
  [[ "${rc}" == 0 ]] || fail "dtr-exec exited with ${rc}"
}
expect() { grep -qxF -- "$1" <<<"${out}" || fail "missing output line: $1"; }

# check_sgd N: each rank's loss falls (last epoch below half the first), and every rank
# ends with the same parameter hash.
check_sgd() {
  local n="$1"
  for r in $(seq 0 $((n - 1))); do
    local losses
    losses="$(sed -n "s/^\[${r}\] rank ${r} epoch [0-9]* loss \([0-9.]*\)$/\1/p" <<<"${out}")"
    [[ "$(wc -l <<<"${losses}")" -ge 2 ]] || fail "rank ${r} printed fewer than 2 epochs"
    awk 'NR == 1 { first = $1 } { last = $1 } END { exit !(last < first / 2) }' \
      <<<"${losses}" || fail "rank ${r}'s loss did not fall by half: $(echo ${losses})"
  done
  local hashes
  hashes="$(sed -n 's/^\[[0-9]*\] rank [0-9]* parameters fnv1a64 \([0-9a-f]\{16\}\)$/\1/p' <<<"${out}")"
  [[ "$(wc -l <<<"${hashes}")" == "${n}" ]] || fail "expected ${n} parameter hashes"
  [[ "$(sort -u <<<"${hashes}" | wc -l)" == 1 ]] || fail "parameter hashes differ: $(echo ${hashes})"
}

case "${case_name}" in
point_to_point)
  launch -n 4 "${example}"
  expect "[0] blocking: rank 0 has data [1]"
  expect "[1] blocking: rank 1 has data [0]"
  expect "[2] blocking: rank 2 has data [0]"
  expect "[3] blocking: rank 3 has data [1]"
  expect "[0] non-blocking: rank 0 has data [1, 2, 3, 4]"
  expect "[1] non-blocking: rank 1 has data [0, 0, 0, 0]"
  expect "[3] non-blocking: rank 3 has data [1, 2, 3, 4]"
  expect "[3] any source: rank 3 received from ranks 1 and 2, total 3"
  ;;
reduce_broadcast | reduce_broadcast_2)
  n=4
  [[ "${case_name}" == reduce_broadcast_2 ]] && n=2
  launch -n "${n}" "${example}"
  mean="$(awk -v n="${n}" 'BEGIN { print (n + 1) / 2 }')"
  for r in $(seq 0 $((n - 1))); do
    expect "[${r}] reduce_tensor: rank ${r} has [${mean}, ${mean}, ${mean}]"
    expect "[${r}] avg: rank ${r} has [${mean}, ${mean}, ${mean}], max [${n}, ${n}, ${n}]"
    expect "[${r}] broadcast_tensor: rank ${r} has [0, 10, 20, 30]"
  done
  expect "[0] world size ${n}"
  ;;
sgd)
  launch -n 4 "${example}" --epochs 6
  for r in 0 1 2 3; do expect "[${r}] rank ${r}: 1024 samples, batch 16, 64 steps per epoch"; done
  check_sgd 4
  ;;
sgd_fractions)
  # Unequal partitions: local batches follow the fractions, gradients are weighted.
  launch -n 4 "${example}" --epochs 6 --fractions 0.4,0.3,0.2,0.1
  expect "[0] rank 0: 1638 samples, batch 26, 63 steps per epoch"
  expect "[3] rank 3: 409 samples, batch 6, 63 steps per epoch"
  check_sgd 4
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "pg_examples_test ${case_name}: ok"
