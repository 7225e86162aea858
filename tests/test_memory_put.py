"""DeltaLogStore.put is BaseStore.put: the same checks, errors, TTLs and stored items (issue 17)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from deltalog.engine import DeltaLogStore
from deltalog.engine.memory_core import ItemRecord
from deltalog.engine.memory_io import MemoryReader
from hypothesis import example, given, settings
from hypothesis import strategies as st
from langgraph.store.base import NOT_PROVIDED, BaseStore, Item, Result

from tests.test_memory_store import Clock

_NAMESPACES = st.sampled_from(
    [("a",), ("a", "b"), ("b",), (), ("langgraph", "x"), ("a.b",), ("", "x"), ("a", 1)]
)
_VALUES = st.one_of(
    st.fixed_dictionaries({"n": st.integers(-5, 5)}),
    st.fixed_dictionaries({"t": st.text(max_size=3), "f": st.floats(allow_nan=True)}),
    st.just({"big": 2**70}),
    st.just(["not", "a", "dict"]),
)
_TTLS = st.sampled_from([NOT_PROVIDED, None, 1.0, 90, -1, 0, "soon"])
_PUTS = st.lists(
    st.tuples(_NAMESPACES, st.sampled_from(["k", "j", "é", "\ud800", 7]), _VALUES, _TTLS),
    max_size=25,
)


def _outcome(put: Any, *args: Any, **kwargs: Any) -> tuple[str, str] | None:
    try:
        put(*args, **kwargs)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return None


def _items(store: DeltaLogStore) -> list[Item]:
    return sorted(
        (i for ns in store.list_namespaces() for i in store.search(ns, limit=100)),
        key=lambda i: (i.namespace, i.key),
    )


def _records(store: DeltaLogStore) -> list[ItemRecord]:
    """Every stored item with what Item leaves out (its TTL and expiry)."""
    with store.env.read() as r:
        reader = MemoryReader(r)
        return [
            rec for ns_id, ns in reader.namespaces_after(0) for _, rec in reader.scan(ns_id, ns)
        ]


@settings(max_examples=60, deadline=None)
@given(puts=_PUTS, default_ttl=st.sampled_from([None, 30.0]))
@example(puts=[(("a",), "k", {"n": 1}, NOT_PROVIDED)] * 2, default_ttl=30.0)
@example(puts=[(("a",), "k", {"n": 1}, 5), (("a",), 7, {"n": 2}, None)], default_ttl=None)
def test_put_is_base_store_put(puts: list[tuple[Any, Any, Any, Any]], default_ttl: Any) -> None:
    """The same puts (good and bad: namespaces, keys, values, TTLs) through DeltaLogStore.put
    and through BaseStore.put give the same error, or none, each time, and the same items
    with the same timestamps and expiries (a store's default TTL applied alike)."""
    ttl_config: Any = None if default_ttl is None else {"default_ttl": default_ttl}
    with tempfile.TemporaryDirectory() as tmp:
        clocks = Clock(), Clock()
        with (
            DeltaLogStore.from_path(Path(tmp) / "fast", clock=clocks[0], ttl=ttl_config) as fast,
            DeltaLogStore.from_path(Path(tmp) / "base", clock=clocks[1], ttl=ttl_config) as base,
        ):
            for step, (ns, key, value, ttl) in enumerate(puts):
                for clock in clocks:
                    clock.now += 1
                kwargs = {} if ttl is NOT_PROVIDED else {"ttl": ttl}
                got = _outcome(fast.put, ns, key, value, **kwargs)
                want = _outcome(BaseStore.put, base, ns, key, value, **kwargs)
                assert got == want, step
            assert _items(fast) == _items(base)
            assert _records(fast) == _records(base)


def test_a_subclass_that_overrides_batch_sees_every_put(tmp_path: Path) -> None:
    """put goes through batch when a subclass overrides it, also for a namespace put before."""

    class Counting(DeltaLogStore):
        batches = 0

        def batch(self, ops: Any) -> list[Result]:
            Counting.batches += 1
            return super().batch(ops)

    with Counting.from_path(tmp_path / "c") as store:
        for i in range(3):
            store.put(("ns",), f"k{i}", {"i": i})
        assert Counting.batches == 3
        assert [i.key for i in store.search(("ns",))] == ["k0", "k1", "k2"]


def test_a_put_with_an_index_embeds_as_a_batch_does(tmp_path: Path) -> None:
    """With an index, a second put into a namespace embeds its text as the first did."""
    seen: list[str] = []

    def embed(texts: list[str]) -> list[list[float]]:
        seen.extend(texts)
        return [[1.0, float(len(t))] for t in texts]

    index: Any = {"dims": 2, "embed": embed, "fields": ["t"]}
    with DeltaLogStore.from_path(tmp_path / "i", index=index) as store:
        store.put(("ns",), "a", {"t": "x"})
        store.put(("ns",), "b", {"t": "yy"})
        found = store.search(("ns",), query="yy", limit=2)
        assert seen[:2] == ["x", "yy"] and [i.key for i in found] == ["b", "a"]
