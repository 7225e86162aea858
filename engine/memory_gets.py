"""The get cache: decoded items of one memory state, so ``DeltaLogStore.get`` can
skip the read transaction and the record decode when nothing was committed since.

A hit costs the environment's last transaction id (``mdb_env_info``, no
transaction) and a dict lookup; a miss reads LMDB as before and remembers what
it read. Why a hit is never stale:

* ``entries`` hold items (None: absent) as of one change state ``state``
  (``MemoryReader.change_state``: every memory write moves the counter). They
  come from reads of a snapshot at that state (:meth:`GetCache.remember`), or
  from this process's commits (:meth:`GetCache.after`): an op's writes are
  what the state after it (its ``after`` count) holds at their keys, so a
  commit that starts from the cache's state adds them, and any other moves
  the cache to its ``after`` state holding only them.
* ``txnid`` is the id of a snapshot that was *read* and found at ``state``
  (:meth:`GetCache.seen`; a snapshot older than one reported before is
  ignored, so a slow reader cannot move the cache back), or -1. A commit
  never sets it: the ops of one group commit share a transaction id and are
  applied here one at a time, so the cache may be between two of them.
  While the environment's last committed transaction is still ``txnid``,
  nothing anywhere (this process, a saver on the same file, another
  process) has committed since that read, so LMDB is still at ``state`` and
  every entry is what a read would return.
* A child after ``fork()`` starts with an empty cache and a new lock.

Entries are shared records: callers get copies of their values
(:func:`memory_core.copy_value`). The cache holds at most ``max_entries``
items (``CachePolicy.item_entries``) and starts over when full.
"""

from __future__ import annotations

import enum
import os
import threading
import weakref
from typing import Final, Literal

from deltalog.engine.memory_core import Changes, ItemRecord

__all__ = ["MISSING", "GetCache"]


class _Missing(enum.Enum):
    MISSING = 0


#: What :meth:`GetCache.hit` returns when the cache cannot answer.
MISSING: Final = _Missing.MISSING


class GetCache:
    """Items by ``items`` key as of one memory change state (see the module)."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.state: tuple[int, int] = (-1, -1)
        self.txnid = -1
        #: The newest snapshot a read reported: an older one cannot move the cache back.
        self.newest = -1
        self.entries: dict[bytes, ItemRecord | None] = {}
        self.hits = 0
        self._lock = threading.Lock()
        _CACHES.add(self)

    def _reset_in_child(self) -> None:
        # fork() may have copied the lock held by another thread: start over.
        self._lock = threading.Lock()
        self.state, self.txnid, self.newest, self.entries = (-1, -1), -1, -1, {}

    def hit(self, txnid: int, ikey: bytes) -> ItemRecord | Literal[_Missing.MISSING] | None:
        """The item at ``ikey`` if nothing was committed since the cache's
        snapshot (``txnid``: the environment's last transaction id now)."""
        if txnid != self.txnid:
            return MISSING
        found = self.entries.get(ikey, MISSING)
        if found is not MISSING:
            self.hits += 1
        return found

    def seen(self, state: tuple[int, int], txnid: int) -> None:
        """A read transaction with id ``txnid`` found the memory at ``state``."""
        with self._lock:
            if txnid < self.newest:
                return  # a read that began before another one already reported
            self.newest = txnid
            if state != self.state:
                self.state, self.entries = state, {}
            self.txnid = txnid

    def remember(self, state: tuple[int, int], ikey: bytes, rec: ItemRecord | None) -> None:
        """What a read at ``state`` found at ``ikey`` (kept if the cache is still there)."""
        if not self.max_entries:
            return
        with self._lock:
            if state != self.state:
                return
            if len(self.entries) >= self.max_entries:
                self.entries = {}
            self.entries[ikey] = rec

    def after(self, changes: Changes) -> None:
        """Bring the cache past one op this process committed."""
        after, items = changes.after, changes.items
        with self._lock:
            kind, count = self.state
            if kind == 0 and count >= after:
                return  # a read already saw this op's result, or later ones
            self.txnid = -1  # the next get confirms the state with a read
            entries = self.entries
            if kind != 0 or count != changes.before or len(entries) + len(items) > self.max_entries:
                # Not the state the op started from: start over from its writes,
                # which are what the state after it holds at their keys (or full).
                entries = self.entries = {}
            self.state = (0, after)
            if self.max_entries:
                entries.update(items)


_CACHES: weakref.WeakSet[GetCache] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for cache in list(_CACHES):
        cache._reset_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
