"""Inspection is library code: no click or rich in it, and a bad checkpoint reference is a DeltaLogError (issue 16, inspection)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalog.engine import DeltaLogSaver
from deltalog.engine.config import config_for
from deltalog.engine.errors import AmbiguousCheckpointError, CheckpointNotFoundError
from deltalog.engine.inspection import reconstruct_state, resolve_checkpoint

from .checkpoints import checkpoint_id, put_values

SOURCE = Path(__file__).resolve().parent.parent / "engine" / "inspection.py"


def test_the_library_imports_no_cli_package() -> None:
    """engine/inspection.py imports neither click nor rich (the CLI formats, the library computes)."""
    imported: set[str] = set()
    for node in ast.walk(ast.parse(SOURCE.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported & {"click", "rich"} == set()
    assert "deltalog" in imported  # the walk sees the module's imports at all


def test_checkpoint_references_resolve_or_raise_library_errors(
    make_saver: Callable[..., DeltaLogSaver],
) -> None:
    """An id, a unique prefix and `latest` resolve; no match and an ambiguous prefix raise
    CheckpointNotFoundError / AmbiguousCheckpointError, both DeltaLogErrors."""
    saver = make_saver()
    first = put_values(saver, "t", {"a": 1})
    second = put_values(saver, "t", {"a": 2}, parent=first)
    one, two = checkpoint_id(first), checkpoint_id(second)
    assert resolve_checkpoint(saver, "t", "", None) == two
    assert resolve_checkpoint(saver, "t", "", "latest") == two
    assert resolve_checkpoint(saver, "t", "", one) == one
    common = next(i for i in range(len(one)) if one[i] != two[i])  # uuid6: a time prefix
    assert common > 0
    assert resolve_checkpoint(saver, "t", "", two[: common + 1]) == two
    with pytest.raises(AmbiguousCheckpointError, match="matches 2 checkpoints"):
        resolve_checkpoint(saver, "t", "", two[:common])
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint 'zz'"):
        resolve_checkpoint(saver, "t", "", "zz")
    with pytest.raises(CheckpointNotFoundError, match="has no checkpoints"):
        resolve_checkpoint(saver, "nobody", "", None)
    with pytest.raises(CheckpointNotFoundError, match="has no any checkpoint"):
        reconstruct_state(saver, config_for("nobody"))
