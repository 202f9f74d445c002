#!/usr/bin/env bash
# Liveness on a slow link: a master and a dtr-worker in two network namespaces joined by a
# veth pair shaped to 100 Mbit/s each way (tc tbf), with the default heartbeat timeout
# (2.5 s). A 256 MiB dist_send takes about 20 s there and 32 MiB back about 3 s: both must
# arrive whole with the session intact (heartbeats travel on their own connection, so a
# transfer that takes many timeouts is not a lost worker).
#
# Traffic goes only to these namespaces (no routes, no NAT). Everything the test makes is
# named after its PID and removed by the EXIT trap, also on failure, timeout or SIGTERM;
# every wait is bounded.
# Exit: 0 pass, 1 fail, 77 skipped (not root, no namespaces, no tbf qdisc).
#
# Usage: netns_slow_link_test.sh DTR_WORKER BIG_TRANSFER
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 DTR_WORKER BIG_TRANSFER" >&2; exit 2; }
worker_bin="$1"
transfer_bin="$2"
mib_there=256
mib_back=32
rate=100mbit
subnet=10.214.1

say() { echo "netns_slow_link_test: $*"; }
skip() {
  say "SKIPPED: $*"
  exit 77
}
fail() {
  say "FAIL: $*" >&2
  exit 1
}

[[ "$(id -u)" == 0 ]] || skip "needs root to make network namespaces (running as uid $(id -u))"
for tool in ip tc timeout; do
  command -v "${tool}" >/dev/null || skip "'${tool}' is missing (iproute2 / coreutils)"
done

tag="dtrs$$"
m_ns="${tag}-m"
w_ns="${tag}-w"
namespaces=()
pids=()
work="$(mktemp -d "/tmp/${tag}.XXXXXX")"

cleanup() {
  set +e
  local p
  for p in "${pids[@]}"; do kill -TERM "${p}" 2>/dev/null; done
  sleep 0.2
  for ns in "${namespaces[@]}"; do
    for p in $(ip netns pids "${ns}" 2>/dev/null); do kill -KILL "${p}" 2>/dev/null; done
  done
  for ns in "${namespaces[@]}"; do ip netns del "${ns}" 2>/dev/null; done
  rm -rf "${work}"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

for ns in "${m_ns}" "${w_ns}"; do
  err="$(ip netns add "${ns}" 2>&1)" || skip "cannot make network namespaces: ${err}"
  namespaces+=("${ns}")
  ip -n "${ns}" link set lo up
done
err="$(ip link add eth0 netns "${m_ns}" type veth peer name eth0 netns "${w_ns}" 2>&1)" ||
  skip "cannot make a veth pair: ${err}"
ip -n "${m_ns}" addr add "${subnet}.10/24" dev eth0
ip -n "${w_ns}" addr add "${subnet}.11/24" dev eth0
for ns in "${m_ns}" "${w_ns}"; do
  ip -n "${ns}" link set eth0 up
  ip netns exec "${ns}" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6' 2>/dev/null || true
  err="$(ip netns exec "${ns}" tc qdisc add dev eth0 root tbf rate "${rate}" burst 64kb \
         latency 400ms 2>&1)" || skip "cannot shape the link (tc tbf): ${err}"
done
say "link ${subnet}.10 <-> ${subnet}.11 shaped to ${rate} each way"

# The worker, listening on its namespace's address.
endpoint_file="${work}/endpoint"
ip netns exec "${w_ns}" "${worker_bin}" --listen "tcp://${subnet}.11:*" --insecure \
  --endpoint-file "${endpoint_file}" --log-level warn >"${work}/worker.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do
  [[ -s "${endpoint_file}" ]] && break
  sleep 0.05
done
[[ -s "${endpoint_file}" ]] || { cat "${work}/worker.log" >&2; fail "the worker did not start"; }
endpoint="$(cat "${endpoint_file}")"

# The master, default liveness (heartbeat timeout 2.5 s), in the other namespace. The two
# namespaces share this host's processes, so the same-host path (direct memory copies,
# common/same_host.hpp) would carry the tensors past the shaped link: DTR_SAME_HOST=0
# keeps them on it, as between two hosts.
rc=0
started="${EPOCHREALTIME}"
ip netns exec "${m_ns}" env DTR_WORKERS="${endpoint}" DTR_INSECURE=1 DTR_SAME_HOST=0 \
  timeout 240 "${transfer_bin}" "${mib_there}" "${mib_back}" >"${work}/master.log" 2>&1 || rc=$?
took="$(awk -v a="${started}" -v b="${EPOCHREALTIME}" 'BEGIN { printf "%.1f", b - a }')"
cat "${work}/master.log"
if [[ "${rc}" != 0 ]]; then
  say "worker log:"
  cat "${work}/worker.log"
  fail "the transfers failed (exit ${rc}) after ${took} s"
fi
# The shaping must really have been there: 256 MiB at 100 Mbit/s is over 20 s.
secs="$(sed -n 's/^there: .* in \([0-9.]*\) s$/\1/p' "${work}/master.log")"
awk -v s="${secs}" 'BEGIN { exit !(s >= 15) }' ||
  fail "${mib_there} MiB took ${secs} s: the link was not shaped to ${rate}"
say "PASS: ${mib_there} MiB there in ${secs} s and ${mib_back} MiB back, heartbeat timeout 2.5 s"
