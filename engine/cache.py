"""An LRU of decoded channel values that is safe against callers mutating them.

Rebuilding a delta channel decodes its seed — a `_DeltaSnapshot` holding the
whole message list — on every ``get_state``, every invoke and every entry of
``get_state_history``. Measured on a 500-message seed here: the serde takes
3.0 ms, ``pickle.loads`` of the same decoded value 0.8 ms (it restores objects
without re-running pydantic validation). So the cache keeps each decoded value
as a private pickle and hands every caller a fresh unpickled copy: mutating a
returned state can never change what the next reader sees. How those pickles
are made and read (long strings shared, pydantic models filled in C) is
:mod:`deltalog.engine.copies`.

Keys are the stored record bytes themselves (compressed, so small): a value
that changed on disk — rewritten by another process, or deleted and written
again — can never hit a stale entry. Pickles never leave the process; nothing
read from disk is ever unpickled.

A value is cached the second time its record is decoded, not the first: with a
plain ``add_messages`` list every turn stores a new version that the next
invoke reads once, and pickling each of them for nothing cost ~0.5 ms per
invoke at 400 messages (4 ms at 2,000) and filled the budget with lists no one
read again. A state read again is cached on its second read; a seed that
``get_tuple`` reads from a checkpoint on its first (``reused``): on the
300-turn large-message chat, caching it on its second read left 19–22 of the
last 50 turns paying a seed decode of 8 ms or more, against 11–12 this way,
and invoke p50 went from 18–22 to 16 ms (two alternating pairs).

Every byte budget here is a cap, not a reservation: a :class:`GrowingBudget`
starts at 4 MiB, rises to fit twice the largest entry admitted, and grows by
twice an evicted entry's cost when its key is asked for again (the working set
did not fit). A one-thread chat, which only ever re-reads its newest seed,
keeps one or two seeds; a server cycling through many threads grows it to the
cap. Growth is in proportion to what was missed, not a doubling: on the
200-turn ``add_messages`` chat a few re-reads of ~800-byte input payloads,
evicted by ~125 KB message blobs that are never read again, doubled the
payload budget to its 64 MiB cap, and peak RSS rose from 124 to 149 MiB.

A seed a put has just written is decoded ahead (:meth:`DecodedCache.prefill`):
:data:`PREFILL_DELAY` after its commit, on one background thread, unless a
reader asks for it first (that reader then decodes it itself, as before). The
first read after a seed turn was the serde's decode of the whole list (20 ms
for the 1,000-turn chat's 2,000 messages, against 5 ms for a copy; stop 33 in
docs/benchmarks.md); when the application pauses between turns, as a chat
does, that decode now happens in the pause.

The copy itself is the next cost: every invoke and ``get_state`` of a
delta-channel thread gets a private copy of the seed (7 ms inside an invoke of
the 1,000-turn chat). A read from a thread's newest checkpoint therefore asks
for a *spare* (``load(spare=...)``): one more copy, made on the same thread
once reads pause for :data:`SPARE_DELAY`, which the next read of that seed
takes instead of copying (stop 36).
"""

from __future__ import annotations

import contextlib
import gc
import os
import queue
import sys
import sysconfig
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any, Final, Generic, TypeVar

from deltalog.engine import codec, copies
from deltalog.engine.copies import Pickled
from deltalog.engine.errors import OptionError

__all__ = [
    "PREFILL_DELAY",
    "SPARE_HISTORY",
    "SPARE_STATE",
    "CachePolicy",
    "DecodedCache",
    "EnvelopeCache",
    "GrowingBudget",
    "HistoryCopies",
    "NameCache",
    "PayloadCache",
    "gc_paused",
    "spare_sized",
]


#: A pause that allocated at least this many GC-tracked objects (gc.get_count()
#: of the youngest generation) moves them to the oldest one as it ends.
PROMOTE_MIN: Final = 20_000
#: The same after a young collection (``gc_paused(large=True)``): the youngest
#: generation then holds only what the pause built.
PROMOTE_OWN: Final = 4_000
#: A cached pickle at least this large is unpickled with ``gc_paused(large=True)``
#: (a 1,000-turn chat's seed of 2,000 short messages: ~1.6 MB, ~14,000 objects).
PROMOTE_PICKLE: Final = 256 * 1024
# gc.freeze()/unfreeze() move the generations' lists in O(1) on CPython with
# the GIL; a free-threaded build visits every object instead.
_CAN_PROMOTE: Final = sys.implementation.name == "cpython" and not sysconfig.get_config_var(
    "Py_GIL_DISABLED"
)


