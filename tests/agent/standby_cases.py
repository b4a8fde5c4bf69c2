#!/usr/bin/env python3
"""Standby workers (--standby-workers) end to end: crun with real Python workers.

Usage: standby_cases.py --crun CRUN_BINARY --case CASE   (Python: $PYTHON_EXEC, else /usr/bin/python3)

Every case runs a small program under crun on one node with two local ranks; rank 1 fails in
restart 0 so that restart 1's workers are the standbys (or cold starts, to compare). The preload
is a small module written next to the program (standby_mark), never torch: these cases are fast.

  fields          a script, a -m module and a zip application: what the program sees (environment, argv, sys.path,
                  __main__'s fields, cwd, descriptors, process group, signals, CPUs, cgroup,
                  modules) is the same, field by field, started by a standby as started cold
  rank_at_import  module-level code reads the round's RANK and restart count; the preload saw none
                  of the per-round variables, and its lines reach crun's log tagged standby<N>
  preload_raises  the preload raises: each rank's standby becomes its cold start, one line saying why
  preload_raises_taken  the preload raises after the standby was given the round: it becomes the
                  cold start itself, one line saying why
  standby_killed  rank 1's standby is SIGKILLed while it waits: rank 1 starts cold, one line
  max_restarts    --max-restarts counts as without standbys (on, off, and with a failing preload)
  exits           an uncaught exception (its traceback), sys.exit(5) and KeyboardInterrupt end the
                  worker as in a cold start
  lifetime        standbys end with the job, and when crun is SIGKILLed
  no_python       --standby-workers / PET_STANDBY_WORKERS for a program Python does not run: one
                  notice, cold starts, --print-config says why
"""
import argparse
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

PYTHON = os.environ.get("PYTHON_EXEC") or "/usr/bin/python3"
RUN_TIMEOUT_S = 60

# What the programs share: the test's sync folder (CRUN_TEST_SYNC_DIR, the same path in every run),
# where a rank says it is done and each preload says it has run. Rank 1 of restart 0 fails only
# once rank 0 of restart 0 is done and, when the run has standbys (the file expect-standbys), once
# both standbys have preloaded: so restart 1 is never started before them.
SYNC = r'''
import os as _os, sys as _sys, time as _time
def _sync_path(name):
    return _os.path.join(_os.environ["CRUN_TEST_SYNC_DIR"], name)
def _done(name):
    with open(_sync_path(name) + ".tmp", "w") as f:
        f.write(str(_os.getpid()))
    _os.rename(_sync_path(name) + ".tmp", _sync_path(name))
def _wait_for(*names, seconds=30):
    deadline = _time.monotonic() + seconds
    while not all(_os.path.exists(_sync_path(n)) for n in names):
        if _time.monotonic() > deadline:
            _sys.exit(f"waited {seconds} s for {names}")
        _time.sleep(0.01)
def _rank1_fails_in_restart0(code=1):
    rank, restart = _os.environ["RANK"], _os.environ["TORCHELASTIC_RESTART_COUNT"]
    _done(f"rank{rank}-restart{restart}")
    if (rank, restart) == ("1", "0"):
        standbys = ["standby0", "standby1"] if _os.path.exists(_sync_path("expect-standbys")) else []
        _wait_for("rank0-restart0", *standbys)
        _sys.exit(code)
'''

