#!/usr/bin/env bash
# A two-"node" cluster on one Linux machine: two network namespaces joined by a veth pair whose rate
# is limited with tc, to measure training over a slow LAN (bench/bench_lan.py). Needs root (ip netns, tc).
#
#   bench/lan_cluster.sh up RATE [DELAY]   # e.g. up 20mbit  or  up 1gbit 0.2ms
#   bench/lan_cluster.sh rate RATE [DELAY] # change the limit of a running cluster
#   bench/lan_cluster.sh down
#   bench/lan_cluster.sh show
#
# Node 0: namespace aura-lan0, device alan0, 10.201.0.1/24; node 1: aura-lan1, alan1, 10.201.0.2/24.
# Both directions are shaped: a token bucket (tbf) at RATE on each end's egress, and with DELAY a netem
# delay in front of it (each direction gets DELAY, so the round trip gets 2 x DELAY). Run a command on a
# node with `ip netns exec aura-lan0 CMD`; set GLOO_SOCKET_IFNAME=alan0 (alan1) so gloo uses the link.
set -euo pipefail

NS=(aura-lan0 aura-lan1)
DEV=(alan0 alan1)
ADDR=(10.201.0.1 10.201.0.2)

shape() {  # shape RATE [DELAY]: replace the qdiscs on both ends
  local rate=$1 delay=${2:-}
  for i in 0 1; do
    ip netns exec "${NS[$i]}" tc qdisc del dev "${DEV[$i]}" root 2>/dev/null || true
    if [[ -n "$delay" ]]; then
      ip netns exec "${NS[$i]}" tc qdisc add dev "${DEV[$i]}" root handle 1: netem delay "$delay"
      ip netns exec "${NS[$i]}" tc qdisc add dev "${DEV[$i]}" parent 1:1 handle 10: tbf rate "$rate" \
        burst 64kb latency 500ms
    else
      ip netns exec "${NS[$i]}" tc qdisc add dev "${DEV[$i]}" root tbf rate "$rate" burst 64kb latency 500ms
    fi
  done
}

case "${1:-}" in
  up)
    [[ $# -ge 2 ]] || { echo "usage: $0 up RATE [DELAY]" >&2; exit 2; }
    "$0" down
    for i in 0 1; do ip netns add "${NS[$i]}"; done
    ip link add "${DEV[0]}" type veth peer name "${DEV[1]}"
    for i in 0 1; do
      ip link set "${DEV[$i]}" netns "${NS[$i]}"
      ip netns exec "${NS[$i]}" ip addr add "${ADDR[$i]}/24" dev "${DEV[$i]}"
      ip netns exec "${NS[$i]}" ip link set "${DEV[$i]}" up
      ip netns exec "${NS[$i]}" ip link set lo up
    done
    shape "$2" "${3:-}"
    ;;
  rate)
    [[ $# -ge 2 ]] || { echo "usage: $0 rate RATE [DELAY]" >&2; exit 2; }
    shape "$2" "${3:-}"
    ;;
  down)
    for n in "${NS[@]}"; do ip netns del "$n" 2>/dev/null || true; done  # takes its end of the veth pair
    ;;
  show)
    for i in 0 1; do ip netns exec "${NS[$i]}" tc qdisc show dev "${DEV[$i]}"; done
    ;;
  *)
    echo "usage: $0 up RATE [DELAY] | rate RATE [DELAY] | down | show" >&2
    exit 2
    ;;
esac