# How many gc_paused blocks turned the GC off and have not ended (all threads).
_paused = [0]


@contextlib.contextmanager
def gc_paused(large: bool = False) -> Iterator[None]:
    """Pause the cyclic GC while building many objects that hold no garbage cycles.

    Unpickling a 2,000-message seed allocates ~40,000 objects, which set off
    dozens of collections that each traverse the caller's whole heap: on a
    1,000-turn ``get_state_history(limit=20)`` here that was ~20 ms of every
    ~28 ms copy. Nothing is lost by collecting after; an application that
    turned GC off keeps it off, and nested pauses leave it to the outermost.

    A pause that built :data:`PROMOTE_MIN` tracked objects or more ends with
    ``gc.freeze(); gc.unfreeze()``, which moves every generation into the
    oldest one in O(1): the young collection that would follow traverses the
    whole batch (58 ms of a 150 ms ``get_state`` of a 20,000-message thread)
    to find no garbage, since the copies hold no cycles. Other young objects
    move along; a garbage cycle among them waits for the next full
    collection. Skipped when the application froze objects itself (a
    pre-fork server's ``gc.freeze()`` stays as it was; CPython 3.12 starts
    with 375 tuples of its own frozen, so there it is always skipped) and on
    builds without the GIL, whose ``gc.freeze()`` visits every object.

    Args:
        large: The caller expects a large batch (a pickle of
            :data:`PROMOTE_PICKLE` bytes or more). The young generations are
            then collected first, so that they hold only what the block builds,
            and that batch is promoted from :data:`PROMOTE_OWN` objects on:
            nothing another part of the program made moves unexamined. It
            applies inside an enclosing pause as well.
    """
    # Off already: by the application (left alone), or by an enclosing pause.
    enabled = gc.isenabled()
    own = large and (enabled or _paused[0] > 0) and _CAN_PROMOTE and not gc.get_freeze_count()
    if own:
        gc.collect(1)
    if not enabled:
        try:
            yield
        finally:
            if own:
                _promote(PROMOTE_OWN)
        return
    gc.disable()
    _paused[0] += 1
    try:
        yield
    finally:
        _paused[0] -= 1
        _promote(PROMOTE_OWN if own else PROMOTE_MIN)
        gc.enable()


def _promote(least: int) -> None:
    """Move every GC generation into the oldest (two list splices) when the
    youngest counts ``least`` objects or more, instead of a young collection
    that would traverse them all."""
    if gc.get_count()[0] >= least and _CAN_PROMOTE and not gc.get_freeze_count():
        gc.freeze()
        gc.unfreeze()


#: Where every :class:`GrowingBudget` starts (or at its cap, when that is lower).
START_BUDGET = 4 * 1024**2


class GrowingBudget:
    """A byte budget that grows with the workload, from ``start`` up to ``cap``.

    Measured on the 150-turn large-message chat (~10 KB a turn, sf=10): the
    fixed 64 MiB budgets held 36 decoded seeds and 30 payloads (45 MiB) of
    which the next reads used the newest one or two.

    The owner calls :meth:`admit` before storing an entry, :meth:`evicted` for
    each entry it drops for room and :meth:`missed` on each miss; all under the
    owner's lock. The budget never shrinks.

    Args:
        cap: The most it may grow to (the documented knob, e.g. ``cache_bytes``).
        start: Where it starts.
        ghosts: How many evicted keys (their hashes) are remembered.
    """

    def __init__(self, cap: int, start: int = START_BUDGET, ghosts: int = 4096) -> None:
        self.cap = cap
        self.limit = min(cap, start)
        self._ghosts: OrderedDict[int, int] = OrderedDict()
        self._ghost_max = ghosts

    def admit(self, cost: int) -> bool:
        """Whether an entry of ``cost`` bytes may be stored; grows the budget to twice it."""
        if cost > self.cap:
            return False
        if 2 * cost > self.limit:
            self.limit = min(self.cap, 2 * cost)
        return True

    def evicted(self, key: Hashable, cost: int) -> None:
        """``key``, an entry of ``cost`` bytes, was dropped for room."""
        self._ghosts[hash(key)] = cost
        if len(self._ghosts) > self._ghost_max:
            self._ghosts.popitem(last=False)

    def missed(self, key: Hashable) -> None:
        """``key`` was asked for and not found: if it was evicted, grow by twice its cost."""
        if not self._ghosts:
            return
        cost = self._ghosts.pop(hash(key), None)
        if cost is not None:
            self.limit = min(self.cap, self.limit + 2 * cost)


