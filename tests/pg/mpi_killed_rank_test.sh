#!/usr/bin/env bash
# A rank of an mpi group killed with SIGKILL: Open MPI's launcher ends the whole job (by
# design; dtr cannot keep the other ranks going). Checks that the job ends non-zero, well
# before the group's 100 s timeout, and that mpirun names the killed rank.
#
#   mpi_killed_rank_test.sh MPIRUN PG_TESTS_BINARY
set -u
mpirun="$1"
bin="$2"
out="$(mktemp /tmp/dtr-mpi-kill.XXXXXX)"
trap 'rm -f "${out}"' EXIT
start=$(date +%s)
# Under ThreadSanitizer: mpirun ends the surviving rank with SIGTERM, and doctest's own
# handler then allocates, which TSan reports as a signal-unsafe call; that is the test
# framework's, not dtr's.
if [[ -n "${TSAN_OPTIONS:-}" ]]; then export TSAN_OPTIONS="${TSAN_OPTIONS}:report_signal_unsafe=0"; fi
DTR_PG_MPI_KILL_TEST=1 timeout 90 "${mpirun}" --oversubscribe --allow-run-as-root --timeout 80 \
  -x DTR_PG_MPI_KILL_TEST -np 2 "${bin}" "--test-case=mpi killed rank:*" --no-version \
  >"${out}" 2>&1
rc=$?
took=$(($(date +%s) - start))
cat "${out}"
echo "mpirun exit status ${rc} after ${took} s"
if [[ ${rc} -eq 0 ]]; then
  echo "FAIL: the job went on after a rank was killed" >&2
  exit 1
fi
if [[ ${took} -ge 60 ]]; then
  echo "FAIL: the job ended only after ${took} s" >&2
  exit 1
fi
if ! grep -q "signal 9" "${out}"; then
  echo "FAIL: mpirun did not report the killed rank" >&2
  exit 1
fi
echo "PASS: Open MPI ended the job ${took} s after the rank was killed"
