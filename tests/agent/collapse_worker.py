"""The worker of collapse_cases.py (crun runs it as `python3 -u`: each print is one write).

Usage: collapse_worker.py MODE
  same      1,000 lines every rank prints ("same line I"), then "only rank R", and the same 1,000
            on stderr ("same err I") with "only err R"
  gate      ranks other than the last print "same line" and exit; the last blocks opening the FIFO
            $COLLAPSE_GATE until the test opens it, then prints "same line"
  streams   200 pairs: "out I" on stdout, "err I" on stderr; then "err rank R" on stderr
  flood     every rank but the last prints $FLOOD_LINES lines of its own (nothing to collapse);
            the last waits at $COLLAPSE_GATE, then prints "last done"
  held      rank 0 prints "held line"; rank 1 prints "partial without newline" (no newline); both
            then block at $COLLAPSE_GATE (the test stops the job instead)
  exits     the last rank prints "last line" and exits; the others block at $COLLAPSE_GATE, then
            exit without a word
"""
import os
import sys

rank = int(os.environ["LOCAL_RANK"])
last = int(os.environ["LOCAL_WORLD_SIZE"]) - 1
mode = sys.argv[1]


def gate():
    with open(os.environ["COLLAPSE_GATE"]) as f:
        f.read()


if mode == "same":
    for i in range(1000):
        print(f"same line {i}")
    print(f"only rank {rank}")
    for i in range(1000):
        print(f"same err {i}", file=sys.stderr)
    print(f"only err {rank}", file=sys.stderr)
elif mode == "gate":
    if rank == last:
        gate()
    print("same line")
elif mode == "streams":
    for i in range(200):
        print(f"out {i}")
        print(f"err {i}", file=sys.stderr)
    print(f"err rank {rank}", file=sys.stderr)
elif mode == "flood":
    if rank == last:
        gate()
        print("last done")
    else:
        pad = "x" * 200
        out = sys.stdout
        for i in range(int(os.environ["FLOOD_LINES"])):
            out.write(f"r{rank} {i} {pad}\n")
        out.flush()
elif mode == "held":
    if rank == 0:
        print("held line")
    else:
        sys.stdout.write("partial without newline")
        sys.stdout.flush()
    gate()
elif mode == "exits":
    if rank == last:
        print("last line")
    else:
        gate()
else:
    sys.exit(f"unknown mode {mode}")
