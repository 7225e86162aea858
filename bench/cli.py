"""``deltalog bench`` / ``python -m deltalog.bench``: storage versus latency against other savers.

:data:`bench_command` is a click command that the ``deltalog`` CLI group can
mount as its ``bench`` subcommand; :func:`main` runs it stand-alone and
returns the exit code (0: every saver ran and ended with the right state;
1: a saver raised or ended with a wrong state; 2: bad options).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from pathlib import Path

import click
from deltalog.bench.peers import DEFAULT_PEERS, REGISTRY
from deltalog.bench.pgserver import (
    PostgresUnavailable,
    find_pg_bindir,
    local_postgres,
    postgres_reachable,
)
from deltalog.bench.report import render, write_json, write_markdown, write_plots
from deltalog.bench.runner import BenchResult, Isolation, RunOptions, run_bench
from deltalog.bench.scenarios import (
    BenchPlan,
    all_scenario_names,
    full_plan,
    quick_plan,
    select_plan,
)
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["bench_command", "interrupted", "main"]


class _RichProgress:
    """Adapts a rich :class:`Progress` to the runner's ``ProgressSink``."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task: TaskID | None = None

    def start(self, description: str, total: int) -> None:
        if self._task is not None:
            self._progress.update(self._task, completed=self._progress.tasks[-1].total)
        self._task = self._progress.add_task(description, total=total)

    def advance(self, steps: int = 1) -> None:
        if self._task is not None:
            self._progress.advance(self._task, steps)

    def log(self, message: str) -> None:
        self._progress.console.print(message)


class _LineProgress:
    """Progress as plain lines, for logs and pipes: one line per scenario when it ends.

    The runner's phases are named ``"<scenario>: <phase>"``; a scenario's line
    lists its phases with their step counts and the time it took.
    """

    def __init__(self, console: Console) -> None:
        self._console = console
        self._scenario: str | None = None
        self._phases: list[str] = []
        self._started = 0.0

    def start(self, description: str, total: int) -> None:
        scenario, _, phase = description.partition(": ")
        if scenario != self._scenario:
            self.close()
            self._scenario, self._phases, self._started = scenario, [], time.perf_counter()
        self._phases.append(f"{phase or 'steps'} {total:,}")

    def advance(self, steps: int = 1) -> None:
        pass

    def log(self, message: str) -> None:
        self._console.print(message)

    def close(self) -> None:
        """Print the line of the scenario in progress, if any."""
        if self._scenario is not None:
            took = time.perf_counter() - self._started
            self._console.print(
                f"{self._scenario}: {', '.join(self._phases)} — done in {took:.1f} s",
                highlight=False,
            )
        self._scenario = None


def _describe_turns(plan: BenchPlan) -> str:
    return ", ".join(f"{c.name} {c.turns:,}" for c in plan.chat)


