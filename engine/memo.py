"""A process-local memo of delta histories, exact under every kind of write.

Each invoke of a ``DeltaChannel`` graph asks for the history of the latest
checkpoint, and without help the walk decodes every ancestor back to the
nearest seed again: up to ``snapshot_frequency`` updates, each time. The
history of a checkpoint ``C`` is the walk that starts at its parent ``P``, so
once the history of ``P`` is known, ``C``'s is that history plus one step:
``P``'s own writes and its seed probe. :class:`HistoryMemo` keeps recent
histories as raw rows (values still serialized), keyed by
``(thread, ns, checkpoint key, channel)``; the walk stops at the first
ancestor it holds a valid entry for.

An entry is only ever used when nothing it was built from can have changed.
The rules (see docs/design.md, "The history memo"):

* Entries are built only along *monotonic* links (a child's key is greater
  than its parent's; LangGraph's uuid6 and ULID ids are time-ordered). Every
  record an entry depends on then has a key below the entry's own key, so a
  write that lands above the group's newest key can change no entry.
* Writers report, before they commit and under the writer lock, every commit
  that may change an existing history, with the commit's LMDB txn id:
  ``put_writes`` under a checkpoint when a greater checkpoint key exists, a
  ``put_checkpoint`` that is not a new greatest key, a new blob whose key an
  entry relied on being absent, and any write op not known to be safe
  (deletion, prune, copy, import, raw puts: the whole memo).
* An entry built from the snapshot with txn id ``B`` is used by a reader of
  snapshot ``R`` only if ``B <= R``, no reported change has an id above
  ``B``, and every commit up to ``R`` is known: ``R`` is at most this
  process's last *known* commit: its own confirmed commits, and other
  processes' commits it has learnt (:meth:`HistoryMemo.learn`).
* Another process's commit is found out at this process's next write (its
  txn id is not the last known id plus one), or by a reader whose snapshot
  is past the last known id. Once a store has seen two writing processes
  (the ``clog_on`` mark), every writer also stores its report in the commit
  itself (``meta`` ``clog:`` · txn id, :func:`pack_report`), and the others
  learn a commit from its report exactly as from their own. A commit without
  a report (before the mark, an older deltalog, a report already trimmed,
  a raw LMDB write) counts as a change of everything; until a commit is
  known, readers that see it bypass the memo.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from typing import Any, Final

import ormsgpack
from deltalog.engine.cache import GrowingBudget
from deltalog.engine.errors import OptionError
from deltalog.engine.store_rows import HistoryEntry, StoredValue, WriteRow

__all__ = ["CLOG_KEEP", "HistoryMemo", "Report", "pack_report", "unpack_report"]

#: What a commit may change: (everything, groups, new blobs), the arguments of
#: :meth:`HistoryMemo.before_commit`.
Report = tuple[bool, tuple[tuple[int, int], ...], tuple[tuple[int, int, bytes], ...]]
#: Commit reports a store keeps for other processes (older ones are deleted by
#: the writers; a process further behind counts the commits it missed as
#: changes of everything).
CLOG_KEEP: Final = 1024

# Own commits whose new blob keys are remembered for readers that build an
# entry from an older snapshot (see HistoryMemo.put).
_BLOB_LOG: Final = 512
# Past these, the bookkeeping starts over (entries are rebuilt on demand). A
# walk registers about one missing blob key per checkpoint it reads fresh, so
# 65,536 keys (~6 MB) last tens of thousands of invokes.
_MAX_ABSENT: Final = 65_536
_MAX_GROUPS: Final = 100_000


class HistoryMemo:
    """Bounded LRU of delta histories plus the bookkeeping that keeps it exact.

    Args:
        max_entries: Entry budget; 0 disables the memo.
        max_bytes: Cap of the budget for the serialized bytes entries hold
            (seed payload plus write values, counted per entry even when
            entries share them); the budget grows to it with the workload
            (:class:`~deltalog.engine.cache.GrowingBudget`).
    """

    def __init__(self, max_entries: int = 4096, max_bytes: int = 64 * 1024**2) -> None:
        if max_entries < 0 or max_bytes < 0:
            raise OptionError(
                f"history memo budgets ({max_entries} entries, {max_bytes} bytes) must not "
                "be negative; pass 0 to disable the memo"
            )
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.budget = GrowingBudget(max_bytes)
        self.size = 0
        self.hits = 0
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, int, bytes, str], HistoryEntry] = OrderedDict()
        self._epoch = 0
        self._changed: dict[tuple[int, int], int] = {}
        self._changed_all = 0
        self._own_last = 0
        #: Writers store their reports for other processes (see the module docstring);
        #: None until this process looked for the store's ``clog_on`` mark.
        self.clog: bool | None = None
        #: Another process's commit was found (the next write sets ``clog_on``).
        self.foreign = False
        #: Txn id of this process's write transaction in progress, 0 when none: a
        #: reader may see it committed before :meth:`committed` runs. Only a
        #: hint (for not taking it for another process's commit); a commit is
        #: never learnt as known because of it.
        self.own_open = 0
        self._absent: set[bytes] = set()
        self._blob_log: deque[tuple[int, frozenset[bytes]]] = deque()
        self._log_floor = 0

    @property
    def enabled(self) -> bool:
        """True unless the entry budget is 0."""
        return self.max_entries > 0

    @property
    def epoch(self) -> int:
        """Bumped by :meth:`reset`; entries of an older epoch are never used or stored."""
        return self._epoch

    def reset(self, txn_id: int) -> None:
        """Forget everything; ``txn_id`` is the newest commit of the freshly opened store.

        Called on open, after fork and on close, when no transaction of this
        process is open: whatever happened before is treated as another
        process's work. The lock is replaced too (a forked child may have
        inherited it locked).
        """
        self._lock = threading.Lock()
        with self._lock:
            self._epoch += 1
            self._entries.clear()
            self.size = 0
            self._changed.clear()
            self._changed_all = self._own_last = txn_id
            self._absent.clear()
            self._blob_log.clear()
            self._log_floor = txn_id + 1
            self.clog = None
            self.foreign = False

    # -- readers ----------------------------------------------------------------------

    def usable(self, snapshot: int) -> bool:
        """True when a reader of ``snapshot`` may use and build entries.

        Every commit up to the snapshot must be known: this process's own
        confirmed commits, or others' already counted as changes. A reader
        that sees a commit this process has not confirmed (another process's,
        or its own whose commit call has not returned yet) bypasses the memo.
        """
        return self.max_entries > 0 and snapshot <= self._own_last

    @property
    def known(self) -> int:
        """Txn id up to which every commit is known (own, or learnt from another process)."""
        return self._own_last

    def floor(self, t: int, n: int) -> int:
        """Txn id of the newest commit that may have changed a history of (t, n)."""
        return max(self._changed_all, self._changed.get((t, n), 0))

    def get(
        self, t: int, n: int, key: bytes, channel: str, snapshot: int, epoch: int
    ) -> HistoryEntry | None:
        """The valid entry for the history of checkpoint ``key``, or None."""
        with self._lock:
            entry = self._entries.get((t, n, key, channel))
            if entry is None:
                self.budget.missed((t, n, key, channel))
                return None
            if (
                entry.epoch != epoch
                or epoch != self._epoch
                or not self.floor(t, n) <= entry.built_at <= snapshot
            ):
                return None
            self._entries.move_to_end((t, n, key, channel))
            self.hits += 1
            return entry

    def put(
        self,
        t: int,
        n: int,
        key: bytes,
        channel: str,
        seed: StoredValue | None,
        writes: tuple[WriteRow, ...],
        snapshot: int,
        epoch: int,
        absent: Iterable[bytes],
        payload: int,
    ) -> HistoryEntry | None:
        """Remember the history of checkpoint ``key`` read in ``snapshot``; return the entry.

        Args:
            t: Thread id.
            n: Namespace id.
            key: The checkpoint's key.
            channel: The channel.
            seed: The history's seed (None: the walk reached the root).
            writes: Its writes, oldest first.
            snapshot: Txn id of the snapshot the history was read in.
            epoch: :attr:`epoch` when the walk started (a reset since refuses).
            absent: Blob keys the walk found missing on its fresh part; a later
                blob stored under one of them changes the history. (The absent
                keys of an entry it extended were registered with that entry.)
            payload: Serialized bytes the history holds (seed record and
                payload plus write values), for the byte budget.

        Returns:
            The stored entry, or None when it could not be proven current: a
            reset happened, or an own commit after ``snapshot`` stored a blob
            under one of the ``absent`` keys (or is too old to tell).
        """
        cost = 256 + 16 * len(writes) + payload
        if cost > self.max_bytes:
            return None
        absent = frozenset(absent)
        with self._lock:
            self.budget.admit(cost)
            if epoch != self._epoch or snapshot < self._log_floor - 1:
                return None
            if absent:
                for txn_id, stored in reversed(self._blob_log):
                    if txn_id <= snapshot:
                        break
                    if not absent.isdisjoint(stored):
                        return None
            if len(self._absent) + len(absent) > _MAX_ABSENT:
                # Start over: no entry survives to rely on the keys dropped.
                self._epoch += 1
                self._entries.clear()
                self.size = 0
                self._absent.clear()
                return None
            self._absent |= absent
            entry = HistoryEntry(seed, writes, snapshot, epoch, cost, payload)
            mkey = (t, n, key, channel)
            old = self._entries.pop(mkey, None)
            if old is not None:
                self.size -= old.cost
            self._entries[mkey] = entry
            self.size += cost
            while self._entries and (
                len(self._entries) > self.max_entries or self.size > self.budget.limit
            ):
                old_key, evicted = self._entries.popitem(last=False)
                self.size -= evicted.cost
                self.budget.evicted(old_key, evicted.cost)
            return entry

    # -- writers (all under the store's writer lock) -----------------------------------------

    def learn(self, first: int, reports: Sequence[Report | None]) -> None:
        """Other processes' commits ``first``, ``first + 1``, … as this process's own.

        ``reports[i]`` is the report of commit ``first + i`` (read from the
        store in a snapshot that holds it), or None when it has none: that
        commit then counts as a change of everything. Commits already known
        are skipped; the first one not known must come right after the last
        known one.
        """
        with self._lock:
            for i, report in enumerate(reports):
                txn_id = first + i
                if txn_id <= self._own_last:
                    continue
                if txn_id != self._own_last + 1:
                    raise ValueError(f"commit {txn_id} learnt after {self._own_last}")
                if report is None:
                    self._changed_all = max(self._changed_all, txn_id)
                else:
                    self._record(txn_id, *report)
                self._own_last = txn_id

    def found_clog(self, on: bool) -> None:
        """Whether the store has its ``clog_on`` mark, as one snapshot showed it: a
        reader of an older snapshot never turns :attr:`clog` off once it is on."""
        with self._lock:
            if on:
                self.clog = True
            elif self.clog is None:
                self.clog = False

    def learn_unknown(self, through: int) -> None:
        """Every commit up to ``through`` not known yet counts as a change of everything
        (:meth:`learn` with no reports, in one step)."""
        with self._lock:
            if through > self._own_last:
                self._changed_all = max(self._changed_all, through)
                self._own_last = through

    def before_commit(
        self,
        txn_id: int,
        *,
        groups: Iterable[tuple[int, int]],
        everything: bool,
        new_blobs: Iterable[tuple[int, int, bytes]],
    ) -> None:
        """Report what commit ``txn_id`` may change, before it becomes visible.

        Args:
            txn_id: The write transaction's id (the id it commits as).
            groups: (thread, ns) whose existing histories it may change.
            everything: It may change any history (an op not known to be safe).
            new_blobs: (thread, ns, blob key) of every blob it stored that did
                not exist before.
        """
        with self._lock:
            self._record(txn_id, everything, groups, new_blobs)

    def _record(
        self,
        txn_id: int,
        everything: bool,
        groups: Iterable[tuple[int, int]],
        new_blobs: Iterable[tuple[int, int, bytes]],
    ) -> None:
        """:meth:`before_commit` under the lock (also for a learnt report)."""
        touched = set(groups)
        stored: set[bytes] = set()
        for t, n, key in new_blobs:
            stored.add(key)
            if key in self._absent:
                touched.add((t, n))
        for group in touched:
            self._changed[group] = max(self._changed.get(group, 0), txn_id)
        if everything or len(self._changed) > _MAX_GROUPS:
            self._changed_all = max(self._changed_all, txn_id)
            if len(self._changed) > _MAX_GROUPS:
                self._changed.clear()
        # In commit order: a report learnt by a reader may come after an own
        # commit's with a greater id (HistoryMemo.put reads the newest first).
        entry = (txn_id, frozenset(stored))
        if not self._blob_log or self._blob_log[-1][0] <= txn_id:
            self._blob_log.append(entry)
        else:
            bisect.insort(self._blob_log, entry, key=_txn_of)
        while len(self._blob_log) > _BLOB_LOG:
            dropped, _ = self._blob_log.popleft()
            self._log_floor = dropped + 1

    def committed(self, txn_id: int) -> None:
        """Commit ``txn_id`` of this process succeeded (every commit before it is
        known: the write learnt them when it began, see :meth:`learn`)."""
        with self._lock:
            self._own_last = max(self._own_last, txn_id)


def _txn_of(entry: tuple[int, frozenset[bytes]]) -> int:
    return entry[0]


def pack_report(
    everything: bool,
    groups: Iterable[tuple[int, int]],
    new_blobs: Iterable[tuple[int, int, bytes]],
) -> bytes:
    """A commit's report as stored for other processes (``meta`` ``clog:`` · txn id)."""
    return ormsgpack.packb(
        [everything, [list(g) for g in groups], [[t, n, key] for t, n, key in new_blobs]]
    )


def unpack_report(raw: bytes) -> Report | None:
    """:func:`pack_report`'s report, or None when ``raw`` is not one (the commit then
    counts as a change of everything, as one without a report)."""
    try:
        everything, groups, blobs = ormsgpack.unpackb(raw)
        report: Report = (
            _is(everything, bool),
            tuple((_is(t, int), _is(n, int)) for t, n in groups),
            tuple((_is(t, int), _is(n, int), _is(key, bytes)) for t, n, key in blobs),
        )
    except (ValueError, TypeError, ormsgpack.MsgpackDecodeError):
        return None
    return report


def _is(value: Any, kind: type[Any]) -> Any:
    if type(value) is not kind:
        raise TypeError(f"{value!r} is not {kind.__name__}")
    return value
