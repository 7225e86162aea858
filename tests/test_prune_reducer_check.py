"""A re-seeding prune checks the reducers it is given against the values the graph stored, and changes nothing when they disagree (R7, issue 15.7)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest
from deltalog.channels import append, delta
from deltalog.engine import DeltaLogSaver
from deltalog.engine.errors import ReducerMismatchError
from deltalog.engine.txn_base import DB_NAMES
from langchain_core.messages import BaseMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

from tests.graphs import cfg, chat_graph, human, observe

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "deltalog.engine"]


def dump(saver: DeltaLogSaver) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every key and value of every database of the store."""
    return {db: list(saver.env.iter_db(db)) for db in DB_NAMES}


def wrong_graph() -> CompiledStateGraph[Any, Any, Any]:
    """The chat graph's shape with `messages` declared delta(append) instead of the messages reducer."""

    class Wrong(TypedDict):
        messages: Annotated[list[BaseMessage], delta(append)]
        turns: int

    builder: StateGraph[Any] = StateGraph(Wrong)
    builder.add_node("model", lambda state: {})
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    return builder.compile()


def chat_with_edits(saver: DeltaLogSaver, turns: int) -> CompiledStateGraph[Any, Any, Any]:
    """Turns that re-send a message id (the messages reducer replaces it; append would not)."""
    graph = chat_graph(3).compile(checkpointer=saver)
    for turn in range(turns):
        config = cfg("t")
        config["metadata"] = {"run_id": f"run-{turn}"}  # as the server sets it
        graph.invoke({"messages": [human(turn % 2)]}, config)
    return graph


