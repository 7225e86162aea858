"""Batching-invariant reducers for LangGraph's `DeltaChannel`.

A `DeltaChannel` never stores its value at an ordinary checkpoint. The value is
rebuilt on every read by replaying the writes since the nearest seed (a
`_DeltaSnapshot`, or a plain value) through the reducer, and the replay hands
the reducer *all* of those writes in one call, however many supersteps
produced them. So every reducer here obeys the batching law

    reducer(reducer(state, xs), ys) == reducer(state, xs + ys)

for every state and every split of a write sequence. Without it, a thread
would read back a different value depending on where its last snapshot fell.

How the law is met: every reducer in this module is a *left fold* of one
write at a time, ``reducer(s, [w1, ..., wn]) == step(...step(step(s, w1),
w2)..., wn)``, and a left fold is batching-invariant by construction: folding
``xs`` and then ``ys`` performs exactly the same ``step`` calls, in the same
order, as folding ``xs + ys``. The implementations process a batch in one pass
for speed (no per-write copies of the state), and each documents why its
one-pass form equals the fold. The property tests in
``tests/test_channels_reducers.py`` check the law on random states, writes and
split points.

`Overwrite` (and its two dict forms, recognised by the same function
`DeltaChannel` uses) is a step like any other: ``step(s, Overwrite(v))`` is a
shallow copy of ``v``, or the empty value for ``Overwrite(None)``, and later
writes fold onto it. That is exactly what `DeltaChannel.replay_writes` does
(the last `Overwrite` resets), so a reducer called on a history containing
overwrites agrees with the channel. A batch that ends with an `Overwrite`
returns the overwrite value as given, untouched, as `DeltaChannel.update`
does.

Values must survive the saver's serializer unchanged: LangGraph's msgpack
serde turns tuples into lists, so a reducer reads a tuple write exactly like a
list write, and values should not rely on tuples staying tuples.
"""

from __future__ import annotations

import copy
import json
import numbers
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Final, Generic, Literal, TypeVar, cast

from langchain_core.messages import (
    AnyMessage,
    BaseMessage,
    BaseMessageChunk,
    RemoveMessage,
    convert_to_messages,
    message_chunk_to_message,
)

# The exact function `DeltaChannel.update`/`replay_writes` use to recognise an
# Overwrite (the dataclass and its two dict forms). Importing it, rather than
# re-deriving the forms, keeps our reducers in step with the channel.
from langgraph.channels.binop import _get_overwrite
from langgraph.graph.message import REMOVE_ALL_MESSAGES

__all__ = [
    "DELETE",
    "REMOVE_ALL_MESSAGES",
    "AppendReducer",
    "DeltaReducer",
    "FoldReducer",
    "MergeReducer",
    "MessagesReducer",
    "SumReducer",
    "UnionReducer",
    "UniqueAppendReducer",
    "WindowReducer",
    "append",
    "append_unique",
    "fold",
    "merge",
    "messages",
    "total",
    "union",
    "window",
]

S = TypeVar("S")

DELETE: Final = "__deltalog_delete__"
"""Deletion marker for `merge`: ``{"key": DELETE}`` removes ``key``.

A plain string, so it survives any serializer (a sentinel object would not
compare equal after a round trip through the checkpoint store).
"""


def _is_batch(write: object) -> bool:
    """Whether a write is a batch of items rather than one item.

    Lists and tuples are batches. Tuples must count too: the msgpack serde
    stores a tuple as a list, so a replay sees a list where the live run saw
    the tuple, and both must mean the same thing.
    """
    return isinstance(write, (list, tuple))


def _items(write: Any) -> list[Any]:
    return list(write) if _is_batch(write) else [write]


