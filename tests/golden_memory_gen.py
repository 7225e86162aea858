"""Writes the golden memory store of tests/test_golden_memory.py with whatever deltalog is on the path.

``tests/data/golden/memory-format-5/`` was written by 023d5de, the last commit
that stored one ``items`` record per item (format 5); format 6 packs the items
of a namespace into chunk records. To write it again, from the repository root
(the script prints which code it ran and checks the format the store says):

    git worktree add --detach /tmp/gold-m5 023d5de
    mkdir -p /tmp/gold-m5/_path/deltalog
    for d in engine channels bench; do ln -s /tmp/gold-m5/$d /tmp/gold-m5/_path/deltalog/$d; done
    for f in /tmp/gold-m5/deltalog_pkg/*; do ln -s $f /tmp/gold-m5/_path/deltalog/; done
    PYTHONPATH=/tmp/gold-m5/_path .venv/bin/python tests/golden_memory_gen.py \
        tests/data/golden/memory-format-5 023d5de
    git worktree remove --force /tmp/gold-m5

Everything is fixed (a clock that only moves when told, a hash embedder), so
running it again gives the same items. The scenario covers: several
namespaces, one large enough for several chunks; updated items (created before
updated); TTL items, one of them expired at the read-back time; a hashed long
key; items with vectors, one re-put with ``index=False``; deleted items and a
namespace emptied by deletes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

START = 1_700_000_000.0
"""The clock when the scenario starts (seconds since the epoch)."""
READ_AT = START + 3_600
"""The clock the read-back uses: after the 30-minute TTL, before the 120-minute one."""
DIMS = 16


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedding: the SHA-256 bytes of the text, centred."""
    return [
        [(b - 127.5) / 127.5 for b in hashlib.sha256(t.encode()).digest()[:DIMS]] for t in texts
    ]


def index() -> Any:
    return {"dims": DIMS, "embed": embed, "fields": ["text"]}


def fill(store: Any, now: list[float]) -> None:
    """The scenario: every write at a known clock."""
    from langgraph.store.base import PutOp

    store.batch(
        [
            PutOp(("docs", "big"), f"k{i:03}", {"text": f"document {i}", "n": i, "tag": i % 7})
            for i in range(150)
        ]
    )
    now[0] += 10
    for i in range(0, 150, 10):
        store.put(("docs", "big"), f"k{i:03}", {"text": f"document {i} revised", "n": -i})
    store.put(("docs", "big"), "k005", {"text": "no vector now", "n": 5}, index=False)
    for i in range(0, 150, 25):
        store.delete(("docs", "big"), f"k{i + 1:03}")
    for u in range(5):
        for j in range(4):
            store.put(("users", f"u{u}"), f"fact{j}", {"text": f"user {u} fact {j}", "j": j})
    now[0] += 10
    store.put(("ttl",), "short", {"text": "gone soon"}, ttl=30)
    store.put(("ttl",), "long", {"text": "stays"}, ttl=120)
    store.put(("ttl",), "plain", {"text": "no ttl"})
    store.put(("keys",), "x" * 500, {"text": "a long key"})
    store.put(("keys",), "é/ü.\x01", {"nested": {"a": [1, 2.5, None, True]}})
    store.put(("empty",), "only", {"v": 1})
    store.delete(("empty",), "only")


def read_back(store: Any) -> dict[str, Any]:
    """Every item as today's store reads it at READ_AT (TTL not refreshed)."""
    out: dict[str, Any] = {"namespaces": [list(ns) for ns in store.list_namespaces(limit=100)]}
    items = []
    for ns in store.list_namespaces(limit=100):
        for it in store.search(ns, limit=1000, refresh_ttl=False):
            items.append(
                [
                    list(it.namespace),
                    it.key,
                    it.value,
                    it.created_at.isoformat(),
                    it.updated_at.isoformat(),
                ]
            )
    out["items"] = sorted(items, key=lambda x: (x[0], x[1]))
    hits = store.search(("docs",), query="document 42", limit=5, refresh_ttl=False)
    out["query"] = [[it.key, round(it.score or 0.0, 5)] for it in hits]
    return out


def main() -> None:
    import deltalog.engine
    from deltalog.engine import DeltaLogStore

    target = Path(sys.argv[1])
    made_by = sys.argv[2]
    print("deltalog from", Path(deltalog.engine.__file__).resolve().parent)
    now = [START]
    work = Path(tempfile.mkdtemp()) / "store"
    with DeltaLogStore.from_path(work, index=index(), clock=lambda: now[0]) as store:
        fill(store, now)
        with store.env.read() as r:
            version = r.meta("format_version")
    now[0] = READ_AT
    with DeltaLogStore.from_path(work, index=index(), clock=lambda: now[0]) as store:
        expected = {"format_version": version, "made_by": made_by, **read_back(store)}
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(work / "data.mdb", target / "data.mdb")
    (target / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print("format", version, "items", len(expected["items"]))


if __name__ == "__main__":
    main()
