"""bench/watchdog's worker. Attempt 0 opens torch's file-timer scope ("timer") or sends one
heartbeat ("heartbeat") and then sleeps past the deadline, writing the deadline (wall clock) to
$BENCH_OUT; the replacement (attempt 1) writes the wall time of its first line and exits 0.
"floor" writes only its first line's time: a Python process's start, the floor of any restart."""
import time

t_first = time.time()  # before any import: the replacement's first moment
import os  # noqa: E402
import sys  # noqa: E402

mode = sys.argv[1]
out = os.environ["BENCH_OUT"]


def note(line):
    with open(out, "a") as f:
        f.write(line + "\n")


if mode == "floor" or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0:
    note(f"start {t_first!r}")
    sys.exit(0)
if mode == "timer":
    from torch.distributed.elastic.timer import FileTimerClient

    client = FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"])
    deadline = time.time() + 0.5
    client.acquire("bench", deadline)
else:
    import mmap
    import struct

    hb = mmap.mmap(os.open(os.environ["CRUN_HEARTBEAT_FILE"], os.O_RDWR), 16)
    hb[:] = struct.pack("=qq", 1, time.monotonic_ns())
    deadline = time.time() + float(os.environ["BENCH_HEARTBEAT_TIMEOUT"])
note(f"deadline {deadline!r}")
time.sleep(120)
