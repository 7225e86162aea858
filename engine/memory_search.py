"""The read side of :class:`~deltalog.engine.memory.DeltaLogStore`: search and namespaces.

Candidates by namespace prefix and filter (through the in-RAM item caches and
value indexes of :mod:`deltalog.engine.memory_io` when they are current),
ranking by cosine on the vector matrix, and the namespaces that hold items.
A mixin: :class:`~deltalog.engine.memory.DeltaLogStore` provides ``env`` and
``_directory``; the decisions over plain data stay in
:mod:`deltalog.engine.memory_core`.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from deltalog.engine import memory_core as core
from deltalog.engine.env import Environment
from deltalog.engine.memory_io import (
    ItemCache,
    ItemRecord,
    MemoryReader,
    MemoryWriter,
    NamespaceDirectory,
    VectorMatrix,
    build_index,
    index_lookup,
    vector_matrix,
)
from langgraph.store.base import (
    Item,
    ListNamespacesOp,
    SearchItem,
    SearchOp,
)

_Key = tuple[tuple[str, ...], str]
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class MemorySearch:
    """Search, ranking and ``list_namespaces`` of the memory store (see the module)."""

    env: Environment
    _directory: NamespaceDirectory

    def _candidates(
        self, reader: MemoryReader, prefix: tuple[str, ...]
    ) -> list[tuple[int, tuple[str, ...]]]:
        if not reader.available:
            return []
        self._directory.refresh(reader)
        n = len(prefix)
        return [(i, ns) for i, ns in self._directory.items() if ns[:n] == prefix]

    def _search(
        self,
        reader: MemoryReader,
        op: SearchOp,
        query: list[float] | None,
        now_ms: int,
    ) -> list[tuple[SearchItem, float | None]]:
        prefix = tuple(op.namespace_prefix)
        flt = op.filter
        if query is not None and not flt:
            # No filter: rank the whole prefix on the in-RAM matrix, then read
            # only the items of the page (and what it skips) from LMDB.
            matrix = vector_matrix(self.env, len(query))
            with matrix.lock:
                if matrix.current(reader, load=not isinstance(reader, MemoryWriter)):
                    ranked = self._rank_prefix(reader, matrix, prefix, query, now_ms, op)
                    return [
                        (_search_item(rec, score), rec.ttl_minutes)
                        for rec, score in ranked[op.offset : op.offset + op.limit]
                    ]
        stop = op.offset + op.limit if query is None and op.offset >= 0 and op.limit >= 0 else None
        found = self._filtered(reader, prefix, flt, stop, now_ms)
        # Records may be the item cache's: the caller gets copies of their values.
        if query is None:
            page = found[op.offset : op.offset + op.limit]
            return [(_search_item(rec, None, copy=True), rec.ttl_minutes) for _, _, rec in page]
        ranked = self._rank(reader, found, query, op.offset + op.limit)
        return [
            (_search_item(rec, score, copy=True), rec.ttl_minutes)
            for rec, score in ranked[op.offset : op.offset + op.limit]
        ]

    def _filtered(
        self,
        reader: MemoryReader,
        prefix: tuple[str, ...],
        flt: dict[str, Any] | None,
        stop: int | None,
        now_ms: int,
    ) -> list[tuple[int, bytes, ItemRecord]]:
        """The live items under ``prefix`` that pass ``flt``, in search order (the
        first ``stop`` of them).

        Whole namespaces a search read are kept decoded for the snapshot state
        (:class:`ItemCache`); from the second filtered search of one state, a
        condition :func:`memory_core.index_plan` accepts is answered from a
        sorted value index over the prefix, and only its hits are checked
        against the whole filter.
        """
        cands = self._candidates(reader, prefix)
        cache: ItemCache | None = None
        if not isinstance(reader, MemoryWriter):  # a write transaction may yet abort
            state = reader.change_state()
            cache = self._directory.cache
            if cache.state != state:
                cache = self._directory.cache = ItemCache(state)
            cache.searches += 1
        plan = core.index_plan(flt) if cache is not None else None
        if cache is not None and plan is not None:
            key, kind, low, high = plan
            index = cache.indexes.get((prefix, key))
            if index is None and (
                cache.searches > 1 or all(ns_id in cache.lists for ns_id, _ in cands)
            ):
                entries: list[tuple[int, bytes, ItemRecord]] = []
                for ns_id, ns in cands:
                    items = cache.lists.get(ns_id)
                    if items is None:
                        items = list(reader.scan(ns_id, ns))
                        cache.add(ns_id, items)
                    entries.extend((ns_id, ikey, rec) for ikey, rec in items)
                index = build_index(entries, key)
                if all(ns_id in cache.lists for ns_id, _ in cands):
                    cache.indexes[(prefix, key)] = index
            if index is not None:
                hits: list[tuple[int, bytes, ItemRecord]] = []
                for entry in index_lookup(index, kind, low, high):
                    rec = entry[2]
                    if not core.is_expired(rec.expires_ms, now_ms) and core.matches_filter(
                        rec.value, flt
                    ):
                        hits.append(entry)
                        if stop is not None and len(hits) >= stop:
                            break
                return hits
        found: list[tuple[int, bytes, ItemRecord]] = []
        for ns_id, ns in cands:
            cached = cache.lists.get(ns_id) if cache is not None else None
            whole: list[tuple[bytes, ItemRecord]] | None = (
                [] if cache is not None and cached is None else None
            )
            complete = True
            for ikey, rec in cached if cached is not None else reader.scan(ns_id, ns):
                if whole is not None:
                    whole.append((ikey, rec))
                if core.is_expired(rec.expires_ms, now_ms) or not core.matches_filter(
                    rec.value, flt
                ):
                    continue
                found.append((ns_id, ikey, rec))
                if stop is not None and len(found) >= stop:
                    complete = False
                    break
            if cache is not None and whole is not None and complete:
                cache.add(ns_id, whole)
            if stop is not None and len(found) >= stop:
                break
        return found

    def _rank_prefix(
        self,
        reader: MemoryReader,
        matrix: VectorMatrix,
        prefix: tuple[str, ...],
        query: list[float],
        now_ms: int,
        op: SearchOp,
    ) -> list[tuple[ItemRecord, float | None]]:
        """The first ``offset + limit`` items under ``prefix`` by score (matrix current)."""
        need = op.offset + op.limit
        cands = self._candidates(reader, prefix)
        if need <= 0 or not cands:
            return []
        names = dict(cands)
        scores = matrix.scores(query, ns_ids=list(names) if prefix else ())
        out: list[tuple[ItemRecord, float | None]] = []
        seen: set[bytes] = set()
        row_keys, row_ns = matrix.keys, matrix.ns
        for row in core.ranked_rows(scores, lambda r: (int(row_ns[r]), row_keys[r]), 2 * need + 8):
            ikey = row_keys[row]
            if ikey in seen:
                continue  # a lower vector of an item already ranked
            seen.add(ikey)
            ns = names.get(int(row_ns[row]))
            rec = reader.item_at(ikey, ns) if ns is not None else None
            if rec is None or core.is_expired(rec.expires_ms, now_ms):
                continue
            out.append((rec, float(scores[row])))
            if len(out) >= need:
                return out
        # Every scored item is listed: the items without vectors follow, in search order.
        for ns_id, ns in cands:
            for ikey, rec in reader.scan(ns_id, ns):
                if ikey not in seen and not core.is_expired(rec.expires_ms, now_ms):
                    out.append((rec, None))
                    if len(out) >= need:
                        return out
        return out

    def _rank(
        self,
        reader: MemoryReader,
        found: list[tuple[int, bytes, ItemRecord]],
        query: list[float],
        need: int,
    ) -> list[tuple[ItemRecord, float | None]]:
        import numpy as np

        dims = len(query)
        ram = vector_matrix(self.env, dims)
        with ram.lock:
            if ram.current(reader, load=not isinstance(reader, MemoryWriter)):
                return _rank_on(ram, found, query, need)
        # The matrix is ahead of this snapshot, or this is a write transaction:
        # the candidates' vectors from LMDB, ranked the same way.
        rows: list[bytes] = []
        owners: list[int] = []
        position = {ikey: i for i, (_, ikey, _) in enumerate(found)}
        for ns_id in dict.fromkeys(ns_id for ns_id, _, _ in found):
            for ikey, vec in reader.namespace_vectors(ns_id):
                owner = position.get(ikey)
                # Vectors of filtered-out items, or of another dims setting, are skipped.
                if owner is not None and len(vec.vector) == 4 * dims:
                    rows.append(vec.vector)
                    owners.append(owner)
        if rows:
            matrix = np.frombuffer(b"".join(rows), dtype=np.float32).reshape(len(rows), dims)
            best = core.best_scores(np.asarray(query, dtype=np.float32), matrix, owners)
        else:
            best = {}
        scored = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))
        out: list[tuple[ItemRecord, float | None]] = [(found[i][2], s) for i, s in scored]
        out.extend((rec, None) for i, (_, _, rec) in enumerate(found) if i not in best)
        return out

    def _list_namespaces(
        self, reader: MemoryReader, op: ListNamespacesOp, now_ms: int
    ) -> list[tuple[str, ...]]:
        match = core.namespace_matcher(
            (c.match_type, tuple(c.path)) for c in op.match_conditions or ()
        )
        always, check = self._live_namespaces(reader)
        live = [ns for ns in always if match(ns)]
        live.extend(ns for ns_id, ns in check if match(ns) and reader.has_live(ns_id, now_ms))
        return core.list_namespaces(
            live, (), max_depth=op.max_depth, limit=op.limit, offset=op.offset
        )

    def _live_namespaces(
        self, reader: MemoryReader
    ) -> tuple[list[tuple[str, ...]], list[tuple[int, tuple[str, ...]]]]:
        """The namespaces with an item without a TTL (live whatever the time), and
        those to read to tell (only TTL items, or no counts): from the count
        records, cached per change state (every memory write changes it)."""
        state = reader.change_state()
        cached = self._directory.live
        if cached[0] == state:
            return cached[1], cached[2]
        counts = reader.counts()
        always: list[tuple[str, ...]] = []
        check: list[tuple[int, tuple[str, ...]]] = []
        for ns_id, ns in self._candidates(reader, ()):
            found = counts.get(ns_id)
            if found is None or 0 < found[0] <= found[1]:
                check.append((ns_id, ns))
            elif found[0]:
                always.append(ns)
        if not isinstance(reader, MemoryWriter):  # a write transaction may yet abort
            self._directory.live = (state, always, check)
        return always, check


def _dt(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _item(rec: ItemRecord, *, copy: bool = False) -> Item:
    created = _dt(rec.created_us)
    return Item(
        value=core.copy_value(rec.value) if copy else rec.value,
        key=rec.key,
        namespace=rec.namespace,
        created_at=created,
        updated_at=created if rec.updated_us == rec.created_us else _dt(rec.updated_us),
    )


def _search_item(rec: ItemRecord, score: float | None, *, copy: bool = False) -> SearchItem:
    return SearchItem(
        namespace=rec.namespace,
        key=rec.key,
        value=core.copy_value(rec.value) if copy else rec.value,
        created_at=_dt(rec.created_us),
        updated_at=_dt(rec.updated_us),
        score=score,
    )


def _rank_on(
    matrix: VectorMatrix,
    found: list[tuple[int, bytes, ItemRecord]],
    query: list[float],
    need: int,
) -> list[tuple[ItemRecord, float | None]]:
    """The first ``need`` of ``found`` by score, on a current matrix (held locked)."""
    import numpy as np

    position = {ikey: i for i, (_, ikey, _) in enumerate(found)}
    rows = [r for ikey in position for r in matrix.by_item.get(ikey, ())]
    mask = np.zeros(matrix.size, dtype=bool)
    mask[rows] = True
    scores = matrix.scores(query, rows=mask)
    out: list[tuple[ItemRecord, float | None]] = []
    seen: set[int] = set()
    row_keys = matrix.keys
    if need > 0 and rows:
        for row in core.ranked_rows(scores, lambda r: position[row_keys[r]], 2 * need + 8):
            i = position[row_keys[row]]
            if i in seen:
                continue
            seen.add(i)
            out.append((found[i][2], float(scores[row])))
            if len(out) >= need:
                return out
    out.extend((rec, None) for i, (_, _, rec) in enumerate(found) if i not in seen)
    return out
