"""Delta-safe maintenance: copy, prune, delete runs, verify, compact (R7, R8)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

import lmdb
import pytest
from deltalog.channels.replay import Reducer
from deltalog.engine import (
    DeltaChainError,
    DeltaLogSaver,
    DeltaLogStore,
    InvalidInputError,
    ThreadExistsError,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.message import _messages_delta_reducer

from .graphs import cfg, chat_graph, history, human, observe

# LangGraph types its own batch reducer with list parameters; DeltaChannel (and
# deltalog's reducers=) accept any Callable[[Any, Sequence[Any]], Any].
MESSAGES_REDUCER = cast(Reducer, _messages_delta_reducer)


def run_chat(saver: Any, thread_id: str, turns: int, sf: int | None, start: int = 0) -> Any:
    """Run ``turns`` chat turns on a thread, each a run with its own run_id; return the graph."""
    graph = chat_graph(sf).compile(checkpointer=saver)
    for turn in range(start, start + turns):
        config = cfg(thread_id)
        # LangGraph records metadata.run_id from config["metadata"] (as the server sets it).
        config["metadata"] = {"run_id": f"{thread_id}-run-{turn}"}
        graph.invoke({"messages": [human(turn)]}, config)
    return graph


def all_states(saver: DeltaLogSaver, graph: Any, thread_id: str) -> dict[str, Any]:
    """Checkpoint id → observed state, for every listed checkpoint of the root namespace."""
    out = {}
    for tup in saver.list(cfg(thread_id, checkpoint_ns="")):
        config: RunnableConfig = tup.config
        out[config["configurable"]["checkpoint_id"]] = observe(graph.get_state(config))["values"]
    return out


# -- copy_thread ---------------------------------------------------------------------------


@pytest.mark.parametrize("sf", [3, 100])
def test_copy_equals_source_everywhere(sf: int, make_saver: Callable[..., DeltaLogSaver]) -> None:
    """R7: a copied delta thread has the source's state and history at every checkpoint."""
    saver = make_saver()
    graph = run_chat(saver, "src", 10, sf)
    report = saver.copy_thread("src", "dst")
    assert report.found and report.checkpoints == len(list(saver.list(cfg("src"))))
    assert history(graph, cfg("dst")) == history(graph, cfg("src"))
    assert all_states(saver, graph, "dst") == all_states(saver, graph, "src")
    assert saver.verify().ok


