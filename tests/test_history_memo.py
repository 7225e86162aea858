"""The history memo (deltalog.engine.memo) never changes what get_delta_channel_history returns.

Every check compares the memo path (``saver.get_delta_channel_history``, and
``ReadTxn.history`` at the row level) with a cold walk that never touches the
memo (``ReadTxn.delta_history``, decoded by the serde), after the kinds of
write that could leave a remembered history stale. Each test also asserts
that the memo was really used, so a memo that silently never hits cannot pass
for a correct one.
"""

from __future__ import annotations

import functools
import multiprocessing
import random
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import pytest
from deltalog.channels.replay import Reducer
from deltalog.engine import DeltaLogSaver, keys
from deltalog.engine.env import Environment
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph.message import _messages_delta_reducer

from tests.checkpoints import at
from tests.graphs import cfg, chat_graph, human

# LangGraph types its own batch reducer with list parameters; DeltaChannel (and
# deltalog's reducers=) accept any Callable[[Any, Sequence[Any]], Any].
MESSAGES_REDUCER = cast(Reducer, _messages_delta_reducer)

CHANNELS = ["messages"]


# -- helpers --------------------------------------------------------------------------------


def cold_history(
    saver: DeltaLogSaver, config: RunnableConfig, channels: list[str] = CHANNELS
) -> dict[str, Any]:
    """The history by a walk that neither reads nor fills the memo, decoded by the serde."""
    conf = config["configurable"]
    with saver.env.read() as r:
        ids = r.ids(conf["thread_id"], conf.get("checkpoint_ns", ""))
        raw = (
            r.delta_history(*ids, conf.get("checkpoint_id"), channels)
            if ids is not None
            else {c: (None, []) for c in channels}
        )
    loads = saver.serde.loads_typed
    out: dict[str, Any] = {}
    for channel in channels:
        seed, writes = raw[channel]
        entry: dict[str, Any] = {"writes": [(w.task_id, w.channel, loads(w.value)) for w in writes]}
        if seed is not None:
            entry["seed"] = loads(seed.typed)
        out[channel] = entry
    return out


def assert_same(
    saver: DeltaLogSaver, config: RunnableConfig, channels: list[str] = CHANNELS
) -> dict[str, Any]:
    """The memo path equals the cold walk, as rows and as decoded values; return the latter."""
    conf = config["configurable"]
    with saver.env.read() as r:
        ids = r.ids(conf["thread_id"], conf.get("checkpoint_ns", ""))
        if ids is not None:
            rows = r.history(*ids, conf.get("checkpoint_id"), channels)
            cold_rows = r.delta_history(*ids, conf.get("checkpoint_id"), channels)
            assert {c: (h.seed, list(h.writes)) for c, h in rows.items()} == cold_rows
    warm = saver.get_delta_channel_history(config=config, channels=channels)
    cold = cold_history(saver, config, channels)
    assert warm == cold
    return cold


def refs(saver: DeltaLogSaver, thread_id: str) -> list[RunnableConfig]:
    """Configs of every checkpoint of a thread (hidden ones too), oldest first."""
    out = [at(thread_id, cid, ns) for ns, cid, _, _ in saver.checkpoint_refs(thread_id) if ns == ""]
    return sorted(out, key=lambda c: keys.encode_id(c["configurable"]["checkpoint_id"]))


def assert_all_same(saver: DeltaLogSaver, thread_id: str, seed: int = 0) -> int:
    """assert_same at every checkpoint of a thread, in a shuffled order; return how many."""
    configs = refs(saver, thread_id)
    random.Random(seed).shuffle(configs)
    for config in configs:
        assert_same(saver, config)
    return len(configs)


def run_turns(graph: Any, thread_id: str, turns: range, **extra: Any) -> None:
    """Invoke ``turns`` chat turns on a thread (each a run with its own run_id)."""
    for turn in turns:
        config = cfg(thread_id, **extra)
        config["metadata"] = {"run_id": f"{thread_id}-run-{turn}"}
        graph.invoke({"messages": [human(turn)]}, config)


