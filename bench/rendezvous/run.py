#!/usr/bin/python3
"""Multi-node rendezvous benchmarks: crun vs torchrun (torch 1.13) c10d, side by side in one run.

    /usr/bin/python3 bench/rendezvous/run.py [--build build] [--runs 5] [--big-runs 3]
        [--torch-runs 5] [--crun-scale 64,256,1024] [--torch-scale 8,16,32] [--skip-netns]
    /usr/bin/python3 bench/rendezvous/run.py --crun-scale 8,32,128 --scale-also LABEL=CRUN ...
        [--scale-env LABEL=NAME=VALUE ...]   (crun builds side by side: the round's figures only,
        interleaved run by run, the order rotated each run)
    /usr/bin/python3 bench/rendezvous/run.py --shared-endpoint 1024 [--runs 5]   (issue 16's figure)
        [--shared-also LABEL=CRUN ...]   (another crun build in the same interleaving)
        [--shared-env LABEL=NAME=VALUE ...]   (this build's crun with NAME=VALUE, the same)
        [--shared-work-io-thread]   (also the same-work floor with its socket on a second thread)
        beside two floors: N x `timeout 60 /bin/true` (the process floor, the issue's anchor) and
        N x rdzv_floor_agent (the same work with the least code: one endpoint, a join, a worker,
        a report, the exit barrier); wall time and the machine's CPU time (per agent, from
        /proc/stat: every process and kernel thread, the kernel's deferred work included); and,
        before and after, what one `cpuid` costs here (cpuid_cost: a fixed share of every process
        start on a VM, both runs' alike, which moves with the host's load)

1. Rendezvous scale on loopback: N agents (`--nnodes N --nproc-per-node 1 --rdzv-backend c10d
   --rdzv-endpoint 127.0.0.1:PORT`, exactly one with `--rdzv-conf is_host=1`, the others
   `is_host=0`), each worker `rdzv_worker` (appends a CLOCK_REALTIME stamp, exits 0). Measured from
   just before the first agent is launched to the last worker's start stamp, and to the moment
   every agent has been reaped (all must exit 0). The agents are started by rdzv_spawn
   (posix_spawn in a loop, the same for both launchers).
2. `rdzv_loadgen --nodes N` (one store + coordinator, N simulated nodes).
3. Cross-node restart on 2 network-namespace hosts (scripts/netns-cluster.sh, needs root):
   `--nnodes 2 --nproc-per-node 2 --max-restarts 1`; on host 2 local rank 1 fails (exit 3) in
   restart 0; figure = max(start stamps of restart 1, 4 workers) - the failure stamp.

torchrun is /usr/bin/torchrun's code started through bench/agent/torchrun_shim.py (it patches
Std.from_str, which crashes on Python 3.11; nothing else).
"""
import argparse
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIM = os.path.join(ROOT, "bench", "agent", "torchrun_shim.py")
NETNS = os.path.join(ROOT, "scripts", "netns-cluster.sh")
PY = "/usr/bin/python3"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def kill_all(procs):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # each agent leads its own session
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def read_stamps(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 4:
                    out.append((parts[0], int(parts[1]), int(parts[2]), int(parts[3])))
    return out


def live_sessions(pidfile):
    """Processes still running in the sessions of the agents rdzv_spawn started (their pids are
    the session ids): what a run left behind."""
    if not os.path.exists(pidfile):
        return []
    with open(pidfile) as f:
        sids = {int(line) for line in f if line.strip().isdigit()}
    left = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp session
        except OSError:
            continue
        if int(fields[3]) in sids:
            left.append(int(pid))
    return left


def kill_sessions(pidfile):
    """Backstop: nothing may outlive a run (each agent rdzv_spawn started leads its own session)."""
    if not os.path.exists(pidfile):
        return
    with open(pidfile) as f:
        for line in f:
            try:
                os.killpg(int(line), signal.SIGKILL)
            except (ProcessLookupError, ValueError, PermissionError):
                pass


def scale_once(launcher, n, worker, timeout, tag, crun=None, extra_env=None):
    """N agents on loopback, started by rdzv_spawn; returns ms to the last worker's start stamp,
    ms to all agents exited, ms to all agents launched, ms to the first worker's start stamp.
    `crun`: another crun build; `extra_env`: more environment variables for the agents."""
    d = tempfile.mkdtemp(prefix="rdzvbench-")
    stamp = os.path.join(d, "stamps")
    logp = os.path.join(d, "log")
    pidp = os.path.join(d, "pids")
    port = free_port()
    env = dict(os.environ, RDZV_STAMP=stamp, **(extra_env or {}))
    if launcher == "crun":
        cmd = [crun or CRUN, "--nnodes", str(n), "--nproc-per-node", "1", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", tag,
               "--rdzv-conf", "is_host={IS_HOST}", "--no-python", worker]
    else:
        cmd = [PY, SHIM, "--nnodes", str(n), "--nproc_per_node", "1",
               "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
               "--rdzv_id", tag, "--rdzv_conf", "is_host={IS_HOST}", "--no_python", worker]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        out = subprocess.run([SPAWN, str(n), str(timeout), pidp, logp, "--", *cmd], env=env,
                             capture_output=True, text=True, timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        out = None
    finally:
        kill_sessions(pidp)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[0] = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    if out is None or out.returncode != 0:
        raise RuntimeError(f"{launcher} {n} agents: timeout ({out.stdout.strip() if out else ''}); log {logp}")
    f = out.stdout.split()
    t0, launched, exited, nonzero = int(f[1]), int(f[3]), int(f[5]), int(f[7])
    if nonzero:
        raise RuntimeError(f"{launcher} {n} agents: {nonzero} exited non-zero; log {logp}")
    st = read_stamps(stamp)
    if len(st) != n or sorted(s[2] for s in st) != list(range(n)):
        raise RuntimeError(f"{launcher} {n} agents: {len(st)} worker stamps, expected ranks 0..{n - 1}; {d}")
    t_start = max(s[3] for s in st)
    t_first = min(s[3] for s in st)
    shutil.rmtree(d, ignore_errors=True)
    return (t_start - t0) / 1e6, (exited - t0) / 1e6, (launched - t0) / 1e6, (t_first - t0) / 1e6


def machine_cpu_s():
    """Non-idle CPU seconds of the whole machine since boot (/proc/stat: user, nice, system, irq,
    softirq; not idle, iowait or steal): a run's share includes the kernel threads that finish its
    work (RCU callbacks, cgroup and socket teardown), which no process's rusage shows."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:8]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / os.sysconf("SC_CLK_TCK")


def shared_once(n, tag, crun=None, argv=None, env=None):
    """Issue 16's figure: N agents on one shared endpoint, no is_host (each infers it; the first
    to listen hosts), nproc 1, /bin/true: (ms from the first launch to the last agent reaped, the
    machine's CPU seconds meanwhile). `argv` (a list with "{PORT}") instead of crun: the same-work
    floor's agents. `env`: extra environment variables."""
    d = tempfile.mkdtemp(prefix="rdzvbench-")
    port = str(free_port())
    cmd = [crun or CRUN, "--nnodes", str(n), "--nproc-per-node", "1", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", tag, "/bin/true"]
    if argv:
        cmd = [a.replace("{PORT}", port) for a in argv]
    try:
        cpu0 = machine_cpu_s()
        out = subprocess.run([SPAWN, str(n), "120", os.path.join(d, "pids"), os.path.join(d, "log"), "--", *cmd],
                             capture_output=True, text=True, timeout=150, env=dict(os.environ, **(env or {})))
        cpu = machine_cpu_s() - cpu0
        LEFT[0] = live_sessions(os.path.join(d, "pids"))
    finally:
        kill_sessions(os.path.join(d, "pids"))
    f = out.stdout.split()
    if out.returncode != 0 or int(f[7]) != 0:
        raise RuntimeError(f"shared endpoint, {n} agents: {out.stdout} {out.stderr}; log {d}/log")
    shutil.rmtree(d, ignore_errors=True)
    return (int(f[5]) - int(f[1])) / 1e6, cpu


def cpuid_cost():
    """cpuid_cost's line ("" where it is not built: not x86-64)."""
    if not os.path.exists(CPUID_COST):
        return ""
    return subprocess.run([CPUID_COST], capture_output=True, text=True, timeout=30, check=True).stdout.strip()


def shared_endpoint_bench(n, runs, others=(), work_io_thread=False):
    """Interleaved: the process floor (N x `timeout 60 /bin/true`, each forked, exec'd and reaped by
    rdzv_spawn: the issue's anchor), the same-work floor (N rdzv_floor_agent processes: one
    endpoint, a join and its rank, one /bin/true each, a report and the exit barrier, nothing
    more) and N crun agents on one shared endpoint; medians of the wall time and of the machine's
    CPU time per agent, and their ratios to the process floor (goal: wall <= 1.5x). `others`
    ((label, crun, env), --shared-also and --shared-env): other crun builds or environments, in the
    same interleaving. `work_io_thread`: also the same-work floor whose joiners do their socket's
    work on a second thread (rdzv_floor_agent --io-thread), as crun's participant does."""
    cpuid_before = cpuid_cost()
    rows = {"floor": [], "work": []}
    if work_io_thread:
        rows["work-io"] = []
    rows["crun"] = []
    rows.update({label: [] for label, _, _ in others})
    for r in range(runs):
        cpu0 = machine_cpu_s()
        wall = baseline(n, ["/usr/bin/timeout", "60", "/bin/true"])[0]
        rows["floor"].append((wall, machine_cpu_s() - cpu0))
        rows["work"].append(shared_once(n, None, argv=[FLOOR_AGENT, "{PORT}", str(n), "--", "/bin/true"]))
        if work_io_thread:
            rows["work-io"].append(shared_once(n, None, argv=[FLOOR_AGENT, "--io-thread", "{PORT}", str(n), "--",
                                                              "/bin/true"]))
        rows["crun"].append(shared_once(n, f"se{n}r{r}"))
        for label, crun, env in others:
            rows[label].append(shared_once(n, f"se{n}r{r}{label}", crun, env=env))
        print(f"  run {r}: " + ", ".join(f"{k} {v[-1][0]:.0f} ms / {v[-1][1] * 1e3 / n:.2f} ms CPU" for k, v in rows.items())
              + f" (load {loadavg()})", flush=True)
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v) * 1e3 / n)
           for k, v in rows.items()}
    f, w = med["floor"], med["work"]
    names = {"floor": f"{n} x timeout 60 /bin/true (the process floor)",
             "work": f"{n} rdzv_floor_agent, shared endpoint (same work)",
             "work-io": "the same work, its socket on a second thread",
             "crun": f"{n} crun agents, shared endpoint, /bin/true"}
    print(f"{'':52} {'wall':>8}    {'x floor':>7} {'CPU/agent':>10} {'x floor':>7}")
    for k, (wall, cpu) in med.items():
        note = " (goal <= 1.5x)" if k == "crun" else ""
        if k not in ("floor", "work", "work-io"):
            note += f", {wall / w[0]:.2f}x the same-work floor"
        print(f"{names.get(k, 'the same, ' + k):52} {wall:8.0f} ms {wall / f[0]:6.2f}x {cpu:7.2f} ms {cpu / f[1]:6.2f}x{note}")
    if cpuid_before:
        print(f"this machine, before: {cpuid_before}; after: {cpuid_cost()}")


