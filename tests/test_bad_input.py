"""Bad input raises a clear, documented error before anything is written (R9)."""

from __future__ import annotations

from typing import Any

import pytest
from deltalog.engine import ConfigError, DeltaLogSaver, InvalidInputError, KeyTooLongError
from langgraph.checkpoint.base import empty_checkpoint


def _store_entries(saver: DeltaLogSaver) -> dict[str, int]:
    stats = saver.env.stats()
    return {name: stats[name]["entries"] for name in ("checkpoints", "writes", "blobs", "runs")}


class Unserializable:
    """An object the default serde refuses (pickle fallback is off)."""

    def __reduce__(self) -> Any:
        raise TypeError("no")


@pytest.mark.parametrize(
    ("config", "error", "message"),
    [
        ({}, ConfigError, "thread_id"),
        ({"configurable": {}}, ConfigError, "thread_id"),
        ({"configurable": {"thread_id": None}}, ConfigError, "thread_id"),
        ({"configurable": {"thread_id": ["x"]}}, ConfigError, "pass a str"),
        ({"configurable": {"thread_id": "t", "checkpoint_ns": 3}}, ConfigError, "checkpoint_ns"),
        ({"configurable": {"thread_id": "t", "checkpoint_id": 5}}, ConfigError, "checkpoint_id"),
        ("not a config", ConfigError, "mapping"),
    ],
)
def test_bad_config_on_put(
    saver: DeltaLogSaver, config: Any, error: type[Exception], message: str
) -> None:
    """put with a config lacking or mistyping keys raises ConfigError and stores nothing."""
    before = _store_entries(saver)
    with pytest.raises(error, match=message):
        saver.put(config, empty_checkpoint(), {}, {})
    assert _store_entries(saver) == before


@pytest.mark.parametrize("metadata", [None, [], "meta"])
def test_bad_metadata_on_put(saver: DeltaLogSaver, metadata: Any) -> None:
    """put with metadata that is not a mapping raises InvalidInputError naming it, storing nothing
    (LangGraph's get_checkpoint_metadata would raise a bare AttributeError; Hypothesis found it)."""
    before = _store_entries(saver)
    with pytest.raises(InvalidInputError, match=r"metadata .* is not a mapping"):
        saver.put({"configurable": {"thread_id": "t"}}, empty_checkpoint(), metadata, {})
    assert _store_entries(saver) == before


def test_get_tuple_without_thread_id(saver: DeltaLogSaver) -> None:
    """get_tuple without thread_id raises ConfigError naming the fix."""
    with pytest.raises(ConfigError, match=r"configurable\.thread_id"):
        saver.get_tuple({"configurable": {}})


def test_put_writes_without_checkpoint_id(saver: DeltaLogSaver) -> None:
    """put_writes without checkpoint_id raises before writing."""
    before = _store_entries(saver)
    with pytest.raises(ConfigError, match="checkpoint_id"):
        saver.put_writes({"configurable": {"thread_id": "t"}}, [("c", 1)], "task")
    assert _store_entries(saver) == before


@pytest.mark.parametrize(
    ("writes", "task_id", "task_path", "message"),
    [
        ([("c", 1), "oops"], "task", "", "write #1"),
        ([(1, 1)], "task", "", "str channel"),
        ([("c", 1)], 7, "", "task_id"),
        ([("c", 1)], "task", None, "task_path"),
        ([("c", 1), ("d", Unserializable())], "task", "", "cannot be serialized"),
        (None, "task", "", "not a sequence of"),
        ("cv", "task", "", "not a sequence of"),
        ({"c": 1}, "task", "", "not a sequence of"),
    ],
)
def test_bad_writes_store_nothing(
    saver: DeltaLogSaver, writes: Any, task_id: Any, task_path: Any, message: str
) -> None:
    """A malformed or unserializable write fails the whole put_writes before anything is stored."""
    config = saver.put(
        {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {}
    )
    before = _store_entries(saver)
    with pytest.raises(InvalidInputError, match=message):
        saver.put_writes(config, writes, task_id, task_path)
    assert _store_entries(saver) == before


def test_unserializable_channel_value(saver: DeltaLogSaver) -> None:
    """An unserializable channel value names the channel and stores nothing."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"ok": 1, "bad": Unserializable()}
    checkpoint["channel_versions"] = {"ok": 1, "bad": 1}
    before = _store_entries(saver)
    with pytest.raises(InvalidInputError, match="channel 'bad'"):
        saver.put({"configurable": {"thread_id": "t"}}, checkpoint, {}, {"ok": 1, "bad": 1})
    assert _store_entries(saver) == before


@pytest.mark.parametrize("version", [True, None, [1], 2**70])
def test_bad_channel_version(saver: DeltaLogSaver, version: Any) -> None:
    """A channel version that is not an int/float/str (or overflows) raises before writing."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"c": 1}
    checkpoint["channel_versions"] = {"c": version}
    with pytest.raises(InvalidInputError, match="channel version"):
        saver.put({"configurable": {"thread_id": "t"}}, checkpoint, {}, {"c": version})
    assert _store_entries(saver)["checkpoints"] == 0


def test_overlong_checkpoint_id(saver: DeltaLogSaver) -> None:
    """A non-uuid checkpoint id too long for a key raises KeyTooLongError, storing nothing."""
    checkpoint = empty_checkpoint()
    checkpoint["id"] = "x" * 500
    with pytest.raises(KeyTooLongError, match="uuid6"):
        saver.put({"configurable": {"thread_id": "t"}}, checkpoint, {}, {})
    assert _store_entries(saver)["checkpoints"] == 0


def test_list_bad_arguments(saver: DeltaLogSaver) -> None:
    """list rejects a non-int limit and a non-mapping filter."""
    with pytest.raises(InvalidInputError, match="limit"):
        list(saver.list(None, limit="3"))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="filter"):
        list(saver.list(None, filter=[("a", 1)]))  # type: ignore[arg-type]


def test_long_and_odd_thread_ids_work(saver: DeltaLogSaver) -> None:
    """R5: a 10 KB thread_id, NUL and unicode in ids and namespaces all round-trip."""
    for thread_id, ns in [("t" * 10_000, ""), ("a\x00b", "ns\x00"), ("ünï cödé ✓", "child:1")]:
        config = saver.put(
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}},
            empty_checkpoint(),
            {},
            {},
        )
        got = saver.get_tuple(config)
        assert got is not None and got.config == config


def test_int_thread_id_is_converted(saver: DeltaLogSaver) -> None:
    """An int thread_id is stored as its str (as SqliteSaver/PostgresSaver do)."""
    config = saver.put({"configurable": {"thread_id": 42}}, empty_checkpoint(), {}, {})
    assert config["configurable"]["thread_id"] == "42"
    assert saver.get_tuple({"configurable": {"thread_id": "42"}}) is not None


def test_from_path_bad_sizes(tmp_path: Any) -> None:
    """Nonsensical map sizes and thresholds are refused with the values named."""
    with pytest.raises(ValueError, match="map_size"):
        DeltaLogSaver.from_path(tmp_path / "a", map_size=10, max_map_size=5)
    with pytest.raises(ValueError, match="compress_threshold"):
        DeltaLogSaver.from_path(tmp_path / "b", compress_threshold=-1)
