"""The base of every transaction: interned names and checkpoint envelopes.

:class:`TxnBase` is what every read needs first; :class:`WriteBase` adds the
primitive mutations (interning, meta, raw puts). The storage mixins
(:mod:`~deltalog.engine.blobs`, :mod:`~deltalog.engine.history`,
:mod:`~deltalog.engine.queries`, :mod:`~deltalog.engine.verify_reads`,
:mod:`~deltalog.engine.thread_ops`) build on them, and
:class:`~deltalog.engine.read_txn.ReadTxn` / :class:`~deltalog.engine.write_txn.WriteTxn`
put them together. Valid only inside ``Environment.read()`` / ``Environment.write()``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import ormsgpack
from deltalog.engine import keys
from deltalog.engine.envelope import (
    PARENT,
    VERSIONS,
    CheckpointEnvelope,
    blobbed_of,
    inline_of,
    read_format_version,
)
from deltalog.engine.errors import (
    CorruptRecordError,
    DeltaLogError,
)
from deltalog.engine.names import (
    NAMES_CRC_FORMAT,
    decode_name_id,
    decode_name_rev,
    encode_name_id,
    encode_name_rev,
)
from deltalog.engine.store_rows import (
    CheckpointRow,
    Typed,
    Version,
)

if TYPE_CHECKING:
    from deltalog.engine.env_open import EnvironmentBase

DB_NAMES: Final = ("meta", "names", "names_rev", "checkpoints", "writes", "blobs", "runs")
# The long-term memory store's databases (deltalog.engine.memory_io): created by
# the first writable open; absent (handle None, read as empty) in a read-only
# open of a store no writable open of this version touched.
MEMORY_DB_NAMES: Final = ("items", "item_ns", "item_vectors", "item_ttl")

# A walk that finds no seed after this many ancestors is reading a damaged chain.
MAX_WALK: Final = 1_000_000


NAME_KINDS: Final = (keys.KIND_THREAD, keys.KIND_NS, keys.KIND_CHANNEL, keys.KIND_TASK_PATH)


@dataclass
class Dbs:
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


#: What the envelope cache keeps of a checkpoint record: parent (encoded id
#: bytes, or a str id in older records), channel versions, inline values and
#: the ``blobbed`` mask (None before format 5).
Envelope = tuple[Any, dict[str, Version], dict[str, Any], int | None]


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key that starts with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\xff" * (len(prefix) + 1)
    return stripped[:-1] + bytes((stripped[-1] + 1,))


class TxnBase:
    """A transaction's names and checkpoint envelopes (see the module)."""

    memo_reads: bool = True
    """Whether :meth:`~deltalog.engine.history.HistoryReads.history` may use the history memo
    (never in a write transaction, whose view includes uncommitted changes)."""

    def __init__(self, env: EnvironmentBase, txn: Any) -> None:
        self.env = env
        self.txn = txn
        self.dbs = env._dbs
        self.codec = env.codec

    # -- names -----------------------------------------------------------------

    def name_id(self, kind: bytes, name: str) -> int | None:
        """The interned id of ``name``, or None if it was never stored.

        Raises:
            CorruptRecordError: The ``names`` record fails its CRC (format 4) or
                is malformed: never another name's id.
        """
        cache = self.env._name_ids
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
        self.env._names.put((kind, name_id), name)
        return name_id

    def name_of(self, kind: bytes, name_id: int) -> str:
        """The name behind an interned id (CRC-checked like :meth:`name_id`)."""
        cache = self.env._names
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
        if not self.env._names_crc:
            raw = self.txn.get(b"format_version", db=self.dbs.meta)
            version = read_format_version(raw, self.env.path)
            self.env._names_crc = version >= NAMES_CRC_FORMAT
        return self.env._names_crc

    @functools.cached_property
    def legacy_writes(self) -> bool:
        """Whether write keys hold the task path (formats 1-6): a read-only open of an
        older store, until another process upgrades it (read again per transaction)."""
        if self.env.format_version >= keys.WRITE_KEYS_FORMAT:
            return False
        raw = self.txn.get(b"format_version", db=self.dbs.meta)
        return read_format_version(raw, self.env.path) < keys.WRITE_KEYS_FORMAT

    @functools.cached_property
    def legacy_blobs(self) -> bool:
        """Whether blob keys hold the channel before the version (formats 1-9): a
        read-only open of an older store, until another process upgrades it (read
        again per transaction)."""
        if self.env.format_version >= keys.BLOB_KEYS_FORMAT:
            return False
        raw = self.txn.get(b"format_version", db=self.dbs.meta)
        return read_format_version(raw, self.env.path) < keys.BLOB_KEYS_FORMAT

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
        where = f"checkpoints/{key.hex()}"
        env = CheckpointEnvelope.unpack(self.codec.decode(raw, where, key=key), where)
        try:
            _, _, cid = keys.decode_checkpoint_key(key)
        except Exception as exc:
            raise CorruptRecordError(f"key {where} cannot be decoded ({exc})") from exc
        return CheckpointRow(
            thread_id=self.name_of(keys.KIND_THREAD, t),
            checkpoint_ns=self.name_of(keys.KIND_NS, n),
            checkpoint_id=cid,
            parent_id=env.parent_id,
            channel_versions=env.versions,
            checkpoint=env.checkpoint,
            metadata=env.metadata,
            flags=env.flags,
            run_id=env.run_id,
            inline=env.inline,
            blobbed=env.blobbed,
        )

    def _envelope(self, key: bytes, raw: bytes) -> Envelope:
        """(parent bytes, channel versions, inline values, ``blobbed`` mask or None) of
        checkpoint record ``raw``, through the store's envelope cache (shared dicts:
        read them, never change them)."""
        cached = self.env.envelopes.get(raw)
        if cached is None:
            rec = self.codec.decode(raw, f"checkpoints/{key.hex()}", key=key, head=True)
            cached = self._remember_envelope(key, raw, rec)
        return cached

    def _remember_envelope(self, key: bytes, raw: bytes, rec: Any) -> Envelope:
        """Cache the envelope of checkpoint record ``raw``, whose decoded form is ``rec``.

        A writer calls it with the record it just encoded (``rec`` unpacked from
        the body it compressed, which is what a decode of ``raw`` returns), so
        the next puts and the next walk find their parent's envelope without
        the zstd call and the decode. Keyed by the bytes, so never stale."""
        if len(rec) <= VERSIONS or not isinstance(rec[VERSIONS], dict):
            raise CorruptRecordError(
                f"record checkpoints/{key.hex()} has an unexpected shape (no versions map)"
            )
        return self.env.envelopes.put(
            raw, (rec[PARENT], rec[VERSIONS], inline_of(rec), blobbed_of(rec))
        )

    # -- checkpoint and write records ---------------------------------------------
    # The one owner of the `checkpoints` and `writes` databases: every read and
    # write of their records goes through the methods below (tests/test_layers.py
    # holds every other module to that; migrations keep their raw access). A turn
    # pack's merged view (docs/design.md, "Turn packs") takes their place here.

    def checkpoint_cursor(self) -> Any:
        """A cursor over the checkpoint records in key order, with LMDB's moves
        (``set_key``, ``set_range``, ``first``, ``last``, ``next``, ``prev``,
        ``key``, ``value``, ``iternext``)."""
        return self.txn.cursor(db=self.dbs.checkpoints)

    def write_cursor(self) -> Any:
        """A cursor over the write records in key order (see :meth:`checkpoint_cursor`)."""
        return self.txn.cursor(db=self.dbs.writes)

    def checkpoint_raw(self, key: bytes) -> bytes | None:
        """The stored checkpoint record at ``key``, or None."""
        raw: bytes | None = self.txn.get(key, db=self.dbs.checkpoints)
        return raw

    def write_raw(self, key: bytes) -> bytes | None:
        """The stored write (channel uid, then the record) at ``key``, or None."""
        raw: bytes | None = self.txn.get(key, db=self.dbs.writes)
        return raw

    def record_dbs(self) -> dict[str, Any]:
        """The databases a thread's records live in, by name (``checkpoints``,
        ``writes``, ``blobs``): for what treats a thread's records alike (its
        existence, deleting and copying it)."""
        return {
            "checkpoints": self.dbs.checkpoints,
            "writes": self.dbs.writes,
            "blobs": self.dbs.blobs,
        }

    def key_from(self, prefix: bytes, start: bytes) -> bytes | None:
        """The smallest checkpoint key that starts with ``prefix`` and is at least
        ``start``, or None: one cursor seek. ``start + b"\\x00"`` gives the smallest
        key strictly above ``start``. (Each LMDB call releases the GIL, and with
        many threads that costs a thread switch; see docs/benchmarks.md, stop 32.)"""
        cur = self.checkpoint_cursor()
        if not cur.set_range(start):
            return None
        key: bytes = cur.key()
        return key if key.startswith(prefix) else None

    def latest_key(self, t: int, n: int) -> bytes | None:
        """Key of the greatest checkpoint id in (thread, ns): one cursor seek (R4)."""
        prefix = keys.ns_prefix(t, n)
        cur = self.checkpoint_cursor()
        found = cur.prev() if cur.set_range(prefix_end(prefix)) else cur.last()
        if not found:
            return None
        key: bytes = cur.key()
        return key if key.startswith(prefix) else None

    def is_latest(self, t: int, n: int, checkpoint_id: str | None) -> bool:
        """Whether ``checkpoint_id`` (None: the latest) is the newest checkpoint of
        (thread, ns), the one a thread's next turn starts from: one cursor seek."""
        if checkpoint_id is None:
            return True
        return self.latest_key(t, n) == keys.ns_prefix(t, n) + keys.encode_id(checkpoint_id)

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

    def meta(self, name: str) -> Any:
        """A value of the ``meta`` database, or None."""
        raw = self.txn.get(name.encode("ascii"), db=self.dbs.meta)
        return None if raw is None else ormsgpack.unpackb(raw)

    def iter_checkpoint_keys(
        self, prefix: bytes, *, start: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, raw record) under ``prefix``; ``start`` bounds the walk (exclusive)."""
        cur = self.checkpoint_cursor()
        if reverse:
            bound = start if start is not None else prefix_end(prefix)
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


class WriteBase(TxnBase):
    """The primitive mutations of a write transaction: interning, meta, raw puts."""

    memo_reads = False

    def __init__(
        self, env: EnvironmentBase, txn: Any, new_names: dict[tuple[bytes, str], int]
    ) -> None:
        super().__init__(env, txn)
        self.new_names = new_names
        # What this transaction may change in remembered histories (reported to
        # the history memo before the commit, see Environment._run_batch).
        self.memo_groups: set[tuple[int, int]] = set()
        self.memo_blobs: list[tuple[int, int, bytes]] = []
        # Each large value this op stored, as (record, typed): the saver
        # decodes its seeds ahead (DecodedCache.prefill) once committed.
        self.large_blobs: list[tuple[bytes, Typed]] = []
        # Set by every mutation other than putting checkpoints, writes and new
        # blobs (which report what they change above): the commit then counts as
        # changing every remembered history, whatever the op declared.
        self.memo_everything = False

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
            for k in NAME_KINDS
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

    def set_meta(self, name: str, value: Any) -> None:
        """Set a value of the ``meta`` database."""
        self.txn.put(name.encode("ascii"), ormsgpack.packb(value), db=self.dbs.meta)

    def put_raw(self, db: Any, key: bytes, value: bytes) -> None:
        """Put bytes as given, bypassing the codec (fault-injection tests plant
        damaged records through the store's own transaction with it)."""
        self.memo_everything = True
        self.txn.put(key, value, db=db)

    def put_checkpoint_raw(self, key: bytes, raw: bytes) -> None:
        """Store a framed checkpoint record at ``key`` (replacing one there)."""
        self.txn.put(key, raw, db=self.dbs.checkpoints)

    def put_write_raw(self, key: bytes, raw: bytes, *, overwrite: bool = True) -> bool:
        """Store a write (channel uid, then the framed record) at ``key``; with
        ``overwrite`` False a write already there stays. Returns whether it was stored."""
        stored: bool = self.txn.put(key, raw, overwrite=overwrite, db=self.dbs.writes)
        return stored

    def delete_checkpoint_raw(self, key: bytes) -> bool:
        """Delete the checkpoint record at ``key`` (not its writes); whether there was one."""
        deleted: bool = self.txn.delete(key, db=self.dbs.checkpoints)
        return deleted

    def delete_writes_raw(self, prefix: bytes) -> int:
        """Delete every write whose key starts with ``prefix`` (a checkpoint's key:
        its writes); return how many."""
        return self.delete_prefix(self.dbs.writes, prefix)

    def delete_prefix(self, db: Any, prefix: bytes) -> int:
        """Delete every key starting with ``prefix``; return how many."""
        self.memo_everything = True
        cur = self.txn.cursor(db=db)
        count = 0
        ok = cur.set_range(prefix)
        while ok and cur.key().startswith(prefix):
            ok = cur.delete()
            count += 1
        return count
