#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs from a CUDA build made here into .dev/ (ignored by git:
# add /.dev/ to .git/info/exclude), for a lent GPU machine whose image has torch's CUDA wheels but
# not Debian's libraries: crun and its crun-keeper, nccl_test and train_mlp stripped, the worker library, Debian's
# gloo, hiredis, ibverbs and libnl, and .dev/run.sh, which runs gpu-check.sh there with CUDA's
# runtime, cuBLAS and NCCL taken from the image's torch wheels (site-packages/nvidia).
#   scripts/gpu-carry.sh [BUILD]        then on the machine: bash .dev/run.sh   (log: $OUT/gpu-check.log)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
dev=$root/.dev
rm -rf "$dev"
mkdir -p "$dev/build/launcher" "$dev/build/tests/runtime" "$dev/build/examples/train_mlp" "$dev/lib"
cp "$build/launcher/crun" "$build/launcher/crun-keeper" "$dev/build/launcher/"
cp "$build/tests/runtime/nccl_test" "$dev/build/tests/runtime/"
cp "$build/examples/train_mlp/train_mlp" "$dev/build/examples/train_mlp/"
for lib in libcrun_runtime.so.0 libgloo.so.0 libhiredis.so libibverbs.so.1 libnl-3.so.200 libnl-route-3.so.200; do
  path=$(ldd "$build/examples/train_mlp/train_mlp" | awk -v l="$lib" 'index($1, l) == 1 {print $3; exit}')
  [ -n "$path" ] || { echo "gpu-carry: train_mlp does not link $lib" >&2; exit 1; }
  cp -L "$path" "$dev/lib/"
done
strip "$dev"/build/*/* "$dev"/build/*/*/* "$dev"/lib/* 2>/dev/null || true
cat > "$dev/run.sh" <<'RUN'
#!/usr/bin/env bash
set -u
cd "$(dirname "$0")/.."
nv=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')
libs=$PWD/.dev/lib
for f in libcudart.so.13 libcublas.so.13 libnccl.so.2; do libs=$libs:$(dirname "$(find "$nv" -name "$f" | head -1)"); done
export LD_LIBRARY_PATH=$libs
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'
scripts/gpu-check.sh .dev/build python3 2>&1 | tee "${OUT:-/tmp}/gpu-check.log"
RUN
chmod +x "$dev/run.sh"
du -sh "$dev"
