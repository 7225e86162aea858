"""Maintenance figures: copy a long DeltaChannel thread, prune it, compact the store.

Run ``python -m deltalog.bench.maintenance [--checkpoints N] [--workdir DIR]``.
It builds one chat thread of the benchmark's long-chat scenario (messages as a
DeltaChannel, snapshot every 100 updates) until it holds N checkpoints, then
times ``copy_thread``, a ``prune`` dry run, ``prune`` without and with
reducers (each on its own copy), and ``compact``, and checks that every kept
state is unchanged and that ``verify()`` is clean. Times are single runs of
operations that take hundreds of milliseconds: read them as magnitudes.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import click
from deltalog.bench import graphs
from deltalog.bench.scenarios import quick_plan
from deltalog.engine import DeltaLogSaver

__all__ = ["main", "run"]


def _timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, (time.perf_counter() - start) * 1000


def run(checkpoints: int, workdir: Path) -> dict[str, Any]:
    """Build a thread of at least ``checkpoints`` checkpoints and measure maintenance on it.

    Args:
        checkpoints: Checkpoints the source thread must reach.
        workdir: Folder for the stores.

    Returns:
        The figures, JSON-ready.

    Raises:
        AssertionError: A kept state changed or ``verify()`` found an error.
    """
    scenario = next(s for s in quick_plan().chat if s.name == "chat-delta-sf100")
    out: dict[str, Any] = {}
    with DeltaLogSaver.from_path(workdir / "store.lmdb", durable=False) as saver:
        graph = graphs.build_graph(scenario, saver)
        source = graphs.thread_config("big")
        turn, start = 0, time.perf_counter()

        def count() -> int:  # plain and packed (stats() counts database entries)
            return sum(t.checkpoints for t in saver.threads())

        while count() < checkpoints:
            graph.invoke({"messages": [graphs.human_message(scenario, turn)]}, source)
            turn += 1
        out["build"] = {
            "turns": turn,
            "checkpoints": count(),
            "seconds": round(time.perf_counter() - start, 1),
            "file_bytes": saver.env.file_bytes(),
        }
        latest = graph.get_state(source).values["messages"]
        report, ms = _timed(lambda: saver.copy_thread("big", "copy"))
        out["copy_thread"] = {
            "ms": round(ms),
            **report.to_dict(),
            "file_bytes": saver.env.file_bytes(),
        }
        dry, ms = _timed(lambda: saver.prune(["copy"], dry_run=True))
        out["prune_dry_run"] = {"ms": round(ms), **dry.to_dict()}
        pruned, ms = _timed(lambda: saver.prune(["copy"]))
        out["prune_keep_latest"] = {"ms": round(ms), **pruned.to_dict()}
        assert graph.get_state(graphs.thread_config("copy")).values["messages"] == latest
        saver.copy_thread("big", "copy2")
        reseeded, ms = _timed(lambda: saver.prune(["copy2"], reducers=graph))
        out["prune_keep_latest_reducers"] = {"ms": round(ms), **reseeded.to_dict()}
        assert graph.get_state(graphs.thread_config("copy2")).values["messages"] == latest
        saver.delete_thread("copy")
        compacted, ms = _timed(lambda: saver.compact(workdir / "compacted.lmdb"))
        out["compact"] = {"ms": round(ms), **compacted.to_dict()}
        verdict = saver.verify()
        assert verdict.ok, verdict.problems
        out["verify_ok"] = verdict.ok
    return out


@click.command()
@click.option("--checkpoints", default=10_000, show_default=True, help="Size of the source thread.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the stores go (a temporary folder by default; use a real disk).",
)
def main(checkpoints: int, workdir: Path | None) -> None:
    """Copy, prune and compact a long DeltaChannel thread; print the figures as JSON."""
    if workdir is None:
        with tempfile.TemporaryDirectory() as tmp:
            click.echo(json.dumps(run(checkpoints, Path(tmp)), indent=1))
    else:
        workdir.mkdir(parents=True, exist_ok=True)
        click.echo(json.dumps(run(checkpoints, workdir), indent=1))


if __name__ == "__main__":
    main()
