#!/usr/bin/python3
"""Failure -> training resumed: torchrun and crun side by side in one run (issue 43's table).

The job (bench/resume/worker.py): a PyTorch DDP job on gloo, 2 ranks on this host; each rank
imports torch, joins the group (env://), loads a 256x256 checkpoint, passes a barrier and trains;
rank 1 exits 1 at its first step --fail-after seconds (default 3) after its barrier and the
launcher restarts the group (--max-restarts 1). From the workers' CLOCK_MONOTONIC stamps (one
clock for every process on the host):
  failure -> new worker started   rank 1's "fail" stamp (taken right before it exits) to the
                                  restarted rank 1's first line of user code (its module top)
  failure -> training resumed     the same "fail" stamp to rank 0's first step of the restart
and, for where the time goes, rank 0's milestones of the restart (torch imported, process group
joined, checkpoint loaded, barrier passed).

Columns, interleaved (one job of each in turn, the order rotated every round, after one uncounted
warm-up job of each), median of --runs each:
  torchrun 1.13 (default --monitor_interval, 5 s) and with --monitor_interval 0.1, both
  --standalone through bench/agent/torchrun_shim.py (torchrun 1.13 crashes on Python 3.11);
  crun --standalone; crun --nnodes 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:0 (the agent
  store); the same with --standby-workers, when the crun under test lists that flag in --help.
The floor, in the same rounds: `python3 -c 'import torch'` alone, from its spawn to a line it
writes once torch is imported (a cold start's least), and two of them at once (what a restart of
2 ranks on this host pays at the least).

Every job runs in a process group of its own (setsid) under a watchdog (--timeout, killed past
it); after each job every process that carries the job's tag in its environment (workers,
standbys, the launcher) is SIGKILLed and awaited, and a line says so if any was left. A job
that fails is recorded with its reason and run again (3 times at most; only jobs that end 0 are
counted). No sleeps: the jobs' ends are waited on, and the stamps are read from their file once
the job has ended.

  /usr/bin/python3 bench/resume/run.py --crun build/launcher/crun --runs 9 --json resume.json
"""
import argparse
import datetime
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"  # Debian's, the one with torch (python3 on PATH may be another)
WORKER = os.path.join(HERE, "worker.py")
SHIM = os.path.join(ROOT, "bench", "agent", "torchrun_shim.py")
MILESTONES = ("torch", "init", "ckpt", "barrier")  # rank 0's, in the restart, after "top"
TAG_KEY = "BENCH_RESUME_TAG"
ATTEMPTS = 3  # a job that fails is run again, this many times in all at most


class JobFailed(RuntimeError):
    pass


def tagged_pids(tag):
    """Processes whose environment holds TAG_KEY=tag (a job's launcher, workers, standbys)."""
    needle = f"{TAG_KEY}={tag}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            pass
    return found


def command_name(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return f"pid {pid}, gone"


def kill_and_await(pids, bound_s=10.0):
    """SIGKILL each pid and wait (pidfd, bounded) until it is gone."""
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            if not select.select([fd], [], [], bound_s)[0]:
                print(f"# warning: pid {pid} still there {bound_s:.0f} s after SIGKILL", file=sys.stderr)
        except OSError:
            pass
        finally:
            os.close(fd)


def run_job(cmd, timeout_s, fail_after_s):
    """Runs one job to its end; returns (stamps, wall seconds). Raises JobFailed on a non-zero
    exit, a timeout or stamps missing; nothing of the job is left running either way."""
    with tempfile.TemporaryDirectory(prefix="crun-resume-") as tmp:
        tag = uuid.uuid4().hex
        stamps = os.path.join(tmp, "stamps")
        log_path = os.path.join(tmp, "log")
        env = dict(os.environ, BENCH_RESUME_STAMPS=stamps, BENCH_RESUME_DIR=tmp, PYTHON_EXEC=PYTHON,
                   PATH="/usr/bin:" + os.environ.get("PATH", "/bin"), OMP_NUM_THREADS="1",
                   BENCH_RESUME_FAIL_AFTER_S=str(fail_after_s))
        env[TAG_KEY] = tag
        timed_out = threading.Event()
        with open(log_path, "wb") as log:
            t0 = time.monotonic()
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 env=env, start_new_session=True)

            def expire():
                timed_out.set()
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass

            watchdog = threading.Timer(timeout_s, expire)
            watchdog.start()
            try:
                rc = p.wait()
            finally:
                watchdog.cancel()
            wall = time.monotonic() - t0
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        left = tagged_pids(tag)
        if left:
            print(f"# warning: {len(left)} process(es) of `{' '.join(cmd[:3])} ...` still running after"
                  f" it exited ({', '.join(command_name(q) for q in left)}); killed", file=sys.stderr)
            kill_and_await(left)

        def failed(why):
            with open(log_path, errors="replace") as f:
                tail = f.read()[-3000:]
            return JobFailed(f"{' '.join(cmd)}: {why}\n--- its output, last lines ---\n{tail}")

        if timed_out.is_set():
            raise failed(f"killed after {timeout_s} s")
        if rc != 0:
            raise failed(f"exit status {rc}")
        marks = {}
        if os.path.exists(stamps):
            with open(stamps) as f:
                for line in f:
                    kind, restart, rank, ns = line.split()
                    marks.setdefault((kind, int(restart), int(rank)), int(ns))
        need = [("fail", 0, 1), ("top", 1, 1), ("step:0", 1, 0)] + [(m, 1, 0) for m in MILESTONES]
        missing = [k for k in need if k not in marks]
        if missing:
            raise failed(f"stamps missing: {missing}")
        return marks, wall


