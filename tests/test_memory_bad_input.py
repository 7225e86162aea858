"""Bad input to the memory store raises a DeltaLogError naming the value before anything is written (issue 17, R9)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogStore
from deltalog.engine.errors import DeltaLogError, ItemValueError
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DeltaLogStore]:
    with DeltaLogStore.from_path(tmp_path / "bad") as s:
        yield s


BAD_BATCHES: list[tuple[str, list[Any], str]] = [
    ("dotted-label", [PutOp(("a.b",), "k", {})], "period"),
    ("int-label", [PutOp(("a", 1), "k", {})], "int"),  # type: ignore[arg-type]
    ("nul-label", [PutOp(("a\x00",), "k", {})], "NUL"),
    ("str-namespace", [PutOp("users", "k", {})], "tuple"),  # type: ignore[arg-type]
    ("get-dotted", [GetOp(("x.y",), "k")], "period"),
    ("search-dotted", [SearchOp(("x.y",))], "period"),
    ("non-json", [PutOp(("a",), "k", {"when": object()})], "object"),
    ("int-key-in-value", [PutOp(("a",), "k", {1: "x"})], "key 1"),  # type: ignore[dict-item]
    ("list-value", [PutOp(("a",), "k", [1, 2])], "list"),  # type: ignore[arg-type]
    ("nan", [PutOp(("a",), "k", {"f": float("nan")})], "nan"),
    ("big-int", [PutOp(("a",), "k", {"i": 2**80})], "64 bits"),
    ("lone-surrogate", [PutOp(("a",), "k", {"s": "\ud800"})], "Unicode"),
    ("key-not-str", [PutOp(("a",), 5, {})], "key 5"),  # type: ignore[arg-type]
    ("bad-ttl", [PutOp(("a",), "k", {}, ttl=-1)], "ttl"),
    ("bad-operator", [SearchOp(("a",), filter={"n": {"$regex": "x"}})], "$regex"),
    ("negative-limit", [SearchOp(("a",), limit=-1)], "limit"),
    ("not-an-op", [("a", "k")], "tuple"),
]


@pytest.mark.parametrize(
    ("ops", "needle"), [(o, n) for _, o, n in BAD_BATCHES], ids=[i for i, _, _ in BAD_BATCHES]
)
def test_bad_batch_refused_before_write(store: DeltaLogStore, ops: list[Any], needle: str) -> None:
    """Each bad op fails its batch with a DeltaLogError naming it; the good put beside it is not written."""
    before = store.env.env.info()["last_txnid"]
    with pytest.raises(DeltaLogError) as info:
        store.batch([PutOp(("good",), "k", {"v": 1}), *ops])
    assert needle in str(info.value)
    assert store.env.env.info()["last_txnid"] == before
    assert store.get(("good",), "k") is None


def test_namespace_errors_are_the_contracts(store: DeltaLogStore) -> None:
    """Namespace errors are LangGraph's InvalidNamespaceError (and a ValueError)."""
    with pytest.raises(InvalidNamespaceError):
        store.put(("a.b",), "k", {})
    with pytest.raises(ValueError):
        store.batch([PutOp(("",), "k", {})])
    for bad in [(), ("langgraph", "x")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "k", {})


def test_hostile_and_huge(store: DeltaLogStore) -> None:
    """Keys with NUL, separators or 100 kB, and a 16 MB value round-trip intact."""
    keys = ["a\x00\x00b", "\x00", "a.b/c\\d", "k" * 100_000, "🦜" * 3000, "\uffff"]
    for key in keys:
        store.put(("h",), key, {"k": key})
    for key in keys:
        item = store.get(("h",), key)
        assert item is not None and item.key == key and item.value == {"k": key}
    assert sorted(i.key for i in store.search(("h",), limit=100)) == sorted(keys)
    big = {"blob": "x" * (16 * 1024**2), "list": list(range(100_000))}
    store.put(("h",), "big", big)
    item = store.get(("h",), "big")
    assert item is not None and item.value == big


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"index": {"dims": 0, "embed": lambda t: []}}, "dims"),
        ({"index": {"dims": 4}}, "embed"),
        ({"index": {"dims": 4, "embed": lambda t: [], "fields": "text"}}, "fields"),
        ({"ttl": {"default_ttl": "soon"}}, "soon"),
        ({"ttl": {"sweep_every": 5}}, "sweep_every"),
        ({"index": {"dims": 4, "embed": lambda t: [], "fields": ["a"], "text_fields": "b"}}, "b"),
    ],
)
def test_bad_configuration(tmp_path: Path, kwargs: dict[str, Any], needle: str) -> None:
    """A bad index or TTL configuration is refused when the store is made, before
    its folder is created."""
    with pytest.raises(ItemValueError, match=needle):
        DeltaLogStore.from_path(tmp_path / "cfg", **kwargs).close()
    assert not (tmp_path / "cfg").exists()


def test_index_argument_validated_with_an_index(tmp_path: Path) -> None:
    """With an index configured, a put's index must be False, None or a list of paths."""
    index: Any = {"dims": 2, "embed": lambda texts: [[1.0, 0.0] for _ in texts]}
    with DeltaLogStore.from_path(tmp_path / "idx", index=index) as s:
        with pytest.raises(ItemValueError, match="index"):
            s.put(("a",), "k", {"t": "x"}, index="t")  # type: ignore[arg-type]
        assert s.get(("a",), "k") is None


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        (PutOp(("a",), 5, {}), "op 1 (PutOp): key 5"),  # type: ignore[arg-type]
        (PutOp(("a",), "\ud800", {}), "op 1 (PutOp): key '\\ud800' is not valid Unicode"),
        (PutOp(("a",), "k", {}, ttl=-1), "op 1 (PutOp): ttl -1"),
        (PutOp(("a",), "k", {"f": float("inf")}), "op 1 (PutOp) ('a',)/'k'"),
        (GetOp(("a",), 7), "op 1 (GetOp): key 7"),  # type: ignore[arg-type]
    ],
)
def test_bad_op_named_by_its_position(store: DeltaLogStore, bad: Any, needle: str) -> None:
    """The error of a bad op names its position and type in the batch (built only when it fails)."""
    with pytest.raises(ItemValueError) as info:
        store.batch([PutOp(("good",), "k", {"v": 1}), bad])
    assert needle in str(info.value)


def test_keys_and_namespaces_checked_once_still_checked_fully(store: DeltaLogStore) -> None:
    """A non-ASCII key is stored, one with a lone surrogate refused; a namespace with a bad
    label is refused even after its valid prefix was put (and remembered as checked)."""
    store.put(("ns", "a"), "ключ", {"v": 1})
    item = store.get(("ns", "a"), "ключ")
    assert item is not None and item.key == "ключ"
    with pytest.raises(ItemValueError, match="not valid Unicode"):
        store.put(("ns", "a"), "\udfff", {"v": 1})
    for bad in [("ns", "a.b"), ("ns", "a", ""), ["ns", "a\x00"]]:
        with pytest.raises(InvalidNamespaceError):
            store.batch([PutOp(bad, "k", {})])  # type: ignore[arg-type]
