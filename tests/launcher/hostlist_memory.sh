#!/bin/bash
# Defect 8: hostlist expansion is bounded before anything is expanded. Each hostile expression
# must end in crun's one-line error (exit 2) while crun runs with 256 MiB of address space; an
# unbounded expansion dies there of std::bad_alloc (SIGABRT). A 1,048,576-host list still expands.
#   hostlist_memory.sh CRUN [address|thread]   (the second argument: the build's sanitizer)
set -euo pipefail
crun=$1 sanitizer=${2:-}
fail() { echo "FAIL: $*" >&2; exit 1; }

limited() {
  if [ -z "$sanitizer" ]; then
    prlimit --as=$((256 << 20)) -- "$@"
  elif [ "$sanitizer" = address ]; then
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:hard_rss_limit_mb=256" "$@"
  else
    TSAN_OPTIONS="${TSAN_OPTIONS:-}:hard_rss_limit_mb=256" "$@"
  fi
}

refused() {  # EXPRESSION WHAT: exit 2 and a message naming WHAT
  local e=$1 what=$2 rc=0 out
  out=$(limited "$crun" --expand-hostlist "$e" 2>&1 >/dev/null) || rc=$?
  [ "$rc" -eq 2 ] || fail "'${e:0:60}...' (${#e} bytes): exit $rc, expected 2: ${out:0:300}"
  grep -qF "$what" <<<"$out" || fail "'${e:0:60}...': message does not say '$what': ${out:0:300}"
  [ "$(wc -l <<<"$out")" -eq 1 ] || fail "'${e:0:60}...': more than one line: ${out:0:300}"
  echo "ok: ${#e}-byte expression refused: ${out:0:160}"
}

# 64 ranges of 2^20 hosts in one bracket (642 bytes): 2^26 hosts before the count was checked.
ranges=$(printf '0-1048575,%.0s' $(seq 63))0-1048575
refused "n[$ranges]" "more than 1048576 hosts"
# A range padded with 4,000 zeros: a million 4,001-character names (about 4 GB).
refused "n[$(printf '0%.0s' $(seq 4000))-1048575]" "longer than 255 characters"
# Within both limits per host, but a million 208-character names: over the 64 MiB total.
refused "n[0-1048575]$(printf 'x%.0s' $(seq 200))" "more than 64 MiB"
# Hosts of several items add up: 2 x 2^20.
refused "a[0-1048575],b[0-1048575]" "more than 1048576 hosts"

# The limits leave real lists alone: 2^20 short names expand under the same memory limit.
count=$(limited "$crun" --expand-hostlist "n[0-1048575]" | wc -l)
[ "$count" -eq 1048576 ] || fail "n[0-1048575] gave $count hosts"
echo "ok: n[0-1048575] expands to $count hosts"
