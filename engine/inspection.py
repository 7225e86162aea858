"""Inspection as library code: what ``history``, ``show`` and ``diff`` compute, not how they print.

State is read through the saver's public API (``list``, ``get_tuple``,
``get_writes``, ``get_delta_channel_history``) and
:class:`deltalog.channels.Reconstructor`; ``history`` reads stored rows
through the store's read transaction (still serialized), so it never decodes
a channel value.

Reducers without the user's graph: a channel is a delta channel at a
checkpoint when its metadata counts updates since a snapshot
(``counters_since_delta_snapshot``), when its stored value is a
``_DeltaSnapshot``, or when it has a version but no stored value. Such a
channel whose seed and writes are all messages is rebuilt with the messages
reducer (``deltalog.channels.messages``, ``add_messages`` semantics); any
other is reported as *unresolved* with its seed and write count, and
``--graph`` gives the exact reducers.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deltalog.channels import Reconstructor, messages, read_counters
from deltalog.engine.config import config_for
from deltalog.engine.errors import AmbiguousCheckpointError, CheckpointNotFoundError
from deltalog.engine.saver import DeltaLogSaver
from deltalog.engine.store_rows import CheckpointRow, StoredValue
from deltalog.engine.values import loads as serde_loads
from deltalog.engine.values import seed_like
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, DeltaChannelHistory
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.pregel import Pregel

__all__ = [
    "ChannelDiff",
    "HistoryEntry",
    "StateView",
    "collect_history",
    "count_checkpoints",
    "diff_states",
    "is_internal",
    "next_nodes",
    "reconstruct_state",
    "relation",
    "resolve_checkpoint",
    "task_node",
]

_TASKS = "__pregel_tasks"
_MAX_WALK = 100_000  # ancestors `relation` follows before giving up


def is_internal(channel: str) -> bool:
    """LangGraph's own channels (edges, ``__start__``, ``__pregel_tasks``): never state."""
    return channel.startswith(("branch:", "join:")) or (
        channel.startswith("__") and channel != "__root__"
    )


def task_node(task_path: str) -> str:
    """The node of a task from its path: ``'~__pregel_pull, model'`` → ``'model'``.

    >>> task_node("~__pregel_pull, model"), task_node("~__pregel_push, 0, False")
    ('model', 'send')
    """
    parts = [p.strip() for p in task_path.lstrip("~").split(",")]
    if len(parts) >= 2 and parts[0] == "__pregel_pull":
        return parts[1]
    if parts and parts[0] == "__pregel_push":
        return "send"
    return task_path or "?"


# -- next nodes ------------------------------------------------------------------------


def _newer(version: Any, seen: Any) -> bool:
    if seen is None:
        return True
    if type(version) is type(seen):
        return bool(version > seen)
    return str(version) > str(seen)


def next_nodes(checkpoint: Checkpoint) -> list[str]:
    """Nodes that run next from a checkpoint, read from its trigger channels.

    A StateGraph node ``n`` is triggered by ``branch:to:n`` (the start node by
    ``__start__``) when that channel holds a value whose version is newer
    than the one ``n`` last saw; Send packets in ``__pregel_tasks`` run when that channel was
    updated by the checkpoint's step. Join edges (``add_edge([a, b], c)``)
    are not resolved; ``--graph`` gives LangGraph's own answer.
    """
    versions = checkpoint.get("channel_versions", {})
    seen = checkpoint.get("versions_seen", {})
    out: list[str] = []
    updated = checkpoint.get("updated_channels")
    if _TASKS in versions and (updated is None or _TASKS in updated):
        for packet in checkpoint.get("channel_values", {}).get(_TASKS) or []:
            node = getattr(packet, "node", None)
            if isinstance(node, str):
                out.append(node)
    pulls: list[str] = []
    values = checkpoint.get("channel_values", {})
    for channel, version in versions.items():
        # Trigger channels are ephemeral: reading one empties it (and bumps its
        # version), so only a channel that still holds a value can trigger.
        if channel not in values:
            continue
        if channel.startswith("branch:to:"):
            node = channel[len("branch:to:") :]
        elif channel == "__start__":
            node = "__start__"
        else:
            continue
        if _newer(version, seen.get(node, {}).get(channel)):
            pulls.append(node)
    return out + sorted(set(pulls))


