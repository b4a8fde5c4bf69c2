"""Store throughput, crun vs torch's TCPStore, side by side in one run (median of --repeat runs).

  /usr/bin/python3 bench/store/run.py --build build [--repeat 5] [--transport tcp|local]
  /usr/bin/python3 bench/store/run.py --build build --repeat 15 --cases get:1,get:16 \
      --also LABEL=CRUN [--also-env LABEL=NAME=VALUE ...]   (servers side by side, interleaved)

First it prints this machine's ceiling for the same traffic: a bare epoll echo server (one
thread, like the store's event loop) with 1 and 16 blocking clients and no protocol at all; each
blocking case then runs it again, interleaved with crun's runs, and prints crun over it; and the
same echo with its loop in a process of its own ("echo, own process": echo_ceiling
--server-process), as crun's store server is to its clients, so that a hand-over between server
and client is a switch of address spaces in both.

crun: `crun store-server` in its own process, `store_bench` clients (C++). --transport: tcp (the
default: what clients on other hosts use, and what torch's clients use) or local (crun's clients
on the store's host use its local socket, store/local_socket.h; the echo ceiling then runs over a
Unix-domain socket too, and the torch column stays on TCP).
torch: a TCPStore server in its own Python process, clients from Python threads (the anchor's
client is Python: that is how PyTorch users drive it).

--also / --also-env: instead, compare store servers. Each LABEL=CRUN is another crun build's
`crun store-server`, each LABEL=NAME=VALUE this build's with NAME=VALUE in its environment; all
serve at once, the same store_bench (this build's) drives each in turn, one run of every server
and of the echo ceiling per round, the order rotated each round; medians of --repeat rounds,
each beside the echo ceiling and this build's server (the median of the rounds' ratios), and
the CPU time the server's loop spent a request (/proc/PID/schedstat: the store server runs its
loop on its main thread). Blocking cases only (--cases).
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"


def ops_per_s(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300).stdout
    return float(out.strip().split("ops_per_s=")[1])


def start_server(crun_bin, env=None):
    srv = subprocess.Popen([crun_bin, "store-server", "--host", "127.0.0.1", "--port", "0"],
                           stdout=subprocess.PIPE, text=True, env=dict(os.environ, **(env or {})))
    return srv, srv.stdout.readline().strip()


def blocking_ops(total, clients):
    """Operations of a blocking run with `clients` clients (a 16-client run does a quarter)."""
    return total if clients == 1 else total // 4


def echo_cmd(echo_bin, clients, ops, transport):
    return [echo_bin, "--clients", str(clients), "--ops", str(ops), "--transport", transport]


def crun_cmd(bench_bin, endpoint, op, clients, ops, depth, transport):
    return [bench_bin, "--endpoint", endpoint, "--op", op, "--clients", str(clients), "--ops", str(ops),
            "--pipeline", str(depth), "--transport", transport]


def server_cpu_ns(srv):
    """CPU time of a `crun store-server`'s loop (its main thread), ns (0 for none)."""
    if srv is None:
        return 0
    with open(f"/proc/{srv.pid}/schedstat") as f:
        return int(f.read().split()[0])


