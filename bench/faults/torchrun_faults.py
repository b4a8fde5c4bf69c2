#!/usr/bin/python3
"""The fault matrix's rows against torchrun (torch 1.13, c10d backend) on network-namespace hosts.

    /usr/bin/python3 bench/faults/torchrun_faults.py [--build build] [--rows a,b] [--bound 60]

Runs the faults of tests/faults (docs/reliability.md) against torchrun, each once, with the same
worker (crun_test_worker via --no_python, or tree_worker.sh around it), on hosts built by
scripts/netns-cluster.sh, and prints what it saw: every agent's exit code and when it exited
(seconds after the fault), whether the failing rank and host are named, which worker processes
outlived their agent. Nothing is asserted: this records torchrun's behaviour for the table.
A row waits at most --bound seconds after its fault; an agent still running then is reported as
"running" and killed. torchrun runs through bench/agent/torchrun_shim.py (torch 1.13 crashes on
Python 3.11 in Std.from_str without it); torch's hostname heuristic does not find the store host
inside a namespace, so the first host gets --rdzv_conf is_host=1 (the others is_host=0).
Needs root.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIM = os.path.join(ROOT, "bench", "agent", "torchrun_shim.py")
NETNS = os.path.join(ROOT, "scripts", "netns-cluster.sh")
TREE = os.path.join(ROOT, "tests", "faults", "tree_worker.sh")
PY = "/usr/bin/python3"
VERBOSE = False
HOST_HEAD_START = 2.0  # s: the store host starts first, as bench/rendezvous/run.py does for torchrun


class Agent:
    """One torchrun in a host namespace; its output lines are timestamped as they arrive."""

    def __init__(self, cluster, host, argv):
        self.host = host
        self.lines = []
        self.cv = threading.Condition()
        self.proc = subprocess.Popen(["ip", "netns", "exec", f"{cluster}-h{host}", *argv], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self.exit_at = None
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._wait, daemon=True).start()

    def _read(self):  # until every writer is gone: workers that outlive torchrun hold the pipe
        for raw in self.proc.stdout:
            with self.cv:
                self.lines.append((time.monotonic(), raw.decode(errors="replace").rstrip("\n")))
                self.cv.notify_all()

    def _wait(self):
        self.proc.wait()
        with self.cv:
            self.exit_at = time.monotonic()
            self.cv.notify_all()

    def wait_line(self, pattern, bound):
        rx = re.compile(pattern)
        deadline = time.monotonic() + bound
        with self.cv:
            while True:
                for t, line in self.lines:
                    if rx.search(line):
                        return t, line
                left = deadline - time.monotonic()
                if left <= 0 or self.exit_at is not None:
                    return None
                self.cv.wait(left)

    def wait_exit(self, bound):
        deadline = time.monotonic() + bound
        with self.cv:
            while self.exit_at is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cv.wait(left)
        return self.proc.returncode

    def pids(self, key):
        return [int(m.group(1)) for _, l in self.lines for m in [re.search(rf"\b{key}=(\d+)", l)] if m]

    def text(self):
        return "\n".join(l for _, l in self.lines)

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


class Row:
    def __init__(self, name, hosts, build, bound):
        self.name, self.hosts, self.build, self.bound = name, hosts, build, bound
        self.cluster = f"tf{os.getpid() % 10000}{name[:8].replace('_', '')}"
        self.agents = {}
        self.notes = []

    def __enter__(self):
        subprocess.run([NETNS, "up", self.cluster, str(self.hosts)], check=True, stdout=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc):
        for a in self.agents.values():
            a.kill()
        subprocess.run([NETNS, "down", self.cluster], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def torchrun(self, host, nnodes, nproc, worker, max_restarts=0):
        conf = "is_host=1" if host == 1 else "is_host=0"
        argv = [PY, SHIM, "--nnodes", nnodes, "--nproc_per_node", str(nproc), "--rdzv_backend", "c10d",
                "--rdzv_endpoint", "10.77.0.1:29400", "--rdzv_id", "faults", "--rdzv_conf", conf,
                "--max_restarts", str(max_restarts), "--no_python", *worker]
        self.agents[host] = Agent(self.cluster, host, argv)
        return self.agents[host]

    def wait_ready(self, n_per_host):
        for a in self.agents.values():
            for i in range(n_per_host):
                if a.wait_line(r"^ready rank=", 120) is None:
                    raise RuntimeError(f"{self.name}: host {a.host} never started its workers:\n{a.text()}")
            deadline = time.monotonic() + 60
            while sum(1 for _, l in a.lines if l.startswith("ready rank=")) < n_per_host:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name}: host {a.host}: workers missing:\n{a.text()}")
                a.wait_line(r"^ready rank=", 1)

    def observe(self, t0, trees=()):
        """Waits up to the bound for every agent; prints what each did."""
        for h, a in sorted(self.agents.items()):
            code = a.wait_exit(max(self.bound - (time.monotonic() - t0), 0.1))
            when = f"{a.exit_at - t0:6.2f} s" if a.exit_at is not None else "   -    "
            state = f"exit {code}" if code is not None else f"running after {self.bound} s"
            print(f"  host {h}: {state:24} {when}")
        for h, a in sorted(self.agents.items()):
            for pattern in (r"ChildFailedError|Root Cause|rank\s*:|host\s*:|exitcode|error_file|SignalException|"
                            r"RendezvousClosedError|RendezvousTimeoutError|Keep alive|keep-alive|heartbeat|"
                            r"Received|restart|DistStoreError|RuntimeError|Connection|Traceback|got SIG",):
                for t, line in a.lines:
                    if re.search(pattern, line) and t >= t0 - 0.5:
                        print(f"    h{h} +{t - t0:6.2f}s | {line[:150]}")
        if VERBOSE:
            for h, a in sorted(self.agents.items()):
                for t, line in a.lines:
                    print(f"    [h{h} {t - t0:+7.2f}s] {line[:200]}")
        for h, pids in trees:
            left = [p for p in pids if alive(p)]
            print(f"  host {h}: {len(left)} of {len(pids)} worker processes still alive after the agents exited "
                  f"(or at the bound): {left}")


def worker(build, args):
    return [os.path.join(build, "tests", "agent", "crun_test_worker"), *args]


def tree(build, args):
    return [TREE, *worker(build, args)]


def row_worker_failure(name, build, bound, how):
    with Row(name, 2, build, bound) as r:
        r.torchrun(1, "2", 2, worker(build, ["--hang"]))
        time.sleep(HOST_HEAD_START)
        args = ["--only-rank", "1", "--exit", "3", "--hang"] if how == "exit" else ["--hang"]
        r.torchrun(2, "2", 2, worker(build, args))
        if how == "exit":
            t0 = time.monotonic()
        else:
            r.wait_ready(2)
            pid = r.agents[2].pids("pid")[1]
            t0 = time.monotonic()
            os.kill(pid, signal.SIGKILL if how == "kill" else signal.SIGSEGV)
        r.observe(t0)


def row_agent_kill(name, build, bound, host_kill):
    hosts = 2 if host_kill else 3
    with Row(name, hosts, build, bound) as r:
        for h in range(1, hosts + 1):
            r.torchrun(h, "2" if host_kill else "2:3", 1, tree(build, ["--hang"]))
            if h == 1:
                time.sleep(HOST_HEAD_START)
        r.wait_ready(1)
        victim = 1 if host_kill else 3
        pids = r.agents[victim].pids("pid") + r.agents[victim].pids("child") + r.agents[victim].pids("orphan")
        t0 = time.monotonic()
        os.kill(r.agents[victim].proc.pid, signal.SIGKILL)
        r.observe(t0, trees=[(victim, pids)])


def row_partition(name, build, bound):
    with Row(name, 3, build, bound) as r:
        for h in (1, 2, 3):
            r.torchrun(h, "2:3", 1, worker(build, ["--hang"]))
            if h == 1:
                time.sleep(HOST_HEAD_START)
        r.wait_ready(1)
        pids = r.agents[3].pids("pid")
        t0 = time.monotonic()
        subprocess.run([NETNS, "link", r.cluster, "3", "down"], check=True)
        r.observe(t0, trees=[(3, pids)])


def row_late_joiner(name, build, bound):
    with Row(name, 3, build, bound) as r:
        r.torchrun(1, "2:3", 1, worker(build, ["--hang"]))
        time.sleep(HOST_HEAD_START)
        r.torchrun(2, "2:3", 1, worker(build, ["--hang"]))
        r.wait_ready(1)
        t0 = time.monotonic()
        r.torchrun(3, "2:3", 1, worker(build, ["--hang"]))
        for h in (1, 2, 3):
            a = r.agents[h]
            deadline = t0 + bound
            started = None
            while started is None and time.monotonic() < deadline:
                with a.cv:
                    later = [t for t, l in a.lines if l.startswith("ready rank=") and t > t0]
                    if later:
                        started = later[0]
                    else:
                        a.cv.wait(max(deadline - time.monotonic(), 0.01))
            print(f"  host {h}: a worker (re)started {started - t0:6.2f} s after the joiner's start" if started else
                  f"  host {h}: no worker (re)start within {bound:.0f} s")
        for a in r.agents.values():
            a.proc.send_signal(signal.SIGTERM)
        r.observe(time.monotonic())


def row_signal(name, build, bound, signo, everyone):
    hosts = 2 if everyone else 3
    sig = signal.Signals(signo).name
    with Row(name, hosts, build, bound) as r:
        for h in range(1, hosts + 1):
            r.torchrun(h, "2" if everyone else "2:3", 1, worker(build, ["--hang", "--trap", sig]))
            if h == 1:
                time.sleep(HOST_HEAD_START)
        r.wait_ready(1)
        signalled = list(r.agents) if everyone else [3]
        trees = [(h, r.agents[h].pids("pid")) for h in signalled]
        t0 = time.monotonic()
        for h in signalled:
            r.agents[h].proc.send_signal(signo)
        r.observe(t0, trees=trees)


def row_garbage(name, build, bound):
    """100 connections of 4 KiB random bytes at the store's port while the job runs; then the
    workers are told to finish (SIGUSR2: exit 0) and the job should close with 0."""
    with Row(name, 3, build, bound) as r:
        r.torchrun(1, "2", 1, worker(build, ["--hang", "--trap", "SIGUSR2"]))
        time.sleep(HOST_HEAD_START)
        r.torchrun(2, "2", 1, worker(build, ["--hang", "--trap", "SIGUSR2"]))
        r.wait_ready(1)
        code = ("import os,socket,sys,random\nr=random.Random(20240611)\n"
                "for i in range(100):\n"
                " s=socket.create_connection(('10.77.0.1',29400),5)\n"
                " try: s.sendall(bytes(r.getrandbits(8) for _ in range(4096)))\n"
                " except OSError as e: print('send', e)\n"
                " s.close()\nprint('sent')\n")
        t0 = time.monotonic()
        g = subprocess.run(["ip", "netns", "exec", f"{r.cluster}-h3", PY, "-c", code], capture_output=True, text=True,
                           timeout=60)
        print(f"  garbage sender: {g.stdout.strip()} {g.stderr.strip()[:200]}")
        for a in r.agents.values():
            for pid in a.pids("pid"):
                try:
                    os.kill(pid, signal.SIGUSR2)
                except ProcessLookupError:
                    pass
        r.observe(t0)


def row_log_disk_full(name, build, bound):
    """Standalone: --log_dir on a full 64 KiB tmpfs (a private mount namespace), --redirects 3,
    local rank 1 prints 2,000 lines and exits 3."""
    import tempfile
    with tempfile.TemporaryDirectory() as mnt:
        script = ('mount -t tmpfs -o size=64k tf-full "$0" || exit 90; head -c 1M /dev/zero >"$0/filler" 2>/dev/null; '
                  'exec "$@"')
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, mnt, PY, SHIM, "--standalone",
                "--nproc_per_node", "2", "--log_dir", mnt, "--redirects", "3", "--no_python",
                *worker(build, ["--lines", "2000", "--stderr-lines", "30", "--only-rank", "1", "--exit", "3"])]
        t0 = time.monotonic()
        p = subprocess.run(argv, capture_output=True, text=True, timeout=bound)
        print(f"  exit {p.returncode} after {time.monotonic() - t0:.2f} s")
        for line in (p.stdout + p.stderr).splitlines():
            if re.search(r"No space|ENOSPC|error|Error|failed|exitcode|rank", line):
                print(f"    | {line[:160]}")


ROWS = {
    "worker_exit": lambda b, n: row_worker_failure("worker_exit", b, n, "exit"),
    "worker_sigkill": lambda b, n: row_worker_failure("worker_sigkill", b, n, "kill"),
    "worker_sigsegv": lambda b, n: row_worker_failure("worker_sigsegv", b, n, "segv"),
    "agent_kill_node": lambda b, n: row_agent_kill("agent_kill_node", b, n, False),
    "agent_kill_host": lambda b, n: row_agent_kill("agent_kill_host", b, n, True),
    "partition": lambda b, n: row_partition("partition", b, n),
    "late_joiner": lambda b, n: row_late_joiner("late_joiner", b, n),
    "sigterm_one": lambda b, n: row_signal("sigterm_one", b, n, signal.SIGTERM, False),
    "sigterm_all": lambda b, n: row_signal("sigterm_all", b, n, signal.SIGTERM, True),
    "sigusr1_one": lambda b, n: row_signal("sigusr1_one", b, n, signal.SIGUSR1, False),
    "sigusr1_all": lambda b, n: row_signal("sigusr1_all", b, n, signal.SIGUSR1, True),
    "endpoint_garbage": lambda b, n: row_garbage("endpoint_garbage", b, n),
    "log_disk_full": lambda b, n: row_log_disk_full("log_disk_full", b, n),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--bound", type=float, default=60.0)
    ap.add_argument("--verbose", action="store_true", help="print every agent's whole output")
    a = ap.parse_args()
    global VERBOSE
    VERBOSE = a.verbose
    if os.geteuid() != 0:
        sys.exit("torchrun_faults: needs root (network namespaces)")
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"# torchrun (torch 1.13, c10d) fault rows, {os.cpu_count()} cores, load {load}, bound {a.bound:.0f} s")
    for name in a.rows.split(","):
        print(f"\n## {name}")
        sys.stdout.flush()
        try:
            ROWS[name](a.build, a.bound)
        except Exception as e:  # one row's trouble does not hide the others
            print(f"  row failed: {e}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
