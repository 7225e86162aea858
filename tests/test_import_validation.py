"""Import validates every record first: a crafted stream is refused with its line and writes nothing (issue 15.8, R8, R9)."""

from __future__ import annotations

import copy
import json
import math
import pickle
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from click.testing import CliRunner
from deltalog.engine import DeltaLogSaver, export
from deltalog.engine.cli import cli
from deltalog.engine.cli_ops import encode_record
from deltalog.engine.errors import (
    DeltaLogError,
    ImportRecordError,
    InvalidInputError,
    ThreadExistsError,
)
from deltalog.engine.import_check import check_import
from deltalog.engine.txn_base import DB_NAMES
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from tests.graphs import cfg, chat_graph, human

Records = list[Any]
DELTALOG = Path(sys.executable).parent / "deltalog"


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> Records:
    """A real export: a DeltaChannel chat of 3 turns (checkpoints, blobs and writes)."""
    path = tmp_path_factory.mktemp("src") / "s"
    with DeltaLogSaver.from_path(path) as saver:
        graph = chat_graph(2).compile(checkpointer=saver)
        for turn in range(3):
            graph.invoke({"messages": [human(turn)]}, cfg("chat"))
        records = list(saver.export_records())
    kinds = [r["kind"] for r in records]
    assert {"checkpoint", "blob", "write"} <= set(kinds)
    return records


def snapshot(path: Path) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every item of every database of the store (the unnamed main one too)."""
    with DeltaLogSaver.from_path(path) as saver:
        env = saver.env.env
        with env.begin() as txn:
            items = {"": [(bytes(k), bytes(v)) for k, v in txn.cursor()]}
            for name in DB_NAMES:
                db = getattr(saver.env._dbs, name)
                items[name] = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)]
    return items


def target_store(path: Path) -> Path:
    """A store that already holds another thread, so "unchanged" means something."""
    with DeltaLogSaver.from_path(path) as saver:
        chat_graph(2).compile(checkpointer=saver).invoke({"messages": [human(0)]}, cfg("other"))
    return path


def line_of(records: Records, kind: str, nth: int = 0) -> int:
    """The 1-based line of the nth record of ``kind``."""
    return [i for i, r in enumerate(records, 1) if isinstance(r, dict) and r["kind"] == kind][nth]


def packed(value: Any) -> bytes:
    return ormsgpack.packb(value)


@dataclass(frozen=True)
class Case:
    """A crafted stream: ``craft`` changes a copy of a valid export in place and returns the
    line the error must name; ``match`` is a fragment of the expected reason."""

    name: str
    craft: Callable[[Records], int]
    match: str


def set_field(kind: str, field: str, value: Any, nth: int = 0) -> Callable[[Records], int]:
    def craft(records: Records) -> int:
        line = line_of(records, kind, nth)
        records[line - 1][field] = value
        return line

    return craft


def drop_field(kind: str, field: str) -> Callable[[Records], int]:
    def craft(records: Records) -> int:
        line = line_of(records, kind)
        del records[line - 1][field]
        return line

    return craft


def replace_record(value: Any, line: int = 3) -> Callable[[Records], int]:
    def craft(records: Records) -> int:
        records[line - 1] = value
        return line

    return craft


def duplicate(kind: str) -> Callable[[Records], int]:
    def craft(records: Records) -> int:
        line = line_of(records, kind)
        records.insert(line, copy.deepcopy(records[line - 1]))
        return line + 1

    return craft


def cycle(length: int) -> Callable[[Records], int]:
    """Make the first ``length`` checkpoints' parents a ring (a self-parent for 1)."""

    def craft(records: Records) -> int:
        lines = [line_of(records, "checkpoint", i) for i in range(length)]
        ids = [records[ln - 1]["checkpoint_id"] for ln in lines]
        for i, ln in enumerate(lines):
            records[ln - 1]["parent_id"] = ids[i - 1] if length > 1 else ids[0]
        return lines[0]

    return craft


