"""Interleaved measurement of every saver on the same workload in the same run.

How a chat scenario is measured
-------------------------------
Each saver gets its own worker — by default a separate process started with
``spawn`` (so its peak RSS is its own and one saver's heap never slows another's
garbage collector), or an object in this process with ``isolation="inprocess"``
(tests, debugging; no RSS figure then). The coordinator drives the workers one
at a time, so only one saver ever runs and they never compete for the 2 cores:

1. For each turn ``t`` it asks every saver, in an order rotated by ``t`` (so no
   saver is always first after a pause), to ``invoke`` the graph once; the
   worker times the call itself with ``perf_counter``. After the turns listed
   by :meth:`ChatScenario.sample_turns` it also asks for the stored bytes (not
   part of the timing).
2. After the last turn it times, again interleaved and repeated
   ``read_repeats`` times, ``get_state``, ``get_state_history(limit=20)`` and
   ``get_delta_channel_history`` of the latest checkpoint; medians and p95 are
   reported, never a single time.
3. It fetches each saver's final ``messages`` and compares them with
   :func:`~deltalog.bench.graphs.expected_messages`, computed without any
   saver. A mismatch — or any saver raising — is a failure of the whole run.

Peak RSS is the worker process's ``VmHWM`` (Linux; ``ru_maxrss`` elsewhere),
read after the final reads, next to its RSS after imports and graph compile.

Throughput runs one worker per saver too, one saver and one concurrency level
at a time, each round on a fresh store: graph turns (checkpoints/s of whole
``invoke`` calls) and then raw durable writes (``put`` calls/s, no graph), both
interleaved across savers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as _dt
import multiprocessing
import multiprocessing.connection
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, Literal, Protocol

from deltalog.bench.graphs import (
    MESSAGES,
    CanonicalMessage,
    build_graph,
    canonical,
    content_floor,
    expected_messages,
    human_message,
    thread_config,
)
from deltalog.bench.group_commit import aput_step, put_step
from deltalog.bench.peers import REGISTRY, OpenPeer, PeerContext, PeerSpec
from deltalog.bench.scenarios import (
    BenchPlan,
    ChatScenario,
    MultiProcessScenario,
    ThroughputScenario,
)
from langchain_core.runnables import RunnableConfig

__all__ = [
    "BenchResult",
    "ChatResult",
    "LatencyStats",
    "MultiProcessPoint",
    "MultiProcessResult",
    "ProgressSink",
    "RunOptions",
    "SaverChatResult",
    "ThroughputPoint",
    "ThroughputResult",
    "ThroughputRound",
    "WorkerError",
    "multiprocess_failures",
    "percentile",
    "run_bench",
    "run_multiprocess",
]

Isolation = Literal["process", "inprocess"]

#: Width of the "early" and "late" invoke-latency windows, in turns.
LATENCY_WINDOW = 50


class WorkerError(RuntimeError):
    """A saver raised (or its worker process died) while being measured."""


# --------------------------------------------------------------------------- results


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) with linear interpolation between ranks.

    Raises:
        ValueError: If ``values`` is empty.
    """
    if not values:
        raise ValueError("percentile of an empty sequence")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class LatencyStats:
    """Percentiles of a set of timings, in milliseconds.

    Attributes:
        p50_ms: Median.
        p95_ms: 95th percentile.
        n: Number of timings.
    """

    p50_ms: float
    p95_ms: float
    n: int

    @classmethod
    def of_seconds(cls, seconds: Sequence[float]) -> LatencyStats:
        """Build from timings in seconds."""
        ms = [s * 1000.0 for s in seconds]
        return cls(p50_ms=percentile(ms, 50), p95_ms=percentile(ms, 95), n=len(ms))


@dataclass
class SaverChatResult:
    """What one saver did in one chat scenario.

    Attributes:
        saver: Registry name.
        label: Display name.
        error: The traceback if the saver raised; the run then fails.
        invoke_ms: Latency of every turn's ``invoke`` in order, milliseconds.
        bytes_series: ``[turn, bytes]`` pairs at the sampled turns.
        total_bytes: Stored bytes after the last turn.
        bytes_per_turn_last100: Bytes added per turn over the last 100 turns
            (over the whole run when it is shorter).
        invoke_early: Invoke latency over the first 50 turns.
        invoke_late: Invoke latency over the last 50 turns.
        get_state: ``get_state`` of the latest checkpoint.
        history: ``list(get_state_history(limit=...))``.
        delta_history: ``get_delta_channel_history`` of the latest checkpoint
            (DeltaChannel scenarios only).
        rss_baseline_bytes: Worker RSS after imports and compile, before turn 1.
        rss_peak_bytes: Worker peak RSS over the scenario.
        floor_ratio_last100: ``bytes_per_turn_last100`` divided by the content
            floor over the same turns (:func:`~deltalog.bench.graphs.content_floor`).
        rss_peak_vs_memory: ``rss_peak_bytes`` divided by InMemorySaver's in the
            same run (``None`` when InMemorySaver did not run or RSS was not measured).
        correct: Whether the final ``messages`` equal the expected ones.
        mismatch: How they differ, when they do.
        bytes_per_turn_early: Bytes added per turn over the early window of
            :meth:`~deltalog.bench.scenarios.ChatScenario.scale_windows`
            (turns 900–1,000 of a 10,000-turn run); ``None`` under 1,000 turns.
        bytes_per_turn_late: The same over the late window (turns 9,000–10,000).
        scale_ratio: ``bytes_per_turn_late / bytes_per_turn_early`` (issue
            18.5: flat storage per turn means about 1).
        free_series: ``[turn, bytes]`` of the stored bytes free for reuse
            (LMDB's free list) at the sampled turns, for stores that report
            them (:class:`~deltalog.bench.peers.OpenPeer` ``free_fn``).
        held_scale_ratio: :attr:`scale_ratio` over the bytes the databases hold
            (stored less free): the same windows without the free list's share.
    """

    saver: str
    label: str
    error: str | None = None
    invoke_ms: list[float] = field(default_factory=list)
    bytes_series: list[tuple[int, int]] = field(default_factory=list)
    total_bytes: int | None = None
    bytes_per_turn_last100: float | None = None
    invoke_early: LatencyStats | None = None
    invoke_late: LatencyStats | None = None
    get_state: LatencyStats | None = None
    history: LatencyStats | None = None
    delta_history: LatencyStats | None = None
    rss_baseline_bytes: int | None = None
    rss_peak_bytes: int | None = None
    floor_ratio_last100: float | None = None
    rss_peak_vs_memory: float | None = None
    correct: bool | None = None
    mismatch: str | None = None
    bytes_per_turn_early: float | None = None
    bytes_per_turn_late: float | None = None
    scale_ratio: float | None = None
    free_series: list[tuple[int, int]] = field(default_factory=list)
    held_scale_ratio: float | None = None