def scale_variants_bench(sizes, runs, worker, variants):
    """The round at each size for every (label, crun, env) of `variants`, interleaved: one run of
    each per turn, the order rotated each turn; medians and each beside the first."""
    for n in sizes:
        vals = {label: [] for label, _, _ in variants}
        for r in range(runs):
            k = r % len(variants)
            for label, crun, env in variants[k:] + variants[:k]:
                try:
                    s, e, _, _ = scale_once("crun", n, worker, 120, f"v{n}r{r}{label}", crun, env)
                    vals[label].append((s, e))
                except RuntimeError as ex:
                    print(f"  {label} {n} agents run {r}: ERROR {ex}", flush=True)
            print(f"  {n} agents run {r}: " + ", ".join(f"{k} {v[-1][0]:.1f} ms" for k, v in vals.items() if v)
                  + f" (load {loadavg()})", flush=True)
        base = statistics.median(x[0] for x in vals[variants[0][0]])
        print(f"{n} agents, median of {runs}: workers started / agents exited")
        for label, v in vals.items():
            if not v:
                print(f"  {label:<24} FAILED")
                continue
            st, ex = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
            print(f"  {label:<24} {st:8.1f} ms {ex:8.1f} ms  {st / base:5.2f}x {variants[0][0]}"
                  f" (started {min(x[0] for x in v):.1f} .. {max(x[0] for x in v):.1f} ms, n={len(v)})", flush=True)


