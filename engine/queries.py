"""Whole-store and whole-thread queries: summaries, sizes, references, export rows."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from deltalog.engine import keys
from deltalog.engine.codec import decode_dictionary
from deltalog.engine.core import Plan
from deltalog.engine.envelope import (
    CheckpointEnvelope,
    inline_of,
    split_write_value,
)
from deltalog.engine.errors import CorruptRecordError
from deltalog.engine.history import HistoryReads
from deltalog.engine.store_rows import (
    CheckpointRow,
    ThreadSummary,
    Version,
)

if TYPE_CHECKING:
    pass


class QueryReads(HistoryReads):
    """What inspection, maintenance and export read from a snapshot."""

    def checkpoint_ids(self, t: int, n: int) -> Iterator[str]:
        """The checkpoint ids of (thread, ns), newest first, hidden ones included (keys only)."""
        for key, _ in self.iter_checkpoint_keys(keys.ns_prefix(t, n), start=None, reverse=True):
            yield keys.decode_checkpoint_key(key)[2]

    def checkpoints_below(
        self, t: int, n: int, before_id: str | None, limit: int
    ) -> tuple[list[CheckpointRow], str | None]:
        """Up to ``limit`` checkpoints of (thread, ns) newest first, with their values and
        writes, whose ids are below ``before_id`` (all when None); and the id of the last
        one read, to go on from in another transaction (None when there was none)."""
        start = None if before_id is None else keys.checkpoint_key(t, n, keys.encode_id(before_id))
        rows: list[CheckpointRow] = []
        last: str | None = None
        for key, _ in self.iter_checkpoint_keys(keys.ns_prefix(t, n), start=start, reverse=True):
            last = keys.decode_checkpoint_key(key)[2]
            row = self.checkpoint(t, n, last)
            if row is not None:
                rows.append(row)
            if len(rows) >= limit:
                break
        return rows, last

    def referenced_blob_keys(
        self, t: int, n: int, versions: Iterable[dict[str, Version]]
    ) -> set[bytes]:
        """Blob keys that the given channel-version maps point at."""
        out: set[bytes] = set()
        for vers in versions:
            for channel, version in vers.items():
                c = self.name_id(keys.KIND_CHANNEL, channel)
                if c is not None:
                    out.add(keys.blob_key(t, n, c, version, legacy=self.legacy_blobs))
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
        cur_c = self.checkpoint_cursor()
        cur_w = self.write_cursor()
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
            where = f"checkpoints/{key.hex()}"
            env = CheckpointEnvelope.unpack(self.codec.decode(raw, where, key=key), where)
            _, n, cid = keys.decode_checkpoint_key(key)
            out.append((self.name_of(keys.KIND_NS, n), cid, env.parent_id, env.hidden))
        return out

    def thread_summaries(self) -> list[ThreadSummary]:
        """Per thread: checkpoints, namespaces, newest id, stored bytes — from keys and sizes.

        Nothing is decoded, so this stays fast on many threads.
        """
        out: dict[int, ThreadSummary] = {}
        cur = self.checkpoint_cursor()
        for key in cur.iternext(keys=True, values=False):
            (t, n), pos = keys.split_ids(key, 2)
            s = out.get(t)
            if s is None:
                s = out[t] = ThreadSummary(self.name_of(keys.KIND_THREAD, t))
            s.checkpoints += 1
            ns = self.name_of(keys.KIND_NS, n)
            if ns not in s.namespaces:
                s.namespaces.append(ns)
            cid = key[pos:]
            if ns == "" and (s.newest_key is None or cid > s.newest_key):
                s.newest_key = cid
                s.newest_id = keys.decode_id(key, pos)[0]
        for key in self.write_cursor().iternext(keys=True, values=False):
            s = out.get(keys.decode_uid(key, 0)[0])
            if s is not None:
                s.writes += 1
        # Bytes as stored: plain records, and each pack (with its index entry) whole.
        for key, value in self.raw_records():
            s = out.get(keys.decode_uid(key, 0)[0])
            if s is not None:
                s.bytes += len(key) + len(value)
        for key, value in self.txn.cursor(db=self.dbs.blobs).iternext(keys=True, values=True):
            s = out.get(keys.decode_uid(key, 0)[0])
            if s is not None:
                s.bytes += len(key) + len(value)
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
            e = named(keys.decode_uid(keys.blob_channel(key, legacy=self.legacy_blobs), 0)[0])
            e["blobs"] += 1
            e["blob_bytes"] += len(value)
            e["raw_bytes"] += self.codec.raw_size(value, f"blobs/{key.hex()}", key=key)
        for key, value in self.write_cursor().iternext(keys=True, values=True):
            cbytes, channel_id, record = split_write_value(value)
            e = named(channel_id)
            e["writes"] += 1
            e["write_bytes"] += len(value)
            e["raw_bytes"] += len(cbytes) + self.codec.raw_size(
                record, f"writes/{key.hex()}", prefix=cbytes, key=key
            )
        for key, value in self.checkpoint_cursor().iternext(keys=True, values=True):
            for channel, typed in inline_of(
                self.codec.decode(value, f"checkpoints/{key.hex()}", key=key, head=True)
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
            where = f"checkpoints/{key.hex()}"
            env = CheckpointEnvelope.unpack(self.codec.decode(raw, where, key=key), where)
            _, n, cid = keys.decode_checkpoint_key(key)
            for channel, typed in env.inline.items():
                if channel in env.versions:
                    held.setdefault((n, channel, env.versions[channel]), typed)
            yield {
                "kind": "checkpoint",
                "thread_id": thread_id,
                "checkpoint_ns": self.name_of(keys.KIND_NS, n),
                "checkpoint_id": cid,
                "parent_id": env.parent_id,
                "channel_versions": env.versions,
                "checkpoint": list(env.checkpoint),
                "metadata": list(env.metadata),
                "flags": env.flags,
                "run_id": env.run_id,
                "delta": list(env.delta),
            }
        cur = self.txn.cursor(db=self.dbs.blobs)
        ok = cur.set_range(prefix)
        while ok and cur.key().startswith(prefix):
            key = cur.key()
            _, n, c, version = keys.decode_blob_key(key, legacy=self.legacy_blobs)
            channel = self.name_of(keys.KIND_CHANNEL, c)
            held.pop((n, channel, version), None)
            yield blob(n, channel, version, self.blob_typed(key, cur.value()))
            ok = cur.next()
        for (n, channel, version), typed in held.items():
            yield blob(n, channel, version, typed)
        cur = self.write_cursor()
        ok = cur.set_range(prefix)
        while ok and cur.key().startswith(prefix):
            key, raw = cur.key(), cur.value()
            ckey = keys.write_checkpoint_key(key)
            _, n, cid = keys.decode_checkpoint_key(ckey)
            cbytes, channel_id, record = split_write_value(raw)
            task_path, task_id, idx, (ctype, payload) = self.write_row(
                key, len(ckey), cbytes, record
            )
            yield {
                "kind": "write",
                "thread_id": thread_id,
                "checkpoint_ns": self.name_of(keys.KIND_NS, n),
                "checkpoint_id": cid,
                "task_id": task_id,
                "task_path": task_path,
                "idx": idx,
                "channel": self.name_of(keys.KIND_CHANNEL, channel_id),
                "value": [ctype, payload],
            }
            ok = cur.next()

    def namespaces(self, t: int) -> list[int]:
        """Interned ns ids that hold checkpoints of thread ``t``, ascending."""
        out: list[int] = []
        cur = self.checkpoint_cursor()
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
        cur = self.checkpoint_cursor()
        ok = cur.first()
        while ok:
            t = keys.decode_uid(cur.key(), 0)[0]
            out.append(t)
            ok = cur.set_range(keys.thread_prefix(t + 1)) if t + 1 < 2**64 else False
        return out

    def has_thread_rows(self, t: int) -> bool:
        """True if thread ``t`` has any checkpoint, write or blob."""
        prefix = keys.thread_prefix(t)
        for db in self.record_dbs().values():
            cur = self.txn.cursor(db=db)
            if cur.set_range(prefix) and cur.key().startswith(prefix):
                return True
        return self.has_packs_under(prefix)

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
        """Trained record dictionaries stored in ``meta`` (``dict:N``), by id, CRC-checked.

        Raises:
            CorruptRecordError: A dictionary record is damaged (naming it).
        """
        out: list[tuple[int, bytes]] = []
        legacy = self.env.format_version < keys.KEYED_FORMAT
        cur = self.txn.cursor(db=self.dbs.meta)
        ok = cur.set_range(b"dict:")
        while ok and cur.key().startswith(b"dict:"):
            key = bytes(cur.key())
            try:
                dict_id = int(key[5:])
            except ValueError as exc:
                raise CorruptRecordError(f"meta key {key!r} is damaged") from exc
            out.append((dict_id, decode_dictionary(key, cur.value(), legacy=legacy)))
            ok = cur.next()
        return sorted(out)
