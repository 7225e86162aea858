"""The only module that opens LMDB environments and transactions.

It owns the environment's life (open, format check, map growth, fork,
stale readers, close), serialises writers with group commit, translates LMDB
errors into :mod:`deltalog.engine.errors`, and offers typed row operations to
the saver. Records arrive already serialized by the saver's ``serde``; the
record codec (:mod:`deltalog.engine.codec`) frames them and the key layout
(:mod:`deltalog.engine.keys`) places them.

Records (ormsgpack lists, framed by the codec):

* checkpoint: ``[parent_id, channel_versions, ckpt_type, ckpt_bytes,
  meta_type, meta_bytes, flags, run_id]`` — ``flags`` bit 0 = hidden (kept only
  for a delta chain, not listed).
* write: the channel's ``uid`` followed by the framed ``[type, bytes]`` — the
  prefix lets a walk skip other channels' writes with a short bytes compare.
* blob: framed ``[type, bytes]``. Empty channel versions store nothing.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import importlib
import itertools
import logging
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, TypeVar

import lmdb
import ormsgpack
from deltalog.engine import keys
from deltalog.engine.cache import EnvelopeCache, NameCache, PayloadCache
from deltalog.engine.codec import DeltaHeader, RecordCodec, WriteDict
from deltalog.engine.core import DeltaWalk, Node, Plan, delta_chains, parent_cycles
from deltalog.engine.errors import (
    CorruptRecordError,
    DamagedKeyError,
    DeltaLogError,
    ForkedStoreError,
    FormatVersionError,
    GroupCommitOffError,
    InvalidInputError,
    NotAStoreError,
    ParentCycleError,
    ReadOnlyStoreError,
    ReentrantWriteError,
    StoreClosedError,
    StoreFullError,
    StoreOpenError,
    ThreadExistsError,
)
from deltalog.engine.memo import HistoryMemo
from deltalog.engine.migrations import pending
from deltalog.engine.names import (
    NAMES_CRC_FORMAT,
    decode_name_id,
    decode_name_rev,
    encode_name_id,
    encode_name_rev,
)
from deltalog.engine.store_rows import (
    FLAG_HIDDEN,
    BlobRow,
    CheckpointRow,
    DeltaHistory,
    HistoryEntry,
    StoredValue,
    ThreadSummary,
    Typed,
    Version,
    WriteRow,
)

__all__ = [
    "BlobRow",
    "CheckpointRow",
    "ReadTxn",
    "Store",
    "WriteRow",
    "WriteTxn",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The stores whose write op this thread is running (a write asked for from
#: inside one would wait for itself: Store._check_writable refuses it).
_IN_WRITE_OP: Final = threading.local()
_DBS: Final = ("meta", "names", "names_rev", "checkpoints", "writes", "blobs", "runs")
# The long-term memory store's databases (deltalog.engine.memory_io): created by
# the first writable open; absent (handle None, read as empty) in a read-only
# open of a store no writable open of this version touched.
_MEMORY_DBS: Final = ("items", "item_ns", "item_vectors", "item_ttl")
_UNSUPPORTED_FS: Final = frozenset(
    {"nfs", "nfs4", "cifs", "smb", "smb2", "smbfs", "9p", "fuse.sshfs", "afs"}
)
# How long fork() waits for this process's open transactions before giving up on
# closing the environment for the child (see Store._close_for_fork).
_FORK_WAIT: Final = 5.0
# Adopting a map another process grew is retried this often (it may keep growing).
_RESIZE_RETRIES: Final = 8
# A group-commit leader wakes the callers of the batch before it (durable
# already) once its own ops ran this long, so they never wait out a long batch.
WAKE_AFTER: Final = 0.002
# A read finding every LMDB reader slot taken waits this long for one to be freed
# (by a read of this process ending, or polled every _SLOT_POLL s for other
# processes) before it fails.
READER_WAIT: Final = 30.0
_SLOT_POLL: Final = 0.05
# Free bytes under which a failed write is blamed on a full disk (see _out_of_space).
_LOW_SPACE: Final = 1024**2
# Blob values at least this large are stored as deltas of the channel's previous
# version (smaller ones gain little and would lengthen chains for nothing).
DELTA_MIN: Final = 4096
# Skip deltas keep chains near log2(versions); a chain longer than this is
# damage (a loop), not data.
MAX_LINKS: Final = 64
# A delta blob's dictionary takes the channel's recent writes when the value
# grew by at least this much since its base, collecting about twice the growth
# (at most WRITE_DICT_MAX bytes, scanning at most WRITE_SCAN_MAX writes).
WRITE_DICT_MIN: Final = 256
WRITE_DICT_MAX: Final = 16 * 1024**2
WRITE_SCAN_MAX: Final = 20_000
# Scalar channel values (None, bool, int, float, str) serialized to at most this
# many bytes are stored inside each checkpoint record that has them (format 3),
# not as blobs: no blob entry, key or B-tree page to write, and none to look up
# on a read. A value is copied into every checkpoint while unchanged; the bound
# caps that copy (PostgresSaver, which holds primitives the same way, has none).
INLINE_MAX: Final = 512

# A walk that finds no seed after this many ancestors is reading a damaged chain.
MAX_WALK: Final = 1_000_000
# verify_tables resumes a database walk after LMDB damage at most this often.
_VERIFY_RESTARTS: Final = 10_000
# Ancestors an ordinary put (new id above its parent's) checks for a parent
# cycle: a loop of two puts naming each other. About 2 µs per step on the
# 2-core VM, against 75 µs for a whole non-durable put; see _refuse_cycle.
_QUICK_CYCLE_STEPS: Final = 2


@dataclass
class _RawNode:
    cid: str
    parent: str | None
    versions: dict[str, Version]
    delta: frozenset[str]
    flags: int
    run_id: str | None
    inline: frozenset[str]

    @classmethod
    def of(cls, rec: Any, key: bytes, extra_delta: frozenset[str]) -> _RawNode:
        versions: dict[str, Version] = rec[1]
        delta = (frozenset(rec[8]) if len(rec) > 8 else frozenset()) | extra_delta
        return cls(
            keys.decode_checkpoint_key(key)[2],
            _parent_out(rec[0]),
            versions,
            frozenset(c for c in delta if c in versions),
            rec[6],
            rec[7],
            frozenset(c for c in _inline_of(rec) if c in versions),
        )


def _inline_of(rec: Any) -> dict[str, Any]:
    """The values a checkpoint record holds itself (format 3): channel → [type, bytes]."""
    if len(rec) <= 9:
        return {}
    held = rec[9]
    if not isinstance(held, dict) or not all(
        isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], bytes)
        for v in held.values()
    ):
        raise CorruptRecordError(
            f"checkpoint record holds inline values of an unexpected shape ({held!r:.80}); "
            "run `deltalog verify`"
        )
    return held


def _inline_value(key: bytes, channel: str, typed: Any) -> StoredValue:
    """A value held in checkpoint record ``key`` as a :class:`StoredValue`.

    Its ``record`` (the key of the decoded-value caches) is the type and
    payload, which identify the value as a blob record's bytes do.
    """
    ctype, payload = typed
    return StoredValue(
        ctype.encode() + b"\x00" + payload,
        f"checkpoints/{key.hex()}[{channel!r}]",
        (ctype, payload),
    )


@dataclass
class VerifyFindings:
    """Raw findings of :meth:`ReadTxn.verify_group` (the saver names threads)."""

    checkpoints: int = 0
    records: int = 0
    problems: list[tuple[str, Literal["error", "warning"], str | None, str]] = field(
        default_factory=list
    )
    decodable: list[str] = field(default_factory=list)


@dataclass
class _Dbs:
    meta: Any
    names: Any
    names_rev: Any
    checkpoints: Any
    writes: Any
    blobs: Any
    runs: Any
    items: Any = None
    item_ns: Any = None
    item_vectors: Any = None
    item_ttl: Any = None


class _RWLock:
    """Many readers or one exclusive holder (map growth remaps the file under readers)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._exclusive = False
        # The exclusive holder may read, and take the exclusive side again (reopening
        # after fork reads the format, and a read may have to adopt a grown map).
        self._owner: int | None = None
        self._depth = 0

    def acquire_read(self) -> None:
        with self._cond:
            while self._exclusive and self._owner != threading.get_ident():
                self._cond.wait()
            self._readers += 1

    def release_read(self) -> None:
        with self._cond:
            self._readers -= 1
            if not self._readers:
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            if self._owner == threading.get_ident():
                self._depth += 1
            else:
                while self._exclusive:
                    self._cond.wait()
                self._exclusive = True
                while self._readers:
                    self._cond.wait()
                self._owner, self._depth = threading.get_ident(), 1
        try:
            yield
        finally:
            self.release_exclusive()

    def try_exclusive(self, timeout: float) -> bool:
        """Take the exclusive side within ``timeout`` seconds; False (and nothing held) if not."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._exclusive:
                if not self._cond.wait(deadline - time.monotonic()):
                    return False
            self._exclusive = True
            while self._readers:
                if not self._cond.wait(deadline - time.monotonic()):
                    self._exclusive = False
                    self._cond.notify_all()
                    return False
            self._owner, self._depth = threading.get_ident(), 1
            return True

    def release_exclusive(self) -> None:
        """Give up (one level of) the exclusive side."""
        with self._cond:
            self._depth -= 1
            if not self._depth:
                self._exclusive = False
                self._owner = None
                self._cond.notify_all()


class _Request(Generic[T]):
    __slots__ = ("chain", "done", "error", "gone", "history_safe", "notify", "op", "value", "wake")

    def __init__(
        self,
        op: Callable[[WriteTxn], T],
        history_safe: bool = False,
        notify: Callable[[BaseException | None, T | None], None] | None = None,
    ) -> None:
        self.op = op
        self.history_safe = history_safe
        self.done = False
        self.value: T | None = None
        self.error: BaseException | None = None
        # A thread caller (notify is None) sleeps on ``wake``, held until the
        # request is done or its caller is made the next leader; only the leader
        # that finished (or passes on the lead to) this request releases it. A
        # queued caller (Store.submit) is told by ``notify`` instead and never
        # leads: a leader task on the store's lead thread runs its batch.
        self.notify = notify
        self.wake: threading.Lock | None = None
        # Done thread callers of the same batch to wake after this one, in
        # turn (see Store._wake); ``gone``: the caller stopped waiting.
        self.chain: list[_Request[Any]] = []
        self.gone = False
        if notify is None:
            self.wake = threading.Lock()
            self.wake.acquire()


class ReadTxn:
    """A read transaction with typed accessors. Valid only inside ``Store.read()``."""

    memo_reads: bool = True
    """Whether :meth:`history` may use the history memo (never in a write transaction,
    whose view includes uncommitted changes)."""

    def __init__(self, store: Store, txn: Any) -> None:
        self.store = store
        self.txn = txn
        self.dbs = store._dbs
        self.codec = store.codec

    # -- names -----------------------------------------------------------------

    def name_id(self, kind: bytes, name: str) -> int | None:
        """The interned id of ``name``, or None if it was never stored.

        Raises:
            CorruptRecordError: The ``names`` record fails its CRC (format 4) or
                is malformed: never another name's id.
        """
        cache = self.store._name_ids
        hit = cache.get((kind, name))
        if hit is not None:
            return hit
        key = keys.name_key(kind, name)
        raw = self.txn.get(key, db=self.dbs.names)
        if raw is None:
            return None
        name_id, stored = decode_name_id(key, raw, crc=self._names_crc())
        if stored is not None and stored != name:  # hashed long name collision
            return None
        cache.put((kind, name), name_id)
        self.store._names.put((kind, name_id), name)
        return name_id

    def name_of(self, kind: bytes, name_id: int) -> str:
        """The name behind an interned id (CRC-checked like :meth:`name_id`)."""
        cache = self.store._names
        hit = cache.get((kind, name_id))
        if hit is not None:
            return hit
        key = keys.name_rev_key(kind, name_id)
        raw = self.txn.get(key, db=self.dbs.names_rev)
        if raw is None:
            raise CorruptRecordError(
                f"names_rev has no entry for {kind.decode()}:{name_id}; run `deltalog verify`"
            )
        name = decode_name_rev(key, raw, crc=self._names_crc())
        cache.put((kind, name_id), name)
        return name

    def _names_crc(self) -> bool:
        """Whether name records carry a CRC: format 4, or an older store that another
        process upgraded after this (read-only) process opened it."""
        if not self.store._names_crc:
            raw = self.txn.get(b"format_version", db=self.dbs.meta)
            version = _format_version(raw, self.store.path)
            self.store._names_crc = version >= NAMES_CRC_FORMAT
        return self.store._names_crc

    def ids(self, thread_id: str, checkpoint_ns: str) -> tuple[int, int] | None:
        """Interned (thread, ns) ids, or None when nothing was ever stored there."""
        t = self.name_id(keys.KIND_THREAD, thread_id)
        if t is None:
            return None
        n = self.name_id(keys.KIND_NS, checkpoint_ns)
        if n is None:
            return None
        return t, n

    # -- checkpoints -------------------------------------------------------------

    def _decode_checkpoint(self, t: int, n: int, key: bytes, raw: bytes) -> CheckpointRow:
        rec = self.codec.decode(raw, f"checkpoints/{key.hex()}")
        try:
            parent, versions, ctype, cbytes, mtype, mbytes, flags, run_id = rec[:8]
            _, _, cid = keys.decode_checkpoint_key(key)
        except Exception as exc:
            raise CorruptRecordError(
                f"record checkpoints/{key.hex()} has an unexpected shape ({exc}); "
                "run `deltalog verify`"
            ) from exc
        return CheckpointRow(
            thread_id=self.name_of(keys.KIND_THREAD, t),
            checkpoint_ns=self.name_of(keys.KIND_NS, n),
            checkpoint_id=cid,
            parent_id=_parent_out(parent),
            channel_versions=versions,
            checkpoint=(ctype, cbytes),
            metadata=(mtype, mbytes),
            flags=flags,
            run_id=run_id,
            inline=_inline_of(rec),
        )

    def _envelope(self, key: bytes, raw: bytes) -> tuple[Any, dict[str, Version], dict[str, Any]]:
        """(parent bytes, channel versions, inline values) of checkpoint record ``raw``,
        through the store's envelope cache (shared dicts: read them, never change them)."""
        envelopes = self.store.envelopes
        cached = envelopes.get(raw)
        if cached is None:
            rec = self.codec.decode(raw, f"checkpoints/{key.hex()}")
            if len(rec) < 2 or not isinstance(rec[1], dict):
                raise CorruptRecordError(
                    f"record checkpoints/{key.hex()} has an unexpected shape (no versions map)"
                )
            cached = envelopes.put(raw, (rec[0], rec[1], _inline_of(rec)))
        return cached

    def latest_key(self, t: int, n: int) -> bytes | None:
        """Key of the greatest checkpoint id in (thread, ns): one cursor seek (R4)."""
        prefix = keys.ns_prefix(t, n)
        cur = self.txn.cursor(db=self.dbs.checkpoints)
        found = cur.prev() if cur.set_range(_prefix_end(prefix)) else cur.last()
        if not found:
            return None
        key: bytes = cur.key()
        return key if key.startswith(prefix) else None

    def checkpoint(
        self,
        t: int,
        n: int,
        checkpoint_id: str | None,
        *,
        with_values: bool = True,
        with_writes: bool = True,
    ) -> CheckpointRow | None:
        """One checkpoint (the latest when ``checkpoint_id`` is None) with its blobs and writes."""
        if checkpoint_id is None:
            key = self.latest_key(t, n)
            if key is None:
                return None
        else:
            key = keys.checkpoint_key(t, n, keys.encode_id(checkpoint_id))
        raw = self.txn.get(key, db=self.dbs.checkpoints)
        if raw is None:
            return None
        try:
            row = self._decode_checkpoint(t, n, key, raw)
            if with_values:
                row.values = self.values(t, n, key, row.channel_versions, row.inline)
            if with_writes:
                row.writes = self.writes(key)
        except CorruptRecordError as exc:
            cid = checkpoint_id or f"key {key.hex()}"
            with contextlib.suppress(Exception):
                cid = keys.decode_checkpoint_key(key)[2]
            raise self._damaged(t, n, cid, exc) from exc
        return row

    def _damaged(
        self, t: int, n: int, checkpoint_id: str, exc: Exception, needed_by: str | None = None
    ) -> CorruptRecordError:
        """A decode failure restated with the checkpoint (and thread) it damages."""
        try:
            where = (
                f"thread {self.name_of(keys.KIND_THREAD, t)!r}, "
                f"checkpoint_ns {self.name_of(keys.KIND_NS, n)!r}"
            )
        except CorruptRecordError:
            where = f"thread #{t}, checkpoint_ns #{n}"
        why = "" if needed_by is None else f", an ancestor needed to rebuild {needed_by!r},"
        return CorruptRecordError(f"checkpoint {checkpoint_id!r} of {where}{why} is damaged: {exc}")

    def _cycle(self, t: int, n: int, checkpoint_id: str, key: bytes) -> CorruptRecordError:
        """The error of a walk from ``checkpoint_id`` that met checkpoint ``key`` again."""
        try:
            again = repr(keys.decode_checkpoint_key(key)[2])
        except Exception:
            again = f"key {key.hex()}"
        return self._damaged(
            t,
            n,
            checkpoint_id,
            CorruptRecordError(
                f"its parent chain reaches checkpoint {again} twice (a parent cycle, or a "
                f"chain longer than {MAX_WALK}); run `deltalog verify`"
            ),
        )

    def values(
        self,
        t: int,
        n: int,
        key: bytes,
        versions: dict[str, Version],
        inline: dict[str, list[Any]],
    ) -> dict[str, StoredValue]:
        """Stored values of a checkpoint's channel versions (empty versions are absent).

        A value the record ``key`` holds itself (``inline``) is taken from it;
        the others are read from their blobs.
        """
        out: dict[str, StoredValue] = {}
        for channel, version in versions.items():
            typed = inline.get(channel)
            value = (
                self.blob(t, n, channel, version)
                if typed is None
                else _inline_value(key, channel, typed)
            )
            if value is not None:
                out[channel] = value
        return out

    def blob(self, t: int, n: int, channel: str, version: Version) -> StoredValue | None:
        """One stored channel value, still encoded, or None if that version stored nothing.

        The record is decoded by the caller (through a cache of decoded values),
        so a value read again costs no deserialization.
        """
        c = self.name_id(keys.KIND_CHANNEL, channel)
        if c is None:
            return None
        key = keys.blob_key(t, n, c, version)
        raw = self.txn.get(key, db=self.dbs.blobs)
        if raw is None:
            return None
        return StoredValue(raw, f"blobs/{key.hex()}", self.blob_typed(key, raw))

    def blob_typed(self, key: bytes, raw: bytes, links: int = 0) -> Typed:
        """The ``(type, payload)`` of a blob record, resolving delta links to the keyframe.

        Resolved payloads of large records are kept in the store's payload LRU
        (keyed by the record bytes), so the newest version — usually a delta of
        the one read before — costs one dictionary decompression, not a chain.
        """
        hit = self.store.payloads.get(raw)
        if hit is not None:
            return hit
        where = f"blobs/{key.hex()}"
        head = self.codec.delta_header(raw, where)
        if head is None:
            rec = self.codec.decode(raw, where)
            typed: Typed = (rec[0], rec[1])
        else:
            base_payload = b""
            if head.ref:
                base_key = keys.blob_base_key(key, head.ref)
                base_raw = self.txn.get(base_key, db=self.dbs.blobs)
                if base_raw is None or links >= MAX_LINKS:
                    raise CorruptRecordError(
                        f"record {where} is a delta of blobs/{base_key.hex()}, which is "
                        f"{'missing' if base_raw is None else 'too many links away'}; run "
                        "`deltalog verify` and restore from a backup"
                    )
                base_payload = self.blob_typed(base_key, base_raw, links + 1)[1]
            content = b"" if head.span is None else self._range_content(key, head.span)
            rec = self.codec.decode_delta(head, base_payload, where, content)
            typed = (rec[0], rec[1])
        if len(typed[1]) >= DELTA_MIN:
            self.store.payloads.put(raw, typed)
        return typed

    def _range_content(self, blob_key: bytes, span: tuple[bytes, bytes]) -> bytes:
        """:meth:`write_content` of a blob's write range (its thread, ns and channel)."""
        (t, n, c), _ = keys.split_ids(blob_key, 3)
        return self.write_content(keys.ns_prefix(t, n), keys.uid(c), *span)

    def write_content(self, prefix: bytes, cbytes: bytes, lo: bytes, hi: bytes) -> bytes:
        """Payloads of the writes (idx ≥ 0) to one channel under checkpoints ``lo`` … ``hi``.

        Args:
            prefix: The (thread, ns) key prefix.
            cbytes: The channel's uid bytes.
            lo: Encoded id of the first checkpoint (inclusive).
            hi: Encoded id of the last checkpoint (inclusive).

        Returns:
            The payloads concatenated in key order: a delta blob's write dictionary.
        """
        parts: list[bytes] = []
        plen = len(prefix)
        cur = self.txn.cursor(db=self.dbs.writes)
        ok = cur.set_range(prefix + lo)
        while ok:
            key = cur.key()
            if not key.startswith(prefix) or keys.write_checkpoint_key(key)[plen:] > hi:
                break
            part = self._write_payload(key, cur.value(), cbytes)
            if part is not None:
                parts.append(part)
            ok = cur.next()
        return b"".join(parts)

    def _write_payload(self, key: bytes, raw: bytes, cbytes: bytes) -> bytes | None:
        """The payload of a write if it goes to channel ``cbytes`` with idx ≥ 0."""
        if not raw.startswith(cbytes) or keys.write_idx(key) < 0:
            return None
        found, _, record = _split_write_value(raw)
        if found != cbytes:
            return None
        payload: bytes = self.codec.decode(record, f"writes/{key.hex()}", prefix=found)[1]
        return payload

    def writes(
        self, checkpoint_key: bytes, channels: dict[bytes, str] | None = None
    ) -> list[WriteRow]:
        """Writes stored under one checkpoint, in ``writes_sort_key`` order (R1).

        Args:
            checkpoint_key: The checkpoint's key (also the prefix of its writes).
            channels: When given, only writes whose channel uid bytes are a key of
                this map are decoded; the others are skipped without decoding.
        """
        out: list[WriteRow] = []
        cur = self.txn.cursor(db=self.dbs.writes)
        if not cur.set_range(checkpoint_key):
            return out
        plen = len(checkpoint_key)
        for key, raw in cur:
            if not key.startswith(checkpoint_key):
                break
            cbytes, channel_id, record = _split_write_value(raw)
            if channels is not None:
                channel = channels.get(cbytes)
                if channel is None:
                    continue
            else:
                channel = self.name_of(keys.KIND_CHANNEL, channel_id)
            try:
                task_path, task_id, idx = keys.write_suffix(key, plen)
            except Exception as exc:
                raise CorruptRecordError(
                    f"key writes/{key.hex()} cannot be decoded ({exc})"
                ) from exc
            rec = self.codec.decode(record, f"writes/{key.hex()}", prefix=cbytes)
            out.append(WriteRow(task_id, channel, (rec[0], rec[1]), task_path, idx))
        return out

    def delta_history(
        self, t: int, n: int, checkpoint_id: str | None, channels: Sequence[str]
    ) -> dict[str, tuple[StoredValue | None, list[WriteRow]]]:
        """Seed and writes of each channel back from a checkpoint (R6), walked cold.

        Runs inside this one read transaction. Cost: one record decode and one
        blob probe per ancestor back to the nearest seed, plus the decoding of
        that ancestor's writes to the asked channels; writes of other channels
        are skipped by a short bytes compare. Never proportional to thread length.
        The history memo is neither read nor filled (see :meth:`history`).
        """
        found = self._history(t, n, checkpoint_id, channels, use_memo=False)
        return {c: (h.seed, list(h.writes)) for c, h in found.items()}

    def history(
        self, t: int, n: int, checkpoint_id: str | None, channels: Sequence[str]
    ) -> dict[str, DeltaHistory]:
        """What :meth:`delta_history` returns, through the store's history memo.

        The walk stops at the first ancestor whose own history the memo holds
        (valid for this snapshot, see :mod:`deltalog.engine.memo`) and appends
        what it read fresh; the result is remembered for the asked checkpoint.
        So each invoke of a thread reads only the checkpoints added since the
        previous one.
        """
        return self._history(t, n, checkpoint_id, channels, use_memo=True)

    def _history(
        self,
        t: int,
        n: int,
        checkpoint_id: str | None,
        channels: Sequence[str],
        *,
        use_memo: bool,
    ) -> dict[str, DeltaHistory]:
        walk = DeltaWalk(tuple(channels))
        prefix = keys.ns_prefix(t, n)
        if checkpoint_id is None:
            target = self.latest_key(t, n)
            if target is None:
                return _histories(walk)
            checkpoint_id = keys.decode_checkpoint_key(target)[2]
        else:
            target = prefix + keys.encode_id(checkpoint_id)
        raw = self.txn.get(target, db=self.dbs.checkpoints)
        if raw is None:
            return _histories(walk)
        try:
            parent_id = _parent_out(self._envelope(target, raw)[0])
        except CorruptRecordError as exc:
            raise self._damaged(t, n, checkpoint_id, exc) from exc
        memo = self.store.memo
        snapshot = self.txn.id() if use_memo and self.memo_reads else -1
        usable = snapshot >= 0 and memo.usable(snapshot)
        epoch = memo.epoch
        ids = {c: self.name_id(keys.KIND_CHANNEL, c) for c in channels}
        # Channel → the remembered history the result extends, and the entry
        # remembered for the target itself (an exact hit, or stored below).
        bases: dict[str, HistoryEntry] = {}
        entries: dict[str, HistoryEntry] = {}
        for channel, channel_id in ids.items():
            if channel_id is None:
                # Never interned: no write or blob of it exists anywhere.
                walk.adopt(channel, None, ())
            elif usable:
                exact = memo.get(t, n, target, channel, snapshot, epoch)
                if exact is not None:
                    walk.adopt(channel, exact.seed, exact.writes)
                    bases[channel] = entries[channel] = exact
        if walk.done:
            return _histories(walk, entries=entries, bases=bases)
        wanted = {keys.uid(i): c for c, i in ids.items() if i is not None and c in walk.remaining}
        blob_prefixes = {
            c: prefix + keys.uid(i) for c, i in ids.items() if i is not None and c in walk.remaining
        }
        # Entries are built only along links whose child key is greater than the
        # parent key, and only blob keys probed missing can turn into seeds later.
        monotonic = True
        absent: list[bytes] = []
        child = target
        # Records hold the parent as its encoded key bytes, so the walk goes
        # from record to record without re-encoding ids.
        cursor: bytes | None = None if parent_id is None else keys.encode_id(parent_id)
        # Every key the walk entered: meeting one again is a parent cycle
        # (R11), which would otherwise loop until memory runs out.
        seen = {target}
        while cursor is not None and not walk.done:
            key = prefix + cursor
            if key in seen or len(seen) > MAX_WALK:
                raise self._cycle(t, n, checkpoint_id, key)
            seen.add(key)
            if key >= child:
                monotonic = False
            raw = self.txn.get(key, db=self.dbs.checkpoints)
            if raw is None:
                break
            try:
                parent, versions, inline = self._envelope(key, raw)
                seeds: dict[str, StoredValue] = {}
                for channel in walk.remaining:
                    version = versions.get(channel)
                    if version is None:
                        continue
                    typed = inline.get(channel)
                    if typed is not None:
                        seeds[channel] = _inline_value(key, channel, typed)
                        continue
                    bkey = blob_prefixes[channel] + keys.encode_version(version)
                    braw = self.txn.get(bkey, db=self.dbs.blobs)
                    if braw is None:
                        absent.append(bkey)
                    else:
                        seeds[channel] = StoredValue(
                            braw, f"blobs/{bkey.hex()}", self.blob_typed(bkey, braw)
                        )
                walk.visit(self.writes(key, wanted) if wanted else (), seeds)
                adopted = False
                if usable:
                    for channel in tuple(walk.remaining):
                        known = memo.get(t, n, key, channel, snapshot, epoch)
                        if known is not None:
                            walk.adopt(channel, known.seed, known.writes)
                            bases[channel] = known
                            adopted = True
                if seeds or adopted:
                    wanted = {b: c for b, c in wanted.items() if c in walk.remaining}
            except CorruptRecordError as exc:
                ancestor = keys.decode_checkpoint_key(key)[2]
                raise self._damaged(t, n, ancestor, exc, needed_by=checkpoint_id) from exc
            child = key
            cursor = parent
        result = walk.result()
        if usable and monotonic:
            for channel, (seed, writes) in result.items():
                if ids[channel] is None or channel in entries:
                    continue
                base = bases.get(channel)
                if base is not None:
                    fresh = writes[len(base.writes) :]
                    payload = base.payload
                else:
                    fresh = writes
                    payload = 0 if seed is None else len(seed.record) + len(seed.typed[1])
                payload += sum(len(w.value[1]) for w in fresh)
                entry = memo.put(
                    t, n, target, channel, seed, tuple(writes), snapshot, epoch, absent, payload
                )
                if entry is not None:
                    entries[channel] = entry
        return _histories(walk, entries=entries, bases=bases, result=result)

    # -- maintenance reads -------------------------------------------------------------

    def group(
        self, t: int, n: int, extra_delta: frozenset[str] = frozenset()
    ) -> tuple[dict[str, Node], dict[str, dict[str, Version]], dict[str, str | None]]:
        """Every checkpoint of one (thread, ns) as planning nodes.

        Args:
            t: Thread id.
            n: Namespace id.
            extra_delta: Channels to treat as delta channels everywhere (the
                reducer map a caller passed), besides those recorded at put time.

        Returns:
            (nodes by id, channel versions by id, run id by id).
        """
        rows: list[_RawNode] = []
        for key, raw in self.iter_checkpoint_keys(keys.ns_prefix(t, n), start=None, reverse=False):
            rows.append(
                _RawNode.of(self.codec.decode(raw, f"checkpoints/{key.hex()}"), key, extra_delta)
            )
        cycles = parent_cycles({r.cid: r.parent for r in rows})
        if cycles:
            # Plans walk parents (relinking, delta chains): refuse, never loop.
            raise self._cycle(
                t, n, cycles[0][0], keys.checkpoint_key(t, n, keys.encode_id(cycles[0][0]))
            )
        return (
            self._nodes(t, n, rows, extra_delta),
            {r.cid: r.versions for r in rows},
            {r.cid: r.run_id for r in rows},
        )

    def _nodes(
        self, t: int, n: int, rows: list[_RawNode], extra_delta: frozenset[str]
    ) -> dict[str, Node]:
        union = set(extra_delta).union(*(r.delta for r in rows))
        channel_ids = {c: self.name_id(keys.KIND_CHANNEL, c) for c in union}
        cur = self.txn.cursor(db=self.dbs.blobs)
        nodes: dict[str, Node] = {}
        for r in rows:
            seeded = frozenset(
                c
                for c, i in channel_ids.items()
                if c in r.inline
                or (
                    i is not None
                    and c in r.versions
                    and cur.set_key(keys.blob_key(t, n, i, r.versions[c]))
                )
            )
            nodes[r.cid] = Node(
                r.cid, r.parent, r.delta, seeded, bool(r.flags & FLAG_HIDDEN), frozenset(r.versions)
            )
        return nodes

    def verify_group(self, t: int, n: int) -> VerifyFindings:
        """Check one (thread, ns): records decode, parents exist, delta chains reach a seed.

        Never raises for damaged data: every defect becomes a finding.
        """
        found = VerifyFindings()
        rows: list[_RawNode] = []
        prefix = keys.ns_prefix(t, n)
        present: set[bytes] = set()
        for key, raw in self.iter_checkpoint_keys(prefix, start=None, reverse=False):
            present.add(key)
            found.records += 1
            try:
                cid = keys.decode_checkpoint_key(key)[2]
            except Exception as exc:
                found.problems.append(
                    ("undecodable", "error", None, f"checkpoint key {key.hex()}: {exc}")
                )
                continue
            try:
                rows.append(
                    _RawNode.of(
                        self.codec.decode(raw, f"checkpoints/{key.hex()}"), key, frozenset()
                    )
                )
            except Exception as exc:
                found.problems.append(("undecodable", "error", cid, str(exc)))
        found.checkpoints = len(present)
        nodes = self._nodes(t, n, rows, frozenset())
        found.decodable = list(nodes)
        for cid, node in nodes.items():
            if node.parent_id is not None and node.parent_id not in nodes:
                found.problems.append(
                    ("dangling_parent", "error", cid, f"parent {node.parent_id} is missing")
                )
        for cycle in parent_cycles({cid: node.parent_id for cid, node in nodes.items()}):
            loop = " -> ".join([*cycle, cycle[0]])
            found.problems.append(
                (
                    "parent_cycle",
                    "error",
                    cycle[0],
                    f"the parent chain loops (child -> parent: {loop}); every read of these checkpoints fails",
                )
            )
        for (cid, channel), missing in sorted(delta_chains(nodes, list(nodes)).broken.items()):
            found.problems.append(
                (
                    "broken_delta_chain",
                    "error",
                    cid,
                    f"channel {channel!r} needs missing ancestor {missing}",
                )
            )
        orphaned: set[bytes] = set()
        cur = self.txn.cursor(db=self.dbs.writes)
        ok = cur.set_range(prefix)
        while ok and cur.key().startswith(prefix):
            key, raw = cur.key(), cur.value()
            found.records += 1
            try:
                ckey = keys.write_checkpoint_key(key)
                cbytes, _, record = _split_write_value(raw)
                self.codec.decode(record, f"writes/{key.hex()}", prefix=cbytes)
                if ckey not in present and ckey not in orphaned:
                    orphaned.add(ckey)
                    found.problems.append(
                        (
                            "writes_without_checkpoint",
                            "warning",
                            keys.decode_checkpoint_key(ckey)[2],
                            "no checkpoint record",
                        )
                    )
            except Exception as exc:
                found.problems.append(("undecodable", "error", None, f"write {key.hex()}: {exc}"))
            ok = cur.next()
        referenced = self.referenced_blob_keys(t, n, (r.versions for r in rows))
        cur = self.txn.cursor(db=self.dbs.blobs)
        ok = cur.set_range(prefix)
        while ok and cur.key().startswith(prefix):
            key, raw = cur.key(), cur.value()
            found.records += 1
            try:
                # Cached payloads are keyed by record bytes, so they prove the
                # record and its bases; what they cannot prove is that a write
                # range's content is still what the record was encoded over.
                self.blob_typed(key, raw)
                head = self.codec.delta_header(raw, f"blobs/{key.hex()}")
                span = None if head is None else head.span
                if head is not None and span is not None:
                    content = self._range_content(key, span)
                    self.codec.check_writes(head, content, f"blobs/{key.hex()}")
                    mark = self.txn.get(
                        keys.WDEP + key[: keys.split_ids(key, 3)[1]], db=self.dbs.meta
                    )
                    if mark is None or bytes(mark) < span[1]:
                        found.problems.append(
                            (
                                "unguarded_write_range",
                                "error",
                                None,
                                f"blob {key.hex()} depends on writes past its channel's mark; "
                                "a new write there would not rebase it",
                            )
                        )
            except Exception as exc:
                found.problems.append(("undecodable", "error", None, str(exc)))
            if key not in referenced:
                found.problems.append(("unreferenced_blob", "warning", None, f"blob {key.hex()}"))
            ok = cur.next()
        return found

    def referenced_blob_keys(
        self, t: int, n: int, versions: Iterable[dict[str, Version]]
    ) -> set[bytes]:
        """Blob keys that the given channel-version maps point at."""
        out: set[bytes] = set()
        for vers in versions:
            for channel, version in vers.items():
                c = self.name_id(keys.KIND_CHANNEL, channel)
                if c is not None:
                    out.add(keys.blob_key(t, n, c, version))
        return out

    def doomed_blobs(
        self, t: int, n: int, plan: Plan, versions: dict[str, dict[str, Version]]
    ) -> list[bytes]:
        """Blob keys of (thread, ns) that no checkpoint surviving ``plan`` references."""
        keep = self.referenced_blob_keys(
            t, n, (v for c, v in versions.items() if c not in plan.delete)
        )
        return self.orphan_blob_keys(t, n, keep)

    def measure(
        self,
        t: int,
        n: int,
        plan: Plan,
        versions: dict[str, dict[str, Version]],
        doomed: Sequence[bytes] | None = None,
    ) -> dict[str, int]:
        """What applying ``plan`` removes: counts and bytes of records, writes, blobs.

        ``doomed`` is :meth:`doomed_blobs` when the caller already has it.
        """
        out = {"checkpoints": 0, "writes": 0, "blobs": 0, "bytes": 0}
        cur_c = self.txn.cursor(db=self.dbs.checkpoints)
        cur_w = self.txn.cursor(db=self.dbs.writes)
        for cid in plan.delete:
            key = keys.checkpoint_key(t, n, keys.encode_id(cid))
            if cur_c.set_key(key):
                out["checkpoints"] += 1
                out["bytes"] += len(key) + len(cur_c.value())
            ok = cur_w.set_range(key)
            while ok and cur_w.key().startswith(key):
                out["writes"] += 1
                out["bytes"] += len(cur_w.key()) + len(cur_w.value())
                ok = cur_w.next()
        if doomed is None:
            doomed = self.doomed_blobs(t, n, plan, versions)
        cur_b = self.txn.cursor(db=self.dbs.blobs)
        for key in doomed:
            if cur_b.set_key(key):
                out["blobs"] += 1
                out["bytes"] += len(key) + len(cur_b.value())
        return out

    def thread_groups(self, thread_id: str) -> list[tuple[int, int]]:
        """(thread, ns) ids of a thread's namespaces; empty if the thread is unknown."""
        t = self.name_id(keys.KIND_THREAD, thread_id)
        return [] if t is None else [(t, n) for n in self.namespaces(t)]

    def orphan_blob_keys(self, t: int, n: int, referenced: set[bytes]) -> list[bytes]:
        """Blob keys of (thread, ns) that no checkpoint references."""
        prefix = keys.ns_prefix(t, n)
        out: list[bytes] = []
        cur = self.txn.cursor(db=self.dbs.blobs)
        ok = cur.set_range(prefix)
        while ok and cur.key().startswith(prefix):
            if cur.key() not in referenced:
                out.append(cur.key())
            ok = cur.next()
        return out

    # -- inspection and portable export --------------------------------------------------

    def checkpoint_refs(self, t: int) -> list[tuple[str, str, str | None, bool]]:
        """(checkpoint_ns, checkpoint_id, parent_id, hidden) of every checkpoint of a
        thread, from the record envelopes alone (no value is read or deserialized)."""
        out: list[tuple[str, str, str | None, bool]] = []
        for key, raw in self.iter_checkpoint_keys(keys.thread_prefix(t), start=None, reverse=False):
            rec = self.codec.decode(raw, f"checkpoints/{key.hex()}")
            _, n, cid = keys.decode_checkpoint_key(key)
            out.append(
                (
                    self.name_of(keys.KIND_NS, n),
                    cid,
                    _parent_out(rec[0]),
                    bool(rec[6] & FLAG_HIDDEN),
                )
            )
        return out

    def thread_summaries(self) -> list[ThreadSummary]:
        """Per thread: checkpoints, namespaces, newest id, stored bytes — from keys and sizes.

        Nothing is decoded, so this stays fast on many threads.
        """
        out: dict[int, ThreadSummary] = {}
        cur = self.txn.cursor(db=self.dbs.checkpoints)
        for key, value in cur.iternext(keys=True, values=True):
            (t, n), pos = keys.split_ids(key, 2)
            s = out.get(t)
            if s is None:
                s = out[t] = ThreadSummary(self.name_of(keys.KIND_THREAD, t))
            s.checkpoints += 1
            s.bytes += len(key) + len(value)
            ns = self.name_of(keys.KIND_NS, n)
            if ns not in s.namespaces:
                s.namespaces.append(ns)
            cid = key[pos:]
            if ns == "" and (s.newest_key is None or cid > s.newest_key):
                s.newest_key = cid
                s.newest_id = keys.decode_id(key, pos)[0]
        for name in ("writes", "blobs"):
            cur = self.txn.cursor(db=getattr(self.dbs, name))
            for key, value in cur.iternext(keys=True, values=True):
                s = out.get(keys.decode_uid(key, 0)[0])
                if s is not None:
                    s.bytes += len(key) + len(value)
                    if name == "writes":
                        s.writes += 1
                    else:
                        s.blobs += 1
        return list(out.values())

    def channel_sizes(self) -> dict[str, dict[str, int]]:
        """Per channel: blob and write counts, stored bytes and raw (uncompressed) bytes,
        and the values held in checkpoint records (``inline``, ``inline_bytes``:
        serialized bytes, stored inside the records' own compression)."""
        out: dict[str, dict[str, int]] = {}

        def entry(name: str) -> dict[str, int]:
            e = out.get(name)
            if e is None:
                fields = ("blobs", "blob_bytes", "writes", "write_bytes", "raw_bytes")
                e = out[name] = dict.fromkeys((*fields, "inline", "inline_bytes"), 0)
            return e

        def named(channel_id: int) -> dict[str, int]:
            return entry(self.name_of(keys.KIND_CHANNEL, channel_id))

        for key, value in self.txn.cursor(db=self.dbs.blobs).iternext(keys=True, values=True):
            e = named(keys.split_ids(key, 3)[0][2])
            e["blobs"] += 1
            e["blob_bytes"] += len(value)
            e["raw_bytes"] += self.codec.raw_size(value, f"blobs/{key.hex()}")
        for key, value in self.txn.cursor(db=self.dbs.writes).iternext(keys=True, values=True):
            cbytes, channel_id, record = _split_write_value(value)
            e = named(channel_id)
            e["writes"] += 1
            e["write_bytes"] += len(value)
            e["raw_bytes"] += len(cbytes) + self.codec.raw_size(
                record, f"writes/{key.hex()}", prefix=cbytes
            )
        for key, value in self.txn.cursor(db=self.dbs.checkpoints).iternext(keys=True, values=True):
            for channel, typed in _inline_of(
                self.codec.decode(value, f"checkpoints/{key.hex()}")
            ).items():
                e = entry(channel)
                e["inline"] += 1
                e["inline_bytes"] += len(typed[1])
        return out

    def export_thread(self, t: int) -> Iterator[dict[str, Any]]:
        """Portable records of one thread: names instead of interned ids, values as stored by serde."""
        thread_id = self.name_of(keys.KIND_THREAD, t)
        prefix = keys.thread_prefix(t)
        # Values held in checkpoint records are exported as blobs (once per
        # version, unless a blob of that version exists): a portable stream
        # needs no format-3 reader, and importing it stores them as blobs.
        held: dict[tuple[int, str, Version], list[Any]] = {}

        def blob(n: int, channel: str, version: Version, typed: Sequence[Any]) -> dict[str, Any]:
            return {
                "kind": "blob",
                "thread_id": thread_id,
                "checkpoint_ns": self.name_of(keys.KIND_NS, n),
                "channel": channel,
                "version": version,
                "value": [typed[0], typed[1]],
            }

        for key, raw in self.iter_checkpoint_keys(prefix, start=None, reverse=False):
            rec = self.codec.decode(raw, f"checkpoints/{key.hex()}")
            _, n, cid = keys.decode_checkpoint_key(key)
            for channel, typed in _inline_of(rec).items():
                if channel in rec[1]:
                    held.setdefault((n, channel, rec[1][channel]), typed)
            yield {
                "kind": "checkpoint",
                "thread_id": thread_id,
                "checkpoint_ns": self.name_of(keys.KIND_NS, n),
                "checkpoint_id": cid,
                "parent_id": _parent_out(rec[0]),
                "channel_versions": rec[1],
                "checkpoint": [rec[2], rec[3]],
                "metadata": [rec[4], rec[5]],
                "flags": rec[6],
                "run_id": rec[7],
                "delta": list(rec[8]) if len(rec) > 8 else [],
            }
        cur = self.txn.cursor(db=self.dbs.blobs)
        ok = cur.set_range(prefix)
        while ok and cur.key().startswith(prefix):
            key = cur.key()
            _, n, c, version = keys.decode_blob_key(key)
            channel = self.name_of(keys.KIND_CHANNEL, c)
            held.pop((n, channel, version), None)
            yield blob(n, channel, version, self.blob_typed(key, cur.value()))
            ok = cur.next()
        for (n, channel, version), typed in held.items():
            yield blob(n, channel, version, typed)
        cur = self.txn.cursor(db=self.dbs.writes)
        ok = cur.set_range(prefix)
        while ok and cur.key().startswith(prefix):
            key, raw = cur.key(), cur.value()
            _, n, cid, task_path, task_id, idx = keys.decode_write_key(key)
            cbytes, channel_id, record = _split_write_value(raw)
            rec = self.codec.decode(record, f"writes/{key.hex()}", prefix=cbytes)
            yield {
                "kind": "write",
                "thread_id": thread_id,
                "checkpoint_ns": self.name_of(keys.KIND_NS, n),
                "checkpoint_id": cid,
                "task_id": task_id,
                "task_path": task_path,
                "idx": idx,
                "channel": self.name_of(keys.KIND_CHANNEL, channel_id),
                "value": [rec[0], rec[1]],
            }
            ok = cur.next()

    def iter_checkpoint_keys(
        self, prefix: bytes, *, start: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, raw record) under ``prefix``; ``start`` bounds the walk (exclusive)."""
        cur = self.txn.cursor(db=self.dbs.checkpoints)
        if reverse:
            bound = start if start is not None else _prefix_end(prefix)
            ok = cur.prev() if cur.set_range(bound) else cur.last()
            while ok:
                key = cur.key()
                if not key.startswith(prefix):
                    return
                yield key, cur.value()
                ok = cur.prev()
        else:
            ok = cur.set_range(start if start is not None else prefix)
            if ok and start is not None and cur.key() == start:
                ok = cur.next()
            while ok:
                key = cur.key()
                if not key.startswith(prefix):
                    return
                yield key, cur.value()
                ok = cur.next()

    def namespaces(self, t: int) -> list[int]:
        """Interned ns ids that hold checkpoints of thread ``t``, ascending."""
        out: list[int] = []
        cur = self.txn.cursor(db=self.dbs.checkpoints)
        prefix = keys.thread_prefix(t)
        ok = cur.set_range(prefix)
        while ok:
            key = cur.key()
            if not key.startswith(prefix):
                break
            n = keys.split_ids(key, 2)[0][1]
            out.append(n)
            ok = cur.set_range(keys.ns_prefix(t, n + 1)) if n + 1 < 2**64 else False
        return out

    def threads(self) -> list[int]:
        """Interned ids of threads with at least one checkpoint, ascending."""
        out: list[int] = []
        cur = self.txn.cursor(db=self.dbs.checkpoints)
        ok = cur.first()
        while ok:
            t = keys.decode_uid(cur.key(), 0)[0]
            out.append(t)
            ok = cur.set_range(keys.thread_prefix(t + 1)) if t + 1 < 2**64 else False
        return out

    def has_thread_rows(self, t: int) -> bool:
        """True if thread ``t`` has any checkpoint, write or blob."""
        prefix = keys.thread_prefix(t)
        for db in (self.dbs.checkpoints, self.dbs.writes, self.dbs.blobs):
            cur = self.txn.cursor(db=db)
            if cur.set_range(prefix) and cur.key().startswith(prefix):
                return True
        return False

    def run_checkpoints(self, run_id: str) -> list[tuple[int, int, str]]:
        """(thread, ns, checkpoint_id) of every checkpoint indexed under ``run_id``."""
        prefix = keys.encode_run(run_id)
        out: list[tuple[int, int, str]] = []
        cur = self.txn.cursor(db=self.dbs.runs)
        ok = cur.set_range(prefix)
        while ok:
            key = cur.key()
            if not key.startswith(prefix):
                break
            out.append(keys.decode_run_key(key))
            ok = cur.next()
        return out

    def dictionaries(self) -> list[tuple[int, bytes]]:
        """Trained record dictionaries stored in ``meta`` (``dict:N``), by id."""
        out: list[tuple[int, bytes]] = []
        cur = self.txn.cursor(db=self.dbs.meta)
        ok = cur.set_range(b"dict:")
        while ok and cur.key().startswith(b"dict:"):
            out.append((int(cur.key()[5:]), ormsgpack.unpackb(cur.value())))
            ok = cur.next()
        return sorted(out)

    def meta(self, name: str) -> Any:
        """A value of the ``meta`` database, or None."""
        raw = self.txn.get(name.encode("ascii"), db=self.dbs.meta)
        return None if raw is None else ormsgpack.unpackb(raw)


class _TableCheck:
    """State of :meth:`Store.verify_tables` across its read transactions.

    Findings are ``(kind, thread_id or None, detail)``; every one is an error.
    """

    #: Walk order: the name tables first, so the other keys' ids can be checked.
    ORDER: Final = ("names_rev", "names", "checkpoints", "writes", "blobs", "runs", "meta")

    def __init__(self, r: ReadTxn) -> None:
        self.out: list[tuple[str, str | None, str]] = []
        self.crc = r._names_crc()
        try:
            seq = r.meta("name_seq") or 0
        except ValueError as exc:  # not msgpack
            seq = exc
        if type(seq) is not int:
            self.out.append(("undecodable", None, f"meta/name_seq holds {seq!r}, not an id"))
            seq = 2**64
        self.seq: int = seq
        self.reverse: dict[tuple[bytes, int], str] = {}
        self.forward: set[tuple[bytes, int]] = set()
        self.known: dict[tuple[bytes, int], str] = {}

    def thread_of(self, key: bytes) -> str | None:
        """The thread a checkpoint/write/blob key belongs to, when its name is known."""
        with contextlib.suppress(Exception):
            t = (keys.KIND_THREAD, keys.decode_uid(key, 0)[0])
            return self.known.get(t) or self.reverse.get(t)
        return None

    def walk(self, r: ReadTxn, db_name: str, start: bytes) -> bytes | None:
        """Check the keys of ``db_name`` from ``start`` on; returns where to resume in a
        new transaction after LMDB reported damage (which ends this one), else None."""
        db = getattr(r.dbs, db_name)
        check = getattr(self, f"check_{db_name}")
        cur = r.txn.cursor(db=db)
        # The child's page walk (Store._page_walk) found LMDB's view sound.
        ok = cur.set_range(start)
        while ok:
            key, raw = bytes(cur.key()), bytes(cur.value())
            try:
                check(key, raw)
            except lmdb.Error as exc:
                self.out.append(
                    ("unreadable", self.thread_of(key), f"{db_name}/{key.hex()[:120]}: {_why(exc)}")
                )
                return key + b"\x00"
            except (DeltaLogError, ValueError) as exc:
                self.out.append(
                    ("undecodable", self.thread_of(key), f"{db_name}/{key.hex()[:120]}: {exc}")
                )
            ok = cur.next()
        return None

    def need(self, kind: bytes, name_id: int) -> None:
        if (kind, name_id) not in self.known:
            raise CorruptRecordError(f"holds unknown name id {kind.decode()}:{name_id}")

    def check_names_rev(self, key: bytes, raw: bytes) -> None:
        if len(key) != 9 or key[:1] not in _NAME_KINDS:
            raise DamagedKeyError(f"names_rev key of {len(key)} bytes")
        name_id = int.from_bytes(key[1:], "big")
        self.reverse[(key[:1], name_id)] = decode_name_rev(key, raw, crc=self.crc)
        if not 0 < name_id <= self.seq:
            raise CorruptRecordError(f"id {name_id} is beyond meta name_seq {self.seq}")

    def check_names(self, key: bytes, raw: bytes) -> None:
        kind = key[:1]
        if kind not in _NAME_KINDS or key[1:2] not in (b"\x00", b"\x01"):
            raise DamagedKeyError("names key with an unknown kind or form")
        name_id, stored = decode_name_id(key, raw, crc=self.crc)
        name = stored if stored is not None else key[2:].decode("utf-8")
        if keys.name_key(kind, name) != key:
            raise CorruptRecordError(f"key does not match the name {name[:40]!r} it holds")
        if (kind, name_id) in self.forward:
            raise CorruptRecordError(f"id {name_id} is given to a second name {name[:40]!r}")
        self.forward.add((kind, name_id))
        if self.reverse.get((kind, name_id)) != name:
            raise CorruptRecordError(
                f"names_rev {kind.decode()}:{name_id} does not hold {name[:40]!r}"
            )
        self.known[(kind, name_id)] = name

    def finish_names(self) -> None:
        """Report reverse entries that no ``names`` entry points back at."""
        for (kind, name_id), name in sorted(self.reverse.items()):
            if (kind, name_id) not in self.forward:
                self.out.append(
                    (
                        "undecodable",
                        name if kind == keys.KIND_THREAD else None,
                        f"names_rev/{keys.name_rev_key(kind, name_id).hex()}: {name[:40]!r} has "
                        "no matching names entry",
                    )
                )

    def check_checkpoints(self, key: bytes, raw: bytes) -> None:
        t, n, _ = keys.decode_checkpoint_key(key)
        self.need(keys.KIND_THREAD, t)
        self.need(keys.KIND_NS, n)

    def check_writes(self, key: bytes, raw: bytes) -> None:
        t, n, *_ = keys.decode_write_key(key)
        self.need(keys.KIND_THREAD, t)
        self.need(keys.KIND_NS, n)
        self.need(keys.KIND_CHANNEL, _split_write_value(raw)[1])

    def check_blobs(self, key: bytes, raw: bytes) -> None:
        t, n, c, _ = keys.decode_blob_key(key)
        self.need(keys.KIND_THREAD, t)
        self.need(keys.KIND_NS, n)
        self.need(keys.KIND_CHANNEL, c)

    def check_runs(self, key: bytes, raw: bytes) -> None:
        t, n, _ = keys.decode_run_key(key)
        self.need(keys.KIND_THREAD, t)
        self.need(keys.KIND_NS, n)

    def check_meta(self, key: bytes, raw: bytes) -> None:
        if key.startswith(keys.WDEP):
            ids, end = keys.split_ids(key[len(keys.WDEP) :], 3)
            if end != len(key) - len(keys.WDEP):
                raise DamagedKeyError("write-range mark key has trailing bytes")
            self.need(keys.KIND_THREAD, ids[0])
            self.need(keys.KIND_NS, ids[1])
            self.need(keys.KIND_CHANNEL, ids[2])


class WriteTxn(ReadTxn):
    """A write transaction: the reads plus the mutations. One per write batch entry."""

    memo_reads = False

    def __init__(self, store: Store, txn: Any, new_names: dict[tuple[bytes, str], int]) -> None:
        super().__init__(store, txn)
        self.new_names = new_names
        # What this transaction may change in remembered histories (reported to
        # the history memo before the commit, see Store._run_batch).
        self.memo_groups: set[tuple[int, int]] = set()
        self.memo_blobs: list[tuple[int, int, bytes]] = []

    def name_id(self, kind: bytes, name: str) -> int | None:
        hit = self.new_names.get((kind, name))
        return hit if hit is not None else super().name_id(kind, name)

    def name_of(self, kind: bytes, name_id: int) -> str:
        for (k, name), i in self.new_names.items():
            if k == kind and i == name_id:
                return name
        return super().name_of(kind, name_id)

    def intern(self, kind: bytes, name: str) -> int:
        """The id of ``name``, allocating one inside this transaction if new.

        New ids reach the process-wide cache only after the commit, so an
        aborted transaction can never leave a cached id that was not stored.
        """
        existing = self.name_id(kind, name)
        if existing is not None:
            return existing
        key = keys.name_key(kind, name)
        seq = self.meta("name_seq") or 0
        name_id = seq + 1 if type(seq) is int else 0
        rev_key = keys.name_rev_key(kind, name_id)
        # A damaged name_seq would hand out an id some name (of any kind: ids
        # are one sequence) already has, and with it that name's data: refuse.
        if name_id < 1 or any(
            self.txn.get(keys.name_rev_key(k, name_id), db=self.dbs.names_rev) is not None
            for k in _NAME_KINDS
        ):
            raise CorruptRecordError(
                f"meta name_seq {seq!r} is damaged: the next id is taken or invalid; run "
                "`deltalog verify` and restore the store from a backup"
            )
        hashed = key[1] == 1  # hashed: keep the full name to detect collisions
        if hashed and self.txn.get(key, db=self.dbs.names) is not None:
            raise DeltaLogError(f"sha256 collision interning {name[:40]!r}…")
        self.txn.put(key, encode_name_id(key, name_id, name if hashed else None), db=self.dbs.names)
        self.txn.put(rev_key, encode_name_rev(rev_key, name), db=self.dbs.names_rev)
        self.set_meta("name_seq", name_id)
        self.new_names[(kind, name)] = name_id
        return name_id

    def put_blob(
        self,
        t: int,
        n: int,
        channel: str,
        version: Version,
        typed: Typed,
        before: bytes | None = None,
    ) -> None:
        """Store one channel value unless that version is already stored (first writer wins).

        Values of at least ``DELTA_MIN`` bytes are stored as zstd deltas with
        *skip-delta* bases (Subversion's FSFS scheme): the n-th stored version
        of a channel since its last full record is compressed against the
        version whose index is n with its lowest set bit cleared. A read
        resolves at most popcount(n) links — ~log2 of the versions — and a
        version costs about the content added since its base, so neither
        reads nor per-version bytes grow with the thread the way periodic
        full "keyframes" do (with a keyframe every 8 links, a 3,334-turn chat
        stored 34 MB; see docs/benchmarks.md).

        With ``before`` (the encoded id of the checkpoint the value belongs
        to), the delta's dictionary also holds the channel's latest writes
        under earlier checkpoints of the group — the content added since the
        base is usually exactly those writes (a ``_DeltaSnapshot`` is the
        previous one plus the replayed writes), so the version then costs
        little more than the list structure. The write range is named in the
        record and guarded: see :meth:`rebase_blobs`.
        """
        c = self.intern(keys.KIND_CHANNEL, channel)
        key = keys.blob_key(t, n, c, version)
        record: bytes | None = None
        if not (self.store.delta_blobs and len(typed[1]) >= DELTA_MIN):
            # No base to look for: a put that may not overwrite checks for the key.
            record = self.codec.encode(list(typed))
            if not self.txn.put(key, record, overwrite=False, db=self.dbs.blobs):
                return
        else:
            cur = self.txn.cursor(db=self.dbs.blobs)
            if cur.set_key(key):
                return
            base_payload, base_ref, seq = b"", b"", 0
            base = self._skip_delta_base(cur, key, keys.blob_prefix(t, n, c))
            if base is not None:
                base_key, base_raw, base_seq = base
                base_typed = self.blob_typed(base_key, base_raw)
                if base_typed[0] == typed[0] and len(base_typed[1]) >= DELTA_MIN // 4:
                    base_payload = base_typed[1]
                    base_ref, seq = keys.blob_version_bytes(base_key), base_seq
            writes = None
            if before is not None:
                growth = len(typed[1]) - len(base_payload)
                if growth >= WRITE_DICT_MIN:
                    writes = self._recent_writes(
                        keys.ns_prefix(t, n), keys.uid(c), before, min(2 * growth, WRITE_DICT_MAX)
                    )
            if base_ref or writes is not None:
                record = self.codec.encode_delta(typed, base_payload, base_ref, seq, writes)
            if record is not None and writes is not None:
                mark = keys.wdep_key(t, n, c)
                old = self.txn.get(mark, db=self.dbs.meta)
                if old is None or bytes(old) < writes.hi:
                    self.txn.put(mark, writes.hi, db=self.dbs.meta)
            if record is None:
                record = self.codec.encode(list(typed))
            self.txn.put(key, record, db=self.dbs.blobs)
        self.memo_blobs.append((t, n, key))
        if len(typed[1]) >= DELTA_MIN:
            self.store.payloads.put(record, typed)

    def _recent_writes(
        self, prefix: bytes, cbytes: bytes, before: bytes, budget: int
    ) -> WriteDict | None:
        """The newest writes to a channel under checkpoints older than ``before``.

        Walks back from ``before`` until at least ``budget`` payload bytes (or
        ``WRITE_SCAN_MAX`` records) were seen, always finishing the checkpoint
        it is in, so the range holds *every* write to the channel under each
        checkpoint from ``lo`` to ``hi`` — what :meth:`ReadTxn.write_content`
        reads back.
        """
        parts: list[bytes] = []
        size = scanned = 0
        lo = hi = None
        plen = len(prefix)
        cur = self.txn.cursor(db=self.dbs.writes)
        ok = cur.prev() if cur.set_range(prefix + before) else cur.last()
        while ok:
            key = cur.key()
            if not key.startswith(prefix):
                break
            cid = keys.write_checkpoint_key(key)[plen:]
            if cid != lo and (size >= budget or scanned >= WRITE_SCAN_MAX):
                break
            scanned += 1
            part = self._write_payload(key, cur.value(), cbytes)
            if part is not None:
                parts.append(part)
                size += len(part)
                hi = hi or cid
                lo = cid
            ok = cur.prev()
        if lo is None or hi is None:
            return None
        parts.reverse()
        return WriteDict(lo, hi, b"".join(parts))

    def rebase_blobs(
        self,
        t: int,
        n: int,
        *,
        doomed: Collection[bytes] = (),
        hit: Callable[[bytes, bytes], bool] | None = None,
        channel: int | None = None,
    ) -> int:
        """Rewrite the surviving delta blobs that are about to lose what they decode through.

        Every change that a delta blob depends on goes through here first, while
        everything is still intact:

        * its base is about to be deleted (a key in ``doomed``, unreferenced
          blobs of :meth:`apply_plan`): it becomes a full record;
        * the writes of its range are about to change (``hit(lo, hi)``): a new
          write under a checkpoint inside the range (:meth:`put_writes`, a fork
          resumed from an old checkpoint) or the deletion of such a checkpoint
          (:meth:`apply_plan`). A delta over writes (see :meth:`put_blob`)
          needs them exactly as they were, so it becomes a delta of its base
          alone (a full record if that base goes too).

        Blobs in ``doomed`` are left alone; their children read through the
        rewritten records, whose payloads are unchanged. ``channel`` (an
        interned id) limits the scan to that channel's blobs. Returns how many
        were rewritten.
        """
        doomed = set(doomed)
        prefix = keys.ns_prefix(t, n) if channel is None else keys.blob_prefix(t, n, channel)
        rewrite: list[tuple[bytes, DeltaHeader, Typed, bool]] = []
        cur = self.txn.cursor(db=self.dbs.blobs)
        ok = cur.set_range(prefix)
        while ok and cur.key().startswith(prefix):
            key, raw = cur.key(), cur.value()
            head = None if key in doomed else self.codec.delta_header(raw, f"blobs/{key.hex()}")
            if head is not None:
                base_gone = bool(head.ref) and keys.blob_base_key(key, head.ref) in doomed
                span = head.span
                if base_gone or (span is not None and hit is not None and hit(*span)):
                    rewrite.append((key, head, self.blob_typed(key, raw), base_gone))
            ok = cur.next()
        for key, head, typed, base_gone in rewrite:
            record = None
            if head.ref and not base_gone:
                base_key = keys.blob_base_key(key, head.ref)
                base_raw = self.txn.get(base_key, db=self.dbs.blobs)
                if base_raw is not None:
                    base_payload = self.blob_typed(base_key, base_raw)[1]
                    record = self.codec.encode_delta(typed, base_payload, head.ref, head.seq)
            self.txn.put(key, record or self.codec.encode(list(typed)), db=self.dbs.blobs)
        return len(rewrite)

    def _skip_delta_base(
        self, cur: Any, key: bytes, prefix: bytes
    ) -> tuple[bytes, bytes, int] | None:
        """(base key, base record, new version's index) for a new blob at ``key``.

        The index counts stored versions since the last full record (which has
        index 0). The base is the nearest earlier version whose index is at most
        the new index with its lowest set bit cleared.
        """
        found = cur.prev() if cur.set_range(key) else cur.last()
        if not found or not cur.key().startswith(prefix):
            return None
        info = self.codec.delta_info(cur.value(), f"blobs/{cur.key().hex()}")
        seq = (0 if info is None else info[1]) + 1
        target = seq & (seq - 1)
        while True:
            if info is None or info[1] <= target:
                return cur.key(), cur.value(), seq
            if not cur.prev() or not cur.key().startswith(prefix):
                return None
            info = self.codec.delta_info(cur.value(), f"blobs/{cur.key().hex()}")

    def set_meta(self, name: str, value: Any) -> None:
        """Set a value of the ``meta`` database."""
        self.txn.put(name.encode("ascii"), ormsgpack.packb(value), db=self.dbs.meta)

    def put_checkpoint(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        *,
        parent_id: str | None,
        channel_versions: dict[str, Version],
        checkpoint: Typed,
        metadata: Typed,
        run_id: str | None,
        blobs: Sequence[BlobRow],
        delta: Sequence[str] = (),
        flags: int = 0,
        inline: Mapping[str, Typed] | None = None,
        carry: Sequence[str] = (),
        fallback: Callable[[str], Typed | None] | None = None,
    ) -> None:
        """Store a checkpoint record, its new blobs and its run-index entry.

        A blob key that already exists is left alone: versions are unique per
        value (get_next_version adds a random suffix), so the first writer wins.
        ``inline`` values (new versions, see ``INLINE_MAX``) go into the record
        itself, as do the values the parent record holds of the ``carry``
        channels (those whose version did not change) at the same versions:
        no blob exists for them, so every record holds the inline values of
        all its versions, and reads never look further than the record. A
        ``carry`` channel whose version the parent lacks (or with no parent)
        takes ``fallback(channel)``, the caller's own small value, if any,
        else the value another record of the namespace holds at that version
        (:meth:`_held_elsewhere`).
        """
        cid = keys.encode_id(checkpoint_id)
        if parent_id is not None:
            keys.encode_id(parent_id)  # validate before anything is written
        t = self.intern(keys.KIND_THREAD, thread_id)
        n = self.intern(keys.KIND_NS, checkpoint_ns)
        key = keys.checkpoint_key(t, n, cid)
        latest = self.latest_key(t, n)
        self._refuse_cycle(t, n, thread_id, checkpoint_id, parent_id, latest)
        for blob in blobs:
            self.put_blob(t, n, blob.channel, blob.version, blob.value, before=cid)
        held = dict(inline or {})
        if carry:
            pversions: dict[str, Version] = {}
            pinline: dict[str, Any] = {}
            if parent_id is not None:
                pkey = keys.checkpoint_key(t, n, keys.encode_id(parent_id))
                praw = self.txn.get(pkey, db=self.dbs.checkpoints)
                if praw is not None:
                    _, pversions, pinline = self._envelope(pkey, praw)
            unsettled: dict[str, Version] = {}
            for channel in carry:
                if channel in pversions and pversions[channel] == channel_versions[channel]:
                    # The parent settles it: its inline value, else a blob or empty.
                    typed = pinline.get(channel)
                else:
                    typed = fallback(channel) if fallback is not None else None
                    if typed is None and channel not in delta:
                        unsettled[channel] = channel_versions[channel]
                if typed is not None:
                    held.setdefault(channel, typed)
            if unsettled:
                for channel, typed in self._held_elsewhere(t, n, unsettled).items():
                    held.setdefault(channel, typed)
        for channel in held:
            # Interned like any stored channel: a name without an id is one
            # that nothing in the store holds (the delta walk relies on it).
            self.intern(keys.KIND_CHANNEL, channel)
        if latest is not None and latest >= key:
            # Overwritten, or inserted below a newer checkpoint: it may be the
            # ancestor (or the missing parent) of a remembered history. (Only
            # then can the key exist already.)
            self.memo_groups.add((t, n))
            old = self.txn.get(key, db=self.dbs.checkpoints)
            if old is not None:
                old_run = self.codec.decode(old, f"checkpoints/{key.hex()}")[7]
                if old_run is not None and old_run != run_id:
                    run_key = keys.run_key(keys.encode_run(old_run), t, n, cid)
                    self.txn.delete(run_key, db=self.dbs.runs)
        record: list[Any] = [
            _parent_in(parent_id),
            channel_versions,
            checkpoint[0],
            checkpoint[1],
            metadata[0],
            metadata[1],
            flags,
            run_id,
            list(delta),
        ]
        if held:
            record.append({c: list(typed) for c, typed in held.items()})
        self.txn.put(key, self.codec.encode(record), db=self.dbs.checkpoints)
        if run_id is not None:
            self.txn.put(keys.run_key(keys.encode_run(run_id), t, n, cid), b"", db=self.dbs.runs)

    def _held_elsewhere(self, t: int, n: int, wanted: Mapping[str, Version]) -> dict[str, Typed]:
        """Inline values of channels at versions, held by any record of (thread, ns).

        For a put that keeps versions its parent does not have (it shares them
        with another checkpoint: a fork, an edit that goes back) without
        passing their values: the value of a version is the one stored when
        it was new, wherever that checkpoint sits. A blob at the version means
        no record holds it (one lookup); for the rest, the records are read
        newest first, once for all of them, until each is found. Cost: at most
        one envelope (cached) per checkpoint of the namespace, and only on this
        rare path: the runtime passes every value it keeps, so only its empty
        channels get here (a fork); delta channels are skipped.
        """
        todo: dict[str, Version] = {}
        for channel, version in wanted.items():
            channel_id = self.name_id(keys.KIND_CHANNEL, channel)
            if channel_id is None:
                continue  # nothing in the store holds the channel
            bkey = keys.blob_key(t, n, channel_id, version)
            if self.txn.get(bkey, db=self.dbs.blobs) is None:
                todo[channel] = version
        found: dict[str, Typed] = {}
        if not todo:
            return found
        for key, raw in self.iter_checkpoint_keys(keys.ns_prefix(t, n), start=None, reverse=True):
            _, versions, inline = self._envelope(key, raw)
            for channel in [c for c, v in todo.items() if c in inline and versions.get(c) == v]:
                ctype, payload = inline[channel]
                found[channel] = (ctype, payload)
                del todo[channel]
            if not todo:
                break
        return found

    def _refuse_cycle(
        self,
        t: int,
        n: int,
        thread_id: str,
        checkpoint_id: str,
        parent_id: str | None,
        latest: bytes | None,
    ) -> None:
        """Raise :class:`ParentCycleError` if storing ``checkpoint_id`` under ``parent_id``
        would close a parent cycle (R11); called before anything of the put is written.

        The bound: every cycle has a link whose parent key is at least its
        child's key (keys cannot fall all the way round a loop), and the only
        records whose parent chain changes are the one being written and its
        descendants. So:

        * a parent equal to the checkpoint is refused at once;
        * a put whose parent key is below its own key and whose id is new (every
          put the runtime makes: uuid6 ids grow with time) walks at most
          ``_QUICK_CYCLE_STEPS`` (2) ancestors, so the cost stays constant;
        * any other put (a parent key above its own, or an id that is stored
          already and is being re-written) walks the parent chain from the
          parent up to the root or a missing record, refusing when it reaches
          the checkpoint itself. The walk visits each record of the
          (thread, ns) at most once, so it costs at most one record read per
          checkpoint of the namespace, on these rare puts only.

        Not refused here (no index of children exists to find it in bounded
        time): a loop longer than that closed by such a put, through an earlier
        put that named its id as the parent of a smaller key while the id did
        not exist yet. (``latest`` is the namespace's greatest key before this
        put: a key above it is new without a lookup.) ``verify`` reports such a cycle (``parent_cycle``) and every
        read that meets it raises :class:`CorruptRecordError`.
        """
        if parent_id is None:
            return
        if parent_id == checkpoint_id:
            raise ParentCycleError(
                f"put: checkpoint {checkpoint_id!r} of thread {thread_id!r} names itself as its "
                "parent (the config's checkpoint_id is the checkpoint's own id, e.g. the config "
                "the previous put returned for this checkpoint); pass the parent's config, or "
                "give the new checkpoint a new id. Nothing was written"
            )
        prefix = keys.ns_prefix(t, n)
        key = prefix + keys.encode_id(checkpoint_id)
        cursor: bytes | None = keys.encode_id(parent_id)
        limit: int | None = None
        if prefix + keys.encode_id(parent_id) < key and (
            latest is None or latest < key or self.txn.get(key, db=self.dbs.checkpoints) is None
        ):
            limit = _QUICK_CYCLE_STEPS
        chain = [key]  # keys: ids are decoded only for the error
        seen: set[bytes] = set()
        while cursor is not None and (limit is None or len(seen) < limit):
            pkey = prefix + cursor
            if pkey == key:
                loop = " -> ".join(keys.decode_checkpoint_key(k)[2] for k in [*chain, key])
                raise ParentCycleError(
                    f"put: checkpoint {checkpoint_id!r} of thread {thread_id!r} would become its "
                    f"own ancestor ({loop}); pass the config of a checkpoint that does not "
                    "descend from it as the parent. Nothing was written"
                )
            if pkey in seen:
                raise self._cycle(t, n, keys.decode_checkpoint_key(chain[-1])[2], pkey)
            seen.add(pkey)
            raw = self.txn.get(pkey, db=self.dbs.checkpoints)
            if raw is None:
                return
            chain.append(pkey)
            parent = self._envelope(pkey, raw)[0]
            cursor = keys.encode_id(parent) if isinstance(parent, str) else parent

    def put_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        task_id: str,
        task_path: str,
        writes: Sequence[tuple[str, int, Typed]],
    ) -> None:
        """Append writes (R1, R2): idx ≥ 0 is first-writer-wins, special idx replaces.

        The checkpoint need not exist yet; nothing here looks for it.
        """
        cid = keys.encode_id(checkpoint_id)
        # Build (and so validate) every key before the first put.
        t = self.intern(keys.KIND_THREAD, thread_id)
        n = self.intern(keys.KIND_NS, checkpoint_ns)
        rows = [
            (keys.write_key(t, n, cid, task_path, task_id, idx), channel, idx, value)
            for channel, idx, value in writes
        ]
        latest = self.latest_key(t, n)
        if latest is not None and latest > keys.checkpoint_key(t, n, cid):
            # Writes under a checkpoint that has a newer one may belong to the
            # ancestor of a remembered history.
            self.memo_groups.add((t, n))
        for key, channel, idx, value in rows:
            c = self.intern(keys.KIND_CHANNEL, channel)
            cbytes = keys.uid(c)
            raw = cbytes + self.codec.encode(list(value), prefix=cbytes)
            if idx >= 0:
                # A new write under a checkpoint that a delta blob's write range
                # covers would change that blob's dictionary: rebase it first.
                mark = self.txn.get(keys.wdep_key(t, n, c), db=self.dbs.meta)
                if (
                    mark is not None
                    and cid <= bytes(mark)
                    and self.txn.get(key, db=self.dbs.writes) is None
                ):
                    self.rebase_blobs(t, n, hit=lambda lo, hi: lo <= cid <= hi, channel=c)
            self.txn.put(key, raw, overwrite=idx < 0, db=self.dbs.writes)

    def put_raw(self, db: Any, key: bytes, value: bytes) -> None:
        """Put bytes as given, bypassing the codec (fault-injection tests plant
        damaged records through the store's own transaction with it)."""
        self.txn.put(key, value, db=db)

    def delete_checkpoint(self, t: int, n: int, checkpoint_id: str, run_id: str | None) -> None:
        """Delete one checkpoint record, its writes and its run-index entry.

        Blobs are shared between checkpoints and are collected separately.
        """
        cid = keys.encode_id(checkpoint_id)
        key = keys.checkpoint_key(t, n, cid)
        self.txn.delete(key, db=self.dbs.checkpoints)
        if run_id is not None:
            self.txn.delete(keys.run_key(keys.encode_run(run_id), t, n, cid), db=self.dbs.runs)
        self.delete_prefix(self.dbs.writes, key)

    # -- maintenance writes -------------------------------------------------------------

    def apply_plan(
        self,
        t: int,
        n: int,
        plan: Plan,
        seeds: Sequence[tuple[str, BlobRow]],
        versions: dict[str, dict[str, Version]],
        runs: dict[str, str | None],
    ) -> dict[str, int]:
        """Carry out a maintenance plan on one (thread, ns); return what it removed.

        Seeds are written first, then checkpoints are deleted, hidden,
        unhidden or re-linked, then blobs nobody references are collected.
        """
        # Seeds go to versions kept checkpoints reference and deletions touch no
        # blob key, so the unreferenced blobs can be found once, up front.
        doomed = self.doomed_blobs(t, n, plan, versions)
        removed = self.measure(t, n, plan, versions, doomed)
        for _, blob in seeds:
            self.put_blob(t, n, blob.channel, blob.version, blob.value)
        # The rebase decodes through records that the deletions below remove
        # (bases, and the writes of deleted checkpoints), so it comes first.
        gone = sorted(keys.encode_id(cid) for cid in plan.delete)

        def hit(lo: bytes, hi: bytes) -> bool:
            i = bisect.bisect_left(gone, lo)
            return i < len(gone) and gone[i] <= hi

        self.rebase_blobs(t, n, doomed=doomed, hit=hit if gone else None)
        for cid in plan.delete:
            self.delete_checkpoint(t, n, cid, runs.get(cid))
        for cid in (plan.hide | plan.unhide | set(plan.relink)) - plan.delete:
            key = keys.checkpoint_key(t, n, keys.encode_id(cid))
            raw = self.txn.get(key, db=self.dbs.checkpoints)
            if raw is None:
                continue
            rec = self.codec.decode(raw, f"checkpoints/{key.hex()}")
            if cid in plan.hide:
                rec[6] |= FLAG_HIDDEN
            if cid in plan.unhide:
                rec[6] &= ~FLAG_HIDDEN
            if cid in plan.relink:
                rec[0] = _parent_in(plan.relink[cid])
            self.txn.put(key, self.codec.encode(rec), db=self.dbs.checkpoints)
        for key in doomed:
            self.txn.delete(key, db=self.dbs.blobs)
        removed["seeds"] = len(seeds)
        removed["hidden"] = len(plan.hide)
        return removed

    def copy_thread(self, source: str, target: str) -> dict[str, int] | None:
        """Copy every record of a thread under another thread id, bytes as stored.

        Returns:
            Counts per database, or None when the source has no rows.

        Raises:
            ThreadExistsError: The target already has rows.
        """
        s = self.name_id(keys.KIND_THREAD, source)
        if s is None or not self.has_thread_rows(s):
            return None
        existing = self.name_id(keys.KIND_THREAD, target)
        if existing is not None and self.has_thread_rows(existing):
            raise ThreadExistsError(
                f"thread {target!r} already has checkpoints; copy_thread does not merge. "
                "Delete it first or choose another target thread_id"
            )
        d = self.intern(keys.KIND_THREAD, target)
        counts: dict[str, int] = {}
        # The copied blobs' write ranges need their marks in meta (see put_blob).
        for name, head in (
            ("checkpoints", b""),
            ("writes", b""),
            ("blobs", b""),
            ("meta", keys.WDEP),
        ):
            db = getattr(self.dbs, name)
            prefix = head + keys.thread_prefix(s)
            copied = 0
            start = prefix
            while True:
                # Read a chunk, then write it: puts while a cursor walks the same
                # database could move the cursor.
                chunk: list[tuple[bytes, bytes]] = []
                cur = self.txn.cursor(db=db)
                ok = cur.set_range(start)
                if ok and start != prefix and cur.key() == start:
                    ok = cur.next()
                while ok and len(chunk) < 1024 and cur.key().startswith(prefix):
                    chunk.append((cur.key(), cur.value()))
                    ok = cur.next()
                for key, value in chunk:
                    self.txn.put(head + keys.rethread(key[len(head) :], d), value, db=db)
                    if name == "checkpoints":
                        run_id = self.codec.decode(value, f"checkpoints/{key.hex()}")[7]
                        if run_id is not None:
                            n = keys.split_ids(key, 2)[0][1]
                            self.txn.put(
                                keys.run_key(
                                    keys.encode_run(run_id), d, n, keys.checkpoint_id_bytes(key)
                                ),
                                b"",
                                db=self.dbs.runs,
                            )
                copied += len(chunk)
                if len(chunk) < 1024:
                    break
                start = chunk[-1][0]
            if not head:
                counts[name] = copied
        return counts

    def import_records(
        self, records: Sequence[dict[str, Any]], *, first_lines: Mapping[str, int] | None = None
    ) -> dict[str, int]:
        """Store portable records that :func:`~deltalog.engine.import_check.check_import` passed.

        Every thread of the stream is checked to be new before the first write.

        Args:
            records: The validated records (no header).
            first_lines: The stream line of each thread's first record, for errors.

        Raises:
            ThreadExistsError: A thread in the stream already has checkpoints here.
        """
        counts = {"threads": 0, "checkpoints": 0, "blobs": 0, "writes": 0}
        lines = first_lines or {}
        for thread_id in dict.fromkeys(rec["thread_id"] for rec in records):
            existing = self.name_id(keys.KIND_THREAD, thread_id)
            if existing is not None and self.has_thread_rows(existing):
                where = (
                    f"line {lines[thread_id]} of the import stream: " if thread_id in lines else ""
                )
                raise ThreadExistsError(
                    f"{where}thread {thread_id!r} already exists in this store; import into an "
                    "empty store or delete the thread first"
                )
            counts["threads"] += 1
        for rec in records:
            kind, thread_id, ns = rec["kind"], rec["thread_id"], rec["checkpoint_ns"]
            if kind == "checkpoint":
                self.put_checkpoint(
                    thread_id,
                    ns,
                    rec["checkpoint_id"],
                    parent_id=rec["parent_id"],
                    channel_versions=rec["channel_versions"],
                    checkpoint=(rec["checkpoint"][0], rec["checkpoint"][1]),
                    metadata=(rec["metadata"][0], rec["metadata"][1]),
                    run_id=rec["run_id"],
                    blobs=(),
                    delta=rec.get("delta", ()),
                    flags=rec.get("flags", 0),
                )
            elif kind == "blob":
                t = self.intern(keys.KIND_THREAD, thread_id)
                n = self.intern(keys.KIND_NS, ns)
                value = (rec["value"][0], rec["value"][1])
                self.put_blob(t, n, rec["channel"], rec["version"], value)
            elif kind == "write":
                self.put_writes(
                    thread_id,
                    ns,
                    rec["checkpoint_id"],
                    rec["task_id"],
                    rec["task_path"],
                    [(rec["channel"], rec["idx"], (rec["value"][0], rec["value"][1]))],
                )
            else:
                raise InvalidInputError(f"import record kind {kind!r} is unknown")
            counts[kind + "s"] += 1
        return counts

    def delete_prefix(self, db: Any, prefix: bytes) -> int:
        """Delete every key starting with ``prefix``; return how many."""
        cur = self.txn.cursor(db=db)
        count = 0
        ok = cur.set_range(prefix)
        while ok and cur.key().startswith(prefix):
            ok = cur.delete()
            count += 1
        return count

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, write, blob and run entry of a thread."""
        t = self.name_id(keys.KIND_THREAD, thread_id)
        if t is None:
            return
        prefix = keys.thread_prefix(t)
        for key, raw in list(self.iter_checkpoint_keys(prefix, start=None, reverse=False)):
            run_id = self.codec.decode(raw, f"checkpoints/{key.hex()}")[7]
            if run_id is not None:
                _, n, _ = keys.decode_checkpoint_key(key)
                self.txn.delete(
                    keys.run_key(keys.encode_run(run_id), t, n, keys.checkpoint_id_bytes(key)),
                    db=self.dbs.runs,
                )
        for db in (self.dbs.checkpoints, self.dbs.writes, self.dbs.blobs):
            self.delete_prefix(db, prefix)
        self.delete_prefix(self.dbs.meta, keys.WDEP + prefix)


class Store:
    """One LMDB environment per path; the transaction boundary of deltalog.

    Args:
        path: Folder of the store (created 0700 if missing; files are 0600).
        map_size: Initial map size in bytes; the map doubles on demand.
        max_map_size: Cap for automatic growth; reaching it raises StoreFullError.
        durable: fsync on every commit (default). False relaxes to OS write-back:
            a crash of the machine (not of the process) may lose the last
            commits, and corrupts nothing only on filesystems that keep write
            order (docs/operations.md).
        codec: The record codec.
        group_commit: Concurrent writers share one transaction and one fsync.
        readonly: Open without write access (inspection). Creates and changes
            nothing: a path that holds no deltalog store raises
            :class:`NotAStoreError`; without write access to ``lock.mdb``
            (or with none), a store no process has open is read without it.
        max_readers: LMDB reader slots (concurrent read transactions, all
            processes); a read that finds none free waits for one (``READER_WAIT``).
        delta_blobs: Store large channel values as deltas of their previous
            version (see :meth:`WriteTxn.put_blob`).
        memo_entries: Delta histories remembered per process (see
            :mod:`deltalog.engine.memo`); 0 turns the history memo off.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size: int = 64 * 1024**2,
        max_map_size: int = 1024**4,
        durable: bool = True,
        codec: RecordCodec | None = None,
        group_commit: bool = True,
        readonly: bool = False,
        max_readers: int = 126,
        delta_blobs: bool = True,
        memo_entries: int = 4096,
    ) -> None:
        _check_sizes(map_size, max_map_size, max_readers)
        self.path = store_folder(path)
        self.map_size = map_size
        self.max_map_size = max_map_size
        self.durable = durable
        self.codec = codec or RecordCodec()
        self.group_commit = group_commit
        self.readonly = readonly
        self.max_readers = max_readers
        self.delta_blobs = delta_blobs
        self.payloads = PayloadCache()
        self.envelopes = EnvelopeCache()
        self.memo = HistoryMemo(memo_entries)
        self._name_ids: NameCache[tuple[bytes, str], int] = NameCache()
        self._names: NameCache[tuple[bytes, int], str] = NameCache()
        self._names_crc = False
        self._closed = False
        self._open()

    # -- life cycle ---------------------------------------------------------------

    def _open(self) -> None:
        self._pid = os.getpid()
        self._closed_for_fork = False
        self._rw = _RWLock()
        # Reads waiting for a free LMDB reader slot (see _wait_for_slot).
        self._slot_freed = threading.Condition(threading.Lock())
        self._slot_waiters = 0
        # Reentrant: a read that must adopt a grown map takes it (see _begin), and
        # so may the thread that holds it to reopen after fork.
        self._write_lock = threading.RLock()
        # Group commit: callers queue requests; one leader at a time runs the queue
        # as one transaction, then wakes the callers it committed for and makes a
        # thread caller queued meanwhile (``_next``) the next leader, or starts a
        # leader task on ``_lead_pool`` when only async callers (submit) wait.
        self._queue_lock = threading.Lock()
        self._queue: list[_Request[Any]] = []
        self._leading = False
        self._next: _Request[Any] | None = None
        # The last committed batch, when a next leader was chosen: that leader
        # wakes its callers once its own ops ran (or sooner, see _lead).
        self._unwoken: list[_Request[Any]] = []
        # Runs leader tasks for queues that hold no thread caller (Store.submit).
        self._lead_pool: ThreadPoolExecutor | None = None
        self._open_env()
        _LIVE_STORES.add(self)

    def _open_env(self) -> None:
        if not self.readonly:
            try:
                os.makedirs(self.path, mode=0o700, exist_ok=True)
            except OSError as exc:  # e.g. the path is a file, or not writable
                raise StoreOpenError(
                    f"cannot use {self.path!r} as a store folder ({exc}); a store is a folder "
                    "holding data.mdb and lock.mdb: pass a new or existing folder path"
                ) from exc
            check_data_file(self.path, required=False)
            lock = True
            probe = os.path.exists(os.path.join(self.path, "data.mdb")) and not _lock_held(
                self.path
            )
        else:
            # One read-only open path (R12): nothing is created or written
            # before the folder is known to hold a deltalog store.
            check_data_file(self.path, required=True)
            lock, probe = _readonly_lock(self.path)
        _refuse_network_fs(self.path)
        data = os.path.join(self.path, "data.mdb")
        size = max(self.map_size, os.path.getsize(data) if os.path.exists(data) else 0)
        if probe:
            # Probe without a lock first: no process has the environment open,
            # so nothing changes under the probe, and a foreign environment is
            # refused without a reader slot (or a writer) touching its lock file.
            self.env = self._lmdb_open(size, lock=False, readonly=True)
            try:
                self._check_opened(probe=True)
            finally:
                self.env.close()
        self.env = self._lmdb_open(size, lock=lock, readonly=self.readonly)
        #: False when read-only without LMDB's lock file (see _readonly_lock).
        self.locked = lock
        try:
            self._check_opened()
        except BaseException:
            self.env.close()
            raise
        stale = self.env.reader_check()
        self.stale_readers_cleared = stale  # for `deltalog readers`
        if stale:
            logger.info("cleared %d stale LMDB reader slots in %s", stale, self.path)
        try:
            self._init_dbs()
        except BaseException:
            self.env.close()
            raise
        # Whatever was committed before this open (also by this process before
        # a fork) counts as another process's work.
        self.memo.reset(self.env.info()["last_txnid"])

    def _lmdb_open(self, size: int, *, lock: bool, readonly: bool) -> Any:
        try:
            return lmdb.open(
                os.fsencode(self.path),  # not str: LMDB would take it as UTF-8
                map_size=size,
                max_dbs=len(_DBS) + len(_MEMORY_DBS) + 1,
                max_readers=self.max_readers,
                sync=self.durable,
                metasync=self.durable,
                readonly=readonly,
                readahead=False,
                mode=0o600,
                lock=lock,
            )
        except lmdb.Error as exc:
            raise StoreOpenError(
                f"cannot open LMDB store at {self.path!r} ({type(exc).__name__}: {exc}); "
                "is it a deltalog store on a local disk?"
            ) from exc

    def _check_opened(self, *, probe: bool = False) -> None:
        """A just opened environment: its data file is whole, and it is deltalog's.

        ``probe``: a lock-free read-only look before a writable open, which
        leaves a truncated file to the writable open (it fills the gap).
        """
        # A data file shorter than the pages its meta page claims would raise
        # SIGBUS on a read past its end, killing the interpreter. That happens to
        # a store truncated by a bad copy, but also to a healthy one: LMDB may
        # allocate a page, free it in the same transaction and never write it.
        # So a writable open zero-fills the gap, and so does closing a writable
        # store (posix_fallocate never shrinks a file another process is
        # extending): free pages stay free, and pages a
        # truncation really lost read as damaged (CorruptRecordError, reported
        # by verify) instead of crashing. Size is read after the meta, so a
        # concurrent writer can only make the file look longer, never shorter.
        data = os.path.join(self.path, "data.mdb")
        if self.readonly or probe:
            used, size = self._page_end(), os.path.getsize(data)
            if size < used:
                if probe and not self.readonly:
                    return
                raise StoreOpenError(
                    f"{data!r} is {size} bytes but its pages reach {used} bytes (truncated, or "
                    "last written by a transaction that freed pages it never wrote). Open it "
                    "writable once, which zero-fills the gap safely, or restore a backup"
                )
        else:
            self._fill_gap(logging.WARNING)
        self._check_identity()

    def _check_identity(self) -> None:
        """Refuse an LMDB environment that deltalog did not create, before touching it.

        A deltalog store has a ``meta`` database (holding ``format_version``).
        A writable open may start a new store in an empty environment, never
        add deltalog's databases to another application's (issue 15.5); a
        read-only open needs the format record.
        """
        try:
            with self.env.begin() as txn:
                has_meta = txn.get(b"meta") is not None
                # A few names for the message (a foreign main database may be huge).
                listed = txn.cursor().iternext(values=False)
                named = [bytes(k) for k in itertools.islice(listed, 8)]
            if not has_meta:
                if not named and not self.readonly:
                    return
                why = (
                    "an empty LMDB environment"
                    if not named
                    else "another application's LMDB environment (databases: "
                    + ", ".join(repr(k.decode("utf-8", "replace")) for k in named)
                    + ")"
                )
                raise NotAStoreError(
                    f"{self.path!r} is not a deltalog store: it holds {why}. Nothing was "
                    "changed; point deltalog at a store folder, or at a new folder to start one"
                )
            if self.readonly:
                meta = self.env.open_db(b"meta", create=False)
                with self.env.begin() as txn:
                    found = txn.get(b"format_version", db=meta) is not None
                if not found:
                    raise NotAStoreError(
                        f"{self.path!r} is not a deltalog store: its meta database has no "
                        "format_version. Nothing was changed; point deltalog at a store folder"
                    )
        except (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError) as exc:
            raise StoreOpenError(
                f"{self.path!r} is damaged: its list of databases cannot be read "
                f"({type(exc).__name__}: {exc}); restore it from a backup"
            ) from exc
        except lmdb.Error as exc:
            raise NotAStoreError(
                f"{self.path!r} is not a deltalog store ({type(exc).__name__}: {exc}). "
                "Nothing was changed; point deltalog at a store folder"
            ) from exc

    def _init_dbs(self) -> None:
        try:
            if self.readonly:
                # Without txn=: py-lmdb opens (and commits) its own transaction, so
                # the handles outlive it; a read transaction would discard them.
                handles = {name: self.env.open_db(name.encode(), create=False) for name in _DBS}
                for name in _MEMORY_DBS:
                    with contextlib.suppress(lmdb.NotFoundError):
                        handles[name] = self.env.open_db(name.encode(), create=False)
            else:
                with self.env.begin(write=True) as txn:
                    handles = {
                        name: self.env.open_db(name.encode(), txn=txn)
                        for name in _DBS + _MEMORY_DBS
                    }
                    raw = txn.get(b"format_version", db=handles["meta"])
                    if raw is None:
                        txn.put(
                            b"format_version",
                            ormsgpack.packb(keys.FORMAT_VERSION),
                            db=handles["meta"],
                        )
        except lmdb.Error as exc:
            raise StoreOpenError(
                f"{self.path!r} is not a readable deltalog store ({type(exc).__name__}: {exc})"
            ) from exc
        self._dbs = _Dbs(**handles)
        with self.read() as r:
            version = _format_version(r.txn.get(b"format_version", db=self._dbs.meta), self.path)
            dictionaries = r.dictionaries()
        for dict_id, dictionary in dictionaries:
            self.codec.install(dict_id, dictionary, activate=dict_id == dictionaries[-1][0])
        self.codec.dictionary_loader = self._load_dictionary
        if version != keys.FORMAT_VERSION and not self.readonly:
            version = self._migrate()
        self._names_crc = version >= NAMES_CRC_FORMAT

    def _migrate(self) -> int:
        """Bring an older store to the current format in one write transaction (R10).

        The version is read again inside the transaction: another process may
        have upgraded the store since this one looked. Returns the format now stored.
        """
        with self.env.begin(write=True) as txn:
            version = _format_version(txn.get(b"format_version", db=self._dbs.meta), self.path)
            for old, new, step in pending(version):
                logger.info("upgrading store %s from format %d to %d", self.path, old, new)
                step(txn, self._dbs)
            txn.put(b"format_version", ormsgpack.packb(keys.FORMAT_VERSION), db=self._dbs.meta)
        return keys.FORMAT_VERSION

    def _check_writable(self) -> None:
        self._check_pid()
        if self.readonly:
            raise ReadOnlyStoreError(f"store {self.path!r} was opened read-only")
        if self in getattr(_IN_WRITE_OP, "stores", ()):
            # LMDB has one write transaction at a time: waiting here for the next
            # one, inside the current one, would wait forever.
            raise ReentrantWriteError(
                f"a write to store {self.path!r} was asked for from inside one of its own "
                "write transactions (e.g. a reducer passed to prune, or an embedder, that "
                "writes to the same saver or store); write after the operation returns"
            )

    def _check_pid(self) -> None:
        if self._closed:
            raise StoreClosedError(f"store {self.path!r} is closed; open a new saver")
        if os.getpid() != self._pid:
            if not self._closed_for_fork:
                raise ForkedStoreError(
                    f"store {self.path!r} was inherited over fork() while a transaction "
                    f"stayed open for over {_FORK_WAIT}s, so this child cannot reopen it; "
                    "fork when no read or write is in progress, or open the store after fork()"
                )
            self._open()

    def _close_for_fork(self) -> None:
        """Before fork(): wait for this process's transactions, then close the environment.

        A child must neither use nor close an environment it inherits: closing
        frees reader slots the parent still holds (so a writer may reuse pages
        the parent is reading), and py-lmdb refuses to open the same files
        twice in one process. Closed here, with no transaction open, nothing is
        inherited: the parent reopens at once (:meth:`_reopen_after_fork`), the
        child on first use (:meth:`_check_pid`). Gives up after ``_FORK_WAIT``.
        """
        if self._closed or os.getpid() != self._pid:
            return
        if not self._write_lock.acquire(timeout=_FORK_WAIT):
            return
        if not self._rw.try_exclusive(_FORK_WAIT):
            self._write_lock.release()
            return
        self.env.close()
        self._closed_for_fork = True

    def _reopen_after_fork(self) -> None:
        """In the parent after fork(): reopen what :meth:`_close_for_fork` closed."""
        if not self._closed_for_fork:
            return
        try:
            self._open_env()
        finally:
            self._closed_for_fork = False
            self._rw.release_exclusive()
            self._write_lock.release()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    def close(self) -> None:
        """Close the environment. Idempotent."""
        if self._closed:
            return
        self._closed = True
        _LIVE_STORES.discard(self)
        if os.getpid() == self._pid:
            with self._write_lock, self._rw.exclusive():
                if not self.readonly:
                    # Leave no gap for the next read-only open (see _fill_gap).
                    with contextlib.suppress(OSError, lmdb.Error):
                        self._fill_gap(logging.DEBUG)
                self.env.close()
            if self._lead_pool is not None:  # queued leader tasks still run (and fail cleanly)
                self._lead_pool.shutdown(wait=False)
        self.memo.reset(0)

    def _page_end(self) -> int:
        """Bytes the pages in use reach, by the current meta page."""
        return int((self.env.info()["last_pgno"] + 1) * self.env.stat()["psize"])

    def _fill_gap(self, level: int) -> None:
        """Zero-fill the data file up to the pages in use (see _open_env)."""
        data = os.path.join(self.path, "data.mdb")
        used = self._page_end()
        size = os.path.getsize(data)
        if size < used:
            with open(data, "r+b") as handle:
                os.posix_fallocate(handle.fileno(), 0, used)
            logger.log(
                level, "zero-filled %s from %d to %d bytes (pages past its end)", data, size, used
            )

    # -- transactions ---------------------------------------------------------------

    def _begin(self, write: bool) -> Any:
        try:
            return self.env.begin(write=write)
        except lmdb.MapResizedError:
            # Another process grew the map: adopt its size, then retry (it may
            # grow again meanwhile). set_mapsize needs no transaction open in this
            # process, so a reader also waits for the writer (a writer holds it).
            attempts = 0
            while True:
                if not write:
                    self._rw.release_read()
                try:
                    with self._write_lock, self._rw.exclusive():
                        self.env.set_mapsize(0)
                finally:
                    if not write:
                        self._rw.acquire_read()
                try:
                    return self.env.begin(write=write)
                except lmdb.MapResizedError:
                    attempts += 1
                    if attempts >= _RESIZE_RETRIES:
                        raise
        except lmdb.ReadersFullError as exc:
            # Slots of killed processes stay taken until someone checks; a
            # long-lived process would otherwise be locked out until restart.
            if self.env.reader_check():
                with contextlib.suppress(lmdb.ReadersFullError):
                    return self.env.begin(write=write)
            if write:
                raise _translate(exc, self.path) from exc
            return self._wait_for_slot(exc)

    def _wait_for_slot(self, exc: lmdb.ReadersFullError) -> Any:
        """Begin a read once a reader slot is free, waiting up to ``READER_WAIT`` seconds.

        Every read transaction holds one of the environment's ``max_readers``
        slots (shared by all processes). More threads than slots reading at
        once wait here instead of failing (issue 15.12): a read of this
        process that ends wakes one waiter; slots freed by other processes
        are polled. Called with the read side of ``_rw`` held, which is let go
        while waiting, so map growth is never held up by a waiting reader.
        """
        deadline = time.monotonic() + READER_WAIT
        while True:
            self._rw.release_read()
            try:
                with self._slot_freed:
                    self._slot_waiters += 1
                    try:
                        self._slot_freed.wait(_SLOT_POLL)
                    finally:
                        self._slot_waiters -= 1
            finally:
                self._rw.acquire_read()
            try:
                return self.env.begin(write=False)
            except lmdb.ReadersFullError:
                if time.monotonic() >= deadline:
                    raise DeltaLogError(
                        f"all {self.max_readers} LMDB reader slots of {self.path!r} stayed in "
                        f"use for {READER_WAIT:g} s; raise max_readers "
                        "(DeltaLogSaver.from_path(max_readers=...), set by the first process "
                        "that opens the store) or close idle processes"
                    ) from exc

    @contextlib.contextmanager
    def read(self) -> Iterator[ReadTxn]:
        """One consistent read transaction (a snapshot). Keep it short."""
        self._check_pid()
        self._rw.acquire_read()
        try:
            txn = self._begin(write=False)
            try:
                yield ReadTxn(self, txn)
            except lmdb.Error as exc:
                raise _translate(exc, self.path) from exc
            finally:
                txn.abort()
                if self._slot_waiters:  # a read waits for a slot (see _wait_for_slot)
                    with self._slot_freed:
                        self._slot_freed.notify()
        finally:
            self._rw.release_read()

    def write(self, op: Callable[[WriteTxn], T], *, history_safe: bool = False) -> T:
        """Run ``op`` in a write transaction and commit it durably (R8).

        With group commit, concurrent callers queue their ops; when no commit
        is running, one of them leads: it takes every queued op and runs them in
        one transaction (an op that raises fails alone: the transaction is
        dropped with what it wrote and the others run again), commits once,
        then wakes the callers it committed for.
        While it commits, new ops queue up for the next leader. Every caller
        returns only after the commit holding its op is done, so a returned
        write is as durable as with one commit each. ``op`` may run more than
        once (map growth retries it) and must only touch the transaction.

        ``history_safe`` declares that ``op`` changes records only through
        :meth:`WriteTxn.put_checkpoint`, :meth:`WriteTxn.put_writes` and
        :meth:`WriteTxn.put_blob`, which report what they may change to the
        history memo. Any other op (deletion, maintenance, raw puts) makes the
        commit count as changing every remembered history.
        """
        self._check_writable()
        req: _Request[T] = _Request(op, history_safe)
        if not self.group_commit:
            with self._write_lock:
                self._run_batch([req])
        else:
            with self._queue_lock:
                self._queue.append(req)
                lead = not self._leading
                if lead:
                    self._leading, self._next = True, req
            try:
                if not lead:
                    assert req.wake is not None
                    req.wake.acquire()  # until done, or made the next leader
                # Other callers' writes depend on what follows (waking them, their
                # ops in this thread's batch): a signal handler raising in here
                # must not fail them (issue 15.15), so it runs after it.
                with _signals_deferred():
                    if req.chain:
                        self._wake_next(req)
                    if not req.done:
                        self._lead(req)
            except BaseException as exc:  # e.g. KeyboardInterrupt while waiting
                with _signals_deferred():
                    self._withdraw(req)
                if req.done and req.error is None and hasattr(exc, "add_note"):  # 3.11+
                    exc.add_note(
                        "deltalog: this write was committed before the interrupt was delivered"
                    )
                raise
        if req.error is not None:
            raise req.error
        return req.value  # type: ignore[return-value]

    def submit(
        self,
        op: Callable[[WriteTxn], T],
        notify: Callable[[BaseException | None, T | None], None],
        *,
        history_safe: bool = False,
    ) -> None:
        """Queue ``op`` for the next group commit without waiting for it (async callers).

        ``notify(error, value)`` is called once the commit holding ``op`` is
        durable (``error`` None, ``value`` what ``op`` returned) or failed, on
        the thread that committed it: it must only hand the result over (e.g.
        with ``loop.call_soon_threadsafe``). If no commit is running, a leader task
        on the store's lead thread takes the queue, so the caller never blocks
        and no thread waits per queued op. Same durability as :meth:`write`.
        """
        self._check_writable()
        if not self.group_commit:
            raise GroupCommitOffError("Store.submit needs group commit; use Store.write")
        req: _Request[T] = _Request(op, history_safe, notify)
        with self._queue_lock:
            self._queue.append(req)
            spawn = not self._leading
            if spawn:
                self._leading, self._next = True, None
        if spawn:
            self._spawn_leader()

    def _spawn_leader(self) -> None:
        """Run :meth:`_lead` on the lead thread, which never waits for a caller."""
        with self._queue_lock:
            if self._lead_pool is None:
                self._lead_pool = ThreadPoolExecutor(1, thread_name_prefix="deltalog-lead")
            pool = self._lead_pool
        try:
            pool.submit(self._lead_task)
        except RuntimeError:  # shut down by close(): lead here, so no request is left waiting
            self._lead_task()

    def _lead_task(self) -> None:
        try:
            self._lead()
        except BaseException:  # every request of the batch was told in _lead's finally
            logger.exception("group commit leader task failed")

    def _lead(self, own: _Request[Any] | None = None) -> None:
        """As the designated leader: commit the queue, wake callers, pass the lead on.

        Only callers of committed batches are woken (or notified), and one
        thread caller queued meanwhile (if any) is made the next leader; the
        other queued callers sleep on. Waking every waiter instead (a
        condition's ``notify_all``) ran at about three quarters of this put
        rate at 16 writer threads.

        When there is a next leader, it wakes this batch's callers, once its
        own ops ran and just before its commit (``_unwoken``), or earlier,
        before an op that may run long (one not ``history_safe``, or once its
        ops ran ``WAKE_AFTER``); with no one queued they are woken at once.
        py-lmdb releases the GIL in every get, put and seek, so callers woken
        straight after the commit, busy preparing their next write, took the
        GIL from the next leader at each of them: its ops ran at 39 µs each
        instead of 18 (16 writer threads, 9.0k vs 10.3k puts/s). Woken later,
        they prepare while it waits for fsync, and a returned write is still
        durable.
        """
        batch: list[_Request[Any]] = []
        unwoken: list[_Request[Any]] = []

        def wake_last_batch() -> None:
            done, unwoken[:] = unwoken[:], []
            self._wake(done)

        try:
            with self._queue_lock:
                self._next = None
                batch, self._queue = self._queue, []
                unwoken[:], self._unwoken = self._unwoken, []
            with self._write_lock:
                self._run_batch(batch, before_commit=wake_last_batch)
        finally:
            for req in batch:
                if not req.done:  # _run_batch was interrupted (e.g. KeyboardInterrupt)
                    req.error = req.error or DeltaLogError("the write was interrupted")
                    req.done = True
            with self._queue_lock:
                nxt, spawn = self._pass_lead()
                # The leader's own caller is this thread: it needs no waking.
                batch = [req for req in batch if req is not own]
                if nxt is not None or spawn:
                    self._unwoken, batch = batch, []
            try:
                wake_last_batch()
                self._wake(batch)
            finally:  # whatever happens telling callers, the queue gets its next leader
                self._hand_on(nxt, spawn)

    def _wake(self, done: list[_Request[Any]]) -> None:
        """Hand done requests back: async callers are told at once; thread callers
        are woken one after another, each woken caller waking the next as soon
        as it runs (:meth:`_wake_next`).

        Woken all at once, they all became runnable together and queued for the
        GIL: 16 writer threads ran 8.8–11.3k durable puts/s at 93–127 µs of CPU
        each, against 9.3–11.5k at 85–119 µs woken in turn (alternating, ten
        pairs of 3 runs of 1.5 s, the first seven on a prototype; woken in
        turn was faster in nine).
        """
        threads: list[_Request[Any]] = []
        for req in done:
            if req.wake is None:
                self._finish(req)
            else:
                threads.append(req)
        self._start_chain(threads)

    def _start_chain(self, reqs: list[_Request[Any]]) -> None:
        """Wake the first caller of ``reqs`` that still waits, carrying the rest."""
        if reqs:
            with self._queue_lock:
                first = self._chain(reqs)
            if first is not None:
                self._finish(first)

    @staticmethod
    def _chain(reqs: list[_Request[Any]]) -> _Request[Any] | None:
        """Under ``_queue_lock``: the first request whose caller still waits, now
        carrying the rest as its chain."""
        for i, req in enumerate(reqs):
            if not req.gone:
                req.chain = reqs[i + 1 :]
                return req
        return None

    def _wake_next(self, req: _Request[Any]) -> None:
        """Wake the next caller of ``req``'s chain (``req``'s caller is running, so
        only its own thread touches ``req.chain`` now)."""
        chain, req.chain = req.chain, []
        self._start_chain(chain)

    @staticmethod
    def _finish(req: _Request[Any]) -> None:
        """Hand a done request back to its caller."""
        if req.wake is not None:
            req.wake.release()
            return
        assert req.notify is not None
        try:
            req.notify(req.error, req.value)
        except Exception:  # e.g. the caller's event loop is closed; the others still hear
            logger.exception("could not hand a committed write back to its caller")

    def _pass_lead(self) -> tuple[_Request[Any] | None, bool]:
        """Choose who leads next, under ``_queue_lock``: a queued thread caller if any,
        else a leader task if only queued callers wait. Returns ``(caller, spawn)``."""
        nxt = next((r for r in self._queue if r.wake is not None), None)
        self._next = nxt
        self._leading = bool(self._queue)
        return nxt, nxt is None and self._leading

    def _hand_on(self, nxt: _Request[Any] | None, spawn: bool) -> None:
        """Start the next leader chosen by :meth:`_pass_lead` (outside the lock)."""
        if nxt is not None:
            assert nxt.wake is not None
            nxt.wake.release()
        elif spawn:
            self._spawn_leader()

    def _withdraw(self, req: _Request[Any]) -> None:
        """Take back the request of a thread caller interrupted before it was done.

        A request still queued is dropped (its op never runs); one already in
        a running batch runs anyway, and the callers to be woken after it are
        woken without it. If the caller had been made the leader but not
        started, the lead passes on, so the queue never stalls; with no one
        left to lead, the batch it was to wake is woken here.
        """
        nxt: _Request[Any] | None = None
        spawn = False
        after: _Request[Any] | None = None
        unwoken: list[_Request[Any]] = []
        with self._queue_lock:
            if self._next is req:
                self._queue.remove(req)
                nxt, spawn = self._pass_lead()
                if nxt is None and not spawn:  # no leader left to wake the last batch
                    unwoken, self._unwoken = self._unwoken, []
            elif req in self._queue:
                self._queue.remove(req)
            else:  # in a batch: skipped when its batch is woken, its chain handed on
                req.gone = True
                chain, req.chain = req.chain, []
                after = self._chain(chain)
        if after is not None:
            self._finish(after)
        self._wake(unwoken)
        self._hand_on(nxt, spawn)

    def _run_batch(
        self, batch: list[_Request[Any]], before_commit: Callable[[], None] | None = None
    ) -> None:
        pending = batch
        while True:
            names: dict[tuple[bytes, str], int] = {}
            txn = self._begin(write=True)
            txn_id: int = txn.id()
            self.memo.begin_write(txn_id)
            wtxns: list[WriteTxn] = []
            try:
                failed = None
                started = time.perf_counter()
                for req in pending:
                    if before_commit is not None and (
                        not req.history_safe or time.perf_counter() - started > WAKE_AFTER
                    ):
                        # Ops that may run long (maintenance, or many of them):
                        # the last batch is durable and waits no longer.
                        before_commit()
                        before_commit = None
                    wtxns.append(WriteTxn(self, txn, names))
                    running = _IN_WRITE_OP.__dict__.setdefault("stores", set())
                    running.add(self)
                    try:
                        req.value = req.op(wtxns[-1])
                    except lmdb.MapFullError:
                        raise
                    except BaseException as exc:
                        req.error = (
                            _translate(exc, self.path) if isinstance(exc, lmdb.Error) else exc
                        )
                        req.done, failed = True, req
                        break
                    finally:
                        running.discard(self)
                if failed is not None:
                    # The ops share one transaction: drop it with what the failed op
                    # wrote, and run the others again without it. (A nested
                    # transaction per op avoided the re-run but cost two more LMDB
                    # calls per op: 10.3-10.9k vs 10.9-11.2k puts/s at 16 threads.)
                    txn.abort()
                    pending = [req for req in pending if req is not failed]
                    if not pending:
                        return
                    continue
                # Before the commit is visible: a reader that sees it must also
                # see what it invalidates.
                self.memo.before_commit(
                    txn_id,
                    groups=[g for w in wtxns for g in w.memo_groups],
                    everything=not all(req.history_safe for req in pending),
                    new_blobs=[b for w in wtxns for b in w.memo_blobs],
                )
                if before_commit is not None:
                    before_commit()
                    before_commit = None
                txn.commit()
                self.memo.committed(txn_id)
            except lmdb.MapFullError:
                txn.abort()
                if not self._grow():
                    full: BaseException = StoreFullError(
                        f"store {self.path!r} reached its map size cap of {self.max_map_size} "
                        "bytes; nothing of this write was stored. Raise max_map_size, prune "
                        "or compact"
                    )
                    for req in pending:
                        req.error, req.done = full, True
                    return
                for req in pending:
                    req.error = None
                continue
            except BaseException as exc:
                with contextlib.suppress(Exception):
                    txn.abort()
                err = _translate(exc, self.path) if isinstance(exc, lmdb.Error) else exc
                for req in pending:
                    req.error, req.done = err, True
                return
            for (kind, name), name_id in names.items():
                self._name_ids.put((kind, name), name_id)
                self._names.put((kind, name_id), name)
            for req in pending:
                req.done = True
            if self.codec.wants_training:
                self._train_dictionary()
            return

    def _load_dictionary(self, dict_id: int) -> bytes | None:
        """A dictionary another process trained after this one opened the store."""
        with self.read() as r:
            found = dict(r.dictionaries()).get(dict_id)
        return found

    def _train_dictionary(self) -> None:
        """Train the store's record dictionary from this process's samples and store it.

        Runs under the writer lock right after a commit. If another process
        stored a dictionary first, that one is adopted instead: a store has
        one, immutable once written, so every record names a dictionary that
        is on disk before the record is.
        """
        try:
            trained = self.codec.train()
        except Exception as exc:  # too few distinct samples; sampling starts over
            logger.info("record dictionary training skipped: %s", exc)
            return
        for _ in range(2):
            txn = self._begin(write=True)
            txn_id: int = txn.id()
            self.memo.begin_write(txn_id)
            try:
                existing = ReadTxn(self, txn).dictionaries()
                if existing:
                    dict_id, dictionary = existing[-1]
                else:
                    dict_id, dictionary = 1, trained
                    txn.put(b"dict:1", ormsgpack.packb(trained), db=self._dbs.meta)
                txn.commit()
                self.memo.committed(txn_id)
            except lmdb.MapFullError:
                txn.abort()
                if not self._grow():
                    return
                continue
            except lmdb.Error as exc:
                txn.abort()
                logger.warning("could not store the record dictionary: %s", exc)
                return
            self.codec.install(dict_id, dictionary, activate=True)
            return

    def _grow(self) -> bool:
        current = self.env.info()["map_size"]
        if current >= self.max_map_size:
            return False
        new = min(current * 2, self.max_map_size)
        with self._rw.exclusive():
            self.env.set_mapsize(new)
        logger.info("grew LMDB map of %s from %d to %d bytes", self.path, current, new)
        return True

    # -- whole-store operations ------------------------------------------------------

    def used_bytes(self) -> int:
        """Bytes of pages in use (what the data would occupy after compaction + free pages)."""
        self._check_pid()
        info = self.env.info()
        return int((info["last_pgno"] + 1) * self.env.stat()["psize"])

    def file_bytes(self) -> int:
        """Size of the data file on disk."""
        return os.path.getsize(os.path.join(self.path, "data.mdb"))

    def copy_to(self, dest: str | os.PathLike[str], *, compact: bool = True) -> None:
        """Consistent hot copy of the whole store (compacting by default) into a new folder.

        The one write path of backups and compactions. The copy goes to a
        temporary file in ``dest``, owner-only (0600) from its creation, is
        fsync'd, and only when complete is linked into place as ``data.mdb``
        (then the folder is fsync'd): an interrupted copy leaves no
        ``data.mdb``, so it never opens as a store (issue 15.4, 15.10).

        Raises:
            InvalidInputError: ``dest`` is a file, or a folder already holding a store.
        """
        self._check_pid()
        dest = store_folder(dest, what="backup destination")
        final = os.path.join(dest, "data.mdb")
        if os.path.exists(dest) and not os.path.isdir(dest):
            raise InvalidInputError(
                f"backup destination {dest!r} is a file; pass a new (or empty) folder path"
            )
        if os.path.lexists(final):
            raise InvalidInputError(f"{dest!r} already holds a store; pick an empty folder")
        os.makedirs(dest, mode=0o700, exist_ok=True)
        _refuse_network_fs(dest)
        fd, partial = tempfile.mkstemp(prefix=".data.mdb.", suffix=_PARTIAL_SUFFIX, dir=dest)
        try:
            try:
                os.fchmod(fd, 0o600)
                self.env.copyfd(fd, compact=compact)
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(partial, final)  # unlike rename, never replaces a data.mdb
            except FileExistsError:
                raise InvalidInputError(
                    f"{dest!r} received a store from someone else during the copy; pick an "
                    "empty folder"
                ) from None
        except lmdb.Error as exc:
            raise _translate(exc, dest) from exc
        except OSError as exc:
            raise _translate(exc, dest) from exc
        finally:
            with contextlib.suppress(OSError):
                os.unlink(partial)
        _fsync_dir(dest)

    def readers(self) -> dict[str, Any]:
        """LMDB's reader table (``mdb_reader_list``) and the newest transaction id.

        Returns:
            ``{"last_txnid": n, "readers": [(pid, thread, txnid), ...]}``; a
            slot's ``txnid`` is the snapshot it pins, ``"-"`` when idle.
        """
        self._check_pid()
        rows: list[tuple[int, str, str]] = []
        for line in self.env.readers().splitlines()[1:]:
            parts = line.split()
            if len(parts) == 3 and parts[0].isdigit():
                rows.append((int(parts[0]), parts[1], parts[2]))
        return {"last_txnid": int(self.env.info()["last_txnid"]), "readers": rows}

    def clear_stale_readers(self) -> int:
        """Free the reader slots of processes that died (``mdb_reader_check``); how many."""
        self._check_pid()
        return int(self.env.reader_check())

    def copy_to_fd(self, fd: int, *, compact: bool = False) -> None:
        """Consistent hot copy of the data file (``data.mdb``) written to file descriptor ``fd``."""
        self._check_pid()
        try:
            self.env.copyfd(fd, compact=compact)
        except lmdb.Error as exc:
            raise _translate(exc, f"file descriptor {fd}") from exc

    def stats(self) -> dict[str, Any]:
        """Entry and page counts per named database plus map figures."""
        self._check_pid()
        out: dict[str, Any] = {
            "map_size": self.env.info()["map_size"],
            "used_bytes": self.used_bytes(),
        }
        with self.read() as r:
            for name in _DBS:
                st = r.txn.stat(getattr(self._dbs, name))
                out[name] = {
                    "entries": st["entries"],
                    "pages": st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"],
                }
        return out

    def iter_db(
        self, name: str, prefix: bytes = b"", chunk: int = 512
    ) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) of one database under ``prefix``, read in short chunks."""
        db = getattr(self._dbs, name)
        start: bytes | None = None
        while True:
            rows: list[tuple[bytes, bytes]] = []
            with self.read() as r:
                cur = r.txn.cursor(db=db)
                ok = cur.set_range(start if start is not None else prefix)
                if ok and start is not None and cur.key() == start:
                    ok = cur.next()
                while ok and len(rows) < chunk:
                    key = cur.key()
                    if not key.startswith(prefix):
                        ok = False
                        break
                    rows.append((key, cur.value()))
                    ok = cur.next()
            yield from rows
            if not ok or not rows:
                return
            start = rows[-1][0]

    def verify_tables(self) -> list[tuple[str, str | None, str]]:
        """Check every key of every database the way reads use it; never raises for damage.

        First a child process walks each database with a cursor and looks every
        key up again by a point search (the path ``get``/``set_range`` reads
        take: a damaged B-tree page can fail one and not the other, and LMDB
        aborts a process whose cursor steps onto one). If LMDB finds damage,
        that is the report. Otherwise every key is decoded strictly, ``names``
        and ``names_rev`` are cross-checked both ways (each entry has its
        reverse, ids unique and within ``name_seq``) and every id a key holds
        must be a known name. Cost: O(entries · log entries).

        Returns:
            (kind, thread_id or None, detail) per finding; every one is an error.
            A finding of kind ``unreadable`` means LMDB found a damaged page.
        """
        damaged = self._page_walk()
        if damaged:
            return damaged
        with self.read() as r:
            check = _TableCheck(r)
        for db_name in _TableCheck.ORDER:
            start: bytes | None = b""
            for _ in range(_VERIFY_RESTARTS):
                if start is None:
                    break
                try:
                    with self.read() as r:
                        start = check.walk(r, db_name, start)
                except DeltaLogError as exc:  # the cursor itself cannot move on
                    check.out.append(("unreadable", None, f"{db_name}: walk stopped: {exc}"))
                    break
            if db_name == "names":
                check.finish_names()
        return check.out

    def _page_walk(self) -> list[tuple[str, str | None, str]]:
        """LMDB's own view of every page, from a child process (see ``_PAGE_WALK``):
        an ``unreadable`` finding per database where LMDB reports or aborts on damage."""
        self._check_pid()
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    _PAGE_WALK,
                    self.path,
                    "1" if self.locked else "0",
                    *_TableCheck.ORDER,
                ],
                capture_output=True,
                text=True,
                timeout=_PAGE_WALK_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            return [("unreadable", None, f"the page walk took over {_PAGE_WALK_TIMEOUT} s")]
        except OSError as exc:  # this user may not run sys.executable (a read-only user)
            logger.warning("verify: page walk of %s could not run (%s)", self.path, exc)
            return []
        if not done.stdout.startswith("D "):  # the child never ran (no usable sys.executable?)
            logger.warning(
                "verify: page walk of %s could not run (%s)", self.path, done.stderr[-300:]
            )
            return []
        out: list[tuple[str, str | None, str]] = []
        where = "the start"
        for line in done.stdout.splitlines():
            tag, _, rest = line.partition(" ")
            if tag == "D":
                where = f"{rest}: its start"
            elif tag == "K":
                db_name, _, key = rest.partition(" ")
                where = f"{db_name}: key {key[:120]}"
            elif tag == "E":
                db_name, key, why = rest.split(" ", 2)
                out.append(("unreadable", None, f"{db_name}/{key[:120]}: LMDB reports {why}"))
        if done.returncode != 0 or not done.stdout.endswith("OK\n"):
            err = done.stderr.strip().splitlines()
            out.append(
                (
                    "unreadable",
                    None,
                    f"LMDB stopped the page walk within 256 keys after {where} "
                    f"(exit {done.returncode}: {err[-1] if err else 'no message'}): a damaged page",
                )
            )
        return out

    def db(self, name: str) -> Any:
        """The handle of one named database (for ops given to :meth:`write`)."""
        return getattr(self._dbs, name)


_LIVE_STORES: weakref.WeakSet[Store] = weakref.WeakSet()


def _before_fork() -> None:
    for store in list(_LIVE_STORES):
        store._close_for_fork()


def _after_fork_in_parent() -> None:
    for store in list(_LIVE_STORES):
        store._reopen_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent)


def _histories(
    walk: DeltaWalk,
    *,
    entries: dict[str, HistoryEntry] | None = None,
    bases: dict[str, HistoryEntry] | None = None,
    result: dict[str, tuple[StoredValue | None, list[WriteRow]]] | None = None,
) -> dict[str, DeltaHistory]:
    """A walk's result as :class:`DeltaHistory` rows, with the memo entries involved."""
    entries = entries or {}
    bases = bases or {}
    out: dict[str, DeltaHistory] = {}
    for channel, (seed, writes) in (walk.result() if result is None else result).items():
        entry = entries.get(channel)
        out[channel] = DeltaHistory(
            seed,
            entry.writes if entry is not None else tuple(writes),
            entry,
            bases.get(channel),
        )
    return out


_NAME_KINDS: Final = (keys.KIND_THREAD, keys.KIND_NS, keys.KIND_CHANNEL)

# Walks every database of a store with a cursor and a point lookup of every
# key, in a child process: on a damaged B-tree page LMDB reports MDB_CORRUPTED
# to a search but *asserts* (aborting the process) when a cursor steps onto
# it, and a verify must survive to report it. Prints "D db" per database,
# "K db key" every 256 keys (the last place reached if it dies) and "E db key
# error" for an LMDB error, which ends that database's walk.
_PAGE_WALK: Final = r"""
import sys, lmdb
# argv[2] is "1" when the parent holds LMDB's lock file, "0" when it reads
# lock-free (a backup without lock.mdb, a read-only user): the child then
# reads lock-free too, so it creates no lock.mdb (R12).
lock = sys.argv[2] == "1"
try:
    env = lmdb.open(sys.argv[1], max_dbs=16, readonly=True, lock=lock, readahead=False)
except lmdb.Error:  # no write access to lock.mdb: read as a lock-free reader does
    try:
        env = lmdb.open(sys.argv[1], max_dbs=16, readonly=True, lock=False, readahead=False)
    except lmdb.Error as exc:
        sys.exit("cannot open: " + str(exc))
for name in sys.argv[3:]:
    print("D", name, flush=True)
    key = b""
    try:
        db = env.open_db(name.encode(), create=False)
        with env.begin() as txn:
            cur = txn.cursor(db=db)
            for n, (key, value) in enumerate(cur.iternext()):
                if n % 256 == 0:
                    print("K", name, bytes(key).hex(), flush=True)
                if txn.get(key, db=db) != value:
                    raise lmdb.CorruptedError("a point lookup of this key does not find it")
    except lmdb.Error as exc:
        print("E", name, bytes(key).hex(), type(exc).__name__ + ": " + str(exc), flush=True)
print("OK", flush=True)
"""
# Seconds the page walk may take before verify gives up on it.
_PAGE_WALK_TIMEOUT: Final = 600


def _why(exc: BaseException) -> str:
    """An exception as one line for a verify finding."""
    return f"{type(exc).__name__}: {exc}" if isinstance(exc, lmdb.Error) else str(exc)


def _format_version(raw: bytes | None, path: str) -> int:
    """The stored ``meta/format_version``, checked: a readable format or FormatVersionError."""
    try:
        version = None if raw is None else ormsgpack.unpackb(raw)
    except Exception:
        version = bytes(raw or b"")
    if type(version) is int and version in keys.READABLE_FORMATS:
        return version
    shown = repr(version)
    shown = shown if len(shown) <= 80 else shown[:80] + "…"
    if type(version) is int and version > keys.FORMAT_VERSION:
        raise FormatVersionError(
            f"store {path!r} has format version {version}; this deltalog reads "
            f"format {keys.FORMAT_VERSION}. Upgrade deltalog to open it"
        )
    raise FormatVersionError(
        f"store {path!r} has format version {shown} (record meta/format_version), which no "
        f"deltalog wrote; this deltalog reads formats {sorted(keys.READABLE_FORMATS)}. The "
        "store is damaged: restore it from a backup"
    )


def _split_write_value(raw: bytes) -> tuple[bytes, int, bytes]:
    """A write value: (channel uid bytes, channel id, framed record).

    The uid is covered by the record's CRC (``prefix=``); a length byte out of
    range is reported here.
    """
    if not raw or not 1 <= raw[0] <= 8 or len(raw) < 2 + raw[0]:
        raise CorruptRecordError(
            f"write value {bytes(raw[:12]).hex()}… has no valid channel id; run `deltalog verify`"
        )
    end = 1 + raw[0]
    return raw[:end], int.from_bytes(raw[1:end], "big"), raw[end:]


def _parent_in(parent_id: str | None) -> bytes | None:
    """A parent id as stored in a checkpoint record: its encoded key bytes."""
    return None if parent_id is None else keys.encode_id(parent_id)


def _parent_out(stored: Any) -> str | None:
    """The parent id string of a stored checkpoint record."""
    if stored is None:
        return None
    if isinstance(stored, str):  # never written by this format; tolerated on read
        return stored
    return keys.decode_id(bytes(stored), 0)[0]


def _prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key that starts with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\xff" * (len(prefix) + 1)
    return stripped[:-1] + bytes((stripped[-1] + 1,))


def _translate(exc: BaseException, path: str) -> BaseException:
    if isinstance(exc, DeltaLogError):
        return exc
    if isinstance(exc, lmdb.MapFullError):
        return StoreFullError(f"store {path!r} is full; raise max_map_size, prune or compact")
    if isinstance(exc, (lmdb.Error, OSError)) and _out_of_space(exc, path):
        return StoreFullError(
            f"the disk under {path!r} is full (or the data file hit the process's file size "
            "limit); nothing of this write was stored. Free space, then retry"
        )
    if isinstance(exc, (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError)):
        return CorruptRecordError(
            f"LMDB reports a damaged store at {path!r} ({type(exc).__name__}: {exc}); restore "
            "from a backup"
        )
    if isinstance(exc, lmdb.Error):
        return DeltaLogError(f"LMDB error on {path!r}: {type(exc).__name__}: {exc}")
    return exc


def _out_of_space(exc: BaseException, path: str) -> bool:
    """True when a failed write means the disk (or the file size limit) is full.

    LMDB reports a short write -- what a full disk or ``ulimit -f`` gives it in
    the middle of a commit -- as EIO, not ENOSPC, so an I/O error counts as
    "full" when the disk has under ``_LOW_SPACE`` bytes left or the data file
    sits at the RLIMIT_FSIZE limit.
    """
    code = getattr(exc, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or "No space left" in str(exc):
        return True
    if code != errno.EIO and "Input/output error" not in str(exc):
        return False
    try:
        if shutil.disk_usage(path).free < _LOW_SPACE:
            return True
        size = os.path.getsize(os.path.join(path, "data.mdb"))
    except OSError:
        return False
    try:
        import resource
    except ImportError:  # not on this platform
        return False
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return limit != resource.RLIM_INFINITY and size + _LOW_SPACE > limit


def _refuse_network_fs(path: str) -> None:
    """LMDB's locking and mmap are unsafe on network filesystems: refuse them."""
    try:
        real = os.path.realpath(path)
        best, fstype = "", ""
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                    best, fstype = mnt, parts[2]
    except OSError:
        return
    if fstype in _UNSUPPORTED_FS:
        raise StoreOpenError(
            f"{path!r} is on a {fstype} filesystem; LMDB needs a local disk (locks and "
            "mmap are not coherent over NFS/SMB). Put the store on a local path"
        )


# LMDB's meta page starts after the 16-byte page header with this magic number
# (native byte order); a data file without it is no LMDB environment.
_LMDB_MAGIC: Final = 0xBEEFC0DE
_PARTIAL_SUFFIX: Final = ".partial"


def check_data_file(path: str, *, required: bool) -> None:
    """Refuse a folder whose ``data.mdb`` is not an LMDB file, before LMDB touches it.

    A 0-byte or garbage ``data.mdb`` (an interrupted copy by another tool) is
    never initialised as a new store. With ``required`` (read-only opens) a
    missing folder or ``data.mdb`` is refused too: a read never creates one.
    """
    if not os.path.isdir(path):
        if os.path.exists(path) or required:
            raise NotAStoreError(
                f"{path!r} is not a deltalog store: "
                + ("not a folder" if os.path.exists(path) else "no such folder")
                + "; a store is a folder holding data.mdb: check the path"
            )
        return
    data = os.path.join(path, "data.mdb")
    try:
        with open(data, "rb") as handle:
            head = handle.read(24)
    except FileNotFoundError:
        if not required:
            return
        partial = sorted(n for n in os.listdir(path) if n.endswith(_PARTIAL_SUFFIX))
        raise NotAStoreError(
            f"{path!r} is not a deltalog store: it has no data.mdb"
            + (
                f" (only {partial[0]!r}, left by an interrupted backup or compact: delete "
                "it and copy again)"
                if partial
                else "; check the path"
            )
        ) from None
    except OSError as exc:
        raise StoreOpenError(
            f"cannot read {data!r} ({exc}); reading a store needs read access to its folder "
            "and data.mdb"
        ) from exc
    if len(head) < 24 or int.from_bytes(head[16:20], sys.byteorder) != _LMDB_MAGIC:
        raise NotAStoreError(
            f"{path!r} is not a deltalog store: its data.mdb "
            + (f"is {len(head)} bytes" if len(head) < 24 else "is not an LMDB file")
            + " (an interrupted copy?). Nothing was changed; restore it from a backup, or "
            "delete data.mdb to start a new store there"
        )


def _lock_held(path: str) -> bool:
    """True when some process has the environment at ``path`` open (or it cannot be told).

    Every process with an LMDB environment open holds an ``fcntl`` lock on the
    first byte of ``lock.mdb``; ``F_GETLK`` asks about it through a read-only
    descriptor. Linux only (the ``struct flock`` layout is the platform's).
    """
    if not sys.platform.startswith("linux"):
        return True
    try:
        fd = os.open(os.path.join(path, "lock.mdb"), os.O_RDONLY)
    except OSError:
        return True
    try:
        query = struct.pack("hhqqixxxx", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return True
    finally:
        os.close(fd)
    return bool(struct.unpack("hhqqixxxx", answer)[0] != fcntl.F_UNLCK)


def _readonly_lock(path: str) -> tuple[bool, bool]:
    """How a read-only open uses ``lock.mdb``: ``(lock, probe first without it)``.

    * No ``lock.mdb`` (a backup, never opened since): no process has the store
      open, and LMDB would create the file: read without it.
    * ``lock.mdb`` writable by this user: use it (a writer starting later sees
      this reader), after a lock-free probe when no process holds it.
    * Not writable (a user with read access only): read without it if no
      process has the store open; otherwise refuse with what access is needed.
    """
    lock_file = os.path.join(path, "lock.mdb")
    if not os.path.exists(lock_file):
        return False, False
    held = _lock_held(path)
    if os.access(lock_file, os.W_OK):
        return True, not held
    if not held:
        return False, False
    raise StoreOpenError(
        f"{path!r} is open by another process and {lock_file!r} is not writable for this "
        "user: reading a store while it is in use needs write access to lock.mdb (LMDB "
        "registers each reader there). Ask its owner for that access, or read it when no "
        "process has it open"
    )


def _fsync_dir(path: str) -> None:
    """Make a rename or link in ``path`` durable (where the platform allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def store_folder(path: Any, *, what: str = "store path") -> str:
    """``path`` as a folder path string LMDB can open, or :class:`InvalidInputError` (R9).

    Accepts ``str`` and ``os.PathLike[str]``; refuses other types, bytes
    paths, NUL characters and names that cannot be encoded for the file system.
    """
    if isinstance(path, (bytes, bytearray)) or not isinstance(path, (str, os.PathLike)):
        raise InvalidInputError(
            f"{what} {path!r} is a {type(path).__name__}; pass a str or pathlib.Path"
        )
    text = os.fspath(path)
    if not isinstance(text, str):
        raise InvalidInputError(f"{what} {path!r} is a bytes path; pass a str or pathlib.Path")
    if not text:
        raise InvalidInputError(f"{what} is empty; pass a folder path")
    if "\x00" in text:
        raise InvalidInputError(f"{what} {text!r} contains a NUL character; remove it")
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"{what} {text!r} cannot be encoded for the file system; pass the name as "
            "os.listdir() returns it"
        ) from None
    return text


def _check_sizes(map_size: Any, max_map_size: Any, max_readers: Any) -> None:
    """The environment's size options, or :class:`InvalidInputError` naming the bad one."""
    for name, value, low in (
        ("map_size", map_size, 1),
        ("max_map_size", max_map_size, 1),
        ("max_readers", max_readers, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidInputError(
                f"{name}={value!r}: need a positive int"
                + (" (bytes, e.g. 64 * 1024**2)" if "map" in name else " (e.g. 126)")
            )
    if max_map_size < map_size:
        raise InvalidInputError(
            f"max_map_size={max_map_size!r} is below map_size={map_size!r}; the cap of map "
            "growth must be at least the initial map size: raise max_map_size or lower map_size"
        )


def open_owner_only(path: str) -> int:
    """Open ``path`` for writing (truncated), creating it 0600 whatever the umask (issue 15.10).

    Returns the descriptor. A file that exists keeps its mode (it is the
    user's, maybe not a regular file at all, e.g. ``/dev/null``).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return os.open(path, os.O_WRONLY | os.O_TRUNC)
    os.fchmod(fd, 0o600)
    return fd


# The C module under ``signal``: the same calls without the enum conversions
# that made ``signal.getsignal`` cost 2.5 µs each.
_signal: Any = importlib.import_module("_signal")
# Signals whose Python handlers a group-commit leader on the main thread holds
# off (see _signals_deferred): the ones applications handle, SIGINT first.
_DEFERRED_SIGNALS: Final = tuple(
    int(getattr(_signal, name))
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")
    if hasattr(_signal, name)
)
_deferring = False


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """On the main thread: run Python signal handlers after the block, not inside it.

    CPython runs signal handlers on the main thread between bytecodes, so a
    KeyboardInterrupt can surface anywhere in a group-commit leader, in the
    middle of another thread's op or of waking its caller: 106 puts of other
    threads failed from one SIGINT (issue 15.15). Handlers of
    ``_DEFERRED_SIGNALS`` are swapped for one that records the signal, and
    the recorded signals go to the real handlers when the block ends (so a
    KeyboardInterrupt is raised then, in this thread only). Costs about 2 µs;
    other threads never run signal handlers, so for them this does nothing.
    """
    global _deferring
    if _deferring or threading.get_ident() != threading.main_thread().ident:
        yield
        return
    saved: dict[int, Any] = {}
    pending: list[int] = []

    def record(signum: int, frame: Any) -> None:
        pending.append(signum)

    _deferring = True
    try:
        for signum in _DEFERRED_SIGNALS:
            handler = _signal.getsignal(signum)
            if callable(handler):
                saved[signum] = handler
                _signal.signal(signum, record)
        yield
    finally:
        for signum, handler in saved.items():
            _signal.signal(signum, handler)
        _deferring = False
        for signum in pending:
            saved[signum](signum, sys._getframe())
