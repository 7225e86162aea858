"""Rebuild `DeltaChannel` values from stored checkpoints, without the runtime.

A delta channel's value at a checkpoint is its *seed* (the `_DeltaSnapshot`
value or plain value stored at the nearest ancestor that stored one, or the
empty value) with the *writes* of every checkpoint between that ancestor and
the target replayed through the reducer in one call, the last `Overwrite`
resetting (`DeltaChannel.replay_writes`).

* `replay` does that for one channel given the seed and the writes.
* `Reconstructor` does it for a whole checkpoint, reading through any
  `BaseCheckpointSaver`'s public API only (``get_tuple`` /
  ``get_delta_channel_history`` and their async twins), and returns the same
  values ``graph.get_state(config).values`` shows. The saver's forced-snapshot
  prune, ``verify`` and the CLI's ``show`` use it.

Both delegate the per-channel arithmetic to `DeltaChannel.from_checkpoint` and
`DeltaChannel.replay_writes` themselves, so they cannot drift from the runtime.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from deltalog.channels.reducers import DeltaReducer
from langchain_core.runnables import RunnableConfig

# The runtime's "nothing stored" sentinel: `BaseChannel.from_checkpoint`
# distinguishes it from a stored `None`, and no public name exports it.
from langgraph._internal._typing import MISSING
from langgraph.channels.base import BaseChannel
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
)
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.errors import EmptyChannelError
from langgraph.pregel import Pregel

__all__ = [
    "NULL_TASK_ID",
    "ChannelSource",
    "Reconstructor",
    "delta_channels",
    "replay",
    "replay_history",
]

NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
"""Task id of writes that are input to a checkpoint rather than task output
(``Command(update=...)`` on resume, graph input). Readers apply them as part
of that checkpoint's own state."""

Reducer = Callable[[Any, Sequence[Any]], Any]
ChannelSource = Union["Pregel[Any, Any, Any, Any]", Mapping[str, DeltaChannel[Any] | Reducer]]
"""Where channel specs come from: a compiled graph, or ``{channel: reducer}``
(a `DeltaChannel` or a reducer callable per delta channel)."""


def _channel_for(reducer: Reducer | DeltaChannel[Any], typ: type[Any] | None) -> DeltaChannel[Any]:
    if isinstance(reducer, DeltaChannel):
        return reducer
    if not callable(reducer):
        raise TypeError(
            f"expected a reducer callable (state, [writes]) -> state or a DeltaChannel, "
            f"got {type(reducer).__name__} {reducer!r}"
        )
    if typ is None:
        typ = reducer.value_type if isinstance(reducer, DeltaReducer) else list
    return DeltaChannel(reducer, typ)


def _check_writes(writes: Sequence[PendingWrite]) -> None:
    for w in writes:
        if not (isinstance(w, (tuple, list)) and len(w) == 3 and isinstance(w[1], str)):
            raise TypeError(
                f"replay: each write must be a PendingWrite (task_id, channel, value), "
                f"got {w!r}; pass history['writes'] from get_delta_channel_history, or "
                "wrap plain values as ('', channel, value)"
            )


def replay(
    seed: Any,
    writes: Sequence[PendingWrite],
    reducer: Reducer | DeltaChannel[Any],
    *,
    typ: type[Any] | None = None,
) -> Any:
    """Return a delta channel's value: ``seed`` with ``writes`` replayed.

    Exactly what the runtime computes: `DeltaChannel.from_checkpoint(seed)`
    then `DeltaChannel.replay_writes(writes)` (one reducer call; the last
    `Overwrite` resets the value, ``Overwrite(None)`` to empty).

    Args:
        seed: The stored value the replay starts from: a `_DeltaSnapshot`, a
            plain value (a thread written before the field became a delta
            channel), or ``None`` for "no seed" (start empty).
        writes: The channel's writes after the seed, oldest first, as
            `PendingWrite` tuples ``(task_id, channel, value)``.
        reducer: The channel's reducer, or its `DeltaChannel` spec.
        typ: Value type whose ``typ()`` is the empty value; defaults to the
            reducer's ``value_type``, else ``list``.

    Returns:
        The channel value.

    Raises:
        TypeError: A write is not a ``(task_id, channel, value)`` tuple, or
            ``reducer`` is not callable.
    """
    _check_writes(writes)
    ch = _channel_for(reducer, typ).from_checkpoint(MISSING if seed is None else seed)
    ch.replay_writes(writes)
    return ch.get()


def replay_history(
    history: DeltaChannelHistory,
    reducer: Reducer | DeltaChannel[Any],
    *,
    typ: type[Any] | None = None,
) -> Any:
    """`replay` one entry of ``saver.get_delta_channel_history(...)``.

    Args:
        history: ``{"writes": [...], "seed": ...}``; no ``seed`` means empty.
        reducer: The channel's reducer, or its `DeltaChannel` spec.
        typ: As for `replay`.

    Returns:
        The channel value.

    Raises:
        TypeError: As for `replay`.
    """
    return replay(history.get("seed"), history["writes"], reducer, typ=typ)


