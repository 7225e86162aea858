"""R7 maintenance as a service over the store: prune, delete_for_runs, copy, verify, backup.

:class:`Maintenance` is built from what it needs (the store, the serde, the
decoded-value cache), never from the saver; :class:`~deltalog.engine.DeltaLogSaver`
builds one per call and delegates its maintenance methods to it, so a clone
made by ``with_allowlist`` maintains through its own serde and cache.

Where prune decides what to keep: :meth:`Maintenance.prune` turns its
arguments into a ``choose`` function per (thread, namespace), and the pure
planners :func:`~deltalog.engine.core.plan_keep` / ``plan_delete`` turn the
kept set into a :class:`~deltalog.engine.core.Plan` (delete, hide, seed).
:meth:`Maintenance._maintain` applies the plans in one write transaction,
re-planning when a writer changed a group meanwhile.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Final

from deltalog.channels.replay import ChannelSource, delta_channels, replay_history
from deltalog.engine import keys
from deltalog.engine.cache import DecodedCache
from deltalog.engine.config import cutoff_of, thread_id_of, thread_list
from deltalog.engine.core import Node, Plan, plan_delete, plan_keep
from deltalog.engine.env import Environment
from deltalog.engine.env_files import store_folder
from deltalog.engine.errors import (
    ConcurrentChangeError,
    DeltaChainError,
    DeltaLogError,
    InvalidInputError,
    ReducerMismatchError,
)
from deltalog.engine.read_txn import ReadTxn
from deltalog.engine.reports import CompactReport, CopyReport, Problem, RemovalReport, VerifyReport
from deltalog.engine.store_rows import BlobRow, CheckpointRow, StoredValue, Typed, WriteRow
from deltalog.engine.values import dumps, load, loads, to_tuple
from deltalog.engine.write_txn import WriteTxn
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import _DeltaSnapshot

__all__ = ["Maintenance"]

# The saver's logger: these messages were the saver's before the split.
logger = logging.getLogger("deltalog.engine.saver")

# Stored snapshots a re-seeding prune replays to check the caller's reducer
# against, per re-seeded channel (see Maintenance._check_reducer).
_REDUCER_WITNESSES: Final = 2


class Maintenance:
    """Prune, delete runs, copy, verify and back up the threads of one store (R7, R8).

    Args:
        env: The open environment.
        serde: The saver's serializer: seeds are written and values checked through it.
        cache: The saver's cache of decoded values.
    """

    def __init__(self, env: Environment, serde: SerializerProtocol, cache: DecodedCache) -> None:
        self.env = env
        self.serde = serde
        self.cache = cache

    def _dumps(self, value: Any, what: str) -> Typed:
        return dumps(self.serde, value, what)

    def _load(self, value: StoredValue) -> Any:
        return load(self.serde, self.cache, value)

    def _loads(self, typed: Typed, what: str = "a stored value") -> Any:
        return loads(self.serde, typed, what)

    def _to_tuple(self, row: CheckpointRow) -> CheckpointTuple:
        return to_tuple(self.serde, self.cache, row)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> CopyReport:
        """``DeltaLogSaver.copy_thread``: one write transaction; stored bytes copied as they are."""
        src, dst = thread_id_of(source_thread_id), thread_id_of(target_thread_id)
        if src == dst:
            raise InvalidInputError(
                f"copy_thread: source and target are both {src!r}; pick a new thread_id"
            )
        counts = self.env.write(lambda w: w.copy_thread(src, dst))
        if counts is None:
            logger.warning("copy_thread: source thread %r has no checkpoints; nothing copied", src)
            return CopyReport(src, dst, found=False)
        return CopyReport(
            src,
            dst,
            found=True,
            checkpoints=counts["checkpoints"],
            writes=counts["writes"],
            blobs=counts["blobs"],
        )

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
        older_than: timedelta | datetime | None = None,
        reducers: ChannelSource | None = None,
        dry_run: bool = False,
    ) -> RemovalReport:
        """``DeltaLogSaver.prune``: arguments checked, then a ``choose`` per (thread, ns).

        What stays: the newest ``keep_last`` (default 1) visible checkpoints,
        plus those newer than ``older_than``; :func:`~deltalog.engine.core.plan_keep`
        adds the chains (or seeds, with ``reducers``) they need.
        """
        tids = thread_list(thread_ids, "thread_ids")
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(
                f"strategy {strategy!r} is unknown; use 'keep_latest' or 'delete'"
            )
        if keep_last is not None and (
            not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 1
        ):
            raise InvalidInputError(f"keep_last {keep_last!r} must be an int >= 1")
        cutoff = cutoff_of(older_than)
        if strategy == "delete" and (keep_last is not None or cutoff is not None):
            raise InvalidInputError(
                "strategy 'delete' removes whole threads; keep_last/older_than go with 'keep_latest'"
            )
        specs = _specs(reducers)
        report = RemovalReport(threads=len(tids), dry_run=dry_run)
        if strategy == "delete":
            groups = self._groups_of(tids, frozenset())
            if dry_run:
                with self.env.read() as r:
                    for g in groups:
                        report.add(r.measure(g.t, g.n, Plan(delete=set(g.nodes)), g.versions))
                return report
            for g in groups:
                report.add({"checkpoints": len(g.nodes)})
            self.env.write(functools.partial(_delete_threads, thread_ids=tids))
            return report

        def choose(g: _Group) -> Plan:
            visible = [cid for cid in reversed(list(g.nodes)) if not g.nodes[cid].hidden]
            keep = set(visible[: keep_last or 1])
            if cutoff is not None:
                keep |= {cid for cid in visible if g.timestamps.get(cid, cutoff) >= cutoff}
            return plan_keep(g.nodes, keep, reseed=frozenset(specs))

        return self._maintain(tids, specs, choose, report, want_ts=cutoff is not None)

    def delete_for_runs(
        self, run_ids: Sequence[str], *, reducers: ChannelSource | None = None
    ) -> RemovalReport:
        """``DeltaLogSaver.delete_for_runs``: the run-id index read in one snapshot, then planned."""
        runs = thread_list(run_ids, "run_ids")
        specs = _specs(reducers)
        with self.env.read() as r:
            doomed: dict[tuple[int, int], set[str]] = {}
            for run in runs:
                for t, n, cid in r.run_checkpoints(run):
                    row = r.checkpoint(t, n, cid, with_values=False, with_writes=False)
                    if row is not None and row.run_id == run:
                        doomed.setdefault((t, n), set()).add(cid)
            threads = sorted({r.name_of(keys.KIND_THREAD, t) for t, _ in doomed})

        def choose(g: _Group) -> Plan:
            gone = doomed.get((g.t, g.n), set()) & set(g.nodes)
            plan, unresolved = plan_delete(g.nodes, gone, reseed=frozenset(specs))
            if unresolved:
                (cid, channel), _ = next(iter(sorted(unresolved.items())))
                names = sorted({g.runs[c] or "?" for c in gone})
                raise DeltaChainError(
                    f"deleting run(s) {names} would cut the delta chain of channel "
                    f"{channel!r} of checkpoint {cid} in thread {g.thread_id!r} (namespace "
                    f"{g.checkpoint_ns!r}), which stays. Pass reducers= (the compiled graph "
                    "or {channel: reducer}) to re-seed it, or delete the whole thread; "
                    "nothing was deleted"
                )
            return plan

        report = RemovalReport(threads=len(threads))
        return self._maintain(threads, specs, choose, report, only=set(doomed))

    def _groups_of(
        self,
        thread_ids: Sequence[str],
        extra: frozenset[str],
        *,
        only: set[tuple[int, int]] | None = None,
        want_ts: bool = False,
    ) -> list[_Group]:
        groups: list[_Group] = []
        with self.env.read() as r:
            for thread_id in thread_ids:
                for t, n in r.thread_groups(thread_id):
                    if only is not None and (t, n) not in only:
                        continue
                    nodes, versions, runs = r.group(t, n, extra)
                    g = _Group(t, n, thread_id, r.name_of(keys.KIND_NS, n), nodes, versions, runs)
                    if want_ts:
                        for cid in nodes:
                            row = r.checkpoint(t, n, cid, with_values=False, with_writes=False)
                            if row is not None:
                                g.timestamps[cid] = _parse_ts(self._loads(row.checkpoint).get("ts"))
                    groups.append(g)
        return groups

    def _maintain(
        self,
        thread_ids: Sequence[str],
        specs: Mapping[str, Any],
        choose: Callable[[_Group], Plan],
        report: RemovalReport,
        *,
        only: set[tuple[int, int]] | None = None,
        want_ts: bool = False,
    ) -> RemovalReport:
        """Plan per (thread, ns), compute seeds, then apply everything in one transaction.

        Seeds are computed from a read snapshot; the write transaction re-reads
        each group and retries the whole operation if any changed meanwhile,
        so a concurrent writer can never slip a checkpoint past the plan.
        """
        extra = frozenset(specs)
        for _ in range(8):
            groups = self._groups_of(thread_ids, extra, only=only, want_ts=want_ts)
            plans = [(g, choose(g)) for g in groups]
            if report.dry_run:
                with self.env.read() as r:
                    for g, plan in plans:
                        if plan.seeds:
                            self._seed_rows(r, g, plan, specs=specs)  # the same refusal
                        counts = r.measure(g.t, g.n, plan, g.versions)
                        counts["hidden"] = len(plan.hide)
                        counts["seeds"] = sum(len(c) for c in plan.seeds.values())
                        report.add(counts)
                return report
            work = [(g, plan) for g, plan in plans if not plan.empty]
            results = self.env.write(
                functools.partial(
                    _apply_plans,
                    work=work,
                    extra=extra,
                    seeder=functools.partial(self._seed_rows, specs=specs),
                )
            )
            if results is not None:
                for counts in results:
                    report.add(counts)
                return report
        raise ConcurrentChangeError(
            "the threads kept changing while being pruned; retry when writers pause"
        )

    def _seed_rows(
        self, r: ReadTxn, g: _Group, plan: Plan, *, specs: Mapping[str, Any]
    ) -> list[tuple[str, BlobRow]]:
        """The fresh seeds of ``plan``, read and checked in the prune's write transaction ``r``.

        Each seed is what the kept chain replays to through the caller's
        reducer, read in the same transaction that then writes it, so no
        concurrent write can slip between the two. The reducer itself is
        checked first against values the graph stored (see
        :meth:`_check_reducer`); a mismatch raises, and since the transaction
        is dropped, nothing is deleted or written.

        Raises:
            ReducerMismatchError: The reducer does not rebuild a stored value.
        """
        rows: list[tuple[str, BlobRow]] = []
        for cid, channels in sorted(plan.seeds.items()):
            histories = r.delta_history(g.t, g.n, cid, sorted(channels))
            for channel in sorted(channels):
                self._check_reducer(r, g, cid, channel, specs[channel])
                value = replay_history(self._decoded(*histories[channel]), specs[channel])
                blob = self._dumps(_DeltaSnapshot(value), f"seed of channel {channel!r}")
                rows.append((cid, BlobRow(channel, g.versions[cid][channel], blob)))
        return rows

    def _decoded(self, seed: StoredValue | None, writes: Sequence[WriteRow]) -> DeltaChannelHistory:
        """A raw history as ``get_delta_channel_history`` returns it."""
        loads = self.serde.loads_typed
        out: DeltaChannelHistory = {
            "writes": [(w.task_id, w.channel, loads(w.value)) for w in writes]
        }
        if seed is not None:
            out["seed"] = self._load(seed)
        return out

    def _replays_its_history(
        self,
        r: ReadTxn,
        g: _Group,
        cid: str,
        channel: str,
        frequency: int,
        metadata: Callable[[str], dict[str, Any]],
    ) -> bool:
        """Whether the snapshot of ``channel`` at ``cid`` is the replay of its history.

        LangGraph also stores a snapshot where the history does not rebuild
        the value: after ``update_state`` (metadata source ``"update"``, or
        ``"fork"``, a copy), after a run from an older checkpoint (an
        ``"input"`` checkpoint whose parent holds writes of tasks the new run
        dropped), and where ``durability="exit"`` stored no checkpoints
        between (steps skipped). So the snapshot must be one the thread's
        snapshot ``frequency`` made due (a forced one comes earlier: the
        update replacing a pending write, the run from an older checkpoint),
        and every checkpoint on the walk back to the previous snapshot the
        superstep after its parent's: source ``"loop"`` or ``"update"`` (whose
        write is stored on the checkpoint it updated), or ``"input"`` over a
        parent without writes to ``channel``, its step one more than the
        parent's; a walk that ends without a snapshot must end at the thread's
        first checkpoint (step -1), not at one a prune cut from its parent.
        """
        node = g.nodes.get(cid)
        while node is not None:
            if node.parent_id is None:
                # The thread's first checkpoint (step -1), not one a prune left
                # without its parent: the writes before it are gone.
                return metadata(node.checkpoint_id).get("step") == -1
            parent = g.nodes.get(node.parent_id)
            if parent is None:
                return False
            here, before = metadata(node.checkpoint_id), metadata(parent.checkpoint_id)
            source, step, parent_step = here.get("source"), here.get("step"), before.get("step")
            if source not in ("loop", "input", "update") or not isinstance(step, int):
                return False
            if node.checkpoint_id == cid and _updates_before(before, channel) + 1 < frequency:
                return False  # a snapshot LangGraph forced, before its frequency was due
            if not isinstance(parent_step, int) or step != parent_step + 1:
                return False
            if source == "input":
                row = r.checkpoint(g.t, g.n, parent.checkpoint_id, with_values=False)
                if row is None or any(w.channel == channel for w in row.writes):
                    return False
            if channel in parent.seeded:
                return True
            node = parent
        return False

    def _frequency(self, g: _Group, channel: str, metadata: Callable[[str], dict[str, Any]]) -> int:
        """The snapshot frequency the thread was written with, as its snapshots
        show it: the most updates any of them followed (LangGraph snapshots a
        channel when its updates since the last snapshot reach the frequency;
        the snapshots it forces come earlier). 1 where no counters are stored."""
        found = 1
        for node in g.nodes.values():
            if channel in node.seeded and node.parent_id is not None and node.parent_id in g.nodes:
                found = max(found, _updates_before(metadata(node.parent_id), channel) + 1)
        return found

    def _metadata(self, r: ReadTxn, g: _Group, cid: str) -> dict[str, Any]:
        row = r.checkpoint(g.t, g.n, cid, with_values=False, with_writes=False)
        try:
            metadata = self.serde.loads_typed(row.metadata) if row is not None else None
        except Exception:  # unreadable metadata: verify reports it; no witness
            return {}
        return metadata if isinstance(metadata, dict) else {}

    def _check_reducer(self, r: ReadTxn, g: _Group, cid: str, channel: str, spec: Any) -> None:
        """Refuse a reducer that does not rebuild the values the graph stored (R7).

        The graph's own reducer wrote every snapshot (``_DeltaSnapshot``) on
        the way to ``cid``; where :meth:`_replays_its_history`, it is the
        replay of the writes before it from the snapshot before that. So the
        caller's reducer must turn the history of the nearest such snapshots
        (up to ``_REDUCER_WITNESSES`` whose history has writes) into exactly
        the value stored there. Cost: that many more walks, each back to the
        previous snapshot. A chain with no such snapshot (a thread younger
        than its snapshot frequency, or written with ``durability="exit"``)
        offers nothing to check against; its seed is still exactly the replay
        of the kept chain.

        Raises:
            ReducerMismatchError: Naming the channel, the checkpoint and the mismatch.
        """
        checked = 0
        node = g.nodes.get(cid)
        seen: set[str] = set()
        # Each checkpoint's metadata decoded once for the frequency and every walk.
        metadata = functools.cache(functools.partial(self._metadata, r, g))
        frequency = self._frequency(g, channel, metadata)
        while node is not None and node.parent_id is not None and checked < _REDUCER_WITNESSES:
            node = g.nodes.get(node.parent_id)
            if node is None or node.checkpoint_id in seen:
                return
            seen.add(node.checkpoint_id)
            if channel not in node.seeded:
                continue
            row = r.checkpoint(g.t, g.n, node.checkpoint_id, with_writes=False)
            stored = row.values.get(channel) if row is not None else None
            witness = self._replays_its_history(
                r, g, node.checkpoint_id, channel, frequency, metadata
            )
            if stored is None or not witness:
                continue
            history = r.delta_history(g.t, g.n, node.checkpoint_id, [channel])[channel]
            if not history[1]:
                continue
            checked += 1
            try:
                want = replay_history({"writes": [], "seed": self._load(stored)}, spec)
                got = replay_history(self._decoded(*history), spec)
            except Exception as exc:  # a reducer of another shape may fail on this data
                raise ReducerMismatchError(
                    f"prune: the reducer given for channel {channel!r} ({_reducer_name(spec)}) "
                    f"fails on the history of checkpoint {node.checkpoint_id} of thread "
                    f"{g.thread_id!r} (namespace {g.checkpoint_ns!r}): {type(exc).__name__}: "
                    f"{exc}. Pass the graph that wrote the thread (its reducers), or prune "
                    "without reducers to keep the chain; nothing was deleted"
                ) from exc
            if got != want:
                raise ReducerMismatchError(
                    f"prune: the reducer given for channel {channel!r} ({_reducer_name(spec)}) does not "
                    f"rebuild the value the graph stored at checkpoint {node.checkpoint_id} of "
                    f"thread {g.thread_id!r} (namespace {g.checkpoint_ns!r}): replaying its "
                    f"{len(history[1])} writes gives {_difference(got, want)}. Pass the graph "
                    "that wrote the thread (its reducers), or prune without reducers to keep "
                    "the chain; nothing was deleted"
                )

    def verify(
        self, thread_ids: Sequence[str] | None = None, *, deep: bool = False
    ) -> VerifyReport:
        """``DeltaLogSaver.verify``: the store-wide table checks, then one snapshot per thread."""
        report = VerifyReport()
        groups: list[tuple[str, int | None]] = []
        if thread_ids is None:
            # The name tables and every key, as reads use them (issue 15.1/15.2).
            for kind, thread_id, detail in self.env.verify_tables():
                report.problems.append(Problem(kind, "error", thread_id, None, None, detail))
            if any(p.kind == "unreadable" for p in report.problems):
                # The per-thread checks step through pages with next(), where LMDB
                # asserts (aborting the process) on a page a search reports as damaged.
                report.problems.append(
                    Problem(
                        "unreadable",
                        "error",
                        None,
                        None,
                        None,
                        "LMDB reports damaged pages; per-thread checks skipped. Restore the "
                        "store from a backup",
                    )
                )
                return report
            try:
                with self.env.read() as r:
                    for kind, detail in r.verify_packs():
                        report.problems.append(Problem(kind, "error", None, None, None, detail))
                    for t in r.threads():
                        try:
                            groups.append((r.name_of(keys.KIND_THREAD, t), t))
                        except DeltaLogError:  # reported by verify_tables; check its rows anyway
                            groups.append((f"#{t}", t))
            except DeltaLogError as exc:  # LMDB damage on the way through the threads
                report.problems.append(Problem("unreadable", "error", None, None, None, str(exc)))
            from deltalog.engine.memory import verify_memory  # the memory store's records

            verify_memory(self.env, report)
        else:
            groups = [(tid, None) for tid in thread_list(thread_ids, "thread_ids")]
        for thread_id, tid in groups:
            report.threads += 1
            try:
                with self.env.read() as r:
                    self._verify_thread(r, report, thread_id, tid, deep)
            except DeltaLogError as exc:  # e.g. LMDB reports a damaged page on this thread's path
                report.problems.append(
                    Problem("unreadable", "error", thread_id, None, None, str(exc))
                )
        return report

    def _verify_thread(
        self, r: ReadTxn, report: VerifyReport, thread_id: str, t: int | None, deep: bool
    ) -> None:
        """Add the findings of one thread (by id ``t`` when its name is damaged) to ``report``."""
        pairs = r.thread_groups(thread_id) if t is None else [(t, n) for n in r.namespaces(t)]
        for t, n in pairs:
            try:
                ns = r.name_of(keys.KIND_NS, n)
            except DeltaLogError:
                ns = f"#{n}"
            found = r.verify_group(t, n)
            report.checkpoints += found.checkpoints
            report.records += found.records
            for kind, severity, cid, detail in found.problems:
                report.problems.append(Problem(kind, severity, thread_id, ns, cid, detail))
            r.latest_key(t, n)  # the search get_tuple makes for the latest checkpoint
            if deep:
                for cid in found.decodable:
                    try:
                        row = r.checkpoint(t, n, cid)
                        if row is not None:
                            self._to_tuple(row)
                    except Exception as exc:
                        report.problems.append(
                            Problem("undecodable", "error", thread_id, ns, cid, f"serde: {exc}")
                        )

    def compact(self, dest: str | os.PathLike[str]) -> CompactReport:
        """``DeltaLogSaver.compact``: :meth:`backup` with ``compact=True``."""
        return self.backup(dest, compact=True)

    def backup(self, dest: str | os.PathLike[str], *, compact: bool = False) -> CompactReport:
        """``DeltaLogSaver.backup``: LMDB's copy of one read snapshot, owner-only."""
        folder = store_folder(dest, what="backup destination")
        before = self.env.file_bytes()
        self.env.copy_to(folder, compact=compact)
        after = os.path.getsize(os.path.join(folder, "data.mdb"))
        return CompactReport(self.env.path, folder, before, after)


