#!/usr/bin/python3
"""Hang detection, side by side in one run (median of --runs each, interleaved).

  file timer   a worker's torch FileTimerClient scope expires (0.5 s after it opened) -> the
               replacement worker's first line, crun vs torchrun 1.13 (its FileTimerServer,
               max_interval 0.1 s, and --monitor_interval 0.1), both --max-restarts 1
  heartbeat    crun only (torchrun has none): the last heartbeat + --heartbeat-timeout 0.5 ->
               the replacement's first line
  floor        spawning the same Python worker -> its first line: what any restart pays; and
               SIGKILL of a Python process that imported torch -> reaped (the kernel tears its
               memory down): what every file-timer kill pays before the agent can see the exit
  cost         build/bench/watchdog/heartbeat_cost: Runtime::heartbeat(step) against the inline floor

Usage: bench/watchdog/run.py --build build [--runs 5]
torchrun runs through bench/agent/torchrun_shim.py (Std.from_str on Python 3.11).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
WORKER = os.path.join(HERE, "expiry_worker.py")
SHIM = os.path.join(ROOT, "bench", "agent", "torchrun_shim.py")


def lines_of(path):
    with open(path) as f:
        return dict(line.split() for line in f if line.strip())


def one(cmd, mode, extra_env=None):
    """ms from the deadline to the replacement's first line."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "PET_", "RANK", "WORLD_SIZE"))}
        env.update({"BENCH_OUT": out, "TMPDIR": d, "PYTHON_EXEC": PYTHON, **(extra_env or {})})
        subprocess.run(cmd + [WORKER, mode], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True, timeout=120)
        got = lines_of(out)
        return (float(got["start"]) - float(got["deadline"])) * 1000


def floor():
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out")
        t0 = time.time()
        subprocess.run([PYTHON, WORKER, "floor"], env={**os.environ, "BENCH_OUT": out}, check=True)
        return (float(lines_of(out)["start"]) - t0) * 1000


def kill_floor():
    """ms from SIGKILL to the exit status of a Python process holding torch (as the timer's victim does)."""
    p = subprocess.Popen([PYTHON, "-c", "import torch.distributed.elastic.timer, sys; print('up', flush=True); "
                                        "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.stdout.readline()
    t0 = time.perf_counter()
    p.kill()
    p.wait()
    return (time.perf_counter() - t0) * 1000


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    crun = os.path.join(a.build, "launcher", "crun")
    timer_env = {"TORCHELASTIC_ENABLE_FILE_TIMER": "1"}
    variants = {
        "crun file timer": lambda: one([crun, "--standalone", "--nproc-per-node", "1", "--max-restarts", "1"], "timer",
                                       timer_env),
        "torchrun file timer": lambda: one([PYTHON, SHIM, "--standalone", "--nproc_per_node", "1", "--max_restarts", "1",
                                            "--monitor_interval", "0.1"], "timer", timer_env),
        "crun heartbeat": lambda: one([crun, "--standalone", "--nproc-per-node", "1", "--max-restarts", "1",
                                       "--heartbeat-timeout", "0.5"], "heartbeat", {"BENCH_HEARTBEAT_TIMEOUT": "0.5"}),
        "floor (python start)": floor,
        "floor (SIGKILL of torch)": kill_floor,
    }
    got = {k: [] for k in variants}
    for _ in range(a.runs):
        for name, fn in variants.items():
            got[name].append(fn())
    med = {k: statistics.median(v) for k, v in got.items()}
    load = os.getloadavg()[0]
    print(f"# deadline -> replacement's first line, ms, median of {a.runs} interleaved runs, load average {load:.2f}")
    for k, v in got.items():
        print(f"{k:24} {med[k]:8.1f} ms   (runs: {', '.join(f'{x:.0f}' for x in v)})")
    print(f"ratio torchrun / crun (file timer): {med['torchrun file timer'] / med['crun file timer']:.1f}x; "
          f"crun beyond the floors: file timer {med['crun file timer'] - med['floor (python start)'] - med['floor (SIGKILL of torch)']:.1f} ms "
          f"(python start and torch's SIGKILL taken off), heartbeat {med['crun heartbeat'] - med['floor (python start)']:.1f} ms "
          f"(python start taken off)")
    cost = os.path.join(a.build, "bench", "watchdog", "heartbeat_cost")
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    sys.stdout.flush()
    subprocess.run([cost], env=clean, check=True)


if __name__ == "__main__":
    main()
