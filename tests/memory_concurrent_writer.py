"""One of the writers of the concurrent memory test: put batches into a shared namespace.

Usage::

    python tests/memory_concurrent_writer.py PATH LOGFILE WRITER BATCHES

Batch ``b`` puts ``OWN`` items ``{WRITER}-b{b}-{i}`` and the ``SHARED`` keys
``s0``… (which every writer puts) into namespace ``("shared",)``, all with
value ``{"w": WRITER, "b": b, ...}`` and a vector of their text; from batch 1
on it also deletes ``{WRITER}-b{b-1}-0``. After each ``batch()`` returned, one
line ``{"batch": b}`` is appended to LOGFILE (flushed): that batch is
acknowledged.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

from deltalog.engine import DeltaLogStore
from langgraph.store.base import PutOp

OWN = 8
SHARED = 5
DIMS = 8


def embed(texts: list[str]) -> list[list[float]]:
    """Deterministic: sha256 bytes of the text, centred (the test uses the same)."""
    return [
        [(b - 127.5) / 127.5 for b in hashlib.sha256(t.encode()).digest()[:DIMS]] for t in texts
    ]


def main() -> None:
    path, log, writer, batches = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    index: Any = {"dims": DIMS, "embed": embed, "fields": ["text"]}
    with DeltaLogStore.from_path(path, index=index) as store, open(log, "a") as out:
        for b in range(batches):
            value = {"w": writer, "b": b}
            ops = [
                PutOp(("shared",), f"{writer}-b{b}-{i}", {**value, "text": f"{writer} {b} {i}"})
                for i in range(OWN)
            ]
            ops += [
                PutOp(("shared",), f"s{i}", {**value, "text": f"shared {writer} {b} {i}"})
                for i in range(SHARED)
            ]
            if b:
                ops.append(PutOp(("shared",), f"{writer}-b{b - 1}-0", None))
            store.batch(ops)
            out.write(json.dumps({"batch": b}) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