class DeltaReducer(ABC, Generic[S]):
    """Base class of the batching-invariant reducers in this module.

    Call it as ``reducer(state, writes) -> new_state``, the signature
    `DeltaChannel` expects. Subclasses implement `_fold` for a batch that
    contains no `Overwrite`; this class handles `Overwrite` the way
    `DeltaChannel.replay_writes` does and never mutates ``state``.

    Attributes:
        value_type: The type of the channel value; ``value_type()`` is the
            empty value (used for a missing seed and for ``Overwrite(None)``).
        __name__: A readable name. `DeltaChannel.__eq__` reads it, and it
            shows in ``repr``.
    """

    value_type: type[Any] = list

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def empty(self) -> S:
        """Return the empty value (``value_type()``)."""
        value: S = self.value_type()
        return value

    def __call__(self, state: Any, writes: Sequence[Any]) -> S:
        """Fold ``writes`` (oldest first) onto ``state`` and return the new state.

        Args:
            state: The current value (any form the reducer coerces, e.g. message
                dicts for `messages`). ``None`` means empty.
            writes: The writes to apply, oldest first. ``Overwrite(v)`` (or
                ``{"__overwrite__": v}``) resets the state to a shallow copy
                of ``v``; later writes fold onto it.

        Returns:
            The new state, a new object unless ``writes`` is empty (then
            ``state`` itself, or the empty value for ``None``). A batch ending with an `Overwrite`
            returns a shallow copy of the overwrite value as given, exactly as
            `DeltaChannel` stores it.

        Raises:
            TypeError: ``writes`` is not a list/tuple of writes, or a write
                has a type this reducer does not accept.
            ValueError: A write is invalid for this reducer (for example a
                `RemoveMessage` naming an id that is not in the state).
        """
        if not isinstance(writes, (list, tuple)):
            raise TypeError(
                f"{self.__name__}: writes must be a list of writes (one per task "
                f"write), got {type(writes).__name__} {writes!r}; wrap a single "
                "write as [write]"
            )
        if not writes:
            return state if state is not None else self.empty()
        base: Any = state
        start = 0
        # The last Overwrite wins, as in DeltaChannel.replay_writes: folding a
        # reset discards everything before it.
        for i, write in enumerate(writes):
            is_overwrite, value = _get_overwrite(write)
            if is_overwrite:
                base = copy.copy(value) if value is not None else self.empty()
                start = i + 1
        rest = writes[start:]
        if not rest:
            result: S = base
            return result
        return self._fold(self.empty() if base is None else base, rest)

    @abstractmethod
    def _fold(self, state: Any, writes: Sequence[Any]) -> S:
        """Apply ``writes`` (no `Overwrite` among them) to ``state``."""

    def __repr__(self) -> str:
        return f"<deltalog reducer {self.__name__}>"


class AppendReducer(DeltaReducer[list[Any]]):
    """List extend: ``state + items``.

    A write that is a list or tuple contributes its items; any other write is
    one item. Batching invariance: list concatenation is associative, and the
    one-pass form builds exactly the concatenation the fold would.
    """

    def _fold(self, state: Any, writes: Sequence[Any]) -> list[Any]:
        result = list(state)
        for write in writes:
            if _is_batch(write):
                result.extend(write)
            else:
                result.append(write)
        return result


class WindowReducer(DeltaReducer[list[Any]]):
    """Bounded window: append, then keep only the last ``size`` items.

    Batching invariance: the last ``size`` items of ``u + v`` depend only on
    the last ``size`` items of ``u``, so trimming between batches (or in the
    middle of one, as this implementation does to bound memory) changes
    nothing. A value set by ``Overwrite`` is kept as given, even when longer
    than ``size``, until the next ordinary write trims it, exactly as
    `DeltaChannel` keeps an overwrite value.
    """

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(
                f"window size must be an int, got {type(size).__name__} {size!r}; "
                "pass the number of items to keep, e.g. window(20)"
            )
        if size <= 0:
            raise ValueError(
                f"window size must be a positive int, got {size}; pass the number "
                "of most recent items to keep, e.g. window(20)"
            )
        super().__init__(f"window({size})")
        self.size = size

    def _fold(self, state: Any, writes: Sequence[Any]) -> list[Any]:
        result = list(state)
        for write in writes:
            result.extend(_items(write))
            # Trim lazily at twice the bound: amortised O(1) per item.
            if len(result) > 2 * self.size:
                del result[: -self.size]
        return result[-self.size :]


