#!/usr/bin/env python3
"""State that outlives a node: what replication costs training, and what a node's loss costs.

  sudo bench/state/replication.py [--build build] [--runs 5] [--steps 100] [--state-mib 64] [--work 2000000]

1. Throughput: two network-namespace hosts (scripts/netns-cluster.sh), one rank each
   (tests/support/state_worker.cc: a compute-bound step of --work rounds, a save of --state-mib MiB
   into CRUN_STATE_DIR every 10 steps). Runs with replication (the default) and without
   (CRUN_STATE_REPLICATION=0) and the machine's floor for the same work take turns in one loop;
   each run's throughput is steps / the slowest rank's training seconds. The floor: replication off,
   and after each save the committed file is sent to the other host by the plainest means
   (bench/state/floor_copy.py: one TCP connection, sendfile, at nice 19 like crun's replication
   thread; received into a file on /dev/shm), told of each save by the worker's --commit-fifo.
   Prints the medians, each one's ratio to "without", the MiB both hosts sent on eth0 a run
   (median; 2 x 10 saves x 64 MiB = 1280 MiB when every save is moved: at nice 19, saves made
   during a send coalesce, in crun and in the floor), and crun's loss beside the floor's (the
   goal: <= 5 % lost).
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
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NETNS = os.path.join(ROOT, "scripts", "netns-cluster.sh")
NAME = "crs-bench"
FLOOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor_copy.py")
FLOOR_PORT = 29500


def host_cmd(host, argv, env):
    return ["ip", "netns", "exec", f"{NAME}-h{host}", "env"] + [f"{k}={v}" for k, v in env.items()] + argv


def crun_flags(nnodes, hint):
    f = ["--nnodes", nnodes, "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.77.0.1:29400",
         "--rdzv-id", "bench", "--rdzv-conf", "last_call_timeout=1", "--stop-timeout", "5"]
    return f + (["--node-rank", str(hint)] if hint is not None else [])


def worker_args(a, out, steps, fifo=None):
    return [a.worker, "--steps", str(steps), "--save-every", "10", "--state-bytes", str(a.state_mib << 20),
            "--work", str(a.work), "--out", out] + (["--commit-fifo", fifo] if fifo else [])


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


def kill_group(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait()


def read_ready(p, timeout):
    """The receiver's "ready" line, within `timeout` seconds."""
    if not select.select([p.stdout], [], [], timeout)[0] or p.stdout.readline().strip() != "ready":
        sys.exit(f"a floor receiver did not listen within {timeout} s:\n{p.stderr.read() if p.poll() is not None else ''}")


def floor_copiers(out, shm):
    """Receivers on both hosts, then a sender on each to the other (h1 -> h2, h2 -> h1); returns them
    and each host's FIFO. Each in a process group of its own but in this process's session: with
    sched_autogroup a new session is a scheduling group of its own, where nice 19 would weigh as much
    as the workers' group (crun's workers and its replication thread share crun's session)."""
    procs, fifos = [], {}
    for h in (1, 2):
        into = os.path.join(shm, f"from-h{3 - h}")
        p = subprocess.Popen(host_cmd(h, [sys.executable, FLOOR, "recv", "--listen", f"10.77.0.{h}:{FLOOR_PORT}", "--into", into], {}),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, process_group=0)
        procs.append(p)
        read_ready(p, 30)
    for h in (1, 2):
        fifos[h] = os.path.join(out, f"commits-h{h}")
        os.mkfifo(fifos[h], 0o600)
        procs.append(subprocess.Popen(host_cmd(h, [sys.executable, FLOOR, "send", "--fifo", fifos[h], "--to", f"10.77.0.{3 - h}:{FLOOR_PORT}"], {}),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, process_group=0))
    return procs, fifos


