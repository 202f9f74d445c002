#!/usr/bin/env bash
# A causal attention block run by dtr on a worker against torch
# (tests/training/attention_block_torch.py), on dtr's weights and tokens; skipped (77)
# where no python3 has torch (Debian: python3-torch; scripts/test.sh installs it). The dump
# starts and stops its own dtr-worker on 127.0.0.1 (bounded waits); `timeout` bounds it too.
# Usage: attention_block_torch_test.sh ATTENTION_BLOCK_DUMP
set -euo pipefail
dump="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "${here}/torch_python.sh"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
timeout 90 "${dump}" "${work}/dump.state"
"${python}" "${here}/attention_block_torch.py" "${work}/dump.state"
