"""The ordered on-disk format migrations (R10).

``MIGRATIONS`` lists every step ``(from_version, to_version, step)``; the steps
chain from format 1 to :data:`~deltalog.engine.keys.FORMAT_VERSION` with no gap.
A writable open of an older store runs the steps it needs, in order, inside
one write transaction that also records the new ``format_version``: a crash
leaves the store at the old format, never between two. A read-only open runs
none (R12): it reads the old format as it is.

==========  =================================================================
step        what changes on disk
==========  =================================================================
1 → 2       nothing is rewritten: format 2 only adds delta blobs over writes
2 → 3       nothing is rewritten: format 3 only adds values held inside
            checkpoint records
3 → 4       every ``names`` and ``names_rev`` record is rewritten with a
            CRC-32 over its key and value (:mod:`deltalog.engine.names`)
4 → 5       every ``checkpoints``, ``writes``, ``blobs``, ``items`` and
            ``item_vectors`` record, every ``item_ns`` reverse record (and the
            trained dictionary, ``meta/dict:N``) is re-framed
            with a CRC-32 that also covers its key (tag bit
            :data:`~deltalog.engine.codec.KEYED`); nothing is decompressed. A
            record that fails its CRC is left as it was (reads and ``verify``
            report it as before), so damage cannot block the upgrade
            (:func:`key_records`); and the memory store's item counts: one
            ``item_ns`` count record per namespace (its items, those with a
            TTL), counted from the ``items`` and ``item_ttl`` keys (nothing is
            decoded or rewritten; :func:`count_items`); the change counter
            record appears with the first memory write; item records are
            written in a shorter layout from then on (the format 4 layout
            still reads, so none is rewritten); a forward-link mark per
            (thread, ns) holding a checkpoint whose parent key is at least
            its own (:func:`mark_forward_links`); every checkpoint record
            re-encoded with its blob mask (:func:`mask_blobs`)
5 → 6       the memory store's items are packed: each namespace's one-item
            ``items`` records become chunk records of several items each
            (:func:`deltalog.engine.memory_chunks.pack_items`); a record that
            fails its CRC stays where it is, and the chunks end before it
6 → 7       every write moves to a shorter key (the task path goes into the
            record, a UUID task id takes 16 bytes) and is re-encoded over it
            (:func:`compact_write_keys`); a damaged one stays where it is.
            Format 7 also adds write records that refer to the input their
            checkpoint stored instead of holding a copy (none is rewritten)
7 → 8       nothing is rewritten: format 8 only adds splice deltas, blobs
            stored as runs copied from their base plus the bytes between
            (:mod:`deltalog.engine.splice`); the zstd deltas of format 7 and
            before still read
8 → 9       nothing is rewritten: format 9 only adds a shorter frame for
            records compressed with the trained dictionary (a one-byte
            dictionary id, the zstd frame without its magic number or a
            dictionary id: :data:`~deltalog.engine.codec.TAG_DICT_COMPACT`),
            and the early dictionary (``meta/dict:0``,
            :data:`~deltalog.engine.codec.EARLY_DICT`); the records of format
            8 and before still read
9 → 10      every blob moves to a key with the version before the channel,
            re-framed over it (:func:`version_major_blobs`); a damaged one
            stays where it is. A thread's new blobs then go at the end of its
            key range, where LMDB fills its pages. Write records hold their
            task path's interned id from then on (a path string still reads;
            none is rewritten)
10 → 11     nothing is rewritten: format 11 only adds delta records with a
            compact header (:data:`~deltalog.engine.codec.TAG_DELTA_COMPACT`);
            the deltas of format 10 and before still read
11 → 12     nothing is rewritten: format 12 only adds checkpoint records in
            a compact form (:data:`~deltalog.engine.codec.COMPACT`,
            :mod:`deltalog.engine.checkpoint_form`); the records of format 11
            and before still read
12 → 13     nothing is rewritten: format 13 only adds compact records whose
            metadata source number is past 3 (the step's turns of the id's
            14-bit clock sequence); format 12 records still read
13 → 14     nothing is rewritten: format 14 adds the turn packs'
            databases (``packs``, ``pack_index``, created by the writable
            open), which older code would not read; plain records still read
14 → 15     nothing is rewritten: format 15 only adds delta records whose
            write dictionary holds each payload without its top-level msgpack
            array header (flag ``0x40`` of the compact header,
            :func:`~deltalog.engine.codec.array_items`); the deltas of format
            14 and before still read over the payloads as stored
15 → 16     nothing is rewritten: format 16 only adds packs that carry a
            large record in chunks after them in the ``packs`` log
            (:data:`~deltalog.engine.packs.OUTSIDE_MAX`), which older code
            would read as damaged; the packs of format 15 still read
==========  =================================================================

Steps are fed the raw transaction and database handles: only
:mod:`deltalog.engine.env_open` runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol

from deltalog.engine import keys
from deltalog.engine.codec import RecordCodec, decode_dictionary, encode_dictionary, rekey
from deltalog.engine.envelope import (
    PARENT,
    CheckpointEnvelope,
    read_write,
    split_write_value,
    write_record,
)
from deltalog.engine.errors import CorruptRecordError
from deltalog.engine.names import (
    decode_name_id,
    decode_name_rev,
    encode_name_id,
    encode_name_rev,
)

__all__ = ["MIGRATIONS", "Migration", "NameDbs", "count_items", "pending"]


class NameDbs(Protocol):
    """The database handles a migration step uses (the environment's ``Dbs``)."""

    names: Any
    names_rev: Any
    checkpoints: Any
    writes: Any
    blobs: Any
    meta: Any
    items: Any
    item_ns: Any
    item_ttl: Any
    item_vectors: Any


Migration = Callable[[Any, NameDbs, RecordCodec], None]
"""A step: given an open write transaction, the database handles and the record codec
(with the store's dictionary), rewrite in place."""


def _records_only_added(txn: Any, dbs: NameDbs, codec: RecordCodec) -> None:
    """Formats 2, 3, 8, 9, 11, 12 and 13 only add record shapes that older stores lack: nothing to
    rewrite."""


def checksum_names(txn: Any, dbs: NameDbs, codec: RecordCodec) -> None:
    """Format 4: rewrite every name record with a CRC over its key and value.

    Each record is decoded in the old layout first, so one that format 3 could
    not read either (a malformed length) stops the upgrade with
    CorruptRecordError, and the store stays as it was.
    """
    for db in (dbs.names, dbs.names_rev):
        rows = list(txn.cursor(db=db).iternext(keys=True, values=True))
        for key, raw in rows:
            key = bytes(key)
            if db is dbs.names:
                name_id, name = decode_name_id(key, raw, crc=False)
                value = encode_name_id(key, name_id, name)
            else:
                value = encode_name_rev(key, decode_name_rev(key, raw, crc=False))
            txn.put(key, value, db=db)


def key_records(txn: Any, dbs: NameDbs, codec: RecordCodec) -> None:
    """Format 5: re-frame every checkpoint, write, blob and memory record over its key."""
    for name, db in (
        ("checkpoints", dbs.checkpoints),
        ("writes", dbs.writes),
        ("blobs", dbs.blobs),
        ("items", dbs.items),
        ("item_vectors", dbs.item_vectors),
        ("item_ns", dbs.item_ns),
    ):
        if db is None:  # a memory database a store older than the memory store lacks
            continue
        rows = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db).iternext(keys=True, values=True)]
        if name == "item_ns":  # only the reverse records (id -> labels) are codec records
            rows = [(k, v) for k, v in rows if k[:1] == keys.ITEM_NS_REV]
        for key, raw in rows:
            what = f"{name}/{key.hex()}"
            try:
                if name == "writes":
                    cbytes, _, record = split_write_value(raw)
                    value = cbytes + rekey(record, key, key, what, prefix=cbytes)
                else:
                    value = rekey(raw, key, key, what)
            except CorruptRecordError:
                continue  # damaged: left for reads and verify to report
            txn.put(key, value, db=db)
    cur = txn.cursor(db=dbs.meta)
    found = cur.set_range(b"dict:")
    dicts: list[tuple[bytes, bytes]] = []
    while found and bytes(cur.key()).startswith(b"dict:"):
        dicts.append((bytes(cur.key()), bytes(cur.value())))
        found = cur.next()
    for key, raw in dicts:
        try:
            dictionary = decode_dictionary(key, raw, legacy=True)
        except CorruptRecordError:
            continue  # damaged: left for verify to report
        txn.put(key, encode_dictionary(key, dictionary), db=dbs.meta)


