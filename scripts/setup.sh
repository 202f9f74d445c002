#!/usr/bin/env bash
# Installs what dtr needs to build (Debian 12 packages, via apt-get, only those missing),
# then configures dtr with CMake + Ninja and builds it.
#
# Usage: scripts/setup.sh [--build-dir DIR] [--no-build] [CMAKE_ARG...]
#   --build-dir DIR  build directory, relative to the current directory (default: build/ in
#                    the repository root)
#   --no-build       configure only
#   CMAKE_ARG...     passed to the CMake configure step, e.g. -DDTR_SANITIZE=address
#
# Environment: DTR_SKIP_APT=1 skips the package check; DTR_JOBS overrides the number of
# parallel build jobs (default: nproc).
#
# CUDA: when /usr/local/cuda/bin exists it is put on PATH, so CMake finds nvcc and
# DTR_WITH_CUDA defaults to ON (pass -DDTR_WITH_CUDA=OFF to turn it off).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${repo_root}/build"
do_build=1
cmake_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir)
      [[ $# -ge 2 ]] || { echo "setup.sh: --build-dir needs a value" >&2; exit 2; }
      build_dir="$2"
      shift 2
      ;;
    --build-dir=*) build_dir="${1#*=}"; shift ;;
    --no-build) do_build=0; shift ;;
    -h | --help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) cmake_args+=("$1"); shift ;;
  esac
done
case "${build_dir}" in
  /*) ;;
  *) build_dir="$(pwd)/${build_dir}" ;;
esac

# ---- Debian packages ----
packages=(cmake g++ ninja-build pkg-config libzmq3-dev cppzmq-dev libcereal-dev libeigen3-dev
          doctest-dev libcli11-dev libspdlog-dev libfmt-dev libreadline-dev iproute2 iptables)
if [[ "${DTR_SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for pkg in "${packages[@]}"; do
    status="$(dpkg-query -W -f='${db:Status-Status}' "${pkg}" 2>/dev/null || true)"
    [[ "${status}" == installed ]] || missing+=("${pkg}")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "setup.sh: installing ${missing[*]}"
    sudo=()
    if [[ "$(id -u)" -ne 0 ]]; then
      if command -v sudo >/dev/null; then
        sudo=(sudo)
      else
        echo "setup.sh: missing packages (${missing[*]}); run as root or install them" >&2
        exit 1
      fi
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -q
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi

# ---- CUDA toolkit on PATH, when there is one ----
if [[ -d /usr/local/cuda/bin ]] && ! command -v nvcc >/dev/null; then
  export PATH="/usr/local/cuda/bin:${PATH}"
fi

# ---- configure and build ----
jobs="${DTR_JOBS:-$(nproc)}"
generator_args=()
# An existing build dir keeps its generator (CMake refuses to switch it).
if [[ ! -f "${build_dir}/CMakeCache.txt" ]]; then
  generator_args=(-G Ninja)
fi
echo "setup.sh: configuring ${build_dir}"
cmake -S "${repo_root}" -B "${build_dir}" "${generator_args[@]}" "${cmake_args[@]}"
if [[ "${do_build}" == 1 ]]; then
  echo "setup.sh: building ${build_dir} with ${jobs} jobs"
  cmake --build "${build_dir}" --parallel "${jobs}"
fi
