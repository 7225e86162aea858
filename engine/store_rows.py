"""Row types shared by the store (which produces them) and the pure core."""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

__all__ = [
    "FLAG_HIDDEN",
    "BlobRow",
    "CheckpointRow",
    "DeltaHistory",
    "HistoryEntry",
    "ThreadSummary",
    "Typed",
    "Version",
    "WriteRow",
]

Typed = tuple[str, bytes]
"""A value as ``serde.dumps_typed`` returned it."""
Version = str | int | float

FLAG_HIDDEN: Final = 1
"""Checkpoint flag: kept only so a later checkpoint can be rebuilt; not listed."""


class WriteRow(NamedTuple):
    """One stored write, as put_writes received it (value still serialized)."""

    task_id: str
    channel: str
    value: Typed
    task_path: str
    idx: int


class StoredValue(NamedTuple):
    """A channel value as stored: the record (the key of decoded-value caches),
    where it lives (for errors) and its resolved ``(type, payload)``."""

    record: builtins.bytes
    where: str
    typed: Typed


class HistoryEntry:
    """One remembered delta history of a channel at a checkpoint (see :mod:`deltalog.engine.memo`).

    Immutable once built. Identity matters: the saver keys its decoded copies
    of ``writes`` by the entry object (weakly), so they go when it does.
    """

    __slots__ = ("__weakref__", "built_at", "cost", "epoch", "payload", "seed", "writes")

    def __init__(
        self,
        seed: StoredValue | None,
        writes: tuple[WriteRow, ...],
        built_at: int,
        epoch: int,
        cost: int,
        payload: int,
    ) -> None:
        self.seed = seed
        self.writes = writes
        self.built_at = built_at
        self.epoch = epoch
        self.cost = cost
        self.payload = payload


class DeltaHistory(NamedTuple):
    """One channel's delta history as the store read it.

    ``writes`` is ``base.writes`` followed by the writes read fresh when
    ``base`` is set (the walk stopped at a remembered history); ``entry`` is
    the history remembered for the asked checkpoint, if it was.
    """

    seed: StoredValue | None
    writes: tuple[WriteRow, ...]
    entry: HistoryEntry | None = None
    base: HistoryEntry | None = None


class BlobRow(NamedTuple):
    """One stored channel value (still serialized)."""

    channel: str
    version: Version
    value: Typed


@dataclass
class CheckpointRow:
    """A checkpoint as stored: serialized parts plus the decoded envelope."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    channel_versions: dict[str, Version]
    checkpoint: Typed
    metadata: Typed
    flags: int
    run_id: str | None
    inline: dict[str, list[Any]] = field(default_factory=dict)
    """Values the record holds itself (format 3): channel → ``[type, bytes]``."""
    blobbed: int | None = None
    """Which versions have a blob (format 5; see ``CheckpointEnvelope.blobbed``)."""
    values: dict[str, StoredValue] = field(default_factory=dict)
    writes: list[WriteRow] = field(default_factory=list)

    @property
    def hidden(self) -> bool:
        """True when the checkpoint is kept only to reconstruct a later one (pruned)."""
        return bool(self.flags & FLAG_HIDDEN)


@dataclass
class ThreadSummary:
    """One thread as ``deltalog threads`` lists it (read from keys and sizes only)."""

    thread_id: str
    checkpoints: int = 0
    writes: int = 0
    blobs: int = 0
    bytes: int = 0
    namespaces: list[str] = field(default_factory=list)
    newest_id: str | None = None
    newest_key: builtins.bytes | None = None
