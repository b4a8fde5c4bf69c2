"""A test double of torch >= 2.2's NCCL flight recorder dump interface, for crun's tests.

torch here is Debian's 1.13 (no flight recorder) and no GPU is lent, so the tests run this
instead. It does, from a worker's Python, what ProcessGroupNCCL does (agent/flight_recorder.h
lists the source it follows):
  - only when the buffer size (TORCH_FR_BUFFER_SIZE, else TORCH_NCCL_TRACE_BUFFER_SIZE) is > 0 and
    TORCH_NCCL_DEBUG_INFO_PIPE_FILE is set: removes PREFIX<RANK>.pipe, makes it a FIFO (0666),
    opens it O_RDONLY|O_NONBLOCK and polls it from a thread of its own (torch's watchdog; every
    100 ms here) while the main thread may be stuck;
  - on any byte read: writes the dump in place to DUMP_PREFIX<RANK> (TORCH_FR_DUMP_TEMP_FILE, else
    TORCH_NCCL_DEBUG_INFO_TEMP_FILE, else /tmp/nccl_trace_rank_), truncating, as torch's
    std::ofstream does: no temporary name, no rename; the file is whole when it is closed. It is
    a pickle (a dict, as torch's is); written in two parts with a pause between
    (FAKE_FLIGHT_RECORDER_PAUSE seconds, 0.3 unless set), so a reader that takes the first write
    for the end reads half.
Modes (start(mode)): "dumps" as torch; "no_reader": the FIFO made, then its reader closed (a
watchdog gone); "never_writes": requests read, no dump ever written.
"""
import os
import pickle
import threading
import time


def buffer_size():
    for key in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        if key in os.environ:
            return int(os.environ[key])
    return 0


def dump_prefix():
    for key in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        if os.environ.get(key):
            return os.environ[key]
    return "/tmp/nccl_trace_rank_"


def dump_content(rank):
    """What this double's dump of `rank` holds (tests compare what they unpickle with it)."""
    return {
        "version": "2.x-test-double",
        "rank": rank,
        "pid": os.getpid(),
        "entries": [{"record_id": 0, "profiling_name": "nccl:all_reduce", "state": "scheduled",
                     "collective_seq_id": 7, "pg_id": 0}],
    }


def write_dump(rank):
    data = pickle.dumps(dump_content(rank), protocol=2)
    with open(dump_prefix() + str(rank), "wb") as out:
        half = len(data) // 2
        out.write(data[:half])
        out.flush()
        time.sleep(float(os.environ.get("FAKE_FLIGHT_RECORDER_PAUSE", "0.3")))
        out.write(data[half:])


def start(mode="dumps"):
    """Makes the rank's pipe and starts its poller; returns the pipe's path, or None when torch
    would make none."""
    stem = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "")
    if not stem or buffer_size() <= 0:
        return None
    rank = int(os.environ["RANK"])
    pipe = "%s%d.pipe" % (stem, rank)
    try:
        os.unlink(pipe)
    except FileNotFoundError:
        pass
    os.mkfifo(pipe, 0o666)
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    if mode == "no_reader":
        os.close(fd)
        return pipe

    def poll():
        while True:
            time.sleep(0.1)
            try:
                data = os.read(fd, 128)
            except BlockingIOError:
                data = b""
            if data and mode == "dumps":
                write_dump(rank)

    threading.Thread(target=poll, daemon=True, name="fake_nccl_watchdog").start()
    return pipe
