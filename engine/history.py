"""The delta-history walk of a thread (R6), cold or through the history memo."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from deltalog.engine import keys
from deltalog.engine.blobs import BlobReads
from deltalog.engine.core import DeltaWalk, Node, parent_cycles
from deltalog.engine.envelope import (
    RawNode,
    inline_value,
    parent_out,
)
from deltalog.engine.errors import (
    CorruptRecordError,
)
from deltalog.engine.store_rows import (
    FLAG_HIDDEN,
    DeltaHistory,
    HistoryEntry,
    StoredValue,
    Version,
    WriteRow,
)
from deltalog.engine.txn_base import (
    MAX_WALK,
)

if TYPE_CHECKING:
    pass


class HistoryReads(BlobReads):
    """Seeds and writes of delta channels back from a checkpoint, and the walk's groups."""

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
                return histories(walk)
            checkpoint_id = keys.decode_checkpoint_key(target)[2]
        else:
            target = prefix + keys.encode_id(checkpoint_id)
        raw = self.checkpoint_raw(target)
        if raw is None:
            return histories(walk)
        try:
            parent_id = parent_out(self._envelope(target, raw)[0])
        except CorruptRecordError as exc:
            raise self._damaged(t, n, checkpoint_id, exc) from exc
        memo = self.env.memo
        snapshot = self.txn.id() if use_memo and self.memo_reads else -1
        if snapshot > memo.known and memo.enabled:
            # Another process committed since this one last wrote or read.
            self.env.learn_commits(self.txn, snapshot)
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
            return histories(walk, entries=entries, bases=bases)
        wanted = {keys.uid(i): c for c, i in ids.items() if i is not None and c in walk.remaining}
        channel_uids = {c: i for c, i in ids.items() if i is not None and c in walk.remaining}
        legacy = self.legacy_blobs
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
            raw = self.checkpoint_raw(key)
            if raw is None:
                break
            try:
                parent, versions, inline, _ = self._envelope(key, raw)
                seeds: dict[str, StoredValue] = {}
                for channel in walk.remaining:
                    version = versions.get(channel)
                    if version is None:
                        continue
                    typed = inline.get(channel)
                    if typed is not None:
                        seeds[channel] = inline_value(key, channel, typed)
                        continue
                    bkey = keys.blob_key(t, n, channel_uids[channel], version, legacy=legacy)
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
        return histories(walk, entries=entries, bases=bases, result=result)

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
        rows: list[RawNode] = []
        for key, raw in self.iter_checkpoint_keys(keys.ns_prefix(t, n), start=None, reverse=False):
            rows.append(
                RawNode.of(
                    self.codec.decode(raw, f"checkpoints/{key.hex()}", key=key, head=True),
                    key,
                    extra_delta,
                )
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
        self, t: int, n: int, rows: list[RawNode], extra_delta: frozenset[str]
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
                    and cur.set_key(keys.blob_key(t, n, i, r.versions[c], legacy=self.legacy_blobs))
                )
            )
            nodes[r.cid] = Node(
                r.cid, r.parent, r.delta, seeded, bool(r.flags & FLAG_HIDDEN), frozenset(r.versions)
            )
        return nodes


def histories(
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