class UniqueAppendReducer(DeltaReducer[list[Any]]):
    """Append, de-duplicated by ``key(item)``.

    Items are appended in order unless an item with the same key is already
    present. ``keep="first"`` then ignores the newcomer; ``keep="last"``
    replaces the existing item in place (its position is kept, like a message
    updated by id). Duplicates already in the state (from an `Overwrite`) are
    kept; the first of them is the one matched. Keys must be hashable.

    Batching invariance: the key index is a function of the list alone (first
    position of each key), so rebuilding it at the start of a second batch
    gives the index the single pass would hold at that point.
    """

    def __init__(
        self, key: Callable[[Any], Hashable], *, keep: Literal["first", "last"] = "first"
    ) -> None:
        if not callable(key):
            raise TypeError(
                f"append_unique key must be a callable item -> hashable key, got "
                f"{type(key).__name__} {key!r}; e.g. append_unique(lambda d: d['id'])"
            )
        if keep not in ("first", "last"):
            raise ValueError(
                f"append_unique keep must be 'first' or 'last', got {keep!r}; 'first' "
                "ignores a repeated key, 'last' replaces the earlier item in place"
            )
        name = getattr(key, "__name__", type(key).__name__)
        super().__init__(f"append_unique({name}, keep={keep!r})")
        self.key = key
        self.keep = keep

    def _key(self, item: Any) -> Hashable:
        k = self.key(item)
        try:
            hash(k)
        except TypeError:
            raise TypeError(
                f"{self.__name__}: key returned unhashable {type(k).__name__} {k!r} "
                f"for item {item!r}; return a str, int or tuple"
            ) from None
        return k

    def _fold(self, state: Any, writes: Sequence[Any]) -> list[Any]:
        result = list(state)
        index: dict[Hashable, int] = {}
        for i, item in enumerate(result):
            index.setdefault(self._key(item), i)
        for write in writes:
            for item in _items(write):
                k = self._key(item)
                at = index.get(k)
                if at is None:
                    index[k] = len(result)
                    result.append(item)
                elif self.keep == "last":
                    result[at] = item
        return result


class MergeReducer(DeltaReducer[dict[Any, Any]]):
    """Dict merge: last write wins per key; ``DELETE`` as a value removes the key.

    Each write must be a mapping. Deleting an absent key is a no-op.
    Batching invariance: it is the fold of ``dict.update`` with deletions,
    applied key by key in write order.
    """

    value_type = dict

    def _fold(self, state: Any, writes: Sequence[Any]) -> dict[Any, Any]:
        result = dict(state)
        for write in writes:
            if not isinstance(write, Mapping):
                raise TypeError(
                    f"merge: each write must be a dict of key -> value, got "
                    f"{type(write).__name__} {write!r}; write {{key: value}} or "
                    f"{{key: DELETE}} to remove a key"
                )
            for k, v in write.items():
                if isinstance(v, str) and v == DELETE:
                    result.pop(k, None)
                else:
                    result[k] = v
        return result


class UnionReducer(DeltaReducer[set[Any]]):
    """Set union.

    A write that is a set, frozenset, list or tuple contributes its items; any
    other write is one item. Items must be hashable. Batching invariance: set
    union is associative.
    """

    value_type = set

    def _fold(self, state: Any, writes: Sequence[Any]) -> set[Any]:
        result = set(state)
        for write in writes:
            try:
                if isinstance(write, (set, frozenset, list, tuple)):
                    result.update(write)
                else:
                    result.add(write)
            except TypeError:
                raise TypeError(
                    f"union: items must be hashable, got write {write!r}; use str, "
                    "int or tuple items"
                ) from None
        return result


