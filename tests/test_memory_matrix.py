"""The in-RAM vector matrix stays equal to brute force over LMDB: own puts, deletes, sweeps, concurrent threads and another process's writes (issue 17.1)."""

from __future__ import annotations

import hashlib
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogStore
from langgraph.store.base import PutOp, SearchOp

DIMS = 8


def embed_one(text: str) -> list[float]:
    """Deterministic: sha256 bytes of the text, centred (the subprocess uses the same)."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(b - 127.5) / 127.5 for b in digest[:DIMS]]


def embed(texts: list[str]) -> list[list[float]]:
    return [embed_one(t) for t in texts]


INDEX: Any = {"dims": DIMS, "embed": embed, "fields": ["text"]}


def cosine(a: list[float], b: list[float]) -> float:
    na = sum(x * x for x in a) ** 0.5
    nb = sum(x * x for x in b) ** 0.5
    return float(sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb))


def brute(model: dict[tuple[tuple[str, ...], str], str], query: str) -> list[str]:
    """Keys of the model's items by descending cosine with the query."""
    q = embed_one(query)
    return [k for _, k in sorted((-cosine(embed_one(t), q), k) for (_, k), t in model.items())]


def keys_of(store: DeltaLogStore, query: str, limit: int = 500) -> list[str]:
    return [i.key for i in store.search(("d",), query=query, limit=limit)]


def test_own_writes_keep_matrix_exact(tmp_path: Path) -> None:
    """Searches between random puts, re-puts, deletes and sweeps equal brute force."""
    now = [1_000_000.0]
    rng = random.Random(11)
    model: dict[tuple[tuple[str, ...], str], str] = {}
    with DeltaLogStore.from_path(tmp_path / "m", index=INDEX, clock=lambda: now[0]) as store:
        for step in range(300):
            ns = ("d", rng.choice("ab"))
            key = f"k{rng.randrange(60)}"
            roll = rng.random()
            if roll < 0.6:
                text = f"t{rng.randrange(10**6)}"
                store.put(ns, key, {"text": text})
                model[(ns, key)] = text
            elif roll < 0.8:
                store.delete(ns, key)
                model.pop((ns, key), None)
            elif roll < 0.9:
                store.put(ns, key, {"text": "short-lived"}, ttl=1)
                now[0] += 61  # expired at once: never returned, and swept below
                model.pop((ns, key), None)
                if rng.random() < 0.5:
                    store.sweep_ttl()
            else:
                store.batch([PutOp(ns, f"b{step}-{i}", {"text": f"b{step}-{i}"}) for i in range(3)])
                model.update({(ns, f"b{step}-{i}"): f"b{step}-{i}" for i in range(3)})
            if step % 7 == 0:
                query = f"q{step}"
                assert keys_of(store, query) == brute(model, query), step


def test_other_process_put_and_delete_seen(tmp_path: Path) -> None:
    """A put and a delete made by another process are seen by this process's next search."""
    path = tmp_path / "shared"
    script = textwrap.dedent(
        f"""
        import hashlib, sys
        from deltalog.engine import DeltaLogStore

        def embed(texts):
            return [[(b - 127.5) / 127.5 for b in hashlib.sha256(t.encode()).digest()[:{DIMS}]]
                    for t in texts]

        with DeltaLogStore.from_path(sys.argv[1], index={{"dims": {DIMS}, "embed": embed,
                                                          "fields": ["text"]}}) as store:
            if sys.argv[2] == "put":
                store.put(("d", "x"), "theirs", {{"text": "needle"}})
            else:
                store.delete(("d", "x"), "theirs")
        """
    )
    with DeltaLogStore.from_path(path, index=INDEX) as store:
        for i in range(50):
            store.put(("d", "x"), f"k{i}", {"text": f"hay {i}"})
        before = keys_of(store, "needle")  # loads the matrix
        assert "theirs" not in before
        for action in ("put", "delete"):
            subprocess.run(
                [sys.executable, "-c", script, str(path), action], check=True, timeout=120
            )
            got = keys_of(store, "needle", limit=5)
            if action == "put":
                assert got[0] == "theirs"
            else:
                assert "theirs" not in got and got == before[:5]


def test_search_in_batch_sees_state_before_its_puts(tmp_path: Path) -> None:
    """A query search batched with puts ranks the state before them; the next one sees them."""
    with DeltaLogStore.from_path(tmp_path / "b", index=INDEX) as store:
        for i in range(20):
            store.put(("d",), f"k{i}", {"text": f"hay {i}"})
        assert keys_of(store, "needle")[0] != "new"
        got = store.batch(
            [PutOp(("d",), "new", {"text": "needle"}), SearchOp(("d",), query="needle", limit=3)]
        )[1]
        assert isinstance(got, list) and "new" not in [getattr(i, "key", None) for i in got]
        assert keys_of(store, "needle")[0] == "new"


def test_concurrent_writer_threads(tmp_path: Path) -> None:
    """Puts from several threads (sharing group commits) leave the matrix equal to brute force."""
    model: dict[tuple[tuple[str, ...], str], str] = {}
    lock = threading.Lock()
    with DeltaLogStore.from_path(tmp_path / "t", index=INDEX) as store:
        store.put(("d",), "seed", {"text": "seed"})
        model[(("d",), "seed")] = "seed"
        keys_of(store, "q")  # loaded before the writers start

        def writer(n: int) -> None:
            for i in range(40):
                text = f"w{n}-{i}"
                store.put(("d",), text, {"text": text})
                with lock:
                    model[(("d",), text)] = text
                if i % 10 == 0:
                    store.search(("d",), query=text, limit=3)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert keys_of(store, "q") == brute(model, "q")


@pytest.mark.parametrize("offset", [0, 3, 9])
def test_items_without_vectors_page_after_scored(tmp_path: Path, offset: int) -> None:
    """Unindexed items follow the scored ones in search order, past any offset."""
    with DeltaLogStore.from_path(tmp_path / "u", index=INDEX) as store:
        for i in range(5):
            store.put(("d", "b"), f"v{i}", {"text": f"v{i}"})
            store.put(("d", "a"), f"n{i}", {"other": i}, index=False)
        store.put(("d", "b"), "u", {"other": 0}, index=False)
        got = store.search(("d",), query="v0", limit=4, offset=offset)
        scored = [k for k in brute({(("d",), f"v{i}"): f"v{i}" for i in range(5)}, "v0")]
        # namespaces in first-put order (("d", "b") first), keys in order
        want = (scored + ["u"] + [f"n{i}" for i in range(5)])[offset : offset + 4]
        assert [i.key for i in got] == want
        assert all((i.score is None) == (i.key[0] in "nu") for i in got)
