"""Issue 18.4: the CPU a young thread's turn takes, and the share of the saver's calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalog.bench.graphs import thread_config
from deltalog.bench.profile import SaverTimer
from deltalog.bench.turn_cpu import main, measure
from langgraph.checkpoint.memory import InMemorySaver


def test_the_timer_adds_up_each_method_on_its_clock() -> None:
    """SaverTimer (bench.profile) counts each method's outermost calls and their time
    on the clock it is given (turn_cpu gives it the calling thread's CPU)."""
    saver = InMemorySaver()
    ticks = iter(range(100))
    timer = SaverTimer(saver, clock=lambda: float(next(ticks)))
    config = thread_config("t")
    assert saver.get_tuple(config) is None
    assert saver.get_tuple(config) is None
    assert list(saver.list(config)) == []
    assert timer.method_calls == {"get_tuple": 2, "list": 1}
    assert timer.seconds == {"get_tuple": 2.0, "list": 1.0}  # one tick a call
    timer.reset()
    assert (timer.seconds, timer.method_calls) == ({}, {})
    timer.close()


def test_every_saver_makes_the_chat_graphs_calls_and_its_cpu_adds_up(tmp_path: Path) -> None:
    """A turn of the chat graph puts three checkpoints and two tasks' writes and reads
    the latest checkpoint once, on every saver; the saver's calls take part of the
    process's CPU, never more."""
    results = measure(
        ("memory", "deltalog"), "sync", threads=2, turns=3, rounds=2, workdir=tmp_path
    )
    assert [r.saver for r in results] == ["memory", "deltalog"]
    for r in results:
        assert r.turns == 6 and r.durability == "sync" and len(r.rounds_cpu_ms) == 2
        calls = r.calls_per_turn
        assert (calls["put"], calls["put_writes"], calls["get_tuple"]) == (3, 2, 1), calls
        assert 0 < r.saver_cpu_ms < max(r.rounds_cpu_ms), r
        assert r.cpu_ms > 0 and r.wall_ms > 0
        assert set(r.cpu_us_per_call) >= {"put", "put_writes", "get_tuple"}


def test_threads_running_at_once_make_the_same_calls_a_turn(tmp_path: Path) -> None:
    """``concurrent``: the round's young threads are shared by OS threads running at
    once; every turn still makes the chat graph's calls, and the rate is reported."""
    (r,) = measure(("deltalog",), threads=4, turns=2, rounds=1, workdir=tmp_path, concurrent=3)
    assert (r.concurrent, r.turns) == (3, 8)
    assert (r.calls_per_turn["put"], r.calls_per_turn["put_writes"]) == (3, 2)
    assert r.turns_per_s == pytest.approx(1000 / r.wall_ms)


def test_the_command_prints_a_table_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cpu.json"
    args = ["--savers", "memory,deltalog", "--threads", "1", "--turns", "2", "--rounds", "1"]
    assert main([*args, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| deltalog |" in printed and "÷ memory" in printed
    assert [r["saver"] for r in json.loads(out.read_text())] == ["memory", "deltalog"]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"savers": ("memory", "nope")}, "nope"),
        ({"savers": ("deltalog-async",)}, "deltalog-async"),
        ({"durability": "later"}, "later"),
        ({"threads": 0}, "threads"),
        ({"concurrent": 0}, "concurrent"),
        ({"threads": 2, "concurrent": 3}, "concurrent 3"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(
    tmp_path: Path, kwargs: dict[str, object], named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        measure(workdir=tmp_path, **kwargs)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
