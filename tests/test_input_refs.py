"""A run's input is stored once: the __start__ task's writes refer to it (format 7; R1, R3, R11)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver, keys
from deltalog.engine.envelope import (
    INPUT_CHANNEL,
    INPUT_INLINE_MAX,
    REF_MIN,
    CheckpointEnvelope,
    read_write,
    split_write_value,
)
from deltalog.engine.errors import CorruptRecordError
from deltalog.engine.store_rows import Typed
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from .checkpoints import put_values
from .graphs import cfg, chat_graph, history, human, varied_text
from .test_inline_values import put_child

Rows = list[tuple[bytes, bytes, Any]]


def run(saver: Any, turns: int, sf: int | None, thread_id: str = "t", *, long: bool = False) -> Any:
    """``turns`` chat turns; ``long`` human messages (~1,500 characters) are inputs too
    large for the checkpoint record (INPUT_INLINE_MAX), stored as blobs."""
    graph = chat_graph(sf).compile(checkpointer=saver)
    for turn in range(turns):
        text = f"question {turn}: " + varied_text(turn, 200) if long else ""
        graph.invoke({"messages": [human(turn, text)]}, cfg(thread_id))
    return graph


def input_blobs(saver: DeltaLogSaver) -> int:
    """How many blobs of the input channel the store holds."""
    with saver.env.read() as r:
        c = r.name_id(keys.KIND_CHANNEL, INPUT_CHANNEL)
        return sum(
            1
            for k, _ in r.txn.cursor(db=r.dbs.blobs)
            if c is not None and keys.decode_blob_key(k)[2] == c
        )


def replace_input(saver: DeltaLogSaver, ckey: bytes, typed: Typed | None) -> None:
    """Rewrite checkpoint record ``ckey`` (a valid record) with ``typed`` as its inline
    input, or with no input value at all when None."""

    def op(w: Any) -> None:
        where = f"checkpoints/{ckey.hex()}"
        raw = w.txn.get(ckey, db=w.dbs.checkpoints)
        env = CheckpointEnvelope.unpack(w.codec.decode(raw, where, key=ckey), where)
        assert INPUT_CHANNEL in env.inline
        if typed is None:
            del env.inline[INPUT_CHANNEL]
        else:
            env.inline[INPUT_CHANNEL] = list(typed)
        w.put_raw(w.dbs.checkpoints, ckey, w.codec.encode(env.pack(), key=ckey))

    saver.env.write(op)


def write_records(saver: DeltaLogSaver) -> Rows:
    """(key, channel uid bytes, decoded record) of every stored write, plain or
    in a turn pack."""
    out: Rows = []
    with saver.env.read() as r:
        cur = r.write_cursor()
        ok = cur.first()
        while ok:
            key, raw = bytes(cur.key()), bytes(cur.value())
            cbytes, _, record = split_write_value(raw)
            out.append(
                (key, cbytes, saver.env.codec.decode(record, "test", prefix=cbytes, key=key))
            )
            ok = cur.next()
    return out


def at(cid: str) -> RunnableConfig:
    return {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": cid}}


def references(saver: DeltaLogSaver) -> Rows:
    return [
        row for row in write_records(saver) if not isinstance(read_write(row[2], "t")[1], bytes)
    ]


def last_reference(saver: DeltaLogSaver) -> tuple[bytes, bytes, bytes]:
    """(write key, checkpoint key, input blob key) of the newest referring write."""
    key, _, _ = references(saver)[-1]
    ckey = keys.write_checkpoint_key(key)
    with saver.env.read() as r:
        _, versions, _, _ = r._envelope(ckey, r.txn.get(ckey, db=r.dbs.checkpoints))
        (t, n), _ = keys.split_ids(ckey, 2)
        c = r.name_id(keys.KIND_CHANNEL, INPUT_CHANNEL)
        assert c is not None
    return key, ckey, keys.blob_key(t, n, c, versions[INPUT_CHANNEL])


@pytest.mark.parametrize("long", [False, True], ids=["input-in-record", "input-in-blob"])
@pytest.mark.parametrize("sf", [None, 1, 100])
def test_the_input_message_is_stored_once_and_every_read_is_unchanged(
    make_saver: Callable[..., DeltaLogSaver], sf: int | None, long: bool
) -> None:
    """R3: the __start__ task's write of each human message refers to the input of its
    checkpoint: held in the checkpoint's record when it serializes to at most
    INPUT_INLINE_MAX bytes, else a blob. States, history and pending writes equal
    InMemorySaver's."""
    saver = make_saver(pack_turns=False)  # plain records: the layout read here
    graph = run(saver, 6, sf, long=long)
    sizes = [len(saver.serde.dumps_typed({"messages": [human(t)]})[1]) for t in range(6)]
    assert max(sizes) <= INPUT_INLINE_MAX
    assert input_blobs(saver) == (6 if long else 0)
    refs = references(saver)
    # One per turn: the human message the __start__ task writes to `messages`.
    assert len(refs) == 6
    with saver.env.read() as r:
        c = r.name_id(keys.KIND_CHANNEL, "messages")
    assert {cbytes for _, cbytes, _ in refs} == {keys.uid(c or 0)}
    for _, _, rec in refs:
        _, ref, task_path = read_write(rec, "test")
        assert not isinstance(ref, bytes) and type(task_path) is int  # interned (format 10)
        with saver.env.read() as r:
            assert INPUT_CHANNEL in r.name_of(keys.KIND_TASK_PATH, task_path)
    reference = run(InMemorySaver(), 6, sf, long=long)
    assert history(graph, cfg("t")) == history(reference, cfg("t"))
    for mine, theirs in zip(
        saver.list(cfg("t")), reference.checkpointer.list(cfg("t")), strict=True
    ):
        assert [w[1:] for w in mine.pending_writes or []] == [
            w[1:] for w in theirs.pending_writes or []
        ]
    assert saver.verify(deep=True).ok


