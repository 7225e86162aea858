"""Channel values: blob records and delta blobs (put, resolve, rebase), and inline values.

A value of at least :data:`DELTA_MIN` bytes is stored as a zstd delta of an
earlier version of its channel (skip deltas keep chains within 3 links per
base-4 digit of the versions, plus a link per ~2 MiB of growth on very long
threads);
a delta may also take the channel's recent writes as its dictionary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator
from typing import Any, Final

from deltalog.engine import keys
from deltalog.engine.codec import DeltaHeader, WriteDict, array_items
from deltalog.engine.core import skip_base
from deltalog.engine.envelope import (
    INPUT_CHANNEL,
    TaskPath,
    WriteRef,
    inline_value,
    read_write,
    ref_payload,
    split_write_value,
)
from deltalog.engine.errors import (
    CorruptRecordError,
)
from deltalog.engine.store_rows import (
    CheckpointRow,
    StoredValue,
    Typed,
    Version,
    WriteRow,
)
from deltalog.engine.txn_base import (
    TxnBase,
    WriteBase,
)

# Blob values at least this large are stored as deltas of the channel's previous
# version (smaller ones gain little and would lengthen chains for nothing).
DELTA_MIN: Final = 4096
# Skip deltas keep chains near log2(versions), plus at most ~32 split links
# (link_span); a chain longer than this is damage (a loop), not data.
MAX_LINKS: Final = 64
# A delta blob's dictionary takes the channel's recent writes when the value
# grew by at least this much since its base, collecting about twice the growth
# (at most WRITE_DICT_MAX bytes, scanning at most WRITE_SCAN_MAX writes).
WRITE_DICT_MIN: Final = 256
WRITE_DICT_MAX: Final = 16 * 1024**2
WRITE_SCAN_MAX: Final = 20_000
# A skip-delta link whose value grew by more than this since its base is split
# (a base fewer versions back; see link_span): zstd level 11 finds the new
# messages among ~2 MB of writes, not among 4. The sf=100 chat's 192nd
# snapshot (11.7 MB) cost 1.5 KB over the previous one, 14.8 KB over 16
# versions back (1.0 MB of writes), 37 KB over 32 (2.0 MB), 51 KB over 40
# (2.5 MB) and 269 KB over 64 (3.9 MB, its skip-delta base). A split link
# covers at least ~1 MiB of growth, so values up to SPLIT_MAX add at most ~32
# links to a chain; larger ones keep their skip-delta base, so no chain passes
# MAX_LINKS (the longest in a simulation of 5 KB to 12 MB of growth a version,
# up to 3,000 versions or 512 MiB: 37 links).
LINK_GROWTH: Final = 2 * 1024**2
SPLIT_MAX: Final = 32 * 1024**2
# A read transaction keeps the writes its delta blobs' dictionaries decoded, up
# to this many payload bytes: a dictionary holds about twice its link's growth
# (WRITE_DICT_MIN above), so the links of one chain read most writes twice.
WRITE_MEMO_MAX: Final = 64 * 1024**2


def link_span(size: int, base_size: int, distance: int) -> int | None:
    """How many versions back a new delta blob's base may be, when its skip-delta
    base is too far; None when that base will do.

    Args:
        size: The new value's payload bytes.
        base_size: The skip-delta base's payload bytes.
        distance: How many indices back that base is.

    Returns:
        The largest power of two of versions that, at the average growth per
        version since the base, stays within ``LINK_GROWTH``; at least 1. None
        when the growth is within that already, the base is one version back,
        or the value is larger than ``SPLIT_MAX``.

    >>> link_span(11_700_000, 7_800_000, 64)  # 3.9 MB over 64 versions: 32 back
    32
    >>> link_span(11_700_000, 9_800_000, 32) is None  # 1.9 MB: the base will do
    True
    """
    growth = size - base_size
    if distance <= 1 or growth <= LINK_GROWTH or size > SPLIT_MAX:
        return None
    span = 1
    while 2 * span < distance and 2 * span * growth <= LINK_GROWTH * distance:
        span *= 2
    return span


def _sort_key(row: WriteRow) -> tuple[str, str, int]:
    """LangGraph's ``writes_sort_key`` of a row: (task path, task id, idx)."""
    return row.task_path, row.task_id, row.idx


