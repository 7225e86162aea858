"""An LRU of decoded channel values that is safe against callers mutating them.

Rebuilding a delta channel decodes its seed — a `_DeltaSnapshot` holding the
whole message list — on every ``get_state``, every invoke and every entry of
``get_state_history``. Measured on a 500-message seed here: the serde takes
3.0 ms, ``pickle.loads`` of the same decoded value 0.8 ms (it restores objects
without re-running pydantic validation). So the cache keeps each decoded value
as a private pickle and hands every caller a fresh unpickled copy: mutating a
returned state can never change what the next reader sees.

Keys are the stored record bytes themselves (compressed, so small): a value
that changed on disk — rewritten by another process, or deleted and written
again — can never hit a stale entry. Pickles never leave the process; nothing
read from disk is ever unpickled.
"""

from __future__ import annotations

import contextlib
import gc
import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["DecodedCache", "EnvelopeCache", "PayloadCache", "gc_paused"]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building many objects that hold no garbage cycles.

    Unpickling a 2,000-message seed allocates ~40,000 objects, which set off
    dozens of collections that each traverse the caller's whole heap: on a
    1,000-turn ``get_state_history(limit=20)`` here that was ~20 ms of every
    ~28 ms copy. Nothing is lost by collecting after; an application that
    turned GC off keeps it off, and nested pauses leave it to the outermost.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _loads(pickled: bytes) -> Any:
    with gc_paused():
        return pickle.loads(pickled)


class DecodedCache:
    """Bounded LRU: stored record bytes → pickled decoded value.

    Args:
        max_bytes: Budget for keys plus pickles; 0 disables the cache.
        min_record: Records smaller than this are decoded directly (decoding
            them is cheaper than a cache round trip).
    """

    def __init__(self, max_bytes: int = 64 * 1024**2, min_record: int = 2048) -> None:
        if max_bytes < 0:
            raise ValueError(
                f"cache max_bytes {max_bytes} is negative; pass 0 to disable the cache"
            )
        self.max_bytes = max_bytes
        self.min_record = min_record
        self.size = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[bytes, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def load(self, record: bytes, decode: Callable[[bytes], Any], size: int | None = None) -> Any:
        """The decoded value of ``record``: a private copy from the cache, or ``decode(record)``.

        Args:
            record: The stored record (the cache key).
            decode: Decodes it (called on a miss).
            size: Size of the serialized value, when the record is a compressed
                or delta form of it (decides whether caching pays).
        """
        if not self.max_bytes or (len(record) if size is None else size) < self.min_record:
            return decode(record)
        with self._lock:
            pickled = self._entries.get(record)
            if pickled is not None:
                self._entries.move_to_end(record)
                self.hits += 1
        if pickled is not None:
            return _loads(pickled)
        value = decode(record)
        try:
            pickled = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # unpicklable value: correct, just not cached
            return value
        cost = len(record) + len(pickled)
        if cost > self.max_bytes:
            return value
        with self._lock:
            self.misses += 1
            if record not in self._entries:
                self._entries[record] = pickled
                self.size += cost
            while self.size > self.max_bytes:
                old_key, old_value = self._entries.popitem(last=False)
                self.size -= len(old_key) + len(old_value)
        # The caller gets the freshly decoded object; the cache keeps its own pickle.
        return value

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()
            self.size = 0


class PayloadCache:
    """Bounded LRU: stored blob record bytes → resolved ``(type, payload)``.

    Payloads are immutable bytes, so sharing them is safe. It spares delta
    chains their decompression when the newest version of a channel is read
    right after the previous one (each invoke of a thread), and on write it
    holds the base the next delta is computed against.
    """

    def __init__(self, max_bytes: int = 64 * 1024**2) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._entries: OrderedDict[bytes, tuple[str, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, record: bytes) -> tuple[str, bytes] | None:
        """The payload of ``record`` if cached."""
        with self._lock:
            hit = self._entries.get(record)
            if hit is not None:
                self._entries.move_to_end(record)
            return hit

    def put(self, record: bytes, typed: tuple[str, bytes]) -> None:
        """Remember the payload of ``record``."""
        cost = len(record) + len(typed[1])
        if cost > self.max_bytes:
            return
        with self._lock:
            if record in self._entries:
                return
            self._entries[record] = typed
            self.size += cost
            while self.size > self.max_bytes:
                old, value = self._entries.popitem(last=False)
                self.size -= len(old) + len(value[1])


class EnvelopeCache:
    """Parent id and channel versions of checkpoint records, keyed by the record bytes.

    The delta walk needs only these two fields of each ancestor; decoding the
    whole record (CRC, zstd, msgpack) costs several µs an ancestor, a dict
    lookup well under one. Keyed by the record itself, so a rewritten record
    (hidden, re-linked) is a miss, never stale. The versions dict is shared:
    callers only read it. Cleared wholesale when full (entries are cheap to
    rebuild and a walk touches consecutive ancestors).
    """

    def __init__(self, max_entries: int = 50_000) -> None:
        self.max_entries = max_entries
        self._entries: dict[bytes, tuple[Any, Any]] = {}

    def get(self, record: bytes) -> tuple[Any, Any] | None:
        """The cached (parent, versions) of ``record``."""
        return self._entries.get(record)

    def put(self, record: bytes, envelope: tuple[Any, Any]) -> tuple[Any, Any]:
        """Remember ``envelope`` for ``record``; return it."""
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[record] = envelope
        return envelope