def test_continuing_copy_leaves_source_unchanged(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """Continuing the copy matches a reference thread and does not touch the source."""
    saver = make_saver()
    graph = run_chat(saver, "src", 6, 3)
    before = history(graph, cfg("src"))
    saver.copy_thread("src", "dst")
    for turn in range(6, 9):
        graph.invoke({"messages": [human(turn)]}, cfg("dst"))
    assert history(graph, cfg("src")) == before
    reference = run_chat(InMemorySaver(), "ref", 9, 3)
    assert observe(graph.get_state(cfg("dst"))) == observe(reference.get_state(cfg("ref")))


def test_copy_onto_existing_thread_raises(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """Copying onto a thread with checkpoints raises and merges nothing."""
    saver = make_saver()
    run_chat(saver, "a", 2, 3)
    graph = run_chat(saver, "b", 1, 3)
    before = history(graph, cfg("b"))
    with pytest.raises(ThreadExistsError, match="'b' already has checkpoints"):
        saver.copy_thread("a", "b")
    assert history(graph, cfg("b")) == before


def test_copy_missing_source_reports_not_found(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """A missing source copies nothing and says so in the report."""
    saver = make_saver()
    report = saver.copy_thread("nope", "dst")
    assert not report.found and report.checkpoints == 0
    assert list(saver.list(cfg("dst"))) == []


def test_copy_does_not_reserialize(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """Copy moves stored bytes: the serde is never called during the copy."""
    saver = make_saver()
    run_chat(saver, "src", 4, 3)
    calls: list[str] = []
    serde = saver.serde
    original_dumps, original_loads = serde.dumps_typed, serde.loads_typed

    def spy_dumps(obj: Any) -> Any:
        calls.append("dumps")
        return original_dumps(obj)

    def spy_loads(data: Any) -> Any:
        calls.append("loads")
        return original_loads(data)

    serde.dumps_typed = spy_dumps  # type: ignore[method-assign]
    serde.loads_typed = spy_loads  # type: ignore[method-assign]
    try:
        saver.copy_thread("src", "dst")
    finally:
        serde.dumps_typed = original_dumps  # type: ignore[method-assign]
        serde.loads_typed = original_loads  # type: ignore[method-assign]
    assert calls == []


# -- prune -----------------------------------------------------------------------------------


@pytest.mark.parametrize("with_reducers", [False, True])
@pytest.mark.parametrize("sf", [3, 100])
def test_prune_keep_latest_keeps_exact_state(
    sf: int, with_reducers: bool, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """R7: after keep_latest the latest state is identical and the graph continues correctly."""
    saver = make_saver()
    graph = run_chat(saver, "t", 14, sf)
    latest_before = observe(graph.get_state(cfg("t")))
    reducers = graph if with_reducers else None
    total = len(list(saver.list(cfg("t"))))
    report = saver.prune(["t"], reducers=reducers)
    if sf == 100 and not with_reducers:
        # No seed yet: the whole chain back to the root stays, hidden.
        assert (report.checkpoints, report.hidden) == (0, total - 1)
    else:
        assert report.checkpoints > 0
    listed = list(saver.list(cfg("t", checkpoint_ns="")))
    assert len(listed) == 1
    after = observe(graph.get_state(cfg("t")))
    assert after["values"] == latest_before["values"]
    assert after["next"] == latest_before["next"]
    verdict = saver.verify()
    assert verdict.ok, verdict.problems
    if with_reducers:
        assert report.seeds == 1 and report.hidden == 0
        # The chain is gone: only the kept checkpoint (with its seed) remains.
        assert saver.env.stats()["checkpoints"]["entries"] == 1
    run_chat(saver, "t", 3, sf, start=14)
    reference = run_chat(InMemorySaver(), "ref", 17, sf)
    assert (
        observe(graph.get_state(cfg("t")))["values"]
        == observe(reference.get_state(cfg("ref")))["values"]
    )


def test_prune_without_delta_channels_keeps_one(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """A thread with plain add_messages prunes to one checkpoint with the same state."""
    saver = make_saver()
    graph = run_chat(saver, "t", 5, None)
    before = observe(graph.get_state(cfg("t")))
    saver.prune(["t"])
    assert saver.env.stats()["checkpoints"]["entries"] == 1
    assert observe(graph.get_state(cfg("t")))["values"] == before["values"]
    assert saver.verify().ok


def test_free_bytes_are_the_pages_lmdbs_compacting_copy_leaves_out(
    make_saver: Callable[..., DeltaLogSaver], tmp_path: Path
) -> None:
    """``stats()["free_bytes"]`` is LMDB's free list: the used pages less those every
    database holds (the memory store's too), so LMDB's own compacting copy, which
    copies each tree page for page and drops the free list, is that much smaller.
    Deleting a thread moves its pages from the trees to the free list."""
    saver = make_saver()
    run_chat(saver, "a", 30, 3)
    run_chat(saver, "b", 30, 3)
    with DeltaLogStore(saver.env) as store:
        for i in range(50):
            store.put(("users", str(i % 5)), f"k{i}", {"text": "memory " * 40 + str(i)})

    def lmdb_compact_bytes(name: str) -> int:
        dest = tmp_path / name
        dest.mkdir()
        saver.env.env.copy(str(dest), compact=True)
        copy = lmdb.open(str(dest), readonly=True, lock=False, max_dbs=20)
        try:
            return int((copy.info()["last_pgno"] + 1) * copy.stat()["psize"])
        finally:
            copy.close()

    before = saver.env.stats()
    assert before["items"]["entries"] > 0
    assert before["used_bytes"] - before["free_bytes"] == lmdb_compact_bytes("c1")
    saver.delete_thread("a")
    after = saver.env.stats()
    held = after["used_bytes"] - after["free_bytes"]
    assert held == lmdb_compact_bytes("c2")
    assert held < before["used_bytes"] - before["free_bytes"]


def test_prune_dry_run_writes_nothing(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """dry_run reports counts and bytes and leaves the store unchanged."""
    saver = make_saver()
    graph = run_chat(saver, "t", 8, 3)
    before = history(graph, cfg("t"))
    entries = saver.env.stats()
    report = saver.prune(["t"], dry_run=True)
    assert report.dry_run and report.checkpoints > 0 and report.bytes > 0
    assert history(graph, cfg("t")) == before
    assert saver.env.stats()["checkpoints"] == entries["checkpoints"]
    real = saver.prune(["t"])
    assert (real.checkpoints, real.writes, real.blobs, real.bytes) == (
        report.checkpoints,
        report.writes,
        report.blobs,
        report.bytes,
    )


def test_prune_keep_last_n(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """keep_last=N keeps the N newest checkpoints, each with its exact state."""
    saver = make_saver()
    graph = run_chat(saver, "t", 10, 3)
    states = all_states(saver, graph, "t")
    newest = list(states)[:4]
    saver.prune(["t"], keep_last=4)
    after = all_states(saver, graph, "t")
    assert list(after) == newest
    assert after == {cid: states[cid] for cid in newest}
    assert saver.verify().ok


def test_prune_older_than(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """older_than removes old checkpoints, keeps newer ones and always the latest."""
    saver = make_saver()
    graph = run_chat(saver, "t", 4, 3)
    states = all_states(saver, graph, "t")
    saver.prune(["t"], older_than=timedelta(days=1))
    assert all_states(saver, graph, "t") == states  # nothing is a day old
    saver.prune(["t"], older_than=datetime.now(timezone.utc) + timedelta(seconds=1))
    after = all_states(saver, graph, "t")
    assert list(after) == list(states)[:1]
    assert after == {cid: states[cid] for cid in after}


def test_prune_delete_strategy(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """strategy='delete' removes the threads entirely and nothing else."""
    saver = make_saver()
    run_chat(saver, "a", 3, 3)
    graph = run_chat(saver, "b", 3, 3)
    before = history(graph, cfg("b"))
    saver.prune(["a"], strategy="delete")
    assert list(saver.list(cfg("a"))) == []
    assert history(graph, cfg("b")) == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"thread_ids": "t"}, "single string"),
        ({"thread_ids": ["t"], "strategy": "all"}, "unknown"),
        ({"thread_ids": ["t"], "keep_last": 0}, "keep_last"),
        ({"thread_ids": ["t"], "older_than": datetime(2020, 1, 1)}, "time zone"),
        ({"thread_ids": ["t"], "reducers": 42}, "reducers"),
    ],
)
def test_prune_bad_input_raises_before_writing(
    kwargs: dict[str, Any], message: str, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """R9: bad prune arguments raise a clear error and change nothing."""
    saver = make_saver()
    graph = run_chat(saver, "t", 3, 3)
    before = history(graph, cfg("t"))
    with pytest.raises(InvalidInputError, match=message):
        saver.prune(**kwargs)
    assert history(graph, cfg("t")) == before


# -- delete_for_runs -------------------------------------------------------------------------


def run_ids(saver: DeltaLogSaver, thread_id: str) -> list[str]:
    """Run ids of a thread, oldest first."""
    seen: list[str] = []
    for tup in reversed(list(saver.list(cfg(thread_id)))):
        run = tup.metadata.get("run_id")
        if run and run not in seen:
            seen.append(run)
    return seen


def test_delete_run_cutting_a_chain_raises(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """R7: deleting a middle run of a delta thread without reducers raises and deletes nothing."""
    saver = make_saver()
    graph = run_chat(saver, "t", 5, 100)
    runs = run_ids(saver, "t")
    before = history(graph, cfg("t"))
    with pytest.raises(DeltaChainError, match="thread 't'"):
        saver.delete_for_runs([runs[1]])
    assert history(graph, cfg("t")) == before


def test_delete_run_with_reducers_keeps_other_states(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """With reducers, a middle run goes and every other checkpoint keeps its exact state."""
    saver = make_saver()
    graph = run_chat(saver, "t", 5, 100)
    other = run_chat(saver, "other", 3, 100)
    other_before = history(other, cfg("other"))
    runs = run_ids(saver, "t")
    doomed = {
        t.config["configurable"]["checkpoint_id"]
        for t in saver.list(cfg("t"), filter={"run_id": runs[2]})
    }
    states = all_states(saver, graph, "t")
    report = saver.delete_for_runs([runs[2]], reducers={"messages": MESSAGES_REDUCER})
    assert report.checkpoints == len(doomed) and report.seeds >= 1
    after = all_states(saver, graph, "t")
    assert set(after) == set(states) - doomed
    assert after == {cid: states[cid] for cid in after}
    assert history(other, cfg("other")) == other_before
    assert saver.verify().ok
    graph.invoke({"messages": [human(99)]}, cfg("t"))


def test_delete_latest_run_needs_no_reducers(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """Deleting the newest run cuts no surviving chain, so it works without reducers."""
    saver = make_saver()
    graph = run_chat(saver, "t", 4, 100)
    states = all_states(saver, graph, "t")
    last = run_ids(saver, "t")[-1]
    saver.delete_for_runs([last])
    after = all_states(saver, graph, "t")
    assert after == {cid: states[cid] for cid in after} and len(after) < len(states)
    assert saver.verify().ok


def test_delete_for_runs_rejects_bare_string(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """R9: a bare string for run_ids is refused (it would be read as characters)."""
    with pytest.raises(InvalidInputError, match="single string"):
        make_saver().delete_for_runs("run")


# -- verify ------------------------------------------------------------------------------------


def _raw_env(saver: DeltaLogSaver) -> tuple[Any, Any]:
    return saver.env.env, saver.env.db


def test_verify_finds_deleted_parent(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """verify reports a dangling parent when a middle checkpoint record is removed."""
    saver = make_saver()
    run_chat(saver, "t", 3, 3)
    assert saver.verify().ok
    keys = [k for k, _ in saver.env.iter_db("checkpoints")]
    env, db = _raw_env(saver)
    with env.begin(write=True) as txn:
        txn.delete(keys[2], db=db("checkpoints"))
    kinds = {p.kind for p in saver.verify().problems}
    assert "dangling_parent" in kinds


def test_verify_finds_dropped_seed(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """verify reports a broken delta chain when the only seed and the root are gone."""
    saver = make_saver()
    graph = run_chat(saver, "t", 6, 3)
    snapshots = [t for t in saver.list(cfg("t")) if "messages" in t.checkpoint["channel_values"]]
    assert snapshots, "sf=3 must have written a seed"
    env, db = _raw_env(saver)
    blob_keys = [k for k, _ in saver.env.iter_db("blobs")]
    # Drop every messages blob and the root: walks now hit a missing ancestor.
    with env.begin(write=True) as txn:
        for key in blob_keys:
            txn.delete(key, db=db("blobs"))
        first = next(iter(saver.env.iter_db("checkpoints")))[0]
        txn.delete(first, db=db("checkpoints"))
    report = saver.verify()
    assert not report.ok
    assert "broken_delta_chain" in {p.kind for p in report.problems}
    del graph


def test_verify_finds_corrupted_record(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """verify reports an undecodable record after bytes are flipped in a value."""
    saver = make_saver()
    run_chat(saver, "t", 2, 3)
    key, value = next(iter(saver.env.iter_db("writes")))
    env, db = _raw_env(saver)
    with env.begin(write=True) as txn:
        txn.put(key, value[:8] + bytes([0x7F]) + b"\xff" * 7, db=db("writes"))
    report = saver.verify()
    assert not report.ok
    assert [p.kind for p in report.problems if p.severity == "error"] == ["undecodable"]


# -- compact -----------------------------------------------------------------------------------


def test_compact_returns_space_and_keeps_states(tmp_path: Path) -> None:
    """compact writes a smaller copy after a prune, with identical states."""
    with DeltaLogSaver.from_path(tmp_path / "s") as saver:
        graph = run_chat(saver, "t", 30, 3)
        run_chat(saver, "keep", 3, 3)
        saver.prune(["t"], reducers=graph)
        keep_before = history(graph, cfg("keep"))
        latest = observe(graph.get_state(cfg("t")))
        report = saver.compact(tmp_path / "compacted")
        assert report.bytes_after < report.bytes_before
    with DeltaLogSaver.from_path(tmp_path / "compacted") as copy:
        graph = chat_graph(3).compile(checkpointer=copy)
        assert history(graph, cfg("keep")) == keep_before
        assert observe(graph.get_state(cfg("t"))) == latest
        assert copy.verify().ok


def test_compact_fills_the_pages_of_a_store_of_many_threads(tmp_path: Path) -> None:
    """compact rebuilds the store in key order, so the pages that inserts into the middle of
    a database left half full come out full: a store of four interleaved chat threads
    compacts to at most 0.87x what LMDB's own compacting copy writes (0.78-0.81x in
    six runs; pages vary with the random ids), with identical states and every key
    and value the same."""
    import os

    with DeltaLogSaver.from_path(tmp_path / "s", pack_turns=False) as saver:  # plain records
        graph = chat_graph(5).compile(checkpointer=saver)
        for turn in range(40):
            for thread_id in ("a", "b", "c", "d"):
                graph.invoke({"messages": [human(turn)]}, cfg(thread_id))
        before = {t: history(graph, cfg(t)) for t in "abcd"}
        fd = os.open(tmp_path / "lmdb-compact.mdb", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            saver.env.copy_to_fd(fd, compact=True)
        finally:
            os.close(fd)
        report = saver.compact(tmp_path / "compacted")
        rows = {
            db: list(saver.env.iter_db(db)) for db in ("checkpoints", "writes", "blobs", "meta")
        }
    lmdb_bytes = (tmp_path / "lmdb-compact.mdb").stat().st_size
    assert report.bytes_after <= 0.87 * lmdb_bytes, (report.bytes_after, lmdb_bytes)
    with DeltaLogSaver.from_path(tmp_path / "compacted", pack_turns=False) as copy:
        assert {db: list(copy.env.iter_db(db)) for db in rows} == rows
        graph = chat_graph(5).compile(checkpointer=copy)
        assert {t: history(graph, cfg(t)) for t in "abcd"} == before
        assert copy.verify(deep=True).ok


def test_backup_is_consistent_copy(tmp_path: Path) -> None:
    """backup produces a store with the same history as the source."""
    with DeltaLogSaver.from_path(tmp_path / "s") as saver:
        graph = run_chat(saver, "t", 4, 3)
        before = history(graph, cfg("t"))
        saver.backup(tmp_path / "b")
    with DeltaLogSaver.from_path(tmp_path / "b") as copy:
        assert history(chat_graph(3).compile(checkpointer=copy), cfg("t")) == before
    assert lmdb is not None


def test_checkpoint_refs_include_hidden_chain(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """checkpoint_refs lists every checkpoint with its parent, hidden ones flagged, without values."""
    saver = make_saver()
    run_chat(saver, "t", 6, 100)
    before = saver.checkpoint_refs("t")
    assert len(before) == len(list(saver.list(cfg("t")))) and not any(h for *_, h in before)
    saver.prune(["t"])
    refs = saver.checkpoint_refs("t")
    visible = [cid for _, cid, _, hidden in refs if not hidden]
    assert visible == [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg("t"))]
    assert sum(hidden for *_, hidden in refs) == len(refs) - 1
    parents = {cid: parent for _, cid, parent, _ in refs}
    assert all(p is None or p in parents for p in parents.values())
    assert saver.checkpoint_refs("missing") == []


def test_short_listings_read_past_hidden_checkpoints(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A listing with a limit reads its first chunk of only that many rows: every limit,
    across chunk boundaries and past the hidden checkpoints of a pruned DeltaChannel
    chain, gives the first rows of the whole listing."""
    saver = make_saver()
    run_chat(saver, "t", 14, 100)
    saver.prune(["t"])  # no seed yet: the chain stays, hidden
    run_chat(saver, "t", 20, 100, start=14)  # 60 visible checkpoints after 41 hidden ones
    everything = [c.config for c in saver.list(cfg("t"))]
    assert len(everything) > 40
    for limit in (1, 2, 5, 20, 31, 32, 33, len(everything) - 1, len(everything), 500):
        got = [c.config for c in saver.list(cfg("t"), limit=limit)]
        assert got == everything[:limit]
    # Below a checkpoint near the hidden ones: the rows after them, not fewer.
    before = cfg("t", checkpoint_id=everything[-2]["configurable"]["checkpoint_id"])
    got = [c.config for c in saver.list(cfg("t"), before=before, limit=3)]
    assert got == everything[-1:]