class _Sampled(Exception):
    """Ends the dry run of :func:`train_on_import` (and drops its transaction)."""


def train_on_import(
    env: Environment, threads: Sequence[dict[str, Any]], first_lines: Mapping[str, int]
) -> None:
    """Before an import into a store without its final record dictionary: store
    the records of ``threads`` in a write transaction that is then dropped,
    only so that the codec samples them, until it has enough for the final
    dictionary (or the stream ends); then let the store train and store the
    dictionary they call for, in a commit of its own as after any commit. The
    import that follows compresses with it. Without this, the store trains
    after the import's one transaction, and a fresh store's import was
    compressed without a dictionary (docs/design.md, "Imports"). A dictionary
    stored before an import that then fails is harmless: it names no data.

    Raises what the import would raise before writing (``ThreadExistsError``).
    """
    codec = env.codec
    if not threads or codec.has_final_dictionary or codec.compress_threshold is None:
        return  # nothing to train, or a store that compresses nothing samples nothing

    def dry_run(w: WriteTxn) -> None:
        w.import_records(threads, first_lines=first_lines, until=lambda: codec.final_due)
        raise _Sampled

    with contextlib.suppress(_Sampled):
        env.write(dry_run)
    if codec.wants_training:
        env.write(lambda w: None)  # the store trains after a commit


