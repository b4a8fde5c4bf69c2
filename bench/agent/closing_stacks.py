#!/usr/bin/python3
"""What node rank 0's wait for every node's stacks costs when a job closes, two crun builds side by side.

    sudo /usr/bin/python3 bench/agent/closing_stacks.py --before DIR --after DIR --worker PATH
        [--rounds 7] [--capture-timeout 5] [--store-on-node1] [--etcd]

Each DIR holds a `crun` and its `crun-keeper`; PATH is the test worker (build/tests/support/
crun_test_worker). Two network-namespace hosts (scripts/netns-cluster.sh), 2 ranks each, c10d,
--max-restarts 0. Node rank 0 (the store's host) runs local rank 0 ready to fail on SIGUSR1; every
other rank waits in hang_in_named_function(). Once all 4 say they are ready, rank 0 gets SIGUSR1:
the job closes, each node takes its running workers' stacks and stops them.

Figures, from the signal: node rank 0's agent's exit, and the job's end (the last agent's exit: the
store's host waits for the others to leave in both builds). The anchor, in the same runs: node 1's
capture as it logs it ("took the stacks of 2 local worker(s) in N ms"): the least node rank 0 can
wait for node 1's stacks. With --store-on-node1 node 1's host hosts the store instead, so node
rank 0's agent no longer waits for the others to leave it: its exit shows the wait alone. One warm-up run of each build, then --rounds rounds, one run of each in
turn, the order swapped every round; medians. With --etcd the rendezvous is etcd-v3 on one etcd
member on node rank 0's host (node 1's with --store-on-node1), started here, a run id per run;
--node-rank is then the agents' rank hint. Needs root. Prints a markdown table.
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NETNS = os.path.join(HERE, "..", "..", "scripts", "netns-cluster.sh")
NAME = "crun-closebench"


def host_cmd(host, argv):
    return ["ip", "netns", "exec", f"{NAME}-h{host}"] + argv


STORE = "10.77.0.1:29400"
BACKEND = "c10d"
RUNS = 0  # runs so far: each etcd-v3 run gets a run id of its own (a closed one's record stays a while)


def flags(node_rank, log_dir, capture_timeout):
    return ["--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", BACKEND, "--rdzv-endpoint", STORE,
            "--rdzv-id", f"job{RUNS}", "--max-restarts", "0", "--stop-timeout", "5", "--node-rank", str(node_rank),
            "--capture-timeout", str(capture_timeout), "--log-dir", log_dir]


def start_etcd(host, data_dir):
    """One etcd member on `host`'s address, serving once this returns (bound 30 s)."""
    addr = f"10.77.0.{host}"
    etcd = subprocess.Popen(host_cmd(host, ["etcd", "--logger", "zap", "--name", "bench", "--data-dir", data_dir,
                                            "--listen-client-urls", f"http://{addr}:2379",
                                            "--advertise-client-urls", f"http://{addr}:2379",
                                            "--listen-peer-urls", f"http://{addr}:2380",
                                            "--initial-advertise-peer-urls", f"http://{addr}:2380",
                                            "--initial-cluster", f"bench=http://{addr}:2380"]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    serving = threading.Event()

    def drain():  # the whole log, read to its end: etcd never blocks on it
        for line in etcd.stderr:
            if "serving client traffic" in line:
                serving.set()

    threading.Thread(target=drain, daemon=True).start()
    if serving.wait(30):
        return etcd
    etcd.kill()
    etcd.wait()
    raise RuntimeError("etcd did not serve within 30 s")


def ready_lines(proc, want, bound):
    """Reads proc's stdout until `want` ready lines came; returns {rank: pid}."""
    found = {}
    deadline = time.monotonic() + bound
    while len(found) < want:
        if time.monotonic() > deadline:
            raise RuntimeError("workers not ready in time")
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("crun ended before its workers were ready")
        m = re.match(r"ready rank=(\d+) pid=(\d+)", line)
        if m:
            found[int(m.group(1))] = int(m.group(2))
    return found


def one_run(build, worker, capture_timeout):
    global RUNS
    RUNS += 1
    with tempfile.TemporaryDirectory(prefix="crun-closebench-") as tmp:
        crun = os.path.join(build, "crun")
        errs = [open(os.path.join(tmp, f"err{n}"), "w+") for n in (0, 1)]
        a = subprocess.Popen(host_cmd(1, [crun] + flags(0, tmp + "/n0", capture_timeout) +
                                      [worker, "--hang-in-named-function", "--only-rank", "0", "--fail-on-signal",
                                       "SIGUSR1", "--exit", "3"]),
                             stdout=subprocess.PIPE, stderr=errs[0], text=True)
        b = subprocess.Popen(host_cmd(2, [crun] + flags(1, tmp + "/n1", capture_timeout) + [worker, "--hang-in-named-function"]),
                             stdout=subprocess.PIPE, stderr=errs[1], text=True)
        try:
            pids = ready_lines(a, 2, 60)
            ready_lines(b, 2, 60)
            ended = {}

            def wait(p, key):
                p.wait()
                ended[key] = time.monotonic()

            threads = [threading.Thread(target=wait, args=(p, k)) for p, k in ((a, "a"), (b, "b"))]
            for t in threads:
                t.start()
            # stdout is not read any more: drain it so that no worker line blocks crun.
            for p in (a, b):
                threading.Thread(target=p.stdout.read, daemon=True).start()
            t0 = time.monotonic()
            os.kill(pids[0], signal.SIGUSR1)
            for t in threads:
                t.join(120)
            if a.returncode != 3 or b.returncode != 3:
                raise RuntimeError(f"exit codes {a.returncode} {b.returncode}")
            errs[1].seek(0)
            m = re.search(r"took the stacks of \d+ local worker\(s\) in (\d+) ms", errs[1].read())
            capture_ms = int(m.group(1)) if m else float("nan")
            return (ended["a"] - t0) * 1000, (max(ended.values()) - t0) * 1000, capture_ms
        finally:
            for p in (a, b):
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for f in errs:
                f.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--capture-timeout", type=int, default=5)
    ap.add_argument("--store-on-node1", action="store_true")
    ap.add_argument("--etcd", action="store_true")
    args = ap.parse_args()
    global STORE, BACKEND
    store_host = 2 if args.store_on_node1 else 1
    STORE = f"10.77.0.{store_host}:29400"
    if args.etcd:
        BACKEND = "etcd-v3"
        STORE = f"10.77.0.{store_host}:2379"
    builds = {"before": args.before, "after": args.after}
    subprocess.run(["bash", NETNS, "down", NAME], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["bash", NETNS, "up", NAME, "2"], check=True, stdout=subprocess.DEVNULL)
    samples = {k: [] for k in builds}
    load_before = os.getloadavg()[0]
    etcd_dir = tempfile.TemporaryDirectory(prefix="crun-closebench-etcd-", dir="/dev/shm") if args.etcd else None
    etcd = start_etcd(store_host, etcd_dir.name) if args.etcd else None
    try:
        for k in builds:  # warm-up
            one_run(builds[k], args.worker, args.capture_timeout)
        for r in range(args.rounds):
            order = list(builds) if r % 2 == 0 else list(reversed(builds))
            for k in order:
                samples[k].append(one_run(builds[k], args.worker, args.capture_timeout))
                print(f"round {r} {k}: node 0 {samples[k][-1][0]:.0f} ms, job {samples[k][-1][1]:.0f} ms, "
                      f"node 1 capture {samples[k][-1][2]} ms", file=sys.stderr)
    finally:
        if etcd:
            etcd.kill()
            etcd.wait()
            etcd_dir.cleanup()
        subprocess.run(["bash", NETNS, "down", NAME], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    med = {k: [statistics.median(s[i] for s in samples[k]) for i in range(3)] for k in builds}
    print(f"load average (1 min) before the runs {load_before:.2f}, after {os.getloadavg()[0]:.2f}")
    print(f"{args.rounds} rounds, medians, ms from the failure; {BACKEND}, "
          f"{'etcd' if args.etcd else 'store'} on node {store_host - 1}'s host; "
          "anchor: node 1's capture (after build's runs)\n")
    print("| figure | before | after | after / before | anchor |")
    print("|---|---|---|---|---|")
    names = ["node rank 0's exit", "the job's end (last agent)"]
    for i, name in enumerate(names):
        print(f"| {name} | {med['before'][i]:.0f} | {med['after'][i]:.0f} | {med['after'][i] / med['before'][i]:.2f} | "
              f"{med['after'][2]:.0f} |")


if __name__ == "__main__":
    main()
