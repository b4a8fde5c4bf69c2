#!/usr/bin/env python3
"""examples/pytorch_ddp.py under crun resumes from CRUN_STATE_DIR: rank 1 fails at epoch 2 of 3,
the group restarts, every rank reads back the copy it saved (torch.save to a dot-name, os.replace)
and the job ends with the accuracy of an uninterrupted run.

Usage: example_state.py --crun CRUN_BINARY
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "pytorch_ddp.py")


def run(crun, *args):
    env = dict(os.environ, PYTHON_EXEC=os.environ.get("PYTHON_EXEC") or "/usr/bin/python3")
    p = subprocess.run([crun, "--standalone", "--nproc-per-node", "2", *args], capture_output=True, text=True,
                       timeout=240, env=env)
    return p.returncode, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--crun", required=True)
    crun = ap.parse_args().crun
    rc, plain = run(crun, EXAMPLE, "--epochs", "3")
    if rc != 0:
        sys.exit(f"FAIL: the uninterrupted run exited {rc}:\n{plain}")
    rc, failed = run(crun, "--max-restarts", "1", EXAMPLE, "--epochs", "3", "--fail-at-epoch", "2", "--fail-rank", "1")
    if rc != 0:
        sys.exit(f"FAIL: the run with a failure exited {rc}:\n{failed}")
    if not re.search(r"restart 1: resumed from \S*/crun-state-\S+/rank-0/ddp_checkpoint\.pt at epoch 2", failed):
        sys.exit(f"FAIL: no resume from CRUN_STATE_DIR at epoch 2:\n{failed}")
    final = [re.search(r"final: accuracy=(\S+)", out) for out in (plain, failed)]
    if not all(final) or final[0].group(1) != final[1].group(1):
        sys.exit(f"FAIL: final accuracy differs:\n{plain}\n---\n{failed}")
    print(f"PASS: resumed from CRUN_STATE_DIR at epoch 2, final accuracy {final[1].group(1)} as uninterrupted")


if __name__ == "__main__":
    main()
