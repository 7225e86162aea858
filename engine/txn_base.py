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

import bisect
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
    split_write_value,
)
from deltalog.engine.errors import (
    CorruptRecordError,
    DeltaLogError,
)
from deltalog.engine.merged import Entry, MergedCursor, PackCursor
from deltalog.engine.names import (
    NAMES_CRC_FORMAT,
    decode_name_id,
    decode_name_rev,
    encode_name_id,
    encode_name_rev,
)
from deltalog.engine.packs import (
    PACK_KEEP,
    PACK_MAX,
    RATIO_MIN_BYTES,
    SEQ_SIZE,
    Pack,
    Stored,
    body_of,
    chunk_key,
    chunk_sizes,
    cut_size,
    decode_pack,
    leaf_slot,
    outside,
    pack_body,
    pack_cut,
    pack_due,
    pack_room,
    packable,
    prefix_of,
    tail_after,
)
from deltalog.engine.store_rows import (
    CheckpointRow,
    Typed,
    Version,
)

if TYPE_CHECKING:
    from deltalog.engine.codec import Ahead
    from deltalog.engine.env_open import EnvironmentBase

#: Namespaces whose plain tail a process remembers for the pack check
#: (:meth:`WriteBase.pack_behind`); one more clears them all.
PACK_TAILS: Final = 4096
#: The most bytes of large records one pack carries in chunks (format 16): ~2,100
#: chunks, far from the 65,535 a chunk key numbers. A pack of checkpoints with more
#: (thousands of tasks' results) leaves the rest plain, as format 15 did.
CARRY_MAX: Final = 4 * 1024**2
#: A record at least this large is appended when it can be (:meth:`WriteBase.put_at_end`).
#: Put in key order the ordinary way, records of 250-700 bytes filled their pages
#: 0.68-0.78 (0.84 appended) and 1,600-byte ones took 1.01 pages each (0.51
#: appended); 150-byte ones 0.73 and 0.76, not worth a second LMDB call (and GIL
#: release) for every put, and a turn pack takes the small records later.
APPEND_MIN: Final = 256

DB_NAMES: Final = ("meta", "names", "names_rev", "checkpoints", "writes", "blobs", "runs")
# The turn packs (format 14, docs/design.md "Turn packs"): the log of packs by
# sequence number, and the index from each pack's greatest entry key to its
# number. Created by the first writable open; absent (handle None, no packs) in
# a read-only open of an older store.
PACK_DB_NAMES: Final = ("packs", "pack_index")
# The long-term memory store's databases (deltalog.engine.memory_io): created by
# the first writable open; absent (handle None, read as empty) in a read-only
# open of a store no writable open of this version touched.
MEMORY_DB_NAMES: Final = ("items", "item_ns", "item_vectors", "item_ttl")