# -- history ------------------------------------------------------------------------------


@dataclass
class HistoryEntry:
    """One checkpoint as ``deltalog history`` shows it.

    Attributes:
        checkpoint_id: The id.
        parent_id: The parent's id (None for a root).
        step: ``metadata.step``.
        source: ``metadata.source`` (input, loop, update, fork).
        ts: The checkpoint's own timestamp (ISO-8601).
        next: Nodes that run from here (see :func:`next_nodes`).
        writes: Pending writes per channel (what the tasks run from here wrote).
        tasks: Nodes of those tasks, in write order.
        seeds: Delta channels whose ``_DeltaSnapshot`` seed was written at this checkpoint.
        replay: Delta channels rebuilt by replay here → updates since their seed.
        hidden: Kept only so a later checkpoint can be rebuilt (after a prune).
        depth: Branch depth in the tree (0 = the branch of the latest checkpoint).
        fork: First checkpoint of a side branch.
    """

    checkpoint_id: str
    parent_id: str | None
    step: int | None
    source: str | None
    ts: str | None
    next: list[str]
    writes: dict[str, int]
    tasks: list[str]
    seeds: list[str]
    replay: dict[str, int]
    hidden: bool = False
    depth: int = 0
    fork: bool = False
    seed_versions: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (shallow copies: the fields hold only strings and numbers)."""
        return {
            name: list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v
            for name, v in vars(self).items()
            if name != "seed_versions"
        }


def _is_snapshot(saver: DeltaLogSaver, value: StoredValue) -> bool:
    """Whether a stored value is a ``_DeltaSnapshot`` seed, without decoding it when possible.

    LangGraph's serializer writes a seed as one msgpack extension object of
    type ``EXT_DELTA_SNAPSHOT``: its first bytes say so. Values of other
    serializers (an encrypted serde) are decoded to tell.
    """
    ctype = value.typed[0]
    if ctype in ("null", "bytes", "bytearray"):
        return False
    if ctype == "msgpack":
        return seed_like(value.typed)
    return isinstance(serde_loads(saver.serde, value.typed), _DeltaSnapshot)


class _Stored(dict[str, Any]):
    """``channel_values`` for :func:`next_nodes`: which channels hold a value, and
    ``__pregel_tasks`` decoded on demand (the only value it reads)."""

    def __init__(self, saver: DeltaLogSaver, values: Mapping[str, StoredValue]) -> None:
        super().__init__(dict.fromkeys(values))
        self._saver, self._values = saver, values

    def get(self, key: str, default: Any = None) -> Any:
        if key == _TASKS and key in self._values:
            return serde_loads(self._saver.serde, self._values[key].typed)
        return super().get(key, default)


def _entry(saver: DeltaLogSaver, row: CheckpointRow) -> HistoryEntry:
    """A history entry from a stored row: metadata, envelope and write keys, no channel values.

    Decoded: the metadata, the checkpoint body (versions seen, timestamp) and,
    when the step scheduled Send packets, ``__pregel_tasks``. Seeds are told
    from the first bytes of the stored value (:func:`_is_snapshot`).
    """
    loads = functools.partial(serde_loads, saver.serde)  # unloadable: one SerdeMismatchError line
    meta = loads(row.metadata) or {}
    checkpoint: Checkpoint = loads(row.checkpoint)
    checkpoint["channel_versions"] = dict(row.channel_versions)
    checkpoint["channel_values"] = _Stored(saver, row.values)
    counters = read_counters(meta)
    versions = row.channel_versions
    seeds = {c: versions.get(c) for c, v in row.values.items() if _is_snapshot(saver, v)}
    replay = {c: n for c, (n, _) in sorted(counters.items()) if c not in row.values}
    tasks = list(dict.fromkeys(task_node(w.task_path) for w in row.writes))
    return HistoryEntry(
        checkpoint_id=row.checkpoint_id,
        parent_id=row.parent_id,
        step=meta.get("step"),
        source=meta.get("source"),
        ts=checkpoint.get("ts"),
        next=next_nodes(checkpoint),
        writes=dict(Counter(w.channel for w in row.writes)),
        tasks=tasks,
        seeds=sorted(seeds),
        replay=replay,
        hidden=row.hidden,
        seed_versions=seeds,
    )


def count_checkpoints(saver: DeltaLogSaver, thread_id: str, checkpoint_ns: str = "") -> int:
    """How many checkpoints (hidden ones included) a (thread, namespace) has: keys only."""
    with saver.env.read() as r:
        ids = r.ids(thread_id, checkpoint_ns)
        if ids is None:
            return 0
        return sum(1 for _ in r.checkpoint_ids(*ids))


def collect_history(
    saver: DeltaLogSaver,
    thread_id: str,
    checkpoint_ns: str = "",
    *,
    include_hidden: bool = False,
    limit: int | None = None,
    graph: Pregel[Any, Any, Any, Any] | None = None,
    on_entry: Callable[[], None] | None = None,
) -> list[HistoryEntry]:
    """The checkpoints of one (thread, namespace) in tree order.

    Order: oldest first; at a fork the side branches (older first, each
    indented one level deeper) come right after the fork point and the
    branch that leads to the latest checkpoint continues at the fork's depth.

    Reads metadata, envelopes and write keys only, never a channel value
    (issue 19: a 6,000-checkpoint thread lists in about a second).

    Args:
        saver: The store.
        thread_id: The thread.
        checkpoint_ns: Its namespace.
        include_hidden: Also follow parents into checkpoints hidden by a prune.
        limit: Only the newest ``limit`` checkpoints (hidden ones not counted).
        graph: The user's graph: ``next`` comes from ``graph.get_state``.
        on_entry: Called after each checkpoint read (progress).

    Returns:
        Entries with ``depth`` and ``fork`` set.
    """
    entries: dict[str, HistoryEntry] = {}
    with saver.env.read() as r:
        ids = r.ids(thread_id, checkpoint_ns)
        if ids is None:
            return []
        t, n = ids
        for cid in r.checkpoint_ids(t, n):
            if limit is not None and len(entries) >= limit:
                break
            row = r.checkpoint(t, n, cid)
            if row is None or row.hidden:
                continue
            entries[row.checkpoint_id] = _entry(saver, row)
            if on_entry is not None:
                on_entry()
        if include_hidden:
            todo = [e.parent_id for e in entries.values()]
            while todo:
                pid = todo.pop()
                if pid is None or pid in entries:
                    continue
                row = r.checkpoint(t, n, pid)
                if row is not None:
                    entry = _entry(saver, row)
                    entry.hidden = True
                    entries[pid] = entry
                    todo.append(entry.parent_id)
    for e in entries.values():
        # A seed read at the parent's version was written by an ancestor, not here.
        parent = entries.get(e.parent_id) if e.parent_id is not None else None
        if parent is not None:
            e.seeds = [c for c in e.seeds if parent.seed_versions.get(c) != e.seed_versions[c]]
    if graph is not None:
        bound = graph.copy(update={"checkpointer": saver})
        for e in entries.values():
            state = bound.get_state(config_for(thread_id, checkpoint_ns, e.checkpoint_id))
            e.next = list(state.next)
    return _tree_order(entries)


def _tree_order(entries: dict[str, HistoryEntry]) -> list[HistoryEntry]:
    children: dict[str | None, list[str]] = {}
    for cid, e in entries.items():
        parent = e.parent_id if e.parent_id in entries else None
        children.setdefault(parent, []).append(cid)
    newest: dict[str, str] = {}  # id -> newest id in its subtree

    def subtree_max(cid: str) -> str:
        stack, post = [cid], []
        while stack:
            node = stack.pop()
            post.append(node)
            stack.extend(children.get(node, []))
        for node in reversed(post):
            newest[node] = max([node, *(newest[c] for c in children.get(node, []))])
        return newest[cid]

    roots = sorted(children.get(None, []), key=subtree_max)
    out: list[HistoryEntry] = []
    # Each stack item: (id, depth, starts a side branch). Roots: the newest last, at depth 0.
    stack: list[tuple[str, int, bool]] = [
        (r, 0 if i == len(roots) - 1 else 1, i != len(roots) - 1)
        for i, r in reversed(list(enumerate(roots)))
    ]
    while stack:
        cid, depth, fork = stack.pop()
        e = entries[cid]
        e.depth, e.fork = depth, fork
        out.append(e)
        kids = sorted(children.get(cid, []), key=lambda c: newest[c])
        if kids:
            main, sides = kids[-1], kids[:-1]
            stack.append((main, depth, False))
            stack.extend((s, depth + 1, True) for s in reversed(sides))
    return out


# -- state -----------------------------------------------------------------------------------


# Roles of a ``(role, content)`` pair, as LangChain's ``convert_to_messages``
# (and deltalog.channels.messages) read them.
_ROLES = frozenset({"human", "user", "ai", "assistant", "system", "developer", "function", "tool"})


def _is_role_pair(value: Any) -> bool:
    """``("user", "hi")``, stored by the serializer as ``["user", "hi"]``."""
    return (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and isinstance(value[0], str)
        and value[0] in _ROLES
        and isinstance(value[1], (str, list))
    )


def _is_message_like(value: Any) -> bool:
    """A message, a message dict (``role``/``type`` and ``content``) or a role pair.

    Plain strings are messages too for ``add_messages``, but a list of strings
    is just as likely another channel: they count only next to these.
    """
    if isinstance(value, BaseMessage):
        return True
    if isinstance(value, Mapping):
        return "content" in value and ("role" in value or "type" in value)
    return _is_role_pair(value)


def _message_items(value: Any) -> list[Any] | None:
    """The items of a write or seed if it is message-likes (or strings), else None."""
    if isinstance(value, _DeltaSnapshot):
        value = value.value
    if _is_role_pair(value):
        items = [value]
    else:
        items = list(value) if isinstance(value, (list, tuple)) else [value]
    return items if all(isinstance(i, str) or _is_message_like(i) for i in items) else None


def _is_message_history(history: DeltaChannelHistory) -> bool:
    """Every seed item and write is message-like, and at least one is more than a string."""
    found = False
    values = [history["seed"]] if "seed" in history else []
    values += [value for _, _, value in history["writes"]]
    for value in values:
        items = _message_items(value)
        if items is None:
            return False
        found = found or any(not isinstance(i, str) for i in items)
    return found


@dataclass
class StateView:
    """A checkpoint's reconstructed state.

    Attributes:
        tuple: The checkpoint tuple as stored.
        values: Channel → value (delta channels rebuilt).
        reducers: Delta channel → where its reducer came from (``graph`` or ``messages``).
        unresolved: Delta channels rebuilt neither way → ``{"seed": ..., "writes": n}``.
    """

    tuple: CheckpointTuple
    values: dict[str, Any]
    reducers: dict[str, str] = field(default_factory=dict)
    unresolved: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint's id."""
        return str(self.tuple.config["configurable"]["checkpoint_id"])