def count_items(txn: Any, dbs: NameDbs, codec: RecordCodec) -> None:
    """Format 5: write every namespace's item counts (``list_namespaces`` reads them).

    A store without memory databases (created before them, first opened
    writable now: they were just created empty) has nothing to count.
    """
    if dbs.item_ns is None:
        return
    # Here, not at the top: memory_core imports LangGraph's store types, which
    # the CLI's fast commands must not load (issue 19, fast start).
    from deltalog.engine.memory_core import encode_counts, ns_of

    items: dict[int, int] = {}
    with_ttl: dict[int, int] = {}
    for key in txn.cursor(db=dbs.items).iternext(values=False):
        ns_id = ns_of(bytes(key))
        items[ns_id] = items.get(ns_id, 0) + 1
    for key in txn.cursor(db=dbs.item_ttl).iternext(values=False):
        ns_id = ns_of(bytes(key)[8:])
        with_ttl[ns_id] = with_ttl.get(ns_id, 0) + 1
    cur = txn.cursor(db=dbs.item_ns)
    ok = cur.set_range(keys.ITEM_NS_REV)
    found: list[int] = []
    while ok and cur.key()[:1] == keys.ITEM_NS_REV:
        found.append(keys.decode_item_ns_rev_key(bytes(cur.key())))
        ok = cur.next()
    for ns_id in found:
        value = encode_counts(ns_id, items.get(ns_id, 0), with_ttl.get(ns_id, 0))
        txn.put(keys.item_count_key(ns_id), value, db=dbs.item_ns)


