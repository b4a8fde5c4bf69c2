#!/usr/bin/python3
"""worker_runtime benchmarks, side by side in one run (run with /usr/bin/python3: it has torch).

1. all_reduce bus bandwidth, 2 ranks on loopback, float32 sum, 4 KiB .. 256 MiB:
   crun::runtime (default path) vs torch.distributed gloo. Each run times max(5, min(50, 256 MiB /
   size)) calls per size and reports their median; the sweep is repeated --repeat times (crun and
   torch alternating) and the table shows the median of those medians, and the ratio.
2. crun's all_reduce paths forced one by one at 64 MiB (median of --repeat runs), to show the choice;
   crun's reduce_scatter beside its all_reduce of the same input (torch 1.13's gloo has no
   reduce_scatter).
   Beside them, this machine's floor for the same traffic in the same run (loopback_floor: one
   loopback TCP stream; a 2-rank all_reduce sends and receives each rank's N bytes, so on two
   cores its bus bandwidth is bounded by about half of one stream), and at 64 MiB --repeat runs of
   the floor and `auto` back to back, with the ranks left to the scheduler and pinned (rank r on
   CPU r): the per-run ratio, and whether every run reached 0.9x.
3. Training throughput with 1 and 2 ranks: train_mlp, and the same model trained by torch DDP
   (gloo, 1 thread per rank) as the anchor; --repeat runs of each, interleaved, median samples/s
   (training loop only, samples of all ranks), scaling = 2 ranks / 1 rank. Beside it the ceiling
   for the same compute in the same rounds: two independent 1-rank trainings at once, summed,
   over 1 rank (what two cores give two ranks that never communicate).

Usage: /usr/bin/python3 bench/runtime/run_bench.py [--build build] [--repeat 5] [--sizes ...] [--pin]
                                                    [--skip-train | --train-only]
  --pin: rank r runs on CPU r (sched_setaffinity) everywhere, not only in the floor comparison.
"""
import argparse, os, re, resource, socket, statistics, subprocess, sys, time

SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]
# name, train_mlp flags (the torch anchor gets the same hidden/batch/epochs)
TRAIN_CONFIGS = [("defaults (hidden 512, batch 256)", []),
                 ("hidden=128 batch=32", ["--hidden", "128", "--batch-size", "32"])]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


PIN = [False]  # --pin: rank r on CPU r


def pinned(cpu):
    return lambda: os.sched_setaffinity(0, {cpu % os.cpu_count()})


def run_ranks(cmd, world, timeout=600, env=None, pin=None):
    pin = PIN[0] if pin is None else pin
    port = free_port()
    procs = []
    for r in range(world):
        e = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_RESTART_COUNT="0",
                 OMP_NUM_THREADS="1", **(env or {}))
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      preexec_fn=pinned(r) if pin else None))
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    for p, o in zip(procs, outs):
        if p.returncode != 0:
            sys.exit("rank failed (%s):\n%s" % (" ".join(cmd), o))
    return outs[0]


def run_independent(cmd, count, timeout=600):
    """`count` world-1 runs of cmd at once, each with its own port: the machine's ceiling for
    `count` ranks' compute with no communication at all. Returns their outputs."""
    procs = []
    for r in range(count):
        e = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), TORCHELASTIC_RESTART_COUNT="0",
                 OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      preexec_fn=pinned(r) if PIN[0] else None))
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    for p, o in zip(procs, outs):
        if p.returncode != 0:
            sys.exit("independent run failed (%s):\n%s" % (" ".join(cmd), o))
    return outs


def parse(out):
    return {int(m.group(1)): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"size=(\d+) median_s=([\d.]+) busbw_gbs=([\d.]+)", out)}


def samples_per_sec(out):
    """train_mlp's training throughput, samples of all ranks a second, from its output."""
    return float(re.search(r"samples_per_sec=([\d.]+)", out).group(1))


