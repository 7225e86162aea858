"""Operator commands: ``verify``, ``prune``, ``copy``, ``delete``, ``compact``, ``backup``,
``export`` and ``import``.

Each is one call of a public :class:`~deltalog.engine.DeltaLogSaver` method
whose report is printed (``--json``: its ``to_dict()``).

``export`` and ``import`` write and read the stream of
:mod:`deltalog.engine.export` (documented in docs/cli.md, "The export stream").
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click
from deltalog.engine.cli_common import (
    CONTEXT_SETTINGS,
    CliError,
    Output,
    OwnerOnlyFile,
    age_option,
    graph_option,
    human_bytes,
    json_option,
    load_graph,
    one_line,
    open_saver,
    open_store,
    progress_bar,
    read_stream,
    store_path,
)
from deltalog.engine.errors import ImportRecordError
from deltalog.engine.export import decode_record, encode_record, read_lines
from deltalog.engine.reports import RemovalReport, VerifyReport
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from deltalog.engine.saver import DeltaLogSaver

__all__ = [
    "backup_cmd",
    "compact_cmd",
    "copy_cmd",
    "decode_record",
    "delete_cmd",
    "encode_record",
    "export_cmd",
    "import_cmd",
    "prune_cmd",
    "readers_cmd",
    "verify_cmd",
]


def _epilog(*examples: str) -> str:
    return "Examples:\n\n\b\n" + "\n".join(f"  {e}" for e in examples)


# -- verify --------------------------------------------------------------------------------------


@click.command(
    "verify",
    short_help="Check every chain and record (exit 1 on errors).",
    context_settings=CONTEXT_SETTINGS,
    epilog=_epilog(
        "deltalog verify chat.lmdb",
        "deltalog verify chat.lmdb thread-1 thread-2 --deep",
        "deltalog verify chat.lmdb --json",
    ),
)
@store_path()
@click.argument("thread_ids", metavar="[THREAD]...", nargs=-1)
@click.option(
    "--deep", is_flag=True, help="Also deserialize every checkpoint, value and write (slower)."
)
@json_option
def verify_cmd(path: Path, thread_ids: tuple[str, ...], deep: bool, as_json: bool) -> None:
    """Check every chain and record; exit status 1 if an error is found.

    Finds dangling parents, delta channels that cannot reach a seed or the
    root, undecodable records (with --deep also values the serializer cannot
    load), values nothing references and writes without a checkpoint. Read-only.
    """
    out = Output(as_json)
    with open_saver(path, readonly=True) as saver:
        if thread_ids:
            known = {t.thread_id for t in saver.threads()}
            missing = [t for t in dict.fromkeys(thread_ids) if t not in known]
            if missing:
                raise CliError(
                    f"no such thread(s) in {path}: {', '.join(map(repr, missing))}; "
                    "`deltalog threads PATH` lists them"
                )
        report: VerifyReport = saver.verify(list(thread_ids) or None, deep=deep)
    if as_json:
        out.json(report.to_dict())
    else:
        errors = sum(p.severity == "error" for p in report.problems)
        warnings = len(report.problems) - errors
        out.console.print(
            f"{'[green]ok[/green]' if report.ok else '[red]FAILED[/red]'}: {report.threads:,} "
            f"threads, {report.checkpoints:,} checkpoints, {report.records:,} records; "
            f"{errors} errors, {warnings} warnings"
        )
        if report.problems:
            table = Table(box=None)
            for col in ("severity", "kind", "thread", "namespace", "checkpoint", "detail"):
                table.add_column(col, overflow="fold")
            for p in report.problems:
                table.add_row(
                    p.severity,
                    p.kind,
                    escape(p.thread_id or ""),
                    escape(p.checkpoint_ns or ""),
                    p.checkpoint_id or "",
                    escape(p.detail),
                )
            out.console.print(table)
    if not report.ok:
        errors = sum(p.severity == "error" for p in report.problems)
        raise CliError(f"verify found {errors} error(s) in {path}; see the report above")


# -- prune ------------------------------------------------------------------------------------------


def _prune_note(report: RemovalReport, hidden: int, no_seed: list[str]) -> str | None:
    """Why a prune kept checkpoints (hidden) instead of freeing them, and the fix; or None.

    ``hidden``: checkpoints of the pruned threads hidden now (by this prune or
    an earlier one); ``no_seed``: threads whose hidden chain reaches their root.
    """
    if report.seeds or not (report.hidden or (hidden and not report.checkpoints)):
        return None
    why = (
        f"thread(s) {', '.join(map(repr, no_seed[:3]))}{' …' if len(no_seed) > 3 else ''} have "
        "no delta seed yet, so their kept state is rebuilt by replaying every write from the "
        "first checkpoint"
        if no_seed
        else "the kept checkpoints' delta channels are rebuilt by replaying writes back to "
        "their last seed"
    )
    freed = "nothing was freed" if not report.checkpoints else "less was freed"
    return (
        f"{freed}: {max(hidden, report.hidden):,} checkpoint(s) stay, hidden, because {why}. "
        "Re-seed to free them: run the same prune with --graph MODULE:ATTR (your graph, e.g. "
        "myapp.agent:graph); its reducers write a fresh seed into each kept checkpoint and "
        "the chain goes"
    )


def _print_removal(out: Output, report: RemovalReport, verb: str, note: str | None = None) -> None:
    if out.as_json:
        out.json({**report.to_dict(), **({"note": note} if note else {})})
        return
    would = "would remove" if report.dry_run else verb
    out.console.print(
        f"{report.threads} thread(s): {would} {report.checkpoints:,} checkpoints, "
        f"{report.writes:,} writes, {report.blobs:,} values ({human_bytes(report.bytes)})"
        + (f"; {report.hidden:,} kept hidden for delta chains" if report.hidden else "")
        + (f"; {report.seeds:,} seeds written" if report.seeds else "")
        + (" [dim](dry run: nothing written)[/dim]" if report.dry_run else "")
    )
    if note:
        out.console.print(f"[yellow]note:[/yellow] {escape(note)}", soft_wrap=True)


@click.command(
    "prune",
    short_help="Remove old checkpoints; kept states stay exact.",
    context_settings=CONTEXT_SETTINGS,
    epilog=_epilog(
        "deltalog prune chat.lmdb thread-1 --dry-run",
        "deltalog prune chat.lmdb thread-1 thread-2 --keep-last 5",
        "deltalog prune chat.lmdb --all --older-than 30d --graph myapp.agent:graph",
    ),
)
@store_path()
@click.argument("thread_ids", metavar="THREAD...", nargs=-1)
@click.option("--all", "all_threads", is_flag=True, help="Prune every thread of the store.")
@click.option(
    "--keep-latest",
    "keep_latest",
    is_flag=True,
    help="Keep only the latest checkpoint of each namespace (the default).",
)
@click.option(
    "--keep-last",
    type=click.IntRange(min=1),
    metavar="N",
    help="Keep the newest N checkpoints of each namespace.",
)
@age_option
@click.option("--dry-run", is_flag=True, help="Report what would be removed; change nothing.")
@graph_option
@json_option
def prune_cmd(
    path: Path,
    thread_ids: tuple[str, ...],
    all_threads: bool,
    keep_latest: bool,
    keep_last: int | None,
    older_than: Any,
    dry_run: bool,
    graph_spec: str | None,
    as_json: bool,
) -> None:
    """Remove old checkpoints of threads without changing any kept state.

    Delta channels stay exact: a kept checkpoint whose delta channels replay
    older writes keeps the minimal chain back to their seed (hidden from
    history), or, with --graph, gets a fresh seed so the chain can go.
    Combine --keep-last and --older-than to keep the union. LMDB reuses the
    freed pages; `deltalog compact` returns them to the OS. When a chain has
    to stay (no seed yet), the report says so and how to re-seed.
    """
    out = Output(as_json)
    if keep_latest and (keep_last is not None or older_than is not None):
        raise click.UsageError("--keep-latest cannot be combined with --keep-last/--older-than")
    if bool(thread_ids) == all_threads:
        raise click.UsageError("name the threads to prune, or pass --all (not both)")
    graph = load_graph(graph_spec) if graph_spec else None
    # With --graph, seeds are values read and written back: refuse a type the allowlist blocks.
    from deltalog.engine.cli_serde import cli_serde

    with open_saver(path, create=False, serde=cli_serde(refuse_blocked=graph is not None)) as saver:
        tids = [t.thread_id for t in saver.threads()] if all_threads else list(thread_ids)
        report = saver.prune(
            tids,
            strategy="keep_latest",
            keep_last=keep_last,
            older_than=older_than,
            reducers=graph,
            dry_run=dry_run,
        )
        hidden, no_seed = (0, []) if dry_run else _hidden_chains(saver, tids)
    _print_removal(out, report, "removed", _prune_note(report, hidden, no_seed))


def _hidden_chains(saver: DeltaLogSaver, thread_ids: list[str]) -> tuple[int, list[str]]:
    """Hidden checkpoints of the threads, and the threads whose hidden chain reaches
    their first checkpoint (no seed to stop at)."""
    hidden, no_seed = 0, []
    for tid in thread_ids:
        refs = saver.checkpoint_refs(tid)
        hidden += sum(h for _, _, _, h in refs)
        if any(h and parent is None for _, _, parent, h in refs):
            no_seed.append(tid)
    return hidden, no_seed


# -- copy / delete ------------------------------------------------------------------------------


@click.command(
    "copy",
    short_help="Copy a thread to a new thread id.",
    context_settings=CONTEXT_SETTINGS,
    epilog=_epilog(
        "deltalog copy chat.lmdb thread-1 thread-1-experiment",
        "deltalog copy chat.lmdb thread-1 thread-2 --json",
    ),
)
@store_path()
@click.argument("source", metavar="SRC")
@click.argument("target", metavar="DST")
@json_option
def copy_cmd(path: Path, source: str, target: str, as_json: bool) -> None:
    """Copy thread SRC to the new thread DST: every namespace, checkpoint, write and value.

    One transaction; ids, parents and metadata are kept, so DST has SRC's
    history and continues independently. DST must not exist yet.
    """
    out = Output(as_json)
    with open_saver(path, create=False) as saver:
        report = saver.copy_thread(source, target)
    if not report.found:
        raise CliError(f"thread {source!r} has no checkpoints; nothing copied")
    if as_json:
        out.json(report.to_dict())
    else:
        out.console.print(
            f"copied {escape(source)!r} → {escape(target)!r}: {report.checkpoints:,} checkpoints, "
            f"{report.writes:,} writes, {report.blobs:,} values"
        )


@click.command(
    "delete",
    short_help="Delete threads and everything they hold.",
    context_settings=CONTEXT_SETTINGS,
    epilog=_epilog(
        "deltalog delete chat.lmdb thread-1",
        "deltalog delete chat.lmdb thread-1 thread-2 --dry-run --json",
    ),
)
@store_path()
@click.argument("thread_ids", metavar="THREAD...", nargs=-1, required=True)
@click.option("--dry-run", is_flag=True, help="Report what would be deleted; change nothing.")
@json_option
def delete_cmd(path: Path, thread_ids: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Delete threads: every checkpoint, write and value, each thread in one transaction.

    Fails (deleting nothing) if a named thread does not exist.
    """
    out = Output(as_json)
    with open_saver(path, create=False) as saver:
        found = {t.thread_id: t for t in saver.threads() if t.thread_id in set(thread_ids)}
        missing = [t for t in thread_ids if t not in found]
        if missing:
            raise CliError(f"no such thread(s): {', '.join(map(repr, missing))}; nothing deleted")
        if not dry_run:
            for thread_id in dict.fromkeys(thread_ids):
                saver.delete_thread(thread_id)
    rows: list[dict[str, Any]] = [
        {
            "thread_id": t.thread_id,
            "checkpoints": t.checkpoints,
            "writes": t.writes,
            "bytes": t.bytes,
        }
        for t in found.values()
    ]
    if as_json:
        out.json({"dry_run": dry_run, "deleted": rows})
        return
    verb = "would delete" if dry_run else "deleted"
    for r in rows:
        out.console.print(
            f"{verb} {escape(r['thread_id'])!r}: {r['checkpoints']:,} checkpoints, "
            f"{r['writes']:,} writes, {human_bytes(r['bytes'])}"
        )


