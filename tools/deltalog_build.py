"""Build backend: setuptools, run on a scratch copy so a build never writes into the checkout.

setuptools' ``bdist_wheel`` and ``sdist`` write ``build/`` and
``deltalog.egg-info/`` next to ``pyproject.toml``; in a read-only checkout
(a CI cache, a container layer, a shared folder) ``pip install .`` then
fails. Wheels and sdists are built from a copy of the tree in a temporary
folder instead. Editable installs keep using the checkout itself (their
link tree is the point).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from setuptools import build_meta as _setuptools  # type: ignore[import-untyped]
from setuptools.build_meta import (  # type: ignore[import-untyped]
    build_editable,
    get_requires_for_build_editable,
    prepare_metadata_for_build_editable,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

# Never copied: build output, caches and local stores (by top-level or any name).
_SKIP = {
    ".git",
    ".venv",
    "build",
    "dist",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    ".benchmarks",
    "bench-out",
}


def _ignore(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if n in _SKIP or n.endswith((".egg-info", ".lmdb"))}


@contextmanager
def _scratch_copy() -> Iterator[None]:
    source = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="deltalog-build-") as tmp:
        tree = os.path.join(tmp, "src")
        shutil.copytree(source, tree, ignore=_ignore, symlinks=True)
        os.chdir(tree)
        try:
            yield
        finally:
            os.chdir(source)


def _in_copy(build: Callable[..., str], directory: str, *args: Any) -> str:
    target = os.path.abspath(directory)
    with _scratch_copy():
        return build(target, *args)


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    """PEP 517 hook (setuptools runs ``egg_info`` for it: on the copy)."""
    with _scratch_copy():
        return list(_setuptools.get_requires_for_build_wheel(config_settings))


def get_requires_for_build_sdist(config_settings: dict[str, Any] | None = None) -> list[str]:
    """PEP 517 hook (setuptools runs ``egg_info`` for it: on the copy)."""
    with _scratch_copy():
        return list(_setuptools.get_requires_for_build_sdist(config_settings))


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: dict[str, Any] | None = None
) -> str:
    """PEP 517 hook, on the copy."""
    return _in_copy(
        _setuptools.prepare_metadata_for_build_wheel, metadata_directory, config_settings
    )


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """PEP 517 ``build_wheel`` on a scratch copy of the tree."""
    metadata = os.path.abspath(metadata_directory) if metadata_directory else None
    return _in_copy(_setuptools.build_wheel, wheel_directory, config_settings, metadata)


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    """PEP 517 ``build_sdist`` on a scratch copy of the tree."""
    return _in_copy(_setuptools.build_sdist, sdist_directory, config_settings)
