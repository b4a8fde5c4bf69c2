#!/usr/bin/python3
"""crun vs torchrun on one node, side by side in one run (median of --runs each).

Measures
  launch    wall time of a no-op job: `--standalone --nproc_per_node N --no_python /bin/true`
            (torch 1.13 knows only the underscore spellings; crun takes both)
  recovery  rank 0 of 2 exits 1 in attempt 0 -> its replacement (attempt 1) is running,
            from timestamps the worker writes (CLOCK_REALTIME ns)
  rss       the agent's peak RSS (VmHWM of the agent process itself) with 8 workers alive 1.5 s

torchrun runs through bench/agent/torchrun_shim.py (torch 1.13 crashes on Python 3.11 in
Std.from_str with its default --redirects/--tee; the shim only fixes that).

With --variant LABEL=CRUN[,KEY=VALUE...] (repeatable) it compares crun builds or settings with
each other instead (the first is the anchor): launch, recovery, RSS and private memory (RSS less
the shared libraries' pages, /proc/PID/smaps_rollup), the variants' runs interleaved
(one run of each in turn, rotating who goes first), medians of 3 x --runs each.

With --startup it measures only what issue 16 asks of an agent's start: `crun --standalone
--nproc-per-node 2 /bin/true` against its floor, `/bin/true` three times in a row (the agent and
its two workers as bare processes), interleaved, with the ratio (goal: at most 2x); back to back,
then each run after 50 ms of idleness (as a job started by hand). --startup-also LABEL=CRUN
(repeatable) times another build of crun in the same interleaving (a before/after).

With --scrape-port P a scraper (Prometheus' way: GET /metrics, a fresh connection each time) hits
http://127.0.0.1:P/metrics every --scrape-interval seconds for the whole comparison; a variant
with PET_HEALTH_CHECK_PORT=P is then scraped whenever its agent is up:
  run.py ... --variant off=CRUN --variant on=CRUN,PET_HEALTH_CHECK_PORT=9464 --scrape-port 9464
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 120  # the longest one job of these benchmarks may take (torchrun's included)


def run_bounded(cmd, env=None):
    """Runs `cmd` to its end, killed past TIMEOUT_S. Not subprocess.run(timeout=): Python 3.11
    waits for a child with a timeout by polling, sleeping 0.5, 1, 2, 4 ms... between polls, which
    rounds a few-millisecond job's time up to the next poll; here a watchdog thread kills it and
    the wait is a plain blocking waitpid()."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    watchdog = threading.Timer(TIMEOUT_S, p.kill)
    watchdog.start()
    try:
        rc = p.wait()
    finally:
        watchdog.cancel()
    if rc != 0:
        raise subprocess.CalledProcessError(rc, cmd)


def wall(cmd, env=None):
    t0 = time.perf_counter()
    run_bounded(cmd, env)
    return time.perf_counter() - t0


def launch(cmd, workers, env=None):
    """Wall time of a no-op standalone job of `workers` workers (/bin/true each)."""
    return wall(cmd + ["--standalone", "--nproc_per_node", str(workers), "--no_python", "/bin/true"], env)


def floor(count):
    """/bin/true `count` times in a row: an agent and its workers as bare processes."""
    t0 = time.perf_counter()
    for _ in range(count):
        subprocess.run(["/bin/true"], check=True)
    return time.perf_counter() - t0


def median_of(fn, runs):
    fn()  # warm-up, not counted
    return statistics.median(fn() for _ in range(runs))


def recovery(cmd, worker, env=None):
    with tempfile.TemporaryDirectory() as tmp:
        stamp = os.path.join(tmp, "stamps")
        env = dict(env or os.environ, BENCH_STAMP=stamp, BENCH_FAIL_ONCE="1")
        run_bounded(cmd + ["--standalone", "--nproc_per_node", "2", "--max_restarts", "1", "--no_python", worker], env)
        fail = start = None
        for line in open(stamp):
            kind, restart, rank, ns = line.split()
            if kind == "fail":
                fail = int(ns)
            elif kind == "start" and restart == "1" and rank == "0":
                start = int(ns)
        return (start - fail) / 1e9