@dataclass
class ChatResult:
    """One chat scenario across all savers.

    Attributes:
        scenario: Scenario name.
        description: What the workload is, in one line.
        field: ``add_messages`` or ``DeltaChannel sf=N``.
        turns: Number of turns run.
        history_limit: ``limit`` of the measured ``get_state_history``.
        expected_messages: Number of messages a correct final state holds.
        savers: Per-saver results, by registry name, in the order given.
        content_floor_last100: Mean content floor per turn (zstd level 3 of the
            turn's new message text alone) over the turns that
            ``bytes_per_turn_last100`` spans.
        content_floor_total: The content floor summed over every turn.
        skipped_peers: Savers of the run left out of this scenario
            (``skip_peers``, e.g. by ``--quick``).
    """

    scenario: str
    description: str
    field: str
    turns: int
    history_limit: int
    expected_messages: int
    savers: dict[str, SaverChatResult]
    content_floor_last100: float | None = None
    content_floor_total: int | None = None
    skipped_peers: list[str] = dataclasses.field(default_factory=list)


@dataclass(frozen=True)
class ThroughputRound:
    """One round of one saver at one concurrency level.

    Attributes:
        threads: Concurrent writers (OS threads, or asyncio tasks for async savers).
        turns: ``invoke`` calls completed.
        checkpoints: Checkpoints those calls wrote.
        seconds: Wall time of the round.
        invoke_s: Latency of every ``invoke``, seconds.
    """

    threads: int
    turns: int
    checkpoints: int
    seconds: float
    invoke_s: list[float]

    @property
    def checkpoints_per_s(self) -> float:
        """``checkpoints / seconds``."""
        return self.checkpoints / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class ThroughputPoint:
    """One saver at one concurrency level, over all its rounds.

    Attributes:
        threads: Concurrent writers (OS threads, or asyncio tasks for async savers).
        checkpoints_per_s: Median over the rounds.
        rounds_per_s: Checkpoints per second of each round, in run order.
        turns: ``invoke`` calls completed over all rounds.
        invoke: Latency of single ``invoke`` calls under this concurrency, all rounds.
    """

    threads: int
    checkpoints_per_s: float
    rounds_per_s: list[float]
    turns: int
    invoke: LatencyStats

    @classmethod
    def of_rounds(cls, rounds: Sequence[ThroughputRound]) -> ThroughputPoint:
        """Aggregate the rounds of one (saver, concurrency) pair."""
        rates = [r.checkpoints_per_s for r in rounds]
        latencies = [x for r in rounds for x in r.invoke_s]
        return cls(
            threads=rounds[0].threads,
            checkpoints_per_s=percentile(rates, 50),
            rounds_per_s=rates,
            turns=sum(r.turns for r in rounds),
            invoke=LatencyStats.of_seconds(latencies or [0.0]),
        )


@dataclass
class ThroughputResult:
    """The throughput scenario across all savers.

    Attributes:
        scenario: Scenario name.
        field: How ``messages`` is declared in the invoked graph.
        seconds: Budget of one round.
        repeats: Rounds per (saver, concurrency).
        threads: Concurrency levels measured.
        savers: Points per saver, by registry name: checkpoints per second
            of whole graph turns (LangGraph's work, reads and writes).
        errors: Traceback per saver that raised.
        puts: Points per saver for raw writes: each worker ``put``s (``aput``
            for async savers) a chain of checkpoints, a ~200-byte new value
            each, on its own thread id; no graph and no reads, so this is the
            saver's write throughput. ``checkpoints_per_s`` is puts per second.
        sync: Points per saver of graph turns invoked with
            ``durability="sync"``, at the levels of ``sync_threads``.
        skipped_peers: Savers of the run left out of this scenario.
    """

    scenario: str
    field: str
    seconds: float
    repeats: int
    threads: list[int]
    savers: dict[str, list[ThroughputPoint]]
    errors: dict[str, str]
    puts: dict[str, list[ThroughputPoint]] = dataclasses.field(default_factory=dict)
    sync: dict[str, list[ThroughputPoint]] = dataclasses.field(default_factory=dict)
    skipped_peers: list[str] = dataclasses.field(default_factory=list)


@dataclass(frozen=True)
class MultiProcessPoint:
    """One saver in the multi-process scenario, over all its rounds.

    Attributes:
        turns_per_s: Median over the rounds of acknowledged turns per second
            (all processes together, from the first start to the last end).
        rounds_per_s: Turns per second of each round, in run order.
        turns: Acknowledged turns over all rounds.
        errors: Invokes that raised, over all rounds (each stops its thread).
        problems: What the read-back found wrong: a thread whose final
            ``messages`` differ from the expected ones for its acknowledged
            turns, or an error's first line. Empty means every acknowledged
            turn is present, exactly once and in order.
    """

    turns_per_s: float
    rounds_per_s: list[float]
    turns: int
    errors: int
    problems: list[str]


@dataclass
class MultiProcessResult:
    """The multi-process scenario: ``processes`` × ``threads`` writers on one path.

    Attributes:
        scenario: Scenario name.
        field: How ``messages`` is declared in the invoked graph.
        processes: Worker processes sharing each store path.
        threads: Threads per process.
        seconds: Budget of one round.
        repeats: Rounds per saver.
        savers: One point per saver measured.
        failed: Traceback per saver whose round could not run at all.
    """

    scenario: str
    field: str
    processes: int
    threads: int
    seconds: float
    repeats: int
    savers: dict[str, MultiProcessPoint]
    failed: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclass
class BenchResult:
    """Everything one run measured; serialised as the JSON output.

    Attributes:
        meta: Machine, versions, options, wall time.
        peers: Per requested peer: label, durable, async, how bytes are
            measured, and why it was skipped if it was.
        chat: One entry per chat scenario.
        throughput: The throughput scenario, if it ran.
        failures: One line per failure (wrong state, saver error); non-empty
            means the run failed.
        multiprocess: The multi-process scenario, if it ran.
    """

    meta: dict[str, Any]
    peers: dict[str, dict[str, Any]]
    chat: list[ChatResult]
    throughput: ThroughputResult | None
    failures: list[str]
    multiprocess: MultiProcessResult | None = None

    @property
    def ok(self) -> bool:
        """Whether every saver ran and every final state was correct."""
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        """The result as JSON-compatible data."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchResult:
        """Rebuild a result from :meth:`to_json` output (e.g. a ``results.json``).

        Keys added by the report (``ratios``, ``targets``, ``ok``, …) are ignored.
        """

        def stats(value: dict[str, Any] | None) -> LatencyStats | None:
            return None if value is None else LatencyStats(**value)

        def saver(value: dict[str, Any]) -> SaverChatResult:
            fields = dict(value)
            for key in ("invoke_early", "invoke_late", "get_state", "history", "delta_history"):
                fields[key] = stats(fields.get(key))
            for key in ("bytes_series", "free_series"):
                fields[key] = [(int(t), int(b)) for t, b in fields.get(key, [])]
            return SaverChatResult(**fields)

        chat = [
            ChatResult(**{**c, "savers": {n: saver(r) for n, r in c["savers"].items()}})
            for c in data["chat"]
        ]

        def points(by_saver: dict[str, Any]) -> dict[str, list[ThroughputPoint]]:
            return {
                n: [ThroughputPoint(**{**p, "invoke": LatencyStats(**p["invoke"])}) for p in pts]
                for n, pts in by_saver.items()
            }

        throughput = None
        if (tp := data.get("throughput")) is not None:
            throughput = ThroughputResult(
                **{
                    **tp,
                    "savers": points(tp["savers"]),
                    "puts": points(tp.get("puts", {})),
                    "sync": points(tp.get("sync", {})),
                }
            )
        multiprocess = None
        if (mp := data.get("multiprocess")) is not None:
            multiprocess = MultiProcessResult(
                **{
                    **mp,
                    "savers": {n: MultiProcessPoint(**p) for n, p in mp["savers"].items()},
                }
            )
        return cls(
            meta=data["meta"],
            peers=data["peers"],
            chat=chat,
            throughput=throughput,
            failures=list(data["failures"]),
            multiprocess=multiprocess,
        )


# --------------------------------------------------------------------------- worker


def _read_proc_status_kib(key: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def peak_rss_bytes() -> int | None:
    """This process's peak resident set size in bytes.

    Linux: ``VmHWM`` from ``/proc/self/status``, which belongs to the current
    address space (``ru_maxrss`` would also carry the parent's peak across the
    fork+exec of a spawned worker). Elsewhere ``ru_maxrss``.
    """
    hwm = _read_proc_status_kib("VmHWM")
    if hwm is not None:
        return hwm
    try:
        import resource
    except ImportError:
        return None
    maxrss = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return maxrss if sys.platform == "darwin" else maxrss * 1024


def current_rss_bytes() -> int | None:
    """This process's resident set size now, in bytes (Linux only)."""
    return _read_proc_status_kib("VmRSS")


