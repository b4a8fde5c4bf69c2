#!/usr/bin/env python3
"""Runs one PyTorch compatibility case under crun and under torchrun and compares the results.

Usage: run_case.py --crun CRUN_BINARY --case {ddp,file_timer,record_fail,resume,resume_standby,env,tcpstore}

The case scripts (this folder) print deterministic "RESULT ..." lines on stdout; for each case
the sorted RESULT lines of crun's run must equal torchrun's, plus the checks listed per case.
torchrun is torch 1.13's own, started through bench/agent/torchrun_shim.py (it only fixes
Std.from_str, which crashes on Python 3.11), with `--monitor_interval 0.1` so its polling does
not dominate the run time. torch 1.13's torchrun only knows underscore spellings and its
--standalone store always listens on port 29400 (hence the CTest RESOURCE_LOCK).

Known, intended differences (checked, not hidden):
  - exit code of a failed job: crun exits with the root-cause worker's code, torchrun with 1;
  - crun sets TORCH_NCCL_ASYNC_ERROR_HANDLING (the name torch >= 2.2 reads, and its torchrun
    sets) besides torch 1.13's NCCL_ASYNC_ERROR_HANDLING, CRUN_AGENT_ID (the marker by which
    crun's keeper finds a SIGKILLed agent's leftover processes), CRUN_STATE_DIR (each rank's
    state directory, kept across restarts) and CRUN_CONTROL_FILE (a worker's requests to crun);
    no other variable differs.
"""
import argparse
import difflib
import json
import os
import re
import socket
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHIM = os.path.join(ROOT, "bench", "agent", "torchrun_shim.py")
PYTHON = os.environ.get("PYTHON_EXEC") or "/usr/bin/python3"
RUN_TIMEOUT_S = 120  # one launcher run; far above the ~5-10 s a run takes
TORCHRUN_TRIES = 3  # torchrun's runs, when its agent loses its own store (Launcher.run)


def crun_only_variables():
    """What crun sets and this Python's torchrun does not (see the module's comment): its torchrun
    sets TORCH_NCCL_ASYNC_ERROR_HANDLING itself from torch 2.2 on. Asked once, by the env case
    (importing torch takes ~1.7 s here)."""
    out = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    major, minor = (int(x) for x in re.match(r"(\d+)\.(\d+)", out).groups())
    return {"CRUN_AGENT_ID", "CRUN_STATE_DIR", "CRUN_CONTROL_FILE"} | (set() if (major, minor) >= (2, 2) else {"TORCH_NCCL_ASYNC_ERROR_HANDLING"})
# Variables the launchers set: never inherited from the test's own environment.
LAUNCHER_VARIABLES = re.compile(
    r"^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|GROUP_WORLD_SIZE|ROLE_NAME|ROLE_RANK|"
    r"ROLE_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|OMP_NUM_THREADS|(TORCH_)?NCCL_ASYNC_ERROR_HANDLING|"
    r"TORCHELASTIC_.*|PET_.*)$")


class CaseFailed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise CaseFailed(what)


