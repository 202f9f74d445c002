#!/usr/bin/env bash
# A master and its workers as one job: `mpirun -np 4 dtr-exec --launched master_sgd` (rank 0
# the master, ranks 1 to 3 its workers) ends with the same parameters, bit for bit, as
# `dtr-exec --workers 3 master_sgd`; so does the same job with the workers' collectives on
# the mpi backend, where Open MPI's summation order allows (it always agrees across nodes
# and runs); and --launched outside a launcher, or without a port it can agree on, fails
# naming what to set.
# Usage: master_sgd_mpirun_test.sh MPIEXEC DTR_EXEC DTR_WORKER MASTER_SGD
set -euo pipefail
mpiexec="$1"
exec_bin="$2"
worker_bin="$3"
master_sgd="$4"

fail() {
  echo "master_sgd_mpirun_test: $*" >&2
  exit 1
}
hashes() { sed -n 's/^node [0-9] parameters fnv1a64 \([0-9a-f]\{16\}\)$/\1/p' <<<"$1"; }

job="$(timeout 150 "${mpiexec}" --oversubscribe --allow-run-as-root --timeout 140 -np 4 \
  "${exec_bin}" --launched --worker-bin "${worker_bin}" "${master_sgd}" --epochs 3 2>&1)" ||
  { echo "${job}"; fail "mpirun -np 4 dtr-exec --launched master_sgd exited with $?"; }
echo "${job}"
[[ "$(hashes "${job}" | wc -l)" == 3 ]] || fail "expected 3 parameter hashes from the MPI job"
[[ "$(hashes "${job}" | sort -u | wc -l)" == 1 ]] || fail "the MPI job's nodes disagree"

local_run="$(timeout 150 "${exec_bin}" --timeout 140 --worker-bin "${worker_bin}" --workers 3 \
  "${master_sgd}" --epochs 3)" || fail "dtr-exec --workers 3 master_sgd exited with $?"
[[ "$(hashes "${job}" | head -1)" == "$(hashes "${local_run}" | head -1)" ]] ||
  fail "the MPI job's parameters differ from dtr-exec --workers 3's"

# The workers' collectives on the mpi backend (their communicator is MPI's world without the
# master): the same parameters on every node and in two runs. Not zmq's bit for bit where
# Open MPI sums the gradients in another order: compared, and said.
mpi_run() {
  timeout 150 "${mpiexec}" --oversubscribe --allow-run-as-root --timeout 140 -np 4 \
    -x DTR_BACKEND=mpi "${exec_bin}" --launched --worker-bin "${worker_bin}" \
    --worker-log-level info "${master_sgd}" --epochs 3 2>&1
}
mpi_job="$(mpi_run)" || { echo "${mpi_job}"; fail "the job on backend mpi exited with $?"; }
echo "${mpi_job}"
[[ "$(grep -c "process group of 3 workers is up on backend mpi" <<<"${mpi_job}")" == 3 ]] ||
  fail "the workers did not all say their group is up on backend mpi"
[[ "$(hashes "${mpi_job}" | wc -l)" == 3 ]] || fail "expected 3 parameter hashes on backend mpi"
[[ "$(hashes "${mpi_job}" | sort -u | wc -l)" == 1 ]] || fail "the nodes disagree on backend mpi"
mpi_again="$(mpi_run)" || { echo "${mpi_again}"; fail "the second job on backend mpi exited"; }
[[ "$(hashes "${mpi_again}" | head -1)" == "$(hashes "${mpi_job}" | head -1)" ]] ||
  fail "two jobs on backend mpi ended with different parameters"
if [[ "$(hashes "${mpi_job}" | head -1)" == "$(hashes "${job}" | head -1)" ]]; then
  echo "master_sgd_mpirun_test: backend mpi ends with zmq's parameters bit for bit"
else
  echo "master_sgd_mpirun_test: backend mpi differs from zmq in the last bits (Open MPI's order)"
fi

# A worker outside the MPI job (started by hand, dialing the master) cannot join the split
# of MPI's world: the master says so after its connect timeout. Meanwhile its heartbeats go
# on, so the job's own worker keeps the session instead of ending it ("master silent"),
# exiting and taking the master down with it before it could say anything.
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
timeout 60 "${worker_bin}" --master "tcp://127.0.0.1:${port}" --name outsider >/dev/null 2>&1 &
outsider=$!
rc=0
# (mpirun's -x applies to one app context of an MPMD line: given to each.)
odd="$(timeout 90 "${mpiexec}" --oversubscribe --allow-run-as-root --timeout 80 \
  -np 1 -x MASTER_PORT="${port}" -x DTR_BACKEND=mpi -x DTR_CONNECT_TIMEOUT_MS=4000 \
  "${exec_bin}" --launched "${master_sgd}" --epochs 1 : \
  -np 1 -x MASTER_PORT="${port}" "${exec_bin}" --launched --worker-bin "${worker_bin}" \
  "${master_sgd}" : -np 1 sleep 60 2>&1)" || rc=$?
kill "${outsider}" 2>/dev/null || true
[[ ${rc} != 0 ]] || fail "a job with a worker outside it exited 0"
grep -q "did not all initialize MPI and split its world within 4000 ms" <<<"${odd}" ||
  { echo "${odd}"; fail "the master did not name the MPI split it waited for"; }
grep -q "master silent" <<<"${odd}" && { echo "${odd}"; fail "a worker ended the session early"; }

# Outside a launcher: refused, naming how to start it.
rc=0
err="$(env -u RANK -u WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID -u PMI_RANK \
  "${exec_bin}" --launched "${master_sgd}" 2>&1)" || rc=$?
[[ ${rc} != 0 ]] || fail "--launched outside a launcher exited 0"
grep -q "start it with mpirun -np N+1, srun -n N+1" <<<"${err}" || fail "unexpected: ${err}"
# RANK and WORLD_SIZE alone give no job id: MASTER_PORT is asked for.
rc=0
err="$(env -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID -u PMI_RANK -u MASTER_PORT RANK=1 \
  WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 "${exec_bin}" --launched "${master_sgd}" 2>&1)" || rc=$?
[[ ${rc} != 0 ]] || fail "--launched without a port exited 0"
grep -q "set MASTER_PORT" <<<"${err}" || fail "unexpected: ${err}"
echo "master_sgd_mpirun_test: ok"
