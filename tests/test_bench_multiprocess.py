"""Issue 18.4: processes × threads on one store path: turns/s, 0 errors, every acknowledged turn read back."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from deltalog.bench.report import evaluate_targets
from deltalog.bench.runner import (
    MultiProcessWorker,
    RunOptions,
    multiprocess_failures,
    run_bench,
)
from deltalog.bench.scenarios import MULTIPROCESS, BenchPlan


def _plan() -> BenchPlan:
    scenario = dataclasses.replace(
        MULTIPROCESS, processes=2, threads=2, seconds=0.3, repeats=1, max_turns_per_thread=6
    )
    return BenchPlan(chat=(), throughput=None, multiprocess=scenario)


def test_two_processes_share_one_store_and_every_turn_is_read_back(tmp_path: Path) -> None:
    """deltalog and SqliteSaver each run 2 processes × 2 threads on one path, with no error
    and every acknowledged turn present; the ratio target is evaluated from the rates."""
    result = run_bench(_plan(), RunOptions(peers=("deltalog", "sqlite"), workdir=tmp_path))
    assert result.failures == []
    mp = result.multiprocess
    assert mp is not None and set(mp.savers) == {"deltalog", "sqlite"}
    for point in mp.savers.values():
        assert point.errors == 0 and point.problems == []
        assert point.turns > 0 and point.turns_per_s > 0
    verdict = next(v for v in evaluate_targets(result) if v.key == "multiprocess_vs_sqlite")
    assert verdict.status in ("PASS", "FAIL") and verdict.against == "sqlite"
    assert verdict.ratio is not None and verdict.ratio > 0


def test_the_read_back_reports_a_turn_that_is_not_in_the_store(tmp_path: Path) -> None:
    """A thread credited with one more acknowledged turn than it stored is named as a
    problem, and a problem fails the run."""
    scenario = _plan().multiprocess
    assert scenario is not None
    directory = tmp_path / "store"
    worker = MultiProcessWorker()
    worker.prepare("deltalog", str(directory), dataclasses.replace(scenario, seconds=0.2), 0)
    part = worker.go(dataclasses.replace(scenario, seconds=0.2))
    worker.end()
    assert part.errors == [] and all(n > 0 for n in part.acked.values())
    assert worker.verify("deltalog", str(directory), scenario, part.acked) == []
    tid = sorted(part.acked)[0]
    lying = {**part.acked, tid: part.acked[tid] + 1}
    problems = worker.verify("deltalog", str(directory), scenario, lying)
    assert len(problems) == 1 and problems[0].startswith(f"{tid} ")
    worker.close()


def test_a_lost_turn_or_an_error_fails_the_run() -> None:
    """multiprocess_failures turns errors and read-back problems into run failures."""
    from deltalog.bench.runner import MultiProcessPoint, MultiProcessResult

    clean = MultiProcessPoint(100.0, [100.0], 50, 0, [])
    lost = MultiProcessPoint(120.0, [120.0], 60, 1, ["mp-0-1 (3 turns acknowledged): …"])
    result = MultiProcessResult("multiprocess", "x", 2, 2, 0.3, 1, {"a": clean, "b": lost})
    lines = multiprocess_failures(result)
    assert lines == [
        "multiprocess: b had 1 failed invokes",
        "multiprocess: b: mp-0-1 (3 turns acknowledged): …",
    ]
