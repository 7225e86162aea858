"""`deltalog bench` output: a line per scenario in pipes, plain words, a quiet Ctrl-C (exit 130), help matching the plans (issue 19)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner
from deltalog.bench.cli import bench_command
from deltalog.bench.scenarios import full_plan, quick_plan

BENCH = [sys.executable, "-m", "deltalog.bench"]


def test_a_line_per_scenario_when_stdout_is_a_pipe(tmp_path: Path) -> None:
    """A real run into a pipe prints one plain line per scenario, no progress bars, no jargon."""
    proc = subprocess.run(
        [
            *BENCH,
            "--quick",
            "--scenario",
            "chat-delta-sf100,agent-delta-sf100",
            "--turns",
            "3",
            "--savers",
            "memory,sqlite",
            "--isolation",
            "inprocess",
            "--no-pg",
            "--no-plots",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = proc.stdout.splitlines()
    for scenario in ("chat-delta-sf100", "agent-delta-sf100"):
        mine = [x for x in lines if x.startswith(f"{scenario}: turns 3")]
        assert len(mine) == 1 and "done in" in mine[0], proc.stdout
    bar = re.compile(r"\d+/\d+ .*\d:\d\d:\d\d")  # a progress bar's "3/3 0:00:01" columns
    assert not any(bar.search(x) for x in (proc.stdout + proc.stderr).splitlines())
    text = proc.stdout + (tmp_path / "results.md").read_text()
    assert "issue" not in text.lower()
    assert "Performance targets for deltalog" in text


def _ignores_sigint(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


def _is_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"resource_tracker" not in f.read()
    except FileNotFoundError:
        return False


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """SIGINT to the process group mid-run (workers running): exit 130, one line, no traceback."""
    proc = subprocess.Popen(
        [
            *BENCH,
            "--scenario",
            "chat-delta-sf100",
            "--turns",
            "5000",
            "--savers",
            "memory",
            "--no-pg",
            "--no-plots",
            "--out",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # SIGINT as a terminal gives it, even when the tests run as a shell's
        # background job (started with SIGINT ignored, kept across exec).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while time.monotonic() < deadline and proc.poll() is None:
            # The worker, not multiprocessing's resource tracker (which ignores
            # SIGINT from its start): a SIGINT before the worker ignores it would
            # interrupt its start-up, not the run this test is about.
            workers = [c for c in _children(proc.pid) if _ignores_sigint(c) and _is_worker(c)]
            # ... and the coordinator past starting it (it ignores SIGINT while it
            # spawns a worker, which can take seconds on a loaded machine).
            if workers and not _ignores_sigint(proc.pid):
                break
            time.sleep(0.2)
        assert workers and not _ignores_sigint(proc.pid), "no worker process started"
        time.sleep(1.0)  # the worker is serving turns
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert [x for x in err.splitlines() if x.strip()] == [
        "deltalog bench: interrupted; nothing more was run"
    ]


def test_help_states_the_turns_the_plans_run() -> None:
    """--quick and --turns help give each scenario's turns as the plans define them."""
    text = " ".join(
        CliRunner().invoke(bench_command, ["--help"], terminal_width=400).stdout.split()
    )
    for plan in (quick_plan(), full_plan()):
        for chat in plan.chat:
            assert f"{chat.name} {chat.turns:,}" in text, chat.name
    assert "300 for add_messages" not in text