# Dumps what the program sees to OUT/rank<R>-restart<N>.json; rank 1 fails in restart 0.
PROBE = SYNC + r'''
import json, os, re, signal, sys
_main = sys.modules["__main__"]
def _spec(s):
    return None if s is None else {"name": s.name, "origin": s.origin, "parent": s.parent,
                                   "loader": type(s.loader).__name__, "cached": s.cached}
def _status(field):
    with open("/proc/self/status") as f:
        return next(l.split(":", 1)[1].strip() for l in f if l.startswith(field + ":"))
def _fd_table():
    out = {}
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            out[fd] = re.sub(r"\[\d+\]", "[N]", os.readlink(f"/proc/self/fd/{fd}"))
        except FileNotFoundError:
            pass
    return out
seen = {
    "env": dict(os.environ),
    "argv": sys.argv, "orig_argv": getattr(sys, "orig_argv", None), "path": sys.path,
    "file": globals().get("__file__"), "name": __name__, "spec": _spec(__spec__), "package": __package__,
    "loader": [type(__loader__).__name__, getattr(__loader__, "name", None), getattr(__loader__, "path", None)],
    "cached": globals().get("__cached__"), "doc": __doc__,
    "main_is_globals": _main.__dict__ is globals(), "main_keys": sorted(k for k in vars(_main) if k.startswith("__")),
    "cwd": os.getcwd(), "fds": _fd_table(),
    "pgid_is_pid": os.getpgid(0) == os.getpid(), "sid": os.getsid(0),
    "signals": {s.name: str(signal.getsignal(s)) for s in signal.valid_signals() if isinstance(s, signal.Signals)},
    "sig_blocked": _status("SigBlk"), "sig_ignored": _status("SigIgn"), "sig_caught": _status("SigCgt"),
    "cpus": sorted(os.sched_getaffinity(0)), "cgroup": open("/proc/self/cgroup").read(),
    "flags": repr(sys.flags), "executable": sys.executable,
    "modules": sorted(sys.modules), "preloaded": "standby_mark" in sys.modules,
    "importer_cache": sorted(f"{k} {type(v).__name__}" for k, v in sys.path_importer_cache.items()),
}
rank, restart = os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
with open(os.path.join(sys.argv[1], f"rank{rank}-restart{restart}.json"), "w") as f:
    json.dump(seen, f)
_rank1_fails_in_restart0()
'''

MARK = SYNC + r'''
import os, sys
PER_ROUND = ("RANK", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
             "CRUN_HEARTBEAT_FILE", "CRUN_STATE_DIR", "CRUN_CONTROL_FILE")
seen = [k for k in PER_ROUND if k in os.environ]
print(f"preload in pid {os.getpid()} local rank {os.environ.get('LOCAL_RANK')} saw per-round variables {seen}",
      file=sys.stderr, flush=True)
_done(f"standby{os.environ['LOCAL_RANK']}")
'''


class CaseFailed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise CaseFailed(what)


class Run:
    def __init__(self, cmd, rc, out, err):
        self.cmd, self.rc, self.out, self.err = cmd, rc, out, err

    def describe(self):
        return (f"--- {' '.join(self.cmd)}\n    exit {self.rc}\n--- stdout:\n{self.out}"
                f"--- stderr (last 60 lines):\n" + "\n".join(self.err.splitlines()[-60:]))


