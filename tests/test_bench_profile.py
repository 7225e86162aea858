"""Issue 18.3: the profile splits each read and turn into the saver's time and LangGraph's own."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from deltalog.bench import cli
from deltalog.bench.graphs import thread_config
from deltalog.bench.profile import SaverTimer, profile_savers
from langgraph.checkpoint.memory import InMemorySaver


def test_the_timer_counts_saver_calls_per_thread() -> None:
    """Wrapped saver methods add their time to the calling thread's side, once per
    outermost call, and a list() is timed while it is consumed."""
    saver = InMemorySaver()
    timer = SaverTimer(saver)
    config = thread_config("t")
    assert saver.get_tuple(config) is None
    assert timer.calls == 1 and timer.own_thread > 0 and timer.other_threads == 0
    worker = threading.Thread(target=lambda: list(saver.list(config)))
    worker.start()
    worker.join()
    assert timer.calls == 2 and timer.other_threads > 0
    timer.reset()
    assert (timer.calls, timer.own_thread, timer.other_threads) == (0, 0.0, 0.0)


def test_profile_splits_every_call_on_both_savers(tmp_path: Path) -> None:
    """get_state, get_state_history and invoke are timed on deltalog and InMemorySaver;
    LangGraph's own time is the wall time minus the saver's, and the saver was called."""
    timings = profile_savers(turns=4, repeats=2, use_cprofile=True, workdir=tmp_path)
    assert [(t.op, t.saver) for t in timings] == [
        (op, saver)
        for saver in ("deltalog", "memory")
        for op in ("get_state", "get_state_history", "invoke")
    ]
    for t in timings:
        assert t.wall_ms > 0 and 0 < t.saver_ms <= t.wall_ms, t
        assert abs(t.langgraph_ms - (t.wall_ms - t.saver_ms)) < 0.01, t
        assert t.saver_calls >= 1 and t.repeats == 2 and t.gc_ms >= 0
        assert t.top and t.functions and all(seconds >= 0 for _, seconds in t.top)


def test_bench_profile_flag_writes_profile_json(tmp_path: Path) -> None:
    """``deltalog bench --profile`` runs the profile alone and writes profile.json."""
    code = cli.main(["--profile", "--turns", "3", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "profile.json").read_text())
    assert {(t["op"], t["saver"]) for t in data} >= {
        ("get_state", "deltalog"),
        ("invoke", "memory"),
    }
