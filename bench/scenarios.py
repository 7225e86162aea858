"""Benchmark workloads, as data.

Every workload the benchmark can run is a frozen dataclass in this module; the
runner interprets them and nothing else decides what a run does. Two families:

* :class:`ChatScenario` — one long thread, measured turn by turn on every saver
  in the same process group, interleaved. A turn is one ``invoke`` with one
  human message (~300 characters) answered by the fake model (~600
  characters); the agent variant adds, every ``tool_every`` turns, an AI
  message with a tool call and a large :class:`~langchain_core.messages.ToolMessage`
  before the final answer.
* :class:`ThroughputScenario` — many short threads written concurrently by
  1, 4, 16 or 64 OS threads (or asyncio tasks for async savers), measured in
  checkpoints per second.

The ``messages`` field is declared either as a plain
``Annotated[list, add_messages]`` (:data:`ADD_MESSAGES`) or as
``Annotated[list, DeltaChannel(_messages_delta_reducer, snapshot_frequency=N)]``
(:func:`delta`), which is what the whole project is about.

Example:
    >>> quick_plan().chat[0].name
    'chat-add_messages'
    >>> delta(100).label
    'DeltaChannel sf=100'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ADD_MESSAGES",
    "CHAT_SCENARIOS",
    "MULTIPROCESS",
    "QUICK_REDUNDANT",
    "THROUGHPUT",
    "BenchPlan",
    "ChatScenario",
    "MessagesField",
    "MultiProcessScenario",
    "ThroughputScenario",
    "all_scenario_names",
    "delta",
    "full_plan",
    "quick_plan",
    "select_plan",
]

FieldKind = Literal["add_messages", "delta"]


@dataclass(frozen=True)
class MessagesField:
    """How the graph state declares its ``messages`` channel.

    Attributes:
        kind: ``"add_messages"`` for ``Annotated[list, add_messages]`` (every
            checkpoint stores the whole list), ``"delta"`` for a
            ``DeltaChannel`` (checkpoints store nothing, or a snapshot every
            ``snapshot_frequency`` updates).
        snapshot_frequency: The ``DeltaChannel`` snapshot frequency; ignored
            for ``add_messages``.
    """

    kind: FieldKind
    snapshot_frequency: int = 100

    @property
    def label(self) -> str:
        """Human-readable name used in tables and plots."""
        if self.kind == "add_messages":
            return "add_messages"
        return f"DeltaChannel sf={self.snapshot_frequency}"

    @property
    def slug(self) -> str:
        """File- and scenario-name friendly form (``add_messages``, ``delta-sf100``)."""
        if self.kind == "add_messages":
            return "add_messages"
        return f"delta-sf{self.snapshot_frequency}"


ADD_MESSAGES = MessagesField("add_messages")


def delta(snapshot_frequency: int) -> MessagesField:
    """Return a ``DeltaChannel`` messages field with the given snapshot frequency.

    Raises:
        ValueError: If ``snapshot_frequency`` is not a positive int (LangGraph
            rejects it too, but later and with less context).
    """
    if snapshot_frequency <= 0:
        raise ValueError(
            f"snapshot_frequency must be a positive int, got {snapshot_frequency!r}; "
            "use 1 to snapshot on every update"
        )
    return MessagesField("delta", snapshot_frequency)


@dataclass(frozen=True)
class ChatScenario:
    """One long conversation thread, measured turn by turn.

    Attributes:
        name: Unique scenario name (``chat-delta-sf100``); used on the command
            line, in JSON and in plot file names.
        field: How ``messages`` is declared.
        turns: Number of ``invoke`` calls (one human message each).
        human_chars: Length of each human message.
        ai_chars: Length of each final AI reply.
        tool_every: Agent variant: every ``tool_every``-th turn the model first
            calls a tool; ``0`` means a plain chat.
        tool_result_chars: Length of each tool result (the "large" payload).
        seed: Seed of the deterministic text generator.
        sample_every: Measure stored bytes every this many turns (and always at
            turn 1, at ``turns - 100`` and at the last turn).
        read_repeats: Repeats of each read measurement (``get_state``,
            ``get_state_history``, delta history); medians are reported.
        history_limit: ``limit`` passed to ``get_state_history``.
        skip_peers: Savers left out of this scenario (``--quick`` leaves out
            peers no target of the scenario compares with); the subject and
            savers named with ``--savers`` are never left out (see
            :func:`select_plan`).
    """

    name: str
    field: MessagesField
    turns: int = 1000
    human_chars: int = 300
    ai_chars: int = 600
    tool_every: int = 0
    tool_result_chars: int = 8000
    seed: int = 20240501
    sample_every: int = 10
    read_repeats: int = 7
    history_limit: int = 20
    skip_peers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise ValueError(f"turns must be >= 1, got {self.turns} in scenario {self.name!r}")
        if self.sample_every < 1:
            raise ValueError(
                f"sample_every must be >= 1, got {self.sample_every} in scenario {self.name!r}"
            )
        if self.read_repeats < 1:
            raise ValueError(
                f"read_repeats must be >= 1, got {self.read_repeats} in scenario {self.name!r}"
            )

    @property
    def is_agent(self) -> bool:
        """Whether this is the agent-like variant with tool calls."""
        return self.tool_every > 0

    @property
    def description(self) -> str:
        """One line describing the workload, for tables and docs."""
        text = (
            f"{self.turns} turns, human {self.human_chars} chars + AI {self.ai_chars} chars "
            f"per turn, messages as {self.field.label}"
        )
        if self.is_agent:
            text += (
                f", tool call + {self.tool_result_chars}-char tool result "
                f"every {self.tool_every} turns"
            )
        return text

    def sample_turns(self) -> frozenset[int]:
        """Turn numbers (1-based, after the turn) at which stored bytes are measured.

        Besides every ``sample_every``-th turn: turn 1, the last turn, the
        turn 100 before the end, and the bounds of the two windows of
        :meth:`scale_windows` (so a 10,000-turn run measures turns
        9,000–10,000 against 900–1,000 exactly).
        """
        points = {1, self.turns}
        points.update(range(self.sample_every, self.turns + 1, self.sample_every))
        if self.turns > 100:
            points.add(self.turns - 100)
        for window in self.scale_windows() or ():
            points.update(window)
        return frozenset(points)

    def scale_windows(self) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """The early and late windows of the scale figure (issue 18.5), as turn spans.

        The late window is the last tenth of the run, the early one the tenth
        of the first tenth that ends at turn ``turns // 10``: turns
        9,000–10,000 against 900–1,000 for a 10,000-turn run. ``None`` for
        runs under 1,000 turns, whose early window would be under 10 turns.
        """
        if self.turns < 1000:
            return None
        tenth = self.turns // 10
        return (tenth - tenth // 10, tenth), (self.turns - tenth, self.turns)

    def with_turns(self, turns: int) -> ChatScenario:
        """Return a copy with a different number of turns."""
        return dataclasses.replace(self, turns=turns)


@dataclass(frozen=True)
class ThroughputScenario:
    """Concurrent writers on distinct threads, measured in checkpoints per second.

    Each of ``n`` workers (OS threads for sync savers, asyncio tasks on one
    event loop for async savers) runs chat turns on its own ``thread_id`` until
    ``seconds`` have passed or it has done ``max_turns_per_worker`` turns. Every
    round gets a fresh store, so earlier rounds do not slow later ones. Each
    (saver, n) pair runs ``repeats`` rounds, interleaved with the other savers,
    and the median is reported: one round of a second swings by ±30% on a
    shared 2-core machine.

    Attributes:
        name: Scenario name.
        field: How ``messages`` is declared in the graph that is invoked.
        threads: The concurrency levels to measure.
        seconds: Wall-time budget of one (saver, concurrency) round.
        max_turns_per_worker: Upper bound on turns per worker per round.
        repeats: Rounds per (saver, concurrency); the median is reported.
        seed: Seed of the deterministic text generator.
        sync_threads: Concurrency levels at which graph turns are measured a
            second time with ``durability="sync"`` (each step's checkpoint
            written before the next step runs), issue 18.4.
        skip_peers: Savers left out of this scenario (as :attr:`ChatScenario.skip_peers`).
    """

    name: str = "throughput"
    field: MessagesField = dataclasses.field(default_factory=lambda: delta(100))
    threads: tuple[int, ...] = (1, 4, 16, 64)
    seconds: float = 2.0
    max_turns_per_worker: int = 200
    repeats: int = 3
    seed: int = 7
    sync_threads: tuple[int, ...] = (16,)
    skip_peers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.threads or any(n < 1 for n in self.threads):
            raise ValueError(f"threads must be positive ints, got {self.threads!r}")
        if any(n < 1 for n in self.sync_threads):
            raise ValueError(f"sync_threads must be positive ints, got {self.sync_threads!r}")
        if self.seconds <= 0:
            raise ValueError(f"seconds must be > 0, got {self.seconds!r}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats!r}")

    def chat(self) -> ChatScenario:
        """The chat workload each worker runs (short, on its own thread)."""
        return ChatScenario(
            name=f"{self.name}-chat",
            field=self.field,
            turns=self.max_turns_per_worker,
            seed=self.seed,
        )


@dataclass(frozen=True)
class MultiProcessScenario:
    """Several processes writing one store path at once (issue 18.4).

    ``processes`` worker processes each open the saver on the same path (one
    LMDB environment, one SQLite file) and run ``threads`` OS threads of
    chat turns, each thread on its own ``thread_id``, for ``seconds``. A turn
    counts once its ``invoke`` returned (acknowledged). After each round every
    thread's final ``messages`` is read back through a fresh saver on the
    path and compared with :func:`~deltalog.bench.graphs.expected_messages`
    for the number of turns acknowledged: a lost, duplicated or half-written
    turn, or any error in a worker, fails the run. Every round gets a fresh
    path; each saver runs ``repeats`` rounds, interleaved; the median of the
    turns per second is reported.

    Attributes:
        name: Scenario name.
        field: How ``messages`` is declared in the graph that is invoked.
        processes: Worker processes sharing the path.
        threads: Threads per process.
        seconds: Wall-time budget of one round.
        max_turns_per_thread: Upper bound on turns per thread per round.
        repeats: Rounds per saver.
        savers: The savers measured (of those a run names): those whose store
            several processes can open at one path (``deltalog``,
            ``deltalog-normal``, ``sqlite``, ``lmdb``), and
            ``memory``, an InMemorySaver in each process that stores nothing:
            the rate of LangGraph's own work in as many processes, the ceiling
            of any saver on this machine.
        seed: Seed of the deterministic text generator.
    """

    name: str = "multiprocess"
    field: MessagesField = dataclasses.field(default_factory=lambda: delta(100))
    processes: int = 4
    threads: int = 4
    seconds: float = 2.0
    max_turns_per_thread: int = 200
    repeats: int = 3
    savers: tuple[str, ...] = ("deltalog", "deltalog-normal", "sqlite", "memory")
    seed: int = 11

    def __post_init__(self) -> None:
        if self.processes < 1 or self.threads < 1:
            raise ValueError(
                f"processes and threads must be >= 1, got {self.processes} and {self.threads}"
            )
        if self.seconds <= 0:
            raise ValueError(f"seconds must be > 0, got {self.seconds!r}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats!r}")

    def chat(self) -> ChatScenario:
        """The chat workload each thread runs (short, on its own thread id)."""
        return ChatScenario(
            name=f"{self.name}-chat",
            field=self.field,
            turns=self.max_turns_per_thread,
            seed=self.seed,
        )


def _chat(field: MessagesField, **kwargs: Any) -> ChatScenario:
    return ChatScenario(name=f"chat-{field.slug}", field=field, **kwargs)


def _agent(field: MessagesField, **kwargs: Any) -> ChatScenario:
    return ChatScenario(name=f"agent-{field.slug}", field=field, tool_every=3, **kwargs)


def _large(**kwargs: Any) -> ChatScenario:
    """The shape of LangGraph's own DeltaChannel benchmark (issue 18): ~10 KB of
    text per turn (a 2,000-character question, an 8,000-character answer) in a
    ``DeltaChannel`` with snapshot_frequency 10, 500 turns at full size."""
    fields: dict[str, Any] = {"turns": 500, "human_chars": 2000, "ai_chars": 8000}
    fields.update(kwargs)
    return ChatScenario(name="chat-large-sf10", field=delta(10), **fields)


#: Every chat workload at its full size, in run order.
CHAT_SCENARIOS: tuple[ChatScenario, ...] = (
    _chat(ADD_MESSAGES),
    _chat(delta(1)),
    _chat(delta(10)),
    _chat(delta(100)),
    _chat(delta(1000)),
    _agent(ADD_MESSAGES, turns=300),
    _agent(delta(100), turns=300),
    _large(),
)

#: The throughput workload at its full size.
THROUGHPUT = ThroughputScenario()

#: The multi-process workload at its full size.
MULTIPROCESS = MultiProcessScenario()


@dataclass(frozen=True)
class BenchPlan:
    """What one benchmark run executes.

    Attributes:
        chat: Chat scenarios, run one after another (savers interleaved within each).
        throughput: The throughput scenario, or ``None`` to skip it.
        multiprocess: The multi-process scenario, or ``None`` to skip it.
    """

    chat: tuple[ChatScenario, ...]
    throughput: ThroughputScenario | None
    multiprocess: MultiProcessScenario | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Names of every scenario in the plan, in run order."""
        names = tuple(s.name for s in self.chat)
        if self.throughput is not None:
            names += (self.throughput.name,)
        if self.multiprocess is not None:
            names += (self.multiprocess.name,)
        return names


