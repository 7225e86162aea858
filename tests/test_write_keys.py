"""Format 7 write keys: the task path in the record, reads in writes_sort_key order, the 6 → 7 upgrade (R1, R10)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import ormsgpack
import pytest
from deltalog.engine import DeltaLogSaver, keys
from deltalog.engine.codec import TAG_DICT_COMPACT
from deltalog.engine.env import Environment
from deltalog.engine.envelope import read_write, split_write_value
from deltalog.engine.errors import CorruptRecordError
from langchain_core.runnables import RunnableConfig

from .graphs import cfg, chat_graph, fanout_graph, history, human

UUID_A = "ffffffff-0000-4000-8000-000000000001"  # sorts last by task id ...
UUID_B = "00000000-0000-4000-8000-000000000002"  # ... and first


def at(cid: str, thread_id: str = "t") -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": cid}}


def first_checkpoint(saver: DeltaLogSaver) -> RunnableConfig:
    version = saver.get_next_version(None, None)
    return saver.put(
        {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
        {
            "v": 4,
            "id": "1ef00000-0000-6000-8000-000000000001",
            "ts": "2024-01-01T00:00:00+00:00",
            "channel_values": {"x": 1},
            "channel_versions": {"x": version},
            "versions_seen": {},
            "updated_channels": ["x"],
        },  # type: ignore[typeddict-item]
        {"source": "input", "step": -1, "parents": {}},
        {"x": version},
    )


def test_writes_come_back_in_writes_sort_key_order(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """R1: keys sort by task id, yet pending writes come back by (task path, task id, idx):
    the task whose id sorts first but whose path sorts last comes last."""
    saver = make_saver()
    config = first_checkpoint(saver)
    saver.put_writes(config, [("x", 2), ("y", 3)], UUID_A, "~__pregel_pull, a")
    saver.put_writes(config, [("x", 4)], UUID_B, "~__pregel_pull, b")
    saver.put_writes(config, [("x", 5)], "plain-task", "~__pregel_pull, a")
    tup = saver.get_tuple(config)
    assert tup is not None
    assert [(w[0], w[1], w[2]) for w in tup.pending_writes or []] == [
        (UUID_A, "x", 2),
        (UUID_A, "y", 3),
        ("plain-task", "x", 5),
        (UUID_B, "x", 4),
    ]
    rows = saver.get_writes(config)
    assert [(w.task_path, w.task_id, w.idx) for w in rows] == sorted(
        (w.task_path, w.task_id, w.idx) for w in rows
    )
    # In key order: the UUID task ids (16 bytes, UUID_B first), then the others.
    in_key_order = [keys.decode_write_key(k)[3:] for k, _ in saver.env.iter_db("writes")]
    assert in_key_order == [(UUID_B, 0), (UUID_A, 0), (UUID_A, 1), ("plain-task", 0)]


def test_a_write_record_holds_its_task_path_as_an_interned_id(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """Format 10: a write record holds its task path's interned id (name kind ``p``), so a
    small write takes ~16 bytes instead of ~40; reads give the path back and sort by the
    path, not the id (the path interned first sorts last here)."""
    saver = make_saver()
    config = first_checkpoint(saver)
    saver.put_writes(config, [("x", None)], UUID_B, "~__pregel_pull, z")
    saver.put_writes(config, [("x", None)], UUID_A, "~__pregel_pull, a")
    rows = list(saver.env.iter_db("writes"))
    with saver.env.read() as r:
        stored = {}
        for key, raw in rows:
            cbytes, _, record = split_write_value(raw)
            _, _, path = read_write(
                saver.env.codec.decode(record, "t", prefix=cbytes, key=key), "t"
            )
            assert type(path) is int
            stored[keys.decode_write_key(key)[3]] = r.name_of(keys.KIND_TASK_PATH, path)
            assert len(raw) <= 20, raw
    assert stored == {UUID_B: "~__pregel_pull, z", UUID_A: "~__pregel_pull, a"}
    got = [(w.task_path, w.task_id) for w in saver.get_writes(config)]
    assert got == [("~__pregel_pull, a", UUID_A), ("~__pregel_pull, z", UUID_B)]


def test_a_write_whose_task_path_name_is_gone_is_damage(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A write whose interned task path has no ``names_rev`` record reads as damaged
    (CorruptRecordError), never as a write of another task, and verify reports it."""
    saver = make_saver()
    config = first_checkpoint(saver)
    saver.put_writes(config, [("x", 1)], UUID_A, "~__pregel_pull, gone")
    with saver.env.read() as r:
        path_id = r.name_id(keys.KIND_TASK_PATH, "~__pregel_pull, gone")
    assert path_id is not None
    names_rev = saver.env.db("names_rev")
    saver.env.write(
        lambda w: w.txn.delete(keys.name_rev_key(keys.KIND_TASK_PATH, path_id), db=names_rev)
    )
    saver.env._names.clear()
    with pytest.raises(CorruptRecordError, match="names_rev"):
        saver.get_writes(config)
    assert not saver.verify(deep=True).ok


