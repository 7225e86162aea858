"""Checkpoints and their writes as the saver puts them (R1, R3, R8), parent cycles refused."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ormsgpack
from deltalog.engine import checkpoint_form, keys
from deltalog.engine.blobs import BlobWrites
from deltalog.engine.codec import Ahead
from deltalog.engine.envelope import (
    INPUT_CHANNEL,
    REF_MIN,
    CheckpointEnvelope,
    TaskPath,
    input_ref,
    parent_in,
    read_write,
    split_write_value,
    write_record,
)
from deltalog.engine.errors import (
    ParentCycleError,
)
from deltalog.engine.read_txn import ReadTxn
from deltalog.engine.store_rows import (
    BlobRow,
    Typed,
    Version,
)


class CheckpointWrites(BlobWrites, ReadTxn):
    """Putting checkpoints and writes: the saver's hot write path."""

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
        passed: Mapping[str, Typed] | None = None,
        minted: bool = False,
        made: checkpoint_form.Front | None = None,
        pack: bool = True,
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
        takes ``passed[channel]``, the caller's own small value (serialized), if any,
        else the value another record of the namespace holds at that version
        (:meth:`_held_elsewhere`).

        ``minted`` (the saver's own puts): every version not in ``carry`` is new
        in this put, so one without a value here has no blob of this
        checkpoint's (see :meth:`_blobbed`). ``pack=False`` (an import, which
        packs once its writes are in): no turn pack behind this record.
        """
        cid = keys.encode_id(checkpoint_id)
        if parent_id is not None:
            keys.encode_id(parent_id)  # validate before anything is written
        t = self.intern(keys.KIND_THREAD, thread_id)
        n = self.intern(keys.KIND_NS, checkpoint_ns)
        key = keys.checkpoint_key(t, n, cid)
        # The group's first key at or above this one: is it stored already, or
        # inserted below a newer checkpoint? (One seek, where the group's latest
        # key took two.)
        above = self.key_from(keys.ns_prefix(t, n), key)
        self._refuse_cycle(t, n, thread_id, checkpoint_id, parent_id)
        if parent_id is not None and keys.encode_id(parent_id) >= cid:
            # A link whose parent key is not below its own: from now on ordinary
            # puts of this namespace check the whole chain (see _refuse_cycle).
            self.txn.put(keys.fwd_key(t, n), b"", db=self.dbs.meta)
        for blob in blobs:
            self.put_blob(t, n, blob.channel, blob.version, blob.value, before=cid)
        held = dict(inline or {})
        # Mask bits known without a lookup (see _blobbed): this put's own blobs
        # (put_blob leaves each key present), the parent's bits of the versions
        # kept from it, and (minted) clear bits for new versions without a value.
        known: dict[str, bool] = {
            b.channel: True for b in blobs if channel_versions.get(b.channel) == b.version
        }
        if minted:
            for channel in channel_versions.keys() - set(carry):
                known.setdefault(channel, False)
        if carry:
            pversions: dict[str, Version] = {}
            pinline: dict[str, Any] = {}
            pmask: int | None = None
            if parent_id is not None:
                pkey = keys.checkpoint_key(t, n, keys.encode_id(parent_id))
                praw = self.checkpoint_raw(pkey)
                if praw is not None:
                    _, pversions, pinline, pmask = self._envelope(pkey, praw)
            pbits = (
                {} if pmask is None else {c: bool(pmask >> i & 1) for i, c in enumerate(pversions)}
            )
            unsettled: dict[str, Version] = {}
            for channel in carry:
                if channel in pversions and pversions[channel] == channel_versions[channel]:
                    # The parent settles it: its inline value, else a blob or empty.
                    typed = pinline.get(channel)
                    if channel in pbits:
                        known.setdefault(channel, pbits[channel])
                else:
                    typed = passed.get(channel) if passed is not None else None
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
        if above is not None:
            # Overwritten, or inserted below a newer checkpoint: it may be the
            # ancestor (or the missing parent) of a remembered history.
            self.memo_groups.add((t, n))
            old = self.checkpoint_raw(key) if above == key else None
            if old is not None:
                where = f"checkpoints/{key.hex()}"
                old_env = CheckpointEnvelope.unpack(self.codec.decode(old, where, key=key), where)
                if old_env.versions.get(INPUT_CHANNEL) != channel_versions.get(INPUT_CHANNEL):
                    # Its writes may refer to the input this put replaces.
                    self._materialize_refs(key)
                old_run = old_env.run_id
                if old_run is not None and old_run != run_id:
                    run_key = keys.run_key(keys.encode_run(old_run), t, n, cid)
                    self.txn.delete(run_key, db=self.dbs.runs)
        record = CheckpointEnvelope(
            parent_in(parent_id),
            channel_versions,
            checkpoint,
            metadata,
            flags,
            run_id,
            list(delta),
            {c: list(typed) for c, typed in held.items()},
            self._blobbed(t, n, channel_versions, held, known),
        )
        raw, body = self.codec.encode_checkpoint(record.pack(), key, cid, made)
        self.put_checkpoint_raw(key, raw)
        self._remember_envelope(key, raw, ormsgpack.unpackb(body))
        if run_id is not None:
            self.txn.put(keys.run_key(keys.encode_run(run_id), t, n, cid), b"", db=self.dbs.runs)
        if pack and self.env.pack_turns:
            self.pack_behind(t, n, key, raw)

    def _materialize_refs(self, ckey: bytes) -> int:
        """Rewrite the writes under checkpoint ``ckey`` that refer to its input as
        writes that hold their payload (before the record is replaced by one with
        another input). Payloads are unchanged, so no delta's write range changes.
        Returns how many were rewritten."""
        found: list[tuple[bytes, bytes, list[Any]]] = []
        cur = self.write_cursor()
        ok = cur.set_range(ckey)
        while ok and cur.key().startswith(ckey):
            key = cur.key()
            cbytes, _, record = split_write_value(cur.value())
            where = f"writes/{key.hex()}"
            ctype, payload, task_path = read_write(
                self.codec.decode(record, where, prefix=cbytes, key=key), where
            )
            if not isinstance(payload, bytes) and task_path is not None:
                typed = (ctype, self._referred(key, payload, where))
                found.append((key, cbytes, write_record(typed, task_path)))
            ok = cur.next()
        for key, cbytes, rec in found:
            raw = cbytes + self.codec.encode(rec, prefix=cbytes, key=key)
            self.put_write_raw(key, raw)
        return len(found)

    def _blobbed(
        self,
        t: int,
        n: int,
        versions: Mapping[str, Version],
        held: Mapping[str, Any],
        known: Mapping[str, bool],
    ) -> int:
        """The ``blobbed`` mask of a record: which of its versions have a blob.

        A read that finds no blob at a version whose bit is set raises
        :class:`CorruptRecordError` instead of reading an empty channel; reads
        look the blob up either way, so a clear bit only leaves that check out.
        ``known`` are bits found without a lookup: this put's own blobs (set:
        :meth:`put_blob` left the key present), the versions the record keeps
        from its parent (the parent's bits: a blob it had stays while a record
        refers to it) and, on the saver's own puts (``minted``), the versions it
        mints without a value (clear: only a blob another put stored under the
        same new version could be there). Every other channel not held inline
        costs one lookup.
        """
        mask = 0
        for i, (channel, version) in enumerate(versions.items()):
            if channel in held:
                continue
            bit = known.get(channel)
            if bit is not None:
                if bit:
                    mask |= 1 << i
                continue
            c = self.name_id(keys.KIND_CHANNEL, channel)
            blob = None if c is None else keys.blob_key(t, n, c, version)
            if blob is not None and self.txn.get(blob, db=self.dbs.blobs) is not None:
                mask |= 1 << i
        return mask

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
            _, versions, inline, _ = self._envelope(key, raw)
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
    ) -> None:
        """Raise :class:`ParentCycleError` if storing ``checkpoint_id`` under ``parent_id``
        would close a parent cycle (R11); called before anything of the put is written.

        The bound: every cycle has a link whose parent key is at least its
        child's key (keys cannot fall all the way round a loop), and the only
        records whose parent chain changes are the one being written and its
        descendants. So:

        * a parent equal to the checkpoint is refused at once;
        * a put whose parent key is below its own key (every put the runtime
          makes: uuid6 ids grow with time), in a (thread, ns) where no record
          has a parent key at least its own, cannot close a loop: every link
          there, the new one too, goes down, so no parent chain returns to a
          key it left. It reads nothing but the namespace's mark (below);
        * any other put walks the parent chain from the parent up to the root
          or a missing record, refusing when it reaches the checkpoint itself.
          The walk visits each record of the (thread, ns) at most once, so it
          costs at most one record read per checkpoint of the namespace.

        Every put that stores a link whose parent key is at least its own sets
        the namespace's forward-link mark (``keys.fwd_key``; the format-5
        migration set it for older stores; copies and compaction carry it), and
        with the mark set every put walks the whole chain. Until stop 32 the
        first case walked two ancestors as well; they could never close a loop
        (docs/benchmarks.md, stop 32).
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
        pkey = prefix + keys.encode_id(parent_id)
        if pkey < key and self.txn.get(keys.fwd_key(t, n), db=self.dbs.meta) is None:
            return
        cursor: bytes | None = pkey[len(prefix) :]
        chain = [key]  # keys: ids are decoded only for the error
        seen: set[bytes] = set()
        while cursor is not None:
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
            raw = self.checkpoint_raw(pkey)
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
        aheads: Sequence[Ahead | None] | None = None,
    ) -> None:
        """Append writes (R1, R2): idx ≥ 0 is first-writer-wins, special idx replaces.

        ``aheads`` (one per write, or None) are the writes' records compressed
        before this transaction (:func:`~deltalog.engine.prepare.prepare_writes`).

        The checkpoint need not exist yet; the writes of the task that reads the
        run's input (its path names :data:`~deltalog.engine.envelope.INPUT_CHANNEL`) look
        for the input the checkpoint stored, and a write whose payload is part of
        it is stored as a reference (format 7, :func:`~deltalog.engine.envelope.input_ref`):
        on a chat, the human message is stored once instead of twice.
        """
        cid = keys.encode_id(checkpoint_id)
        # Build (and so validate) every key before the first put.
        t = self.intern(keys.KIND_THREAD, thread_id)
        n = self.intern(keys.KIND_NS, checkpoint_ns)
        rows = [
            (keys.write_key(t, n, cid, task_id, idx), channel, idx, value)
            for channel, idx, value in writes
        ]
        ckey = keys.checkpoint_key(t, n, cid)
        if self.key_from(keys.ns_prefix(t, n), ckey + b"\x00") is not None:
            # Writes under a checkpoint that has a newer one may belong to the
            # ancestor of a remembered history.
            self.memo_groups.add((t, n))
        source = None
        if INPUT_CHANNEL in task_path and any(len(v[1]) >= REF_MIN for _, _, v in writes):
            source = self._input_of(ckey)
        source_id = None if source is None else self.name_id(keys.KIND_CHANNEL, INPUT_CHANNEL)
        # Format 10: records built here hold the path's interned id (a record compressed
        # ahead of the transaction holds the path itself).
        path: TaskPath = task_path
        if aheads is None or any(a is None for a in aheads):
            path = self.intern(keys.KIND_TASK_PATH, task_path)
        for i, (key, channel, idx, value) in enumerate(rows):
            c = self.intern(keys.KIND_CHANNEL, channel)
            cbytes = keys.uid(c)
            record = None
            if source is not None and source_id is not None:
                record = input_ref(value, path, source_id, source)
            ahead = aheads[i] if aheads is not None and record is None else None
            if ahead is not None:
                body = ahead.body  # write_record(value, task_path), packed
            else:
                body = ormsgpack.packb(record if record is not None else write_record(value, path))
            raw = cbytes + self.codec.encode_body(body, prefix=cbytes, key=key, ahead=ahead)
            if idx >= 0:
                # A new write under a checkpoint that a delta blob's write range
                # covers would change that blob's dictionary: rebase it first.
                mark = self.txn.get(keys.wdep_key(t, n, c), db=self.dbs.meta)
                if mark is not None and cid <= bytes(mark) and self.write_raw(key) is None:
                    self.rebase_blobs(t, n, hit=lambda lo, hi: lo <= cid <= hi, channel=c)
            self.put_write_raw(key, raw, overwrite=idx < 0)