CPU = [0.0]  # CPU seconds (user + sys) of the last scale run's processes, agents and workers
LEFT = [[]]  # pids still running in the last shared-endpoint run's sessions when all agents had exited


def baseline(n, argv):
    """n processes of argv started by rdzv_spawn, no rendezvous: (ms to all exited, CPU s)."""
    d = tempfile.mkdtemp(prefix="rdzvbench-")
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([SPAWN, str(n), "60", os.path.join(d, "pids"), os.path.join(d, "log"),
                          "--", *argv], capture_output=True, text=True, timeout=90)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(d, ignore_errors=True)
    f = out.stdout.split()
    if out.returncode != 0 or int(f[7]) != 0:
        raise RuntimeError(f"baseline {argv}: {out.stdout} {out.stderr}")
    return (int(f[5]) - int(f[1])) / 1e6, (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)


def median_runs(fn, runs, label):
    starts, exits, errors = [], [], []
    for r in range(runs):
        try:
            s, e, launched, first = fn(r)
            starts.append(s)
            exits.append(e)
            print(f"  {label} run {r}: workers started {s:8.1f} ms, agents exited {e:8.1f} ms"
                  f" (all agents launched at {launched:.0f} ms, first worker at {first:.0f} ms;"
                  f" CPU of all processes {CPU[0]:.2f} s;"
                  f" load {loadavg()})", flush=True)
        except RuntimeError as ex:
            errors.append(str(ex))
            print(f"  {label} run {r}: ERROR {ex}", flush=True)
    if not starts:
        return None
    return statistics.median(starts), statistics.median(exits), len(starts), errors


