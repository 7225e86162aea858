"""The CPU a turn of a short thread takes, per saver, and how much of it the saver's calls take (issue 18.4).

``python -m deltalog.bench.turn_cpu`` runs the benchmark's ``DeltaChannel``
sf=100 chat as the throughput scenario does, on young threads (``--threads``
threads of ``--turns`` turns each, one thread after the other, or shared by
``--concurrent`` OS threads running at once), on each saver in turn,
``--rounds`` times with the savers' order rotated, each round on a fresh
store. Per saver it reports:

* **CPU a turn**: the process's CPU time (every thread: LangGraph runs
  ``put`` on a worker thread with ``durability="async"``) over the round,
  divided by its turns; median of the rounds. With one core busy at a time
  (the GIL), a saver's turns per second on many threads is about the inverse
  of this, so the ratio to InMemorySaver's is the throughput target's ratio
  without the threads' contention;
* **wall a turn** and **turns/s**: the same for elapsed time (with
  ``--concurrent 16``, the throughput scenario's graph turns at 16 threads);
* **in the saver's calls**: the thread CPU of the saver's own methods
  (:class:`~deltalog.bench.profile.SaverTimer` with ``time.thread_time``:
  outermost calls on any thread), a turn, over all rounds, and per call of
  ``put``, ``put_writes``, ``get_tuple`` and ``get_delta_channel_history``.

Sync savers only (``memory``, ``deltalog``, ``deltalog-normal``, ``sqlite``, ``lmdb``): an async
saver's calls run on its event loop, which this script does not drive.
Example::

    python -m deltalog.bench.turn_cpu --savers memory,deltalog,sqlite --durability sync
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import cast

from deltalog.bench.graphs import MESSAGES, build_graph, human_message, thread_config
from deltalog.bench.peers import REGISTRY, PeerContext
from deltalog.bench.profile import SaverTimer
from deltalog.bench.scenarios import ChatScenario, delta
from langgraph.types import Durability

__all__ = ["TurnCpu", "main", "measure"]

#: The calls whose CPU a call is reported.
REPORTED = ("put", "put_writes", "get_tuple", "get_delta_channel_history")
DURABILITIES = ("async", "sync", "exit")


@dataclass(frozen=True)
class TurnCpu:
    """One saver's figures (see the module docstring); times in ms a turn unless named."""

    saver: str
    durability: str
    concurrent: int
    """OS threads running turns at once."""
    turns: int
    """Turns of each round."""
    cpu_ms: float
    """Process CPU a turn, median of the rounds."""
    wall_ms: float
    turns_per_s: float
    """Turns a second, median of the rounds."""
    rounds_cpu_ms: list[float]
    saver_cpu_ms: float
    """Thread CPU of the saver's calls a turn, over all rounds."""
    calls_per_turn: dict[str, float]
    cpu_us_per_call: dict[str, float]


def _round(
    name: str,
    scenario: ChatScenario,
    threads: int,
    concurrent: int,
    durability: str,
    tmp: Path,
) -> tuple[float, float, SaverTimer]:
    with REGISTRY[name].open(PeerContext(workdir=tmp, concurrency=concurrent)) as peer:
        graph = build_graph(scenario, peer.saver)
        # A first turn outside the count: imports, caches, the serde's first calls.
        graph.invoke({MESSAGES: [human_message(scenario, 0)]}, thread_config("warm-up"))
        errors: list[BaseException] = []

        def run(first: int) -> None:
            try:
                for t in range(first, threads, concurrent):
                    config = thread_config(f"young-{t}")
                    for turn in range(scenario.turns):
                        graph.invoke(
                            {MESSAGES: [human_message(scenario, turn)]},
                            config,
                            durability=cast(Durability, durability),
                        )
            except BaseException as exc:  # reported on the measuring thread
                errors.append(exc)

        timer = SaverTimer(peer.saver, clock=time.thread_time)
        try:
            workers = [threading.Thread(target=run, args=(i,)) for i in range(1, concurrent)]
            cpu, wall = time.process_time(), time.perf_counter()
            for worker in workers:
                worker.start()
            run(0)
            for worker in workers:
                worker.join()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        finally:
            timer.close()
        if errors:
            raise errors[0]
        return cpu, wall, timer


