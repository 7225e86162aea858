"""The victim of the memory crash test: writes put batches to a DeltaLogStore until killed.

Usage::

    python tests/memory_crash_writer.py PATH LOGFILE WRITER_ID [--sweep]

Each batch puts ``SIZE`` items ``w{WRITER_ID}-b{batch}-{i}`` into namespace
``("crash",)`` (one shared namespace for every writer), each with a TTL of a
minute when ``--sweep`` is given (and then every tenth batch runs
``sweep_ttl()`` on a clock an hour ahead, deleting older batches). After each
``batch()`` returned, one line ``{"batch": n}`` is written, flushed and
fsynced to LOGFILE: that batch is durable by the store's contract.
"""

from __future__ import annotations

import json
import os
import sys

from deltalog.engine import DeltaLogStore
from langgraph.store.base import PutOp

SIZE = 20


def main() -> None:
    path, log, writer = sys.argv[1], sys.argv[2], sys.argv[3]
    sweep = "--sweep" in sys.argv
    offset = [0.0]

    def clock() -> float:
        import time

        return time.time() + offset[0]

    store = DeltaLogStore.from_path(path, clock=clock)
    with open(log, "a", encoding="utf-8") as out:
        out.write(json.dumps({"ready": os.getpid()}) + "\n")
        out.flush()
        batch = 0
        while True:
            ops = [
                PutOp(
                    ("crash",),
                    f"w{writer}-b{batch}-{i}",
                    {"batch": batch, "i": i, "pad": "x" * 200},
                    ttl=1.0 if sweep else None,
                )
                for i in range(SIZE)
            ]
            store.batch(ops)
            out.write(json.dumps({"batch": batch}) + "\n")
            out.flush()
            os.fsync(out.fileno())
            batch += 1
            if sweep and batch % 10 == 0:
                offset[0] = 3600.0
                store.sweep_ttl()
                offset[0] = 0.0


if __name__ == "__main__":
    main()