def mark_forward_links(txn: Any, dbs: NameDbs, codec: RecordCodec) -> None:
    """Format 5: mark every (thread, ns) holding a checkpoint whose parent key is at least
    its own (``keys.fwd_key``), so ordinary puts there check the whole parent chain.

    Reads each checkpoint record's parent; a record it cannot read is skipped (reads and
    verify report it) and its namespace marked, to be safe.
    """
    for key, raw in txn.cursor(db=dbs.checkpoints).iternext(keys=True, values=True):
        key = bytes(key)
        try:
            (t, n), end = keys.split_ids(key, 2)
            parent = codec.decode(bytes(raw), f"checkpoints/{key.hex()}", key=key)[PARENT]
        except CorruptRecordError:
            parent = key[end:]  # unreadable: mark its namespace
        except Exception:
            continue  # a key that does not decode: verify reports it
        if isinstance(parent, str):  # the oldest records held the id itself
            parent = keys.encode_id(parent)
        if parent is not None and bytes(parent) >= key[end:]:
            txn.put(keys.fwd_key(t, n), b"", db=dbs.meta)


def mask_blobs(txn: Any, dbs: NameDbs, codec: RecordCodec) -> None:
    """Format 5: give every checkpoint record its ``blobbed`` mask (which of its versions
    have a blob), so a blob lost later reads as damage, not as an empty channel.

    Each record is decoded, its versions' blobs looked up and the record re-encoded
    (with the store's dictionary); a record that cannot be read is left as it was.
    """
    channel_ids: dict[str, int | None] = {}

    def channel_id(name: str) -> int | None:
        if name not in channel_ids:
            nkey = keys.name_key(keys.KIND_CHANNEL, name)
            raw = txn.get(nkey, db=dbs.names)
            found = None if raw is None else decode_name_id(nkey, bytes(raw), crc=True)
            channel_ids[name] = None if found is None or found[1] not in (None, name) else found[0]
        return channel_ids[name]

    rows = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=dbs.checkpoints).iternext()]
    for key, raw in rows:
        what = f"checkpoints/{key.hex()}"
        try:
            (t, n), _ = keys.split_ids(key, 2)
            env = CheckpointEnvelope.unpack(codec.decode(raw, what, key=key), what)
        except Exception:
            continue  # damaged: left for reads and verify to report
        if env.blobbed is not None:
            continue
        mask = 0
        for i, (channel, version) in enumerate(env.versions.items()):
            c = None if channel in env.inline else channel_id(channel)
            bkey = None if c is None else keys.blob_key(t, n, c, version, legacy=True)
            if bkey is not None and txn.get(bkey, db=dbs.blobs) is not None:
                mask |= 1 << i
        env.blobbed = mask
        txn.put(key, codec.encode(env.pack(), key=key), db=dbs.checkpoints)


