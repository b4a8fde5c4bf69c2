#!/usr/bin/env bash
# The launcher reads the world in one place (launcher/launch_inputs.cc: EnvSnapshot::from_process,
# HostFacts::of_this_host): no other launcher/ source calls getenv, walks environ, asks gethostname,
# DNS, the interfaces or scontrol. Below the launcher (base, store, rendezvous, agent) no source
# reads an environment variable: every setting reaches the agent through the launch plan (copying
# environ on to the workers and the keeper is not reading a setting). And the launcher's tests
# inject their environment: none of them changes the process environment.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bad=0
calls='\b(getenv|secure_getenv|environ|gethostname|getaddrinfo|getifaddrs|local_addresses|local_address_of|popen)\b'
if out=$(grep -nE "$calls" "$root"/launcher/*.cc "$root"/launcher/*.h | grep -v "^$root/launcher/launch_inputs\.\(cc\|h\):" |
         grep -vE ':[0-9]+:\s*//'); then
  echo "FAIL: launcher/ reads the world outside launcher/launch_inputs.cc:" >&2
  echo "${out//$root\//}" >&2
  bad=1
fi
if out=$(grep -nE '\b(getenv|secure_getenv)\b' "$root"/{base,store,rendezvous,agent}/*.cc "$root"/{base,store,rendezvous,agent}/*.h |
         grep -vE ':[0-9]+:\s*//'); then
  echo "FAIL: a library room reads the environment (make it a setting of the launch plan):" >&2
  echo "${out//$root\//}" >&2
  bad=1
fi
if out=$(grep -nE '\b(setenv|unsetenv|putenv|clearenv)\b' "$root"/tests/launcher/*.cc "$root"/tests/fuzz/launch_options/*.cc); then
  echo "FAIL: a launcher test changes the process environment (inject an EnvSnapshot):" >&2
  echo "${out//$root\//}" >&2
  bad=1
fi
[ "$bad" = 0 ] && echo "launch seam: ok"
exit "$bad"
