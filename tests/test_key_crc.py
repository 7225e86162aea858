"""A flipped bit in a checkpoint, write or blob key never moves the record to another
thread, checkpoint or channel: reads raise CorruptRecordError or return the thread's own
data, and verify reports it (R11, issue 15.2, format 5)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import CorruptRecordError, DeltaLogSaver

from tests.checkpoints import put_values
from tests.graphs import cfg
from tests.test_name_tables import _flip, _replace, _rows, _trial_copy

USERS = [f"user-{i}" for i in range(5)]


def _secret(thread_id: str, step: int) -> dict[str, Any]:
    """Values only this thread holds: an inline scalar and a blob."""
    return {"owner": f"{thread_id}/{step}", "notes": [thread_id] * (50 + step)}


def _store(path: Path) -> None:
    with DeltaLogSaver.from_path(path) as saver:
        for thread_id in USERS:
            parent = None
            for step in range(3):
                parent = put_values(saver, thread_id, _secret(thread_id, step), parent=parent)
                saver.put_writes(
                    parent, [("notes", [f"{thread_id} pending {step}"])], f"task-{step}"
                )


def _own(saver: DeltaLogSaver, thread_id: str) -> list[Any]:
    """Every checkpoint's values and pending writes of the thread, or the CorruptRecordError."""
    try:
        return [
            (t.checkpoint["channel_values"], [w[2] for w in t.pending_writes or []])
            for t in saver.list(cfg(thread_id))
        ]
    except CorruptRecordError as exc:
        return [exc]


def _allowed(thread_id: str) -> list[tuple[dict[str, Any], list[Any]]]:
    return [
        (_secret(thread_id, step), [[f"{thread_id} pending {step}"]]) for step in reversed(range(3))
    ]


@pytest.mark.parametrize("db", ["checkpoints", "writes", "blobs"])
def test_flipped_key_bits_never_serve_another_threads_record(db: str, tmp_path: Path) -> None:
    """Issue 15.2: 40 seeded random bit flips, each in the key of a random record of ``db``
    (the record moved to the flipped key): every read of every thread returns a subset of
    that thread's own checkpoints (a record whose key no longer decodes is not found) or
    raises CorruptRecordError, never another thread's or checkpoint's data; verify reports
    every flip. A blob moved away is missing to the checkpoints that name its version
    (their records' blob mask says it exists): CorruptRecordError, not an empty channel."""
    pristine = tmp_path / "pristine"
    _store(pristine)
    rng = random.Random(f"key-flips-{db}")
    moved_elsewhere = 0
    for trial in range(40):
        path = _trial_copy(pristine, tmp_path, trial)
        rows = _rows(path, db)
        key, value = rows[rng.randrange(len(rows))]
        new_key = _flip(rng, key)
        _replace(path, db, key, new_key, value)
        with DeltaLogSaver.from_path(path) as saver:
            for thread_id in USERS:
                got = _own(saver, thread_id)
                if got and isinstance(got[0], CorruptRecordError):
                    moved_elsewhere += 1
                    continue
                allowed = _allowed(thread_id)
                for entry in got:
                    values, writes = entry
                    assert any(values == a[0] for a in allowed), (trial, thread_id, new_key.hex())
                    assert all(w in [a[1][0] for a in allowed] for w in writes) or writes == [], (
                        trial,
                        thread_id,
                    )
            report = saver.verify(deep=True)
            assert not report.ok, (trial, db, key.hex(), new_key.hex())
    assert moved_elsewhere > 0  # some flips were read, and refused


