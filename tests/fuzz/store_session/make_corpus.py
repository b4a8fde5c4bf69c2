"""Writes the seed corpus of the store_session fuzz target (run from this folder; output is checked in).

Each seed is a script for fuzz_store_session.cc: records of [command][length][payload], where a
feed's payload is real protocol bytes (docs/store-protocol.md), so the fuzzer starts from valid
handshakes and frames and mutates from there.
"""
import os
import struct

MAGIC, VERSION = 0x54535243, 1
OPS = dict(set=1, get=2, add=3, compare_set=4, check=5, wait=6, delete=7, num_keys=8, multi_get=9,
           multi_set=10, append=11, list_keys=12, try_get=13, watch=14, unwatch=15, ping=16, set_ephemeral=17)
FOREVER = 0xFFFFFFFF


def s(b):
    b = b if isinstance(b, bytes) else b.encode()
    return struct.pack("<I", len(b)) + b


def hello(token=b""):
    return struct.pack("<IHH", MAGIC, VERSION, len(token)) + token


def frame(op, rid, payload=b""):
    body = struct.pack("<BI", OPS[op], rid) + payload
    return struct.pack("<I", len(body)) + body


def u64(v):
    return struct.pack("<Q", v)


def ts(b):  # torch's TCPStore string: u64 length and the bytes
    b = b if isinstance(b, bytes) else b.encode()
    return u64(len(b)) + b


VALIDATE = b"\x00\xce\xf7\x85\x3c"


def rec(command, payload=b""):
    out = b""
    while True:  # a payload over 255 bytes becomes several feed records
        chunk, payload = payload[:255], payload[255:]
        out += bytes([command, len(chunk)]) + chunk
        if not payload:
            return out


def feed(session, b):
    return rec(session, b)


def take(session):
    return rec(4 + session)


def tick(ms):
    return rec(8, bytes([ms]))


def close(session):
    return rec(12 + session)


def inflight(session, kib):
    return rec(16 + session, bytes([kib]))


def fill(session, kib, pattern):
    return rec(20 + session, bytes([kib]) + pattern)


seeds = {
    "set_get": feed(0, hello() + frame("set", 1, s("k") + s("v")) + frame("get", 2, s("k") + struct.pack("<I", 0))) + take(0),
    "every_op": feed(0, hello() + b"".join([
        frame("set", 1, s("a") + s("1")), frame("add", 2, s("a") + struct.pack("<q", 5)),
        frame("compare_set", 3, s("a") + s("6") + s("7")), frame("check", 4, struct.pack("<I", 1) + s("a")),
        frame("wait", 5, struct.pack("<I", 0) + struct.pack("<I", 1) + s("a")), frame("num_keys", 6, s("")),
        frame("multi_set", 7, struct.pack("<I", 2) + s("b") + s("2") + s("c") + s("3")),
        frame("multi_get", 8, struct.pack("<I", 0) + struct.pack("<I", 2) + s("b") + s("c")),
        frame("append", 9, s("c") + s("33")), frame("list_keys", 10, s("") + struct.pack("<I", 10)),
        frame("try_get", 11, s("zz")), frame("delete", 12, s("b")), frame("ping", 13)])) + take(0),
    # The use-after-free sequence: a parked get, four big replies, then an ephemeral set of the
    # parked key, while another session watches everything.
    "overflow_in_notification": feed(1, hello() + frame("watch", 1, s(""))) +
        feed(2, hello() + frame("set", 1, s("big") + s(b"b" * 15500))) +
        feed(0, hello() + frame("get", 1, s("k") + struct.pack("<I", FOREVER)) +
             b"".join(frame("get", 2 + i, s("big") + struct.pack("<I", 0)) for i in range(4)) +
             frame("set_ephemeral", 9, s("k") + s(b"e" * 4000))) + take(1),
    "parked_timeouts": feed(0, hello() + frame("get", 1, s("x") + struct.pack("<I", 5)) +
                            frame("wait", 2, struct.pack("<I", 200) + struct.pack("<I", 2) + s("x") + s("y"))) +
        tick(10) + feed(1, hello() + frame("set", 1, s("y") + s("1"))) + tick(250) + take(0),
    "watch_unwatch_close": feed(0, hello() + frame("watch", 1, s("p/")) + frame("set_ephemeral", 2, s("p/me") + s("1"))) +
        feed(1, hello() + frame("watch", 1, s("p/")) + frame("unwatch", 2, struct.pack("<I", 1))) + close(0) + take(1),
    "token_preamble": feed(0, hello(b"x" * 200) + frame("ping", 1)),
    "huge_declared_frame": feed(0, hello() + struct.pack("<I", 65 * 1024 * 1024 + 1 * 1024 * 1024) + b"\x01"),
    "big_value_fill": feed(0, hello() + struct.pack("<I", 5 + 4 + 1 + 4 + 60 * 1024) + struct.pack("<BI", 1, 1) + s("k") +
                           struct.pack("<I", 60 * 1024)) + fill(0, 60, b"v" * 64) + take(0),
    "in_flight_limit": feed(0, hello() + frame("watch", 1, s(""))) + inflight(0, 63) +
        feed(1, hello() + frame("set", 1, s("k") + s(b"z" * 2000))),
    "garbage": feed(0, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
    # torch's TCPStore clients (docs/store-protocol.md, section 6): 1.13's codes, then 2.2+'s after
    # VALIDATE, a wait parked by one and completed by another, a cancelled wait, a crun client beside.
    "torch1_ops": feed(0, b"\x03" + ts("init/") + u64(1) + b"\x00" + ts("/k") + ts("v") + b"\x05" + u64(1) + ts("/k") +
                       b"\x02" + ts("/k") + b"\x01" + ts("/c") + ts("") + ts("x") + b"\x04" + u64(1) + ts("/k") +
                       b"\x06" + b"\x08" + ts("/k")) + take(0),
    "torch2_ops": feed(1, VALIDATE + b"\x0d\x01\x02\x03\x04" + b"\x09" + ts("/a") + ts("xy") +
                       b"\x0b" + u64(2) + ts("/m") + ts("1") + ts("/n") + ts("2") + b"\x0a" + u64(2) + ts("/m") + ts("/z") +
                       b"\x11" + b"\x06" + u64(1) + ts("/later") + b"\x0c") + take(1),
    "torch_wait_across": feed(0, b"\x05" + u64(2) + ts("/x") + ts("/y")) +
        feed(1, VALIDATE + b"\x01" + ts("/x") + ts("1")) + feed(2, hello() + frame("set", 1, s("/y") + s("2"))) +
        take(0) + close(0) + take(2),
}
os.makedirs("corpus", exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join("corpus", name), "wb") as f:
        f.write(data)
