#!/usr/bin/python3
"""etcd-v3 rendezvous beside c10d, in one run (issue 13's figures).

    /usr/bin/python3 bench/rendezvous/etcd.py [--build build] [--runs 5] [--scale 8,32,128]
        [--ttl 2,5] [--loss-runs 5] [--crun-also OTHER_CRUN]

1. Round time on loopback: N agents (`--nnodes N --nproc-per-node 1`, worker `rdzv_worker`, which
   stamps its start and exits 0) started by rdzv_spawn, once with `--rdzv-backend c10d` (one agent
   is_host=1) and once with `--rdzv-backend etcd-v3` against one local etcd member (data on tmpfs),
   alternating, median of --runs. Figures: first launch -> last worker started ("round"), and ->
   every agent exited. With --crun-also, OTHER_CRUN (e.g. the binary before a change) runs both
   backends too, interleaved in the same loop, and the ratios this build / OTHER_CRUN are printed.
2. Node-0 loss: 3 agents on etcd-v3 with lease_ttl T (`--nnodes 2:3`), workers held; SIGKILL of
   the agent with node rank 0; figure = the last survivor worker's start stamp of the new round -
   the kill. Goal: <= T + 1 s.

The etcd member is started and stopped by pid here; nothing but 127.0.0.1 is contacted.
"""
import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Etcd:
    """One etcd member on 127.0.0.1, its data in /dev/shm; stopped by pid."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="crun-etcd-", dir="/dev/shm")
        self.port, peer = free_port(), free_port()
        self.log = open(os.path.join(self.dir, "log"), "wb")
        self.proc = subprocess.Popen(
            ["etcd", "--name", "b", "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", f"http://127.0.0.1:{self.port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.port}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"b=http://127.0.0.1:{peer}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with open(os.path.join(self.dir, "log"), "rb") as f:
                if b"ready to serve client requests" in f.read():
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("etcd did not start")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def stamps(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) == 4 and p[0] == "start":
                    out.append((int(p[1]), int(p[2]), int(p[3])))
    return out


def round_once(backend, n, etcd_port, tag, crun=None):
    d = tempfile.mkdtemp(prefix="crun-etcdbench-")
    stamp = os.path.join(d, "stamps")
    env = dict(os.environ, RDZV_STAMP=stamp)
    common = ["--nnodes", str(n), "--nproc-per-node", "1", "--rdzv-id", tag, "--no-python", WORKER]
    crun = crun or CRUN
    if backend == "c10d":
        cmd = [crun, "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
               "--rdzv-conf", "is_host={IS_HOST}", *common]
    else:
        cmd = [crun, "--rdzv-backend", "etcd-v3", "--rdzv-endpoint", f"127.0.0.1:{etcd_port}", *common]
    out = subprocess.run([SPAWN, str(n), "120", os.path.join(d, "pids"), os.path.join(d, "log"), "--", *cmd],
                         env=env, capture_output=True, text=True, timeout=150)
    f = out.stdout.split()
    if out.returncode != 0 or len(f) < 8 or int(f[7]) != 0:
        raise RuntimeError(f"{backend} {n} agents failed: {out.stdout} (log {d}/log)")
    st = stamps(stamp)
    if sorted(s[1] for s in st) != list(range(n)):
        raise RuntimeError(f"{backend} {n}: ranks {sorted(s[1] for s in st)}")
    t0 = int(f[1])
    shutil.rmtree(d, ignore_errors=True)
    return (max(s[2] for s in st) - t0) / 1e6, (int(f[5]) - t0) / 1e6


def loss_once(ttl, etcd_port, tag):
    d = tempfile.mkdtemp(prefix="crun-etcdloss-")
    stamp = os.path.join(d, "stamps")
    env = dict(os.environ, RDZV_STAMP=stamp, RDZV_HOLD="1")
    procs, logs = [], []
    try:
        for i in range(3):
            logs.append(open(os.path.join(d, f"a{i}.log"), "w+"))
            procs.append(subprocess.Popen(
                [CRUN, "--nnodes", "2:3", "--nproc-per-node", "1", "--rdzv-backend", "etcd-v3",
                 "--rdzv-endpoint", f"127.0.0.1:{etcd_port}", "--rdzv-id", tag,
                 "--rdzv-conf", f"lease_ttl={ttl},last_call_timeout=1", "--no-python", WORKER],
                env=env, stdout=logs[-1], stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + 30
        while len(stamps(stamp)) < 3:
            if time.monotonic() > deadline:
                raise RuntimeError("round 0 did not form")
            time.sleep(0.01)
        rank0 = None
        while rank0 is None and time.monotonic() < deadline:
            for i, lg in enumerate(logs):
                lg.seek(0)
                if "round 0: node rank 0 of 3" in lg.read():
                    rank0 = i
            time.sleep(0.01)
        if rank0 is None:
            raise RuntimeError("no node rank 0 line")
        kill_ns = time.clock_gettime_ns(time.CLOCK_REALTIME)
        os.killpg(procs[rank0].pid, signal.SIGKILL)
        deadline = time.monotonic() + ttl + 20
        while True:
            later = [s for s in stamps(stamp) if s[2] > kill_ns]
            if len({s[1] for s in later}) >= 2:
                return (max(s[2] for s in later) - kill_ns) / 1e6
            if time.monotonic() > deadline:
                raise RuntimeError(f"the survivors did not re-form (logs in {d})")
            time.sleep(0.01)
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)
        for lg in logs:
            lg.close()


def main():
    global CRUN, SPAWN, WORKER
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--scale", default="8,32,128")
    ap.add_argument("--ttl", default="2,5")
    ap.add_argument("--loss-runs", type=int, default=5)
    ap.add_argument("--crun-also", default="")
    a = ap.parse_args()
    CRUN = os.path.join(a.build, "launcher", "crun")
    SPAWN = os.path.join(a.build, "bench", "rendezvous", "rdzv_spawn")
    WORKER = os.path.join(a.build, "bench", "rendezvous", "rdzv_worker")
    etcd = Etcd()
    rows, losses = [], []
    try:
        print(f"# etcd-v3 vs c10d rendezvous, {os.cpu_count()} cores, load {loadavg()}", flush=True)
        for n in [int(x) for x in a.scale.split(",")]:
            variants = [("c10d", None), ("etcd-v3", None)]
            if a.crun_also:
                variants += [("c10d", a.crun_also), ("etcd-v3", a.crun_also)]
            res = {(b, c): [] for b, c in variants}
            for r in range(a.runs):
                for backend, crun in variants:
                    started, exited = round_once(backend, n, etcd.port, f"s{n}-{backend}-{r}-{bool(crun)}", crun)
                    res[(backend, crun)].append((started, exited))
                    print(f"  {n:4} agents {backend:7}{' other' if crun else ''} run {r}: round {started:8.1f} ms, "
                          f"all exited {exited:8.1f} ms (load {loadavg()})", flush=True)
            rows.append((n, res))
        for ttl in [int(x) for x in a.ttl.split(",") if x and a.loss_runs > 0]:
            vals = []
            for r in range(a.loss_runs):
                ms = loss_once(ttl, etcd.port, f"loss{ttl}-{r}")
                vals.append(ms)
                print(f"  node-0 loss, lease_ttl {ttl} s, run {r}: survivors running after {ms:8.1f} ms", flush=True)
            losses.append((ttl, vals))
    finally:
        etcd.stop()
    print(f"\n# results (median; load average now {loadavg()})")
    print(f"{'N agents':>9} {'c10d round':>11} {'etcd round':>11} {'ratio':>6} {'c10d exit':>10} {'etcd exit':>10} {'ratio':>6}")
    for n, res in rows:
        c = [statistics.median(x[i] for x in res[("c10d", None)]) for i in (0, 1)]
        e = [statistics.median(x[i] for x in res[("etcd-v3", None)]) for i in (0, 1)]
        print(f"{n:9} {c[0]:9.0f}ms {e[0]:9.0f}ms {e[0] / c[0]:5.2f}x {c[1]:8.0f}ms {e[1]:8.0f}ms {e[1] / c[1]:5.2f}x")
    if a.crun_also:
        print(f"\n# this build / {a.crun_also} (median round, ms; ratio)")
        for n, res in rows:
            for b in ("c10d", "etcd-v3"):
                this = statistics.median(x[0] for x in res[(b, None)])
                other = statistics.median(x[0] for x in res[(b, a.crun_also)])
                print(f"{n:9} {b:7} {this:8.0f}ms {other:8.0f}ms {this / other:5.2f}x ({this - other:+.1f} ms)")
    for ttl, vals in losses:
        print(f"node-0 loss -> survivors running, lease_ttl {ttl} s: median {statistics.median(vals):.0f} ms, "
              f"max {max(vals):.0f} ms (goal <= {ttl * 1000 + 1000} ms)")


if __name__ == "__main__":
    main()
