"""docs/api.md is generated from the current docstrings and lists every public saver method (issue 19.7)."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

from deltalog import _apidoc
from deltalog.engine import DeltaLogSaver

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "api.md"

# Public methods with parameters whose docstring has no Args section yet (and
# is not an async twin pointing at one). This list may only shrink.
WITHOUT_ARGS = {
    "backup",
    "checkpoint_refs",
    "compact",
    "get_next_version",
    "get_writes",
    "import_records",
    "with_allowlist",
}


def test_page_is_current() -> None:
    """The committed page is what `python -m deltalog._apidoc` writes now."""
    assert PAGE.read_text() == _apidoc.render(), "run: python -m deltalog._apidoc"


def test_check_mode_exit_status(tmp_path: Path) -> None:
    """`--check` exits 0 on the current page and 1 on a stale one, naming the fix."""
    ok = subprocess.run(
        [sys.executable, "-m", "deltalog._apidoc", "--check", str(PAGE)],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    stale = tmp_path / "api.md"
    stale.write_text(PAGE.read_text().replace("### put_writes", "### put_writez"))
    bad = subprocess.run(
        [sys.executable, "-m", "deltalog._apidoc", "--check", str(stale)],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "python -m deltalog._apidoc" in bad.stderr


def test_every_public_saver_method_is_listed() -> None:
    """Each public method of DeltaLogSaver (inherited ones too) has a section with its signature."""
    text = PAGE.read_text()
    listed = set(re.findall(r"^### (\w+)$", text, re.M))
    public = {
        name
        for name in dir(DeltaLogSaver)
        if not name.startswith("_")
        and (
            inspect.isfunction(inspect.getattr_static(DeltaLogSaver, name))
            or isinstance(inspect.getattr_static(DeltaLogSaver, name), classmethod)
        )
    }
    assert public - listed == set()
    for name in ("from_conn_string", "setup", "aget_tuple", "prune"):
        assert f"```text\n{name}(" in text, name


def test_args_sections_do_not_regress() -> None:
    """Every public method with parameters documents them, except the shrinking WITHOUT_ARGS."""
    missing = set()
    for name, func, inherited in _apidoc._members(DeltaLogSaver):
        if inherited:
            continue
        doc = inspect.getdoc(func) or ""
        params = [p for p in inspect.signature(func).parameters if p not in ("self", "cls")]
        if params and "Args:" not in doc and not doc.startswith("Async :meth:"):
            missing.add(name)
    assert missing == WITHOUT_ARGS, (
        f"new methods without Args: {sorted(missing - WITHOUT_ARGS)}; "
        f"now documented, drop from WITHOUT_ARGS: {sorted(WITHOUT_ARGS - missing)}"
    )