def test_a_task_path_of_any_length_is_stored(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """R5: a 5,000-character task path (deep subgraphs) is stored and read back; only the
    task id is in the key."""
    saver = make_saver()
    config = first_checkpoint(saver)
    path = "~__pregel_push, " + ", ".join(f"('~__pregel_pull', 'node{i}')" for i in range(200))
    assert len(path) > 5000
    saver.put_writes(config, [("x", 7)], UUID_A, path)
    assert [(w.task_path, w.task_id) for w in saver.get_writes(config)] == [(path, UUID_A)]


def test_put_writes_is_idempotent_per_task_id_and_idx(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """R1: a second put of (task_id, idx) under another task path keeps the first write (idx
    >= 0) or replaces it (a special write), as InMemorySaver does."""
    saver = make_saver()
    config = first_checkpoint(saver)
    saver.put_writes(config, [("x", 1), ("__error__", "first")], UUID_A, "~__pregel_pull, a")
    saver.put_writes(config, [("x", 2), ("__error__", "second")], UUID_A, "~__pregel_pull, z")
    rows = saver.get_writes(config)
    got = {(w.channel, saver.serde.loads_typed(w.value), w.task_path) for w in rows}
    assert got == {("x", 1, "~__pregel_pull, a"), ("__error__", "second", "~__pregel_pull, z")}


def _as_format_6(path: Path, writes: list[tuple[bytes, Any]]) -> None:
    """Rewrite a closed store's writes in the format 6 layout (task path in the key,
    ``[type, bytes]`` records, compressed with the store's dictionary as format 6 did),
    its blobs under their format 6 keys, and mark it format 6. ``writes``: (format 7 key, WriteRow) of every write."""
    with DeltaLogSaver.from_path(path) as saver:
        codec = saver.env.codec
        with saver.env.read():  # hands the codec the dictionary, if the store has one
            pass
        env = saver.env.env
        writes_db = saver.env.db("writes")
        meta = saver.env.db("meta")
        with env.begin(write=True) as txn:
            for key, row in writes:
                t, n, cid, task_id, idx = keys.decode_write_key(key)
                raw = txn.get(key, db=writes_db)
                cbytes, _, _ = split_write_value(raw)
                txn.delete(key, db=writes_db)
                old = keys.legacy_write_key(t, n, keys.encode_id(cid), row.task_path, task_id, idx)
                record = codec.encode(list(row.value), prefix=cbytes, key=old)
                txn.put(old, cbytes + record, db=writes_db)
            # Blob keys of formats 1-9: the channel before the version.
            blobs_db = saver.env.db("blobs")
            for key, raw in [(bytes(k), bytes(v)) for k, v in txn.cursor(db=blobs_db)]:
                old = keys.blob_key(*keys.decode_blob_key(key), legacy=True)
                txn.delete(key, db=blobs_db)
                txn.put(old, codec.rekey(raw, key, old, "test"), db=blobs_db)
            txn.put(b"format_version", ormsgpack.packb(6), db=meta)


def _all_writes(saver: DeltaLogSaver) -> list[tuple[bytes, Any]]:
    out = []
    for key, _ in saver.env.iter_db("writes"):
        cid = keys.decode_write_key(key)[2]
        task_id, idx = keys.decode_write_key(key)[3:]
        row = next(w for w in saver.get_writes(at(cid)) if (w.task_id, w.idx) == (task_id, idx))
        out.append((key, row))
    return out


def _graph(kind: str) -> Any:
    return (chat_graph(20) if kind == "chat" else fanout_graph(3)).compile


@pytest.fixture(params=["chat", "fanout"])
def format_6_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[Path, list[dict[str, Any]], int, str]:
    """A store rewritten in the format 6 write layout; its history, how many writes it
    has, and which graph wrote it: a 130-turn chat (a trained dictionary, delta blobs over
    writes) or a 40-turn fan-out (five tasks write `messages` in one step, so a delta
    blob's write dictionary depends on the order of a checkpoint's writes)."""
    kind: str = request.param
    path = tmp_path / "s"
    # Plain records (no turn packs, format 14): the layout rewritten back to format 6.
    with DeltaLogSaver.from_path(path, pack_turns=False) as saver:
        graph = _graph(kind)(checkpointer=saver)
        for turn in range(130 if kind == "chat" else 40):
            graph.invoke({"messages": [human(turn)], "log": []}, cfg("t"))
        before = history(graph, cfg("t"))
        writes = _all_writes(saver)
        spans = 0
        for key, raw in saver.env.iter_db("blobs"):
            head = saver.env.codec.delta_header(raw, "test", key=key)
            spans += head is not None and head.span is not None
        assert spans, "no delta blob over writes"
    _as_format_6(path, writes)
    return path, before, len(writes), kind


def test_a_read_only_open_reads_format_6_writes_as_they_are(
    format_6_store: tuple[Path, list[dict[str, Any]], int, str],
) -> None:
    """R10, R12: a read-only open of a format 6 store reads its write keys and records as
    they are (same history) and changes no byte."""
    path, before, _, kind = format_6_store
    data = (path / "data.mdb").read_bytes()
    with DeltaLogSaver(Environment(path, readonly=True)) as saver:
        assert saver.env.format_version == 6
        assert history(_graph(kind)(checkpointer=saver), cfg("t")) == before
    assert (path / "data.mdb").read_bytes() == data


def test_the_6_to_7_step_moves_every_write_and_keeps_every_state(
    format_6_store: tuple[Path, list[dict[str, Any]], int, str],
) -> None:
    """R10: a writable open moves every write to its format 7 key (records compressed with
    the store's dictionary decode and stay so), keeps the history and every delta blob's
    write dictionary, and verifies clean."""
    path, before, count, kind = format_6_store
    with DeltaLogSaver.from_path(path) as saver:
        assert saver.env.format_version == keys.FORMAT_VERSION == 16
        rows = list(saver.env.iter_db("writes"))
        assert len(rows) == count
        tags = []
        for key, raw in rows:
            keys.decode_write_key(key)  # every key in the format 7 layout
            cbytes, _, record = split_write_value(raw)
            tags.append(record[0] & 0x7F)
            _, _, task_path = read_write(
                saver.env.codec.decode(record, "test", prefix=cbytes, key=key), "test"
            )
            assert task_path is not None
        if kind == "chat":
            assert tags.count(TAG_DICT_COMPACT) > len(tags) // 4
        assert history(_graph(kind)(checkpointer=saver), cfg("t")) == before
        assert saver.verify(deep=True).ok


def test_a_damaged_format_6_write_stays_where_it_is(
    format_6_store: tuple[Path, list[dict[str, Any]], int, str],
) -> None:
    """R10, R11: a write record that fails its CRC is left under its format 6 key; the
    upgrade and every other write go through, and verify names the damaged one."""
    path, _, count, _ = format_6_store
    env = lmdb.open(str(path), max_dbs=16)
    writes_db = env.open_db(b"writes", create=False)
    with env.begin(write=True) as txn:
        victim, raw = next(iter(txn.cursor(db=writes_db)))
        victim, raw = bytes(victim), bytes(raw)
        txn.put(victim, raw[:-1] + bytes((raw[-1] ^ 1,)), db=writes_db)
    env.close()
    with DeltaLogSaver.from_path(path) as saver:
        rows = dict(saver.env.iter_db("writes"))
        assert len(rows) == count and victim in rows
        moved = [k for k in rows if k != victim]
        assert all(keys.decode_write_key(k) for k in moved)
        report = saver.verify()
    assert not report.ok
    assert any(victim.hex()[:60] in p.detail for p in report.problems), report.problems