class SaverWorker:
    """One saver's side of the benchmark; lives in its own process or in-process.

    Every public method is one request from the coordinator and returns plain
    picklable data. Methods that time something time only the LangGraph call.

    Args:
        spec: The peer to measure.
        ctx: Where it may store data.
        measure_rss: Report RSS figures (only meaningful in a process of its own).
    """

    def __init__(self, spec: PeerSpec, ctx: PeerContext, *, measure_rss: bool) -> None:
        self.spec = spec
        self.ctx = ctx
        self.measure_rss = measure_rss
        self._stack = ExitStack()
        self._peer: OpenPeer | None = None
        self._graph: Any = None
        self._scenario: ChatScenario | None = None
        self._config: RunnableConfig = {}
        self._rss_baseline: int | None = None

    # -- chat ---------------------------------------------------------------

    def open_chat(self, scenario: ChatScenario) -> None:
        """Open a fresh store and compile the scenario's graph on it."""
        self._peer = self._stack.enter_context(self.spec.open(self.ctx))
        self._scenario = scenario
        self._graph = build_graph(scenario, self._peer.saver)
        self._config = thread_config(f"bench-{scenario.name}")
        self._rss_baseline = current_rss_bytes() if self.measure_rss else None

    def _run(self, coro_factory: Callable[[], Any], sync_call: Callable[[], Any]) -> Any:
        peer = self._require_peer()
        if peer.loop is not None:
            return peer.loop.run_until_complete(coro_factory())
        return sync_call()

    def _require_peer(self) -> OpenPeer:
        if self._peer is None:
            raise RuntimeError("open_chat() must be called first")
        return self._peer

    def _require_scenario(self) -> ChatScenario:
        if self._scenario is None:
            raise RuntimeError("open_chat() must be called first")
        return self._scenario

    def turn(self, turn: int) -> float:
        """Invoke the graph for 0-based ``turn``; returns the latency in seconds."""
        payload = {MESSAGES: [human_message(self._require_scenario(), turn)]}
        graph, config = self._graph, self._config
        start = time.perf_counter()
        self._run(lambda: graph.ainvoke(payload, config), lambda: graph.invoke(payload, config))
        return time.perf_counter() - start

    def stored_bytes(self) -> int:
        """Bytes the store occupies now (see :mod:`deltalog.bench.peers`)."""
        return self._require_peer().bytes_fn()

    def free_bytes(self) -> int | None:
        """Of :meth:`stored_bytes`, those free for reuse, when the store reports them."""
        free_fn = self._require_peer().free_fn
        return None if free_fn is None else free_fn()

    def time_get_state(self) -> float:
        """Seconds for one ``get_state`` of the thread's latest checkpoint."""
        graph, config = self._graph, self._config
        self._require_peer()
        start = time.perf_counter()
        self._run(lambda: graph.aget_state(config), lambda: graph.get_state(config))
        return time.perf_counter() - start

    def time_history(self, limit: int) -> float:
        """Seconds for ``list(get_state_history(limit=limit))``."""
        graph, config = self._graph, self._config
        self._require_peer()

        async def collect() -> list[Any]:
            return [s async for s in graph.aget_state_history(config, limit=limit)]

        start = time.perf_counter()
        states = self._run(collect, lambda: list(graph.get_state_history(config, limit=limit)))
        elapsed = time.perf_counter() - start
        if not states:
            raise WorkerError(f"{self.spec.name}: get_state_history returned no states")
        return elapsed

    def time_delta_history(self) -> float:
        """Seconds for ``get_delta_channel_history`` of the latest checkpoint."""
        peer = self._require_peer()
        saver, config = peer.saver, self._config
        latest = self._run(lambda: saver.aget_tuple(config), lambda: saver.get_tuple(config))
        if latest is None:
            raise WorkerError(f"{self.spec.name}: no checkpoint for {config}")
        target = latest.config
        start = time.perf_counter()
        self._run(
            lambda: saver.aget_delta_channel_history(config=target, channels=[MESSAGES]),
            lambda: saver.get_delta_channel_history(config=target, channels=[MESSAGES]),
        )
        return time.perf_counter() - start

    def final_messages(self) -> list[CanonicalMessage]:
        """The thread's final ``messages``, canonicalised for comparison."""
        graph, config = self._graph, self._config
        self._require_peer()
        state = self._run(lambda: graph.aget_state(config), lambda: graph.get_state(config))
        return canonical(state.values.get(MESSAGES, []))

    def rss(self) -> tuple[int | None, int | None]:
        """``(baseline, peak)`` RSS in bytes, or ``(None, None)`` when not measured."""
        if not self.measure_rss:
            return None, None
        return self._rss_baseline, peak_rss_bytes()

    # -- throughput ----------------------------------------------------------

    @contextmanager
    def _round_peer(self, prefix: str, threads: int) -> Iterator[OpenPeer]:
        """The saver on a fresh store for one round. The directory is removed after
        it: 64-thread rounds of every saver would otherwise pile up on disk until
        the run ends."""
        workdir = Path(tempfile.mkdtemp(prefix=f"{prefix}{threads}-", dir=self.ctx.workdir))
        ctx = dataclasses.replace(self.ctx, concurrency=threads, workdir=workdir)
        try:
            with self.spec.open(ctx) as peer:
                yield peer
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def throughput(
        self, scenario: ThroughputScenario, threads: int, durability: str | None = None
    ) -> ThroughputRound:
        """Run one throughput round on a fresh store; see :class:`ThroughputScenario`.

        ``durability`` is passed to every ``invoke`` (``None``: LangGraph's
        default, ``"async"``)."""
        chat = scenario.chat()
        kwargs: dict[str, Any] = {} if durability is None else {"durability": durability}
        with self._round_peer("tp", threads) as peer:
            graph = build_graph(chat, peer.saver)
            configs = [thread_config(f"tp-{threads}-{i}") for i in range(threads)]
            turns = [0] * threads
            latencies: list[list[float]] = [[] for _ in range(threads)]

            if peer.loop is None:

                def work(i: int, deadline: float) -> None:
                    while turns[i] < chat.turns and time.perf_counter() < deadline:
                        payload = {MESSAGES: [human_message(chat, turns[i])]}
                        start = time.perf_counter()
                        graph.invoke(payload, configs[i], **kwargs)
                        latencies[i].append(time.perf_counter() - start)
                        turns[i] += 1

                elapsed = _in_threads(threads, scenario.seconds, work)
            else:

                async def awork(i: int, deadline: float) -> None:
                    while turns[i] < chat.turns and time.perf_counter() < deadline:
                        payload = {MESSAGES: [human_message(chat, turns[i])]}
                        start = time.perf_counter()
                        await graph.ainvoke(payload, configs[i], **kwargs)
                        latencies[i].append(time.perf_counter() - start)
                        turns[i] += 1

                elapsed = peer.loop.run_until_complete(_in_tasks(threads, scenario.seconds, awork))
            # Count what was stored rather than assume 3 checkpoints per turn.
            stored = _count_checkpoints(peer, configs[0])
            per_turn = stored / turns[0] if turns[0] else 0.0
        total_turns = sum(turns)
        return ThroughputRound(
            threads=threads,
            turns=total_turns,
            checkpoints=round(per_turn * total_turns),
            seconds=elapsed,
            invoke_s=[x for lat in latencies for x in lat],
        )

    def puts(self, scenario: ThroughputScenario, threads: int) -> ThroughputRound:
        """One round of raw durable writes on a fresh store (``ThroughputResult.puts``)."""
        with self._round_peer("puts", threads) as peer:
            # put() needs the namespace in the config (a graph adds it itself).
            configs: list[RunnableConfig] = [
                {"configurable": {"thread_id": f"puts-{threads}-{i}", "checkpoint_ns": ""}}
                for i in range(threads)
            ]
            counts = [0] * threads
            if peer.loop is None:

                def work(i: int, deadline: float) -> None:
                    while time.perf_counter() < deadline:
                        configs[i] = put_step(peer.saver, configs[i], counts[i])
                        counts[i] += 1

                elapsed = _in_threads(threads, scenario.seconds, work)
            else:

                async def awork(i: int, deadline: float) -> None:
                    while time.perf_counter() < deadline:
                        configs[i] = await aput_step(peer.saver, configs[i], counts[i])
                        counts[i] += 1

                elapsed = peer.loop.run_until_complete(_in_tasks(threads, scenario.seconds, awork))
        done = sum(counts)
        return ThroughputRound(
            threads=threads, turns=done, checkpoints=done, seconds=elapsed, invoke_s=[]
        )

    def close(self) -> None:
        """Close the store (its files are removed by the coordinator)."""
        self._stack.close()
        self._peer = None