def measure(
    savers: Sequence[str] = ("memory", "deltalog"),
    durability: str = "async",
    threads: int = 40,
    turns: int = 10,
    rounds: int = 5,
    workdir: Path | None = None,
    concurrent: int = 1,
) -> list[TurnCpu]:
    """Measure every saver (see the module docstring); one :class:`TurnCpu` each, in order.

    Raises:
        ValueError: An unknown or async saver, a durability LangGraph does not
            know, or a count below 1.
    """
    unknown = [s for s in savers if s not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown saver(s) {unknown}; choose from {', '.join(REGISTRY)}")
    asynchronous = [s for s in savers if REGISTRY[s].is_async]
    if asynchronous:
        raise ValueError(f"async saver(s) {asynchronous}: turn_cpu measures sync savers only")
    if durability not in DURABILITIES:
        raise ValueError(f"durability {durability!r}; choose one of {', '.join(DURABILITIES)}")
    if min(threads, turns, rounds, concurrent) < 1:
        raise ValueError(
            "threads, turns, rounds and concurrent must be >= 1, got "
            f"{threads}, {turns}, {rounds}, {concurrent}"
        )
    if concurrent > threads:
        raise ValueError(
            f"concurrent {concurrent} is more than the {threads} threads a round; "
            "give at least as many threads"
        )
    scenario = ChatScenario(name="turn-cpu-chat-delta-sf100", field=delta(100), turns=turns)
    per_turn: dict[str, list[tuple[float, float]]] = {s: [] for s in savers}
    seconds: dict[str, dict[str, float]] = {s: {} for s in savers}
    calls: dict[str, dict[str, int]] = {s: {} for s in savers}
    order = list(savers)
    done = threads * turns
    with tempfile.TemporaryDirectory(prefix="deltalog-turn-cpu-", dir=workdir) as tmp:
        for r in range(rounds):
            k = r % len(order)
            for name in order[k:] + order[:k]:
                cpu, wall, timer = _round(
                    name, scenario, threads, concurrent, durability, Path(tmp) / f"{name}-{r}"
                )
                per_turn[name].append((cpu / done, wall / done))
                for method, used in timer.seconds.items():
                    seconds[name][method] = seconds[name].get(method, 0.0) + used
                    calls[name][method] = calls[name].get(method, 0) + timer.method_calls[method]
    out = []
    for name in savers:
        n = done * rounds
        out.append(
            TurnCpu(
                saver=name,
                durability=durability,
                concurrent=concurrent,
                turns=done,
                cpu_ms=statistics.median(c for c, _ in per_turn[name]) * 1e3,
                wall_ms=statistics.median(w for _, w in per_turn[name]) * 1e3,
                turns_per_s=statistics.median(1 / w for _, w in per_turn[name]),
                rounds_cpu_ms=[c * 1e3 for c, _ in per_turn[name]],
                saver_cpu_ms=sum(seconds[name].values()) / n * 1e3,
                calls_per_turn={m: c / n for m, c in sorted(calls[name].items())},
                cpu_us_per_call={
                    m: seconds[name][m] / calls[name][m] * 1e6
                    for m in REPORTED
                    if calls[name].get(m)
                },
            )
        )
    return out


def _table(results: Sequence[TurnCpu], reference: str = "memory") -> str:
    ref = next((r for r in results if r.saver == reference), None)
    lines = [
        f"| saver | CPU a turn | ÷ {reference} | wall a turn | turns/s | in the saver's calls "
        + "".join(f"| {m}, a call " for m in REPORTED)
        + "|",
        "|:---|" + "---:|" * (5 + len(REPORTED)),
    ]
    for r in results:
        ratio = f"{r.cpu_ms / ref.cpu_ms:.2f}×" if ref is not None and ref.cpu_ms else "–"
        per_call = "".join(
            f"| {r.cpu_us_per_call[m]:.0f} µs " if m in r.cpu_us_per_call else "| – "
            for m in REPORTED
        )
        lines.append(
            f"| {r.saver} | {r.cpu_ms:.2f} ms | {ratio} | {r.wall_ms:.2f} ms "
            f"| {r.turns_per_s:.0f} | {r.saver_cpu_ms:.2f} ms {per_call}|"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure, print a Markdown table (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(
        prog="python -m deltalog.bench.turn_cpu", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--savers", default="memory,deltalog", help="comma-separated, sync only")
    parser.add_argument("--durability", default="async", choices=DURABILITIES)
    parser.add_argument("--threads", type=int, default=40, help="young threads a round")
    parser.add_argument("--turns", type=int, default=10, help="turns of each thread")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each saver")
    parser.add_argument(
        "--concurrent", type=int, default=1, help="OS threads running the young threads at once"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    savers = [s.strip() for s in args.savers.split(",") if s.strip()]
    started = time.perf_counter()
    try:
        results = measure(
            savers,
            args.durability,
            args.threads,
            args.turns,
            args.rounds,
            concurrent=args.concurrent,
        )
    except ValueError as exc:
        parser.error(str(exc))
    print(
        f"DeltaChannel sf=100 chat, {args.threads} threads x {args.turns} turns a round "
        f"({args.concurrent} at once), "
        f'durability="{args.durability}", medians of {args.rounds} rounds '
        f"({time.perf_counter() - started:.0f} s)\n"
    )
    print(_table(results))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
