# A preload for run_case.py's resume_standby case (crun --standby-preload torch,standby_seen): a
# worker that was a standby says so on stdout when it exits, with its round's rank and restart.
import atexit
import os


@atexit.register
def _say():
    print(f"STANDBY rank={os.environ.get('RANK')} restart={os.environ.get('TORCHELASTIC_RESTART_COUNT')}", flush=True)