def header(value: Any) -> Callable[[Records], int]:
    def craft(records: Records) -> int:
        records[0] = value
        return 1

    return craft


def empty(records: Records) -> int:
    records.clear()
    return 1


def cut_short(dropped: int) -> Callable[[Records], int]:
    """The stream without its end record and ``dropped`` records before it (an export
    cut on a line boundary): the error names the line after the last."""

    def craft(records: Records) -> int:
        del records[len(records) - 1 - dropped :]
        return len(records) + 1

    return craft


def after_end(records: Records) -> int:
    records.append(copy.deepcopy(records[line_of(records, "checkpoint")]))
    return len(records)


def end_miscounted(records: Records) -> int:
    records[-1]["records"] += 1
    return len(records)


def second_header(records: Records) -> int:
    records.insert(4, dict(records[0]))
    return 5


CASES = [
    Case("no-header", lambda r: r.pop(0) and 1, "header"),
    Case("cut-before-the-end-record", cut_short(0), "without its end record: it was cut short"),
    Case("cut-on-a-line-boundary", cut_short(3), "without its end record: it was cut short"),
    Case("a-record-after-the-end", after_end, "a record after the end record"),
    Case("end-record-miscounted", end_miscounted, "records are missing or were added"),
    Case("empty-stream", empty, "empty"),
    Case("header-other-format", header({"kind": "header", "format": "x", "version": 1}), "header"),
    Case(
        "header-version-3",
        header({"kind": "header", "format": "deltalog-export", "version": 3}),
        "version 3",
    ),
    Case(
        "header-version-str",
        header({"kind": "header", "format": "deltalog-export", "version": "1"}),
        "version '1'",
    ),
    Case("header-not-object", header([1, 2]), "header"),
    Case("second-header", second_header, "second header"),
    Case("line-is-list", replace_record(["checkpoint"]), "list, not an object"),
    Case("line-is-string", replace_record("checkpoint"), "str, not an object"),
    Case("line-is-null", replace_record(None), "NoneType, not an object"),
    Case("line-is-number", replace_record(7), "int, not an object"),
    Case("unknown-kind", set_field("checkpoint", "kind", "snapshot"), "unknown"),
    Case("kind-missing", drop_field("blob", "kind"), "unknown"),
    Case("thread-id-missing", drop_field("checkpoint", "thread_id"), "no 'thread_id'"),
    Case("thread-id-int", set_field("checkpoint", "thread_id", 5), "thread_id 5 is a int"),
    Case("thread-id-surrogate", set_field("write", "thread_id", "a\ud800"), "not valid Unicode"),
    Case("namespace-null", set_field("blob", "checkpoint_ns", None), "checkpoint_ns None"),
    Case("checkpoint-id-missing", drop_field("checkpoint", "checkpoint_id"), "no 'checkpoint_id'"),
    Case("checkpoint-id-empty", set_field("checkpoint", "checkpoint_id", ""), "empty"),
    Case("checkpoint-id-int", set_field("checkpoint", "checkpoint_id", 12), "checkpoint_id 12"),
    Case("checkpoint-id-huge", set_field("checkpoint", "checkpoint_id", "x" * 2000), "bytes"),
    Case("parent-id-int", set_field("checkpoint", "parent_id", 3, nth=1), "parent_id 3"),
    Case("self-parent", cycle(1), "itself as its parent"),
    Case("parent-cycle-2", cycle(2), "cycle of 2"),
    Case("parent-cycle-3", cycle(3), "cycle of 3"),
    Case("versions-list", set_field("checkpoint", "channel_versions", ["a"]), "not an object"),
    Case("version-nan", set_field("checkpoint", "channel_versions", {"a": math.nan}), "finite"),
    Case("version-inf", set_field("blob", "version", math.inf), "finite"),
    Case("version-bool", set_field("blob", "version", True), "bool"),
    Case("version-object", set_field("checkpoint", "channel_versions", {"a": {"v": 1}}), "dict"),
    Case("version-int-too-big", set_field("blob", "version", 2**70), "64-bit"),
    Case("version-too-long", set_field("blob", "version", "v" * 300), "200 bytes"),
    Case(
        "checkpoint-not-pair",
        set_field("checkpoint", "checkpoint", "msgpack"),
        "not a [type, bytes]",
    ),
    Case(
        "checkpoint-data-str",
        set_field("checkpoint", "checkpoint", ["msgpack", "AQ=="]),
        "not a [type, bytes]",
    ),
    Case(
        "checkpoint-bad-msgpack",
        set_field("checkpoint", "checkpoint", ["msgpack", b"\xc1\xc1"]),
        "do not parse",
    ),
    Case(
        "checkpoint-not-mapping",
        set_field("checkpoint", "checkpoint", ["msgpack", packed([1, 2])]),
        "not a mapping",
    ),
    Case(
        "metadata-null-typed",
        set_field("checkpoint", "metadata", ["null", b""]),
        "a body must be a mapping",
    ),
    Case("metadata-missing", drop_field("checkpoint", "metadata"), "no 'metadata'"),
    Case(
        "metadata-bad-json", set_field("checkpoint", "metadata", ["json", b"{nope"]), "do not parse"
    ),
    Case("flags-unknown-bit", set_field("checkpoint", "flags", 6), "flags 6"),
    Case("flags-str", set_field("checkpoint", "flags", "1"), "flags '1'"),
    Case("run-id-int", set_field("checkpoint", "run_id", 99), "run_id 99"),
    Case("delta-not-list", set_field("checkpoint", "delta", "messages"), "delta"),
    Case("duplicate-checkpoint", duplicate("checkpoint"), "appears twice"),
    Case("blob-version-missing", drop_field("blob", "version"), "no 'version'"),
    Case(
        "blob-pickle-value",
        set_field("blob", "value", ["pickle", pickle.dumps({"a": 1})]),
        "'pickle'",
    ),
    Case("blob-unknown-type", set_field("blob", "value", ["yaml", b"a: 1"]), "'yaml'"),
    Case("blob-null-with-bytes", set_field("blob", "value", ["null", b"x"]), "do not parse"),
    Case(
        "blob-value-triple",
        set_field("blob", "value", ["msgpack", b"\x01", "x"]),
        "not a [type, bytes]",
    ),
    Case("duplicate-blob", duplicate("blob"), "appears twice"),
    Case("write-idx-huge", set_field("write", "idx", 2**40), "32-bit"),
    Case("write-idx-str", set_field("write", "idx", "0"), "idx '0'"),
    Case("write-idx-bool", set_field("write", "idx", False), "bool"),
    Case("write-idx-float", set_field("write", "idx", 1.0), "float"),
    Case("write-task-id-long", set_field("write", "task_id", "t" * 600), "LMDB's limit"),
    Case("write-channel-null", set_field("write", "channel", None), "channel None"),
    Case("write-value-missing", drop_field("write", "value"), "no 'value'"),
    Case("duplicate-write", duplicate("write"), "appears twice"),
    Case("write-pickle-value", set_field("write", "value", ["pickle", b"\x80\x04N."]), "'pickle'"),
]


