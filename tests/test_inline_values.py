"""Format 3: small scalar channel values live inside the checkpoint record, not in blobs."""

from __future__ import annotations

import enum
import operator
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from deltalog.engine import DeltaLogSaver, keys
from deltalog.engine import envelope as envelope_module
from deltalog.engine.envelope import INLINE_MAX
from hypothesis import example, given
from hypothesis import strategies as st
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from tests.checkpoints import at, checkpoint_id, new_checkpoint, put_values


class Colour(enum.IntEnum):
    RED = 1


def blob_channels(saver: DeltaLogSaver) -> set[str]:
    """Names of the channels that have at least one blob in the store."""
    with saver.env.read() as r:
        return {
            r.name_of(keys.KIND_CHANNEL, keys.decode_blob_key(k)[2])
            for k, _ in r.txn.cursor(db=r.dbs.blobs)
        }


def put_child(
    saver: BaseCheckpointSaver[Any],
    parent: Any,
    values: dict[str, Any],
    versions: dict[str, Any],
    new: dict[str, Any],
) -> Any:
    """A child checkpoint of ``parent`` with the given values and versions."""
    checkpoint, _ = new_checkpoint(saver, {})
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = dict(versions)
    return saver.put(parent, checkpoint, {"source": "loop", "step": 1}, new)


def next_version(saver: BaseCheckpointSaver[Any], current: object) -> Any:
    """The version after ``current``; both savers here number channels with strings."""
    assert isinstance(current, str), current
    return saver.get_next_version(current, None)


SMALL: dict[str, Any] = {
    "none": None,
    "flag": True,
    "count": 7,
    "ratio": 0.5,
    "name": "x" * 100,
}


