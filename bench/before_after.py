#!/usr/bin/python3
"""Issue 42's figures for two builds of crun, before and after, in one run.

    /usr/bin/python3 bench/before_after.py --before BUILD_DIR --after BUILD_DIR
        [--rounds 5] [--quick-rounds 15] [--store-ops set,get,add] [--with-1024] [--json FILE]

Each BUILD_DIR is a whole build tree (crun, crun-keeper, the bench programs, train_mlp). Every
figure is measured on both builds in the same rounds, interleaved (one run of each in turn, the
order swapped every round; first one warm-up run of each, not counted, except for the long
train_mlp and 1,024-agent runs), and reported as the median of its rounds, beside the floor (or
ceiling) the benchmark measures for it, taken once in each of the same rounds with the after
build's bench programs. The measurements are those of the benchmarks themselves, imported:

  figure                                 from                       rounds          floor / ceiling
  standalone job's start, 2 / 8 workers  bench/agent/run.py         --quick-rounds  /bin/true 3 / 9 times
  recovery (exit -> replacement)         bench/agent/run.py         --quick-rounds  -
  agent peak RSS, 8 workers              bench/agent/run.py         --rounds        -
  cross-node recovery, 2 netns hosts     bench/rendezvous/run.py    --rounds        - (needs root)
  store op, 1 / 16 clients, over TCP     bench/store/run.py         --rounds        bare epoll echo
  rendezvous round, 8 / 32 / 128 agents  bench/rendezvous/run.py    --rounds        N x rdzv_worker, no rendezvous
  64 MiB all_reduce, 2 ranks             bench/runtime/run_bench.py --rounds        half a loopback stream
  train_mlp, 2 ranks / 1 rank            bench/runtime/run_bench.py --rounds        two 1-rank runs at once
  1,024 agents, one shared endpoint      bench/rendezvous/run.py    --rounds        1,024 x timeout 60 /bin/true
  (with --with-1024: a correctness test, all exit 0 and nothing left behind, with its time)

The table (markdown) goes to stdout, progress to stderr; --json FILE also writes every sample.
The benchmarks' own flags are the current ones: both builds are driven by this checkout's
scripts, so a build only needs the programs they start (checked first).
"""
import argparse
import importlib.util
import json
import os
import resource
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


agent = load("bench_agent", "agent/run.py")
store = load("bench_store", "store/run.py")
rdzv = load("bench_rendezvous", "rendezvous/run.py")
runtime = load("bench_runtime", "runtime/run_bench.py")

PROGRAMS = ("launcher/crun", "launcher/crun-keeper", "bench/agent/crun_bench_worker",
            "bench/rendezvous/rdzv_worker", "bench/rendezvous/rdzv_spawn", "bench/store/store_bench",
            "bench/store/echo_ceiling", "bench/runtime/bench_allreduce_worker", "bench/runtime/loopback_floor",
            "examples/train_mlp/train_mlp")
MIB64 = 64 << 20


class Build:
    def __init__(self, label, path):
        self.label = label
        self.dir = os.path.abspath(path)
        missing = [p for p in PROGRAMS if not os.access(os.path.join(self.dir, p), os.X_OK)]
        if missing:
            sys.exit(f"before_after: --{label} {path}: missing {', '.join(missing)} (build all default targets)")
        self.crun = os.path.join(self.dir, "launcher/crun")
        self.bench_worker = os.path.join(self.dir, "bench/agent/crun_bench_worker")
        self.store_bench = os.path.join(self.dir, "bench/store/store_bench")
        self.echo = os.path.join(self.dir, "bench/store/echo_ceiling")
        self.allreduce = os.path.join(self.dir, "bench/runtime/bench_allreduce_worker")
        self.loopback_floor = os.path.join(self.dir, "bench/runtime/loopback_floor")
        self.train = os.path.join(self.dir, "examples/train_mlp/train_mlp")


def loadavg():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def say(text):
    print(text, file=sys.stderr, flush=True)