def crafted(stream: Records, case: Case) -> tuple[Records, int]:
    records = copy.deepcopy(stream)
    line = case.craft(records)
    return records, line


def test_cases_are_many_and_distinct() -> None:
    """The table holds at least 40 named cases."""
    assert len(CASES) >= 40 and len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_library_refuses_crafted_stream(stream: Records, case: Case, tmp_path: Path) -> None:
    """import_records raises one-line ImportRecordError naming the line; no database changes."""
    records, line = crafted(stream, case)
    path = target_store(tmp_path / "t")
    before = snapshot(path)
    with DeltaLogSaver.from_path(path) as saver, pytest.raises(ImportRecordError) as info:
        saver.import_records(records)
    message = str(info.value)
    assert message.startswith(f"line {line} of the import stream: "), message
    assert case.match in message and "\n" not in message
    assert info.value.line == line
    assert snapshot(path) == before


def cli_lines(records: Records) -> str:
    """The records as an export file (ASCII escapes, so lone surrogates survive as text)."""
    return "".join(
        (
            json.dumps(json.loads(encode_record(r)), separators=(",", ":"))
            if isinstance(r, dict)
            else json.dumps(r)
        )
        + "\n"
        for r in records
    )


def assert_cli_error(result: Any, fragment: str) -> str:
    """Exit 1, exactly one `Error:` line on stderr, no traceback."""
    assert result.exit_code == 1, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output and fragment in lines[0], lines[0]
    return str(lines[0])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_cli_refuses_crafted_stream(stream: Records, case: Case, tmp_path: Path) -> None:
    """`deltalog import`: exit 1, one `Error: line N ...` line; the store and a new PATH untouched."""
    records, line = crafted(stream, case)
    path = target_store(tmp_path / "t")
    before = snapshot(path)
    text = cli_lines(records)
    result = CliRunner().invoke(cli, ["import", str(path)], input=text)
    assert_cli_error(result, f"Error: line {line} of the import stream: ")
    assert case.match in result.stderr
    assert snapshot(path) == before
    fresh = tmp_path / "new"
    result = CliRunner().invoke(cli, ["import", str(fresh)], input=text)
    assert_cli_error(result, f"line {line} of the import stream")
    assert not fresh.exists()