def full_plan() -> BenchPlan:
    """The default run: every chat scenario at its full size, throughput at
    1/4/16/64 threads and 4 processes × 4 threads on one store."""
    return BenchPlan(chat=CHAT_SCENARIOS, throughput=THROUGHPUT, multiprocess=MULTIPROCESS)


#: Peers ``--quick`` leaves out of a scenario because no target of that
#: scenario compares with them: AsyncSqliteSaver stores what SqliteSaver
#: stores, and langgraph-checkpoint-lmdb is neither the best durable peer nor
#: named by a target. They still run in the full plan.
QUICK_REDUNDANT: tuple[str, ...] = ("async-sqlite", "lmdb")


def quick_plan() -> BenchPlan:
    """The ``--quick`` run, sized to finish in under 5 minutes on 2 cores.

    It keeps the 1,000-turn DeltaChannel sf=100 chat that the storage and
    latency targets are stated at (about 60% of the time: every saver does
    1,000 invokes whose LangGraph-side replay alone costs ~20 ms late in the
    thread), and shortens the quadratic ones: the plain ``add_messages`` chat
    stores the whole list three times per turn (about 1.7 GB at 1,000 turns in
    SQLite), so it runs 200 turns here (~70 MB per file-based saver). The
    large-message chat (~10 KB per turn, sf=10) runs 100 of its 500 turns.
    Every scenario leaves out the peers no target of it compares with
    (:data:`QUICK_REDUNDANT`, and PostgreSQL where it is not the best durable
    peer of a storage target); throughput runs 1, 4 and 16 threads in rounds
    of 0.5 s, and the multi-process scenario 3 rounds of 0.75 s per saver.
    """
    return BenchPlan(
        chat=(
            _chat(
                ADD_MESSAGES,
                turns=200,
                read_repeats=5,
                skip_peers=(*QUICK_REDUNDANT, "postgres"),
            ),
            _chat(delta(100), turns=1000, read_repeats=3, skip_peers=QUICK_REDUNDANT),
            _agent(delta(100), turns=45, read_repeats=3, skip_peers=QUICK_REDUNDANT),
            _large(turns=100, read_repeats=3, skip_peers=(*QUICK_REDUNDANT, "postgres")),
        ),
        throughput=dataclasses.replace(
            THROUGHPUT,
            threads=(1, 4, 16),
            seconds=0.5,
            repeats=3,
            max_turns_per_worker=100,
            skip_peers=QUICK_REDUNDANT,
        ),
        multiprocess=dataclasses.replace(
            MULTIPROCESS, seconds=0.75, repeats=3, max_turns_per_thread=100
        ),
    )


