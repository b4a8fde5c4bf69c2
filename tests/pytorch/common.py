# Helpers shared by the PyTorch case scripts (imported from the script's own folder).
import hashlib
import os


def result(**fields):
    """One deterministic result line; run_case.py collects every 'RESULT ' line of stdout.
    One write(2) per line: under torchrun all workers share one stdout pipe, and print() under
    `python -u` writes the text and its newline separately, so lines of two ranks could mix."""
    line = "RESULT " + " ".join(f"{k}={v}" for k, v in fields.items()) + "\n"
    os.write(1, line.encode())


def say_store():
    """Which store this worker's init_process_group(env://) joins: one 'STORE ' line (not a
    RESULT line, so the launchers' results still compare equal)."""
    line = f"STORE rank={os.environ.get('RANK')} agent_store={os.environ.get('TORCHELASTIC_USE_AGENT_STORE')}\n"
    os.write(1, line.encode())


say_store()


def env_int(name):
    return int(os.environ[name])


def weights_hash(model):
    """sha256 over every tensor of the state dict (name and raw bytes): bit-identical weights."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:20]