def interleave(builds, measure, rounds, floor=None, warm=True):
    """`rounds` rounds of: the floor (if any), then `measure(build)` for each build, the order
    swapped every round. Returns ({label: [samples]}, [floor samples])."""
    if warm:
        for b in builds:
            measure(b)
    samples = {b.label: [] for b in builds}
    floors = []
    for r in range(rounds):
        if floor:
            floors.append(floor())
        for b in builds if r % 2 == 0 else builds[::-1]:
            samples[b.label].append(measure(b))
    return samples, floors


class Report:
    """The table's rows and every sample, figure by figure."""

    def __init__(self):
        self.rows = []
        self.raw = {}

    def add(self, figure, unit, samples, floors=(), floor_name="", note="", time_ms=False, medians=None):
        """One table row: the medians of `samples` ({label: [values]}), or `medians` where the
        figure is not a median of its samples, and the median of `floors`."""
        med = medians or {k: statistics.median(v) for k, v in samples.items()}
        before, after = med["before"], med["after"]
        ratio = f"{after / before:.2f}x" if before else "-"
        if time_ms:
            ratio += f" ({after - before:+.2f} ms)"
        floor = f"{floor_name} {fmt(statistics.median(floors), unit)}" if floors else (floor_name or "-")
        if note:
            floor += f"; {note}"
        n = len(samples["after"])
        self.rows.append((f"{figure} ({unit}, n={n})", fmt(before, unit), fmt(after, unit), ratio, floor))
        self.raw[figure] = {"unit": unit, "samples": samples, "floor": list(floors), "floor_name": floor_name,
                            "median": med, "load": os.getloadavg()}
        say(f"  {figure}: before {fmt(before, unit)}, after {fmt(after, unit)}, {ratio}; {floor}  (load {loadavg()})")

    def table(self):
        lines = ["| figure | before | after | after/before | floor or anchor, same run |",
                 "|---|---:|---:|---:|---|"]
        lines += [f"| {' | '.join(row)} |" for row in self.rows]
        return "\n".join(lines)


def fmt(value, unit):
    unit = unit.split(",")[0]  # "GB/s, higher better": GB/s
    if unit == "ms":
        return f"{value:.2f}" if value < 100 else f"{value:,.0f}"
    if unit == "MiB":
        return f"{value:.1f}"
    if unit == "GB/s":
        return f"{value:.3f}"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:,.0f}"


def agent_figures(rep, builds, a):
    for n in (2, 8):
        samples, floors = interleave(builds, lambda b: agent.launch([b.crun], n) * 1e3, a.quick_rounds,
                                     lambda: agent.floor(n + 1) * 1e3)
        rep.add(f"standalone job's start, {n} workers", "ms", samples, floors, f"/bin/true {n + 1} times:",
                time_ms=True)
    samples, _ = interleave(builds, lambda b: agent.recovery([b.crun], b.bench_worker) * 1e3, a.quick_rounds)
    rep.add("recovery, a worker's exit -> its replacement started", "ms", samples, time_ms=True)
    samples, _ = interleave(builds, lambda b: agent.peak_rss_kib([b.crun], b.bench_worker) / 1024, a.rounds)
    rep.add("agent peak RSS, 8 workers", "MiB", samples)


def cross_node(rep, builds, a):
    if os.geteuid() != 0:
        say("  cross-node recovery: skipped (network namespaces need root)")
        return
    name = f"ba{os.getpid() % 100000}"
    dirs = {b.label: tempfile.mkdtemp(prefix=f"before-after-netns-{b.label}-") for b in builds}
    counts = {b.label: 0 for b in builds}

    def once(b):
        worker = rdzv.use_build(b.dir)
        counts[b.label] += 1
        return rdzv.restart_once("crun", name, worker, dirs[b.label], counts[b.label], [])

    rdzv.netns("up", name, "2", check=True, stdout=rdzv.subprocess.DEVNULL)
    try:
        samples, _ = interleave(builds, once, a.rounds)
    finally:
        rdzv.netns("down", name, timeout=60)
    rep.add("cross-node recovery, 2 netns hosts x 2 workers", "ms", samples, time_ms=True)


