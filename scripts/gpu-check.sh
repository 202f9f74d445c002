#!/usr/bin/env bash
# One full pass of dtr on a machine with a CUDA GPU: build, the `gpu` tests, the GPU
# benchmark, compute-sanitizer over the gpu tests, and the whole CPU suite of the same
# build. Every phase writes its log into the log folder and a line into its summary.txt;
# a phase that fails does not stop the later ones. Exits non-zero when any phase failed.
#
# Usage: scripts/gpu-check.sh [--logs DIR] [--build-dir DIR] [PHASE...]
#   PHASE      build gpu bench memcheck racecheck cpu pydebug (default: all, in that order)
#   --logs     where the logs go (default: $OUT when set, else BUILD_DIR/gpu-logs); in $OUT
#              they end as summary.txt and gpu-logs.tar.gz (the device tool returns 8 files)
#   GPU_CHECK_BENCH_RUNS  how many times the bench phase runs dtr_gpu_bench (default 1)
#   --build-dir  default build-gpu/
#
# On the GPU machines of ../shared/device/README.md, which reach no package archive, the
# Debian packages travel in .deps/: `source .deps/use-deps.sh && scripts/gpu-check.sh`.
# Each phase is bounded by `timeout` (GPU_CHECK_<PHASE>_TIMEOUT seconds, see below).
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${repo_root}/build-gpu"
logs=""
phases=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --logs) logs="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    -h | --help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    build | gpu | bench | memcheck | racecheck | cpu | pydebug) phases+=("$1"); shift ;;
    *) echo "gpu-check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ ${#phases[@]} -gt 0 ]] || phases=(build gpu bench memcheck racecheck cpu pydebug)
logs="${logs:-${OUT:-${build_dir}/gpu-logs}}"
mkdir -p "${logs}"
summary="${logs}/summary.txt"
export PATH="/usr/local/cuda/bin:${PATH}"
jobs="$(nproc)"
failed=0

# run_phase NAME TIMEOUT CMD...: runs CMD with its output in NAME.log, one summary line.
run_phase() {
  local name="$1" limit="$2"
  shift 2
  local t0=${SECONDS} rc=0
  echo "== ${name}: $*" | tee -a "${summary}"
  timeout --kill-after=10 "${limit}" "$@" >"${logs}/${name}.log" 2>&1 || rc=$?
  local verdict=ok
  [[ ${rc} -eq 0 ]] || { verdict="FAILED (exit ${rc}$([[ ${rc} -eq 124 ]] && echo ', timed out'))"; failed=1; }
  echo "   ${name}: ${verdict} in $((SECONDS - t0)) s" | tee -a "${summary}"
}

# compute-sanitizer over the gpu test binary, the workers it starts included. API errors
# are not reported: the OOM tests provoke cudaErrorMemoryAllocation on purpose, and NCCL
# probes kernels not built for the device (cudaFuncGetAttributes -> "no kernel image")
# inside ncclCommInit; every CUDA call of dtr checks its own result anyway.
sanitizer=(compute-sanitizer --target-processes all --error-exitcode 1 --print-limit 50
           --report-api-errors no)
gpu_tests=("${build_dir}/tests/dtr_gpu_tests" --duration=true)

{
  echo "gpu-check $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  nvcc --version | tail -1
} | tee -a "${summary}"

for phase in "${phases[@]}"; do
  case "${phase}" in
    build)
      run_phase configure 300 cmake -S "${repo_root}" -B "${build_dir}" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
      run_phase build "${GPU_CHECK_BUILD_TIMEOUT:-900}" cmake --build "${build_dir}" -j "${jobs}"
      ;;
    gpu)  # then the op comparison again, for its largest CUDA-CPU differences per dtype
      run_phase gpu "${GPU_CHECK_GPU_TIMEOUT:-600}" ctest --test-dir "${build_dir}" -L gpu \
        --output-on-failure --no-tests=error --timeout 300
      run_phase gpu-op-differences 300 "${gpu_tests[@]}" -tc="*every op of the table*"
      ;;
    bench)  # GPU_CHECK_BENCH_RUNS runs (default 1): bench.log, bench-2.log, ...
      for ((run = 1; run <= ${GPU_CHECK_BENCH_RUNS:-1}; ++run)); do
        run_phase "bench$([[ ${run} -gt 1 ]] && echo "-${run}")" "${GPU_CHECK_BENCH_TIMEOUT:-600}" \
          "${build_dir}/bench/gpu/dtr_gpu_bench"
      done
      ;;
    memcheck)
      run_phase memcheck "${GPU_CHECK_MEMCHECK_TIMEOUT:-600}" "${sanitizer[@]}" --tool memcheck "${gpu_tests[@]}"
      ;;
    racecheck)
      run_phase racecheck "${GPU_CHECK_RACECHECK_TIMEOUT:-600}" "${sanitizer[@]}" --tool racecheck "${gpu_tests[@]}"
      ;;
    cpu)
      run_phase cpu "${GPU_CHECK_CPU_TIMEOUT:-900}" ctest --test-dir "${build_dir}" -LE gpu \
        --output-on-failure --no-tests=error --timeout 300 -j "${jobs}"
      ;;
    pydebug)  # a Python session under a debugger: every thread's stack if it crashes
      # (the GPU machines' Python 3.12 died with SIGSEGV in init_master_worker, 2026-11-26,
      # on a thread that blocks signals, so no handler printed anything; they have cuda-gdb,
      # which debugs host code too, and no gdb)
      debugger="$(command -v gdb || command -v cuda-gdb || true)"
      py="$(sed -n 's/^Python_EXECUTABLE:[A-Z]*=//p' "${build_dir}/CMakeCache.txt")"
      if [[ -z "${debugger}" || -z "${py}" ]]; then
        echo "   pydebug: skipped (no gdb/cuda-gdb, or no Python module in this build)" | tee -a "${summary}"
      else
        PYTHONPATH="${build_dir}/python" run_phase pydebug 300 "${debugger}" -batch \
          -ex "set pagination off" -ex run -ex "info sharedlibrary" -ex "thread apply all bt 40" \
          --args "${py}" -c "import dtr; dtr.init_master_worker(local_workers=2, connect_timeout=60)
print('nodes', dtr.node_count()); print((dtr.ones(4) + 1).sum().item())
dtr.shutdown_master_worker(); print('pydebug: the session ran and ended')"
      fi
      ;;
  esac
done
# The device tool brings back at most 8 files from $OUT: with more phases than that, the
# logs travel as one archive (the summary stays beside it, readable at once).
if [[ -n "${OUT:-}" && "${logs}" == "${OUT}" ]]; then
  (cd "${logs}" && tar czf gpu-logs.tar.gz --exclude gpu-logs.tar.gz --exclude summary.txt -- * &&
    find . -maxdepth 1 -type f ! -name gpu-logs.tar.gz ! -name summary.txt -delete)
fi
exit "${failed}"