def select_plan(
    base: BenchPlan,
    *,
    scenarios: Sequence[str] | None = None,
    turns: int | None = None,
    threads: Iterable[int] | None = None,
    keep_peers: Iterable[str] | None = None,
) -> BenchPlan:
    """Narrow or resize a plan according to command-line options.

    Args:
        base: The plan to start from (:func:`full_plan` or :func:`quick_plan`).
        scenarios: Scenario names to keep. Names not in ``base`` are looked up
            in :data:`CHAT_SCENARIOS` (so ``--quick --scenario chat-delta-sf10``
            works); ``"throughput"`` selects the throughput scenario and
            ``"multiprocess"`` the multi-process one.
        turns: Replace the number of turns of every chat scenario.
        threads: Replace the concurrency levels of the throughput scenario
            (its ``durability="sync"`` rounds run at the levels of
            ``sync_threads`` still listed, else at the highest level given).
        keep_peers: Savers no scenario may leave out (the subject, and every
            saver named with ``--savers``): removed from each ``skip_peers``.

    Returns:
        The new plan.

    Raises:
        ValueError: If a scenario name is unknown or ``turns`` is out of range.
    """
    chat = base.chat
    throughput = base.throughput
    multiprocess = base.multiprocess
    if scenarios is not None:
        known = {s.name: s for s in CHAT_SCENARIOS} | {s.name: s for s in base.chat}
        others = (THROUGHPUT.name, MULTIPROCESS.name)
        unknown = [n for n in scenarios if n not in known and n not in others]
        if unknown:
            raise ValueError(
                f"unknown scenario(s) {', '.join(unknown)}; "
                f"choose from {', '.join(all_scenario_names())}"
            )
        chat = tuple(known[n] for n in scenarios if n in known)
        throughput = (throughput or THROUGHPUT) if THROUGHPUT.name in scenarios else None
        multiprocess = (multiprocess or MULTIPROCESS) if MULTIPROCESS.name in scenarios else None
    if turns is not None:
        if not 1 <= turns <= 10_000:
            raise ValueError(f"turns must be between 1 and 10000, got {turns}")
        chat = tuple(s.with_turns(turns) for s in chat)
    if threads is not None and throughput is not None:
        levels = tuple(threads)
        sync = tuple(t for t in throughput.sync_threads if t in levels) or (max(levels),)
        throughput = dataclasses.replace(throughput, threads=levels, sync_threads=sync)
    if keep_peers is not None:
        keep = set(keep_peers)

        def unskip(skip: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(p for p in skip if p not in keep)

        chat = tuple(dataclasses.replace(s, skip_peers=unskip(s.skip_peers)) for s in chat)
        if throughput is not None:
            throughput = dataclasses.replace(throughput, skip_peers=unskip(throughput.skip_peers))
    return BenchPlan(chat=chat, throughput=throughput, multiprocess=multiprocess)


def all_scenario_names() -> tuple[str, ...]:
    """Every scenario name accepted by ``--scenario``."""
    return (*(s.name for s in CHAT_SCENARIOS), THROUGHPUT.name, MULTIPROCESS.name)
