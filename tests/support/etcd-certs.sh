#!/usr/bin/env bash
# Writes the TLS material of a test etcd cluster into DIR (EC P-256 keys, valid for 2 days).
#
#   etcd-certs.sh DIR IP...
#
#   ca.pem                    the test CA (ca.key signs the two certificates below)
#   server.pem, server.key    every member's certificate: SAN IP:<each IP>; serverAuth and clientAuth
#                             (etcd's JSON gateway dials its own gRPC port with it)
#   client.pem, client.key    a client certificate (clientAuth) for crun and etcdctl
#   other-ca.pem              an unrelated CA that signed none of them (the "wrong CA" case)
# Needs openssl. Prints nothing on success; openssl's errors on failure (exit non-zero).
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: $0 DIR IP..." >&2; exit 2; }
dir=$1
shift
cd "$dir"

ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

new_ca() {  # new_ca NAME CN
  openssl req -x509 "${ec[@]}" -keyout "$1.key" -out "$1.pem" -days 2 -subj "/CN=$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}

signed() {  # signed NAME CN EXTENSIONS
  openssl req -new "${ec[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
  printf '%s\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out "$1.pem" \
    -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

sans=$(printf 'IP:%s,' "$@")
new_ca ca "crun test CA"
new_ca other-ca "an unrelated CA"
signed server "etcd" "subjectAltName=${sans%,}
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth"
signed client "crun" "keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
