#!/usr/bin/env python3
"""A rough figure for standby workers (docs/decisions.md): from rank 1's failure (its sys.exit) to
the new rank 1 running its program (its first line, and its line after `import torch`), crun
restarting cold against crun --standby-workers (preload torch), interleaved, N runs each, medians.
Rank 1 fails once the standbys have preloaded. Usage: standby_restart.py CRUN [N]   (N: 5)"""
import os, statistics, subprocess, sys, tempfile, time, json

CRUN = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 5
tmp = tempfile.mkdtemp(prefix="standby-measure-")
prog = os.path.join(tmp, "prog.py")
open(prog, "w").write(r'''
import time
t_start = time.time()
import os, sys, json
import torch
t_torch = time.time()
d, rank, restart = os.environ["M_DIR"], os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
if restart == "0" and rank == "1":
    want = [os.path.join(d, f"ready{lr}") for lr in (0, 1)] if os.environ.get("M_STANDBY") == "1" else []
    deadline = time.time() + 60
    while not all(os.path.exists(p) for p in want) and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # everything settled
    json.dump({"fail": time.time()}, open(os.path.join(d, "fail.json"), "w"))
    sys.exit(1)
if restart == "1":
    json.dump({"start": t_start, "torch": t_torch}, open(os.path.join(d, f"r{rank}.json"), "w"))
''')
open(os.path.join(tmp, "ready_mark.py"), "w").write(
    "import os\nopen(os.path.join(os.environ['M_DIR'], 'ready' + os.environ['LOCAL_RANK']), 'w').close()\n")
rows = {"cold": [], "standby": []}
for i in range(N):
    for kind in ("cold", "standby"):
        d = tempfile.mkdtemp(dir=tmp)
        cmd = [CRUN, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1"]
        if kind == "standby":
            cmd += ["--standby-workers", "--standby-preload", "torch,ready_mark"]
        env = {**os.environ, "M_DIR": d, "M_STANDBY": "1" if kind == "standby" else "0", "PYTHON_EXEC": os.environ.get("PYTHON_EXEC", "/usr/bin/python3")}
        p = subprocess.run(cmd + [prog], cwd=tmp, env=env, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        fail = json.load(open(os.path.join(d, "fail.json")))["fail"]
        r1 = json.load(open(os.path.join(d, "r1.json")))
        rows[kind].append((r1["start"] - fail, r1["torch"] - fail))
print(f"load average before/after: {os.getloadavg()}")
print("| crun | failure -> rank 1's first line | failure -> rank 1 past `import torch` |")
print("|---|---:|---:|")
for kind, v in rows.items():
    a = statistics.median(x[0] for x in v) * 1000
    b = statistics.median(x[1] for x in v) * 1000
    print(f"| {kind} | {a:.0f} ms | {b:.0f} ms |   all: {[f'{x[1]*1000:.0f}' for x in v]}")
c = statistics.median(x[1] for x in rows["cold"]); s = statistics.median(x[1] for x in rows["standby"])
print(f"ratio standby/cold (past import torch): {s / c:.3f}")
