#!/usr/bin/env python3
"""N crun agents on loopback with one shared c10d endpoint and no is_host (issue 14).

Usage: shared_endpoint_agents.py --crun CRUN_BINARY [--agents 1024] [--bound-s 240]

Every agent is `crun --nnodes N --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint
127.0.0.1:PORT --rdzv-id ID /bin/true`, started at once, each in its own session. The endpoint is
this host's, so each agent infers is_host; the first to listen hosts the store and the others,
finding the port taken, join it as clients (MultiNodeConfig::join_if_taken). Checks, within the
bound: every agent exits 0 (none dies with "Address already in use", none waits forever), one
agent hosts, it alone prints the round's progress lines and says once that it hosts, every other
agent prints one line (its rank; before it, only when no round formed within 5 s, where it
waits), and no process of any agent's session is left afterwards. Agents are reaped as their pidfds
become readable (no polling interval).
"""
import argparse
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sessions_left(sids):
    """Processes (pid, command) still in one of the sessions `sids`."""
    left = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp session
        if int(fields[3]) in sids and fields[0] != "Z":
            left.append((int(entry), stat[stat.index("(") + 1:stat.rindex(")")]))
    return left


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--crun", required=True)
    p.add_argument("--agents", type=int, default=1024)
    p.add_argument("--bound-s", type=float, default=240)
    a = p.parse_args()
    n = a.agents
    # Each agent holds a few descriptors only in itself, but the host's store holds one connection
    # per agent: raise the soft limit to the hard one (inherited by the agents).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < n + 64:
        print(f"FAIL: RLIMIT_NOFILE hard limit {hard} is too low for {n} agents")
        return 1
    scratch = tempfile.mkdtemp(prefix="crun-shared-endpoint-")
    env = dict(os.environ, TMPDIR=scratch)
    cmd = [a.crun, "--nnodes", str(n), "--nproc-per-node", "1", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", f"shared-{os.getpid()}", "/bin/true"]
    agents = []
    codes = {}  # pid -> exit code, of the agents reaped
    start = time.monotonic()
    try:
        for i in range(n):
            with open(os.path.join(scratch, f"agent-{i}.log"), "wb") as log:
                agents.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                               env=env, start_new_session=True))
        launched = time.monotonic() - start
        deadline = start + a.bound_s
        # Each agent's pidfd becomes readable when it ends: wait on them (no polling interval),
        # reaping whichever ends, in any order, until all have or the bound has passed.
        waiting = select.poll()
        pidfds = {}
        for ag in agents:
            fd = os.pidfd_open(ag.pid)
            pidfds[fd] = ag.pid
            waiting.register(fd, select.POLLIN)
        try:
            while len(codes) < n and time.monotonic() < deadline:
                for fd, _ in waiting.poll(max(0, int((deadline - time.monotonic()) * 1000))):
                    _, status = os.waitpid(pidfds[fd], 0)
                    codes[pidfds[fd]] = os.waitstatus_to_exitcode(status)
                    waiting.unregister(fd)
        finally:
            for fd in pidfds:
                os.close(fd)
        finished = time.monotonic() - start
        sids = {ag.pid for ag in agents}
        failed = {pid: c for pid, c in codes.items() if c != 0}
        running = [ag.pid for ag in agents if ag.pid not in codes]
        print(f"{n} agents: launched in {launched:.1f} s, {len(codes)} exited in {finished:.1f} s, "
              f"{len(failed)} non-zero, {len(running)} still running")
        problems = []
        if running:
            problems.append(f"{len(running)} agents still running after {a.bound_s:.0f} s")
        if failed:
            index = {ag.pid: i for i, ag in enumerate(agents)}
            worst = sorted(failed.items())[:3]
            for pid, code in worst:
                with open(os.path.join(scratch, f"agent-{index[pid]}.log"), errors="replace") as f:
                    tail = f.read()[-600:]
                problems.append(f"agent {index[pid]} (pid {pid}) exited {code}:\n{tail}")
        # The round's progress ("crun: round 0: J/N ...") is printed by the store's host alone (it
        # publishes a line at the first join, so with N > 1 it prints at least one); the host says
        # once that it hosts; every other agent prints one line, its rank, and before it at most
        # the line that says where it waits, which comes only once 5 s passed without a round
        # (a sanitizer build or a slow machine takes longer than that to start 1,024 agents).
        printing, hosts, texts = set(), set(), []
        for i in range(n):
            with open(os.path.join(scratch, f"agent-{i}.log"), errors="replace") as f:
                text = f.read().splitlines()
            if any(line.startswith("crun: round 0: ") and len(line.split()) > 3 and "/" in line.split()[3]
                   for line in text):
                printing.add(i)
            if any(line.startswith("crun: hosting the rendezvous at ") for line in text):
                hosts.add(i)
            texts.append(text)
        if len(hosts) != 1 or printing != hosts:
            problems.append(f"agents {sorted(printing)[:10]} printed the round's progress, agents {sorted(hosts)[:10]}"
                            " hosted: the store's host alone should print it")
        if any(sum(line.startswith("crun: hosting the rendezvous at ") for line in texts[i]) != 1 for i in hosts):
            problems.append("the host did not say exactly once that it hosts")
        def one_line(text):
            # 1,024 agents of one user on one host take more inotify instances than the user's
            # limit (fs.inotify.max_user_instances, 128 by default): those past it say once that
            # they read their state directories at each start instead (agent/state_directory.h).
            unwatched = [line for line in text if line.startswith("crun: cannot watch the state directories (inotify")]
            if len(unwatched) > 1:
                return False
            text = [line for line in text if line not in unwatched]
            waited = [line for line in text if line.startswith("crun: joining the rendezvous at ")]
            ranks = [line for line in text if line.startswith("crun: round 0: node rank ")]
            return (len(ranks) == 1 and len(text) == 1 + len(waited) and len(waited) <= 1 and
                    all(line.endswith(": no round yet after 5 s, still waiting") for line in waited))
        chatty = [i for i in range(n) if i not in hosts and not one_line(texts[i])]
        if chatty:
            problems.append(f"joining agents that printed more than their rank (and where they wait, after 5 s): {chatty[:10]} "
                            f"(agent {chatty[0]}: {texts[chatty[0]][:3]})")
        if not running:
            left = sessions_left(sids)
            if left:
                problems.append(f"{len(left)} processes left in the agents' sessions: {left[:5]}")
        if problems:
            print("FAIL: " + "\n".join(problems))
            return 1
        print(f"PASS: {n} agents on one endpoint, no is_host: every agent exited 0, nothing left")
        return 0
    finally:
        # Backstop: nothing may outlive the test (the agents not reaped, and anything left in a
        # session of theirs).
        for pid in [ag.pid for ag in agents if ag.pid not in codes] + [pid for pid, _ in sessions_left({ag.pid for ag in agents})]:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for ag in agents:
            if ag.pid not in codes:
                ag.wait()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
