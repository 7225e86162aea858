"""Real LangGraph programs shared by the differential, maintenance and CLI tests.

Each program drives a compiled graph through a sequence of operations and
returns a transcript of everything a user can observe (state values, next
nodes, interrupts, the whole history). Message ids are deterministic, so the
transcripts of two savers are equal exactly when they behave the same.
"""

import operator
import random
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, Send, StateSnapshot, interrupt
from typing_extensions import TypedDict

Transcript = list[Any]


_WORDS = [
    "the",
    "a",
    "checkpoint",
    "thread",
    "graph",
    "node",
    "message",
    "reply",
    "state",
    "delta",
    "channel",
    "seed",
    "write",
    "history",
    "fork",
    "prune",
    "copy",
    "store",
    "value",
    "version",
    "snapshot",
    "replay",
    "reducer",
    "batch",
    "turn",
    "agent",
    "tool",
    "call",
    "result",
    "user",
    "model",
    "token",
    "stream",
    "latency",
    "storage",
    "bytes",
    "page",
    "map",
]


def varied_text(seed: int, words: int) -> str:
    """Deterministic text that compresses like prose, not like a repeated phrase."""
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) + str(rng.randrange(100)) for _ in range(words))


def human(turn: int, text: str = "") -> HumanMessage:
    """A human message (~300 characters) with a deterministic id."""
    return HumanMessage(
        content=text or f"question {turn}: " + varied_text(turn, 40), id=f"h-{turn}"
    )


def reply_to(messages: list[BaseMessage], words: int = 75) -> AIMessage:
    """A deterministic fake model (~600 characters for 75 words): the reply depends only
    on the conversation."""
    n = len(messages)
    last = messages[-1].content if messages else ""
    return AIMessage(
        content=f"answer {n} to [{str(last)[:40]}] " + varied_text(-n, words), id=f"a-{n}"
    )


def chat_graph(sf: int | None, long_every: int = 0) -> StateGraph[Any]:
    """messages as DeltaChannel(sf) (or add_messages when sf is None) plus a plain counter.
    With ``long_every``, every such turn's reply is ~5,600 characters (~2 KB
    compressed: a record a turn pack carries in chunks)."""
    if sf is None:
        from langgraph.graph.message import add_messages

        class PlainState(TypedDict):
            messages: Annotated[list[BaseMessage], add_messages]
            turns: int

        builder: StateGraph[Any] = StateGraph(PlainState)
    else:

        class DeltaState(TypedDict):
            messages: Annotated[
                list[BaseMessage], DeltaChannel(_messages_delta_reducer, snapshot_frequency=sf)
            ]
            turns: int

        builder = StateGraph(DeltaState)

    def model(state: dict[str, Any]) -> dict[str, Any]:
        turns = state.get("turns", 0) + 1
        long = long_every and turns % long_every == 0
        return {"messages": [reply_to(state["messages"], 700 if long else 75)], "turns": turns}

    builder.add_node("model", model)  # type: ignore[type-var]  # state schema chosen at runtime
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    return builder


def interrupt_graph(sf: int) -> StateGraph[Any]:
    """A model step, then a human-approval node that interrupts, then a final step."""

    class State(TypedDict):
        messages: Annotated[
            list[BaseMessage], DeltaChannel(_messages_delta_reducer, snapshot_frequency=sf)
        ]
        approved: str

    def model(state: State) -> dict[str, Any]:
        return {"messages": [reply_to(state["messages"])]}

    def approve(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "approve?", "n": len(state["messages"])})
        return {
            "approved": str(answer),
            "messages": [
                AIMessage(content=f"approved {answer}", id=f"ok-{len(state['messages'])}")
            ],
        }

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("model", model)
    builder.add_node("approve", approve)
    builder.add_edge(START, "model")
    builder.add_edge("model", "approve")
    builder.add_edge("approve", END)
    return builder


def fanout_graph(sf: int) -> StateGraph[Any]:
    """Parallel nodes and Send tasks all writing one delta channel in the same step."""

    class State(TypedDict):
        messages: Annotated[
            list[BaseMessage], DeltaChannel(_messages_delta_reducer, snapshot_frequency=sf)
        ]
        log: Annotated[list[str], operator.add]

    def left(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(content=f"left {n}", id=f"l-{n}")], "log": ["left"]}

    def right(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(content=f"right {n}", id=f"r-{n}")], "log": ["right"]}

    def fan(state: State) -> list[Send]:
        n = len(state["messages"])
        return [Send("worker", {"item": i, "n": n}) for i in range(3)]

    def worker(arg: dict[str, Any]) -> dict[str, Any]:
        return {
            "messages": [
                AIMessage(content=f"worker {arg['item']}", id=f"w-{arg['n']}-{arg['item']}")
            ],
            "log": [f"w{arg['item']}"],
        }

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("left", left)
    builder.add_node("right", right)
    builder.add_node("worker", worker)  # type: ignore[arg-type]  # a Send target takes its own arg
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    builder.add_conditional_edges(START, fan, ["worker"])
    builder.add_edge("left", END)
    builder.add_edge("right", END)
    builder.add_edge("worker", END)
    return builder


