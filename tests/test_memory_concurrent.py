"""Two real processes writing the same namespace at once: no acknowledged put lost, no half batch seen or left, counts and vectors consistent (issue 17.6, R8)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from deltalog.engine import DeltaLogStore
from langgraph.store.base import GetOp, Item

from tests.memory_concurrent_writer import DIMS, OWN, SHARED, embed

WRITER = Path(__file__).with_name("memory_concurrent_writer.py")
BATCHES = 60


def _cosine(a: list[float], b: list[float]) -> float:
    na = sum(x * x for x in a) ** 0.5
    nb = sum(x * x for x in b) ** 0.5
    return float(sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb))


def test_two_processes_share_a_namespace(tmp_path: Path) -> None:
    """Both writers' batches all land whole while this process reads; the shared keys
    always hold one batch's values together; verify is clean; search equals brute force."""
    path = tmp_path / "mem"
    index: Any = {"dims": DIMS, "embed": embed, "fields": ["text"]}
    with DeltaLogStore.from_path(path, index=index) as store:
        store.put(("shared",), "seed", {"text": "seed"})
        store.search(("shared",), query="seed")  # this process's matrix is loaded
        logs = [tmp_path / f"log-{w}" for w in ("A", "B")]
        procs = [
            subprocess.Popen(
                [sys.executable, str(WRITER), str(path), str(log), w, str(BATCHES)],
                stderr=subprocess.PIPE,
            )
            for w, log in zip(("A", "B"), logs, strict=True)
        ]
        seen: set[tuple[str, int]] = set()
        deadline = time.monotonic() + 240
        while any(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, "writers did not finish"
            shared = [
                it if isinstance(it, Item) else None
                for it in store.batch([GetOp(("shared",), f"s{i}") for i in range(SHARED)])
            ]
            owners = {(it.value["w"], it.value["b"]) for it in shared if it is not None}
            assert len(owners) <= 1, f"the shared keys mix batches: {owners}"
            assert all(it is None for it in shared) or all(it is not None for it in shared)
            seen |= owners
            store.search(("shared",), query="A 3 1", limit=3)  # reloads as the writers go
        for p in procs:
            assert p.wait(timeout=60) == 0, p.stderr.read() if p.stderr else ""
        assert len(seen) > 1, "the reader never saw the writers interleave"

        items = {it.key: it.value for it in store.search(("shared",), limit=10**6)}
        for w, log in zip(("A", "B"), logs, strict=True):
            acked = {json.loads(line)["batch"] for line in log.read_text().splitlines()}
            assert acked == set(range(BATCHES))
            for b in acked:
                keys = {f"{w}-b{b}-{i}" for i in range(1 if b < BATCHES - 1 else 0, OWN)}
                assert keys <= items.keys(), f"{w} batch {b} lost {keys - items.keys()}"
                assert f"{w}-b{b}-0" not in items or b == BATCHES - 1
        last = {(items[f"s{i}"]["w"], items[f"s{i}"]["b"]) for i in range(SHARED)}
        assert len(last) == 1 and next(iter(last))[1] == BATCHES - 1
        assert store.verify() == []
        assert store.list_namespaces() == [("shared",)]

        texts = {k: v["text"] for k, v in items.items()}
        q = embed(["A 3 1"])[0]
        want = sorted(texts, key=lambda k: (-_cosine(embed([texts[k]])[0], q), k))[:10]
        got = store.search(("shared",), query="A 3 1", limit=10)
        assert [it.key for it in got] == want
