"""Turn a :class:`~deltalog.bench.runner.BenchResult` into tables, JSON and plots.

* :func:`render` prints, per scenario, the absolute figures of every saver, the
  ratio of the subject saver (``deltalog`` by default) to each peer, the
  throughput table and the performance targets (ratios the subject must meet,
  see docs/benchmarks.md) with PASS/FAIL.
* :func:`write_json` writes ``results.json`` — the raw result plus the ratios
  and target verdicts, so scripts never recompute them.
* :func:`write_plots` writes PNGs next to the JSON with matplotlib's Agg
  backend: stored bytes and bytes added per turn against turns, invoke latency
  against turns (rolling median), read latencies, and throughput (graph turns,
  and raw durable puts) against concurrency; one line (or bar) per saver.

Ratios are ``subject / peer``: below 1 means the subject stores fewer bytes or
answers faster; for throughput (checkpoints per second) above 1 is better.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from deltalog.bench.runner import (
    MULTIPROCESS_PER_PROCESS,
    BenchResult,
    ChatResult,
    LatencyStats,
    MultiProcessResult,
    SaverChatResult,
    ThroughputPoint,
    ThroughputResult,
)
from rich.console import Console
from rich.table import Table

__all__ = [
    "METRICS",
    "TARGETS",
    "Cell",
    "Metric",
    "TableData",
    "Target",
    "TargetVerdict",
    "build_tables",
    "evaluate_targets",
    "failure_summary",
    "format_bytes",
    "format_ms",
    "ratio_table",
    "render",
    "write_json",
    "write_markdown",
    "write_plots",
]

# --------------------------------------------------------------------------- metrics


@dataclass(frozen=True)
class Metric:
    """One figure of a chat scenario, read from a :class:`SaverChatResult`.

    Attributes:
        key: Stable name used in JSON and targets.
        title: Column or row heading.
        unit: ``"bytes"``, ``"ms"`` or ``"ratio"`` (a figure already divided by
            a reference, shown as ``1.23×`` and left out of the ratio tables);
            decides formatting.
        get: Extracts the value (``None`` when not measured).
        delta_only: Only meaningful for DeltaChannel scenarios.
    """

    key: str
    title: str
    unit: Literal["bytes", "ms", "ratio"]
    get: Callable[[SaverChatResult], float | None]
    delta_only: bool = False


def _p50(stats: LatencyStats | None) -> float | None:
    return None if stats is None else stats.p50_ms


def _p95(stats: LatencyStats | None) -> float | None:
    return None if stats is None else stats.p95_ms


def _as_float(value: float | int | None) -> float | None:
    return None if value is None else float(value)


def _rss_growth(res: SaverChatResult) -> float | None:
    if res.rss_peak_bytes is None or res.rss_baseline_bytes is None:
        return None
    return float(res.rss_peak_bytes - res.rss_baseline_bytes)


#: Figures reported per saver and per chat scenario, in table order.
METRICS: tuple[Metric, ...] = (
    Metric("total_bytes", "stored", "bytes", lambda r: _as_float(r.total_bytes)),
    Metric(
        "bytes_per_turn_last100",
        "bytes/turn (last 100)",
        "bytes",
        lambda r: r.bytes_per_turn_last100,
    ),
    Metric(
        "floor_ratio_last100",
        "bytes/turn ÷ content floor",
        "ratio",
        lambda r: r.floor_ratio_last100,
    ),
    Metric("invoke_early_p50", "invoke p50 (first 50)", "ms", lambda r: _p50(r.invoke_early)),
    Metric("invoke_late_p50", "invoke p50 (last 50)", "ms", lambda r: _p50(r.invoke_late)),
    Metric("invoke_late_p95", "invoke p95 (last 50)", "ms", lambda r: _p95(r.invoke_late)),
    Metric("get_state_p50", "get_state p50", "ms", lambda r: _p50(r.get_state)),
    Metric("history_p50", "get_state_history p50", "ms", lambda r: _p50(r.history)),
    Metric(
        "delta_history_p50",
        "delta history p50",
        "ms",
        lambda r: _p50(r.delta_history),
        delta_only=True,
    ),
    Metric("rss_peak", "peak RSS", "bytes", lambda r: _as_float(r.rss_peak_bytes)),
    Metric("rss_growth", "RSS growth", "bytes", lambda r: _rss_growth(r)),
    Metric(
        "rss_peak_vs_memory", "peak RSS ÷ InMemorySaver", "ratio", lambda r: r.rss_peak_vs_memory
    ),
    Metric(
        "scale_ratio",
        "bytes/turn, last tenth ÷ tenth before turns/10",
        "ratio",
        lambda r: r.scale_ratio,
    ),
)

_METRICS_BY_KEY = {m.key: m for m in METRICS}


def format_bytes(value: float | None) -> str:
    """``1536`` → ``1.5 KiB``; ``None`` → ``–``."""
    if value is None:
        return "–"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def format_ms(value: float | None) -> str:
    """Milliseconds with three significant digits; ``None`` → ``–``."""
    if value is None:
        return "–"
    if value >= 100:
        return f"{value:.0f} ms"
    if value >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def _format(unit: str, value: float | None) -> str:
    if unit == "ratio":
        return "–" if value is None else f"{value:.2f}×"
    return format_bytes(value) if unit == "bytes" else format_ms(value)


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    """A ratio the subject saver must meet (docs/benchmarks.md), stated at 1,000 turns.

    Attributes:
        key: Stable name.
        text: What the target says, for the table.
        scenario: Scenario the figure comes from.
        metric: A :data:`METRICS` key, ``"throughput@<threads>"`` (graph turns),
            ``"sync@<threads>"`` (graph turns with ``durability="sync"``),
            ``"puts@<threads>"`` (raw writes) or ``"multiprocess"`` (turns/s of
            the multi-process scenario).
        against: A peer name, ``"best"`` (best durable peer for bytes, best
            peer otherwise), or ``"self"`` for a metric that is a ratio
            already (``floor_ratio_last100``): the bound is on its value.
        limit: The bound on ``subject / against``.
        higher_is_better: ``True`` for throughput (ratio must be ≥ limit).
        turns: Turns the target is stated at (a shorter run says so in its note).
        exact_turns: The verdict needs a run at exactly ``turns`` (the scale
            targets): any other run is ``n/a``.
    """

    key: str
    text: str
    scenario: str
    metric: str
    against: str
    limit: float
    higher_is_better: bool = False
    turns: int = 1000
    exact_turns: bool = False


#: The performance targets the engine must meet (ratios to peers in the same run).
TARGETS: tuple[Target, ...] = (
    Target(
        "storage_sf100_total",
        "DeltaChannel sf=100 stored bytes ≤ 0.25× best durable peer",
        "chat-delta-sf100",
        "total_bytes",
        "best",
        0.25,
    ),
    Target(
        "storage_sf100_per_turn",
        "DeltaChannel sf=100 bytes/turn (last 100) ≤ 0.15× best durable peer",
        "chat-delta-sf100",
        "bytes_per_turn_last100",
        "best",
        0.15,
    ),
    Target(
        "storage_add_messages_total",
        "add_messages stored bytes ≤ 0.05× SqliteSaver",
        "chat-add_messages",
        "total_bytes",
        "sqlite",
        0.05,
    ),
    Target(
        "get_state_vs_memory",
        "get_state (last turn) ≤ 1.0× InMemorySaver",
        "chat-delta-sf100",
        "get_state_p50",
        "memory",
        1.0,
    ),
    Target(
        "get_state_vs_sqlite",
        "get_state (last turn) ≤ 0.7× SqliteSaver",
        "chat-delta-sf100",
        "get_state_p50",
        "sqlite",
        0.7,
    ),
    Target(
        "history_vs_memory",
        "get_state_history(limit=20) ≤ 0.5× InMemorySaver",
        "chat-delta-sf100",
        "history_p50",
        "memory",
        0.5,
    ),
    Target(
        "invoke_vs_memory",
        "invoke p50 (last 50 turns) ≤ 1.2× InMemorySaver",
        "chat-delta-sf100",
        "invoke_late_p50",
        "memory",
        1.2,
    ),
    Target(
        "invoke_vs_sqlite",
        "invoke p50 (last 50 turns) ≤ 0.8× SqliteSaver",
        "chat-delta-sf100",
        "invoke_late_p50",
        "sqlite",
        0.8,
    ),
    Target(
        "puts16_vs_sqlite",
        "write throughput: durable puts/s with 16 threads ≥ 2× SqliteSaver",
        "throughput",
        "puts@16",
        "sqlite",
        2.0,
        higher_is_better=True,
    ),
    Target(
        "throughput16_vs_sqlite",
        "graph turns: checkpoints/s with 16 threads (durable) ≥ 2× SqliteSaver",
        "throughput",
        "throughput@16",
        "sqlite",
        2.0,
        higher_is_better=True,
    ),
    # Issue 18, the second wave: against the content floor and InMemorySaver.
    Target(
        "floor_sf100",
        "DeltaChannel sf=100 bytes/turn (last 100) ≤ 1.5× content floor",
        "chat-delta-sf100",
        "floor_ratio_last100",
        "self",
        1.5,
    ),
    Target(
        "floor_add_messages",
        "add_messages bytes/turn (last 100) ≤ 2× content floor",
        "chat-add_messages",
        "floor_ratio_last100",
        "self",
        2.0,
    ),
    Target(
        "floor_large",
        "large messages (sf=10) bytes/turn (last 100) ≤ 1.5× content floor",
        "chat-large-sf10",
        "floor_ratio_last100",
        "self",
        1.5,
        turns=500,
    ),
    Target(
        "rss_sf100_vs_memory",
        "DeltaChannel sf=100 peak RSS ≤ 1.1× InMemorySaver",
        "chat-delta-sf100",
        "rss_peak",
        "memory",
        1.1,
    ),
    Target(
        "rss_large_vs_memory",
        "large messages peak RSS ≤ 1.1× InMemorySaver",
        "chat-large-sf10",
        "rss_peak",
        "memory",
        1.1,
        turns=500,
    ),
    Target(
        "get_state_vs_memory_2",
        "get_state (last turn) ≤ 0.25× InMemorySaver",
        "chat-delta-sf100",
        "get_state_p50",
        "memory",
        0.25,
    ),
    Target(
        "history_vs_memory_2",
        "get_state_history(limit=20) ≤ 0.25× InMemorySaver",
        "chat-delta-sf100",
        "history_p50",
        "memory",
        0.25,
    ),
    Target(
        "invoke_vs_memory_2",
        "invoke p50 (last 50 turns) ≤ 0.5× InMemorySaver",
        "chat-delta-sf100",
        "invoke_late_p50",
        "memory",
        0.5,
    ),
    Target(
        "invoke_large_vs_memory",
        "large messages invoke p50 (last 50 turns) ≤ 1.0× InMemorySaver",
        "chat-large-sf10",
        "invoke_late_p50",
        "memory",
        1.0,
        turns=500,
    ),
    Target(
        "throughput16_vs_memory",
        "graph turns: checkpoints/s with 16 threads ≥ 0.9× InMemorySaver",
        "throughput",
        "throughput@16",
        "memory",
        0.9,
        higher_is_better=True,
    ),
    Target(
        "throughput16_sync_vs_memory",
        'graph turns, durability="sync": checkpoints/s with 16 threads ≥ 0.9× InMemorySaver',
        "throughput",
        "sync@16",
        "memory",
        0.9,
        higher_is_better=True,
    ),
    Target(
        "multiprocess_vs_sqlite",
        "4 processes × 4 threads on one store: turns/s ≥ 3× SqliteSaver on one file",
        "multiprocess",
        "multiprocess",
        "sqlite",
        3.0,
        higher_is_better=True,
    ),
    Target(
        "scale_bytes_per_turn",
        "10,000-turn sf=100 chat: bytes/turn over turns 9,000–10,000 ≤ 1.1× over 900–1,000",
        "chat-delta-sf100",
        "scale_ratio",
        "self",
        1.1,
        turns=10_000,
        exact_turns=True,
    ),
    Target(
        "scale_get_state_vs_memory",
        "10,000-turn sf=100 chat: get_state ≤ 0.3× InMemorySaver",
        "chat-delta-sf100",
        "get_state_p50",
        "memory",
        0.3,
        turns=10_000,
        exact_turns=True,
    ),
)


@dataclass(frozen=True)
class TargetVerdict:
    """How the subject did against one target.

    Attributes:
        key: The target's key.
        text: The target's text.
        turns: Turns of the scenario the figure comes from (``None`` for throughput).
        against: The peer actually compared with (``best`` resolved).
        subject_value: The subject's figure.
        peer_value: The peer's figure.
        ratio: ``subject_value / peer_value``.
        limit: The bound.
        status: ``"PASS"``, ``"FAIL"`` or ``"n/a"`` (not measured in this run).
        note: Why it is n/a, or that the run was shorter than the 1,000 turns
            the target is stated at.
    """

    key: str
    text: str
    turns: int | None
    against: str | None
    subject_value: float | None
    peer_value: float | None
    ratio: float | None
    limit: float
    status: Literal["PASS", "FAIL", "n/a"]
    note: str


def _points(result: ThroughputResult, kind: str) -> dict[str, list[ThroughputPoint]]:
    """Points per saver of one kind: graph turns (``"throughput"``), the same with
    ``durability="sync"`` (``"sync"``) or raw puts (``"puts"``)."""
    if kind == "sync":
        return result.sync
    return result.puts if kind == "puts" else result.savers


def _multiprocess_rates(result: MultiProcessResult | None) -> dict[str, float]:
    """Turns/s per saver of the multi-process scenario, for savers with no error and
    no lost turn (a saver that lost a turn has no rate to compare)."""
    if result is None:
        return {}
    return {n: p.turns_per_s for n, p in result.savers.items() if not p.errors and not p.problems}


def _throughput_at(
    result: ThroughputResult | None, saver: str, threads: int, kind: str = "throughput"
) -> float | None:
    """Median rate of ``saver`` at ``threads``: graph checkpoints/s or raw puts/s."""
    if result is None:
        return None
    for point in _points(result, kind).get(saver, []):
        if point.threads == threads:
            return point.checkpoints_per_s
    return None


def _chat(result: BenchResult, scenario: str) -> ChatResult | None:
    return next((c for c in result.chat if c.scenario == scenario), None)


def _usable(res: SaverChatResult | None) -> bool:
    return res is not None and res.error is None and res.correct is not False


def evaluate_targets(result: BenchResult, subject: str = "deltalog") -> list[TargetVerdict]:
    """Check every :data:`TARGETS` entry against this run.

    Args:
        result: The run.
        subject: The saver the targets apply to.

    Returns:
        One verdict per target, in :data:`TARGETS` order.
    """
    verdicts: list[TargetVerdict] = []
    for target in TARGETS:

        def na(note: str, target: Target = target) -> TargetVerdict:
            return TargetVerdict(
                target.key, target.text, None, None, None, None, None, target.limit, "n/a", note
            )

        turns: int | None = None
        held: float | None = None  # the subject's held_scale_ratio, for the scale target
        values: dict[str, float | None]
        if target.metric == "multiprocess":
            if result.multiprocess is None:
                verdicts.append(na(f"scenario {target.scenario} not run"))
                continue
            values = dict(_multiprocess_rates(result.multiprocess))
        elif target.metric.startswith(("throughput@", "puts@", "sync@")):
            kind, threads_text = target.metric.split("@", 1)
            threads = int(threads_text)
            tp = result.throughput
            values = {n: _throughput_at(tp, n, threads, kind) for n in (tp.savers if tp else {})}
            if tp is None or all(v is None for v in values.values()):
                what = "durability=sync " if kind == "sync" else ""
                verdicts.append(na(f"throughput {what}with {threads} threads not measured"))
                continue
        else:
            chat = _chat(result, target.scenario)
            if chat is None:
                verdicts.append(na(f"scenario {target.scenario} not run"))
                continue
            turns = chat.turns
            if target.exact_turns and turns != target.turns:
                verdicts.append(
                    na(f"run at {turns} turns; needs --turns {target.turns} (scale run)")
                )
                continue
            metric = _METRICS_BY_KEY[target.metric]
            values = {n: metric.get(r) for n, r in chat.savers.items() if _usable(r)}
            if subject in chat.savers:
                held = chat.savers[subject].held_scale_ratio
        subject_value = values.get(subject)
        if subject_value is None:
            verdicts.append(na(f"{subject} not measured"))
            continue
        peers = {n: v for n, v in values.items() if n != subject and v is not None}
        if target.against == "self":
            ok = (
                subject_value >= target.limit
                if target.higher_is_better
                else (subject_value <= target.limit)
            )
            note = (
                "" if turns == target.turns else f"run at {turns} turns, target at {target.turns}"
            )
            if target.key == "scale_bytes_per_turn" and held is not None:
                note = f"pages the databases hold (used less LMDB's free list): {held:.2f}×"
            verdicts.append(
                TargetVerdict(
                    target.key,
                    target.text,
                    turns,
                    None,
                    subject_value,
                    None,
                    subject_value,
                    target.limit,
                    "PASS" if ok else "FAIL",
                    note,
                )
            )
            continue
        if target.against == "best":
            if target.metric in ("total_bytes", "bytes_per_turn_last100"):
                # InMemorySaver's figure is serialized payload, not a store:
                # the storage targets compare with stores that reach a disk.
                peers = {n: v for n, v in peers.items() if result.peers[n]["durable"]}
            if not peers:
                verdicts.append(na("no peer measured"))
                continue
            pick = max if target.higher_is_better else min
            against = pick(peers, key=lambda n: peers[n])
        else:
            against = target.against
        peer_value = peers.get(against)
        ratio = _ratio(subject_value, peer_value)
        if ratio is None:
            verdicts.append(na(f"{against} not measured"))
            continue
        ok = ratio >= target.limit if target.higher_is_better else ratio <= target.limit
        note = (
            ""
            if turns is None or turns == target.turns
            else f"run at {turns} turns, target at {target.turns}"
        )
        ceiling = _ratio(values.get("memory"), peer_value) if against != "memory" else None
        if target.higher_is_better and ceiling is not None and ceiling < target.limit:
            # A rate InMemorySaver (which stores nothing) cannot reach is set by
            # the work outside the saver: say so next to the verdict.
            note = f"InMemorySaver, storing nothing, reached {ceiling:.2f}× here"
        verdicts.append(
            TargetVerdict(
                target.key,
                target.text,
                turns,
                against,
                subject_value,
                peer_value,
                ratio,
                target.limit,
                "PASS" if ok else "FAIL",
                note,
            )
        )
    return verdicts


def ratio_table(result: BenchResult, subject: str = "deltalog") -> dict[str, Any]:
    """``subject / peer`` for every metric, scenario and peer.

    Returns:
        ``{scenario: {metric: {peer: ratio or None}}}``, plus a ``throughput``
        entry ``{"<threads> threads": {peer: ratio}}`` (checkpoints/s, higher
        is better). Empty if the subject did not run.
    """
    table: dict[str, Any] = {}
    for chat in result.chat:
        mine = chat.savers.get(subject)
        if not _usable(mine) or mine is None:
            continue
        per_metric: dict[str, dict[str, float | None]] = {}
        for metric in METRICS:
            if metric.delta_only and not chat.field.startswith("DeltaChannel"):
                continue
            if metric.unit == "ratio":
                continue  # already a ratio to a reference, shown in the figures table
            per_metric[metric.key] = {
                n: _ratio(metric.get(mine), metric.get(r) if _usable(r) else None)
                for n, r in chat.savers.items()
                if n != subject
            }
        table[chat.scenario] = per_metric
    tp = result.throughput
    if tp is not None:
        for kind, name in (
            ("throughput", tp.scenario),
            ("sync", f"{tp.scenario}-sync"),
            ("puts", f"{tp.scenario}-puts"),
        ):
            by_saver = _points(tp, kind)
            if by_saver.get(subject):
                table[name] = {
                    f"{p.threads} threads": {
                        n: _ratio(
                            _throughput_at(tp, subject, p.threads, kind),
                            _throughput_at(tp, n, p.threads, kind),
                        )
                        for n in by_saver
                        if n != subject
                    }
                    for p in by_saver[subject]
                }
    rates = _multiprocess_rates(result.multiprocess)
    if subject in rates and result.multiprocess is not None:
        table[result.multiprocess.scenario] = {
            "turns/s": {
                n: _ratio(rates[subject], rates.get(n))
                for n in result.multiprocess.savers
                if n != subject
            }
        }
    return table


# --------------------------------------------------------------------------- tables

Colour = Literal["green", "red", "yellow"] | None


@dataclass(frozen=True)
class Cell:
    """One table cell: its text and an optional verdict colour."""

    text: str
    colour: Colour = None


@dataclass
class TableData:
    """A table built once and rendered to the terminal (rich) or to Markdown.

    Attributes:
        title: Caption.
        headers: Column headings.
        rows: Cells, one list per row.
        text_columns: Indexes of left-aligned (text) columns; the rest are
            numbers, right-aligned.
    """

    title: str
    headers: list[str]
    rows: list[list[Cell]]
    text_columns: frozenset[int] = frozenset({0})

    def to_rich(self) -> Table:
        """As a rich table (verdicts coloured)."""
        table = Table(title=self.title, title_justify="left")
        for i, heading in enumerate(self.headers):
            table.add_column(heading, justify="left" if i in self.text_columns else "right")
        for row in self.rows:
            table.add_row(
                *(f"[{c.colour}]{c.text}[/{c.colour}]" if c.colour else c.text for c in row)
            )
        return table

    def to_markdown(self) -> str:
        """As a GitHub-flavoured Markdown table under a bold caption."""
        lines = [f"**{self.title}**", ""]
        lines.append("| " + " | ".join(self.headers) + " |")
        aligns = [":---" if i in self.text_columns else "---:" for i in range(len(self.headers))]
        lines.append("|" + "|".join(aligns) + "|")
        for row in self.rows:
            lines.append("| " + " | ".join(c.text.replace("|", "\\|") for c in row) + " |")
        return "\n".join(lines) + "\n"


def _ratio_cell(ratio: float | None, higher_is_better: bool = False) -> Cell:
    if ratio is None:
        return Cell("–")
    good = ratio > 1 if higher_is_better else ratio < 1
    return Cell(f"{ratio:.2f}×", "green" if good else "red" if ratio != 1 else None)


def _label(result: BenchResult, name: str) -> str:
    return str(result.peers.get(name, {}).get("label", name))


def _metrics_for(chat: ChatResult) -> list[Metric]:
    delta = chat.field.startswith("DeltaChannel")
    return [m for m in METRICS if delta or not m.delta_only]


def build_tables(result: BenchResult, subject: str = "deltalog") -> list[TableData]:
    """Every table of a run: per scenario figures and ratios, throughput, targets.

    Args:
        result: The run.
        subject: The saver whose ratios to each peer are shown.

    Returns:
        Tables in display order.
    """
    tables: list[TableData] = []
    ratios = ratio_table(result, subject)
    for chat in result.chat:
        names = list(chat.savers)
        rows: list[list[Cell]] = []
        for metric in _metrics_for(chat):
            rows.append(
                [Cell(metric.title)]
                + [Cell(_format(metric.unit, metric.get(chat.savers[n]))) for n in names]
            )
        state_row = [Cell("final state")]
        for n in names:
            res = chat.savers[n]
            if res.error is not None:
                state_row.append(Cell("ERROR", "red"))
            elif res.correct:
                state_row.append(Cell("ok", "green"))
            else:
                state_row.append(Cell("WRONG", "red"))
        rows.append(state_row)
        caption = f"{chat.scenario}: {chat.description}"
        if chat.content_floor_last100 is not None:
            caption += (
                f"; content floor (zstd-3 of each turn's new text) "
                f"{format_bytes(chat.content_floor_last100)}/turn over the last 100 turns"
            )
        tables.append(TableData(caption, ["figure", *names], rows))
        if chat.scenario in ratios:
            peers = [n for n in names if n != subject]
            tables.append(
                TableData(
                    f"{chat.scenario}: {subject} ÷ peer (below 1× is better)",
                    ["figure", *peers],
                    [
                        [
                            Cell(_METRICS_BY_KEY[key].title),
                            *(_ratio_cell(row.get(n)) for n in peers),
                        ]
                        for key, row in ratios[chat.scenario].items()
                    ],
                )
            )

    tp = result.throughput
    if tp is not None:
        for kind, title, unit in (
            ("throughput", f"graph turns, messages as {tp.field}", "checkpoints/s"),
            (
                "sync",
                f'graph turns with durability="sync", messages as {tp.field}',
                "checkpoints/s",
            ),
            ("puts", "raw writes (put of a ~200-byte value, no graph)", "puts/s"),
        ):
            names = [n for n, pts in _points(tp, kind).items() if pts]
            if not names:
                continue
            levels = sorted({p.threads for n in names for p in _points(tp, kind)[n]})
            rows = []
            for threads in levels:
                row = [Cell(f"{threads} threads")]
                for n in names:
                    value = _throughput_at(tp, n, threads, kind)
                    text = "–" if value is None else f"{value:,.0f}/s"
                    if value is not None and n != subject and subject in names:
                        r = _ratio(_throughput_at(tp, subject, threads, kind), value)
                        if r is not None:
                            text += f" ({r:.2f}×)"
                    row.append(Cell(text))
                rows.append(row)
            headers = [unit] + [
                n + ("" if result.peers.get(n, {}).get("durable", True) else " (not durable)")
                for n in names
            ]
            tables.append(
                TableData(
                    f"{tp.scenario}: {title}, median of {tp.repeats} rounds of "
                    f"{tp.seconds:g} s (in brackets: {subject} ÷ peer, above 1× is better)",
                    headers,
                    rows,
                )
            )
    if result.multiprocess is not None and result.multiprocess.savers:
        tables.append(_multiprocess_table(result.multiprocess, subject))

    rows = []
    for v in evaluate_targets(result, subject):
        unit = (
            "bytes"
            if v.key.startswith(("storage", "rss"))
            else "ratio"
            if v.key.startswith("floor")
            else "ms"
        )

        def show(x: float | None, unit: str = unit, key: str = v.key) -> str:
            if key.startswith(("throughput", "puts", "multiprocess")):
                return "–" if x is None else f"{x:,.0f}/s"
            if key == "scale_bytes_per_turn":
                return _format("ratio", x)
            return _format(unit, x)

        colour: Colour = {"PASS": "green", "FAIL": "red", "n/a": "yellow"}[v.status]  # type: ignore[assignment]
        rows.append(
            [
                Cell(v.text),
                Cell(v.against or "–"),
                Cell(show(v.subject_value)),
                Cell(show(v.peer_value)),
                Cell("–" if v.ratio is None else f"{v.ratio:.3f}×"),
                Cell(v.status, colour),
                Cell(v.note),
            ]
        )
    tables.append(
        TableData(
            f"Performance targets for {subject} (ratios to peers in this run)",
            ["target", "peer", subject, "peer value", "ratio", "status", "note"],
            rows,
            text_columns=frozenset({0, 1, 5, 6}),
        )
    )
    return tables


def _multiprocess_table(mp: MultiProcessResult, subject: str) -> TableData:
    """Turns/s, errors and the read-back check of the multi-process scenario."""
    names = list(mp.savers)
    rates = _multiprocess_rates(mp)
    rate_row = [Cell("turns/s (median)")]
    for n in names:
        text = f"{mp.savers[n].turns_per_s:,.0f}/s"
        if n != subject and subject in rates and n in rates:
            r = _ratio(rates[subject], rates[n])
            if r is not None:
                text += f" ({r:.2f}×)"
        rate_row.append(Cell(text))
    rows = [
        rate_row,
        [Cell("rounds")]
        + [Cell(", ".join(f"{x:,.0f}" for x in mp.savers[n].rounds_per_s)) for n in names],
        [Cell("acknowledged turns")] + [Cell(f"{mp.savers[n].turns:,}") for n in names],
        [Cell("errors")]
        + [Cell(str(mp.savers[n].errors), "red" if mp.savers[n].errors else None) for n in names],
        [Cell("every acknowledged turn present")]
        + [Cell("no", "red") if mp.savers[n].problems else Cell("yes", "green") for n in names],
    ]
    headers = [
        n + (" (a store per process, storing nothing)" if n in MULTIPROCESS_PER_PROCESS else "")
        for n in names
    ]
    return TableData(
        f"{mp.scenario}: {mp.processes} processes × {mp.threads} threads on one store path, "
        f"chat turns (messages as {mp.field}), median of {mp.repeats} rounds of "
        f"{mp.seconds:g} s (in brackets: {subject} ÷ peer, above 1× is better)",
        ["figure", *headers],
        rows,
    )


def render(result: BenchResult, console: Console, subject: str = "deltalog") -> None:
    """Print the tables of a run to ``console``, then skipped peers and failures.

    Args:
        result: The run.
        console: Where to print.
        subject: The saver whose ratios to each peer are shown.
    """
    for table in build_tables(result, subject):
        console.print(table.to_rich())
    for name, info in result.peers.items():
        if info.get("skipped"):
            console.print(f"[yellow]skipped {name}: {info['skipped']}[/yellow]")
    for failure in result.failures:
        console.print(f"[red]FAILED: {failure_summary(failure)}[/red]")


def failure_summary(failure: str) -> str:
    """First line of a failure plus, for a traceback, its last line (the exception)."""
    lines = [line for line in failure.splitlines() if line.strip()]
    if len(lines) <= 1:
        return failure.strip()
    return f"{lines[0]} … {lines[-1].strip()}"


def write_markdown(result: BenchResult, path: Path, subject: str = "deltalog") -> Path:
    """Write every table as Markdown (for docs/benchmarks.md).

    Returns:
        ``path``.
    """
    meta = result.meta
    labels = ", ".join(f"`{n}` = {info['label']}" for n, info in result.peers.items())
    head = [
        f"Run of {meta.get('started', '?')} on {meta.get('cpus', '?')} CPUs, "
        f"Python {meta.get('python', '?')}, wall time {meta.get('wall_seconds', '?')} s. "
        f"Savers: {labels}.",
        "",
    ]
    body = "\n".join(t.to_markdown() for t in build_tables(result, subject))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(head) + "\n" + body)
    return path


# --------------------------------------------------------------------------- files


def write_json(result: BenchResult, path: Path, subject: str = "deltalog") -> Path:
    """Write the result, ratios and target verdicts as JSON.

    Returns:
        ``path``.
    """
    data = result.to_json()
    data["subject"] = subject
    data["ratios"] = ratio_table(result, subject)
    data["targets"] = [v.__dict__ for v in evaluate_targets(result, subject)]
    data["ok"] = result.ok
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_round_floats(data), indent=1, allow_nan=False)
    path.write_text(text + "\n")
    return path


def _round_floats(value: Any, digits: int = 4) -> Any:
    """Round floats for the JSON file: 0.1 µs resolution on milliseconds is plenty."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: _round_floats(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round_floats(v, digits) for v in value]
    return value


