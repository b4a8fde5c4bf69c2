#!/bin/bash
# tools/text-order/regenerate.sh BUILD: rewrites launcher/hot_text.ld from traced runs of BUILD's
# crun (a build made by scripts/build.sh; its link writes launcher/crun.map beside crun).
#
# Two runs are traced instruction by instruction (tools/text-order/trace_text.c, ~2 minutes each,
# side by side): `crun --standalone --nproc-per-node 2 /bin/true`, and the joiner of a 2-node
# c10d job on loopback whose host runs untraced. The joiner is the path 1,023 of 1,024 agents
# take; it is told is_host=0, so that it connects when it is ready to speak (a traced agent is
# ~100,000x slower, and the host closes a connection that sends nothing for 10 s).
# Then tools/text-order/make_order.py names the input sections they ran. Needs cc and python3.
# `make_order.py --check build/launcher/crun.map launcher/hot_text.ld` says how much of the order
# a build still places (renamed or removed functions fall out of it).
set -euo pipefail
build=${1:?usage: tools/text-order/regenerate.sh BUILD}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
crun=$(realpath "$build/launcher/crun")
map="$build/launcher/crun.map"
[[ -f $map ]] || { echo "regenerate.sh: no $map (build crun with this tree's launcher/CMakeLists.txt)" >&2; exit 2; }
work=$(mktemp -d)
host="" standalone=""
# shellcheck disable=SC2086  # an empty pid is no argument
cleanup() { kill $host $standalone 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
cc -O2 -Wall -Wextra -o "$work/trace_text" "$here/trace_text.c"
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
job=(--nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id text-order)
"$crun" "${job[@]}" --rdzv-conf is_host=1,join_timeout=900,heartbeat_timeout=900 /bin/true >"$work/host.log" 2>&1 &
host=$!
"$work/trace_text" "$work/standalone" "$crun" --standalone --nproc-per-node 2 /bin/true &
standalone=$!
"$work/trace_text" "$work/joiner" "$crun" "${job[@]}" --rdzv-conf is_host=0,join_timeout=900,heartbeat_timeout=900 /bin/true
wait "$standalone"
wait "$host"
host="" standalone=""
/usr/bin/python3 "$here/make_order.py" "$map" "$work/standalone" "$work/joiner" >"$work/hot_text.ld"
mv "$work/hot_text.ld" "$root/launcher/hot_text.ld"