def compact_write_keys(txn: Any, dbs: NameDbs, codec: RecordCodec) -> None:
    """Format 7: every write moves to its format 7 key and its record takes the task path.

    The key ``thread · ns · checkpoint_id · task_path · task_id · idx`` becomes
    ``thread · ns · checkpoint_id · task_id · idx`` (a UUID task id in 16
    bytes) and the record ``[type, bytes]`` becomes ``[type, bytes, task_path]``,
    re-encoded over its new key. Done one checkpoint's writes at a time. A
    record that fails its CRC (or a key that does not decode) is left under its
    old key, which reads and ``verify`` report as damaged, so damage cannot
    block the upgrade. Two writes of one checkpoint that differ only in their
    task path (no LangGraph run makes them) keep the first, as ``put_writes``
    now does. Payloads are unchanged, so no delta blob's write range changes:
    reads put each checkpoint's writes in ``writes_sort_key`` order, the order
    of the old keys. (``codec`` holds the store's dictionaries: the environment hands
    them over at its first read, before any step runs.)
    """
    cur = txn.cursor(db=dbs.writes)
    ok = cur.first()
    while ok:
        try:
            ckey = keys.write_checkpoint_key(bytes(cur.key()))
        except CorruptRecordError:  # a damaged key: left for verify to report
            ok = cur.next()
            continue
        group: list[tuple[bytes, bytes]] = []
        while ok and bytes(cur.key()).startswith(ckey):
            group.append((bytes(cur.key()), bytes(cur.value())))
            ok = cur.next()
        cid = keys.checkpoint_id_bytes(ckey)
        moves: list[tuple[bytes, bytes, bytes]] = []
        for key, raw in group:
            what = f"writes/{key.hex()}"
            try:
                t, n, _, task_path, task_id, idx = keys.decode_legacy_write_key(key)
                cbytes, _, record = split_write_value(raw)
                ctype, payload, stored_path = read_write(
                    codec.decode(record, what, prefix=cbytes, key=key), what
                )
                if stored_path is not None or not isinstance(payload, bytes):
                    continue  # not a format 6 record: left as it is
                new_key = keys.write_key(t, n, cid, task_id, idx)
                rec = write_record((ctype, payload), task_path)
                moves.append((key, new_key, cbytes + codec.encode(rec, prefix=cbytes, key=new_key)))
            except CorruptRecordError:
                continue  # damaged: left for reads and verify to report
        ok = _apply_moves(txn, dbs.writes, cur, moves, ckey)


