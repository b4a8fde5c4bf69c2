#!/usr/bin/env python3
"""torchrun's command-line habits and flags, crun against torchrun (issue 14).

Usage: torchrun_flags.py --crun CRUN_BINARY --case NAME

Where torch 1.13 has the flag or the behaviour, a case runs the SAME command line under crun and
under torch 1.13's torchrun (bench/agent/torchrun_shim.py; 1.13 knows only the underscore
spellings, which crun accepts too) and compares what can be seen from outside: the exit code, what
the workers saw (argv[0], /proc/self/cmdline, their environment) and where the logs went.

Where 1.13 lacks the flag (torchrun 2.x's --shutdown-timeout, --virtual-local-rank,
--event-log-handler, --duplicate-std{out,err}-filters, --numa-binding and
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE's names), the case runs crun alone and checks it against
the facts of torch's current source, stated in each case's docstring (torch/distributed/run.py,
torch/distributed/launcher/api.py, torch/distributed/elastic/agent/server/local_elastic_agent.py).

Known, intended differences (asserted, not hidden):
  - `--rdzv_id=` (empty): torch's elastic_launch makes up a random run id (a warning) and runs;
    crun refuses it with exit 2 (a random id per agent would leave several nodes waiting for
    each other forever). Both read `--no_python` after it as the next option, not as the run id.
  - A usage error is exit 2 and one line under crun; torchrun raises from inside the launch
    (exit 1, a traceback) where its check is not argparse's.
  - A native binary: crun runs it directly; torchrun needs --no_python for it.
  - --numa-binding: crun sets each worker's CPU affinity itself before exec (torch runs the worker
    under `numactl --physcpubind`), so it needs no numactl.
  - --shutdown-timeout is crun's --stop-timeout under torch's name: it also takes fractional
    seconds (torch's is an int).
"""
import argparse
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHIM = os.path.join(ROOT, "bench", "agent", "torchrun_shim.py")
PYTHON = "/usr/bin/python3"
RUN_TIMEOUT_S = 60  # one launcher run; the cases take 1-3 s
LAUNCHER_VARIABLES = re.compile(
    r"^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|GROUP_WORLD_SIZE|ROLE_NAME|ROLE_RANK|"
    r"ROLE_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|OMP_NUM_THREADS|CUDA_VISIBLE_DEVICES|"
    r"TORCHELASTIC_.*|TORCH_ELASTIC_.*|PET_.*)$")

# The worker: one RESULT line with what it saw (workers share the console; one write each). argv0 is its sys.argv[0], exe0 the first word of
# its /proc/self/cmdline (the interpreter or program as the launcher wrote it).
WORKER = r'''import os, sys
cmd0 = open("/proc/self/cmdline", "rb").read().split(b"\0")[0].decode()
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "ROLE_NAME", "CUDA_VISIBLE_DEVICES")
line = "RESULT argv0=%s exe0=%s %s\n" % (sys.argv[0], cmd0, " ".join("%s=%s" % (k, os.environ.get(k, "-")) for k in keys))
os.write(1, line.encode())  # one write: under python -u, print() writes the newline apart
'''