def _count_checkpoints(peer: OpenPeer, config: RunnableConfig) -> int:
    if peer.loop is None:
        return sum(1 for _ in peer.saver.list(config))

    async def count() -> int:
        return len([t async for t in peer.saver.alist(config)])

    return peer.loop.run_until_complete(count())


def _in_threads(n: int, seconds: float, work: Callable[[int, float], None]) -> float:
    """Run ``work(i, deadline)`` on ``n`` threads released together, ``deadline``
    being ``seconds`` after the release; return the wall time until the last one
    ends. The first exception a worker raised is raised here."""
    barrier = threading.Barrier(n + 1)
    deadline = [0.0]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            work(i, deadline[0])
        except BaseException as exc:  # raised below, in the caller's thread
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in workers:
        t.start()
    start = time.perf_counter()
    deadline[0] = start + seconds
    barrier.wait()
    for t in workers:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


async def _in_tasks(n: int, seconds: float, work: Callable[[int, float], Awaitable[None]]) -> float:
    """:func:`_in_threads` for coroutines on the running event loop."""
    start = time.perf_counter()
    await asyncio.gather(*(work(i, start + seconds) for i in range(n)))
    return time.perf_counter() - start


# --------------------------------------------------------------------------- multi-process

#: Savers whose store several processes can open at one path.
MULTIPROCESS_SAVERS = frozenset(
    {"deltalog", "deltalog-normal", "deltalog-nopack", "sqlite", "lmdb"}
)
#: Savers the multi-process scenario runs with a store of their own in each
#: process: InMemorySaver stores nothing, so its rate is the machine's ceiling
#: for the scenario (LangGraph's work alone in 4 processes), and each process
#: reads its own threads back before its saver is dropped.
MULTIPROCESS_PER_PROCESS = frozenset({"memory"})


@dataclass(frozen=True)
class _ProcessPart:
    """What one worker process did in one multi-process round."""

    acked: dict[str, int]
    errors: list[str]
    started: float
    ended: float


class MultiProcessWorker:
    """One process of the multi-process scenario: ``threads`` writers on a shared path.

    Driven by :func:`run_multiprocess` through :func:`_serve_multiprocess`;
    every method returns plain picklable data.
    """

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._graph: Any = None
        self._prefix = ""

    def prepare(
        self, saver: str, directory: str, scenario: MultiProcessScenario, index: int
    ) -> None:
        """Open ``saver`` on the store at ``directory`` and compile the graph."""
        self._stack.close()
        ctx = PeerContext(
            workdir=Path(directory).parent,
            concurrency=scenario.threads,
            shared_dir=Path(directory),
        )
        peer = self._stack.enter_context(REGISTRY[saver].open(ctx))
        self._graph = build_graph(scenario.chat(), peer.saver)
        self._prefix = f"mp-{index}"

    def go(self, scenario: MultiProcessScenario) -> _ProcessPart:
        """Run ``scenario.threads`` threads of turns for ``scenario.seconds``.

        A thread whose ``invoke`` raises records the traceback and stops: its
        later turns could not be checked against the expected messages.
        """
        chat, graph = scenario.chat(), self._graph
        thread_ids = [f"{self._prefix}-{i}" for i in range(scenario.threads)]
        acked = dict.fromkeys(thread_ids, 0)
        errors: list[str] = []

        def work(i: int, deadline: float) -> None:
            tid = thread_ids[i]
            config = thread_config(tid)
            while acked[tid] < chat.turns and time.perf_counter() < deadline:
                payload = {MESSAGES: [human_message(chat, acked[tid])]}
                try:
                    graph.invoke(payload, config)
                except Exception:
                    errors.append(f"{tid} turn {acked[tid]}: {traceback.format_exc()}")
                    return
                acked[tid] += 1

        started = time.perf_counter()
        _in_threads(scenario.threads, scenario.seconds, work)
        return _ProcessPart(acked, errors, started, time.perf_counter())

    def end(self) -> None:
        """Close the saver of this round."""
        self._stack.close()
        self._graph = None

    def verify(
        self, saver: str, directory: str, scenario: MultiProcessScenario, acked: dict[str, int]
    ) -> list[str]:
        """Reopen the store and compare every thread with its acknowledged turns.

        Returns:
            One line per thread whose final ``messages`` are not exactly the
            expected ones for its acknowledged turns; empty when all are.
        """
        chat = scenario.chat()
        ctx = PeerContext(workdir=Path(directory).parent, shared_dir=Path(directory))
        with REGISTRY[saver].open(ctx) as peer:
            return _read_back(build_graph(chat, peer.saver), chat, acked)

    def verify_open(self, scenario: MultiProcessScenario, acked: dict[str, int]) -> list[str]:
        """:meth:`verify` through the saver this process has open (a saver of
        :data:`MULTIPROCESS_PER_PROCESS`, whose store dies with it); before :meth:`end`."""
        if self._graph is None:
            raise WorkerError("verify_open called with no saver open; call prepare first")
        return _read_back(self._graph, scenario.chat(), acked)

    def close(self) -> None:
        """Close whatever is open."""
        self.end()


