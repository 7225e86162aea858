"""Every CLI command, fed odd arguments, ends in exit 0, a one-line `Error:` with exit 1, or a usage error with exit 2 — never a traceback (issue 15.17)."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from deltalog.engine import DeltaLogSaver
from deltalog.engine.cli import cli

from tests.graphs import cfg, chat_graph, human

DELTALOG = Path(sys.executable).parent / "deltalog"
COMMANDS = sorted(cli.list_commands(click.Context(cli)))

# Values for any option that takes one: not a number, negative, zero, past 64 bits, empty, huge ages.
ODD_VALUES = ["abc", "-1", "0", "99999999999999999999", "", "99999999999d", "1e9w"]
# Places that cannot be created stay under the test's folder: "{file}/x" is below a regular file.
URIS = [
    "sqlite:{file}/x.db",
    "sqlite:",
    "sqlite:{root}",  # a folder, not a file
    "bogus://x",
    "deltalog:{file}/x",
    "postgresql://nobody@127.0.0.1:1/db",  # nothing listens on port 1
]
GRAPHS = ["nosuch_module_xyz:graph", "os:sep", "nocolon", "{file}/g.py:graph", "os:path"]
THREADS = ["nosuch", "", "x" * 3000, "-"]


def build(path: Path) -> Path:
    with DeltaLogSaver.from_path(path) as saver:
        graph = chat_graph(2).compile(checkpointer=saver)
        for turn in range(3):
            graph.invoke({"messages": [human(turn)]}, cfg("chat"))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real store with one chat thread, built once."""
    return build(tmp_path_factory.mktemp("sweep") / "store")


@pytest.fixture
def places(built: Path, tmp_path: Path) -> dict[str, Path]:
    """A private copy of the store and the odd places a PATH may name (fresh per test:
    commands that write may create or change them)."""
    root = tmp_path / "places"
    root.mkdir()
    shutil.copytree(built, root / "store")
    empty = root / "empty"
    empty.mkdir()
    zero = root / "zero"
    zero.mkdir()
    (zero / "data.mdb").write_bytes(b"")
    garbage = root / "garbage"
    garbage.mkdir()
    (garbage / "data.mdb").write_bytes(b"not lmdb " * 2000)
    file = root / "file.txt"
    file.write_text("hello\n")
    empty_file = root / "empty.jsonl"
    empty_file.write_text("")
    return {
        "store": root / "store",
        "nonexistent": root / "nope" / "deeper",
        "empty": empty,
        "zero": zero,
        "garbage": garbage,
        "file": file,
        "empty_file": empty_file,
        "root": root,
    }


def positional(command: str, store: Path, fresh: Iterator[Path]) -> list[str]:
    """The arguments after PATH that let a command reach its options."""
    return {
        "history": ["chat"],
        "show": ["chat"],
        "diff": ["chat", "latest", "latest"],
        "copy": ["chat", f"copy-{next(fresh).name}"],
        "delete": ["nosuch"],
        "compact": [str(next(fresh))],
        "backup": [str(next(fresh))],
        "prune": ["chat", "--dry-run"],
        "migrate": [],
        "import": [],
    }.get(command, [])


