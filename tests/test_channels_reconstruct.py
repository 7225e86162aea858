"""The Reconstructor rebuilds exactly ``graph.get_state(config).values`` from any saver."""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest
from deltalog.channels import (
    NULL_TASK_ID,
    DeltaMessages,
    Reconstructor,
    append,
    delta,
    merge,
    messages,
    total,
    union,
)
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import NULL_TASK_ID as LANGGRAPH_NULL_TASK_ID
from langgraph.checkpoint.base import BaseCheckpointSaver, DeltaChannelHistory
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, Durability, interrupt
from typing_extensions import TypedDict

from tests.graphs import ASYNC_INTERRUPT
from tests.test_channels_graphs import (
    SAVERS,
    aopen_saver,
    arun_program,
    build,
    open_saver,
    recent,
    run_program,
    uniq,
)

REDUCERS: dict[str, Any] = {
    "messages": messages,
    "items": append,
    "uniq": uniq,
    "settings": merge,
    "tags": union,
    "count": total,
    "recent": recent,
}


def all_configs(saver: BaseCheckpointSaver[Any], thread: str) -> list[RunnableConfig]:
    """Every checkpoint of the thread (forks included), plus the thread's 'latest' config."""
    cfg: RunnableConfig = {"configurable": {"thread_id": thread}}
    return [t.config for t in saver.list(cfg)] + [cfg]


@pytest.mark.parametrize("durability", ["sync", "exit"])
@pytest.mark.parametrize("every", [1, 2, 1000])
@pytest.mark.parametrize("kind", SAVERS)
def test_reconstruct_equals_get_state_at_every_checkpoint(
    kind: str, every: int, durability: Durability, tmp_path: Path
) -> None:
    """R7: graph-mode and mapping-mode reconstruction equal get_state(...).values everywhere."""
    with open_saver(kind, tmp_path) as saver:
        graph = build(every).compile(checkpointer=saver)
        run_program(graph, "t", durability)
        from_graph, from_map = Reconstructor(saver, graph), Reconstructor(saver, REDUCERS)
        configs = all_configs(saver, "t")
        assert len(configs) > 5
        for config in configs:
            expected = graph.get_state(config).values
            assert from_graph.reconstruct(config) == expected
            assert from_map.reconstruct(config) == expected


@ASYNC_INTERRUPT
@pytest.mark.parametrize("kind", SAVERS)
async def test_areconstruct_equals_aget_state(kind: str, tmp_path: Path) -> None:
    """The async twin reads through aget_tuple/aget_delta_channel_history with the same result."""
    async with aopen_saver(kind, tmp_path) as saver:
        graph = build(2).compile(checkpointer=saver)
        await arun_program(graph, "t")
        rec = Reconstructor(saver, graph)
        cfg: RunnableConfig = {"configurable": {"thread_id": "t"}}
        configs = [t.config async for t in saver.alist(cfg)] + [cfg]
        for config in configs:
            assert await rec.areconstruct(config) == (await graph.aget_state(config)).values


class CountingSaver(InMemorySaver):
    """InMemorySaver that records which channels each history call asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[list[str]] = []

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        self.asked.append(list(channels))
        return super().get_delta_channel_history(config=config, channels=channels)


def test_selected_channels_read_only_their_history() -> None:
    """reconstruct(channels=[...]) returns those channels and asks the saver only for them."""
    saver = CountingSaver()
    graph = build(1000).compile(checkpointer=saver)
    run_program(graph, "t")
    cfg: RunnableConfig = {"configurable": {"thread_id": "t"}}
    expected = graph.get_state(cfg).values
    saver.asked.clear()
    got = Reconstructor(saver, graph).reconstruct(cfg, channels=["messages", "turn"])
    assert got == {"messages": expected["messages"], "turn": expected["turn"]}
    assert saver.asked == [["messages"]]


def test_bad_sources_and_channels_raise() -> None:
    """R9: a wrong source, an unknown channel or a missing reducer is a clear error."""
    saver = InMemorySaver()
    graph = build(1).compile(checkpointer=saver)
    run_program(graph, "t")
    cfg: RunnableConfig = {"configurable": {"thread_id": "t"}}
    with pytest.raises(TypeError, match="compiled graph or a mapping"):
        Reconstructor(saver, [append])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="BaseCheckpointSaver"):
        Reconstructor({}, graph)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reducer callable"):
        Reconstructor(saver, {"items": "append"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"\['nope'\] are not in the graph's state"):
        Reconstructor(saver, graph).reconstruct(cfg, channels=["nope"])
    without_items = {k: v for k, v in REDUCERS.items() if k != "items"}
    with pytest.raises(ValueError, match="'items' is stored as a DeltaChannel snapshot"):
        Reconstructor(saver, without_items).reconstruct(cfg)


def test_missing_thread_and_int_thread_id() -> None:
    """No checkpoint gives {} (as get_state); an int thread_id is read as its str, as get_state does."""
    saver = InMemorySaver()
    graph = build(2).compile(checkpointer=saver)
    rec = Reconstructor(saver, graph)
    assert rec.reconstruct({"configurable": {"thread_id": "none"}}) == {}
    graph.invoke({"items": ["x"], "turn": 5}, {"configurable": {"thread_id": "7"}})
    by_int: RunnableConfig = {"configurable": {"thread_id": 7}}
    assert rec.reconstruct(by_int) == graph.get_state(by_int).values
    assert rec.reconstruct(by_int)["items"][0] == "x"


def test_null_task_id_constant_matches_langgraph() -> None:
    """Our NULL_TASK_ID is LangGraph's, so Command(update=...) writes are applied."""
    assert NULL_TASK_ID == LANGGRAPH_NULL_TASK_ID


