#!/usr/bin/env python3
"""Node checks (--node-check and the built-in ones) end to end: the real crun, real processes.

Usage: node_check_cases.py --crun CRUN_BINARY --fake-nvml DIR --case CASE

  fails       --standalone, a check that exits 3: crun exits 9 at once, one line with its stderr;
              no worker ran; the event log has node_check_failed with the check and the reason
  hangs       a check that never ends: killed at --node-check-timeout, exit 9, one line
  floods      a check that prints 200 MB then fails: crun's memory stays bounded, one line
  missing     a check whose program does not exist: exit 9, one line "not found"
  recovers    one node of a c10d run, a check that fails while a file exists: the agent does not
              join, says so once per try, shows it in /status and the metrics; the test removes the
              file and the agent joins after --node-check-interval, the job succeeds
  join_timeout  the same, the file never removed: exit 9 when the join timeout ends
  gpu_wait    a fake libnvidia-ml.so.1 (CRUN_FAKE_NVML_FILE) on LD_LIBRARY_PATH: the first start's
              worker leaves 5000 MiB "used" and fails; the restart waits (one line) until the test
              lowers it, then the job succeeds
  gpu_timeout the same, never lowered: exit 9 at --node-check-timeout, the GPU named in one line
  gpu_off     --no-node-check gpu: the same run restarts at once
  disk_full   --log-dir on a full 64 KiB tmpfs (a private mount namespace): the disk check refuses
              the node before any worker starts, exit 9, one line naming the directory
  restarts    a command check before each start of a job that restarts, 20 times: every run ends 0
              (the check's process is the agent's to reap: the subreaper neither reaps nor kills it)
"""
import argparse
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

RUN_TIMEOUT_S = 60


class Crun:
    """crun running in the background; its stderr read line by line as it comes."""

    def __init__(self, args, env=None):
        self.lines = []
        self.cond = threading.Condition()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        self.out = ""
        self.readers = [threading.Thread(target=self._read, daemon=True), threading.Thread(target=self._read_out, daemon=True)]
        for t in self.readers:
            t.start()

    def _read(self):
        for line in self.proc.stderr:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()

    def _read_out(self):
        self.out = self.proc.stdout.read()

    def wait_line(self, pattern, seconds=30):
        deadline = time.monotonic() + seconds
        with self.cond:
            while True:
                for line in self.lines:
                    m = re.search(pattern, line)
                    if m:
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None and not self._more_coming():
                    raise AssertionError(f"no line matching {pattern!r} in {seconds} s; lines: {self.lines}")
                self.cond.wait(min(left, 0.5))

    def _more_coming(self):
        return False

    def wait(self):
        rc = self.proc.wait(timeout=RUN_TIMEOUT_S)
        for t in self.readers:  # at EOF: what they read is all in self.lines and self.out
            t.join(timeout=RUN_TIMEOUT_S)
        return rc