def test_references_resolve_through_export_copy_and_prune(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """R7: a copy, an export imported elsewhere and a pruned thread read the same states."""
    saver = make_saver()
    graph = run(saver, 5, 2)
    before = history(graph, cfg("t"))
    latest = graph.get_state(cfg("t")).values
    exported = list(saver.export_records(["t"]))
    assert all(rec["value"][1] is not None for rec in exported if rec.get("kind") == "write"), (
        "an export carries payloads, never references"
    )
    other = make_saver()
    other.import_records(exported)
    assert history(chat_graph(2).compile(checkpointer=other), cfg("t")) == before
    assert len(references(other)) == 5  # the import stores the input once as well

    saver.copy_thread("t", "copy")
    assert history(graph, cfg("copy")) == before
    saver.prune(["t"], strategy="keep_latest")
    assert graph.get_state(cfg("t")).values == latest
    assert saver.verify(deep=True).ok


@pytest.mark.parametrize("long", [False, True], ids=["input-in-record", "input-in-blob"])
def test_a_replaced_input_is_an_error_never_another_value(
    make_saver: Callable[..., DeltaLogSaver], long: bool
) -> None:
    """R11: when the input a reference reads holds other bytes (a valid record or blob of
    another value), reading the write raises CorruptRecordError, and verify reports it."""
    saver = make_saver()
    run(saver, 2, 100, long=long)
    key, ckey, bkey = last_reference(saver)
    other = saver.serde.dumps_typed({"messages": [HumanMessage("something else " * 20, id="x")]})
    if long:
        forged = saver.env.codec.encode(list(other), key=bkey)
        saver.env.write(lambda w: w.put_raw(w.dbs.blobs, bkey, forged))
    else:
        replace_input(saver, ckey, other)
    with pytest.raises(CorruptRecordError, match="hold something else"):
        saver.get_writes(at(keys.decode_checkpoint_key(ckey)[2]))
    report = saver.verify(deep=True)
    assert not report.ok
    assert any(key.hex() in p.detail for p in report.problems)


@pytest.mark.parametrize("long", [False, True], ids=["input-in-record", "input-in-blob"])
def test_a_missing_input_is_an_error(make_saver: Callable[..., DeltaLogSaver], long: bool) -> None:
    """R11: a reference whose checkpoint has no input value left raises CorruptRecordError."""
    saver = make_saver()
    run(saver, 2, 100, long=long)
    _, ckey, bkey = last_reference(saver)
    if long:
        saver.env.write(lambda w: w.txn.delete(bkey, db=w.dbs.blobs))
    else:
        replace_input(saver, ckey, None)
    cid = keys.decode_checkpoint_key(ckey)[2]
    with pytest.raises(CorruptRecordError, match=r"is\s+missing"):
        saver.get_writes(at(cid))


def test_re_putting_a_checkpoint_with_another_input_keeps_its_writes(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """R1: a put that replaces a checkpoint's input first stores its referring writes whole."""
    saver = make_saver()
    run(saver, 2, 100)
    key, _, _ = references(saver)[-1]
    ckey = keys.write_checkpoint_key(key)
    cid = keys.decode_checkpoint_key(ckey)[2]
    config = at(cid)
    before = [(w.task_id, w.channel, w.value, w.task_path, w.idx) for w in saver.get_writes(config)]
    tup = saver.get_tuple(config)
    assert tup is not None
    checkpoint = tup.checkpoint.copy()
    versions = dict(checkpoint["channel_versions"])
    versions[INPUT_CHANNEL] = saver.get_next_version(str(versions[INPUT_CHANNEL]), None)
    checkpoint["channel_versions"] = versions
    checkpoint["channel_values"] = {
        **checkpoint["channel_values"],
        INPUT_CHANNEL: {"messages": [HumanMessage("a new input", id="n")]},
    }
    assert tup.parent_config is not None
    saver.put(tup.parent_config, checkpoint, tup.metadata, {INPUT_CHANNEL: versions[INPUT_CHANNEL]})
    after = [(w.task_id, w.channel, w.value, w.task_path, w.idx) for w in saver.get_writes(config)]
    assert after == before
    assert all(keys.write_checkpoint_key(k) != ckey for k, _, _ in references(saver))
    assert saver.verify(deep=True).ok


def test_short_and_foreign_payloads_are_stored_whole(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """Only a payload of at least REF_MIN bytes found in the input becomes a reference;
    writes that arrive before their checkpoint (R2) are stored whole."""
    saver = make_saver()
    version = saver.get_next_version(None, None)
    config = saver.put(
        {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
        {
            "v": 4,
            "id": "1ef00000-0000-6000-8000-000000000001",
            "ts": "2024-01-01T00:00:00+00:00",
            "channel_values": {INPUT_CHANNEL: {"messages": ["x" * 200], "n": 1}},
            "channel_versions": {INPUT_CHANNEL: version},
            "versions_seen": {},
            "updated_channels": [INPUT_CHANNEL],
        },  # type: ignore[typeddict-item]
        {"source": "input", "step": -1, "parents": {}},
        {INPUT_CHANNEL: version},
    )
    path = f"~__pregel_pull, {INPUT_CHANNEL}"
    saver.put_writes(
        config, [("messages", ["x" * 200]), ("n", 1), ("other", ["y" * 200])], "t1", path
    )
    early = at("1ef00000-0000-6000-8000-000000000009")
    saver.put_writes(early, [("messages", ["x" * 200])], "t2", path)
    refs = references(saver)
    assert len(refs) == 1 and keys.decode_write_key(refs[0][0])[3] == "t1"
    assert len(saver.serde.dumps_typed(1)[1]) < REF_MIN
    written = {
        (w.task_id, w.channel): saver.serde.loads_typed(w.value) for w in saver.get_writes(config)
    }
    assert written == {
        ("t1", "messages"): ["x" * 200],
        ("t1", "n"): 1,
        ("t1", "other"): ["y" * 200],
    }


def test_an_input_kept_by_later_checkpoints_reads_like_in_memory(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A held input is copied into each record that keeps its version: a child that does
    not consume it, and a fork put without its value (the store finds the record that
    holds that version). Every checkpoint reads what InMemorySaver's does."""
    source = {"messages": [HumanMessage("kept " * 40, id="k")]}
    assert len(make_saver().serde.dumps_typed(source)[1]) <= INPUT_INLINE_MAX
    results = []
    for saver in (make_saver(), InMemorySaver()):
        first = put_values(saver, "t", {INPUT_CHANNEL: source, "n": 1})
        versions = saver.get_tuple(first).checkpoint["channel_versions"]  # type: ignore[union-attr]
        n2 = saver.get_next_version(str(versions["n"]), None)
        child = put_child(
            saver, first, {INPUT_CHANNEL: source, "n": 2}, {**versions, "n": n2}, {"n": n2}
        )
        root: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        fork = put_child(saver, root, {}, {INPUT_CHANNEL: versions[INPUT_CHANNEL]}, {})
        results.append(
            [saver.get_tuple(c).checkpoint["channel_values"] for c in (first, child, fork)]  # type: ignore[union-attr]
        )
        if isinstance(saver, DeltaLogSaver):
            assert input_blobs(saver) == 0
            assert saver.verify(deep=True).ok
    assert results[0] == results[1]
    assert results[0][2] == {INPUT_CHANNEL: source}


@pytest.mark.parametrize("extra", [0, 1])
def test_an_input_of_at_most_input_inline_max_bytes_is_held_in_the_record(
    make_saver: Callable[..., DeltaLogSaver], extra: int
) -> None:
    """The bound is on the serialized payload: INPUT_INLINE_MAX bytes stay in the record,
    one byte more goes to a blob; both read back as they were put."""
    saver = make_saver()
    overhead = len(saver.serde.dumps_typed(["x" * 1000])[1]) - 1000
    value = ["x" * (INPUT_INLINE_MAX + extra - overhead)]
    assert len(saver.serde.dumps_typed(value)[1]) == INPUT_INLINE_MAX + extra
    config = put_values(saver, "t", {INPUT_CHANNEL: value})
    assert input_blobs(saver) == extra
    tup = saver.get_tuple(config)
    assert tup is not None
    assert tup.checkpoint["channel_values"] == {INPUT_CHANNEL: value}


def _replays(saver: Any, sf: int | None, long: bool) -> list[Any]:
    """A chat, then a replay from an input checkpoint without new input (LangGraph runs
    its ``__start__`` task again from the stored input), then an update as ``__start__``
    and a run on from it: what a user reads at each point."""
    graph = run(saver, 5, sf, "r", long=long)
    out: list[Any] = []
    inputs = [s for s in graph.get_state_history(cfg("r")) if s.metadata["source"] == "input"]
    out.append([(s.values, s.next) for s in inputs])
    out.append(graph.invoke(None, inputs[2].config)["messages"])
    out.append(history(graph, cfg("r")))
    graph.update_state(inputs[1].config, {"messages": [human(300, "edit")]}, as_node="__start__")
    out.append(graph.invoke(None, cfg("r"))["messages"])
    out.append(history(graph, cfg("r")))
    return out


@pytest.mark.parametrize("long", [False, True], ids=["input-in-record", "input-in-blob"])
@pytest.mark.parametrize("sf", [None, 3])
def test_replays_from_an_input_checkpoint_read_like_in_memory(
    make_saver: Callable[..., DeltaLogSaver], sf: int | None, long: bool
) -> None:
    saver = make_saver()
    assert _replays(saver, sf, long) == _replays(InMemorySaver(), sf, long)
    assert input_blobs(saver) == (5 if long else 0)  # a replay stores no input again
    assert saver.verify(deep=True).ok
