"""Read-only commands: ``threads``, ``history``, ``show``, ``diff``, ``stats``.

Each opens the store read-only, so inspecting a store that a running graph
is writing to is safe; each reads one consistent snapshot per call.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from deltalog.engine.cli_common import (
    CONTEXT_SETTINGS,
    Output,
    config_for,
    graph_option,
    human_bytes,
    id_time,
    json_option,
    jsonl_option,
    load_graph,
    ns_option,
    open_saver,
    open_store,
    progress_bar,
    store_path,
    to_jsonable,
)
from deltalog.engine.summaries import storage_stats, thread_summaries
from rich.markup import escape
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    # inspection needs LangGraph: imported by the commands that rebuild state,
    # so `threads` and `stats` (and --help) start without it (issue 19).
    from deltalog.engine.inspection import ChannelDiff, HistoryEntry, StateView
    from deltalog.engine.saver import DeltaLogSaver

__all__ = ["diff_cmd", "history_cmd", "show_cmd", "stats_cmd", "threads_cmd"]

_ROLE_STYLE = {"human": "bold cyan", "ai": "bold green", "tool": "bold magenta", "system": "bold"}
_SORT_KEYS = ("updated", "thread", "checkpoints", "bytes", "writes")


def _epilog(*examples: str) -> str:
    return "Examples:\n\n\b\n" + "\n".join(f"  {e}" for e in examples)


# -- threads --------------------------------------------------------------------------------


@click.command(
    "threads",
    short_help="List threads: counts, namespaces, last update, bytes.",
    context_settings=CONTEXT_SETTINGS,
    epilog=_epilog(
        "deltalog threads chat.lmdb",
        "deltalog threads chat.lmdb --sort bytes --limit 20",
        "deltalog threads chat.lmdb --json | jq '.[].thread_id'",
    ),
)
@store_path()
@click.option(
    "--sort",
    "sort_key",
    type=click.Choice(_SORT_KEYS),
    default="updated",
    show_default=True,
    help="Order: newest update, thread id, checkpoint count, bytes or writes.",
)
@click.option("--reverse", is_flag=True, help="Reverse the order (ascending for numbers/time).")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=None,
    help="Show at most this many threads (0 = all). Tables default to 100.",
)
@json_option
@jsonl_option
def threads_cmd(
    path: Path, sort_key: str, reverse: bool, limit: int | None, as_json: bool, as_jsonl: bool
) -> None:
    """List threads: checkpoints, namespaces, last update, writes and bytes.

    Read from keys and record sizes only (nothing is decoded), so it stays
    fast on stores with many thousands of threads. "Last update" is read
    from the newest root checkpoint's id (LangGraph's ids carry their time).
    """
    out = Output(as_json)
    with open_store(path) as store:
        summaries = thread_summaries(store)
    rows: list[dict[str, Any]] = []
    for s in summaries:
        when = id_time(s.newest_id)
        rows.append(
            {
                "thread_id": s.thread_id,
                "checkpoints": s.checkpoints,
                "namespaces": s.namespaces,
                "last_checkpoint_id": s.newest_id,
                "last_update": when.isoformat() if when else None,
                "writes": s.writes,
                "blobs": s.blobs,
                "bytes": s.bytes,
            }
        )
    field = {"updated": "last_update", "thread": "thread_id"}.get(sort_key, sort_key)
    descending = sort_key != "thread"
    rows.sort(key=lambda r: (r[field] is not None, r[field] or 0), reverse=descending != reverse)
    total = len(rows)
    if limit is None and not (as_json or as_jsonl):
        limit = 100
    if limit:
        rows = rows[:limit]
    if as_jsonl:
        out.jsonl(rows)
        return
    if as_json:
        out.json(rows)
        return
    table = Table(title=f"{total} threads in {path}", title_justify="left")
    table.add_column("thread_id", no_wrap=True)
    table.add_column("checkpoints", justify="right")
    table.add_column("namespaces", justify="right")
    table.add_column("last update (UTC)", no_wrap=True)
    table.add_column("writes", justify="right")
    table.add_column("bytes", justify="right")
    for r in rows:
        table.add_row(
            escape(r["thread_id"]),
            f"{r['checkpoints']:,}",
            str(len(r["namespaces"])),
            (r["last_update"] or "-")[:19].replace("T", " "),
            f"{r['writes']:,}",
            human_bytes(r["bytes"]),
        )
    out.table(table)
    if total > len(rows):
        out.console.print(f"… {total - len(rows)} more; --limit 0 shows all")


# -- history ------------------------------------------------------------------------------


def _namespaces(saver: DeltaLogSaver, thread_id: str) -> list[str]:
    for s in saver.threads():
        if s.thread_id == thread_id:
            return sorted(s.namespaces)
    return []


@click.command(
    "history",
    context_settings=CONTEXT_SETTINGS,
    epilog=_epilog(
        "deltalog history chat.lmdb thread-1",
        "deltalog history chat.lmdb thread-1 --limit 10",
        "deltalog history chat.lmdb thread-1 --ns 'sub:1f0…' --hidden",
        "deltalog history chat.lmdb thread-1 --json",
    ),
)
@store_path()
@click.argument("thread_id", metavar="THREAD")
@ns_option
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=None,
    help="Only the newest N checkpoints (0 = all). Tables default to 100, --json to all.",
)
@click.option(
    "--hidden", is_flag=True, help="Include checkpoints a prune kept only for a delta chain."
)
@graph_option
@json_option
@jsonl_option
def history_cmd(
    path: Path,
    thread_id: str,
    checkpoint_ns: str,
    limit: int | None,
    hidden: bool,
    graph_spec: str | None,
    as_json: bool,
    as_jsonl: bool,
) -> None:
    """Show a thread's checkpoint chain, forks as a tree.

    Per checkpoint: id, step, source, the nodes that run next, the writes
    its tasks made per channel, snapshot markers of delta channels (S = a
    seed was written here; otherwise the number of updates a read replays)
    and its parent. Oldest first; a fork's side branch is indented under the
    checkpoint it forked from and the branch leading to the latest
    checkpoint continues unindented. Read from metadata and write keys only
    (no state is decoded), so long threads list in about a second.
    """
    from deltalog.engine.inspection import collect_history, count_checkpoints

    out = Output(as_json)
    graph = load_graph(graph_spec) if graph_spec else None
    if limit is None and not (as_json or as_jsonl):
        limit = 100
    with open_saver(path, readonly=True) as saver:
        total = count_checkpoints(saver, thread_id, checkpoint_ns)
        with progress_bar(out, transient=True) as bar:
            task = bar.add_task("reading checkpoints", total=min(total, limit or total))
            entries = collect_history(
                saver,
                thread_id,
                checkpoint_ns,
                include_hidden=hidden,
                limit=limit or None,
                graph=graph,
                on_entry=lambda: bar.advance(task),
            )
        namespaces = _namespaces(saver, thread_id)
    if not entries:
        raise click.ClickException(
            f"thread {thread_id!r} has no checkpoints in namespace {checkpoint_ns!r}"
            + (f" (its namespaces: {namespaces})" if namespaces else "")
        )
    if as_jsonl:
        out.jsonl(
            {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, **e.to_dict()} for e in entries
        )
        return
    if as_json:
        out.json(
            {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "namespaces": namespaces,
                "checkpoints": [e.to_dict() for e in entries],
            }
        )
        return
    _print_history(out, thread_id, checkpoint_ns, entries, namespaces)
    shown = sum(not e.hidden for e in entries)
    if limit and shown >= limit and total > shown:
        out.console.print(f"… the newest {shown:,} of {total:,} shown; --limit 0 shows all")


def utc_label(ts: Any) -> str:
    """An ISO-8601 timestamp as ``2026-05-01 12:00:00.123 UTC`` (LangGraph's ``ts`` is UTC).

    >>> utc_label("2026-05-01T12:00:00.123456+00:00"), utc_label(None)
    ('2026-05-01 12:00:00.123 UTC', '')
    """
    if not isinstance(ts, str) or not ts:
        return ""
    try:
        when = datetime.fromisoformat(ts)
    except ValueError:
        return ts
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d} UTC"


def _print_history(
    out: Output,
    thread_id: str,
    checkpoint_ns: str,
    entries: list[HistoryEntry],
    namespaces: list[str],
) -> None:
    """Two lines per checkpoint, so it reads at 80 columns; forks indented with └."""
    title = f"thread {thread_id!r}" + (f" namespace {checkpoint_ns!r}" if checkpoint_ns else "")
    out.console.print(f"[bold]{escape(title)}[/bold]: {len(entries)} checkpoints, oldest first")
    visible = [e.checkpoint_id for e in entries if not e.hidden]
    head = max(visible) if visible else None
    previous: str | None = None
    for e in entries:
        rail = "│ " * e.depth
        tree = "│ " * max(e.depth - 1, 0) + ("└ " if e.fork else "│ " if e.depth else "")
        marks = [m for m, on in (("latest", e.checkpoint_id == head), ("hidden", e.hidden)) if on]
        line = Text(tree, style="dim")
        line.append(e.checkpoint_id, style="bold" if "latest" in marks else "")
        line.append(f"  step {e.step if e.step is not None else '?'}  {e.source or ''}")
        for m in marks:
            line.append(f"  ({m})", style="bold yellow" if m == "latest" else "dim")
        if e.next:
            line.append(f"  → {', '.join(e.next)}", style="cyan")
        out.console.print(line, no_wrap=True, crop=False)
        details = []
        if e.writes:
            details.append("writes " + " ".join(f"{c}×{n}" for c, n in e.writes.items()))
        delta = [f"S:{c}" for c in e.seeds] + [f"{c}+{n}" for c, n in e.replay.items() if n]
        if delta:
            details.append("delta " + " ".join(delta))
        if e.parent_id != previous:
            details.append("parent " + (e.parent_id or "-"))
        if details:
            out.console.print(
                Text(rail + "    " + "   ".join(details), style="dim"), no_wrap=True, crop=False
            )
        previous = e.checkpoint_id
    others = [n for n in namespaces if n != checkpoint_ns]
    if others:
        out.console.print(f"other namespaces (--ns): {', '.join(map(repr, others))}")


# -- show -------------------------------------------------------------------------------------


def print_messages(out: Output, messages: list[Any], *, indent: str = "  ") -> None:
    """Messages by role: ``human  h-1  text`` with tool calls under the text."""
    from langchain_core.messages import BaseMessage

    for m in messages:
        if not isinstance(m, BaseMessage):
            out.console.print(indent + escape(repr(m)))
            continue
        role = m.type + (f":{m.name}" if m.name else "")
        line = Text(indent)
        line.append(f"{role:<7}", style=_ROLE_STYLE.get(m.type, "bold"))
        line.append(f" {m.id or ''}", style="dim")
        out.console.print(line)
        content = m.content if isinstance(m.content, str) else to_jsonable(m.content)
        text = content if isinstance(content, str) else str(content)
        for part in text.splitlines() or [""]:
            out.console.print(Text(indent + "    " + part))
        for call in getattr(m, "tool_calls", None) or []:
            out.console.print(
                Text(f"{indent}    → {call.get('name')}({to_jsonable(call.get('args'))})")
            )


def _is_message_list(value: Any) -> bool:
    from langchain_core.messages import BaseMessage

    return (
        isinstance(value, list) and bool(value) and all(isinstance(v, BaseMessage) for v in value)
    )


def _state_json(view: StateView, thread_id: str) -> dict[str, Any]:
    tup = view.tuple
    return {
        "thread_id": thread_id,
        "checkpoint_ns": tup.config["configurable"].get("checkpoint_ns", ""),
        "checkpoint_id": view.checkpoint_id,
        "parent_id": (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
        "step": (tup.metadata or {}).get("step"),
        "source": (tup.metadata or {}).get("source"),
        "ts": tup.checkpoint.get("ts"),
        "values": to_jsonable(view.values),
        "reducers": view.reducers,
        "unresolved": to_jsonable(view.unresolved),
        "pending_writes": [
            {"task_id": t, "channel": c, "value": to_jsonable(v)}
            for t, c, v in tup.pending_writes or []
        ],
    }


@click.command(
    "show",
    short_help="Show the state at a checkpoint, messages by role.",
    context_settings=CONTEXT_SETTINGS,
    epilog=_epilog(
        "deltalog show chat.lmdb thread-1",
        "deltalog show chat.lmdb thread-1 --checkpoint 1f0e3c2a-…",
        "deltalog show chat.lmdb thread-1 --tail 4",
        "deltalog show chat.lmdb thread-1 --graph myapp.agent:graph --json",
    ),
)
@store_path()
@click.argument("thread_id", metavar="THREAD")
@click.option(
    "--checkpoint",
    "checkpoint_ref",
    metavar="ID",
    help="Checkpoint id or a unique prefix of it (default: the latest).",
)
@ns_option
@click.option("--channel", "channels", multiple=True, help="Only this channel (repeatable).")
@click.option(
    "--tail", type=click.IntRange(min=0), metavar="N", help="Only the last N messages of a channel."
)
@click.option(
    "--head",
    type=click.IntRange(min=0),
    metavar="N",
    help="Only the first N messages of a channel.",
)
@graph_option
@json_option
def show_cmd(
    path: Path,
    thread_id: str,
    checkpoint_ref: str | None,
    checkpoint_ns: str,
    channels: tuple[str, ...],
    tail: int | None,
    head: int | None,
    graph_spec: str | None,
    as_json: bool,
) -> None:
    """Show the state at a checkpoint, delta channels rebuilt; messages by role.

    Delta channels are rebuilt from their seed and writes (deltalog.channels).
    Without --graph, channels holding messages use the messages reducer
    (add_messages semantics); others are shown as "unresolved" with their seed
    and the number of writes to replay. --graph uses your graph's reducers
    and gives exactly what graph.get_state(config).values shows. Messages
    written as ("user", "hi") pairs, role/content dicts or strings count as
    messages. --tail/--head keep the last/first N messages of each channel.
    """
    from deltalog.engine.inspection import reconstruct_state, resolve_checkpoint

    if tail is not None and head is not None:
        raise click.UsageError("pass --tail N or --head N, not both")
    out = Output(as_json)
    graph = load_graph(graph_spec) if graph_spec else None
    with open_saver(path, readonly=True) as saver:
        cid = resolve_checkpoint(saver, thread_id, checkpoint_ns, checkpoint_ref)
        view = reconstruct_state(saver, config_for(thread_id, checkpoint_ns, cid), graph)
    if channels:
        view.values = {c: v for c, v in view.values.items() if c in channels}
        view.unresolved = {c: v for c, v in view.unresolved.items() if c in channels}
    totals = {c: len(v) for c, v in view.values.items() if _is_message_list(v)}
    if tail is not None or head is not None:
        for c in totals:
            msgs = view.values[c]
            view.values[c] = msgs[:head] if head is not None else msgs[len(msgs) - (tail or 0) :]
    if as_json:
        doc = _state_json(view, thread_id)
        if tail is not None or head is not None:
            doc["message_counts"] = totals
        out.json(doc)
        return
    meta = view.tuple.metadata or {}
    out.console.print(
        Text.assemble(
            (thread_id, "bold"),
            f" @ {view.checkpoint_id}  step {meta.get('step')}  {meta.get('source', '')}  ",
            utc_label(view.tuple.checkpoint.get("ts")),
        ),
        no_wrap=True,
        crop=False,
    )
    for channel, value in view.values.items():
        how = view.reducers.get(channel)
        label = f"[bold]{escape(channel)}[/bold]" + (f" [dim](delta, {how})[/dim]" if how else "")
        if channel in totals:
            total, shown = totals[channel], len(value)
            which = "first" if head is not None else "last"
            part = f" ({which} {shown} shown)" if shown < total else ""
            out.console.print(f"{label}: {total} messages{part}")
            print_messages(out, value)
        else:
            out.console.print(f"{label}: {escape(repr(value))}")
    for channel, info in view.unresolved.items():
        out.console.print(
            f"[bold]{escape(channel)}[/bold] [yellow](delta channel, reducer unknown: seed + "
            f"{info['writes']} writes; pass --graph)[/yellow] seed: {escape(repr(info['seed']))}"
        )


# -- diff ------------------------------------------------------------------------------------------


_UNRESOLVED_HINT = (
    "its reducer is unknown without your graph; pass --graph MODULE:ATTR "
    "(e.g. myapp.agent:graph) to compare it"
)


def _diff_json(d: ChannelDiff) -> dict[str, Any]:
    out: dict[str, Any] = {"channel": d.channel, "kind": d.kind}
    if d.kind == "unresolved":
        out["sides"] = d.sides
        out["hint"] = _UNRESOLVED_HINT
        return out
    if d.added is not None or d.removed is not None:
        out["removed"] = to_jsonable(d.removed or [])
        out["added"] = to_jsonable(d.added or [])
        if d.updated is not None:
            out["updated"] = to_jsonable(d.updated)
    elif d.keys is not None:
        out["keys"] = d.keys
        out["old"], out["new"] = to_jsonable(d.old), to_jsonable(d.new)
    else:
        out["old"], out["new"] = to_jsonable(d.old), to_jsonable(d.new)
    return out


@click.command(
    "diff",
    context_settings=CONTEXT_SETTINGS,
    epilog=_epilog(
        "deltalog diff chat.lmdb thread-1 1f0e3c2a 1f0e3c2f",
        "deltalog diff chat.lmdb thread-1 1f0e3c2a latest --json",
    ),
)
@store_path()
@click.argument("thread_id", metavar="THREAD")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@ns_option
@graph_option
@json_option
def diff_cmd(
    path: Path,
    thread_id: str,
    a: str,
    b: str,
    checkpoint_ns: str,
    graph_spec: str | None,
    as_json: bool,
) -> None:
    """Show what changed from checkpoint A to checkpoint B.

    A and B are checkpoint ids, unique prefixes of them, or "latest". For
    each channel that differs: messages added, removed or updated (matched
    by id), list items appended or dropped, dict keys changed, or the old and
    new value. Also says whether B descends from A or forks from it. A
    delta channel whose reducer is unknown (not messages; no --graph) is
    reported as not compared, never as added or removed.
    """
    from deltalog.engine.inspection import (
        diff_states,
        reconstruct_state,
        relation,
        resolve_checkpoint,
    )

    out = Output(as_json)
    graph = load_graph(graph_spec) if graph_spec else None
    with open_saver(path, readonly=True) as saver:
        ida = resolve_checkpoint(saver, thread_id, checkpoint_ns, a)
        idb = resolve_checkpoint(saver, thread_id, checkpoint_ns, b)
        va = reconstruct_state(saver, config_for(thread_id, checkpoint_ns, ida), graph)
        vb = reconstruct_state(saver, config_for(thread_id, checkpoint_ns, idb), graph)
        rel = relation(saver, thread_id, checkpoint_ns, ida, idb)
    unresolved: dict[str, list[str]] = {}
    for side, view in (("A", va), ("B", vb)):
        for channel in view.unresolved:
            unresolved.setdefault(channel, []).append(side)
    diffs = diff_states(va.values, vb.values, unresolved)
    step_a, step_b = (va.tuple.metadata or {}).get("step"), (vb.tuple.metadata or {}).get("step")
    if as_json:
        out.json(
            {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "a": {"checkpoint_id": ida, "step": step_a},
                "b": {"checkpoint_id": idb, "step": step_b},
                "relation": rel,
                "channels": [_diff_json(d) for d in diffs],
            }
        )
        return
    out.console.print(f"A {ida} (step {step_a})\nB {idb} (step {step_b})")
    kind = rel["kind"]
    if kind in ("descendant", "ancestor"):
        out.console.print(
            f"B is {rel['steps']} checkpoint(s) {'after' if kind == 'descendant' else 'before'} A"
        )
    elif kind == "fork":
        out.console.print(f"A and B are on different branches from {rel['common_ancestor']}")
    if not diffs:
        out.console.print("no differences in state")
    for d in diffs:
        _print_diff(out, d)


def _print_diff(out: Output, d: ChannelDiff) -> None:
    from langchain_core.messages import BaseMessage

    name = f"[bold]{escape(d.channel)}[/bold]"
    if d.kind == "unresolved":
        where = " and ".join(d.sides or [])
        out.console.print(
            f"{name}: [yellow]not compared[/yellow] — a delta channel not rebuilt at {where}; "
            f"{_UNRESOLVED_HINT}",
            soft_wrap=True,
        )
        return
    if d.kind == "added":
        out.console.print(f"{name}: [green]added[/green] {escape(_short(d.new))}")
        return
    if d.kind == "removed":
        out.console.print(f"{name}: [red]removed[/red] (was {escape(_short(d.old))})")
        return
    if d.added is not None or d.removed is not None:
        out.console.print(
            f"{name}: -{len(d.removed or [])} +{len(d.added or [])}"
            + (f" ~{len(d.updated)}" if d.updated else "")
        )
        for label, items in (("-", d.removed), ("+", d.added), ("~", d.updated)):
            if not items:
                continue
            if all(isinstance(i, BaseMessage) for i in items):
                out.console.print(f"  {label}")
                print_messages(out, items, indent="    ")
            else:
                for item in items:
                    out.console.print(f"  {label} {escape(_short(item))}")
        return
    if d.keys is not None:
        out.console.print(
            f"{name}: keys +{d.keys['added']} -{d.keys['removed']} ~{d.keys['changed']}"
        )
        return
    out.console.print(f"{name}: {escape(_short(d.old))} → {escape(_short(d.new))}")


def _short(value: Any, width: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


# -- stats ----------------------------------------------------------------------------------------


def _bar(value: float, top: float, width: int = 24) -> str:
    if top <= 0:
        return ""
    cells = value / top * width
    full = int(cells)
    part = " ▏▎▍▌▋▊▉"[int((cells - full) * 8)] if full < width else ""
    return ("█" * full + part).rstrip()


@click.command(
    "stats",
    short_help="Show storage by channel and thread, and map use.",
    context_settings=CONTEXT_SETTINGS,
    epilog=_epilog(
        "deltalog stats chat.lmdb",
        "deltalog stats chat.lmdb --top 5",
        "deltalog stats chat.lmdb --json",
    ),
)
@store_path()
@click.option(
    "--top", type=click.IntRange(min=1), default=10, show_default=True, help="Threads to chart."
)
@json_option
def stats_cmd(path: Path, top: int, as_json: bool) -> None:
    """Show storage by thread and by channel, compression, and map size versus use.

    Per channel: stored values (for a delta channel these are its seeds),
    small values held in checkpoint records, writes, bytes as stored and
    before compression. Per thread: bytes of
    its checkpoints, writes and values. Store: the data file, the pages in
    use (and how many of them are on LMDB's free list, reused by later
    writes; `deltalog compact` gives them back), and the LMDB map size (it
    grows automatically). Bars compare bytes.
    """
    out = Output(as_json)
    with open_store(path) as opened:
        found = storage_stats(opened)
    threads, channels, store, file_bytes = (
        found.threads,
        found.channels,
        found.environment,
        found.file_bytes,
    )
    channel_rows: list[dict[str, Any]] = []
    for name, c in sorted(
        channels.items(), key=lambda kv: -(kv[1]["blob_bytes"] + kv[1]["write_bytes"])
    ):
        stored = c["blob_bytes"] + c["write_bytes"]
        channel_rows.append(
            {
                "channel": name,
                "values": c["blobs"],
                "value_bytes": c["blob_bytes"],
                "inline": c["inline"],
                "inline_bytes": c["inline_bytes"],
                "writes": c["writes"],
                "write_bytes": c["write_bytes"],
                "stored_bytes": stored,
                "raw_bytes": c["raw_bytes"],
                "compression_ratio": round(c["raw_bytes"] / stored, 3) if stored else None,
            }
        )
    thread_rows: list[dict[str, Any]] = sorted(
        (
            {
                "thread_id": t.thread_id,
                "checkpoints": t.checkpoints,
                "writes": t.writes,
                "values": t.blobs,
                "bytes": t.bytes,
            }
            for t in threads
        ),
        key=lambda r: -int(r["bytes"]),
    )
    stored_total = sum(r["stored_bytes"] for r in channel_rows)
    raw_total = sum(r["raw_bytes"] for r in channel_rows)
    summary = {
        "path": str(path),
        "threads": len(thread_rows),
        "checkpoints": sum(t.checkpoints for t in threads),
        "writes": sum(t.writes for t in threads),
        "values": sum(t.blobs for t in threads),
        "record_bytes": sum(t.bytes for t in threads),
        "file_bytes": file_bytes,
        "used_bytes": store["used_bytes"],
        "free_bytes": store["free_bytes"],
        "map_size": store["map_size"],
        "compression_ratio": round(raw_total / stored_total, 3) if stored_total else None,
        "databases": {k: v for k, v in store.items() if isinstance(v, dict)},
    }
    if as_json:
        out.json({"store": summary, "channels": channel_rows, "threads": thread_rows})
        return
    out.console.print(
        f"[bold]{path}[/bold]: {summary['threads']:,} threads, {summary['checkpoints']:,} "
        f"checkpoints, {summary['writes']:,} writes, {summary['values']:,} values"
    )
    out.console.print(
        f"file {human_bytes(file_bytes)}, pages in use {human_bytes(store['used_bytes'])} "
        f"({human_bytes(store['free_bytes'])} of them free for reuse; compact gives them "
        f"back), map {human_bytes(store['map_size'])} "
        f"({store['used_bytes'] / store['map_size']:.0%} used; the map grows on demand)"
        + (
            f"; compression {summary['compression_ratio']:.2f}×"
            if summary["compression_ratio"]
            else ""
        )
    )
    ctable = Table(title="by channel", title_justify="left")
    for col, justify in (
        ("channel", "left"),
        ("values", "right"),
        ("inline", "right"),
        ("writes", "right"),
        ("stored", "right"),
        ("raw", "right"),
        ("ratio", "right"),
        ("", "left"),
    ):
        ctable.add_column(
            col,
            justify=justify,  # type: ignore[arg-type]
            no_wrap=col == "channel",
            overflow="crop" if not col else "fold",
        )
    # Bars shrink on narrow screens, so the names and numbers keep their width.
    bar_width = 24 if out.console.width >= 110 else 8
    ctop = max((r["stored_bytes"] for r in channel_rows), default=0)
    for r in channel_rows:
        ctable.add_row(
            escape(r["channel"]),
            f"{r['values']:,}",
            f"{r['inline']:,}",
            f"{r['writes']:,}",
            human_bytes(r["stored_bytes"]),
            human_bytes(r["raw_bytes"]),
            f"{r['compression_ratio']:.2f}×" if r["compression_ratio"] else "-",
            _bar(r["stored_bytes"], ctop, bar_width),
        )
    out.table(ctable)
    ttable = Table(title=f"top {min(top, len(thread_rows))} threads by bytes", title_justify="left")
    for col, justify in (
        ("thread_id", "left"),
        ("checkpoints", "right"),
        ("writes", "right"),
        ("bytes", "right"),
        ("", "left"),
    ):
        ttable.add_column(
            col,
            justify=justify,  # type: ignore[arg-type]
            no_wrap=col == "thread_id",
            overflow="crop" if not col else "fold",
        )
    ttop = max((int(r["bytes"]) for r in thread_rows), default=0)
    for r in thread_rows[:top]:
        ttable.add_row(
            escape(str(r["thread_id"])),
            f"{r['checkpoints']:,}",
            f"{r['writes']:,}",
            human_bytes(int(r["bytes"])),
            _bar(int(r["bytes"]), ttop, bar_width),
        )
    out.table(ttable)