def store_figures(rep, builds, a):
    servers = {}
    try:
        for b in builds:
            servers[b.label] = store.start_server(b.crun)
        for op in a.store_ops:
            for clients in (1, 16):
                ops = store.blocking_ops(a.store_op_count, clients)
                samples, floors = interleave(
                    builds,
                    lambda b: store.ops_per_s(store.crun_cmd(b.store_bench, servers[b.label][1], op, clients, ops,
                                                             0, "tcp")),
                    a.rounds, lambda: store.ops_per_s(store.echo_cmd(builds[-1].echo, clients, ops, "tcp")))
                rep.add(f"store {op}, {clients} client{'s' if clients > 1 else ''}, TCP", "ops/s, higher better",
                        samples, floors, "echo ceiling:")
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=10)


def rendezvous_rounds(rep, builds, a):
    after_worker = rdzv.use_build(builds[-1].dir)
    for n in (8, 32, 128):
        counts = {b.label: 0 for b in builds}

        def once(b):
            worker = rdzv.use_build(b.dir)
            counts[b.label] += 1
            return rdzv.scale_once("crun", n, worker, 120, f"ba{b.label}{n}r{counts[b.label]}")[0]

        def floor():
            rdzv.use_build(builds[-1].dir)
            return rdzv.baseline(n, [after_worker])[0]

        samples, floors = interleave(builds, once, a.rounds, floor)
        rep.add(f"rendezvous round, {n} agents (last worker started)", "ms", samples, floors,
                f"{n} x rdzv_worker, no rendezvous:", time_ms=True)


def runtime_figures(rep, builds, a):
    def allreduce(b):
        return runtime.parse(runtime.run_ranks([b.allreduce, "auto", str(MIB64)], 2))[MIB64][1]

    samples, floors = interleave(builds, allreduce, a.rounds,
                                 lambda: runtime.floor(builds[-1].loopback_floor, [MIB64], False)[MIB64] / 2)
    rep.add("64 MiB all_reduce, 2 ranks, bus bandwidth", "GB/s, higher better", samples, floors,
            "half a loopback stream:")

    def train(b):
        return {w: runtime.samples_per_sec(runtime.run_ranks([b.train], w)) for w in (1, 2)}

    def ceiling():
        return sum(runtime.samples_per_sec(o) for o in runtime.run_independent([builds[-1].train], 2))

    runs, apart = interleave(builds, train, a.rounds, ceiling, warm=False)
    two = {k: [r[2] for r in v] for k, v in runs.items()}
    one = {k: [r[1] for r in v] for k, v in runs.items()}
    rep.add("train_mlp, 2 ranks", "samples/s, higher better", two)
    # The scaling is the ratio of the medians, as run_bench.py reports it (the samples kept are
    # each round's own ratio); the ceiling is the two 1-rank runs at once over the after build's
    # 1-rank median.
    rep.add("train_mlp scaling, 2 ranks / 1 rank", "x, higher better",
            {k: [t / o for t, o in zip(two[k], one[k])] for k in runs},
            [x / statistics.median(one["after"]) for x in apart], "ceiling, two 1-rank runs at once:",
            medians={k: statistics.median(two[k]) / statistics.median(one[k]) for k in runs})


def shared_endpoint(rep, builds, a):
    n = 1024
    clean = {b.label: 0 for b in builds}
    problems = []

    def once(b):
        rdzv.use_build(b.dir)
        with tempfile.TemporaryDirectory(prefix=f"before-after-1024-{b.label}-") as tmp:
            ms, _ = rdzv.shared_once(n, f"ba{b.label}{time.monotonic_ns()}", crun=b.crun, env={"TMPDIR": tmp})
            left = rdzv.LEFT[0] + os.listdir(tmp)
        if left:
            problems.append(f"{b.label}: left behind {left[:10]}")
        else:
            clean[b.label] += 1
        return ms

    def floor():
        rdzv.use_build(builds[-1].dir)
        return rdzv.baseline(n, ["/usr/bin/timeout", "60", "/bin/true"])[0]

    samples, floors = interleave(builds, once, a.rounds, floor, warm=False)
    verdict = ", ".join(f"{b.label} {clean[b.label]}/{len(samples[b.label])} runs all exit 0 and nothing left behind"
                        for b in builds)
    rep.add(f"{n:,} agents, one shared endpoint (correctness; time)", "ms", samples, floors,
            f"{n} x timeout 60 /bin/true:", verdict, time_ms=True)
    for p in problems:
        say(f"  {p}")


