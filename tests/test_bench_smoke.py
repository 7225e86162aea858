"""Smoke tests of the benchmark package (``deltalog.bench``) on tiny configurations."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import zstandard
from deltalog.bench import cli, peers, raw_ops
from deltalog.bench.graphs import (
    build_graph,
    canonical,
    content_floor,
    expected_messages,
    human_message,
)
from deltalog.bench.peers import REGISTRY, OpenPeer, PeerContext, PeerSpec, memory_saver_bytes
from deltalog.bench.pgserver import find_pg_bindir, local_postgres, postgres_reachable
from deltalog.bench.report import TARGETS, evaluate_targets
from deltalog.bench.runner import RunOptions, percentile, run_bench
from deltalog.bench.scenarios import (
    BenchPlan,
    ChatScenario,
    delta,
    quick_plan,
    select_plan,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

DELTALOG_IMPORTS = REGISTRY["deltalog"].check() is None
SAVERS = "memory,sqlite" + (",deltalog" if DELTALOG_IMPORTS else "")


class DroppingSaver(InMemorySaver):
    """An InMemorySaver that silently loses the write of the AI reply of turn 1."""

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        for _channel, value in writes:
            if isinstance(value, list) and any(getattr(m, "id", None) == "a1" for m in value):
                return
        super().put_writes(config, writes, task_id, task_path)


@contextlib.contextmanager
def _open_dropping(ctx: PeerContext) -> Iterator[OpenPeer]:
    saver = DroppingSaver()
    yield OpenPeer(saver, lambda: memory_saver_bytes(saver))


DROPPING = PeerSpec("dropping", "DroppingSaver", _open_dropping, durable=False)


def _tiny_plan(turns: int = 5) -> BenchPlan:
    plan = select_plan(
        quick_plan(), scenarios=["chat-delta-sf100", "throughput"], turns=turns, threads=[1, 2]
    )
    assert plan.throughput is not None
    return dataclasses.replace(
        plan, throughput=dataclasses.replace(plan.throughput, seconds=0.2, repeats=1)
    )


def test_cli_inprocess_writes_json_markdown_and_plots(tmp_path: Path) -> None:
    """A 5-turn run of every figure writes results.json, results.md and the PNG plots."""
    out = tmp_path / "out"
    code = cli.main(
        [
            "--quick",
            "--scenario",
            "chat-delta-sf100,agent-delta-sf100,chat-large-sf10,throughput",
            "--turns",
            "5",
            "--threads",
            "1,2",
            "--savers",
            SAVERS,
            "--isolation",
            "inprocess",
            "--no-pg",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    data = json.loads((out / "results.json").read_text())
    assert data["ok"] is True
    assert data["failures"] == []
    assert {"meta", "peers", "chat", "throughput", "ratios", "targets", "subject"} <= set(data)
    assert data["meta"]["scenarios"] == [
        "chat-delta-sf100",
        "agent-delta-sf100",
        "chat-large-sf10",
        "throughput",
    ]
    chat = {c["scenario"]: c for c in data["chat"]}
    sf100 = chat["chat-delta-sf100"]
    assert sf100["turns"] == 5
    assert sf100["expected_messages"] == 10
    for name in SAVERS.split(","):
        res = sf100["savers"][name]
        assert res["correct"] is True, res
        assert res["error"] is None
        assert len(res["invoke_ms"]) == 5
        assert res["bytes_series"][-1][0] == 5
        # LMDB's free list, reported by deltalog's store alone, within its bytes.
        free = dict(res["free_series"])
        assert (name == "deltalog") == bool(free)
        assert all(0 <= free[t] < b for t, b in res["bytes_series"] if t in free)
        assert res["total_bytes"] > 0
        for key in ("invoke_early", "invoke_late", "get_state", "history", "delta_history"):
            assert set(res[key]) == {"p50_ms", "p95_ms", "n"}
        assert res["rss_peak_bytes"] is None  # in-process: no per-saver RSS
        assert res["rss_peak_vs_memory"] is None
    assert chat["agent-delta-sf100"]["expected_messages"] > 10  # tool calls happened
    # The content floor: mean zstd size of turns 2..5's new text, and each
    # saver's bytes/turn over the same turns divided by it.
    for name, c in chat.items():
        assert c["content_floor_last100"] > 0 and c["content_floor_total"] > 0, name
        for res in c["savers"].values():
            assert res["floor_ratio_last100"] == pytest.approx(
                res["bytes_per_turn_last100"] / c["content_floor_last100"], rel=1e-3
            )
    large = chat["chat-large-sf10"]
    assert large["turns"] == 5 and large["expected_messages"] == 10
    # ~10 KB of text per turn against ~900 characters: a floor several times higher.
    assert large["content_floor_last100"] > 3 * sf100["content_floor_last100"]
    tp = data["throughput"]
    assert tp["threads"] == [1, 2]
    for name in SAVERS.split(","):
        for kind in ("savers", "puts"):  # graph turns, raw durable puts
            assert [p["threads"] for p in tp[kind][name]] == [1, 2]
            assert all(p["checkpoints_per_s"] > 0 for p in tp[kind][name])
        # durability="sync" graph turns run at the highest level given (16 is not).
        assert [p["threads"] for p in tp["sync"][name]] == [2]
        assert tp["sync"][name][0]["checkpoints_per_s"] > 0
    targets = {t["key"]: t for t in data["targets"]}
    assert len(targets) == len(TARGETS) == 24
    if DELTALOG_IMPORTS:  # a target on deltalog's figure itself, not against a peer
        floor_large = targets["floor_large"]
        assert floor_large["status"] in ("PASS", "FAIL") and floor_large["against"] is None
        assert floor_large["ratio"] == pytest.approx(
            large["savers"]["deltalog"]["floor_ratio_last100"], rel=1e-3
        )
        assert floor_large["note"] == "run at 5 turns, target at 500"
    puts16 = targets["puts16_vs_sqlite"]  # 16 threads were not run here
    assert puts16["status"] == "n/a" and "16 threads" in puts16["note"]
    assert set(data["ratios"]) >= {"throughput", "throughput-puts"}
    pngs = sorted(p.name for p in out.glob("*.png"))
    for scenario in ("chat-delta-sf100", "agent-delta-sf100"):
        for kind in ("bytes", "latency", "reads"):
            assert f"{scenario}-{kind}.png" in pngs
    assert "throughput.png" in pngs and "throughput-puts.png" in pngs
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (out / "results.md").read_text()
    assert "chat-delta-sf100" in markdown and "chat-large-sf10" in markdown
    assert "bytes/turn ÷ content floor" in markdown and "content floor (zstd-3" in markdown

    # --from-json re-renders a finished run without running anything.
    again = tmp_path / "again"
    code = cli.main(["--from-json", str(out / "results.json"), "--out", str(again), "--no-plots"])
    assert code == 0
    assert (again / "results.md").read_text() == (out / "results.md").read_text()


def test_process_isolation_measures_rss(tmp_path: Path) -> None:
    """Spawned workers report their own peak RSS and the same final state."""
    plan = BenchPlan(
        chat=(ChatScenario(name="chat-delta-sf10", field=delta(10), turns=4, read_repeats=1),),
        throughput=None,
    )
    result = run_bench(plan, RunOptions(peers=("memory", "sqlite"), workdir=tmp_path))
    assert result.ok, result.failures
    savers = result.chat[0].savers
    for res in savers.values():
        assert res.correct is True
        assert res.rss_peak_bytes is not None and res.rss_baseline_bytes is not None
        assert res.rss_peak_bytes >= res.rss_baseline_bytes > 0
    memory_peak = savers["memory"].rss_peak_bytes
    assert memory_peak is not None
    assert savers["memory"].rss_peak_vs_memory == 1.0
    sqlite_peak = savers["sqlite"].rss_peak_bytes
    assert sqlite_peak is not None
    assert savers["sqlite"].rss_peak_vs_memory == sqlite_peak / memory_peak


def test_content_floor_is_the_compressed_new_text_of_each_turn() -> None:
    """issue 18.1: the floor of a turn is zstd level 3 of that turn's new text alone
    (human message, model reply, tool call arguments and tool result)."""
    scenario = ChatScenario(name="agent", field=delta(3), turns=6, tool_every=3)
    floors = content_floor(scenario)
    assert len(floors) == scenario.turns
    messages = expected_messages(scenario)
    zstd = zstandard.ZstdCompressor(level=3)
    for turn, floor in enumerate(floors):
        texts = [
            str(m.content) + "".join(json.dumps(c["args"]) for c in getattr(m, "tool_calls", []))
            for m in messages
            if (m.id or "")[1:].split("-")[0] == str(turn)
        ]
        assert floor == len(zstd.compress("\n".join(texts).encode()))
    # Turns 2 and 5 call the tool (an 8,000-character result each): floors 6x the others.
    assert min(floors[2], floors[5]) > 5 * max(floors[0], floors[1], floors[3], floors[4])


def test_wrong_state_fails_the_run(tmp_path: Path) -> None:
    """A saver that loses one write ends with a wrong state, and the run fails."""
    plan = BenchPlan(
        chat=(ChatScenario(name="chat-delta-sf100", field=delta(100), turns=4, read_repeats=1),),
        throughput=None,
    )
    options = RunOptions(
        peers=("memory", "dropping"),
        workdir=tmp_path,
        isolation="inprocess",
        extra_peers={"dropping": DROPPING},
    )
    result = run_bench(plan, options)
    assert not result.ok
    savers = result.chat[0].savers
    assert savers["memory"].correct is True
    assert savers["dropping"].correct is False
    assert savers["dropping"].mismatch is not None and "a1" in savers["dropping"].mismatch
    assert any("dropping has a wrong state" in f for f in result.failures)


def test_cli_exits_1_on_wrong_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``deltalog bench`` exits 1 and records ok=false when a final state is wrong."""
    monkeypatch.setitem(peers.REGISTRY, "dropping", DROPPING)
    out = tmp_path / "out"
    code = cli.main(
        [
            "--scenario",
            "chat-delta-sf100",
            "--turns",
            "4",
            "--savers",
            "memory,dropping",
            "--subject",
            "dropping",
            "--isolation",
            "inprocess",
            "--no-plots",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert code == 1
    data = json.loads((out / "results.json").read_text())
    assert data["ok"] is False
    assert data["chat"][0]["savers"]["dropping"]["correct"] is False


def test_cli_rejects_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown savers or scenarios are usage errors (exit 2) naming the choices."""
    assert cli.main(["--savers", "nosuch"]) == 2
    assert "choose from" in capsys.readouterr().err
    assert cli.main(["--scenario", "nosuch"]) == 2
    assert "chat-delta-sf100" in capsys.readouterr().err
    assert cli.main(["--help"]) == 0
    assert "--quick" in capsys.readouterr().out


def test_expected_messages_match_a_real_graph() -> None:
    """The saver-free reference equals what the agent graph produces on InMemorySaver."""
    scenario = ChatScenario(name="agent", field=delta(3), turns=7, tool_every=3)
    graph = build_graph(scenario, InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    for turn in range(scenario.turns):
        graph.invoke({"messages": [human_message(scenario, turn)]}, config)
    got = canonical(graph.get_state(config).values["messages"])
    assert got == canonical(expected_messages(scenario))
    assert sum(1 for m in got if m[0] == "tool") == 2


def test_scenarios_sample_the_last_100_turns() -> None:
    """Bytes are sampled at turn N-100 so bytes/turn over the last 100 turns is exact."""
    scenario = ChatScenario(name="x", field=delta(100), turns=1000, sample_every=30)
    assert {1, 900, 1000} <= scenario.sample_turns()
    with pytest.raises(ValueError, match="unknown scenario"):
        select_plan(quick_plan(), scenarios=["nosuch"])
    with pytest.raises(ValueError, match="snapshot_frequency"):
        delta(0)
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5


def test_targets_are_na_without_subject(tmp_path: Path) -> None:
    """Targets report n/a, not PASS or FAIL, when the subject did not run."""
    plan = BenchPlan(
        chat=(ChatScenario(name="chat-delta-sf100", field=delta(100), turns=2, read_repeats=1),),
        throughput=None,
    )
    result = run_bench(plan, RunOptions(peers=("memory",), isolation="inprocess"))
    verdicts = evaluate_targets(result, subject="deltalog")
    assert {v.status for v in verdicts} == {"n/a"}


def test_throughput_verdicts_name_the_in_memory_ceiling() -> None:
    """A rate target that InMemorySaver itself misses says so in its note, with the
    ratio InMemorySaver reached in the same run; one it reaches has no such note.
    A real 16-thread run, then InMemorySaver's graph rate set to 1.5x and to 3x
    SqliteSaver's (its figure is the only input the note depends on)."""
    plan = select_plan(quick_plan(), scenarios=["throughput"], threads=[16])
    assert plan.throughput is not None
    plan = dataclasses.replace(
        plan, throughput=dataclasses.replace(plan.throughput, seconds=0.2, repeats=1)
    )
    options = RunOptions(peers=("deltalog", "memory", "sqlite"), isolation="inprocess")
    result = run_bench(plan, options)
    assert result.throughput is not None
    sqlite = result.throughput.savers["sqlite"][0].checkpoints_per_s
    for factor, note in ((1.5, "InMemorySaver, storing nothing, reached 1.50× here"), (3, "")):
        memory = [
            dataclasses.replace(p, checkpoints_per_s=sqlite * factor)
            for p in result.throughput.savers["memory"]
        ]
        savers = {**result.throughput.savers, "memory": memory}
        changed = dataclasses.replace(
            result, throughput=dataclasses.replace(result.throughput, savers=savers)
        )
        verdict = next(
            v
            for v in evaluate_targets(changed, subject="deltalog")
            if v.key == "throughput16_vs_sqlite"
        )
        assert verdict.status in ("PASS", "FAIL") and verdict.note == note


def _pytest_raw_ops(*extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DELTALOG_RAW_OPS_TURNS": "3", "DELTALOG_BENCH_PG": ""}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            raw_ops.__file__,
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "memory or (sqlite and not async)",
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_raw_ops_run_once_with_benchmark_disabled() -> None:
    """The pytest-benchmark raw operations run (once each) under --benchmark-disable."""
    proc = _pytest_raw_ops("--benchmark-disable")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "10 passed" in proc.stdout


def test_raw_ops_skip_without_the_plugin() -> None:
    """With the pytest-benchmark plugin disabled every raw-ops case skips, none fails."""
    proc = _pytest_raw_ops("-p", "no:benchmark")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "10 skipped" in proc.stdout


@pytest.mark.postgres
@pytest.mark.skipif(find_pg_bindir() is None, reason="postgresql server binaries not installed")
def test_local_postgres_starts_and_the_postgres_peer_measures_bytes(tmp_path: Path) -> None:
    """The throwaway server answers, and PostgresSaver's relation sizes are counted."""
    with local_postgres() as dsn:
        assert postgres_reachable(dsn) is None
        ctx = PeerContext(workdir=tmp_path, pg_dsn=dsn)
        scenario = ChatScenario(name="pg", field=delta(100), turns=2)
        with REGISTRY["postgres"].open(ctx) as peer:
            before = peer.bytes_fn()
            graph = build_graph(scenario, peer.saver)
            for turn in range(scenario.turns):
                graph.invoke(
                    {"messages": [human_message(scenario, turn)]},
                    {"configurable": {"thread_id": "t"}},
                )
            assert peer.bytes_fn() > before


def test_maintenance_figures_run_on_a_small_thread(tmp_path: Path) -> None:
    """The copy/prune/compact measurement runs, keeps the latest state and reports every figure."""
    from deltalog.bench.maintenance import run

    figures = run(120, tmp_path)
    assert figures["build"]["checkpoints"] >= 120
    assert figures["copy_thread"]["checkpoints"] == figures["build"]["checkpoints"]
    assert figures["prune_dry_run"]["dry_run"] is True
    assert figures["prune_keep_latest"]["checkpoints"] == figures["prune_dry_run"]["checkpoints"]
    assert figures["prune_keep_latest_reducers"]["seeds"] >= 0
    assert figures["compact"]["bytes_after"] < figures["compact"]["bytes_before"]
    assert figures["verify_ok"] is True


def test_first_benchmark_reports_three_savers(tmp_path: Path) -> None:
    """The engine-core benchmark runs the chat on three savers and reports every figure."""
    from deltalog.bench.first import run

    figures = run(6, tmp_path)
    assert set(figures) == {"deltalog", "memory", "sqlite"}
    for f in figures.values():
        assert f["bytes"] > 0 and f["get_state_p50_ms"] > 0 and f["invoke_p50_ms"] > 0
