#!/usr/bin/env python3
"""--collapse-logs end to end: the real crun, real worker processes (collapse_worker.py).

Usage: collapse_cases.py --crun CRUN_BINARY --case CASE

  same      8 ranks print the same 1,000 lines and one line of their own, on stdout and on stderr
            (--tee 3, --log-dir; then --redirects 1 --tee 2): with --collapse-logs the console shows
            each of the 1,000 once as "[default0-7]:..." and the 8 single lines with their rank's
            prefix; without it, all 8,008; each rank's log files are byte-identical in both runs.
            The window is 60 s: every line went out because all ranks printed it, not by the clock.
  late      4 ranks, window 0.3 s: ranks 0-2 print a line; rank 3 prints it only once the test has
            seen "[default0-2]:same line" (a FIFO it blocks on): it gets a line of its own
  streams   4 ranks alternate stdout and stderr lines, no --tee: each stream collapses on its own,
            in order, every line prefixed (a collapsed line must say whose it is)
  template  TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE with ${rank} and ${local_rank}: the range fills both
  flood     4 ranks, window 60 s, rank 3 holds back: of the 3 others' 30,000 distinct lines, 20,000
            reach the console while rank 3 still has printed nothing (only the bound on held lines
            lets them go); the rest once it has
  held      stdout and stderr one pipe (2>&1), window 60 s: a line held for a silent rank goes out
            before crun's own line about SIGTERM; a line without newline goes out at the worker's
            end with a newline and its prefix; crun does not wait for the window to end
  events    --event-log-handler console, one pipe (2>&1), window 60 s, 2 ranks: rank 1 prints a line and
            exits while rank 0 prints nothing; its worker_exit event comes after that line (held for
            the silent rank, it goes out first), each event a whole line
  usage     bad --collapse-window / PET_COLLAPSE_LOGS / PET_COLLAPSE_WINDOW: exit 2, one line
"""
import argparse
import filecmp
import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "collapse_worker.py")
RUN_TIMEOUT_S = 45


class Crun:
    """crun in the background, its stdout and stderr read as they come (or one pipe for both)."""

    def __init__(self, args, env=None, merged=False):
        self.cond = threading.Condition()
        self.text = {"out": "", "err": ""}
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                                     env={**os.environ, "PYTHON_EXEC": "/usr/bin/python3", **(env or {})})
        self.readers = [threading.Thread(target=self._read, args=(self.proc.stdout, "out"), daemon=True)]
        if not merged:
            self.readers.append(threading.Thread(target=self._read, args=(self.proc.stderr, "err"), daemon=True))
        for t in self.readers:
            t.start()

    def _read(self, pipe, key):
        while True:
            chunk = pipe.read1(65536)
            if not chunk:
                return
            with self.cond:
                self.text[key] += chunk.decode()
                self.cond.notify_all()

    def wait_for(self, pred, seconds=30, what=""):
        """Waits (on the readers' notifications, bounded) until pred(stdout text) holds."""
        deadline = time.monotonic() + seconds
        with self.cond:
            while not pred(self.text["out"]):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"not seen in {seconds} s: {what}; stdout ends with {self.text['out'][-2000:]!r}")
                self.cond.wait(left)

    def finish(self):
        rc = self.proc.wait(timeout=RUN_TIMEOUT_S)
        for t in self.readers:
            t.join(RUN_TIMEOUT_S)
        return rc, self.text["out"], self.text["err"]


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def crun_cmd(crun, nproc, extra, mode):
    return [crun, "--standalone", "--nproc-per-node", str(nproc), *extra, WORKER, mode]


def run(crun, nproc, extra, mode, env=None, merged=False):
    c = Crun(crun_cmd(crun, nproc, extra, mode), env, merged)
    return c.finish()


def worker_lines(text, prefix="["):
    return [l for l in text.splitlines() if l.startswith(prefix)]


def make_gate(tmp):
    path = os.path.join(tmp, "gate")
    os.mkfifo(path)
    return path


def open_gate(path):
    with open(path, "w") as f:  # the blocked reader's open() returns; it reads EOF
        f.write("go\n")


def log_files(log_dir):
    (run_dir,) = glob.glob(os.path.join(log_dir, "*"))
    files = sorted(glob.glob(os.path.join(run_dir, "attempt_0", "*", "std*.log")))
    return run_dir, [os.path.relpath(f, run_dir) for f in files]


