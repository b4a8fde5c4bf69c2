#!/usr/bin/python3
"""The operators' view of a running job, end to end: a real crun with --health-check-port and
--event-log-handler jsonl:PATH, real worker processes, real HTTP clients (Python's, crun status,
promtool, headless Chromium).

  ops_test.py --crun CRUN --worker TEST_WORKER --case NAME [--artifacts DIR]

Cases: endpoint (health, metrics through promtool, status, crun status, events of a failing and
restarting job), page (the status page in headless Chromium: its DOM, and a screenshot kept as an
artifact), bad_http (garbage, a 10 MB header, 1,000 idle connections, slowloris: the workers go on
and the endpoint answers again), errors (an events path that cannot be written, a port taken,
bad flags: one line, nothing started), stopping (a failure with no restart left while a worker
ignores SIGTERM: unhealthy and counted at once), page_stacks (the page and `crun status --stacks` on
a /status document carrying grouped stacks: a real agent's page and document, served again by a
Python server with a "stack_groups" that crun's own parser must read back), page_heartbeat (the
page shows the heartbeat timeout --heartbeat-timeout auto chose, as /status has it). Each wait is bounded;
nothing sleeps to wait.
"""
import argparse
import atexit
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

FAILURES = []


def check(ok, what):
    if not ok:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)
    return ok


def wait_for(predicate, what, bound=30.0, every=0.05):
    """Polls `predicate` until it returns a true value, at most `bound` seconds."""
    deadline = time.monotonic() + bound
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {bound} s waiting for {what}")
        time.sleep(every)


class Job:
    """One crun process with the endpoint on a kernel-picked port, its output in files."""

    def __init__(self, args, crun, worker, worker_args, extra=(), tmp=None):
        self.dir = tmp or tempfile.mkdtemp(prefix="crun-ops-")
        if tmp is None:
            atexit.register(shutil.rmtree, self.dir, True)  # read until the case ends, then removed
        self.out_path = os.path.join(self.dir, "stdout")
        self.err_path = os.path.join(self.dir, "stderr")
        self.events = os.path.join(self.dir, "events.jsonl")
        cmd = [crun, "--standalone", *args, "--health-check-port", "0", "--event-log-handler", "jsonl:" + self.events,
               *extra, worker, *worker_args]
        self.proc = subprocess.Popen(cmd, stdout=open(self.out_path, "w"), stderr=open(self.err_path, "w"),
                                     stdin=subprocess.DEVNULL)
        m = wait_for(lambda: re.search(r"at http://127\.0\.0\.1:(\d+)/", self.err()), "the endpoint's address line")
        self.port = int(m.group(1))

    def out(self):
        with open(self.out_path) as f:
            return f.read()

    def err(self):
        with open(self.err_path) as f:
            return f.read()

    def ready_pids(self):
        """rank -> pid of the newest 'ready rank=R pid=P' line of each rank."""
        pids = {}
        for r, p in re.findall(r"ready rank=(\d+) pid=(\d+)", self.out()):
            pids[int(r)] = int(p)
        return pids

    def get(self, path, method="GET"):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            c.request(method, path)
            r = c.getresponse()
            return r.status, r.read().decode(), dict(r.getheaders())
        finally:
            c.close()

    def status(self):
        code, body, _ = self.get("/status")
        assert code == 200, f"/status answered {code}"
        return json.loads(body)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def read_events(self):
        with open(self.events) as f:
            return [json.loads(line) for line in f if line.strip()]


