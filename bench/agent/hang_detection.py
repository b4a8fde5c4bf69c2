#!/usr/bin/python3
"""Hang detection with --heartbeat-timeout auto against fixed timeouts, in one run.

    /usr/bin/python3 bench/agent/hang_detection.py --crun build/launcher/crun [--rounds 7]
        [--before /work/notes/timeouts-before/crun]

A Python worker beats every 200 ms on a fixed schedule (the file base/heartbeat_file.h
describes) for 3 s, prints the monotonic time of its last beat and goes silent. Each variant runs
once per round, interleaved (order rotated every round), after one warm-up run of each, not counted:

  auto        --heartbeat-timeout auto (2.5 x the longest recent interval, floor 0.5 s)
  fixed 2 s   --heartbeat-timeout 2    (10 x the interval: what one sets by hand, knowing it)
  fixed 30 s  is not run: its figure is 30 s plus the same overhead

Figures per variant, median of the rounds: the latency from the worker's last beat to the
moment crun's "is hung" line reaches this script (CLOCK_MONOTONIC, the same clock the worker
writes), and the CPU time of the agent's loop thread until then (/proc/PID/schedstat when the
line arrives: auto reads the files every 50-100 ms, the fixed timeout only at its deadline).
The anchor, in the same rounds: the chosen timeout auto logged (the least its latency can be).

With --before (a crun with its crun-keeper beside it; give --crun a copy placed alike, in a folder
of its own with its crun-keeper: a binary deep in a build tree started ~0.2 ms slower here), the start-up of `crun --standalone --no-python /bin/true` is also timed with
that binary and with --crun, interleaved (the order check runs at every start).
"""
import argparse
import os
import re
import select
import statistics
import subprocess
import sys
import time

WORKER = """
import mmap, os, struct, sys, time
hb = mmap.mmap(os.open(os.environ['CRUN_HEARTBEAT_FILE'], os.O_RDWR), 16)
t0 = time.monotonic()
for step in range(15):
    last = time.monotonic_ns()
    hb[:] = struct.pack('=qq', step, last)
    time.sleep(max(0.0, t0 + (step + 1) * 0.2 - time.monotonic()))
print('last', last, flush=True)
time.sleep(60)
"""

def cpu_seconds(pid):
    """CPU time of the agent's main thread (its event loop), from /proc/PID/schedstat, in s."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def one_run(crun, flags):
    argv = [crun, "--standalone", "--nproc-per-node", "1", *flags, "--no-python", "/usr/bin/python3", "-c", WORKER]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err, last_ns, hung_ns, cpu = b"", b"", None, None, None
    deadline = time.monotonic() + 60
    while hung_ns is None and time.monotonic() < deadline:
        ready, _, _ = select.select([p.stdout, p.stderr], [], [], 1.0)
        for f in ready:
            chunk = os.read(f.fileno(), 65536)
            if f is p.stdout:
                out += chunk
            else:
                err += chunk
                if b"is hung" in err and hung_ns is None:
                    hung_ns = time.monotonic_ns()
                    cpu = cpu_seconds(p.pid)
    p.wait(timeout=60)
    m = re.search(rb"last (\d+)", out)
    if hung_ns is None or not m:
        raise SystemExit(f"no hang line or no last beat: {err.decode(errors='replace')}")
    chosen = re.search(rb"heartbeat timeout \(auto\): (\d+) ms", err)
    return (hung_ns - int(m.group(1))) / 1e9, cpu, int(chosen.group(1)) / 1e3 if chosen else None


def start_time(crun):
    t = time.monotonic()
    subprocess.run([crun, "--standalone", "--no-python", "/bin/true"], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--crun", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--before")
    a = ap.parse_args()
    variants = {"auto": ["--heartbeat-timeout", "auto"], "fixed 2 s": ["--heartbeat-timeout", "2"]}
    samples = {v: [] for v in variants}
    for v, flags in variants.items():
        one_run(a.crun, flags)  # warm-up
    names = list(variants)
    for r in range(a.rounds):
        for v in names[r % len(names):] + names[: r % len(names)]:
            samples[v].append(one_run(a.crun, variants[v]))
            print(f"round {r} {v}: {samples[v][-1]}", file=sys.stderr)
    print(f"load average: {open('/proc/loadavg').read().split()[:3]}")
    print("| variant | last beat -> hang line | agent CPU until then | auto's chosen timeout |")
    print("|---|---|---|---|")
    for v in names:
        lat = statistics.median(s[0] for s in samples[v])
        cpu = statistics.median(s[1] for s in samples[v])
        chosen = [s[2] for s in samples[v] if s[2] is not None]
        print(f"| {v} | {lat:.3f} s | {cpu * 1000:.1f} ms | {statistics.median(chosen):.3f} s |" if chosen else
              f"| {v} | {lat:.3f} s | {cpu * 1000:.1f} ms | - |")
    auto, fixed = (statistics.median(s[0] for s in samples[v]) for v in names)
    print(f"ratio fixed 2 s / auto latency: {fixed / auto:.2f}")
    if a.before:
        starts = {"before": [], "after": []}
        bins = {"before": a.before, "after": a.crun}
        for b in bins.values():
            start_time(b)
        for r in range(max(a.rounds, 15)):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for k in order:
                starts[k].append(start_time(bins[k]))
        print("| crun --standalone --no-python /bin/true | median |")
        print("|---|---|")
        for k in ("before", "after"):
            print(f"| {k} | {statistics.median(starts[k]) * 1000:.1f} ms |")
        print(f"ratio after / before: {statistics.median(starts['after']) / statistics.median(starts['before']):.3f}")


if __name__ == "__main__":
    main()