def reconstruct_state(
    saver: DeltaLogSaver,
    config: RunnableConfig,
    graph: Pregel[Any, Any, Any, Any] | None = None,
) -> StateView:
    """Rebuild the state at ``config`` (the latest of its namespace without a checkpoint id).

    With ``graph`` it is exactly ``graph.get_state(config).values`` (see
    :class:`~deltalog.channels.Reconstructor`); without, see the module docstring.

    Raises:
        CheckpointNotFoundError: No such checkpoint.
    """
    tup = saver.get_tuple(config)
    if tup is None:
        conf = config["configurable"]
        what = conf.get("checkpoint_id") or "any checkpoint"
        raise CheckpointNotFoundError(
            f"thread {conf['thread_id']!r} (namespace {conf.get('checkpoint_ns', '')!r}) has "
            f"no {what}; list them with `deltalog threads` / `deltalog history`"
        )
    if graph is not None:
        rec = Reconstructor(saver, graph)
        values = rec.reconstruct(tup.config)
        return StateView(tup, values, {c: "graph" for c in rec.delta_channels})
    stored = tup.checkpoint["channel_values"]
    versions = tup.checkpoint["channel_versions"]
    candidates = set(read_counters(tup.metadata))
    candidates |= {c for c, v in stored.items() if isinstance(v, _DeltaSnapshot)}
    candidates |= {c for c in versions if c not in stored and not is_internal(c)}
    # A seed stored at the checkpoint itself is the whole history (the saver's
    # walk starts at the parent, as the runtime only asks for unstored channels).
    histories: dict[str, DeltaChannelHistory] = {
        c: {"writes": [], "seed": stored[c]} for c in candidates if c in stored
    }
    walk = sorted(c for c in candidates if c not in stored)
    if walk:
        histories.update(saver.get_delta_channel_history(config=tup.config, channels=walk))
    resolved = sorted(c for c, h in histories.items() if _is_message_history(h))
    unresolved: dict[str, dict[str, Any]] = {}
    for c, h in sorted(histories.items()):
        if c not in resolved and (h["writes"] or "seed" in h):
            seed = h.get("seed")
            unresolved[c] = {
                "seed": seed.value if isinstance(seed, _DeltaSnapshot) else seed,
                "writes": len(h["writes"]),
            }
    plain = [c for c in stored if not is_internal(c) and c not in candidates]
    rec = Reconstructor(saver, dict.fromkeys(resolved, messages))
    values = rec.reconstruct(tup.config, channels=[*resolved, *plain]) if resolved or plain else {}
    return StateView(tup, values, dict.fromkeys(resolved, "messages"), unresolved)