def message_ids(history: Mapping[str, Any]) -> list[str]:
    """Ids of every message in a decoded history (seed first, then writes)."""
    entry = history["messages"]
    out = [m.id for m in entry["seed"].value] if "seed" in entry else []
    for _, _, value in entry["writes"]:
        out.extend(m.id for m in (value if isinstance(value, list) else [value]))
    return out


# -- long chats ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sf", [3, 100])
def test_long_chat_memo_equals_cold_walk(sf: int, make_saver: Callable[..., DeltaLogSaver]) -> None:
    """A 320-turn chat: the history at every checkpoint equals the cold walk (R6)."""
    saver = make_saver()
    graph = chat_graph(sf).compile(checkpointer=saver)
    for turn in range(320):
        graph.invoke({"messages": [human(turn)]}, cfg("t"))
        if turn % 7 == 0:
            assert_same(saver, cfg("t"))
    # With sf=3 most walks reach a seed before a remembered history.
    assert saver.env.memo.hits > (60 if sf == 3 else 300)
    if sf == 100:
        assert saver.history_copies.hits > 200
    assert assert_all_same(saver, "t") > 900
    state = graph.get_state(cfg("t")).values["messages"]
    assert [m.id for m in state][-2:] == ["h-319", "a-639"]


def test_memo_off_gives_the_same_histories(tmp_path: Path) -> None:
    """memo_entries=0 turns the memo off; both stores return the same histories."""
    on = DeltaLogSaver(Environment(tmp_path / "on"))
    off = DeltaLogSaver(Environment(tmp_path / "off", memo_entries=0))
    try:
        for saver in (on, off):
            run_turns(chat_graph(5).compile(checkpointer=saver), "t", range(30))
        for c_on, c_off in zip(refs(on, "t"), refs(off, "t"), strict=True):
            h_on = on.get_delta_channel_history(config=c_on, channels=CHANNELS)
            h_off = off.get_delta_channel_history(config=c_off, channels=CHANNELS)
            assert message_ids(h_on) == message_ids(h_off)
            assert [w[2] for w in h_on["messages"]["writes"]] == [
                w[2] for w in h_off["messages"]["writes"]
            ]
        assert on.env.memo.hits > 0 and off.env.memo.hits == 0
    finally:
        on.close()
        off.close()


