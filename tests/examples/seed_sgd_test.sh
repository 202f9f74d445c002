#!/usr/bin/env bash
# seed_sgd (the seed tutorial 003) on small synthetic MNIST files, 2 short epochs:
#  - SPMD, `dtr-exec -n 2`: both ranks print the same parameter hash after every epoch and
#    each rank's loss falls;
#  - one master with a replica on each of 2 workers: the same losses and hashes as SPMD;
#  - one process against one master with one worker: the same parameters, bit for bit.
# Usage: seed_sgd_test.sh DTR_EXEC DTR_WORKER SEED_SGD
set -euo pipefail
exec_bin="$1"
worker_bin="$2"
seed_sgd="$3"
data_dir="$(mktemp -d)"
trap 'rm -rf "${data_dir}"' EXIT
args=(--epochs 2 --samples 768 --data-dir "${data_dir}")

fail() {
  echo "seed_sgd_test: $*" >&2
  exit 1
}
# "who id epoch loss hash" lines from the program's output.
table() {
  sed -n 's/^\(\[[0-9]\] \)\{0,1\}\(Rank\|Node\) \([0-9]\), epoch \([0-9]\): \([0-9.]*\) parameters fnv1a64 \([0-9a-f]*\)$/\3 \4 \5 \6/p'
}

spmd="$(timeout 100 "${exec_bin}" --timeout 90 -n 2 "${seed_sgd}" "${args[@]}" | table | sort)" ||
  fail "dtr-exec -n 2 seed_sgd failed"
echo "${spmd}"
[[ "$(wc -l <<<"${spmd}")" == 4 ]] || fail "SPMD printed $(wc -l <<<"${spmd}") epoch lines, not 4"
for e in 0 1; do
  [[ "$(awk -v e="${e}" '$2 == e { print $4 }' <<<"${spmd}" | sort -u | wc -l)" == 1 ]] ||
    fail "the ranks' parameters differ after epoch ${e}"
done
for r in 0 1; do
  awk -v r="${r}" '$1 == r { l[$2] = $3 } END { exit !(l[1] < l[0]) }' <<<"${spmd}" ||
    fail "rank ${r}'s loss did not fall"
done

master="$(timeout 100 "${exec_bin}" --timeout 90 --worker-bin "${worker_bin}" --workers 2 \
  "${seed_sgd}" "${args[@]}" | table | sort)" || fail "dtr-exec --workers 2 seed_sgd failed"
echo "${master}"
[[ "${master}" == "${spmd}" ]] || fail "the master-driven run differs from the SPMD run"

local_run="$("${seed_sgd}" --mode local "${args[@]}" | table)" || fail "seed_sgd --mode local failed"
one_worker="$(timeout 100 "${exec_bin}" --timeout 90 --worker-bin "${worker_bin}" --workers 1 \
  "${seed_sgd}" "${args[@]}" | table)" || fail "dtr-exec --workers 1 seed_sgd failed"
echo "${local_run}"
[[ -n "${local_run}" && "${local_run}" == "${one_worker}" ]] ||
  fail "in-process and on-a-worker runs differ: ${local_run} vs ${one_worker}"
echo "seed_sgd_test: ok"
