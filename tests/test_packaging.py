"""Packaging guards: every package folder is mapped, no bare top-level names, py.typed shipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found]  # installed on 3.10 only

ROOT = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed() -> None:
    """Each folder with an __init__.py under engine/, channels/, bench/ is in `packages`."""
    mapping = CONFIG["package-dir"]
    listed = set(CONFIG["packages"])
    for package, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            name = ".".join([package, *rel.parts]) if rel.parts else package
            assert name in listed, (
                f"{name} ({init.parent}) is missing from [tool.setuptools] packages"
            )


def test_py_typed_in_each_subpackage() -> None:
    """Every mapped package ships py.typed (declared as package data too)."""
    for package, folder in CONFIG["package-dir"].items():
        assert (ROOT / folder / "py.typed").exists(), folder
        assert "py.typed" in CONFIG["package-data"][package]


def test_no_bare_top_level_packages_installed(tmp_path: Path) -> None:
    """`engine`, `channels`, `bench` are not importable as bare names (Django Channels safety)."""
    probe = (
        "import importlib.util as u, json; "
        "print(json.dumps({n: getattr(u.find_spec(n), 'origin', None) "
        "for n in ('engine', 'channels', 'bench', 'deltalog.engine')}))"
    )
    # Run outside the checkout so only the installed distribution is visible.
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    found = json.loads(out.stdout)
    for bare in ("engine", "channels", "bench"):
        assert found[bare] is None or not found[bare].startswith(str(ROOT)), (bare, found[bare])
    assert found["deltalog.engine"] is not None


def test_absolute_imports_only() -> None:
    """Code imports deltalog.… absolutely, never the bare folder names."""
    for folder in CONFIG["package-dir"].values():
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            for bare in ("engine", "channels", "bench"):
                assert f"from {bare}." not in text and f"import {bare}\n" not in text, path
