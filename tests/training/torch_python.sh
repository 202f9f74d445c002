# Sourced by the torch comparisons (tests/training/*_torch_test.sh): sets `python` to a
# python3 that imports torch, or prints why the test is skipped and exits 77 (Debian:
# python3-torch; scripts/test.sh installs it).
python=""
for p in python3 /usr/bin/python3; do
  if command -v "${p}" >/dev/null && "${p}" -c 'import torch' 2>/dev/null; then
    python="${p}"
    break
  fi
done
if [[ -z "${python}" ]]; then
  echo "SKIPPED: no python3 with torch (Debian: apt-get install python3-torch)"
  exit 77
fi