def loadgen(nodes, runs):
    vals = []
    for _ in range(runs):
        out = subprocess.run([LOADGEN, "--nodes", str(nodes)], capture_output=True, text=True,
                             timeout=120)
        line = out.stdout.strip()
        print(f"  {line}  (load {loadavg()})", flush=True)
        if out.returncode != 0 or "ranks=ok" not in line:
            raise RuntimeError(f"rdzv_loadgen failed: {out.stdout} {out.stderr}")
        vals.append(float(line.split("seconds=")[1].split()[0]))
    return statistics.median(vals)


# ---------------------------------------------------------------- cross-node restart (netns)

def netns(*args, timeout=30, **kw):
    return subprocess.run(["bash", NETNS, *args], timeout=timeout, **kw)


def restart_once(launcher, name, worker, d, run, extra):
    """One 2-host job; returns ms from the failure stamp to the last restart-1 start stamp."""
    tag = f"{launcher}{len(extra)}-{run}"
    stamp = os.path.join(d, f"{tag}.stamps")
    logs = [open(os.path.join(d, f"{tag}-h{h}.log"), "wb") for h in (1, 2)]
    rid = f"rs{tag}"
    procs = []
    try:
        for h in (1, 2):
            env = dict(os.environ, RDZV_STAMP=stamp, RDZV_HOLD="1")
            if h == 2:
                env["RDZV_FAIL"] = "1"
            conf = "is_host=1" if h == 1 else "is_host=0"
            if launcher == "crun":
                cmd = [CRUN, "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                       "--rdzv-endpoint", "10.77.0.1:29400", "--rdzv-id", rid, "--rdzv-conf", conf,
                       "--max-restarts", "1", "--no-python", worker]
            else:
                # torch's hostname heuristic fails in a namespace: is_host must be given; the
                # default monitor_interval (5 s) is kept, and 0.1 s is run as a second row.
                cmd = [PY, SHIM, "--nnodes", "2", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
                       "--rdzv_endpoint", "10.77.0.1:29400", "--rdzv_id", rid, "--rdzv_conf", conf,
                       "--max_restarts", "1", *extra, "--no_python", worker]
            procs.append(subprocess.Popen(["bash", NETNS, "exec", name, str(h), *cmd], env=env,
                                          stdin=subprocess.DEVNULL, stdout=logs[h - 1],
                                          stderr=subprocess.STDOUT, start_new_session=True))
            if h == 1:
                time.sleep(0.3 if launcher == "crun" else 2.0)  # let the host bind first
        deadline = time.monotonic() + (30 if launcher == "crun" else 120)
        for p in procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"{launcher} restart run {run}: timeout; logs in {d}")
        codes = [p.returncode for p in procs]
        st = read_stamps(stamp)
        fail = [s[3] for s in st if s[0] == "fail"]
        # replacements: every start after the failure (torchrun's restart count is per node)
        r1 = [s[3] for s in st if s[0] == "start" and fail and s[3] > fail[0]]
        if codes != [0, 0] or len(fail) != 1 or len(r1) != 4:
            raise RuntimeError(f"{launcher} restart run {run}: exit codes {codes}, {len(fail)} fail "
                               f"stamps, {len(r1)} restart-1 starts; logs in {d}")
        return (max(r1) - fail[0]) / 1e6
    finally:
        kill_all(procs)
        for f in logs:
            f.close()


