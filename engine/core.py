"""Pure functions over decoded rows: no transactions, no serde, no I/O.

The store feeds these with rows it read in one transaction; they return
results or plans. Keeping them pure makes the delta semantics testable on
plain data and keeps the LMDB code small.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from deltalog.engine.errors import CorruptRecordError
from deltalog.engine.store_rows import StoredValue, WriteRow

__all__ = [
    "SKIP_RADIX",
    "Chain",
    "DeltaWalk",
    "Node",
    "Plan",
    "delta_chains",
    "parent_cycles",
    "plan_delete",
    "plan_keep",
    "skip_base",
]


@dataclass
class DeltaWalk:
    """Accumulates ``get_delta_channel_history`` for several channels at once (R6).

    Feed it the ancestors of the target checkpoint, nearest first, with
    :meth:`visit`. A channel stops at the first ancestor that stores a value for
    it (a ``_DeltaSnapshot`` seed or a plain pre-delta value); that ancestor's
    own writes still count, because they produced its child on the path to the
    target. Channels that reach the root have no seed ("start empty").
    """

    channels: tuple[str, ...]
    remaining: set[str] = field(init=False)
    _collected: dict[str, list[list[WriteRow]]] = field(init=False)
    _seeds: dict[str, StoredValue] = field(init=False)
    _older: dict[str, Sequence[WriteRow]] = field(init=False)

    def __post_init__(self) -> None:
        self.remaining = set(self.channels)
        self._collected = {c: [] for c in self.channels}
        self._seeds = {}
        self._older = {}

    @property
    def done(self) -> bool:
        """True once every channel found its seed."""
        return not self.remaining

    def visit(self, writes: Iterable[WriteRow], seeds: Mapping[str, StoredValue]) -> None:
        """Take one ancestor: its writes (``writes_sort_key`` order) and the values it stores.

        Args:
            writes: The ancestor's writes; channels not remaining are ignored.
            seeds: Channel → stored value at this ancestor, for remaining channels.
        """
        per_channel: dict[str, list[WriteRow]] = {}
        for w in writes:
            if w.channel in self.remaining:
                per_channel.setdefault(w.channel, []).append(w)
        for channel, rows in per_channel.items():
            self._collected[channel].append(rows)
        for channel, value in seeds.items():
            if channel in self.remaining:
                self._seeds[channel] = value
                self.remaining.discard(channel)

    def adopt(self, channel: str, seed: StoredValue | None, older: Sequence[WriteRow]) -> None:
        """Finish ``channel`` with the known history of the ancestor visited last.

        The history of a checkpoint is the walk from its parent, so once the
        walk has visited an ancestor whose own history is known (seed and
        writes, oldest first), the rest of the walk would find exactly that.

        Args:
            channel: A remaining channel.
            seed: The known history's seed, or None (it reached the root).
            older: Its writes, oldest first; they go before everything collected.
        """
        if channel not in self.remaining:
            raise ValueError(f"channel {channel!r} is not being walked")
        if seed is not None:
            self._seeds[channel] = seed
        self._older[channel] = older
        self.remaining.discard(channel)

    def result(self) -> dict[str, tuple[StoredValue | None, list[WriteRow]]]:
        """Channel → (seed or None, writes oldest→newest)."""
        out: dict[str, tuple[StoredValue | None, list[WriteRow]]] = {}
        for channel in self.channels:
            ordered: list[WriteRow] = list(self._older.get(channel, ()))
            for rows in reversed(self._collected[channel]):
                ordered.extend(rows)
            out[channel] = (self._seeds.get(channel), ordered)
        return out


#: The radix of the skip-delta lattice (:func:`skip_base`). With 2 (stop 44 and
#: before) a version's base was its index with the lowest set bit cleared; with
#: 4 three versions in four are deltas of the version before, and a link spans
#: 4^k versions where 2 spanned 2^k: on a 3,000-turn sf=100 chat the seeds took
#: 87 KB instead of 133 (-35 %), chains at most 3 links per base-4 digit (14
#: at 1,000 versions instead of 9; the longest with split links 37 instead of
#: 35, within MAX_LINKS), a cold get_state 2.7 % slower (docs/benchmarks.md,
#: stop 45). Radix 8 stored 53 % less but let split links pass MAX_LINKS.
#: Readers follow the base a record names, so stores of either radix read.
SKIP_RADIX: Final = 4


def skip_base(indices: Iterable[int], span: int | None = None) -> tuple[int, int] | None:
    """Where a new delta blob's base is, among a channel's stored versions (skip deltas).

    A version's index counts stored versions since the last full record
    (index 0). The new version gets the newest index plus one, and its base is
    the nearest earlier version whose index is at most that index less the
    place value of its lowest nonzero base-:data:`SKIP_RADIX` digit (index 12,
    30 in base 4, takes index 8; 13 takes 12): a chain has at most 3 links per
    base-4 digit of the index. With ``span``, the base is at most ``span``
    indices back: the store splits a link whose value grew too much for zstd
    (``blobs.link_span``). On the base-4 lattice a span of 32 on every link
    makes three links per 64 versions (radix 2: two), but the store only
    splits links farther back than their span, so its chains stay within 37
    links in the growth simulation of ``tests/test_core.py`` (radix 2: 35).

    Args:
        indices: The indices of the channel's stored versions, newest first.
            Consumed lazily: it is read only as far as the base.
        span: At most how many indices back the base may be (1 or more);
            None for the skip-delta base itself.

    Returns:
        (how many versions back the base is, 0 being the newest; the new
        version's index), or None when there is no stored version or the base
        is missing (the versions ran out first).

    >>> skip_base([3, 2, 1, 0])  # new index 4: the base is the full record
    (3, 4)
    >>> skip_base([0])
    (0, 1)
    >>> skip_base([6, 5, 4, 3, 2, 1, 0])  # new index 7: one back
    (0, 7)
    >>> skip_base(range(191, -1, -1))  # new index 192 (3000 in base 4): base index 128
    (63, 192)
    >>> skip_base(range(191, -1, -1), span=32)  # at most 32 back: index 160
    (31, 192)
    """
    it = iter(indices)
    index = next(it, None)
    if index is None:
        return None
    seq = index + 1
    unit = 1
    while seq % (unit * SKIP_RADIX) == 0:
        unit *= SKIP_RADIX
    target = seq - unit
    if span is not None:
        if span < 1:
            raise ValueError(f"skip_base: span={span!r}; pass 1 or more, or None")
        target = max(target, seq - span)
    steps = 0
    while index > target:
        index = next(it, None)
        if index is None:
            return None
        steps += 1
    return steps, seq


@dataclass(frozen=True)
class Node:
    """One checkpoint of a (thread, ns) as maintenance planning sees it.

    Attributes:
        checkpoint_id: The id.
        parent_id: The parent's id, or None at the root.
        delta: Delta channels this checkpoint rebuilds by replay (it stores no
            value for them); from ``counters_since_delta_snapshot`` at put time,
            plus the channels of any reducer map the caller passed.
        seeded: Channels that have a stored value (seed) at this checkpoint.
        hidden: Kept only for a later checkpoint's delta chain; not listed.
        versioned: Channels with a version here. A channel without one was
            never written on this path, so its value here is empty and no
            older ancestor holds writes for it: a walk may stop.
    """

    checkpoint_id: str
    parent_id: str | None
    delta: frozenset[str]
    seeded: frozenset[str]
    hidden: bool = False
    versioned: frozenset[str] | None = None

    @property
    def needs(self) -> frozenset[str]:
        """Delta channels whose value this checkpoint can only get from ancestors."""
        return self.delta - self.seeded


@dataclass
class Chain:
    """Result of :func:`delta_chains`."""

    required: set[str]
    """The kept checkpoints plus every ancestor their delta channels replay through."""
    crossings: dict[tuple[str, str], str]
    """(kept checkpoint, channel) → the last surviving checkpoint before the walk
    entered a checkpoint that is going away (only with ``leaving``)."""
    broken: dict[tuple[str, str], str] = field(default_factory=dict)
    """(kept checkpoint, channel) → the missing ancestor id where the walk ended
    before reaching a seed or the root (a damaged chain)."""


def delta_chains(
    nodes: Mapping[str, Node],
    keep: Iterable[str],
    *,
    leaving: frozenset[str] = frozenset(),
    reseeded: Mapping[str, frozenset[str]] | None = None,
) -> Chain:
    """Which ancestors the kept checkpoints need to rebuild their delta channels (R7).

    For each kept checkpoint and each channel it needs, walk parents until one
    stores a seed (included: its writes produced the next value) or the root.

    Args:
        nodes: Every checkpoint of one (thread, ns) by id.
        keep: Checkpoints that must keep their exact state.
        leaving: Checkpoints that are going away regardless (deleted runs); a
            walk that reaches one records a crossing instead of continuing.
        reseeded: Checkpoint → channels that will get a fresh seed; walks
            stop there.

    Returns:
        The required set and the crossings.
    """
    reseeded = reseeded or {}
    required: set[str] = set()
    crossings: dict[tuple[str, str], str] = {}
    broken: dict[tuple[str, str], str] = {}
    walked: set[tuple[str, str]] = set()
    for k in keep:
        node = nodes.get(k)
        if node is None:
            continue
        required.add(k)
        for channel in node.needs - reseeded.get(k, frozenset()):
            last = k
            parent = node.parent_id
            while parent is not None and (parent, channel) not in walked:
                if parent in leaving:
                    crossings[(k, channel)] = last
                    break
                pnode = nodes.get(parent)
                if pnode is None:
                    broken[(k, channel)] = parent
                    break
                walked.add((parent, channel))
                required.add(parent)
                if channel in pnode.seeded or channel in reseeded.get(parent, frozenset()):
                    break
                if pnode.versioned is not None and channel not in pnode.versioned:
                    # No version here: nothing older ever wrote the channel, so
                    # this ancestor's own writes are the first to replay.
                    break
                last = parent
                parent = pnode.parent_id
    return Chain(required=required, crossings=crossings, broken=broken)


def parent_cycles(parents: Mapping[str, str | None]) -> list[list[str]]:
    """Every loop in a parent map (R11): each cycle once, from its smallest id, child first.

    A parent chain must end at a root or a missing parent; a cycle (a
    checkpoint that is its own parent, or its own ancestor) makes every walk
    from a checkpoint on or below it endless. Cost: O(len(parents)), each id is
    followed once.

    Args:
        parents: Checkpoint id → parent id (None at a root) of one (thread, ns).

    Returns:
        The cycles, e.g. ``[["b", "c"]]`` when b's parent is c and c's is b.
    """
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []
    for start in parents:
        if start in state:
            continue
        path: list[str] = []
        cur: str | None = start
        while cur is not None and cur in parents and cur not in state:
            state[cur] = 1
            path.append(cur)
            cur = parents[cur]
        if cur is not None and state.get(cur) == 1:
            loop = path[path.index(cur) :]
            first = loop.index(min(loop))
            cycles.append(loop[first:] + loop[:first])
        for cid in path:
            state[cid] = 2
    return cycles


@dataclass
class Plan:
    """What a maintenance operation will do to one (thread, ns)."""

    delete: set[str] = field(default_factory=set)
    hide: set[str] = field(default_factory=set)
    unhide: set[str] = field(default_factory=set)
    seeds: dict[str, set[str]] = field(default_factory=dict)
    relink: dict[str, str | None] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """True when the plan changes nothing."""
        return not (self.delete or self.hide or self.unhide or self.seeds or self.relink)


def plan_keep(
    nodes: Mapping[str, Node],
    keep: set[str],
    *,
    reseed: frozenset[str] = frozenset(),
) -> Plan:
    """Plan a prune that keeps ``keep`` exact and drops everything else it can.

    Args:
        nodes: Every checkpoint of one (thread, ns).
        keep: The checkpoints to keep visible.
        reseed: Channels whose reducer is known: kept checkpoints needing them
            get a fresh seed instead of keeping their chain.

    Returns:
        Delete what no kept checkpoint needs; hide the chain that remains;
        re-link survivors whose parent goes to the nearest surviving ancestor.
    """
    seeds = {k: set(nodes[k].needs & reseed) for k in keep if nodes[k].needs & reseed}
    chain = delta_chains(nodes, keep, reseeded={k: frozenset(v) for k, v in seeds.items()})
    plan = Plan(seeds=seeds)
    for cid, node in nodes.items():
        if cid not in chain.required:
            plan.delete.add(cid)
        elif cid not in keep and not node.hidden:
            plan.hide.add(cid)
        elif cid in keep and node.hidden:
            plan.unhide.add(cid)
    _relink(nodes, plan)
    return plan


def _relink(nodes: Mapping[str, Node], plan: Plan) -> None:
    """Point survivors whose parent is deleted at the nearest surviving ancestor."""
    for cid, node in nodes.items():
        if cid in plan.delete or node.parent_id not in plan.delete:
            continue
        parent: str | None = node.parent_id
        seen: set[str] = set()
        while parent is not None and parent in plan.delete:
            if parent in seen:
                raise CorruptRecordError(
                    f"the parent chain of checkpoint {cid!r} loops through {parent!r}; "
                    "run `deltalog verify`"
                )
            seen.add(parent)
            pnode = nodes.get(parent)
            parent = pnode.parent_id if pnode is not None else None
        plan.relink[cid] = parent


def plan_delete(
    nodes: Mapping[str, Node],
    doomed: set[str],
    *,
    reseed: frozenset[str] = frozenset(),
) -> tuple[Plan, dict[tuple[str, str], str]]:
    """Plan deleting ``doomed`` (a run's checkpoints) while every other one stays exact.

    Surviving checkpoints whose delta walk would enter a doomed checkpoint are
    "crossings". For channels in ``reseed`` the last surviving checkpoint on
    that walk gets a fresh seed; the other crossings are returned unresolved
    (the caller raises). Parents that go away are re-linked to the nearest
    surviving ancestor.

    Returns:
        The plan and the unresolved crossings ((checkpoint, channel) → frontier).
    """
    survivors = {cid for cid in nodes if cid not in doomed}
    visible = {cid for cid in survivors if not nodes[cid].hidden}
    chain = delta_chains(nodes, visible, leaving=frozenset(doomed))
    plan = Plan(delete=set(doomed))
    unresolved: dict[tuple[str, str], str] = {}
    for (cid, channel), frontier in chain.crossings.items():
        if channel in reseed:
            plan.seeds.setdefault(frontier, set()).add(channel)
        else:
            unresolved[(cid, channel)] = frontier
    _relink(nodes, plan)
    return plan, unresolved