def compare_servers(a, servers, bench_bin, echo_bin):
    """--also: every server of `servers` ((label, crun, env)) against the same clients, interleaved."""
    cases = []
    for c in a.cases.split(","):
        op, _, clients = c.partition(":")
        if op not in ("set", "get", "add") or not clients.isdigit():
            sys.exit(f"run.py: --cases {c!r}: expected OP:CLIENTS with OP set, get or add")
        cases.append((op, int(clients)))
    running = [(label, *start_server(crun, env)) for label, crun, env in servers]
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; {os.cpu_count()} CPUs; over {a.transport};"
          f" median of {a.repeat} interleaved rounds")
    labels = ["echo"] + [label for label, _, _ in running]
    try:
        for op, clients in cases:
            ops = blocking_ops(a.ops, clients)
            runs = {label: [] for label in labels}
            cpu = {label: [] for label in labels}
            for r in range(a.repeat):
                order = labels[r % len(labels):] + labels[:r % len(labels)]
                for label in order:
                    if label == "echo":
                        cmd = echo_cmd(echo_bin, clients, ops, a.transport)
                    else:
                        ep = next(e for l, _, e in running if l == label)
                        cmd = crun_cmd(bench_bin, ep, op, clients, ops, 0, a.transport)
                    srv = next(s for l, s, _ in running if l == label) if label != "echo" else None
                    cpu0 = server_cpu_ns(srv)
                    runs[label].append(ops_per_s(cmd))
                    if srv:
                        cpu[label].append((server_cpu_ns(srv) - cpu0) / 1e3 / (ops * clients))
            med = {label: statistics.median(v) for label, v in runs.items()}
            first = running[0][0]
            print(f"{op} at {clients} client(s), load {os.getloadavg()[0]:.2f}: ops/s (min .. max), us a request,"
                  f" x {first} (median of each round's ratio), server CPU a request")
            for label in labels:
                v = runs[label]
                spread = f"{min(v):>9.0f} .. {max(v):<9.0f}"
                rel = ""
                if label != "echo":
                    paired = statistics.median(x / y for x, y in zip(v, runs[first]))
                    rel = (f" {med[label] / med['echo']:4.2f}x echo, {paired:5.2f}x {first},"
                           f" server CPU {statistics.median(cpu[label]):5.2f} us")
                print(f"  {label:<24} {med[label]:>9.0f} ({spread}) {1e6 * clients / med[label]:7.1f} us{rel}",
                      flush=True)
    finally:
        for _, srv, _ in running:
            srv.terminate()
            srv.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--transport", choices=("tcp", "local"), default="tcp")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=CRUN",
                    help="another crun build's store server, compared with this build's, interleaved")
    ap.add_argument("--also-env", action="append", default=[], metavar="LABEL=NAME=VALUE",
                    help="this build's store server with NAME=VALUE in its environment, the same (or, for the LABEL of an --also, that build's)")
    ap.add_argument("--cases", default="get:1,get:16", help="with --also: OP:CLIENTS,... (blocking clients)")
    a = ap.parse_args()
    transport = ["--transport", a.transport]
    crun_bin = os.path.join(a.build, "launcher", "crun")
    bench_bin = os.path.join(a.build, "bench", "store", "store_bench")
    echo_bin = os.path.join(a.build, "bench", "store", "echo_ceiling")
    if a.also or a.also_env:
        servers = [("crun", crun_bin, None)]
        for v in a.also:
            label, _, crun = v.partition("=")
            if not label or not crun:
                ap.error(f"--also {v!r}: expected LABEL=CRUN")
            servers.append((label, crun, None))
        for v in a.also_env:
            label, _, var = v.partition("=")
            name, eq, value = var.partition("=")
            if not label or not name or not eq:
                ap.error(f"--also-env {v!r}: expected LABEL=NAME=VALUE")
            known = [i for i, s in enumerate(servers) if s[0] == label]
            if known:  # an --also of that label: its build, with the variable
                i = known[0]
                servers[i] = (label, servers[i][1], dict(servers[i][2] or {}, **{name: value}))
            else:
                servers.append((label, crun_bin, {name: value}))
        return compare_servers(a, servers, bench_bin, echo_bin)

    crun_srv, crun_ep = start_server(crun_bin)
    torch_srv = subprocess.Popen([PY, os.path.join(HERE, "tcpstore_bench.py"), "serve"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    torch_port = torch_srv.stdout.readline().strip()

    cases = [(op, 1, 0) for op in ("set", "get", "add")]
    cases += [(op, 16, 0) for op in ("set", "get", "add")]
    cases += [(op, 1, 1000) for op in ("set", "get", "add")]
    print(f"load average: {os.getloadavg()[0]:.2f}; crun's clients and the echo ceiling over {a.transport}")
    for clients in (1, 16):  # the machine's ceiling for this traffic, with no protocol at all
        runs = [ops_per_s(echo_cmd(echo_bin, clients, blocking_ops(a.ops, clients), a.transport))
                for _ in range(a.repeat)]
        print(f"bare epoll echo ceiling, {clients:>2} client(s): {statistics.median(runs):>9.0f} round trips/s")
    # Each blocking case also runs the echo ceiling for its client count, one echo run before each
    # crun run: "vs echo" is crun's median over that interleaved echo median (the host's load
    # moves both alike from minute to minute here).
    print(f"{'op':<5} {'clients':>7} {'pipeline':>8} {'crun ops/s':>12} {'TCPStore ops/s':>15} {'ratio':>7}"
          f" {'echo':>9} {'vs echo':>8} {'echo, own process':>17} {'vs it':>6}")
    try:
        for op, clients, depth in cases:
            ops = a.ops * 10 if depth else blocking_ops(a.ops, clients)
            crun, echo, echo_apart = [], [], []
            for _ in range(a.repeat):
                if not depth:
                    echo_run = echo_cmd(echo_bin, clients, ops, a.transport)
                    echo.append(ops_per_s(echo_run))
                    echo_apart.append(ops_per_s(echo_run + ["--server-process"]))
                crun.append(ops_per_s(crun_cmd(bench_bin, crun_ep, op, clients, ops, depth, a.transport)))
            torch_ops = a.ops // 4 if clients == 1 else a.ops // 16
            torch = [ops_per_s([PY, os.path.join(HERE, "tcpstore_bench.py"), "--port", torch_port, "--op", op,
                                "--clients", str(clients), "--ops", str(torch_ops)]) for _ in range(a.repeat)]
            c, t = statistics.median(crun), statistics.median(torch)
            anchor = "(no pipelining)" if depth else ""
            e = ""
            if echo:
                e1, e2 = statistics.median(echo), statistics.median(echo_apart)
                e = f"{e1:>9.0f} {c / e1:>7.2f}x {e2:>17.0f} {c / e2:>5.2f}x"
            print(f"{op:<5} {clients:>7} {depth:>8} {c:>12.0f} {t:>15.0f} {c / t:>6.1f}x {e} {anchor}", flush=True)
    finally:
        crun_srv.terminate()
        torch_srv.stdin.close()
        crun_srv.wait(timeout=10)
        torch_srv.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