def delta_channels(source: ChannelSource) -> dict[str, DeltaChannel[Any]]:
    """Return the `DeltaChannel` spec of every delta channel in ``source``.

    Args:
        source: A compiled graph (its ``channels``), or a mapping of channel
            name to `DeltaChannel` or reducer callable.

    Returns:
        Channel name to `DeltaChannel`, in ``source`` order.

    Raises:
        TypeError: ``source`` is neither, or a mapping value is neither a
            `DeltaChannel` nor callable.
    """
    if isinstance(source, Pregel):
        return {k: v for k, v in source.channels.items() if isinstance(v, DeltaChannel)}
    if isinstance(source, Mapping):
        return {str(k): _channel_for(v, None) for k, v in source.items()}
    raise TypeError(
        f"expected a compiled graph or a mapping {{channel: reducer}}, got "
        f"{type(source).__name__} {source!r}"
    )


def _is_internal(name: str) -> bool:
    """LangGraph's own channels: edges (``branch:to:x``, ``join:a+b:c``),
    ``__start__``, ``__pregel_tasks``. Never part of a graph's state."""
    return name.startswith(("branch:", "join:")) or (name.startswith("__") and name != "__root__")


@dataclass
class _Plan:
    """What one checkpoint needs: channels to read, and which need a replay."""

    saved: CheckpointTuple
    specs: dict[str, BaseChannel[Any, Any, Any]]  # selected channels that have a spec
    plain: list[str]  # selected stored channels without a spec (mapping mode)
    replay: list[str] = field(default_factory=list)


def _plan(
    saved: CheckpointTuple,
    specs: Mapping[str, BaseChannel[Any, Any, Any]],
    selection: Sequence[str] | None,
    *,
    graph_mode: bool,
) -> _Plan:
    stored = saved.checkpoint["channel_values"]
    versions = saved.checkpoint["channel_versions"]
    if selection is None:
        names = list(specs)
        if not graph_mode:
            names += [k for k in stored if k not in specs and not _is_internal(k)]
    else:
        names = list(dict.fromkeys(selection))
    plan = _Plan(saved, {}, [])
    for name in names:
        spec = specs.get(name)
        if spec is None:
            if name in stored:
                if isinstance(stored[name], _DeltaSnapshot):
                    raise ValueError(
                        f"channel {name!r} is stored as a DeltaChannel snapshot but has "
                        f"no reducer; add it to the reducer map (or pass the graph)"
                    )
                plan.plain.append(name)
            continue
        plan.specs[name] = spec
        # As the runtime: a stored snapshot or plain value resolves directly; a
        # channel without a version was never written and is empty. A
        # BinaryOperatorAggregate with nothing stored was written as a delta
        # channel before its annotation changed and is replayed too.
        if (
            isinstance(spec, (DeltaChannel, BinaryOperatorAggregate))
            and name in versions
            and stored.get(name, MISSING) is MISSING
        ):
            plan.replay.append(name)
    return plan


def _replayed(
    spec: BaseChannel[Any, Any, Any], history: DeltaChannelHistory
) -> BaseChannel[Any, Any, Any]:
    ch = spec.from_checkpoint(history.get("seed", MISSING))
    if isinstance(ch, DeltaChannel):
        ch.replay_writes(history["writes"])
    else:
        # One update per write: the writes span several supersteps, and a
        # single call would refuse a second Overwrite.
        for _, _, value in history["writes"]:
            ch.update([value])
    return ch


def _assemble(plan: _Plan, histories: Mapping[str, DeltaChannelHistory]) -> dict[str, Any]:
    stored = plan.saved.checkpoint["channel_values"]
    channels: dict[str, BaseChannel[Any, Any, Any]] = {}
    for name, spec in plan.specs.items():
        if name in histories:
            channels[name] = _replayed(spec, histories[name])
        else:
            channels[name] = spec.from_checkpoint(stored.get(name, MISSING))
    # The checkpoint's NULL_TASK_ID writes (e.g. a resume's Command(update=...))
    # are part of its state: get_state applies them, per channel, in order.
    null_writes: dict[str, list[Any]] = {}
    for task_id, name, value in plan.saved.pending_writes or ():
        if task_id == NULL_TASK_ID and name in channels:
            null_writes.setdefault(name, []).append(value)
    for name, values in null_writes.items():
        channels[name].update(values)
    out: dict[str, Any] = {}
    for name, ch in channels.items():
        with contextlib.suppress(EmptyChannelError):  # an unset channel is not shown
            out[name] = ch.get()
    for name in plan.plain:
        out[name] = stored[name]
    return out


def _normalise(config: RunnableConfig) -> RunnableConfig:
    conf = config.get("configurable", {})
    if "thread_id" in conf and not isinstance(conf["thread_id"], str):
        return {**config, "configurable": {**conf, "thread_id": str(conf["thread_id"])}}
    return config