async def test_async_chat_memo_equals_cold_walk(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """aput/aput_writes report to the memo like their sync twins."""
    saver = make_saver()
    graph = chat_graph(4).compile(checkpointer=saver)
    for turn in range(40):
        await graph.ainvoke({"messages": [human(turn)]}, cfg("t"))
        assert_same(saver, cfg("t"))
    assert saver.env.memo.hits > 30
    assert_all_same(saver, "t")


# -- writes that change an existing history ------------------------------------------------------


@pytest.mark.parametrize("sf", [4, 100])
def test_put_writes_to_an_old_ancestor_is_seen(
    sf: int, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """A write added under an old ancestor after its descendants' histories were read."""
    saver = make_saver()
    graph = chat_graph(sf).compile(checkpointer=saver)
    run_turns(graph, "t", range(12))
    before = assert_same(saver, cfg("t"))
    assert_all_same(saver, "t")
    hits = saver.env.memo.hits
    latest = refs(saver, "t")[-1]
    # The latest checkpoint's parent is on every walk from the latest one.
    parent = saver.get_tuple(latest).parent_config  # type: ignore[union-attr]
    assert parent is not None
    late = HumanMessage(content="late write", id="late")
    saver.put_writes(parent, [("messages", [late])], task_id="late-task")
    after = assert_same(saver, cfg("t"))
    assert [i for i in message_ids(after) if i != "late"] == message_ids(before)
    assert message_ids(after).count("late") == 1
    if sf == 100:  # no snapshot yet: the latest state is rebuilt from the history
        assert "late" in [m.id for m in graph.get_state(cfg("t")).values["messages"]]
    assert_all_same(saver, "t", seed=1)
    run_turns(graph, "t", range(12, 16))
    assert_all_same(saver, "t", seed=2)
    assert saver.env.memo.hits > hits


def test_fork_from_an_old_checkpoint(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """Time travel: a branch from an old checkpoint, continued, and an update_state."""
    saver = make_saver()
    graph = chat_graph(6).compile(checkpointer=saver)
    run_turns(graph, "t", range(30))
    assert_all_same(saver, "t")
    old = list(graph.get_state_history(cfg("t")))[-20]
    branch = graph.invoke({"messages": [human(500)]}, old.config)
    for turn in range(501, 505):
        branch_cfg = saver.get_tuple(cfg("t")).config  # type: ignore[union-attr]
        graph.invoke({"messages": [human(turn)]}, branch_cfg)
    assert_same(saver, cfg("t"))
    graph.update_state(old.config, {"messages": [human(600, "edited")]}, as_node="model")
    graph.invoke({"messages": [human(601)]}, cfg("t"))
    latest = assert_same(saver, cfg("t"))
    assert "h-601" in message_ids(latest) and "h-29" not in message_ids(latest)
    assert branch["messages"][-1].id.startswith("a-")
    assert_all_same(saver, "t", seed=3)
    assert saver.env.memo.hits > 0


@pytest.mark.parametrize("sf", [3, 100])
def test_maintenance_then_read(sf: int, make_saver: Callable[..., DeltaLogSaver]) -> None:
    """prune, delete_for_runs, copy_thread and delete_thread between memo reads."""
    saver = make_saver()
    graph = chat_graph(sf).compile(checkpointer=saver)
    run_turns(graph, "t", range(40))
    assert_all_same(saver, "t")

    saver.prune(["t"], keep_last=6, reducers=graph if sf == 3 else None)
    assert_all_same(saver, "t", seed=1)
    run_turns(graph, "t", range(40, 44))
    assert_all_same(saver, "t", seed=2)

    runs = [r for r in dict.fromkeys(t.metadata.get("run_id") for t in saver.list(cfg("t"))) if r]
    saver.delete_for_runs([runs[2]], reducers={"messages": MESSAGES_REDUCER})
    assert_all_same(saver, "t", seed=3)

    saver.copy_thread("t", "copy")
    assert_all_same(saver, "copy", seed=4)
    assert message_ids(assert_same(saver, cfg("copy"))) == message_ids(assert_same(saver, cfg("t")))

    saver.delete_thread("t")
    assert assert_same(saver, cfg("t")) == {"messages": {"writes": []}}
    run_turns(graph, "t", range(900, 905))
    again = assert_same(saver, cfg("t"))
    assert all(
        i.endswith(("-900", "-901", "-902", "-903", "-904")) or i.startswith("a-")
        for i in message_ids(again)
    )
    assert "h-41" not in message_ids(again)
    assert_all_same(saver, "t", seed=5)
    assert_all_same(saver, "copy", seed=6)
    assert saver.env.memo.hits > 0


# -- hand-built chains -----------------------------------------------------------------------------


def _id(n: int) -> str:
    """A canonical uuid checkpoint id; ids sort by ``n``."""
    return f"{n:08x}-0000-6000-8000-000000000000"


def _put(
    saver: DeltaLogSaver,
    cid: int,
    parent: int | None,
    version: str,
    value: Any = None,
) -> RunnableConfig:
    """Store checkpoint ``cid`` under ``parent`` with messages at ``version`` (a blob if ``value``)."""
    checkpoint = empty_checkpoint()
    checkpoint["id"] = _id(cid)
    checkpoint["channel_versions"] = {"messages": version}
    checkpoint["channel_values"] = {} if value is None else {"messages": value}
    config = cfg("t") if parent is None else at("t", _id(parent))
    return saver.put(config, checkpoint, {"source": "loop", "step": cid}, {"messages": version})


def _write(saver: DeltaLogSaver, cid: int, text: str) -> None:
    saver.put_writes(at("t", _id(cid)), [("messages", [HumanMessage(text, id=text)])], text)


def test_non_monotonic_ids_are_never_remembered(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """A child with a smaller id than its parent: a later write to that parent is seen.

    The parent holds the group's greatest key, so nothing but the refusal to
    remember histories across such links keeps the child's history exact.
    """
    saver = make_saver()
    _put(saver, 1, None, "1")
    _write(saver, 1, "root")
    _put(saver, 9, 1, "2")
    _write(saver, 9, "p")
    _put(saver, 5, 9, "3")
    _write(saver, 5, "c")
    _put(saver, 7, 5, "4")
    for _ in range(2):
        assert message_ids(assert_same(saver, at("t", _id(5)))) == ["root", "p"]
        assert message_ids(assert_same(saver, at("t", _id(7)))) == ["root", "p", "c"]
    _write(saver, 9, "p2")
    assert message_ids(assert_same(saver, at("t", _id(5)))) == ["root", "p", "p2"]
    assert message_ids(assert_same(saver, at("t", _id(7)))) == ["root", "p", "p2", "c"]
    # Nothing that walks through the non-monotonic link is remembered.
    _put(saver, 20, 7, "5")
    _write(saver, 7, "d")
    for _ in range(2):
        assert message_ids(assert_same(saver, at("t", _id(20)))) == ["root", "p", "p2", "c", "d"]
    assert saver.env.memo.hits == 0


def test_a_seed_stored_later_for_an_ancestor_version(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A blob stored (by a new greatest checkpoint) for a version an ancestor holds seeds it."""
    saver = make_saver()
    _put(saver, 1, None, "1")
    _write(saver, 1, "r")
    _put(saver, 2, 1, "2")
    _write(saver, 2, "a")
    _put(saver, 3, 2, "3")
    for _ in range(2):
        assert message_ids(assert_same(saver, at("t", _id(3)))) == ["r", "a"]
    assert saver.env.memo.hits > 0
    _put(saver, 4, 3, "2", _DeltaSnapshot([AIMessage("seeded", id="seed")]))
    history = assert_same(saver, at("t", _id(3)))
    assert message_ids(history) == ["seed", "a"]


def test_a_deletion_declared_history_safe_still_invalidates_the_memo(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """issue 16: the memo's exactness does not rest on the caller's ``history_safe`` flag:
    an op that declares it and deletes an ancestor's writes anyway leaves no stale history."""
    saver = make_saver()
    _put(saver, 1, None, "1")
    _write(saver, 1, "r")
    _put(saver, 2, 1, "2")
    _write(saver, 2, "a")
    _put(saver, 3, 2, "3")
    for _ in range(2):
        assert message_ids(assert_same(saver, at("t", _id(3)))) == ["r", "a"]
    assert saver.env.memo.hits > 0
    with saver.env.read() as r:
        ids = r.ids("t", "")
    assert ids is not None
    ancestor = keys.checkpoint_key(*ids, keys.encode_id(_id(2)))
    saver.env.write(lambda w: w.delete_prefix(saver.env.db("writes"), ancestor), history_safe=True)
    assert message_ids(assert_same(saver, at("t", _id(3)))) == ["r"]


def test_overwritten_and_late_inserted_checkpoints(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A checkpoint stored again, and a missing parent stored after its child was read."""
    saver = make_saver()
    _put(saver, 1, None, "1")
    _write(saver, 1, "r")
    _put(saver, 3, 1, "3")
    _write(saver, 3, "b")
    _put(saver, 4, 3, "4")
    # 5's parent (2) is missing: its history is empty, though writes wait under 2.
    _write(saver, 2, "early")
    _put(saver, 5, 2, "5")
    _put(saver, 6, 5, "6")
    for _ in range(2):
        assert message_ids(assert_same(saver, at("t", _id(4)))) == ["r", "b"]
        assert message_ids(assert_same(saver, at("t", _id(6)))) == []
    hits = saver.env.memo.hits
    assert hits > 0
    # Store 3 again with a version that has a stored value: it becomes the seed.
    _put(saver, 3, 1, "3b", _DeltaSnapshot([AIMessage("seeded", id="seed")]))
    assert message_ids(assert_same(saver, at("t", _id(4)))) == ["seed", "b"]
    # Store the missing parent 2 (below the newest key): 5 and 6 now walk through it.
    _put(saver, 2, 1, "2")
    assert message_ids(assert_same(saver, at("t", _id(6)))) == ["r", "early"]
    for _ in range(2):
        assert_same(saver, at("t", _id(6)))
    assert saver.env.memo.hits > hits


def test_a_missing_parent_stored_below_the_newest_key(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A parent stored after its child's history was remembered (a new key, not the greatest).

    Nothing else changes in between, so only the put's own report (its key is
    below a stored one) can tell the memo that the child's walk now goes on.
    """
    saver = make_saver()
    _put(saver, 1, None, "1")
    _write(saver, 1, "r")
    _write(saver, 2, "early")  # under 2, which is not stored yet
    _put(saver, 5, 2, "5")
    _put(saver, 6, 5, "6")
    for _ in range(2):
        assert message_ids(assert_same(saver, at("t", _id(6)))) == []
    hits = saver.env.memo.hits
    assert hits > 0
    _put(saver, 2, 1, "2")
    for _ in range(2):
        assert message_ids(assert_same(saver, at("t", _id(6)))) == ["r", "early"]
    assert saver.env.memo.hits > hits


def test_a_blob_committed_while_a_reader_walks_an_older_snapshot(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A reader of an older snapshot must not remember a history a newer blob changed.

    The blob is committed after the reader's snapshot but before the reader
    registers the blob key it found missing, so only the log of recent
    commits' new blobs can refuse the entry.
    """
    saver = make_saver()
    _put(saver, 1, None, "1")
    _write(saver, 1, "r")
    _put(saver, 2, 1, "2")
    _write(saver, 2, "a")
    _put(saver, 3, 2, "3")
    with saver.env.read() as r:
        ids = r.ids("t", "")
        assert ids is not None
        writer = threading.Thread(
            target=_put, args=(saver, 4, 3, "2", _DeltaSnapshot([AIMessage("seeded", id="seed")]))
        )
        writer.start()
        writer.join()
        old = r.history(*ids, _id(3), CHANNELS)["messages"]
        assert old.seed is None and [w.task_id for w in old.writes] == ["r", "a"]
    for _ in range(2):
        assert message_ids(assert_same(saver, at("t", _id(3)))) == ["seed", "a"]


def test_mutating_returned_values_changes_nothing(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """Callers get private objects: seed, writes and their messages, on hits and extensions."""
    saver = make_saver()
    graph = chat_graph(10).compile(checkpointer=saver)

    def vandalize(history: Mapping[str, Any]) -> None:
        entry = history["messages"]
        for _, _, value in entry["writes"]:
            for m in value:
                m.content = "MUTATED"
                m.additional_kwargs["mutated"] = True
            value.append(HumanMessage("extra", id="extra"))
        entry["writes"].append(("x", "messages", [HumanMessage("x", id="x")]))
        if "seed" in entry:
            entry["seed"].value[0].content = "MUTATED"
            entry["seed"].value.append(HumanMessage("extra", id="extra"))

    for turn in range(14):
        run_turns(graph, "t", range(turn, turn + 1))
        for _ in range(2):  # an extension, then an exact hit
            vandalize(saver.get_delta_channel_history(config=cfg("t"), channels=CHANNELS))
            clean = assert_same(saver, cfg("t"))
            assert "extra" not in message_ids(clean)
    assert saver.history_copies.hits > 10
    values = graph.get_state(cfg("t")).values["messages"]
    assert all(m.content != "MUTATED" and "mutated" not in m.additional_kwargs for m in values)
    assert_all_same(saver, "t")


# -- other writers ------------------------------------------------------------------------------


def _other_process_writes(path: str, thread_id: str, checkpoint_id: str) -> None:
    """In a spawned process: add a write under an old checkpoint of the store at ``path``."""
    saver = DeltaLogSaver.from_path(path)
    try:
        saver.put_writes(
            at(thread_id, checkpoint_id),
            [("messages", [HumanMessage("from elsewhere", id="elsewhere")])],
            task_id="other-process",
        )
    finally:
        saver.close()


def test_another_process_writing_between_reads(tmp_path: Path) -> None:
    """A write committed by another process is seen by the next read, and after our next write."""
    path = tmp_path / "shared"
    saver = DeltaLogSaver.from_path(path)
    try:
        graph = chat_graph(100).compile(checkpointer=saver)
        run_turns(graph, "t", range(10))
        before = assert_same(saver, cfg("t"))
        assert_all_same(saver, "t")
        old = refs(saver, "t")[-4]["configurable"]["checkpoint_id"]
        ctx = multiprocessing.get_context("spawn")
        proc = ctx.Process(target=_other_process_writes, args=(str(path), "t", old))
        proc.start()
        proc.join(120)
        assert proc.exitcode == 0
        after = assert_same(saver, cfg("t"))
        assert [i for i in message_ids(after) if i != "elsewhere"] == message_ids(before)
        assert message_ids(after).count("elsewhere") == 1
        assert_all_same(saver, "t", seed=1)
        hits = saver.env.memo.hits
        run_turns(graph, "t", range(10, 14))  # our next commit notices the other process
        assert "elsewhere" in message_ids(assert_same(saver, cfg("t")))
        assert_all_same(saver, "t", seed=2)
        assert saver.env.memo.hits > hits
    finally:
        saver.close()


def test_concurrent_writers_and_readers(tmp_path: Path) -> None:
    """Threads invoke, add writes to old ancestors and read at once; a tiny memo evicts often.

    Inside one read transaction the memo path and the cold walk must agree,
    whatever commits around it.
    """
    saver = DeltaLogSaver(Environment(tmp_path / "s", memo_entries=3))
    graph = chat_graph(7).compile(checkpointer=saver)
    threads = [f"t{k}" for k in range(3)]
    errors: list[BaseException] = []
    done = threading.Event()

    def guard(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:
                errors.append(exc)

        return run

    def writer(thread_id: str) -> None:
        run_turns(graph, thread_id, range(25))

    def late_writer() -> None:
        rng = random.Random(7)
        k = 0
        while not done.is_set():
            configs = refs(saver, rng.choice(threads))
            if len(configs) > 3:
                target = rng.choice(configs[:-1])
                text = f"late-{k}"
                saver.put_writes(target, [("messages", [HumanMessage(text, id=text)])], text)
                k += 1

    def reader() -> None:
        rng = random.Random(8)
        while not done.is_set():
            thread_id = rng.choice(threads)
            with saver.env.read() as r:
                ids = r.ids(thread_id, "")
                if ids is None:
                    continue
                warm = r.history(*ids, None, CHANNELS)
                cold = r.delta_history(*ids, None, CHANNELS)
                assert {c: (h.seed, list(h.writes)) for c, h in warm.items()} == cold

    writers = [threading.Thread(target=guard(functools.partial(writer, t))) for t in threads]
    others = [threading.Thread(target=guard(late_writer)), threading.Thread(target=guard(reader))]
    for th in writers + others:
        th.start()
    for th in writers:
        th.join()
    done.set()
    for th in others:
        th.join()
    try:
        assert not errors, errors
        for thread_id in threads:
            assert_all_same(saver, thread_id)
        assert saver.env.memo.hits > 0
    finally:
        saver.close()