def restart_bench(runs, torch_runs, worker):
    name = f"rdzvb{os.getpid() % 100000}"
    d = tempfile.mkdtemp(prefix="rdzvbench-ns-")
    res = {}
    try:
        netns("up", name, "2", check=True, stdout=subprocess.DEVNULL)
        variants = [("crun", runs, [], "crun"), ("torchrun", torch_runs, [], "torchrun")]
        if TORCH_MI:
            variants.append(("torchrun", torch_runs, ["--monitor_interval", TORCH_MI],
                             f"torchrun --monitor_interval {TORCH_MI}"))
        for launcher, n, extra, label in variants:
            vals = []
            for r in range(n):
                try:
                    v = restart_once(launcher, name, worker, d, r, extra)
                    vals.append(v)
                    print(f"  {label} restart run {r}: {v:8.1f} ms  (load {loadavg()})", flush=True)
                except RuntimeError as ex:
                    print(f"  {label} restart run {r}: ERROR {ex}", flush=True)
            res[label] = (statistics.median(vals), len(vals)) if vals else None
    finally:
        netns("down", name, timeout=60)
    return res


def use_build(build):
    """Points the benchmarks at a build tree's crun and bench programs; returns its rdzv_worker."""
    global CRUN, LOADGEN, SPAWN, FLOOR_AGENT, CPUID_COST
    CRUN = os.path.join(build, "launcher", "crun")
    LOADGEN = os.path.join(build, "bench", "rendezvous", "rdzv_loadgen")
    SPAWN = os.path.join(build, "bench", "rendezvous", "rdzv_spawn")
    FLOOR_AGENT = os.path.join(build, "bench", "rendezvous", "rdzv_floor_agent")
    CPUID_COST = os.path.join(build, "bench", "rendezvous", "cpuid_cost")
    return os.path.join(build, "bench", "rendezvous", "rdzv_worker")


