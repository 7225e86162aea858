"""Pure functions over decoded rows: no transactions, no serde, no I/O.

The store feeds these with rows it read in one transaction; they return
results or plans. Keeping them pure makes the delta semantics testable on
plain data and keeps the LMDB code small.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from deltalog.engine.store_rows import Typed, WriteRow

__all__ = ["DeltaWalk"]


@dataclass
class DeltaWalk:
    """Accumulates ``get_delta_channel_history`` for several channels at once (R6).

    Feed it the ancestors of the target checkpoint, nearest first, with
    :meth:`visit`. A channel stops at the first ancestor that stores a value for
    it (a ``_DeltaSnapshot`` seed or a plain pre-delta value); that ancestor's
    own writes still count, because they produced its child on the path to the
    target. Channels that reach the root have no seed ("start empty").
    """

    channels: tuple[str, ...]
    remaining: set[str] = field(init=False)
    _collected: dict[str, list[list[WriteRow]]] = field(init=False)
    _seeds: dict[str, Typed] = field(init=False)

    def __post_init__(self) -> None:
        self.remaining = set(self.channels)
        self._collected = {c: [] for c in self.channels}
        self._seeds = {}

    @property
    def done(self) -> bool:
        """True once every channel found its seed."""
        return not self.remaining

    def visit(self, writes: Iterable[WriteRow], seeds: Mapping[str, Typed]) -> None:
        """Take one ancestor: its writes (``writes_sort_key`` order) and the values it stores.

        Args:
            writes: The ancestor's writes; channels not remaining are ignored.
            seeds: Channel → stored value at this ancestor, for remaining channels.
        """
        per_channel: dict[str, list[WriteRow]] = {}
        for w in writes:
            if w.channel in self.remaining:
                per_channel.setdefault(w.channel, []).append(w)
        for channel, rows in per_channel.items():
            self._collected[channel].append(rows)
        for channel, value in seeds.items():
            if channel in self.remaining:
                self._seeds[channel] = value
                self.remaining.discard(channel)

    def result(self) -> dict[str, tuple[Typed | None, list[WriteRow]]]:
        """Channel → (seed or None, writes oldest→newest)."""
        out: dict[str, tuple[Typed | None, list[WriteRow]]] = {}
        for channel in self.channels:
            ordered: list[WriteRow] = []
            for rows in reversed(self._collected[channel]):
                ordered.extend(rows)
            out[channel] = (self._seeds.get(channel), ordered)
        return out