_Part = tuple[bytes, tuple[str, str, int], bytes]
"""(checkpoint key, ``writes_sort_key``, payload) of one write in a write dictionary."""


def _in_sort_order(parts: list[_Part], items: bool) -> bytes:
    """The payloads of ``parts`` (checkpoint keys in key order), each checkpoint's run of
    parts sorted by ``writes_sort_key``; with ``items``, each payload's
    :func:`~deltalog.engine.codec.array_items` (format 15)."""
    out: list[bytes | memoryview] = []
    i = 0
    while i < len(parts):
        j = i + 1
        while j < len(parts) and parts[j][0] == parts[i][0]:
            j += 1
        run = parts[i:j] if j - i == 1 else sorted(parts[i:j], key=lambda p: p[1])
        out.extend(array_items(p[2]) if items else p[2] for p in run)
        i = j
    return b"".join(out)


class _WriteMemo:
    """The decoded writes of one read transaction's write dictionaries, by write key.

    A cold read of a 10,000-turn sf=100 thread's seed resolves ~10 delta links
    whose dictionaries span 36,752 writes to ``messages``, 20,000 of them
    distinct. An LMDB read transaction sees one snapshot, so a write key
    stands for one record while it lasts; write transactions keep no memo.
    """

    __slots__ = ("parts", "size")

    def __init__(self) -> None:
        self.parts: dict[bytes, _Part] = {}
        self.size = 0

    def put(self, key: bytes, part: _Part) -> None:
        if self.size < WRITE_MEMO_MAX:
            self.parts[key] = part
            self.size += len(key) + len(part[2])