def subgraph_graph(sf: int) -> StateGraph[Any]:
    """A parent whose node is a compiled subgraph (a child checkpoint namespace) that interrupts."""

    class State(TypedDict):
        messages: Annotated[
            list[BaseMessage], DeltaChannel(_messages_delta_reducer, snapshot_frequency=sf)
        ]

    def inner_model(state: State) -> dict[str, Any]:
        return {"messages": [reply_to(state["messages"])]}

    def inner_ask(state: State) -> dict[str, Any]:
        answer = interrupt("inner?")
        return {
            "messages": [AIMessage(content=f"inner {answer}", id=f"in-{len(state['messages'])}")]
        }

    inner: StateGraph[Any] = StateGraph(State)
    inner.add_node("inner_model", inner_model)
    inner.add_node("inner_ask", inner_ask)
    inner.add_edge(START, "inner_model")
    inner.add_edge("inner_model", "inner_ask")
    inner.add_edge("inner_ask", END)

    def outer(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage(content="outer", id=f"o-{len(state['messages'])}")]}

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("outer", outer)
    builder.add_node("sub", inner.compile())
    builder.add_edge(START, "outer")
    builder.add_edge("outer", "sub")
    builder.add_edge("sub", END)
    return builder


# -- observation ----------------------------------------------------------------------