class Run:
    def __init__(self, launcher, cmd, rc, out, err, seconds):
        self.launcher, self.cmd, self.rc, self.out, self.err, self.seconds = launcher, cmd, rc, out, err, seconds

    def results(self):
        return sorted(line for line in self.out.splitlines() if line.startswith("RESULT "))

    def describe(self):
        return (f"--- {self.launcher}: {' '.join(self.cmd)}\n    exit {self.rc} after {self.seconds:.1f} s\n"
                f"--- stdout:\n{self.out}--- stderr (last 60 lines):\n" + "\n".join(self.err.splitlines()[-60:]))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Launchers:
    """agent_store=False: both launchers --standalone (rank 0 hosts the workers' store, as torch
    1.13's c10d does). agent_store=True: the workers share the agent's store
    (TORCHELASTIC_USE_AGENT_STORE=True): crun as torchrun 2.x's c10d does it (--rdzv-endpoint
    127.0.0.1:0, one node), torchrun 1.13 with its static backend, the one 1.13 shares."""

    def __init__(self, crun, scratch, agent_store=False):
        self.crun = crun
        self.scratch = scratch
        self.agent_store = agent_store
        self.runs = []
        env = {k: v for k, v in os.environ.items() if not LAUNCHER_VARIABLES.match(k)}
        env["PYTHON_EXEC"] = PYTHON
        env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo on loopback only, whatever the host name resolves to
        env["TMPDIR"] = scratch           # both launchers keep their run folders in the scratch dir
        self.env = env

    def run(self, launcher, script, args=(), nproc=2, max_restarts=0, env=None, crun_flags=()):
        script = os.path.join(HERE, script)
        if launcher == "crun":
            how = (["--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0"] if self.agent_store
                   else ["--standalone"])
            cmd = [self.crun, *how, "--nproc-per-node", str(nproc), "--max-restarts", str(max_restarts), *crun_flags]
        else:
            how = (["--nnodes", "1", "--node_rank", "0", "--rdzv_backend", "static", "--master_addr", "127.0.0.1",
                    "--master_port", str(free_port())] if self.agent_store else ["--standalone"])
            cmd = [PYTHON, SHIM, *how, "--nproc_per_node", str(nproc), "--max_restarts", str(max_restarts),
                   "--monitor_interval", "0.1"]
        cmd += [script, *args]
        for attempt in range(TORCHRUN_TRIES if launcher == "torchrun" else 1):
            r = self._run_once(launcher, cmd, env, f"{os.path.basename(script)} {' '.join(args)}")
            # torch 1.13's agent sometimes loses its own store while it polls (RendezvousConnectionError,
            # "Broken pipe", in num_nodes_waiting) on a loaded host: the anchor's flake, run it again.
            if not (r.rc != 0 and "num_nodes_waiting" in r.err and "RendezvousConnectionError" in r.err):
                break
            print(f"torchrun lost its own store (attempt {attempt + 1} of {TORCHRUN_TRIES}); running it again", flush=True)
        return r

    def _run_once(self, launcher, cmd, env, label):
        start = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             env={**self.env, **(env or {})}, text=True, errors="replace", start_new_session=True)
        try:
            out, err = p.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # crun's workers die with it (PR_SET_PDEATHSIG)
            out, err = p.communicate()
            r = Run(launcher, cmd, None, out, err, time.monotonic() - start)
            raise CaseFailed(f"{launcher} did not finish within {RUN_TIMEOUT_S} s\n{r.describe()}")
        r = Run(launcher, cmd, p.returncode, out, err, time.monotonic() - start)
        self.runs.append(r)
        print(f"{launcher:8} {label}: exit {r.rc}, {r.seconds:.1f} s", flush=True)
        return r


def same_results(a, b, what):
    ra, rb = a.results(), b.results()
    if ra != rb:
        diff = "\n".join(difflib.unified_diff(ra, rb, a.launcher, b.launcher, lineterm=""))
        raise CaseFailed(f"{what}: RESULT lines differ between {a.launcher} and {b.launcher}\n{diff}")
    check(ra, f"{what}: no RESULT lines at all")


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:])


def final_hashes(run):
    return {fields(l)["rank"]: fields(l)["weights"] for l in run.results() if "kind=final" in l}


# ---- cases ---------------------------------------------------------------------------------


def case_ddp(L):
    """DDP + DistributedSampler, 2 ranks, seeded: identical results (losses, hashes) under both
    launchers, and the same weights on both ranks."""
    runs = [L.run(x, "train.py") for x in ("crun", "torchrun")]
    for r in runs:
        check(r.rc == 0, f"{r.launcher} failed\n{r.describe()}")
        h = final_hashes(r)
        check(sorted(h) == ["0", "1"] and len(set(h.values())) == 1, f"{r.launcher}: ranks' weights differ: {h}")
        check(r.results().count("RESULT kind=sampler rank=0 shard=128 disjoint_cover=True") == 1,
              f"{r.launcher}: DistributedSampler shards are not a partition")
        losses = [float.fromhex(fields(l)["loss"]) for l in r.results() if "kind=epoch" in l]
        check(len(losses) == 4 and losses[-1] < losses[0] / 2, f"{r.launcher}: the model did not learn: {losses}")
    same_results(*runs, "ddp")


