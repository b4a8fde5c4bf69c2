"""The same torch TCPStore clients against crun's store and against torch 1.13's own TCPStore
server, side by side in one run (median of --repeat runs each, the two servers alternating).

  /usr/bin/python3 bench/store/torch_clients.py --build build [--repeat 5]

Both servers run in their own process on 127.0.0.1: `crun store-server`, and a TCPStore master
in a Python process (tcpstore_bench.py serve). The clients are torch 1.13's (tcpstore_bench.py:
one TCPStore per Python thread), so the client side costs the same for both and the ratio is
the servers'. The floor is tcpstore_floor: the least a server can do for the same requests (an
unordered_map behind epoll, answered in place), so crun/floor says how much of the clients' time
any server could still win. Clients are spread over --procs processes (16: one per client at 16 clients; a
single Python process would serialise them on its GIL). Prints ops/s for set/get/add at 1, 16 and 256 clients, and the time of an
add+wait barrier of 1,024 clients (2,048 connections: torch 1.13 opens two per TCPStore).
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"
CLIENTS = os.path.join(HERE, "tcpstore_bench.py")


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # inherited by both servers


def measure(port, op, clients, ops, procs):
    cmd = [PY, CLIENTS, "--port", str(port), "--op", op, "--clients", str(clients), "--procs", str(procs)]
    if op != "barrier":
        cmd += ["--ops", str(ops)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout.strip()
    return float(out.split("=")[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ops", type=int, default=40000, help="operations per case, spread over the clients")
    ap.add_argument("--barrier-clients", type=int, default=1024)
    ap.add_argument("--procs", type=int, default=16, help="client processes (one Python GIL each)")
    a = ap.parse_args()
    raise_fd_limit()
    crun_srv = subprocess.Popen([os.path.join(a.build, "launcher", "crun"), "store-server", "--host", "127.0.0.1",
                                 "--port", "0"], stdout=subprocess.PIPE, text=True)
    torch_srv = subprocess.Popen([PY, CLIENTS, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    floor_srv = subprocess.Popen([os.path.join(a.build, "bench", "store", "tcpstore_floor")], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
    ports = {"crun": int(crun_srv.stdout.readline().strip().rsplit(":", 1)[1]),
             "torch": int(torch_srv.stdout.readline().strip()),
             "floor": int(floor_srv.stdout.readline().strip().rsplit(":", 1)[1])}
    servers = ("crun", "torch", "floor")
    print(f"load average: {os.getloadavg()[0]:.2f}; {a.repeat} runs per cell, median")
    print(f"{'op':<8} {'clients':>7} {'crun store':>14} {'torch 1.13 server':>18} {'floor':>14} "
          f"{'crun/torch':>10} {'crun/floor':>10}")
    try:
        for clients in (1, 16, 256):
            for op in ("set", "get", "add"):
                runs = {s: [] for s in servers}
                for i in range(a.repeat):
                    for server in servers[i % 3:] + servers[:i % 3]:  # each server first in turn
                        runs[server].append(measure(ports[server], op, clients, max(a.ops // clients, 20), a.procs))
                c, t, f = (statistics.median(runs[s]) for s in servers)
                print(f"{op:<8} {clients:>7} {c:>9.0f} op/s {t:>13.0f} op/s {f:>9.0f} op/s {c / t:>9.2f}x {c / f:>9.2f}x",
                      flush=True)
        runs = {s: [] for s in servers}
        for i in range(a.repeat):
            for server in servers[i % 3:] + servers[:i % 3]:
                runs[server].append(measure(ports[server], "barrier", a.barrier_clients, 0, a.procs))
        c, t, f = (statistics.median(runs[s]) for s in servers)
        print(f"{'barrier':<8} {a.barrier_clients:>7} {c * 1000:>11.1f} ms {t * 1000:>14.1f} ms {f * 1000:>10.1f} ms "
              f"{t / c:>9.2f}x {f / c:>9.2f}x  (add+wait, seconds: ratios are speed-ups)", flush=True)
    finally:
        crun_srv.terminate()
        torch_srv.stdin.close()
        floor_srv.stdin.close()
        floor_srv.wait(timeout=10)
        crun_srv.wait(timeout=10)
        torch_srv.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
