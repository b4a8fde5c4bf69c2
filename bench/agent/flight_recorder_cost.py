#!/usr/bin/python3
"""What asking for the NCCL flight recorder dumps adds to the capture before a kill, in one run.

    /usr/bin/python3 bench/agent/flight_recorder_cost.py --crun DIR/crun --before DIR2/crun [--rounds 7] [--ranks 4]

Each of --crun and --before is a crun with its crun-keeper beside it, each in a folder of its own
(a binary deep in a build tree starts slower). Python workers (/usr/bin/python3) run
tests/agent/fake_flight_recorder.py, a test double of torch >= 2.2's dump pipe (torch here is
1.13; no GPU), its dump written in one go (FAKE_FLIGHT_RECORDER_PAUSE=0), and hang in
stuck_here(); crun finds them hung (--initial-heartbeat-timeout 2) and captures before the kill.
The figure is crun's own: "took the stacks of N local worker(s) in M ms" (the capture delays the
kill by that much). Variants, interleaved, the order rotated every round, after one warm-up run of
each, not counted:

  dumps         --crun, TORCH_NCCL_TRACE_BUFFER_SIZE=2000: stacks and flight recorder dumps
  recorder off  --crun, the variable unset: stacks only (the anchor)
  before        --before, TORCH_NCCL_TRACE_BUFFER_SIZE=2000: a crun without the mechanism
Medians of the rounds, the ratio to the anchor, the load average at the start and the end.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DOUBLE_DIR = os.path.join(HERE, "..", "..", "tests", "agent")

WORKER = """
import os, sys, time
sys.path.insert(0, %r)
import fake_flight_recorder
fake_flight_recorder.start('dumps')
print('ready', flush=True)

def stuck_here():
    while True:
        time.sleep(100)

stuck_here()
"""


def run_once(crun, ranks, recorder, work):
    logs = tempfile.mkdtemp(dir=work)
    env = dict(os.environ, PYTHON_EXEC="/usr/bin/python3", FAKE_FLIGHT_RECORDER_PAUSE="0")
    env.pop("TORCH_NCCL_TRACE_BUFFER_SIZE", None)
    if recorder:
        env["TORCH_NCCL_TRACE_BUFFER_SIZE"] = "2000"
    script = os.path.join(work, "hangs.py")
    p = subprocess.run([crun, "--nproc-per-node", str(ranks), "--initial-heartbeat-timeout", "2", "--log-dir", logs, script],
                       env=env, capture_output=True, text=True, timeout=120)
    m = re.search(r"took the stacks of (\d+) local worker\(s\) in (\d+) ms", p.stderr)
    if not m or int(m.group(1)) != ranks:
        sys.exit("no capture line of %d ranks:\n%s" % (ranks, p.stderr))
    dumped = re.search(r"NCCL flight recorder: the dumps of (\d+) of (\d+)", p.stderr)
    return int(m.group(2)), (int(dumped.group(1)) if dumped else 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--crun", required=True)
    ap.add_argument("--before", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--ranks", type=int, default=4)
    a = ap.parse_args()
    variants = [("dumps", a.crun, True), ("recorder off", a.crun, False), ("before", a.before, True)]
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "hangs.py"), "w") as out:
            out.write(WORKER % os.path.abspath(DOUBLE_DIR))
        load_start = os.getloadavg()[0]
        for _, crun, recorder in variants:  # warm-up
            run_once(crun, a.ranks, recorder, work)
        figures = {name: [] for name, _, _ in variants}
        dumps = {name: [] for name, _, _ in variants}
        for r in range(a.rounds):
            for i in range(len(variants)):
                name, crun, recorder = variants[(i + r) % len(variants)]
                ms, n = run_once(crun, a.ranks, recorder, work)
                figures[name].append(ms)
                dumps[name].append(n)
        load_end = os.getloadavg()[0]
    anchor = statistics.median(figures["recorder off"])
    print("%d Python ranks, %d rounds, load average %.2f at the start, %.2f at the end" % (a.ranks, a.rounds, load_start, load_end))
    print("| variant | capture, median | to the anchor | dumps per run |")
    print("|---|---:|---:|---:|")
    for name, _, _ in variants:
        med = statistics.median(figures[name])
        print("| %s | %d ms | %.2fx | %s |" % (name, med, med / anchor, statistics.median(dumps[name])))
    print("all runs (ms):", {k: v for k, v in figures.items()})


if __name__ == "__main__":
    main()
