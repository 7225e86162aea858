"""A parent chain never loops: cycles are refused on put, reported by verify and bounded on read (R11, issue 15.3)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ormsgpack
import pytest
from deltalog.engine import CorruptRecordError, DeltaLogSaver, keys
from deltalog.engine.core import Node, parent_cycles, plan_keep
from deltalog.engine.errors import ParentCycleError
from deltalog.engine.txn_base import DB_NAMES
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph.state import CompiledStateGraph

from tests.checkpoints import at, new_checkpoint, put_values
from tests.graphs import cfg, chat_graph, human


def dump(saver: DeltaLogSaver) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every key and value of every database of the store."""
    return {db: list(saver.env.iter_db(db)) for db in DB_NAMES}


def chat(saver: DeltaLogSaver, turns: int, sf: int = 100) -> CompiledStateGraph[Any, Any, Any]:
    graph = chat_graph(sf).compile(checkpointer=saver)
    for turn in range(turns):
        graph.invoke({"messages": [human(turn)]}, cfg("t"))
    return graph


def ids_oldest_first(saver: DeltaLogSaver) -> list[str]:
    return [c.config["configurable"]["checkpoint_id"] for c in saver.list(cfg("t"))][::-1]


def set_parent(saver: DeltaLogSaver, cid: str, parent: str) -> None:
    """Rewrite one checkpoint record's parent through the raw write path (as damage would)."""
    with saver.env.read() as r:
        ids = r.ids("t", "")
    assert ids is not None
    t, n = ids
    key = keys.checkpoint_key(t, n, keys.encode_id(cid))
    (raw,) = [v for k, v in saver.env.iter_db("checkpoints") if k == key]
    rec = saver.env.codec.decode(raw, "test", key=key)
    rec[0] = keys.encode_id(parent)
    handle = saver.env.db("checkpoints")
    saver.env.write(lambda w: w.put_raw(handle, key, saver.env.codec.encode(rec, key=key)))


# -- refused on write ----------------------------------------------------------------------------


def test_self_parent_put_is_refused_and_nothing_written(saver: DeltaLogSaver) -> None:
    """Re-putting a checkpoint with the config its first put returned (parent == itself) is refused."""
    checkpoint, versions = new_checkpoint(saver, {"messages": ["hi"], "n": 1})
    first = saver.put(cfg("t"), checkpoint, {"step": 0}, versions)
    before = dump(saver)
    with pytest.raises(ParentCycleError, match=checkpoint["id"]) as caught:
        saver.put(first, checkpoint, {"step": 0}, versions)
    assert "thread 't'" in str(caught.value)
    # A fresh id whose config names that same id as its parent.
    fresh, fresh_versions = new_checkpoint(saver, {"n": 2})
    with pytest.raises(ParentCycleError):
        saver.put(at("t", fresh["id"]), fresh, {}, fresh_versions)
    assert dump(saver) == before
    history = saver.get_delta_channel_history(config=first, channels=["messages"])
    assert history == {"messages": {"writes": []}}
    assert saver.verify().ok


