#!/usr/bin/env bash
# Runs the libFuzzer targets (tests/fuzz/, docs/fuzzing.md) with ASan+UBSan and merges the
# new interesting inputs back into the kept corpus.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  how long each target runs (default 300)
#   TARGET...           worker_batch, codec, graph_upload, p2p_ring, store,
#                       pg_frames (default: all)
#   scripts/fuzz.sh --seeds   regenerates tests/fuzz/corpus/*/seed-* and regress-*, and
#                             tests/fuzz/findings/*/open-* (fuzz_make_seeds)
#
# Builds with clang (installed with apt-get when missing) into build-fuzz/ with DTR_FUZZ=ON.
# Each target runs on a working copy of tests/fuzz/corpus/<target>/ (in build-fuzz/work/),
# in one process (one core: the equivalent of -jobs=1 -workers=1, with the output in the
# log instead of fuzz-0.log); afterwards `-merge=1` re-minimizes the kept corpus: the seeds
# and regression inputs plus the fewest inputs that cover every feature seen (inputs are at
# most 2 KiB), so it stays small. Crash, leak, timeout and OOM reproducers are left in
# build-fuzz/artifacts/<target>/ and the script exits non-zero. Inputs that reach a known
# finding (tests/fuzz/known_findings.supp) are set aside in build-fuzz/known/<target>/
# instead of being kept.
# Each run prints one line per target (executions, executions per second, edges and features
# covered, corpus size) and appends it to build-fuzz/logs/summary.tsv.
# Logs: build-fuzz/logs/<target>.log. Environment: FUZZ_JOBS (build jobs, default 2),
# FUZZ_MAX_LEN (default 2048), FUZZ_ARGS (more libFuzzer flags).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${repo_root}/build-fuzz"
corpus_root="${repo_root}/tests/fuzz/corpus"
all_targets=(worker_batch codec graph_upload p2p_ring store pg_frames)
seconds=300
targets=()
seeds=0
for arg in "$@"; do
  case "${arg}" in
    -h | --help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --seeds) seeds=1 ;;
    [0-9]*) seconds="${arg}" ;;
    *) targets+=("${arg}") ;;
  esac