def case_record_fail(L):
    """Rank 1 raises under @record and the script exits 3. Both launchers name rank 1 as the root
    cause with exit code 3 and the exception message from the error file, and both copy the
    root cause's error file to their own TORCHELASTIC_ERROR_FILE (errorCode 3). crun exits 3 (the
    root cause's code), torchrun 1."""
    message = "RuntimeError: boom from rank 1 after the first all_reduce"
    got = {}
    for x in ("crun", "torchrun"):
        parent_error_file = os.path.join(L.scratch, f"{x}-launcher-error.json")
        r = L.run(x, "record_fail.py", env={"TORCHELASTIC_ERROR_FILE": parent_error_file})
        if x == "crun":
            m = re.search(r"worker failed \(root cause\): rank (\d+) \(local rank \d+.*?, exit code (\d+),", r.err)
            msg = re.search(r"^crun:   error file: (.*)$", r.err, re.M)
            check(r.err.count("worker failed (root cause)") == 1, f"crun: not exactly one root cause\n{r.describe()}")
            check(re.search(r"^crun:   \| +raise RuntimeError", r.err, re.M),
                  f"crun: the report lacks the error file's traceback\n{r.describe()}")
        else:
            block = r.err.split("Root Cause (first observed failure):", 1)[-1]
            m = re.search(r"rank +: (\d+) \(local_rank: \d+\)\n +exitcode +: (-?\d+)", block)
            msg = re.search(r"^  (RuntimeError: .*)$", block, re.M)
        check(m and msg, f"{x}: no root cause in its output\n{r.describe()}")
        check(os.path.isfile(parent_error_file), f"{x} did not write its TORCHELASTIC_ERROR_FILE\n{r.describe()}")
        with open(parent_error_file) as f:
            dumped = json.load(f)["message"]
        got[x] = (m.group(1), m.group(2), msg.group(1), dumped["message"], dumped.get("errorCode"), r.results())
        print(f"{x:8} root cause: rank {m.group(1)}, worker exit {m.group(2)}, {msg.group(1)!r}; launcher exit {r.rc}")
        # The documented difference: crun passes the root cause's exit code on, torchrun exits 1.
        check(r.rc == (3 if x == "crun" else 1), f"{x}: unexpected exit code {r.rc}\n{r.describe()}")
    check(got["crun"] == got["torchrun"], f"root causes differ: {got}")
    check(got["crun"][:5] == ("1", "3", message, message, 3), f"unexpected root cause {got['crun'][:5]}")


def case_resume(L):
    """Rank 1 dies in epoch 2 of restart 0; with --max-restarts 1 the group restarts and resumes
    from the epoch-1 checkpoint (TORCHELASTIC_RESTART_COUNT > 0). The final weights equal an
    uninterrupted run's, and everything matches between crun and torchrun."""
    def ckpt(name):
        d = os.path.join(L.scratch, name)
        os.mkdir(d)
        return ["--ckpt", d]
    crash = ["--crash-rank", "1", "--crash-epoch", "2"]
    plain = L.run("crun", "train.py", ckpt("plain"))
    check(plain.rc == 0, f"uninterrupted run failed\n{plain.describe()}")
    runs = [L.run(x, "train.py", ckpt(x) + crash, max_restarts=1) for x in ("crun", "torchrun")]
    for r in runs:
        check(r.rc == 0, f"{r.launcher}: the restarted job failed\n{r.describe()}")
        check("rank 1: crashing on purpose in epoch 2" in r.err, f"{r.launcher}: rank 1 did not crash\n{r.describe()}")
        for rank in "01":
            check(f"RESULT kind=start rank={rank} world=2 restart=1 start_epoch=2" in r.results(),
                  f"{r.launcher}: rank {rank} did not resume from epoch 2 in restart 1\n{r.describe()}")
        check(final_hashes(r) == final_hashes(plain),
              f"{r.launcher}: weights {final_hashes(r)} differ from the uninterrupted run's {final_hashes(plain)}")
        epochs = lambda run: [l for l in run.results() if "kind=epoch" in l]
        check(epochs(r) == epochs(plain), f"{r.launcher}: epoch losses differ from the uninterrupted run's")
    check(re.search(r"root cause\): rank 1 .*exit code 13, .*attempt 0; restarting the group", runs[0].err),
          f"crun did not report rank 1's crash as the root cause\n{runs[0].describe()}")
    same_results(*runs, "resume")