# -- compact / backup ------------------------------------------------------------------------------


@click.command(
    "compact",
    short_help="Write a compacted copy of the store.",
    context_settings=CONTEXT_SETTINGS,
    epilog=_epilog("deltalog compact chat.lmdb chat-compact.lmdb"),
)
@store_path()
@click.argument("dest", metavar="DEST", type=click.Path(file_okay=False, path_type=Path))
@json_option
def compact_cmd(path: Path, dest: Path, as_json: bool) -> None:
    """Write a compacted copy of the store to DEST (a new folder).

    LMDB reuses freed pages but never shrinks its file; the copy holds only
    live pages, rebuilt full (a store of many threads shrinks by about a
    third). Safe while writers run. To compact in place, stop every process
    using the store, then swap the folders.
    """
    out = Output(as_json)
    with open_saver(path, readonly=True) as saver:
        report = saver.compact(dest)
    if as_json:
        out.json(report.to_dict())
    else:
        out.console.print(
            f"compacted {path} ({human_bytes(report.bytes_before)}) → {dest} "
            f"({human_bytes(report.bytes_after)})"
        )


@click.command(
    "backup",
    short_help="Copy the store consistently while it is in use.",
    context_settings=CONTEXT_SETTINGS,
    epilog=_epilog(
        "deltalog backup chat.lmdb /backups/chat-$(date +%F).lmdb",
        "deltalog backup chat.lmdb /backups/chat.lmdb --compact --json",
        "deltalog backup chat.lmdb - | zstd > chat-data.mdb.zst",
    ),
)
@store_path()
@click.argument("dest", metavar="DEST", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--compact",
    is_flag=True,
    help="Write a compacted copy, as `deltalog compact` does (to stdout: free pages left out).",
)
@json_option
def backup_cmd(path: Path, dest: Path, compact: bool, as_json: bool) -> None:
    """Copy the store to DEST (a new folder) consistently while it is in use.

    The copy is one read snapshot: every checkpoint committed before it
    started is in it, none is half in it. Writers are not paused. Open the
    copy like any store (it is one). DEST "-" streams the store's data file
    (data.mdb) to stdout instead: restore it with
    `mkdir new.lmdb && cp FILE new.lmdb/data.mdb`.
    """
    out = Output(as_json)
    if str(dest) == "-":
        if as_json:
            raise click.UsageError("backup PATH - streams the data file; it has no --json report")
        _backup_to_stdout(path, compact)
        return
    with open_saver(path, readonly=True) as saver:
        report = saver.backup(dest, compact=compact)
    if as_json:
        out.json(report.to_dict())
    else:
        out.console.print(f"backed up {path} → {dest} ({human_bytes(report.bytes_after)})")