def metric(text, name):
    """The value of the sample `name` (with its labels, as written) in exposition text."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def failing_job(a, restarts=2):
    """Two workers; rank 1 exits 3 in the first start, then both run until stopped."""
    job = Job(["--nproc-per-node", "2", "--max-restarts", str(restarts)], a.crun, a.worker,
              ["--only-rank", "1", "--fail-before-restart", "1", "--exit", "3", "--hang", "--stderr-lines", "2"])
    # Restart 1 is running when both ranks said ready after the failure.
    wait_for(lambda: "restarting the group" in job.err() and len(job.ready_pids()) == 2 and
             job.status()["node"]["state"] == "running" and job.status()["node"]["restart_count"] == 1,
             "restart 1 running")
    return job


def case_endpoint(a):
    job = failing_job(a)
    try:
        pids = job.ready_pids()
        code, body, headers = job.get("/healthz")
        check(code == 200 and body.startswith("ok"), f"/healthz: {code} {body!r}")
        code, _, headers = job.get("/healthz", "HEAD")
        check(code == 200 and headers.get("Content-Length") == str(len("ok: running\n")), f"HEAD /healthz: {code} {headers}")
        code, body, headers = job.get("/metrics")
        check(code == 200 and headers.get("Content-Type", "").startswith("text/plain; version=0.0.4"), f"/metrics {code} {headers}")
        prom = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True)
        check(prom.returncode == 0, f"promtool check metrics: rc {prom.returncode}: {prom.stdout}{prom.stderr}")
        check(metric(body, "crun_restarts_total") == 1, "crun_restarts_total 1")
        check(metric(body, 'crun_worker_failures_total{reason="exit"}') == 1, "one failure by exit")
        check(metric(body, 'crun_worker_failures_total{reason="signal"}') == 0, "no failure by signal")
        check(metric(body, "crun_workers_running") == 2, "two workers running")
        check(metric(body, "crun_rendezvous_round") == 1, "round 1")
        check(metric(body, "crun_nodes") == 1, "one node")
        check((metric(body, "crun_last_failure_timestamp_seconds") or 0) > time.time() - 120, "the failure's time")
        check((metric(body, "process_resident_memory_bytes") or 0) > 0, "the agent's RSS")
        check(metric(body, "process_cpu_seconds_total") is not None, "the agent's CPU")

        s = job.status()
        node = s["node"]
        check([(w["rank"], w["pid"], w["state"], w["restarts"]) for w in node["workers"]] ==
              [(0, pids[0], "running", 1), (1, pids[1], "running", 1)], f"/status workers: {node['workers']}")
        f = node["last_failure"]
        check(f is not None and f["rank"] == 1 and f["exit_code"] == 3 and f["stderr_tail"] == ["err r=1 i=0", "err r=1 i=1"],
              f"/status last failure: {f}")
        check(s["job"]["nodes_seen"] == 1 and len(s["job"]["nodes"]) == 1, "the whole job is this node")

        # Every descriptor of the agent (the listener, an accepted connection held open) is
        # close-on-exec: no worker it starts can inherit one.
        held = http.client.HTTPConnection("127.0.0.1", job.port, timeout=10)
        held.request("GET", "/healthz")
        held.getresponse().read()
        leaked = []
        for fd in os.listdir(f"/proc/{job.proc.pid}/fd"):
            if int(fd) <= 2:
                continue
            try:
                with open(f"/proc/{job.proc.pid}/fdinfo/{fd}") as f:
                    flags = int(re.search(r"flags:\s+([0-7]+)", f.read()).group(1), 8)
            except FileNotFoundError:
                continue
            if not flags & 0o2000000:
                leaked.append((fd, os.readlink(f"/proc/{job.proc.pid}/fd/{fd}")))
        held.close()
        check(not leaked, f"descriptors of crun without close-on-exec: {leaked}")

        code, body, _ = job.get("/nosuch")
        check(code == 404, f"/nosuch answered {code}")
        code, body, headers = job.get("/healthz", "POST")
        check(code == 405 and headers.get("Allow") == "GET, HEAD", f"POST answered {code} {headers}")

        # crun status, from "another machine": only the URL.
        r = subprocess.run([a.crun, "status", f"http://127.0.0.1:{job.port}"], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, f"crun status rc {r.returncode}: {r.stderr}")
        rows = [line.split() for line in r.stdout.splitlines()]
        for rank in (0, 1):
            check([str(rank), "0", str(rank), str(pids[rank]), "running", "1", "-", "-", "-"] in rows,
                  f"crun status shows rank {rank} with pid {pids[rank]}:\n{r.stdout}")
        check("\nlast failure:\n  worker failed (root cause): rank 1 (local rank 1" in r.stdout and "exit code 3" in r.stdout and
              "  | err r=1 i=1" in r.stdout,
              f"crun status' last failure:\n{r.stdout}")
        r = subprocess.run([a.crun, "status", f"127.0.0.1:{job.port}", "--json"], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and json.loads(r.stdout)["node"]["workers"][1]["pid"] == pids[1], "crun status --json")
    finally:
        rc = job.stop()
    check(rc == 128 + signal.SIGTERM, f"crun exit {rc} after SIGTERM")

    # The events: the expected sequence, each a JSON object with its time, node and rank.
    events = job.read_events()
    kinds = [e["event"] for e in events]
    expected = ["rendezvous_round", "worker_start", "worker_start", "worker_exit", "stacks_captured", "worker_exit", "failure",
                "restart", "rendezvous_round", "worker_start", "worker_start", "signal", "worker_exit", "worker_exit", "stop"]
    check(kinds == expected, f"events: {kinds}")
    if kinds == expected:
        check(events[3]["rank"] == 1 and events[3]["state"] == "failed" and events[3]["exit_code"] == 3, f"{events[3]}")
        check(events[4]["ranks"] == [0] and events[4]["restart_count"] == 0 and isinstance(events[4]["ms"], int), f"{events[4]}")
        check(events[5]["rank"] == 0 and events[5]["state"] == "stopped" and events[5]["signal"] == "SIGTERM", f"{events[5]}")
        check(events[6]["restarting"] is True and events[6]["root_cause"]["rank"] == 1, f"{events[6]}")
        check(events[7]["restart_count"] == 1 and events[8]["round"] == 1, f"{events[7]} {events[8]}")
        check({events[9]["pid"], events[10]["pid"]} == set(pids.values()), "the restart's worker_start pids")
        check(events[-1]["exit_code"] == 143, f"{events[-1]}")
    for e in events:
        check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", e.get("time", "")) and e.get("hostname") and
              e.get("node_rank") == 0 and "run_id" in e, f"event fields: {e}")
    times = [e["time"] for e in events]
    check(times == sorted(times), "events in time order")
    # The agent is gone: so is its port.
    try:
        socket.create_connection(("127.0.0.1", job.port), timeout=2).close()
        check(False, "the endpoint still accepts after crun exited")
    except OSError:
        pass


def case_page(a):
    chromium = shutil.which("chromium")
    if not check(chromium is not None, "chromium is not installed (scripts/install-deps.sh installs it)"):
        return
    job = failing_job(a)
    try:
        pids = job.ready_pids()
        profile = tempfile.mkdtemp(prefix="crun-chromium-")
        base = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--window-size=1200,700"]
        url = f"http://127.0.0.1:{job.port}/"
        dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
        check(dom.returncode == 0, f"chromium --dump-dom rc {dom.returncode}: {dom.stderr[-2000:]}")
        html = dom.stdout
        for rank in (0, 1):
            row = re.search(rf'<tr data-rank="{rank}">(.*?)</tr>', html)
            check(row is not None and f'<td class="num pid">{pids[rank]}</td>' in row.group(1) and "running" in row.group(1),
                  f"the page's row of rank {rank} (pid {pids[rank]})")
        check(re.search(r'<tr data-node="0">.*?<td class="state-running">running</td>.*?2/2', html) is not None,
              "the page's row of node 0 (running, 2/2)")
        check(re.search(r'id="failure-head">rank 1 .*?exit code 3', html) is not None, "the page's last failure")
        check(re.search(r'id="failure-tail">err r=1 i=0\nerr r=1 i=1</pre>', html) is not None, "the failure's stderr tail")
        os.makedirs(a.artifacts, exist_ok=True)
        shot = os.path.join(a.artifacts, "status_page.png")
        if os.path.exists(shot):
            os.remove(shot)
        r = subprocess.run(base + [f"--screenshot={shot}", url], capture_output=True, text=True, timeout=120)
        ok = r.returncode == 0 and os.path.exists(shot)
        if ok:
            with open(shot, "rb") as f:
                ok = f.read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(shot) > 10000
        check(ok, f"a screenshot at {shot}: rc {r.returncode} {r.stderr[-1000:]}")
        print("screenshot:", shot)
        shutil.rmtree(profile, ignore_errors=True)
    finally:
        job.stop()


def case_bad_http(a):
    job = Job(["--nproc-per-node", "2"], a.crun, a.worker, ["--hang"])
    try:
        pids = wait_for(lambda: len(job.ready_pids()) == 2 and job.ready_pids(), "both workers ready")
        baseline = job.get("/metrics")[1]
        fds0 = metric(baseline, "process_open_fds")
        rss0 = metric(baseline, "process_resident_memory_bytes")

        def exchange(payload, bound=15):
            s = socket.create_connection(("127.0.0.1", job.port), timeout=bound)
            try:
                try:
                    s.sendall(payload)
                except OSError:
                    pass  # the agent may answer and close before taking it all
                data = b""
                while True:
                    try:
                        chunk = s.recv(65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    data += chunk
                return data
            finally:
                s.close()

        answer = exchange(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage that is not HTTP\r\n\r\n")
        check(answer.startswith(b"HTTP/1.1 400"), f"garbage: {answer[:80]!r}")
        answer = exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (10 << 20) + b"\r\n\r\n")
        check(answer.startswith(b"HTTP/1.1 431") or answer == b"", f"10 MB header: {answer[:80]!r}")
        answer = exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        check(answer.startswith(b"HTTP/1.1 413"), f"a body: {answer[:80]!r}")
        answer = exchange(f"GET http://127.0.0.1:{job.port}/healthz HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        check(answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok: running\n"), f"absolute form: {answer[:80]!r}")

        # As many idle connections as the endpoint keeps (64): a probe still gets its answer, at once.
        idle = []
        try:
            for _ in range(64):
                idle.append(socket.create_connection(("127.0.0.1", job.port), timeout=10))
            # The kernel queues the probe's connection behind the 64: the agent accepts it 65th.
            probe = http.client.HTTPConnection("127.0.0.1", job.port, timeout=5)
            try:
                probe.request("GET", "/healthz")
                status = probe.getresponse().status
            except OSError as e:
                status = repr(e)
            finally:
                probe.close()
            check(status == 200, f"/healthz beside 64 idle connections: {status}")
        finally:
            for s in idle:
                s.close()

        # 1,000 idle connections: the agent keeps a bounded number, refuses the rest.
        idle = []
        try:
            for _ in range(1000):
                idle.append(socket.create_connection(("127.0.0.1", job.port), timeout=10))
            check(job.proc.poll() is None, "crun still running under 1,000 idle connections")
            check(job.ready_pids() == pids and all(os.path.exists(f"/proc/{p}") for p in pids.values()),
                  "the workers untouched by 1,000 idle connections")
        finally:
            for s in idle:
                s.close()
        # Answers again once they are gone (the refused ones were closed at once; the kept ones
        # end with the clients' close).
        wait_for(lambda: _healthy(job), "/healthz 200 after the idle connections", bound=30)

        # Slowloris: one header byte every 0.2 s; the agent closes the connection at its request
        # timeout (10 s), long before the header could end.
        s = socket.create_connection(("127.0.0.1", job.port), timeout=30)
        started = time.monotonic()
        closed_after = None
        s.settimeout(0.2)
        try:
            for i in range(200):
                try:
                    s.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: "[i:i + 1] if i < 28 else b"a")
                except OSError:
                    closed_after = time.monotonic() - started
                    break
                try:
                    if s.recv(1) == b"":
                        closed_after = time.monotonic() - started
                        break
                except socket.timeout:
                    pass
                except OSError:
                    closed_after = time.monotonic() - started
                    break
        finally:
            s.close()
        check(closed_after is not None and closed_after < 20, f"slowloris closed after {closed_after} s (bound 20 s)")

        # Afterwards: the same workers, no restart, healthy, bounded descriptors and memory.
        check(job.ready_pids() == pids and all(os.path.exists(f"/proc/{p}") for p in pids.values()), "the workers after the abuse")
        after = job.get("/metrics")[1]
        check(metric(after, "crun_restarts_total") == 0 and metric(after, "crun_workers_running") == 2, "no restart, both running")
        fds = wait_for(lambda: (metric(job.get("/metrics")[1], "process_open_fds") or 1e9) <= fds0 + 2 and True,
                       "the agent's descriptors back to where they were", bound=30)
        check(fds, "descriptors")
        rss = metric(after, "process_resident_memory_bytes")
        check(rss < rss0 + (32 << 20), f"the agent's RSS {rss0:.0f} -> {rss:.0f} bytes (10 MB header, 1,000 connections)")
        code, _, _ = job.get("/healthz")
        check(code == 200, "/healthz 200 at the end")
    finally:
        rc = job.stop()
    check(rc == 143, f"crun exit {rc} after SIGTERM")


def case_stopping(a):
    """A failure with no restart left: unhealthy and counted from the moment it is known, for the
    whole grace period of a worker that ignores SIGTERM, not once the group has stopped."""
    job = Job(["--nproc-per-node", "2", "--max-restarts", "0", "--stop-timeout", "60"], a.crun, a.worker,
              ["--only-rank", "1", "--fail-on-signal", "SIGUSR1", "--exit", "5", "--hang", "--ignore-term"])
    try:
        # Both ready (rank 0 ignores SIGTERM from then on); then rank 1 fails.
        pids = wait_for(lambda: (lambda p: p if len(p) == 2 else None)(job.ready_pids()), "both ranks ready")
        rank0 = pids[0]
        os.kill(pids[1], signal.SIGUSR1)
        wait_for(lambda: any(e["event"] == "worker_exit" and e.get("local_rank") == 1 for e in job.read_events()),
                 "rank 1's exit")
        code, body = wait_for(lambda: (lambda r: r[:2] if r[0] != 200 else None)(job.get("/healthz")),
                              "/healthz to leave 200", bound=10)
        check(os.path.exists(f"/proc/{rank0}") and job.proc.poll() is None,
              "rank 0 is still in its grace period when /healthz says the job failed")
        check(code == 503 and body.startswith("failed: rank 1 ") and "exit code 5" in body and "no restart left" in body,
              f"/healthz while stopping: {code} {body!r}")
        metrics = job.get("/metrics")[1]
        check(metric(metrics, "crun_healthy") == 0, "crun_healthy 0 while stopping")
        check(metric(metrics, 'crun_worker_failures_total{reason="exit"}') == 1, "the failure counted while stopping")
        check(job.status()["node"]["state"] == "stopping", "state stopping")
        os.kill(rank0, signal.SIGKILL)  # the grace period's end, without waiting for it
        rc = job.proc.wait(timeout=30)
        check(rc == 5, f"crun exit {rc}, expected the root cause's 5")
    finally:
        job.stop()


def _healthy(job):
    try:
        return job.get("/healthz")[0] == 200
    except OSError:
        return False


def case_errors(a):
    tmp = tempfile.mkdtemp(prefix="crun-ops-errors-")
    stamp = os.path.join(tmp, "stamp")

    def run(args, env=None):
        e = dict(os.environ, TMPDIR=tmp)
        e.update(env or {})
        return subprocess.run([a.crun, *args], capture_output=True, text=True, timeout=60, env=e)

    def one_line(r, rc, needle, what):
        lines = r.stderr.strip().splitlines()
        check(r.returncode == rc and len(lines) == 1 and needle in lines[0],
              f"{what}: expected exit {rc} with one line containing {needle!r}; got {r.returncode}: {r.stderr!r}")

    def nothing_started(what):
        check(not os.path.exists(stamp), f"{what}: a worker ran")
        left = [n for n in os.listdir(tmp) if n.startswith("crun-")]
        check(not left, f"{what}: left behind {left}")

    worker = [a.worker, "--stamp", stamp]
    for path in ("/nonexistent-dir/events.jsonl", tmp):  # no such directory; a directory
        r = run(["--standalone", "--event-log-handler", "jsonl:" + path, *worker])
        one_line(r, 2, path, f"events to {path}")
        nothing_started(f"events to {path}")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    r = run(["--standalone", "--health-check-port", str(port), *worker])
    one_line(r, 3, f"127.0.0.1:{port}", "a port taken")
    nothing_started("a port taken")
    taken.close()
    for args, needle in ((["--health-check-port", "x"], "--health-check-port"),
                         (["--health-check-addr", "host.example"], "--health-check-addr"),
                         (["--event-log-handler", "syslog"], "--event-log-handler")):
        r = run(["--standalone", *args, *worker])
        one_line(r, 2, needle, " ".join(args))
        nothing_started(" ".join(args))
    r = run(["--standalone", *worker], env={"TORCHELASTIC_HEALTH_CHECK_PORT": "99999"})
    one_line(r, 2, "TORCHELASTIC_HEALTH_CHECK_PORT", "TORCHELASTIC_HEALTH_CHECK_PORT=99999")
    for args, rc in ((["status"], 2), (["status", "nonsense"], 2), (["status", "http://127.0.0.1:1", "--bogus"], 2),
                     (["status", f"http://127.0.0.1:{port}"], 1), (["status", "https://127.0.0.1:1"], 2),
                     (["status", "http://127.0.0.1:0"], 2)):
        r = run(args)
        one_line(r, rc, "crun status", " ".join(args))
    # A port that accepts and never answers: bounded by --timeout, one line.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    started = time.monotonic()
    r = run(["status", f"127.0.0.1:{silent.getsockname()[1]}", "--timeout", "1"])
    one_line(r, 1, "no answer within 1.00 s", "a silent agent")
    check(time.monotonic() - started < 10, "crun status waited past its --timeout")
    silent.close()
    shutil.rmtree(tmp, ignore_errors=True)


def stack_groups_doc():
    """Two groups of 8 ranks, rank 6 the odd one out, as agent/stack_groups.h writes them."""
    arrow = " \u2190 "
    def group(signature, ranks, count, frames, odd):
        summary = arrow.join(f.split(" (")[0] for f in frames)
        text = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in ranks)
        line = ("rank " if count == 1 else "ranks ") + text + (" (the odd one out)" if odd else "") + ": " + summary
        return {"signature": signature, "line": line, "ranks": [list(r) for r in ranks], "rank_count": count,
                "summary": summary, "odd_one_out": odd, "error": "", "python": True, "threads": [frames],
                "threads_left_out": 0}
    return {"attempt": 0, "rank_count": 8, "groups_left_out": 0, "ranks_left_out": 0,
            "groups": [group("00000000000000a1", [(0, 5), (7, 7)], 7, ["all_reduce (train.py:40)", "main (train.py:80)"], False),
                       group("00000000000000b2", [(6, 6)], 1, ["stuck_here (train.py:12)", "main (train.py:80)"], True)]}


def case_page_stacks(a):
    import http.server
    import threading
    chromium = shutil.which("chromium")
    if not check(chromium is not None, "chromium is not installed (scripts/install-deps.sh installs it)"):
        return
    job = failing_job(a)
    try:
        code, page, _ = job.get("/")
        check(code == 200, f"GET / answered {code}")
        doc = job.status()
    finally:
        job.stop()
    groups = stack_groups_doc()
    doc["job"]["stack_groups"] = groups
    body = {"/": ("text/html; charset=utf-8", page.encode()), "/status": ("application/json", json.dumps(doc).encode())}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            kind, data = body.get(self.path, ("text/plain", b"not found"))
            self.send_response(200 if self.path in body else 404)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        # crun's own parser reads the groups back: the document is one an agent could send.
        r = subprocess.run([a.crun, "status", url, "--stacks", "--json"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and json.loads(r.stdout)["groups"][1]["ranks"] == [[6, 6]],
              f"crun status --stacks --json: rc {r.returncode} {r.stdout[-500:]} {r.stderr[-500:]}")
        r = subprocess.run([a.crun, "status", url, "--stacks"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and "\n  rank 6 (the odd one out): stuck_here \u2190 main\n      stuck_here (train.py:12)\n" in r.stdout,
              f"crun status --stacks: rc {r.returncode} {r.stdout[-1000:]} {r.stderr[-500:]}")
        profile = tempfile.mkdtemp(prefix="crun-chromium-")
        dom = subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                              "--disable-extensions", f"--user-data-dir={profile}", "--virtual-time-budget=10000",
                              "--dump-dom", url], capture_output=True, text=True, timeout=120)
        shutil.rmtree(profile, ignore_errors=True)
        html = dom.stdout
        check(dom.returncode == 0, f"chromium --dump-dom rc {dom.returncode}: {dom.stderr[-2000:]}")
        check(re.search(r'<details class="stack-group odd"><summary>rank 6 \(the odd one out\): stuck_here \u2190 main'
                        r'</summary><pre>stuck_here \(train.py:12\)\nmain \(train.py:80\)</pre>', html) is not None,
              "the page's odd group, marked, with its frames")
        check(re.search(r'<details class="stack-group"><summary>ranks 0-5, 7: all_reduce \u2190 main</summary>', html)
              is not None, "the page's other group")
        check("attempt 0, 8 rank(s)" in html, "the page's stacks header")
    finally:
        server.shutdown()


# A worker beating every 200 ms through its heartbeat file (base/heartbeat_file.h: step, then the
# monotonic time in ns) until it is stopped.
BEATER = """import mmap, os, struct, time
beat = mmap.mmap(os.open(os.environ["CRUN_HEARTBEAT_FILE"], os.O_RDWR), 16)
step = 0
while True:
    beat[:] = struct.pack("=qq", step, time.monotonic_ns())
    step += 1
    time.sleep(0.2)
