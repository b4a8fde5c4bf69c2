#!/usr/bin/env bash
# Builds K test hosts as network namespaces on a private bridge, and tears them down.
#
#   netns-cluster.sh up NAME K      hosts NAME-h1..NAME-hK at 10.77.0.1..K/24 (prints "hI ADDR")
#   netns-cluster.sh down NAME      removes every namespace of the cluster (its links go with them)
#   netns-cluster.sh link NAME I up|down   connects or cuts host I (a partition)
#   netns-cluster.sh exec NAME I CMD...    runs CMD on host I
#
# The bridge lives in a namespace of its own (NAME-sw), so the addresses exist only inside the
# cluster: nothing is configured in the caller's namespace, and clusters with different NAMEs
# never see each other. Needs root and iproute2. NAME: letters, digits and '-' (at most 20).
set -euo pipefail

die() { echo "netns-cluster: $*" >&2; exit 2; }
[ $# -ge 2 ] || die "usage: $0 up NAME K | down NAME | link NAME I up|down | exec NAME I CMD..."
cmd=$1 name=$2
[[ $name =~ ^[A-Za-z0-9-]{1,20}$ ]] || die "bad cluster name '$name'"
sw="$name-sw"

case "$cmd" in
  up)
    k=${3:-}
    [[ $k =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] && [ "$k" -le 250 ] || die "host count must be 1..250, got '$k'"
    ip netns add "$sw"
    ip -n "$sw" link set lo up
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
    for i in $(seq 1 "$k"); do
      h="$name-h$i"
      ip netns add "$h"
      ip -n "$h" link set lo up
      ip -n "$sw" link add "p$i" type veth peer name eth0 netns "$h"
      ip -n "$sw" link set "p$i" master br0 up
      ip -n "$h" addr add "10.77.0.$i/24" dev eth0
      ip -n "$h" link set eth0 up
      echo "h$i 10.77.0.$i"
    done
    ;;
  down)
    for ns in $(ip netns list | awk '{print $1}' | grep -E "^$name-(sw|h[0-9]+)$" || true); do
      ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
      ip netns del "$ns"
    done
    ;;
  link)
    i=${3:-} state=${4:-}
    [[ $i =~ ^[0-9]+$ ]] || die "bad host index '$i'"
    [[ $state == up || $state == down ]] || die "link state must be up or down"
    ip -n "$sw" link set "p$i" "$state"
    ;;
  exec)
    i=${3:-}
    [[ $i =~ ^[0-9]+$ ]] || die "bad host index '$i'"
    shift 3
    exec ip netns exec "$name-h$i" "$@"
    ;;
  *) die "unknown command '$cmd'" ;;
esac