def test_a_flipped_bit_in_the_trained_dictionary_is_damage_not_different_data(
    tmp_path: Path,
) -> None:
    """Issue 15 (meta records): zstd frames carry no checksum of what they decompress to,
    so the dictionary itself is CRC-checked (format 5): with one bit of ``dict:1``
    flipped, every read of a record compressed with it raises CorruptRecordError (never
    other values), the store still opens, and verify reports ``meta/dict:1``."""
    from deltalog.engine.codec import COMPACT, KEYED, TAG_DICT_COMPACT

    from tests.graphs import chat_graph, human

    pristine = tmp_path / "pristine"
    with DeltaLogSaver.from_path(pristine) as saver:
        graph = chat_graph(None).compile(checkpointer=saver)
        for turn in range(160):  # the final dictionary comes at ~turn 125
            graph.invoke({"messages": [human(turn)]}, cfg("chat"))
        assert saver.env.codec.active_dictionary == 1
    (key, raw), *_ = [(k, v) for k, v in _rows(pristine, "meta") if k == b"dict:1"]
    assert raw[0] & KEYED
    assert any(
        v[0] & ~(KEYED | COMPACT) == TAG_DICT_COMPACT for _, v in _rows(pristine, "checkpoints")
    )
    rng = random.Random("dictionary-flips")
    for trial in range(8):
        path = _trial_copy(pristine, tmp_path, trial)
        _replace(path, "meta", key, key, _flip(rng, raw))
        with DeltaLogSaver.from_path(path) as saver:
            with pytest.raises(CorruptRecordError):
                list(saver.list(cfg("chat")))
            report = saver.verify()
            assert not report.ok
            assert any("dict:1" in p.detail or "646963743a31" in p.detail for p in report.problems)


MEMORY_USERS = [f"user-{i}" for i in range(5)]


def _memory_store(path: Path) -> None:
    from deltalog.engine import DeltaLogStore

    with DeltaLogStore.from_path(path) as store:
        for user in MEMORY_USERS:
            for k in range(3):
                store.put((user, "facts"), f"fact-{k}", {"owner": user, "n": k})


def _memory_reads(path: Path, user: str) -> list[Any]:
    """What the user's namespace reads as after the user puts one more item: its items by
    search and get, or the CorruptRecordError."""
    from deltalog.engine import DeltaLogStore

    with DeltaLogStore.from_path(path) as store:
        try:
            store.put((user, "facts"), "latest", {"owner": user, "n": -1})
            found = [(i.key, i.value) for i in store.search((user, "facts"))]
            got = [store.get((user, "facts"), f"fact-{k}") for k in range(3)]
            return found + [(i.key, i.value) for i in got if i is not None]
        except CorruptRecordError as exc:
            return [exc]


@pytest.mark.parametrize("db", ["items", "item_ns"])
def test_flipped_bits_in_memory_records_never_serve_another_namespaces_items(
    db: str, tmp_path: Path
) -> None:
    """Issue 15.1/15.2 for the memory store (issue 17): 40 seeded random bit flips, each in
    the key of a random ``items`` record (moved there) or in the key or value of a random
    ``item_ns`` record: after each user puts one more item, every user's namespace reads
    only that user's items (some may be missing) or raises CorruptRecordError, never
    another user's (a put never lands in another user's namespace either)."""
    pristine = tmp_path / "pristine"
    _memory_store(pristine)
    rng = random.Random(f"memory-flips-{db}")
    refused = 0
    for trial in range(40):
        path = _trial_copy(pristine, tmp_path, trial)
        rows = _rows(path, db)
        key, value = rows[rng.randrange(len(rows))]
        in_key = db == "items" or rng.random() < 0.5
        data = key if in_key else value
        # Half the flips hit the namespace id itself (an items key's uid byte, the
        # last byte of an item_ns id), where a flip names another user's namespace.
        at = rng.randrange(len(data))
        if rng.random() < 0.5:
            at = 1 if db == "items" else len(data) - 1 if key[:1] == b"\x01" or not in_key else at
        flipped = bytearray(data)
        flipped[at] ^= 1 << rng.randrange(8)
        new_key, new_value = (bytes(flipped), value) if in_key else (key, bytes(flipped))
        _replace(path, db, key, new_key, new_value)
        for user in MEMORY_USERS:
            got = _memory_reads(path, user)
            if got and isinstance(got[0], CorruptRecordError):
                refused += 1
                continue
            for _key, item in got:
                assert item["owner"] == user, (trial, db, user, got)
    assert refused > 0  # some flips were read, and refused