class CaseFailed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise CaseFailed(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run:
    def __init__(self, launcher, cmd, rc, out, err):
        self.launcher, self.cmd, self.rc, self.out, self.err = launcher, cmd, rc, out, err

    def results(self):
        return sorted(line for line in self.out.splitlines() if line.startswith("RESULT "))

    def err_lines(self):
        return [line for line in self.err.splitlines() if line.strip()]

    def describe(self):
        return (f"--- {self.launcher}: {' '.join(self.cmd)}\n    exit {self.rc}\n--- stdout:\n{self.out}"
                "--- stderr (last 30 lines):\n" + "\n".join(self.err.splitlines()[-30:]))


class Launchers:
    def __init__(self, crun, scratch):
        self.crun, self.scratch = crun, scratch
        env = {k: v for k, v in os.environ.items() if not LAUNCHER_VARIABLES.match(k)}
        env["PYTHON_EXEC"] = PYTHON  # both run Python programs with the same interpreter
        env["OMP_NUM_THREADS"] = "1"  # neither launcher's warning about it
        env["TMPDIR"] = scratch  # torchrun's torchelastic_* dirs and the logs crun keeps go with the case
        self.env = env
        self.worker = self.file("worker.py", WORKER)

    def file(self, name, text, mode=0o644):
        path = os.path.join(self.scratch, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def command(self, launcher, args):
        if launcher == "crun":
            return [self.crun, *args]
        return [PYTHON, SHIM, "--monitor_interval", "0.1", *args]

    def start(self, launcher, args, env=None):
        cmd = self.command(launcher, [str(a) for a in args])
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             env={**self.env, **(env or {})}, cwd=self.scratch, text=True, errors="replace",
                             start_new_session=True)
        p.cmd, p.launcher = cmd, launcher
        return p

    def finish(self, p):
        try:
            out, err = p.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            raise CaseFailed(f"{p.launcher} did not finish within {RUN_TIMEOUT_S} s\n"
                             + Run(p.launcher, p.cmd, None, out, err).describe())
        r = Run(p.launcher, p.cmd, p.returncode, out, err)
        print(f"{p.launcher:8} {' '.join(p.cmd[1:] if p.launcher == 'crun' else p.cmd[4:])}: exit {r.rc}", flush=True)
        return r

    def run(self, launcher, args, env=None):
        return self.finish(self.start(launcher, args, env))

    def both(self, args_for, env=None):
        """The same command line under both launchers; args_for(launcher) may differ only in
        what must differ (a free port)."""
        return [self.run(x, args_for(x), env) for x in ("crun", "torchrun")]


def static(nproc=1):
    """A single-node static rendezvous on a free port (no --standalone: 1.13's is port 29400)."""
    return ["--nproc_per_node", nproc, "--master_port", free_port()]


def same_results(runs, what):
    a, b = (r.results() for r in runs)
    check(a and a == b, f"{what}: the workers saw different things\ncrun:     {a}\ntorchrun: {b}")


def succeeded(runs, what):
    for r in runs:
        check(r.rc == 0, f"{what}: {r.launcher} failed\n{r.describe()}")


def one_line_usage_error(r, flag, what):
    lines = r.err_lines()
    check(r.rc == 2 and len(lines) == 1 and flag in lines[0],
          f"{what}: crun should exit 2 with one line naming {flag}\n{r.describe()}")


# ---- torch 1.13 has it: both launchers ------------------------------------------------------


def case_repeated_option(L):
    """argparse keeps the last of a repeated option: --nproc_per_node 3 --nproc_per_node 2 runs 2."""
    runs = L.both(lambda x: ["--nproc_per_node", 3, *static(2), L.worker])
    succeeded(runs, "repeated option")
    same_results(runs, "repeated option")
    check(len(runs[0].results()) == 2 and "WORLD_SIZE=2" in runs[0].results()[0], f"not 2 workers: {runs[0].results()}")


def case_empty_value(L):
    """`--opt=` is an empty value; the next word stays an option. --rdzv_conf= (empty is a valid
    conf) then --no_python: both run `sh` directly. --rdzv_id= then --no_python: torchrun makes up
    a run id (launcher/api.py: an empty run_id gets a random one), crun refuses the empty id, and
    neither takes "--no_python" as the run id."""
    sh = ["--no_python", "sh", "-c", 'echo "RESULT ran run_id_is_option=$([ "$TORCHELASTIC_RUN_ID" = --no_python ] && echo yes || echo no)"']
    runs = L.both(lambda x: [*static(), "--rdzv_conf=", *sh])
    succeeded(runs, "--rdzv_conf=")
    same_results(runs, "--rdzv_conf=")
    check(runs[0].results() == ["RESULT ran run_id_is_option=no"], f"unexpected: {runs[0].results()}")
    crun, torchrun = L.both(lambda x: [*static(), "--rdzv_id=", *sh])
    check(torchrun.rc == 0 and torchrun.results() == ["RESULT ran run_id_is_option=no"]
          and "generated a random run_id" in torchrun.err, f"torchrun 1.13 changed\n{torchrun.describe()}")
    one_line_usage_error(crun, "--rdzv-id", "--rdzv_id=")
    check("--no_python" not in crun.err and "--no-python" not in crun.err, f"crun read --no_python as a value\n{crun.describe()}")


def case_argv0(L):
    """Workers' argv[0] is the program as written: `sh` found on $PATH stays "sh" (the exec gets
    the resolved path); a Python program's interpreter is PYTHON_EXEC as given (/usr/bin/python3,
    or python3 found on $PATH) and its sys.argv[0] the script as written."""
    L.file("argv0.sh", 'echo "RESULT sh_argv0=$(head -c 100 /proc/$$/cmdline | tr "\\0" "\\n" | head -n 1)"\n')
    runs = L.both(lambda x: [*static(), "--no_python", "sh", "argv0.sh"])
    succeeded(runs, "argv0 sh")
    same_results(runs, "argv0 sh")
    check(runs[0].results() == ["RESULT sh_argv0=sh"], f"sh's argv[0]: {runs[0].results()}")
    runs = L.both(lambda x: [*static(), "worker.py"])
    succeeded(runs, "argv0 python")
    same_results(runs, "argv0 python")
    check(runs[0].results()[0].startswith(f"RESULT argv0=worker.py exe0={PYTHON} "), f"python's argv: {runs[0].results()}")
    # PYTHON_EXEC found on $PATH: the interpreter's argv[0] is it as written.
    runs = L.both(lambda x: [*static(), "worker.py"], env={"PATH": "/usr/bin:/bin", "PYTHON_EXEC": "python3"})
    succeeded(runs, "argv0 PYTHON_EXEC=python3")
    same_results(runs, "argv0 PYTHON_EXEC=python3")
    check(runs[0].results()[0].startswith("RESULT argv0=worker.py exe0=python3 "), f"python's argv: {runs[0].results()}")


def case_args_template(L):
    """The program's arguments go through string.Template.safe_substitute(local_rank=<local
    rank>) per worker (torch 1.13's elastic/utils/api.py macros.substitute, called by
    local_elastic_agent for every worker; the same in torch's current agent): ${local_rank} and
    $local_rank become the local rank, "$$" becomes "$", anything else stays as written."""
    args = ["--no_python", "sh", "-c", 'echo "RESULT $1 $2 $3"', "sh", "${local_rank}", "$$", "${rank}/$local_rank/$"]
    runs = L.both(lambda x: [*static(2), *args])
    succeeded(runs, "args template")
    same_results(runs, "args template")
    check(runs[0].results() == ["RESULT 0 $ ${rank}/0/$", "RESULT 1 $ ${rank}/1/$"], f"unexpected: {runs[0].results()}")


def case_log_dir(L):
    """--log_dir: the logs go to LOG_DIR/<run id>_<random>/attempt_0/<local rank>/std{out,err}.log
    under both (-r 3: both streams of every rank); a --log_dir that is an existing file fails under
    both (torchrun: FileExistsError from os.makedirs, exit 1; crun: exit 2, one line)."""
    trees = {}
    for x in ("crun", "torchrun"):
        d = os.path.join(L.scratch, f"logs-{x}")
        r = L.run(x, [*static(2), "--log_dir", d, "--redirects", 3, "--rdzv_id", "myrun", "--no_python",
                      "sh", "-c", 'echo "out $LOCAL_RANK"; echo "err $LOCAL_RANK" >&2'])
        check(r.rc == 0, f"--log_dir: {x} failed\n{r.describe()}")
        check("out 0" not in r.out and "err 0" not in r.err, f"{x}: -r 3 still printed to the console\n{r.describe()}")
        tree = {}
        for base, _, files in os.walk(d):
            for name in files:
                path = os.path.join(base, name)
                rel = re.sub(r"^myrun_[^/]+/", "myrun_X/", os.path.relpath(path, d))
                with open(path) as f:
                    tree[rel] = f.read()
        trees[x] = tree
    expected = {f"myrun_X/attempt_0/{lr}/{s}.log": f"{s[3:]} {lr}\n" for lr in (0, 1) for s in ("stdout", "stderr")}
    check(trees["torchrun"] == expected, f"torchrun 1.13's layout changed: {trees['torchrun']}")
    # crun may keep more files in its run folder (error files); the logs themselves must match.
    check({k: v for k, v in trees["crun"].items() if k in expected} == expected,
          f"crun's logs differ from torchrun's: {trees['crun']}")
    a_file = L.file("a-file", "")
    crun, torchrun = L.both(lambda x: [*static(), "--log_dir", a_file, "--no_python", "true"])
    check(torchrun.rc == 1 and "FileExistsError" in torchrun.err, f"torchrun 1.13 changed\n{torchrun.describe()}")
    one_line_usage_error(crun, "--log-dir", "--log_dir naming a file")


def case_program_resolution(L):
    """A Python file without the .py suffix runs under Python in both (torchrun always puts
    PYTHON_EXEC -u in front unless --no_python), executable or not, written ./noext or, as a file
    here, `test` (/usr/bin/test exists). A native binary runs directly: under torchrun with
    --no_python, under crun with or without it."""
    L.file("noext", WORKER, 0o755)
    L.file("test", WORKER, 0o644)
    for prog in ("./noext", "test"):
        runs = L.both(lambda x: [*static(), prog])
        succeeded(runs, prog)
        same_results(runs, prog)
        check(runs[0].results()[0].startswith(f"RESULT argv0={prog} exe0={PYTHON} "), f"{prog}: {runs[0].results()}")
    echo = ["/bin/echo", "RESULT native"]
    runs = L.both(lambda x: [*static(), "--no_python", *echo])
    succeeded(runs, "native --no_python")
    same_results(runs, "native --no_python")
    r = L.run("crun", [*static(), *echo])
    check(r.rc == 0 and r.results() == ["RESULT native"], f"crun did not run the binary directly\n{r.describe()}")


def case_rdzv_endpoint_port0(L):
    """--rdzv_endpoint localhost:0 with --nnodes 1 and c10d: the store takes a free port, the job
    runs (both). crun refuses port 0 for several nodes (nobody could find it): exit 2."""
    args = ["--nnodes", 1, "--rdzv_backend", "c10d", "--rdzv_endpoint", "localhost:0", "--rdzv_id", "port0", L.worker]
    runs = L.both(lambda x: args)
    succeeded(runs, "localhost:0")
    same_results(runs, "localhost:0")
    r = L.run("crun", ["--nnodes", 2, *args[2:]])
    one_line_usage_error(r, "--rdzv-endpoint", "localhost:0 with --nnodes 2")


def case_shared_endpoint(L):
    """Three agents on one host, one c10d endpoint, --nnodes 3, no is_host: the first to listen
    hosts, the others join (torch 1.13 retries as a client when the port is taken); every agent
    exits 0 and the workers are ranks 0-2 of one world of 3."""
    for x in ("crun", "torchrun"):
        port = free_port()
        agents = [L.start(x, ["--nnodes", 3, "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
                              "--rdzv_id", f"shared-{x}", L.worker]) for _ in range(3)]
        runs = [L.finish(p) for p in agents]
        succeeded(runs, f"{x}: 3 agents")
        results = sorted(line for r in runs for line in r.results())
        ranks = sorted(re.search(r" RANK=(\d+)", line).group(1) for line in results)
        check(ranks == ["0", "1", "2"] and all("WORLD_SIZE=3" in line for line in results),
              f"{x}: workers {results}")


# A worker that relies on the agent's store as torchrun's static rendezvous provides it: a
# TCPStore client at MASTER_ADDR:MASTER_PORT before init_process_group (the store must already
# be there), then env:// on the same store.
AGENT_STORE_WORKER = r'''import datetime, os
import torch.distributed as dist
addr, port, rank = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), int(os.environ["RANK"])
client = dist.TCPStore(addr, port, is_master=False, timeout=datetime.timedelta(seconds=10))
client.set("hello/%d" % rank, "rank %d" % rank)
client.wait(["hello/0", "hello/1"], datetime.timedelta(seconds=10))
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=30))
dist.barrier()
line = "RESULT rank=%d agent_store=%s port=%s peer=%s\n" % (
    rank, os.environ["TORCHELASTIC_USE_AGENT_STORE"], "master" if port == EXPECTED else port,
    client.get("hello/%d" % (1 - rank)).decode())
os.write(1, line.encode())
'''


def case_static_one_node(L):
    """--nnodes 1 --node_rank 0 --rdzv_backend static --master_addr A --master_port P: torch 1.13's
    static rendezvous hosts its agent's TCPStore at P at any node count and tells the workers
    TORCHELASTIC_USE_AGENT_STORE=True, MASTER_PORT=P; a worker's TCPStore client at P works before
    init_process_group, and env:// runs on that store. The same under both."""
    runs = []
    for x in ("crun", "torchrun"):
        port = free_port()
        worker = L.file(f"agent_store_{x}.py", AGENT_STORE_WORKER.replace("EXPECTED", str(port)))
        runs.append(L.run(x, ["--nnodes", 1, "--node_rank", 0, "--rdzv_backend", "static", "--master_addr", "127.0.0.1",
                              "--master_port", port, "--nproc_per_node", 2, worker]))
    succeeded(runs, "static, one node")
    same_results(runs, "static, one node")
    check(runs[0].results() == ["RESULT rank=0 agent_store=True port=master peer=rank 1",
                                "RESULT rank=1 agent_store=True port=master peer=rank 0"],
          f"static, one node: {runs[0].results()}")

# ---- torch 2.x only: crun against torch's current source ------------------------------------


def print_config(L, args, env=None):
    r = L.run("crun", ["--print-config", *args, "/bin/true"], env)
    check(r.rc == 0, f"--print-config failed\n{r.describe()}")
    return r.out


def setting(text, name):
    m = re.search(rf"^{name} = (\S*)", text, re.M)
    check(m, f"no {name} in --print-config:\n{text}")
    return m.group(1)


def case_shutdown_timeout(L):
    """torch's run.py: --shutdown-timeout/--shutdown_timeout, action=env (PET_SHUTDOWN_TIMEOUT),
    type int, default None; launcher/api.py: None -> TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30;
    negative -> ValueError. So: default 30, the variable, PET_ over the variable (PET_ fills the
    argparse default, which leaves the fallback unused), the flag over both; negative refused.
    Effect: seconds between the stop signal and SIGKILL for workers that ignore it."""
    got = {}
    for label, args, env in (("default", [], {}),
                             ("flag", ["--shutdown-timeout", 7], {}),
                             ("underscore", ["--shutdown_timeout", 7], {}),
                             ("variable", [], {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "600"}),
                             ("pet over variable", [], {"PET_SHUTDOWN_TIMEOUT": "5", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "600"}),
                             ("flag over both", ["--shutdown-timeout", 7], {"PET_SHUTDOWN_TIMEOUT": "5",
                                                                            "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "600"})):
        got[label] = setting(print_config(L, args, env), "stop_timeout")  # crun's name; seconds
    want = {"default": "30", "flag": "7", "underscore": "7", "variable": "600", "pet over variable": "5",
            "flag over both": "7"}
    check(got == want, f"--shutdown-timeout values: {got}, want {want}")
    one_line_usage_error(L.run("crun", ["--shutdown-timeout", -1, "/bin/true"]), "--shutdown-timeout", "negative")
    # The effect: a worker that ignores SIGTERM is SIGKILLed about 1 s after crun is told to stop.
    p = L.start("crun", ["--shutdown-timeout", 1, "--no_python", "sh", "-c",
                         'trap "" TERM; echo ready; while :; do sleep 0.05; done'])
    check(p.stdout.readline().strip() == "ready", "the worker did not start")
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    r = L.finish(p)
    elapsed = time.monotonic() - t0
    check(r.rc != 0 and 0.9 <= elapsed < 10, f"stopped after {elapsed:.1f} s (want about 1 s)\n{r.describe()}")


def case_virtual_local_rank(L):
    """torch's run.py: --virtual-local-rank/--virtual_local_rank, action=check_env
    (PET_VIRTUAL_LOCAL_RANK=1 turns it on). local_elastic_agent: then every worker's LOCAL_RANK is
    "0" and its CUDA_VISIBLE_DEVICES is entry <local rank> of the agent's (split on ",", stripped),
    or the local rank's number when the agent has none; a local rank past the list is an error.
    Without it LOCAL_RANK is the local rank and CUDA_VISIBLE_DEVICES is inherited."""
    def run(args, env=None):
        r = L.run("crun", ["--nproc_per_node", 3, *args, L.worker], env)
        return r, {re.search(r" RANK=(\d)", l).group(1): (re.search(r"LOCAL_RANK=(\S+)", l).group(1),
                                                          re.search(r"CUDA_VISIBLE_DEVICES=(\S*)", l).group(1))
                   for l in r.results()}
    cases = (([], {"CUDA_VISIBLE_DEVICES": "4, 5,6"}, {"0": ("0", "4"), "1": ("0", "5"), "2": ("0", "6")}),
             ([], {}, {"0": ("0", "0"), "1": ("0", "1"), "2": ("0", "2")}),
             (None, {"PET_VIRTUAL_LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "7,8,9"},
              {"0": ("0", "7"), "1": ("0", "8"), "2": ("0", "9")}),
             (None, {"CUDA_VISIBLE_DEVICES": "7,8"}, {"0": ("0", "7,8"), "1": ("1", "7,8"), "2": ("2", "7,8")}))
    for args, env, want in cases:
        flags = ["--virtual-local-rank"] if args is not None else []
        r, got = run(flags, env)
        check(r.rc == 0 and got == want, f"virtual local rank {flags} {env}: {got}, want {want}\n{r.describe()}")
    r, _ = run(["--virtual_local_rank"], {"CUDA_VISIBLE_DEVICES": "4,5"})
    one_line_usage_error(r, "--virtual-local-rank", "local rank 2 without a device")


def case_event_log_handler(L):
    """torch's run.py: --event-log-handler/--event_log_handler, action=env, default "null";
    torch's elastic/events/handlers.py registers "console", "dynamic_rendezvous" and "null" (a
    name it lacks fails at the first event). crun accepts those three (flag or
    PET_EVENT_LOG_HANDLER) and refuses another name with exit 2, before it starts anything."""
    check(setting(print_config(L, []), "event_log_handler") == "null", "default")
    check(setting(print_config(L, ["--event_log_handler", "console"]), "event_log_handler") == "console", "flag")
    check(setting(print_config(L, [], {"PET_EVENT_LOG_HANDLER": "console"}), "event_log_handler") == "console", "PET_")
    for name in ("null", "console", "dynamic_rendezvous"):
        r = L.run("crun", ["--event-log-handler", name, "/bin/true"])
        check(r.rc == 0, f"--event-log-handler {name} did not run\n{r.describe()}")
    one_line_usage_error(L.run("crun", ["--event-log-handler", "nosuch", "/bin/true"]), "--event-log-handler", "unknown")


def case_duplicate_filters(L):
    """torch's run.py: --duplicate-std{out,err}-filters (and _ spellings), action=env, a
    comma-separated list (",," a literal comma), default [] (an empty list duplicates nothing).
    torch's multiprocessing api: the tee'd lines of every rank that contain any filter also go to
    <log_dir>/<run id>_*/attempt_<N>/filtered_std{out,err}.log, with the tee prefix."""
    for flag in ("--duplicate-stdout-filters", "--duplicate-stderr-filters"):
        r = L.run("crun", [f"{flag}=", "--no_python", "sh", "-c", "echo RESULT ok"])
        check(r.rc == 0 and r.results() == ["RESULT ok"], f"{flag}= (empty)\n{r.describe()}")
    logs = os.path.join(L.scratch, "dup-logs")
    script = ("echo apple $LOCAL_RANK; echo pear $LOCAL_RANK; echo 'a,b' $LOCAL_RANK; "
              "echo orange $LOCAL_RANK >&2; echo plum >&2")
    r = L.run("crun", ["--nproc_per_node", 2, "--tee", 3, "--log_dir", logs, "--rdzv_id", "dup",
                       "--duplicate_stdout_filters", "apple,a,,b", "--no_python", "sh", "-c", script],
              {"PET_DUPLICATE_STDERR_FILTERS": "orange"})
    check(r.rc == 0, f"duplicate filters run failed\n{r.describe()}")
    attempt = glob.glob(os.path.join(logs, "dup_*", "attempt_0"))
    check(len(attempt) == 1, f"no attempt_0 under {logs}")
    with open(os.path.join(attempt[0], "filtered_stdout.log")) as f:
        out = sorted(f.read().splitlines())
    with open(os.path.join(attempt[0], "filtered_stderr.log")) as f:
        err = sorted(f.read().splitlines())
    check(out == ["[default0]:a,b 0", "[default0]:apple 0", "[default1]:a,b 1", "[default1]:apple 1"],
          f"filtered_stdout.log: {out}")
    check(err == ["[default0]:orange 0", "[default1]:orange 1"], f"filtered_stderr.log: {err}")


def case_numa_binding(L):
    """torch's run.py: --numa-binding/--numa_binding, choices node, socket, exclusive,
    core-complex, default None, and no action=env: PET_NUMA_BINDING is not read. Another value is
    an argparse error (exit 2). torch binds local rank i near GPU i and fails without one. crun:
    exit 2 for a bad value, and, one line naming the flag, when no GPU is visible
    (CUDA_VISIBLE_DEVICES set but empty, on any host); PET_NUMA_BINDING changes nothing."""
    one_line_usage_error(L.run("crun", ["--numa-binding", "bogus", "/bin/true"]), "--numa-binding", "bad mode")
    for mode in ("node", "socket", "exclusive", "core-complex"):
        one_line_usage_error(L.run("crun", ["--numa_binding", mode, "/bin/true"], {"CUDA_VISIBLE_DEVICES": ""}),
                             "--numa-binding", mode)
    r = L.run("crun", ["/bin/true"], {"PET_NUMA_BINDING": "node"})
    check(r.rc == 0, f"PET_NUMA_BINDING was read (torch does not read it)\n{r.describe()}")


def case_log_line_prefix_template(L):
    """TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (torch's run.py reads it from the environment; the
    agent fills it with string.Template.safe_substitute(role_name, rank, local_rank)): every teed
    console line of a worker starts with it; unknown names stay as written. Without it a teed line
    starts with "[<role><local rank>]:" (torch 1.13's default, both launchers)."""
    tee = ["--tee", 3, "--role", "trainer", "--no_python", "sh", "-c", "echo line"]
    runs = L.both(lambda x: [*static(2), *tee])
    succeeded(runs, "tee default prefix")
    for r in runs:
        check(sorted(l for l in r.out.splitlines() if l.endswith("line")) == ["[trainer0]:line", "[trainer1]:line"],
              f"{r.launcher}: default prefix\n{r.describe()}")
    r = L.run("crun", [*static(2), *tee], {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "<${role_name}|${rank}|$local_rank|${pid}|$$> "})
    got = sorted(l for l in r.out.splitlines() if l.endswith("line"))
    check(r.rc == 0 and got == ["<trainer|0|0|${pid}|$> line", "<trainer|1|1|${pid}|$> line"], f"template: {got}\n{r.describe()}")


CASES = {f.__name__[5:]: f for f in (case_repeated_option, case_empty_value, case_argv0, case_args_template, case_log_dir,
                                       case_program_resolution, case_rdzv_endpoint_port0, case_shared_endpoint,
                                       case_static_one_node,
                                       case_shutdown_timeout, case_virtual_local_rank, case_event_log_handler,
                                       case_duplicate_filters, case_numa_binding, case_log_line_prefix_template)}

# The cases that run crun alone (torch 1.13 lacks the flag): they need no torch.
CRUN_ONLY = {"shutdown_timeout", "virtual_local_rank", "event_log_handler", "duplicate_filters", "numa_binding"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--crun", required=True)
    p.add_argument("--case", required=True, choices=sorted(CASES))
    args = p.parse_args()
    probe = subprocess.run([PYTHON, "-c", "import torch.distributed.run"], capture_output=True, text=True)
    if args.case not in CRUN_ONLY and probe.returncode != 0:
        print(f"FAIL: {PYTHON} cannot import torch; run scripts/install-deps.sh (it installs Debian's python3-torch)")
        return 1
    scratch = tempfile.mkdtemp(prefix=f"crun-flags-{args.case}-")
    start = time.monotonic()
    try:
        CASES[args.case](Launchers(os.path.abspath(args.crun), scratch))
    except CaseFailed as e:
        print(f"FAIL: {args.case}: {e}")
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"PASS: {args.case} ({time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