done
[[ ${#targets[@]} -gt 0 ]] || targets=("${all_targets[@]}")

# ---- clang with libFuzzer ----
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz.sh: installing clang" >&2
  apt-get update -qq && apt-get install -y -qq clang
fi
probe_dir="$(mktemp -d)"
trap 'rm -rf "${probe_dir}"' EXIT
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
  >"${probe_dir}/probe.cpp"
if ! clang++ -fsanitize=fuzzer,address,undefined "${probe_dir}/probe.cpp" -o "${probe_dir}/probe" \
  2>"${probe_dir}/err"; then
  echo "fuzz.sh: clang++ cannot build a libFuzzer binary:" >&2
  cat "${probe_dir}/err" >&2
  exit 1
fi

# ---- build ----
if [[ ! -f "${build_dir}/CMakeCache.txt" ]]; then
  # setup.sh installs the Debian packages dtr needs, then configures. Only what the targets
  # link is built: no CUDA, gloo, MPI or Python module (the worker's process groups are
  # dtr's own transport here), at -O1 -g1 with assertions on (half the compile time of -O2
  # -g; the sanitizers keep file and line).
  DTR_SKIP_PYTHON=1 bash "${repo_root}/scripts/setup.sh" --build-dir "${build_dir}" --no-build \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
    -DCMAKE_CXX_COMPILER=clang++ -DDTR_FUZZ=ON -DDTR_WITH_CUDA=OFF -DDTR_WITH_GLOO=OFF \
    -DDTR_WITH_MPI=OFF -DDTR_WITH_PYTHON=OFF -DDTR_BUILD_BENCH=OFF -DDTR_BUILD_EXAMPLES=OFF
fi
build_targets=(fuzz_make_seeds)
for t in "${targets[@]}"; do build_targets+=("fuzz_${t}"); done
ninja -C "${build_dir}" -j "${FUZZ_JOBS:-2}" "${build_targets[@]}"

if [[ ${seeds} -eq 1 ]]; then
  "${build_dir}/tests/fuzz/fuzz_make_seeds" "${corpus_root}" "${repo_root}/tests/fuzz/findings"
  exit 0
fi

# ---- fuzz, then merge ----
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1${ASAN_OPTIONS:+:${ASAN_OPTIONS}}"
# Known, reported findings are suppressed (tests/fuzz/known_findings.supp); any other UBSan
# report halts.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=${repo_root}/tests/fuzz/known_findings.supp${UBSAN_OPTIONS:+:${UBSAN_OPTIONS}}"
max_len="${FUZZ_MAX_LEN:-2048}"

# Moves the inputs of directory $2 that reach a known finding (a UBSan report once the
# suppressions are off) to $3, so that the kept corpus passes the ASan replay in ctest.
set_aside_known() {
  local bin="$1" dir="$2" known="$3" out bad i
  local -a files
  mapfile -t files < <(find "${dir}" -type f | LC_ALL=C sort)
  while [[ ${#files[@]} -gt 0 ]]; do
    if out=$(UBSAN_OPTIONS=halt_on_error=1 "${bin}" "${files[@]}" 2>&1); then
      return 0
    fi
    bad=$(printf '%s\n' "${out}" | sed -n 's/^Running: //p' | tail -n 1)
    if [[ -z "${bad}" || ! -f "${bad}" ]]; then
      printf '%s\n' "${out}" | tail -n 20 >&2
      return 1
    fi
    mkdir -p "${known}" && mv "${bad}" "${known}/"
    echo "fuzz.sh: set aside $(basename "${bad}") (reaches a known finding) in ${known}/"
    for i in "${!files[@]}"; do
      [[ "${files[i]}" == "${bad}" ]] && break
    done
    files=("${files[@]:i+1}")
  done
}

# One line per run: executions, their rate, and the coverage libFuzzer reached (cov: edges
# covered, ft: features; both only grow within a run), also appended to
# build-fuzz/logs/summary.tsv (date, commit, target, seconds, execs, execs/s, cov, ft,
# corpus, status) for the cumulative figures of docs/fuzzing.md.
summarize() {
  local t="$1" log="$2" execs rate cov ft corp result
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "${log}" | tail -n 1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "${log}" | tail -n 1)"
  cov="$(grep -oE 'cov: [0-9]+' "${log}" | tail -n 1 | cut -d' ' -f2)"
  ft="$(grep -oE 'ft: [0-9]+' "${log}" | tail -n 1 | cut -d' ' -f2)"
  corp="$(grep -oE 'corp: [0-9]+' "${log}" | tail -n 1 | cut -d' ' -f2)"
  result=ok
  grep -qE '^==[0-9]+==ERROR|^SUMMARY: |runtime error:' "${log}" && result=finding
  echo "fuzz.sh: ${t}: ${seconds} s, ${execs:-?} executions (${rate:-?}/s), coverage ${cov:-?} edges, ${ft:-?} features, corpus ${corp:-?}, ${result}"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%MZ)" \
    "$(git -C "${repo_root}" rev-parse --short HEAD 2>/dev/null || echo unknown)" "${t}" \
    "${seconds}" "${execs:-0}" "${rate:-0}" "${cov:-0}" "${ft:-0}" "${corp:-0}" "${result}" \
    >>"${build_dir}/logs/summary.tsv"
}

status=0
for t in "${targets[@]}"; do
  bin="${build_dir}/tests/fuzz/fuzz_${t}"
  work="${build_dir}/work/${t}"
  artifacts="${build_dir}/artifacts/${t}"
  log="${build_dir}/logs/${t}.log"
  mkdir -p "${corpus_root}/${t}" "${artifacts}" "$(dirname "${log}")"
  rm -rf "${work}" && mkdir -p "${work}"
  cp "${corpus_root}/${t}"/* "${work}/" 2>/dev/null || true
  echo "fuzz.sh: ${t} for ${seconds} s (log ${log})"
  # shellcheck disable=SC2086
  if ! "${bin}" -max_total_time="${seconds}" -timeout=60 -rss_limit_mb=4096 \
    -max_len="${max_len}" -print_final_stats=1 -artifact_prefix="${artifacts}/" ${FUZZ_ARGS:-} \
    "${work}" >"${log}" 2>&1; then
    echo "fuzz.sh: ${t}: FINDING, see ${log} and ${artifacts}/" >&2
    status=1
  fi
  summarize "${t}" "${log}"
  # Re-minimize the kept corpus: the seeds, then the fewest inputs (smallest first) of the
  # kept corpus and the working copy that cover every feature seen.
  before="$(find "${corpus_root}/${t}" -type f | wc -l) files, $(du -sh --apparent-size "${corpus_root}/${t}" | cut -f1)"
  merged="${build_dir}/merged/${t}"
  rm -rf "${merged}" && mkdir -p "${merged}"
  cp "${corpus_root}/${t}"/seed-* "${corpus_root}/${t}"/regress-* "${merged}/" 2>/dev/null || true
  if "${bin}" -merge=1 -max_len="${max_len}" -timeout=60 -rss_limit_mb=4096 "${merged}" \
    "${corpus_root}/${t}" "${work}" >>"${log}" 2>&1; then
    rm -f "${corpus_root}/${t}"/*
    cp "${merged}"/* "${corpus_root}/${t}/"
  else
    echo "fuzz.sh: ${t}: merge failed, see ${log}" >&2
    status=1
  fi
  set_aside_known "${bin}" "${corpus_root}/${t}" "${build_dir}/known/${t}" || status=1
  after="$(find "${corpus_root}/${t}" -type f | wc -l) files, $(du -sh --apparent-size "${corpus_root}/${t}" | cut -f1)"
  echo "fuzz.sh: ${t}: kept corpus ${before} -> ${after}"
done
exit "${status}"