# -- addressing checkpoints ---------------------------------------------------------------


def resolve_checkpoint(
    saver: DeltaLogSaver, thread_id: str, checkpoint_ns: str, ref: str | None
) -> str:
    """A full checkpoint id from ``ref``: an id, a unique prefix, or ``latest`` / None.

    Raises:
        CheckpointNotFoundError: No checkpoint matches.
        AmbiguousCheckpointError: A prefix matches several.
    """
    if ref is None or ref == "latest":
        tup = saver.get_tuple(config_for(thread_id, checkpoint_ns))
        if tup is None:
            raise CheckpointNotFoundError(
                f"thread {thread_id!r} (namespace {checkpoint_ns!r}) has no checkpoints; "
                "list threads with `deltalog threads PATH`"
            )
        return str(tup.config["configurable"]["checkpoint_id"])
    exact = saver.get_tuple(config_for(thread_id, checkpoint_ns, ref))
    if exact is not None:
        return ref
    matches = [
        t.config["configurable"]["checkpoint_id"]
        for t in saver.list(config_for(thread_id, checkpoint_ns))
        if str(t.config["configurable"]["checkpoint_id"]).startswith(ref)
    ]
    if len(matches) == 1:
        return str(matches[0])
    if not matches:
        raise CheckpointNotFoundError(
            f"no checkpoint {ref!r} in thread {thread_id!r} (namespace {checkpoint_ns!r}); "
            f"see `deltalog history PATH {thread_id}`"
        )
    raise AmbiguousCheckpointError(
        f"checkpoint prefix {ref!r} matches {len(matches)} checkpoints; give more of it"
    )