def torch_worker(sizes):
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    w = dist.get_world_size()
    for b in sizes:
        t = torch.ones(b // 4, dtype=torch.float32)
        iters = max(5, min(50, (256 << 20) // b))
        for _ in range(2):
            dist.all_reduce(t)
        ts = []
        for _ in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            ts.append(time.perf_counter() - t0)
        med = statistics.median(ts)
        if dist.get_rank() == 0:
            print("size=%d median_s=%.6f busbw_gbs=%.3f iters=%d" % (b, med, b * 2 * (w - 1) / w / med / 1e9, iters),
                  flush=True)
    dist.destroy_process_group()


def torch_train_worker(hidden, batch, epochs, train_size=20000, dim=32, classes=10):
    """train_mlp's model and loop in torch: DDP (gloo), SGD with momentum, per-rank shards."""
    import torch, torch.distributed as dist, torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(train_size, dim, generator=g)
    y = torch.randint(0, classes, (train_size,), generator=g)
    model = DDP(nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, classes)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    per_rank = train_size // world
    steps = per_rank // batch
    samples = 0
    t0 = time.perf_counter()
    for epoch in range(epochs):
        perm = torch.randperm(train_size, generator=torch.Generator().manual_seed(epoch))[rank::world]
        for i in range(steps):
            idx = perm[i * batch:(i + 1) * batch]
            loss = loss_fn(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            samples += batch * world
    secs = time.perf_counter() - t0
    dist.barrier()
    if rank == 0:
        print("throughput: samples_per_sec=%.0f ranks=%d seconds=%.3f" % (samples / secs, world, secs), flush=True)
    dist.destroy_process_group()


def busy_cpu_seconds():
    v = list(map(int, open("/proc/stat").readline().split()[1:]))
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def children_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def human(b):
    return "%d KiB" % (b >> 10) if b < (1 << 20) else "%d MiB" % (b >> 20)


def floor(tool, sizes, pin):
    """One loopback TCP stream per size (loopback_floor stream): {size: GB/s of the stream}."""
    env = dict(os.environ, CRUN_FLOOR_CPUS="0,1") if pin else None
    out = subprocess.run([tool, "stream"] + [str(s) for s in sizes], capture_output=True, text=True, env=env,
                         timeout=600, check=True).stdout
    return {s: v[1] for s, v in parse(out).items()}


def med(v):
    return statistics.median(v) if v else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--train-only", action="store_true", help="only the training throughput")
    ap.add_argument("--pin", action="store_true", help="rank r on CPU r in every measurement")
    ap.add_argument("--torch-worker", action="store_true")
    ap.add_argument("--torch-train-worker", nargs=3, type=int, metavar=("HIDDEN", "BATCH", "EPOCHS"))
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    PIN[0] = a.pin
    if a.torch_worker:
        return torch_worker(sizes)
    if a.torch_train_worker:
        return torch_train_worker(*a.torch_train_worker)
    me = os.path.abspath(__file__)
    worker = os.path.join(a.build, "bench", "runtime", "bench_allreduce_worker")
    train = os.path.join(a.build, "examples", "train_mlp", "train_mlp")
    floor_tool = os.path.join(a.build, "bench", "runtime", "loopback_floor")
    rev = subprocess.run(["git", "-C", os.path.dirname(me), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    print("# worker_runtime bench at %s, %d cores, load average %s, median of %d runs, ranks %s" %
          (rev, os.cpu_count(), " ".join(open("/proc/loadavg").read().split()[:3]), a.repeat,
           "pinned (rank r on CPU r)" if a.pin else "placed by the scheduler"), flush=True)

    if a.train_only:
        training(a, me, train)
        return print_end_load()
    crun, torch, stream = {s: [] for s in sizes}, {s: [] for s in sizes}, {s: [] for s in sizes}
    for _ in range(a.repeat):
        for s, v in floor(floor_tool, sizes, a.pin).items():
            stream[s].append(v)
        for s, v in parse(run_ranks([worker, "auto"] + [str(s) for s in sizes], 2)).items():
            crun[s].append(v[1])
        for s, v in parse(run_ranks(["/usr/bin/python3", me, "--torch-worker", "--sizes", a.sizes], 2)).items():
            torch[s].append(v[1])
    print("all_reduce float32 sum, 2 ranks, loopback; bus bandwidth GB/s and latency (median); floor = half of one")
    print("loopback TCP stream of the same size, same run (bench/runtime/loopback_floor)")
    print("%-8s %10s %10s %11s %11s %8s %10s %10s" % ("size", "crun GB/s", "torch GB/s", "crun ms", "torch ms", "ratio",
                                                     "floor GB/s", "crun/floor"))
    for s in sizes:
        c, t, f = med(crun[s]), med(torch[s]), med(stream[s]) / 2
        print("%-8s %10.3f %10.3f %11.3f %11.3f %8.2f %10.3f %10.2f" % (human(s), c, t, s / c / 1e6, s / t / 1e6, c / t,
                                                                        f, c / f))

    s64 = 64 << 20
    print("\n64 MiB all_reduce (auto) against the loopback floor, run by run (floor = half of one stream,"
          " measured just before):", flush=True)
    print("  %-4s %-10s %12s %10s %10s %8s" % ("run", "ranks", "stream GB/s", "floor", "auto", "ratio"))
    for pin in (False, True):
        ratios = []
        for r in range(a.repeat):
            f = floor(floor_tool, [s64], pin)[s64] / 2
            c = parse(run_ranks([worker, "auto", str(s64)], 2, pin=pin))[s64][1]
            ratios.append(c / f)
            print("  %-4d %-10s %12.3f %10.3f %10.3f %7.2fx" % (r, "pinned" if pin else "scheduler", 2 * f, f, c, c / f),
                  flush=True)
        print("  %s: median %.2fx, lowest %.2fx; every run >= 0.9x: %s" %
              ("pinned" if pin else "scheduler", med(ratios), min(ratios), "yes" if min(ratios) >= 0.9 else "no"))

    # Either side of auto's switch from one direct exchange to reduce-scatter + all-gather
    # (384 KiB of traffic), and 64 MiB; every path once per round, rounds repeated.
    path_sizes = [256 << 10, 768 << 10, s64]
    paths = (("auto", None), ("sliced", None), ("direct", None), ("gloo_allreduce", "4194304"), ("ring_chunked", None),
             ("ring", None))
    vals = {(algo, s): [] for algo, _ in paths for s in path_sizes}
    for _ in range(a.repeat):
        for algo, seg in paths:
            env = {"CRUN_BENCH_SEGMENT_BYTES": seg} if seg else {}
            for s, v in parse(run_ranks([worker, algo] + [str(s) for s in path_sizes], 2, env=env)).items():
                vals[(algo, s)].append(v[1])
    print("\ncrun all_reduce paths (GB/s, median of %d interleaved; auto must match the fastest):" % a.repeat)
    print("  %-15s %-15s" % ("path", "") + "".join("%10s" % human(s) for s in path_sizes))
    for algo, seg in paths:
        print("  %-15s %-15s" % (algo, "segment=" + seg if seg else "") +
              "".join("%10.3f" % med(vals[(algo, s)]) for s in path_sizes), flush=True)

    print("\nreduce_scatter vs all_reduce of the same float32 input, 2 ranks (ms, median of %d):" % a.repeat)
    for size in (1 << 20, 64 << 20):
        rs = [parse(run_ranks([worker, "reduce_scatter", str(size)], 2))[size][0] for _ in range(a.repeat)]
        ar = [parse(run_ranks([worker, "auto", str(size)], 2))[size][0] for _ in range(a.repeat)]
        print("  %-8s reduce_scatter %9.3f   all_reduce %9.3f" % (human(size), med(rs) * 1e3, med(ar) * 1e3),
              flush=True)

    if not a.skip_train:
        training(a, me, train)
    print_end_load()


def print_end_load():
    print("# load average at the end %s" % " ".join(open("/proc/loadavg").read().split()[:3]))


def training(a, me, train):
    """train_mlp against torch DDP at 1 and 2 ranks, and the machine's ceiling for the same compute."""
    print("\ntraining samples/s, median of %d (1 and 2 ranks interleaved); scaling = 2 ranks / 1 rank;" % a.repeat)
    print("ceiling = two independent 1-rank crun trainings at once (no communication), over 1 rank: the")
    print("machine's own limit for the same compute, measured in the same rounds")
    print("%-34s %9s %9s %8s %9s %9s %8s %8s" % ("config", "crun 1r", "crun 2r", "scaling", "torch 1r", "torch 2r",
                                                   "scaling", "ceiling"))
    for name, extra in TRAIN_CONFIGS:
        flags = dict(zip(extra[::2], extra[1::2]))
        hidden, batch, epochs = flags.get("--hidden", "512"), flags.get("--batch-size", "256"), flags.get("--epochs", "5")
        cmds = {"crun": [train] + extra, "torch": ["/usr/bin/python3", me, "--torch-train-worker", hidden, batch, epochs]}
        rates = {(k, w): [] for k in cmds for w in (1, 2)}
        apart = []  # two independent 1-rank crun trainings at once: their rates summed
        busy0, ours0, t0 = busy_cpu_seconds(), children_cpu_seconds(), time.time()
        for _ in range(a.repeat):
            for k, cmd in cmds.items():
                for w in (1, 2):
                    rates[(k, w)].append(samples_per_sec(run_ranks(cmd, w)))
            apart.append(sum(samples_per_sec(o) for o in run_independent(cmds["crun"], 2)))
        other = (busy_cpu_seconds() - busy0 - (children_cpu_seconds() - ours0)) / (time.time() - t0)
        m = {key: med(v) for key, v in rates.items()}
        ceiling = med(apart) / m[("crun", 1)]
        scaling = m[("crun", 2)] / m[("crun", 1)]
        print("%-34s %9.0f %9.0f %7.2fx %9.0f %9.0f %7.2fx %7.2fx" %
              (name, m[("crun", 1)], m[("crun", 2)], scaling, m[("torch", 1)],
               m[("torch", 2)], m[("torch", 2)] / m[("torch", 1)], ceiling), flush=True)
        print("  crun 2-rank runs: %s" % " ".join("%.0f" % v for v in rates[("crun", 2)]))
        print("  crun 1-rank runs: %s" % " ".join("%.0f" % v for v in rates[("crun", 1)]))
        print("  two 1-rank runs at once, summed: %s; crun's scaling is %.2f of the ceiling" %
              (" ".join("%.0f" % v for v in apart), scaling / ceiling))
        print("  other processes used %.2f cores on average during these runs" % other, flush=True)


if __name__ == "__main__":
    main()
