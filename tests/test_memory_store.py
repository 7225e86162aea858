"""DeltaLogStore follows the BaseStore contract: batches, puts, filters, namespaces (issue 17, R8)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalog.engine import DeltaLogSaver, DeltaLogStore
from deltalog.engine.env import Environment
from deltalog.engine.errors import ItemValueError
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)


class Clock:
    """A settable clock (seconds since the epoch)."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[DeltaLogStore]:
    with DeltaLogStore.from_path(tmp_path / "mem", clock=clock) as s:
        yield s


def test_put_get_delete_roundtrip(store: DeltaLogStore) -> None:
    """A put is read back equal; a delete removes it; hostile keys are plain keys."""
    for key in ["k", "", "a\x00b", "ключ", "x" * 5000, "../../etc"]:
        store.put(("users", "u1"), key, {"v": key, "nested": {"l": [1, 2.5, None, True]}})
        item = store.get(("users", "u1"), key)
        assert item is not None and item.key == key
        assert item.value == {"v": key, "nested": {"l": [1, 2.5, None, True]}}
        assert item.namespace == ("users", "u1")
    store.delete(("users", "u1"), "k")
    assert store.get(("users", "u1"), "k") is None
    assert store.get(("nobody",), "k") is None


def test_created_at_kept_on_update(store: DeltaLogStore, clock: Clock) -> None:
    """An update keeps created_at and moves updated_at (SqliteStore resets it)."""
    store.put(("n",), "k", {"v": 1})
    first = store.get(("n",), "k")
    clock.now += 10
    store.put(("n",), "k", {"v": 2})
    second = store.get(("n",), "k")
    assert first is not None and second is not None
    assert second.created_at == first.created_at
    assert (second.updated_at - first.updated_at).total_seconds() == pytest.approx(10)


def test_batch_reads_see_state_before_writes(store: DeltaLogStore) -> None:
    """Reads of a batch see the state before its puts; results come in op order."""
    store.put(("n",), "k", {"v": "old"})
    results = store.batch(
        [
            PutOp(("n",), "k", {"v": "new"}),
            GetOp(("n",), "k"),
            PutOp(("n",), "j", {"v": 1}),
            SearchOp(("n",)),
            ListNamespacesOp(),
        ]
    )
    assert results[0] is None and results[2] is None
    got = results[1]
    assert got is not None and not isinstance(got, list) and got.value == {"v": "old"}
    assert isinstance(results[3], list) and [i.key for i in results[3]] == ["k"]  # type: ignore[union-attr]
    assert results[4] == [("n",)]
    after = store.get(("n",), "k")
    assert after is not None and after.value == {"v": "new"}


def test_last_put_to_one_key_wins(store: DeltaLogStore) -> None:
    """Within one batch, the last put to a key wins (a delete too)."""
    store.batch([PutOp(("n",), "k", {"v": 1}), PutOp(("n",), "k", {"v": 2})])
    item = store.get(("n",), "k")
    assert item is not None and item.value == {"v": 2}
    store.batch([PutOp(("n",), "k", {"v": 3}), PutOp(("n",), "k", None)])
    assert store.get(("n",), "k") is None


def test_batch_is_one_transaction(store: DeltaLogStore) -> None:
    """All puts of a batch commit in one LMDB write transaction (R8)."""
    env = store.env.env
    before = env.info()["last_txnid"]
    store.batch([PutOp(("n", str(i)), f"k{i}", {"i": i}) for i in range(50)])
    assert env.info()["last_txnid"] == before + 1
    assert len(store.search(("n",), limit=100)) == 50


def test_invalid_namespace_validated_before_write(store: DeltaLogStore) -> None:
    """One bad namespace in a batch fails the batch before anything is written."""
    for bad in [("a.b",), ("",), ("a", "b\x00")]:
        with pytest.raises(InvalidNamespaceError):
            store.batch([PutOp(("ok",), "k", {"v": 1}), PutOp(bad, "k", {"v": 1})])
    for bad in [("langgraph",), ()]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("ok",), "k", {"v": 1}), GetOp(("x.y",), "k")])
    with pytest.raises(InvalidNamespaceError):
        store.list_namespaces(prefix=("a.b",))
    with pytest.raises(ItemValueError):
        store.batch([PutOp(("ok",), "k", {"v": 1}), PutOp(("ok",), "j", {"v": object()})])
    assert store.get(("ok",), "k") is None
    assert store.list_namespaces() == []


def test_filters_before_offset_and_limit(store: DeltaLogStore) -> None:
    """Filters narrow first; offset/limit page the filtered items."""
    for i in range(20):
        store.put(("docs",), f"d{i:02}", {"i": i, "even": i % 2 == 0})
    evens = store.search(("docs",), filter={"even": True}, limit=3, offset=2)
    assert [i.value["i"] for i in evens] == [4, 6, 8]
    rng = store.search(("docs",), filter={"i": {"$gte": 15}}, limit=100)
    assert sorted(i.value["i"] for i in rng) == [15, 16, 17, 18, 19]
    assert store.search(("docs",), filter={"missing": {"$lt": 3}}) == []
    assert len(store.search(("docs",), limit=5, offset=18)) == 2


