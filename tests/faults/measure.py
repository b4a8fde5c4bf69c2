#!/usr/bin/python3
"""Medians of the fault tests' "measured:" lines over several runs (the figures in docs/reliability.md).

    /usr/bin/python3 tests/faults/measure.py [--build build] [--runs 5] [--tags worker_exit,partition]

Runs each fault test (build/tests/faults/fault_tests and soak_tests, one tag at a time, one run
after another) --runs times and prints, for every measured quantity, the median with min and
max. A run whose test fails still contributes what it measured, and is counted as failed.
Needs root, as the tests do.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAULTS = ["worker_exit", "worker_sigkill", "worker_sigsegv", "agent_kill_node", "agent_kill_host", "partition",
          "late_joiner", "sigterm_one", "sigterm_all", "sigusr1_one", "sigusr1_all", "endpoint_garbage",
          "endpoint_slow", "endpoint_oversized", "log_disk_full", "stdout_closed", "stdout_flood"]
SOAKS = ["soak_one_node", "soak_two_hosts"]
LINE = re.compile(r"^measured: (.*) ([-0-9.]+) (ms|KiB)$")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tags", default=",".join(FAULTS + SOAKS))
    a = ap.parse_args()
    values, failed = {}, {}
    for tag in a.tags.split(","):
        binary = os.path.join(a.build, "tests", "faults", "soak_tests" if tag in SOAKS else "fault_tests")
        for run in range(a.runs):
            p = subprocess.run([binary, "--warn", "NoTests", f"[{tag}]"], capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                failed[tag] = failed.get(tag, 0) + 1
            for line in p.stdout.splitlines():
                m = LINE.match(line)
                if m:
                    values.setdefault((tag, m.group(1), m.group(3)), []).append(float(m.group(2)))
        print(f"{tag}: {a.runs} runs, {failed.get(tag, 0)} failed", file=sys.stderr)
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"# fault tests, {a.runs} runs each, {os.cpu_count()} cores, load at the end {load}")
    print(f"{'test':20} {'quantity':58} {'median':>10} {'min':>10} {'max':>10}  n  failed")
    for (tag, what, unit), v in values.items():
        print(f"{tag:20} {what[:58]:58} {statistics.median(v):8.1f}{unit:>2} {min(v):8.1f}{unit:>2} "
              f"{max(v):8.1f}{unit:>2} {len(v):2}  {failed.get(tag, 0)}")


if __name__ == "__main__":
    main()
