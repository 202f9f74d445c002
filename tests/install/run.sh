#!/usr/bin/env bash
# Driver of the install/find_package test (see CMakeLists.txt next to it):
#   1. cmake --install BUILD_DIR --prefix WORK_DIR/prefix   (a fresh prefix)
#   2. configure consumer/ with -DCMAKE_PREFIX_PATH=WORK_DIR/prefix, build it
#   3. run it; it must print exactly "6" (dtr::local::ones({2, 3}).sum())
set -euo pipefail

cmake_bin=cmake generator="" cxx="" build_type="" config="" cxx_flags="" link_flags=""
build_dir="" work_dir="" consumer_src=""
for arg in "$@"; do
  case "${arg}" in
    --cmake=*) cmake_bin="${arg#*=}" ;;
    --build-dir=*) build_dir="${arg#*=}" ;;
    --work-dir=*) work_dir="${arg#*=}" ;;
    --consumer-src=*) consumer_src="${arg#*=}" ;;
    --generator=*) generator="${arg#*=}" ;;
    --cxx=*) cxx="${arg#*=}" ;;
    --build-type=*) build_type="${arg#*=}" ;;
    --config=*) config="${arg#*=}" ;;
    --cxx-flags=*) cxx_flags="${arg#*=}" ;;
    --link-flags=*) link_flags="${arg#*=}" ;;
    *) echo "run.sh: unknown argument ${arg}" >&2; exit 2 ;;
  esac
done
: "${build_dir:?--build-dir is required}" "${work_dir:?--work-dir is required}"
: "${consumer_src:?--consumer-src is required}"

rm -rf "${work_dir}"
prefix="${work_dir}/prefix"
consumer_build="${work_dir}/consumer-build"

echo "== install into ${prefix}"
config_args=()
[[ -n "${config}" ]] && config_args=(--config "${config}")
"${cmake_bin}" --install "${build_dir}" --prefix "${prefix}" "${config_args[@]}"

echo "== configure the consumer"
configure=("${cmake_bin}" -S "${consumer_src}" -B "${consumer_build}"
           "-DCMAKE_PREFIX_PATH=${prefix}")
[[ -n "${generator}" ]] && configure+=(-G "${generator}")
[[ -n "${cxx}" ]] && configure+=("-DCMAKE_CXX_COMPILER=${cxx}")
[[ -n "${build_type}" ]] && configure+=("-DCMAKE_BUILD_TYPE=${build_type}")
[[ -n "${cxx_flags}" ]] && configure+=("-DCMAKE_CXX_FLAGS=${cxx_flags}")
[[ -n "${link_flags}" ]] && configure+=("-DCMAKE_EXE_LINKER_FLAGS=${link_flags}")
"${configure[@]}"

echo "== build the consumer"
"${cmake_bin}" --build "${consumer_build}" "${config_args[@]}"

echo "== run the consumer"
consumer_exe="${consumer_build}/consumer"
[[ -x "${consumer_exe}" ]] || consumer_exe="${consumer_build}/${config}/consumer"
output="$("${consumer_exe}")"
echo "${output}"
if [[ "${output}" != "6" ]]; then
  echo "run.sh: expected the consumer to print 6, got: ${output}" >&2
  exit 1
fi
echo "== install test passed"
