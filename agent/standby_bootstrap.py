# crun's standby bootstrap (--standby-workers): embedded into crun at build time
# (agent/standby_bootstrap.h) and run as `PYTHON [the cold start's flags] -c <this>
# LOCAL_RANK PRELOAD KIND TARGET`, with KIND "script" or "module" and TARGET the script's path or
# the module's name.
#
# It imports the comma-separated PRELOAD modules (sys.path[0] already the program's), then waits
# for one message on descriptor 3, closes it, and runs the program as a cold start
# (`PYTHON -u script.py ...` / `PYTHON -u -m module ...`, a zip application or a directory) would:
# the round's environment exactly, sys.argv, sys.orig_argv, sys.path[0], and __main__ as CPython's
# own start makes it. The message,
# every field ended by a NUL byte (argv and the environment cannot hold one):
#   crun-standby-1, KIND, TARGET, N, N program arguments, M, M words of the cold start's argv,
#   K, K environment entries (KEY=VALUE).
# Before the message nothing of the round exists. A preload that raises prints its traceback and
# still waits for the message: taken (before or after the raise), this process execs the cold
# start itself, after one line on stderr saying why. It never exits on its own, so an exit can
# never cross crun's message (which would make a preload's failure a worker's). Any other exit
# before the message (a kill) makes crun start that rank cold. A message that cannot be read, or
# crun's end closed without one, is exit 121.
# The first statement snapshots __main__ as the interpreter made it; everything else lives in
# _standby() so that clearing __main__ leaves the bootstrap running.
_pristine = dict(globals())


