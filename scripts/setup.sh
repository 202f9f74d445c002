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
# Environment: DTR_SKIP_APT=1 skips the package check; DTR_EXTRA_PACKAGES adds Debian
# packages to it (scripts/test.sh: clang for the ASan build); DTR_JOBS overrides the
# number of parallel build jobs (default: nproc); DTR_SKIP_PYTHON=1 skips the Python module's
# dependencies (the build then has no Python module unless they are there anyway).
#
# Python: for the `python3` first on PATH (a pyenv or venv one included) it installs the
# headers and pip where missing (Debian: python3-dev, python3-pip) and, with pip, nanobind
# (the binding library the module is built with), numpy and pytest (the tests), so that
# the build includes the Python module (DTR_WITH_PYTHON, python/).
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

source "${repo_root}/scripts/phase_time.sh"

# ---- Debian packages ----
phase_start
packages=(cmake g++ ninja-build pkg-config libzmq3-dev cppzmq-dev libcereal-dev libeigen3-dev
          doctest-dev libcli11-dev libspdlog-dev libfmt-dev libreadline-dev iproute2 iptables
          libgloo-dev libopenmpi-dev openmpi-bin lld)
# shellcheck disable=SC2206  # words: package names
packages+=(${DTR_EXTRA_PACKAGES:-})
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
phase_end packages

# ---- Python: headers, pip, and nanobind / numpy / pytest for the python3 on PATH ----
# nanobind is pinned: the committed stubs (python/dtr/_dtr/*.pyi) are its stubgen's output.
python_packages=("nanobind==3.1.0" "numpy" "pytest")
phase_start
if [[ "${DTR_SKIP_PYTHON:-0}" != 1 ]]; then
  as_root=()
  [[ "$(id -u)" -eq 0 ]] || as_root=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  if ! command -v python3 >/dev/null; then
    echo "setup.sh: installing python3"
    "${as_root[@]}" apt-get update -q
    "${as_root[@]}" apt-get install -y -q --no-install-recommends python3 python3-dev python3-pip
  fi
  python3_bin="$(python3 -c 'import sys; print(sys.executable)')"
  # Debian's own interpreter: its headers and pip come from Debian packages.
  if [[ "${python3_bin}" == /usr/bin/python3* ]]; then
    deb_missing=()
    for pkg in python3-dev python3-pip; do
      status="$(dpkg-query -W -f='${db:Status-Status}' "${pkg}" 2>/dev/null || true)"
      [[ "${status}" == installed ]] || deb_missing+=("${pkg}")
    done
    if [[ ${#deb_missing[@]} -gt 0 ]]; then
      echo "setup.sh: installing ${deb_missing[*]}"
      "${as_root[@]}" apt-get update -q
      "${as_root[@]}" apt-get install -y -q --no-install-recommends "${deb_missing[@]}"
    fi
  fi
  if ! python3 -c 'import importlib.metadata as m, numpy, pytest
assert m.version("nanobind") == "3.1.0"' 2>/dev/null; then
    echo "setup.sh: installing ${python_packages[*]} for ${python3_bin} (pip)"
    python3 -m pip --version >/dev/null 2>&1 || python3 -m ensurepip --upgrade
    # Debian marks its interpreter externally managed (PEP 668). pip only adds what is
    # missing (under /usr/local for Debian's interpreter) and leaves packages that are
    # there, Debian's python3-numpy for one, as they are.
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --disable-pip-version-check \
      --root-user-action=ignore --no-warn-script-location \
      "${python_packages[@]}"
  fi
fi
phase_end python-packages

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
phase_start
cmake -S "${repo_root}" -B "${build_dir}" "${generator_args[@]}" "${cmake_args[@]}"
phase_end configure
if [[ "${do_build}" == 1 ]]; then
  echo "setup.sh: building ${build_dir} with ${jobs} jobs"
  phase_start
  cmake --build "${build_dir}" --parallel "${jobs}"
  phase_end build
fi