# Decoded packs an environment keeps (cleared when full, like the envelopes).
PACK_CACHE_ENTRIES: Final = 256

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
    packs: Any = None
    pack_index: Any = None
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
    # The one owner of the `checkpoints` and `writes` databases and of the turn
    # packs (docs/design.md, "Turn packs"): every read and write of their records
    # goes through the methods below (tests/test_layers.py holds every other
    # module to that; migrations keep their raw access).

    # Whether this transaction's snapshot holds a pack (None: not looked yet).
    _packs_on: bool | None = None

    def packs_on(self) -> bool:
        """Whether the store may hold a turn pack in this snapshot: one seek, once a
        transaction, until this process has seen one (a store without packs reads
        its plain records alone)."""
        on = self._packs_on
        if on is None:
            db = self.dbs.pack_index
            if db is None:
                on = False
            else:
                # Once any snapshot held a pack, every later one is read through
                # the packs (an empty index merges nothing: only slower).
                on = self.env.packs_seen or bool(self.txn.cursor(db=db).first())
                self.env.packs_seen = on
            self._packs_on = on
        return on

    def pack(self, index_key: bytes, seq: bytes) -> Pack:
        """The pack numbered ``seq`` whose index key is ``index_key`` (decoded once
        per stored bytes: the environment keeps the latest ones).

        Raises:
            CorruptRecordError: The index names a pack that is not there, or the
                pack is damaged (:func:`~deltalog.engine.packs.decode_pack`).
        """
        raw = self.txn.get(seq, db=self.dbs.packs)
        where = f"packs/{bytes(seq).hex()}"
        if raw is None:
            raise CorruptRecordError(
                f"pack_index/{bytes(index_key).hex()} names {where}, which is missing; run "
                "`deltalog verify`"
            )
        cache = self.env.pack_cache
        hit = cache.get((index_key, raw))
        if hit is None:
            hit = decode_pack(
                self.codec, bytes(index_key), bytes(raw), where, lambda: self.pack_chunks(seq)
            )
            if len(cache) >= PACK_CACHE_ENTRIES:
                cache.clear()
            cache[(bytes(index_key), bytes(raw))] = hit
        return hit

    def pack_chunks(self, seq: bytes, *, with_pack: bool = False) -> bytes:
        """The chunks of the pack numbered ``seq``, concatenated (format 16); with
        ``with_pack``, the pack's own record before them (its stored bytes)."""
        cur = self.txn.cursor(db=self.dbs.packs)
        parts: list[bytes] = []
        ok = cur.set_range(seq if with_pack else chunk_key(seq, 1))
        while ok and cur.key()[:SEQ_SIZE] == seq:
            parts.append(bytes(cur.value()))
            ok = cur.next()
        return b"".join(parts)

    def pack_at(self, key: bytes, below: bytes | None = None) -> tuple[bytes, bytes, Pack] | None:
        """``(index key, number, pack)`` of the pack whose key range holds ``key``
        (the one with the smallest index key at or above it, if its least key is
        not above ``key``; with ``below``, if its least key is below ``below``: the
        pack holding any key from ``key`` up to ``below``), or None."""
        if not self.packs_on():
            return None
        cur = self.txn.cursor(db=self.dbs.pack_index)
        if not cur.set_range(key):
            return None
        index_key = bytes(cur.key())
        if below is None and not index_key.startswith(prefix_of(key)):
            # A later namespace's pack: its keys are all above ``key`` (the
            # common case of a put at a namespace's head; no pack read).
            return None
        seq = bytes(cur.value())
        found = self.pack(index_key, seq)
        held = found.least <= key if below is None else found.least < below
        return (index_key, seq, found) if held else None

    def _merged(self, plain: Any, kind: int) -> Any:
        """``plain`` merged with the packs' entries of ``kind`` (0 checkpoints, 1 writes)."""
        if not self.packs_on():
            return plain

        def load(index_key: bytes, seq: bytes) -> list[Entry]:
            found = self.pack(index_key, seq)
            return found.checkpoints if kind == 0 else found.writes

        return MergedCursor(plain, PackCursor(self.txn.cursor(db=self.dbs.pack_index), load))

    def _packed_get(self, key: bytes, kind: int) -> bytes | None:
        found = self.pack_at(key)
        if found is None:
            return None
        entries = found[2].checkpoints if kind == 0 else found[2].writes
        at = bisect.bisect_left(entries, (key, b""))
        return entries[at][1] if at < len(entries) and entries[at][0] == key else None

    def checkpoint_cursor(self) -> Any:
        """A cursor over the checkpoint records in key order, plain and packed, with
        LMDB's moves (``set_key``, ``set_range``, ``first``, ``last``, ``next``,
        ``prev``, ``key``, ``value``, ``iternext``; :mod:`~deltalog.engine.merged`)."""
        return self._merged(self.txn.cursor(db=self.dbs.checkpoints), 0)

    def write_cursor(self) -> Any:
        """A cursor over the write records in key order (see :meth:`checkpoint_cursor`)."""
        return self._merged(self.txn.cursor(db=self.dbs.writes), 1)

    def checkpoint_raw(self, key: bytes) -> bytes | None:
        """The checkpoint record at ``key`` (plain, or as a packed entry reads), or None."""
        raw: bytes | None = self.txn.get(key, db=self.dbs.checkpoints)
        return raw if raw is not None else self._packed_get(key, 0)

    def write_raw(self, key: bytes) -> bytes | None:
        """The write (channel uid, then the record) at ``key``, or None."""
        raw: bytes | None = self.txn.get(key, db=self.dbs.writes)
        return raw if raw is not None else self._packed_get(key, 1)

    def raw_records(self) -> Iterator[tuple[bytes, bytes]]:
        """Every checkpoint and write record and every pack as stored: ``(key, value)``
        of the plain records, then ``(index key, number · pack)`` of each pack (for
        the bytes a thread takes, not to read records by)."""
        for db in (self.dbs.checkpoints, self.dbs.writes):
            yield from self.txn.cursor(db=db).iternext(keys=True, values=True)
        if self.packs_on():
            for index_key, seq in self.txn.cursor(db=self.dbs.pack_index):
                stored = self.pack_chunks(bytes(seq), with_pack=True)
                yield bytes(index_key), bytes(seq) + stored

    def has_packs_under(self, prefix: bytes) -> bool:
        """Whether a pack's index key starts with ``prefix`` (a thread's)."""
        if not self.packs_on():
            return False
        cur = self.txn.cursor(db=self.dbs.pack_index)
        return bool(cur.set_range(prefix)) and bytes(cur.key()).startswith(prefix)

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
        """Key of the greatest checkpoint id in (thread, ns): one cursor seek (R4), and
        in a store with packs one more, in the index (the newest checkpoints stay plain:
        a plain key above the namespace's last pack is the latest)."""
        prefix = keys.ns_prefix(t, n)
        end = prefix_end(prefix)
        cur = self.txn.cursor(db=self.dbs.checkpoints)
        found = cur.prev() if cur.set_range(end) else cur.last()
        plain: bytes | None = bytes(cur.key()) if found else None
        if plain is not None and not plain.startswith(prefix):
            plain = None
        if not self.packs_on():
            return plain
        index = self.txn.cursor(db=self.dbs.pack_index)
        found = index.prev() if index.set_range(end) else index.last()
        if not found or not bytes(index.key()).startswith(prefix):
            return plain
        if plain is not None and plain > bytes(index.key()):
            return plain
        merged = self.checkpoint_cursor()  # the latest is packed (after deletions)
        found = merged.prev() if merged.set_range(end) else merged.last()
        key: bytes = merged.key() if found else b""
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
        self.unpack(key)
        self.txn.put(key, raw, db=self.dbs.checkpoints)

    def put_at_end(self, db: Any, key: bytes, value: bytes, *, overwrite: bool = True) -> bool:
        """``txn.put``, appended (``MDB_APPEND``) when ``value`` is at least
        :data:`APPEND_MIN` bytes and ``key`` sorts after every key of ``db`` (the
        newest thread's records go there). Returns whether it was stored.

        A put at the end of a B-tree without the flag splits the last page and
        leaves room in its left part that no later key uses (measured at
        :data:`APPEND_MIN`). LMDB refuses an append of a key that is not the
        greatest (py-lmdb returns False), and then the put is made the ordinary
        way, with the same ``overwrite``.
        """
        if len(value) >= APPEND_MIN and self.txn.put(
            key, value, append=True, overwrite=overwrite, db=db
        ):
            return True
        stored: bool = self.txn.put(key, value, overwrite=overwrite, db=db)
        return stored

    def put_write_raw(self, key: bytes, raw: bytes, *, overwrite: bool = True) -> bool:
        """Store a write (channel uid, then the framed record) at ``key``; with
        ``overwrite`` False a write already there stays. Returns whether it was stored."""
        self.unpack(key)
        return self.put_at_end(self.dbs.writes, key, raw, overwrite=overwrite)

    def delete_checkpoint_raw(self, key: bytes) -> bool:
        """Delete the checkpoint record at ``key`` (not its writes); whether there was one."""
        self.unpack(key)
        deleted: bool = self.txn.delete(key, db=self.dbs.checkpoints)
        return deleted

    def delete_writes_raw(self, prefix: bytes) -> int:
        """Delete every write whose key starts with ``prefix`` (a checkpoint's key:
        its writes); return how many."""
        self.unpack(prefix, prefix_end(prefix))
        return self.delete_prefix(self.dbs.writes, prefix)

    # -- turn packs (docs/design.md, "Turn packs") -------------------------------------

    def unpack(self, key: bytes, below: bytes | None = None) -> int:
        """Turn the pack whose key range holds ``key`` (with ``below``: any key from
        ``key`` up to, not including, ``below``) back into plain records, so a
        put or delete there changes plain records only. Returns how many records
        it wrote."""
        at = self.pack_at(key, below)
        if at is None:
            return 0
        index_key, seq, found = at
        self.env.pack_tails.pop(prefix_of(index_key), None)
        checkpoint_bodies, write_bodies = found.checkpoint_bodies(), found.write_bodies()
        for ckey, body, compact in checkpoint_bodies:
            raw = self.codec.encode_body(body, key=ckey, compact=compact)
            self.txn.put(ckey, raw, db=self.dbs.checkpoints)
        for wkey, body, channel in write_bodies:
            raw = channel + self.codec.encode_body(body, prefix=channel, key=wkey)
            self.txn.put(wkey, raw, db=self.dbs.writes)
        stored_checkpoints, stored_writes = found.stored_records()
        for ckey, raw in stored_checkpoints:
            self.txn.put(ckey, raw, db=self.dbs.checkpoints)
        for wkey, raw in stored_writes:
            self.txn.put(wkey, raw, db=self.dbs.writes)
        self.txn.delete(index_key, db=self.dbs.pack_index)
        self._delete_pack(seq)
        return (
            len(checkpoint_bodies)
            + len(write_bodies)
            + len(stored_checkpoints)
            + len(stored_writes)
        )

    def _delete_pack(self, seq: bytes) -> None:
        """Delete the pack numbered ``seq`` from the log, and its chunks (keyed after
        it under the same number)."""
        cur = self.txn.cursor(db=self.dbs.packs)
        ok = cur.set_range(seq)
        while ok and cur.key()[:SEQ_SIZE] == seq:
            ok = cur.delete()

    def pack_behind(self, t: int, n: int, key: bytes | None = None, raw: bytes = b"") -> bool:
        """Pack the oldest plain checkpoints of (thread, ns) after its last pack, and
        their writes, leaving the newest :data:`~deltalog.engine.packs.PACK_KEEP`
        plain, once :func:`~deltalog.engine.packs.pack_due` finds enough of them
        to fill the page space :func:`~deltalog.engine.packs.pack_room` gives: as
        many as :func:`~deltalog.engine.packs.pack_cut` fits there (one fewer at
        a time while the pack comes out larger). Records
        :func:`~deltalog.engine.packs.packable` refuses stay plain. Returns
        whether it wrote a pack.

        ``key`` and ``raw``: the checkpoint record the caller just stored. When
        this process's tail of the namespace (``pack_tails``, what its last look
        found) ends at the plain record just below ``key``, the record is added
        to it and the tail decides whether a pack is due, without reading the
        plain records again (two cursor moves instead of ~40 GIL-releasing LMDB
        calls; docs/benchmarks.md, stop 46). A tail that another process or an
        aborted write made stale fails that check, or counts records that are
        gone (a look sooner) or misses some (a pack later): never data."""
        if self.dbs.packs is None:
            return False
        prefix = keys.ns_prefix(t, n)
        page_size, tail = self.codec.page_size, self.env.pack_tail_free
        room = pack_room(tail, page_size)
        known = self.env.pack_tails.pop(prefix, None)
        if known is not None and key is not None:
            cur = self.txn.cursor(db=self.dbs.checkpoints)
            if cur.set_range(key) and cur.prev() and cur.key() == known[0]:
                sizes = known[1]
                sizes.append(cut_size(raw))
                waiting = sizes[: max(0, len(sizes) - PACK_KEEP)]
                if not pack_due(waiting, self.env.pack_checkpoint_ratio, room):
                    self._keep_tail(prefix, key, sizes)
                    return False
        start = prefix
        if self.packs_on():
            icur = self.txn.cursor(db=self.dbs.pack_index)
            ok = icur.prev() if icur.set_range(prefix_end(prefix)) else icur.last()
            if ok and bytes(icur.key()).startswith(prefix):
                start = bytes(icur.key()) + b"\x00"
        cur = self.txn.cursor(db=self.dbs.checkpoints)
        plain: list[tuple[bytes, bytes]] = []
        ok = cur.set_range(start)
        while ok and len(plain) < PACK_KEEP + PACK_MAX:
            ckey = bytes(cur.key())
            if not ckey.startswith(prefix):
                break
            plain.append((ckey, bytes(cur.value())))
            ok = cur.next()
        # The look saw the whole tail when it stopped before its limit.
        whole = len(plain) < PACK_KEEP + PACK_MAX
        plain_sizes = [cut_size(raw) for _, raw in plain]
        candidates = plain[: max(0, len(plain) - PACK_KEEP)]
        checkpoint_sizes = plain_sizes[: len(candidates)]
        if not pack_due(checkpoint_sizes, self.env.pack_checkpoint_ratio, room):
            if whole and plain:
                self._keep_tail(prefix, plain[-1][0], plain_sizes)
            return False
        # Each candidate's writes (keyed after it, before the next checkpoint),
        # and its stored bytes with theirs.
        groups: list[list[tuple[bytes, bytes, bytes]]] = [[] for _ in candidates]
        sizes = list(checkpoint_sizes)
        wcur = self.txn.cursor(db=self.dbs.writes)
        ok = wcur.set_range(plain[0][0])
        i = 0
        while ok:
            wkey = bytes(wcur.key())
            if wkey >= plain[len(candidates)][0]:
                break
            while wkey >= plain[i + 1][0]:
                i += 1
            value = bytes(wcur.value())
            channel, _, record = split_write_value(value)
            sizes[i] += len(value) if packable(record) else 0
            groups[i].append((wkey, channel, record))
            ok = wcur.next()
        m = pack_cut(sizes, self.env.pack_ratio, room)
        # The bodies each checkpoint brings (its record's, its writes'), made once;
        # a large record as it is stored, for the pack's chunks (format 16).
        bring: list[
            tuple[
                list[tuple[bytes, bytes | Stored, bool]], list[tuple[bytes, bytes | Stored, bytes]]
            ]
        ] = []
        carried = 0  # bytes of large records the pack carries: at most CARRY_MAX

        def carry(raw: bytes) -> bool:
            nonlocal carried
            if not outside(raw) or carried + len(raw) > CARRY_MAX:
                return False
            carried += len(raw)
            return True

        for (ckey, raw), group in zip(plain[:m], groups, strict=False):
            mine: list[tuple[bytes, bytes | Stored, bool]] = []
            found = body_of(self.codec, ckey, raw)
            if found is not None:
                mine.append((ckey, found[0], found[1]))
            elif carry(raw):
                mine.append((ckey, Stored(raw), False))  # its own tag tells
            theirs: list[tuple[bytes, bytes | Stored, bytes]] = []
            for wkey, channel, record in group:
                found = body_of(self.codec, wkey, record, channel)
                if found is not None:
                    theirs.append((wkey, found[0], channel))
                elif carry(record):
                    theirs.append((wkey, Stored(record), channel))
            bring.append((mine, theirs))
        # Cut at level 3 first (a pack at the dense level costs ~30 times as much),
        # its size scaled by the last dense pack's over its level-3 one; then one
        # checkpoint fewer at a time while the dense pack still does not fit. The
        # trial that holds is the level-3 frame the dense pack starts from. Each
        # trial is offered to the dictionary's samples, and the pack's body once
        # more when it is written: with each pack body sampled once, the final
        # dictionary came ~30 turns later and packs filled their pages less well
        # up to turn ~200 (docs/benchmarks.md, stop 46).
        trial: Ahead | None = None
        guessed = True
        while True:
            checkpoints = [c for mine, _ in bring[:m] for c in mine]
            writes = [w for _, theirs in bring[:m] for w in theirs]
            if not checkpoints and not writes:
                return False
            index_key, body, chunked = pack_body(checkpoints, writes)
            if guessed:
                trial = self.codec.compress_ahead(body, len(index_key), 0, dense=False, sample=True)
                if m > 1 and leaf_slot(round(trial.size * self.env.pack_dense_ratio)) > room:
                    m -= 1
                    continue
            record = self.codec.encode_body(body, key=index_key, ahead=trial if guessed else None)
            if m == 1 or leaf_slot(len(record)) <= room:
                break
            m, guessed = m - 1, False
        if guessed and trial is not None and len(record) != trial.size:
            self.env.pack_dense_ratio = len(record) / trial.size
        if sum(checkpoint_sizes[:m]) >= RATIO_MIN_BYTES:
            self.env.pack_ratio = len(record) / sum(sizes[:m])
            self.env.pack_checkpoint_ratio = len(record) / sum(checkpoint_sizes[:m])
        tail = tail_after(len(record), tail, page_size)
        log = self.txn.cursor(db=self.dbs.packs)
        last = int.from_bytes(log.key()[:SEQ_SIZE], "big") if log.last() else 0
        seq = (last + 1).to_bytes(SEQ_SIZE, "big")
        self.txn.put(seq, record, db=self.dbs.packs, append=True)
        if chunked:
            cuts, tail = chunk_sizes(len(chunked), tail, page_size)
            at = 0
            for number, size in enumerate(cuts, 1):
                chunk = chunked[at : at + size]
                self.txn.put(chunk_key(seq, number), chunk, db=self.dbs.packs, append=True)
                at += size
        self.env.pack_tail_free = tail
        self.txn.put(index_key, seq, db=self.dbs.pack_index)
        for ckey, _, _ in checkpoints:
            self.txn.delete(ckey, db=self.dbs.checkpoints)
        for wkey, _, _ in writes:
            self.txn.delete(wkey, db=self.dbs.writes)
        self._packs_on = True
        # What stays plain behind the pack (keys sorted: the first above its index key on).
        rest = next((i for i, (k, _) in enumerate(plain) if k > index_key), None)
        if whole and rest is not None:
            self._keep_tail(prefix, plain[-1][0], plain_sizes[rest:])
        return True

    def _keep_tail(self, prefix: bytes, last: bytes, sizes: list[int]) -> None:
        """Remember a namespace's plain tail for :meth:`pack_behind`: ``last``, its
        newest key, and the :func:`~deltalog.engine.packs.cut_size` of each of
        its checkpoints, oldest first (of at most :data:`PACK_TAILS` namespaces)."""
        tails = self.env.pack_tails
        if len(tails) >= PACK_TAILS:
            tails.clear()
        tails[prefix] = (last, sizes)

    def delete_packs_under(self, prefix: bytes) -> int:
        """Delete every pack whose index key starts with ``prefix`` (a thread's)."""
        if not self.packs_on():
            return 0
        cur = self.txn.cursor(db=self.dbs.pack_index)
        doomed: list[tuple[bytes, bytes]] = []
        ok = cur.set_range(prefix)
        while ok and bytes(cur.key()).startswith(prefix):
            doomed.append((bytes(cur.key()), bytes(cur.value())))
            ok = cur.next()
        for index_key, seq in doomed:
            self.txn.delete(index_key, db=self.dbs.pack_index)
            self._delete_pack(seq)
        return len(doomed)

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
