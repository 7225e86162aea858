"""One-line declarations of `DeltaChannel` state fields.

```python
from typing import Annotated
from typing_extensions import TypedDict
from deltalog.channels import DeltaMessages, append, delta, merge


class State(TypedDict):
    messages: DeltaMessages                             # add_messages semantics
    events: Annotated[list, delta(append, snapshot_every=50)]
    settings: Annotated[dict, delta(merge)]
```

`delta` returns a plain, correctly configured `langgraph.channels.delta.
DeltaChannel`; LangGraph's `StateGraph` reads it from the annotation and takes
the value type from the annotated type (``list``, ``dict``, ``set``, ``int``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

from deltalog.channels.reducers import DeltaReducer, messages
from langchain_core.messages import AnyMessage
from langgraph.channels.delta import DeltaChannel
from typing_extensions import TypedDict

__all__ = ["DEFAULT_SNAPSHOT_EVERY", "DeltaMessages", "DeltaMessagesState", "delta"]

DEFAULT_SNAPSHOT_EVERY = 100
"""`DeltaChannel`'s own default ``snapshot_frequency``."""


def delta(
    reducer: Callable[[Any, Sequence[Any]], Any],
    *,
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
    typ: type[Any] | None = None,
) -> DeltaChannel[Any]:
    """Return a `DeltaChannel` for use in ``Annotated[T, delta(...)]``.

    Args:
        reducer: A batching-invariant reducer ``(state, [writes]) -> state``,
            e.g. one from `deltalog.channels.reducers`. Pass the same object
            wherever the field is declared: `DeltaChannel` compares reducers
            by identity.
        snapshot_every: Store a full `_DeltaSnapshot` of the value every this
            many updates of the channel (the channel's ``snapshot_frequency``).
            Lower means more storage and faster reads; see docs/channels.md.
        typ: The value type, whose ``typ()`` is the empty value. Defaults to
            the reducer's ``value_type`` (``list`` for plain callables);
            `StateGraph` replaces it with the annotated type anyway.

    Returns:
        A new `DeltaChannel`.

    Raises:
        TypeError: ``reducer`` is not callable, or ``snapshot_every`` is not
            an int.
        ValueError: ``snapshot_every`` is not positive.
    """
    if not callable(reducer):
        raise TypeError(
            f"delta() needs a reducer callable (state, [writes]) -> state, got "
            f"{type(reducer).__name__} {reducer!r}; e.g. delta(append) or delta(messages)"
        )
    if isinstance(snapshot_every, bool) or not isinstance(snapshot_every, int):
        raise TypeError(
            f"snapshot_every must be an int, got {type(snapshot_every).__name__} "
            f"{snapshot_every!r}; e.g. delta(append, snapshot_every=50)"
        )
    if snapshot_every <= 0:
        raise ValueError(
            f"snapshot_every must be a positive int, got {snapshot_every}; use 1 to "
            f"store the full value at every update, or a larger number (default "
            f"{DEFAULT_SNAPSHOT_EVERY}) to store less and replay more on read"
        )
    if typ is None and isinstance(reducer, DeltaReducer):
        typ = reducer.value_type
    return DeltaChannel(reducer, typ, snapshot_frequency=snapshot_every)


DeltaMessages = Annotated[list[AnyMessage], delta(messages)]
"""A chat-history field: ``messages: DeltaMessages``.

`add_messages` semantics (see `deltalog.channels.reducers.MessagesReducer`)
in a `DeltaChannel` with the default snapshot cadence. For another cadence
write ``Annotated[list[AnyMessage], delta(messages, snapshot_every=N)]``.
"""


class DeltaMessagesState(TypedDict):
    """`MessagesState` with the history in a `DeltaChannel`."""

    messages: DeltaMessages