def _rolling_median(values: Sequence[float], window: int) -> list[float]:
    out: list[float] = []
    for i in range(len(values)):
        chunk = sorted(values[max(0, i - window + 1) : i + 1])
        mid = len(chunk) // 2
        out.append(chunk[mid] if len(chunk) % 2 else (chunk[mid - 1] + chunk[mid]) / 2)
    return out


def write_plots(result: BenchResult, out_dir: Path, subject: str = "deltalog") -> list[Path]:
    """Write PNG plots for every scenario of a run.

    Per chat scenario: ``<scenario>-bytes.png`` (stored bytes, and bytes added
    per turn averaged over a trailing window of 100 turns — the span of the
    "last 100 turns" figure, and two snapshot periods at sf=100 — against
    turns), ``<scenario>-latency.png`` (invoke latency against turns, rolling
    median over 25 turns) and ``<scenario>-reads.png`` (``get_state``, history
    and delta-history p50). For throughput: ``throughput.png`` (median graph
    checkpoints/s against concurrency, bars from the slowest to the fastest
    round; a cross per saver for the ``durability="sync"`` rounds) and
    ``throughput-puts.png`` (the same for raw durable puts). One
    line or bar per saver, each saver
    in the same colour in every plot; the subject is drawn thicker and async
    savers dashed.

    Returns:
        The files written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    colours = {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(result.peers)}

    def style(name: str) -> dict[str, Any]:
        return {
            "linewidth": 2.6 if name == subject else 1.3,
            "linestyle": "--" if result.peers.get(name, {}).get("async") else "-",
            "color": colours.get(name),
            "label": _label(result, name),
        }

    for chat in result.chat:
        savers = {n: r for n, r in chat.savers.items() if r.error is None}

        fig, (ax_total, ax_turn) = plt.subplots(1, 2, figsize=(12, 4.5))
        for name, res in savers.items():
            if not res.bytes_series:
                continue
            turns = [t for t, _ in res.bytes_series]
            sizes = [b for _, b in res.bytes_series]
            ax_total.plot(turns, [s / 2**20 for s in sizes], **style(name))
            window = min(100, max(1, chat.turns // 5))
            per_turn_x, per_turn = _windowed_growth(res.bytes_series, window)
            if per_turn:
                ax_turn.plot(per_turn_x, per_turn, **style(name))
        ax_total.set(title="stored bytes", xlabel="turn", ylabel="MiB")
        ax_turn.set(
            title=_wrap(f"bytes added per turn (mean over the previous {window} turns)", 55),
            xlabel="turn",
            ylabel="bytes/turn",
            yscale="log",
        )
        ax_total.set_yscale("log")
        for ax in (ax_total, ax_turn):
            ax.grid(True, which="both", alpha=0.3)
            _plain_log_axis(ax)
        ax_total.legend(fontsize="small")
        fig.suptitle(_wrap(f"{chat.scenario}: {chat.description}", 130), fontsize="medium")
        fig.tight_layout()
        written.append(_save(fig, out_dir / f"{chat.scenario}-bytes.png", plt))

        fig, ax = plt.subplots(figsize=(8, 4.5))
        window = 25 if chat.turns >= 100 else max(1, chat.turns // 4)
        for name, res in savers.items():
            if res.invoke_ms:
                xs = list(range(1, len(res.invoke_ms) + 1))
                ax.plot(xs, _rolling_median(res.invoke_ms, window), **style(name))
        ax.set(
            title=_wrap(f"{chat.scenario}: invoke latency (rolling median of {window} turns)"),
            xlabel="turn",
            ylabel="ms",
            yscale="log",
        )
        _plain_log_axis(ax)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        written.append(_save(fig, out_dir / f"{chat.scenario}-latency.png", plt))

        reads: list[tuple[str, Callable[[SaverChatResult], float | None]]] = [
            ("get_state", lambda r: _p50(r.get_state)),
            (f"get_state_history(limit={chat.history_limit})", lambda r: _p50(r.history)),
        ]
        if chat.field.startswith("DeltaChannel"):
            reads.append(("get_delta_channel_history", lambda r: _p50(r.delta_history)))
        fig, ax = plt.subplots(figsize=(8, 4.5))
        width = 0.8 / max(1, len(savers))
        for i, (name, res) in enumerate(savers.items()):
            values = [_nan_if_none(get(res)) for _, get in reads]
            positions = [j + i * width for j in range(len(reads))]
            ax.bar(
                positions, values, width=width, label=_label(result, name), color=colours.get(name)
            )
        ax.set_xticks([j + width * (len(savers) - 1) / 2 for j in range(len(reads))])
        ax.set_xticklabels([title for title, _ in reads])
        ax.set(
            title=_wrap(f"{chat.scenario}: read latency after {chat.turns} turns (p50)"),
            ylabel="ms",
        )
        ax.set_yscale("log")
        _plain_log_axis(ax)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        written.append(_save(fig, out_dir / f"{chat.scenario}-reads.png", plt))

    tp = result.throughput
    if tp is not None:
        for kind, what, unit, suffix in (
            ("throughput", f"graph turns ({tp.field})", "checkpoints/s", ""),
            ("puts", "raw durable puts", "puts/s", "-puts"),
        ):
            by_saver = _points(tp, kind)
            if not any(by_saver.values()):
                continue
            fig, ax = plt.subplots(figsize=(8, 4.5))
            for name, points in by_saver.items():
                if points:
                    medians = [p.checkpoints_per_s for p in points]
                    spread = [
                        [m - min(p.rounds_per_s) for m, p in zip(medians, points, strict=True)],
                        [max(p.rounds_per_s) - m for m, p in zip(medians, points, strict=True)],
                    ]
                    ax.errorbar(
                        [p.threads for p in points],
                        medians,
                        yerr=spread,
                        marker="o",
                        capsize=3,
                        **style(name),
                    )
            if kind == "throughput":
                # The durability="sync" rounds: one marker per saver and level.
                for name, points in tp.sync.items():
                    if points:
                        ax.plot(
                            [p.threads for p in points],
                            [p.checkpoints_per_s for p in points],
                            marker="x",
                            markersize=9,
                            linestyle="none",
                            color=colours.get(name),
                            label=f'{_label(result, name)}, durability="sync"',
                        )
            values = [
                p.checkpoints_per_s
                for group in ((by_saver, tp.sync) if kind == "throughput" else (by_saver,))
                for points in group.values()
                for p in points
            ]
            # InMemorySaver (no disk) can run 10-100x faster than every durable
            # saver and would flatten them to zero on a linear axis.
            log = min(values) > 0 and max(values) / min(values) > 10
            ax.set(
                title=_wrap(
                    f"{tp.scenario}: {unit}, {what}, median and range of {tp.repeats} "
                    f"rounds of {tp.seconds:g} s" + (" (log scale)" if log else "")
                ),
                xlabel="concurrent threads (asyncio tasks for async savers)",
                ylabel=unit + (" (log scale)" if log else ""),
                xscale="log",
            )
            ax.set_xticks(tp.threads)
            ax.set_xticklabels([str(t) for t in tp.threads])
            if log:
                ax.set_yscale("log")
                _plain_log_axis(ax)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize="small")
            fig.tight_layout()
            written.append(_save(fig, out_dir / f"{tp.scenario}{suffix}.png", plt))
    return written


# matplotlib's "tab10", fixed here so a saver keeps its colour in every plot.
_PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


def _windowed_growth(
    series: Sequence[tuple[int, int]], window: int
) -> tuple[list[int], list[float]]:
    """Mean bytes added per turn over the ``window`` turns before each sample.

    Uses the nearest sample at or before ``turn - window`` as the base, so
    sampling every k turns only blurs the window by less than k turns.
    Values are clamped to 1 byte for the log axis (an SQLite WAL that is
    being reused adds 0 bytes for a while).
    """
    xs: list[int] = []
    ys: list[float] = []
    j = 0
    for turn, size in series:
        while j + 1 < len(series) and series[j + 1][0] <= turn - window:
            j += 1
        base_turn, base_size = series[j]
        if turn - base_turn >= window:
            xs.append(turn)
            ys.append(max((size - base_size) / (turn - base_turn), 1.0))
    return xs, ys


def _wrap(title: str, width: int = 60) -> str:
    """A plot title broken into lines of at most ``width`` characters, so none is clipped.

    >>> _wrap("throughput: puts/s, raw durable puts, median and range of 3 rounds", 40)
    'throughput: puts/s, raw durable puts,\\nmedian and range of 3 rounds'
    """
    import textwrap

    return "\n".join(textwrap.wrap(title, width)) or title


def _plain_log_axis(ax: Any) -> None:
    """Label a log y axis with plain numbers (``20000``, not ``2×10⁴``).

    Minor ticks are labelled sparsely so they never pile up: all of them when
    the axis spans less than one decade, 2× and 5× when it spans less than
    three, none beyond.
    """
    from matplotlib.ticker import FuncFormatter

    low, high = ax.get_ylim()
    decades = math.log10(high / low) if low > 0 and high > low else 99.0
    keep = {2, 3, 4, 5, 6, 7, 8, 9} if decades < 1 else {2, 5} if decades < 3 else set()

    def minor(y: float, _pos: int) -> str:
        if y <= 0:
            return ""
        mantissa = round(y / 10 ** math.floor(math.log10(y)))
        return f"{y:g}" if mantissa in keep else ""

    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(minor))


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
