#!/usr/bin/env bash
# Builds dtr (scripts/setup.sh installs what is missing) and runs the whole test suite.
#
# Usage: scripts/test.sh [--sanitize | --tsan] [--no-bench] [CTEST_ARG...]
#   (no flag)    build/       the normal build, then ctest
#   --sanitize   build-asan/  AddressSanitizer + UndefinedBehaviorSanitizer build, then ctest
#   --tsan       build-tsan/  ThreadSanitizer build, then ctest
#   --no-bench   the normal build without the benchmarks (no test runs one; .ci/run)
#   CTEST_ARG... passed to ctest, e.g. -L unit or -R tensor/
#
# Sanitizer builds are RelWithDebInfo at -O1 -g1 without the benchmarks, and without CUDA
# (nvcc's device code is not instrumented, and CI has no GPU): they are also the check that dtr builds
# and passes where there is no CUDA toolkit. The normal build compiles the CUDA sources for
# sm_90 (CMakeLists.txt) where nvidia-smi sees a GPU, and only to PTX (compute_90, no ptxas)
# where it sees none: they are still compiled, and nothing could run their code. Under --tsan every process
# (workers and ranks too) writes its reports to build-tsan/tsan-logs/, printed at the end;
# any report there fails the run. Exits non-zero when the build or any test fails.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode=normal
bench_args=()
ctest_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sanitize | --asan) mode=address; shift ;;
    --tsan) mode=thread; shift ;;
    --no-bench) bench_args=(-DDTR_BUILD_BENCH=OFF); shift ;;
    -h | --help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) ctest_args+=("$1"); shift ;;
  esac
done

# Phase times (scripts/phase_time.sh), labelled with the pass for .ci/run's table.
source "${repo_root}/scripts/phase_time.sh"
case "${mode}" in
  normal) export DTR_PHASE_PASS=normal ;;
  address) export DTR_PHASE_PASS=asan ;;
  thread) export DTR_PHASE_PASS=tsan ;;
esac

# The seed's Net is checked against torch (tests/training/seed_net_torch_test.sh): Debian's
# python3-torch for /usr/bin/python3. Without it (no apt, DTR_SKIP_APT=1) that test is
# reported skipped.
phase_start
if [[ "${DTR_SKIP_APT:-0}" != 1 ]] && command -v apt-get >/dev/null &&
  ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  as_root=()
  [[ "$(id -u)" -eq 0 ]] || as_root=(sudo)
  echo "test.sh: installing python3-torch (the torch comparison of the seed's Net)"
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q --no-install-recommends \
    python3-torch ||
    { "${as_root[@]}" apt-get update -q &&
      DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q \
        --no-install-recommends python3-torch; } ||
    echo "test.sh: python3-torch could not be installed; the torch comparison will be skipped"
fi
phase_end torch-package

# -O1 -g1 (line tables): the sanitizers' reports keep file and line, and the build takes half
# the time of -O2 -g (measured on the two largest sources under ASan+UBSan: 47 s against 98 s).
sanitizer_args=(-DDTR_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DDTR_WITH_CUDA=OFF)
case "${mode}" in
  normal)
    build_dir="${repo_root}/build"
    cuda_args=()
    if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
      cuda_args=(-DCMAKE_CUDA_ARCHITECTURES=90-virtual)
    fi
    bash "${repo_root}/scripts/setup.sh" --build-dir "${build_dir}" "${bench_args[@]}" \
      "${cuda_args[@]}"
    ;;
  address)
    build_dir="${repo_root}/build-asan"
    bash "${repo_root}/scripts/setup.sh" --build-dir "${build_dir}" \
      -DDTR_SANITIZE=address "${sanitizer_args[@]}"
    # Any report fails the test that triggered it.
    export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:${ASAN_OPTIONS}}"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:${UBSAN_OPTIONS}}"
    ;;
  thread)
    build_dir="${repo_root}/build-tsan"
    bash "${repo_root}/scripts/setup.sh" --build-dir "${build_dir}" \
      -DDTR_SANITIZE=thread "${sanitizer_args[@]}"
    # libzmq is not instrumented: see scripts/tsan.supp. Reports go to files, so that those
    # of processes whose stderr or exit status no test looks at are seen too.
    tsan_logs="${build_dir}/tsan-logs"
    rm -rf "${tsan_logs}"
    mkdir -p "${tsan_logs}"
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=7:suppressions=${repo_root}/scripts/tsan.supp:log_path=${tsan_logs}/tsan:log_exe_name=1${TSAN_OPTIONS:+:${TSAN_OPTIONS}}"
    ;;
esac

rc=0
phase_start
ctest --test-dir "${build_dir}" --output-on-failure --no-tests=error --timeout 600 -j "$(nproc)" \
  "${ctest_args[@]}" || rc=$?
phase_end tests
if [[ "${mode}" == thread ]]; then
  reports=("${tsan_logs}"/tsan.*)
  if [[ -e "${reports[0]}" ]]; then
    for f in "${reports[@]}"; do
      echo "==== ${f}" >&2
      cat "${f}" >&2
    done
    echo "test.sh: ${#reports[@]} process(es) reported ThreadSanitizer warnings (above, in ${tsan_logs}/)" >&2
    [[ ${rc} -ne 0 ]] || rc=1
  fi
fi
exit "${rc}"