def case_resume_standby(L):
    """The resume case under crun alone, with --standby-workers (torch preloaded, and
    standby_seen.py, which says at the worker's exit that it was a standby) and without: restart
    1's workers are the standbys, and the weights and every RESULT line are bit-identical."""
    def ckpt(name):
        d = os.path.join(L.scratch, name)
        os.mkdir(d)
        return ["--ckpt", d]
    crash = ["--crash-rank", "1", "--crash-epoch", "2"]
    cold = L.run("crun", "train.py", ckpt("cold") + crash, max_restarts=1)
    warm = L.run("crun", "train.py", ckpt("standby") + crash, max_restarts=1,
                 crun_flags=["--standby-workers", "--standby-preload", "torch,standby_seen"])
    for r in (cold, warm):
        check(r.rc == 0, f"the restarted job failed\n{r.describe()}")
        for rank in "01":
            check(f"RESULT kind=start rank={rank} world=2 restart=1 start_epoch=2" in r.results(),
                  f"rank {rank} did not resume from epoch 2 in restart 1\n{r.describe()}")
    seen = sorted(l for l in warm.out.splitlines() if l.startswith("STANDBY "))
    check(seen == ["STANDBY rank=0 restart=1", "STANDBY rank=1 restart=1"],
          f"restart 1's workers were not the standbys: {seen}\n{warm.describe()}")
    check(not [l for l in cold.out.splitlines() if l.startswith("STANDBY ")], f"standbys without the flag\n{cold.describe()}")
    check(" starts cold: " not in warm.err, f"a rank started cold\n{warm.describe()}")
    check(final_hashes(warm) == final_hashes(cold), f"weights {final_hashes(warm)} differ from {final_hashes(cold)}")
    check(warm.results() == cold.results(), "RESULT lines differ with standbys")
    print(f"standby and cold restarts: the same {len(cold.results())} RESULT lines, weights {final_hashes(cold)}")


def case_env(L):
    """The worker environment, normalized, under init_method="env://" (2 ranks, --max-restarts 1)
    and the default init (1 rank): the same values and the same variable names under both."""
    crun_only = crun_only_variables()
    for init, nproc, restarts in (("env", 2, 1), ("default", 1, 0)):
        runs = [L.run(x, "env_check.py", ["--init", init], nproc=nproc, max_restarts=restarts)
                for x in ("crun", "torchrun")]
        for r in runs:
            check(r.rc == 0, f"{r.launcher} failed\n{r.describe()}")
            check(len([l for l in r.results() if "key=RANK " in l]) == nproc, f"{r.launcher}: missing ranks")
        a, b = (without_crun_extras(r, crun_only) for r in runs)
        if a != b:
            raise CaseFailed(f"env --init {init}: worker environments differ\n" +
                             "\n".join(difflib.unified_diff(a, b, "crun", "torchrun", lineterm="")))


def without_crun_extras(run, crun_only):
    """RESULT lines with crun's documented extra variables (`crun_only`) taken out of the
    ALL_NAMES lists; they must be there under crun and absent under torchrun."""
    lines = []
    for line in run.results():
        if "key=ALL_NAMES" in line:
            head, names = line.split("value=", 1)
            names = names.split(",")
            kept = [n for n in names if n not in crun_only]
            extras = len(names) - len(kept)
            check(extras == (len(crun_only) if run.launcher == "crun" else 0),
                  f"{run.launcher}: {extras} of {sorted(crun_only)} in the worker environment")
            line = head + "value=" + ",".join(kept)
        lines.append(line)
    return lines


