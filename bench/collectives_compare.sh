#!/usr/bin/env bash
# Runs dtr's collectives benchmark and the peer baselines (OpenMPI over TCP and shared
# memory, gloo from C++ and through torch.distributed) alternately, ROUNDS times, at world
# sizes 2 and 4 on loopback, and prints the comparison tables (bench/collectives_table.py).
# dtr runs on its own transport (collectives through shared memory, the rows "dtr zmq shm";
# then on the sockets, zmq over tcp and ipc) and on its gloo and mpi backends (when
# built: the rows "dtr gloo", "dtr mpi tcp", "dtr mpi shm", beside the same libraries called
# directly), the latter without the per-collective signature check (the wrapper's own
# cost; the check adds one small all_gather per collective). DTR_LIBRARY_BACKENDS=0 leaves
# them out. machine.txt records the load and dtr_machine_jitter before and after the rounds
# (printed at the end). QUICK=1 is a smoke run (world 2, two sizes, a few iterations): it checks that
# every step runs, its figures mean nothing.
#
#   bash bench/collectives_compare.sh BUILD_DIR [OUT_DIR]
#
# BUILD_DIR: a dtr build with dtr-exec and dtr_collectives_bench (Release). The peers are
# the programs of ../shared/bench-peers, built by its run_all.sh into $PEERS_BUILD
# (default /tmp/peers_build; `SKIP_INSTALL=1 RUNS=1 bash run_all.sh` builds them, or run it
# once in full). Their arguments are run_all.sh's (scale 1 at world 2, 0.5 at world 4).
# Every step runs under `timeout`. Raw RESULT lines go to OUT_DIR (default a new /tmp dir).
set -u
build="$(cd "$1" && pwd)"
out="${2:-$(mktemp -d /tmp/dtr-collectives.XXXXXX)}"
rounds="${ROUNDS:-2}"
peers_src="${PEERS_SRC:-$(cd "$(dirname "$0")/../../shared/bench-peers" 2>/dev/null && pwd)}"
peers_build="${PEERS_BUILD:-/tmp/peers_build}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "${out}"
export GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1
mpirun_="mpirun --allow-run-as-root --oversubscribe --mca pml ob1 --mca oob_tcp_if_include lo \
--mca btl_tcp_if_include lo"

free_port() {  # a TCP port on 127.0.0.1 that was free a moment ago
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
step() {  # NAME TIMEOUT_S command...
  local name="$1" limit="$2"
  shift 2
  echo "[$(date +%H:%M:%S)] ${name}" >&2
  { echo "# $*"; timeout --kill-after=10 "${limit}" "$@" 2>&1; } >>"${out}/${name}.log" ||
    echo "  ${name}: exit status $?" >&2
}

# The machine's own gaps and copy rate, before and after (dtr_machine_jitter): a VM's slow
# phase or a CPU interrupted often shows here, and in no table.
jitter() {
  if [[ -x "${build}/bench/dtr_machine_jitter" ]]; then
    echo "machine ${1}: $(date -u '+%H:%M:%S UTC')"
    "${build}/bench/dtr_machine_jitter" 2
  fi
}
jitter_before="$(jitter before)"
worlds=(2 4)
dtr_sizes=()
if [[ "${QUICK:-0}" == 1 ]]; then
  worlds=(2)
  dtr_sizes=(--sizes 4,65536)
fi
for round in $(seq 1 "${rounds}"); do
  for w in "${worlds[@]}"; do
    scale=1
    [[ "${w}" == 4 ]] && scale=0.5
    [[ "${QUICK:-0}" == 1 ]] && scale=0.02
    # Collectives and sends of 64 KiB or more through shared memory (the default for ranks
    # on one host), then everything on the sockets (DTR_SAME_HOST=0), over tcp and ipc.
    step "dtr_w${w}_shm" 300 "${build}/launcher/dtr-exec" -n "${w}" --timeout 280 \
      "${build}/bench/dtr_collectives_bench" --transport ipc \
      --scale "${scale}" "${dtr_sizes[@]}"
    for tr in tcp ipc; do
      step "dtr_w${w}_${tr}" 300 env DTR_SAME_HOST=0 "${build}/launcher/dtr-exec" -n "${w}" \
        --timeout 280 "${build}/bench/dtr_collectives_bench" --transport "${tr}" \
        --scale "${scale}" "${dtr_sizes[@]}"
    done
    if [[ "${DTR_LIBRARY_BACKENDS:-1}" != 0 ]]; then
      step "dtr_gloo_w${w}" 300 "${build}/launcher/dtr-exec" -n "${w}" --timeout 280 \
        "${build}/bench/dtr_collectives_bench" --backend gloo --scale "${scale}" "${dtr_sizes[@]}"
      step "dtr_mpi_tcp_w${w}" 300 ${mpirun_} -np "${w}" --timeout 280 --mca btl tcp,self \
        "${build}/bench/dtr_collectives_bench" --backend mpi --transport mpi-tcp --scale "${scale}" \
        "${dtr_sizes[@]}"
      step "dtr_mpi_shm_w${w}" 300 ${mpirun_} -np "${w}" --timeout 280 --mca btl vader,self \
        "${build}/bench/dtr_collectives_bench" --backend mpi --transport mpi-shm --scale "${scale}" \
        "${dtr_sizes[@]}"
    fi
    step "mpi_tcp_w${w}" 150 ${mpirun_} -np "${w}" --mca btl tcp,self \
      "${peers_build}/mpi_bench" tcp "${scale}"
    step "mpi_shm_w${w}" 150 ${mpirun_} -np "${w}" --mca btl vader,self \
      "${peers_build}/mpi_bench" "shm(vader)" "${scale}"
    step "gloo_cpp_w${w}" 180 env PEERS_GLOO_PP_MAX_BYTES=262144 PEERS_GLOO_PP_MAX_ITERS=30 \
      "${peers_build}/gloo_bench" "${w}" "${scale}"
    step "torch_gloo_w${w}" 180 /usr/bin/python3 "${peers_src}/py/torch_dist_bench.py" \
      --world "${w}" --port "$(free_port)" --scale "${scale}"
  done
done
rm -rf /tmp/peers_gloo_store_* 2>/dev/null
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), rounds: ${rounds}, nproc: $(env -u OMP_NUM_THREADS nproc)"
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "${jitter_before}"
  jitter after
} >"${out}/machine.txt"
cat "${out}/machine.txt" >&2
python3 "${here}/collectives_table.py" "${out}"/*.log
echo "raw results: ${out}" >&2
