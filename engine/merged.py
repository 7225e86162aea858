"""Cursors over records held in two places: plain LMDB entries and turn packs.

The read view of the turn packs (docs/design.md, "Turn packs"):
:meth:`~deltalog.engine.txn_base.TxnBase.checkpoint_cursor` and
``write_cursor`` hand these out in a store that has packs. They have the moves of a py-lmdb cursor
that the record readers use (``set_key``, ``set_range``, ``first``, ``last``,
``next``, ``prev``, ``key``, ``value``, ``iternext``, iteration), with one
difference kept on purpose: after a move that fails the cursor is not
positioned, and ``next`` / ``prev`` then act as ``first`` / ``last`` (py-lmdb
documents that for a new cursor; after a failed move its LMDB cursor keeps a
hidden position instead, which no reader relies on).

* :class:`ListCursor` walks a sorted list of ``(key, value)`` pairs (the
  entries of one decoded pack).
* :class:`PackCursor` walks the entries of a run of packs in key order: an
  index cursor whose keys are each pack's greatest entry key, and a loader
  that turns an index entry into the pack's sorted entries of one kind
  (checkpoints, or writes). A pack may hold no entry of that kind.
* :class:`MergedCursor` walks two cursors as one, in key order; where both
  hold a key, the first one's entry is the one seen (a plain record written
  after its pack).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

Entry = tuple[bytes, bytes]


class Cursor(Protocol):
    """The moves of a py-lmdb cursor the record readers use."""

    def set_key(self, key: bytes) -> bool: ...
    def set_range(self, key: bytes) -> bool: ...
    def first(self) -> bool: ...
    def last(self) -> bool: ...
    def next(self) -> bool: ...
    def prev(self) -> bool: ...
    def key(self) -> bytes: ...
    def value(self) -> bytes: ...


class _Moves:
    """``iternext`` and iteration, from ``next`` and ``key`` / ``value``."""

    def next(self) -> bool:
        raise NotImplementedError

    def first(self) -> bool:
        raise NotImplementedError

    def key(self) -> bytes:
        raise NotImplementedError

    def value(self) -> bytes:
        raise NotImplementedError

    @property
    def positioned(self) -> bool:
        raise NotImplementedError

    def iternext(
        self, keys: bool = True, values: bool = True
    ) -> Iterator[bytes | tuple[bytes, bytes]]:
        """From the current entry (the first when not positioned) to the end,
        like py-lmdb's: keys, values or ``(key, value)`` pairs."""
        ok = self.positioned or self.first()
        while ok:
            if keys and values:
                yield self.key(), self.value()
            elif keys:
                yield self.key()
            else:
                yield self.value()
            ok = self.next()

    def __iter__(self) -> Iterator[bytes | tuple[bytes, bytes]]:
        return self.iternext()


class ListCursor(_Moves):
    """A cursor over ``entries``, sorted by key, keys unique."""

    def __init__(self, entries: Sequence[Entry]) -> None:
        self._entries = entries
        self._keys = [key for key, _ in entries]
        self._at = -1

    @property
    def positioned(self) -> bool:
        return self._at >= 0

    def _go(self, at: int) -> bool:
        self._at = at if 0 <= at < len(self._entries) else -1
        return self._at >= 0

    def set_key(self, key: bytes) -> bool:
        at = bisect.bisect_left(self._keys, key)
        return self._go(at if at < len(self._keys) and self._keys[at] == key else -1)

    def set_range(self, key: bytes) -> bool:
        return self._go(bisect.bisect_left(self._keys, key))

    def first(self) -> bool:
        return self._go(0)

    def last(self) -> bool:
        return self._go(len(self._entries) - 1)

    def next(self) -> bool:
        return self._go(self._at + 1) if self._at >= 0 else self.first()

    def prev(self) -> bool:
        return self._go(self._at - 1) if self._at >= 0 else self.last()

    def key(self) -> bytes:
        return self._entries[self._at][0] if self._at >= 0 else b""

    def value(self) -> bytes:
        return self._entries[self._at][1] if self._at >= 0 else b""