def case_tcpstore(L):
    """dist.TCPStore hosted by rank 0 at MASTER_ADDR:MASTER_PORT: set/get/add/wait/compare_set
    and a gloo group on that store give the same results under both launchers."""
    runs = [L.run(x, "tcpstore.py") for x in ("crun", "torchrun")]
    for r in runs:
        check(r.rc == 0, f"{r.launcher} failed\n{r.describe()}")
        check(len(r.results()) == 4, f"{r.launcher}: expected 4 RESULT lines\n{r.describe()}")
    same_results(*runs, "tcpstore")


def case_file_timer(L):
    """torch's FileTimerClient with TORCHELASTIC_ENABLE_FILE_TIMER=1: rank 1 overstays its 2 s
    scope on the first attempt. Both launchers kill it (SIGKILL, the client's default), restart
    the group once and finish with exit 0; crun's report names the rank, the scope and how far
    past its deadline it was."""
    runs = [L.run(x, "file_timer.py", max_restarts=1, env={"TORCHELASTIC_ENABLE_FILE_TIMER": "1"})
            for x in ("crun", "torchrun")]
    for r in runs:
        check(r.rc == 0, f"{r.launcher}: the job did not recover from the expired scope\n{r.describe()}")
        for rank in "01":
            check(f"RESULT kind=step rank={rank} restart=1" in r.results(),
                  f"{r.launcher}: rank {rank} did not finish its step after the restart\n{r.describe()}")
        check(f"RESULT kind=step rank=1 restart=0" not in r.results(),
              f"{r.launcher}: rank 1 finished the scope it overstayed\n{r.describe()}")
    crun = runs[0]
    check(re.search(r"file timer scope 'step' of local rank 1 \(pid \d+\) ran \d+ ms past its deadline; sent SIGKILL",
                    crun.err), f"crun did not say what the timer did\n{crun.describe()}")
    check(re.search(r"root cause\): rank 1 .*killed by SIGKILL.*restarting the group\ncrun:   watchdog: file timer scope 'step'",
                    crun.err), f"crun's report does not name the expired scope\n{crun.describe()}")
    check(re.search(r"exitcode: -9\) local_rank: 1 ", runs[1].err),
          f"torchrun did not report rank 1 killed by SIGKILL\n{runs[1].describe()}")
    same_results(*runs, "file_timer")


CASES = {"ddp": case_ddp, "file_timer": case_file_timer, "record_fail": case_record_fail, "resume": case_resume,
         "resume_standby": case_resume_standby, "env": case_env,
         "tcpstore": case_tcpstore}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--crun", required=True)
    p.add_argument("--case", required=True, choices=sorted(CASES))
    p.add_argument("--agent-store", action="store_true",
                   help="workers share the agent's store (TORCHELASTIC_USE_AGENT_STORE=True) under both launchers")
    args = p.parse_args()
    probe = subprocess.run([PYTHON, "-c", "import torch.distributed.run"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"FAIL: {PYTHON} cannot import torch ({probe.stderr.strip().splitlines()[-1:]}); "
              "run scripts/install-deps.sh (it installs Debian's python3-torch), or set PYTHON_EXEC "
              "to an interpreter that has torch")
        return 1
    scratch = tempfile.mkdtemp(prefix=f"crun-pytorch-{args.case}-")
    try:
        L = Launchers(args.crun, scratch, args.agent_store)
        CASES[args.case](L)
        if args.agent_store:  # every run's workers really shared the agent's store
            for r in L.runs:
                said = set(l.split("agent_store=")[1] for l in r.out.splitlines() if l.startswith("STORE "))
                check(said == {"True"}, f"{r.launcher}: workers' TORCHELASTIC_USE_AGENT_STORE was {said}\n{r.describe()}")
    except CaseFailed as e:
        print(f"FAIL: {args.case}: {e}")
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"PASS: {args.case}" + ("" if args.case == "resume_standby" else " (crun and torchrun agree)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