#: How long after a seed's commit :meth:`DecodedCache.prefill` starts decoding it.
#: The invoke that wrote it still has ~1.5 ms of LangGraph's own work after its
#: last put; a decode started at once would hold the GIL in its way (the
#: interpreter hands the GIL over every 5 ms). A reader that comes sooner
#: decodes the seed itself, as without a prefill.
PREFILL_DELAY: Final = 0.02
#: At most this many prefills wait at once (each holds its serialized value);
#: more are dropped, and their first reader decodes them.
PREFILL_MAX: Final = 8
#: A reader that finds its record being prefilled waits this long at most,
#: then decodes it itself.
PREFILL_WAIT: Final = 10.0
#: Seeds are prefilled only while the cache has served a read within this many
#: seconds: a bulk load (``deltalog migrate`` into a store, a script that only
#: writes) would decode every seed it writes for no reader.
PREFILL_RECENT: Final = 60.0
#: A spare copy (:meth:`DecodedCache.load` with ``spare``) is made once no value
#: was read for this long: after the invoke that read the value has done its
#: own work, so the copy does not take the GIL from it.
SPARE_DELAY: Final = 0.03
#: Only values whose pickle is at least this large get a spare (a smaller copy
#: costs less than the spare's bookkeeping is worth).
SPARE_MIN: Final = 256 * 1024
#: A spare still waiting for reads to pause after this many seconds is dropped
#: (a server that reads all the time never makes one).
SPARE_PATIENCE: Final = 2.0
#: ``spare`` of :meth:`DecodedCache.load`: a state read (``get_tuple`` of a
#: thread's newest checkpoint) and a delta history walked from it. A spare
#: asked for by a delta history does not displace one a state read asked for
#: another record: from a checkpoint that holds its own seed, LangGraph never
#: asks for the history (the walk would return the seed before it), so the
#: state read's record is the one the next turn reads.
SPARE_STATE: Final = 2
SPARE_HISTORY: Final = 1


def spare_sized(payload: int) -> bool:
    """Whether a serialized value of ``payload`` bytes may pickle to
    :data:`SPARE_MIN` bytes or more (a pickle of LangGraph's messages is
    larger than their msgpack; half of it leaves room)."""
    return payload >= SPARE_MIN // 2


@dataclass(eq=False)
class _Prefill:
    """A decode :meth:`DecodedCache.prefill` queued: claimed by whoever starts it first."""

    cache: DecodedCache
    record: bytes
    decode: Callable[[bytes], Any]
    size: int
    share: Callable[[], bool] | None
    due: float
    pid: int = field(default_factory=os.getpid)
    running: bool = False
    done: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        self.cache._run_prefill(self)


@dataclass(eq=False)
class _Spare:
    """A spare copy :meth:`DecodedCache.load` asked for: made by the prefill thread
    once reads pause, unless a newer one replaced it; ``value`` is the copy
    once made."""

    cache: DecodedCache
    record: bytes
    pickled: bytes | Pickled
    priority: int
    due: float
    since: float
    pid: int = field(default_factory=os.getpid)
    value: Any = None

    def run(self) -> None:
        self.cache._run_spare(self)


