"""Bad options and paths given to ``from_path`` raise InvalidInputError naming the value, before
anything is created (R9, issue 15.13)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from deltalog.engine import DeltaLogSaver, Environment, InvalidInputError

from .checkpoints import put_values

# (keyword arguments of from_path beside the path, text the message must contain)
BAD_OPTIONS: dict[str, tuple[dict[str, Any], str]] = {
    "map_size=0": ({"map_size": 0}, "map_size=0"),
    "map_size=-1": ({"map_size": -1}, "map_size=-1"),
    "map_size='1'": ({"map_size": "1"}, "map_size='1'"),
    "map_size=1.5": ({"map_size": 1.5}, "map_size=1.5"),
    "map_size=True": ({"map_size": True}, "map_size=True"),
    "max_map_size < map_size": (
        {"map_size": 2 * 1024**2, "max_map_size": 1024**2},
        "max_map_size=1048576 is below map_size=2097152",
    ),
    "max_map_size=None": ({"max_map_size": None}, "max_map_size=None"),
    "compress_threshold=-1": ({"compress_threshold": -1}, "compress_threshold=-1"),
    "compress_threshold='x'": ({"compress_threshold": "x"}, "compress_threshold='x'"),
    "cache_bytes=-1": ({"cache_bytes": -1}, "cache_bytes=-1"),
    "cache_bytes='big'": ({"cache_bytes": "big"}, "cache_bytes='big'"),
    "max_readers=0": ({"max_readers": 0}, "max_readers=0"),
    "max_readers='many'": ({"max_readers": "many"}, "max_readers='many'"),
    "durable='Normal'": ({"durable": "Normal"}, "durable='Normal'"),
    "durable=1": ({"durable": 1}, "durable=1"),
    "durable=None": ({"durable": None}, "durable=None"),
    "pack_turns=1": ({"pack_turns": 1}, "pack_turns=1"),
    "pack_turns='no'": ({"pack_turns": "no"}, "pack_turns='no'"),
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_option_is_refused_before_anything_is_created(tmp_path: Path, case: str) -> None:
    """Each bad option: InvalidInputError naming it, and the store folder is not created."""
    options, named = BAD_OPTIONS[case]
    with pytest.raises(InvalidInputError) as caught:
        DeltaLogSaver.from_path(tmp_path / "s", **options)
    assert named in str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_option_is_named_when_the_path_is_already_open(tmp_path: Path, case: str) -> None:
    """The same with the path already open in this process: the bad value is named,
    not reported as "other options" than the open store's, and the open store is
    not touched (a good reopen still shares it)."""
    options, named = BAD_OPTIONS[case]
    with DeltaLogSaver.from_path(tmp_path / "s") as saver:
        with pytest.raises(InvalidInputError) as caught:
            DeltaLogSaver.from_path(tmp_path / "s", **options)
        assert named in str(caught.value)
        assert "already open" not in str(caught.value)
        with DeltaLogSaver.from_path(tmp_path / "s") as again:
            assert again.env is saver.env


BAD_PATHS: dict[str, tuple[Any, str]] = {
    "NUL in the path": ("s\x00t", "NUL"),
    "int path": (42, "42"),
    "bytes path": (b"store", "b'store'"),
    "None path": (None, "None"),
    "empty path": ("", "empty"),
}


@pytest.mark.parametrize("case", sorted(BAD_PATHS))
def test_bad_path_is_refused_before_anything_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """A path of the wrong type, with a NUL or empty: InvalidInputError naming it, nothing created
    (relative paths land in tmp_path); the same for ``Environment`` and ``backup``."""
    monkeypatch.chdir(tmp_path)
    path, named = BAD_PATHS[case]
    for call in (
        lambda: DeltaLogSaver.from_path(path),
        lambda: Environment(path),
        lambda: Environment(path, readonly=True),
    ):
        with pytest.raises(InvalidInputError) as caught:
            call()
        assert named in str(caught.value)
    assert list(tmp_path.iterdir()) == []
    with DeltaLogSaver.from_path(tmp_path.parent / f"{tmp_path.name}-store") as saver:
        with pytest.raises(InvalidInputError) as caught:
            saver.backup(path)
        assert named in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_non_utf8_folder_name_works(tmp_path: Path) -> None:
    """A folder whose name is not UTF-8 (as os.listdir gives it) holds a store like any other."""
    raw = os.fsencode(tmp_path) + b"/caf\xe9"
    path = os.fsdecode(raw)
    with DeltaLogSaver.from_path(path) as saver:
        config = put_values(saver, "t", {"v": [1, 2, 3]})
        saver.backup(path + "-copy")
    assert os.path.isfile(raw + b"/data.mdb")
    for folder in (path, path + "-copy"):
        with DeltaLogSaver(Environment(folder, readonly=True)) as reader:
            got = reader.get_tuple(config)
            assert got is not None and got.checkpoint["channel_values"]["v"] == [1, 2, 3]
