"""Shared fixtures: a saver factory parametrized over store configurations."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver

# Configurations every saver-level test runs against (style.md item 9):
# compression on/off and a tiny initial map that forces growth mid-test.
SAVER_CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "no-compression": {"compress_threshold": None},
    "tiny-map": {"map_size": 64 * 1024},
    "no-group-commit": {"group_commit": False},
}


@pytest.fixture(params=sorted(SAVER_CONFIGS))
def saver_config(request: pytest.FixtureRequest) -> dict[str, Any]:
    """One of SAVER_CONFIGS (parametrized)."""
    return SAVER_CONFIGS[request.param]


@pytest.fixture
def make_saver(tmp_path: Path) -> Iterator[Callable[..., DeltaLogSaver]]:
    """Factory of savers on fresh store folders under tmp_path; closes them after."""
    made: list[DeltaLogSaver] = []
    counter = iter(range(10**6))

    def factory(path: Path | None = None, **kwargs: Any) -> DeltaLogSaver:
        saver = DeltaLogSaver.from_path(path or tmp_path / f"store-{next(counter)}", **kwargs)
        made.append(saver)
        return saver

    yield factory
    for saver in made:
        saver.close()


@pytest.fixture
def saver(make_saver: Callable[..., DeltaLogSaver], saver_config: dict[str, Any]) -> DeltaLogSaver:
    """A DeltaLogSaver in each configuration of SAVER_CONFIGS."""
    return make_saver(**saver_config)