def relation(
    saver: DeltaLogSaver, thread_id: str, checkpoint_ns: str, a: str, b: str
) -> dict[str, Any]:
    """How checkpoint ``b`` relates to ``a``: same, descendant, ancestor, or fork.

    Follows parent links (``get_tuple``) from B towards A, then from A towards
    B, at most 100,000 steps each: a descendant costs its distance.

    Returns:
        ``{"kind": ..., "steps": n}`` or, for a fork, ``{"kind": "fork",
        "common_ancestor": id}``; ``{"kind": "unrelated"}`` if the chains never meet.
    """
    if a == b:
        return {"kind": "same"}

    def chain(start: str, stop: str) -> list[str]:
        """``start`` and its ancestors, up to ``stop`` or the root."""
        out, cid = [start], start
        while len(out) < _MAX_WALK and cid != stop:
            tup = saver.get_tuple(config_for(thread_id, checkpoint_ns, cid))
            parent = (tup.parent_config or {}).get("configurable", {}) if tup else {}
            pid = parent.get("checkpoint_id")
            if pid is None:
                break
            out.append(pid)
            cid = pid
        return out

    up_b = chain(b, a)
    if up_b[-1] == a:
        return {"kind": "descendant", "steps": len(up_b) - 1}
    up_a = chain(a, b)
    if up_a[-1] == b:
        return {"kind": "ancestor", "steps": len(up_a) - 1}
    on_b = set(up_b)
    common = next((c for c in up_a if c in on_b), None)
    return {"kind": "fork", "common_ancestor": common} if common else {"kind": "unrelated"}


