"""Issue 18.4: processes × threads on one store path: turns/s, 0 errors, every acknowledged turn read back."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from deltalog.bench.report import build_tables, evaluate_targets
from deltalog.bench.runner import (
    BenchResult,
    MultiProcessPoint,
    MultiProcessResult,
    MultiProcessWorker,
    RunOptions,
    WorkerError,
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
    and every acknowledged turn present; the ratio target is evaluated from the rates.
    InMemorySaver runs the same with a saver in each process (the ceiling), each process
    reading its own threads back."""
    result = run_bench(
        _plan(), RunOptions(peers=("deltalog", "sqlite", "memory"), workdir=tmp_path)
    )
    assert result.failures == []
    mp = result.multiprocess
    assert mp is not None and set(mp.savers) == {"deltalog", "sqlite", "memory"}
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


def test_a_per_process_saver_is_read_back_by_its_own_process(tmp_path: Path) -> None:
    """InMemorySaver's threads are read back through the saver the process has open
    (a fresh one would be empty): a lie about one thread's turns is named."""
    scenario = dataclasses.replace(_plan().multiprocess or MULTIPROCESS, seconds=0.2)
    worker = MultiProcessWorker()
    worker.prepare("memory", str(tmp_path / "store"), scenario, 0)
    part = worker.go(scenario)
    assert part.errors == [] and all(n > 0 for n in part.acked.values())
    assert worker.verify_open(scenario, part.acked) == []
    tid = sorted(part.acked)[-1]
    problems = worker.verify_open(scenario, {**part.acked, tid: part.acked[tid] - 1})
    assert len(problems) == 1 and problems[0].startswith(f"{tid} ")
    worker.end()
    with pytest.raises(WorkerError, match="call prepare first"):
        worker.verify_open(scenario, part.acked)


def _mp_result(rates: dict[str, float]) -> BenchResult:
    points = {n: MultiProcessPoint(r, [r], 10, 0, []) for n, r in rates.items()}
    mp = MultiProcessResult("multiprocess", "x", 4, 4, 0.3, 1, points)
    peers = {n: {"durable": n != "memory"} for n in rates}
    return BenchResult(meta={}, peers=peers, chat=[], throughput=None, failures=[], multiprocess=mp)


def test_the_verdict_names_the_ceiling_inmemorysaver_reached() -> None:
    """When InMemorySaver in as many processes stays under 3× SqliteSaver, no saver can
    meet the target on this machine, and the verdict's note says how far it got; above
    it the note stays empty."""
    low = _mp_result({"deltalog": 300.0, "sqlite": 250.0, "memory": 500.0})
    verdict = next(v for v in evaluate_targets(low) if v.key == "multiprocess_vs_sqlite")
    assert verdict.status == "FAIL" and verdict.ratio == pytest.approx(1.2)
    assert verdict.note == "InMemorySaver, storing nothing, reached 2.00× here"
    high = _mp_result({"deltalog": 300.0, "sqlite": 250.0, "memory": 1000.0})
    verdict = next(v for v in evaluate_targets(high) if v.key == "multiprocess_vs_sqlite")
    assert verdict.status == "FAIL" and verdict.note == ""


def test_the_table_marks_the_per_process_saver() -> None:
    """The multi-process table's InMemorySaver column says it is a store per process."""
    tables = build_tables(_mp_result({"deltalog": 300.0, "sqlite": 250.0, "memory": 500.0}))
    table = next(t for t in tables if t.title.startswith("multiprocess"))
    assert table.headers == [
        "figure",
        "deltalog",
        "sqlite",
        "memory (a store per process, storing nothing)",
    ]
    assert table.rows[0][3].text == "500/s (0.60×)"


def test_a_lost_turn_or_an_error_fails_the_run() -> None:
    """multiprocess_failures turns errors and read-back problems into run failures."""
    clean = MultiProcessPoint(100.0, [100.0], 50, 0, [])
    lost = MultiProcessPoint(120.0, [120.0], 60, 1, ["mp-0-1 (3 turns acknowledged): …"])
    result = MultiProcessResult("multiprocess", "x", 2, 2, 0.3, 1, {"a": clean, "b": lost})
    lines = multiprocess_failures(result)
    assert lines == [
        "multiprocess: b had 1 failed invokes",
        "multiprocess: b: mp-0-1 (3 turns acknowledged): …",
    ]
