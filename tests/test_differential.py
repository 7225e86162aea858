"""Differential: real graphs on DeltaLogSaver and InMemorySaver give identical observations (R1–R4, R6)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pydantic
import pytest
from deltalog.engine import ConfigError, DeltaLogSaver
from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from .checkpoints import put_values
from .graphs import (
    ASYNC_PROGRAMS,
    PROGRAMS,
    cfg,
    chat_graph,
    history,
    human,
    observe,
    program_chat,
    varied_text,
)

SNAPSHOT_FREQUENCIES = [1, 3, 100]


@pytest.mark.parametrize("sf", SNAPSHOT_FREQUENCIES)
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_sync_program_matches_inmemory(
    program: str, sf: int, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """Sync run: every observation (values, next, interrupts, history) equals InMemorySaver's."""
    run = PROGRAMS[program][0]
    assert run(make_saver(), sf) == run(InMemorySaver(), sf)


@pytest.mark.parametrize("sf", SNAPSHOT_FREQUENCIES)
@pytest.mark.parametrize("program", ASYNC_PROGRAMS)
async def test_async_program_matches_inmemory(
    program: str, sf: int, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """Async run (aput/aget_delta_channel_history…): observations equal InMemorySaver's."""
    run = PROGRAMS[program][1]
    assert await run(make_saver(), sf) == await run(InMemorySaver(), sf)


def test_plain_add_messages_matches_inmemory(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """Without a DeltaChannel (plain add_messages) the saver is still exact."""
    assert program_chat(make_saver(), None, turns=6) == program_chat(InMemorySaver(), None, turns=6)


@pytest.mark.parametrize("config_name", ["tiny-map", "no-compression", "no-group-commit"])
def test_configurations_match_inmemory(
    config_name: str, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """Store configurations (a tiny map forcing growth, no compression, no group commit) stay exact."""
    from .conftest import SAVER_CONFIGS

    saver = make_saver(**SAVER_CONFIGS[config_name])
    assert program_chat(saver, 3) == program_chat(InMemorySaver(), 3)


def test_reopen_gives_same_states(tmp_path: Path) -> None:
    """Close and reopen the path: the same history and state, and the thread continues (R8)."""
    path = tmp_path / "chat.lmdb"
    config = cfg("t")
    with DeltaLogSaver.from_path(path, map_size=64 * 1024) as saver:
        graph = chat_graph(3).compile(checkpointer=saver)
        for turn in range(8):
            graph.invoke({"messages": [human(turn)]}, config)
        before = history(graph, config)
        map_after = saver.env.env.info()["map_size"]
    assert map_after > 64 * 1024, "the tiny map should have grown"
    with DeltaLogSaver.from_path(path) as saver:
        graph = chat_graph(3).compile(checkpointer=saver)
        assert history(graph, config) == before
        graph.invoke({"messages": [human(8)]}, config)
        after: Any = observe(graph.get_state(config))
    reference = InMemorySaver()
    graph = chat_graph(3).compile(checkpointer=reference)
    for turn in range(9):
        graph.invoke({"messages": [human(turn)]}, config)
    assert after == observe(graph.get_state(config))


def test_replay_before_a_checkpointed_subgraph_matches_inmemory(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """Replaying from a checkpoint before a subgraph with its own checkpointer:
    LangGraph then calls ``list(config, before={"configurable": {"checkpoint_id":
    ...}})`` with no thread_id in ``before``, which must be accepted."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    class State(TypedDict, total=False):
        status: str
        n: int
        note: str

    def build(saver: Any) -> Any:
        sub: StateGraph[Any] = StateGraph(State)
        sub.add_node("sa", lambda s: {"status": "sub-a", "n": s.get("n", 0) + 10})
        sub.add_node("sask", lambda s: {"note": interrupt("sub?")})
        sub.add_edge(START, "sa")
        sub.add_edge("sa", "sask")
        sub.add_edge("sask", END)
        outer: StateGraph[Any] = StateGraph(State)
        outer.add_node("pre", lambda s: {"status": "pre", "n": 1})
        outer.add_node("sub", sub.compile(checkpointer=True))
        outer.add_edge(START, "pre")
        outer.add_edge("pre", "sub")
        outer.add_edge("sub", END)
        return outer.compile(checkpointer=saver)

    def replay(saver: Any) -> Any:
        config = {"configurable": {"thread_id": "t"}}
        app = build(saver)
        app.invoke({"status": "s"}, config)
        app.invoke(Command(resume="answer"), config)
        before_sub = next(h for h in app.get_state_history(config) if h.next == ("sub",))
        result = app.invoke(None, before_sub.config)
        sub_state = app.get_state(config, subgraphs=True).tasks[0].state
        return (
            {k: v for k, v in result.items() if k != "__interrupt__"},
            [i.value for i in result["__interrupt__"]],
            sub_state.values,  # type: ignore[union-attr]
        )

    assert replay(make_saver()) == replay(InMemorySaver())


def test_list_before_needs_only_a_checkpoint_id(make_saver: Callable[..., DeltaLogSaver]) -> None:
    saver = make_saver()
    config = put_values(saver, "t", {"x": 1})
    for i in range(3):
        config = put_values(saver, "t", {"x": i}, parent=config)
    every = list(saver.list({"configurable": {"thread_id": "t"}}))
    newest = every[0].config["configurable"]["checkpoint_id"]
    bare: RunnableConfig = {"configurable": {"checkpoint_id": newest}}
    assert [t.config for t in saver.list({"configurable": {"thread_id": "t"}}, before=bare)] == [
        t.config for t in every[1:]
    ]
    with pytest.raises(ConfigError, match="before"):
        list(saver.list(None, before="not a config"))  # type: ignore[arg-type]


class Note(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    text: str
    tags: list[str] = []


class Board(pydantic.BaseModel):
    owner: str = ""
    notes: list[Note] = []


class BoardState(TypedDict, total=False):
    board: Board
    messages: Annotated[list[AnyMessage], add_messages]


def _deep(value: Any) -> Any:
    """A value with every model and message spelled out: type, fields, which
    fields were set, extras (what a copy must keep, beyond equality)."""
    if isinstance(value, pydantic.BaseModel):
        return (
            type(value).__name__,
            {k: _deep(v) for k, v in value.__dict__.items()},
            sorted(value.model_fields_set),
            _deep(value.__pydantic_extra__),
        )
    if isinstance(value, (list, tuple)):
        return [_deep(v) for v in value]
    if isinstance(value, dict):
        return {k: _deep(v) for k, v in value.items()}
    return value


def _program_board(saver: Any) -> list[Any]:
    def write(state: BoardState) -> dict[str, Any]:
        n = len(state["board"].notes)
        note = Note.model_validate({"text": varied_text(n, 90), "mood": "ok" if n % 2 else "busy"})
        if n % 3 == 0:
            note.tags.append(f"t{n}")
        return {
            "board": Board(owner="o", notes=[*state["board"].notes, note]),
            "messages": [AIMessage(content=varied_text(100 + n, 60), id=f"a{n}")],
        }

    builder = StateGraph(BoardState)
    builder.add_node("write", write)
    builder.add_edge(START, "write")
    builder.add_edge("write", END)
    graph = builder.compile(checkpointer=saver)
    config = cfg("board")
    seen: list[Any] = []
    for turn in range(8):
        update: BoardState = {"messages": [human(turn)]}
        if turn == 0:
            update["board"] = Board()
        graph.invoke(update, config)
        for _ in range(3):  # the second and third reads come from the caches
            state = graph.get_state(config)
            seen.append(_deep(state.values))
            state.values["board"].notes[0].tags.append("changed by a reader")
            state.values["messages"][0].content = "changed by a reader"
    seen.append([_deep(s.values) for s in graph.get_state_history(config, limit=5)])
    return seen


def test_pydantic_values_copy_exactly_as_inmemory(make_saver: Callable[..., DeltaLogSaver]) -> None:
    """Pydantic values (a model holding a list of models with extras) and messages
    come back from the caches' copies as InMemorySaver gives them, field sets
    and extras included, and a reader changing its copy changes no other."""

    def serde() -> JsonPlusSerializer:
        allowed = [(__name__, "Board"), (__name__, "Note")]
        return JsonPlusSerializer(allowed_msgpack_modules=allowed)

    ours = _program_board(make_saver(serde=serde()))
    assert ours == _program_board(InMemorySaver(serde=serde()))
    assert ours[-2]["board"][0] == "Board"  # decoded as the model, not a dict