def _read_back(graph: Any, chat: ChatScenario, acked: dict[str, int]) -> list[str]:
    """One line per thread of ``acked`` whose ``messages`` in ``graph`` are not
    exactly the expected ones for its acknowledged turns; empty when all are."""
    want_by_turns: dict[int, list[CanonicalMessage]] = {}
    problems: list[str] = []
    for tid, turns in sorted(acked.items()):
        if turns not in want_by_turns:
            want_by_turns[turns] = canonical(expected_messages(chat, turns))
        want = want_by_turns[turns]
        got = canonical(graph.get_state(thread_config(tid)).values.get(MESSAGES, []))
        if got != want:
            problems.append(f"{tid} ({turns} turns acknowledged): " + _describe_mismatch(got, want))
    return problems


def _serve_multiprocess(
    conn: multiprocessing.connection.Connection, name: str, ctx: PeerContext
) -> None:
    """Entry point of a multi-process worker: answer requests until ``close``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _answer(conn, MultiProcessWorker())


def run_multiprocess(
    scenario: MultiProcessScenario,
    names: Sequence[str],
    options: RunOptions,
    ctx: PeerContext,
    progress: ProgressSink,
) -> MultiProcessResult:
    """Measure ``processes`` × ``threads`` writers on one store path, per saver.

    The worker processes are spawned once and reused by every round of every
    saver; each round opens the saver on a fresh path in every process (the
    first creates the store, the others then open it), starts them together,
    and afterwards reads every thread back (:meth:`MultiProcessWorker.verify`).
    A saver of :data:`MULTIPROCESS_PER_PROCESS` has a store in each process
    instead, read back by that process before it is dropped.

    Returns:
        One point per saver that is both in ``names`` and in ``scenario.savers``
        (and can share a path, or is measured per process); savers that could
        not run are in ``failed``.
    """
    runnable = MULTIPROCESS_SAVERS | MULTIPROCESS_PER_PROCESS
    savers = [n for n in scenario.savers if n in names and n in runnable]
    rounds: dict[str, list[float]] = {n: [] for n in savers}
    turns: dict[str, int] = dict.fromkeys(savers, 0)
    errors: dict[str, list[str]] = {n: [] for n in savers}
    problems: dict[str, list[str]] = {n: [] for n in savers}
    failed: dict[str, str] = {}
    result = MultiProcessResult(
        scenario=scenario.name,
        field=scenario.field.label,
        processes=scenario.processes,
        threads=scenario.threads,
        seconds=scenario.seconds,
        repeats=scenario.repeats,
        savers={},
        failed=failed,
    )
    if not savers:
        return result
    progress.start(f"{scenario.name}: rounds", scenario.repeats * len(savers))
    if options.isolation == "inprocess":
        failed.update(dict.fromkeys(savers, "the multi-process scenario needs isolation='process'"))
        return result
    with ExitStack() as stack:
        calls = [
            _PendingProcess(f"mp{i}", ctx, target=_serve_multiprocess)
            for i in range(scenario.processes)
        ]
        for proc in calls:
            stack.callback(proc._shutdown)
        try:
            for proc in calls:
                proc.ready()
        except WorkerError as exc:
            failed.update(dict.fromkeys(savers, str(exc)))
            return result
        for r in range(scenario.repeats):
            if failed:
                # A worker that failed mid-round may still owe replies: the
                # pipes are out of step, so the scenario stops here.
                break
            for name in _rotate(savers, r):
                if failed:
                    break
                directory = Path(tempfile.mkdtemp(prefix=f"mp-{name}-", dir=ctx.workdir)) / "store"
                try:
                    for i, proc in enumerate(calls):
                        proc._call("prepare", name, str(directory), scenario, i)
                    for proc in calls:
                        proc.conn.send(("go", (scenario,)))
                    parts: list[_ProcessPart] = [proc._receive() for proc in calls]
                    if name in MULTIPROCESS_PER_PROCESS:
                        for proc, part in zip(calls, parts, strict=True):
                            problems[name] += proc._call("verify_open", scenario, part.acked)
                    for proc in calls:
                        proc._call("end")
                    acked = {tid: n for part in parts for tid, n in part.acked.items()}
                    seconds = max(p.ended for p in parts) - min(p.started for p in parts)
                    done = sum(acked.values())
                    rounds[name].append(done / seconds if seconds > 0 else 0.0)
                    turns[name] += done
                    errors[name] += [e for p in parts for e in p.errors]
                    if name not in MULTIPROCESS_PER_PROCESS:
                        problems[name] += calls[0]._call(
                            "verify", name, str(directory), scenario, acked
                        )
                except WorkerError as exc:
                    failed[name] = str(exc)
                    progress.log(f"[red]{name} failed in {scenario.name}[/red]")
                finally:
                    shutil.rmtree(directory.parent, ignore_errors=True)
                progress.advance()
    for name in savers:
        if name in failed or not rounds[name]:
            continue
        result.savers[name] = MultiProcessPoint(
            turns_per_s=percentile(rounds[name], 50),
            rounds_per_s=rounds[name],
            turns=turns[name],
            errors=len(errors[name]),
            problems=problems[name] + [e.strip().splitlines()[-1] for e in errors[name]],
        )
    return result


def multiprocess_failures(result: MultiProcessResult) -> list[str]:
    """One line per saver of the multi-process scenario that raised, lost a turn or
    could not run; empty when every acknowledged turn of every saver is present."""
    lines = [f"{result.scenario}: {n} raised: {err.strip()}" for n, err in result.failed.items()]
    for name, point in result.savers.items():
        if point.errors:
            lines.append(f"{result.scenario}: {name} had {point.errors} failed invokes")
        for problem in point.problems:
            lines.append(f"{result.scenario}: {name}: {problem}")
    return lines


# --------------------------------------------------------------------------- transport


def _serve(conn: multiprocessing.connection.Connection, name: str, ctx: PeerContext) -> None:
    """Entry point of a worker process: answer ``(method, args)`` requests until ``close``."""
    # Ctrl-C reaches the whole process group: the coordinator handles it and
    # closes this worker (EOF on the pipe), so no traceback is printed here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        worker = SaverWorker(REGISTRY[name], ctx, measure_rss=True)
    except BaseException:
        with contextlib.suppress(OSError):
            conn.send(("error", traceback.format_exc()))
        return
    _answer(conn, worker)


def _answer(conn: multiprocessing.connection.Connection, worker: Any) -> None:
    """Tell the coordinator the worker is up, then answer its ``(method, args)``
    requests until ``close`` or EOF. A coordinator gone mid-reply (Ctrl-C
    closed the pipe) ends it quietly: no traceback from a worker."""
    try:
        conn.send(("ok", None))
        while True:
            try:
                method, args = conn.recv()
            except EOFError:
                worker.close()
                return
            try:
                reply: tuple[str, Any] = ("ok", getattr(worker, method)(*args))
            except BaseException:
                reply = ("error", traceback.format_exc())
            conn.send(reply)
            if method == "close":
                return
    except OSError:
        with contextlib.suppress(Exception):
            worker.close()


class _Transport(Protocol):
    def __call__(self, method: str, *args: Any) -> Any: ...


class WorkerHandle:
    """The coordinator's typed view of one :class:`SaverWorker`, local or remote."""

    def __init__(self, name: str, call: _Transport, shutdown: Callable[[], None]) -> None:
        self.name = name
        self._call = call
        self._shutdown = shutdown

    def open_chat(self, scenario: ChatScenario) -> None:
        """See :meth:`SaverWorker.open_chat`."""
        self._call("open_chat", scenario)

    def turn(self, turn: int) -> float:
        """See :meth:`SaverWorker.turn`."""
        return float(self._call("turn", turn))

    def stored_bytes(self) -> int:
        """See :meth:`SaverWorker.stored_bytes`."""
        return int(self._call("stored_bytes"))

    def free_bytes(self) -> int | None:
        """See :meth:`SaverWorker.free_bytes`."""
        free = self._call("free_bytes")
        return None if free is None else int(free)

    def time_get_state(self) -> float:
        """See :meth:`SaverWorker.time_get_state`."""
        return float(self._call("time_get_state"))

    def time_history(self, limit: int) -> float:
        """See :meth:`SaverWorker.time_history`."""
        return float(self._call("time_history", limit))

    def time_delta_history(self) -> float:
        """See :meth:`SaverWorker.time_delta_history`."""
        return float(self._call("time_delta_history"))

    def final_messages(self) -> list[CanonicalMessage]:
        """See :meth:`SaverWorker.final_messages`."""
        result: list[CanonicalMessage] = self._call("final_messages")
        return result

    def rss(self) -> tuple[int | None, int | None]:
        """See :meth:`SaverWorker.rss`."""
        baseline, peak = self._call("rss")
        return baseline, peak

    def throughput(
        self, scenario: ThroughputScenario, threads: int, durability: str | None = None
    ) -> ThroughputRound:
        """See :meth:`SaverWorker.throughput`."""
        result: ThroughputRound = self._call("throughput", scenario, threads, durability)
        return result

    def puts(self, scenario: ThroughputScenario, threads: int) -> ThroughputRound:
        """See :meth:`SaverWorker.puts`."""
        result: ThroughputRound = self._call("puts", scenario, threads)
        return result

    def close(self) -> None:
        """Close the store and stop the worker."""
        self._shutdown()


