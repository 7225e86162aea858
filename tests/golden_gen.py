"""Writes one golden store of tests/test_golden.py with whatever deltalog is on the path.

The stores under tests/data/golden/format-N/ were written by the last commit of
each on-disk format (issue 16: golden bytes before the engine is reshaped):
format 1 by eaa3909^ (604bfec), format 2 by 9d60506^ (896258c), format 3 by
d42f3b9, format 4 by 9d954c3 (the last commit before records carried a CRC over
their key), format 5 by 023d5de (the last commit before memory items were
packed into chunks; its memory store is tests/golden_memory_gen.py's), format 6
by 378341a (the last commit before write keys dropped the task path and a
run's input was stored once, format 7), format 7 by 8f4d4a8 (the last commit
before splice deltas, format 8), format 8 by 1bc1b4b (the last commit before
the shorter frame of dictionary-compressed records, format 9), format 9 by
7380bc8 (the last commit before version-major blob keys, format 10), format 10
by 5a6ec19 (the last commit before compact delta headers, format 11), format 11
by 2c940e4 (the last commit before compact checkpoint records, format 12), format 12
by 73a716b (the last commit before the compact step past the clock sequence, format
13), format 13 by d9bbf0a (the last code before the turn packs, format 14), format 14
by 6b7a262 (the last commit before write dictionaries without array headers, format
15), format 15 by 8e09ee9 (the last commit before large records moved into the packs
log, format 16). To write
one again (N=1 shown), from the repository root:

    git worktree add --detach /tmp/gold-1 eaa3909^
    mkdir -p /tmp/gold-1/_path/deltalog
    ln -s /tmp/gold-1/engine /tmp/gold-1/_path/deltalog/engine
    ln -s /tmp/gold-1/channels /tmp/gold-1/_path/deltalog/channels
    PYTHONPATH=/tmp/gold-1/_path .venv/bin/python tests/golden_gen.py \
        tests/data/golden/format-1 "$(git rev-parse eaa3909^)"
    git worktree remove --force /tmp/gold-1

``deltalog`` was a namespace package up to format 3, so the old ``engine`` and
``channels`` on PYTHONPATH come before the installed ones (the dependencies did
not change since format 1). From format 4 on ``deltalog`` is a package of its
own (``deltalog_pkg/``): link each file of the old ``deltalog_pkg/`` into
``_path/deltalog/`` as well (``for f in /tmp/gold-4/deltalog_pkg/*; do ln -s $f
/tmp/gold-4/_path/deltalog/; done``); the script prints which code it ran and checks the format the
store says it has. Each folder holds the store's ``data.mdb`` and
``expected.json``: the raw facts of the bytes (format version, record tags)
and every checkpoint tuple and delta-channel history as that old code read
them back. Running the script again gives the same bytes.

Everything is fixed: checkpoint ids (canonical UUIDs and one plain string),
timestamps, channel versions, run ids, task ids; no graph runs, so nothing is
random. The thread covers plain blobs, small scalars (held in the record from
format 3 on), compressed values, a DeltaChannel seeded by a snapshot with
writes replayed after it and a later snapshot (a delta blob over those writes
from format 2 on), a fork, a subgraph namespace, pending and special writes.
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata
from langgraph.checkpoint.serde.types import _DeltaSnapshot

THREADS: list[tuple[str, str]] = [("chat", ""), ("chat", "inner:1"), ("other", "")]
"""The (thread_id, checkpoint_ns) pairs the scenario writes; read_back lists each."""

DELTA = "msgs"
RUN_A = "00000000-0000-4000-8000-00000000000a"
RUN_B = "00000000-0000-4000-8000-00000000000b"


def cid(n: int) -> str:
    """The n-th checkpoint id: a canonical v6 UUID, increasing with n."""
    return str(uuid.UUID(f"1ef00000-0000-6000-8000-{n:012x}"))


def ver(n: int) -> str:
    """Channel version n in deltalog's own form (32-digit counter, dot, 8 hex digits)."""
    return f"{n:032}.{0x5EED0000 + n:08x}"


def message(n: int) -> str:
    """A write to the delta channel (a few hundred bytes)."""
    return f"message {n}: " + " ".join(f"word{n * 7 + i}" for i in range(30))