def _backup_to_stdout(path: Path, compact: bool) -> None:
    """``backup PATH -``: LMDB's hot copy of data.mdb straight into stdout."""
    stdout = sys.stdout.buffer
    if stdout.isatty():
        raise click.UsageError(
            "backup PATH - writes the binary data file to stdout; redirect it: "
            "deltalog backup PATH - > data.mdb"
        )
    with open_store(path) as store:
        try:
            fd = stdout.fileno()
        except (AttributeError, OSError, ValueError):
            fd = -1
        if fd >= 0:
            stdout.flush()
            store.copy_to_fd(fd, compact=compact)
            return
        # stdout is not a file (an embedding program's buffer): copy, then stream.
        with tempfile.TemporaryDirectory() as tmp:
            store.copy_to(Path(tmp) / "copy", compact=compact)
            with open(Path(tmp) / "copy" / "data.mdb", "rb") as data:
                shutil.copyfileobj(data, stdout)
        stdout.flush()


@click.command(
    "readers",
    short_help="List LMDB reader slots; clear those of dead processes.",
    context_settings=CONTEXT_SETTINGS,
    epilog=_epilog(
        "deltalog readers chat.lmdb",
        "deltalog readers chat.lmdb --clear",
        "deltalog readers chat.lmdb --json",
    ),
)
@store_path()
@click.option(
    "--clear", is_flag=True, help="Free the slots of processes that died (mdb_reader_check)."
)
@json_option
def readers_cmd(path: Path, clear: bool, as_json: bool) -> None:
    """List the store's LMDB reader slots: process, thread and the snapshot each pins.

    A read transaction pins the snapshot it started on, so LMDB cannot reuse
    pages freed after it: a long-lived reader makes the file grow. A slot
    whose process died is stale: every open of the store frees those (this
    command says how many it freed), --clear checks again before listing.
    The same table as `python -m lmdb readers`.
    """
    out = Output(as_json)
    with open_store(path) as store:
        cleared = int(getattr(store, "stale_readers_cleared", 0))
        if clear:
            cleared += store.clear_stale_readers()
        table = store.readers()
    me = os.getpid()
    rows = [
        {
            "pid": pid,
            "thread": thread,
            "txnid": None if txnid == "-" else int(txnid),
            "behind": None if txnid == "-" else table["last_txnid"] - int(txnid),
            "alive": _alive(pid),
            "this_command": pid == me,
        }
        for pid, thread, txnid in table["readers"]
    ]
    if as_json:
        out.json({"last_txnid": table["last_txnid"], "cleared": cleared, "readers": rows})
        return
    if cleared:
        out.console.print(f"cleared {cleared} stale reader slot(s) of processes that died")
    others = [r for r in rows if not r["this_command"]]
    if not others:
        out.console.print(f"no other readers of {path} (last transaction {table['last_txnid']})")
        return
    view = Table(title=f"readers of {path} (last transaction {table['last_txnid']})")
    for col in ("pid", "thread", "snapshot", "behind", "process"):
        view.add_column(col, no_wrap=True, justify="right" if col != "process" else "left")
    for r in others:
        view.add_row(
            str(r["pid"]),
            r["thread"],
            "-" if r["txnid"] is None else str(r["txnid"]),
            "-" if r["behind"] is None else f"{r['behind']:,}",
            "alive" if r["alive"] else "gone (stale; --clear frees it)",
        )
    out.table(view)


