#!/usr/bin/env bash
# The seed's Net against torch (tests/training/seed_net_torch.py) on dtr's weights and
# batch; skipped (77) where no python3 has torch (Debian: python3-torch; scripts/test.sh
# installs it).
# Usage: seed_net_torch_test.sh SEED_NET_DUMP
set -euo pipefail
dump="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "${here}/torch_python.sh"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
"${dump}" "${work}/data" "${work}/dump.state"
"${python}" "${here}/seed_net_torch.py" "${work}/dump.state"