def main():
    ap = argparse.ArgumentParser(description="issue 42's figures, two builds of crun interleaved in one run")
    ap.add_argument("--before", required=True, metavar="BUILD_DIR")
    ap.add_argument("--after", required=True, metavar="BUILD_DIR")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of each figure (default 5)")
    ap.add_argument("--quick-rounds", type=int, help="rounds of the start and recovery figures, a few ms each "
                                                     "(default 3 x --rounds)")
    ap.add_argument("--store-ops", default="set,get,add", help="store operations measured (default set,get,add)")
    ap.add_argument("--store-op-count", type=int, default=20000,
                    help="operations of a 1-client store run (16 clients: a quarter each; default 20000)")
    ap.add_argument("--with-1024", action="store_true", help="also the 1,024-agent shared-endpoint run (long)")
    ap.add_argument("--only", metavar="PARTS", help="only these parts, comma-separated, of agent, cross-node, store,"
                                                   " rendezvous, runtime, 1024")
    ap.add_argument("--json", metavar="FILE", help="also write every sample here")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    a.quick_rounds = a.quick_rounds or 3 * a.rounds
    if a.quick_rounds < 1:
        ap.error("--quick-rounds must be at least 1")
    a.store_ops = [op for op in a.store_ops.split(",") if op]
    bad = [op for op in a.store_ops if op not in ("set", "get", "add")]
    if bad or not a.store_ops:
        ap.error(f"--store-ops: expected some of set,get,add, got {a.store_ops!r}")
    parts = [("agent", agent_figures), ("cross-node", cross_node), ("store", store_figures),
             ("rendezvous", rendezvous_rounds), ("runtime", runtime_figures), ("1024", shared_endpoint)]
    wanted = a.only.split(",") if a.only else [name for name, _ in parts if name != "1024" or a.with_1024]
    unknown = sorted(set(wanted) - {name for name, _ in parts})
    if unknown:
        ap.error(f"--only: unknown part {', '.join(unknown)}")
    parts = [(name, fn) for name, fn in parts if name in wanted]
    builds = [Build("before", a.before), Build("after", a.after)]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 1,024 agents' sockets on one host

    start_load, t0 = loadavg(), time.monotonic()
    say(f"# before {builds[0].dir}, after {builds[1].dir}; {os.cpu_count()} cores, load average {start_load}")
    rep = Report()
    part_s = {}
    for name, fn in parts:
        say(f"# {name} (load average {loadavg()})")
        t = time.monotonic()
        fn(rep, builds, a)
        part_s[name] = time.monotonic() - t
        say(f"# {name}: {part_s[name]:.0f} s")
    wall_s = time.monotonic() - t0
    print(f"Before: `{builds[0].dir}`; after: `{builds[1].dir}`. Medians of interleaved rounds"
          f" (--rounds {a.rounds}, --quick-rounds {a.quick_rounds}); {os.cpu_count()} cores.\n")
    print(rep.table())
    print(f"\nLoad average (1, 5, 15 min): {start_load} at the start, {loadavg()} at the end;"
          f" {wall_s / 60:.1f} minutes in all.")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"before": builds[0].dir, "after": builds[1].dir, "rounds": a.rounds,
                       "quick_rounds": a.quick_rounds, "load_start": start_load, "load_end": loadavg(),
                       "wall_s": wall_s, "part_s": part_s, "figures": rep.raw}, f, indent=1)


if __name__ == "__main__":
    main()