class _PrefillThread:
    """The one daemon thread that runs queued prefills and spares, each at its due time.

    Started on first use, and again in a child after fork(). A daemon: the
    interpreter does not wait for queued prefills at exit.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Prefill | _Spare] | None = None
        self._pid = 0

    def submit(self, job: _Prefill | _Spare) -> None:
        q = self._queue
        if q is None or self._pid != os.getpid():
            with self._lock:
                if self._queue is None or self._pid != os.getpid():
                    self._queue = queue.SimpleQueue()
                    self._pid = os.getpid()
                    threading.Thread(
                        target=self._serve,
                        args=(self._queue,),
                        name="deltalog-prefill",
                        daemon=True,
                    ).start()
                q = self._queue
        q.put(job)

    @staticmethod
    def _serve(q: queue.SimpleQueue[_Prefill | _Spare]) -> None:
        while True:
            job = q.get()
            wait = job.due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            with contextlib.suppress(Exception):  # the thread serves the next ones
                job.run()


_PREFILL_THREAD: Final = _PrefillThread()


def _loads(pickled: bytes | Pickled) -> Any:
    """A fresh copy of what :func:`~deltalog.engine.copies.dumps` pickled, made
    with the GC paused."""
    with gc_paused(large=copies.nbytes(pickled) >= PROMOTE_PICKLE):
        return copies.loads(pickled)


class DecodedCache:
    """Bounded LRU: stored record bytes → pickled decoded value.

    Args:
        max_bytes: Cap of the budget for keys plus pickles (the budget grows
            to it with the workload, see :class:`GrowingBudget`); 0 disables
            the cache.
        min_record: Records smaller than this are decoded directly (decoding
            them is cheaper than a cache round trip).
        seen_max: How many records decoded once (by hash) are remembered, so
            that their second decode caches them.
        spare_bytes: The largest pickle a spare copy is made of (see
            :meth:`load`); 0 makes none.
    """

    def __init__(
        self,
        max_bytes: int = 64 * 1024**2,
        min_record: int = 2048,
        seen_max: int = 4096,
        spare_bytes: int = 32 * 1024**2,
    ) -> None:
        if max_bytes < 0:
            raise OptionError(
                f"cache max_bytes {max_bytes} is negative; pass 0 to disable the cache"
            )
        if spare_bytes < 0:
            raise OptionError(
                f"cache spare_bytes {spare_bytes} is negative; pass 0 to make no spare copies"
            )
        self.max_bytes = max_bytes
        self.budget = GrowingBudget(max_bytes)
        self.min_record = min_record
        self.size = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[bytes, bytes | Pickled] = OrderedDict()
        # Hashes of records decoded once and not cached (a collision only
        # caches a value one read early).
        self._seen: OrderedDict[int, None] = OrderedDict()
        self.seen_max = seen_max
        # Records queued for a prefill (decoded ahead on the prefill thread).
        self._prefills: dict[bytes, _Prefill] = {}
        self.prefilled = 0
        self._last_read: float | None = None
        # One spare copy (a made job: its record, value and priority), made
        # ahead for the next read of that record, and the job that will make
        # the next one.
        self.spare_bytes = spare_bytes
        self._spare: _Spare | None = None
        self._spare_job: _Spare | None = None
        self.spares_made = 0
        self.spares_used = 0
        self._lock = threading.Lock()

    def load(
        self,
        record: bytes,
        decode: Callable[[bytes], Any],
        size: int | None = None,
        *,
        reused: bool = False,
        share: Callable[[], bool] | None = None,
        spare: int = 0,
    ) -> Any:
        """The decoded value of ``record``: a private copy from the cache, or ``decode(record)``.

        Args:
            record: The stored record (the cache key).
            decode: Decodes it (called on a miss).
            size: Size of the serialized value, when the record is a compressed
                or delta form of it (decides whether caching pays).
            reused: The caller knows the value will be read again (a delta
                channel's seed in a checkpoint: the turns until the next seed
                read it), so it is cached on its first decode.
            share: Says, when a decoded value is to be pickled, whether it may
                hold long strings (:func:`~deltalog.engine.copies.may_hold_long_str`); False pickles it
                plainly. None: it may.
            spare: :data:`SPARE_STATE` or :data:`SPARE_HISTORY` for a read
                from a thread's newest checkpoint, whose record the next turn
                or ``get_state`` most likely reads again: the copy handed out
                is the spare made ahead for it when there is one, and a new
                spare of a pickle of :data:`SPARE_MIN` bytes or more (at most
                ``spare_bytes``) is made on the prefill thread once reads
                pause for :data:`SPARE_DELAY`. One spare is kept per cache,
                of the record read last at the highest of the two. 0 (a read
                of an older state, or of many: ``list``) neither takes nor
                makes one.
        """
        self._last_read = time.monotonic()
        if not self.max_bytes or (len(record) if size is None else size) < self.min_record:
            return decode(record)
        waited = False
        taken: _Spare | None = None
        while True:
            first = False
            running = None
            with self._lock:
                pickled = self._entries.get(record)
                if pickled is not None:
                    self._entries.move_to_end(record)
                    self.hits += 1
                    if spare and self._spare is not None and self._spare.record == record:
                        taken, self._spare = self._spare, None
                        self.spares_used += 1
                else:
                    job = self._prefills.get(record)
                    if job is not None and job.running and not waited and job.pid == os.getpid():
                        running = job
                    else:
                        if job is not None and not job.running:
                            # Not started yet: this reader decodes it instead.
                            del self._prefills[record]
                            reused = True
                        self.misses += 1
                        self.budget.missed(record)
                        key = hash(record)
                        first = not reused and key not in self._seen
                        if first:
                            self._seen[key] = None
                            if len(self._seen) > self.seen_max:
                                self._seen.popitem(last=False)
                        else:
                            self._seen.pop(key, None)
            if running is None:
                break
            # Being decoded on the prefill thread: its result, not a second decode.
            running.done.wait(PREFILL_WAIT)
            waited = True
        if pickled is not None:
            value = _loads(pickled) if taken is None else taken.value
            if spare:
                self._want_spare(record, pickled, spare)
            return value
        value = decode(record)
        if first:  # decoded once so far: not worth a pickle yet
            return value
        try:
            pickled = copies.dumps(value, share is None or share())
        except Exception:  # unpicklable value: correct, just not cached
            return value
        self._admit(record, pickled)
        if spare:
            self._want_spare(record, pickled, spare)
        # The caller gets the freshly decoded object; the cache keeps its own pickle.
        return value

    def _want_spare(self, record: bytes, pickled: bytes | Pickled, priority: int) -> None:
        """Have a spare copy of ``pickled`` made once reads pause (see :meth:`load`)."""
        size = copies.size(pickled)
        if size < SPARE_MIN or size > self.spare_bytes:
            return
        now = time.monotonic()
        job = _Spare(self, record, pickled, priority, now + SPARE_DELAY, now)
        with self._lock:
            pending = self._spare_job
            if pending is not None and pending.pid != job.pid:
                pending = None  # queued before a fork(), on a thread the child lacks
            held = pending or self._spare
            if held is not None and held.record != record and held.priority > priority:
                return  # a state read's spare outranks a history's
            if self._spare is not None and self._spare.record != record:
                self._spare = None  # the one spare goes to the record read last
            self._spare_job = job
        _PREFILL_THREAD.submit(job)

    def _run_spare(self, job: _Spare) -> None:
        """Make the spare ``job`` asked for, on the prefill thread, once reads paused."""
        with self._lock:
            if self._spare_job is not job:
                return  # a newer read asked for another
            last = self._last_read or 0.0
        now = time.monotonic()
        if now - last < SPARE_DELAY:  # reads go on: not in their way
            if now - job.since < SPARE_PATIENCE:
                job.due = last + SPARE_DELAY
                _PREFILL_THREAD.submit(job)
            else:
                with self._lock:
                    if self._spare_job is job:
                        self._spare_job = None
            return
        made = False
        try:
            job.value = _loads(job.pickled)
            job.pickled = b""  # made: the slot keeps the copy, not the cache's pickle too
            made = True
        finally:  # a copy that failed leaves no job behind to outrank later ones
            with self._lock:
                if self._spare_job is job:
                    self._spare_job = None
                    if made:
                        self._spare = job
                        self.spares_made += 1

    def _admit(self, record: bytes, pickled: bytes | Pickled) -> None:
        """Keep ``pickled`` for ``record`` if the budget admits it, evicting the oldest entries."""
        cost = len(record) + copies.size(pickled)
        with self._lock:
            if not self.budget.admit(cost):
                return
            if record not in self._entries:
                self._entries[record] = pickled
                self.size += cost
            while self.size > self.budget.limit:
                old_key, old_value = self._entries.popitem(last=False)
                old_cost = len(old_key) + copies.size(old_value)
                self.size -= old_cost
                self.budget.evicted(old_key, old_cost)

    def prefill(
        self,
        record: bytes,
        decode: Callable[[bytes], Any],
        size: int | None = None,
        *,
        share: Callable[[], bool] | None = None,
    ) -> bool:
        """Decode ``record`` in the background and cache it, for a value that will be read next.

        The decode starts :data:`PREFILL_DELAY` from now on the prefill
        thread. A reader that asks for ``record`` before then decodes it
        itself (and caches it, as with ``reused``); one that asks while it
        runs waits for its result instead of decoding it again. A decode that
        raises caches nothing: the reader's own decode then raises.

        Args:
            record: The stored record (the cache key), committed.
            decode: Decodes it; runs on another thread.
            size: As for :meth:`load`.
            share: As for :meth:`load`.

        Returns:
            Whether a prefill was queued: not when the cache is off, the value
            is small, the cache served no read in the last
            :data:`PREFILL_RECENT` seconds (nobody is reading: a bulk load),
            it is cached or queued already, or :data:`PREFILL_MAX` prefills
            are waiting.
        """
        size = len(record) if size is None else size
        if not self.max_bytes or size < self.min_record:
            return False
        last = self._last_read
        if last is None or time.monotonic() - last > PREFILL_RECENT:
            return False
        with self._lock:
            if record in self._entries or record in self._prefills:
                return False
            if len(self._prefills) >= PREFILL_MAX:
                return False
            job = _Prefill(self, record, decode, size, share, time.monotonic() + PREFILL_DELAY)
            self._prefills[record] = job
        _PREFILL_THREAD.submit(job)
        return True

    def _run_prefill(self, job: _Prefill) -> None:
        """Run a queued prefill on the prefill thread, unless a reader claimed it."""
        with self._lock:
            if self._prefills.get(job.record) is not job:
                return
            job.running = True
        try:
            with gc_paused():
                value = job.decode(job.record)
                pickled = copies.dumps(value, job.share is None or job.share())
            del value
            self._admit(job.record, pickled)
            self.prefilled += 1
        except Exception:  # the reader decodes it and sees the error itself
            pass
        finally:
            with self._lock:
                if self._prefills.get(job.record) is job:
                    del self._prefills[job.record]
            job.done.set()
        if job.size >= codec.TRIM_MIN:
            # The decoded value is freed, but glibc keeps its pages in this
            # thread's own arena (docs/benchmarks.md, stop 33).
            codec.malloc_trim()

    def clear(self) -> None:
        """Drop every entry, and the spare copy."""
        with self._lock:
            self._entries.clear()
            self._seen.clear()
            self._prefills.clear()
            self._spare = self._spare_job = None
            self.size = 0


@dataclass(frozen=True)
class CachePolicy:
    """Every cache budget of one environment and its savers, in one place.

    An :class:`~deltalog.engine.env.Environment` builds its caches from one
    policy (``Environment(caches=...)``); a saver's decoded-value cache takes
    :attr:`decoded_bytes` unless ``cache_bytes`` is given. Byte budgets are caps
    of a :class:`GrowingBudget` (they start at 4 MiB and grow with the
    workload); entry budgets are fixed. docs/operations.md ("Memory") says
    what each one holds.

    Raises:
        OptionError: A budget is not an int, or out of range (naming it).
    """

    decoded_bytes: int = 64 * 1024**2
    """Decoded channel values, per saver (:class:`DecodedCache`); 0 turns it off."""
    spare_bytes: int = 32 * 1024**2
    """The largest decoded value (as its pickle) a saver keeps one spare copy of,
    made ahead while reads pause, for the next turn or ``get_state`` of the
    thread read last (:meth:`DecodedCache.load`); 0 makes none."""
    payload_bytes: int = 64 * 1024**2
    """Resolved blob payloads (:class:`PayloadCache`)."""
    envelope_entries: int = 50_000
    """Checkpoint record envelopes (:class:`EnvelopeCache`)."""
    name_entries: int = 16_384
    """Interned names, each way (:class:`NameCache`); at least 1."""
    memo_entries: int = 4096
    """Remembered delta histories (:class:`~deltalog.engine.memo.HistoryMemo`); 0 turns it off."""
    memo_bytes: int = 64 * 1024**2
    """The bytes those histories hold."""
    item_entries: int = 50_000
    """Memory-store items kept decoded for ``get`` (:class:`~deltalog.engine.memory_gets.GetCache`:
    those this process read or wrote last); 0 turns it off."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            least = 1 if f.name == "name_entries" else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise OptionError(
                    f"CachePolicy({f.name}={value!r}): need an int >= {least} "
                    f"(the default is {f.default!r})"
                )