def _standby(pristine):
    import os
    import sys

    main = sys.modules["__main__"]
    local_rank, preload, kind, target = sys.argv[1:5]

    def absolute(target):
        return target if os.path.isabs(target) else os.path.join(os.getcwd(), target)

    def main_importer(kind, target):
        # What CPython asks of a script's path first: an importer (a zip file, a directory), whose
        # __main__ it then runs; None for a plain file. Cached as CPython caches it.
        if kind == "module":
            return None
        filename = absolute(target)
        if filename in sys.path_importer_cache:
            return sys.path_importer_cache[filename]
        importer = None
        for hook in sys.path_hooks:
            try:
                importer = hook(filename)
                break
            except ImportError:
                continue
        sys.path_importer_cache[filename] = importer
        return importer

    safe_path = getattr(sys.flags, "safe_path", False)  # -P / PYTHONSAFEPATH
    ours = [not safe_path]  # sys.path[0] is ours to replace: the "" of the -c that started us

    def set_path0(kind, target):
        # CPython's sys.path[0]: the zip file or directory run; else nothing with -P; else the
        # script's real directory, or the current directory for -m.
        if main_importer(kind, target) is not None:
            path0 = absolute(target)
        elif safe_path:
            path0 = None
        elif kind == "module":
            path0 = os.getcwd()
        else:
            path0 = os.path.dirname(os.path.realpath(target))
        if ours[0]:
            del sys.path[0]
        if path0 is not None:
            sys.path.insert(0, path0)
        ours[0] = path0 is not None

    def read_message(chunks):
        while True:
            try:
                data = os.read(3, 1 << 16)
            except InterruptedError:
                continue
            if not data:
                break
            chunks.append(data)
        os.close(3)
        fields = b"".join(chunks).split(b"\0")
        if len(fields) < 5 or fields[0] != b"crun-standby-1" or fields[-1] != b"":
            os._exit(121)
        at = 3

        def words():
            nonlocal at
            n = int(fields[at])
            out = fields[at + 1:at + 1 + n]
            at += 1 + n
            return out

        return os.fsdecode(fields[1]), os.fsdecode(fields[2]), words(), words(), words()

    set_path0(kind, target)
    try:
        for name in filter(None, (n.strip() for n in preload.split(","))):
            __import__(name)
    except Exception as e:
        import traceback
        traceback.print_exc()  # crun's log, as the standby's
        sys.stderr.flush()
        # Still this rank's standby: once taken it becomes the cold start it replaces, in this process.
        os.set_blocking(3, True)
        kind, target, args, orig_argv, env = read_message([])
        why = "".join(__import__("traceback").format_exception_only(type(e), e)).strip().splitlines()[-1]
        sys.stderr.write(f"crun: local rank {local_rank} starts cold: its standby's preload raised ({why})\n")
        env = dict(reversed([entry.split(b"=", 1) for entry in env if b"=" in entry[1:]]))  # the first wins
        os.execve("/proc/self/exe", orig_argv, env)

    kind, target, args, orig_argv, env = read_message([])
    args, orig_argv, env = ([os.fsdecode(w) for w in x] for x in (args, orig_argv, env))

    # The environment exactly: the first of a repeated key wins, as in a cold start's os.environ.
    os.environ.clear()
    for entry in env:
        key, eq, value = entry.partition("=")
        if eq and key and key not in os.environ:
            os.environ[key] = value
    # crun's Python stacks (agent/python_stacks.h): registered at this interpreter's start; its
    # variable and its directory in PYTHONPATH go as they did there.
    here = os.environ.pop("CRUN_PYTHON_STACKS", "").partition(":")[2]
    path = os.environ.get("PYTHONPATH")
    if here and path == here:
        del os.environ["PYTHONPATH"]
    elif here and path is not None and path.startswith(here + ":"):
        os.environ["PYTHONPATH"] = path[len(here) + 1:]
    if hasattr(sys, "orig_argv"):
        sys.orig_argv[:] = orig_argv
    set_path0(kind, target)
    main.__dict__.clear()
    main.__dict__.update(pristine)

    if kind == "module":
        # What `python -m` itself calls: runs in __main__'s own namespace, sys.argv[0] the module's file.
        import runpy
        sys.argv[:] = ["-m"] + args
        runpy._run_module_as_main(target, alter_argv=True)
        return

    sys.argv[:] = [target] + args
    if main_importer(kind, target) is not None:  # a zip file or a directory: its __main__
        import runpy
        runpy._run_module_as_main("__main__", alter_argv=False)
        return

    # `python script.py`, as CPython's pymain_run_file does it: __file__ the absolute path (not
    # resolved), __cached__ None, a SourceFileLoader named __main__, the code run in __main__'s
    # namespace, __file__ and __cached__ removed again after it.
    filename = absolute(target)
    loader_type = sys.modules["_frozen_importlib_external"].SourceFileLoader
    namespace = main.__dict__
    namespace["__file__"] = filename
    namespace["__cached__"] = None
    namespace["__loader__"] = loader_type("__main__", filename)
    try:
        with open(filename, "rb") as f:
            source = f.read()
    except OSError as e:  # as CPython says it, exit 2
        sys.stderr.write(f"{orig_argv[0]}: can't open file {filename!r}: [Errno {e.errno}] {e.strerror}\n")
        raise SystemExit(2)
    try:
        exec(compile(source, filename, "exec", dont_inherit=True), namespace)
    finally:
        namespace.pop("__file__", None)
        namespace.pop("__cached__", None)


def _run(pristine):
    import sys

    interrupted = []

    def reraise_sigint():
        # A cold start ended by an uncaught KeyboardInterrupt dies of SIGINT after finalizing.
        if interrupted:
            import os
            import signal
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)

    import atexit
    atexit.register(reraise_sigint)  # first: it runs after every handler the program registers
    try:
        _standby(pristine)
    except SystemExit:
        raise
    except BaseException as e:
        # The traceback a cold start prints: from the program's own frames, not the bootstrap's.
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        e.__traceback__ = tb
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
        sys.excepthook(type(e), e, tb)
        if isinstance(e, KeyboardInterrupt):
            interrupted.append(True)
        raise SystemExit(1) from None


_run(_pristine)
