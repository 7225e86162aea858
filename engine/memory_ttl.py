"""What the memory store's TTL calls return: sync values that can also be awaited.

LangGraph's own stores are called both ways by its tests (``store.sweep_ttl()``
and ``await store.sweep_ttl()``); these types make one method serve both.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Generator
from typing import Any

__all__ = ["Stopped", "SweepCount", "SweeperFuture"]


class SweeperFuture(concurrent.futures.Future[None]):
    """The future :meth:`DeltaLogStore.start_ttl_sweeper` returns; ``await`` gives it back."""

    def __await__(self) -> Generator[Any, None, SweeperFuture]:
        return self
        yield  # a generator: awaiting finishes at once


class SweepCount(int):
    """How many items a sweep deleted; ``await`` gives the same int."""

    def __await__(self) -> Generator[Any, None, int]:
        return int(self)
        yield  # a generator: awaiting finishes at once


class Stopped:
    """Whether a sweeper stopped: truthy like the bool, and awaitable (giving the bool)."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __bool__(self) -> bool:
        return self.value

    def __eq__(self, other: object) -> bool:
        return bool(other == self.value)

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return repr(self.value)

    def __await__(self) -> Generator[Any, None, bool]:
        return self.value
        yield  # a generator: awaiting finishes at once
