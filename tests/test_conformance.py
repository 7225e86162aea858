"""LangGraph's official conformance suite against DeltaLogSaver (R1–R10)."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from .conftest import SAVER_CONFIGS


@pytest.mark.parametrize("name", sorted(SAVER_CONFIGS))
async def test_conformance_full(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """validate() reports every capability detected and passing (all eight)."""
    kwargs: dict[str, Any] = SAVER_CONFIGS[name]

    @checkpointer_test(name=f"DeltaLogSaver[{name}]")
    async def factory() -> AsyncGenerator[DeltaLogSaver, None]:
        with tempfile.TemporaryDirectory() as tmp:
            saver = DeltaLogSaver.from_path(f"{tmp}/store", **kwargs)
            try:
                yield saver
            finally:
                saver.close()

    report = await validate(factory, progress=ProgressCallbacks.verbose())
    with capsys.disabled():
        report.print_report()
    failures = {cap: r.failures for cap, r in report.results.items() if r.failures}
    assert not failures, failures
    base = {"put", "put_writes", "get_tuple", "list", "delete_thread"}
    passed = {cap for cap, r in report.results.items() if r.passed}
    assert base <= passed, report.results