def _apply_moves(
    txn: Any, db: Any, cur: Any, moves: list[tuple[bytes, bytes, bytes]], prefix: bytes
) -> bool:
    """Move records to new keys: ``moves`` holds (old key, new key, new value). Every old
    key is deleted first, then each new one put (a key already there keeps its record).
    Leaves ``cur`` past every key under ``prefix``, the moved ones and any left behind;
    returns whether it is on a key."""
    for key, _, _ in moves:
        txn.delete(key, db=db)
    for _, new_key, value in moves:
        txn.put(new_key, value, overwrite=False, db=db)
    ok = bool(cur.set_range(prefix))
    while ok and bytes(cur.key()).startswith(prefix):
        ok = cur.next()
    return ok


def version_major_blobs(txn: Any, dbs: NameDbs, codec: RecordCodec) -> None:
    """Format 10: every blob moves from ``thread · ns · channel · version`` to
    ``thread · ns · version · channel`` and is re-framed over its new key.

    One (thread, ns) at a time: its blobs are read, deleted and put under their
    new keys. Nothing is decompressed, and a delta names its base by version
    bytes, which do not change. A record that fails its CRC (or a key that does
    not decode) stays under its old key, which reads and ``verify`` report as
    damaged, so damage cannot block the upgrade.
    """
    cur = txn.cursor(db=dbs.blobs)
    ok = cur.first()
    while ok:
        try:
            prefix = keys.ns_prefix(*keys.split_ids(bytes(cur.key()), 2)[0])
        except CorruptRecordError:  # a damaged key: left for verify to report
            ok = cur.next()
            continue
        moves: list[tuple[bytes, bytes, bytes]] = []
        while ok and bytes(cur.key()).startswith(prefix):
            key, raw = bytes(cur.key()), bytes(cur.value())
            ok = cur.next()
            try:
                t, n, c, version = keys.decode_blob_key(key, legacy=True)
                new_key = keys.blob_key(t, n, c, version)
                moves.append((key, new_key, rekey(raw, key, new_key, f"blobs/{key.hex()}")))
            except CorruptRecordError:
                continue  # damaged: left for reads and verify to report
        ok = _apply_moves(txn, dbs.blobs, cur, moves, prefix)


def format_5(txn: Any, dbs: NameDbs, codec: RecordCodec) -> None:
    """Format 5: records framed over their keys, and the memory store's item counts."""
    key_records(txn, dbs, codec)
    count_items(txn, dbs, codec)
    mark_forward_links(txn, dbs, codec)
    mask_blobs(txn, dbs, codec)


def format_6(txn: Any, dbs: NameDbs, codec: RecordCodec) -> None:
    """Format 6: the memory store's items packed into chunk records."""
    if dbs.items is None:  # a store older than the memory store: nothing to pack
        return
    # Here, not at the top: memory_core imports LangGraph's store types (fast start).
    from deltalog.engine.memory_chunks import pack_items

    pack_items(txn, dbs.items, codec)


MIGRATIONS: Final[tuple[tuple[int, int, Migration], ...]] = (
    (1, 2, _records_only_added),
    (2, 3, _records_only_added),
    (3, 4, checksum_names),
    (4, 5, format_5),
    (5, 6, format_6),
    (6, 7, compact_write_keys),
    (7, 8, _records_only_added),
    (8, 9, _records_only_added),
    (9, 10, version_major_blobs),
    (10, 11, _records_only_added),
    (11, 12, _records_only_added),
    (12, 13, _records_only_added),
    (13, 14, _records_only_added),
    (14, 15, _records_only_added),
    (15, 16, _records_only_added),
)


def pending(version: int) -> list[tuple[int, int, Migration]]:
    """The steps that take a store of ``version`` to the current format, in order."""
    steps = [m for m in MIGRATIONS if m[0] >= version]
    at = version
    for old, new, _ in steps:
        if old != at:
            break
        at = new
    if at != keys.FORMAT_VERSION:
        raise ValueError(f"no migration path from format {version} to {keys.FORMAT_VERSION}")
    return steps
