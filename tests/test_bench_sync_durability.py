"""Issue 18.4: the throughput scenario's second pass of graph turns really runs with durability="sync"."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from deltalog.bench.peers import OpenPeer, PeerContext, PeerSpec, memory_saver_bytes
from deltalog.bench.runner import RunOptions, run_bench
from deltalog.bench.scenarios import THROUGHPUT, BenchPlan
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.memory import InMemorySaver


class SlowPutSaver(InMemorySaver):
    """An InMemorySaver whose put takes 30 ms; it counts the model node's writes (an
    AIMessage) that are saved while a checkpoint's put is still running: LangGraph
    runs the model step while the previous step's checkpoint is being saved, unless
    durability is "sync"."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._puts_running = 0
        self.writes_during_put = 0
        self.put_writes_calls = 0

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        with self._lock:
            self._puts_running += 1
        try:
            time.sleep(0.03)
            return super().put(config, checkpoint, metadata, new_versions)
        finally:
            with self._lock:
                self._puts_running -= 1

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        model = any(
            isinstance(m, AIMessage)
            for _channel, value in writes
            for m in (value if isinstance(value, list) else [value])
        )
        with self._lock:
            self.put_writes_calls += model
            self.writes_during_put += model and self._puts_running > 0
        super().put_writes(config, writes, task_id, task_path)


OPENED: list[SlowPutSaver] = []


@contextlib.contextmanager
def _open_slow(ctx: PeerContext) -> Iterator[OpenPeer]:
    saver = SlowPutSaver()
    OPENED.append(saver)
    yield OpenPeer(saver, lambda: memory_saver_bytes(saver))


def test_sync_rounds_wait_for_each_checkpoint(tmp_path: Path) -> None:
    """In the default rounds the model's writes are saved while the previous
    checkpoint's put is still running; in the durability="sync" rounds never."""
    OPENED.clear()
    scenario = dataclasses.replace(
        THROUGHPUT, threads=(1,), sync_threads=(1,), seconds=0.3, repeats=1
    )
    spec = PeerSpec("slow", "SlowPutSaver", _open_slow, durable=False)
    options = RunOptions(
        peers=("slow",), workdir=tmp_path, isolation="inprocess", extra_peers={"slow": spec}
    )
    result = run_bench(BenchPlan(chat=(), throughput=scenario), options)
    assert result.failures == []
    assert result.throughput is not None and [
        p.threads for p in result.throughput.sync["slow"]
    ] == [1]
    graph_round, _puts_round, sync_round = OPENED  # fresh store per round, in run order
    assert graph_round.put_writes_calls > 0 and sync_round.put_writes_calls > 0
    assert graph_round.writes_during_put > 0
    assert sync_round.writes_during_put == 0
