#!/usr/bin/python3
"""--collapse-logs: what it costs and what it saves, with and without, in one run.

Each variant runs `crun --standalone --nproc-per-node 8 [flags] --no-python /bin/cat LINES`: every
rank prints the same --lines lines (60 bytes each), crun's stdout a pipe this script drains (as a
terminal or a log collector would). Figures per variant, medians of --runs interleaved runs (one
run of each variant in turn, rotating who goes first, after one warm-up each):
  wall      crun's wall time, start to exit (launch, all output through, exit)
  lines     lines crun wrote to its stdout
  bytes/s   console bytes the workers printed (8 x the file) per second of wall time
and the same with each rank's lines its own (`sed s/^/r${local_rank} /`, crun substitutes the local
rank: nothing to collapse, the mechanism's worst case), and, for launch/exit overhead alone, with
/bin/true (no output).

  bench/agent/collapse_logs.py --crun build/launcher/crun [--before OTHER_CRUN] --runs 11

--before adds that build without the flag (e.g. main's crun): the cost of the feature when off;
--collapse-also LABEL=CRUN another build with it (a mechanism taken out, side by side).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def run_once(cmd):
    """Wall time and stdout's line count of one run; stdout drained as it comes."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    count = [0, 0]

    def drain():
        while True:
            chunk = p.stdout.read1(1 << 16)
            if not chunk:
                return
            count[0] += chunk.count(b"\n")
            count[1] += len(chunk)

    t = threading.Thread(target=drain)
    t.start()
    killer = threading.Timer(120, p.kill)
    killer.start()
    rc = p.wait()
    t.join()
    killer.cancel()
    wall = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"{cmd}: exit {rc}")
    return wall, count[0], count[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--crun", required=True)
    ap.add_argument("--before", help="another crun build, run without the flag")
    ap.add_argument("--collapse-also", action="append", default=[], metavar="LABEL=CRUN",
                    help="another crun build, run with --collapse-logs (repeatable)")
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--nproc", type=int, default=8)
    a = ap.parse_args()
    if a.runs < 5:
        raise SystemExit("--runs: at least 5")

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        for i in range(a.lines):
            f.write(f"step {i:8d} loss 0.{i % 9973:04d} lr 0.0001 throughput 1234 samples/s\n"[:59] + "\n")
        lines_file = f.name
    try:
        base = ["--standalone", "--nproc-per-node", str(a.nproc)]
        variants = []
        if a.before:
            variants.append(("before, off", a.before, []))
        variants.append(("off", a.crun, []))
        variants.append(("--collapse-logs", a.crun, ["--collapse-logs"]))
        for also in a.collapse_also:
            label, _, path = also.partition("=")
            variants.append((f"--collapse-logs, {label}", path, ["--collapse-logs"]))
        variants.append(("off, --tee 3", a.crun, ["--tee", "3"]))
        variants.append(("--collapse-logs --tee 3", a.crun, ["--collapse-logs", "--tee", "3"]))
        programs = [("output", ["--no-python", "/bin/cat", lines_file]),
                    ("distinct", ["--no-python", "/bin/sed", "s/^/r${local_rank} /", lines_file]),
                    ("launch+exit", ["--no-python", "/bin/true"])]
        results = {(v[0], p[0]): [] for v in variants for p in programs}
        counts = {}
        with tempfile.TemporaryDirectory() as logs:
            def cmd(v, prog):
                extra = v[2] + (["--log-dir", logs] if "--tee" in v[2] else [])
                return [v[1], *base, *extra, *prog[1]]

            for v in variants:  # warm-up
                for prog in programs:
                    run_once(cmd(v, prog))
            for i in range(a.runs):
                order = variants[i % len(variants):] + variants[:i % len(variants)]
                for prog in programs:
                    for v in order:
                        wall, lines, nbytes = run_once(cmd(v, prog))
                        results[(v[0], prog[0])].append(wall)
                        counts[(v[0], prog[0])] = (lines, nbytes)
        load = os.getloadavg()
        printed = a.nproc * a.lines * 60
        print(f"{a.nproc} ranks x {a.lines} lines of 60 bytes; medians of {a.runs} interleaved runs; "
              f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        anchor = "off"
        for prog in programs:
            print(f"\n{prog[0]}:")
            print(f"  {'variant':34s} {'wall ms':>9s} {'ratio':>6s} {'console lines':>14s} {'MB/s printed':>13s}")
            ref = statistics.median(results[(anchor, prog[0])])
            for v in variants:
                m = statistics.median(results[(v[0], prog[0])])
                lines, _ = counts[(v[0], prog[0])]
                rate = f"{printed / m / 1e6:13.1f}" if prog[0] != "launch+exit" else f"{'':>13s}"
                print(f"  {v[0]:34s} {m * 1000:9.1f} {m / ref:6.2f} {lines:14d} {rate}")
    finally:
        os.unlink(lines_file)


if __name__ == "__main__":
    sys.exit(main())
