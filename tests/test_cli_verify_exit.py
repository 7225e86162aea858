"""`deltalog verify` exits 1 on errors and on an unknown thread, through click and a real process (issue 15.6)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalog.engine import DeltaLogSaver
from deltalog.engine.cli import cli

from tests.checkpoints import at, new_checkpoint, put_values

DELTALOG = Path(sys.executable).parent / "deltalog"


def healthy_store(path: Path) -> None:
    """One thread, two checkpoints."""
    with DeltaLogSaver.from_path(path) as saver:
        first = put_values(saver, "good", {"a": 1})
        put_values(saver, "good", {"a": 2}, parent=first)


def broken_store(path: Path) -> None:
    """The healthy store plus a thread whose checkpoint names a parent that does not exist."""
    healthy_store(path)
    with DeltaLogSaver.from_path(path) as saver:
        checkpoint, versions = new_checkpoint(saver, {"a": 3})
        saver.put(
            at("broken", "1f000000-0000-6000-8000-000000000000"),
            checkpoint,
            {"source": "loop", "step": 1},
            versions,
        )


def deltalog(*args: object) -> subprocess.CompletedProcess[str]:
    """Run the installed console script."""
    return subprocess.run(
        [str(DELTALOG), *map(str, args)], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_verify_errors_exit_1_in_a_real_process(tmp_path: Path, as_json: bool) -> None:
    """A dangling parent: FAILED report, exit status 1 and one `Error:` line (also with --json)."""
    path = tmp_path / "s"
    broken_store(path)
    extra = ["--json"] if as_json else []
    done = deltalog("verify", path, *extra)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines() == [
        f"Error: verify found 1 error(s) in {path}; see the report above"
    ]
    if as_json:
        assert json.loads(done.stdout)["ok"] is False
    else:
        assert done.stdout.startswith("FAILED")
    # `verify && echo healthy` must not say healthy.
    shell = subprocess.run(
        f"'{DELTALOG}' verify '{path}' && echo healthy", shell=True, capture_output=True, text=True
    )
    assert "healthy" not in shell.stdout


def test_verify_healthy_exits_0_in_a_real_process(tmp_path: Path) -> None:
    """A sound store: ok and exit status 0, nothing on stderr."""
    path = tmp_path / "s"
    healthy_store(path)
    done = deltalog("verify", path, "--deep")
    assert done.returncode == 0 and done.stdout.startswith("ok") and done.stderr == ""


def test_verify_unknown_thread_is_an_error(tmp_path: Path) -> None:
    """`verify PATH nosuch` says there is no such thread and exits 1 (never "ok")."""
    path = tmp_path / "s"
    healthy_store(path)
    done = deltalog("verify", path, "nosuch")
    assert done.returncode == 1 and "ok" not in done.stdout
    assert done.stderr.startswith("Error: no such thread(s)") and "'nosuch'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert deltalog("verify", path, "good").returncode == 0


def test_verify_exit_codes_through_clirunner(tmp_path: Path) -> None:
    """The same statuses through click's CliRunner."""
    path = tmp_path / "s"
    broken_store(path)
    runner = CliRunner()
    result = runner.invoke(cli, ["verify", str(path), "--json"])
    assert result.exit_code == 1 and json.loads(result.stdout)["ok"] is False
    assert result.stderr.startswith("Error: verify found 1 error(s)")
    assert runner.invoke(cli, ["verify", str(path), "good"]).exit_code == 0
    unknown = runner.invoke(cli, ["verify", str(path), "nosuch"])
    assert unknown.exit_code == 1 and "no such thread" in unknown.stderr