def _apply_plans(
    w: WriteTxn,
    *,
    work: list[tuple[_Group, Plan]],
    extra: frozenset[str],
    seeder: Callable[[WriteTxn, _Group, Plan], list[tuple[str, BlobRow]]],
) -> list[dict[str, int]] | None:
    """Apply planned groups in one transaction; None if any group changed since planning.

    Every group is checked and its seeds computed (``seeder``, which may
    raise) before the first one is changed.
    """
    seeded = []
    for g, plan in work:
        if w.group(g.t, g.n, extra)[0] != g.nodes:
            return None
        seeded.append((g, plan, seeder(w, g, plan) if plan.seeds else []))
    return [w.apply_plan(g.t, g.n, plan, seeds, g.versions, g.runs) for g, plan, seeds in seeded]


def _reducer_name(spec: Any) -> str:
    """How an error names a channel's reducer (a DeltaChannel names its own)."""
    reducer = getattr(spec, "reducer", spec)
    name = getattr(reducer, "__name__", None)
    return name if isinstance(name, str) else f"{reducer!r:.60}"


def _difference(got: Any, want: Any) -> str:
    """A short account of how a rebuilt value differs from the stored one."""
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return f"{len(got)} items where the graph stored {len(want)}"
        i = next((i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), 0)
        return f"item {i} {got[i]!r:.80} where the graph stored {want[i]!r:.80}"
    return f"{got!r:.80} where the graph stored {want!r:.80}"


