"""The benchmark graph: a chat (or agent) ``StateGraph`` with a fake, deterministic model.

The graph is the smallest realistic LangGraph chat: ``START → model → END``,
plus ``model → tools → model`` for the agent variant. The model node is a
pure function of the state it is given: its reply text is seeded by the turn
number, the length of the history and the start of the last message, so a
saver that loses, duplicates or reorders one message makes every later reply
differ, and :func:`expected_messages` can compute the right final state
without any saver at all. There is no network and no randomness outside the
seeded generator.

Message ids are fixed (``h17``, ``a17``, ``a17-call``, ``t17``) so that
``add_messages`` never assigns random ids and the final states of different
savers compare equal.

Note:
    This module deliberately does not use ``from __future__ import
    annotations``: the state schemas are built inside functions and LangGraph
    must see real ``Annotated`` objects, not strings naming local variables.
"""

import hashlib
import json
import random
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, cast

from deltalog.bench.scenarios import ChatScenario, MessagesField
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

__all__ = [
    "MESSAGES",
    "CanonicalMessage",
    "build_graph",
    "canonical",
    "content_floor",
    "expected_messages",
    "human_message",
    "state_schema",
    "thread_config",
]

#: The state key every benchmark graph uses.
MESSAGES = "messages"

# A fixed vocabulary keeps generated text realistic-looking (spaces, varied
# word lengths) so compressors in the engine see prose, not "xxxx".
_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "from",
    "at",
    "or",
    "an",
    "checkpoint",
    "thread",
    "channel",
    "message",
    "reducer",
    "snapshot",
    "history",
    "version",
    "write",
    "storage",
    "engine",
    "latency",
    "bytes",
    "turn",
    "graph",
    "state",
    "node",
    "model",
    "tool",
    "result",
    "agent",
    "append",
    "replay",
    "ancestor",
    "seed",
    "prune",
    "copy",
    "fork",
    "delta",
    "value",
    "order",
    "index",
    "page",
    "transaction",
    "commit",
    "durable",
    "sync",
    "async",
    "reader",
    "writer",
    "environment",
    "map",
    "growth",
    "question",
    "answer",
    "summary",
    "context",
    "user",
    "assistant",
    "search",
    "document",
    "paragraph",
]

#: One message reduced to plain, comparable data:
#: ``(type, id, content, tool_calls_json, tool_call_id, name)``.
CanonicalMessage = tuple[str, str, str, str, str, str]


def _seed(*parts: object) -> int:
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _text(n_chars: int, *seed_parts: object) -> str:
    """Deterministic prose of exactly ``n_chars`` characters."""
    rng = random.Random(_seed(*seed_parts))
    words: list[str] = []
    length = 0
    while length < n_chars:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:n_chars]


def state_schema(field: MessagesField) -> type[Any]:
    """Return the ``TypedDict`` state schema for a messages field declaration.

    Args:
        field: ``add_messages`` or a ``DeltaChannel`` with its snapshot frequency.

    Returns:
        A ``TypedDict`` class with one key, ``messages``.
    """
    if field.kind == "add_messages":

        class AddMessagesState(TypedDict):
            messages: Annotated[list[AnyMessage], add_messages]

        return AddMessagesState

    reducer = cast(Callable[[Any, Sequence[Any]], Any], _messages_delta_reducer)
    channel: DeltaChannel[list[AnyMessage]] = DeltaChannel(
        reducer, snapshot_frequency=field.snapshot_frequency
    )

    class DeltaMessagesState(TypedDict):
        messages: Annotated[list[AnyMessage], channel]

    return DeltaMessagesState


def human_message(scenario: ChatScenario, turn: int) -> HumanMessage:
    """The human message of 0-based ``turn``: ``scenario.human_chars`` characters, id ``h<turn>``."""
    return HumanMessage(
        content=_text(scenario.human_chars, scenario.seed, "human", turn), id=f"h{turn}"
    )


def _turn_of(message: BaseMessage) -> int:
    """The turn number encoded in a benchmark message id (``h17`` → 17)."""
    mid = message.id or ""
    digits = mid[1:].split("-", 1)[0]
    if not digits.isdigit():
        raise ValueError(f"message id {mid!r} is not a benchmark id like 'h17'")
    return int(digits)


def _model_reply(scenario: ChatScenario, messages: Sequence[BaseMessage]) -> list[AnyMessage]:
    last = messages[-1]
    turn = _turn_of(last)
    # The reply depends on the whole history through len(messages): a saver
    # that loses or duplicates a message changes every later reply.
    seed = (scenario.seed, "ai", turn, len(messages), str(last.content)[:40])
    if (
        isinstance(last, HumanMessage)
        and scenario.tool_every
        and turn % scenario.tool_every == scenario.tool_every - 1
    ):
        call_id = f"call{turn}"
        return [
            AIMessage(
                content="",
                id=f"a{turn}-call",
                tool_calls=[
                    {
                        "name": "search",
                        "args": {"query": _text(60, *seed, "query")},
                        "id": call_id,
                        "type": "tool_call",
                    }
                ],
            )
        ]
    return [AIMessage(content=_text(scenario.ai_chars, *seed), id=f"a{turn}")]