def peak_kib(cmd, worker, env=None, file="status", fields=("VmHWM:",)):
    """The largest sum of `fields` (kB lines of /proc/PID/`file`) seen while the agent runs."""
    env = dict(env or os.environ, BENCH_HOLD_MS="1500")
    p = subprocess.Popen(cmd + ["--standalone", "--nproc_per_node", "8", "--no_python", worker],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    peak = 0
    deadline = time.monotonic() + TIMEOUT_S
    while p.poll() is None:
        if time.monotonic() > deadline:
            p.kill()
            p.wait()
            raise RuntimeError(f"{' '.join(cmd)}: still running after {TIMEOUT_S} s")
        try:
            with open(f"/proc/{p.pid}/{file}") as f:
                peak = max(peak, sum(int(line.split()[1]) for line in f if line.startswith(fields)))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass
        time.sleep(0.02)  # sampling interval of the benchmark itself, not of crun
    return peak


def peak_rss_kib(cmd, worker, env=None):
    return peak_kib(cmd, worker, env)


def peak_private_kib(cmd, worker, env=None):
    """The agent's own pages (private clean and dirty): RSS less the shared libraries' pages,
    which every process on the host that maps them shares."""
    return peak_kib(cmd, worker, env, "smaps_rollup", ("Private_Clean:", "Private_Dirty:"))


def fmt_s(x):
    return f"{x * 1e3:9.1f} ms"


def fmt_mib(kib):
    return f"{kib / 1024:6.1f} MiB"


def parse_variant(text):
    label, _, rest = text.partition("=")
    crun, *settings = rest.split(",")
    env = dict(os.environ)
    for kv in settings:
        key, _, value = kv.partition("=")
        env[key] = value
    return label, [crun], env


class Scraper:
    """GET /metrics every `interval` s on its own thread; counts answers and refusals."""

    def __init__(self, port, interval):
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.interval = interval
        self.answered = self.refused = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.wait(self.interval):
            try:
                with urllib.request.urlopen(self.url, timeout=1) as r:
                    r.read()
                self.answered += 1
            except OSError:
                self.refused += 1

    def close(self):
        self.stop.set()
        self.thread.join()
        return f"# scraper: {self.answered} scrapes answered, {self.refused} refused (no agent up at that moment)"


def startup(crun, runs, idle_runs, others=()):
    """crun --standalone --nproc-per-node 2 /bin/true against /bin/true three times, interleaved:
    back to back, then each after 50 ms of idleness (a job started by hand, not in a loop: the
    kernel's state that back-to-back runs keep warm, such as an RCU grace period just passed,
    has gone cold). `others` ((label, crun), --startup-also): other builds, interleaved too."""
    job = [crun, "--standalone", "--nproc-per-node", "2", "/bin/true"]
    other_jobs = [(label, [path, *job[1:]]) for label, path in others]

    wall(job)
    floor(3)
    for label, n, gap in (("back to back", runs, 0.0), ("after 50 ms idle", idle_runs, 0.05)):
        ours, theirs = [], []
        others_times = {name: [] for name, _ in other_jobs}
        for _ in range(n):
            time.sleep(gap)
            ours.append(wall(job))
            time.sleep(gap)
            theirs.append(floor(3))
            for name, other in other_jobs:
                time.sleep(gap)
                others_times[name].append(wall(other))
        a, b = statistics.median(ours), statistics.median(theirs)
        print(f"# agent start-up, {label}, median of {n} interleaved runs, {os.cpu_count()} cores,"
              f" load average {os.getloadavg()[0]:.2f}")
        print(f"{'crun --standalone --nproc-per-node 2 /bin/true':48} {fmt_s(a)}")
        print(f"{'floor: /bin/true three times in a row':48} {fmt_s(b)}")
        print(f"{'ratio (goal <= 2x)':48} {a / b:9.2f}x")
        for name, times in others_times.items():
            o = statistics.median(times)
            print(f"{'the same, ' + name:48} {fmt_s(o)} {o / b:9.2f}x the floor")


def compare_variants(variants, worker, runs):
    """Each metric: one run of every variant in turn (rotating the order), `runs` rounds."""
    print(f"# crun variants side by side, median of {runs} interleaved runs each, {os.cpu_count()} cores,"
          f" load average {os.getloadavg()[0]:.2f}")
    for label, cmd, env in variants:
        extra = sorted(set(env.items()) - set(os.environ.items()))
        print(f"#   {label}: {cmd[0]} {' '.join(k + '=' + v for k, v in extra)}")
    print(f"{'metric':34}" + "".join(f"{label:>16}" for label, _, _ in variants) + "   ratio to the first")
    metrics = []
    for n in (2, 8):
        metrics.append((f"launch /bin/true, {n} workers", lambda cmd, env, n=n: launch(cmd, n, env), fmt_s))
    metrics.append(("recovery (exit -> replacement)", lambda cmd, env: recovery(cmd, worker, env), fmt_s))
    metrics.append(("agent peak RSS, 8 workers", lambda cmd, env: peak_rss_kib(cmd, worker, env), fmt_mib))
    metrics.append(("agent private memory, 8 workers", lambda cmd, env: peak_private_kib(cmd, worker, env), fmt_mib))
    for name, measure, unit in metrics:
        samples = {label: [] for label, _, _ in variants}
        for label, cmd, env in variants:
            measure(cmd, env)  # warm-up, not counted
        for i in range(runs):
            for j in range(len(variants)):
                label, cmd, env = variants[(i + j) % len(variants)]
                samples[label].append(measure(cmd, env))
        medians = [statistics.median(samples[label]) for label, _, _ in variants]
        ratios = " ".join(f"{m / medians[0]:.2f}x" for m in medians[1:])
        print(f"{name:34}" + "".join(f"{unit(m):>16}" for m in medians) + f"   {ratios}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--crun", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--runs", type=int, default=5, help="runs per torchrun figure (crun: 3x as many)")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=CRUN[,KEY=VALUE...]",
                    help="compare crun builds or settings with each other instead of with torchrun")
    ap.add_argument("--startup", action="store_true", help="only the agent's start-up against its floor")
    ap.add_argument("--startup-also", action="append", default=[], metavar="LABEL=CRUN",
                    help="with --startup: another crun build, interleaved with the rest")
    ap.add_argument("--scrape-port", type=int, help="with --variant: scrape http://127.0.0.1:PORT/metrics meanwhile")
    ap.add_argument("--scrape-interval", type=float, default=0.1, help="seconds between scrapes (default 0.1)")
    a = ap.parse_args()
    crun_runs = 3 * a.runs  # crun's runs are short; more of them steady the median on a busy box
    if a.startup:
        startup(a.crun, 10 * a.runs, 3 * a.runs, [tuple(v.split("=", 1)) for v in a.startup_also])
        return
    if a.variant:
        scraper = Scraper(a.scrape_port, a.scrape_interval) if a.scrape_port else None
        if scraper:
            print(f"# scraping {scraper.url} every {a.scrape_interval * 1e3:.0f} ms meanwhile")
        compare_variants([parse_variant(v) for v in a.variant], a.worker, crun_runs)
        if scraper:
            print(scraper.close())
        return

    crun = [a.crun]
    torchrun = [sys.executable, os.path.join(HERE, "torchrun_shim.py")]
    torchrun_fast = torchrun + ["--monitor_interval", "0.1"]
    anchors = [("torchrun", torchrun), ("torchrun --monitor_interval 0.1", torchrun_fast)]

    print(f"# crun vs torchrun (torch {torch_version()}), median of {crun_runs} (crun) / {a.runs} (torchrun) runs,"
          f" {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    print(f"{'metric':34} {'crun':>12} {'anchor':>36} {'anchor/crun':>12}")

    def row(metric, ours, theirs_name, theirs, unit=fmt_s):
        print(f"{metric:34} {unit(ours):>12} {theirs_name + ' ' + unit(theirs):>36} {theirs / ours:11.0f}x",
              flush=True)

    base = median_of(lambda: wall(["/bin/true"]), crun_runs)
    print(f"{'(baseline: /bin/true run directly)':34} {fmt_s(base):>12}", flush=True)
    for n in (2, 8):
        ours = median_of(lambda: launch(crun, n), crun_runs)
        for name, cmd in anchors:
            theirs = median_of(lambda: launch(cmd, n), a.runs)
            row(f"launch /bin/true, {n} workers", ours, name, theirs)

    ours = statistics.median(recovery(crun, a.worker) for _ in range(crun_runs))
    for name, cmd in anchors:
        theirs = statistics.median(recovery(cmd, a.worker) for _ in range(a.runs))
        row("recovery (exit -> replacement)", ours, name, theirs)

    ours = statistics.median(peak_rss_kib(crun, a.worker) for _ in range(a.runs))
    theirs = statistics.median(peak_rss_kib(torchrun, a.worker) for _ in range(a.runs))
    row("agent peak RSS, 8 workers", ours, "torchrun", theirs, unit=fmt_mib)


def torch_version():
    try:
        import torch
        return torch.__version__
    except ImportError:
        return "?"


if __name__ == "__main__":
    main()
