"""Snapshot policy: how far each delta channel of a checkpoint is from its seed.

LangGraph writes a `_DeltaSnapshot` of a delta channel when EITHER the
channel has been updated ``snapshot_frequency`` times since its last snapshot
OR ``DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT`` supersteps (default 5000, env
``LANGGRAPH_DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT``) have passed. It keeps the
two counters in each checkpoint's metadata under
``counters_since_delta_snapshot`` as ``{channel: (updates, supersteps)}``.

`read_counters` parses that field; `explain` / `aexplain` report, per delta
channel of a checkpoint, what a read costs (the seed, the writes to replay
and their serialized bytes) and how soon the next snapshot is due.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from deltalog.channels.replay import ChannelSource, delta_channels
from langchain_core.runnables import RunnableConfig
from langgraph._internal._config import DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, DeltaChannelHistory
from langgraph.checkpoint.serde.types import _DeltaSnapshot

__all__ = [
    "MAX_SUPERSTEPS_SINCE_SNAPSHOT",
    "ChannelReplayCost",
    "aexplain",
    "explain",
    "read_counters",
]

MAX_SUPERSTEPS_SINCE_SNAPSHOT: int = DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT
"""The runtime's superstep bound on replay depth, as configured in this process."""

SeedKind = Literal["snapshot", "value", "empty"]


def read_counters(metadata: Mapping[str, Any] | None) -> dict[str, tuple[int, int]]:
    """Parse ``counters_since_delta_snapshot`` from checkpoint metadata.

    A channel absent from the field has both counters at zero (the runtime
    drops zero entries). Serializers may return the pairs as lists; they come
    back as tuples.

    Args:
        metadata: A checkpoint's metadata (``CheckpointTuple.metadata``).

    Returns:
        Channel name to ``(updates, supersteps)`` since its last snapshot.

    Raises:
        ValueError: The field is present but not ``{str: (int, int)}``.
    """
    raw = (metadata or {}).get("counters_since_delta_snapshot") or {}
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"counters_since_delta_snapshot must map channel -> (updates, supersteps), "
            f"got {type(raw).__name__} {raw!r}"
        )
    out: dict[str, tuple[int, int]] = {}
    for name, pair in raw.items():
        if (
            not isinstance(pair, (tuple, list))
            or len(pair) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in pair)
        ):
            raise ValueError(
                f"counters_since_delta_snapshot[{name!r}] must be (updates, supersteps), "
                f"got {pair!r}"
            )
        out[str(name)] = (pair[0], pair[1])
    return out


@dataclass(frozen=True)
class ChannelReplayCost:
    """What reading one delta channel at one checkpoint costs.

    Attributes:
        channel: Channel name.
        snapshot_frequency: The channel's ``snapshot_frequency``.
        updates_since_snapshot: Supersteps that wrote the channel since its
            last snapshot (metadata counter).
        supersteps_since_snapshot: Supersteps since its last snapshot.
        updates_until_snapshot: Updates left before the cadence snapshots it.
        supersteps_until_snapshot: Supersteps left before the superstep bound
            forces a snapshot.
        seed: ``"snapshot"`` (a `_DeltaSnapshot`), ``"value"`` (a plain stored
            value, e.g. from before the field became a delta channel) or
            ``"empty"`` (no stored value on the path: replay from empty).
        seed_at_checkpoint: The seed is stored at this checkpoint itself, so a
            read replays nothing.
        seed_bytes: Serialized size of the seed (``saver.serde``), 0 if empty.
        writes_to_replay: Writes a read of this checkpoint replays.
        replay_bytes: Their serialized size (``saver.serde``, before any
            compression the saver applies).
    """

    channel: str
    snapshot_frequency: int
    updates_since_snapshot: int
    supersteps_since_snapshot: int
    updates_until_snapshot: int
    supersteps_until_snapshot: int
    seed: SeedKind
    seed_at_checkpoint: bool
    seed_bytes: int
    writes_to_replay: int
    replay_bytes: int

    def as_dict(self) -> dict[str, Any]:
        """Return the fields as a JSON-ready dict (for ``--json`` output)."""
        return asdict(self)


