# Phase times for the CI log; sourced by scripts/setup.sh and scripts/test.sh.
#   phase_start                 marks the start of a phase
#   phase_end NAME              prints "[phase] PASS NAME: N s" and, when DTR_PHASE_LOG names
#                               a file, appends "PASS NAME N" to it (.ci/run prints those
#                               lines as a table at the end)
# PASS is DTR_PHASE_PASS (scripts/test.sh sets normal, asan or tsan), else "setup".
_dtr_phase_t0=${SECONDS}
phase_start() { _dtr_phase_t0=${SECONDS}; }
phase_end() {
  local pass="${DTR_PHASE_PASS:-setup}" secs=$((SECONDS - _dtr_phase_t0))
  echo "[phase] ${pass} $1: ${secs} s"
  if [[ -n "${DTR_PHASE_LOG:-}" ]]; then
    echo "${pass} $1 ${secs}" >>"${DTR_PHASE_LOG}"
  fi
}