class PackCursor(_Moves):
    """The entries of one kind of every pack an index cursor names, in key order.

    ``index`` is a cursor over the pack index, whose key for a pack is the
    greatest key of any entry it holds; ``load(index key, index value)`` gives
    the pack's entries of this cursor's kind, sorted (a pack may have none).
    Packs hold disjoint key ranges, so the index order is the entries' order.
    """

    def __init__(self, index: Cursor, load: Callable[[bytes, bytes], Sequence[Entry]]) -> None:
        self._index = index
        self._load = load
        self._entries: ListCursor | None = None

    @property
    def positioned(self) -> bool:
        return self._entries is not None

    def _enter(self, forward: bool) -> bool:
        """Stand on the first (``forward``) or last entry of the pack the index is
        on, else of the next pack that has one in that direction."""
        while True:
            entries = ListCursor(self._load(self._index.key(), self._index.value()))
            if entries.first() if forward else entries.last():
                self._entries = entries
                return True
            if not (self._index.next() if forward else self._index.prev()):
                self._entries = None
                return False

    def set_range(self, key: bytes) -> bool:
        if not self._index.set_range(key):
            self._entries = None
            return False
        entries = ListCursor(self._load(self._index.key(), self._index.value()))
        if entries.set_range(key):
            self._entries = entries
            return True
        # The pack's greatest entry of this kind is below the key (its greater
        # entries are of the other kind): the next pack's first, if any.
        if not self._index.next():
            self._entries = None
            return False
        return self._enter(True)

    def set_key(self, key: bytes) -> bool:
        if self.set_range(key) and self.key() == key:
            return True
        self._entries = None
        return False

    def first(self) -> bool:
        if not self._index.first():
            self._entries = None
            return False
        return self._enter(True)

    def last(self) -> bool:
        if not self._index.last():
            self._entries = None
            return False
        return self._enter(False)

    def next(self) -> bool:
        if self._entries is None:
            return self.first()
        if self._entries.next():
            return True
        if not self._index.next():
            self._entries = None
            return False
        return self._enter(True)

    def prev(self) -> bool:
        if self._entries is None:
            return self.last()
        if self._entries.prev():
            return True
        if not self._index.prev():
            self._entries = None
            return False
        return self._enter(False)

    def key(self) -> bytes:
        return self._entries.key() if self._entries is not None else b""

    def value(self) -> bytes:
        return self._entries.value() if self._entries is not None else b""


class MergedCursor(_Moves):
    """Two cursors walked as one, in key order; on a key both hold, ``first``'s
    entry is the one seen and ``second``'s is skipped."""

    def __init__(self, first: Cursor, second: Cursor) -> None:
        self._a = first
        self._b = second
        # Which cursor the merged one stands on (None: not positioned), and
        # whether both stand at or after it (True) or at or before it (False).
        self._on: Cursor | None = None
        self._forward = True
        self._a_ok = self._b_ok = False

    @property
    def positioned(self) -> bool:
        return self._on is not None

    def _pick(self, forward: bool) -> bool:
        """Stand on the smaller (``forward``) or greater key of the two cursors; on
        a tie, on ``first``'s."""
        self._forward = forward
        a_ok, b_ok = self._a_ok, self._b_ok
        if a_ok and b_ok:
            ka, kb = self._a.key(), self._b.key()
            if ka == kb:
                self._on = self._a
            else:
                self._on = self._a if (ka < kb) == forward else self._b
        else:
            self._on = self._a if a_ok else self._b if b_ok else None
        return self._on is not None

    def set_range(self, key: bytes) -> bool:
        self._a_ok = self._a.set_range(key)
        self._b_ok = self._b.set_range(key)
        return self._pick(True)

    def set_key(self, key: bytes) -> bool:
        if self.set_range(key) and self.key() == key:
            return True
        self._on = None
        return False

    def first(self) -> bool:
        self._a_ok = self._a.first()
        self._b_ok = self._b.first()
        return self._pick(True)

    def last(self) -> bool:
        self._a_ok = self._a.last()
        self._b_ok = self._b.last()
        return self._pick(False)

    def _beyond(self, other: Cursor, key: bytes, forward: bool) -> bool:
        """Stand ``other`` on its first key above ``key`` (``forward``) or last below."""
        if forward:
            ok = other.set_range(key)
            return other.next() if ok and other.key() == key else ok
        return other.prev() if other.set_range(key) else other.last()

    def next(self) -> bool:
        if self._on is None:
            return self.first()
        key = self.key()
        if not self._forward:
            # Both stood at or before the key: bring them after it.
            self._a_ok = self._beyond(self._a, key, True)
            self._b_ok = self._beyond(self._b, key, True)
            return self._pick(True)
        if self._on is self._a:
            self._a_ok = self._a.next()
        if self._b_ok and self._b.key() == key:  # on it, or shadowed by first's
            self._b_ok = self._b.next()
        return self._pick(True)

    def prev(self) -> bool:
        if self._on is None:
            return self.last()
        key = self.key()
        if self._forward:
            self._a_ok = self._beyond(self._a, key, False)
            self._b_ok = self._beyond(self._b, key, False)
            return self._pick(False)
        if self._on is self._a:
            self._a_ok = self._a.prev()
        if self._b_ok and self._b.key() == key:
            self._b_ok = self._b.prev()
        return self._pick(False)

    def key(self) -> bytes:
        return self._on.key() if self._on is not None else b""

    def value(self) -> bytes:
        return self._on.value() if self._on is not None else b""
