"""deltalog migrate: threads move into SqliteSaver / PostgresSaver (and back) and keep working there."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from deltalog.bench.pgserver import PostgresUnavailable, find_pg_bindir, local_postgres
from deltalog.engine import DeltaLogSaver
from deltalog.engine.cli import cli
from deltalog.engine.migrate import (
    MigrationError,
    SourceWrite,
    migrate,
    open_saver_uri,
    plan_migration,
    run_migration,
    write_calls,
)
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from .graphs import (
    cfg,
    chat_graph,
    fanout_graph,
    history,
    human,
    interrupt_graph,
    observe,
    program_chat,
    program_fanout,
    program_interrupt,
    program_subgraph,
    subgraph_graph,
)

SF = 3
BUILDERS = {
    "chat": chat_graph,
    "hitl": interrupt_graph,
    "waiting": interrupt_graph,
    "fan": fanout_graph,
    "sub": subgraph_graph,
}


def build_store(path: Path) -> None:
    """A chat with a fork and an edit, interrupts (one pending), Send fan-out, a subgraph."""
    with DeltaLogSaver.from_path(path) as saver:
        program_chat(saver, SF, turns=6)
        program_interrupt(saver, SF)
        program_fanout(saver, SF)
        program_subgraph(saver, SF)
        interrupt_graph(SF).compile(checkpointer=saver).invoke(
            {"messages": [human(0)]}, cfg("waiting")
        )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store, built once per module (tests copy it)."""
    path = tmp_path_factory.mktemp("migrate") / "source.lmdb"
    build_store(path)
    return path


@pytest.fixture
def source(built: Path, tmp_path: Path) -> Path:
    """A private copy of the built store."""
    dest = tmp_path / "source.lmdb"
    shutil.copytree(built, dest)
    return dest


@contextlib.contextmanager
def sqlite_saver(path: Path) -> Iterator[SqliteSaver]:
    """A SqliteSaver on a file."""
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


def run(*args: Any, ok: bool = True) -> Result:
    """Invoke the CLI in-process; by default assert exit status 0."""
    result = CliRunner().invoke(cli, [str(a) for a in args], env={"COLUMNS": "200"})
    if ok:
        assert result.exit_code == 0, (result.output, result.stderr, result.exception)
    return result


