# torchrun (torch 1.13) with one fix so it runs on Python 3.11: Std.from_str("0") returns None
# there (IntFlag iteration skips the zero member), which crashes every run with the default
# --redirects/--tee. The shim maps None back to Std.NONE and then runs torchrun's own main().
import sys

from torch.distributed.elastic.multiprocessing import api

_orig = api.Std.from_str


def _from_str(vm):
    r = _orig(vm)
    if r is None:
        return api.Std.NONE
    if isinstance(r, dict):
        return {k: (api.Std.NONE if v is None else v) for k, v in r.items()}
    return r


api.Std.from_str = _from_str

from torch.distributed.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