class SumReducer(DeltaReducer[Any]):
    """Numeric sum, added strictly left to right.

    Each write must be a number (``bool`` is refused, as it is almost always a
    mistake). The additions happen one write at a time in order, never as
    ``state + sum(writes)``: float addition is not associative, and only the
    sequential fold gives the same float whatever the batching.
    """

    value_type = int

    def _fold(self, state: Any, writes: Sequence[Any]) -> Any:
        result = state
        for write in writes:
            if isinstance(write, bool) or not isinstance(write, numbers.Number):
                raise TypeError(
                    f"total: each write must be a number, got {type(write).__name__} "
                    f"{write!r}; write the amount to add, e.g. 1 or 2.5"
                )
            result = result + write
        return result


class FoldReducer(DeltaReducer[S]):
    """A reducer made from a one-write step function: a left fold.

    ``fold(step, empty=list)`` is batching-invariant for *any* deterministic
    ``step(state, write) -> new_state``, because a left fold performs the same
    step calls whatever the batching. ``step`` must not mutate its input.
    """

    def __init__(
        self, step: Callable[[S, Any], S], *, empty: Callable[[], S], name: str | None = None
    ) -> None:
        if not callable(step):
            raise TypeError(
                f"fold step must be a callable (state, write) -> state, got "
                f"{type(step).__name__} {step!r}"
            )
        if not callable(empty):
            raise TypeError(
                f"fold empty must be a zero-argument callable returning the empty "
                f"value (e.g. list or dict), got {type(empty).__name__} {empty!r}"
            )
        super().__init__(name or f"fold({getattr(step, '__name__', 'step')})")
        self.step = step
        self._empty = empty
        self.value_type = type(empty())

    def empty(self) -> S:
        """Return ``empty()``."""
        return self._empty()

    def _fold(self, state: Any, writes: Sequence[Any]) -> S:
        result: S = state
        for write in writes:
            result = self.step(result, write)
        return result


# --- messages ---------------------------------------------------------------

# Roles `convert_to_messages` accepts in a (role, content) pair; "remove" is
# left out because a RemoveMessage needs an id, which a pair cannot carry.
_ROLES: Final = frozenset(
    {"human", "user", "ai", "assistant", "system", "developer", "function", "tool"}
)
# Namespace for the ids this reducer derives for id-less messages.
_ID_NAMESPACE: Final = uuid.UUID("5b0f3c6e-2f4d-4d8e-9a51-6c1e0d7f3a29")


def _is_role_pair(write: Sequence[Any]) -> bool:
    return (
        len(write) == 2
        and isinstance(write[0], str)
        and write[0] in _ROLES
        and isinstance(write[1], (str, list))
    )


def _message_items(write: Any) -> list[Any]:
    """The message-likes in one write.

    A list/tuple is a batch of message-likes, except a two-item
    ``[role, content]`` / ``(role, content)`` pair, which is one message: the
    serializer turns ``("user", "hi")`` into ``["user", "hi"]``, and the
    replay must read it as the live run did.
    """
    if _is_batch(write):
        return [write] if _is_role_pair(write) else list(write)
    return [write]


def _to_message(item: Any) -> BaseMessage:
    if isinstance(item, BaseMessage):
        return message_chunk_to_message(item) if isinstance(item, BaseMessageChunk) else item
    return message_chunk_to_message(convert_to_messages([item])[0])


def _derive_id(prev_id: str | None, position: int, message: BaseMessage, taken: Any) -> str:
    """A deterministic id for an id-less message, unique among ``taken``.

    It depends only on the state at the moment the message is added (the id
    of the last message, the number of messages) and on the message itself,
    all of which a replay reproduces exactly, so every replay derives the same
    id. A clash with an id in use is resolved by a salt counter.
    """
    payload = json.dumps(
        [prev_id, position, message.type, message.content],
        default=repr,
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
    )
    salt = 0
    while True:
        mid = str(uuid.uuid5(_ID_NAMESPACE, payload if not salt else f"{payload}#{salt}"))
        if mid not in taken:
            return mid
        salt += 1