class PayloadCache:
    """Bounded LRU: stored blob record bytes → resolved ``(type, payload)``.

    Payloads are immutable bytes, so sharing them is safe. It spares delta
    chains their decompression when the newest version of a channel is read
    right after the previous one (each invoke of a thread), and on write it
    holds the base the next delta is computed against. ``max_bytes`` caps a
    :class:`GrowingBudget`.
    """

    def __init__(self, max_bytes: int = 64 * 1024**2) -> None:
        self.max_bytes = max_bytes
        self.budget = GrowingBudget(max_bytes)
        self.size = 0
        self._entries: OrderedDict[bytes, tuple[str, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, record: bytes) -> tuple[str, bytes] | None:
        """The payload of ``record`` if cached."""
        with self._lock:
            hit = self._entries.get(record)
            if hit is not None:
                self._entries.move_to_end(record)
            else:
                self.budget.missed(record)
            return hit

    def put(self, record: bytes, typed: tuple[str, bytes]) -> None:
        """Remember the payload of ``record``."""
        cost = len(record) + len(typed[1])
        with self._lock:
            if record in self._entries or not self.budget.admit(cost):
                return
            self._entries[record] = typed
            self.size += cost
            while self.size > self.budget.limit:
                old, value = self._entries.popitem(last=False)
                old_cost = len(old) + len(value[1])
                self.size -= old_cost
                self.budget.evicted(old, old_cost)


class EnvelopeCache:
    """Parent id, channel versions, inline values and ``blobbed`` mask of checkpoint
    records, keyed by the record bytes.

    The delta walk needs only these fields of each ancestor; decoding the
    whole record (CRC, zstd, msgpack) costs several µs an ancestor, a dict
    lookup well under one. Keyed by the record itself, so a rewritten record
    (hidden, re-linked) is a miss, never stale. The dicts are shared:
    callers only read them. Cleared wholesale when full (entries are cheap to
    rebuild and a walk touches consecutive ancestors).
    """

    def __init__(self, max_entries: int = 50_000) -> None:
        self.max_entries = max_entries
        self._entries: dict[bytes, tuple[Any, Any, Any, Any]] = {}

    def get(self, record: bytes) -> tuple[Any, Any, Any, Any] | None:
        """The cached (parent, versions, inline values, blob mask) of ``record``."""
        return self._entries.get(record)

    def put(self, record: bytes, envelope: tuple[Any, Any, Any, Any]) -> tuple[Any, Any, Any, Any]:
        """Remember ``envelope`` for ``record``; return it."""
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[record] = envelope
        return envelope


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class NameCache(Generic[K, V]):
    """Bounded map of interned names (name → id, or id → name), oldest out first.

    A server sees unbounded thread ids and ``sub:<task uuid>`` namespaces; the
    unbounded maps kept before grew the heap by 69 MB from 10k to 40k distinct
    threads. 16,384 entries of a thread id and a namespace each held ~4 MB
    here (``python -m deltalog.bench.name_cache``).

    A hit is one lock-free dict lookup (every put and read makes several; an
    LRU's lock and reordering made a hit ~15x slower). Eviction is first in,
    first out: a name in constant use (a channel, the root namespace) drops
    out once per ``max_entries`` new names and costs one LMDB lookup and CRC
    check (a few µs) to come back.
    """

    def __init__(self, max_entries: int = 16_384) -> None:
        if max_entries < 1:
            raise ValueError(f"name cache max_entries {max_entries} must be at least 1")
        self.max_entries = max_entries
        self._entries: dict[K, V] = {}
        self.get = self._entries.get
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: K, value: V) -> None:
        """Remember ``value`` for ``key``, dropping the oldest entry when full.

        Only writers take the lock: readers' ``get`` never iterates, so
        dropping entries under them is safe.
        """
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self.max_entries:
                del self._entries[next(iter(self._entries))]

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()