def _delete_threads(w: WriteTxn, *, thread_ids: list[str]) -> None:
    for thread_id in thread_ids:
        w.delete_thread(thread_id)


@dataclass
class _Group:
    """One (thread, ns) as a maintenance operation planned it."""

    t: int
    n: int
    thread_id: str
    checkpoint_ns: str
    nodes: dict[str, Node]
    versions: dict[str, dict[str, Any]]
    runs: dict[str, str | None]
    timestamps: dict[str, datetime] = field(default_factory=dict)


def _updates_before(metadata: Mapping[str, Any], channel: str) -> int:
    """The updates of ``channel`` since its last snapshot that a checkpoint's
    metadata counts (``counters_since_delta_snapshot``; 0 when absent)."""
    counters = metadata.get("counters_since_delta_snapshot")
    pair = counters.get(channel) if isinstance(counters, Mapping) else None
    if isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], int):
        return pair[0]
    return 0


def _specs(reducers: ChannelSource | None) -> dict[str, Any]:
    if reducers is None:
        return {}
    try:
        return dict(delta_channels(reducers))
    except TypeError as exc:
        raise InvalidInputError(
            f"reducers {reducers!r:.80}: {exc}; pass the compiled graph or {{channel: reducer}}"
        ) from None


def _parse_ts(ts: Any) -> datetime:
    try:
        value = datetime.fromisoformat(str(ts))
    except ValueError:
        return datetime.max.replace(tzinfo=timezone.utc)  # unknown age: never "old"
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