def test_rewrite_under_a_descendant_is_refused(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """Re-putting a stored checkpoint under its own child or grandchild is refused; a plain re-put is not."""
    saver = make_saver()
    configs: list[RunnableConfig] = []
    parent: RunnableConfig | None = None
    for i in range(4):
        parent = put_values(saver, "t", {"n": i}, parent=parent)
        configs.append(parent)
    root = saver.get_tuple(configs[0])
    assert root is not None
    before = dump(saver)
    for descendant in configs[1:]:
        with pytest.raises(ParentCycleError, match="own ancestor"):
            saver.put(descendant, root.checkpoint, root.metadata, {})
    assert dump(saver) == before
    # Re-putting it where it was (no parent) is fine, and so is a new branch.
    saver.put(cfg("t"), root.checkpoint, root.metadata, {})
    put_values(saver, "t", {"n": 9}, parent=configs[1])
    assert saver.verify().ok


def test_parent_put_after_its_child_cannot_close_a_loop(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A checkpoint put before its parent, then the parent put under that child: refused."""
    saver = make_saver()
    ns = {"thread_id": "t", "checkpoint_ns": ""}
    child = empty_checkpoint()
    child["id"] = "b"
    saver.put({"configurable": {**ns, "checkpoint_id": "a"}}, child, {}, {})  # "a" not stored yet
    parent = empty_checkpoint()
    parent["id"] = "a"
    with pytest.raises(ParentCycleError, match="a -> b -> a"):
        saver.put({"configurable": {**ns, "checkpoint_id": "b"}}, parent, {}, {})
    saver.put({"configurable": ns}, parent, {}, {})
    assert saver.verify().ok


def put_ids(saver: DeltaLogSaver, cid: str, parent: str | None) -> None:
    """Store an empty checkpoint with a hand-picked id under a hand-picked parent."""
    checkpoint = empty_checkpoint()
    checkpoint["id"] = cid
    configurable: dict[str, Any] = {"thread_id": "t", "checkpoint_ns": ""}
    if parent is not None:
        configurable["checkpoint_id"] = parent
    saver.put({"configurable": configurable}, checkpoint, {}, {})


def test_two_puts_naming_each_other_are_refused(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """ "a" put under a "b" that does not exist yet, then "b" under "a" (an ordinary, upward put): refused."""
    saver = make_saver()
    put_ids(saver, "a", "b")
    before = dump(saver)
    with pytest.raises(ParentCycleError, match="b -> a -> b"):
        put_ids(saver, "b", "a")
    assert dump(saver) == before


def test_long_loop_through_an_early_child_is_refused(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """issue 15.3: a loop longer than the quick check, closed by an ordinary (upward) put
    through an earlier child that named the id as its parent before it existed, is refused
    on write and nothing is written (the namespace's forward-link mark makes the put walk
    the whole chain)."""
    saver = make_saver()
    put_ids(saver, "a", "z")  # "z" does not exist yet: a link whose parent key is above
    for parent, cid in zip("abcde", "bcdef", strict=True):
        put_ids(saver, cid, parent)
    before = dump(saver)
    with pytest.raises(ParentCycleError, match="z -> f -> e -> d -> c -> b -> a -> z"):
        put_ids(saver, "z", "f")
    assert dump(saver) == before
    put_ids(saver, "g", "f")  # an ordinary put that closes nothing still goes in
    assert saver.get_tuple(at("t", "g")) is not None
    assert [p.kind for p in saver.verify().problems] == ["dangling_parent"]  # "z", still missing


def test_the_format_5_upgrade_marks_forward_links_so_the_long_loop_is_refused(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """R10, issue 15.3: a store without forward-link marks (as format 4 wrote it) gets them
    on the upgrade, and the long loop is refused there too."""
    saver = make_saver()
    path = saver.env.path
    put_ids(saver, "a", "z")
    for parent, cid in zip("abcde", "bcdef", strict=True):
        put_ids(saver, cid, parent)
    meta = saver.env.db("meta")
    marks = [k for k, _ in saver.env.iter_db("meta") if k.startswith(keys.FWD)]
    assert len(marks) == 1

    def as_format_4(w: Any) -> None:
        for k in marks:
            w.txn.delete(k, db=meta)
        w.txn.put(b"format_version", ormsgpack.packb(4), db=meta)

    saver.env.write(as_format_4)
    saver.close()
    with DeltaLogSaver.from_path(path) as upgraded:
        assert [k for k, _ in upgraded.env.iter_db("meta") if k.startswith(keys.FWD)] == marks
        with pytest.raises(ParentCycleError):
            put_ids(upgraded, "z", "f")


# -- detected by verify, bounded on read -----------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shape", ["self", "loop"])
def test_cyclic_record_reads_fail_clearly_and_verify_reports_it(
    shape: str, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """A loop written through the raw path (damage, a foreign writer): every walk raises CorruptRecordError naming the thread; verify reports parent_cycle."""
    saver = make_saver(pack_turns=False)  # plain records: the layout read here
    graph = chat(saver, 3)
    chain = ids_oldest_first(saver)
    latest = chain[-1]
    graph.get_state(cfg("t"))  # the history memo holds the latest history now
    if shape == "self":
        set_parent(saver, latest, latest)
    else:
        set_parent(saver, chain[0], latest)  # the root's parent is the newest checkpoint
    for _ in range(2):  # a failed walk leaves nothing remembered
        with pytest.raises(CorruptRecordError, match=r"thread 't'.*twice"):
            saver.get_delta_channel_history(config=at("t", latest), channels=["messages"])
    with pytest.raises(CorruptRecordError, match="thread 't'"):
        graph.get_state(cfg("t"))
    with pytest.raises(CorruptRecordError, match="thread 't'"):
        saver.prune(["t"], reducers=graph)
    with pytest.raises(CorruptRecordError, match="thread 't'"):
        saver.prune(["t"], dry_run=True)
    report = saver.verify()
    assert not report.ok
    cycles = [p for p in report.problems if p.kind == "parent_cycle"]
    assert len(cycles) == 1 and cycles[0].thread_id == "t", report.problems
    assert latest in cycles[0].detail
    # The listing (no ancestor walk) and other threads still work.
    assert len(list(saver.list(cfg("t")))) == len(chain)
    graph.invoke({"messages": [human(0)]}, cfg("other"))
    assert len(graph.get_state(cfg("other")).values["messages"]) == 2


def test_parent_cycles_and_plans_on_plain_data() -> None:
    """The pure cycle finder names each loop once; planning over a loop raises instead of spinning."""
    assert parent_cycles({"a": None, "b": "a", "c": "x"}) == []
    assert parent_cycles({"a": "a"}) == [["a"]]
    assert parent_cycles({"a": "b", "b": "c", "c": "b", "d": "a"}) == [["b", "c"]]
    assert sorted(parent_cycles({"a": "b", "b": "a", "c": "d", "d": "c"})) == [
        ["a", "b"],
        ["c", "d"],
    ]
    nodes = {
        "a": Node("a", "b", frozenset(), frozenset()),
        "b": Node("b", "a", frozenset(), frozenset()),
        "c": Node("c", "a", frozenset(), frozenset()),
    }
    with pytest.raises(CorruptRecordError, match="loops"):
        plan_keep(nodes, {"c"})
