# torchrun (torch 1.13) with one fix so it runs on Python 3.11: Std.from_str returns None there
# for "0" and for "3" (IntFlag iteration skips the zero member and the composite ALL), which
# crashes every run with the default --redirects/--tee and silently turns `-r 3` / `-t 3` into
# "nothing". The shim lets torch's own from_str check the text (it raises on a bad one), reads the
# numbers with Std(int) itself and then runs torchrun's own main().
import sys

from torch.distributed.elastic.multiprocessing import api

_orig = api.Std.from_str


def _from_str(vm):
    r = _orig(vm)
    if isinstance(r, dict):
        return {int(k): api.Std(int(v)) for k, v in (kv.split(":") for kv in vm.split(","))}
    return api.Std(int(vm))


api.Std.from_str = _from_str

from torch.distributed.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