def measure(cmd, timeout_s, fail_after_s):
    marks, wall = run_job(cmd, timeout_s, fail_after_s)
    fail = marks[("fail", 0, 1)]
    sample = {"started": (marks[("top", 1, 1)] - fail) / 1e9,
              "resumed": (marks[("step:0", 1, 0)] - fail) / 1e9,
              "rank0 top": (marks[("top", 1, 0)] - fail) / 1e9 if ("top", 1, 0) in marks else None,
              "job wall": wall}
    for m in MILESTONES:
        sample[f"rank0 {m}"] = (marks[(m, 1, 0)] - fail) / 1e9
    return sample


IMPORT_TORCH = "import torch; import sys; sys.stdout.write('imported\\n'); sys.stdout.flush()"


def import_torch(count, timeout_s):
    """`count` x `python3 -c 'import torch'` started at once: the time from the spawn to the
    slowest one's "imported" line on its pipe (what a worker's cold start pays before its own code
    can use torch), and to the last one's exit (the interpreter's teardown included). Bounded by a
    watchdog thread; the reads and waits are plain blocking ones (Python 3.11's wait(timeout=)
    polls with sleeps up to 50 ms, which would round a figure up)."""
    t0 = time.monotonic()
    procs = [subprocess.Popen([PYTHON, "-c", IMPORT_TORCH], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              start_new_session=True) for _ in range(count)]
    watchdog = threading.Timer(timeout_s, lambda: [q.kill() for q in procs])
    watchdog.start()
    try:
        lines = [p.stdout.readline() for p in procs]
        imported = time.monotonic() - t0
        codes = [p.wait() for p in procs]
        wall = time.monotonic() - t0
    finally:
        watchdog.cancel()
        for p in procs:
            p.stdout.close()
    if any(codes) or any(line != b"imported\n" for line in lines):
        raise JobFailed(f"import torch: exit statuses {codes} (killed after {timeout_s} s?)")
    return {"imported": imported, "wall": wall}


def crun_knows(crun, flag):
    out = subprocess.run([crun, "--help"], capture_output=True, text=True, timeout=30).stdout
    return flag in out.replace("_", "-")


def columns(crun):
    job = ["--nproc_per_node", "2", "--max_restarts", "1", WORKER]
    torchrun = [PYTHON, SHIM, "--standalone"]
    agent_store = [crun, "--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0"]
    cols = [
        ("torchrun", "torchrun 1.13 (default monitor, 5 s)", torchrun + job),
        ("torchrun-0.1", "torchrun 1.13 `--monitor_interval 0.1`", torchrun + ["--monitor_interval", "0.1"] + job),
        ("crun-standalone", "crun `--standalone`", [crun, "--standalone"] + job),
        ("crun-agent-store", "crun `--nnodes 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:0` (agent store)",
         agent_store + job),
    ]
    standby = None
    if crun_knows(crun, "--standby-workers"):
        flags = ["--standby-workers"]
        if crun_knows(crun, "--standby-preload"):
            flags += ["--standby-preload", "torch"]
        standby = ("crun-standby", "the same, `" + " ".join(flags) + "`", agent_store + flags + job)
        cols.append(standby)
    return cols, standby is not None


