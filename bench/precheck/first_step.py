#!/usr/bin/env python3
"""What --precheck adds to the time to the first training step (docs/benchmarks.md, "Pre-flight check").

One run, the variants interleaved: `crun --standalone --nproc-per-node N [--precheck] /bin/sh -c STAMP`,
where each worker writes the wall clock as it starts (its first step); the figure is the time from
crun's start to the last rank's stamp. `without` is the anchor; `without-again` (the same command a
second time) shows the run's noise. Prints each variant's median and its ratio to the anchor.
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time


def first_step_ms(crun, nproc, extra):
    with tempfile.TemporaryDirectory() as d:
        stamp = os.path.join(d, "stamp")
        t0 = time.time_ns()
        subprocess.run([crun, "--standalone", "--nproc-per-node", str(nproc), *extra, "/bin/sh", "-c",
                        f'date +%s%N >> {stamp}.$LOCAL_RANK'], check=True, stdout=subprocess.DEVNULL)
        last = max(int(open(f"{stamp}.{r}").read().split()[0]) for r in range(nproc))
        return (last - t0) / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--crun", required=True)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    variants = {"without": [], "with --precheck": ["--precheck"], "without-again": []}
    times = {k: [] for k in variants}
    for _ in range(a.runs):
        for name, extra in variants.items():
            times[name].append(first_step_ms(a.crun, a.nproc, extra))
    anchor = statistics.median(times["without"])
    print(f"load average {os.getloadavg()[0]:.2f}, {a.runs} runs each, {a.nproc} workers")
    for name, t in times.items():
        m = statistics.median(t)
        print(f"{name:18s} {m:8.1f} ms  {m / anchor:5.2f}x  (+{m - anchor:.1f} ms)")


if __name__ == "__main__":
    main()
