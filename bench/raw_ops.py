"""Raw saver operations under pytest-benchmark.

Each saver gets one realistic thread (``DELTALOG_RAW_OPS_TURNS`` chat turns,
default 200, messages as ``DeltaChannel`` sf=100, written through a real
graph), then pytest-benchmark times the five operations the runtime calls:

* ``put`` — a copy of the latest checkpoint under a new id, as the next step;
* ``put_writes`` — one message write for a fresh task id;
* ``get_tuple`` — the latest checkpoint of the thread;
* ``list`` — ``limit=20`` newest checkpoints;
* ``get_delta_channel_history`` — ``messages`` of the latest checkpoint.

Async savers are driven through their ``a*`` methods on their own loop.
PostgreSQL runs when ``DELTALOG_BENCH_PG`` holds a DSN or a throwaway local
server can be started; otherwise those cases skip, as do savers whose package
is missing. When the pytest-benchmark plugin is unavailable or disabled with
``-p no:benchmark`` every case skips; with ``--benchmark-disable`` each runs once
(a cheap smoke test).

Run::

    pytest bench/raw_ops.py                        # from a checkout
    pytest --pyargs deltalog.bench.raw_ops         # from an install
    pytest bench/raw_ops.py --benchmark-json raw.json -k "sqlite or deltalog"
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalog.bench.graphs import MESSAGES, build_graph, human_message, thread_config
from deltalog.bench.peers import REGISTRY, OpenPeer, PeerContext
from deltalog.bench.pgserver import PostgresUnavailable, find_pg_bindir, local_postgres
from deltalog.bench.scenarios import ChatScenario, delta
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, copy_checkpoint
from langgraph.checkpoint.base.id import uuid6

RAW_OPS_PEERS = ("deltalog", "memory", "sqlite", "async-sqlite", "lmdb", "postgres")

_TURNS = int(os.environ.get("DELTALOG_RAW_OPS_TURNS", "200"))
_SCENARIO = ChatScenario(name="raw-ops", field=delta(100), turns=_TURNS)


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str | None]:
    """``$DELTALOG_BENCH_PG``, else a throwaway local server, else ``None``."""
    if dsn := os.environ.get("DELTALOG_BENCH_PG"):
        yield dsn
        return
    if find_pg_bindir() is None:
        yield None
        return
    try:
        with local_postgres() as local:
            yield local
    except PostgresUnavailable:
        yield None


@pytest.fixture
def bench(request: pytest.FixtureRequest) -> Any:
    """pytest-benchmark's ``benchmark`` fixture, or a skip when the plugin is off."""
    try:
        return request.getfixturevalue("benchmark")
    except pytest.FixtureLookupError:
        pytest.skip("pytest-benchmark is not installed or is disabled (-p no:benchmark)")


class _Driver:
    """Calls a saver's sync method, or its async twin on the peer's loop."""

    def __init__(self, peer: OpenPeer) -> None:
        self.peer = peer
        self.saver = peer.saver

    def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self.peer.loop is None:
            return getattr(self.saver, method)(*args, **kwargs)
        result = getattr(self.saver, "a" + method)(*args, **kwargs)
        if method == "list":

            async def collect() -> list[Any]:
                return [item async for item in result]

            return self.peer.loop.run_until_complete(collect())
        return self.peer.loop.run_until_complete(result)


@pytest.fixture(params=RAW_OPS_PEERS)
def thread(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[_Driver, CheckpointTuple]]:
    """An open saver holding one chat thread, and the thread's latest checkpoint."""
    spec = REGISTRY[request.param]
    # Only PostgreSQL cases pay for starting a server.
    pg_dsn = request.getfixturevalue("pg_dsn") if spec.needs_postgres else None
    ctx = PeerContext(workdir=tmp_path, pg_dsn=pg_dsn)
    if reason := spec.unavailable_reason(ctx):
        pytest.skip(f"{spec.name}: {reason}")
    with spec.open(ctx) as peer:
        graph = build_graph(_SCENARIO, peer.saver)
        config = thread_config("raw-ops")
        for turn in range(_SCENARIO.turns):
            payload = {MESSAGES: [human_message(_SCENARIO, turn)]}
            if peer.loop is None:
                graph.invoke(payload, config)
            else:
                peer.loop.run_until_complete(graph.ainvoke(payload, config))
        driver = _Driver(peer)
        latest = driver("get_tuple", config)
        if latest is None:
            raise RuntimeError(f"{spec.name}: no checkpoint after {_SCENARIO.turns} turns")
        yield driver, latest


def _next_step(latest: CheckpointTuple) -> Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]:
    """pytest-benchmark ``setup`` for ``put``: a copy of ``latest`` under a new id."""

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        step = latest.metadata.get("step", 0) + 1
        checkpoint = copy_checkpoint(latest.checkpoint)
        checkpoint["id"] = str(uuid6(clock_seq=step))
        metadata = {**latest.metadata, "step": step}
        return (latest.config, checkpoint, metadata, {}), {}

    return setup


def test_put(bench: Any, thread: tuple[_Driver, CheckpointTuple]) -> None:
    """``put`` of the next step's checkpoint (no channel changed)."""
    driver, latest = thread
    bench.pedantic(
        lambda *args: driver("put", *args), setup=_next_step(latest), rounds=50, warmup_rounds=2
    )


def test_put_writes(bench: Any, thread: tuple[_Driver, CheckpointTuple]) -> None:
    """``put_writes`` of one ~600-character message for a fresh task id."""
    driver, latest = thread
    message = AIMessage(content="x" * 600, id="raw-ops-write")

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        writes = [(MESSAGES, [message])]
        return (latest.config, writes, str(uuid.uuid4())), {"task_path": "~__pregel_pull, model"}

    bench.pedantic(
        lambda *a, **kw: driver("put_writes", *a, **kw), setup=setup, rounds=50, warmup_rounds=2
    )


def test_get_tuple(bench: Any, thread: tuple[_Driver, CheckpointTuple]) -> None:
    """``get_tuple`` of the thread's latest checkpoint (no ``checkpoint_id``)."""
    driver, _latest = thread
    config: RunnableConfig = thread_config("raw-ops")
    assert bench(driver, "get_tuple", config) is not None


def test_list(bench: Any, thread: tuple[_Driver, CheckpointTuple]) -> None:
    """``list(limit=20)`` of the thread, newest first."""
    driver, _latest = thread
    config: RunnableConfig = thread_config("raw-ops")
    result = bench(lambda: list(driver("list", config, limit=20)))
    assert len(result) == min(20, 3 * _SCENARIO.turns)


def test_get_delta_channel_history(bench: Any, thread: tuple[_Driver, CheckpointTuple]) -> None:
    """``get_delta_channel_history`` of ``messages`` at the latest checkpoint."""
    driver, latest = thread
    history = bench(
        lambda: driver("get_delta_channel_history", config=latest.config, channels=[MESSAGES])
    )
    assert MESSAGES in history
