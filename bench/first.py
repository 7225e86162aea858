"""The engine-core benchmark: a 1,000-turn DeltaChannel chat on three savers.

Run ``python -m deltalog.bench.first [--turns N]``. DeltaLogSaver, InMemorySaver
and SqliteSaver (a file in WAL mode) run the benchmark's long-chat scenario
(``messages`` as a DeltaChannel, snapshot every 100 updates) in one process,
turn by turn in rotating order, and then each answers ``get_state`` 21 times
in a row. Printed per saver: bytes stored, bytes added per turn over the last
100 turns, median invoke latency, median ``get_state`` latency at the end, and
each figure as a ratio to SqliteSaver measured in the same run.

Unlike ``deltalog bench``, which interleaves ``get_state`` with
``get_state_history`` calls (and so pays for the garbage those leave behind),
this times ``get_state`` alone, as the engine-core issue specifies.
"""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from deltalog.bench import graphs
from deltalog.bench.peers import memory_saver_bytes, sqlite_bytes
from deltalog.bench.scenarios import quick_plan
from deltalog.engine import DeltaLogSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

__all__ = ["main", "run"]


def run(turns: int, workdir: Path) -> dict[str, dict[str, float]]:
    """Run the chat on the three savers; return their figures.

    Args:
        turns: Chat turns.
        workdir: Folder for the DeltaLogSaver store and the SQLite file.

    Returns:
        Saver name → figures (bytes, bytes per turn over the last 100 turns,
        median invoke and get_state milliseconds).
    """
    scenario = next(s for s in quick_plan().chat if s.name == "chat-delta-sf100").with_turns(turns)
    conn = sqlite3.connect(workdir / "sqlite.db", check_same_thread=False)
    savers: dict[str, Any] = {
        "deltalog": DeltaLogSaver.from_path(workdir / "deltalog.lmdb"),
        "memory": InMemorySaver(),
        "sqlite": SqliteSaver(conn),
    }

    def sqlite_size() -> int:
        conn.commit()
        return sqlite_bytes(workdir / "sqlite.db")

    sizes: dict[str, Callable[[], int]] = {
        "deltalog": savers["deltalog"].env.used_bytes,
        "memory": lambda: memory_saver_bytes(savers["memory"]),
        "sqlite": sqlite_size,
    }
    compiled = {name: graphs.build_graph(scenario, saver) for name, saver in savers.items()}
    config = graphs.thread_config("chat")
    invoke: dict[str, list[float]] = {name: [] for name in savers}
    before_last_100: dict[str, int] = {}
    names = list(savers)
    try:
        for turn in range(turns):
            if turn == max(turns - 100, 0):
                before_last_100 = {name: sizes[name]() for name in names}
            for name in names[turn % 3 :] + names[: turn % 3]:
                start = time.perf_counter()
                compiled[name].invoke({"messages": [graphs.human_message(scenario, turn)]}, config)
                invoke[name].append(time.perf_counter() - start)
        out: dict[str, dict[str, float]] = {}
        for name in names:
            samples = []
            for _ in range(21):
                start = time.perf_counter()
                compiled[name].get_state(config)
                samples.append(time.perf_counter() - start)
            stored = sizes[name]()
            out[name] = {
                "bytes": stored,
                "bytes_per_turn_last_100": (stored - before_last_100[name]) / min(100, turns),
                "invoke_p50_ms": statistics.median(invoke[name]) * 1000,
                "get_state_p50_ms": statistics.median(samples) * 1000,
            }
        return out
    finally:
        savers["deltalog"].close()
        conn.close()


@click.command()
@click.option("--turns", default=1000, show_default=True, help="Chat turns.")
def main(turns: int) -> None:
    """Print bytes, bytes/turn (last 100), invoke p50 and get_state p50 for three savers."""
    with tempfile.TemporaryDirectory() as tmp:
        figures = run(turns, Path(tmp))
    base = figures["sqlite"]
    click.echo(f"{turns} turns, DeltaChannel sf=100 (ratios to SqliteSaver in brackets)")
    for name, f in figures.items():
        click.echo(
            f"{name:9s} stored {f['bytes'] / 1e6:7.2f} MB ({f['bytes'] / base['bytes']:.3f}x)  "
            f"last-100 {f['bytes_per_turn_last_100'] / 1e3:6.2f} KB/turn "
            f"({f['bytes_per_turn_last_100'] / base['bytes_per_turn_last_100']:.3f}x)  "
            f"invoke p50 {f['invoke_p50_ms']:6.2f} ms ({f['invoke_p50_ms'] / base['invoke_p50_ms']:.2f}x)  "
            f"get_state p50 {f['get_state_p50_ms']:6.2f} ms "
            f"({f['get_state_p50_ms'] / base['get_state_p50_ms']:.2f}x)"
        )


if __name__ == "__main__":
    main()
