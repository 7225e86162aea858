"""Issue 18 ("--quick stays under 5 minutes"; 18.5): what --quick leaves out, and the scale windows."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from deltalog.bench import cli
from deltalog.bench.report import evaluate_targets
from deltalog.bench.runner import (
    BenchResult,
    ChatResult,
    RunOptions,
    SaverChatResult,
    _summarise,
    run_bench,
)
from deltalog.bench.scenarios import (
    QUICK_REDUNDANT,
    BenchPlan,
    ChatScenario,
    delta,
    full_plan,
    quick_plan,
    select_plan,
)


def test_quick_keeps_the_target_sizes_and_leaves_out_redundant_peers() -> None:
    """--quick runs the 1,000-turn sf=100 chat without the peers no target compares with;
    the full plan leaves out nobody, and keep_peers (subject, --savers) overrides the skip."""
    quick = {s.name: s for s in quick_plan().chat}
    sf100 = quick["chat-delta-sf100"]
    assert sf100.turns == 1000
    assert set(sf100.skip_peers) == set(QUICK_REDUNDANT)
    assert "memory" not in sf100.skip_peers and "sqlite" not in sf100.skip_peers
    assert "postgres" not in sf100.skip_peers  # usually the best durable peer for bytes
    plan = quick_plan()
    assert plan.throughput is not None and 16 in plan.throughput.threads
    assert plan.throughput.sync_threads == (16,)
    assert plan.multiprocess is not None
    assert (plan.multiprocess.processes, plan.multiprocess.threads) == (4, 4)
    assert all(not s.skip_peers for s in full_plan().chat)
    kept = select_plan(quick_plan(), keep_peers=("lmdb",))
    assert all("lmdb" not in s.skip_peers for s in kept.chat)
    assert kept.throughput is not None and "lmdb" not in kept.throughput.skip_peers


def test_a_skipped_peer_is_not_run_and_is_listed(tmp_path: Path) -> None:
    """A scenario's skip_peers are not run in it (and are named in its result); the other
    scenarios of the run still measure them."""
    base = ChatScenario(name="chat-delta-sf100", field=delta(100), turns=3, read_repeats=1)
    plan = BenchPlan(
        chat=(
            dataclasses.replace(base, skip_peers=("sqlite",)),
            dataclasses.replace(base, name="chat-delta-sf100-b"),
        ),
        throughput=None,
    )
    result = run_bench(
        plan, RunOptions(peers=("memory", "sqlite"), workdir=tmp_path, isolation="inprocess")
    )
    assert result.failures == []
    assert result.meta["cpu_seconds"] > 0  # the load check next to wall_seconds
    first, second = result.chat
    assert set(first.savers) == {"memory"} and first.skipped_peers == ["sqlite"]
    assert set(second.savers) == {"memory", "sqlite"} and second.skipped_peers == []


def test_scale_windows_compare_turns_9000_10000_with_900_1000() -> None:
    """A 10,000-turn run samples the bounds of both windows and reports late ÷ early
    bytes per turn; runs under 1,000 turns have no scale figure."""
    scenario = ChatScenario(name="s", field=delta(100), turns=10_000, sample_every=7)
    assert scenario.scale_windows() == ((900, 1000), (9000, 10_000))
    assert {900, 1000, 9000, 10_000} <= scenario.sample_turns()
    assert ChatScenario(name="s", field=delta(100), turns=999).scale_windows() is None
    # 1,000 B/turn up to turn 1,000, then 1,200 B/turn: late ÷ early = 1.2.
    series = [
        (t, 1000 * min(t, 1000) + 1200 * max(0, t - 1000)) for t in sorted(scenario.sample_turns())
    ]
    res = SaverChatResult(saver="x", label="x", bytes_series=series)
    _summarise(res, scenario, {"get_state": [], "history": [], "delta": []})
    assert res.bytes_per_turn_early == 1000 and res.bytes_per_turn_late == 1200
    assert res.scale_ratio is not None and abs(res.scale_ratio - 1.2) < 1e-9
    assert res.held_scale_ratio is None  # no free list reported


def test_the_scale_target_notes_the_ratio_without_the_free_list() -> None:
    """The databases hold 1,000 B a turn throughout; LMDB's free list shrinks by
    20,000 B over turns 900-1,000 (the file grew less there): the file's ratio is
    1.25, the held bytes' 1.0, and the scale target's verdict says so."""
    scenario = ChatScenario(name="chat-delta-sf100", field=delta(100), turns=10_000)
    turns = sorted(scenario.sample_turns())
    free = [(t, 30_000 if t < 1000 else 10_000) for t in turns]
    series = [(t, 1000 * t + f) for t, f in free]
    res = SaverChatResult(saver="deltalog", label="d", bytes_series=series, free_series=free)
    _summarise(res, scenario, {"get_state": [], "history": [], "delta": []})
    assert res.scale_ratio is not None and abs(res.scale_ratio - 1.25) < 1e-9
    assert res.held_scale_ratio == 1.0
    chat = ChatResult(
        scenario="chat-delta-sf100",
        description="",
        field="DeltaChannel sf=100",
        turns=10_000,
        history_limit=20,
        expected_messages=20_000,
        savers={"deltalog": res},
    )
    result = BenchResult(meta={}, peers={}, chat=[chat], throughput=None, failures=[])
    verdict = next(v for v in evaluate_targets(result) if v.key == "scale_bytes_per_turn")
    assert verdict.status == "FAIL" and verdict.subject_value == res.scale_ratio
    assert verdict.note == "pages the databases hold (used less LMDB's free list): 1.00×"
    again = BenchResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again.chat[0].savers["deltalog"].free_series == free


def test_quick_runs_a_peer_named_with_savers(tmp_path: Path) -> None:
    """``--quick --savers memory,lmdb`` measures lmdb although --quick would leave it out."""
    out = tmp_path / "out"
    argv = ["--quick", "--scenario", "chat-delta-sf100", "--turns", "2", "--savers"]
    argv += ["memory,lmdb", "--subject", "memory", "--isolation", "inprocess", "--no-pg"]
    argv += ["--no-progress", "--no-plots", "--out", str(out)]
    assert cli.main(argv) == 0
    chat = json.loads((out / "results.json").read_text())["chat"][0]
    assert set(chat["savers"]) == {"memory", "lmdb"} and chat["skipped_peers"] == []
