"""Item entries leave out what the key or defaults say (smaller on disk; format 5 records, format 6 chunk entries), and format 4 item records still read (issue 17.4, R10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deltalog.engine import DeltaLogStore
from deltalog.engine.write_txn import WriteTxn
from langgraph.store.base import PutOp

from tests.memory_layout import entry_of, ikey_of


def _record(store: DeltaLogStore, ns: tuple[str, ...], key: str) -> tuple[bytes, list[object]]:
    """The item's ``items`` key and its stored fields (its entry in the chunk holding it)."""
    return ikey_of(store, ns, key), entry_of(store, ns, key)


def test_item_entries_are_compact(tmp_path: Path) -> None:
    """A first put is [value, created_us]; an update adds updated_us; a TTL adds its
    fields; a hashed long key keeps the key itself."""
    now = [1_000_000.0]
    with DeltaLogStore.from_path(tmp_path / "s", clock=lambda: now[0]) as store:
        store.put(("a",), "k", {"v": 1})
        assert _record(store, ("a",), "k")[1] == [{"v": 1}, 1_000_000_000_000]
        now[0] += 1
        store.put(("a",), "k", {"v": 2})
        assert _record(store, ("a",), "k")[1] == [{"v": 2}, 1_000_000_000_000, 1_000_001_000_000]
        store.put(("a",), "t", {"v": 3}, ttl=2)
        assert _record(store, ("a",), "t")[1] == [
            {"v": 3},
            1_000_001_000_000,
            None,
            2.0,
            1_000_001_000 + 120_000,
        ]
        long = "x" * 500
        store.put(("a",), long, {"v": 4})
        assert _record(store, ("a",), long)[1] == [
            {"v": 4},
            1_000_001_000_000,
            None,
            None,
            None,
            long,
        ]
        got = store.get(("a",), long)
        assert got is not None and got.key == long
        item = store.get(("a",), "k")
        assert item is not None and item.created_at < item.updated_at


def test_format_4_records_still_read(tmp_path: Path) -> None:
    """Records in the format 4 layout ([key, value, created, updated, ttl, expires]) read,
    expire, list and verify as before."""
    now = [2_000_000.0]
    with DeltaLogStore.from_path(tmp_path / "o", clock=lambda: now[0]) as store:
        store.put(("a",), "k", {"v": 0})
        store.put(("b",), "t", {"v": 0}, ttl=1)
        for ns, key, ttl, expires in [(("a",), "k", None, None), (("b",), "t", 1.0, 2_000_060_000)]:
            ikey, _ = _record(store, ns, key)
            old = store.env.codec.encode([key, {"old": True}, 5, 6, ttl, expires])

            def raw_put(w: WriteTxn, k: bytes = ikey, o: bytes = old) -> None:
                w.txn.put(k, o, db=w.env.db("items"))

            store.env.write(raw_put)
        got = store.get(("a",), "k")
        assert got is not None and got.value == {"old": True} and got.key == "k"
        assert [i.key for i in store.search(("b",))] == ["t"]
        assert store.list_namespaces() == [("a",), ("b",)]
        assert store.verify() == []
        now[0] += 61
        assert store.get(("b",), "t") is None
        assert store.list_namespaces() == [("a",)]
        assert store.sweep_ttl() == 1 and store.verify() == []


def test_vector_records_do_not_train_the_record_dictionary(tmp_path: Path) -> None:
    """Vector records (float32 noise) are framed plain and never sampled: loading 1,500
    vectors trains no zstd dictionary, and the vectors still read and rank."""
    import hashlib

    def embed(texts: list[str]) -> list[list[float]]:
        return [
            [(b - 127.5) / 127.5 for b in hashlib.sha256(t.encode()).digest()] * 2 for t in texts
        ]

    index: Any = {"dims": 64, "embed": embed, "fields": ["t"]}
    with DeltaLogStore.from_path(tmp_path / "d", index=index) as store:
        for lo in range(0, 1500, 100):
            store.batch([PutOp(("v",), f"k{i}", {"t": f"text {i}"}) for i in range(lo, lo + 100)])
        with store.env.read() as r:
            assert r.dictionaries() == []
        assert store.search(("v",), query="text 7", limit=1)[0].key == "k7"
        assert store.verify() == []
