"""Differential: real graphs on DeltaLogSaver and InMemorySaver give identical observations (R1–R4, R6)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver
from langgraph.checkpoint.memory import InMemorySaver

from .graphs import (
    ASYNC_PROGRAMS,
    PROGRAMS,
    cfg,
    chat_graph,
    history,
    human,
    observe,
    program_chat,
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
        map_after = saver.store.env.info()["map_size"]
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