def _norm_value(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return (type(value).__name__, value.id, value.content)
    if isinstance(value, list):
        return [_norm_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _norm_value(v) for k, v in value.items()}
    return value


def observe(snapshot: StateSnapshot) -> dict[str, Any]:
    """What a user sees of one snapshot, minus run-specific ids and times."""
    metadata = dict(snapshot.metadata or {})
    metadata.pop("run_id", None)
    metadata.pop("parents", None)
    return {
        "values": _norm_value(snapshot.values),
        "next": tuple(snapshot.next),
        "interrupts": [
            tuple(i.value.items()) if isinstance(i.value, dict) else i.value
            for i in snapshot.interrupts
        ],
        "metadata": _norm_value(metadata),
        "has_parent": snapshot.parent_config is not None,
        "tasks": [(t.name, t.path) for t in snapshot.tasks],
    }


def history(graph: CompiledStateGraph[Any], config: RunnableConfig) -> list[dict[str, Any]]:
    """The whole get_state_history, observed."""
    return [observe(s) for s in graph.get_state_history(config)]


async def ahistory(graph: CompiledStateGraph[Any], config: RunnableConfig) -> list[dict[str, Any]]:
    """Async twin of :func:`history`."""
    return [observe(s) async for s in graph.aget_state_history(config)]


# -- programs ---------------------------------------------------------------------------


def cfg(thread_id: str, **extra: Any) -> RunnableConfig:
    """A thread config."""
    return {"configurable": {"thread_id": thread_id, **extra}}


def program_chat(saver: BaseCheckpointSaver[Any], sf: int | None, turns: int = 12) -> Transcript:
    """Multi-turn chat, then time travel: fork from turn 3 and continue."""
    graph = chat_graph(sf).compile(checkpointer=saver)
    out: Transcript = []
    config = cfg("chat")
    for turn in range(turns):
        graph.invoke({"messages": [human(turn)]}, config)
        out.append(observe(graph.get_state(config)))
    hist = list(graph.get_state_history(config))
    out.append([observe(s) for s in hist])
    old = hist[-(3 * 3)]  # an input checkpoint a few turns in
    forked = graph.invoke({"messages": [human(100)]}, old.config)
    out.append(_norm_value(forked))
    out.append(observe(graph.get_state(config)))
    out.append(history(graph, config))
    graph.update_state(config, {"messages": [human(200, "edited")]}, as_node="model")
    out.append(observe(graph.get_state(config)))
    graph.invoke({"messages": [human(201)]}, config)
    out.append(history(graph, config))
    return out


async def aprogram_chat(
    saver: BaseCheckpointSaver[Any], sf: int | None, turns: int = 12
) -> Transcript:
    """Async twin of :func:`program_chat`."""
    graph = chat_graph(sf).compile(checkpointer=saver)
    out: Transcript = []
    config = cfg("chat")
    for turn in range(turns):
        await graph.ainvoke({"messages": [human(turn)]}, config)
        out.append(observe(await graph.aget_state(config)))
    hist = [s async for s in graph.aget_state_history(config)]
    out.append([observe(s) for s in hist])
    old = hist[-(3 * 3)]
    forked = await graph.ainvoke({"messages": [human(100)]}, old.config)
    out.append(_norm_value(forked))
    out.append(observe(await graph.aget_state(config)))
    out.append(await ahistory(graph, config))
    await graph.aupdate_state(config, {"messages": [human(200, "edited")]}, as_node="model")
    out.append(observe(await graph.aget_state(config)))
    await graph.ainvoke({"messages": [human(201)]}, config)
    out.append(await ahistory(graph, config))
    return out


def program_interrupt(saver: BaseCheckpointSaver[Any], sf: int) -> Transcript:
    """interrupt() then Command(resume=...), three rounds."""
    graph = interrupt_graph(sf).compile(checkpointer=saver)
    out: Transcript = []
    config = cfg("hitl")
    for turn in range(3):
        graph.invoke({"messages": [human(turn)]}, config)
        out.append(observe(graph.get_state(config)))
        graph.invoke(Command(resume=f"yes-{turn}"), config)
        out.append(observe(graph.get_state(config)))
    out.append(history(graph, config))
    return out


async def aprogram_interrupt(saver: BaseCheckpointSaver[Any], sf: int) -> Transcript:
    """Async twin of :func:`program_interrupt`."""
    graph = interrupt_graph(sf).compile(checkpointer=saver)
    out: Transcript = []
    config = cfg("hitl")
    for turn in range(3):
        await graph.ainvoke({"messages": [human(turn)]}, config)
        out.append(observe(await graph.aget_state(config)))
        await graph.ainvoke(Command(resume=f"yes-{turn}"), config)
        out.append(observe(await graph.aget_state(config)))
    out.append(await ahistory(graph, config))
    return out


def program_fanout(saver: BaseCheckpointSaver[Any], sf: int) -> Transcript:
    """Parallel nodes + Send writing one delta channel in one step, several turns."""
    graph = fanout_graph(sf).compile(checkpointer=saver)
    out: Transcript = []
    config = cfg("fan")
    for turn in range(4):
        graph.invoke({"messages": [human(turn)], "log": [f"in{turn}"]}, config)
        out.append(observe(graph.get_state(config)))
    out.append(history(graph, config))
    return out


async def aprogram_fanout(saver: BaseCheckpointSaver[Any], sf: int) -> Transcript:
    """Async twin of :func:`program_fanout`."""
    graph = fanout_graph(sf).compile(checkpointer=saver)
    out: Transcript = []
    config = cfg("fan")
    for turn in range(4):
        await graph.ainvoke({"messages": [human(turn)], "log": [f"in{turn}"]}, config)
        out.append(observe(await graph.aget_state(config)))
    out.append(await ahistory(graph, config))
    return out


def program_subgraph(saver: BaseCheckpointSaver[Any], sf: int) -> Transcript:
    """A subgraph namespace that interrupts, inspected with subgraphs=True, then resumed."""
    graph = subgraph_graph(sf).compile(checkpointer=saver)
    out: Transcript = []
    config = cfg("sub")
    for turn in range(2):
        graph.invoke({"messages": [human(turn)]}, config)
        state = graph.get_state(config, subgraphs=True)
        out.append(observe(state))
        out.append([observe(t.state) for t in state.tasks if isinstance(t.state, StateSnapshot)])
        graph.invoke(Command(resume=f"sub-{turn}"), config)
        out.append(observe(graph.get_state(config)))
    out.append(history(graph, config))
    return out


async def aprogram_subgraph(saver: BaseCheckpointSaver[Any], sf: int) -> Transcript:
    """Async twin of :func:`program_subgraph`."""
    graph = subgraph_graph(sf).compile(checkpointer=saver)
    out: Transcript = []
    config = cfg("sub")
    for turn in range(2):
        await graph.ainvoke({"messages": [human(turn)]}, config)
        state = await graph.aget_state(config, subgraphs=True)
        out.append(observe(state))
        out.append([observe(t.state) for t in state.tasks if isinstance(t.state, StateSnapshot)])
        await graph.ainvoke(Command(resume=f"sub-{turn}"), config)
        out.append(observe(await graph.aget_state(config)))
    out.append(await ahistory(graph, config))
    return out


SyncProgram = Callable[[BaseCheckpointSaver[Any], int], Transcript]
AsyncProgram = Callable[[BaseCheckpointSaver[Any], int], Awaitable[Transcript]]

PROGRAMS: dict[str, tuple[SyncProgram, AsyncProgram]] = {
    "chat": (program_chat, aprogram_chat),
    "interrupt": (program_interrupt, aprogram_interrupt),
    "fanout": (program_fanout, aprogram_fanout),
    "subgraph": (program_subgraph, aprogram_subgraph),
}

#: For async graphs that call ``interrupt()``. LangGraph reads the run's config
#: from a context variable that it can only hand to async tasks on Python 3.11+
#: (``langgraph.config.get_config``); on 3.10 such a graph raises "Called
#: get_config outside of a runnable context" with InMemorySaver and SqliteSaver
#: as well, so there is nothing of the saver's to compare.
ASYNC_INTERRUPT = pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="LangGraph supports interrupt() in async graphs on Python 3.11+ only",
)

#: The programs whose graphs interrupt.
INTERRUPTING = frozenset({"interrupt", "subgraph"})

#: ``PROGRAMS`` names as parameters of the async tests.
ASYNC_PROGRAMS = [
    pytest.param(name, marks=[ASYNC_INTERRUPT] if name in INTERRUPTING else [])
    for name in sorted(PROGRAMS)
]