def test_search_prefix_scope(store: DeltaLogStore) -> None:
    """A search sees its namespace prefix only, never a sibling sharing a label prefix."""
    store.put(("a", "b"), "1", {})
    store.put(("a", "bc"), "2", {})
    store.put(("ab",), "3", {})
    assert {i.key for i in store.search(("a",))} == {"1", "2"}
    assert {i.key for i in store.search(("a", "b"))} == {"1"}
    assert {i.key for i in store.search(())} == {"1", "2", "3"}


def test_list_namespaces_only_with_items(store: DeltaLogStore) -> None:
    """Only namespaces holding items are listed; conditions, depth and paging apply."""
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]:
        store.put(ns, "k", {})
    store.put(("a", "c", "f"), "k", {})
    store.get(("never", "put"), "k")
    store.delete(("a", "c", "f"), "k")
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(suffix=("*", "e")) == [("a", "b", "d", "e")]
    assert store.list_namespaces(prefix=("a", "*", "d")) == [
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
    ]
    assert store.list_namespaces(limit=2, offset=1) == [("a", "b", "d", "e"), ("a", "b", "d", "i")]
    op = ListNamespacesOp(
        match_conditions=(
            MatchCondition("prefix", ("a",)),
            MatchCondition("suffix", ("f",)),
        )
    )
    assert store.batch([op]) == [[("a", "b", "f")]]


def test_persists_and_shares_environment(tmp_path: Path) -> None:
    """Items survive reopen; a saver and a store on one path share one environment."""
    path = tmp_path / "both"
    with DeltaLogSaver.from_path(path) as saver:
        mem = saver.memory_store()
        assert mem.env is saver.env
        other = DeltaLogStore.from_path(path)
        assert other.env is saver.env
        mem.put(("u",), "k", {"v": 1})
        other.close()
        mem.close()
        assert not saver.env.closed  # the saver still uses it
    with DeltaLogStore.from_path(path) as again:
        item = again.get(("u",), "k")
        assert item is not None and item.value == {"v": 1}


def test_readonly_open_of_store_without_memory(tmp_path: Path) -> None:
    """A read-only open of a store that never had memory reads as empty memory."""
    path = tmp_path / "old"
    with DeltaLogSaver.from_path(path):
        pass
    # Drop the memory databases, as a store written before them looks.
    raw = Environment(path)
    with raw.env.begin(write=True) as txn:
        for name in ("items", "item_ns", "item_vectors", "item_ttl"):
            txn.drop(raw.env.open_db(name.encode(), txn=txn), delete=True)
    raw.close()
    ro = Environment(path, readonly=True)
    try:
        mem = DeltaLogStore(ro)
        assert mem.get(("u",), "k") is None
        assert mem.search(()) == []
        assert mem.list_namespaces() == []
    finally:
        ro.close()


async def test_async_api(store: DeltaLogStore) -> None:
    """The async methods give the same answers as the sync ones."""
    await store.aput(("a",), "k", {"v": 1})
    await asyncio.gather(*(store.aput(("a",), f"k{i}", {"i": i}) for i in range(10)))
    item = await store.aget(("a",), "k")
    assert item is not None and item.value == {"v": 1}
    assert len(await store.asearch(("a",), limit=100)) == 11
    assert await store.alist_namespaces() == [("a",)]
    await store.adelete(("a",), "k")
    assert await store.aget(("a",), "k") is None


def test_namespaces_of_earlier_opens_stay_listed(tmp_path: Path) -> None:
    """A namespace put before a reopen stays listed after this open puts a new one."""
    with DeltaLogStore.from_path(tmp_path / "m") as s:
        s.put(("a",), "k", {})
    with DeltaLogStore.from_path(tmp_path / "m") as s:
        s.put(("a", "b"), "k", {})
        assert s.list_namespaces() == [("a",), ("a", "b")]
        assert {i.key for i in s.search(("a",))} == {"k"} and len(s.search(("a",))) == 2


def test_batch_may_use_reserved_root(store: DeltaLogStore) -> None:
    """A batch may put under the root "langgraph" (put() may not), as InMemoryStore allows."""
    store.batch([PutOp(("langgraph", "foo"), "bar", {"v": 1})])
    item = store.get(("langgraph", "foo"), "bar")
    assert item is not None and item.value == {"v": 1}
    assert store.search(("langgraph", "foo"))[0].value == {"v": 1}
    store.delete(("langgraph", "foo"), "bar")
    assert store.get(("langgraph", "foo"), "bar") is None


def test_namespaces_given_as_lists(store: DeltaLogStore) -> None:
    """Namespaces passed as lists (as upstream tests do) work like tuples."""
    store.put(["test", "docs"], "doc1", {"author": "Alice"})  # type: ignore[arg-type]
    store.put(("test", "images"), "img1", {"author": "Alice"})
    assert len(store.search(["test"])) == 2  # type: ignore[arg-type]
    assert store.list_namespaces(prefix=["test"], suffix=["docs"]) == [("test", "docs")]  # type: ignore[arg-type]
    item = store.get(["test", "docs"], "doc1")  # type: ignore[arg-type]
    assert item is not None and item.namespace == ("test", "docs")
