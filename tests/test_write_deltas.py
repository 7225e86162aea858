"""Delta blobs over the channel's writes (format 2): small, and safe under every change to the writes.

A large blob's zstd dictionary may hold, after its base, the payloads of the
channel's writes under a range of earlier checkpoints (``WriteTxn.put_blob``).
These tests pin down that the range is used where it pays, and that nothing —
a fork writing under an old checkpoint, prune, delete_for_runs, copy_thread,
delete_thread — can leave a blob whose dictionary changed under it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from deltalog.engine import CorruptRecordError, DeltaLogSaver, keys
from deltalog.engine.blobs import DELTA_MIN
from deltalog.engine.codec import WriteDict
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver

from .checkpoints import at, checkpoint_id, put_values
from .graphs import cfg, chat_graph, history, human, varied_text


def run_chat(saver: Any, turns: int, sf: int | None, thread_id: str = "t") -> Any:
    graph = chat_graph(sf).compile(checkpointer=saver)
    for turn in range(turns):
        graph.invoke({"messages": [human(turn)]}, cfg(thread_id))
    return graph


def ranged_blobs(saver: DeltaLogSaver) -> list[tuple[bytes, bytes, tuple[bytes, bytes]]]:
    """(key, record, (lo, hi)) of every blob whose dictionary holds writes."""
    out = []
    for key, raw in saver.env.iter_db("blobs"):
        span = saver.env.codec.delta_range(raw, "test", key=key)
        if span is not None:
            out.append((key, raw, span))
    return out


def verified(saver: DeltaLogSaver) -> bool:
    """verify(), which also checks each write range's content against its record
    (a cached payload alone would hide a dictionary that changed)."""
    return saver.verify().ok


def payloads(saver: DeltaLogSaver) -> dict[bytes, tuple[str, bytes]]:
    """Every blob's decoded (type, payload), by key, decoded afresh."""
    saver.env.payloads = type(saver.env.payloads)()
    with saver.env.read() as r:
        return {key: r.blob_typed(key, raw) for key, raw in saver.env.iter_db("blobs")}


def writes_under(saver: DeltaLogSaver, thread_id: str) -> list[str]:
    """Checkpoint ids of a thread that hold writes to ``messages``, oldest first."""
    return [
        checkpoint_id(t.config)
        for t in reversed(list(saver.list(cfg(thread_id))))
        if any(channel == "messages" for _, channel, _ in t.pending_writes or [])
    ]