@pytest.mark.parametrize("turns", [4, 5, 7])
def test_prune_with_a_wrong_reducer_is_refused_and_changes_nothing(
    turns: int, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """prune(reducers=graph with delta(append) for messages) raises naming the channel; every database is byte-for-byte unchanged; the right graph then prunes exactly."""
    saver = make_saver()
    graph = chat_with_edits(saver, turns)
    state = observe(graph.get_state(cfg("t")))
    before = dump(saver)
    for reducers in (wrong_graph(), {"messages": append}):
        for dry_run in (True, False):
            with pytest.raises(ReducerMismatchError, match=r"channel 'messages'.*nothing was"):
                saver.prune(["t"], reducers=reducers, dry_run=dry_run)
            assert dump(saver) == before
    assert observe(graph.get_state(cfg("t"))) == state
    report = saver.prune(["t"], reducers=graph)
    assert report.seeds == 1 and report.checkpoints > 0
    assert observe(graph.get_state(cfg("t")))["values"] == state["values"]
    assert saver.verify().ok


def test_a_reducer_that_fails_on_the_history_is_refused_the_same_way(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A reducer raising on the stored writes gives ReducerMismatchError naming it, not its own exception."""
    saver = make_saver()
    chat_with_edits(saver, 4)
    before = dump(saver)

    def failing(state: Any, writes: Any) -> Any:
        raise KeyError("no such message")

    with pytest.raises(ReducerMismatchError, match=r"'messages' \(failing\) fails.*KeyError"):
        saver.prune(["t"], reducers={"messages": failing})
    assert dump(saver) == before


def test_delete_for_runs_with_a_wrong_reducer_is_refused(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """delete_for_runs re-seeds the same way, so it is checked the same way."""
    saver = make_saver()
    graph = chat_with_edits(saver, 7)
    runs = [f"run-{turn}" for turn in range(7)]
    state = observe(graph.get_state(cfg("t")))
    before = dump(saver)
    with pytest.raises(ReducerMismatchError, match="channel 'messages'"):
        saver.delete_for_runs(runs[4:5], reducers=wrong_graph())
    assert dump(saver) == before
    assert observe(graph.get_state(cfg("t"))) == state
    assert saver.delete_for_runs(runs[4:5], reducers=graph).seeds >= 1
    assert observe(graph.get_state(cfg("t")))["values"] == state["values"]


def test_cli_prune_with_a_wrong_graph_exits_1_and_changes_nothing(tmp_path: Path) -> None:
    """`deltalog prune --graph` with the wrong reducer: exit 1, one-line Error, store unchanged."""
    path = tmp_path / "store"
    with DeltaLogSaver.from_path(path) as saver:
        chat_with_edits(saver, 4)
        before = dump(saver)
    module = tmp_path / "wrong.py"
    module.write_text(
        textwrap.dedent(
            """
            from typing import Annotated
            from typing_extensions import TypedDict
            from langgraph.graph import END, START, StateGraph
            from deltalog.channels import append, delta

            class Wrong(TypedDict):
                messages: Annotated[list, delta(append)]
                turns: int

            builder = StateGraph(Wrong)
            builder.add_node("model", lambda state: {})
            builder.add_edge(START, "model")
            builder.add_edge("model", END)
            graph = builder.compile()
            """
        )
    )
    done = subprocess.run(
        [*CLI, "prune", str(path), "t", "--keep-latest", "--graph", f"{module}:graph"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and "'messages'" in lines[0], lines
    with DeltaLogSaver.from_path(path) as saver:
        assert dump(saver) == before


class Events(TypedDict, total=False):
    events: Annotated[list[str], delta(append, snapshot_every=3)]


def events_graph(saver: DeltaLogSaver) -> CompiledStateGraph[Any, Any, Any]:
    builder: StateGraph[Any] = StateGraph(Events)
    builder.add_node("model", lambda state: {"events": [f"model{len(state.get('events', []))}"]})
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    return builder.compile(checkpointer=saver)


def prepend(left: Any, right: Sequence[Any]) -> Any:
    """A wrong reducer for `events`: the writes go in front."""
    return [x for batch in reversed(right) for x in batch] + list(left)


@pytest.mark.parametrize(
    ("how", "after"),
    [("update_state", 1), ("update_state", 4), ("time travel", 1), ("time travel", 4), ("exit", 0)],
)
def test_snapshots_the_history_does_not_rebuild_witness_no_reducer(
    how: str, after: int, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """LangGraph also stores a snapshot where the stored writes do not rebuild it: after
    update_state (the update replaces a node's pending write), a run from an older checkpoint
    (its parent's pending writes are dropped) and durability="exit" (no writes between). Prune
    with the graph that wrote the thread re-seeds it unchanged; a wrong reducer is still
    refused on the loop's own snapshots where there are any."""
    saver = make_saver()
    graph = events_graph(saver)
    durability: Any = "exit" if how == "exit" else "async"
    for turn in range(3):
        graph.invoke({"events": [f"in{turn}"]}, cfg("t"), durability=durability)
    if how != "exit":
        old = [s for s in graph.get_state_history(cfg("t")) if s.next == ("model",)][1]
        if how == "update_state":
            graph.update_state(old.config, {"events": ["u"]}, as_node="model")
        else:
            graph.invoke({"events": ["forked"]}, old.config)
    for turn in range(after):
        graph.invoke({"events": [f"after{turn}"]}, cfg("t"))
    state = observe(graph.get_state(cfg("t")))
    before = dump(saver)
    if after == 4:
        with pytest.raises(ReducerMismatchError, match="channel 'events'"):
            saver.prune(["t"], reducers={"events": prepend})
        assert dump(saver) == before
    report = saver.prune(["t"], reducers=graph)
    assert report.seeds == 1
    assert observe(graph.get_state(cfg("t")))["values"] == state["values"]
    assert saver.verify().ok


class TwoDeltas(TypedDict, total=False):
    messages: Annotated[list[str], delta(append, snapshot_every=3)]
    events: Annotated[list[str], delta(append, snapshot_every=4)]


def test_a_walk_that_ends_where_a_prune_cut_witnesses_no_reducer(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """A prune without reducers keeps a hidden chain whose first checkpoint loses its parent;
    a snapshot whose walk ends there is not the replay of its writes (those before the cut are
    gone), so a later prune with the graph that wrote the thread is not refused."""
    builder: StateGraph[Any] = StateGraph(TwoDeltas)
    builder.add_node("model", lambda s: {"messages": [f"a{len(s['messages'])}"], "events": ["e"]})
    builder.add_node("post", lambda s: {"events": ["post"]})
    builder.add_edge(START, "model")
    builder.add_edge("model", "post")
    builder.add_edge("post", END)
    saver = make_saver()
    graph = builder.compile(checkpointer=saver)
    for turn in range(2):
        graph.invoke({"messages": [f"h{turn}"]}, cfg("t"))
    saver.prune(["t"])  # keep_latest without reducers: the hidden chain stays
    for turn in range(2, 4):
        graph.invoke({"messages": [f"h{turn}"]}, cfg("t"))
    state = observe(graph.get_state(cfg("t")))
    saver.prune(["t"], keep_last=4, reducers=graph)
    assert observe(graph.get_state(cfg("t")))["values"] == state["values"]
    assert saver.verify().ok


@pytest.mark.parametrize("turns", [3, 4])
def test_a_wrong_reducer_is_refused_on_a_thread_with_edits_by_update_state(
    turns: int, make_saver: Callable[..., DeltaLogSaver]
) -> None:
    """update_state on the latest checkpoint stores its write there, and LangGraph's
    frequency rule may put the next snapshot on the update checkpoint: a witness like any
    other. A wrong reducer is refused; the right graph re-seeds the same state."""
    saver = make_saver()
    graph = events_graph(saver)
    for turn in range(turns):
        graph.invoke({"events": [f"in{turn}"]}, cfg("t"))
        graph.update_state(cfg("t"), {"events": [f"edit{turn}"]})
    graph.invoke({"events": ["last"]}, cfg("t"))  # the latest is no snapshot: prune re-seeds
    state = observe(graph.get_state(cfg("t")))
    before = dump(saver)
    with pytest.raises(ReducerMismatchError, match="channel 'events'"):
        saver.prune(["t"], reducers={"events": prepend})
    with pytest.raises(ReducerMismatchError, match="channel 'events'"):
        saver.prune(["t"], reducers={"events": delta(prepend, snapshot_every=3)})
    assert dump(saver) == before
    assert saver.prune(["t"], reducers=graph).seeds == 1
    assert observe(graph.get_state(cfg("t")))["values"] == state["values"]