def case_same(crun, tmp):
    for streams in (["--tee", "3"], ["--redirects", "1", "--tee", "2"]):
        runs = {}
        for name, flags in (("plain", []), ("collapsed", ["--collapse-logs", "--collapse-window", "60"])):
            log_dir = os.path.join(tmp, "-".join(streams) + name)
            t0 = time.monotonic()
            rc, out, err = run(crun, 8, [*streams, "--log-dir", log_dir, *flags], "same")
            expect(rc == 0, f"{name} {streams}: exit {rc}; stderr {err[-2000:]}")
            runs[name] = (log_dir, out, err, time.monotonic() - t0)
        stdout_teed = streams == ["--tee", "3"]
        _, plain_out, plain_err, _ = runs["plain"]
        _, out, err, took = runs["collapsed"]
        expect(took < 40, f"the collapsed run took {took:.1f} s: lines waited for the 60 s window")
        # Without collapsing: every rank's every line.
        expect(len(worker_lines(plain_err)) == 8 * 1001, f"plain stderr: {len(worker_lines(plain_err))} worker lines")
        expect(len(worker_lines(plain_out)) == (8 * 1001 if stdout_teed else 0), "plain stdout")
        # With it: the 1,000 shared lines once each, in order, then the 8 single ones.
        want_err = [f"[default0-7]:same err {i}" for i in range(1000)]
        got_err = worker_lines(err)
        expect(got_err[:1000] == want_err, f"collapsed stderr: {got_err[:5]} ... ({len(got_err)} lines)")
        expect(sorted(got_err[1000:]) == [f"[default{r}]:only err {r}" for r in range(8)], f"stderr singles: {got_err[1000:]}")
        if stdout_teed:
            got = worker_lines(out)
            expect(got[:1000] == [f"[default0-7]:same line {i}" for i in range(1000)], f"collapsed stdout: {got[:5]}")
            expect(sorted(got[1000:]) == [f"[default{r}]:only rank {r}" for r in range(8)], f"stdout singles: {got[1000:]}")
        else:
            expect(worker_lines(out) == [], "stdout is redirected: nothing on the console")
        # The logs: byte for byte the same with and without.
        plain_dir, plain_files = log_files(runs["plain"][0])
        coll_dir, coll_files = log_files(runs["collapsed"][0])
        expect(plain_files == coll_files and len(coll_files) == 16, f"log files: {plain_files} vs {coll_files}")
        for f in coll_files:
            expect(filecmp.cmp(os.path.join(plain_dir, f), os.path.join(coll_dir, f), shallow=False), f"{f} differs")
            expect(os.path.getsize(os.path.join(coll_dir, f)) > 1000 * 10, f"{f} is short")


def case_late(crun, tmp):
    gate = make_gate(tmp)
    c = Crun(crun_cmd(crun, 4, ["--collapse-logs", "--collapse-window", "0.3"], "gate"), {"COLLAPSE_GATE": gate})
    c.wait_for(lambda out: "[default0-2]:same line\n" in out, what="ranks 0-2's line, once its window ended")
    open_gate(gate)
    rc, out, err = c.finish()
    expect(rc == 0, f"exit {rc}: {err}")
    expect(worker_lines(out) == ["[default0-2]:same line", "[default3]:same line"], f"stdout: {out!r}")


def case_streams(crun, tmp):
    rc, out, err = run(crun, 4, ["--collapse-logs", "--collapse-window", "60"], "streams")
    expect(rc == 0, f"exit {rc}: {err}")
    expect(worker_lines(out) == [f"[default0-3]:out {i}" for i in range(200)], f"stdout: {out[:500]!r}")
    got = worker_lines(err)
    expect(got[:200] == [f"[default0-3]:err {i}" for i in range(200)], f"stderr: {got[:5]}")
    expect(sorted(got[200:]) == [f"[default{r}]:err rank {r}" for r in range(4)], f"stderr singles: {got[200:]}")
    expect("out " not in err and "err " not in out, "the streams mixed")


def case_template(crun, tmp):
    env = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "<${role_name} g${rank} l${local_rank}> "}
    rc, out, err = run(crun, 4, ["--collapse-logs", "--collapse-window", "60"], "streams", env)
    expect(rc == 0, f"exit {rc}: {err}")
    got = worker_lines(out, "<")
    expect(got == [f"<default g0-3 l0-3> out {i}" for i in range(200)], f"stdout: {got[:3]}")
    expect("<default g2 l2> err rank 2" in err.splitlines(), f"stderr: {err[-500:]!r}")


def case_flood(crun, tmp):
    gate = make_gate(tmp)
    lines = 10000
    c = Crun(crun_cmd(crun, 4, ["--collapse-logs", "--collapse-window", "60"], "flood"),
             {"COLLAPSE_GATE": gate, "FLOOD_LINES": str(lines)})
    # Rank 3 has printed nothing: no line can be complete, and the window is a minute away. Only
    # the bound (1 MiB held, about 3,700 of these lines) lets the others' lines go.
    c.wait_for(lambda out: out.count("\n") >= 2 * lines, seconds=40, what=f"{2 * lines} lines before rank 3 printed")
    open_gate(gate)
    rc, out, err = c.finish()
    expect(rc == 0, f"exit {rc}: {err}")
    got = worker_lines(out)
    expect(len(got) == 3 * lines + 1 and got.count("[default3]:last done") == 1, f"{len(got)} lines")
    for r in range(3):
        mine = [l for l in got if l.startswith(f"[default{r}]:")]
        expect([l.split()[1] for l in mine] == [str(i) for i in range(lines)], f"rank {r}'s lines out of order or lost")


