#!/bin/bash
# crun expands Slurm hostlist expressions itself (no scontrol at run time); here every expansion is
# compared, line for line, with `scontrol show hostnames` of the real Slurm.
set -euo pipefail
source "${BASH_SOURCE[0]%/*}/lib.sh"
setup

valid=(
  'gpu[01-04,07],cpu3'  # ranges and single numbers in one bracket, then a plain name
  'a[0-1].b[2-3]'       # two brackets: the cartesian product, first bracket outermost
  'a[1-2]b[3-4]'
  'n[1-2][3-4]'
  'a[0-1]-b[2-3]'
  'n[1-2]'
  'x[009-011]'          # zero padding kept
  'x[8-11]'             # no padding: widths grow
  'x[00-10]'
  'n[098-102]'
  'n[001-3]'            # the padding comes from the lower bound
  'n[1-2,4-5,7]'
  'n[3,1,2]'            # order kept, not sorted
  'n1,n1'               # duplicates kept
  'n[0-1],n[0-1]'
  'rack1-n[01-02],z'    # digits and dashes in the prefix
  'gpu-[3-4],CPU[1-2]'
  'foo-01,foo-02'
  '10.0.0.[1-2]'
  'a,,b'                # empty items dropped
  'n[1-2] m'            # whitespace separates like a comma
  'plain'
  'h1,h2'
  'n[1-300]'
  ''                    # empty: no host
)
for e in "${valid[@]}"; do
  want=$(scontrol show hostnames "$e" 2>&1) || fail "scontrol show hostnames '$e' failed: $want"
  grep -q 'Invalid hostlist\|error' <<<"$want" && fail "scontrol rejects '$e' (not a valid test case): $want"
  got=$("$CRUN" --expand-hostlist "$e" 2>&1) || fail "crun --expand-hostlist '$e' failed: $got"
  [ "$got" = "$want" ] || fail "'$e': crun gave [$(echo $got)], scontrol [$(echo $want)]"
done
log "${#valid[@]} expressions expand exactly as scontrol show hostnames does"

# Malformed expressions: crun refuses them (exit 2, a message naming the expression) instead of
# guessing nodes. scontrol is no reference here: it prints "Invalid hostlist" or an error for the
# last two but exits 0, and turns 'n[1-3' into the host "n]".
for e in 'n[1-3' 'n[2-1]' 'n[a-b]'; do
  rc=0
  got=$("$CRUN" --expand-hostlist "$e" 2>&1) || rc=$?
  [ "$rc" -eq 2 ] || fail "crun --expand-hostlist '$e' exited $rc, expected 2: $got"
  grep -qF "'$e'" <<<"$got" || fail "crun's message for '$e' does not name it: $got"
done
log "malformed expressions are refused (exit 2)"