# -- diff ---------------------------------------------------------------------------------------


@dataclass
class ChannelDiff:
    """How one channel differs between two states.

    Attributes:
        channel: Channel name.
        kind: ``added`` (only in B), ``removed`` (only in A), ``changed``, or
            ``unresolved`` (a delta channel rebuilt on neither side or one: its
            reducer is unknown without ``--graph``, so nothing is compared).
        old: A's value (None when added).
        new: B's value (None when removed).
        removed: For lists: items of A not in B (messages matched by id).
        added: For lists: items of B not in A.
        updated: For message lists: messages of B whose id is in A with other content.
        keys: For dicts: ``{"added": [...], "removed": [...], "changed": [...]}``.
        sides: For ``unresolved``: the sides (``"A"``, ``"B"``) it is unresolved on.
    """

    channel: str
    kind: str
    old: Any = None
    new: Any = None
    removed: list[Any] | None = None
    added: list[Any] | None = None
    updated: list[Any] | None = None
    keys: dict[str, list[str]] | None = None
    sides: list[str] | None = None


def _message_ids(values: Sequence[Any]) -> list[str] | None:
    if not values or not all(isinstance(v, BaseMessage) and v.id for v in values):
        return None
    return [str(v.id) for v in values]


def _list_diff(d: ChannelDiff, old: Sequence[Any], new: Sequence[Any]) -> None:
    ids_old, ids_new = _message_ids(old), _message_ids(new)
    if ids_old is not None and ids_new is not None:
        before = dict(zip(ids_old, old, strict=True))
        after = set(ids_new)
        d.removed = [m for i, m in zip(ids_old, old, strict=True) if i not in after]
        d.added = [m for i, m in zip(ids_new, new, strict=True) if i not in before]
        d.updated = [m for i, m in zip(ids_new, new, strict=True) if i in before and before[i] != m]
        return
    prefix = 0
    while prefix < min(len(old), len(new)) and old[prefix] == new[prefix]:
        prefix += 1
    d.removed, d.added = list(old[prefix:]), list(new[prefix:])


def diff_states(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    unresolved: Mapping[str, list[str]] | None = None,
) -> list[ChannelDiff]:
    """Per channel, what changed from ``old`` to ``new`` (unchanged channels are left out).

    ``unresolved`` maps channels rebuilt on neither side or only one to those
    sides: they are reported as ``unresolved``, never as added or removed.

    >>> [(d.channel, d.kind, d.added) for d in diff_states({"a": [1, 2]}, {"a": [1, 2, 3], "b": 0})]
    [('a', 'changed', [3]), ('b', 'added', None)]
    >>> [(d.channel, d.kind, d.sides) for d in diff_states({}, {"m": [1]}, {"m": ["A"]})]
    [('m', 'unresolved', ['A'])]
    """
    out: list[ChannelDiff] = []
    unresolved = unresolved or {}
    for channel in sorted(set(old) | set(new) | set(unresolved)):
        if channel in unresolved:
            out.append(
                ChannelDiff(
                    channel,
                    "unresolved",
                    old=old.get(channel),
                    new=new.get(channel),
                    sides=list(unresolved[channel]),
                )
            )
        elif channel not in new:
            out.append(ChannelDiff(channel, "removed", old=old[channel]))
        elif channel not in old:
            out.append(ChannelDiff(channel, "added", new=new[channel]))
        elif old[channel] != new[channel]:
            d = ChannelDiff(channel, "changed", old=old[channel], new=new[channel])
            a, b = old[channel], new[channel]
            if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
                _list_diff(d, a, b)
            elif isinstance(a, Mapping) and isinstance(b, Mapping):
                d.keys = {
                    "added": sorted(map(str, set(b) - set(a))),
                    "removed": sorted(map(str, set(a) - set(b))),
                    "changed": sorted(str(k) for k in set(a) & set(b) if a[k] != b[k]),
                }
            out.append(d)
    return out
