#!/usr/bin/env bash
# Lanes A/B (docs/process_groups.md, "Lanes"): a two-rank all_reduce over tcp with lanes
# (the default) and without (DTR_LANES=0), beside Open MPI over TCP and gloo called
# directly, in interleaved rounds on loopback. Prints one line per measurement:
#   ROW BYTES MEDIAN_US P99_US
# with ROW dtr_lanes1, dtr_lanes0, ompi_tcp or gloo.
#
#   ROUNDS=3 PEERS_BUILD=/tmp/peers_build bash bench/lanes_ab.sh BUILD_DIR
#
# The peers are ../shared/bench-peers' programs (see bench/collectives_compare.sh).
set -u
build="$(cd "$1" && pwd)"
rounds="${ROUNDS:-3}"
peers_build="${PEERS_BUILD:-/tmp/peers_build}"
sizes=262144,1048576,4194304,16777216,67108864
export GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1
mpirun_="mpirun --allow-run-as-root --oversubscribe --mca pml ob1 --mca oob_tcp_if_include lo \
--mca btl_tcp_if_include lo"
pick() {  # RESULT lines of all_reduce -> BYTES MEDIAN P99
  grep RESULT | grep '"all_reduce"' |
    sed 's/.*"bytes":\([0-9]*\).*median_us":\([0-9.]*\).*p99_us":\([0-9.]*\).*/\1 \2 \3/'
}
for round in $(seq 1 "${rounds}"); do
  echo "== round ${round}"
  for lanes in 1 0; do
    DTR_LANES=${lanes} DTR_SAME_HOST=0 timeout 300 "${build}/launcher/dtr-exec" -n 2 \
      "${build}/bench/dtr_collectives_bench" --transport tcp --ops all_reduce --sizes "${sizes}" \
      --scale 1 2>&1 | grep '^\[0\]' | pick | sed "s/^/dtr_lanes${lanes} /"
  done
  timeout 200 ${mpirun_} -np 2 --mca btl tcp,self "${peers_build}/mpi_bench" tcp 1 2>&1 | pick |
    sed 's/^/ompi_tcp /'
  timeout 300 env PEERS_GLOO_PP_MAX_BYTES=262144 PEERS_GLOO_PP_MAX_ITERS=30 \
    "${peers_build}/gloo_bench" 2 1 2>&1 | pick | sed 's/^/gloo /'
done