def _local_handle(spec: PeerSpec, ctx: PeerContext) -> WorkerHandle:
    worker = SaverWorker(spec, ctx, measure_rss=False)

    def call(method: str, *args: Any) -> Any:
        try:
            return getattr(worker, method)(*args)
        except WorkerError:
            raise
        except Exception as exc:
            raise WorkerError(f"{spec.name}: {traceback.format_exc()}") from exc

    return WorkerHandle(spec.name, call, worker.close)


class _PendingProcess:
    """A spawned worker process whose imports may still be running.

    Spawning every worker before waiting for any of them overlaps their
    ~1 s of imports on the two cores instead of paying them one after another.
    """

    def __init__(
        self,
        name: str,
        ctx: PeerContext,
        target: Callable[[multiprocessing.connection.Connection, str, PeerContext], None] = _serve,
    ) -> None:
        mp = multiprocessing.get_context("spawn")
        self.name = name
        self.conn, child = mp.Pipe()
        self.proc = mp.Process(
            target=target, args=(child, name, ctx), name=f"bench-{name}", daemon=True
        )
        # The child ignores Ctrl-C from its first instruction: an ignored signal
        # stays ignored across exec (and Python keeps it so), so a SIGINT that
        # reaches the group while the worker still imports prints no traceback.
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            self.proc.start()
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)
        child.close()

    def _receive(self) -> Any:
        try:
            status, value = self.conn.recv()
        except (EOFError, OSError) as exc:
            raise WorkerError(
                f"{self.name}: worker process exited (code {self.proc.exitcode})"
            ) from exc
        if status == "error":
            raise WorkerError(f"{self.name}: {value}")
        return value

    def _call(self, method: str, *args: Any) -> Any:
        try:
            self.conn.send((method, args))
        except (BrokenPipeError, OSError) as exc:
            raise WorkerError(
                f"{self.name}: worker process is gone (code {self.proc.exitcode})"
            ) from exc
        return self._receive()

    def _shutdown(self) -> None:
        try:
            if self.proc.is_alive():
                self._call("close")
        except WorkerError:
            pass
        finally:
            self.conn.close()
            self.proc.join(timeout=30)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()

    def ready(self) -> WorkerHandle:
        """Wait for the worker's hello and return its handle.

        Raises:
            WorkerError: If the worker could not start; it is stopped.
        """
        try:
            self._receive()
        except WorkerError:
            self._shutdown()
            raise
        return WorkerHandle(self.name, self._call, self._shutdown)


# --------------------------------------------------------------------------- coordinator


class ProgressSink(Protocol):
    """Where the runner reports progress (the CLI passes a rich adapter)."""

    def start(self, description: str, total: int) -> None:
        """A new phase with ``total`` steps begins."""

    def advance(self, steps: int = 1) -> None:
        """``steps`` steps of the current phase are done."""

    def log(self, message: str) -> None:
        """Print a line above the progress display."""


class _NoProgress:
    def start(self, description: str, total: int) -> None:
        pass

    def advance(self, steps: int = 1) -> None:
        pass

    def log(self, message: str) -> None:
        pass


@dataclass(frozen=True)
class RunOptions:
    """How to run a plan.

    Attributes:
        peers: Registry names of the savers to measure, in order.
        pg_dsn: PostgreSQL server for the ``postgres`` peer (``None``: skip it).
        workdir: Parent of the run's scratch directory (system temp by default).
        isolation: ``"process"`` (a spawned worker per saver; RSS measured) or
            ``"inprocess"`` (tests; no RSS).
        extra_peers: Peers not in :data:`~deltalog.bench.peers.REGISTRY`, by
            name (tests inject a deliberately wrong saver here); ``inprocess`` only.
    """

    peers: tuple[str, ...]
    pg_dsn: str | None = None
    workdir: Path | None = None
    isolation: Isolation = "process"
    extra_peers: dict[str, PeerSpec] = field(default_factory=dict)

    def spec(self, name: str) -> PeerSpec:
        """The :class:`PeerSpec` for ``name``.

        Raises:
            KeyError: If the name is neither registered nor an extra peer.
        """
        if name in self.extra_peers:
            return self.extra_peers[name]
        if name in REGISTRY:
            return REGISTRY[name]
        raise KeyError(f"unknown saver {name!r}; choose from {', '.join(REGISTRY)}")


def _rotate(names: Sequence[str], k: int) -> list[str]:
    if not names:
        return []
    k %= len(names)
    return [*names[k:], *names[:k]]