# --- migrations between channel kinds -------------------------------------------


class PlainState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    n: Annotated[int, operator.add]


class DeltaState(TypedDict):
    messages: DeltaMessages
    n: Annotated[int, delta(total, snapshot_every=3)]


def _graph(
    schema: type[Any], saver: BaseCheckpointSaver[Any]
) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder: StateGraph[Any] = StateGraph(schema)
    # Explicit ids: add_messages gives id-less messages a random id on every
    # replay, so a BinOp graph reading a delta-era thread would never be stable.
    builder.add_node(
        "say",
        lambda s: {
            "messages": [AIMessage(f"turn {len(s['messages'])}", id=f"s{len(s['messages'])}")],
            "n": 1,
        },
    )
    builder.add_edge(START, "say")
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("kind", SAVERS)
def test_thread_migrated_between_binop_and_delta(kind: str, tmp_path: Path) -> None:
    """A plain stored value seeds the replay; a BinOp graph reads a delta thread by replay."""
    with open_saver(kind, tmp_path) as saver:
        cfg: RunnableConfig = {"configurable": {"thread_id": "m"}}
        plain, deltas = _graph(PlainState, saver), _graph(DeltaState, saver)
        plain.invoke({"messages": [HumanMessage("a", id="a")], "n": 0}, cfg)
        for i in range(4):
            deltas.invoke({"messages": [HumanMessage(f"d{i}", id=f"d{i}")]}, cfg)
        plain.invoke({"messages": [HumanMessage("b", id="b")]}, cfg)
        for graph in (plain, deltas):
            rec = Reconstructor(saver, graph)
            for config in all_configs(saver, "m"):
                assert rec.reconstruct(config) == graph.get_state(config).values
        assert len(deltas.get_state(cfg).values["messages"]) == 12


# --- the documented difference: finished tasks of an interrupted superstep -------


class PairState(TypedDict):
    items: Annotated[list[str], delta(append)]


def test_pending_task_writes_are_not_state() -> None:
    """As get_state with a checkpoint_id: writes of a task that finished beside an interrupt are not applied."""
    saver = InMemorySaver()
    builder: StateGraph[Any] = StateGraph(PairState)
    builder.add_node("fast", lambda s: {"items": ["fast"]})
    builder.add_node("asks", lambda s: {"items": [interrupt("?")]})
    builder.add_edge(START, "fast")
    builder.add_edge(START, "asks")
    graph = builder.compile(checkpointer=saver)
    cfg: RunnableConfig = {"configurable": {"thread_id": "p"}}
    graph.invoke({"items": ["in"]}, cfg)
    latest = graph.get_state(cfg)
    assert latest.values["items"] == ["in", "fast"]  # live view of the unfinished step
    rec = Reconstructor(saver, graph)
    assert rec.reconstruct(cfg) == graph.get_state(latest.config).values == {"items": ["in"]}
    graph.invoke(Command(resume="yes"), cfg)
    assert rec.reconstruct(cfg) == graph.get_state(cfg).values == {"items": ["in", "yes", "fast"]}


def test_delta_channels_property_lists_specs() -> None:
    """Reconstructor.delta_channels exposes the specs it replays (reducer and cadence)."""
    graph = build(2).compile(checkpointer=InMemorySaver())
    specs = Reconstructor(InMemorySaver(), graph).delta_channels
    assert set(specs) == set(REDUCERS)
    assert all(spec.snapshot_frequency == 2 for spec in specs.values())
    assert specs["items"].reducer is append
    mapped = Reconstructor(InMemorySaver(), {"tags": union}).delta_channels
    assert mapped["tags"].typ is set
