"""`export` counts what it emits and its expansion; `--compress` writes zstd that `import` reads by its magic bytes (issue 19)."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import zstandard
from click.testing import CliRunner
from deltalog.engine import DeltaLogSaver
from deltalog.engine.cli import cli

from .graphs import cfg, chat_graph, human


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "s.lmdb"
    with DeltaLogSaver.from_path(path) as saver:
        graph = chat_graph(3).compile(checkpointer=saver)
        for thread_id in ("a", "b"):
            for turn in range(5):
                graph.invoke({"messages": [human(turn)]}, cfg(thread_id))
    return path


def test_summary_counts_the_records_emitted_and_the_expansion(store: Path) -> None:
    """stderr names each record kind with the count actually written, the bytes and the ratio."""
    result = CliRunner().invoke(cli, ["export", str(store)])
    assert result.exit_code == 0, result.output
    kinds = Counter(json.loads(line)["kind"] for line in result.stdout.splitlines())
    summary = result.stderr
    total = sum(kinds.values())
    assert f"exported {total:,} records" in summary
    for kind in ("checkpoint", "blob", "write"):
        assert f"{kinds[kind]:,} {kind}" in summary
    assert re.search(r"of JSON Lines \(\d+\.\d× the .* stored\); --compress shrinks it", summary)


def test_compressed_export_round_trips_through_import(store: Path, tmp_path: Path) -> None:
    """--compress gives a zstd frame of the same stream; import reads it from stdin and a file."""
    runner = CliRunner()
    plain = runner.invoke(cli, ["export", str(store)]).stdout_bytes
    packed = runner.invoke(cli, ["export", str(store), "--compress"])
    assert packed.exit_code == 0, packed.output
    assert packed.stdout_bytes[:4] == b"\x28\xb5\x2f\xfd"
    assert len(packed.stdout_bytes) < len(plain)
    assert zstandard.ZstdDecompressor().stream_reader(packed.stdout_bytes).read() == plain
    assert "zstd " in packed.stderr
    from_stdin = tmp_path / "stdin.lmdb"
    done = runner.invoke(cli, ["import", str(from_stdin)], input=packed.stdout_bytes)
    assert done.exit_code == 0, done.output
    again = runner.invoke(cli, ["export", str(from_stdin)]).stdout
    assert sorted(again.splitlines()) == sorted(plain.decode().splitlines())


def test_compressed_file_in_real_processes(store: Path, tmp_path: Path) -> None:
    """A real `deltalog export --compress -o FILE`, then `deltalog import PATH FILE`."""
    packed = tmp_path / "all.jsonl.zst"
    target = tmp_path / "copy.lmdb"
    run = [sys.executable, "-m", "deltalog.engine"]
    subprocess.run([*run, "export", str(store), "--compress", "-o", str(packed)], check=True)
    assert packed.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    subprocess.run([*run, "import", str(target), str(packed)], check=True, capture_output=True)
    proc = subprocess.run(
        [*run, "threads", str(target), "--json"], check=True, capture_output=True, text=True
    )
    assert sorted(r["thread_id"] for r in json.loads(proc.stdout)) == ["a", "b"]


def test_a_compressed_file_is_owner_only_and_a_damaged_one_is_refused(
    store: Path, tmp_path: Path
) -> None:
    """`--compress -o FILE` creates FILE 0600 like a plain export (issue 15.10), and its frame
    carries zstd's checksum: a flipped bit fails the import instead of importing other bytes."""
    packed = tmp_path / "all.jsonl.zst"
    runner = CliRunner()
    done = runner.invoke(cli, ["export", str(store), "--compress", "-o", str(packed)])
    assert done.exit_code == 0, done.output
    assert stat.S_IMODE(packed.stat().st_mode) == 0o600
    data = packed.read_bytes()
    assert zstandard.get_frame_parameters(data).has_checksum
    plain = zstandard.ZstdDecompressor().stream_reader(data).read().decode()
    refusals = 0
    for n, at in enumerate(range(20, len(data) - 20, len(data) // 16)):
        damaged = bytearray(data)
        damaged[at] ^= 0x10
        target = tmp_path / f"damaged-{n}.lmdb"
        result = runner.invoke(cli, ["import", str(target)], input=bytes(damaged))
        if result.exit_code == 0:  # a bit the decoder never used: the same stream imported
            again = runner.invoke(cli, ["export", str(target)]).stdout
            assert sorted(again.splitlines()) == sorted(plain.splitlines())
        else:
            refusals += 1
            assert "Error: the compressed stream is damaged" in result.output
            assert not target.exists()
    assert refusals >= 12