def sent_bytes(h):
    """Bytes host h has sent on its eth0 (/proc/net/dev read inside its namespace)."""
    dev = subprocess.run(["ip", "netns", "exec", f"{NAME}-h{h}", "cat", "/proc/net/dev"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    for line in dev.splitlines():
        name, _, fields = line.partition(":")
        if name.strip() == "eth0":
            return int(fields.split()[8])
    sys.exit(f"host {h} has no eth0")


def throughput_run(a, variant, crun=None):
    """One run of `variant` ("with": crun's replication; "without"; "floor": without, plus floor_copy.py):
    steps/s of the slowest rank; for the floor, also checks that each save was moved."""
    env = {} if variant == "with" else {"CRUN_STATE_REPLICATION": "0"}
    copiers, fifos = [], {}
    before = sent_bytes(1) + sent_bytes(2)
    with tempfile.TemporaryDirectory(prefix="crun-bench-state-") as out, \
         tempfile.TemporaryDirectory(prefix="crun-bench-floor-", dir="/dev/shm") as shm:
        try:
            if variant == "floor":
                copiers, fifos = floor_copiers(out, shm)
            procs = [subprocess.Popen(host_cmd(h, [crun or a.crun] + crun_flags("2", h - 1) +
                                               worker_args(a, out, a.steps, fifos.get(h)), env),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for h in (1, 2)]
            results = wait_all(procs, a.timeout)
            copied = [p.communicate(timeout=60) + (p.returncode,) for p in copiers]
        except subprocess.TimeoutExpired:
            sys.exit("a floor copier did not end within 60 s of the workers")
        finally:
            for p in copiers:
                kill_group(p)
    a.moved.setdefault(variant if crun is None else "also", []).append((sent_bytes(1) + sent_bytes(2) - before) / (1 << 20))
    train = []
    for rc, o, e in results:
        if rc != 0:
            sys.exit(f"a run failed ({rc}):\n{e[-2000:]}")
        train += [float(x) for x in re.findall(r"train_s=([0-9.]+)", o)]
    for o, e, rc in copied:
        if rc != 0:
            sys.exit(f"a floor copier failed ({rc}):\n{e[-2000:]}")
        m = re.search(r"sent commits=(\d+) sends=(\d+) bytes=\d+ gone=(\d+)", o)
        if m and int(m.group(1)) != a.steps // 10:
            sys.exit(f"a floor sender was told of {m.group(1)} saves, not {a.steps // 10}")
        if m:
            a.floor_sends.append(f"{m.group(2)}" + (f"+{m.group(3)} gone" if m.group(3) != "0" else ""))
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
        variants = ("without", "with", "floor")
        got = {v: [] for v in variants}
        also_r = []
        a.floor_sends = []
        a.moved = {}  # MiB both hosts sent on eth0 during each run, by variant
        for i in range(0 if a.skip_throughput else a.runs):
            for v in variants[i % 3:] + variants[:i % 3]:  # each variant first, second and last in turn
                got[v].append(throughput_run(a, v))
            if a.crun_also:
                also_r.append(throughput_run(a, "with", a.crun_also))
        if got["with"]:
            mo = statistics.median(got["without"])
            print(f"throughput, 2 hosts x 1 rank, {a.state_mib} MiB saved every 10 steps, median of {a.runs} "
                  f"(the three interleaved):")
            ratios = {}
            for v, label in (("without", "without (anchor)"), ("with", "crun's replication"),
                             ("floor", "floor (sendfile, nice 19)")):
                m = statistics.median(got[v])
                ratios[v] = m / mo
                pairs = statistics.median(x / o for x, o in zip(got[v], got["without"]))
                print(f"  {label:27s} {m:8.2f} steps/s  ratio {m / mo:.3f}; median of the rounds' ratios {pairs:.3f}; "
                      f"moved {statistics.median(a.moved[v]):6.0f} MiB a run  (runs: {', '.join(f'{x:.2f}' for x in got[v])})")
            print(f"  lost: crun {100 * (1 - ratios['with']):.1f} %, floor {100 * (1 - ratios['floor']):.1f} %  "
                  f"(files sent per sender and run, of {a.steps // 10} saves; the rest coalesced, or gone at the job's end: {', '.join(a.floor_sends)})")
            if also_r:
                ma = statistics.median(also_r)
                print(f"  with {a.crun_also}: {ma:8.2f} steps/s  (runs: {', '.join(f'{x:.2f}' for x in also_r)}); "
                      f"ratio to without {ma / mo:.3f}; pairs {statistics.median(x / o for x, o in zip(also_r, got['without'])):.3f}")
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
