"""`deltalog memory ls|get|search|put|delete|verify` work on a real store, with --json and one-line errors (issue 17)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result
from deltalog.engine import DeltaLogStore
from deltalog.engine.cli import cli


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_memory_commands_round_trip(tmp_path: Path) -> None:
    """put, get, ls, search, delete and verify agree with the library."""
    path = str(tmp_path / "app")
    assert run("memory", "put", path, "users.u1", "profile", '{"visits": 3}').exit_code == 0
    assert (
        run("memory", "put", path, "users.u2", "profile", '{"visits": 1}', "--ttl", "60").exit_code
        == 0
    )
    got = run("memory", "get", path, "users.u1", "profile", "--json")
    assert got.exit_code == 0 and json.loads(got.stdout)["value"] == {"visits": 3}
    ls = run("memory", "ls", path, "--json")
    assert json.loads(ls.stdout) == ["users.u1", "users.u2"]
    assert run("memory", "ls", path, "users", "--max-depth", "1").stdout.split() == ["users"]
    found = run("memory", "search", path, "users", "--filter", '{"visits": {"$gte": 2}}', "--json")
    assert [r["namespace"] for r in json.loads(found.stdout)] == ["users.u1"]
    assert "users.u2" in run("memory", "search", path).stdout
    ok = run("memory", "verify", path, "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout) == {"ok": True, "problems": []}
    assert run("memory", "delete", path, "users.u1", "profile").exit_code == 0
    with DeltaLogStore.from_path(path) as store:
        assert store.get(("users", "u1"), "profile") is None
        item = store.get(("users", "u2"), "profile")
        assert item is not None and item.value == {"visits": 1}


def test_memory_errors_are_one_line(tmp_path: Path) -> None:
    """Bad JSON, a bad namespace or a missing item exit 1 with one line on stderr."""
    path = str(tmp_path / "app")
    for args in (
        ("put", path, "users", "k", "{not json"),
        ("put", path, "langgraph", "k", "{}"),
        ("put", path, "users", "k", "[1]"),
        ("get", path, "users", "missing"),
    ):
        result = CliRunner().invoke(cli, ["memory", *args])
        assert result.exit_code == 1, (args, result.output)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