class Reconstructor:
    """Rebuild a checkpoint's state values from a saver, without running the graph.

    ``Reconstructor(saver, graph).reconstruct(config)`` equals
    ``graph.get_state(config).values`` for any checkpoint ``config`` names,
    and for the latest one when it has no finished-task writes pending (see
    below). It reads only through the public `BaseCheckpointSaver` API, so
    it works with any saver:

    1. ``get_tuple(config)`` (``None`` -> ``{}``).
    2. One ``get_delta_channel_history(config=saved.config, channels=...)``
       call for every delta channel with nothing stored at the checkpoint
       and a version (written on this branch).
    3. Every channel hydrated as the runtime does: a stored value or
       snapshot through ``from_checkpoint``, a history through
       ``replay_writes``, a never-written delta channel as its empty value.
    4. The checkpoint's own ``NULL_TASK_ID`` pending writes applied.

    Sources:

    * A compiled graph: every channel's spec comes from ``graph.channels``
      and the result holds the channels ``get_state`` shows (the state
      schema's non-empty channels). For a graph whose state is one bare root
      channel, ``get_state().values`` is ``result["__root__"]``. For a
      subgraph's namespace pass the subgraph.
    * A mapping ``{channel: reducer or DeltaChannel}`` naming the delta
      channels: those are rebuilt; every other stored, non-internal channel
      value is returned as stored (no spec, so its ``NULL_TASK_ID`` writes
      are not applied: pass the graph when a resume updated such channels).

    Difference from ``get_state``: for the latest checkpoint of a superstep
    that was interrupted while some of its tasks had finished, ``get_state``
    (without a ``checkpoint_id``) also shows those tasks' writes. Those are
    pending writes, not checkpoint state; finding which ones apply needs the
    graph's task planner, so they are not applied here (the same checkpoint
    addressed by id, as ``get_state_history`` does, matches exactly).

    Args:
        saver: Any checkpoint saver.
        source: A compiled graph, or ``{channel: reducer or DeltaChannel}``.

    Raises:
        TypeError: ``source`` is neither a compiled graph nor a mapping of
            reducers.
    """

    def __init__(self, saver: BaseCheckpointSaver[Any], source: ChannelSource) -> None:
        if not isinstance(saver, BaseCheckpointSaver):
            raise TypeError(
                f"Reconstructor needs a BaseCheckpointSaver, got {type(saver).__name__} {saver!r}"
            )
        self.saver = saver
        self._graph_mode = isinstance(source, Pregel)
        self._specs: dict[str, BaseChannel[Any, Any, Any]]
        if isinstance(source, Pregel):
            select = source.stream_channels_asis
            names = [select] if isinstance(select, str) else list(select)
            self._specs = {
                k: spec for k in names if isinstance(spec := source.channels.get(k), BaseChannel)
            }
        else:
            self._specs = dict(delta_channels(source))

    @property
    def delta_channels(self) -> dict[str, DeltaChannel[Any]]:
        """The delta channels this reconstructor replays, with their specs."""
        return {k: v for k, v in self._specs.items() if isinstance(v, DeltaChannel)}

    def _plan(self, saved: CheckpointTuple, channels: Sequence[str] | None) -> _Plan:
        if channels is not None and self._graph_mode:
            unknown = [c for c in channels if c not in self._specs]
            if unknown:
                raise ValueError(
                    f"channels {unknown} are not in the graph's state; choose from "
                    f"{sorted(self._specs)}"
                )
        return _plan(saved, self._specs, channels, graph_mode=self._graph_mode)

    def reconstruct(
        self, config: RunnableConfig, *, channels: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """Return the state values at the checkpoint ``config`` names.

        Args:
            config: ``{"configurable": {"thread_id": ..., "checkpoint_ns": ...,
                "checkpoint_id": ...}}``; without ``checkpoint_id``, the
                latest checkpoint of the thread.
            channels: Only these channels (e.g. ``["messages"]``); default all.
                Only their histories are read.

        Returns:
            Channel name to value, as ``get_state(config).values``; ``{}`` when
            there is no such checkpoint.

        Raises:
            ValueError: In graph mode, a name in ``channels`` is not in the
                graph's state; in mapping mode, a channel is stored as a
                `_DeltaSnapshot` but has no reducer in the mapping.
        """
        saved = self.saver.get_tuple(_normalise(config))
        if saved is None:
            return {}
        plan = self._plan(saved, channels)
        histories = (
            self.saver.get_delta_channel_history(config=saved.config, channels=plan.replay)
            if plan.replay
            else {}
        )
        return _assemble(plan, histories)

    async def areconstruct(
        self, config: RunnableConfig, *, channels: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """Async `reconstruct` (``aget_tuple``, ``aget_delta_channel_history``).

        Args:
            config: As for `reconstruct`.
            channels: As for `reconstruct`.

        Returns:
            As for `reconstruct`.

        Raises:
            ValueError: As for `reconstruct`.
        """
        saved = await self.saver.aget_tuple(_normalise(config))
        if saved is None:
            return {}
        plan = self._plan(saved, channels)
        histories = (
            await self.saver.aget_delta_channel_history(config=saved.config, channels=plan.replay)
            if plan.replay
            else {}
        )
        return _assemble(plan, histories)