def base_env():
    env = {k: v for k, v in os.environ.items()
           if not re.match(r"^(PET_.*|RANK|LOCAL_RANK|WORLD_SIZE|MASTER_.*|TORCHELASTIC_.*|GROUP_.*|ROLE_.*)$", k)}
    env["PYTHON_EXEC"] = PYTHON
    env["CRUN_TEST_SYNC_DIR"] = SYNC_DIR
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def crun(args, cwd, standby, preload="standby_mark", env=None, restarts=1, nproc=2, port=None):
    cmd = [ARGS.crun, "--standalone", "--rdzv-id", "standby-test", "--master-port", str(port or free_port()),
           "--nproc-per-node", str(nproc),
           "--max-restarts", str(restarts)]
    if standby:
        cmd += ["--standby-workers", "--standby-preload", preload]
    cmd += args
    shutil.rmtree(SYNC_DIR, ignore_errors=True)
    os.mkdir(SYNC_DIR)
    if standby:
        write(os.path.join(SYNC_DIR, "expect-standbys"), "")
    p = subprocess.run(cmd, cwd=cwd, env={**base_env(), **(env or {})}, capture_output=True, text=True,
                       timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
    return Run(cmd, p.returncode, p.stdout, p.stderr)


def cold_lines(run):
    return [l for l in run.err.splitlines() if " starts cold: " in l]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


# ---- cases ---------------------------------------------------------------------------------


def normalized(seen):
    """What may differ between two crun runs, masked: the run directory's random name, the agent's
    id (also the job cgroup's name), the state root's name (the agent's pid), the sid (each run has its own), pipe inode numbers (already [N]), the worker's Python stacks file (its pid)."""
    s = json.loads(json.dumps(seen))
    run_dir = os.path.dirname(os.path.dirname(os.path.dirname(s["env"]["TORCHELASTIC_ERROR_FILE"])))
    text = json.dumps(s).replace(run_dir, "<RUN_DIR>").replace(s["env"]["CRUN_AGENT_ID"], "<AGENT_ID>")  # cgroup's too
    if "CRUN_STATE_DIR" in s["env"]:  # the job's state root holds the agent's pid
        text = text.replace(os.path.dirname(s["env"]["CRUN_STATE_DIR"]), "<STATE_ROOT>")
    text = re.sub(r"python_stacks/\d+", "python_stacks/<PID>", text)  # each worker's own dump file
    s = json.loads(text)
    s["sid"] = "<SID>"
    return s


def compare_fields(cold, warm, what):
    # What the preload imported is there besides what a cold start has.
    for key in ("modules", "importer_cache"):
        a, b = set(cold.pop(key)), set(warm.pop(key))
        check(a <= b, f"{what}: {key}: a cold start has, the standby's worker lacks: {sorted(a - b)}")
    check(warm.pop("preloaded") and not cold.pop("preloaded"), f"{what}: the standby run's worker was not the standby")
    for key in sorted(set(cold) | set(warm)):
        if key == "env":
            a, b = cold["env"], warm["env"]
            diff = {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
            check(not diff, f"{what}: environment differs (cold, standby): {diff}")
        else:
            check(cold.get(key) == warm.get(key), f"{what}: {key} differs:\n  cold:    {cold.get(key)!r}\n  standby: {warm.get(key)!r}")


def case_fields(tmp):
    write(os.path.join(tmp, "sub", "probe.py"), PROBE)
    write(os.path.join(tmp, "sub", "standby_mark.py"), MARK)
    write(os.path.join(tmp, "pkg", "__init__.py"), "")
    write(os.path.join(tmp, "pkg", "probe.py"), PROBE)
    write(os.path.join(tmp, "standby_mark.py"), MARK)
    port = free_port()  # the same MASTER_PORT in every run: the environments compare exactly
    import zipfile
    with zipfile.ZipFile(os.path.join(tmp, "app.pyz"), "w") as z:  # a zip application: its __main__
        z.writestr("__main__.py", PROBE)
        z.writestr("standby_mark.py", MARK)
    for label, program, cwd in (("script", ["sub/probe.py"], tmp), ("module", ["-m", "pkg.probe"], tmp),
                                ("zip application", ["app.pyz"], tmp)):
        seen = {}
        for standby in (False, True):
            out = os.path.join(tmp, "out")  # one path: the same argv in both runs
            shutil.rmtree(out, ignore_errors=True)
            os.mkdir(out)
            r = crun(program + [out], cwd, standby, port=port)
            check(r.rc == 0, f"{label}: the job failed\n{r.describe()}")
            check(not cold_lines(r), f"{label}: a cold start with standbys on\n{r.describe()}")
            for rank in (0, 1):
                for restart in (0, 1):
                    dump = os.path.join(out, f"rank{rank}-restart{restart}.json")
                    check(os.path.isfile(dump), f"{label}: no {os.path.basename(dump)}\n{r.describe()}")
                    with open(dump) as f:
                        seen[(standby, rank, restart)] = normalized(json.load(f))
        fields, variables = len(seen[(False, 0, 1)]), len(seen[(False, 0, 1)]["env"])
        for rank in (0, 1):
            compare_fields(seen[(False, rank, 1)], seen[(True, rank, 1)], f"{label}, rank {rank}, restart 1")
            check(not seen[(True, rank, 0)]["preloaded"], f"{label}: restart 0 was not a cold start")
        print(f"{label}: restart 1's workers started by standbys see what cold starts see "
              f"({fields} fields, {variables} variables)")


def case_rank_at_import(tmp):
    write(os.path.join(tmp, "standby_mark.py"), MARK)
    write(os.path.join(tmp, "prog.py"), r'''
import os, sys
RANK = int(os.environ["RANK"])                      # read at import, as many scripts do
RESTART = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"RESULT rank={RANK} restart={RESTART} world={os.environ['WORLD_SIZE']} preloaded={'standby_mark' in sys.modules}", flush=True)
''' + SYNC + "_rank1_fails_in_restart0()\n")
    r = crun(["prog.py"], tmp, True)
    check(r.rc == 0, f"the job failed\n{r.describe()}")
    results = sorted(l for l in r.out.splitlines() if l.startswith("RESULT"))
    want = sorted(f"RESULT rank={k} restart={n} world=2 preloaded={n == 1}" for k in (0, 1) for n in (0, 1))
    check(results == want, f"results {results}, expected {want}\n{r.describe()}")
    for lr in (0, 1):
        check(re.search(rf"^crun: standby{lr}: preload in pid \d+ local rank {lr} saw per-round variables \[\]$", r.err, re.M),
              f"standby {lr}'s preload line is not in crun's log, or it saw a per-round variable\n{r.describe()}")
    print("module-level code read the round's RANK and restart count; the preloads saw no per-round variable")


def case_preload_raises(tmp):
    # The preload says it runs, then fails to import; rank 1 of restart 0 fails once both standbys
    # started it. Each standby, taken before or after its preload raised, becomes the cold start.
    write(os.path.join(tmp, "failing_mark.py"), SYNC + "_done('failing' + _os.environ['LOCAL_RANK'])\nimport no_such_module_for_crun\n")
    write(os.path.join(tmp, "prog.py"), SYNC + r'''
import os, sys
print(f"RESULT rank={os.environ['RANK']} restart={os.environ['TORCHELASTIC_RESTART_COUNT']}", flush=True)
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and os.environ["RANK"] == "1":
    _wait_for("rank0-restart0", "failing0", "failing1")
    sys.exit(1)
_done(f"rank{os.environ['RANK']}-restart{os.environ['TORCHELASTIC_RESTART_COUNT']}")
''')
    r = crun(["prog.py"], tmp, True, preload="json,failing_mark")
    check(r.rc == 0, f"the job failed\n{r.describe()}")
    lines = cold_lines(r)
    want = [f"crun: local rank {lr} starts cold: its standby's preload raised (ModuleNotFoundError: "
            f"No module named 'no_such_module_for_crun')" for lr in (0, 1)]
    check(sorted(lines) == want, f"expected exactly these lines {want}, got {lines}\n{r.describe()}")
    check(r.err.count("restarting the group") == 1, f"a standby's failed preload counted as a failure\n{r.describe()}")
    check(len([l for l in r.out.splitlines() if l.startswith("RESULT")]) == 4, f"missing results\n{r.describe()}")
    # Tagged standby1 when it raised before it was taken, as the worker's stderr after.
    check(re.search(r"^(crun: standby1: |\[default1\]:)?Traceback \(most recent call last\):$", r.err, re.M),
          f"the preload's traceback is not in crun's log\n{r.describe()}")
    print(lines[0])


def case_preload_raises_taken(tmp):
    # Local rank 1's preload runs until rank 0 of restart 1 sees the round's message in standby 1's
    # pipe (it was taken), then raises: the standby execs the cold start itself.
    write(os.path.join(tmp, "slow_fail.py"), SYNC + r'''
if _os.environ["LOCAL_RANK"] == "1":
    _done("preloading1")
    _wait_for("go")
    raise RuntimeError("preload failed after the take")
_done("standby0")
''')
    write(os.path.join(tmp, "prog.py"), SYNC + r'''
import fcntl, os, struct, sys, termios, time
restart, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
print(f"RESULT rank={rank} restart={restart} preloaded={'slow_fail' in sys.modules}", flush=True)
if (restart, rank) == ("0", "1"):
    _wait_for("rank0-restart0", "standby0", "preloading1")
    sys.exit(1)
if (restart, rank) == ("1", "0"):
    pipe = os.open(f"/proc/{open(_sync_path('preloading1')).read()}/fd/3", os.O_RDONLY | os.O_NONBLOCK)
    deadline = time.monotonic() + 30
    while struct.unpack("i", fcntl.ioctl(pipe, termios.FIONREAD, b"\0" * 4))[0] == 0:
        if time.monotonic() > deadline:
            sys.exit("standby 1 was never given its message")
        time.sleep(0.01)
    os.close(pipe)
    _done("go")
_done(f"rank{rank}-restart{restart}")
''')
    r = crun(["prog.py"], tmp, True, preload="slow_fail")
    check(r.rc == 0, f"the job failed\n{r.describe()}")
    results = sorted(l for l in r.out.splitlines() if l.startswith("RESULT"))
    want = sorted(["RESULT rank=0 restart=0 preloaded=False", "RESULT rank=1 restart=0 preloaded=False",
                   "RESULT rank=0 restart=1 preloaded=True", "RESULT rank=1 restart=1 preloaded=False"])
    check(results == want, f"results {results}, expected {want}\n{r.describe()}")
    lines = [l for l in r.err.splitlines() if "starts cold" in l]
    check(lines == ["crun: local rank 1 starts cold: its standby's preload raised (RuntimeError: preload failed after the take)"],
          f"got {lines}\n{r.describe()}")
    check(r.err.count("restarting the group") == 1 and "worker failed" not in r.err.split("restarting the group")[1],
          f"the preload's failure counted as a worker's\n{r.describe()}")
    print(lines[0])


def case_standby_killed(tmp):
    write(os.path.join(tmp, "standby_mark.py"), MARK)
    # Rank 1 of restart 0 SIGKILLs its standby once it has preloaded (it is waiting for the
    # message), waits for it to be gone (its exit is the agent's to see, not a worker's), then fails.
    write(os.path.join(tmp, "prog.py"), SYNC + r'''
import os, select, signal, sys
restart, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
print(f"RESULT rank={rank} restart={restart} preloaded={'standby_mark' in sys.modules}", flush=True)
if restart == "0" and rank == "1":
    _wait_for("rank0-restart0", "standby0", "standby1")
    fd = os.pidfd_open(int(open(_sync_path("standby1")).read()))
    signal.pidfd_send_signal(fd, signal.SIGKILL)
    select.select([fd], [], [], 30)
    sys.exit(1)
_done(f"rank{rank}-restart{restart}")
''')
    r = crun(["prog.py"], tmp, True)
    check(r.rc == 0, f"the job failed\n{r.describe()}")
    lines = cold_lines(r)
    # Why, with its stderr's last line (here the preload's own).
    check(len(lines) == 1 and re.fullmatch(r"crun: local rank 1 starts cold: its standby ended \(killed by SIGKILL(: .*)?\)", lines[0]),
          f"got {lines}\n{r.describe()}")
    results = sorted(l for l in r.out.splitlines() if l.startswith("RESULT"))
    want = sorted(["RESULT rank=0 restart=0 preloaded=False", "RESULT rank=1 restart=0 preloaded=False",
                   "RESULT rank=0 restart=1 preloaded=True", "RESULT rank=1 restart=1 preloaded=False"])
    check(results == want, f"results {results}, expected {want}\n{r.describe()}")
    check(r.err.count("restarting the group") == 1, f"the standby's death counted as a failure\n{r.describe()}")
    print(lines[0])


def case_max_restarts(tmp):
    write(os.path.join(tmp, "standby_mark.py"), MARK)
    write(os.path.join(tmp, "prog.py"), SYNC + r'''
import os, sys
rank, restart = os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
print(f"RESULT rank={rank} restart={restart}", flush=True)
_done(f"rank{rank}-restart{restart}")
if rank == "1":
    _wait_for(f"rank0-restart{restart}")
    sys.exit(3)
''')
    outcomes = {}
    for label, standby, preload in (("off", False, ""), ("on", True, "standby_mark"), ("failing preload", True, "no_such_mod")):
        r = crun(["prog.py"], tmp, standby, preload=preload or "standby_mark", restarts=2)
        outcomes[label] = (r.rc, r.err.count("restarting the group"), r.err.count("worker failed (root cause)"),
                           sorted(l for l in r.out.splitlines() if l.startswith("RESULT")))
        print(f"{label:16} exit {r.rc}, {outcomes[label][1]} restarts, {len(outcomes[label][3])} worker starts")
        check(r.rc == 3, f"{label}: exit {r.rc}\n{r.describe()}")
    check(outcomes["on"] == outcomes["off"] == outcomes["failing preload"], f"outcomes differ: {outcomes}")
    check(outcomes["off"][1] == 2 and len(outcomes["off"][3]) == 6, f"unexpected outcome {outcomes['off']}")


def case_exits(tmp):
    write(os.path.join(tmp, "standby_mark.py"), MARK)
    write(os.path.join(tmp, "prog.py"), SYNC + r'''
import os, sys
def fail(how):
    if how == "raise":
        raise ValueError("bad value from the program")
    if how == "exit":
        sys.exit(5)
    if how == "interrupt":
        raise KeyboardInterrupt
_rank1_fails_in_restart0()
if os.environ["RANK"] == "1":
    fail(sys.argv[1])
''')
    for how, status in (("raise", "exit code 1"), ("exit", "exit code 5"), ("interrupt", "SIGINT")):
        got = {}
        for standby in (False, True):
            r = crun(["--tee", "2", "prog.py", how], tmp, standby)
            m = re.search(r"worker failed \(root cause\): rank 1 .*?, (exit code \d+|signal \d+ \(\w+\)|killed by \w+)?.*attempt 1", r.err)
            check(m, f"{how}: no root cause in attempt 1\n{r.describe()}")
            tb = [l for l in r.err.splitlines() if l.startswith("[default1]:")]
            got[standby] = (r.rc, m.group(0).split(", pid")[0], tb)
            check(status in r.err.split("attempt 0")[-1], f"{how}: {status} not reported\n{r.describe()}")
        check(got[False][0] == got[True][0] and got[False][2] == got[True][2],
              f"{how}: cold and standby differ:\n  cold:    {got[False]}\n  standby: {got[True]}")
        print(f"{how:9} exit {got[True][0]}, {len(got[True][2])} stderr lines, the same from a standby")


def gone_within(pids, seconds):
    """The processes of `pids` that are still there after `seconds` (waited for through pidfds)."""
    import select
    deadline = time.monotonic() + seconds
    left = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        os.close(fd)
        if not ready:
            left.append(pid)
    return left


def case_lifetime(tmp):
    # Standbys end with the job: at its normal end, and when crun is SIGKILLed while they wait.
    write(os.path.join(tmp, "standby_mark.py"), MARK)
    write(os.path.join(tmp, "prog.py"), SYNC + r'''
import sys
_wait_for("standby0", "standby1")  # both standbys wait for the next start
if sys.argv[1] == "hold":
    _wait_for("never", seconds=60)
''')
    r = crun(["prog.py", "end"], tmp, True, restarts=3)
    check(r.rc == 0, f"the job failed\n{r.describe()}")
    standbys = [int(open(os.path.join(SYNC_DIR, f"standby{lr}")).read()) for lr in (0, 1)]
    check(not gone_within(standbys, 0), f"standbys {standbys} outlived the job\n{r.describe()}")

    shutil.rmtree(SYNC_DIR)
    os.mkdir(SYNC_DIR)
    cmd = [ARGS.crun, "--standalone", "--nproc-per-node", "2", "--max-restarts", "3", "--standby-workers",
           "--standby-preload", "standby_mark", "prog.py", "hold"]
    p = subprocess.Popen(cmd, cwd=tmp, env=base_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 30
    while not all(os.path.exists(os.path.join(SYNC_DIR, f"standby{lr}")) for lr in (0, 1)):
        check(time.monotonic() < deadline and p.poll() is None, "no standbys within 30 s")
        time.sleep(0.01)
    standbys = [int(open(os.path.join(SYNC_DIR, f"standby{lr}")).read()) for lr in (0, 1)]
    p.kill()
    p.wait()
    left = gone_within(standbys, 10)
    check(not left, f"standbys {left} outlived a SIGKILLed crun")
    print(f"standbys {standbys} ended with the job, and with a SIGKILLed crun")


def case_no_python(tmp):
    write(os.path.join(tmp, "prog.sh"), r'''#!/bin/sh
echo "RESULT rank=$RANK restart=$TORCHELASTIC_RESTART_COUNT"
touch "$CRUN_TEST_SYNC_DIR/rank$RANK-restart$TORCHELASTIC_RESTART_COUNT"
if [ "$TORCHELASTIC_RESTART_COUNT$RANK" = 01 ]; then
  i=0
  while [ ! -e "$CRUN_TEST_SYNC_DIR/rank0-restart0" ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i + 1)); done
  exit 1
fi
''')
    os.chmod(os.path.join(tmp, "prog.sh"), 0o755)
    for how, args, env, source in (("flag, --no-python", ["--standby-workers", "--no-python", "/bin/sh", "prog.sh"], {}, "--standby-workers"),
                                   ("PET_STANDBY_WORKERS, #! script", ["./prog.sh"], {"PET_STANDBY_WORKERS": "1"}, "PET_STANDBY_WORKERS")):
        r = crun(args, tmp, False, env=env)
        check(r.rc == 0, f"{how}: the job failed\n{r.describe()}")
        notes = [l for l in r.err.splitlines() if "standby workers are for Python programs" in l]
        check(len(notes) == 1 and notes[0].startswith(f"crun: {source}: "), f"{how}: expected one notice, got {notes}\n{r.describe()}")
        check(len([l for l in r.out.splitlines() if l.startswith("RESULT")]) == 4 and not cold_lines(r), f"{how}\n{r.describe()}")
        cfg = crun(["--print-config"] + args, tmp, False, env=env)
        check(re.search(rf"^standby = off  \({source}, not a Python program\)$", cfg.out, re.M), f"{how}: --print-config\n{cfg.describe()}")
        print(f"{how}: {notes[0]}")


CASES = {"fields": case_fields, "rank_at_import": case_rank_at_import, "preload_raises": case_preload_raises,
         "preload_raises_taken": case_preload_raises_taken,
         "standby_killed": case_standby_killed, "max_restarts": case_max_restarts, "exits": case_exits,
         "lifetime": case_lifetime, "no_python": case_no_python}


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--crun", required=True)
    p.add_argument("--case", required=True, choices=sorted(CASES))
    ARGS = p.parse_args()
    tmp = tempfile.mkdtemp(prefix=f"crun-standby-{ARGS.case}-")
    global SYNC_DIR
    SYNC_DIR = os.path.join(tmp, "sync")
    try:
        CASES[ARGS.case](tmp)
    except CaseFailed as e:
        print(f"FAIL: {ARGS.case}: {e}")
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"PASS: {ARGS.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
