"""Packaging guards: every package folder is mapped, no bare top-level names, py.typed shipped."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

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


BARE = ("engine", "channels", "bench", "deltalog_pkg", "deltalog_build")


def test_no_bare_top_level_packages_installed(tmp_path: Path) -> None:
    """`engine`, `channels`, `bench` are not importable as bare names (Django Channels safety)."""
    probe = (
        "import importlib.util as u, json; "
        "print(json.dumps({n: getattr(u.find_spec(n), 'origin', None) "
        f"for n in {(*BARE, 'deltalog', 'deltalog.engine')!r}}}))"
    )
    # Run outside the checkout so only the installed distribution is visible.
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    found = json.loads(out.stdout)
    for bare in BARE:
        assert found[bare] is None or not found[bare].startswith(str(ROOT)), (bare, found[bare])
    assert found["deltalog.engine"] is not None
    assert found["deltalog"] is not None and found["deltalog"].endswith("__init__.py")


def test_absolute_imports_only() -> None:
    """Code imports deltalog.… absolutely, never the bare folder names."""
    for folder in CONFIG["package-dir"].values():
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            for bare in ("engine", "channels", "bench"):
                assert f"from {bare}." not in text and f"import {bare}\n" not in text, path


def _run(code: str, cwd: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_top_level_package_is_light_and_lazy(tmp_path: Path) -> None:
    """`import deltalog` imports neither LangGraph nor click; its names load on use (issue 19.2)."""
    probe = (
        "import sys, json, deltalog; heavy = [m for m in ('langgraph', 'langchain_core', "
        "'click', 'lmdb', 'typing') if m in sys.modules]; "
        "from deltalog import DeltaLogSaver, DeltaMessages; import deltalog.engine as e; "
        "print(json.dumps([heavy, deltalog.__version__, DeltaLogSaver is e.DeltaLogSaver]))"
    )
    heavy, version, same = json.loads(_run(probe, tmp_path))
    assert heavy == []
    assert same is True
    assert version == importlib.metadata.version("deltalog")


def test_python_m_deltalog_is_the_cli(tmp_path: Path) -> None:
    """`python -m deltalog threads PATH` runs the deltalog command."""
    store = tmp_path / "s"
    _run(
        "from deltalog import DeltaLogSaver\n"
        "from langgraph.checkpoint.base import empty_checkpoint\n"
        f"with DeltaLogSaver.from_path({str(store)!r}) as s:\n"
        "    s.put({'configurable': {'thread_id': 'via-m'}}, empty_checkpoint(), {}, {})\n",
        tmp_path,
    )
    out = subprocess.run(
        [sys.executable, "-m", "deltalog", "threads", str(store), "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "via-m" in out.stdout


def _checkout_copy(dest: Path) -> Path:
    """The files git tracks (plus untracked new ones), as a fresh clone would have them."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        src = ROOT / os.fsdecode(name)
        if src.is_file():
            (dest / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(name))
    return dest


def _snapshot(tree: Path) -> dict[str, float]:
    return {str(p.relative_to(tree)): p.stat().st_mtime for p in tree.rglob("*")}


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout"
)
def test_wheel_from_read_only_checkout(tmp_path: Path) -> None:
    """A wheel builds from a read-only checkout without writing to it; it ships deltalog/,
    LICENSE and py.typed, and no bare engine/channels/bench (issue 19.2, 19.5)."""
    tree = _checkout_copy(tmp_path / "checkout")
    for path in [tree, *tree.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    before = _snapshot(tree)
    isolation: list[str] = []
    # The installed setuptools (in the dev extra) builds without a network
    # round trip; a venv without a recent one builds in isolation.
    if (
        importlib.util.find_spec("setuptools") is not None
        and int(importlib.metadata.version("setuptools").split(".")[0]) >= 77
    ):
        isolation = ["--no-build-isolation"]
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                *isolation,
                "-w",
                str(tmp_path / "wheels"),
                str(tree),
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
    finally:
        for path in [tree, *tree.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    assert _snapshot(tree) == before, "the build wrote into the checkout"
    (wheel,) = (tmp_path / "wheels").glob("deltalog-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for required in (
        "deltalog/__init__.py",
        "deltalog/__main__.py",
        "deltalog/py.typed",
        "deltalog/engine/saver.py",
        "deltalog/engine/py.typed",
        "deltalog/channels/py.typed",
    ):
        assert required in names, required
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    tops = {n.split("/")[0] for n in names}
    assert tops == {"deltalog", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    metadata = zipfile.ZipFile(wheel).read(wheel.name.split("-py3")[0] + ".dist-info/METADATA")
    assert b"Classifier: Typing :: Typed" in metadata
    assert b"License-Expression: MIT" in metadata