SEED = "".join(f"seed line {i}: the first long message of the chat\n" for i in range(100))
"""The delta channel's first value: large enough (> 4 KiB) to be stored as a delta blob."""


def checkpoint(n: int, values: dict[str, Any], versions: dict[str, str]) -> Checkpoint:
    """Checkpoint n with the keys LangGraph's empty_checkpoint() gives (pending_sends too)."""
    fields: dict[str, Any] = {
        "v": 2,
        "id": cid(n),
        "ts": f"2024-01-01T00:00:{n:02d}+00:00",
        "channel_values": values,
        "channel_versions": dict(versions),
        "versions_seen": {"model": {k: v for k, v in versions.items() if k != DELTA}},
        "pending_sends": [],
        "updated_channels": sorted(versions),
    }
    return cast(Checkpoint, fields)


def metadata(step: int, run_id: str, **parents: str) -> CheckpointMetadata:
    return {"source": "loop", "step": step, "run_id": run_id, "parents": dict(parents)}


def config(thread_id: str, ns: str = "", checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def write_scenario(saver: Any) -> None:
    """The fixed sequence of put / put_writes calls (see the module docstring)."""
    big = "".join(f"line {i} of a large plain value\n" for i in range(20))
    v = {"note": ver(1), "count": ver(1), "flag": ver(1), "ratio": ver(1), "none": ver(1)}
    v |= {"big": ver(1), "items": ver(1), DELTA: ver(1)}
    values: dict[str, Any] = {"note": "hello", "count": 1, "flag": True, "ratio": 0.5}
    values |= {"none": None, "big": big, "items": [1, 2, 3], DELTA: _DeltaSnapshot([SEED])}
    c1 = saver.put(config("chat"), checkpoint(1, values, v), metadata(-1, RUN_A), dict(v))
    saver.put_writes(c1, [(DELTA, message(1)), ("note", "n1")], "task-1", "~__pregel_pull, model")

    v2 = {**v, "note": ver(2), "count": ver(2), DELTA: ver(2)}
    plain = {k: val for k, val in values.items() if k != DELTA}
    c2_values = {**plain, "note": "n1", "count": 2}
    new2 = {k: v2[k] for k in ("note", "count", DELTA)}
    c2 = saver.put(c1, checkpoint(2, c2_values, v2), metadata(0, RUN_A), new2)
    saver.put_writes(c2, [(DELTA, message(2))], "task-2", "~__pregel_pull, model")
    saver.put_writes(c2, [("items", [4])], "task-2b", "~__pregel_push, 0, False")

    v3 = {**v2, "items": ver(3), DELTA: ver(3)}
    c3_values = {**c2_values, "items": [1, 2, 3, 4]}
    c3 = saver.put(
        c2, checkpoint(3, c3_values, v3), metadata(1, RUN_A), {"items": ver(3), DELTA: ver(3)}
    )
    saver.put_writes(c3, [(DELTA, message(3))], "task-3", "~__pregel_pull, model")

    v4 = {**v3, DELTA: ver(4), "count": ver(4)}
    snapshot = _DeltaSnapshot([SEED, message(1), message(2), message(3)])
    c4_values = {**c3_values, "count": 4, DELTA: snapshot}
    new4 = {DELTA: ver(4), "count": ver(4)}
    c4 = saver.put(c3, checkpoint(4, c4_values, v4), metadata(2, RUN_A), new4)
    saver.put_writes(c4, [(DELTA, message(4))], "task-4", "~__pregel_pull, model")
    saver.put_writes(c4, [("__interrupt__", {"ask": "ok?"})], "task-4", "~__pregel_pull, model")

    # A fork of c3 in another run: the branch keeps c3's delta history.
    v5 = {**v3, "note": ver(5), DELTA: ver(5)}
    c5_values = {**c3_values, "note": "forked"}
    saver.put(c3, checkpoint(5, c5_values, v5), metadata(2, RUN_B), {"note": ver(5), DELTA: ver(5)})

    # A subgraph namespace under c4.
    inner = saver.put(
        config("chat", "inner:1"),
        checkpoint(6, {"note": "inner"}, {"note": ver(1)}),
        metadata(-1, RUN_A, **{"": cid(4)}),
        {"note": ver(1)},
    )
    saver.put_writes(inner, [("note", "inner write")], "task-6", "~__pregel_pull, inner")

    # A checkpoint id that is neither a UUID nor a ULID.
    other = checkpoint(7, {"note": "other", "count": -7}, {"note": ver(1), "count": ver(1)})
    other["id"] = "plain-id-0001"
    saver.put(config("other"), other, metadata(-1, RUN_B), {"note": ver(1), "count": ver(1)})


def jsonable(value: Any) -> Any:
    """A JSON form that keeps what JSON would blur (tuples, snapshots, bytes, key types)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, _DeltaSnapshot):
        return {"$snapshot": jsonable(value.value)}
    if isinstance(value, tuple):
        return {"$tuple": [jsonable(v) for v in value]}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, Mapping):
        if all(isinstance(k, str) for k in value):
            return {k: jsonable(v) for k, v in value.items()}
        return {"$items": [[jsonable(k), jsonable(v)] for k, v in value.items()]}
    raise TypeError(f"golden scenario holds an unexpected {type(value).__name__}: {value!r}")


def read_back(saver: Any) -> dict[str, Any]:
    """Every checkpoint tuple (newest first) and its delta history, per (thread, ns)."""
    out: dict[str, Any] = {}
    for thread_id, ns in THREADS:
        tuples = []
        for t in saver.list(config(thread_id, ns)):
            history = saver.get_delta_channel_history(config=t.config, channels=[DELTA])
            tuples.append(
                {
                    "config": jsonable(t.config),
                    "parent_config": jsonable(t.parent_config),
                    "checkpoint": jsonable(t.checkpoint),
                    "metadata": jsonable(t.metadata),
                    "pending_writes": jsonable(t.pending_writes),
                    "delta_history": jsonable(history),
                }
            )
        out[f"{thread_id}/{ns}"] = tuples
    return out


def delta_blobs(raw: dict[str, Any]) -> int:
    """How many blob records of a :func:`raw_summary` are deltas (tag 2, and from format
    11 on tag 5; from format 5 on with the KEYED bit 0x80 set: 130, 133)."""
    return sum(
        n for tag, n in raw["tags"]["blobs"].items() if tag.isdigit() and int(tag) & 0x7F in (2, 5)
    )


def raw_summary(path: Path) -> dict[str, Any]:
    """What the store's bytes hold, read with plain lmdb on a copy (LMDB adds lock.mdb):
    the meta ``format_version`` and, per database, how many records start with
    each codec tag byte (0 plain, 1 zstd, 2 delta, 3 dictionary-compressed);
    writes are left out (their values start with the channel id, not a tag)."""
    import lmdb
    import ormsgpack

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(path / "data.mdb", Path(tmp) / "data.mdb")
        env = lmdb.open(tmp, max_dbs=16, readonly=True)
        try:
            tags: dict[str, dict[str, int]] = {}
            for name in ("checkpoints", "blobs"):
                db = env.open_db(name.encode(), create=False)
                counts: dict[str, int] = {}
                with env.begin(db=db) as txn:
                    for _, value in txn.cursor():
                        tag = str(value[0]) if value else "empty"
                        counts[tag] = counts.get(tag, 0) + 1
                tags[name] = counts
            meta = env.open_db(b"meta", create=False)
            with env.begin() as txn:
                raw = txn.get(b"format_version", db=meta)
        finally:
            env.close()
    return {"format_version": None if raw is None else ormsgpack.unpackb(raw), "tags": tags}


def main(out: Path, commit: str) -> None:
    from deltalog.engine import DeltaLogSaver, keys

    engine_dir = Path(keys.__file__).resolve().parent
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        with DeltaLogSaver.from_path(store, map_size=1024**2) as saver:
            write_scenario(saver)
        with DeltaLogSaver.from_path(store, map_size=1024**2) as saver:
            states = read_back(saver)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(store / "data.mdb", out / "data.mdb")
    raw = raw_summary(out)
    version = raw["format_version"]
    assert version == keys.FORMAT_VERSION, (version, keys.FORMAT_VERSION)
    assert delta_blobs(raw) > 0, f"no delta blob was written: {raw}"
    expected = {**raw, "written_by": commit, "states": states}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    size = (out / "data.mdb").stat().st_size
    print(f"{out}: format {version} by {engine_dir} ({commit[:9]}), data.mdb {size} bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
