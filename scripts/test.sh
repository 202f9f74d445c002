#!/usr/bin/env bash
# Builds dtr (scripts/setup.sh installs what is missing) and runs the whole test suite.
#
# Usage: scripts/test.sh [--sanitize | --tsan] [--no-bench] [--build-only | --test-only]
#                        [CTEST_ARG...]
#   (no flag)    build/       the normal build, then ctest
#   --sanitize   build-asan/  AddressSanitizer + UndefinedBehaviorSanitizer build, then ctest
#   --tsan       build-tsan/  ThreadSanitizer build, then ctest
#   --no-bench   the normal build without the benchmarks (no test runs one; .ci/run)
#   --build-only install what is missing, configure and build; no tests
#   --test-only  ctest on the build as it is (after a --build-only of the same mode)
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
steps=both
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sanitize | --asan) mode=address; shift ;;
    --tsan) mode=thread; shift ;;
    --no-bench) bench_args=(-DDTR_BUILD_BENCH=OFF); shift ;;
    --build-only) steps=build; shift ;;
    --test-only) steps=test; shift ;;
    -h | --help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

# Components the tests start themselves, from Debian's packages: python3-torch for
# /usr/bin/python3 (the torch comparisons: tests/training/*_torch_test.sh,
# python/tests/test_nn_functions.py), prometheus with promtool (tests/deploy/
# prometheus_test.py) and systemd's systemd-analyze (tests/deploy/systemd_test.py).
# Without them (no apt, DTR_SKIP_APT=1) those tests are reported skipped, saying why.
phase_start
packages=()
/usr/bin/python3 -c 'import torch' 2>/dev/null || packages+=(python3-torch)
command -v prometheus >/dev/null && command -v promtool >/dev/null || packages+=(prometheus)
command -v systemd-analyze >/dev/null || packages+=(systemd)
if [[ "${steps}" != test && "${DTR_SKIP_APT:-0}" != 1 && ${#packages[@]} -gt 0 ]] &&
  command -v apt-get >/dev/null; then
  as_root=()
  [[ "$(id -u)" -eq 0 ]] || as_root=(sudo)
  echo "test.sh: installing ${packages[*]} (components the tests start)"
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q --no-install-recommends \
    "${packages[@]}" ||
    { "${as_root[@]}" apt-get update -q &&
      DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q \
        --no-install-recommends "${packages[@]}"; } ||
    echo "test.sh: ${packages[*]} could not be installed; the tests that need them will be skipped"
fi
[[ "${steps}" == test ]] || phase_end torch-package

# setup.sh with the build directory and CMake arguments, unless --test-only.
build() {
  [[ "${steps}" == test ]] || bash "${repo_root}/scripts/setup.sh" --build-dir "$@"
}

# The ASan+UBSan build uses clang (setup.sh installs it): it compiles the same sources with the
# same flags in 37-41% less CPU time than g++ (kernels_elementwise.cpp 94 -> 59 s, a master
# test 56 -> 33 s), and its UBSan also checks float-to-integer conversions
# (float-cast-overflow), which g++'s does not. g++ where clang cannot be installed
# (DTR_SKIP_APT=1 without it). A build directory configured with the other compiler is
# reconfigured from scratch (CMake cannot switch compilers in place). The TSan build stays
# on g++ (its suppressions and clean runs were established with it).
sanitizer_cxx=g++
if [[ "${mode}" == address ]]; then
  if [[ "${steps}" != test ]]; then
    export DTR_EXTRA_PACKAGES="clang libclang-rt-14-dev${DTR_EXTRA_PACKAGES:+ ${DTR_EXTRA_PACKAGES}}"
  fi
  if command -v clang++ >/dev/null ||
    { [[ "${DTR_SKIP_APT:-0}" != 1 ]] && command -v apt-get >/dev/null; }; then
    sanitizer_cxx=clang++
  fi
fi
# Drops a build directory's CMake cache when it was configured with another compiler.
forget_other_compiler() {
  local cache="$1/CMakeCache.txt" have
  [[ -f "${cache}" && "${steps}" != test ]] || return 0
  have="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "${cache}")"
  if [[ "$(basename "${have}")" != "${sanitizer_cxx}" ]]; then
    echo "test.sh: $1 was configured with ${have}; reconfiguring it for ${sanitizer_cxx}"
    rm -rf "${cache}" "$1/CMakeFiles"
  fi
}

# -O1 -g1 (line tables): the sanitizers' reports keep file and line, and the build takes half
# the time of -O2 -g (measured on the two largest sources under ASan+UBSan: 47 s against 98 s).
sanitizer_args=(-DDTR_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DDTR_WITH_CUDA=OFF
  "-DCMAKE_CXX_COMPILER=${sanitizer_cxx}")
case "${mode}" in
  normal)
    build_dir="${repo_root}/build"
    cuda_args=()
    if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
      cuda_args=(-DCMAKE_CUDA_ARCHITECTURES=90-virtual)
    fi
    build "${build_dir}" "${bench_args[@]}" "${cuda_args[@]}"
    ;;
  address)
    build_dir="${repo_root}/build-asan"
    forget_other_compiler "${build_dir}"
    build "${build_dir}" -DDTR_SANITIZE=address "${sanitizer_args[@]}"
    # Any report fails the test that triggered it.
    export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:${ASAN_OPTIONS}}"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:${UBSAN_OPTIONS}}"
    ;;
  thread)
    build_dir="${repo_root}/build-tsan"
    forget_other_compiler "${build_dir}"
    build "${build_dir}" -DDTR_SANITIZE=thread "${sanitizer_args[@]}"
    # libzmq is not instrumented: see scripts/tsan.supp. Reports go to files, so that those
    # of processes whose stderr or exit status no test looks at are seen too.
    tsan_logs="${build_dir}/tsan-logs"
    rm -rf "${tsan_logs}"
    mkdir -p "${tsan_logs}"
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=7:suppressions=${repo_root}/scripts/tsan.supp:log_path=${tsan_logs}/tsan:log_exe_name=1${TSAN_OPTIONS:+:${TSAN_OPTIONS}}"
    ;;
esac

[[ "${steps}" != build ]] || exit 0
if [[ ! -f "${build_dir}/CTestTestfile.cmake" ]]; then
  echo "test.sh: ${build_dir} has not been built (run without --test-only first)" >&2
  exit 2
fi

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
