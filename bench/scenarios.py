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
from typing import Literal

__all__ = [
    "ADD_MESSAGES",
    "CHAT_SCENARIOS",
    "THROUGHPUT",
    "BenchPlan",
    "ChatScenario",
    "MessagesField",
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
        """Turn numbers (1-based, after the turn) at which stored bytes are measured."""
        points = {1, self.turns}
        points.update(range(self.sample_every, self.turns + 1, self.sample_every))
        if self.turns > 100:
            points.add(self.turns - 100)
        return frozenset(points)

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
    """

    name: str = "throughput"
    field: MessagesField = dataclasses.field(default_factory=lambda: delta(100))
    threads: tuple[int, ...] = (1, 4, 16, 64)
    seconds: float = 2.0
    max_turns_per_worker: int = 200
    repeats: int = 3
    seed: int = 7

    def __post_init__(self) -> None:
        if not self.threads or any(n < 1 for n in self.threads):
            raise ValueError(f"threads must be positive ints, got {self.threads!r}")
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


def _chat(field: MessagesField, **kwargs: int) -> ChatScenario:
    return ChatScenario(name=f"chat-{field.slug}", field=field, **kwargs)


def _agent(field: MessagesField, **kwargs: int) -> ChatScenario:
    return ChatScenario(name=f"agent-{field.slug}", field=field, tool_every=3, **kwargs)


def _large(**kwargs: int) -> ChatScenario:
    """The shape of LangGraph's own DeltaChannel benchmark (issue 18): ~10 KB of
    text per turn (a 2,000-character question, an 8,000-character answer) in a
    ``DeltaChannel`` with snapshot_frequency 10, 500 turns at full size."""
    fields: dict[str, int] = {"turns": 500, "human_chars": 2000, "ai_chars": 8000}
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


@dataclass(frozen=True)
class BenchPlan:
    """What one benchmark run executes.

    Attributes:
        chat: Chat scenarios, run one after another (savers interleaved within each).
        throughput: The throughput scenario, or ``None`` to skip it.
    """

    chat: tuple[ChatScenario, ...]
    throughput: ThroughputScenario | None

    @property
    def names(self) -> tuple[str, ...]:
        """Names of every scenario in the plan, in run order."""
        names = tuple(s.name for s in self.chat)
        if self.throughput is not None:
            names += (self.throughput.name,)
        return names


def full_plan() -> BenchPlan:
    """The default run: every chat scenario at 1,000 turns and throughput at 1/4/16/64."""
    return BenchPlan(chat=CHAT_SCENARIOS, throughput=THROUGHPUT)


def quick_plan() -> BenchPlan:
    """The ``--quick`` run, sized to finish in under 5 minutes on 2 cores.

    It keeps the 1,000-turn DeltaChannel sf=100 chat that the storage and
    latency targets are stated at (about 60% of the time: six savers times
    1,000 invokes whose LangGraph-side replay alone costs ~20 ms late in the
    thread), and shortens the quadratic ones: the plain ``add_messages`` chat
    stores the whole list three times per turn (about 1.7 GB at 1,000 turns in
    SQLite), so it runs 200 turns here (~70 MB per file-based saver). The
    large-message chat (~10 KB per turn, sf=10) runs 100 of its 500 turns.
    """
    return BenchPlan(
        chat=(
            _chat(ADD_MESSAGES, turns=200, read_repeats=5),
            _chat(delta(100), turns=1000, read_repeats=3),
            _agent(delta(100), turns=45, read_repeats=3),
            _large(turns=100, read_repeats=3),
        ),
        throughput=dataclasses.replace(
            THROUGHPUT, seconds=0.5, repeats=3, max_turns_per_worker=100
        ),
    )


def select_plan(
    base: BenchPlan,
    *,
    scenarios: Sequence[str] | None = None,
    turns: int | None = None,
    threads: Iterable[int] | None = None,
) -> BenchPlan:
    """Narrow or resize a plan according to command-line options.

    Args:
        base: The plan to start from (:func:`full_plan` or :func:`quick_plan`).
        scenarios: Scenario names to keep. Names not in ``base`` are looked up
            in :data:`CHAT_SCENARIOS` (so ``--quick --scenario chat-delta-sf10``
            works); ``"throughput"`` selects the throughput scenario.
        turns: Replace the number of turns of every chat scenario.
        threads: Replace the concurrency levels of the throughput scenario.

    Returns:
        The new plan.

    Raises:
        ValueError: If a scenario name is unknown or ``turns`` is out of range.
    """
    chat = base.chat
    throughput = base.throughput
    if scenarios is not None:
        known = {s.name: s for s in CHAT_SCENARIOS} | {s.name: s for s in base.chat}
        unknown = [n for n in scenarios if n not in known and n != THROUGHPUT.name]
        if unknown:
            raise ValueError(
                f"unknown scenario(s) {', '.join(unknown)}; "
                f"choose from {', '.join(all_scenario_names())}"
            )
        chat = tuple(known[n] for n in scenarios if n in known)
        throughput = (throughput or THROUGHPUT) if THROUGHPUT.name in scenarios else None
    if turns is not None:
        if not 1 <= turns <= 10_000:
            raise ValueError(f"turns must be between 1 and 10000, got {turns}")
        chat = tuple(s.with_turns(turns) for s in chat)
    if threads is not None and throughput is not None:
        throughput = dataclasses.replace(throughput, threads=tuple(threads))
    return BenchPlan(chat=chat, throughput=throughput)


def all_scenario_names() -> tuple[str, ...]:
    """Every scenario name accepted by ``--scenario``."""
    return (*(s.name for s in CHAT_SCENARIOS), THROUGHPUT.name)