@contextmanager
def _handles(
    names: Sequence[str], options: RunOptions, ctx: PeerContext, failures: dict[str, str]
) -> Iterator[dict[str, WorkerHandle]]:
    handles: dict[str, WorkerHandle] = {}
    try:
        pending: dict[str, _PendingProcess] = {}
        for name in names:
            if options.isolation == "inprocess":
                handles[name] = _local_handle(options.spec(name), ctx)
            elif name in options.extra_peers:
                failures[name] = f"{name}: extra peers only run with isolation='inprocess'"
            else:
                pending[name] = _PendingProcess(name, ctx)
        for name, proc in pending.items():
            try:
                handles[name] = proc.ready()
            except WorkerError as exc:
                failures[name] = str(exc)
        yield handles
    finally:
        for handle in handles.values():
            handle.close()


def _describe_mismatch(got: list[CanonicalMessage], want: list[CanonicalMessage]) -> str:
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return (
                f"{len(got)} messages (expected {len(want)}); first difference at index {i}: "
                f"got {g[0]} id={g[1]!r} {g[2][:40]!r}…, expected {w[0]} id={w[1]!r} {w[2][:40]!r}…"
            )
    return f"{len(got)} messages, expected {len(want)} (one is a prefix of the other)"


def run_chat_scenario(
    scenario: ChatScenario,
    names: Sequence[str],
    options: RunOptions,
    ctx: PeerContext,
    progress: ProgressSink,
) -> ChatResult:
    """Measure one chat scenario on every saver, interleaved turn by turn.

    Args:
        scenario: The workload.
        names: Savers to measure (registry or extra names).
        options: Isolation and extra peers.
        ctx: Where stores are created.
        progress: Progress sink.

    Returns:
        The per-saver results; failures are recorded in them, not raised.
    """
    reference = expected_messages(scenario)
    want = canonical(reference)
    results = {n: SaverChatResult(saver=n, label=options.spec(n).label) for n in names}
    errors: dict[str, str] = {}
    samples = scenario.sample_turns()
    with _handles(names, options, ctx, errors) as handles:

        def guarded(name: str, action: Callable[[WorkerHandle], None]) -> None:
            if name in errors or name not in handles:
                return
            try:
                action(handles[name])
            except WorkerError as exc:
                errors[name] = str(exc)
                progress.log(f"[red]{name} failed in {scenario.name}[/red]")

        for name in names:
            guarded(name, lambda h: h.open_chat(scenario))

        progress.start(f"{scenario.name}: turns", scenario.turns)
        for t in range(scenario.turns):
            for name in _rotate(names, t):

                def one_turn(h: WorkerHandle, n: str = name, t: int = t) -> None:
                    results[n].invoke_ms.append(h.turn(t) * 1000.0)
                    if t + 1 in samples:
                        results[n].bytes_series.append((t + 1, h.stored_bytes()))
                        free = h.free_bytes()
                        if free is not None:
                            results[n].free_series.append((t + 1, free))

                guarded(name, one_turn)
            progress.advance()

        is_delta = scenario.field.kind == "delta"
        reads = scenario.read_repeats * (3 if is_delta else 2)
        progress.start(f"{scenario.name}: reads", reads * len(names))
        timings: dict[str, dict[str, list[float]]] = {
            n: {"get_state": [], "history": [], "delta": []} for n in names
        }
        for r in range(scenario.read_repeats):
            for name in _rotate(names, r):

                def reads_once(h: WorkerHandle, n: str = name) -> None:
                    timings[n]["get_state"].append(h.time_get_state())
                    timings[n]["history"].append(h.time_history(scenario.history_limit))
                    if is_delta:
                        timings[n]["delta"].append(h.time_delta_history())

                guarded(name, reads_once)
                progress.advance(3 if is_delta else 2)

        for name in names:

            def finish(h: WorkerHandle, n: str = name) -> None:
                got = h.final_messages()
                results[n].correct = got == want
                if got != want:
                    results[n].mismatch = _describe_mismatch(got, want)
                results[n].rss_baseline_bytes, results[n].rss_peak_bytes = h.rss()

            guarded(name, finish)

    floors = content_floor(scenario, reference)
    for name, res in results.items():
        res.error = errors.get(name)
        _summarise(res, scenario, timings[name])
        if res.bytes_per_turn_last100 is not None:
            res.floor_ratio_last100 = res.bytes_per_turn_last100 / _floor_last100(floors)
    memory_peak = results["memory"].rss_peak_bytes if "memory" in results else None
    for res in results.values():
        if res.rss_peak_bytes is not None and memory_peak:
            res.rss_peak_vs_memory = res.rss_peak_bytes / memory_peak
    return ChatResult(
        scenario=scenario.name,
        description=scenario.description,
        field=scenario.field.label,
        turns=scenario.turns,
        history_limit=scenario.history_limit,
        expected_messages=len(want),
        savers=results,
        content_floor_last100=_floor_last100(floors),
        content_floor_total=sum(floors),
    )


def _floor_last100(floors: Sequence[int]) -> float:
    """Mean floor over the turns ``bytes_per_turn_last100`` spans: the last 100, or
    turns 2..N of a run of at most 100 turns (bytes are first sampled after turn 1)."""
    span = floors[-100:] if len(floors) > 100 else floors[1:] or floors
    return sum(span) / len(span)


def _bytes_per_turn(series: Sequence[tuple[int, int]], first: int, last: int) -> float | None:
    """Bytes added per turn from after turn ``first`` to after turn ``last``, or
    ``None`` when either turn was not sampled."""
    at = dict(series)
    if first not in at or last not in at or last <= first:
        return None
    return (at[last] - at[first]) / (last - first)