def _alive(pid: int) -> bool:
    """Whether a process with this id exists (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- export / import ------------------------------------------------------------------------------


@click.command(
    "export",
    short_help="Write threads as a portable JSON Lines stream.",
    context_settings=CONTEXT_SETTINGS,
    epilog=_epilog(
        "deltalog export chat.lmdb > all.jsonl",
        "deltalog export chat.lmdb thread-1 thread-2 -o two.jsonl",
        "deltalog export chat.lmdb | gzip > chat.jsonl.gz",
    ),
)
@store_path()
@click.argument("thread_ids", metavar="[THREAD]...", nargs=-1)
@click.option(
    "-o",
    "--output",
    type=OwnerOnlyFile("w", encoding="utf-8", lazy=True),
    default="-",
    help="Write here instead of stdout (a new file is created 0600).",
)
@click.option(
    "--compress",
    is_flag=True,
    help="zstd-compress the stream (`deltalog import` reads it as it is; `zstd -d` unpacks it).",
)
@click.option(
    "--items/--no-items",
    default=None,
    help="Also write the memory store's items (default: when no THREAD is named).",
)
def export_cmd(
    path: Path, thread_ids: tuple[str, ...], output: IO[str], compress: bool, items: bool | None
) -> None:
    """Write threads (all by default) as a portable stream: JSON Lines, format version 2.

    Every checkpoint, value and write, exactly as the saver's serializer
    stored it, so `deltalog import` rebuilds identical threads in any store;
    then the memory store's live items with their vectors.
    The format is documented in docs/cli.md. JSON Lines with base64 values
    are several times the stored size: stderr says by how much at the end,
    and --compress writes the stream zstd-compressed.
    """
    out = Output()
    with open_saver(path, readonly=True) as saver:
        summaries = {t.thread_id: t for t in saver.threads()}
        missing = [t for t in thread_ids if t not in summaries]
        if missing:
            raise CliError(f"no such thread(s): {', '.join(map(repr, missing))}")
        chosen = list(thread_ids) or list(summaries)
        stored = sum(summaries[t].bytes for t in chosen)
        with contextlib.ExitStack() as stack:
            sink = _ExportSink(stack, output, compress)
            with progress_bar(out) as bar:
                # Checkpoint records are known in advance; the other records vary.
                task = bar.add_task(
                    "exporting checkpoints", total=sum(summaries[t].checkpoints for t in chosen)
                )
                wanted = items if items is not None else not thread_ids
                for record in saver.export_records(chosen, items=wanted):
                    sink.write(encode_record(record) + "\n", record["kind"])
                    if record["kind"] == "checkpoint":
                        bar.update(
                            task,
                            advance=1,
                            description=f"exporting checkpoints ({human_bytes(sink.plain)})",
                        )
    kinds = ", ".join(f"{n:,} {k}" for k, n in sink.counts.items() if k not in ("header", "end"))
    ratio = f" ({sink.plain / stored:.1f}× the {human_bytes(stored)} stored)" if stored else ""
    packed = (
        f"; zstd {human_bytes(sink.packed)} ({sink.packed / sink.plain:.0%} of that)"
        if compress and sink.plain
        else "; --compress shrinks it"
        if not compress
        else ""
    )
    out.err.print(
        f"exported {sum(sink.counts.values()):,} records ({kinds}): "
        f"{human_bytes(sink.plain)} of JSON Lines{ratio}{packed}",
        soft_wrap=True,
        highlight=False,
    )


class _ExportSink:
    """Where export lines go (text, or a zstd stream), counting records and bytes."""

    def __init__(self, stack: contextlib.ExitStack, output: IO[str], compress: bool) -> None:
        self.counts: Counter[str] = Counter()
        self.plain = 0
        self._text: IO[str] | None = None if compress else output
        self._zstd: Any = None
        self._raw: Any = None
        if compress:
            import zstandard
            from deltalog.engine.access import open_owner_only

            name = getattr(output, "name", "-")
            if name in ("-", "<stdout>"):
                self._raw = sys.stdout.buffer
            else:  # 0600 like a plain export (issue 15.10)
                self._raw = stack.enter_context(os.fdopen(open_owner_only(name), "wb"))
            # With a checksum, a damaged file fails to decompress instead of
            # importing other bytes.
            compressor = zstandard.ZstdCompressor(level=3, write_checksum=True)
            self._zstd = stack.enter_context(compressor.stream_writer(self._raw, closefd=False))
        stack.callback(self._flush)

    @property
    def packed(self) -> int:
        """Compressed bytes written (0 without --compress)."""
        return int(self._zstd.tell()) if self._zstd is not None else 0

    def write(self, line: str, kind: str) -> None:
        data = line.encode("utf-8")
        self.plain += len(data)
        self.counts[kind] += 1
        if self._zstd is not None:
            self._zstd.write(data)
        elif self._text is not None:
            self._text.write(line)

    def _flush(self) -> None:
        if self._zstd is not None:
            self._zstd.flush(zstandard_frame_end())
            self._raw.flush()
        elif self._text is not None:
            self._text.flush()


def zstandard_frame_end() -> int:
    """``zstandard.FLUSH_FRAME``: end the frame so the stream is complete."""
    import zstandard

    return int(zstandard.FLUSH_FRAME)


@click.command(
    "import",
    short_help="Import an export stream into a store.",
    context_settings=CONTEXT_SETTINGS,
    epilog=_epilog(
        "deltalog import new.lmdb < all.jsonl",
        "deltalog import new.lmdb all.jsonl --json",
        "gunzip -c chat.jsonl.gz | deltalog import new.lmdb",
    ),
)
@store_path(exists=False)
@click.argument("source", metavar="[FILE]", type=click.File("rb"), default="-")
@json_option
def import_cmd(path: Path, source: IO[bytes], as_json: bool) -> None:
    """Import a `deltalog export` stream (from FILE or stdin) into the store at PATH.

    One transaction: all of it or, on any error, nothing. The store is
    created if missing; a thread that already exists there is refused.
    """
    out = Output(as_json)
    if source.isatty():
        raise click.UsageError("pass FILE or pipe an export stream: deltalog import PATH < file")
    import zstandard

    stream = read_stream(source)
    try:
        try:
            records, numbers = read_lines(stream)
        except ImportRecordError:
            if stream is not source:
                # Lines come out before the frame's checksum is checked: a damaged
                # compressed file shows first as a bad line. Read on to tell.
                for _ in stream:
                    pass
            raise
    except zstandard.ZstdError as exc:
        # A --compress export whose bytes changed: its checksum (or the frame) says so.
        raise CliError(
            f"the compressed stream is damaged ({one_line(exc)}); nothing was imported: "
            "export again"
        ) from None
    from deltalog.engine.cli_serde import cli_serde
    from deltalog.engine.import_check import check_import

    serde = cli_serde()
    try:
        # Validate before the store is opened (or created): a bad stream leaves PATH alone.
        check_import(records, serde)
        with open_saver(path, serde=serde) as saver:
            counts = saver.import_records(records)
    except ImportRecordError as exc:
        # The library counts records; blank lines were skipped here (the line
        # after the last record: a stream cut short).
        if 0 < exc.line <= len(numbers):
            line = numbers[exc.line - 1]
        else:
            line = numbers[-1] + 1 if numbers and exc.line == len(numbers) + 1 else exc.line
        raise ImportRecordError(line, exc.reason) from None
    if as_json:
        out.json(counts)
    else:
        out.console.print(
            "imported " + ", ".join(f"{n:,} {kind}" for kind, n in counts.items()) + f" into {path}"
        )