def _split(values: Sequence[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _parse_savers(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    names = tuple(_split([value]))
    unknown = [n for n in names if n not in REGISTRY]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown saver(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(REGISTRY)}"
        )
    return names


def _parse_threads(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        threads = tuple(int(x) for x in _split([value]))
    except ValueError:
        raise click.BadParameter(
            f"expected comma-separated ints like 1,4,16,64, got {value!r}"
        ) from None
    if not threads or any(t < 1 or t > 256 for t in threads):
        raise click.BadParameter(f"thread counts must be between 1 and 256, got {value!r}")
    return threads


@click.command(
    name="bench",
    short_help="Measure storage and latency against other LangGraph savers.",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=(
        "Examples:\n\n"
        "\b\n"
        "  deltalog bench --quick                       # < 5 min on 2 cores\n"
        "  deltalog bench --scenario chat-delta-sf100 --turns 10000\n"
        "  deltalog bench --savers deltalog,sqlite --pg postgresql://u@host/db\n"
        "  python -m deltalog.bench --quick --out docs/bench"
    ),
)
@click.option(
    "--quick",
    is_flag=True,
    help="Smaller sizes that finish in under 5 minutes on 2 cores (turns: "
    f"{_describe_turns(quick_plan())}).",
)
@click.option(
    "--turns",
    type=click.IntRange(1, 10_000),
    help="Turns of every chat scenario, replacing each scenario's own (full run: "
    f"{_describe_turns(full_plan())}).",
)
@click.option(
    "--scenario",
    "scenarios",
    multiple=True,
    help=f"Scenario(s) to run, repeatable or comma-separated: {', '.join(all_scenario_names())}; "
    "or memory-store alone (the long-term memory stores, deltalog.bench.store_bench).",
)
@click.option(
    "--savers",
    default=",".join(DEFAULT_PEERS),
    show_default=True,
    callback=_parse_savers,
    help=f"Savers to measure, comma-separated, from: {', '.join(REGISTRY)}.",
)
@click.option(
    "--subject",
    default="deltalog",
    show_default=True,
    help="Saver whose ratios to each peer and performance targets are reported.",
)
@click.option(
    "--pg",
    "pg_dsn",
    metavar="DSN",
    help="PostgreSQL server for PostgresSaver. Without it a throwaway local server is "
    "started when the postgresql binaries are installed.",
)
@click.option("--no-pg", is_flag=True, help="Do not measure PostgresSaver.")
@click.option(
    "--threads",
    callback=_parse_threads,
    help="Concurrency levels of the throughput scenario, e.g. 1,4,16,64.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-out"),
    show_default=True,
    help="Directory for results.json and the PNG plots.",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Where the stores are created (system temp by default; use a real disk, not tmpfs).",
)
@click.option(
    "--isolation",
    type=click.Choice(["process", "inprocess"]),
    default="process",
    show_default=True,
    help="One worker process per saver (measures peak RSS) or all in this process.",
)
@click.option(
    "--from-json",
    "from_json",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Run nothing: re-render the tables, results.md and plots of a results.json into --out.",
)
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option(
    "--profile",
    is_flag=True,
    help="Run nothing else: time get_state, get_state_history(limit=20) and invoke on the "
    "sf=100 chat (--turns, default 1000) for --subject and InMemorySaver, split into the "
    "saver's time and LangGraph's own, with a cProfile breakdown (deltalog.bench.profile); "
    "writes profile.json to --out.",
)
@click.option(
    "--no-progress",
    is_flag=True,
    help="A line per scenario instead of progress bars (the default when stdout is not a "
    "terminal).",
)
@click.pass_context
def bench_command(
    ctx: click.Context,
    quick: bool,
    turns: int | None,
    scenarios: tuple[str, ...],
    savers: tuple[str, ...],
    subject: str,
    pg_dsn: str | None,
    no_pg: bool,
    threads: tuple[int, ...] | None,
    out: Path,
    workdir: Path | None,
    isolation: Isolation,
    from_json: Path | None,
    no_plots: bool,
    no_progress: bool,
    profile: bool,
) -> int:
    """Measure storage versus latency of DeltaLogSaver and other LangGraph savers.

    Every saver runs the same workloads in the same run, interleaved turn by
    turn. Prints tables with ratios to each peer and writes results.json and
    PNG plots (and results.md, the tables as Markdown) to --out. Exits 1 if any
    saver raises or ends with a wrong state.
    """
    if _split(scenarios) == ["memory-store"]:
        from deltalog.bench import store_bench

        pg = [] if no_pg or "postgres" not in savers else ["--postgres", pg_dsn or "local"]
        if pg == ["--postgres", "local"] and find_pg_bindir() is None:
            pg = []
        return store_bench.main((["--quick"] if quick else []) + pg)
    if profile:
        from deltalog.bench import profile as profile_module

        out.mkdir(parents=True, exist_ok=True)
        savers_arg = ",".join(dict.fromkeys((subject, "memory")))
        json_path = str(out / "profile.json")
        return profile_module.main(
            [
                "--turns",
                str(turns or 1000),
                "--savers",
                savers_arg,
                "--cprofile",
                "--json",
                json_path,
            ]
        )
    console = Console()
    if not console.is_terminal:
        # Logs and CI: rich would wrap the tables at 80 columns.
        console = Console(width=160)
    try:
        # --quick leaves out peers no target of a scenario compares with,
        # never the subject nor savers the user named with --savers.
        named = ctx.get_parameter_source("savers") is not click.core.ParameterSource.DEFAULT
        plan = select_plan(
            quick_plan() if quick else full_plan(),
            scenarios=_split(scenarios) or None,
            turns=turns,
            threads=threads,
            keep_peers=(subject, *(savers if named else ())),
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    if from_json is not None:
        result = BenchResult.from_json(json.loads(from_json.read_text()))
        return _report(ctx, console, result, out, subject, no_plots)
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        dsn = None if no_pg or "postgres" not in savers else pg_dsn
        if dsn is not None:
            reason = postgres_reachable(dsn)
            if reason is not None:
                raise click.ClickException(f"--pg: {reason}")
        elif "postgres" in savers and not no_pg and find_pg_bindir() is not None:
            with console.status("starting a throwaway PostgreSQL server…"):
                try:
                    dsn = stack.enter_context(local_postgres())
                except PostgresUnavailable as exc:
                    console.print(f"[yellow]PostgreSQL not started: {exc}[/yellow]")
        options = RunOptions(peers=savers, pg_dsn=dsn, workdir=workdir, isolation=isolation)
        if no_progress or not console.is_terminal:
            lines = _LineProgress(console)
            result = run_bench(plan, options, lines)
            lines.close()
        else:
            progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
            )
            with progress:
                result = run_bench(plan, options, _RichProgress(progress))
    result.meta["quick"] = quick
    result.meta["wall_seconds"] = round(time.perf_counter() - started, 1)
    result.meta["options"] = {
        k: str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v
        for k, v in ctx.params.items()
    }
    return _report(ctx, console, result, out, subject, no_plots)


def _report(
    ctx: click.Context,
    console: Console,
    result: BenchResult,
    out: Path,
    subject: str,
    no_plots: bool,
) -> int:
    json_path = write_json(result, out / "results.json", subject)
    # Render everything else from the file just written (its floats are
    # rounded), so a later --from-json re-render reproduces it exactly.
    result = BenchResult.from_json(json.loads(json_path.read_text()))
    render(result, console, subject)
    written = [json_path, write_markdown(result, out / "results.md", subject)]
    if not no_plots:
        written += write_plots(result, out, subject)
    console.print(
        f"wrote {len(written)} files to {out}/ (run took {result.meta.get('wall_seconds')} s)"
    )
    if not result.ok:
        ctx.exit(1)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark command stand-alone.

    Args:
        argv: Arguments without the program name (``sys.argv[1:]`` by default).

    Returns:
        The exit code: 0 success, 1 a saver failed or ended with a wrong state,
        2 bad options.
    """
    try:
        rv = bench_command.main(args=argv, prog_name="deltalog bench", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except (click.Abort, KeyboardInterrupt) as exc:
        return interrupted(exc, "deltalog bench")
    return rv if isinstance(rv, int) else 0


def interrupted(exc: BaseException, prog: str) -> int:
    """One line on stderr for Ctrl-C (exit status 130, as shells report SIGINT) or an abort (1)."""
    if isinstance(exc, KeyboardInterrupt) or isinstance(exc.__cause__, KeyboardInterrupt):
        click.echo(f"{prog}: interrupted; nothing more was run", err=True)
        return 130
    click.echo("Aborted!", err=True)
    return 1