def test_small_scalars_are_held_in_the_record_and_read_back(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    saver = make_saver()
    big = "y" * (INLINE_MAX + 1)
    values = {**SMALL, "big": big, "items": [1, 2], "colour": Colour.RED}
    config = put_values(saver, "t", values)
    assert blob_channels(saver) == {"big", "items", "colour"}
    tup = saver.get_tuple(config)
    assert tup is not None
    assert tup.checkpoint["channel_values"] == values
    assert type(tup.checkpoint["channel_values"]["colour"]) is Colour


def test_an_unchanged_value_is_read_from_each_checkpoint_that_has_it(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """Against InMemorySaver: a value kept across checkpoints, changed, dropped."""
    results = []
    for saver in (make_saver(), InMemorySaver()):
        first = put_values(saver, "t", {"a": "one", "b": 1})
        v1 = saver.get_tuple(first).checkpoint["channel_versions"]  # type: ignore[union-attr]
        a2 = next_version(saver, v1["a"])
        second = put_child(saver, first, {"a": "two", "b": 1}, {**v1, "a": a2}, {"a": a2})
        third = put_child(saver, second, {"b": 1}, {"b": v1["b"]}, {})
        results.append(
            [saver.get_tuple(c).checkpoint["channel_values"] for c in (first, second, third)]  # type: ignore[union-attr]
        )
    assert results[0] == results[1] == [{"a": "one", "b": 1}, {"a": "two", "b": 1}, {"b": 1}]


def test_a_held_value_seeds_a_delta_history_like_a_blob(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A channel that held a plain scalar and later replays writes (a thread whose
    graph moved the channel to DeltaChannel) finds that value as its seed."""
    results = []
    for saver in (make_saver(), InMemorySaver()):
        first = put_values(saver, "t", {"text": "hello"})
        saver.put_writes(first, [("text", " world")], "task-1")
        versions = saver.get_tuple(first).checkpoint["channel_versions"]  # type: ignore[union-attr]
        bumped = next_version(saver, versions["text"])
        second = put_child(saver, first, {}, {"text": bumped}, {"text": bumped})
        history = saver.get_delta_channel_history(config=second, channels=["text"])["text"]
        results.append(
            (
                history.get("seed"),
                [w[1:] for w in history["writes"]],
            )
        )
    assert results[0] == results[1]
    assert results[0][0] == "hello"


def test_prune_counts_a_held_value_as_a_seed(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """Treating a channel as a delta channel (a reducer map) at prune time: the
    checkpoint that holds its value inline is seeded, so the chain stops there."""
    saver = make_saver()
    first = put_values(saver, "t", {"text": "hello"})
    config = first
    for i in range(3):
        saver.put_writes(config, [("text", f" {i}")], f"task-{i}")
        versions = saver.get_tuple(config).checkpoint["channel_versions"]  # type: ignore[union-attr]
        bumped = next_version(saver, versions["text"])
        config = put_child(saver, config, {}, {"text": bumped}, {"text": bumped})
    with saver.env.read() as r:
        t, n = r.ids("t", "")  # type: ignore[misc]
        nodes, _, _ = r.group(t, n, frozenset({"text"}))
    assert nodes[checkpoint_id(first)].seeded == frozenset({"text"})
    assert all(not node.seeded for cid, node in nodes.items() if cid != checkpoint_id(first))


def test_export_carries_held_values_as_blobs_once(
    make_saver: Callable[..., DeltaLogSaver], tmp_path: Path
) -> None:
    source = make_saver()
    first = put_values(source, "t", {"a": "one", "b": [1]})
    v1 = source.get_tuple(first).checkpoint["channel_versions"]  # type: ignore[union-attr]
    second = put_child(source, first, {"a": "one", "b": [1]}, v1, {})
    records = list(source.export_records(["t"]))
    blobs = [(r["channel"], r["version"]) for r in records if r["kind"] == "blob"]
    assert sorted(blobs) == sorted([("a", v1["a"]), ("b", v1["b"])])
    target = make_saver()
    target.import_records(records)
    for config in (first, second):
        assert target.get_tuple(config).checkpoint == source.get_tuple(config).checkpoint  # type: ignore[union-attr]


def test_records_without_held_values_still_read(
    make_saver: Callable[..., DeltaLogSaver], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stores written before format 3 keep scalars in blobs; both kinds mix in a thread."""
    saver = make_saver()
    monkeypatch.setattr(envelope_module, "INLINE_MAX", -1)
    first = put_values(saver, "t", {"a": "one", "b": 2})
    assert blob_channels(saver) == {"a", "b"}
    monkeypatch.undo()
    v1 = saver.get_tuple(first).checkpoint["channel_versions"]  # type: ignore[union-attr]
    a2 = next_version(saver, v1["a"])
    second = put_child(saver, first, {"a": "two", "b": 2}, {**v1, "a": a2}, {"a": a2})
    assert blob_channels(saver) == {"a", "b"}  # "two" is held by the record
    assert saver.get_tuple(first).checkpoint["channel_values"] == {"a": "one", "b": 2}  # type: ignore[union-attr]
    assert saver.get_tuple(second).checkpoint["channel_values"] == {"a": "two", "b": 2}  # type: ignore[union-attr]
    assert saver.get_tuple(at("t", checkpoint_id(second))) is not None


# -- real graphs whose schema changes between runs (LangGraph keeps every old version) --


class WithStatus(TypedDict, total=False):
    status: str
    note: str


class WithoutStatus(TypedDict, total=False):
    note: str


def add(total: int, updates: list[int]) -> int:
    return total + sum(updates)


class PlainCount(TypedDict):
    count: Annotated[int, operator.add]
    note: str


class DeltaCount(TypedDict):
    count: Annotated[int, DeltaChannel(add)]
    note: str


def one_node(schema: Any, update: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    builder: StateGraph[Any] = StateGraph(schema)
    # LangGraph types a node by one state class; these lambdas serve several.
    node: Any = update
    builder.add_node("n", node)
    builder.add_edge(START, "n")
    builder.add_edge("n", END)
    return builder


def observed(saver: BaseCheckpointSaver[Any], graph: Any, channel: str) -> Any:
    """Every checkpoint's values, the state, and the delta history of ``channel``."""
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    tuples = list(saver.list(config))
    history = saver.get_delta_channel_history(config=tuples[0].config, channels=[channel])
    return (
        [t.checkpoint["channel_values"] for t in tuples],
        graph.get_state(config).values,
        {c: (h.get("seed"), [w[1:] for w in h["writes"]]) for c, h in history.items()},
    )


def both(make_saver: Callable[..., DeltaLogSaver], steps: Callable[[Any], Any]) -> None:
    """``steps`` gives the same observations on deltalog as on InMemorySaver."""
    assert steps(make_saver()) == steps(InMemorySaver())


def test_a_channel_the_graph_dropped_keeps_its_value_for_a_rollback(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A deploy without ``status``, then a rollback: LangGraph keeps the dropped
    channel's version in every checkpoint, and the value must stay readable."""
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}

    def steps(saver: Any) -> Any:
        one_node(WithStatus, lambda s: {"status": "approved", "note": "a"}).compile(
            checkpointer=saver
        ).invoke({"note": "x"}, config)
        for note in ("y", "z"):
            one_node(WithoutStatus, lambda s: {"note": s["note"] + "b"}).compile(
                checkpointer=saver
            ).invoke({"note": note}, config)
        back = one_node(WithStatus, lambda s: {"note": s["note"] + "c"}).compile(checkpointer=saver)
        return observed(saver, back, "status")

    both(make_saver, steps)
    saver = make_saver()
    assert steps(saver)[1]["status"] == "approved"
    saver.prune(["t"])  # the checkpoints that first held the value go
    back = one_node(WithStatus, lambda s: {"note": s["note"]}).compile(checkpointer=saver)
    assert back.get_state(config).values["status"] == "approved"


@pytest.mark.parametrize(
    ("first", "then"),
    [(PlainCount, DeltaCount), (DeltaCount, PlainCount)],
    ids=["plain-to-delta", "delta-to-plain"],
)
def test_a_channel_moved_between_plain_and_delta_reads_like_in_memory(
    first: Any, then: Any, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """``count`` written under one schema, then read and kept under the other: after
    a move to DeltaChannel its last plain value is still the value of its version
    and the seed of its history; after a move back, no value appears that was not
    stored."""

    def steps(saver: Any) -> Any:
        config: RunnableConfig = {"configurable": {"thread_id": "t"}}
        one_node(first, lambda s: {"count": 1, "note": "a"}).compile(checkpointer=saver).invoke(
            {"count": 1, "note": "x"}, config
        )
        graph = one_node(then, lambda s: {"note": s["note"] + "b"}).compile(checkpointer=saver)
        graph.invoke({"note": "y"}, config)
        return observed(saver, graph, "count")

    both(make_saver, steps)


def test_runs_of_a_moved_channel_delete_and_prune(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """Deleting the run that wrote ``count`` as a plain channel keeps the state: the
    later checkpoints hold its value, so they seed the delta chain themselves."""
    saver = make_saver()
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    one_node(PlainCount, lambda s: {"count": 1, "note": "a"}).compile(checkpointer=saver).invoke(
        {"count": 1, "note": "x"}, {"configurable": {"thread_id": "t", "run_id": first}}
    )
    graph = one_node(DeltaCount, lambda s: {"note": s["note"] + "b"}).compile(checkpointer=saver)
    graph.invoke({"note": "y"}, {"configurable": {"thread_id": "t", "run_id": second}})
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    before = graph.get_state(config).values
    assert saver.delete_for_runs([first]).checkpoints > 0
    assert graph.get_state(config).values == before
    saver.prune(["t"])
    assert graph.get_state(config).values == before
    assert saver.verify().ok


class Steps(TypedDict, total=False):
    status: str
    n: int
    note: str


def ask(state: Steps) -> Steps:
    return {"note": interrupt("approve?"), "status": "asked"}


def three_steps() -> StateGraph[Any]:
    builder: StateGraph[Any] = StateGraph(Steps)
    builder.add_node("a", lambda s: {"status": "a-done", "n": s.get("n", 0) + 1})
    builder.add_node("ask", ask)
    builder.add_node("b", lambda s: {"status": "b-done"})
    builder.add_edge(START, "a")
    builder.add_edge("a", "ask")
    builder.add_edge("ask", "b")
    builder.add_edge("b", END)
    return builder


def test_copy_forks_hold_the_values_of_the_copied_checkpoint(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """``update_state(..., as_node="__copy__")`` puts the copy with the copied
    checkpoint's *parent* as parent and no new versions: the values the copied
    checkpoint changed itself (and its pending triggers) must come along."""

    def steps(saver: Any) -> Any:
        config: RunnableConfig = {"configurable": {"thread_id": "t"}}
        app = three_steps().compile(checkpointer=saver)
        app.invoke({"status": "start", "n": 0}, config)
        interrupted = app.get_state(config)
        copies = []
        for snap in list(app.get_state_history(config)):
            copy = app.update_state(snap.config, None, as_node="__copy__")
            state = app.get_state(copy)
            copies.append((state.values, state.next))
        copy = app.update_state(interrupted.config, None, as_node="__copy__")
        resumed = app.invoke(Command(resume="yes"), copy)
        return copies, resumed, [t.checkpoint["channel_values"] for t in saver.list(config)]

    both(make_saver, steps)
    copies, resumed, _ = steps(make_saver())
    assert copies[0] == ({"status": "a-done", "n": 1}, ("ask",))
    assert resumed == {"status": "b-done", "n": 1, "note": "yes"}


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=600)
)
_values = st.recursive(
    _scalars | st.binary(max_size=40) | st.sampled_from([Colour.RED, uuid.UUID(int=7)]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


@given(
    channel=st.sampled_from(["count", envelope_module.INPUT_CHANNEL]),
    value=_values,
)
# A run input that is a string of more than INLINE_MAX bytes: a put keeps it as a blob.
@example(channel=envelope_module.INPUT_CHANNEL, value="x" * 700)
def test_the_inline_rule_from_serialized_bytes_is_the_rule_from_values(
    channel: str, value: Any
) -> None:
    """An import decides what a record holds from the serialized value alone
    (held_inline_typed); it must decide as a put decides from the value
    (held_inline), for scalars, long strings, containers, bytes and extension
    types alike."""
    typed = JsonPlusSerializer().dumps_typed(value)
    assert envelope_module.held_inline_typed(channel, typed) == envelope_module.held_inline(
        channel, value, typed
    )
