"""The ``deltalog`` command (also ``python -m deltalog.engine``).

A thin click layer over :class:`~deltalog.engine.DeltaLogSaver` and
:mod:`deltalog.engine.migrate`: each command parses its arguments, calls
public library methods and prints the result (rich tables, or JSON with
``--json``). Library errors become one line on stderr and exit status 1.
docs/cli.md is the reference; ``deltalog COMMAND --help`` shows each
command's options and examples.

Commands: inspect (``threads``, ``history``, ``show``, ``diff``, ``stats``),
operate (``verify``, ``prune``, ``copy``, ``delete``, ``compact``,
``backup``, ``readers``, ``export``, ``import``), move (``migrate``), try (``demo``)
and measure (``bench``, from :mod:`deltalog.bench`).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import click
from deltalog.engine.cli_common import (
    AES_KEY_ENV,
    CONTEXT_SETTINGS,
    SERDE_ENV,
    TRUSTED_ENV,
    DeltaLogGroup,
    Output,
    human_bytes,
    json_option,
    open_saver,
    progress_bar,
    store_path,
)
from deltalog.engine.cli_inspect import (
    diff_cmd,
    history_cmd,
    print_messages,
    show_cmd,
    stats_cmd,
    threads_cmd,
)
from deltalog.engine.cli_ops import (
    backup_cmd,
    compact_cmd,
    copy_cmd,
    delete_cmd,
    export_cmd,
    import_cmd,
    prune_cmd,
    readers_cmd,
    verify_cmd,
)

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = ["cli", "main"]

# Fast start (issue 19): this module and the command modules it imports load
# neither LangGraph nor LangChain; each command that needs them imports them
# in its body, so `--help`, `--version`, `threads` and `stats` skip the ~1 s
# those imports cost. tests/test_cli_fast_start.py guards it.


class _Root(DeltaLogGroup):
    """The root group: commands in the order of docs/cli.md; ``bench`` loaded on demand."""

    #: name -> (module, attribute, short help shown by `deltalog --help` without importing it)
    lazy: ClassVar[dict[str, tuple[str, str, str]]] = {
        "memory": (
            "deltalog.engine.cli_memory",
            "memory_cmd",
            "Inspect and edit the long-term memory (BaseStore items) in a store.",
        ),
        "bench": (
            "deltalog.bench.cli",
            "bench_command",
            "Measure storage and latency against other LangGraph savers.",
        ),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.commands, *self.lazy]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, attr, _ = self.lazy[cmd_name]
            try:
                command = getattr(importlib.import_module(module), attr)
            except ImportError as exc:
                raise click.ClickException(
                    f"`deltalog {cmd_name}` needs the bench extras ({exc.name} is missing); "
                    "pip install 'deltalog[bench]'"
                ) from exc
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list; lazy commands not yet loaded show their stored short help."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is not None:
                if command.hidden:
                    continue
                rows.append((name, command.get_short_help_str(formatter.width - 6 - len(name))))
            else:
                rows.append((name, self.lazy[name][2]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=_Root,
    context_settings=CONTEXT_SETTINGS,
    epilog="Examples:\n\n\b\n"
    "  deltalog demo\n"
    "  deltalog threads deltalog-demo.lmdb\n"
    "  deltalog show deltalog-demo.lmdb demo\n"
    "  deltalog migrate deltalog-demo.lmdb --to postgresql://app@db/chat\n\n"
    "Every command takes --help. Reference: docs/cli.md",
)
@click.version_option(package_name="deltalog", prog_name="deltalog")
@click.option(
    "--traceback", is_flag=True, help="Show the full traceback of an error (for bug reports)."
)
@click.option(
    "--trusted",
    is_flag=True,
    envvar=TRUSTED_ENV,
    help="Read values with LangGraph's default serde, which constructs any type a record "
    "names: UNSAFE on files from others (runs their code). Default: strict allowlist.",
)
@click.option(
    "--serde",
    "serde_spec",
    metavar="MODULE:ATTR",
    envvar=SERDE_ENV,
    help="Your serializer (or a function returning one), used as it is, "
    "e.g. myapp.serde:serde. LANGGRAPH_AES_KEY alone is enough for EncryptedSerializer.",
)
@click.pass_context
def cli(ctx: click.Context, traceback: bool, trusted: bool, serde_spec: str | None) -> None:
    """Inspect, operate and migrate deltalog stores of LangGraph checkpoints.

    PATH is always a store folder (what DeltaLogSaver.from_path opened).
    Values are read under LangGraph's strict msgpack allowlist, so a crafted
    store or export cannot run code; see --trusted.
    """
    ctx.meta["deltalog.traceback"] = traceback
    ctx.meta["deltalog.trusted"] = trusted
    ctx.meta["deltalog.serde"] = serde_spec


# -- demo -------------------------------------------------------------------------------------


@click.command(
    "demo",
    short_help="Run a DeltaChannel chat demo on a local store.",
    context_settings=CONTEXT_SETTINGS,
    epilog="Examples:\n\n\b\n"
    "  deltalog demo\n"
    "  deltalog demo /tmp/chat.lmdb --turns 1000\n"
    "  deltalog demo --turns 20 --snapshot-every 10 --json",
)
@store_path(exists=False, default="deltalog-demo.lmdb")
@click.option(
    "--turns", type=click.IntRange(1, 1_000_000), default=50, show_default=True, help="Chat turns."
)
@click.option("--thread", "thread_id", default="demo", show_default=True, help="Thread id.")
@click.option(
    "--snapshot-every",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Updates of the messages channel per _DeltaSnapshot seed.",
)
@click.option(
    "--show",
    "show_last",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Last turns to print.",
)
@json_option
def demo_cmd(
    path: Path,
    turns: int,
    thread_id: str,
    snapshot_every: int,
    show_last: int,
    as_json: bool,
) -> None:
    """Run a LangGraph chat with a DeltaChannel on a local store; print its tail and bytes per turn.

    A real compiled StateGraph whose messages field is a DeltaChannel, a
    deterministic fake model (no network, no API key), checkpointed by
    DeltaLogSaver in PATH (default ./deltalog-demo.lmdb). Running it again
    continues the conversation. Then try `deltalog history PATH demo`.
    """
    from deltalog.engine.demo import run_demo

    out = Output(as_json)
    with progress_bar(out, transient=True) as bar:
        task = bar.add_task("chatting", total=turns)
        result = run_demo(
            path,
            turns=turns,
            thread_id=thread_id,
            snapshot_every=snapshot_every,
            on_turn=lambda done: bar.update(task, completed=done),
        )
    if as_json:
        out.json(result.to_dict(last_messages=2 * show_last))
        return
    last = result.first_turn + turns - 1
    out.console.print(
        f"[bold]{turns} turns[/bold] (turns {result.first_turn}–{last}) on thread "
        f"{thread_id!r} in {path}: {len(result.messages)} messages, {result.checkpoints:,} "
        f"checkpoints, {human_bytes(result.thread_bytes)} stored"
    )
    if show_last:
        out.console.print(f"\n[bold]last {min(show_last, last)} turn(s)[/bold]")
        print_messages(out, result.messages[-2 * show_last :])
    out.console.print("\n[bold]bytes per turn[/bold] (stored growth vs. size of the whole state)")
    for s in result.samples:
        out.console.print(
            f"  turn {s.turn:>6,}: {s.bytes_per_turn:>+9,.0f} B/turn   thread "
            f"{human_bytes(s.thread_bytes):>10}   state {human_bytes(s.state_bytes):>10}"
        )
    out.console.print(
        f"\nnext: deltalog history {path} {thread_id}  ·  deltalog show {path} {thread_id}"
    )


# -- migrate -----------------------------------------------------------------------------------------


@click.command(
    "migrate",
    short_help="Copy threads to or from SQLite / PostgreSQL.",
    context_settings=CONTEXT_SETTINGS,
    epilog="Examples:\n\n\b\n"
    "  deltalog migrate chat.lmdb --to postgresql://app@db.internal/chat\n"
    "  deltalog migrate chat.lmdb --to sqlite:chat.sqlite thread-1 thread-2\n"
    "  deltalog migrate chat.lmdb --from sqlite:old.sqlite --json",
)
@store_path(exists=False)
@click.argument("thread_ids", metavar="[THREAD]...", nargs=-1)
@click.option("--to", "to_uri", metavar="URI", help="Copy PATH's threads into this saver.")
@click.option("--from", "from_uri", metavar="URI", help="Copy this saver's threads into PATH.")
@click.option("--no-verify", is_flag=True, help="Skip listing the target afterwards.")
@click.option(
    "--items/--no-items",
    default=None,
    help="Also copy the memory store's items (default: when no THREAD is named).",
)
@json_option
def migrate_cmd(
    path: Path,
    thread_ids: tuple[str, ...],
    to_uri: str | None,
    from_uri: str | None,
    no_verify: bool,
    items: bool | None,
    as_json: bool,
) -> None:
    """Copy threads (all by default) between PATH and another LangGraph saver.

    URI is sqlite:FILE (SqliteSaver) or postgresql://user:pass@host/db
    (PostgresSaver; tables are created if missing). Every checkpoint and
    write goes through the target's own put/put_writes, oldest first, so the
    target reads the threads natively and graphs continue on it — delta
    channels included. Resumable: run it again after an interruption and
    checkpoints already copied are skipped. Verifies at the end that the
    target lists every checkpoint; exit status 1 if not. Then the memory
    store's items (SqliteStore / PostgresStore tables in the same database):
    namespace, key, value and remaining TTL; the target embeds nothing.
    """
    from deltalog.engine.migrate import (
        MigrationError,
        describe_uri,
        open_saver_uri,
        plan_migration,
        run_migration,
    )

    out = Output(as_json)
    if (to_uri is None) == (from_uri is None):
        raise click.UsageError("pass exactly one of --to URI or --from URI")
    if to_uri is not None and not path.is_dir():
        raise click.BadParameter(f"no store at {path}", param_hint="PATH")
    uri = to_uri or from_uri or ""
    from deltalog.engine.cli_serde import cli_serde, make_serde

    # The source is read strictly and a blocked type refused: the target would store plain data.
    reading = cli_serde(refuse_blocked=True)
    # With LANGGRAPH_AES_KEY a --to target is written encrypted, as a --from one is
    # (open_saver's serde): its saver reads it with EncryptedSerializer around its default.
    writing = make_serde(trusted=True) if to_uri and os.environ.get(AES_KEY_ENV) else None
    with (
        open_saver(path, readonly=to_uri is not None, serde=reading if to_uri else None) as store,
        open_saver_uri(uri, serde=writing if to_uri else reading) as other,
    ):
        source: BaseCheckpointSaver[Any] = store if to_uri else other
        target: BaseCheckpointSaver[Any] = other if to_uri else store
        plan = plan_migration(source, target, list(thread_ids) or None)
        with progress_bar(out) as bar:
            task = bar.add_task("migrating checkpoints", total=plan.total)
            report = run_migration(
                plan, source, target, on_checkpoint=lambda: bar.advance(task), verify=not no_verify
            )
        copied = None
        if items if items is not None else not thread_ids:
            from deltalog.engine.memory import DeltaLogStore
            from deltalog.engine.migrate_items import copy_items, open_store_uri

            with open_store_uri(uri) as other_store:
                mine = DeltaLogStore.from_saver(store)
                copied = copy_items(
                    mine if to_uri else other_store, other_store if to_uri else mine
                )
    src = str(path) if to_uri else describe_uri(uri)
    dst = describe_uri(uri) if to_uri else str(path)
    if as_json:
        extra = {} if copied is None else {"items": copied.items, "items_skipped": copied.skipped}
        out.json({"source": src, "target": dst, **report.to_dict(), **extra})
    else:
        out.console.print(
            f"{src} → {dst}: {report.threads:,} threads, {report.checkpoints:,} checkpoints "
            f"and {report.writes:,} writes copied, {report.skipped:,} already there"
            + (f"; {report.hidden:,} were hidden in the source" if report.hidden else "")
            + (
                ""
                if copied is None
                else f"; {copied.items:,} memory items copied, {copied.skipped:,} already there"
            )
        )
        if not no_verify:
            out.console.print(
                "[green]verified[/green]: the target lists every checkpoint"
                if report.verified
                else f"[red]NOT verified[/red]: {len(report.missing)} missing, e.g. {report.missing[:3]}"
            )
    if not no_verify and not report.verified:
        raise MigrationError(f"{len(report.missing)} checkpoint(s) missing from the target")


for _command in (
    demo_cmd,
    threads_cmd,
    history_cmd,
    show_cmd,
    diff_cmd,
    stats_cmd,
    verify_cmd,
    prune_cmd,
    copy_cmd,
    delete_cmd,
    compact_cmd,
    backup_cmd,
    readers_cmd,
    export_cmd,
    import_cmd,
    migrate_cmd,
):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit status (0 ok, 1 error, 2 usage error).

    Args:
        argv: Arguments without the program name (``sys.argv[1:]`` by default).
    """
    try:
        # Without standalone mode, click returns a `ctx.exit(code)` status instead of exiting.
        status = cli.main(args=argv, prog_name="deltalog", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except (click.Abort, KeyboardInterrupt) as exc:
        # Ctrl-C: one line and exit status 130 (128 + SIGINT), as shells report it.
        if isinstance(exc, KeyboardInterrupt) or isinstance(exc.__cause__, KeyboardInterrupt):
            click.echo("deltalog: interrupted", err=True)
            return 130
        click.echo("Aborted!", err=True)
        return 1
    except BrokenPipeError:
        # The reader went away (`deltalog export … | head`): stop quietly, and
        # keep Python from complaining again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
