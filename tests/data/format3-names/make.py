"""Writes the format-3 store next to this file with deltalog's format-3 code (issue 15.1).

The store (``store/data.mdb``) is committed: CI cannot run the old code. It was
made on main at d42f3b9 (FORMAT_VERSION 3) with::

    cd <checkout at d42f3b9> && .venv/bin/python <this file>

``program`` is also what the migration test replays on the current code to know
what every state must read back as.
"""

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

#: Thread ids: a plain list channel, a delta channel, and a name long enough to
#: be hashed in the ``names`` key (over 400 bytes).
THREADS = ("alice", "bob", "L" * 450)


def program(saver: BaseCheckpointSaver[Any]) -> None:
    """Three short chats (one with a DeltaChannel), so names, blobs and inline values exist."""
    from tests.graphs import cfg, chat_graph, human

    for thread_id, sf, turns in zip(THREADS, (None, 2, None), (3, 4, 2), strict=True):
        graph = chat_graph(sf).compile(checkpointer=saver)
        for turn in range(turns):
            graph.invoke({"messages": [human(turn)]}, cfg(thread_id))


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    from deltalog.engine import DeltaLogSaver, keys

    if int(keys.FORMAT_VERSION) != 3:
        sys.exit("run this with deltalog's format-3 code")
    here = Path(__file__).resolve().parent
    out, work = here / "store", here / "work"
    shutil.rmtree(out, ignore_errors=True)
    with DeltaLogSaver.from_path(work, map_size=1024**2) as saver:
        program(saver)
        saver.compact(out)  # only live pages: a smaller file to commit
    shutil.rmtree(work)
    (out / "lock.mdb").unlink(missing_ok=True)
    print(out, (out / "data.mdb").stat().st_size)