class BlobReads(TxnBase):
    """Reading channel values: blobs (resolving delta links) and inline values."""

    _write_memo: _WriteMemo | None = None

    def values(
        self,
        t: int,
        n: int,
        key: bytes,
        versions: dict[str, Version],
        inline: dict[str, list[Any]],
        blobbed: int | None = None,
    ) -> dict[str, StoredValue]:
        """Stored values of a checkpoint's channel versions (empty versions are absent).

        A value the record ``key`` holds itself (``inline``) is taken from it;
        the others are read from their blobs. A version the record's ``blobbed``
        mask (format 5) says has a blob, where none is found, is damage
        (CorruptRecordError), never an empty channel.
        """
        out: dict[str, StoredValue] = {}
        for i, (channel, version) in enumerate(versions.items()):
            typed = inline.get(channel)
            value = (
                self.blob(t, n, channel, version)
                if typed is None
                else inline_value(key, channel, typed)
            )
            if value is not None:
                out[channel] = value
            elif blobbed is not None and blobbed >> i & 1:
                raise CorruptRecordError(
                    f"channel {channel!r} at version {version!r} has a stored value by its "
                    f"checkpoint record checkpoints/{key.hex()}, but no blob holds it; run "
                    "`deltalog verify` and restore from a backup"
                )
        return out

    def blob(self, t: int, n: int, channel: str, version: Version) -> StoredValue | None:
        """One stored channel value, still encoded, or None if that version stored nothing.

        The record is decoded by the caller (through a cache of decoded values),
        so a value read again costs no deserialization.
        """
        c = self.name_id(keys.KIND_CHANNEL, channel)
        if c is None:
            return None
        key = keys.blob_key(t, n, c, version, legacy=self.legacy_blobs)
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
        hit = self.env.payloads.get(raw)
        if hit is not None:
            return hit
        where = f"blobs/{key.hex()}"
        head = self.codec.delta_header(raw, where, key=key)
        if head is None:
            rec = self.codec.decode(raw, where, key=key)
            typed: Typed = (rec[0], rec[1])
        else:
            base_payload = b""
            if head.ref:
                base_key = keys.blob_base_key(key, head.ref, legacy=self.legacy_blobs)
                base_raw = self.txn.get(base_key, db=self.dbs.blobs)
                if base_raw is None or links >= MAX_LINKS:
                    raise CorruptRecordError(
                        f"record {where} is a delta of blobs/{base_key.hex()}, which is "
                        f"{'missing' if base_raw is None else 'too many links away'}; run "
                        "`deltalog verify` and restore from a backup"
                    )
                base_payload = self.blob_typed(base_key, base_raw, links + 1)[1]
            content = self._range_content(key, head)
            rec = self.codec.decode_delta(head, base_payload, where, content)
            typed = (rec[0], rec[1])
        if len(typed[1]) >= DELTA_MIN:
            self.env.payloads.put(raw, typed)
        return typed

    def writes(
        self, checkpoint_key: bytes, channels: dict[bytes, str] | None = None
    ) -> list[WriteRow]:
        """Writes stored under one checkpoint, in ``writes_sort_key`` order (R1).

        Keys sort by task id (format 7), so the rows are sorted by (task path,
        task id, idx) here: a few per checkpoint.

        Args:
            checkpoint_key: The checkpoint's key (also the prefix of its writes).
            channels: When given, only writes whose channel uid bytes are a key of
                this map are decoded; the others are skipped without decoding.
        """
        out: list[WriteRow] = []
        cur = self.write_cursor()
        if not cur.set_range(checkpoint_key):
            return out
        plen = len(checkpoint_key)
        for key, raw in cur:
            if not key.startswith(checkpoint_key):
                break
            cbytes, channel_id, record = split_write_value(raw)
            if channels is not None:
                channel = channels.get(cbytes)
                if channel is None:
                    continue
            else:
                channel = self.name_of(keys.KIND_CHANNEL, channel_id)
            task_path, task_id, idx, typed = self.write_row(key, plen, cbytes, record)
            out.append(WriteRow(task_id, channel, typed, task_path, idx))
        if len(out) > 1:
            out.sort(key=_sort_key)
        return out

    def write_row(
        self, key: bytes, cid_end: int, cbytes: bytes, record: bytes
    ) -> tuple[str, str, int, Typed]:
        """(task path, task id, idx, (type, payload)) of the write at ``key``, whose
        checkpoint id ends at ``cid_end``, behind channel uid ``cbytes``."""
        where = f"writes/{key.hex()}"
        try:
            if self.legacy_writes:
                task_path, task_id, idx = keys.legacy_write_suffix(key, cid_end)
            else:
                task_id, idx = keys.write_suffix(key, cid_end)
                task_path = ""
        except Exception as exc:
            raise CorruptRecordError(f"key {where} cannot be decoded ({exc})") from exc
        ctype, payload, stored_path = self._write_fields(key, cbytes, record, where)
        if stored_path is None:
            if not self.legacy_writes:
                raise CorruptRecordError(
                    f"record {where} holds no task path; run `deltalog verify`"
                )
        elif type(stored_path) is int:  # format 10: the path's interned id
            task_path = self.name_of(keys.KIND_TASK_PATH, stored_path)
        else:
            task_path = str(stored_path)
        return task_path, task_id, idx, (ctype, payload)

    def write_typed(self, key: bytes, cbytes: bytes, record: bytes) -> Typed:
        """The ``(type, payload)`` of the write record at ``key`` (behind channel uid
        ``cbytes``), following a reference into its checkpoint's input (format 7).
        """
        ctype, payload, _ = self._write_fields(key, cbytes, record, f"writes/{key.hex()}")
        return ctype, payload

    def _write_fields(
        self, key: bytes, cbytes: bytes, record: bytes, where: str
    ) -> tuple[str, bytes, TaskPath | None]:
        """(type, payload, task path as stored: None before format 7, an interned id in
        most records of format 10) of a write record, its reference into the
        checkpoint's input followed."""
        ctype, payload, stored_path = read_write(
            self.codec.decode(record, where, prefix=cbytes, key=key), where
        )
        if not isinstance(payload, bytes):
            payload = self._referred(key, payload, where)
        return ctype, payload, stored_path

    def _referred(self, key: bytes, ref: WriteRef, where: str) -> bytes:
        """The payload a write at ``key`` refers to in its checkpoint's input.

        Costs the checkpoint's envelope (cached; it holds a short input itself) or
        the input blob's payload; a missing source, or one whose bytes no longer
        match the reference's CRC, is damage (CorruptRecordError), never another
        value.
        """
        ckey = keys.write_checkpoint_key(key)
        source = self._input_of(ckey, ref[0])
        if source is None:
            raise CorruptRecordError(
                f"record {where} refers to the input of checkpoints/{ckey.hex()}, which is "
                "missing; run `deltalog verify` and restore from a backup"
            )
        return ref_payload(source[1], ref, where)

    def _input_of(self, ckey: bytes, channel_id: int | None = None) -> Typed | None:
        """The value checkpoint ``ckey`` stores for its input channel (a blob), or None.

        ``channel_id`` is the interned id of :data:`INPUT_CHANNEL` when the caller
        has it (a reference names it).
        """
        raw = self.checkpoint_raw(ckey)
        if raw is None:
            return None
        _, versions, inline, _ = self._envelope(ckey, raw)
        if channel_id is None:
            channel, channel_id = INPUT_CHANNEL, self.name_id(keys.KIND_CHANNEL, INPUT_CHANNEL)
        else:
            channel = self.name_of(keys.KIND_CHANNEL, channel_id)
        version = versions.get(channel)
        if version is None or channel_id is None:
            return None
        held = inline.get(channel)
        if held is not None:
            return held[0], held[1]
        (t, n), _ = keys.split_ids(ckey, 2)
        key = keys.blob_key(t, n, channel_id, version, legacy=self.legacy_blobs)
        braw = self.txn.get(key, db=self.dbs.blobs)
        if braw is None:
            return None
        typed = self.env.payloads.get(braw)
        if typed is None:
            typed = self.blob_typed(key, braw)
            # Kept decoded whatever its size (blob_typed keeps only large payloads):
            # a cold walk reads the input once per write that refers to it.
            self.env.payloads.put(braw, typed)
        return typed

    def _range_content(self, blob_key: bytes, head: DeltaHeader) -> bytes:
        """:meth:`write_content` of a delta blob's write range (its thread, ns and
        channel) in the form its header names; empty when it has none."""
        span = head.span
        if span is None:
            return b""
        (t, n), _ = keys.split_ids(blob_key, 2)
        cbytes = keys.blob_channel(blob_key, legacy=self.legacy_blobs)
        return self.write_content(keys.ns_prefix(t, n), cbytes, *span, items=head.items)

    def write_content(
        self, prefix: bytes, cbytes: bytes, lo: bytes, hi: bytes, *, items: bool
    ) -> bytes:
        """Payloads of the writes (idx ≥ 0) to one channel under checkpoints ``lo`` … ``hi``.

        Args:
            prefix: The (thread, ns) key prefix.
            cbytes: The channel's uid bytes.
            lo: Encoded id of the first checkpoint (inclusive).
            hi: Encoded id of the last checkpoint (inclusive).
            items: Each payload without its top-level msgpack array header
                (:func:`~deltalog.engine.codec.array_items`), as a dictionary of
                format 15 on holds them.

        Returns:
            The payloads concatenated checkpoint by checkpoint in key order, each
            checkpoint's in ``writes_sort_key`` order (the order of the write keys
            of formats 1-6, so a dictionary keeps its bytes across the format 7
            upgrade): a delta blob's write dictionary.
        """
        parts: list[_Part] = []
        plen = len(prefix)
        memo = self._writes_memo()
        cur = self.write_cursor()
        ok = cur.set_range(prefix + lo)
        while ok:
            key = cur.key()
            if not key.startswith(prefix):
                break
            cid_end = keys.id_end(key, plen)
            if key[plen:cid_end] > hi:
                break
            raw = cur.value()
            part = memo.parts.get(key) if memo is not None and raw.startswith(cbytes) else None
            if part is None:
                found = self._write_payload(key, cid_end, raw, cbytes)
                if found is not None:
                    part = (key[:cid_end], *found)
                    if memo is not None:
                        memo.put(key, part)
            if part is not None:
                parts.append(part)
            ok = cur.next()
        return _in_sort_order(parts, items)

    def _writes_memo(self) -> _WriteMemo | None:
        """This read transaction's :class:`_WriteMemo` (None in a write transaction,
        whose records may still change)."""
        if not self.memo_reads:
            return None
        if self._write_memo is None:
            self._write_memo = _WriteMemo()
        return self._write_memo

    def _write_payload(
        self, key: bytes, cid_end: int, raw: bytes, cbytes: bytes
    ) -> tuple[tuple[str, str, int], bytes] | None:
        """(``writes_sort_key``, payload) of a write if it goes to channel ``cbytes`` with
        idx ≥ 0."""
        if not raw.startswith(cbytes) or keys.write_idx(key) < 0:
            return None
        found, _, record = split_write_value(raw)
        if found != cbytes:
            return None
        task_path, task_id, idx, typed = self.write_row(key, cid_end, found, record)
        return (task_path, task_id, idx), typed[1]

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
        raw = self.checkpoint_raw(key)
        if raw is None:
            return None
        try:
            row = self._decode_checkpoint(t, n, key, raw)
            if with_values:
                row.values = self.values(t, n, key, row.channel_versions, row.inline, row.blobbed)
            if with_writes:
                row.writes = self.writes(key)
        except CorruptRecordError as exc:
            cid = checkpoint_id or f"key {key.hex()}"
            with contextlib.suppress(Exception):
                cid = keys.decode_checkpoint_key(key)[2]
            raise self._damaged(t, n, cid, exc) from exc
        return row