def _to_explain(saved: CheckpointTuple, specs: Mapping[str, DeltaChannel[Any]]) -> list[str]:
    stored = saved.checkpoint["channel_values"]
    versions = saved.checkpoint["channel_versions"]
    return [k for k in specs if k in versions and k not in stored]


def _size(saver: BaseCheckpointSaver[Any], value: Any) -> int:
    return len(saver.serde.dumps_typed(value)[1])


def _costs(
    saver: BaseCheckpointSaver[Any],
    saved: CheckpointTuple,
    specs: Mapping[str, DeltaChannel[Any]],
    histories: Mapping[str, DeltaChannelHistory],
) -> dict[str, ChannelReplayCost]:
    counters = read_counters(saved.metadata)
    stored = saved.checkpoint["channel_values"]
    out: dict[str, ChannelReplayCost] = {}
    for name, spec in specs.items():
        updates, supersteps = counters.get(name, (0, 0))
        if name in stored:
            seed_value: Any = stored[name]
            writes: Sequence[Any] = ()
            at_checkpoint = True
        else:
            history = histories.get(name, {"writes": []})
            seed_value = history.get("seed")
            writes = history["writes"]
            at_checkpoint = False
        seed: SeedKind
        if seed_value is None:
            seed = "empty"
        elif isinstance(seed_value, _DeltaSnapshot):
            seed = "snapshot"
        else:
            seed = "value"
        out[name] = ChannelReplayCost(
            channel=name,
            snapshot_frequency=spec.snapshot_frequency,
            updates_since_snapshot=updates,
            supersteps_since_snapshot=supersteps,
            updates_until_snapshot=max(spec.snapshot_frequency - updates, 0),
            supersteps_until_snapshot=max(MAX_SUPERSTEPS_SINCE_SNAPSHOT - supersteps, 0),
            seed=seed,
            seed_at_checkpoint=at_checkpoint,
            seed_bytes=0 if seed_value is None else _size(saver, seed_value),
            writes_to_replay=len(writes),
            replay_bytes=sum(_size(saver, w[2]) for w in writes),
        )
    return out


def explain(
    saver: BaseCheckpointSaver[Any], config: RunnableConfig, source: ChannelSource
) -> dict[str, ChannelReplayCost]:
    """Report, for each delta channel, how far a checkpoint is from its seed.

    One ``get_tuple`` and one ``get_delta_channel_history`` call (public saver
    API only), so the cost is the saver's: for deltalog, the ancestors back to
    the nearest seed and their writes for these channels.

    Args:
        saver: Any checkpoint saver.
        config: Names the checkpoint; without ``checkpoint_id``, the latest
            of the thread.
        source: A compiled graph, or ``{channel: reducer or DeltaChannel}``
            (only the delta channels and their ``snapshot_frequency`` are used).

    Returns:
        Channel name to its `ChannelReplayCost`; ``{}`` if there is no such
        checkpoint.

    Raises:
        TypeError: ``source`` is neither a graph nor a mapping of reducers.
    """
    specs = delta_channels(source)
    saved = saver.get_tuple(config)
    if saved is None:
        return {}
    names = _to_explain(saved, specs)
    histories = (
        saver.get_delta_channel_history(config=saved.config, channels=names) if names else {}
    )
    return _costs(saver, saved, specs, histories)


async def aexplain(
    saver: BaseCheckpointSaver[Any], config: RunnableConfig, source: ChannelSource
) -> dict[str, ChannelReplayCost]:
    """Async `explain`.

    Args:
        saver: As for `explain`.
        config: As for `explain`.
        source: As for `explain`.

    Returns:
        As for `explain`.

    Raises:
        TypeError: As for `explain`.
    """
    specs = delta_channels(source)
    saved = await saver.aget_tuple(config)
    if saved is None:
        return {}
    names = _to_explain(saved, specs)
    histories = (
        await saver.aget_delta_channel_history(config=saved.config, channels=names) if names else {}
    )
    return _costs(saver, saved, specs, histories)
