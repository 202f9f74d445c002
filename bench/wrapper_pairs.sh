#!/usr/bin/env bash
# Issue 17's wrapper goal measured in pairs: dtr's mpi and gloo backends against the same
# libraries called directly (the peer programs of ../shared/bench-peers), each pair run
# back to back, ROUNDS times, alternating which of the two runs first. This VM has slow
# phases (everything 2-3x slower for minutes), which a ratio of medians taken minutes
# apart (bench/collectives_compare.sh) mixes in; a ratio within one pair mostly does not.
# Prints, per library, op and size, the median and range of the per-pair ratios
# dtr rate / library rate (>= 0.95 is the goal).
#
#   ROUNDS=5 SCALE=0.3 WORLD=2 KINDS="mpi-shm mpi-tcp gloo" PEERS_BUILD=/tmp/peers_build \
#     bash bench/wrapper_pairs.sh BUILD_DIR [OUT]
#
# BUILD_DIR: a Release dtr build with dtr-exec and dtr_collectives_bench, gloo and mpi built.
set -u
build="$(cd "$1" && pwd)"
out="${2:-$(mktemp -d /tmp/dtr-wrapper.XXXXXX)}"
rounds="${ROUNDS:-5}"
scale="${SCALE:-0.3}"
world="${WORLD:-2}"
read -r -a kinds <<<"${KINDS:-mpi-shm mpi-tcp gloo}"
peers="${PEERS_BUILD:-/tmp/peers_build}"
mkdir -p "${out}"
export GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1
mpirun_="mpirun --allow-run-as-root --oversubscribe --mca pml ob1 --mca oob_tcp_if_include lo \
--mca btl_tcp_if_include lo"
sizes=4,4096,262144,4194304,67108864

run() {  # LOG command...
  local log="$1"
  shift
  timeout --kill-after=10 300 "$@" >"${log}" 2>&1 || echo "  ${log}: exit status $?" >&2
}
btl() {  # KIND -> Open MPI's transport
  if [[ "$1" == mpi-shm ]]; then echo vader; else echo tcp; fi
}
dtr_run() {  # KIND ROUND
  case "$1" in
    mpi-shm | mpi-tcp)
      run "${out}/dtr_$1_$2.log" ${mpirun_} -np "${world}" --mca btl "$(btl "$1"),self" \
        "${build}/bench/dtr_collectives_bench" --backend mpi --transport "$1" --scale "${scale}" \
        --sizes "${sizes}"
      ;;
    gloo)
      run "${out}/dtr_$1_$2.log" "${build}/launcher/dtr-exec" -n "${world}" --timeout 280 \
        "${build}/bench/dtr_collectives_bench" --backend gloo --scale "${scale}" --sizes "${sizes}"
      ;;
  esac
}
lib_run() {  # KIND ROUND
  case "$1" in
    mpi-shm | mpi-tcp)
      run "${out}/lib_$1_$2.log" ${mpirun_} -np "${world}" --mca btl "$(btl "$1"),self" \
        "${peers}/mpi_bench" "$1" "${scale}"
      ;;
    gloo)
      run "${out}/lib_$1_$2.log" env PEERS_GLOO_PP_MAX_BYTES=262144 PEERS_GLOO_PP_MAX_ITERS=30 \
        "${peers}/gloo_bench" "${world}" "${scale}"
      ;;
  esac
}
for round in $(seq 1 "${rounds}"); do
  echo "[$(date +%H:%M:%S)] round ${round}" >&2
  for kind in "${kinds[@]}"; do
    if ((round % 2)); then
      dtr_run "${kind}" "${round}"
      lib_run "${kind}" "${round}"
    else
      lib_run "${kind}" "${round}"
      dtr_run "${kind}" "${round}"
    fi
  done
done
python3 - "${out}" "${rounds}" <<'EOF'
import glob, json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rates(path):
    r = {}
    if not os.path.exists(path):
        return r
    for line in open(path, errors="replace"):
        i = line.find("RESULT {")
        if i >= 0:
            d = json.loads(line[i + 7:])
            r[(d["bench"], d["bytes"])] = d["rate"]
    return r
def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"
print("| library | op | size | dtr / library, median [range] over pairs | pairs | ≥ 0.95 |")
print("|---|---|---|---|---|---|")
for kind in ("mpi-shm", "mpi-tcp", "gloo"):
    ratios = {}
    for k in range(1, rounds + 1):
        d, l = rates(f"{out}/dtr_{kind}_{k}.log"), rates(f"{out}/lib_{kind}_{k}.log")
        for key, rate in d.items():
            if key in l and l[key] > 0:
                ratios.setdefault(key, []).append(rate / l[key])
    for (bench, b), v in sorted(ratios.items()):
        m = statistics.median(v)
        print(f"| {kind} | {bench} | {size(b)} | {m:.2f} [{min(v):.2f}–{max(v):.2f}] | {len(v)} |"
              f" {'yes' if m >= 0.95 else 'no'} |")
EOF
echo "raw results: ${out}"