def run(args, env=None):
    """crun to its end: (rc, stderr lines, seconds)."""
    start = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env={**os.environ, **(env or {})})
    return p.returncode, [l for l in p.stderr.splitlines() if l], time.monotonic() - start


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def check_lines(lines, needle):
    """Exactly one crun line mentions the node check, and it holds `needle`."""
    said = [l for l in lines if "node check" in l]
    expect(len(said) == 1, f"expected one node-check line, got {said} (all: {lines})")
    expect(needle in said[0], f"{needle!r} not in {said[0]!r}")
    return said[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def case_fails(crun, tmp, fake):
    marker = os.path.join(tmp, "worker-ran")
    events = os.path.join(tmp, "events.jsonl")
    rc, lines, _ = run([crun, "--standalone", "--event-log-handler", "jsonl:" + events,
                        "--node-check", "sh -c 'echo first >&2; echo scratch full >&2; exit 3'",
                        "--no-python", "touch", marker])
    expect(rc == 9, f"rc {rc}, lines {lines}")
    line = check_lines(lines, "exit code 3: first | scratch full")
    expect(len(lines) == 1, f"more than one line: {lines}")
    expect(not os.path.exists(marker), "a worker ran on an unhealthy node")
    evs = [json.loads(l) for l in open(events)]
    failed = [e for e in evs if e["event"] == "node_check_failed"]
    expect(len(failed) == 1 and failed[0]["reason"] == "exit code 3: first | scratch full", f"events: {evs}")
    print(line)


def case_hangs(crun, tmp, fake):
    rc, lines, took = run([crun, "--standalone", "--node-check-timeout", "1", "--node-check", "sh -c 'echo probing; sleep 300'",
                           "--no-python", "true"])
    expect(rc == 9, f"rc {rc}, lines {lines}")
    print(check_lines(lines, "no answer within 1 s (killed): probing"))
    expect(took < 10, f"took {took:.1f} s")


def case_floods(crun, tmp, fake):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    rc, lines, _ = run([crun, "--standalone", "--node-check",
                        "sh -c 'head -c 200000000 /dev/zero | tr \"\\0\" y; echo; echo out of memory >&2; exit 1'",
                        "--no-python", "true"])
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    expect(rc == 9, f"rc {rc}")
    line = check_lines(lines, "out of memory")
    expect(len(line) < 1500, f"a line of {len(line)} characters")
    # crun (the largest child so far) never held the 200 MB it read.
    expect(peak_kib < 64 * 1024, f"peak resident memory {peak_kib} KiB (before: {before})")
    print(line[:200], f"... peak {peak_kib} KiB")


def case_missing(crun, tmp, fake):
    rc, lines, _ = run([crun, "--standalone", "--node-check", "/nonexistent/gpu-health --all", "--no-python", "true"])
    expect(rc == 9, f"rc {rc}")
    print(check_lines(lines, "node check '/nonexistent/gpu-health --all': not found"))


def one_node_c10d(crun, tmp, extra, program):
    return [crun, "--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
            "--rdzv-id", "nc", *extra, "--no-python", *program]


def http(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read().decode()


def case_recovers(crun, tmp, fake):
    bad = os.path.join(tmp, "bad")
    open(bad, "w").close()
    c = Crun(one_node_c10d(crun, tmp, ["--node-check", f"sh -c 'test ! -e {bad} || {{ echo {bad} is there >&2; exit 1; }}'",
                                       "--node-check-interval", "0.3", "--health-check-port", "0"],
                           ["sh", "-c", "echo worker ran"]))
    port = int(c.wait_line(r"health check, metrics and status at http://127.0.0.1:(\d+)/").group(1))
    c.wait_line(r"not joining, next try in 0\.3 s")
    status = json.loads(http(port, "/status"))
    expect(bad in status["node"]["node_check"] and status["node"]["state"] == "unhealthy", f"status: {status['node']}")
    metrics = http(port, "/metrics")
    expect("crun_node_healthy 0" in metrics, "crun_node_healthy is not 0")
    expect(re.search(r'crun_node_check_failures_total\{check="[^"]+"\} [1-9]', metrics), "no failure counted")
    os.unlink(bad)
    c.wait_line("node checks pass again; joining")
    rc = c.wait()
    expect(rc == 0, f"rc {rc}, lines {c.lines}")
    expect("worker ran" in c.out, f"stdout {c.out!r}")
    print("joined after the file was removed;", len([l for l in c.lines if "not joining" in l]), "unhealthy tries")


def case_join_timeout(crun, tmp, fake):
    rc, lines, took = run(one_node_c10d(crun, tmp, ["--node-check", "false", "--node-check-interval", "0.2",
                                                    "--rdzv-conf", "join_timeout=1"], ["true"]))
    expect(rc == 9, f"rc {rc}, lines {lines}")
    last = [l for l in lines if "end of the join timeout" in l]
    expect(len(last) == 1 and "node check 'false': exit code 1" in last[0], f"lines {lines}")
    expect(took < 10, f"took {took:.1f} s")
    print(last[0])


GPU_WORKER = r'''
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then echo 5000 > "$CRUN_FAKE_NVML_FILE"; exit 1; fi
echo "restart $TORCHELASTIC_RESTART_COUNT ran"
'''


def gpu_run(crun, tmp, fake, extra):
    used = os.path.join(tmp, "used-mib")
    with open(used, "w") as f:
        f.write("100\n")
    env = {"CRUN_FAKE_NVML_FILE": used, "LD_LIBRARY_PATH": fake}
    return used, Crun([crun, "--standalone", "--max-restarts", "1", *extra, "--no-python", "sh", "-c", GPU_WORKER], env)


def case_gpu_wait(crun, tmp, fake):
    used, c = gpu_run(crun, tmp, fake, ["--node-check-timeout", "30"])
    c.wait_line(r"waiting for GPU memory to be freed: GPU 0 still holds 5000 MiB \(100 MiB before the first start\)")
    expect(c.proc.poll() is None, "crun ended while the GPU was held")
    expect("restart 1 ran" not in c.out, "restarted on a GPU still held")
    with open(used + ".tmp", "w") as f:
        f.write("120\n")
    os.rename(used + ".tmp", used)
    rc = c.wait()
    expect(rc == 0, f"rc {rc}, lines {c.lines}")
    expect("restart 1 ran" in c.out, f"stdout {c.out!r}")
    print("the restart waited for the GPU's memory:", [l for l in c.lines if "GPU" in l])


def case_gpu_timeout(crun, tmp, fake):
    start = time.monotonic()
    used, c = gpu_run(crun, tmp, fake, ["--node-check-timeout", "1"])
    rc = c.wait()
    took = time.monotonic() - start
    expect(rc == 9, f"rc {rc}, lines {c.lines}")
    print(check_lines(c.lines, "node check gpu: GPU 0 still holds 5000 MiB (100 MiB before the first start) after 1 s"))
    expect("restart 1 ran" not in c.out, "restarted on a GPU still held")
    expect(took < 15, f"took {took:.1f} s")


def case_gpu_off(crun, tmp, fake):
    used, c = gpu_run(crun, tmp, fake, ["--node-check-timeout", "30", "--no-node-check", "gpu"])
    rc = c.wait()
    expect(rc == 0 and "restart 1 ran" in c.out, f"rc {rc}, lines {c.lines}")
    expect(not any("GPU" in l for l in c.lines), f"lines {c.lines}")
    print("no gpu check: restarted at once")


def case_restarts(crun, tmp, fake):
    for i in range(20):
        marker = os.path.join(tmp, f"failed-{i}")
        worker = f"if [ ! -e {marker} ]; then touch {marker}; exit 1; fi; echo attempt $TORCHELASTIC_RESTART_COUNT"
        rc, lines, took = run([crun, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "--node-check", "/bin/true",
                               "--no-python", "sh", "-c", worker])
        expect(rc == 0, f"run {i}: rc {rc}, lines {lines}")
        expect(took < 20, f"run {i} took {took:.1f} s")
    print("20 runs with a restart and a command check, all 0")


def case_disk_full(crun, tmp, fake):
    logs = os.path.join(tmp, "logs")
    os.mkdir(logs)
    marker = os.path.join(tmp, "worker-ran")
    script = 'mount -t tmpfs -o size=64k crun-node-check-full "$0" || exit 90; head -c 1M /dev/zero >"$0/filler" 2>/dev/null; exec "$@"'
    rc, lines, _ = run(["/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, logs,
                        crun, "--standalone", "--log-dir", logs, "--tee", "3", "--no-python", "touch", marker])
    expect(rc == 9, f"rc {rc}, lines {lines}")
    print(check_lines(lines, "node check disk: "))
    expect(not os.path.exists(marker), "a worker ran on a full disk")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--crun", required=True)
    ap.add_argument("--fake-nvml", required=True)
    ap.add_argument("--case", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="crun-node-check-") as tmp:
        globals()["case_" + a.case](a.crun, tmp, a.fake_nvml)
    print("ok", a.case)


if __name__ == "__main__":
    main()