def _summarise(
    res: SaverChatResult, scenario: ChatScenario, timings: dict[str, list[float]]
) -> None:
    if res.bytes_series:
        last_turn, res.total_bytes = res.bytes_series[-1]
        # sample_turns() always includes turns - 100, so the span is exactly
        # 100 turns on runs longer than that, and the whole run otherwise.
        earlier = [(t, b) for t, b in res.bytes_series if t <= last_turn - 100]
        base_turn, base_bytes = earlier[-1] if earlier else res.bytes_series[0]
        span = last_turn - base_turn
        res.bytes_per_turn_last100 = (res.total_bytes - base_bytes) / span if span else None
        windows = scenario.scale_windows()
        if windows is not None:
            early, late = (_bytes_per_turn(res.bytes_series, *w) for w in windows)
            res.bytes_per_turn_early, res.bytes_per_turn_late = early, late
            if early and late is not None:
                res.scale_ratio = late / early
            if res.free_series:
                free = dict(res.free_series)
                held = [(t, b - free[t]) for t, b in res.bytes_series if t in free]
                early, late = (_bytes_per_turn(held, *w) for w in windows)
                if early and late is not None:
                    res.held_scale_ratio = late / early
    if res.invoke_ms:
        window = min(LATENCY_WINDOW, max(1, len(res.invoke_ms) // 2))
        res.invoke_early = LatencyStats.of_seconds([x / 1000 for x in res.invoke_ms[:window]])
        res.invoke_late = LatencyStats.of_seconds([x / 1000 for x in res.invoke_ms[-window:]])
    if timings["get_state"]:
        res.get_state = LatencyStats.of_seconds(timings["get_state"])
    if timings["history"]:
        res.history = LatencyStats.of_seconds(timings["history"])
    if timings["delta"]:
        res.delta_history = LatencyStats.of_seconds(timings["delta"])


def run_throughput(
    scenario: ThroughputScenario,
    names: Sequence[str],
    options: RunOptions,
    ctx: PeerContext,
    progress: ProgressSink,
) -> ThroughputResult:
    """Measure checkpoints per second at each concurrency level, one saver at a time.

    Returns:
        Points per saver; a saver that raises is recorded in ``errors``.
    """
    errors: dict[str, str] = {}
    rounds: dict[tuple[str, str, int], list[ThroughputRound]] = {}
    # Per repeat, in order: graph turns and raw puts at each level, and graph
    # turns with durability="sync" right after the default ones of its level.
    jobs: list[tuple[str, int]] = []
    for threads in scenario.threads:
        jobs += [("graph", threads), ("puts", threads)]
        if threads in scenario.sync_threads:
            jobs.append(("sync", threads))
    jobs += [("sync", t) for t in scenario.sync_threads if t not in scenario.threads]

    def run(handle: WorkerHandle, kind: str, threads: int) -> ThroughputRound:
        if kind == "puts":
            return handle.puts(scenario, threads)
        return handle.throughput(scenario, threads, "sync" if kind == "sync" else None)

    with _handles(names, options, ctx, errors) as handles:
        total = scenario.repeats * len(jobs) * len(names)
        progress.start(f"{scenario.name}: rounds", total)
        step = 0
        for _ in range(scenario.repeats):
            for kind, threads in jobs:
                for name in _rotate(names, step):
                    if name in handles and name not in errors:
                        try:
                            rounds.setdefault((kind, name, threads), []).append(
                                run(handles[name], kind, threads)
                            )
                        except WorkerError as exc:
                            errors[name] = str(exc)
                            progress.log(f"[red]{name} failed in {scenario.name}[/red]")
                    progress.advance()
                step += 1

    def points(kind: str) -> dict[str, list[ThroughputPoint]]:
        levels = scenario.sync_threads if kind == "sync" else scenario.threads
        return {
            n: [
                ThroughputPoint.of_rounds(rounds[(kind, n, t)])
                for t in levels
                if (kind, n, t) in rounds and n not in errors
            ]
            for n in names
        }

    return ThroughputResult(
        scenario=scenario.name,
        field=scenario.field.label,
        seconds=scenario.seconds,
        repeats=scenario.repeats,
        threads=list(scenario.threads),
        savers=points("graph"),
        errors=errors,
        puts=points("puts"),
        sync=points("sync"),
    )


def _version(dist: str) -> str | None:
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return None


def _meta(plan: BenchPlan, options: RunOptions) -> dict[str, Any]:
    return {
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "isolation": options.isolation,
        "rss_method": (
            "VmHWM of each saver's own worker process"
            if options.isolation == "process"
            else "not measured (in-process run)"
        ),
        "scenarios": list(plan.names),
        "versions": {
            d: _version(d)
            for d in (
                "deltalog",
                "langgraph",
                "langgraph-checkpoint",
                "langgraph-checkpoint-sqlite",
                "langgraph-checkpoint-postgres",
                "langgraph-checkpoint-lmdb",
                "lmdb",
                "aiosqlite",
            )
        },
    }


def _cpu_seconds() -> float | None:
    """User + system CPU of this process and of its finished workers, in seconds
    (``None`` where ``resource`` is missing): with the wall time, how loaded the
    machine was (a run alone on 2 cores takes about this long)."""
    try:
        import resource
    except ImportError:
        return None
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    return round(total, 1)


def run_bench(
    plan: BenchPlan, options: RunOptions, progress: ProgressSink | None = None
) -> BenchResult:
    """Run a whole plan and collect every figure.

    Peers that cannot run here (missing package, no PostgreSQL) are skipped and
    listed with the reason in ``BenchResult.peers``; peers that raise or end
    with a wrong state are listed in ``BenchResult.failures``.

    Args:
        plan: Scenarios to run.
        options: Savers, PostgreSQL DSN, scratch directory, isolation.
        progress: Progress sink (nothing is shown by default).

    Returns:
        The result; check :attr:`BenchResult.ok`.
    """
    sink: ProgressSink = progress or _NoProgress()
    started = time.perf_counter()
    meta = _meta(plan, options)
    scratch = Path(tempfile.mkdtemp(prefix="deltalog-bench-", dir=options.workdir))
    ctx = PeerContext(workdir=scratch, pg_dsn=options.pg_dsn)
    peers_info: dict[str, dict[str, Any]] = {}
    names: list[str] = []
    for name in options.peers:
        spec = options.spec(name)
        reason = spec.unavailable_reason(ctx)
        peers_info[name] = {
            "label": spec.label,
            "durable": spec.durable,
            "async": spec.is_async,
            "bytes_method": spec.bytes_method,
            "skipped": reason,
        }
        if reason is None:
            names.append(name)
        else:
            sink.log(f"[yellow]skipping {name}: {reason}[/yellow]")
    failures: list[str] = []
    chat: list[ChatResult] = []
    throughput: ThroughputResult | None = None
    multiprocess: MultiProcessResult | None = None
    phases: dict[str, float] = {}
    try:
        for scenario in plan.chat:
            phase_start = time.perf_counter()
            # Each scenario's stores are deleted when it ends: the quadratic
            # add_messages and sf=1 runs hold GBs at 1,000 turns.
            scenario_ctx = dataclasses.replace(ctx, workdir=scratch / scenario.name)
            here = [n for n in names if n not in scenario.skip_peers]
            try:
                result = run_chat_scenario(scenario, here, options, scenario_ctx, sink)
            finally:
                shutil.rmtree(scenario_ctx.workdir, ignore_errors=True)
            result.skipped_peers = [n for n in names if n not in here]
            phases[scenario.name] = round(time.perf_counter() - phase_start, 1)
            chat.append(result)
            for name, res in result.savers.items():
                if res.error is not None:
                    failures.append(f"{scenario.name}: {name} raised: {res.error.strip()}")
                elif res.correct is False:
                    failures.append(f"{scenario.name}: {name} has a wrong state: {res.mismatch}")
        if plan.throughput is not None:
            phase_start = time.perf_counter()
            here = [n for n in names if n not in plan.throughput.skip_peers]
            throughput = run_throughput(plan.throughput, here, options, ctx, sink)
            throughput.skipped_peers = [n for n in names if n not in here]
            phases[plan.throughput.name] = round(time.perf_counter() - phase_start, 1)
            for name, err in throughput.errors.items():
                failures.append(f"{plan.throughput.name}: {name} raised: {err.strip()}")
        if plan.multiprocess is not None:
            phase_start = time.perf_counter()
            multiprocess = run_multiprocess(plan.multiprocess, names, options, ctx, sink)
            phases[plan.multiprocess.name] = round(time.perf_counter() - phase_start, 1)
            failures += multiprocess_failures(multiprocess)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    meta["wall_seconds"] = round(time.perf_counter() - started, 1)
    meta["cpu_seconds"] = _cpu_seconds()
    meta["peers_measured"] = names
    meta["phase_seconds"] = phases
    return BenchResult(
        meta=meta,
        peers=peers_info,
        chat=chat,
        throughput=throughput,
        failures=failures,
        multiprocess=multiprocess,
    )