def case_held(crun, tmp):
    gate = make_gate(tmp)
    log_dir = os.path.join(tmp, "logs")
    c = Crun(crun_cmd(crun, 2, ["--collapse-logs", "--collapse-window", "60", "--tee", "3", "--log-dir", log_dir], "held"),
             {"COLLAPSE_GATE": gate}, merged=True)

    def logged(rank, text):
        files = glob.glob(os.path.join(log_dir, "*", "attempt_0", str(rank), "stdout.log"))
        return bool(files) and text in open(files[0]).read()

    # crun writes a log file as it reads the pipe: once both are there it has read both lines
    # (the newline too: Python may write a line and its newline apart).
    deadline = time.monotonic() + 30
    while not (logged(0, "held line\n") and logged(1, "partial without newline")):
        expect(time.monotonic() < deadline, "the workers' lines never reached their log files")
        time.sleep(0)  # yields; the files have no event to wait on
    t0 = time.monotonic()
    c.proc.send_signal(15)
    rc, out, _ = c.finish()
    took = time.monotonic() - t0
    expect(took < 30, f"crun took {took:.1f} s to stop: it waited for the window")
    lines = out.splitlines()
    expect("[default0]:held line" in lines, f"output: {out!r}")
    expect("[default1]:partial without newline" in lines, f"the partial line: {out!r}")
    sigterm = next((i for i, l in enumerate(lines) if "SIGTERM" in l), None)
    expect(sigterm is not None, f"no SIGTERM line: {out!r}")
    expect(lines.index("[default0]:held line") < sigterm, f"the held line came after crun's own: {out!r}")
    expect(rc != 0, "a stopped job exits non-zero")


def case_events(crun, tmp):
    gate = make_gate(tmp)
    # Two ranks: one waits at the gate (a FIFO lets in the readers that have opened it: one is sure).
    c = Crun(crun_cmd(crun, 2, ["--collapse-logs", "--collapse-window", "60", "--event-log-handler", "console"], "exits"),
             {"COLLAPSE_GATE": gate}, merged=True)

    def events(out):
        return [json.loads(l[len("crun: event "):]) for l in out.splitlines() if l.startswith("crun: event ")]

    def last_exited(out):
        return any(e["event"] == "worker_exit" and e["local_rank"] == 1 for e in events(out))

    c.wait_for(last_exited, what="the last rank's worker_exit event")
    open_gate(gate)
    rc, out, _ = c.finish()
    expect(rc == 0, f"exit {rc}: {out[-2000:]!r}")
    lines = out.splitlines()
    expect(worker_lines(out) == ["[default1]:last line"], f"worker lines: {worker_lines(out)}")
    exit_at = next(i for i, l in enumerate(lines) if l.startswith("crun: event ") and '"worker_exit"' in l and
                   json.loads(l[len("crun: event "):])["local_rank"] == 1)
    expect(lines.index("[default1]:last line") < exit_at, f"rank 1's worker_exit event came before its line: {out!r}")
    got = [e["event"] for e in events(out)]  # each event line whole JSON, none lost
    expect(got.count("worker_start") == 2 and got.count("worker_exit") == 2 and got[-1] == "stop", f"events: {got}")


def case_usage(crun, tmp):
    for args, env, needle in (
        (["--collapse-window", "abc"], {}, "--collapse-window"),
        (["--collapse-window", "0"], {}, "--collapse-window"),
        (["--collapse-window", "61"], {}, "--collapse-window"),
        (["--collapse-logs"], {"PET_COLLAPSE_WINDOW": "-1"}, "PET_COLLAPSE_WINDOW"),
        ([], {"PET_COLLAPSE_LOGS": "maybe"}, "PET_COLLAPSE_LOGS"),
    ):
        p = subprocess.run([crun, *args, "/bin/true"], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                           env={**os.environ, **env})
        expect(p.returncode == 2, f"{args} {env}: exit {p.returncode}")
        expect(len(p.stderr.splitlines()) == 1 and needle in p.stderr, f"{args} {env}: {p.stderr!r}")
    p = subprocess.run([crun, "--help"], capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    expect("--collapse-logs" in p.stdout and "per node only" in p.stdout, "--help lists --collapse-logs")
    p = subprocess.run([crun, "--print-config", "/bin/true"], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                       env={**os.environ, "PET_COLLAPSE_LOGS": "1"})
    expect("collapse_logs = 1  (PET_COLLAPSE_LOGS)" in p.stdout, f"--print-config: {p.stdout!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--crun", required=True)
    ap.add_argument("--case", required=True)
    a = ap.parse_args()
    case = globals().get("case_" + a.case)
    if case is None:
        sys.exit(f"unknown case {a.case}")
    with tempfile.TemporaryDirectory() as tmp:
        case(os.path.abspath(a.crun), tmp)
    print(f"{a.case}: ok")


if __name__ == "__main__":
    main()