def tree_commit(path):
    """The short commit of the git tree holding `path`, "+changes" when it has uncommitted ones."""
    def git(*args):
        return subprocess.run(["git", "-C", path, *args], capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return "?"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def fmt(xs):
    """median (min-max) of seconds, as s with 3 decimals."""
    if not xs:
        return "-"
    return f"{statistics.median(xs):.3f} s ({min(xs):.3f}-{max(xs):.3f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--crun", default=os.path.join(ROOT, "build", "launcher", "crun"), help="the crun under test")
    ap.add_argument("--runs", type=int, default=5, help="counted jobs per column (default 5; at least 5 for a figure)")
    ap.add_argument("--json", metavar="OUT", help="write every sample and median here")
    ap.add_argument("--fail-after", type=float, default=3.0, metavar="S",
                    help="rank 1 fails at its first step S seconds after its barrier (default 3)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds one job may take before it is killed")
    a = ap.parse_args()
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    if not os.access(a.crun, os.X_OK):
        ap.error(f"--crun {a.crun}: not an executable file")

    cols, has_standby = columns(a.crun)
    floors = [("import-torch", "floor: `python3 -c 'import torch'` alone (spawn -> imported)", 1),
              ("import-torch-x2", "floor: two of them at once (spawn -> both imported)", 2)]
    tasks = [(key, label, lambda cmd=cmd: measure(cmd, a.timeout, a.fail_after)) for key, label, cmd in cols]
    tasks += [(key, label, lambda n=n: import_torch(n, a.timeout)) for key, label, n in floors]

    load_start = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    commit = tree_commit(ROOT)
    crun_commit = tree_commit(os.path.dirname(os.path.abspath(a.crun)))
    print(f"# failure -> training resumed, {started:%Y-%m-%d %H:%M} UTC, bench at {commit},"
          f" crun {a.crun} (its tree at {crun_commit}), {os.cpu_count()} cores,"
          f" load average {load_start[0]:.2f}", flush=True)
    for key, label, cmd in cols:
        print(f"#   {key}: {' '.join(cmd)}", flush=True)

    samples = {key: [] for key, _, _ in tasks}
    failures = {key: [] for key, _, _ in tasks}

    def attempt(key, fn):
        """One job; a failed one (torchrun's agent loses its store under load now and then) is
        recorded with its reason and run again, ATTEMPTS times at most."""
        for n in range(1, ATTEMPTS + 1):
            try:
                return fn()
            except JobFailed as e:
                failures[key].append(str(e))
                again = "; running it again" if n < ATTEMPTS else ""
                print(f"# {key}: a job failed ({str(e).splitlines()[0][-80:]}){again}", flush=True)
        raise JobFailed(f"{key}: {ATTEMPTS} jobs in a row failed; the last:\n{failures[key][-1]}")

    for key, _, fn in tasks:  # warm-up, not counted (page cache, torch's first import)
        attempt(key, fn)
    for i in range(a.runs):
        for j in range(len(tasks)):
            key, _, fn = tasks[(i + j) % len(tasks)]
            samples[key].append(attempt(key, fn))
        print(f"# round {i + 1} of {a.runs} done, load average {os.getloadavg()[0]:.2f}", flush=True)
    load_end = os.getloadavg()

    def series(key, field):
        return [s[field] for s in samples[key] if s.get(field) is not None]

    def med(key, field):
        xs = series(key, field)
        return statistics.median(xs) if xs else None

    print(f"\n# median (min-max) of {a.runs} interleaved runs each; load average {load_start[0]:.2f} at the"
          f" start, {load_end[0]:.2f} at the end")
    print("| launcher | failure -> new worker started | failure -> training resumed |")
    print("|---|---:|---:|")
    for key, label, _ in cols:
        print(f"| {label} | {fmt(series(key, 'started'))} | {fmt(series(key, 'resumed'))} |")
    if not has_standby:
        print("| crun, agent store, `--standby-workers` | n/a (no --standby-workers) | n/a (no --standby-workers) |")
    for key, label, _ in floors:
        print(f"| {label} | | {fmt(series(key, 'imported'))} |")
    for key, fails in failures.items():
        if fails:
            print(f"# {key}: {len(fails)} job(s) failed and were run again; the first: "
                  f"{fails[0].splitlines()[0][-100:]} ... {fails[0].strip().splitlines()[-1][-160:]}")

    print("\n# rank 0 in the restart, median s after the failure: process started, torch imported,"
          " group joined, checkpoint loaded, barrier passed, first step")
    print("| launcher | top | torch | init | ckpt | barrier | step 0 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for key, label, _ in cols:
        cells = [med(key, f) for f in ["rank0 top"] + [f"rank0 {m}" for m in MILESTONES] + ["resumed"]]
        print(f"| {key} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |")

    ratio = None
    if has_standby:
        cold, warm = med("crun-agent-store", "resumed"), med("crun-standby", "resumed")
        ratio = warm / cold
        print(f"\nstandby / agent store cold, failure -> training resumed: {ratio:.2f}x (goal <= 0.2x);"
              f" new worker started: {med('crun-standby', 'started') / med('crun-agent-store', 'started'):.2f}x")
    else:
        print("\nstandby / agent store cold: n/a (no --standby-workers in this crun)")
    print(f"agent store cold / import torch alone, training resumed: "
          f"{med('crun-agent-store', 'resumed') / med('import-torch', 'imported'):.2f}x; import torch alone to its"
          f" process's exit (teardown included): {fmt(series('import-torch', 'wall'))}")

    if a.json:
        out = {"date": started.isoformat(), "commit": commit, "crun": a.crun, "crun_tree": crun_commit, "runs": a.runs,
               "cores": os.cpu_count(), "load_average_start": load_start, "load_average_end": load_end,
               "columns": {key: {"label": label, "command": cmd} for key, label, cmd in cols},
               "standby_column": has_standby, "ratio_standby_to_agent_store": ratio,
               "samples": samples, "failed_jobs": failures,
               "medians": {key: {f: statistics.median(series(key, f)) for f in samples[key][0]
                                 if series(key, f)} for key in samples}}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"# samples and medians written to {a.json}")


if __name__ == "__main__":
    try:
        main()
    except JobFailed as e:
        sys.exit(f"bench/resume: {e}")