class BlobWrites(WriteBase, BlobReads):
    """Storing channel values: blobs, delta blobs and their rebasing."""

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
        *skip-delta* bases (Subversion's FSFS scheme, in base 4:
        :func:`~deltalog.engine.core.skip_base`): the n-th stored version of a
        channel since its last full record is compressed against the version
        whose index is n less the place value of its lowest nonzero base-4
        digit (the version before it, for three in four). A read resolves at
        most the digit sum of n links — 3 per base-4 digit — and a version
        costs about the content added since its base, so neither
        reads nor per-version bytes grow with the thread the way periodic
        full "keyframes" do (with a keyframe every 8 links, a 3,334-turn chat
        stored 34 MB; see docs/benchmarks.md). A link whose value grew by more
        than ``LINK_GROWTH`` since that base takes a nearer one
        (:func:`link_span`).

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
        if not (self.env.delta_blobs and len(typed[1]) >= DELTA_MIN):
            # No base to look for: a put that may not overwrite checks for the key.
            record = self.codec.encode(list(typed), key=key)
            if not self.put_at_end(self.dbs.blobs, key, record, overwrite=False):
                return
        else:
            cur = self.txn.cursor(db=self.dbs.blobs)
            if cur.set_key(key):
                return
            base_payload, base_ref, seq = b"", b"", 0
            prefix, cbytes = keys.ns_prefix(t, n), keys.uid(c)
            base = self._skip_delta_base(cur, key, prefix, cbytes)
            base_typed: Typed | None = None
            if base is not None:
                base_typed = self.blob_typed(base[0], base[1])
                span = link_span(len(typed[1]), len(base_typed[1]), base[2] - base[3])
                if span is not None:
                    base = self._skip_delta_base(cur, key, prefix, cbytes, span)
                    base_typed = None if base is None else self.blob_typed(base[0], base[1])
            if base is not None and base_typed is not None:
                base_key, _, base_seq, _ = base
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
                record = self.codec.encode_delta(
                    typed, base_payload, base_ref, seq, writes, key=key
                )
            if record is not None and writes is not None:
                mark = keys.wdep_key(t, n, c)
                old = self.txn.get(mark, db=self.dbs.meta)
                if old is None or bytes(old) < writes.hi:
                    self.txn.put(mark, writes.hi, db=self.dbs.meta)
            if record is None:
                record = self.codec.encode(list(typed), key=key)
            self.put_at_end(self.dbs.blobs, key, record)
        self.memo_blobs.append((t, n, key))
        if len(typed[1]) >= DELTA_MIN:
            self.env.payloads.put(record, typed)
            self.large_blobs.append((record, typed))

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
        parts: list[_Part] = []
        size = scanned = 0
        lo = hi = None
        plen = len(prefix)
        cur = self.write_cursor()
        ok = cur.prev() if cur.set_range(prefix + before) else cur.last()
        while ok:
            key = cur.key()
            if not key.startswith(prefix):
                break
            cid_end = keys.id_end(key, plen)
            cid = key[plen:cid_end]
            if cid != lo and (size >= budget or scanned >= WRITE_SCAN_MAX):
                break
            scanned += 1
            part = self._write_payload(key, cid_end, cur.value(), cbytes)
            if part is not None:
                parts.append((key[:cid_end], *part))
                size += len(part[1])
                hi = hi or cid
                lo = cid
            ok = cur.prev()
        if lo is None or hi is None:
            return None
        parts.reverse()
        return WriteDict(lo, hi, _in_sort_order(parts, True), items=True)

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
        self.memo_everything = True
        doomed = set(doomed)
        prefix = keys.ns_prefix(t, n)
        cbytes = None if channel is None else keys.uid(channel)
        rewrite: list[tuple[bytes, DeltaHeader, Typed, bool]] = []
        cur = self.txn.cursor(db=self.dbs.blobs)
        ok = cur.set_range(prefix)
        while ok and cur.key().startswith(prefix):
            key, raw = cur.key(), cur.value()
            head = (
                None
                if key in doomed or (cbytes is not None and keys.blob_channel(key) != cbytes)
                else self.codec.delta_header(raw, f"blobs/{key.hex()}", key=key)
            )
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
                    record = self.codec.encode_delta(
                        typed, base_payload, head.ref, head.seq, key=key
                    )
            self.txn.put(key, record or self.codec.encode(list(typed), key=key), db=self.dbs.blobs)
        return len(rewrite)

    def _skip_delta_base(
        self, cur: Any, key: bytes, prefix: bytes, cbytes: bytes, span: int | None = None
    ) -> tuple[bytes, bytes, int, int] | None:
        """(base key, base record, new version's index, base's index) for a new blob
        at ``key``: the channel's (uid bytes ``cbytes``) stored versions in the
        (thread, ns) ``prefix``, newest first, given to
        :func:`~deltalog.engine.core.skip_base` (with its ``span``). The walk steps
        over the other channels' blobs between them (blob keys are version-major)."""
        last = [0]

        def newest_first() -> Iterator[int]:  # leaves the cursor on the last index given
            ok = cur.prev() if cur.set_range(key) else cur.last()
            while ok and cur.key().startswith(prefix):
                at = cur.key()
                if keys.blob_channel(at) == cbytes:
                    info = self.codec.delta_info(cur.value(), f"blobs/{at.hex()}", key=at)
                    last[0] = 0 if info is None else info[1]
                    yield last[0]
                ok = cur.prev()

        found = skip_base(newest_first(), span)
        return None if found is None else (cur.key(), cur.value(), found[1], last[0])