class _MessageList:
    """Working state of one `MessagesReducer` call.

    Removed messages are tombstoned (``None``) and dropped at the end, so a
    batch costs O(len(state) + number of messages written) however many
    writes it holds. Every observable quantity (``live`` count, last live id)
    ignores tombstones, so the result never depends on where a batch starts.
    """

    def __init__(self, state: Any) -> None:
        self.items: list[BaseMessage | None] = []
        self.index: dict[str, int] = {}  # id -> last position holding it
        self.dups: dict[str, list[int]] = {}  # id -> earlier positions, if repeated
        self.live = 0
        items, index = self.items, self.index
        for item in _items(state):
            mid = getattr(item, "id", None)
            if (
                mid is not None
                and isinstance(item, BaseMessage)
                and not isinstance(item, BaseMessageChunk)
            ):
                # Fast path: the reducer's own output (typed, with ids).
                if mid in index:
                    self.dups.setdefault(mid, []).append(index[mid])
                index[mid] = len(items)
                items.append(item)
                self.live += 1
            else:
                self.append(_to_message(item))

    def last_id(self) -> str | None:
        for m in reversed(self.items):
            if m is not None:
                return m.id
        return None

    def with_id(self, m: BaseMessage) -> tuple[BaseMessage, str]:
        """``m`` with an id (a copy if one had to be derived), and that id."""
        if m.id is not None:
            return m, m.id
        mid = _derive_id(self.last_id(), self.live, m, self.index)
        return m.model_copy(update={"id": mid}), mid

    def append(self, m: BaseMessage) -> None:
        m, mid = self.with_id(m)
        if mid in self.index:
            self.dups.setdefault(mid, []).append(self.index[mid])
        self.index[mid] = len(self.items)
        self.items.append(m)
        self.live += 1

    def remove(self, mid: str) -> None:
        for at in [*self.dups.pop(mid, []), self.index.pop(mid)]:
            if self.items[at] is not None:
                self.items[at] = None
                self.live -= 1

    def clear(self) -> None:
        self.items, self.index, self.dups, self.live = [], {}, {}, 0

    def result(self) -> list[AnyMessage]:
        return cast("list[AnyMessage]", [m for m in self.items if m is not None])


class MessagesReducer(DeltaReducer[list[AnyMessage]]):
    """`add_messages` semantics as a batching-invariant `DeltaChannel` reducer.

    The result equals folding LangGraph's ``add_messages`` over the writes one
    write at a time (``add_messages(add_messages(s, w1), w2) ...``), so a
    graph switched from ``Annotated[list, add_messages]`` to
    ``DeltaMessages`` keeps its behaviour. Per write:

    * A write is a message-like or a list/tuple of them: `BaseMessage`
      (chunks become messages), ``str`` (a human message), a message dict
      (``{"role": ..., "content": ...}``) or a ``(role, content)`` pair.
    * A message whose id is already present replaces it in place; a new id is
      appended.
    * ``RemoveMessage(id=...)`` deletes that message at the end of the write
      (a later message with the same id in the same write cancels the
      removal and replaces it in place, as in ``add_messages``); an id that
      is not present raises ``ValueError``.
    * ``RemoveMessage(id=REMOVE_ALL_MESSAGES)`` clears the list; the rest of
      the write is then merged into the empty list.

    Ids: messages without an id get a *deterministic* id derived from the
    state at the moment they are added (see `_derive_id`), never a random
    one, so every replay of the history assigns the same id and messages can
    later be updated or removed by it. (The LangGraph runtime already gives
    message objects and message dicts written to any `DeltaChannel` a random
    id before they are stored; strings and ``(role, content)`` pairs are
    stored as they are and get their id here.)

    Deliberate differences from ``add_messages`` (see docs/channels.md):

    1. Id-less messages get deterministic ids instead of ``uuid4`` ids.
    2. A top-level two-item write ``[role, content]`` whose first item is a
       role name is one message, like the tuple ``(role, content)`` it is
       after serialization; ``add_messages`` reads such a list as two human
       messages. Wrap it (``[[role, content]]``) or use message objects to be
       explicit. Likewise a top-level tuple of messages is a batch.
    3. After ``REMOVE_ALL_MESSAGES`` the rest of the write is merged (update
       by id, removals) into the empty list; ``add_messages`` returns that
       tail verbatim, duplicates and `RemoveMessage` objects included.
    4. Messages are never mutated: an id is set on a copy.
    5. The ``format="langchain-openai"`` option is not offered.
    """

    def _fold(self, state: Any, writes: Sequence[Any]) -> list[AnyMessage]:
        acc = _MessageList(state)
        for write in writes:
            msgs = [_to_message(item) for item in _message_items(write)]
            for i in range(len(msgs) - 1, -1, -1):
                m = msgs[i]
                if isinstance(m, RemoveMessage) and m.id == REMOVE_ALL_MESSAGES:
                    acc.clear()
                    msgs = msgs[i + 1 :]
                    break
            # Removals apply at the end of the write, as in add_messages:
            # [RemoveMessage(x), Message(x)] in one write replaces x in place.
            to_remove: set[str] = set()
            for raw in msgs:
                m, mid = acc.with_id(raw)
                at = acc.index.get(mid)
                if at is None:
                    if isinstance(m, RemoveMessage):
                        raise ValueError(
                            f"messages: RemoveMessage(id={mid!r}) names a message "
                            "that is not in the state; remove only ids present "
                            "(or use REMOVE_ALL_MESSAGES to clear the list)"
                        )
                    acc.append(m)
                elif isinstance(m, RemoveMessage):
                    to_remove.add(mid)
                else:
                    to_remove.discard(mid)
                    acc.items[at] = m
            for mid in to_remove:
                acc.remove(mid)
        return acc.result()


