#!/usr/bin/env bash
# Network faults: the distributed SGD examples on four "hosts" (network namespaces joined by
# veth pairs to a bridge, 10.213.1.0/24) whose links delay every packet by 20 ms and lose 1%
# of them end with the same parameters, bit for bit, as over loopback:
#   1. pg_sgd, 3 ranks on loopback under dtr-exec: the reference hash;
#   2. pg_sgd, one rank per namespace (env://, rendezvous on rank 0's namespace address);
#   3. master_sgd in a fourth namespace against 3 dtr-workers listening on their namespace
#      addresses (the gradient all_reduce goes worker to worker across the bridge).
# Given DTR_KEYGEN, a cluster key is made and every process reads it (DTR_KEY_FILE): then
# runs 2 and 3 are CURVE-authenticated, encrypted links on non-loopback addresses, under
# delay and loss. Without it, the processes run keyless with DTR_INSECURE=1.
#
# Impairment: `tc netem delay 20ms loss 1%` on each host's eth0 where the kernel has
# sch_netem. Where it has not (e.g. Firecracker kernels): loss by iptables' statistic
# match (DROP 1% of the IPv4 packets leaving eth0, in the kernel) and delay by NFQUEUE:
# those packets wait in the kernel's netfilter queue until nfq_delay (nfq_delay.cpp) accepts
# each one 20 ms after it was queued, in order (it prints how late its verdicts were at
# most). The test measures the TCP round trip between two hosts and fails if a delay it
# claims is not there; what it could not apply it says plainly, and runs without it.
#
# Traffic goes only to loopback and to these namespaces (no routes, no NAT). Everything the
# test makes (namespaces, links, processes) is named after its PID and removed by the EXIT
# trap, also on failure, timeout or SIGTERM; every wait is bounded.
# Exit: 0 pass, 1 fail, 77 skipped (not root, namespaces cannot be made, a tool missing).
#
# Usage: netns_sgd_test.sh DTR_EXEC DTR_WORKER PG_SGD MASTER_SGD NFQ_DELAY [DTR_KEYGEN]
set -euo pipefail
[[ $# -ge 5 ]] || { echo "usage: $0 DTR_EXEC DTR_WORKER PG_SGD MASTER_SGD NFQ_DELAY [DTR_KEYGEN]" >&2; exit 2; }
exec_bin="$1"
worker_bin="$2"
pg_sgd="$3"
master_sgd="$4"
nfq_delay="$5"
keygen="${6:-}"
epochs=3
delay_ms=20
loss_pct=1
loss_probability=0.01
subnet=10.213.1
started="${EPOCHREALTIME}"

say() { echo "netns_sgd_test: $*"; }
skip() {
  say "SKIPPED: $*"
  exit 77
}
fail() {
  say "FAIL: $*" >&2
  exit 1
}

[[ "$(id -u)" == 0 ]] || skip "needs root to make network namespaces (running as uid $(id -u))"
for tool in ip timeout; do
  command -v "${tool}" >/dev/null || skip "'${tool}' is missing (iproute2 / coreutils)"
done

tag="dtrn$$"
br_ns="${tag}-br"
hosts=("${tag}-h0" "${tag}-h1" "${tag}-h2" "${tag}-h3")   # h0: master_sgd; h1-h3: ranks, workers
addr=("${subnet}.10" "${subnet}.11" "${subnet}.12" "${subnet}.13")
namespaces=()
pids=()     # running background jobs (bg), signalled by cleanup
nfq_pid=()
work="$(mktemp -d "/tmp/${tag}.XXXXXX")"

cleanup() {
  set +e
  local p alive
  for p in "${pids[@]}"; do kill -TERM "${p}" 2>/dev/null; done
  for _ in $(seq 50); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "${p}" 2>/dev/null && alive=1; done
    [[ "${alive}" == 0 ]] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "${p}" 2>/dev/null; done
  # Whatever still runs inside our namespaces was started by this test.
  for ns in "${namespaces[@]}"; do
    for p in $(ip netns pids "${ns}" 2>/dev/null); do kill -KILL "${p}" 2>/dev/null; done
  done
  for ns in "${namespaces[@]}"; do ip netns del "${ns}" 2>/dev/null; done
  rm -rf "${work}"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# nsx NS CMD...: CMD in namespace NS.
nsx() {
  local ns="$1"
  shift
  ip netns exec "${ns}" "$@"
}
# bg LOG CMD...: CMD in the background, output to LOG; its pid in $bg_pid and in pids.
bg() {
  local log="$1"
  shift
  "$@" >"${log}" 2>&1 &
  bg_pid=$!
  pids+=("${bg_pid}")
}
# wait_rc PID: waits for a job of bg, its exit status in $rc (a signal meanwhile still runs
# the traps); the pid leaves pids, so cleanup never signals a pid that may be reused.
wait_rc() {
  rc=0
  wait "$1" || rc=$?
  local keep=() p
  for p in "${pids[@]}"; do [[ "${p}" == "$1" ]] || keep+=("${p}"); done
  pids=("${keep[@]}")
}
# wait_file FILE SECONDS [PID]: until FILE exists (1 if it never did, or PID ended first).
wait_file() {
  local i
  for ((i = 0; i < $2 * 20; ++i)); do
    [[ -e "$1" ]] && return 0
    [[ -n "${3:-}" ]] && ! kill -0 "$3" 2>/dev/null && return 1
    sleep 0.05
  done
  [[ -e "$1" ]]
}

# ---- the network: a bridge in its own namespace, four hosts on it ----
err="$(ip netns add "${br_ns}" 2>&1)" || skip "cannot make network namespaces: ip netns add: ${err}"
namespaces+=("${br_ns}")
err="$(ip -n "${br_ns}" link add br0 type bridge 2>&1)" || skip "cannot make a bridge: ${err}"
ip -n "${br_ns}" link set br0 up
ip -n "${br_ns}" link set lo up
for k in 0 1 2 3; do
  ns="${hosts[k]}"
  err="$(ip netns add "${ns}" 2>&1)" || skip "cannot make network namespaces: ip netns add: ${err}"
  namespaces+=("${ns}")
  err="$(ip link add eth0 netns "${ns}" type veth peer name "p${k}" netns "${br_ns}" 2>&1)" ||
    skip "cannot make veth pairs: ${err}"
  ip -n "${br_ns}" link set "p${k}" master br0
  ip -n "${br_ns}" link set "p${k}" up
  ip -n "${ns}" addr add "${addr[k]}/24" dev eth0
  ip -n "${ns}" link set lo up
  ip -n "${ns}" link set eth0 up
  # No IPv6 chatter (router solicitations, MLD) on the links: IPv4 only.
  nsx "${ns}" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6' 2>/dev/null || true
done
say "namespaces ${hosts[*]} (${addr[*]}) on bridge br0 in ${br_ns}"

# rtt_ms FROM TO: the median of 5 TCP connects from namespace FROM to a closed port on
# address TO (SYN out, RST back: one round trip), in ms; one connect in one shell.
rtt_ms() {
  # shellcheck disable=SC2016  # the script is expanded by the inner bash
  nsx "$1" timeout 15 bash -c '
    t=()
    for i in 1 2 3 4 5; do
      s=${EPOCHREALTIME/./}
      : 2>/dev/null 3<>"/dev/tcp/$0/9"
      e=${EPOCHREALTIME/./}
      t+=($(( (e - s) / 10 )))
    done
    printf "%s\n" "${t[@]}" | sort -n | sed -n 3p | awk "{ printf \"%.2f\", \$1 / 100 }"' "$2"
}
base_rtt="$(rtt_ms "${hosts[0]}" "${addr[1]}")" ||
  fail "no TCP round trip from ${hosts[0]} to ${addr[1]} over the bridge"
say "TCP connect round trip ${hosts[0]} -> ${addr[1]} before impairment: ${base_rtt} ms"

# ---- the impairment ----
delay_how=""   # empty: no delay applied
loss_how=""    # empty: no loss applied
netem_err="$(tc -n "${hosts[0]}" qdisc add dev eth0 root netem delay "${delay_ms}ms" \
  loss "${loss_pct}%" 2>&1)" && netem=1 || netem=0
if [[ "${netem}" == 1 ]]; then
  for k in 1 2 3; do
    tc -n "${hosts[k]}" qdisc add dev eth0 root netem delay "${delay_ms}ms" loss "${loss_pct}%"
  done
  delay_how="tc netem delay ${delay_ms}ms on every host's eth0 egress"
  loss_how="tc netem loss ${loss_pct}% on every host's eth0 egress"
else
  netem_err="$(tr '\n' ' ' <<<"${netem_err}")"
  say "netem unavailable in this kernel (tc qdisc add ... netem: ${netem_err% }): using iptables and NFQUEUE instead"
  command -v iptables >/dev/null ||
    skip "netem unavailable and 'iptables' is missing (scripts/setup.sh installs it)"
  # Loss: in the kernel, xt_statistic (or its nftables equivalent under iptables-nft).
  loss_ok=1
  for k in 0 1 2 3; do
    if ! err="$(nsx "${hosts[k]}" iptables -w 5 -A OUTPUT -o eth0 -m statistic --mode random \
      --probability "${loss_probability}" -j DROP 2>&1)"; then
      loss_ok=0
      say "loss unavailable in this kernel (iptables -m statistic: $(tr '\n' ' ' <<<"${err}")): running without ${loss_pct}% loss"
      break
    fi
  done
  [[ "${loss_ok}" == 1 ]] &&
    loss_how="iptables -A OUTPUT -o eth0 -m statistic --mode random --probability ${loss_probability} -j DROP on every host (in the kernel)"
  # Delay: every packet leaving eth0 waits in the kernel's queue until nfq_delay accepts it.
  delay_ok=1
  if [[ ! -x "${nfq_delay}" ]]; then
    delay_ok=0
    say "netem unavailable in this kernel and ${nfq_delay} missing: running without ${delay_ms} ms delay"
  else
    for k in 0 1 2 3; do
      bg "${work}/nfq${k}.log" timeout 270 ip netns exec "${hosts[k]}" "${nfq_delay}" 0 \
        "${delay_ms}" "${work}/nfq${k}.ready"
      nfq_pid[k]="${bg_pid}"
    done
    for k in 0 1 2 3; do
      if ! wait_file "${work}/nfq${k}.ready" 10 "${nfq_pid[k]}"; then
        delay_ok=0
        say "NFQUEUE unavailable in this kernel ($(tr '\n' ' ' <<<"$(cat "${work}/nfq${k}.log")")): running without ${delay_ms} ms delay"
        break
      fi
    done
    if [[ "${delay_ok}" == 1 ]]; then
      for k in 0 1 2 3; do
        if ! err="$(nsx "${hosts[k]}" iptables -w 5 -A OUTPUT -o eth0 -j NFQUEUE --queue-num 0 2>&1)"; then
          delay_ok=0
          for j in $(seq 0 $((k - 1))); do
            nsx "${hosts[j]}" iptables -w 5 -D OUTPUT -o eth0 -j NFQUEUE --queue-num 0
          done
          say "NFQUEUE unavailable in this kernel (iptables -j NFQUEUE: $(tr '\n' ' ' <<<"${err}")): running without ${delay_ms} ms delay"
          break
        fi
      done
    fi
  fi
  [[ "${delay_ok}" == 1 ]] &&
    delay_how="iptables -A OUTPUT -o eth0 -j NFQUEUE + nfq_delay ${delay_ms} ms on every host (packets held in the kernel's queue, accepted in order ${delay_ms} ms later)"
fi
say "impairment, delay: ${delay_how:-NONE (not available here)}"
say "impairment, loss:  ${loss_how:-NONE (not available here)}"
[[ -n "${delay_how}" && -n "${loss_how}" ]] ||
  say "running WITHOUT the full impairment: what is missing is named above"

rtt="$(rtt_ms "${hosts[0]}" "${addr[1]}")" || fail "no TCP round trip over the impaired links"
say "TCP connect round trip ${hosts[0]} -> ${addr[1]} with impairment: ${rtt} ms (median of 5)"
if [[ -n "${delay_how}" ]]; then
  # One round trip crosses two delayed egresses: 2 x 20 ms.
  awk -v r="${rtt}" -v d="${delay_ms}" 'BEGIN { exit !(r >= 1.8 * d) }' ||
    fail "the round trip is ${rtt} ms: the ${delay_ms} ms delay each way is not there"
fi

# The namespaces share this host's processes: without this, master and workers would find
# the same-host path (direct memory copies, common/same_host.hpp) and move tensors past
# the impaired links. Every process keeps its bytes on the sockets, as between hosts.
export DTR_SAME_HOST=0

# ---- the key ----
if [[ -n "${keygen}" ]]; then
  [[ -x "${keygen}" ]] || fail "dtr-keygen ${keygen} is not executable"
  err="$(timeout 30 "${keygen}" -o "${work}/cluster.key" 2>&1)" || fail "dtr-keygen failed: ${err}"
  export DTR_KEY_FILE="${work}/cluster.key"
  say "cluster key ${DTR_KEY_FILE} (dtr-keygen): every process runs with CURVE"
else
  # Without a key, a dtr with authentication refuses plain links to non-loopback addresses
  # unless told DTR_INSECURE=1 (one without authentication ignores it).
  export DTR_INSECURE=1
  say "no dtr-keygen given: processes run without a key (DTR_INSECURE=1)"
fi

# hashes FILE PATTERN: the 16-hex-digit hashes of the lines matching PATTERN (sed regex
# before the hash).
hashes() { sed -n "s/^$2 parameters fnv1a64 \([0-9a-f]\{16\}\)$/\1/p" "$1"; }
# one_hash WHAT FILE PATTERN N: checks N hashes, all equal; prints it.
one_hash() {
  local h
  h="$(hashes "$2" "$3")"
  [[ "$(grep -c . <<<"${h}")" == "$4" ]] || fail "$1: expected $4 parameter hashes, got: ${h//$'\n'/ }"
  [[ "$(sort -u <<<"${h}" | wc -l)" == 1 ]] || fail "$1: parameter hashes differ: ${h//$'\n'/ }"
  head -1 <<<"${h}"
}
seconds_since() { awk -v s="$1" -v e="${EPOCHREALTIME}" 'BEGIN { printf "%.1f", e - s }'; }

# ---- 1. the reference: pg_sgd, 3 ranks on loopback ----
t0="${EPOCHREALTIME}"
bg "${work}/loopback.out" timeout 60 "${exec_bin}" --timeout 50 -n 3 "${pg_sgd}" --epochs "${epochs}"
wait_rc "${bg_pid}"
cat "${work}/loopback.out"
[[ "${rc}" == 0 ]] || fail "pg_sgd on loopback (dtr-exec -n 3) exited with ${rc}"
ref="$(one_hash "pg_sgd on loopback" "${work}/loopback.out" '\[[0-9]\] rank [0-9]' 3)"
say "loopback pg_sgd: ${ref} ($(seconds_since "${t0}") s)"

# ---- 2. pg_sgd, one rank per namespace ----
t0="${EPOCHREALTIME}"
rank_pids=()
for r in 0 1 2; do
  bg "${work}/rank${r}.out" timeout 60 ip netns exec "${hosts[r + 1]}" env RANK="${r}" \
    WORLD_SIZE=3 MASTER_ADDR="${addr[1]}" MASTER_PORT=29500 "${pg_sgd}" --epochs "${epochs}"
  rank_pids+=("${bg_pid}")
done
for r in 0 1 2; do
  wait_rc "${rank_pids[r]}"
  sed "s/^/[${hosts[r + 1]}] /" "${work}/rank${r}.out"
  [[ "${rc}" == 0 ]] || fail "pg_sgd rank ${r} in ${hosts[r + 1]} exited with ${rc}"
done
cat "${work}"/rank{0,1,2}.out >"${work}/ranks.out"
got="$(one_hash "pg_sgd over the namespaces" "${work}/ranks.out" 'rank [0-9]' 3)"
[[ "${got}" == "${ref}" ]] ||
  fail "pg_sgd over the namespaces ended with ${got}, on loopback with ${ref}"
say "pg_sgd over the namespaces: ${got} = loopback ($(seconds_since "${t0}") s)"

# ---- 3. master_sgd in h0, dtr-workers in h1-h3 ----
t0="${EPOCHREALTIME}"
workers=()
worker_pids=()
for k in 1 2 3; do
  bg "${work}/worker${k}.log" timeout 120 ip netns exec "${hosts[k]}" "${worker_bin}" \
    --listen "tcp://${addr[k]}:7000" --endpoint-file "${work}/worker${k}.ep" --log-level warn
  worker_pids+=("${bg_pid}")
done
for k in 1 2 3; do
  wait_file "${work}/worker${k}.ep" 20 ||
    fail "dtr-worker in ${hosts[k]} did not come up: $(cat "${work}/worker${k}.log")"
  workers+=("$(cat "${work}/worker${k}.ep")")
done
say "workers: ${workers[*]}"
bg "${work}/master.out" timeout 90 ip netns exec "${hosts[0]}" \
  env DTR_WORKERS="$(IFS=,; echo "${workers[*]}")" "${master_sgd}" --epochs "${epochs}"
wait_rc "${bg_pid}"
sed "s/^/[${hosts[0]}] /" "${work}/master.out"
[[ "${rc}" == 0 ]] || fail "master_sgd in ${hosts[0]} exited with ${rc}; worker logs: $(cat "${work}"/worker*.log)"
for p in "${worker_pids[@]}"; do kill -TERM "${p}" 2>/dev/null || true; done
for k in 1 2 3; do
  wait_rc "${worker_pids[k - 1]}"
  [[ "${rc}" == 0 || "${rc}" == 143 ]] ||
    fail "dtr-worker in ${hosts[k]} exited with ${rc}: $(cat "${work}/worker${k}.log")"
done
got="$(one_hash "master_sgd over the namespaces" "${work}/master.out" 'node [0-9]' 3)"
[[ "${got}" == "${ref}" ]] ||
  fail "master_sgd over the namespaces ended with ${got}, pg_sgd on loopback with ${ref}"
say "master_sgd over the namespaces: ${got} = loopback ($(seconds_since "${t0}") s)"

# ---- what the impairment did ----
if [[ "${netem}" == 1 ]]; then
  for k in 0 1 2 3; do
    say "${hosts[k]}: $(tc -s -n "${hosts[k]}" qdisc show dev eth0 | tr '\n' ' ' | tr -s ' ')"
  done
else
  for k in 0 1 2 3; do
    counts="$(nsx "${hosts[k]}" iptables -w 5 -nvx -L OUTPUT |
      awk '$3 == "DROP" { d = $1 } $3 == "NFQUEUE" { q = $1 } END { printf "dropped %d, queued %d", d, q }')"
    say "${hosts[k]} eth0 egress: ${counts} packets"
  done
  if [[ -n "${delay_how}" ]]; then
    for k in 0 1 2 3; do kill -TERM "${nfq_pid[k]}" 2>/dev/null || true; done
    for k in 0 1 2 3; do
      # Bounded: once (CI, 2026-11-26, ASan pass) one did not end on SIGTERM, and this wait
      # ran into ctest's timeout after the SGD runs had all passed. What it had printed is
      # shown; the namespace's processes are killed.
      for ((i = 0; i < 200; ++i)); do kill -0 "${nfq_pid[k]}" 2>/dev/null || break; sleep 0.05; done
      if kill -0 "${nfq_pid[k]}" 2>/dev/null; then
        say "WARNING: nfq_delay in ${hosts[k]} did not end within 10 s of SIGTERM; killed (its" \
          "log: $(cat "${work}/nfq${k}.log"))"
        for p in $(ip netns pids "${hosts[k]}" 2>/dev/null); do kill -KILL "${p}" 2>/dev/null; done
        kill -KILL "${nfq_pid[k]}" 2>/dev/null || true
        wait_rc "${nfq_pid[k]}"
        continue
      fi
      wait_rc "${nfq_pid[k]}"
      [[ "${rc}" == 0 ]] || fail "nfq_delay in ${hosts[k]} exited with ${rc}: $(cat "${work}/nfq${k}.log")"
      say "${hosts[k]}: $(cat "${work}/nfq${k}.log")"
    done
  fi
fi
summary="delay $([[ -n "${delay_how}" ]] && echo "${delay_ms} ms" || echo none)"
summary+=", loss $([[ -n "${loss_how}" ]] && echo "${loss_pct}%" || echo none)"
summary+=", $([[ -n "${keygen}" ]] && echo "CURVE key" || echo "no key")"
say "ok ($(seconds_since "${started}") s; ${summary})"