TEXT_CASES = {
    "bad-base64": ('"value":["msgpack",{"$b64":"', '"value":["msgpack",{"$b64":"!!'),
    "bad-json": ('{"kind":"blob"', '{"kind":"blob",,'),
    "nan-literal": ('"idx":0', '"idx":NaN'),
}


@pytest.mark.parametrize("name", sorted(TEXT_CASES))
def test_cli_refuses_undecodable_lines(stream: Records, name: str, tmp_path: Path) -> None:
    """Lines that do not decode (bad base64, bad JSON, NaN where an int belongs) name their line."""
    old, new = TEXT_CASES[name]
    lines = cli_lines(stream).splitlines(keepends=True)
    hit = next(i for i, ln in enumerate(lines) if old in ln)
    lines[hit] = lines[hit].replace(old, new, 1)
    path = target_store(tmp_path / "t")
    before = snapshot(path)
    result = CliRunner().invoke(cli, ["import", str(path)], input="".join(lines))
    assert_cli_error(result, f"Error: line {hit + 1} of the import stream")
    assert snapshot(path) == before


def test_cli_line_numbers_count_blank_lines(stream: Records, tmp_path: Path) -> None:
    """Blank lines are skipped but still counted, so the error names the file's line."""
    records, line = crafted(stream, CASES[[c.name for c in CASES].index("self-parent")])
    text = cli_lines(records).replace("\n", "\n\n \n", 1)  # two blank lines after the header
    result = CliRunner().invoke(cli, ["import", str(tmp_path / "n")], input=text)
    assert_cli_error(result, f"line {line + 2} of the import stream")


def test_cli_refuses_non_utf8_and_deep_nesting(stream: Records, tmp_path: Path) -> None:
    """A non-UTF-8 file and JSON nested too deeply to decode are one-line errors too."""
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(cli_lines(stream[:2]).encode() + b'{"kind":"\xff"}\n')
    result = CliRunner().invoke(cli, ["import", str(tmp_path / "n"), str(bad)])
    assert_cli_error(result, "line 3 of the import stream")
    deep = cli_lines(stream[:1]) + "[" * 100_000 + "]" * 100_000 + "\n"
    result = CliRunner().invoke(cli, ["import", str(tmp_path / "n")], input=deep)
    assert_cli_error(result, "line 2 of the import stream")
    assert not (tmp_path / "n").exists()


