"""SIGKILL during memory put batches and sweeps loses no acknowledged batch and leaves no half batch (issue 17, R8)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from deltalog.engine import DeltaLogStore

WRITER = Path(__file__).with_name("memory_crash_writer.py")
SIZE = 20


def _logged(log: Path) -> set[int]:
    done: set[int] = set()
    if not log.exists():
        return done
    for line in log.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # the line torn by the kill
            continue
        if "batch" in rec:
            done.add(rec["batch"])
    return done


def _wait_ready(log: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        if log.exists() and '"ready"' in log.read_text():
            return
        time.sleep(0.02)
    raise AssertionError(f"writer did not start: {log}")


@pytest.mark.parametrize("sweep", [False, True], ids=["puts", "puts+sweeps"])
def test_sigkill_keeps_whole_batches(tmp_path: Path, sweep: bool) -> None:
    """Two writers share a namespace; after each kill every batch is all there or absent.

    With sweeps, writer 0 puts TTL items and sweeps them (a clock an hour ahead)
    every tenth batch; writer 1's items have no TTL and must all survive.
    """
    rng = random.Random(int(os.environ.get("DELTALOG_CRASH_SEED", "17")))
    path = tmp_path / "mem"
    rounds = 5
    for round_ in range(rounds):
        logs = [tmp_path / f"log-{round_}-{w}" for w in range(2)]
        procs = [
            subprocess.Popen(
                [sys.executable, str(WRITER), str(path), str(log), f"{round_}x{w}"]
                + (["--sweep"] if sweep and w == 0 else []),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for w, log in enumerate(logs)
        ]
        deadline = time.monotonic() + 60
        for log in logs:
            _wait_ready(log, deadline)
        time.sleep(rng.uniform(0.2, 0.8))
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait(timeout=30)
            assert p.returncode == -signal.SIGKILL, p.stderr.read() if p.stderr else ""
        with DeltaLogStore.from_path(path) as store:
            items = store.search(("crash",), limit=10**7)
            by_batch: dict[tuple[str, int], set[int]] = defaultdict(set)
            for item in items:
                writer = item.key.split("-b")[0]
                by_batch[(writer, item.value["batch"])].add(item.value["i"])
            for (writer, batch), members in by_batch.items():
                assert members == set(range(SIZE)), f"half batch {writer} {batch}: {members}"
            for w, log in enumerate(logs):
                acked = _logged(log)
                assert acked, "the writer committed nothing before the kill"
                writer = f"w{round_}x{w}"
                present = {b for (wr, b) in by_batch if wr == writer}
                if sweep and w == 0:
                    # Writer 0's items have a TTL and its own sweeps delete its
                    # older batches; those after its last sweep must be there.
                    last_sweep = (max(acked) + 1) // 10 * 10
                    assert {b for b in acked if b >= last_sweep} <= present
                else:
                    assert acked <= present, f"lost acknowledged batches {acked - present}"
