"""The README's example runs as written, and its two commands are what CI runs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_readme_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 10-line example compiles a graph on a real store and prints the reply."""
    code = re.search(r"```python\n(.*?)```", README, re.S)
    assert code is not None
    monkeypatch.chdir(tmp_path)
    exec(compile(code.group(1), "README.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "echo 1"
    assert (tmp_path / "chat.lmdb" / "data.mdb").exists()


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run ends with exactly the test command the README gives."""
    commands = re.findall(r"```bash\n(.*?)\n```", README, re.S)
    assert len(commands) >= 2, "README must start with the demo and the test command"
    test_command = commands[1].strip()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1].strip() == test_command
    assert os.access(ROOT / ".ci" / "run", os.X_OK)


def test_ci_checks_the_code_before_the_tests() -> None:
    """.ci/test lints, format-checks and type-checks packages and tests, then runs pytest (issue 16)."""
    script = ROOT / ".ci" / "test"
    assert os.access(script, os.X_OK)
    lines = [
        line.strip()
        for line in script.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert "set -euo pipefail" in lines
    steps = lines[lines.index('cd "$(dirname "$0")/.."') + 1 :]
    assert steps == [
        ".venv/bin/ruff check .",
        ".venv/bin/ruff format --check .",
        ".venv/bin/mypy engine channels bench deltalog_pkg tools tests",
        'exec .venv/bin/python -m pytest -q "$@"',
    ]