def test_crafted_streams_in_a_real_process(stream: Records, tmp_path: Path) -> None:
    """Through the installed script: exit 1, one Error line, no traceback, store unchanged."""
    path = target_store(tmp_path / "t")
    before = snapshot(path)
    for name in ("parent-cycle-2", "blob-pickle-value", "write-idx-huge", "line-is-list"):
        records, line = crafted(stream, CASES[[c.name for c in CASES].index(name)])
        done = subprocess.run(
            [str(DELTALOG), "import", str(path)],
            input=cli_lines(records),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith(f"Error: line {line} of the import stream: ")
        assert len(done.stderr.strip().splitlines()) == 1
    assert snapshot(path) == before


def test_valid_stream_imports_and_round_trips(stream: Records, tmp_path: Path) -> None:
    """The unmodified export imports (library and CLI) and exports back identically."""
    with DeltaLogSaver.from_path(tmp_path / "a") as saver:
        counts = saver.import_records(copy.deepcopy(stream))
        assert counts["checkpoints"] == sum(r["kind"] == "checkpoint" for r in stream)
        assert same_records(list(saver.export_records()), stream)
    result = CliRunner().invoke(cli, ["import", str(tmp_path / "b")], input=cli_lines(stream))
    assert result.exit_code == 0, result.output
    with DeltaLogSaver.from_path(tmp_path / "b") as saver:
        assert same_records(list(saver.export_records()), stream)


def same_records(a: Records, b: Records) -> bool:
    """Equal as multisets (values a store held inside checkpoint records come back as blobs,
    so their order may differ)."""
    return sorted(map(encode_record, a)) == sorted(map(encode_record, b))


def test_existing_thread_refused_with_line(stream: Records, tmp_path: Path) -> None:
    """Importing a thread that exists: ThreadExistsError naming its first line; nothing written."""
    path = tmp_path / "a"
    with DeltaLogSaver.from_path(path) as saver:
        saver.import_records(copy.deepcopy(stream))
    before = snapshot(path)
    body = copy.deepcopy(stream[1:-1])  # between the header and the end record
    extra = copy.deepcopy(body)
    for rec in extra:
        rec["thread_id"] = "new-" + rec["thread_id"]
    # A new thread first, then the existing one.
    both = [stream[0], *extra, *body, export.end(2 * len(body))]
    with DeltaLogSaver.from_path(path) as saver, pytest.raises(ThreadExistsError) as info:
        saver.import_records(both)
    assert str(info.value).startswith(f"line {len(extra) + 2} of the import stream: thread 'chat'")
    assert snapshot(path) == before


def test_pickle_values_import_where_the_serde_loads_them(stream: Records, tmp_path: Path) -> None:
    """A store whose serde has the pickle fallback on accepts pickle-typed values (its choice)."""
    records, _ = crafted(stream, CASES[[c.name for c in CASES].index("blob-pickle-value")])
    serde = JsonPlusSerializer(pickle_fallback=True)
    with DeltaLogSaver.from_path(tmp_path / "p", serde=serde) as saver:
        assert saver.import_records(records)["blobs"] == sum(r["kind"] == "blob" for r in records)


@pytest.mark.parametrize("value", [5, None, "not records", b"bytes", {"kind": "header"}])
def test_non_iterable_records_refused(value: Any, tmp_path: Path) -> None:
    """import_records of a non-iterable (or a str, bytes or a single mapping): InvalidInputError naming it (issue 15.13)."""
    with DeltaLogSaver.from_path(tmp_path / "s") as saver, pytest.raises(InvalidInputError) as info:
        saver.import_records(value)
    assert type(value).__name__ in str(info.value)
    assert isinstance(info.value, DeltaLogError)


def test_a_version_1_stream_without_an_end_record_still_imports(
    stream: Records, tmp_path: Path
) -> None:
    """Streams written before the end record (version 1) import as they did."""
    old = [{**stream[0], "version": 1}, *copy.deepcopy(stream[1:-1])]
    with DeltaLogSaver.from_path(tmp_path / "v1") as saver:
        assert saver.import_records(old)["threads"] == 1
        assert list(saver.export_records())[1:-1] == stream[1:-1]
    with pytest.raises(ImportRecordError, match="kind 'end' is unknown"):
        check_import([{**stream[0], "version": 1}, *stream[1:]], JsonPlusSerializer())