def graph_on(
    saver: BaseCheckpointSaver[Any], thread_id: str
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The graph that wrote ``thread_id``, on ``saver``."""
    return BUILDERS[thread_id](SF).compile(checkpointer=saver)


def observed(saver: BaseCheckpointSaver[Any]) -> dict[str, Any]:
    """Everything a user sees of every thread: history, latest state with subgraphs, and
    each checkpoint's stored parts (ids, parents, metadata, pending writes)."""
    out: dict[str, Any] = {}
    for thread_id in BUILDERS:
        graph = graph_on(saver, thread_id)
        tuples = {}
        for t in saver.list({"configurable": {"thread_id": thread_id}}):
            conf = t.config["configurable"]
            metadata = dict(t.metadata or {})
            tuples[(conf["checkpoint_ns"], conf["checkpoint_id"])] = (
                (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
                json.dumps(metadata, sort_keys=True, default=str),
                [(task, channel, repr(value)) for task, channel, value in t.pending_writes or []],
            )
        state = graph.get_state(cfg(thread_id), subgraphs=True)
        out[thread_id] = {
            "history": history(graph, cfg(thread_id)),
            "latest": observe(state),
            "subgraphs": [
                observe(task.state)
                for task in state.tasks
                if task.state is not None and not isinstance(task.state, dict)
            ],
            "tuples": tuples,
        }
    return out


def observed_store(path: Path) -> dict[str, Any]:
    """`observed` of a deltalog store (opened and closed here)."""
    with DeltaLogSaver.from_path(path) as saver:
        return observed(saver)


def continue_threads(saver: BaseCheckpointSaver[Any]) -> dict[str, Any]:
    """Run more of each graph on ``saver``: two chat turns, resume the pending interrupt."""
    chat = graph_on(saver, "chat")
    for turn in (300, 301):
        chat.invoke({"messages": [human(turn)]}, cfg("chat"))
    waiting = graph_on(saver, "waiting")
    waiting.invoke(Command(resume="yes"), cfg("waiting"))
    return {
        "chat": history(chat, cfg("chat")),
        "waiting": observe(waiting.get_state(cfg("waiting"))),
    }


# -- SQLite --------------------------------------------------------------------------------


def test_migrate_to_sqlite_reads_natively_and_continues(source: Path, tmp_path: Path) -> None:
    """After migrate --to sqlite:, SqliteSaver shows every thread exactly as deltalog did,
    delta channels included, and the graphs continue there as they do on the source."""
    db = tmp_path / "chat.sqlite"
    report = json.loads(run("migrate", source, "--to", f"sqlite:{db}", "--json").stdout)
    with DeltaLogSaver.from_path(source) as saver:
        total = sum(t.checkpoints for t in saver.threads())
    assert report["verified"] and report["checkpoints"] == total and report["skipped"] == 0
    assert report["threads"] == len(BUILDERS) and report["writes"] > 0
    expected = observed_store(source)
    with sqlite_saver(db) as target:
        assert observed(target) == expected
        continued_target = continue_threads(target)
    with DeltaLogSaver.from_path(source) as saver:
        assert continue_threads(saver) == continued_target


def test_migrate_is_resumable(source: Path, tmp_path: Path) -> None:
    """An interrupted migration finishes when run again; nothing is written twice."""
    db = tmp_path / "resume.sqlite"

    class Stop(Exception):
        pass

    calls = 0

    def stop_after_ten() -> None:
        nonlocal calls
        calls += 1
        if calls == 10:
            raise Stop

    with DeltaLogSaver.from_path(source) as src, open_saver_uri(f"sqlite:{db}") as dst:
        plan = plan_migration(src, dst)
        with pytest.raises(Stop):
            run_migration(plan, src, dst, on_checkpoint=stop_after_ten)
    again = json.loads(run("migrate", source, "--to", f"sqlite:{db}", "--json").stdout)
    assert again["skipped"] == 10 and again["checkpoints"] == plan.total - 10 and again["verified"]
    expected = observed_store(source)
    with sqlite_saver(db) as target:
        assert observed(target) == expected
    third = json.loads(run("migrate", source, "--to", f"sqlite:{db}", "--json").stdout)
    assert third["checkpoints"] == 0 and third["skipped"] == plan.total


def test_migrate_refuses_to_merge_foreign_history(source: Path, tmp_path: Path) -> None:
    """A target thread with checkpoints the source lacks stops the migration before any write."""
    db = tmp_path / "foreign.sqlite"
    with sqlite_saver(db) as target:
        graph_on(target, "fan").invoke({"messages": [human(7)], "log": []}, cfg("fan"))
        before = len(list(target.list(None)))
    result = run("migrate", source, "--to", f"sqlite:{db}", ok=False)
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "'fan' exists in the target" in result.stderr
    with sqlite_saver(db) as target:
        assert len(list(target.list(None))) == before


def test_migrate_some_threads_then_back_from_sqlite(source: Path, tmp_path: Path) -> None:
    """THREAD arguments limit the copy; --from brings threads into a new deltalog store intact."""
    db = tmp_path / "some.sqlite"
    run("migrate", source, "--to", f"sqlite:{db}", "chat", "sub")
    with sqlite_saver(db) as target:
        assert {t.config["configurable"]["thread_id"] for t in target.list(None)} == {"chat", "sub"}
    run("migrate", source, "--to", f"sqlite:{db}")  # the rest; chat and sub are skipped
    back = tmp_path / "back.lmdb"
    report = json.loads(run("migrate", back, "--from", f"sqlite:{db}", "--json").stdout)
    assert report["verified"] and report["threads"] == len(BUILDERS)
    assert observed_store(back) == observed_store(source)
    assert json.loads(run("verify", back, "--json").stdout)["ok"]
    text = run("migrate", back, "--from", f"sqlite:{db}").stdout
    assert "verified" in text and "0 checkpoints" in text


def test_migrate_pruned_source_brings_the_hidden_chain(source: Path, tmp_path: Path) -> None:
    """A prune hides the delta chain the kept checkpoint replays through; migrate copies it,
    so the target rebuilds the same latest state and continues identically."""
    run("prune", source, "chat", "--keep-latest")
    with DeltaLogSaver.from_path(source) as saver:
        latest = observe(graph_on(saver, "chat").get_state(cfg("chat")))
    db = tmp_path / "pruned.sqlite"
    report = json.loads(run("migrate", source, "--to", f"sqlite:{db}", "chat", "--json").stdout)
    assert report["hidden"] > 0 and report["verified"]
    with sqlite_saver(db) as target:
        assert (
            observe(graph_on(target, "chat").get_state(cfg("chat")))["values"] == latest["values"]
        )
        graph_on(target, "chat").invoke({"messages": [human(400)]}, cfg("chat"))
        on_target = observe(graph_on(target, "chat").get_state(cfg("chat")))
    with DeltaLogSaver.from_path(source) as saver:
        graph_on(saver, "chat").invoke({"messages": [human(400)]}, cfg("chat"))
        on_source = observe(graph_on(saver, "chat").get_state(cfg("chat")))
    assert on_target["values"] == on_source["values"]


def test_library_migrate_between_any_savers(tmp_path: Path) -> None:
    """migrate() works saver to saver: InMemorySaver → deltalog keeps write order and states."""
    memory = InMemorySaver()
    program_fanout(memory, SF)
    program_chat(memory, SF, turns=4)
    with DeltaLogSaver.from_path(tmp_path / "t.lmdb") as target:
        report = migrate(memory, target)
        assert report.verified and report.threads == 2
        for thread_id in ("fan", "chat"):
            assert history(graph_on(target, thread_id), cfg(thread_id)) == history(
                graph_on(memory, thread_id), cfg(thread_id)
            )


# -- errors and the write-order helper ----------------------------------------------------


def test_migrate_usage_and_errors(source: Path, tmp_path: Path) -> None:
    """Exactly one of --to/--from; unknown URI schemes and missing threads are one-line errors."""
    assert run("migrate", source, ok=False).exit_code == 2
    assert run("migrate", source, "--to", "sqlite:a", "--from", "sqlite:b", ok=False).exit_code == 2
    assert (
        run(
            "migrate", tmp_path / "none.lmdb", "--to", f"sqlite:{tmp_path / 'x'}", ok=False
        ).exit_code
        == 2
    )
    bad = run("migrate", source, "--to", "mysql://u:pw@h/db", ok=False)
    assert bad.exit_code == 1 and "not a saver URI" in bad.stderr and "pw" not in bad.stderr
    missing = run("migrate", source, "--to", f"sqlite:{tmp_path / 'm.sqlite'}", "nosuch", ok=False)
    assert missing.exit_code == 1 and "nosuch" in missing.stderr


def test_write_calls_put_every_write_back_at_its_idx() -> None:
    """Grouped per task in writes_sort_key order; specials fill the gaps they came from."""
    writes = [
        SourceWrite("t1", "~a", -3, "__interrupt__", "i"),
        SourceWrite("t1", "~a", 1, "x", 1),
        SourceWrite("t1", "~a", 2, "y", 2),
        SourceWrite("t2", "~b", 0, "x", 3),
        SourceWrite("t2", "~b", -1, "__error__", "e"),
        SourceWrite("t3", "~c", 0, "x", 4),
        SourceWrite("t3", "~c", 5, "x", 5),
    ]
    calls = write_calls(writes)
    assert calls == [
        ("t1", "~a", [("__interrupt__", "i"), ("x", 1), ("y", 2)]),
        ("t2", "~b", [("x", 3), ("__error__", "e")]),
        ("t3", "~c", [("x", 4), ("x", 5)]),  # a gap nothing fills is closed; order kept
    ]


def test_unknown_source_saver_is_refused(tmp_path: Path) -> None:
    """A source whose writes' task paths cannot be read is refused rather than reordered."""
    memory = InMemorySaver()
    program_fanout(memory, SF)

    class Wrapper(BaseCheckpointSaver[str]):
        """A saver exposing only get_tuple/list (pending_writes drop task_path)."""

        def __init__(self, inner: InMemorySaver) -> None:
            super().__init__()
            self.inner = inner

        def get_tuple(self, config: Any) -> Any:
            return self.inner.get_tuple(config)

        def list(self, config: Any, **kwargs: Any) -> Any:
            return self.inner.list(config, **kwargs)

    with DeltaLogSaver.from_path(tmp_path / "t.lmdb") as target:
        with pytest.raises(MigrationError, match="task paths"):
            migrate(Wrapper(memory), target)
        assert target.threads() == []


# -- PostgreSQL ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL server on 127.0.0.1 (initdb + pg_ctl as an unprivileged user)."""
    if find_pg_bindir() is None:
        pytest.skip(
            "PostgreSQL server binaries not found (apt-get install postgresql, or set PG_BINDIR)"
        )
    try:
        with local_postgres() as dsn:
            yield dsn
    except PostgresUnavailable as exc:
        pytest.fail(f"PostgreSQL is installed but did not start: {exc}")


def fresh_database(dsn: str, name: str) -> str:
    """Create an empty database on the server; return its DSN."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return dsn.rsplit("/", 1)[0] + f"/{name}"


@pytest.mark.postgres
def test_migrate_to_postgres_reads_natively_continues_and_comes_back(
    postgres: str, source: Path, tmp_path: Path
) -> None:
    """PostgresSaver shows every migrated thread as deltalog did and continues it identically;
    re-running skips everything; --from brings the continued threads back."""
    from langgraph.checkpoint.postgres import PostgresSaver

    dsn = fresh_database(postgres, "migrate_roundtrip")
    report = json.loads(run("migrate", source, "--to", dsn, "--json").stdout)
    assert report["verified"] and report["checkpoints"] > 0
    again = json.loads(run("migrate", source, "--to", dsn, "--json").stdout)
    assert again["checkpoints"] == 0 and again["skipped"] == report["checkpoints"]
    expected = observed_store(source)
    with PostgresSaver.from_conn_string(dsn) as target:
        assert observed(target) == expected
        continued_target = continue_threads(target)
    with DeltaLogSaver.from_path(source) as saver:
        assert continue_threads(saver) == continued_target
    back = tmp_path / "from-pg.lmdb"
    back_report = json.loads(run("migrate", back, "--from", dsn, "--json").stdout)
    assert back_report["verified"] and back_report["threads"] == len(BUILDERS)
    with PostgresSaver.from_conn_string(dsn) as target:
        from_pg = observed(target)
    assert observed_store(back) == from_pg


@pytest.mark.postgres
def test_migrate_to_postgres_is_resumable(postgres: str, source: Path) -> None:
    """An interrupted migration into PostgreSQL completes on the second run."""
    dsn = fresh_database(postgres, "migrate_resume")
    calls = 0

    def stop_after_five() -> None:
        nonlocal calls
        calls += 1
        if calls == 5:
            raise KeyboardInterrupt

    with DeltaLogSaver.from_path(source) as src, open_saver_uri(dsn) as dst:
        plan = plan_migration(src, dst)
        with pytest.raises(KeyboardInterrupt):
            run_migration(plan, src, dst, on_checkpoint=stop_after_five)
    again = json.loads(run("migrate", source, "--to", dsn, "--json").stdout)
    assert again["skipped"] == 5 and again["verified"]
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(dsn) as target:
        assert observed(target) == observed_store(source)


@pytest.mark.postgres
def test_postgres_password_is_redacted(postgres: str, source: Path) -> None:
    """A failing connection is one line on stderr, password shown as ***."""
    bad = postgres.replace("postgres@", "nobody:hunter2@").rsplit("/", 1)[0] + "/nodb"
    result = run("migrate", source, "--to", bad, ok=False)
    assert result.exit_code == 1 and "hunter2" not in result.stderr and "***" in result.stderr
    assert result.stderr.count("\n") == 1
