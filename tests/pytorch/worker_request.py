#!/usr/bin/env python3
"""A PyTorch job's worker asks crun for something through CRUN_CONTROL_FILE (request_script.py,
gloo on CPU, two ranks on one node, --max-restarts 3).

Usage: worker_request.py --crun CRUN_BINARY --case {stop_job,exclude_node}

  stop_job:     rank 1 appends "stop-job ..." and exits 3: crun restarts nothing and exits 3.
  exclude_node: rank 0 appends "exclude-node ..." and exits 0: on one node crun exits 9.
Each case checks crun's one line naming the rank and its reason, and that only attempt 0 ran.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.environ.get("PYTHON_EXEC") or "/usr/bin/python3"
CASES = {
    "stop_job": ("stop-job", "loss is NaN at step 12", 3, 1, 3,
                 "rank 1 (local rank 1, pid {}) asks crun to stop the job (stop-job): loss is NaN at step 12"),
    "exclude_node": ("exclude-node", "CUDA error: uncorrectable ECC error", 0, 0, 9,
                     "rank 0 (local rank 0, pid {}) asks crun to exclude this node (exclude-node): "
                     "CUDA error: uncorrectable ECC error"),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--crun", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    a = ap.parse_args()
    verb, reason, code, rank, want_rc, want_line = CASES[a.case]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC_"))}
    env["PYTHONPATH"] = HERE
    env["PYTHON_EXEC"] = PYTHON  # the interpreter crun runs the script with
    cmd = [a.crun, "--standalone", "--nproc-per-node", "2", "--max-restarts", "3",
           os.path.join(HERE, "request_script.py"), verb, reason, str(code), str(rank)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    failures = []
    if p.returncode != want_rc:
        failures.append(f"crun exited {p.returncode}, want {want_rc}")
    starts = [line for line in p.stdout.splitlines() if line.startswith("START ")]
    if sorted(s.split()[1] for s in starts) != ["rank=0", "rank=1"] or any("restart=0" not in s for s in starts):
        failures.append(f"want one start of each rank, in attempt 0 only: {starts}")
    prefix, suffix = want_line.split("{}")
    lines = [line for line in p.stderr.splitlines() if prefix in line and line.endswith(suffix)]
    if len(lines) != 1:
        failures.append(f"want one line '{want_line}' on crun's stderr, got {len(lines)}")
    if "restarting the group" in p.stderr:
        failures.append("crun restarted the group")
    if failures:
        sys.exit("FAIL: " + "; ".join(failures) + f"\n--- {' '.join(cmd)}\n--- stdout:\n{p.stdout}--- stderr:\n{p.stderr}")
    print(f"PASS: {a.case}: crun exited {p.returncode}, one start, the request's line: {lines[0]}")


if __name__ == "__main__":
    main()