def _tool_result(scenario: ChatScenario, messages: Sequence[BaseMessage]) -> list[AnyMessage]:
    last = messages[-1]
    if not isinstance(last, AIMessage) or not last.tool_calls:
        raise ValueError(f"tools node reached without a tool call; last message is {last!r}")
    call = last.tool_calls[0]
    turn = _turn_of(last)
    content = _text(scenario.tool_result_chars, scenario.seed, "tool", turn, len(messages))
    return [ToolMessage(content=content, tool_call_id=call["id"] or "", id=f"t{turn}")]


def _route(state: dict[str, Any]) -> Literal["tools", "__end__"]:
    last = state[MESSAGES][-1]
    if isinstance(last, AIMessage) and last.tool_calls:
        return "tools"
    return "__end__"


def build_graph(
    scenario: ChatScenario, checkpointer: BaseCheckpointSaver[Any] | None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile the benchmark graph for a scenario.

    Args:
        scenario: The workload; its ``field`` decides the state schema and its
            ``tool_every`` whether the graph has a tools node.
        checkpointer: The saver under test (``None`` for a graph without memory).

    Returns:
        The compiled graph. Invoke it with ``{"messages": [human_message(...)]}``
        and :func:`thread_config`.
    """

    def model(state: Any) -> dict[str, Any]:
        return {MESSAGES: _model_reply(scenario, state[MESSAGES])}

    def tools(state: Any) -> dict[str, Any]:
        return {MESSAGES: _tool_result(scenario, state[MESSAGES])}

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(state_schema(scenario.field))
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    if scenario.is_agent:
        builder.add_node("tools", tools)
        builder.add_conditional_edges("model", _route, ["tools", END])
        builder.add_edge("tools", "model")
    else:
        builder.add_edge("model", END)
    return builder.compile(checkpointer=checkpointer)


def thread_config(thread_id: str) -> RunnableConfig:
    """The ``RunnableConfig`` for one benchmark thread."""
    return {"configurable": {"thread_id": thread_id}}


def expected_messages(scenario: ChatScenario, turns: int | None = None) -> list[AnyMessage]:
    """The exact ``messages`` a correct saver holds after ``turns`` turns.

    Computed by running the node functions on a plain list, without LangGraph
    and without a saver, so it is the reference every saver is checked against.

    Args:
        scenario: The workload.
        turns: Number of turns; defaults to ``scenario.turns``.

    Returns:
        The message list, oldest first.
    """
    messages: list[AnyMessage] = []
    for turn in range(scenario.turns if turns is None else turns):
        messages.append(human_message(scenario, turn))
        while True:
            reply = _model_reply(scenario, messages)
            messages.extend(reply)
            if _route({MESSAGES: messages}) != "tools":
                break
            messages.extend(_tool_result(scenario, messages))
    return messages


def canonical(messages: Sequence[Any]) -> list[CanonicalMessage]:
    """Reduce messages to comparable plain tuples (type, id, content, tool calls, …).

    Args:
        messages: ``BaseMessage`` objects as returned by ``get_state``.

    Returns:
        One :data:`CanonicalMessage` per message, in order.

    Raises:
        TypeError: If an item is not a ``BaseMessage``.
    """
    out: list[CanonicalMessage] = []
    for m in messages:
        if not isinstance(m, BaseMessage):
            raise TypeError(f"expected a BaseMessage in state['messages'], got {type(m).__name__}")
        calls = getattr(m, "tool_calls", None) or []
        calls_json = json.dumps(
            [[c.get("name"), c.get("id"), c.get("args")] for c in calls], sort_keys=True
        )
        content = m.content if isinstance(m.content, str) else json.dumps(m.content, sort_keys=True)
        out.append(
            (
                m.type,
                m.id or "",
                content,
                calls_json,
                str(getattr(m, "tool_call_id", "") or ""),
                m.name or "",
            )
        )
    return out


def _message_text(message: BaseMessage) -> str:
    """The text a message carries: its content, plus the arguments of its tool calls."""
    content = message.content if isinstance(message.content, str) else json.dumps(message.content)
    calls = getattr(message, "tool_calls", None) or []
    return content + "".join(json.dumps(c.get("args"), sort_keys=True) for c in calls)


def content_floor(
    scenario: ChatScenario, messages: Sequence[BaseMessage] | None = None, level: int = 3
) -> list[int]:
    """The content floor of every turn: zstd-compressed bytes of the turn's new text.

    Each turn's new messages (the human message, the model's replies, tool
    results) are joined and compressed on their own with zstd at ``level``, no
    dictionary and no frame header savings beyond zstd's own: the bytes any
    store must add for that turn if it kept nothing but the text (issue 18.1).

    Args:
        scenario: The workload; its generated text is what is compressed.
        messages: ``expected_messages(scenario)`` when the caller has it already.
        level: The zstd level (3, zstd's default, unless told otherwise).

    Returns:
        One size per turn, in turn order.
    """
    import zstandard

    per_turn: dict[int, list[str]] = {}
    for message in expected_messages(scenario) if messages is None else messages:
        per_turn.setdefault(_turn_of(message), []).append(_message_text(message))
    compressor = zstandard.ZstdCompressor(level=level)
    return [len(compressor.compress("\n".join(per_turn[t]).encode())) for t in sorted(per_turn)]
