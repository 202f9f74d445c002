#!/usr/bin/env bash
# master_sgd (one master, replicas on 3 workers, the gradient all_reduce among the workers)
# under `dtr-exec --workers 3`: each node's loss falls by half, every node ends with the
# same parameters, and they are bit for bit those of pg_sgd's 3 SPMD ranks; with --capture
# (the step captured once as a graph and replayed) the very same parameters and losses.
# With GLOO "gloo" (the workers built with it), the workers' all_reduce on gloo
# (DTR_BACKEND=gloo): every node ends with the same parameters, the same in two runs; they
# are not zmq's, bit for bit, because gloo's ring sums the three gradients in another order.
# Usage: master_sgd_test.sh DTR_EXEC DTR_WORKER MASTER_SGD PG_SGD [GLOO]
set -euo pipefail
exec_bin="$1"
worker_bin="$2"
master_sgd="$3"
pg_sgd="$4"
gloo="${5:-no-gloo}"

fail() {
  echo "master_sgd_test: $*" >&2
  exit 1
}

out="$(timeout 150 "${exec_bin}" --timeout 140 --worker-bin "${worker_bin}" --workers 3 \
  "${master_sgd}" --epochs 6)" || fail "dtr-exec --workers 3 master_sgd exited with $?"
echo "${out}"
for k in 0 1 2; do
  grep -qxF "node ${k}: 1365 samples, batch 21, 65 steps per epoch" <<<"${out}" ||
    fail "node ${k}'s partition line is missing"
  losses="$(sed -n "s/^node ${k} epoch [0-9]* loss \([0-9.]*\)$/\1/p" <<<"${out}")"
  [[ "$(wc -l <<<"${losses}")" == 6 ]] || fail "node ${k} printed $(wc -l <<<"${losses}") epochs, not 6"
  awk 'NR == 1 { first = $1 } { last = $1 } END { exit !(last < first / 2) }' <<<"${losses}" ||
    fail "node ${k}'s loss did not fall by half: $(echo ${losses})"
done
hashes="$(sed -n 's/^node [0-9] parameters fnv1a64 \([0-9a-f]\{16\}\)$/\1/p' <<<"${out}")"
[[ "$(wc -l <<<"${hashes}")" == 3 ]] || fail "expected 3 parameter hashes"
[[ "$(sort -u <<<"${hashes}" | wc -l)" == 1 ]] || fail "parameter hashes differ: $(echo ${hashes})"

captured="$(timeout 150 "${exec_bin}" --timeout 140 --worker-bin "${worker_bin}" --workers 3 \
  "${master_sgd}" --epochs 6 --capture)" || fail "master_sgd --capture exited with $?"
echo "${captured}"
grep -q "^captured the step: " <<<"${captured}" || fail "master_sgd --capture did not capture"
[[ "$(grep -E '^node [0-9] (epoch|parameters)' <<<"${captured}")" == \
   "$(grep -E '^node [0-9] (epoch|parameters)' <<<"${out}")" ]] ||
  fail "the captured step's losses or parameters differ from the eager step's"

spmd="$(timeout 150 "${exec_bin}" --timeout 140 -n 3 "${pg_sgd}" --epochs 6)" ||
  fail "dtr-exec -n 3 pg_sgd exited with $?"
spmd_hash="$(sed -n 's/^\[0\] rank 0 parameters fnv1a64 \([0-9a-f]\{16\}\)$/\1/p' <<<"${spmd}")"
[[ -n "${spmd_hash}" ]] || fail "pg_sgd printed no parameter hash"
[[ "$(head -1 <<<"${hashes}")" == "${spmd_hash}" ]] ||
  fail "master-driven parameters $(head -1 <<<"${hashes}") differ from the SPMD ones ${spmd_hash}"
if [[ "${gloo}" == gloo ]]; then
  gloo_hashes=()
  for run in 1 2; do
    g="$(DTR_BACKEND=gloo timeout 150 "${exec_bin}" --timeout 140 --worker-bin "${worker_bin}" \
      --workers 3 "${master_sgd}" --epochs 2)" || fail "master_sgd on gloo exited with $?"
    h="$(sed -n 's/^node [0-9] parameters fnv1a64 \([0-9a-f]\{16\}\)$/\1/p' <<<"${g}")"
    [[ "$(wc -l <<<"${h}")" == 3 && "$(sort -u <<<"${h}" | wc -l)" == 1 ]] ||
      fail "on gloo the nodes' parameter hashes differ or are missing: $(echo ${h})"
    gloo_hashes+=("$(head -1 <<<"${h}")")
  done
  [[ "${gloo_hashes[0]}" == "${gloo_hashes[1]}" ]] ||
    fail "two runs on gloo ended differently: ${gloo_hashes[*]}"
  echo "master_sgd_test: gloo ${gloo_hashes[0]} in both runs (zmq's order of summation differs)"
fi
echo "master_sgd_test: ok"