"""


def case_page_heartbeat(a):
    """The page shows the heartbeat timeout in force: the value --heartbeat-timeout auto chose, as
    /status has it."""
    chromium = shutil.which("chromium")
    if not check(chromium is not None, "chromium is not installed (scripts/install-deps.sh installs it)"):
        return
    job = Job(["--nproc-per-node", "2", "--heartbeat-timeout", "auto", "--initial-heartbeat-timeout", "30", "--no-python"],
              a.crun, "/usr/bin/python3", ["-c", BEATER])
    try:
        chosen = wait_for(lambda: (lambda t: t if "(auto, " in t else None)(job.status()["node"]["heartbeat_timeout"]),
                          "the auto heartbeat timeout in /status")
        check(re.fullmatch(r"\d+ ms \(auto, [\d.]+ x \d+ ms\)", chosen) is not None, f"/status heartbeat_timeout {chosen!r}")
        profile = tempfile.mkdtemp(prefix="crun-chromium-")
        dom = subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                              "--disable-extensions", f"--user-data-dir={profile}", "--virtual-time-budget=10000",
                              "--dump-dom", f"http://127.0.0.1:{job.port}/"], capture_output=True, text=True, timeout=120)
        shutil.rmtree(profile, ignore_errors=True)
        check(dom.returncode == 0, f"chromium --dump-dom rc {dom.returncode}: {dom.stderr[-2000:]}")
        # The value may be learnt again between the two reads (each start learns anew; this one
        # does not restart), so the page's is read back and must be auto's, and /status's now.
        row = re.search(r'<tr data-node="0">(.*?)</tr>', dom.stdout)
        shown = row and re.search(r'<td class="hb-timeout">([^<]*)</td>', row.group(1))
        check(shown is not None and re.fullmatch(r"\d+ ms \(auto, [\d.]+ x \d+ ms\)", shown.group(1)) is not None,
              f"the page's heartbeat timeout of node 0: {shown.group(1) if shown else dom.stdout[-2000:]!r}")
        if shown:
            now = job.status()["node"]["heartbeat_timeout"]
            check(shown.group(1) in (chosen, now), f"the page shows {shown.group(1)!r}, /status said {chosen!r} and {now!r}")
    finally:
        job.stop()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--crun", required=True)
    p.add_argument("--worker", required=True)
    p.add_argument("--case", required=True, choices=["endpoint", "page", "bad_http", "errors", "stopping",
                                                       "page_stacks", "page_heartbeat"])
    p.add_argument("--artifacts", default=os.path.join(tempfile.gettempdir(), "crun-test-artifacts"))
    a = p.parse_args()
    if a.case in ("endpoint",) and shutil.which("promtool") is None:
        print("FAIL: promtool is not installed (scripts/install-deps.sh installs prometheus)")
        return 1
    globals()["case_" + a.case](a)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print(f"ops {a.case}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
