"""Group commit: durable puts per second with 1, 4, 16 and 64 writer threads.

Three stores get the same workload in one run, every commit durable:

* deltalog with group commit (the default): concurrent ``put`` calls share one
  LMDB write transaction and one fsync; each caller returns only after the
  commit that holds its checkpoint;
* deltalog with ``group_commit=False``: one transaction and one fsync per put;
* LangGraph's ``SqliteSaver`` (WAL journal, SQLite's default ``synchronous``
  setting, reported in the output).

and, in a second table, the same puts from coroutines on one event loop:
deltalog's ``aput`` (queued for the next group commit, awaited as a future)
against LangGraph's ``AsyncSqliteSaver``.

Each thread (or coroutine) puts checkpoints on its own LangGraph thread (a chain, each with a
~200-byte new channel value) for a fixed time; a fresh store per run; the
figure is the median of the runs (3 by default) in checkpoints/s, with the
ratios computed from those medians. Run::

    python -m deltalog.bench.group_commit            # ~2.5 min on 2 cores
    python -m deltalog.bench.group_commit --quick    # a smoke run
    python -m deltalog.bench.group_commit --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from deltalog.engine import DeltaLogSaver
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint

THREADS = (1, 4, 16, 64)
CONFIGS = ("group commit", "no group commit", "SqliteSaver")
ASYNC_CONFIGS = ("deltalog aput", "AsyncSqliteSaver")
VALUE = "lorem ipsum dolor sit amet " * 8  # ~200 bytes per checkpoint


@dataclass
class Cell:
    """One (configuration, thread count): runs in checkpoints/s and their median."""

    config: str
    threads: int
    runs: list[float]
    puts_per_commit: list[float]

    @property
    def median(self) -> float:
        """Median checkpoints/s of the runs."""
        return statistics.median(self.runs)


def put_step(saver: BaseCheckpointSaver[Any], config: RunnableConfig, step: int) -> RunnableConfig:
    """Put the ``step``-th checkpoint of a chain (a ~200-byte new value) after ``config``."""
    return saver.put(config, *_checkpoint(saver, step))  # type: ignore[arg-type]


async def aput_step(
    saver: BaseCheckpointSaver[Any], config: RunnableConfig, step: int
) -> RunnableConfig:
    """:func:`put_step` through ``aput``."""
    return await saver.aput(config, *_checkpoint(saver, step))  # type: ignore[arg-type]


def _checkpoint(
    saver: BaseCheckpointSaver[Any], step: int
) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"messages": f"{step} {VALUE}"}
    checkpoint["channel_versions"] = {"messages": version}
    return checkpoint, {"source": "loop", "step": step}, {"messages": version}


def _rates(puts: int, elapsed: float, first: int, last: int) -> tuple[float, float]:
    """(checkpoints/s, puts per commit) from the commit counter before and after (-1: none)."""
    done = last - first
    return puts / elapsed, puts / done if first >= 0 and done else 0.0


@contextmanager
def _open(
    config: str, folder: Path
) -> Iterator[tuple[BaseCheckpointSaver[Any], Callable[[], int]]]:
    """The saver and a function giving its commit counter (LMDB's last txn id; -1 for SQLite)."""
    if config == "SqliteSaver":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(str(folder / "checkpoints.sqlite")) as saver:
            saver.setup()
            yield saver, lambda: -1
        return
    deltalog = DeltaLogSaver.from_path(folder / "store", group_commit=config == "group commit")
    try:
        yield deltalog, lambda: int(deltalog.env.env.info()["last_txnid"])
    finally:
        deltalog.close()


def _run(config: str, threads: int, seconds: float) -> tuple[float, float]:
    """One timed run on a fresh store: (checkpoints/s, puts per commit; 0 for SQLite)."""
    with (
        tempfile.TemporaryDirectory(prefix="deltalog-gc-") as tmp,
        _open(config, Path(tmp)) as (
            saver,
            commits,
        ),
    ):
        counts = [0] * threads
        start = threading.Barrier(threads + 1)
        stop = [0.0]

        def writer(k: int) -> None:
            config_k: RunnableConfig = {"configurable": {"thread_id": f"t{k}", "checkpoint_ns": ""}}
            start.wait()
            while time.perf_counter() < stop[0]:
                config_k = put_step(saver, config_k, counts[k])
                counts[k] += 1

        workers = [threading.Thread(target=writer, args=(k,)) for k in range(threads)]
        for w in workers:
            w.start()
        first = commits()
        began = time.perf_counter()
        stop[0] = began + seconds
        start.wait()
        for w in workers:
            w.join()
        return _rates(sum(counts), time.perf_counter() - began, first, commits())


@asynccontextmanager
async def _aopen(
    config: str, folder: Path
) -> AsyncIterator[tuple[BaseCheckpointSaver[Any], Callable[[], int]]]:
    """Like :func:`_open`, for the coroutine configurations."""
    if config == "AsyncSqliteSaver":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(str(folder / "checkpoints.sqlite")) as saver:
            await saver.setup()
            yield saver, lambda: -1
        return
    with _open("group commit", folder) as opened:
        yield opened


def _arun(config: str, coroutines: int, seconds: float) -> tuple[float, float]:
    """One timed run of ``coroutines`` writers on one event loop (see :func:`_run`)."""

    async def main(folder: Path) -> tuple[float, float]:
        async with _aopen(config, folder) as (saver, commits):
            counts = [0] * coroutines

            async def writer(k: int) -> None:
                config_k: RunnableConfig = {
                    "configurable": {"thread_id": f"t{k}", "checkpoint_ns": ""}
                }
                while time.perf_counter() < stop:
                    config_k = await aput_step(saver, config_k, counts[k])
                    counts[k] += 1

            first = commits()
            began = time.perf_counter()
            stop = began + seconds
            await asyncio.gather(*(writer(k) for k in range(coroutines)))
            return _rates(sum(counts), time.perf_counter() - began, first, commits())

    with tempfile.TemporaryDirectory(prefix="deltalog-gc-") as tmp:
        return asyncio.run(main(Path(tmp)))


def sqlite_settings() -> dict[str, Any]:
    """journal_mode and synchronous of a SqliteSaver connection, as this machine's SQLite sets them."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    with (
        tempfile.TemporaryDirectory() as tmp,
        SqliteSaver.from_conn_string(str(Path(tmp) / "c.sqlite")) as saver,
    ):
        saver.setup()
        conn: sqlite3.Connection = saver.conn
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    return {"journal_mode": mode, "synchronous": f"{names.get(sync, sync)} ({sync})"}


def measure(seconds: float, repeats: int, threads: tuple[int, ...] = THREADS) -> list[Cell]:
    """Every cell of both tables, configurations interleaved so drift hits them alike."""
    configs = CONFIGS + ASYNC_CONFIGS
    cells = {(c, n): Cell(c, n, [], []) for n in threads for c in configs}
    for _ in range(repeats):
        for n in threads:
            for c in configs:
                rate, per_commit = (
                    _arun(c, n, seconds) if c in ASYNC_CONFIGS else _run(c, n, seconds)
                )
                cells[(c, n)].runs.append(rate)
                cells[(c, n)].puts_per_commit.append(per_commit)
    return list(cells.values())


def table(cells: list[Cell], settings: dict[str, Any], seconds: float) -> str:
    """The markdown table of medians and ratios (the ratios use those medians)."""
    by = {(c.config, c.threads): c for c in cells}
    threads = sorted({c.threads for c in cells})
    repeats = len(cells[0].runs)
    lines = [
        f"Durable checkpoints/s, median of {repeats} runs of {seconds:g} s each "
        f"(SqliteSaver: journal_mode={settings['journal_mode']}, "
        f"synchronous={settings['synchronous']})",
        "",
        "| threads | group commit | no group commit | SqliteSaver | group / no group "
        "| group / SQLite | puts per commit (group) |",
        "|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for n in threads:
        on, off, lite = (by[(c, n)] for c in CONFIGS)
        per_commit = statistics.median(on.puts_per_commit)
        lines.append(
            f"| {n} | {on.median:,.0f} | {off.median:,.0f} | {lite.median:,.0f} "
            f"| {on.median / off.median:.2f}x | {on.median / lite.median:.2f}x | {per_commit:.1f} |"
        )
    return "\n".join(lines)


def async_table(cells: list[Cell], seconds: float) -> str:
    """The markdown table of the coroutine configurations."""
    by = {(c.config, c.threads): c for c in cells}
    levels = sorted({c.threads for c in cells if c.config in ASYNC_CONFIGS})
    repeats = len(cells[0].runs)
    lines = [
        f"Durable aput/s from coroutines on one event loop, median of {repeats} runs of "
        f"{seconds:g} s each",
        "",
        "| coroutines | deltalog aput | AsyncSqliteSaver | deltalog / AsyncSqliteSaver "
        "| puts per commit (deltalog) |",
        "|--:|--:|--:|--:|--:|",
    ]
    for n in levels:
        mine, peer = (by[(c, n)] for c in ASYNC_CONFIGS)
        per_commit = statistics.median(mine.puts_per_commit)
        lines.append(
            f"| {n} | {mine.median:,.0f} | {peer.median:,.0f} "
            f"| {mine.median / peer.median:.2f}x | {per_commit:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the table (and JSON when asked)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell (median)")
    parser.add_argument("--quick", action="store_true", help="0.5 s runs, 1 repeat")
    parser.add_argument("--json", type=Path, help="also write the raw runs here")
    args = parser.parse_args(argv)
    seconds, repeats = (0.5, 1) if args.quick else (args.seconds, args.repeats)
    settings = sqlite_settings()
    cells = measure(seconds, repeats)
    print(table(cells, settings, seconds))
    print()
    print(async_table(cells, seconds))
    if args.json:
        payload = {
            "seconds": seconds,
            "repeats": repeats,
            "sqlite": settings,
            "cells": [{**asdict(c), "median": c.median} for c in cells],
        }
        args.json.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
