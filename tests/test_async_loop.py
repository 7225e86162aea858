"""Async reads of a long thread let the event loop run other tasks meanwhile (issue 19.4, R11)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from deltalog.channels import DeltaMessagesState
from deltalog.engine import DeltaLogSaver, Environment, InvalidInputError
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph

TURNS = 60
CONFIG: RunnableConfig = {"configurable": {"thread_id": "long"}}


def _reply(state: DeltaMessagesState) -> dict[str, Any]:
    return {"messages": [("ai", "x" * 200 + str(len(state["messages"])))]}


def _graph(saver: DeltaLogSaver) -> Any:
    builder = StateGraph(DeltaMessagesState)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


@pytest.fixture(scope="module")
def long_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A thread of TURNS turns (2*TURNS messages, 3*TURNS checkpoints) in a delta channel."""
    path = tmp_path_factory.mktemp("loop") / "s"
    with DeltaLogSaver.from_path(path, durable=False) as saver:
        graph = _graph(saver)
        for i in range(TURNS):
            graph.invoke({"messages": [("user", f"turn {i}")]}, CONFIG)
    return path


async def _loop_turns_during(call: Callable[[], Awaitable[Any]]) -> tuple[int, Any]:
    """How often a ticker task ran while ``call()`` was awaited, and its result."""
    ticks = 0
    running = True

    async def ticker() -> None:
        nonlocal ticks
        while running:
            await asyncio.sleep(0)
            ticks += 1

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # the ticker is scheduled
    before = ticks
    result = await call()
    during = ticks - before
    running = False
    await task
    return during, result


async def _collect(saver: DeltaLogSaver, **kwargs: Any) -> list[Any]:
    return [t async for t in saver.alist(CONFIG, **kwargs)]


async def test_aget_state_history_yields(long_store: Path) -> None:
    """graph.aget_state_history(limit=20) lets other tasks run, and matches the sync history."""
    with DeltaLogSaver.from_path(long_store, durable=False) as saver:
        graph = _graph(saver)

        async def history() -> list[Any]:
            return [s async for s in graph.aget_state_history(CONFIG, limit=20)]

        turns, states = await _loop_turns_during(history)
        assert turns >= 1
        expected = list(graph.get_state_history(CONFIG, limit=20))
        assert [s.config for s in states] == [s.config for s in expected]
        assert [len(s.values["messages"]) for s in states] == [
            len(s.values["messages"]) for s in expected
        ]


@pytest.mark.parametrize("kwargs", [{}, {"limit": 5}, {"limit": 1}, {"filter": {"step": 3}}])
async def test_alist_yields_and_equals_list(long_store: Path, kwargs: dict[str, Any]) -> None:
    """alist lets other tasks run and returns what list returns (limit and filter honoured)."""
    with DeltaLogSaver.from_path(long_store, durable=False) as saver:
        turns, tuples = await _loop_turns_during(lambda: _collect(saver, **kwargs))
        assert turns >= 1
        assert [t.config for t in tuples] == [t.config for t in saver.list(CONFIG, **kwargs)]


async def test_aget_tuple_and_delta_history_yield(long_store: Path) -> None:
    """aget_tuple and aget_delta_channel_history let other tasks run, with the sync results."""
    with DeltaLogSaver.from_path(long_store, durable=False) as saver:
        turns, got = await _loop_turns_during(lambda: saver.aget_tuple(CONFIG))
        assert turns >= 1
        want = saver.get_tuple(CONFIG)
        assert got is not None and want is not None and got.config == want.config

        turns, history = await _loop_turns_during(
            lambda: saver.aget_delta_channel_history(config=CONFIG, channels=["messages"])
        )
        assert turns >= 1
        assert len(history["messages"]["writes"]) == len(
            saver.get_delta_channel_history(config=CONFIG, channels=["messages"])["messages"][
                "writes"
            ]
        )


async def test_alist_bad_input_still_raises(long_store: Path) -> None:
    """Validation errors from the worker thread reach the caller unchanged."""
    with (
        DeltaLogSaver.from_path(long_store, durable=False) as saver,
        pytest.raises(InvalidInputError, match="limit"),
    ):
        await _collect(saver, limit="3")


async def test_suspended_listings_hold_no_reader_slots(long_store: Path) -> None:
    """150 coroutines each half-way through an alist hold no LMDB reader slot (126 slots)."""
    with DeltaLogSaver(Environment(long_store, max_readers=126)) as saver:
        started = asyncio.Event()
        paused = 0

        async def browse() -> int:
            nonlocal paused
            seen = 0
            async for _ in saver.alist(CONFIG, limit=12):
                seen += 1
                if seen == 5:  # past the first worker-thread hop: the listing is suspended
                    paused += 1
                    if paused == 150:
                        started.set()
                    await started.wait()
            return seen

        assert await asyncio.gather(*(browse() for _ in range(150))) == [12] * 150
        assert await saver.aget_tuple(CONFIG) is not None
