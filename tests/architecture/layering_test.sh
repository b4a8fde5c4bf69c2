#!/usr/bin/env bash
# The include rules hold for the source tree, and the check finds a break: a copy of the rooms'
# folders where store/ includes an agent header and an agent header includes Asio must fail,
# naming each file and include (and nothing else: Asio in a .cc file is fine).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
check="$root/scripts/check-layering.sh"
"$check"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for room in base store rendezvous agent launcher worker_runtime examples; do mkdir -p "$tmp/$room"; done
printf '#include "base/fd_io.h"\n#include "store/store.h"\n' >"$tmp/store/ok.cc"
printf '#include "agent/agent.h"\n' >"$tmp/store/bad.h"
printf '#include <vector>\n#include <boost/asio/io_context.hpp>\n' >"$tmp/agent/heavy.h"
printf '#include <boost/asio/io_context.hpp>\n' >"$tmp/agent/fine.cc"
if out=$("$check" "$tmp"); then
  echo "FAIL: an include of agent/ from store/ passed the check" >&2
  exit 1
fi
grep -qx 'store/bad.h:1: store/ may not include "agent/agent.h"' <<<"$out" || { echo "FAIL: unexpected report: $out" >&2; exit 1; }
grep -qx 'agent/heavy.h:2: a header may not include <boost/asio/io_context.hpp>' <<<"$out" || { echo "FAIL: unexpected report: $out" >&2; exit 1; }
[ "$(wc -l <<<"$out")" = 2 ] || { echo "FAIL: allowed includes reported: $out" >&2; exit 1; }
echo "layering: ok"
