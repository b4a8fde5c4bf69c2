#!/usr/bin/env python3
"""The floor of state replication: the same bytes moved the plainest way (bench/state/replication.py).

  floor_copy.py send --fifo F --to ADDR:PORT     (on the saving host)
  floor_copy.py recv --listen ADDR:PORT --into DIR (on the next host)

send: connects to the receiver, then opens the FIFO F for reading (tests/support/state_worker.cc
--commit-fifo writes "<path>\\n" to it after each save). At each wake-up it sends the newest
committed file named there once (commits that arrived during a send coalesce into the next, as in
crun): an 8-byte length, then the file by sendfile, over the one TCP connection. At the FIFO's end
(the worker exited) it closes the connection and prints "sent commits=<c> sends=<s> bytes=<b>
gone=<g>" (g: files removed before it opened them, when crun's end removed the state directory
before this nice-19 sender got to the last save).
recv: listens, prints "ready", accepts one connection; each file is received 64 KiB at a time into
DIR/.incoming and renamed to DIR/state; at the connection's end prints "received files=<n>
bytes=<b>". Both run at nice 19, the priority of crun's replication thread. Any error: one line on
stderr, exit 1. The caller bounds their lifetime (kills their process group).
"""
import argparse
import os
import socket
import struct
import sys

HEADER = struct.Struct("<Q")


def endpoint(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


def send(a):
    with socket.create_connection(endpoint(a.to), timeout=30) as s:
        s.settimeout(None)
        fifo = os.open(a.fifo, os.O_RDONLY | os.O_CLOEXEC)
        commits = sends = sent = gone = 0
        while True:
            told = os.read(fifo, 65536)  # each line is one write below PIPE_BUF: whole lines only
            if not told:
                break
            lines = told.decode().split()
            commits += len(lines)
            try:
                f = open(lines[-1], "rb")
            except FileNotFoundError:  # the job ended and crun removed its state directory first
                gone += 1
                continue
            with f:
                size = os.fstat(f.fileno()).st_size
                s.sendall(HEADER.pack(size))
                if s.sendfile(f, 0, size) != size:
                    sys.exit(f"floor_copy send: {lines[-1]} shrank during the send")
            sends += 1
            sent += size
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # the receiver's close: every byte is in
    print(f"sent commits={commits} sends={sends} bytes={sent} gone={gone}", flush=True)


def recv_exactly(conn, view):
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if n == 0:
            return got
        got += n
    return got


def recv(a):
    os.makedirs(a.into, exist_ok=True)
    with socket.create_server(endpoint(a.listen)) as server:
        server.settimeout(60)
        print("ready", flush=True)
        conn, _ = server.accept()
    conn.settimeout(None)
    buf = bytearray(65536)
    view = memoryview(buf)
    files = total = 0
    head = bytearray(HEADER.size)
    incoming, final = os.path.join(a.into, ".incoming"), os.path.join(a.into, "state")
    with conn:
        while True:
            n = recv_exactly(conn, memoryview(head))
            if n == 0:
                break
            if n != HEADER.size:
                sys.exit("floor_copy recv: the connection ended inside a header")
            (left,) = HEADER.unpack(head)
            fd = os.open(incoming, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                while left:
                    n = conn.recv_into(view[:min(left, len(buf))])
                    if n == 0:
                        sys.exit("floor_copy recv: the connection ended inside a file")
                    done = 0
                    while done < n:
                        done += os.write(fd, view[done:n])
                    left -= n
                    total += n
            finally:
                os.close(fd)
            os.rename(incoming, final)
            files += 1
    print(f"received files={files} bytes={total}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="role", required=True)
    s = sub.add_parser("send")
    s.add_argument("--fifo", required=True)
    s.add_argument("--to", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--listen", required=True)
    r.add_argument("--into", required=True)
    a = ap.parse_args()
    os.setpriority(os.PRIO_PROCESS, 0, 19)
    try:
        send(a) if a.role == "send" else recv(a)
    except (OSError, ValueError) as e:
        sys.exit(f"floor_copy {a.role}: {e}")


if __name__ == "__main__":
    main()
