"""torch 1.13's own TCPStore clients against crun's store server (`crun store-server`).

Usage: torch_clients.py CRUN_BIN
Checks, each with its own assertion message:
  - every TCPStore operation torch 1.13 has (set, get, add, compare_set, wait, num_keys,
    delete_key, set_timeout) and a PrefixStore, with torch's answers;
  - timeouts: get and wait on a missing key fail within their bound; a get on a key that another
    client sets meanwhile gets its value;
  - many clients: 128 TCPStores (256 connections: 1.13 opens two each) pass an add+wait barrier;
  - crun's clients on the same port at the same time (`crun store add/get`), each seeing the
    torch clients' keys and the other way round;
  - garbage in both protocols and a half-sent request: only that connection closes, the server
    keeps answering both kinds of client and is still running;
  - init_process_group(env://) with TORCHELASTIC_USE_AGENT_STORE=True: two gloo ranks whose
    store is crun's all-reduce once, their keys under torch's per-attempt worker prefix.
"""
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

CRUN = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)


def crun_store(ep, *args):
    r = subprocess.run([CRUN, "store", "--endpoint", ep, "--timeout", "5", *args],
                       capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout.strip(), r.stderr.strip()


def client(host, port, timeout=10, world_size=None):
    return dist.TCPStore(host, port, world_size=world_size, is_master=False, timeout=timedelta(seconds=timeout))


def every_operation(host, port):
    s = client(host, port, world_size=1)
    s.set("a", "1")
    check(s.get("a") == b"1", "set/get")
    s.set("bin", bytes(range(256)))
    check(s.get("bin") == bytes(range(256)), "binary value")
    check(s.add("n", 5) == 5 and s.add("n", -7) == -2, "add")
    check(s.get("n") == b"-2", "add stores the decimal text")
    check(s.compare_set("cs", "", "x") == b"x", "compare_set creates")
    check(s.compare_set("cs", "x", "y") == b"y", "compare_set swaps")
    check(s.compare_set("cs", "z", "w") == b"y", "compare_set mismatch answers the current value")
    check(s.compare_set("cs-missing", "e", "d") == b"e", "compare_set of a missing key answers the expected value")
    before = s.num_keys()
    s.set("one-more", "")
    check(s.num_keys() == before + 1, "num_keys counts a new key")
    check(s.get("one-more") == b"", "empty value")
    check(s.delete_key("a") is True and s.delete_key("a") is False, "delete_key")
    s.wait(["n", "cs"])
    s.wait(["n"], timedelta(seconds=1))
    s.set_timeout(timedelta(seconds=7))
    check(s.timeout == timedelta(seconds=7), "set_timeout")
    p = dist.PrefixStore("/pfx", s)
    p.set("k", "pv")
    check(p.get("k") == b"pv" and s.get("/pfx/k") == b"pv", "PrefixStore")
    check(p.add("c", 3) == 3, "PrefixStore add")


def timeouts(host, port):
    s = client(host, port, timeout=1)
    t0 = time.monotonic()
    try:
        s.get("never-get")
        check(False, "get of a missing key returned")
    except RuntimeError as e:
        took = time.monotonic() - t0
        check(0.9 <= took < 5, f"get timed out after {took:.2f} s (store timeout 1 s)")
    s2 = client(host, port)
    t0 = time.monotonic()
    try:
        s2.wait(["never-wait"], timedelta(milliseconds=300))
        check(False, "wait on a missing key returned")
    except RuntimeError as e:
        took = time.monotonic() - t0
        check(0.25 <= took < 3, f"wait timed out after {took:.2f} s (300 ms)")
    # A blocked wait answered by another client's set.
    waiter, setter = client(host, port), client(host, port)
    done = []
    th = threading.Thread(target=lambda: done.append(waiter.get("later")))
    th.start()
    setter.set("later", "now")  # parked or not yet: either way the get must see it
    th.join(10)
    check(done == [b"now"], f"a parked get was answered by another client's set: {done}")


def many_clients(host, port, n=128):
    stores = [client(host, port, timeout=30) for _ in range(n)]
    out = [None] * n

    def run(i):
        s = stores[i]
        s.add("barrier/count", 1)
        s.set(f"barrier/in/{i}", str(i))
        s.wait([f"barrier/in/{j}" for j in range(n)])
        out[i] = s.get("barrier/count")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    check(all(v == str(n).encode() for v in out), f"{n} clients passed an add+wait barrier")


def alongside_crun(host, port):
    ep = f"{host}:{port}"
    s = client(host, port)
    errors = []

    def torch_side():
        try:
            for i in range(200):
                s.add("shared/counter", 1)  # "/shared/counter" on the wire
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    th = threading.Thread(target=torch_side)
    th.start()
    outs = [crun_store(ep, "add", "/shared/counter", "1") for _ in range(20)]
    th.join(60)
    check(not errors and all(rc == 0 for rc, _, _ in outs), f"torch and crun clients at once: {errors} {outs[:2]}")
    check(s.add("shared/counter", 0) == 220, "every add of both protocols counted once")
    # Each side reads the other's keys: torch's "k" is "/k" on the wire.
    s.set("from-torch", "t")
    rc, out, err = crun_store(ep, "get", "/from-torch")
    check(rc == 0 and out == "t", f"crun reads torch's key: {rc} {out} {err}")
    rc, _, err = crun_store(ep, "set", "/from-crun", "c")
    check(rc == 0 and s.get("from-crun") == b"c", f"torch reads crun's key: {err}")


def garbage(host, port, server):
    def raw(data):
        with socket.create_connection((host, port), timeout=5) as c:
            c.sendall(data)
            c.shutdown(socket.SHUT_WR)
            try:
                return c.recv(100)
            except OSError:
                return b""

    raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")                     # neither protocol
    raw(b"CRST" + os.urandom(200))                                  # crun's magic, then noise
    raw(bytes([9]) + os.urandom(64))                                # an unknown torch 1.x code
    raw(bytes([0]) + struct.pack("<Q", 1 << 40) + b"x")             # a 1 TB key
    raw(bytes([0, 0xCE, 0xF7, 0x85, 0x3C, 18]))                     # torch 2.x, unknown code
    raw(bytes([3]) + struct.pack("<Q", 5) + b"ini")                 # a request cut short
    with socket.create_connection((host, port)) as half:             # half a request, left open
        half.sendall(bytes([0]) + struct.pack("<Q", 100))
        s = client(host, port)
        s.set("after-garbage", "ok")
        check(s.get("after-garbage") == b"ok", "torch client served after garbage")
        rc, out, _ = crun_store(f"{host}:{port}", "get", "/after-garbage")
        check(rc == 0 and out == "ok", "crun client served after garbage")
    check(server.poll() is None, "store server still running after garbage")


def init_process_group_on_crun_store(host, port):
    code = (
        "import os, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.ones(1) * (dist.get_rank() + 1)\n"
        "dist.all_reduce(t)\n"
        "print('SUM', int(t.item()), flush=True)\n"
        "dist.destroy_process_group()\n")
    env = dict(os.environ, MASTER_ADDR=host, MASTER_PORT=str(port), WORLD_SIZE="2",
               TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="5")
    procs = [subprocess.Popen(["/usr/bin/python3", "-c", code], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    check(all(p.returncode == 0 and "SUM 3" in o for p, (o, _) in zip(procs, outs)),
          f"init_process_group(env://) on crun's store: {[(p.returncode, o, e[-300:]) for p, (o, e) in zip(procs, outs)]}")
    rc, out, _ = crun_store(f"{host}:{port}", "keys", "//worker/attempt_5/")
    check(rc == 0 and "//worker/attempt_5/" in out, f"the ranks' keys are under torch's attempt prefix: {out[:200]}")


def main():
    server = subprocess.Popen([CRUN, "store-server", "--host", "127.0.0.1", "--port", "0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        host, port = server.stdout.readline().strip().rsplit(":", 1)
        port = int(port)
        for step in (every_operation, timeouts, many_clients, alongside_crun, init_process_group_on_crun_store):
            step(host, port)
        garbage(host, port, server)
    finally:
        server.terminate()
        server.wait(10)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("PASS: torch 1.13 clients on crun's store")
    return 0


if __name__ == "__main__":
    sys.exit(main())
