# Rank 1 raises under torch's @record: torch writes the error file, crun must report its message.
import os

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    if os.environ["RANK"] == "1":
        raise RuntimeError("boom from rank 1")


if __name__ == "__main__":
    main()