Chunks = tuple[tuple[int, bytes | Pickled], ...]
"""Pickled runs of a decoded list: (item count, pickle of those items), in order."""


class HistoryCopies:
    """Decoded write lists of remembered delta histories, kept as private pickles.

    Writes are a few hundred bytes each, far below :class:`DecodedCache`'s
    ``min_record``, and a history holds up to ``snapshot_frequency`` of them:
    decoding them one by one through the serde (which rebuilds pydantic
    messages) was most of ``get_delta_channel_history``. Here the decoded list
    of a history memo entry is kept as a few pickles; the history of the next
    checkpoint (the same list plus the writes of the checkpoints added since)
    unpickles them, decodes only the new writes, and stores the old chunks
    plus one new one. Chunks merge like a binary counter (two neighbours merge
    while the older holds no more items than the newer), so a history of ``n``
    writes is ~log2(n) ``pickle.loads`` calls and each write is re-pickled
    ~log2(n) times in its life.

    Keyed weakly by the store's memo entry: an evicted entry takes its pickles
    with it. Pickles are made only from values this process decoded (or
    unpickled from its own pickles) and every caller gets fresh objects.
    Single dictionary operations need no lock (the GIL makes them atomic; a
    lock could also be inherited locked by a forked child).
    """

    def __init__(self) -> None:
        self._entries: weakref.WeakKeyDictionary[object, Chunks] = weakref.WeakKeyDictionary()
        self.hits = 0

    def get(self, entry: object) -> Chunks | None:
        """The chunks kept for ``entry``."""
        return self._entries.get(entry)

    def put(self, entry: object, chunks: Chunks) -> None:
        """Keep ``chunks`` for ``entry`` (for as long as the entry lives)."""
        self._entries[entry] = chunks

    def extend(
        self, chunks: Chunks, fresh: list[Any], share: bool = True
    ) -> tuple[list[Any], Chunks | None]:
        """Unpickle ``chunks`` and append ``fresh``: (new list, chunks of that list).

        ``fresh`` is pickled (and neighbouring chunks merged, re-pickled from
        the objects just unpickled) before anything is handed out, so the
        chunks hold the values as decoded. The second item is None when a
        value cannot be pickled. ``share`` False: ``fresh`` holds no long
        string (a merged chunk shares strings when either part did).
        """
        runs = [_loads(p) for _, p in chunks]
        self.hits += 1
        out: list[Any] = [item for run in runs for item in run]
        out.extend(fresh)
        if not fresh:
            return out, chunks
        try:
            kept = [*chunks, (len(fresh), copies.dumps(fresh, share))]
            runs.append(fresh)
            while len(kept) >= 2 and kept[-2][0] <= kept[-1][0]:
                merged = runs[-2] + runs[-1]
                shared = any(copies.shares(p) for _, p in kept[-2:])
                del kept[-2:], runs[-2:]
                kept.append((len(merged), copies.dumps(merged, shared)))
                runs.append(merged)
        except Exception:  # unpicklable value: correct, just not kept
            return out, None
        return out, tuple(kept)

    @staticmethod
    def start(decoded: list[Any], share: bool = True) -> Chunks | None:
        """Chunks holding ``decoded`` (pickled now, plainly with ``share`` False, as in
        :meth:`extend`), or None if it cannot be pickled."""
        try:
            return ((len(decoded), copies.dumps(decoded, share)),)
        except Exception:
            return None
