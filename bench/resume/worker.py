import time; _TOP_NS = time.clock_gettime_ns(time.CLOCK_MONOTONIC)  # noqa: E702  (first line of user code)
# The job of bench/resume/run.py: a PyTorch DDP job on gloo, as a user writes one. Each rank
# imports torch, joins the process group (env://), loads a 256x256 checkpoint (the first start
# writes it), passes a barrier and trains a DDP Linear(256, 256). In the first attempt rank 1
# exits 1 at its first step that begins $BENCH_RESUME_FAIL_AFTER_S (default 3) seconds after its
# barrier: a job that has trained a while, as one that fails in earnest has (a launcher's standby
# interpreter is ready by then, as it is in a long job). The launcher under test restarts the
# group, which trains STEPS_AFTER_RESTART steps and ends. Every milestone is stamped, one line
# each, into $BENCH_RESUME_STAMPS:
#   KIND RESTART RANK NS      KIND: top torch init ckpt barrier step:N fail
# NS is CLOCK_MONOTONIC, one clock for every process on the host. "top" is taken on the first
# line above, before anything else of this file runs (a launcher's standby interpreter may have
# imported torch already; the program's own code starts here either way). Lines are written with
# one write() to an O_APPEND file, so lines of the ranks never interleave.
import os
import sys

STEPS_AFTER_RESTART = 5

RANK = int(os.environ["RANK"])
RESTART = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
_STAMPS = os.open(os.environ["BENCH_RESUME_STAMPS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def stamp(kind, ns=None):
    ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC) if ns is None else ns
    os.write(_STAMPS, f"{kind} {RESTART} {RANK} {ns}\n".encode())


stamp("top", _TOP_NS)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

stamp("torch")
dist.init_process_group("gloo", init_method="env://")
stamp("init")

checkpoint = os.path.join(os.environ["BENCH_RESUME_DIR"], "checkpoint.pt")
if not os.path.exists(checkpoint):  # the first start writes it (both ranks the same bytes)
    g = torch.Generator().manual_seed(43)
    weights = {"weight": torch.randn(256, 256, generator=g), "bias": torch.zeros(256)}
    partial = f"{checkpoint}.{RANK}.partial"
    torch.save(weights, partial)
    os.rename(partial, checkpoint)
model = torch.nn.Linear(256, 256)
model.load_state_dict(torch.load(checkpoint))
stamp("ckpt")
dist.barrier()
stamp("barrier")
fail_after_ns = int(float(os.environ.get("BENCH_RESUME_FAIL_AFTER_S", "3")) * 1e9)
fail_at = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + fail_after_ns

ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
data = torch.Generator().manual_seed(RANK)
step = 0
while RESTART == 0 or step < STEPS_AFTER_RESTART:  # the first attempt: until rank 1 fails
    if RANK == 1 and RESTART == 0 and time.clock_gettime_ns(time.CLOCK_MONOTONIC) >= fail_at:
        stamp("fail")
        os._exit(1)
    loss = ddp(torch.randn(32, 256, generator=data)).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # the gradients' all_reduce: a step ends only when both ranks took it
    opt.step()
    stamp(f"step:{step}")
    print(f"rank {RANK} restart {RESTART} step {step} loss {loss.item():.5f}", flush=True)
    step += 1

dist.destroy_process_group()
sys.exit(0)
