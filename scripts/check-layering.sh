#!/usr/bin/env bash
# scripts/check-layering.sh [ROOT]: the rooms' include rule (docs/architecture.md, "Rooms").
#   base < store < rendezvous < agent < launcher; worker_runtime uses store and base only;
#   examples use worker_runtime only. A room includes its own headers and those of the rooms below
#   it, never one above; so there is no include cycle between rooms. And no header of a room
#   includes a heavy third-party header (Asio/Boost, nlohmann/json, CLI11): they stay in
#   .cc files, so that including a crun header stays cheap. And no two .cc files of the libraries
#   define a class of the same name at namespace scope (outside an anonymous namespace it has
#   external linkage: the linker keeps one of the two's inline members for both, an ODR violation
#   that no compiler reports; the store server once ran the etcd client's ~Connection).
# Prints every include that breaks a rule (file:line: what) and exits 1, else exits 0.
set -euo pipefail
root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
declare -A allowed=(
  [base]="base"
  [store]="store base"
  [rendezvous]="rendezvous store base"
  [agent]="agent rendezvous store base"
  [launcher]="launcher agent rendezvous store base"
  [worker_runtime]="worker_runtime store base"
  [examples]="worker_runtime examples"
)
bad=0
for room in "${!allowed[@]}"; do
  [ -d "$root/$room" ] || { echo "check-layering: no folder $room/" >&2; exit 1; }
  # file:line:#include "top/rest" -> a report line for each top not in the allowed list.
  out=$({ grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[^"/]+/' "$root/$room" --include='*.h' --include='*.cc' || true; } |
    awk -v root="$root/" -v room="$room" -v allowed=" ${allowed[$room]} " '{
      file = substr($0, 1, index($0, ":") - 1); rest = substr($0, length(file) + 2)
      line = substr(rest, 1, index(rest, ":") - 1)
      target = rest; sub(/^[^"]*"/, "", target); sub(/".*$/, "", target)
      top = target; sub(/\/.*$/, "", top)
      if (index(allowed, " " top " ") == 0) {
        sub("^" root, "", file)
        printf "%s:%s: %s/ may not include \"%s\"\n", file, line, room, target
      }
    }')
  if [ -n "$out" ]; then
    echo "$out"
    bad=1
  fi
  heavy=$({ grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<(boost|nlohmann|CLI)/' "$root/$room" --include='*.h' || true; } |
    sed -E "s#^$root/##; s#^([^:]+:[0-9]+):.*<([^>]+)>.*#\1: a header may not include <\2>#")
  if [ -n "$heavy" ]; then
    echo "$heavy"
    bad=1
  fi
done
# Top-level (unindented) class definitions in .cc files, outside anonymous namespaces.
dups=$(for room in base store rendezvous agent launcher worker_runtime; do
  for f in "$root/$room"/*.cc; do
    awk -v file="${f#$root/}" '
      /^namespace[[:space:]]*\{/ { anon++ }
      /^}[[:space:]]*\/\/[[:space:]]*namespace[[:space:]]*$/ { if (anon > 0) anon-- }
      anon == 0 && /^(struct|class)[[:space:]]+[A-Za-z_][A-Za-z0-9_]*[[:space:]]*(final[[:space:]]*)?(:[^;]*)?\{/ {
        name = $2; sub(/\{.*/, "", name); sub(/:$/, "", name)
        if (index(name, "::") == 0) print name, file   # X::Y is a member of X: unique with X
      }' "$f"
  done
done | sort -u | awk '{ n[$1]++; files[$1] = files[$1] " " $2 } END { for (k in n) if (n[k] > 1) printf "class %s is defined in more than one .cc file:%s\n", k, files[k] }')
if [ -n "$dups" ]; then
  echo "$dups"
  bad=1
fi
exit "$bad"
