"""Where the time of a read or a turn goes: LangGraph's own work against the saver's (issue 18.3).

``python -m deltalog.bench.profile`` (or ``deltalog bench --profile``) builds
the 1,000-turn ``DeltaChannel`` sf=100 chat of the benchmark on
``DeltaLogSaver`` and on ``InMemorySaver`` in this process, then times, on
each, ``get_state``, ``list(get_state_history(limit=20))`` and ``invoke`` of
further turns:

* **wall**: the call, median of ``--repeats``;
* **in the saver**: the time spent inside the saver's own methods during the
  call (``get_tuple``, ``list``, ``get_delta_channel_history``, ``put``,
  ``put_writes``, ``get_next_version``), measured by wrapping those methods
  on the instance; calls made on other threads (LangGraph runs ``put`` on a
  background executor with ``durability="async"``) are counted apart;
* **LangGraph's own**: wall minus the saver's time on the calling thread —
  building channels, replaying the delta writes through the reducer,
  building ``StateSnapshot`` objects, running the graph;
* **cyclic GC**: the time Python's garbage collector ran during the call, on
  any thread (``gc.callbacks``), whichever side's allocations set it off.

A saver can only remove its own part, so ``LangGraph's own ÷ InMemorySaver's
wall`` is the lowest ratio to InMemorySaver any saver can reach for that call
(the "floor" column). ``--cprofile`` adds, per call and saver, the top
functions of a ``cProfile`` run of the calling thread, grouped by package.

The wrappers are instance attributes: with ``LANGGRAPH_STRICT_MSGPACK`` set,
LangGraph clones the saver per call (``with_allowlist``) and the clones'
calls run the original instance's methods, without the clone's allowlist.
Run the profile with that variable unset (the default).

Example::

    python -m deltalog.bench.profile --turns 1000 --repeats 7 --json profile.json
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import gc
import json
import pstats
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from deltalog.bench.graphs import MESSAGES, build_graph, human_message, thread_config
from deltalog.bench.peers import REGISTRY, PeerContext
from deltalog.bench.scenarios import ChatScenario, delta

__all__ = ["SAVER_METHODS", "OpTiming", "SaverTimer", "main", "profile_savers"]

#: The saver methods whose time counts as the saver's.
SAVER_METHODS = (
    "get_tuple",
    "list",
    "get_delta_channel_history",
    "put",
    "put_writes",
    "get_next_version",
)


class SaverTimer:
    """Wraps :data:`SAVER_METHODS` on one saver instance and adds up their time.

    Nested saver calls (a method calling another) are counted once, at the
    outermost call of each thread. Time on the thread that created the timer
    is ``own_thread``; time on any other thread is ``other_threads``; per
    method, ``seconds`` and ``method_calls``. ``clock`` measures the time
    (elapsed by default; ``time.thread_time`` for the calling thread's CPU).
    """

    def __init__(self, saver: Any, clock: Callable[[], float] = time.perf_counter) -> None:
        self._main = threading.get_ident()
        self._lock = threading.Lock()
        self._depth = threading.local()
        self._clock = clock
        self.own_thread = 0.0
        self.other_threads = 0.0
        self.calls = 0
        self.seconds: dict[str, float] = {}
        self.method_calls: dict[str, int] = {}
        self.gc_seconds = 0.0
        self._gc_start = 0.0
        gc.callbacks.append(self._on_gc)
        for name in SAVER_METHODS:
            method = getattr(saver, name, None)
            if callable(method):
                setattr(saver, name, self._wrap(method))

    def _on_gc(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc_seconds += time.perf_counter() - self._gc_start

    def close(self) -> None:
        """Stop timing garbage collections."""
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, "n", 0)
            self._depth.n = depth + 1
            start = self._clock()
            try:
                result = method(*args, **kwargs)
                if name_is_list and depth == 0:
                    # list() returns a generator: its work happens while it is consumed.
                    result = list(result)
                return result
            finally:
                self._depth.n = depth
                if depth == 0:
                    elapsed = self._clock() - start
                    with self._lock:
                        self.calls += 1
                        self.seconds[name] = self.seconds.get(name, 0.0) + elapsed
                        self.method_calls[name] = self.method_calls.get(name, 0) + 1
                        if threading.get_ident() == self._main:
                            self.own_thread += elapsed
                        else:
                            self.other_threads += elapsed

        name = method.__name__
        name_is_list = name == "list"
        return timed

    def reset(self) -> None:
        """Start a new measurement."""
        with self._lock:
            self.own_thread = self.other_threads = self.gc_seconds = 0.0
            self.calls = 0
            self.seconds, self.method_calls = {}, {}


@dataclass(frozen=True)
class OpTiming:
    """One call on one saver, medians over the repeats, in milliseconds.

    Attributes:
        op: ``get_state``, ``get_state_history`` or ``invoke``.
        saver: Registry name.
        wall_ms: The whole call.
        saver_ms: Inside the saver's methods, on the calling thread.
        saver_other_threads_ms: Inside the saver's methods, on other threads.
        langgraph_ms: ``wall_ms - saver_ms``: LangGraph's own work.
        gc_ms: Cyclic garbage collection during the call, any thread (part of
            the other figures: inside the saver or LangGraph's, wherever it ran).
        saver_calls: Saver method calls per call (outermost only).
        repeats: How many calls the medians are over.
        top: With ``--cprofile``: ``(package, seconds)`` of the calling
            thread's own time, largest first.
        functions: With ``--cprofile``: the 8 functions with the most own
            time, ``(package: file:function, seconds)``.
    """

    op: str
    saver: str
    wall_ms: float
    saver_ms: float
    saver_other_threads_ms: float
    langgraph_ms: float
    gc_ms: float
    saver_calls: float
    repeats: int
    top: list[tuple[str, float]]
    functions: list[tuple[str, float]]


def _package(filename: str, funcname: str) -> str:
    """The package a profiled function belongs to, for the grouping of ``--cprofile``."""
    if filename == "~":  # a C function: name it by what it is
        for key in ("lmdb", "zstd", "pickle", "msgpack", "deepcopy"):
            if key in funcname:
                return f"C: {key}"
        return "C: other builtins"
    for marker, package in (
        ("/deltalog/engine/", "deltalog"),
        ("/deltalog/channels/", "deltalog"),
        ("/engine/", "deltalog"),
        ("/langgraph/checkpoint/", "langgraph checkpoint (serde, base)"),
        ("/langgraph/", "langgraph"),
        ("/langchain_core/", "langchain_core (messages)"),
        ("/pydantic/", "pydantic"),
        ("/pydantic_core/", "pydantic"),
        ("/ormsgpack/", "C: msgpack"),
    ):
        if marker in filename:
            return package
    return "python stdlib / other"


def _grouped(
    profile: cProfile.Profile,
) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """Own time by package, and the 8 functions with the most own time."""
    stats = pstats.Stats(profile)
    totals: dict[str, float] = {}
    functions: list[tuple[str, float]] = []
    raw: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    for (filename, _line, funcname), (_cc, _nc, tottime, _ct, _callers) in raw.items():
        key = _package(filename, funcname)
        totals[key] = totals.get(key, 0.0) + tottime
        functions.append((f"{key}: {Path(filename).name}:{funcname}", round(tottime, 4)))
    by_package = sorted(((k, round(v, 4)) for k, v in totals.items()), key=lambda kv: -kv[1])
    return by_package, sorted(functions, key=lambda kv: -kv[1])[:8]


@contextlib.contextmanager
def _built(
    saver_name: str, scenario: ChatScenario, workdir: Path
) -> Iterator[tuple[Any, SaverTimer]]:
    with REGISTRY[saver_name].open(PeerContext(workdir=workdir)) as peer:
        graph = build_graph(scenario, peer.saver)
        config = thread_config("profile")
        for turn in range(scenario.turns):
            graph.invoke({MESSAGES: [human_message(scenario, turn)]}, config)
        timer = SaverTimer(peer.saver)
        try:
            yield graph, timer
        finally:
            timer.close()


class _Op:
    """One call on one saver's graph, timed repeatedly."""

    def __init__(self, op: str, saver: str, graph: Any, timer: SaverTimer, turns: int) -> None:
        self.op, self.saver, self.graph, self.timer = op, saver, graph, timer
        self.next_turn = [turns]
        self.walls: list[float] = []
        self.own: list[float] = []
        self.other: list[float] = []
        self.calls: list[float] = []
        self.gc: list[float] = []

    def call(self, scenario: ChatScenario) -> None:
        config = thread_config("profile")
        if self.op == "get_state":
            self.graph.get_state(config)
        elif self.op == "get_state_history":
            if not list(self.graph.get_state_history(config, limit=20)):
                raise RuntimeError(f"{self.saver}: get_state_history returned nothing")
        else:
            turn = self.next_turn[0]
            self.graph.invoke({MESSAGES: [human_message(scenario, turn)]}, config)
            self.next_turn[0] += 1

    def timed(self, scenario: ChatScenario) -> None:
        self.timer.reset()
        start = time.perf_counter()
        self.call(scenario)
        self.walls.append(time.perf_counter() - start)
        self.own.append(self.timer.own_thread)
        self.other.append(self.timer.other_threads)
        self.calls.append(self.timer.calls)
        self.gc.append(self.timer.gc_seconds)

    def result(self, scenario: ChatScenario, use_cprofile: bool) -> OpTiming:
        top: list[tuple[str, float]] = []
        functions: list[tuple[str, float]] = []
        if use_cprofile:
            profile = cProfile.Profile()
            profile.enable()
            self.call(scenario)
            profile.disable()
            top, functions = _grouped(profile)
        wall, saver = statistics.median(self.walls), statistics.median(self.own)
        return OpTiming(
            op=self.op,
            saver=self.saver,
            wall_ms=round(wall * 1000, 3),
            saver_ms=round(saver * 1000, 3),
            saver_other_threads_ms=round(statistics.median(self.other) * 1000, 3),
            langgraph_ms=round((wall - saver) * 1000, 3),
            gc_ms=round(statistics.median(self.gc) * 1000, 3),
            saver_calls=statistics.median(self.calls),
            repeats=len(self.walls),
            top=top,
            functions=functions,
        )


def profile_savers(
    turns: int = 1000,
    repeats: int = 7,
    savers: Sequence[str] = ("deltalog", "memory"),
    use_cprofile: bool = False,
    workdir: Path | None = None,
) -> list[OpTiming]:
    """Build the chat on each saver and time every call (see the module docstring).

    Every saver's thread is built first (one after the other, all in this
    process), then each call is repeated ``repeats`` times with the savers
    interleaved (order rotated per repeat), so a slow patch of a shared
    machine hits all of them alike.

    Args:
        turns: Turns of the ``DeltaChannel`` sf=100 chat before the calls.
        repeats: Calls per (call, saver); medians are reported.
        savers: Registry names.
        use_cprofile: Also profile one call of each with ``cProfile``.
        workdir: Where stores are created (system temp by default).

    Returns:
        One :class:`OpTiming` per (call, saver), grouped by saver in the
        order given: ``get_state``, ``get_state_history``, ``invoke``.
    """
    scenario = ChatScenario(name="profile-chat-delta-sf100", field=delta(100), turns=turns)
    ops_by_name: dict[str, dict[str, _Op]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="deltalog-profile-", dir=workdir) as tmp,
        contextlib.ExitStack() as stack,
    ):
        for name in savers:
            graph, timer = stack.enter_context(_built(name, scenario, Path(tmp) / name))
            ops_by_name[name] = {
                op: _Op(op, name, graph, timer, turns)
                for op in ("get_state", "get_state_history", "invoke")
            }
        order = list(savers)
        for op in ("get_state", "get_state_history", "invoke"):
            for r in range(repeats):
                k = r % len(order)
                for name in order[k:] + order[:k]:
                    ops_by_name[name][op].timed(scenario)
        return [
            ops_by_name[name][op].result(scenario, use_cprofile)
            for name in savers
            for op in ("get_state", "get_state_history", "invoke")
        ]


def _table(timings: Sequence[OpTiming], reference: str = "memory") -> str:
    ref = {t.op: t for t in timings if t.saver == reference}
    lines = [
        "| call | saver | wall | in the saver | in the saver, other threads "
        f"| LangGraph's own | cyclic GC | saver calls | wall ÷ {reference} "
        f"| floor (LangGraph's own ÷ {reference} wall) |",
        "|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in timings:
        r = ref.get(t.op)
        ratio = f"{t.wall_ms / r.wall_ms:.2f}×" if r and r.wall_ms else "–"
        floor = f"{t.langgraph_ms / r.wall_ms:.2f}×" if r and r.wall_ms else "–"
        lines.append(
            f"| {t.op} | {t.saver} | {t.wall_ms:.2f} ms | {t.saver_ms:.2f} ms "
            f"| {t.saver_other_threads_ms:.2f} ms | {t.langgraph_ms:.2f} ms "
            f"| {t.gc_ms:.2f} ms | {t.saver_calls:g} | {ratio} | {floor} |"
        )
    for t in timings:
        if t.top:
            parts = ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in t.top[:6])
            lines.append(f"\ncProfile, {t.op} on {t.saver} (own time by package): {parts}")
            lines.append(
                "  top functions: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in t.functions)
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the profile and print a Markdown table (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(
        prog="python -m deltalog.bench.profile", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--turns", type=int, default=1000, help="turns before the calls")
    parser.add_argument("--repeats", type=int, default=7, help="calls per (call, saver)")
    parser.add_argument(
        "--savers", default="deltalog,memory", help="comma-separated registry names"
    )
    parser.add_argument("--cprofile", action="store_true", help="add a cProfile breakdown")
    parser.add_argument("--json", type=Path, help="also write the timings here")
    args = parser.parse_args(argv)
    if args.turns < 1 or args.repeats < 1:
        parser.error(f"--turns and --repeats must be >= 1, got {args.turns} and {args.repeats}")
    savers = [s.strip() for s in args.savers.split(",") if s.strip()]
    unknown = [s for s in savers if s not in REGISTRY]
    if unknown:
        parser.error(f"unknown saver(s) {', '.join(unknown)}; choose from {', '.join(REGISTRY)}")
    started = time.perf_counter()
    timings = profile_savers(args.turns, args.repeats, savers, args.cprofile)
    print(
        f"{args.turns}-turn DeltaChannel sf=100 chat, medians of {args.repeats} calls "
        f"({time.perf_counter() - started:.0f} s)\n"
    )
    print(_table(timings))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(t) for t in timings], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
