"""DeltaLogStore.get (its one-item fast path) answers, validates and refreshes TTL exactly as a one-op batch does (issue 17.2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogStore
from deltalog.engine.errors import NamespaceError
from langgraph.store.base import GetOp, InvalidNamespaceError


def test_get_equals_one_op_batch(tmp_path: Path) -> None:
    """Present, absent, expired and unknown-namespace gets equal batch([GetOp])."""
    now = [1_000_000.0]
    with DeltaLogStore.from_path(tmp_path / "g", clock=lambda: now[0]) as store:
        store.put(("a", "b"), "k", {"v": 1})
        store.put(("a", "b"), "x" * 600, {"v": 2})  # a hashed long key
        store.put(("a",), "t", {"v": 3}, ttl=1)
        now[0] += 30
        for ns, key in [(("a", "b"), "k"), (("a", "b"), "x" * 600), (("a",), "t")]:
            assert store.get(ns, key) == store.batch([GetOp(ns, key)])[0] is not None
        now[0] += 61  # ("a",)/t expired, not swept
        for ns, key in [(("a",), "t"), (("a", "b"), "nope"), (("zz",), "k")]:
            assert store.get(ns, key) is None and store.batch([GetOp(ns, key)])[0] is None


def test_get_refreshes_ttl_unless_told_not_to(tmp_path: Path) -> None:
    """A get pushes the expiry out (refresh_on_read); refresh_ttl=False does not."""
    now = [1_000_000.0]
    ttl: Any = {"default_ttl": 1, "refresh_on_read": True}
    with DeltaLogStore.from_path(tmp_path / "r", ttl=ttl, clock=lambda: now[0]) as store:
        store.put(("a",), "k", {"v": 1})
        store.put(("a",), "n", {"v": 1})
        now[0] += 50
        assert store.get(("a",), "k") is not None
        assert store.get(("a",), "n", refresh_ttl=False) is not None
        now[0] += 50  # 100 s after the put, 50 s after k's refresh
        assert store.get(("a",), "k") is not None
        assert store.get(("a",), "n") is None


@pytest.mark.parametrize("bad", [("a", ""), ("a.b",), ("a", 1), "abc", ("x", "a\x00")])
def test_get_validates_namespace(tmp_path: Path, bad: Any) -> None:
    """A bad namespace raises NamespaceError (LangGraph's InvalidNamespaceError), as batch does."""
    with DeltaLogStore.from_path(tmp_path / "v") as store:
        with pytest.raises(NamespaceError) as info:
            store.get(bad, "k")
        assert isinstance(info.value, InvalidNamespaceError)
        with pytest.raises(NamespaceError):
            store.batch([GetOp(bad, "k")])


def test_get_of_a_namespace_another_store_created(tmp_path: Path) -> None:
    """A namespace first put through another handle of the same file is found."""
    path = tmp_path / "o"
    with DeltaLogStore.from_path(path) as first:
        assert first.get(("late",), "k") is None
        with DeltaLogStore.from_path(path) as second:
            second.put(("late",), "k", {"v": 1})
        got = first.get(("late",), "k")
        assert got is not None and got.value == {"v": 1}


def test_get_validates_unhashable_namespaces(tmp_path: Path) -> None:
    """A list namespace reads like its tuple; one holding a list label is refused."""
    with DeltaLogStore.from_path(tmp_path / "h") as store:
        store.put(("a", "b"), "k", {"v": 1})
        assert store.get(("a", "b"), "k") is not None  # now known
        got = store.get(["a", "b"], "k")  # type: ignore[arg-type]
        assert got is not None and got.value == {"v": 1}
        with pytest.raises(NamespaceError):
            store.get(("a", ["b"]), "k")  # type: ignore[arg-type]
