"""The record codec: one object, one fixed order, a tag byte in front.

``encode``: Python record → ormsgpack envelope → zstandard if the envelope is at
least ``compress_threshold`` bytes → ``tag · body · crc32``. The CRC-32 (4
bytes, big-endian) covers tag and body: LMDB keeps no checksums, and without
one about two thirds of single-bit flips in a record still decoded — to wrong
values. Since format 5 it also covers the record's LMDB key (tag bit
:data:`KEYED`): a flipped bit in a key that still decodes to another valid
key — another thread, checkpoint or channel — fails the record's CRC instead
of moving the record there (issue 15.2). Records written before carry no
:data:`KEYED` bit and are checked as before until the format-5 migration
re-frames them (:meth:`RecordCodec.rekey`). ``decode`` checks the CRC, then runs the steps backwards, and turns
every failure into :class:`CorruptRecordError` naming the record, so garbage on
disk never surfaces as a msgpack or zstd exception (or a crash, or an
unbounded allocation).

Channel values, metadata and writes arrive here already serialized by the
saver's ``serde`` (a ``(type, bytes)`` pair), so encryption and LangGraph's
msgpack allowlist stay in the serializer's hands; this codec only frames and
compresses. Tags:

====  ======================================================
tag   body
====  ======================================================
0x00  ormsgpack envelope
0x01  zstandard frame of an ormsgpack envelope
0x02  delta of a ``[type, payload]`` blob against an earlier payload of
      the same channel and, since format 2, the channel's writes stored
      before it; since format 8 also as runs copied from that payload plus
      the bytes between (a *splice*, :mod:`deltalog.engine.splice`; see
      :meth:`RecordCodec.encode_delta`)
0x03  u32 dictionary id, then a zstandard frame compressed with the store's
      trained dictionary of that id (see :meth:`RecordCodec.train`)
0x04  u8 dictionary id, then such a frame stored without the four bytes
      every zstandard frame starts with (:data:`ZSTD_MAGIC`) and without a
      dictionary id of its own (format 9; 0x03 before, and for an id above
      255): 11 bytes less on each record
0x05  the delta of 0x02 with a compact header (format 11): a flags byte,
      varints, raw ids, the base's version in LangGraph's counter form as
      a varint and four bytes, no type field for ``msgpack``, and the frame
      without its magic number (:func:`_pack_delta_body`); ~42 bytes
      less on each delta record, ~7 % of an ``add_messages`` chat's bytes;
      from format 15 its write dictionary holds each payload without its
      top-level array header (flag 0x40, :func:`array_items`)
====  ======================================================

Tag bit :data:`COMPACT` (0x40, format 12) on a checkpoint record: its envelope
is in the compact form of :mod:`deltalog.engine.checkpoint_form`, which
:meth:`RecordCodec.decode` expands with the checkpoint id the key ends in, so
callers always get the full record (:meth:`RecordCodec.encode_checkpoint`
writes it).
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import threading
import zlib
from collections.abc import Callable
from typing import Any, Final, NamedTuple, Protocol, TypeVar

import ormsgpack
import zstandard
from deltalog.engine import checkpoint_form, keys
from deltalog.engine.errors import CorruptRecordError, DamagedKeyError, OptionError
from deltalog.engine.splice import splice_apply, splice_literal, splice_runs

__all__ = [
    "COMPACT",
    "KEYED",
    "Ahead",
    "Compressor",
    "DeltaHeader",
    "RecordCodec",
    "WriteDict",
    "ZstdCompressor",
    "array_items",
    "decode_dictionary",
    "encode_dictionary",
    "fewer_pages_below",
    "frame_plain",
    "leaf_max",
    "rekey",
]

_R = TypeVar("_R")

TAG_PLAIN: Final = 0x00
TAG_ZSTD: Final = 0x01
TAG_DELTA: Final = 0x02
TAG_DICT: Final = 0x03
TAG_DICT_COMPACT: Final = 0x04
TAG_DELTA_COMPACT: Final = 0x05
#: The tags of delta records: their CRC never covers a prefix, and they decode
#: only against their base (:meth:`RecordCodec.delta_header`).
DELTA_TAGS: Final = frozenset({TAG_DELTA, TAG_DELTA_COMPACT})
#: The magic number every zstandard frame starts with; a :data:`TAG_DICT_COMPACT`
#: record leaves it out and a reader puts it back.
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
#: Tag bit (format 5): the record's CRC also covers its LMDB key.
KEYED: Final = 0x80
#: Tag bit (format 12): a checkpoint record in its compact form
#: (:mod:`deltalog.engine.checkpoint_form`), which :meth:`RecordCodec.decode`
#: expands with the checkpoint id its key ends in. Set only with :data:`KEYED`.
COMPACT: Final = 0x40
#: An encoded checkpoint id of a UUID (``keys.encode_id``): a tag and 16 bytes,
#: the last :data:`ID_TAIL` bytes of its checkpoint key.
ID_TAIL: Final = 17
CRC_SIZE: Final = 4
# Envelopes at least this large are compressed with the store's trained
# dictionary once it has one (checkpoint records and writes are 300-1,000
# bytes, where plain zstd gains little: see RecordCodec).
DICT_MIN: Final = 64
#: zstd level of :meth:`ZstdCompressor.compress_fast`.
FAST_LEVEL: Final = -1
DICT_SIZE: Final = 32 * 1024
#: Ids of a store's two record dictionaries (format 9): the final one, trained on
#: the first :data:`TRAIN_BYTES` of records (``meta/dict:1``, the only one before
#: format 9), and an early one, trained on the first :data:`EARLY_BYTES` so that a
#: young store's records are compressed with a dictionary too (``meta/dict:0``).
#: Sampling goes on under the early one until the final one is trained; then the
#: final one compresses every new record, and the early one only decodes.
EARLY_DICT: Final = 0
FINAL_DICT: Final = 1
# The early dictionary: 4 KiB from the first 32 KiB of records (and at least 32
# of them). On the sf=100 chat (bodies of turns 150-300) it compressed a record
# to 129.5 B, against 123.3 B with the final 32 KiB dictionary from 256 KiB and
# 370 B as stored without one (below compress_threshold records are stored
# plain); 16 KiB of samples gave 134.5 B. The sf=100 chat reaches it at turn
# ~11, the final dictionary at turn ~91 (format 11; ~15 and ~122 with the shorter
# checkpoint records of format 12).
EARLY_DICT_SIZE: Final = 4 * 1024
EARLY_BYTES: Final = 32 * 1024
EARLY_RECORDS: Final = 32
#: zstd's dictionary trainer searches its parameters training and testing on all the
#: samples. With its default (three quarters train, the rest test) the ~50 samples of
#: the early dictionary made the choice noisy: checkpoint records of a chat's turns
#: 20-40 came out 90-92 B in some runs and 98-102 B in others; with all of them
#: 5,676-5,850 B against 5,669-6,466 over six runs' samples. The final dictionary's
#: records come out 0.3-1.6 % smaller too, for 4-10 ms more training once per store
#: (docs/benchmarks.md, stop 38).
TRAIN_SPLIT_POINT: Final = 1.0
# Train once this many sample bytes (and records) were seen. 100 records: on the
# large-message chat (~14 KB of records a turn) a dictionary from the first 100
# records compressed the later ones to 3,502 B a turn, from 400 to 3,469 (no
# dictionary: 5,184); small-record workloads reach TRAIN_BYTES only after ~480.
TRAIN_BYTES: Final = 256 * 1024
TRAIN_RECORDS: Final = 100
# Sampling goes on past TRAIN_BYTES until TRAIN_RECORDS, up to this many bytes;
# then training runs with what it has. Before, sampling stopped at TRAIN_BYTES,
# so a workload of large records (the large-message chat's 112 records filled
# it) never reached the record count and never got a dictionary.
SAMPLE_BYTES_MAX: Final = 4 * TRAIN_BYTES
# zstd level for deltas. Level 3's match finder cannot index a multi-MB base:
# a 2.0 MB message list whose base held all but 100 messages gave a 193 KB
# delta at level 3 and 15.9 KB at level 6, in 6.1 ms (level 7: 15.5 KB, 11.8 ms).
DELTA_LEVEL: Final = 6
# zstd level for deltas whose dictionary holds many new writes (a snapshot
# link spanning several snapshots): level 6's tables miss most matches in a
# 0.6 MB dictionary. Measured on a seq-8 snapshot link here (0.55 MB value, 0.61
# MB dictionary): 57.6 KB at level 6, 6.9 KB at level 11, both in ~3.7 ms. For
# a 2 MB value grown by one message level 11 took 7.1 ms against 2.1 ms, so it
# is only used above WRITES_LARGE bytes of write content.
DELTA_LEVEL_LARGE: Final = 11
# Level 11's shortest match (5) on a dictionary of multi-MB writes: the lazy
# match finder's chains fill with the 5-byte runs every message shares and
# miss the message text further back. A skip-delta snapshot 64 versions after
# its base (3,250 turns of the 300 + 600 character chat: 4.0 MB of writes
# against a 4.0 MB value) took 679 KB at 5 and 248 KB at 6 (32 versions: 58.6
# and 33.4 KB); level 16 reached 9 KB but took 3.3 s. Decoding is unchanged.
LARGE_MIN_MATCH: Final = 6
WRITES_LARGE: Final = 64 * 1024
# Page-aware compression (stop 28). LMDB keeps a value in its key's leaf page
# up to leaf_max() bytes (1,988 next to a 42-byte write key on 4 KiB pages);
# a larger one takes whole overflow pages of its own, and a leaf page holds
# two values of ~1.9 KB only when they are smaller still. On the
# large-message chat (~8 KB answers, with the trained dictionary) zstd level
# 3 gave 2,050 B a record (median of 60), level 12 1,852, level 15 1,728 (in
# 33 us, 0.5 ms and 1.0 ms): at level 3 every answer took a 4 KiB overflow
# page, at level 12 a leaf page of its own, at level 15 half of one. So a
# record is compressed again at DENSE_LEVEL, and the smaller frame kept, when
# it is at most DENSE_MAX bytes before compression and either fits its leaf
# page already at DENSE_MIN bytes or more, or would take one page fewer if
# DENSE_REACH smaller. Small records (checkpoints, the turns of a chat of
# short messages) never pay for it.
DENSE_LEVEL: Final = 15
# DENSE_LEVEL's parameters for records of at most DENSE_MAX bytes (and a
# dictionary of at most 32 KiB): its strategy (btopt) and search depth, with
# hash and chain tables of 2^15 and 2^16 entries instead of 2^17 and a target
# length of 64 instead of 256. On 60 turn packs of the sf=100 chat (~9 KB of
# bodies each, trained dictionary) 941 us a pack instead of 1,207 for 0.3 %
# more bytes; 893 instead of 1,025 on the add_messages chat's (stop 45).
DENSE_PARAMS: Final = {
    "strategy": zstandard.STRATEGY_BTOPT,
    "window_log": 16,
    "hash_log": 15,
    "chain_log": 16,
    "search_log": 6,
    "min_match": 3,
    "target_length": 64,
}
DENSE_MIN: Final = 1024
DENSE_REACH: Final = 0.15
DENSE_MAX: Final = 32 * 1024
#: LMDB's page header (PAGEHDRSZ), on leaf and overflow pages alike.
PAGE_HEADER: Final = 16
# Splice deltas (format 8, deltalog.engine.splice): used when the runs copied
# from the base cover at least this share of the new value (else the delta is a
# zstd frame over the whole value, as before), and the literal between the runs
# is compressed against the base's last SPLICE_TAIL bytes and the writes.
SPLICE_SHARE: Final = 0.5
SPLICE_TAIL: Final = 64 * 1024
# Largest zstd window a delta may use (and a reader accepts): 128 MiB, enough
# for a base plus a new version of a 60 MB message list.
MAX_WINDOW_LOG: Final = 27

# A zstd frame declaring more than this is treated as corrupt rather than allocated.
MAX_RECORD: Final = 2 * 1024**3


class WriteDict(NamedTuple):
    """Writes a delta's dictionary holds after its base (see :meth:`RecordCodec.encode_delta`).

    Attributes:
        lo: Encoded id of the oldest checkpoint whose writes are included.
        hi: Encoded id of the newest one.
        content: The writes' payloads, concatenated in key order.
        items: The payloads went into ``content`` without their top-level
            msgpack array header (format 15, :func:`array_items`).
    """

    lo: bytes
    hi: bytes
    content: bytes
    items: bool = False


def _damaged(what: str, cause: Exception | str) -> CorruptRecordError:
    """The error for record ``what`` whose bytes do not decode (``cause``)."""
    reason = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
    return CorruptRecordError(
        f"record {what} cannot be decoded ({reason}); run `deltalog verify` to list "
        "damaged records and restore them from a backup"
    )


def _seed(tag: int, key: bytes | None, prefix: bytes) -> int:
    """The CRC seed of a record with tag byte ``tag``: its key (when :data:`KEYED`),
    then ``prefix`` (full records only; a delta's CRC never covered a prefix)."""
    seed = 0
    if tag & KEYED:
        if key is None:
            raise ValueError("checksum mismatch: a record framed with its key was read without it")
        seed = zlib.crc32(key)
    return seed if tag & ~KEYED in DELTA_TAGS else zlib.crc32(prefix, seed)


def _crc_ok(view: memoryview, key: bytes | None, prefix: bytes) -> bool:
    framed = view[:-CRC_SIZE]
    return len(framed) >= 1 and zlib.crc32(framed, _seed(framed[0], key, prefix)) == int.from_bytes(
        view[-CRC_SIZE:], "big"
    )


def rekey(
    data: bytes, old_key: bytes | None, new_key: bytes, what: str, *, prefix: bytes = b""
) -> bytes:
    """The same record framed for ``new_key``: its CRC checked against ``old_key``
    (or as written without a key), then sealed over ``new_key`` (:data:`KEYED`).
    Nothing is decompressed, so no dictionary is needed.

    Raises:
        CorruptRecordError: The record fails its CRC (naming ``what``).
    """
    view = memoryview(data)
    try:
        ok = _crc_ok(view, old_key, prefix)
    except ValueError:
        ok = False
    if not ok:
        raise _damaged(what, "checksum mismatch")
    framed = bytes(view[:-CRC_SIZE])
    return _seal(bytes((framed[0] & ~KEYED,)) + framed[1:], new_key, prefix)


def frame_plain(record: Any, *, key: bytes | None = None) -> bytes:
    """``record`` framed as :meth:`RecordCodec.encode` frames an uncompressed one (over
    ``key`` when given), without trying compression or sampling it for a dictionary."""
    return _seal(bytes((TAG_PLAIN,)) + ormsgpack.packb(record), key, b"")


def frame_body(body: bytes, *, key: bytes, prefix: bytes = b"", compact: bool = False) -> bytes:
    """A record body (msgpack bytes, a checkpoint's compact form when ``compact``)
    framed uncompressed over ``key`` and ``prefix``: the record a turn pack's entry
    reads as (docs/design.md, "Turn packs")."""
    return _seal_body(TAG_PLAIN | (COMPACT if compact else 0), body, key, prefix)


def _seal(framed: bytes, key: bytes | None, prefix: bytes) -> bytes:
    """``framed`` with its tag's KEYED bit set when there is a key, and its CRC."""
    if key is not None:
        framed = bytes((framed[0] | KEYED,)) + framed[1:]
    return framed + zlib.crc32(framed, _seed(framed[0], key, prefix)).to_bytes(CRC_SIZE, "big")


def _seal_body(tag: int, body: bytes, key: bytes | None, prefix: bytes) -> bytes:
    """:func:`_seal` of ``tag`` followed by ``body``, copying ``body`` once (the
    CRC runs over the tag byte, then the body)."""
    if key is not None:
        tag |= KEYED
    head = _TAG_BYTES[tag]
    crc = zlib.crc32(body, zlib.crc32(head, _seed(tag, key, prefix)))
    return b"".join((head, body, crc.to_bytes(CRC_SIZE, "big")))


_TAG_BYTES: Final = tuple(bytes((tag,)) for tag in range(256))


def _seal_over_key(tag: int, body: bytes, key: bytes) -> bytes:
    """:func:`_seal_body` of a full record (not a delta) over ``key``, without a
    prefix: the CRC runs over the key, the tag byte, then the body."""
    head = _TAG_BYTES[tag | KEYED]
    crc = zlib.crc32(body, zlib.crc32(head, zlib.crc32(key)))
    return b"".join((head, body, crc.to_bytes(CRC_SIZE, "big")))


def encode_dictionary(key: bytes, dictionary: bytes) -> bytes:
    """A trained dictionary as stored in ``meta`` under ``key`` (``dict:N``): since
    format 5 a record framed over its key, so a flipped bit is caught before a
    record is decompressed with it (zstd frames carry no checksum of their output)."""
    return _DICT_CODEC.encode(dictionary, key=key)


def decode_dictionary(key: bytes, raw: bytes, *, legacy: bool) -> bytes:
    """The dictionary stored under ``key``; ``legacy`` also reads the plain msgpack
    bytes of a store older than format 5.

    Raises:
        CorruptRecordError: The value fails its CRC, or is not a dictionary.
    """
    what = f"meta/{key.decode('ascii', 'replace')}"
    if raw[:1] and raw[0] & KEYED:
        found = _DICT_CODEC.decode(raw, what, key=key)
    elif legacy:
        try:
            found = ormsgpack.unpackb(raw)
        except Exception as exc:
            raise CorruptRecordError(f"record {what} cannot be decoded ({exc})") from exc
    else:
        raise CorruptRecordError(
            f"record {what} is not framed with its CRC (format 5); run `deltalog verify`"
        )
    if not isinstance(found, bytes):
        raise CorruptRecordError(f"record {what} holds no dictionary ({type(found).__name__})")
    return found


def leaf_max(key_size: int, page_size: int) -> int:
    """The largest value LMDB stores in the leaf page of a ``key_size``-byte key:
    half a page less its header, less the node header (8 bytes) and index
    slot (2) and the key (``me_nodemax`` and ``LEAFSIZE`` in LMDB's mdb.c).
    A larger value takes whole overflow pages."""
    return (((page_size - PAGE_HEADER) // 2) & ~1) - 2 - 8 - key_size


def fewer_pages_below(size: int, key_size: int, page_size: int) -> int | None:
    """The size a value of ``size`` bytes must shrink to to take fewer pages: the
    leaf limit when it takes one overflow page, one page less of overflow when
    it takes several; None when it fits its leaf page already."""
    leaf = leaf_max(key_size, page_size)
    if size <= leaf:
        return None
    pages = (PAGE_HEADER - 1 + size) // page_size + 1  # LMDB's OVPAGES
    return leaf if pages == 1 else (pages - 1) * page_size - PAGE_HEADER


class Ahead(NamedTuple):
    """A record body compressed before its write transaction (:meth:`RecordCodec.compress_ahead`).

    Attributes:
        body: The msgpack body.
        dictionary: The active dictionary when it was compressed (None: none).
        tag: :data:`TAG_PLAIN`, :data:`TAG_ZSTD`, :data:`TAG_DICT` or
            :data:`TAG_DICT_COMPACT`.
        payload: The framed payload at the codec's level.
        dense: The payload at :data:`DENSE_LEVEL`, when it may save pages.
    """

    body: bytes
    dictionary: int | None
    tag: int
    payload: bytes
    dense: bytes | None

    @property
    def size(self) -> int:
        """The bytes of the record it frames at the codec's level, without a prefix."""
        return 1 + len(self.payload) + CRC_SIZE


class DeltaHeader(NamedTuple):
    """A checked delta record, split (see :meth:`RecordCodec.delta_header`).

    Attributes:
        ref: Encoded version of the base blob; empty when there is no base.
        seq: The version's index since the channel's last full record.
        type: The serde type of the payload.
        packed: The zstd frame.
        lo: First checkpoint of the write range (format 2), or None.
        hi: Last checkpoint of the write range, or None.
        crc: CRC-32 of the range's write content, or None.
        splice: A splice delta (format 8): the length of the base's end that
            the literal's dictionary holds, then the runs
            (:func:`~deltalog.engine.splice.splice_runs`); ``packed`` is then
            the literal's zstd frame. None: ``packed`` is the whole value's.
        items: The range's write content holds each payload without its
            top-level msgpack array header (format 15, :func:`array_items`).
    """

    ref: bytes
    seq: int
    type: str
    packed: bytes
    lo: bytes | None = None
    hi: bytes | None = None
    crc: int | None = None
    splice: tuple[int, ...] | None = None
    items: bool = False

    @property
    def span(self) -> tuple[bytes, bytes] | None:
        """``(lo, hi)`` when the dictionary holds writes, else None."""
        return None if self.lo is None or self.hi is None else (self.lo, self.hi)


class Compressor(Protocol):
    """What the codec needs from a compressor (injectable for tests and tuning)."""

    def compress(self, data: bytes) -> bytes:
        """Compress ``data`` into a self-describing frame."""
        ...

    def decompress(self, data: bytes) -> bytes:
        """Invert :meth:`compress`; raise on a damaged frame."""
        ...

    def compress_fast(self, data: bytes) -> bytes:
        """:meth:`compress` at a faster level (for records rewritten often)."""
        ...

    def compress_with_base(
        self, data: bytes, base: bytes, level: int = DELTA_LEVEL, tail: bytes = b""
    ) -> bytes:
        """Compress ``data`` using ``base + tail`` (an earlier version, and the
        writes since) as a dictionary."""
        ...

    def compress_with_dict(self, data: bytes, dict_id: int, dictionary: bytes) -> bytes:
        """Compress ``data`` with a trained dictionary."""
        ...

    def compress_dense(self, data: bytes, dict_id: int | None, dictionary: bytes) -> bytes:
        """:meth:`compress` (``dict_id`` None) or :meth:`compress_with_dict` at a
        slower level that packs tighter; decoded by the same methods."""
        ...

    def decompress_with_dict(self, data: bytes, dict_id: int, dictionary: bytes) -> bytes:
        """Invert :meth:`compress_with_dict`."""
        ...

    def decompress_with_base(self, data: bytes, base: bytes, tail: bytes = b"") -> bytes:
        """Invert :meth:`compress_with_base`."""
        ...

    def release(self, dict_id: int) -> None:
        """Drop what was built for dictionary ``dict_id`` (it compresses nothing more;
        a later decode builds what it needs again)."""
        ...


def _compress_with_base(data: bytes, base: bytes, tail: bytes, level: int) -> bytes:
    content = base + tail if tail else base
    window = min(MAX_WINDOW_LOG, max(21, (len(content) + len(data)).bit_length()))
    dictionary = zstandard.ZstdCompressionDict(content, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    extra = {"min_match": LARGE_MIN_MATCH} if level == DELTA_LEVEL_LARGE else {}
    params = zstandard.ZstdCompressionParameters.from_level(level, window_log=window, **extra)
    if params.hash_log >= window or params.chain_log >= window:
        # zstd sizes its match tables for the level, not the input: level 11
        # builds a 20 MB context for a 1 MB base, which set the peak RSS of
        # the large-message chat (150 MiB against InMemorySaver's 120 at 100
        # turns; 127 with these caps). Tables of half as many entries as the
        # window holds bytes gave the same deltas there (3,877 bytes in all)
        # in 0.27 s instead of 0.39, and 34 KB instead of 32 on a 2 MB
        # skip-delta link of the sf=100 chat; windows of 8 MB and more keep
        # the level's tables.
        params = zstandard.ZstdCompressionParameters.from_level(
            level,
            window_log=window,
            hash_log=min(params.hash_log, window - 1),
            chain_log=min(params.chain_log, window - 1),
            **extra,
        )
    compressor = zstandard.ZstdCompressor(dict_data=dictionary, compression_params=params)
    return compressor.compress(data)  # type: ignore[no-any-return]


def _decompress_with_base(data: bytes, base: bytes, tail: bytes) -> bytes:
    content = base + tail if tail else base
    dictionary = zstandard.ZstdCompressionDict(content, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    reader = zstandard.ZstdDecompressor(dict_data=dictionary, max_window_size=2**MAX_WINDOW_LOG)
    return reader.decompress(data)  # type: ignore[no-any-return]


class _CodecThread:
    """One worker thread for the codec's large transient allocations.

    A delta against a multi-MB base builds a zstd context of 3-15 MB and a copy
    of the base, and frees them after a few ms. glibc's malloc serves each
    thread from its own arena and raises its mmap threshold after such a free,
    so when these ran on LangGraph's pool threads every thread's arena kept
    their size. With them on one thread, peak RSS of the 600-turn sf=100 chat
    went from 192-196 to 157-162 MiB, of the 150-turn large-message chat from
    256-259 to 180-182 MiB (InMemorySaver: 132 and 142; docs/operations.md). The thread is started on first use, and again in a
    child after fork(); a job submitted from it runs inline.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pid = 0
        self._ident: int | None = None

    def run(self, fn: Callable[..., _R], *args: Any) -> _R:
        if threading.get_ident() == self._ident:
            return fn(*args)
        pool = self._pool
        if pool is None or self._pid != os.getpid():
            pool = self._start()
        try:
            future = pool.submit(fn, *args)
        except RuntimeError:  # the interpreter is shutting down: no new threads
            return fn(*args)
        return future.result()

    def _start(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._ident = None
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="deltalog-codec", initializer=self._started
                )
                self._pid = os.getpid()
            return self._pool

    def _started(self) -> None:
        self._ident = threading.get_ident()


def _delta_fields(framed: memoryview) -> DeltaHeader:
    """The header of a delta record whose CRC was checked (``framed``: the record
    without its CRC). Raises ValueError (or a parse error) on a malformed one."""
    if framed[0] & ~KEYED == TAG_DELTA_COMPACT:
        return _unpack_delta_header(framed)
    size = int.from_bytes(framed[1:5], "big")
    items = ormsgpack.unpackb(framed[5 : 5 + size])
    packed = bytes(framed[5 + size :])
    splice = None
    if len(items) in (4, 7):  # format 8: a splice
        splice = tuple(items.pop())
        if len(splice) < 2 or not all(type(x) is int and x >= 0 for x in splice):
            raise ValueError("malformed splice runs")
    if len(items) == 3:
        return DeltaHeader(bytes(items[0]), int(items[1]), str(items[2]), packed, splice=splice)
    ref, seq, typ, lo, hi, crc = items
    return DeltaHeader(
        bytes(ref), int(seq), str(typ), packed, bytes(lo), bytes(hi), int(crc), splice
    )


# Flags of a compact delta header (format 11, :func:`_pack_delta_body`).
_DH_BASE: Final = 0x01  # a base ref follows, as its length and bytes
_DH_COUNTER: Final = 0x02  # a base ref follows in LangGraph's counter form
_DH_TYPE: Final = 0x04  # a serde type other than "msgpack" follows
_DH_WRITES: Final = 0x08  # the write range follows: lo, hi, the content's CRC-32
_DH_SPLICE: Final = 0x10  # splice runs follow: their count, then each
_DH_WHOLE: Final = 0x20  # the frame is stored whole: it is not a zstandard frame
_DH_ITEMS: Final = 0x40  # format 15: the write content holds array_items of each payload
_DH_ALL: Final = 0x7F
# The size of each msgpack array header by its first byte (array_items).
_ARRAY_HEADS: Final = {**{b: 1 for b in range(0x90, 0xA0)}, 0xDC: 3, 0xDD: 5}


def array_items(payload: bytes) -> memoryview:
    r"""``payload`` without its top-level msgpack array header, when it starts with one
    (fixarray, array 16 or array 32): the items back to back. A write dictionary
    holds its payloads this way from format 15 on.

    A node's update to a message list is a list (``[AIMessage(...)]``), so each
    write's payload is an array header and then the messages, while the
    ``_DeltaSnapshot`` seed that replays those writes holds the same messages
    back to back in one list. Without the headers the new messages of a seed
    are one stretch of the dictionary, which zstd copies as one match: on a
    10,000-turn sf=100 chat a seed 16 versions past its base (1,600 new
    messages) took 13.1 KB over the payloads as stored and 117 bytes over
    their items. Any bytes give the same result on both sides, so the rule is
    applied to every payload, whatever its serde type.

    >>> bytes(array_items(b"\x92\xa1a\xa1b")), bytes(array_items(b"\xa1a"))
    (b'\xa1a\xa1b', b'\xa1a')
    """
    view = memoryview(payload)
    head = _ARRAY_HEADS.get(payload[0], 0) if payload else 0
    return view[head:] if len(payload) >= head else view


def _uvarint(n: int) -> bytes:
    """``n`` (>= 0) as an unsigned LEB128 varint."""
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it; ValueError past the end or
    beyond 64 bits."""
    n = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError(f"varint at {pos} cut short or too long")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7


def _read_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    """A length-prefixed field at ``pos`` and the position after it."""
    size, pos = _read_uvarint(buf, pos)
    if pos + size > len(buf):
        raise ValueError(f"field at {pos} runs past the header")
    return bytes(buf[pos : pos + size]), pos + size


def _counter_ref(ref: bytes) -> tuple[int, bytes] | None:
    """``(counter, 4 suffix bytes)`` when ``ref`` encodes a version in the counter
    form (:func:`~deltalog.engine.checkpoint_form.counter_parts`: every version
    :meth:`~deltalog.engine.DeltaLogSaver.get_next_version` mints, the counter
    below 2^63 so that its varint reads back) and :func:`_counter_version` gives
    ``ref`` back; else None."""
    try:
        version, end = keys.decode_version(ref, 0)
    except DamagedKeyError:
        return None
    if end != len(ref) or not isinstance(version, str):
        return None
    parts = checkpoint_form.counter_parts(version)
    return parts if parts is not None and _counter_version(*parts) == ref else None


def _counter_version(counter: int, suffix: bytes) -> bytes:
    """The encoded version of :func:`_counter_ref`'s fields."""
    return keys.encode_version(f"{counter:032}.{suffix.hex()}")


def _pack_delta_body(
    typ: str,
    base_ref: bytes,
    seq: int,
    writes: WriteDict | None,
    crc: int,
    splice: list[int] | None,
    packed: bytes,
) -> bytes:
    """A :data:`TAG_DELTA_COMPACT` record (format 11) after its tag: the header, then
    the compressed frame ``packed``.

    ``flags`` (one byte), ``seq`` (varint), then as the flags say: the base
    ref, as a varint counter and four bytes (``_DH_COUNTER``: 19 bytes
    encoded, the form of every version deltalog mints) or as its length and
    bytes (``_DH_BASE``); the serde type as length and UTF-8 unless it is
    ``msgpack``; the write range as ``lo`` and ``hi`` (length and bytes
    each) and the content's CRC-32 (four bytes, big-endian); the splice as
    the number of its integers, then each as a varint. On an
    ``add_messages`` chat's deltas the msgpack header of formats 2-10 took 99
    bytes and its length four more; this one takes ~65. The frame follows
    without its zstandard magic number, or whole (``_DH_WHOLE``) when it has
    none (an injected :class:`Compressor` of another kind).
    """
    flags = 0
    out = [b""]
    out.append(_uvarint(seq))
    if base_ref:
        counter = _counter_ref(base_ref)
        if counter is not None:
            flags |= _DH_COUNTER
            out.append(_uvarint(counter[0]) + counter[1])
        else:
            flags |= _DH_BASE
            out.append(_uvarint(len(base_ref)) + base_ref)
    if typ != "msgpack":
        flags |= _DH_TYPE
        name = typ.encode("utf-8")
        out.append(_uvarint(len(name)) + name)
    if writes is not None:
        flags |= _DH_WRITES | (_DH_ITEMS if writes.items else 0)
        out.append(_uvarint(len(writes.lo)) + writes.lo + _uvarint(len(writes.hi)) + writes.hi)
        out.append(crc.to_bytes(4, "big"))
    if splice is not None:
        flags |= _DH_SPLICE
        out.append(_uvarint(len(splice)) + b"".join(_uvarint(x) for x in splice))
    if packed[:4] == ZSTD_MAGIC:
        out.append(packed[4:])
    else:
        flags |= _DH_WHOLE
        out.append(packed)
    out[0] = _TAG_BYTES[flags]
    return b"".join(out)


def _unpack_delta_header(framed: memoryview) -> DeltaHeader:
    """:func:`_delta_fields` of a :data:`TAG_DELTA_COMPACT` record."""
    flags = framed[1]
    if (
        flags & ~_DH_ALL
        or (flags & _DH_BASE and flags & _DH_COUNTER)
        or (flags & _DH_ITEMS and not flags & _DH_WRITES)
    ):
        raise ValueError(f"unknown delta header flags 0x{flags:02x}")
    seq, pos = _read_uvarint(framed, 2)
    ref = b""
    if flags & _DH_COUNTER:
        counter, pos = _read_uvarint(framed, pos)
        if pos + 4 > len(framed):
            raise ValueError("base version cut short")
        ref = _counter_version(counter, bytes(framed[pos : pos + 4]))
        pos += 4
    elif flags & _DH_BASE:
        ref, pos = _read_bytes(framed, pos)
    typ = "msgpack"
    if flags & _DH_TYPE:
        name, pos = _read_bytes(framed, pos)
        typ = name.decode("utf-8")
    lo = hi = None
    crc = None
    if flags & _DH_WRITES:
        lo, pos = _read_bytes(framed, pos)
        hi, pos = _read_bytes(framed, pos)
        if pos + 4 > len(framed):
            raise ValueError("write range cut short")
        crc = int.from_bytes(framed[pos : pos + 4], "big")
        pos += 4
    splice = None
    if flags & _DH_SPLICE:
        count, pos = _read_uvarint(framed, pos)
        if count < 2 or count > len(framed):
            raise ValueError("malformed splice runs")
        runs = []
        for _ in range(count):
            x, pos = _read_uvarint(framed, pos)
            runs.append(x)
        splice = tuple(runs)
    frame = bytes(framed[pos:])
    if not flags & _DH_WHOLE:
        frame = ZSTD_MAGIC + frame
    return DeltaHeader(ref, seq, typ, frame, lo, hi, crc, splice, bool(flags & _DH_ITEMS))


_CODEC_THREAD: Final = _CodecThread()


def _on_codec_thread(fn: Callable[..., _R], *args: Any) -> _R:
    """``fn(*args)`` run on the codec thread (see :class:`_CodecThread`), and the
    allocator trimmed after a large one (see :func:`_trim_after`)."""
    return _CODEC_THREAD.run(functools.partial(_trim_after, fn), *args)


# Codec jobs whose inputs reach this many bytes trim the allocator after them.
TRIM_MIN: Final = 256 * 1024


class _Trim:
    """glibc's ``malloc_trim``, looked up on first use; None where there is none
    (musl, macOS, Windows) or ``DELTALOG_MALLOC_TRIM=0`` turns it off."""

    fn: Callable[[int], int] | None = None
    looked_up = False

    @classmethod
    def get(cls) -> Callable[[int], int] | None:
        if not cls.looked_up:
            cls.looked_up = True
            if os.environ.get("DELTALOG_MALLOC_TRIM", "1") != "0":
                try:
                    import ctypes

                    cls.fn = getattr(ctypes.CDLL(None), "malloc_trim", None)
                except (OSError, TypeError):  # no C library to look in (Windows)
                    cls.fn = None
        return cls.fn


def malloc_trim() -> None:
    """Hand the free pages of every glibc arena back to the kernel (``malloc_trim(0)``,
    ~0.3 ms), where the C library has it and ``DELTALOG_MALLOC_TRIM`` is not 0."""
    trim = _Trim.get()
    if trim is not None:
        trim(0)


def _trim_after(fn: Callable[..., _R], *args: Any) -> _R:
    """``fn(*args)``, then, when its inputs were large, ``malloc_trim(0)``.

    The zstd context and the copy of the base a snapshot delta builds are freed
    after the job, but glibc keeps freed memory in its arenas (and raises its
    trim threshold after each large free), so the process's RSS stayed near
    its largest job. Trimming hands the free pages of every arena back to the
    kernel: ~0.3 ms here, once per snapshot written or decoded. Measured
    in-process with ``ru_maxrss`` (docs/operations.md, "Memory"): the 150-turn
    large-message chat peaked at 155-156 MiB instead of 176-178, the 600-turn
    sf=100 chat at 156-157 instead of 162 (InMemorySaver: 142 and 132).
    """
    try:
        return fn(*args)
    finally:
        if sum(len(a) for a in args if isinstance(a, (bytes, bytearray, memoryview))) >= TRIM_MIN:
            malloc_trim()


class ZstdCompressor:
    """zstandard with pooled contexts (a zstd context is not thread-safe).

    A context is taken from a pool for one call and put back after it, so any
    number of threads share a few contexts. Thread-local contexts were rebuilt
    all the time: LangGraph runs each invoke's saver calls on a fresh thread
    pool, and a context with the trained dictionary costs ~60 µs to build
    (344 were built for 240 invokes here).

    Level 3 is zstd's default: on chat transcripts it reached 2.6x at ~300 MB/s
    here, where level 9 gained 4 % more for 4x the CPU.
    """

    def __init__(self, level: int = 3) -> None:
        self.level = level
        # list.pop/append are atomic: no lock is needed around the pools.
        self._plain: list[tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]] = []
        self._fast: list[zstandard.ZstdCompressor] = []
        self._dicts: dict[int, list[tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]]]
        self._dicts = {}
        self._prepared: dict[int, zstandard.ZstdCompressionDict] = {}
        self._dense: dict[int | None, list[zstandard.ZstdCompressor]] = {}
        self._prepared_dense: dict[int, zstandard.ZstdCompressionDict] = {}

    def _take(self) -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
        try:
            return self._plain.pop()
        except IndexError:
            return (zstandard.ZstdCompressor(level=self.level), zstandard.ZstdDecompressor())

    def compress(self, data: bytes) -> bytes:
        """Compress with the content size in the frame header."""
        ctx = self._take()
        try:
            return ctx[0].compress(data)  # type: ignore[no-any-return]
        finally:
            self._plain.append(ctx)

    def compress_fast(self, data: bytes) -> bytes:
        """:meth:`compress` at level :data:`FAST_LEVEL` (the memory store's item
        chunks, rewritten by every put into them): on 0.5-1.3 KB chunks here
        twice as fast as level 3 (2.7 vs 6.5 us, 7 vs 12 us), 6-11 % larger."""
        try:
            ctx = self._fast.pop()
        except IndexError:
            ctx = zstandard.ZstdCompressor(level=FAST_LEVEL)
        try:
            return ctx.compress(data)  # type: ignore[no-any-return]
        finally:
            self._fast.append(ctx)

    def decompress(self, data: bytes) -> bytes:
        """Decompress one frame, refusing frames that declare absurd sizes."""
        _check_frame(data)
        ctx = self._take()
        try:
            return ctx[1].decompress(data)  # type: ignore[no-any-return]
        finally:
            self._plain.append(ctx)

    def compress_with_base(
        self, data: bytes, base: bytes, level: int = DELTA_LEVEL, tail: bytes = b""
    ) -> bytes:
        """zstd with ``base + tail`` as a raw-content dictionary: the frame costs
        about the bytes that are new relative to it (a 1.3 MB message list
        whose previous version shared 1.2 MB compressed to 2.4 KB here, 4x
        smaller than plain zstd). The window covers the dictionary plus data.
        Runs on the codec thread (:func:`_on_codec_thread`)."""
        return _on_codec_thread(_compress_with_base, data, base, tail, level)

    def decompress_with_base(self, data: bytes, base: bytes, tail: bytes = b"") -> bytes:
        """Invert :meth:`compress_with_base` (on the codec thread too)."""
        _check_frame(data)
        return _on_codec_thread(_decompress_with_base, data, base, tail)

    def _take_dict(
        self, dict_id: int, dictionary: bytes
    ) -> tuple[
        list[tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]],
        tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor],
    ]:
        pool = self._dicts.get(dict_id)
        if pool is None:
            pool = self._dicts.setdefault(dict_id, [])
        try:
            return pool, pool.pop()
        except IndexError:
            prepared = self._prepare(dict_id, dictionary)
            return pool, (
                zstandard.ZstdCompressor(level=self.level, dict_data=prepared, write_dict_id=False),
                zstandard.ZstdDecompressor(dict_data=prepared),
            )

    def _prepare(self, dict_id: int, dictionary: bytes) -> zstandard.ZstdCompressionDict:
        prepared = self._prepared.get(dict_id)
        if prepared is None:
            prepared = self._prepared.setdefault(dict_id, zstandard.ZstdCompressionDict(dictionary))
        return prepared

    def compress_with_dict(self, data: bytes, dict_id: int, dictionary: bytes) -> bytes:
        """Compress with a trained dictionary (pooled contexts per dictionary id)."""
        pool, ctx = self._take_dict(dict_id, dictionary)
        try:
            return ctx[0].compress(data)  # type: ignore[no-any-return]
        finally:
            pool.append(ctx)

    def compress_dense(self, data: bytes, dict_id: int | None, dictionary: bytes) -> bytes:
        """:meth:`compress` or :meth:`compress_with_dict` at :data:`DENSE_LEVEL`
        (:data:`DENSE_PARAMS`; contexts pooled per dictionary, built on first
        use: a workload of small records never builds one). The frame decodes
        like theirs."""
        pool = self._dense.get(dict_id)
        if pool is None:
            pool = self._dense.setdefault(dict_id, [])
        try:
            ctx = pool.pop()
        except IndexError:
            params = zstandard.ZstdCompressionParameters(
                write_content_size=1, write_checksum=0, write_dict_id=0, **DENSE_PARAMS
            )
            if dict_id is None:
                ctx = zstandard.ZstdCompressor(compression_params=params)
            else:
                prepared = self._prepare_dense(dict_id, dictionary, params)
                ctx = zstandard.ZstdCompressor(compression_params=params, dict_data=prepared)
        try:
            return ctx.compress(data)  # type: ignore[no-any-return]
        finally:
            pool.append(ctx)

    def _prepare_dense(
        self, dict_id: int, dictionary: bytes, params: zstandard.ZstdCompressionParameters
    ) -> zstandard.ZstdCompressionDict:
        """The dictionary's tables at the dense contexts' ``params``, built once (its
        own object: a dictionary precomputed for one level is used at that level)."""
        prepared = self._prepared_dense.get(dict_id)
        if prepared is None:
            prepared = zstandard.ZstdCompressionDict(dictionary)
            prepared.precompute_compress(compression_params=params)
            prepared = self._prepared_dense.setdefault(dict_id, prepared)
        return prepared

    def release(self, dict_id: int) -> None:
        """Drop the pooled contexts and the prepared dictionary of ``dict_id``: the
        early dictionary's, once the final one compresses (their compression tables
        were ~1.5 MiB of the sf=100 chat's peak RSS)."""
        self._dicts.pop(dict_id, None)
        self._dense.pop(dict_id, None)
        self._prepared.pop(dict_id, None)
        self._prepared_dense.pop(dict_id, None)

    def decompress_with_dict(self, data: bytes, dict_id: int, dictionary: bytes) -> bytes:
        """Invert :meth:`compress_with_dict`."""
        _check_frame(data)
        pool, ctx = self._take_dict(dict_id, dictionary)
        try:
            return ctx[1].decompress(data)  # type: ignore[no-any-return]
        finally:
            pool.append(ctx)


def _dict_payload(dict_id: int, packed: bytes) -> tuple[int, bytes]:
    """``(tag, payload)`` of a frame compressed with trained dictionary ``dict_id``:
    :data:`TAG_DICT_COMPACT` (a one-byte id, the frame without its magic number)
    for a zstandard frame and an id up to 255, else :data:`TAG_DICT` (four-byte id)."""
    if dict_id <= 0xFF and packed[:4] == ZSTD_MAGIC:
        return TAG_DICT_COMPACT, _TAG_BYTES[dict_id] + packed[4:]
    return TAG_DICT, dict_id.to_bytes(4, "big") + packed


def _dict_frame(tag: int, payload: memoryview | bytes) -> tuple[int, bytes]:
    """Invert :func:`_dict_payload`: ``(dictionary id, zstandard frame)`` of the payload
    (the record after its tag) of a :data:`TAG_DICT_COMPACT` or :data:`TAG_DICT` record.
    A payload cut after the frame header gives the header (all ``raw_size`` reads)."""
    if tag == TAG_DICT_COMPACT:
        return payload[0], ZSTD_MAGIC + payload[1:]
    return int.from_bytes(payload[:4], "big"), bytes(payload[4:])


def _check_frame(data: bytes) -> None:
    size = zstandard.frame_content_size(data)
    if size < 0 or size > MAX_RECORD:
        raise ValueError(f"zstd frame declares {size} bytes")


def _train(size: int, samples: list[bytes | bytearray | memoryview]) -> bytes:
    """Train the dictionary (:data:`TRAIN_SPLIT_POINT`), then trim the allocator (on
    the codec thread).

    zstd's trainer allocates several MB for a few ms. Run on the writer's
    thread (one of LangGraph's pool threads) and trimmed or not, the 120-turn
    sf=100 chat stayed 5 MiB larger after it (95 against 90 MiB of RSS).
    """
    try:
        dictionary = zstandard.train_dictionary(size, samples, split_point=TRAIN_SPLIT_POINT)
        return dictionary.as_bytes()  # type: ignore[no-any-return]
    finally:
        malloc_trim()


class RecordCodec:
    """Frames records: envelope → compress above a threshold → tag byte + bytes.

    Args:
        compress_threshold: Envelopes of at least this many bytes are compressed;
            ``None`` disables compression. 512 keeps small records (ids, short
            writes) out of zstd, whose frame overhead would make them larger.
        compressor: The compressor; zstandard level 3 by default.
    """

    def __init__(
        self,
        *,
        compress_threshold: int | None = 512,
        compressor: Compressor | None = None,
    ) -> None:
        if compress_threshold is not None and compress_threshold < 0:
            raise OptionError(
                f"compress_threshold {compress_threshold} is negative; pass a byte count "
                "or None to disable compression"
            )
        self.compress_threshold = compress_threshold
        self.compressor: Compressor = compressor or ZstdCompressor()
        self.dictionaries: dict[int, bytes] = {}
        self.active_dictionary: int | None = None
        #: LMDB's page size, set by the environment that opens the store
        #: (decides which records :meth:`encode_body` compresses again).
        self.page_size = 4096
        self._samples: list[bytes] = []
        self._sample_bytes = 0
        # The early dictionary was trained (or failed to train) in this process:
        # it is not asked for again.
        self._early_tried = False

    def encode(self, record: Any, *, prefix: bytes = b"", key: bytes | None = None) -> bytes:
        """Encode one record.

        Args:
            record: The envelope.
            prefix: Bytes the store keeps in front of the record (a write's
                channel id); not returned, but covered by the CRC, so a
                flipped prefix is caught like a flipped body.
            key: The record's LMDB key, covered by the CRC too (format 5);
                None frames it as before (no :data:`KEYED` bit).
        """
        return self.encode_body(ormsgpack.packb(record), prefix=prefix, key=key)

    def encode_body(
        self,
        body: bytes,
        *,
        prefix: bytes = b"",
        key: bytes | None = None,
        compress_from: int | None = None,
        fast: bool = False,
        ahead: Ahead | None = None,
        compact: bool = False,
    ) -> bytes:
        """:meth:`encode` of a record already packed with msgpack.

        ``compress_from`` lowers the compression threshold for this record
        (never raises it, and never turns compression on where the codec has
        it off): the memory store's item chunks compress well from ~100 bytes,
        since their items repeat field names. ``fast`` compresses without the
        trained dictionary at :data:`FAST_LEVEL`, and gives the dictionary no
        sample: records rewritten often (each put into a chunk rewrites it)
        would fill the samples with near copies of themselves. ``ahead`` is
        :meth:`compress_ahead` of ``body``, done before the write transaction:
        used while the body and the active dictionary are the ones it was made
        with, else ignored. The record is the same either way. ``compact`` marks
        ``body`` as a checkpoint record's compact form (:data:`COMPACT`; see
        :meth:`encode_checkpoint`).
        """
        if ahead is not None and (
            fast
            or compress_from is not None
            or ahead.dictionary != self.active_dictionary
            or ahead.body != body
        ):
            ahead = None
        if ahead is None:
            tag, payload = self._compress(body, compress_from, fast)
        else:
            tag, payload = ahead.tag, ahead.payload
            if self.compress_threshold is not None:  # as _compress samples
                self._sample_untrained(body)
        if (
            tag != TAG_PLAIN
            and key is not None
            and not fast
            and len(body) <= DENSE_MAX
            and self._dense_pays(payload, len(key), len(prefix))
        ):
            tighter = ahead.dense if ahead is not None else None
            if tighter is None:
                tighter = self._dense_payload(tag, body, payload)
            if len(tighter) < len(payload):
                payload = tighter
        if compact:
            if key is None:
                raise ValueError("a compact checkpoint record is framed over its key")
            tag |= COMPACT
        return _seal_body(tag, payload, key, prefix)

    def encode_checkpoint(
        self,
        rec: list[Any],
        key: bytes,
        cid: bytes,
        made: checkpoint_form.Front | None = None,
    ) -> tuple[bytes, bytes]:
        """A checkpoint record (the full form, ``CheckpointEnvelope.pack``) framed
        over its ``key``, whose checkpoint id is ``cid`` (encoded): in the compact
        form (format 12) when :mod:`~deltalog.engine.checkpoint_form` gives one,
        from ``made`` when the caller made its front before the transaction.
        Returns the framed record and the full form packed."""
        body = ormsgpack.packb(rec)
        if made is not None:
            small = checkpoint_form.compact_with(made, rec)
        else:
            small = checkpoint_form.compact(rec, cid)
        if small is None:
            return self.encode_body(body, key=key), body
        return self.encode_body(small, key=key, compact=True), body

    def compress_ahead(
        self,
        body: bytes,
        key_size: int,
        prefix_size: int,
        *,
        dense: bool = True,
        sample: bool = False,
    ) -> Ahead:
        """Compress ``body`` as :meth:`encode_body` would under a key of ``key_size``
        bytes behind a ``prefix_size``-byte prefix, outside the write transaction
        (with ``dense`` False, at the codec's level only: :meth:`encode_body` makes
        the :data:`DENSE_LEVEL` frame when it is handed this; with ``sample``, the
        body is also offered to the dictionary's samples, as :meth:`encode_body`
        offers it again).

        A writer compresses a large record (a long message) before it queues for
        the store's single writer, so the other writers of a group commit (the
        checkpoint LangGraph puts next) do not wait for it: on the 500-turn
        large-message chat, the level-15 frames of :data:`DENSE_LEVEL` made
        inside the transaction raised invoke p50 to 1.12-1.17x InMemorySaver's
        (two runs), made ahead to 1.01-1.07x (three runs; 0.93-1.07x with
        level 3 alone, docs/benchmarks.md). Nothing is sampled for the dictionary here
        by default: :meth:`encode_body` samples the body when it is written.
        """
        dictionary = self.active_dictionary
        tag, payload = self._compress(body, None, False, sample=sample)
        tighter = None
        if (
            dense
            and tag != TAG_PLAIN
            and len(body) <= DENSE_MAX
            and self._dense_pays(payload, key_size, prefix_size)
        ):
            tighter = self._dense_payload(tag, body, payload)
        return Ahead(body, dictionary, tag, payload, tighter)

    def _compress(
        self, body: bytes, compress_from: int | None, fast: bool, *, sample: bool = True
    ) -> tuple[int, bytes]:
        """``(tag, payload)`` of ``body``: see :meth:`encode_body`."""
        threshold = self.compress_threshold
        if threshold is not None and compress_from is not None and compress_from < threshold:
            threshold = compress_from
        tag, payload = TAG_PLAIN, body
        if threshold is not None:
            active = self.active_dictionary
            if active is not None and len(body) >= DICT_MIN and not fast:
                if sample and active != FINAL_DICT:
                    self._sample_untrained(body)
                packed = self.compressor.compress_with_dict(body, active, self.dictionaries[active])
                tag, payload = _dict_payload(active, packed)
                if len(payload) >= len(body):
                    tag, payload = TAG_PLAIN, body
            else:
                if sample and not fast:
                    self._sample_untrained(body)
                if len(body) >= threshold:
                    compress = self.compressor.compress_fast if fast else self.compressor.compress
                    packed = compress(body)
                    if len(packed) < len(body):
                        tag, payload = TAG_ZSTD, packed
        return tag, payload

    def _dense_pays(self, payload: bytes, key_size: int, prefix_size: int) -> bool:
        """True when ``payload``, stored as ``prefix · tag · payload · CRC`` under a
        ``key_size``-byte key, may take fewer LMDB pages at :data:`DENSE_LEVEL`."""
        stored = prefix_size + 1 + len(payload) + CRC_SIZE
        target = fewer_pages_below(stored, key_size, self.page_size)
        if target is None:
            return stored >= DENSE_MIN
        return stored - target <= stored * DENSE_REACH

    def _dense_payload(self, tag: int, body: bytes, payload: bytes) -> bytes:
        """``body`` compressed at :data:`DENSE_LEVEL` as ``payload`` was (with the same
        dictionary for :data:`TAG_DICT`), framed the same way."""
        if tag in (TAG_DICT, TAG_DICT_COMPACT):
            dict_id = _dict_frame(tag, payload[:4])[0]
            packed = self.compressor.compress_dense(body, dict_id, self.dictionaries[dict_id])
            dense_tag, dense = _dict_payload(dict_id, packed)
            # The caller keeps the smaller payload under the tag it has.
            return dense if dense_tag == tag else payload
        return self.compressor.compress_dense(body, None, b"")

    def encode_fast(self, body: bytes, key: bytes, compress_from: int) -> bytes:
        """:meth:`encode_body` of ``body`` with ``fast=True``, ``compress_from`` and
        ``key`` (no prefix): the same bytes in a third of the steps, for records
        rewritten by every put (the memory store's item chunks)."""
        threshold = self.compress_threshold
        if threshold is not None and len(body) >= min(threshold, compress_from):
            packed = self.compressor.compress_fast(body)
            if len(packed) < len(body):
                return _seal_over_key(TAG_ZSTD, packed, key)
        return _seal_over_key(TAG_PLAIN, body, key)

    def rekey(
        self, data: bytes, old_key: bytes | None, new_key: bytes, what: str, *, prefix: bytes = b""
    ) -> bytes:
        """:func:`rekey` (a record copied under another key)."""
        return rekey(data, old_key, new_key, what, prefix=prefix)

    # -- trained dictionary ---------------------------------------------------------

    def _sample_untrained(self, body: bytes) -> None:
        """Sample ``body`` for the dictionary while the final one is not known (bodies
        of :data:`DICT_MIN` to 16 KiB)."""
        if FINAL_DICT not in self.dictionaries and DICT_MIN <= len(body) <= 16 * 1024:
            self._sample(body)

    def _sample(self, body: bytes) -> None:
        if self._sample_bytes < TRAIN_BYTES or (
            len(self._samples) < TRAIN_RECORDS and self._sample_bytes < SAMPLE_BYTES_MAX
        ):
            self._samples.append(body)
            self._sample_bytes += len(body)

    def _final_due(self) -> bool:
        seen = self._sample_bytes
        return seen >= SAMPLE_BYTES_MAX or (
            seen >= TRAIN_BYTES and len(self._samples) >= TRAIN_RECORDS
        )

    def _early_due(self) -> bool:
        return (
            not self._early_tried
            and EARLY_DICT not in self.dictionaries
            and self._sample_bytes >= EARLY_BYTES
            and len(self._samples) >= EARLY_RECORDS
        )

    @property
    def has_final_dictionary(self) -> bool:
        """Whether the final record dictionary is known (its sampling has ended)."""
        return FINAL_DICT in self.dictionaries

    @property
    def final_due(self) -> bool:
        """Whether the samples suffice to train the final dictionary, which this codec
        lacks (then :attr:`wants_training` is true too)."""
        return not self.has_final_dictionary and self._final_due()

    @property
    def wants_training(self) -> bool:
        """True once enough records were seen to train a dictionary this codec lacks:
        the final one after :data:`TRAIN_BYTES` in :data:`TRAIN_RECORDS` records or
        more (or :data:`SAMPLE_BYTES_MAX` in fewer), the early one before that after
        :data:`EARLY_BYTES` in :data:`EARLY_RECORDS` records (once per process)."""
        if FINAL_DICT in self.dictionaries:
            return False
        return self._final_due() or self._early_due()

    def train(self) -> tuple[int, bytes]:
        """Train the dictionary :attr:`wants_training` asks for on the sampled envelopes:
        ``(dictionary id, dictionary)``, :data:`FINAL_DICT` or :data:`EARLY_DICT`.

        Checkpoint records and writes are small and alike (the same keys,
        versions and message structure every step); plain zstd cannot see
        across records. On a 300-turn chat here a 32 KiB dictionary took
        checkpoint records from 218 KB to 88 KB and writes from 187 KB to 87 KB.
        The samples are kept after the early dictionary: the final one is trained
        on them and what follows.
        """
        samples: list[bytes | bytearray | memoryview] = list(self._samples)
        if self._final_due():
            self._samples, self._sample_bytes = [], 0
            return FINAL_DICT, _CODEC_THREAD.run(_train, DICT_SIZE, samples)
        self._early_tried = True
        return EARLY_DICT, _CODEC_THREAD.run(_train, EARLY_DICT_SIZE, samples)

    def install(self, dict_id: int, dictionary: bytes, *, activate: bool = False) -> None:
        """Make a stored dictionary known (and, with ``activate``, used for new records).

        Installing the final dictionary ends sampling."""
        self.dictionaries[dict_id] = dictionary
        if activate:
            if self.active_dictionary is not None and self.active_dictionary != dict_id:
                self.compressor.release(self.active_dictionary)
            self.active_dictionary = dict_id
        if dict_id == FINAL_DICT:
            self._samples, self._sample_bytes = [], 0

    def _dictionary(self, dict_id: int) -> bytes:
        found = self.dictionaries.get(dict_id)
        if found is None:
            raise ValueError(f"dictionary {dict_id} is not in this store")
        return found

    def encode_delta(
        self,
        typed: tuple[str, bytes],
        base: bytes,
        base_ref: bytes,
        seq: int,
        writes: WriteDict | None = None,
        *,
        key: bytes | None = None,
    ) -> bytes | None:
        """Encode a ``[type, payload]`` record as a delta against earlier bytes.

        Layout (format 11): ``0x05 · header · zstd frame without its magic
        number · crc32`` (:func:`_pack_delta_body`). Before,
        ``0x02 · u32 header length · msgpack header · zstd frame · crc32``
        (still read), the header ``[base_ref, seq, type]``, or ``[base_ref,
        seq, type, lo, hi, crc]`` when the frame's dictionary also holds the
        channel's writes (format 2). A *splice* (format 8) appends
        ``[tail, *runs]`` to either header: the value is runs copied from the
        base and the literal bytes between them
        (:func:`~deltalog.engine.splice.splice_runs`), and the frame holds only
        the literal, compressed against the base's last ``tail`` bytes and the
        writes. It is used when the runs copy at least :data:`SPLICE_SHARE` of
        the value: a seed or a message list that grew at its end costs no zstd
        pass over the whole base (20-40 ms for a 2 MB seed at level 11). The dictionary is the base payload
        followed by ``writes.content``: the payloads of every write to the
        channel (idx ≥ 0) stored under the group's checkpoints ``lo`` … ``hi``
        (encoded checkpoint ids, inclusive), in key order, each without its
        array header when ``writes.items`` (format 15); a reader rebuilds it
        from the same range and checks it against ``crc`` (CRC-32 of the
        content). ``base_ref`` names the base record to the store (empty: no
        base, the writes alone); ``seq`` is the version's index since the
        channel's last full record, from which the store picks skip-delta
        bases. Returns None when the delta would not be smaller than an eighth
        of the payload (the caller then stores the full record).
        """
        tail = b""
        crc = 0
        if writes is not None:
            tail = writes.content
            crc = zlib.crc32(tail)
        if not base and not tail:
            return None
        level = (
            DELTA_LEVEL_LARGE
            if writes is not None and len(writes.content) >= WRITES_LARGE
            else DELTA_LEVEL
        )
        # One codec-thread job, like a zstd delta's: the splice's copies of the
        # base's tail and of the literal belong in that thread's arena too.
        spliced = _on_codec_thread(self._splice, typed[1], base, level, tail) if base else None
        splice: list[int] | None = None
        if spliced is not None:
            packed, splice = spliced
        else:
            packed = self.compressor.compress_with_base(typed[1], base, level, tail)
        framed = _TAG_BYTES[TAG_DELTA_COMPACT] + _pack_delta_body(
            typed[0], base_ref, seq, writes, crc, splice, packed
        )
        if len(framed) >= len(typed[1]) // 8:
            return None
        return _seal(framed, key, b"")

    def _splice(
        self, value: bytes, base: bytes, level: int, tail: bytes
    ) -> tuple[bytes, list[int]] | None:
        """A splice of ``value`` against ``base`` (:meth:`encode_delta`): the
        compressed literal and the header's ``[tail, *runs]``; None when the runs
        copy less than :data:`SPLICE_SHARE` of the value. On the codec thread."""
        runs, copied = splice_runs(value, base)
        if copied < SPLICE_SHARE * len(value):
            return None
        near = base[len(base) - min(len(base), SPLICE_TAIL) :]
        literal = splice_literal(value, runs)
        return self.compressor.compress_with_base(literal, near, level, tail), [len(near), *runs]

    def delta_header(
        self, data: bytes, what: str, *, key: bytes | None = None
    ) -> DeltaHeader | None:
        """The checked header of a delta record; None for a full record.

        Parse it once and hand it to :meth:`check_writes` and
        :meth:`decode_delta`: each parse checks the whole record's CRC.
        """
        if not data or data[0] & ~KEYED not in DELTA_TAGS:
            return None
        try:
            framed = memoryview(data)[:-CRC_SIZE]
            if not _crc_ok(memoryview(data), key, b""):
                raise ValueError("checksum mismatch")
            return _delta_fields(framed)
        except Exception as exc:
            raise _damaged(what, exc) from exc

    def delta_info(
        self, data: bytes, what: str, *, key: bytes | None = None
    ) -> tuple[bytes, int] | None:
        """``(base_ref, seq)`` of a delta record (``base_ref`` empty: no base); None
        for a full record."""
        head = self.delta_header(data, what, key=key)
        return None if head is None else (head.ref, head.seq)

    def delta_range(
        self, data: bytes, what: str, *, key: bytes | None = None
    ) -> tuple[bytes, bytes] | None:
        """``(lo, hi)`` checkpoint ids whose writes a delta record's dictionary
        holds; None for records that depend on no writes."""
        head = self.delta_header(data, what, key=key)
        return None if head is None else head.span

    def check_writes(self, head: DeltaHeader, writes: bytes, what: str) -> None:
        """Raise CorruptRecordError unless ``writes`` is the write content the
        record was encoded over (its header's CRC)."""
        if head.crc is not None and zlib.crc32(writes) != head.crc:
            raise CorruptRecordError(
                f"record {what} is a delta over the writes of checkpoints "
                f"{head.lo!r}…{head.hi!r}, which changed since it was written; run "
                "`deltalog verify` and restore from a backup"
            )

    def decode_delta(
        self, head: DeltaHeader, base: bytes, what: str, writes: bytes = b""
    ) -> list[Any]:
        """Decode a delta record (its :meth:`delta_header`) given its base payload
        and, for a record with a write range, the range's write content; returns
        ``[type, payload]``."""
        self.check_writes(head, writes, what)
        try:
            if head.splice is None:
                return [head.type, self.compressor.decompress_with_base(head.packed, base, writes)]
            # One codec-thread job, like a zstd delta's: the rebuilt value is as
            # large as the base, and its buffers belong in that thread's arena.
            value = _on_codec_thread(self._unsplice, head.packed, head.splice, base, writes, what)
            return [head.type, value]
        except CorruptRecordError:
            raise
        except Exception as exc:
            raise _damaged(what, exc) from exc

    def _unsplice(
        self, packed: bytes, splice: tuple[int, ...], base: bytes, writes: bytes, what: str
    ) -> bytes:
        """The value of a splice delta (:meth:`decode_delta`), on the codec thread."""
        tail, runs = splice[0], list(splice[1:])
        if tail > len(base):
            raise ValueError(f"the literal's dictionary needs {tail} base bytes")
        literal = self.compressor.decompress_with_base(packed, base[len(base) - tail :], writes)
        return splice_apply(runs, base, literal, what)

    def raw_size(
        self, data: bytes, what: str, *, prefix: bytes = b"", key: bytes | None = None
    ) -> int:
        """Size of a record's envelope before compression (from the frame header).

        The record's CRC is checked first (``prefix`` as for :meth:`decode`), so
        a damaged record gives CorruptRecordError naming ``what``, like every
        other read, never a zstandard error or a size read from garbage.
        """
        try:
            view = memoryview(data)
            framed = view[:-CRC_SIZE]
            if not _crc_ok(view, key, prefix):
                raise ValueError("checksum mismatch")
            tag = framed[0] & ~(KEYED | COMPACT)
            copied = 0
            if tag == TAG_ZSTD:
                frame = framed[1:]
            elif tag in (TAG_DICT, TAG_DICT_COMPACT):
                # The frame header alone says the size (at most 18 bytes, the magic
                # included): the id and the header are copied, not the frame.
                frame = memoryview(_dict_frame(tag, framed[1:23])[1])
            elif tag in DELTA_TAGS:
                head = _delta_fields(framed)
                frame = memoryview(head.packed)
                # A splice: the literal's size plus the runs copied from the base.
                copied = 0 if head.splice is None else sum(head.splice[3::3])
            else:
                return len(framed)
            size = zstandard.frame_content_size(frame)  # reads the header, copies nothing
            return int(size) + copied + 1 if size >= 0 else len(data)
        except Exception as exc:  # every failure here means the bytes are damaged
            raise _damaged(what, exc) from exc

    def _body_of(self, tag: int, payload: memoryview) -> memoryview | bytes:
        """The msgpack body of a full record: ``payload`` is what follows the tag
        byte (``tag`` without :data:`KEYED` and :data:`COMPACT`), CRC left out."""
        if tag == TAG_PLAIN:
            return payload
        if tag == TAG_ZSTD:
            return self.compressor.decompress(bytes(payload))
        if tag in (TAG_DICT_COMPACT, TAG_DICT):
            dict_id, frame = _dict_frame(tag, payload)
            return self.compressor.decompress_with_dict(frame, dict_id, self._dictionary(dict_id))
        if tag in DELTA_TAGS:
            raise ValueError("a delta record needs its base; read it through the store")
        raise ValueError(f"unknown record tag 0x{tag:02x}")

    def body(
        self, data: bytes, what: str, *, prefix: bytes = b"", key: bytes | None = None
    ) -> bytes | None:
        """A full record's msgpack body as it was compressed: checked by its CRC,
        decompressed, not unpacked (a checkpoint record stays in its compact form).
        None for a blob delta, whose body is a frame against its base. What the
        bytes breakdown compresses a turn's records from
        (:mod:`deltalog.bench.breakdown`, ``--pack``).

        Raises:
            CorruptRecordError: The record fails its CRC or cannot be decompressed.
        """
        view = memoryview(data)
        try:
            if not _crc_ok(view, key, prefix):
                raise ValueError("checksum mismatch")
            tag = view[0] & ~KEYED & ~COMPACT
            return None if tag in DELTA_TAGS else bytes(self._body_of(tag, view[1:-CRC_SIZE]))
        except Exception as exc:
            raise _damaged(what, exc) from exc

    def decode(
        self,
        data: bytes,
        what: str,
        *,
        prefix: bytes = b"",
        key: bytes | None = None,
        head: bool = False,
    ) -> Any:
        """Decode one record; ``what`` names it in the error (database and key).

        ``prefix`` is what :meth:`encode` was given and ``key`` the record's
        LMDB key (both checked by the CRC; ``key`` is needed for a record
        framed with it). ``head``: a checkpoint record whose body and metadata
        the caller does not read (a walk over parents, versions, inline values
        or run ids); a compact record leaves those four fields None
        (:func:`~deltalog.engine.checkpoint_form.expand`), a full one has them.
        """
        try:
            # The checks of _crc_ok, inlined: this runs once per record read.
            view = memoryview(data)
            end = len(view) - CRC_SIZE
            if end < 1:
                raise ValueError("checksum mismatch")
            tag = view[0]
            if tag & KEYED:
                if key is None:
                    raise ValueError(
                        "checksum mismatch: a record framed with its key was read without it"
                    )
                seed = zlib.crc32(key)
            else:
                seed = 0
            tag &= ~KEYED
            if prefix and tag not in DELTA_TAGS:
                seed = zlib.crc32(prefix, seed)
            if zlib.crc32(view[:end], seed) != int.from_bytes(view[end:], "big"):
                raise ValueError("checksum mismatch")
            compact = tag & COMPACT
            rec = ormsgpack.unpackb(self._body_of(tag & ~COMPACT, view[1:end]))
            if compact:
                if key is None:
                    raise ValueError("a compact checkpoint record read without its key")
                return checkpoint_form.expand(rec, bytes(key[-ID_TAIL:]), head=head)
            return rec
        except Exception as exc:  # every decode failure means the bytes are damaged
            raise _damaged(what, exc) from exc


# Frames trained dictionaries (encode_dictionary): plain, never compressed with one.
_DICT_CODEC: Final = RecordCodec(compress_threshold=None)
