#!/usr/bin/env bash
# tests/package/deb_test.sh BUILD_DIR: `cpack -G DEB` builds crun_<version>_<arch>.deb from the
# build folder into a temporary folder; the package must hold crun, its keeper, the worker
# library with its headers and CMake config, the sbatch templates and the docs, declare its
# runtime libraries in Depends (libssl3 among them, which crun opens with dlopen), ship its programs
# stripped (their debug info in crun-dbgsym_*.ddeb, by build id; the installed size bounded), and
# run `crun --version` from its extracted tree.
set -euo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cpack -G DEB -B "$tmp/out" --config "$build/CPackConfig.cmake" > "$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log"; fail "cpack -G DEB failed"; }
debs=("$tmp"/out/crun_*.deb)
[ -f "${debs[0]}" ] || fail "no crun_*.deb in $tmp/out: $(ls "$tmp/out")"
deb=${debs[0]}

dpkg-deb -c "$deb" | awk '{print $6}' > "$tmp/files"
for f in ./usr/bin/crun ./usr/bin/crun-keeper ./usr/bin/crun-precheck ./usr/share/crun/sbatch/multi-node.sbatch \
         ./usr/share/doc/crun/README.md ./usr/share/doc/crun/store-protocol.md \
         ./usr/include/crun/worker_runtime/runtime.h ./usr/include/crun/store/store.h \
         ./usr/lib/cmake/crun/crunConfig.cmake; do
  grep -qx -- "$f" "$tmp/files" || grep -q -- "^${f%/*}/.*${f##*/}\$" "$tmp/files" || fail "the package lacks $f"
done
grep -q 'libcrun_runtime' "$tmp/files" || fail "the package lacks the worker library"

[ "$(dpkg-deb -f "$deb" Package)" = crun ] || fail "Package is not crun"
depends=$(dpkg-deb -f "$deb" Depends)
for lib in libc6 libssl3 libstdc++6; do
  [[ "$depends" == *"$lib"* ]] || fail "Depends lacks $lib: $depends"
done

# Stripped, as Debian ships programs: the debug info is in crun-dbgsym_*.ddeb, found by build id.
size=$(dpkg-deb -f "$deb" Installed-Size)
[ "$size" -le 24576 ] || fail "Installed-Size $size KiB (over 24 MiB: unstripped binaries?)"
ddebs=("$tmp"/out/crun-dbgsym_*.ddeb)
[ -f "${ddebs[0]}" ] || fail "no crun-dbgsym_*.ddeb beside the package: $(ls "$tmp/out")"
dpkg-deb -x "${ddebs[0]}" "$tmp/dbgsym"
dpkg-deb -x "$deb" "$tmp/root"
for bin in usr/bin/crun usr/bin/crun-keeper; do
  readelf -S "$tmp/root/$bin" | grep -q '\.debug_info' && fail "/$bin is not stripped"
  id=$(readelf -n "$tmp/root/$bin" | sed -n 's/.*Build ID: //p')
  [ -n "$id" ] || fail "/$bin has no build id"
  dbg="$tmp/dbgsym/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug"
  [ -f "$dbg" ] && readelf -S "$dbg" | grep -q '\.debug_info' || fail "the dbgsym package lacks /$bin's debug info (${dbg#"$tmp/dbgsym"})"
done
version=$("$tmp/root/usr/bin/crun" --version) || fail "the extracted crun --version failed"
[[ "$version" == *"$(dpkg-deb -f "$deb" Version)"* ]] || fail "crun --version says '$version', the package $(dpkg-deb -f "$deb" Version)"
echo "PASS: $(basename "$deb"): $(wc -l < "$tmp/files") entries, $size KiB installed, debug info in $(basename "${ddebs[0]}"); Depends: $depends; $version"
