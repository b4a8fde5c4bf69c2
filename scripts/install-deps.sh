#!/usr/bin/env bash
# Installs exactly what crun's build, demo and tests need, from Debian's packages (apt only).
# Idempotent: packages already present are not touched and no network is used when all are there.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config git
  clang libclang-rt-14-dev              # sanitizer builds and libFuzzer (scripts/sanitize.sh, fuzz.sh)
  libboost1.81-dev                      # Asio and Process v2 (headers; v2 is compiled in one TU of ours)
  nlohmann-json3-dev libcli11-dev catch2
  libgloo-dev
  python3-torch                         # the anchor (torchrun, TCPStore) and the PyTorch compatibility tests
  iproute2 procps                       # network namespaces for multi-host tests; pgrep/ps
  slurmctld slurmd slurm-client munge   # a real Slurm on loopback for the Slurm tests
  libssl-dev                            # TLS to etcd (the etcd-v3 rendezvous)
  etcd-server etcd-client openssl curl  # a real etcd cluster (its certificates; curl checks its gateway) for the etcd-v3 tests
  prometheus chromium                   # promtool checks /metrics; headless Chromium renders the status page (tests/ops)
  elfutils                              # eu-stack: every native thread's stack of a worker before crun kills it
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
