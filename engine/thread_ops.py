"""Whole-thread writes: applying prune plans, copies, imports and deletions."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from deltalog.engine import keys
from deltalog.engine.checkpoint_writes import CheckpointWrites
from deltalog.engine.codec import COMPACT, KEYED, TAG_PLAIN
from deltalog.engine.core import Plan
from deltalog.engine.envelope import (
    CheckpointEnvelope,
    held_inline_typed,
    parent_in,
    split_write_value,
)
from deltalog.engine.errors import (
    InvalidInputError,
    ThreadExistsError,
)
from deltalog.engine.packs import body_of
from deltalog.engine.store_rows import (
    FLAG_HIDDEN,
    BlobRow,
    Typed,
    Version,
)

if TYPE_CHECKING:
    pass


class ThreadWrites(CheckpointWrites):
    """The maintenance writes over whole threads (R7)."""

    def delete_checkpoint(self, t: int, n: int, checkpoint_id: str, run_id: str | None) -> None:
        """Delete one checkpoint record, its writes and its run-index entry.

        Blobs are shared between checkpoints and are collected separately.
        """
        self.memo_everything = True
        cid = keys.encode_id(checkpoint_id)
        key = keys.checkpoint_key(t, n, cid)
        self.delete_checkpoint_raw(key)
        if run_id is not None:
            self.txn.delete(keys.run_key(keys.encode_run(run_id), t, n, cid), db=self.dbs.runs)
        self.delete_writes_raw(key)

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
        self.memo_everything = True
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
            raw = self.checkpoint_raw(key)
            if raw is None:
                continue
            where = f"checkpoints/{key.hex()}"
            env = CheckpointEnvelope.unpack(self.codec.decode(raw, where, key=key), where)
            if cid in plan.hide:
                env.flags |= FLAG_HIDDEN
            if cid in plan.unhide:
                env.flags &= ~FLAG_HIDDEN
            if cid in plan.relink:
                env.parent = parent_in(plan.relink[cid])
            raw, _ = self.codec.encode_checkpoint(env.pack(), key, keys.encode_id(cid))
            self.put_checkpoint_raw(key, raw)
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
        self.memo_everything = True
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
        # The copied blobs' write ranges need their marks in meta (see put_blob),
        # and the namespaces their forward-link marks (see _refuse_cycle).
        dbs = {**self.record_dbs(), "meta": self.dbs.meta}
        for name, head in (
            ("checkpoints", b""),
            ("writes", b""),
            ("blobs", b""),
            ("meta", keys.WDEP),
            ("meta", keys.FWD),
        ):
            db = dbs[name]
            prefix = head + keys.thread_prefix(s)
            copied = 0
            start = prefix
            while True:
                # Read a chunk, then write it: puts while a cursor walks the same
                # database could move the cursor.
                chunk: list[tuple[bytes, bytes]] = []
                # Checkpoints and writes through their cursors: packed ones too,
                # copied as the plain records they read as.
                if name == "checkpoints":
                    cur = self.checkpoint_cursor()
                elif name == "writes":
                    cur = self.write_cursor()
                else:
                    cur = self.txn.cursor(db=db)
                ok = cur.set_range(start)
                if ok and start != prefix and cur.key() == start:
                    ok = cur.next()
                while ok and len(chunk) < 1024 and cur.key().startswith(prefix):
                    chunk.append((cur.key(), cur.value()))
                    ok = cur.next()
                for key, value in chunk:
                    new_key = head + keys.rethread(key[len(head) :], d)
                    self.txn.put(new_key, self._rekeyed(name, key, new_key, value), db=db)
                    if name == "checkpoints":
                        where = f"checkpoints/{key.hex()}"
                        run_id = CheckpointEnvelope.unpack(
                            self.codec.decode(value, where, key=key, head=True), where
                        ).run_id
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

    def _rekeyed(self, db_name: str, key: bytes, new_key: bytes, value: bytes) -> bytes:
        """A record copied from ``key`` to ``new_key``, framed for its new key (format 5).

        Checkpoints, writes and blobs carry a CRC over their key; a write's
        channel-id prefix stays in front. Meta marks are copied as they are.
        """
        where = f"{db_name}/{key.hex()}"
        if db_name == "blobs":
            return self.codec.rekey(value, key, new_key, where)
        cbytes, record = b"", value
        if db_name == "writes":
            cbytes, _, record = split_write_value(value)
        elif db_name != "checkpoints":
            return value
        found = (
            body_of(self.codec, key, record, cbytes)
            if record[0] & ~KEYED & ~COMPACT == TAG_PLAIN
            else None
        )
        if found is not None:
            # A packed entry reads as an uncompressed record: stored alone, compress it.
            return cbytes + self.codec.encode_body(
                found[0], prefix=cbytes, key=new_key, compact=found[1]
            )
        return cbytes + self.codec.rekey(record, key, new_key, where, prefix=cbytes)

    def import_records(
        self,
        records: Sequence[dict[str, Any]],
        *,
        first_lines: Mapping[str, int] | None = None,
        until: Callable[[], bool] | None = None,
    ) -> dict[str, int]:
        """Store portable records that :func:`~deltalog.engine.import_check.check_import` passed.

        Every thread of the stream is checked to be new before the first write.

        Args:
            records: The validated records (no header).
            first_lines: The stream line of each thread's first record, for errors.
            until: Stop after the first checkpoint (and its writes) after which
                this is true, with the rest not stored (a dry run that only
                samples records for the dictionary, then is dropped).

        Raises:
            ThreadExistsError: A thread in the stream already has checkpoints here.
        """
        self.memo_everything = True
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
        # Stored in the order and form of the saver's own puts (docs/design.md,
        # "Imports"): each checkpoint with its small scalars and run input inside
        # its record and its other values as blobs, then its writes (the input
        # task's writes refer to the input; a later seed is encoded against
        # them), then turn packs.
        values: dict[tuple[str, str, str, Version], Typed] = {}
        writes: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for rec in records:
            if rec["kind"] == "blob":
                value = (rec["value"][0], rec["value"][1])
                values[(rec["thread_id"], rec["checkpoint_ns"], rec["channel"], rec["version"])] = (
                    value
                )
                counts["blobs"] += 1
            elif rec["kind"] == "write":
                under = (rec["thread_id"], rec["checkpoint_ns"], rec["checkpoint_id"])
                writes.setdefault(under, []).append(rec)
            elif rec["kind"] != "checkpoint":
                raise InvalidInputError(f"import record kind {rec['kind']!r} is unknown")
        held: set[tuple[str, str, str, Version]] = set()
        groups: dict[tuple[int, int], None] = {}
        for rec in records:
            if rec["kind"] != "checkpoint":
                continue
            thread_id, ns = rec["thread_id"], rec["checkpoint_ns"]
            inline: dict[str, Typed] = {}
            blobs: list[BlobRow] = []
            for channel, version in rec["channel_versions"].items():
                found = values.get((thread_id, ns, channel, version))
                if found is None:
                    continue
                held.add((thread_id, ns, channel, version))
                if held_inline_typed(channel, found):
                    inline[channel] = found
                else:
                    blobs.append(BlobRow(channel, version, found))
            self.put_checkpoint(
                thread_id,
                ns,
                rec["checkpoint_id"],
                parent_id=rec["parent_id"],
                channel_versions=rec["channel_versions"],
                checkpoint=(rec["checkpoint"][0], rec["checkpoint"][1]),
                metadata=(rec["metadata"][0], rec["metadata"][1]),
                run_id=rec["run_id"],
                blobs=blobs,
                delta=rec.get("delta", ()),
                flags=rec.get("flags", 0),
                inline=inline,
                pack=False,
            )
            groups[(self.intern(keys.KIND_THREAD, thread_id), self.intern(keys.KIND_NS, ns))] = None
            counts["checkpoints"] += 1
            counts["writes"] += self._import_writes(
                writes.pop((thread_id, ns, rec["checkpoint_id"]), [])
            )
            if until is not None and until():
                return counts
        for (thread_id, ns, channel, version), value in values.items():
            if (thread_id, ns, channel, version) not in held:  # no checkpoint has that version
                t = self.intern(keys.KIND_THREAD, thread_id)
                n = self.intern(keys.KIND_NS, ns)
                self.put_blob(t, n, channel, version, value)
        for rows in writes.values():  # under checkpoints the stream does not hold
            counts["writes"] += self._import_writes(rows)
        if self.env.pack_turns:
            for t, n in groups:
                while self.pack_behind(t, n):
                    pass
        return counts

    def _import_writes(self, rows: Sequence[dict[str, Any]]) -> int:
        """Store imported write records (of one checkpoint, in stream order); return
        how many."""
        for rec in rows:
            self.put_writes(
                rec["thread_id"],
                rec["checkpoint_ns"],
                rec["checkpoint_id"],
                rec["task_id"],
                rec["task_path"],
                [(rec["channel"], rec["idx"], (rec["value"][0], rec["value"][1]))],
            )
        return len(rows)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, write, blob and run entry of a thread."""
        self.memo_everything = True
        t = self.name_id(keys.KIND_THREAD, thread_id)
        if t is None:
            return
        prefix = keys.thread_prefix(t)
        for key, raw in list(self.iter_checkpoint_keys(prefix, start=None, reverse=False)):
            where = f"checkpoints/{key.hex()}"
            run_id = CheckpointEnvelope.unpack(
                self.codec.decode(raw, where, key=key, head=True), where
            ).run_id
            if run_id is not None:
                _, n, _ = keys.decode_checkpoint_key(key)
                self.txn.delete(
                    keys.run_key(keys.encode_run(run_id), t, n, keys.checkpoint_id_bytes(key)),
                    db=self.dbs.runs,
                )
        for db in self.record_dbs().values():
            self.delete_prefix(db, prefix)
        self.delete_packs_under(prefix)
        self.delete_prefix(self.dbs.meta, keys.WDEP + prefix)
        self.delete_prefix(self.dbs.meta, keys.FWD + prefix)
