#!/usr/bin/env bash
# Backend mpi takes its ranks from MPI. Under a launcher that starts ranks without MPI
# (dtr-exec, as torchrun) each process would be an MPI world of one and every all_reduce
# would return its own value: init_process_group("mpi") must refuse, naming the launcher's
# rank and world and MPI's. Under mpirun the same program reduces across both ranks.
# Usage: pg_mpi_launcher_test.sh MPIEXEC DTR_EXEC PG_REDUCE_BROADCAST
set -euo pipefail
mpiexec="$1"
exec_bin="$2"
example="$3"
work="$(mktemp -d /tmp/dtr-mpi-launcher.XXXXXX)"
trap 'rm -rf "${work}"' EXIT

fail() {
  echo "pg_mpi_launcher_test: $*" >&2
  for f in out err; do echo "--- ${f}:" >&2; cat "${work}/${f}" >&2 2>/dev/null || true; done
  exit 1
}

rc=0
timeout 120 "${exec_bin}" --timeout 100 -n 2 "${example}" mpi >"${work}/out" 2>"${work}/err" ||
  rc=$?
[[ "${rc}" != 0 ]] || fail "dtr-exec -n 2 with backend mpi exited 0 (each rank a world of one)"
# dtr-exec stops the other rank once one fails: one refusal or both.
grep -qE "the launcher started this process as rank [01] of 2 \(RANK and WORLD_SIZE\), but MPI sees rank 0 of 1" \
  "${work}/err" || fail "the refusal does not name both worlds"
grep -qF "mpirun -np 2" "${work}/err" || fail "the refusal does not say how to start it"
if grep -q "reduce_tensor" "${work}/out"; then fail "a rank reduced alone"; fi

timeout 120 "${mpiexec}" --oversubscribe --allow-run-as-root --timeout 100 -np 2 "${example}" mpi \
  >"${work}/out" 2>"${work}/err" || fail "mpirun -np 2 pg_reduce_broadcast mpi exited with $?"
for r in 0 1; do
  grep -qxF "reduce_tensor: rank ${r} has [1.5, 1.5, 1.5]" "${work}/out" ||
    fail "rank ${r} did not reduce across both ranks under mpirun"
done
echo "pg_mpi_launcher_test: ok"