def main():
    global TORCH_MI
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--big-runs", type=int, default=3, help="runs at 1,024 agents")
    ap.add_argument("--torch-runs", type=int, default=5)
    ap.add_argument("--crun-scale", default="8,16,32,64,256,1024")
    ap.add_argument("--torch-scale", default="8,16,32")
    ap.add_argument("--loadgen", default="1000,10000")
    ap.add_argument("--skip-netns", action="store_true")
    ap.add_argument("--shared-endpoint", type=int, metavar="N",
                    help="only issue 16's figure: N agents on one shared endpoint against the process floor")
    ap.add_argument("--shared-also", action="append", default=[], metavar="LABEL=CRUN",
                    help="with --shared-endpoint: another crun build, interleaved with the rest")
    ap.add_argument("--shared-env", action="append", default=[], metavar="LABEL=NAME=VALUE",
                    help="with --shared-endpoint: this build's crun with NAME=VALUE in its environment, interleaved")
    ap.add_argument("--shared-work-io-thread", action="store_true",
                    help="with --shared-endpoint: also the same-work floor with its socket on a second thread")
    ap.add_argument("--scale-also", action="append", default=[], metavar="LABEL=CRUN",
                    help="only the round at --crun-scale's sizes: this build's crun and another build, interleaved")
    ap.add_argument("--scale-env", action="append", default=[], metavar="LABEL=NAME=VALUE",
                    help="the same with NAME=VALUE in the agents' environment (of --scale-also's LABEL, or this build's)")
    ap.add_argument("--torch-monitor-interval", default="0.1",
                    help="extra torchrun row with this --monitor_interval in the restart benchmark ('' for none)")
    a = ap.parse_args()
    worker = use_build(a.build)
    TORCH_MI = a.torch_monitor_interval
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if a.shared_endpoint:
        others = []
        for v in a.shared_also:
            label, _, crun = v.partition("=")
            if not label or not crun:
                ap.error(f"--shared-also {v!r}: expected LABEL=CRUN")
            others.append((label, crun, None))
        for v in a.shared_env:
            label, _, var = v.partition("=")
            name, eq, value = var.partition("=")
            if not label or not name or not eq:
                ap.error(f"--shared-env {v!r}: expected LABEL=NAME=VALUE")
            others.append((label, None, {name: value}))
        print(f"# {a.shared_endpoint} agents on one endpoint vs the process floor, {os.cpu_count()} cores, "
              f"load average {loadavg()}, median of {a.runs}", flush=True)
        shared_endpoint_bench(a.shared_endpoint, a.runs, others, a.shared_work_io_thread)
        return
    if a.scale_also or a.scale_env:
        variants = [("crun", CRUN, None)]
        for v in a.scale_also:
            label, _, crun = v.partition("=")
            if not label or not crun:
                ap.error(f"--scale-also {v!r}: expected LABEL=CRUN")
            variants.append((label, crun, None))
        for v in a.scale_env:
            label, _, var = v.partition("=")
            name, eq, value = var.partition("=")
            if not label or not name or not eq:
                ap.error(f"--scale-env {v!r}: expected LABEL=NAME=VALUE")
            known = [i for i, x in enumerate(variants) if x[0] == label]
            if known:
                i = known[0]
                variants[i] = (label, variants[i][1], dict(variants[i][2] or {}, **{name: value}))
            else:
                variants.append((label, CRUN, {name: value}))
        print(f"# the c10d round, crun builds side by side, {os.cpu_count()} cores, load average {loadavg()}",
              flush=True)
        scale_variants_bench([int(x) for x in a.crun_scale.split(",") if x], a.runs, worker, variants)
        return
    print(f"# crun vs torchrun (torch 1.13) c10d rendezvous, {os.cpu_count()} cores, "
          f"load average {loadavg()}, RLIMIT_NOFILE {hard}", flush=True)

    rows = []
    crun_scale = [int(x) for x in a.crun_scale.split(",") if x]
    torch_scale = [int(x) for x in a.torch_scale.split(",") if x]
    t_res = {}
    for n in sorted(set(crun_scale) | set(torch_scale)):
        if n in crun_scale:
            runs = a.big_runs if n >= 1024 else a.runs
            c = median_runs(lambda r, n=n: scale_once("crun", n, worker, 120, f"bc{n}r{r}"), runs,
                            f"crun {n} agents")
        else:
            c = None
        if n in torch_scale:
            t = median_runs(lambda r, n=n: scale_once("torchrun", n, worker, 300, f"bt{n}r{r}"),
                            a.torch_runs, f"torchrun {n} agents")
            t_res[n] = t
        else:
            t = None
        rows.append((n, c, t))

    base = []
    for n in (x for x in crun_scale if x >= 256):
        for label, argv in (("crun --version", [CRUN, "--version"]), ("rdzv_worker alone", [worker])):
            vals = [baseline(n, argv) for _ in range(3)]
            ms = statistics.median(v[0] for v in vals)
            cpu = statistics.median(v[1] for v in vals)
            print(f"  baseline {n} x {label}: {ms:.0f} ms, CPU {cpu:.2f} s (load {loadavg()})", flush=True)
            base.append((n, label, ms, cpu))

    lg = [(n, loadgen(n, a.runs)) for n in (int(x) for x in a.loadgen.split(",") if x)]

    rs = None
    if not a.skip_netns:
        rs = restart_bench(a.runs, a.torch_runs, worker)

    print(f"\n# results (median; load average now {loadavg()})")
    print(f"{'metric':44} {'crun':>10} {'torchrun':>10} {'ratio':>7}")
    for n, c, t in rows:
        for i, what in ((0, "workers started"), (1, "agents exited")):
            cs = f"{c[0 if i == 0 else 1]:8.0f}ms" if c else "-"
            ts = f"{t[0 if i == 0 else 1]:8.0f}ms" if t else "-"
            ratio = f"{t[i] / c[i]:6.1f}x" if c and t else ""
            runs = f"n={c[2] if c else '-'}/{t[2] if t else '-'}"
            print(f"{n:5} agents, {what:18} {runs:12} {cs:>10} {ts:>10} {ratio:>7}")
    for n, label, ms, cpu in base:
        print(f"{f'{n} x {label}, no rendezvous':44} {ms:8.0f}ms {'-':>10}"
              f"  (CPU {cpu:.1f} s)")
    for n, v in lg:
        print(f"rdzv_loadgen {n} simulated nodes{'':14} {v * 1000:8.0f}ms {'-':>10}")
    if rs is not None:
        c = rs.get("crun")
        for label, t in rs.items():
            if label == "crun":
                continue
            cs = f"{c[0]:8.1f}ms" if c else "FAILED"
            ts = f"{t[0]:8.1f}ms" if t else "FAILED"
            ratio = f"{t[0] / c[0]:6.0f}x" if c and t else ""
            print(f"cross-node restart, 2 netns hosts n={c[1] if c else 0}/{t[1] if t else 0:<3} "
                  f"{cs:>10} {ts:>10} {ratio:>7}  ({label})")


if __name__ == "__main__":
    main()