def test_snapshots_cost_about_their_structure_not_their_messages(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """R3: with the writes in the dictionary, a DeltaChannel snapshot record is a
    small fraction of the value it stores, and the thread reads back exactly as on
    InMemorySaver."""
    saver = make_saver()
    graph = run_chat(saver, 60, 10)
    memory_graph = run_chat(InMemorySaver(), 60, 10)
    assert history(graph, cfg("t")) == history(memory_graph, cfg("t"))
    ranged = ranged_blobs(saver)
    assert len(ranged) >= 10  # 120 updates at snapshot_frequency 10
    with saver.env.read() as r:
        for key, raw, _ in ranged:
            size = len(r.blob_typed(key, raw)[1])
            assert size >= DELTA_MIN
            assert len(raw) < size // 20, (len(raw), size)
    assert verified(saver)


def test_bytes_without_write_dictionaries_are_several_times_larger(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """The gain is real: the same snapshots re-encoded as deltas of their base alone
    (what rebase_blobs writes) take several times the bytes."""
    saver = make_saver()
    run_chat(saver, 60, 10)
    ranged = ranged_blobs(saver)
    before = sum(len(raw) for _, raw, _ in ranged)
    with saver.env.read() as r:
        (thread,) = r.threads()
        (ns,) = r.namespaces(thread)
    rewritten = saver.env.write(lambda w: w.rebase_blobs(thread, ns, hit=lambda lo, hi: True))
    assert rewritten == len(ranged) >= 10 and ranged_blobs(saver) == []
    blobs = dict(saver.env.iter_db("blobs"))
    after = sum(len(blobs[key]) for key, _, _ in ranged)
    assert after > 3 * before, (after, before)
    assert verified(saver)


def over_payloads_as_stored(saver: DeltaLogSaver) -> dict[bytes, tuple[bytes, bytes]]:
    """Each blob whose dictionary holds writes, re-encoded as a format 14 writer did:
    over the same write range with each payload whole (``WriteDict.items`` off), by
    key: ``(record as stored, record re-encoded)``."""
    codec = saver.env.codec
    out = {}
    with saver.env.read() as r:
        for key, raw, (lo, hi) in ranged_blobs(saver):
            head = codec.delta_header(raw, "test", key=key)
            assert head is not None and head.items  # every format 15 delta sets the flag
            base = b""
            if head.ref:
                base_key = keys.blob_base_key(key, head.ref)
                base_raw = r.txn.get(base_key, db=r.dbs.blobs)
                assert base_raw is not None
                base = r.blob_typed(base_key, base_raw)[1]
            (t, n), _ = keys.split_ids(key, 2)
            content = r.write_content(
                keys.ns_prefix(t, n), keys.blob_channel(key), lo, hi, items=False
            )
            record = codec.encode_delta(
                r.blob_typed(key, raw),
                base,
                head.ref,
                head.seq,
                WriteDict(lo, hi, content),
                key=key,
            )
            assert record is not None
            out[key] = (raw, record)
    return out


def test_a_seed_is_one_match_of_the_writes_without_their_array_headers(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """Format 15: a node's update is a list, so each write's payload is an array
    header and then the message, while a seed holds the messages back to back. With
    the headers left out of the dictionary the seeds' zstd frames are about a third
    of those over the payloads as stored (whose records format 14 wrote; 542 against
    1,980 bytes here, each record's header the same)."""
    saver = make_saver()
    run_chat(saver, 100, 10)
    pairs = over_payloads_as_stored(saver)
    assert len(pairs) >= 20
    codec = saver.env.codec

    def frames(records: list[tuple[bytes, bytes]]) -> int:
        heads = [codec.delta_header(raw, "test", key=key) for key, raw in records]
        return sum(len(head.packed) for head in heads if head is not None)

    now = frames([(key, raw) for key, (raw, _) in pairs.items()])
    before = frames([(key, old) for key, (_, old) in pairs.items()])
    assert 5 * now < 2 * before, (now, before)


def test_a_delta_over_payloads_as_stored_still_reads(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A format 14 delta (no items flag) decodes over the payloads as stored: the
    store's deltas rewritten that way read the same history as InMemorySaver's,
    and verify checks their write ranges clean."""
    saver = make_saver()
    graph = run_chat(saver, 40, 10)
    memory_graph = run_chat(InMemorySaver(), 40, 10)
    before = payloads(saver)
    pairs = over_payloads_as_stored(saver)

    def put_old(w: Any) -> None:
        for key, (_, old) in pairs.items():
            w.txn.put(key, old, db=w.dbs.blobs)

    saver.env.write(put_old)
    for key, raw, _ in ranged_blobs(saver):
        head = saver.env.codec.delta_header(raw, "test", key=key)
        assert head is not None and not head.items and raw == pairs[key][1]
    assert payloads(saver) == before
    assert history(graph, cfg("t")) == history(memory_graph, cfg("t"))
    assert verified(saver)


def test_a_fork_writing_inside_a_range_rebases_the_blob_first(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A new write under an old checkpoint whose writes a blob's dictionary holds
    rewrites that blob (same value) before the write lands; both savers then agree on
    every state of the thread."""
    saver = make_saver()
    memory = InMemorySaver()
    graph = run_chat(saver, 30, 4)
    memory_graph = run_chat(memory, 30, 4)
    before = payloads(saver)
    key, _, (lo, hi) = ranged_blobs(saver)[len(ranged_blobs(saver)) // 2]
    inside = [cid for cid in writes_under(saver, "t") if lo <= keys.encode_id(cid) <= hi]
    assert inside, "the range names checkpoints with writes"
    target = inside[len(inside) // 2]
    fork_write = [("messages", [AIMessage(content="forked " + "x" * 300, id="fork")])]
    # Checkpoint ids differ between the savers: fork at the same position.
    position = [checkpoint_id(t.config) for t in saver.list(cfg("t"))].index(target)
    memory_target = list(memory.list(cfg("t")))[position].config
    saver.put_writes(at("t", target), fork_write, task_id="fork-task")
    memory.put_writes(memory_target, fork_write, task_id="fork-task")
    assert payloads(saver) == before  # every value as it was
    spans = {k: span for k, _, span in ranged_blobs(saver)}
    assert key not in spans or not spans[key][0] <= keys.encode_id(target) <= spans[key][1]
    assert verified(saver)
    assert history(graph, cfg("t")) == history(memory_graph, cfg("t"))


def test_rewriting_an_existing_write_changes_nothing(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """Writes are first-writer-wins: putting an existing (task, idx) again under a
    checkpoint in a range neither changes the write nor rewrites any blob."""
    saver = make_saver(pack_turns=False)  # plain records: the layout read here
    run_chat(saver, 30, 4)
    ranged = ranged_blobs(saver)
    _, _, (lo, hi) = ranged[len(ranged) // 2]
    key = next(
        k
        for k, _ in saver.env.iter_db("writes")
        if lo <= keys.write_checkpoint_key(k)[len(keys.ns_prefix(*keys.split_ids(k, 2)[0])) :] <= hi
    )
    _, _, cid, task_id, _ = keys.decode_write_key(key)
    task_path = next(w.task_path for w in saver.get_writes(at("t", cid)) if w.task_id == task_id)
    stored = saver.get_tuple(at("t", cid))
    assert stored is not None and stored.pending_writes
    channel, value = next((c, v) for t, c, v in stored.pending_writes if t == task_id)
    saver.put_writes(stored.config, [(channel, value)], task_id=task_id, task_path=task_path)
    assert ranged_blobs(saver) == ranged


@pytest.mark.parametrize("reducers", [False, True])
def test_prune_keeps_every_surviving_blob_decodable(
    make_saver: Callable[..., DeltaLogSaver], reducers: bool
) -> None:
    """Pruning deletes checkpoints whose writes blob dictionaries hold: survivors are
    rewritten first, so the store verifies clean and the kept states are unchanged."""
    saver = make_saver()
    graph = run_chat(saver, 40, 4)
    assert ranged_blobs(saver)
    latest = graph.get_state(cfg("t"))
    kept_before = [h["values"] for h in history(graph, cfg("t"))[:6]]
    report = saver.prune(["t"], keep_last=6, reducers=graph if reducers else None)
    assert report.checkpoints > 0
    assert verified(saver)
    assert graph.get_state(cfg("t")).values == latest.values
    # Values only: the oldest kept checkpoint loses its parent (re-linked).
    assert [h["values"] for h in history(graph, cfg("t"))[:6]] == kept_before


def test_copy_thread_carries_the_marks_so_forks_in_the_copy_are_guarded(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """copy_thread copies the write-range marks with the bytes: a fork writing under
    an old checkpoint of the copy rebases the copy's blob, never the source's."""
    saver = make_saver()
    graph = run_chat(saver, 30, 4)
    saver.copy_thread("t", "copy")
    source_ranges = ranged_blobs(saver)
    with saver.env.read() as r:
        src, dst = r.name_id(keys.KIND_THREAD, "t"), r.name_id(keys.KIND_THREAD, "copy")
    assert src is not None and dst is not None
    copied = [(k, s) for k, _, s in source_ranges if k.startswith(keys.thread_prefix(dst))]
    assert copied
    victim, (lo, hi) = copied[len(copied) // 2]
    target = next(cid for cid in writes_under(saver, "copy") if lo <= keys.encode_id(cid) <= hi)
    source_state = graph.get_state(cfg("t")).values
    saver.put_writes(
        at("copy", target), [("messages", [AIMessage(content="y" * 400, id="f")])], "fork"
    )
    assert verified(saver)
    after = {k: span for k, _, span in ranged_blobs(saver)}
    assert victim not in after or not after[victim][0] <= keys.encode_id(target) <= after[victim][1]
    src_prefix = keys.thread_prefix(src)
    assert {k: v for k, v in after.items() if k.startswith(src_prefix)} == {
        k: span for k, _, span in source_ranges if k.startswith(src_prefix)
    }
    assert graph.get_state(cfg("t")).values == source_state


def test_delete_thread_removes_its_marks(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """A deleted thread leaves no write-range mark behind; other threads keep theirs."""
    saver = make_saver()
    run_chat(saver, 20, 4, "a")
    run_chat(saver, 20, 4, "b")

    def marks() -> list[bytes]:
        return [k for k, _ in saver.env.iter_db("meta", keys.WDEP)]

    assert len(marks()) == 2
    saver.delete_thread("a")
    assert len(marks()) == 1
    assert verified(saver)


def test_a_write_changed_behind_the_stores_back_is_reported(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """If a write a dictionary holds is removed without the store's guard (a stray
    tool, damage), reading the blob raises CorruptRecordError saying its writes
    changed and verify reports it; nothing decodes to a wrong value."""
    saver = make_saver()
    run_chat(saver, 30, 4)
    key, _, (lo, hi) = ranged_blobs(saver)[-1]
    with saver.env.read() as r:
        channel = r.name_id(keys.KIND_CHANNEL, "messages")
    assert channel is not None
    (thread, ns), _ = keys.split_ids(key, 2)
    prefix = keys.ns_prefix(thread, ns)
    victim = next(
        k
        for k, v in saver.env.iter_db("writes", prefix)
        if lo <= keys.write_checkpoint_key(k)[len(prefix) :] <= hi
        and keys.write_idx(k) >= 0
        and v.startswith(keys.uid(channel))
    )
    saver.env.write(lambda w: w.txn.delete(victim, db=saver.env.db("writes")))
    saver.env.payloads = type(saver.env.payloads)()  # decode from the records
    with saver.env.read() as r, pytest.raises(CorruptRecordError, match="changed since"):
        r.blob_typed(key, r.txn.get(key, db=saver.env.db("blobs")))
    report = saver.verify()
    assert not report.ok
    assert any("changed since" in p.detail for p in report.problems)


def test_a_fork_write_rebases_only_the_blobs_of_its_channel(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A new write to channel ``a`` inside the write ranges of both ``a`` and ``b``
    rewrites only ``a``'s blobs: ``b``'s keep their (smaller) records byte for byte."""
    saver = make_saver()
    config = None
    a: list[str] = []
    b: list[str] = []
    for step in range(12):
        text = varied_text(step, 150)
        a.append("a " + text)
        b.append("b " + text[::-1])
        if config is not None:
            saver.put_writes(config, [("a", [a[-1]]), ("b", [b[-1]])], task_id=f"task-{step}")
        config = put_values(saver, "t", {"a": list(a), "b": list(b)}, parent=config)
    with saver.env.read() as r:
        ids = {r.name_id(keys.KIND_CHANNEL, name): name for name in ("a", "b")}
    before = {k: (raw, span) for k, raw, span in ranged_blobs(saver)}
    by_channel = {
        name: [k for k in before if ids[keys.decode_blob_key(k)[2]] == name] for name in "ab"
    }
    assert by_channel["a"] and by_channel["b"]
    # put_values gives every version counter 1 with a random suffix, so blob key
    # order is random: pick an a-range and a b-range that overlap, widest first.
    ids_in_thread = sorted(keys.encode_id(checkpoint_id(t.config)) for t in saver.list(cfg("t")))
    pairs = sorted(
        (
            (min(before[ka][1][1], before[kb][1][1]), ka, kb)
            for ka in by_channel["a"]
            for kb in by_channel["b"]
            if max(before[ka][1][0], before[kb][1][0]) <= min(before[ka][1][1], before[kb][1][1])
        ),
        reverse=True,
    )
    assert pairs, "the a and b write ranges should overlap"
    _, blob_a, blob_b = pairs[0]
    lo = max(before[blob_a][1][0], before[blob_b][1][0])
    hi = min(before[blob_a][1][1], before[blob_b][1][1])
    target_key = next(cid for cid in ids_in_thread if lo <= cid <= hi)
    target = next(
        checkpoint_id(t.config)
        for t in saver.list(cfg("t"))
        if keys.encode_id(checkpoint_id(t.config)) == target_key
    )
    saver.put_writes(at("t", target), [("a", ["forked"])], task_id="fork")
    after = {k: (raw, span) for k, raw, span in ranged_blobs(saver)}
    assert {k: before[k] for k in by_channel["b"]} == {k: after[k] for k in by_channel["b"]}
    assert blob_a not in after or after[blob_a] != before[blob_a]
    assert verified(saver)