def sweep_cases(command: str, places: dict[str, Path], tmp: Path) -> list[list[str]]:
    """Odd invocations of one command, built from its click parameters."""
    cmd = cli.get_command(click.Context(cli), command)
    assert cmd is not None
    counter = itertools.count()
    fresh = (tmp / f"fresh-{i}" for i in counter)
    store = places["store"]
    # Bare `bench` runs the benchmark and bare `demo` writes ./deltalog-demo.lmdb: not odd.
    bare = [] if command in ("bench", "demo") else [[command]]
    cases: list[list[str]] = [*bare, [command, "--no-such-option"], [command, "--help"]]
    takes_path = any(p.name == "path" for p in cmd.params)
    if takes_path:
        for place in ("nonexistent", "empty", "zero", "garbage", "file"):
            cases.append([command, str(places[place]), *positional(command, store, fresh)])
    tail = positional(command, store, fresh)
    head = [command, str(store)] if takes_path else [command]
    # Thread-like positionals: unknown, empty, over-long, a dash.
    if (
        any(p.name in ("thread_id", "thread_ids", "source") for p in cmd.params)
        and command != "import"
    ):
        for thread in THREADS:
            if command == "copy":
                cases.append([*head, thread, f"copy-{next(counter)}"])
                cases.append([*head, "chat", thread])
            elif command == "diff":
                cases.append([*head, thread, "latest", "latest"])
                cases.append([*head, "chat", thread, "latest"])
            else:
                cases.append([*head, thread])
    for param in cmd.params:
        if not isinstance(param, click.Option) or param.is_flag or param.name == "help":
            continue
        flag = param.opts[0]
        if param.name in ("to_uri", "from_uri"):
            values = [u.format(root=places["root"], file=places["file"]) for u in URIS]
        elif param.name == "graph_spec":
            values = [g.format(file=places["file"]) for g in GRAPHS]
        elif param.name in ("output", "out", "workdir", "from_json"):
            values = [f"{places['file']}/x", str(places["file"]), str(places["empty"])]
        else:
            values = ODD_VALUES
        if command == "bench":
            # Only values bench must refuse: a plausible one (even 10**20 turns) starts measuring.
            if param.name not in ("turns", "isolation", "from_json"):
                continue
            values = [v for v in values if v in ("abc", "-1", "0", "") or v.endswith("/x")]
        for value in values:
            cases.append([*head, *tail, flag, value])
    if command == "import":
        for source in (
            f"{places['file']}/x.jsonl",
            str(places["empty"]),
            str(places["empty_file"]),
        ):
            cases.append([command, str(next(fresh)), source])
        cases.append([command, str(next(fresh))])  # stdin: empty
    if command == "migrate":
        cases.append([*head, "--to", f"sqlite:{places['file']}/x.db", "--from", "sqlite:x"])
        cases.append([command, str(places["nonexistent"]), "--to", f"sqlite:{tmp}/t.db"])
        cases.append([*head, "nosuch", "--to", f"deltalog:{next(fresh)}"])
    if command == "prune":
        cases.append([*head, "--all", "--older-than", "99999999999d"])
        cases.append([*head, "--all", "--older-than", "9000000d"])
        cases.append([*head, "--all", "--older-than", "0001-01-01T00:00:00+00:00"])
        cases.append([*head, "--all", "--keep-last", "99999999999999999999"])
    if command == "demo":
        # Only values demo must refuse (a valid demo run is not odd, just slow), on fresh paths.
        refused = [
            [flag, value]
            for flag in ("--turns", "--snapshot-every", "--show")
            for value in ("abc", "-1", "", "1e9w")
        ]
        refused += [
            ["--turns", "0"],
            ["--turns", "99999999999999999999"],
            ["--snapshot-every", "0"],
        ]
        cases = [[command, str(next(fresh)), *extra] for extra in refused] + cases[:1]
        cases += [[command, str(places["file"])], [command, str(places["garbage"]), "--turns", "1"]]
        cases += [[command, str(next(fresh)), "--turns", "1", "--thread", "x" * 3000]]
    return cases


def outcome_problem(result: Result) -> str | None:
    """None if the result is one of the three allowed outcomes, else what is wrong."""
    text = result.output + (result.stderr or "")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return f"raised {type(result.exception).__name__}: {result.exception}"
    if "Traceback" in text:
        return "printed a traceback"
    if result.exit_code == 1:
        lines = result.stderr.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("Error: "):
            return f"exit 1 without exactly one Error line: {result.stderr[-300:]!r}"
        if "internal error" in lines[0]:
            return f"an internal error: {lines[0]}"
    elif result.exit_code == 2:
        if "Error" not in result.stderr:
            return f"exit 2 without a usage message: {result.stderr[-300:]!r}"
    elif result.exit_code != 0:
        return f"exit status {result.exit_code}"
    return None


def test_every_command_is_swept() -> None:
    """The sweep covers every registered command (a new command joins it automatically)."""
    assert {"verify", "import", "migrate", "prune", "bench", "demo"} <= set(COMMANDS)
    assert len(COMMANDS) == 16


@pytest.mark.parametrize("command", COMMANDS)
def test_odd_arguments(command: str, places: dict[str, Path], tmp_path: Path) -> None:
    """Each odd invocation: exit 0, or exit 1 with one `Error:` line, or a usage error (exit 2)."""
    cases = sweep_cases(command, places, tmp_path)
    assert len(cases) >= 5
    failures = []
    statuses: set[int] = set()
    for argv in cases:
        result = CliRunner().invoke(cli, argv, input="")
        statuses.add(result.exit_code)
        problem = outcome_problem(result)
        if problem is not None:
            failures.append(f"deltalog {' '.join(a[:60] for a in argv)}: {problem}")
    assert not failures, "\n".join(failures)
    # The sweep reached both click's checks and the commands themselves.
    assert 2 in statuses and (command == "bench" or 1 in statuses), statuses


@pytest.mark.parametrize(
    "argv",
    [
        ["prune", "{store}", "--all", "--older-than", "99999999999d"],
        ["migrate", "{store}", "--from", "sqlite:{root}/nonexistent/dir/x.db"],
        ["migrate", "{store}", "--to", "sqlite:{root}/nonexistent/dir/x.db"],
        ["threads", "{root}/nope"],
        ["show", "{store}", "nosuch"],
    ],
    ids=["huge-age", "migrate-from-bad-sqlite", "migrate-to-bad-sqlite", "no-store", "no-thread"],
)
def test_issue_examples_in_a_real_process(
    argv: list[str], places: dict[str, Path], tmp_path: Path
) -> None:
    """The issue's examples through the installed script: exit 1 or 2 with a message, no traceback."""
    args = [a.format(store=places["store"], root=places["root"]) for a in argv]
    done = subprocess.run([str(DELTALOG), *args], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (1, 2), (done.returncode, done.stderr)
    if done.returncode == 1:
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
