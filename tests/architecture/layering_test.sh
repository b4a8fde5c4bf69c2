#!/usr/bin/env bash
# The include rule holds for the source tree, and the check finds a break: a copy of the rooms'
# folders where store/ includes an agent header must fail, naming the file and the include.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
check="$root/scripts/check-layering.sh"
"$check"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for room in base store rendezvous agent launcher worker_runtime examples; do mkdir -p "$tmp/$room"; done
printf '#include "base/fd_io.h"\n#include "store/store.h"\n' >"$tmp/store/ok.cc"
printf '#include "agent/agent.h"\n' >"$tmp/store/bad.h"
if out=$("$check" "$tmp"); then
  echo "FAIL: an include of agent/ from store/ passed the check" >&2
  exit 1
fi
grep -qx 'store/bad.h:1: store/ may not include "agent/agent.h"' <<<"$out" || { echo "FAIL: unexpected report: $out" >&2; exit 1; }
[ "$(wc -l <<<"$out")" = 1 ] || { echo "FAIL: allowed includes reported: $out" >&2; exit 1; }
echo "layering: ok"
