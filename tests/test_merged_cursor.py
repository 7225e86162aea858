"""The turn pack's cursors (engine/merged.py) move as one sorted list would, and a
list cursor moves as an LMDB cursor does (docs/design.md, "Turn packs")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lmdb
from deltalog.engine.merged import Cursor, Entry, ListCursor, MergedCursor, PackCursor
from hypothesis import given, settings
from hypothesis import strategies as st

KEYS = st.lists(st.binary(min_size=1, max_size=3), min_size=0, max_size=40, unique=True)
OPS = st.lists(
    st.tuples(
        st.sampled_from(["set_key", "set_range", "first", "last", "next", "prev", "iter"]),
        st.binary(min_size=1, max_size=3),
    ),
    max_size=40,
)


def _step(cur: Any, op: str, arg: bytes) -> Any:
    """One op: its result and where the cursor then stands."""
    if op == "iter":
        got = list(cur.iternext())[:5]
        return got
    ok = getattr(cur, op)(arg) if op in ("set_key", "set_range") else getattr(cur, op)()
    return ok, cur.key(), cur.value()


def _same_moves(model: Any, subject: Any, ops: Sequence[tuple[str, bytes]]) -> None:
    for op, arg in ops:
        assert _step(subject, op, arg) == _step(model, op, arg), (op, arg)


@settings(max_examples=150, deadline=None)
@given(keys=KEYS, ops=OPS)
def test_a_list_cursor_moves_as_an_lmdb_cursor(
    tmp_path_factory: Any, keys: list[bytes], ops: Any
) -> None:
    """Every move from a position, and every seek, as LMDB's cursor; after a move that
    fails, the next op is a seek for both (after a failed move LMDB keeps a hidden
    position, which ListCursor does not copy: merged.py's docstring)."""
    entries = sorted((k, k[::-1] + b"v") for k in keys)
    env = lmdb.open(str(tmp_path_factory.mktemp("lmdb")), max_dbs=1)
    try:
        with env.begin(write=True) as txn:
            for k, v in entries:
                txn.put(k, v)
        with env.begin() as txn:
            real, mine = txn.cursor(), ListCursor(entries)
            positioned = False
            for op, arg in ops:
                if op == "iter":
                    if positioned:
                        assert list(mine.iternext()) == list(real.iternext())
                    positioned = False
                    continue
                if not positioned and op in ("next", "prev"):
                    op = "first" if op == "next" else "last"
                got = _step(mine, op, arg)
                assert got == _step(real, op, arg), (op, arg)
                positioned = got[0]
    finally:
        env.close()


def _packed(
    data: st.DataObject, keys: list[bytes]
) -> tuple[list[Entry], list[Entry], list[tuple[Entry, list[tuple[int, Entry]]]]]:
    """Split sorted keys into plain entries and packs of consecutive keys, each key of
    kind 0 or 1; some plain keys also in a pack (shadowed). Returns the kind-0 plain
    entries, the kind-0 union the merged cursor must show, and the packs as (index
    entry, [(kind, entry)])."""
    keys = sorted(keys)
    kinds = data.draw(st.lists(st.integers(0, 1), min_size=len(keys), max_size=len(keys)))
    where = data.draw(st.lists(st.booleans(), min_size=len(keys), max_size=len(keys)))
    plain = [
        (k, b"plain" + k)
        for k, packed, kind in zip(keys, where, kinds, strict=True)
        if not packed and kind == 0
    ]
    packed = [(kind, (k, b"pack" + k)) for k, p, kind in zip(keys, where, kinds, strict=True) if p]
    # Some plain keys of kind 0 get a stale packed copy too: plain wins.
    shadows = data.draw(st.lists(st.sampled_from(plain), max_size=3, unique=True)) if plain else []
    packed = sorted(packed + [(0, (k, b"stale" + k)) for k, _ in shadows], key=lambda e: e[1][0])
    packs: list[tuple[Entry, list[tuple[int, Entry]]]] = []
    at = 0
    while at < len(packed):
        size = data.draw(st.integers(1, 4))
        chunk = packed[at : at + size]
        at += size
        packs.append(((chunk[-1][1][0], b"#%d" % len(packs)), chunk))
    union = sorted(plain + [e for kind, e in packed if kind == 0 and e[0] not in dict(plain)])
    return plain, union, packs


@settings(max_examples=300, deadline=None)
@given(keys=KEYS, data=st.data(), ops=OPS)
def test_merged_plain_and_packed_entries_move_as_one_list(
    keys: list[bytes], data: st.DataObject, ops: Any
) -> None:
    plain, union, packs = _packed(data, keys)
    by_index = {index: chunk for index, chunk in packs}

    def load(key: bytes, value: bytes) -> list[Entry]:
        return [e for kind, e in by_index[(key, value)] if kind == 0]

    index = ListCursor([index for index, _ in packs])
    merged = MergedCursor(ListCursor(plain), PackCursor(index, load))
    _same_moves(ListCursor(union), merged, ops)


@settings(max_examples=200, deadline=None)
@given(keys=KEYS, data=st.data(), ops=OPS)
def test_a_pack_cursor_moves_as_its_entries_would(
    keys: list[bytes], data: st.DataObject, ops: Any
) -> None:
    """Packs with entries of the other kind only, and packs whose greatest key is of
    the other kind, are stepped over in both directions."""
    _, _, packs = _packed(data, keys)
    by_index = {index: chunk for index, chunk in packs}
    want = sorted(e for _, chunk in packs for kind, e in chunk if kind == 1)

    def load(key: bytes, value: bytes) -> list[Entry]:
        return [e for kind, e in by_index[(key, value)] if kind == 1]

    _same_moves(ListCursor(want), PackCursor(ListCursor([i for i, _ in packs]), load), ops)


def test_iteration_starts_where_the_cursor_stands() -> None:
    plain = [(b"a", b"1"), (b"c", b"3")]
    packs = {(b"d", b""): [(b"b", b"2"), (b"d", b"4")]}
    merged: Cursor = MergedCursor(
        ListCursor(plain), PackCursor(ListCursor(list(packs)), lambda k, v: packs[(k, v)])
    )
    assert isinstance(merged, MergedCursor)
    assert list(merged.iternext(values=False)) == [b"a", b"b", b"c", b"d"]
    assert merged.set_range(b"bb") and list(merged) == [(b"c", b"3"), (b"d", b"4")]
    assert merged.set_key(b"b") and merged.value() == b"2"
    assert not merged.set_key(b"bb") and merged.key() == b""
    assert merged.next() and merged.key() == b"a"  # not positioned: next is first
