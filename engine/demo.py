"""The ``deltalog demo`` job: a real LangGraph chat on an embedded store, no network.

A ``StateGraph`` whose ``messages`` field is a ``DeltaChannel`` (the messages
reducer of :mod:`deltalog.channels`) runs turn after turn against a
deterministic fake model, checkpointed by :class:`DeltaLogSaver`. After each
sampled turn the thread's stored bytes are measured (keys and record sizes,
nothing decoded), so the output shows what the design promises: every turn
adds about the same few hundred bytes however long the conversation gets,
while the state itself keeps growing.

>>> import tempfile, pathlib
>>> with tempfile.TemporaryDirectory() as tmp:
...     result = run_demo(pathlib.Path(tmp) / "demo.lmdb", turns=3)
>>> result.turns, len(result.messages)
(3, 6)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

from deltalog.channels import delta, messages
from deltalog.engine.saver import DeltaLogSaver
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

__all__ = [
    "DEFAULT_PATH",
    "DemoResult",
    "DemoSample",
    "build_demo_graph",
    "fake_model",
    "run_demo",
    "user_message",
]

DEFAULT_PATH = "deltalog-demo.lmdb"
"""Where ``deltalog demo`` puts its store when no PATH is given (current folder)."""

_TOPICS = (
    "how LMDB keeps readers from blocking writers",
    "why a delta channel stores no value at most checkpoints",
    "what a _DeltaSnapshot seed is for",
    "how prune keeps a delta chain exact",
    "when to move threads to PostgreSQL",
    "what the reducer law says",
    "how group commit shares one fsync",
)


def user_message(turn: int) -> HumanMessage:
    """The user's deterministic question of a turn (ids too, so runs are reproducible)."""
    topic = _TOPICS[turn % len(_TOPICS)]
    return HumanMessage(content=f"Turn {turn + 1}: tell me {topic}.", id=f"user-{turn + 1}")


def fake_model(history: list[BaseMessage]) -> AIMessage:
    """A deterministic stand-in for a chat model: the answer depends only on the history."""
    last = history[-1].content if history else ""
    n = len(history)
    return AIMessage(
        content=(
            f"(fake model, reply {n // 2 + 1}) You asked: {str(last)[:80]!s} — this thread now "
            f"holds {n + 1} messages, yet this turn's checkpoints store only the new ones; "
            "earlier messages are rebuilt by replaying the log from the last seed."
        ),
        id=f"assistant-{n // 2 + 1}",
    )


def build_demo_graph(snapshot_every: int = 50) -> StateGraph[Any]:
    """``START → model → END`` with ``messages`` as a DeltaChannel (``snapshot_every`` updates per seed)."""

    channel = delta(messages, snapshot_every=snapshot_every)
    # The functional form: the annotation must see ``channel`` (a class body's
    # annotations are strings under ``from __future__ import annotations``).
    DemoState = TypedDict("DemoState", {"messages": Annotated[list[AnyMessage], channel]})  # noqa: UP013

    def model(state: DemoState) -> dict[str, Any]:
        return {"messages": [fake_model(list(state["messages"]))]}

    builder: StateGraph[Any] = StateGraph(DemoState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    return builder


#: Turns a sample's growth per turn is averaged over (DemoSample.bytes_per_turn).
GROWTH_WINDOW: Final = 10


@dataclass
class DemoSample:
    """The thread's size after a turn.

    Attributes:
        turn: Turns done (1-based).
        thread_bytes: Bytes the thread occupies in the store (keys + records).
        bytes_per_turn: Growth per turn over the last :data:`GROWTH_WINDOW`
            turns (since the run began, before that): the store grows in
            steps, a turn pack every few turns, so a shorter span shows the
            packing rhythm rather than the growth.
        state_bytes: Serialized size of the whole message list at this turn
            (what a plain ``add_messages`` field would write at each step).
    """

    turn: int
    thread_bytes: int
    bytes_per_turn: float
    state_bytes: int


@dataclass
class DemoResult:
    """What ``run_demo`` did."""

    path: str
    thread_id: str
    turns: int
    first_turn: int
    checkpoints: int
    thread_bytes: int
    samples: list[DemoSample] = field(default_factory=list)
    messages: list[BaseMessage] = field(default_factory=list)

    def to_dict(self, last_messages: int = 6) -> dict[str, Any]:
        """JSON-ready form with the last ``last_messages`` messages."""
        return {
            "path": self.path,
            "thread_id": self.thread_id,
            "turns": self.turns,
            "first_turn": self.first_turn,
            "checkpoints": self.checkpoints,
            "thread_bytes": self.thread_bytes,
            "messages": len(self.messages),
            "samples": [vars(s) for s in self.samples],
            "last_messages": [
                {"role": m.type, "id": m.id, "content": m.content}
                for m in self.messages[-last_messages:]
            ],
        }


def _thread_bytes(saver: DeltaLogSaver, thread_id: str) -> tuple[int, int]:
    for s in saver.threads():
        if s.thread_id == thread_id:
            return s.bytes, s.checkpoints
    return 0, 0


def _sample_turns(turns: int, samples: int = 12) -> set[int]:
    """About ``samples`` turns spread evenly, always the first two and the last."""
    step = max(1, turns // samples)
    return {1, min(2, turns), turns} | set(range(step, turns + 1, step))


def run_demo(
    path: str | os.PathLike[str] = DEFAULT_PATH,
    *,
    turns: int = 50,
    thread_id: str = "demo",
    snapshot_every: int = 50,
    on_turn: Callable[[int], None] | None = None,
) -> DemoResult:
    """Run ``turns`` chat turns on ``thread_id`` in the store at ``path`` (created if missing).

    Running it again continues the same conversation.

    Args:
        path: Store folder.
        turns: Turns to run (one user message and one reply each).
        thread_id: The conversation.
        snapshot_every: The messages channel's ``snapshot_frequency``.
        on_turn: Called with the number of turns done after each turn.

    Returns:
        Sizes sampled along the way and the final message list.
    """
    graph: CompiledStateGraph[Any, Any, Any, Any]
    with DeltaLogSaver.from_path(path) as saver:
        graph = build_demo_graph(snapshot_every).compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": thread_id}}
        history = list(graph.get_state(config).values.get("messages", []))
        first = len(history) // 2
        sizes = {0: _thread_bytes(saver, thread_id)[0]}
        wanted = _sample_turns(turns)
        measured = wanted | {t - GROWTH_WINDOW for t in wanted if t > GROWTH_WINDOW}
        result = DemoResult(os.fspath(path), thread_id, turns, first + 1, 0, 0)
        for done in range(1, turns + 1):
            state = graph.invoke({"messages": [user_message(first + done - 1)]}, config)
            if done in measured:
                sizes[done] = _thread_bytes(saver, thread_id)[0]
            if done in wanted:
                since = max(0, done - GROWTH_WINDOW)
                state_bytes = len(saver.serde.dumps_typed(state["messages"])[1])
                result.samples.append(
                    DemoSample(
                        first + done,
                        sizes[done],
                        round((sizes[done] - sizes[since]) / (done - since), 1),
                        state_bytes,
                    )
                )
            if on_turn is not None:
                on_turn(done)
        result.thread_bytes, result.checkpoints = _thread_bytes(saver, thread_id)
        result.messages = list(graph.get_state(config).values.get("messages", []))
    return result
