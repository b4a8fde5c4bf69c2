#!/usr/bin/env python3
"""State that outlives a node: what replication costs training, and what a node's loss costs.

  sudo bench/state/replication.py [--build build] [--runs 5] [--steps 100] [--state-mib 64] [--work 2000000]

1. Throughput: two network-namespace hosts (scripts/netns-cluster.sh), one rank each
   (tests/support/state_worker.cc: a compute-bound step of --work rounds, a save of --state-mib MiB
   into CRUN_STATE_DIR every 10 steps). Runs with replication (the default) and without
   (CRUN_STATE_REPLICATION=0) alternate in one loop; each run's throughput is steps / the slowest
   rank's training seconds. Prints the medians and the ratio (the goal: <= 5 % lost).
2. A node killed: two hosts training plus a spare (--nnodes 2, the spare waits for room), node 0
   (not the store's host) SIGKILLed at step 30. Its rank resumes on the survivor from the replica
   it holds; the survivor's old rank on the spare, fetched over the network. Prints the median time
   from the SIGKILL to both ranks training again, and the bytes and time of the fetch (the agent's
   line).
Needs root. Reports the load average beside the figures (the machine is shared).
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NETNS = os.path.join(ROOT, "scripts", "netns-cluster.sh")
NAME = "crs-bench"


def host_cmd(host, argv, env):
    return ["ip", "netns", "exec", f"{NAME}-h{host}", "env"] + [f"{k}={v}" for k, v in env.items()] + argv


def crun_flags(nnodes, hint):
    f = ["--nnodes", nnodes, "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.77.0.1:29400",
         "--rdzv-id", "bench", "--rdzv-conf", "last_call_timeout=1", "--stop-timeout", "5"]
    return f + (["--node-rank", str(hint)] if hint is not None else [])


def worker_args(a, out, steps):
    return [a.worker, "--steps", str(steps), "--save-every", "10", "--state-bytes", str(a.state_mib << 20),
            "--work", str(a.work), "--out", out]


def wait_all(procs, timeout):
    outs = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            o, e = p.communicate()
            sys.exit(f"a crun did not end within {timeout} s:\n{e[-3000:]}")
        outs.append((p.returncode, o, e))
    return outs


def throughput_run(a, replicate, crun=None):
    env = {} if replicate else {"CRUN_STATE_REPLICATION": "0"}
    with tempfile.TemporaryDirectory(prefix="crun-bench-state-") as out:
        procs = [subprocess.Popen(host_cmd(h, [crun or a.crun] + crun_flags("2", h - 1) + worker_args(a, out, a.steps), env),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for h in (1, 2)]
        results = wait_all(procs, a.timeout)
    train = []
    for rc, o, e in results:
        if rc != 0:
            sys.exit(f"a run failed ({rc}):\n{e[-2000:]}")
        train += [float(x) for x in re.findall(r"train_s=([0-9.]+)", o)]
    return a.steps / max(train)


def progress(out, rank):
    try:
        with open(os.path.join(out, f"progress-{rank}")) as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return 0


def kill_run(a, crun=None):
    with tempfile.TemporaryDirectory(prefix="crun-bench-kill-") as out:
        # host 2: node 0 (killed); host 1 (the store's): node 1; host 3: the spare (no hint: after both).
        hints = {1: 1, 2: 0, 3: None}
        procs = {}
        for h in (1, 2, 3):
            procs[h] = subprocess.Popen(host_cmd(h, [crun or a.crun] + crun_flags("2", hints[h]) + worker_args(a, out, a.kill_steps), {}),
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if h == 2:
                time.sleep(0.3)  # the spare joins after the round formed (it waits for room)
        deadline = time.time() + 120
        while progress(out, 0) < 30 or progress(out, 1) < 30:
            if time.time() > deadline:
                sys.exit("the job did not reach step 30")
            time.sleep(0.01)
        killed_ns = time.time_ns()
        procs[2].send_signal(signal.SIGKILL)
        procs[2].wait()
        results = wait_all([procs[1], procs[3]], a.timeout)
        resumed = []
        for rank in (0, 1):
            with open(os.path.join(out, f"starts-{rank}")) as f:
                ns = [int(m) for m in re.findall(r"ns=(\d+)", f.read())]
            resumed.append(max(ns))
        fetched = None
        for rc, o, e in results:
            if rc != 0:
                sys.exit(f"a survivor failed ({rc}):\n{e[-2000:]}")
            for m in re.finditer(r"state of (\d+) rank\(s\) fetched, ([0-9.]+) MiB in ([0-9.]+) s:(.*)", e):
                if "from 10.77" in m.group(4):
                    fetched = (float(m.group(2)), float(m.group(3)))
        return (max(resumed) - killed_ns) / 1e9, fetched


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--kill-steps", type=int, default=150)
    ap.add_argument("--state-mib", type=int, default=64)
    ap.add_argument("--work", type=int, default=2000000)
    ap.add_argument("--skip-kill", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--crun-also", help="another crun (crun-keeper beside it) run with replication in the same loop")
    a = ap.parse_args()
    a.crun = os.path.join(a.build, "launcher", "crun")
    a.worker = os.path.join(a.build, "tests", "support", "crun_state_worker")
    subprocess.run([NETNS, "down", NAME], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([NETNS, "up", NAME, "3"], check=True, stdout=subprocess.DEVNULL)
    try:
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        with_r, without_r, also_r = [], [], []
        for i in range(0 if a.skip_throughput else a.runs):
            for replicate in ((True, False) if i % 2 == 0 else (False, True)):
                (with_r if replicate else without_r).append(throughput_run(a, replicate))
            if a.crun_also:
                also_r.append(throughput_run(a, True, a.crun_also))
        mw, mo = statistics.median(with_r or [1]), statistics.median(without_r or [1])
        if with_r:
            print(f"throughput, 2 hosts x 1 rank, {a.state_mib} MiB saved every 10 steps, median of {a.runs}:")
            print(f"  with replication     {mw:8.2f} steps/s  (runs: {', '.join(f'{x:.2f}' for x in with_r)})")
            print(f"  without (anchor)     {mo:8.2f} steps/s  (runs: {', '.join(f'{x:.2f}' for x in without_r)})")
            print(f"  ratio with/without   {mw / mo:8.3f}  (lost: {100 * (1 - mw / mo):.1f} %); median of the runs' "
                  f"pairs (adjacent in time) {statistics.median(w / o for w, o in zip(with_r, without_r)):.3f}")
            if also_r:
                ma = statistics.median(also_r)
                print(f"  with {a.crun_also}: {ma:8.2f} steps/s  (runs: {', '.join(f'{x:.2f}' for x in also_r)}); "
                      f"ratio to without {ma / mo:.3f}; pairs {statistics.median(x / o for x, o in zip(also_r, without_r)):.3f}")
        if not a.skip_kill:
            times, fetches, also_t, also_f = [], [], [], []
            for _ in range(a.runs):
                t, f = kill_run(a)
                times.append(t)
                if f:
                    fetches.append(f)
                if a.crun_also:
                    t, f = kill_run(a, a.crun_also)
                    also_t.append(t)
                    if f:
                        also_f.append(f)
            print(f"node killed (2 hosts + a spare), {a.state_mib} MiB a rank, median of {a.runs}:")
            print(f"  SIGKILL -> both ranks training again   {statistics.median(times):.3f} s  "
                  f"(runs: {', '.join(f'{x:.3f}' for x in times)})")
            if fetches:
                print(f"  fetched over the network               {statistics.median(f[0] for f in fetches):.1f} MiB in "
                      f"{statistics.median(f[1] for f in fetches):.3f} s (median of {len(fetches)})")
            if also_t:
                print(f"  with {a.crun_also}: SIGKILL -> training {statistics.median(also_t):.3f} s "
                      f"(runs: {', '.join(f'{x:.3f}' for x in also_t)}); fetched "
                      f"{statistics.median(f[0] for f in also_f) if also_f else 0:.1f} MiB in "
                      f"{statistics.median(f[1] for f in also_f) if also_f else 0:.3f} s")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        subprocess.run([NETNS, "down", NAME], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