# --- public instances and factories -------------------------------------------

messages: Final = MessagesReducer("messages")
"""`add_messages` for `DeltaChannel`: update by id, `RemoveMessage`,
`REMOVE_ALL_MESSAGES`, coercion, chunk conversion, deterministic ids."""

append: Final = AppendReducer("append")
"""List extend; a non-list write is one item."""

merge: Final = MergeReducer("merge")
"""Dict merge, last write wins per key; ``{key: DELETE}`` removes ``key``."""

union: Final = UnionReducer("union")
"""Set union."""

total: Final = SumReducer("total")
"""Numeric sum, added left to right."""


def append_unique(
    key: Callable[[Any], Hashable], *, keep: Literal["first", "last"] = "first"
) -> UniqueAppendReducer:
    """Return an append reducer that de-duplicates by ``key(item)``.

    Args:
        key: Maps an item to a hashable key, e.g. ``lambda d: d["id"]``.
        keep: ``"first"`` ignores an item whose key is present; ``"last"``
            replaces the present item in place.

    Returns:
        The reducer. Create it once and reuse the object: `DeltaChannel`
        compares reducers by identity.

    Raises:
        TypeError: ``key`` is not callable.
        ValueError: ``keep`` is neither ``"first"`` nor ``"last"``.
    """
    return UniqueAppendReducer(key, keep=keep)


def window(size: int) -> WindowReducer:
    """Return a list reducer that keeps only the last ``size`` items.

    Args:
        size: How many of the most recent items to keep (positive int).

    Returns:
        The reducer. Create it once and reuse the object.

    Raises:
        TypeError: ``size`` is not an int.
        ValueError: ``size`` is not positive.
    """
    return WindowReducer(size)


def fold(
    step: Callable[[S, Any], S], *, empty: Callable[[], S], name: str | None = None
) -> FoldReducer[S]:
    """Turn a one-write step function into a batching-invariant reducer.

    Args:
        step: ``step(state, write) -> new_state``; deterministic, and must not
            mutate ``state``.
        empty: Returns the empty value (``list``, ``dict``, ``lambda: 0`` ...).
        name: Name shown in ``repr``; defaults to ``fold(<step name>)``.

    Returns:
        A reducer that applies ``step`` once per write, handling `Overwrite`.

    Raises:
        TypeError: ``step`` or ``empty`` is not callable.
    """
    return FoldReducer(step, empty=empty, name=name)
