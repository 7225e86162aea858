"""What ``threads`` and ``stats`` show: a store's threads and channels by size, nothing decoded.

Read from keys and record sizes only, without the saver: this module imports
neither LangGraph nor LangChain, so ``deltalog threads`` and ``deltalog stats``
start fast (issue 19). :meth:`DeltaLogSaver.threads <deltalog.engine.DeltaLogSaver.threads>`
and ``channel_stats`` return the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deltalog.engine.env import Environment
from deltalog.engine.store_rows import ThreadSummary

__all__ = ["StorageStats", "channel_sizes", "storage_stats", "thread_summaries"]


def thread_summaries(store: Environment) -> list[ThreadSummary]:
    """Every thread with checkpoint/write/blob counts, namespaces, newest id and bytes."""
    with store.read() as r:
        return r.thread_summaries()


def channel_sizes(store: Environment) -> dict[str, dict[str, int]]:
    """Per channel: stored values and writes, bytes as stored and before compression."""
    with store.read() as r:
        return r.channel_sizes()


@dataclass(frozen=True)
class StorageStats:
    """A store's use of space: what ``deltalog stats`` shows.

    Attributes:
        threads: Per thread, as :func:`thread_summaries` (same snapshot as ``channels``).
        channels: Per channel, as :func:`channel_sizes`.
        environment: Entry and page counts per named database, map size and use.
        file_bytes: Size of the data file on disk.
    """

    threads: list[ThreadSummary]
    channels: dict[str, dict[str, int]]
    environment: dict[str, Any]
    file_bytes: int


def storage_stats(store: Environment) -> StorageStats:
    """Threads and channels from one read snapshot, then the environment's figures."""
    with store.read() as r:
        threads = r.thread_summaries()
        channels = r.channel_sizes()
    return StorageStats(threads, channels, store.stats(), store.file_bytes())
