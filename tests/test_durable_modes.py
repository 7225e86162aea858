"""The ``durable`` option's three settings (True, ``"normal"``, False): what each asks
LMDB for, that a bad one is refused, and that each stores and reads back the same.

A machine crash cannot be staged here; what ``"normal"`` gives up (the last commit,
on a power loss) is LMDB's ``MDB_NOMETASYNC`` contract, and the flags below are
what hands it over. A killed process loses nothing in any setting
(tests/test_crash.py runs the SIGKILL loop on each).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import deltalog.langgraph as hooks
import pytest
from deltalog.engine import DeltaLogSaver, InvalidInputError
from deltalog.engine.env_files import Durable
from deltalog.engine.memory import DeltaLogStore

from .checkpoints import put_values

# durable -> (LMDB's sync flag, LMDB's metasync flag)
FLAGS: dict[Durable, tuple[bool, bool]] = {
    True: (True, True),
    "normal": (True, False),
    False: (False, False),
}


def _flags(env: Any) -> tuple[bool, bool]:
    flags = env.env.flags()
    return bool(flags["sync"]), bool(flags["metasync"])


@pytest.mark.parametrize("durable", list(FLAGS), ids=str)
def test_saver_opens_lmdb_with_the_settings_flags(tmp_path: Path, durable: Durable) -> None:
    """True syncs the data and the meta page, "normal" the data only, False neither;
    the store reads back what it stored after a reopen with the default."""
    path = tmp_path / "s"
    with DeltaLogSaver.from_path(path, durable=durable) as saver:
        assert _flags(saver.env) == FLAGS[durable]
        config = put_values(saver, "t", {"a": 1})
    with DeltaLogSaver.from_path(path) as saver:
        assert _flags(saver.env) == (True, True)
        got = saver.get_tuple(config)
        assert got is not None and got.checkpoint["channel_values"]["a"] == 1


@pytest.mark.parametrize("durable", list(FLAGS), ids=str)
def test_memory_store_takes_the_same_settings(tmp_path: Path, durable: Durable) -> None:
    with DeltaLogStore.from_path(tmp_path / "m", durable=durable) as store:
        assert _flags(store.env) == FLAGS[durable]
        store.put(("a",), "k", {"v": 1})
        item = store.get(("a",), "k")
        assert item is not None and item.value == {"v": 1}


@pytest.mark.parametrize("bad", ["Normal", "full", "", 1, 0, None, 1.0])
def test_bad_setting_is_refused_for_saver_and_store(tmp_path: Path, bad: Any) -> None:
    """Anything but True, "normal" and False: InvalidInputError naming the value and
    the three settings, before the folder exists (an int is not taken for a bool)."""
    for opener in (DeltaLogSaver.from_path, DeltaLogStore.from_path):
        with pytest.raises(InvalidInputError) as caught:
            opener(tmp_path / "s", durable=bad)
        message = str(caught.value)
        assert f"durable={bad!r}" in message and '"normal"' in message
        assert list(tmp_path.iterdir()) == []


def test_bad_setting_is_named_even_when_the_path_is_open(tmp_path: Path) -> None:
    """A path open in this process is shared only with the same options: a bad setting
    is named as bad (not as "other options"), a different good one as different."""
    path = tmp_path / "s"
    with DeltaLogSaver.from_path(path):
        with pytest.raises(InvalidInputError, match="durable='yes': need True"):
            DeltaLogSaver.from_path(path, durable="yes")  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="already open in this process"):
            DeltaLogSaver.from_path(path, durable="normal")
        with DeltaLogSaver.from_path(path, durable=True) as again:
            assert _flags(again.env) == (True, True)


@pytest.mark.parametrize(
    ("word", "durable"),
    [("", True), ("true", True), ("Normal", "normal"), (" false ", False)],
)
def test_server_hooks_take_the_setting_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, word: str, durable: Durable
) -> None:
    """``$DELTALOG_DURABLE`` picks the setting of both ``langgraph.json`` hooks (one
    environment: the same word opens both); unset or empty is the default."""
    monkeypatch.setenv(hooks.ENV_PATH, str(tmp_path / "server.lmdb"))
    monkeypatch.setenv(hooks.ENV_DURABLE, word)

    async def open_both() -> tuple[tuple[bool, bool], tuple[bool, bool]]:
        async with hooks.checkpointer() as saver, hooks.store() as store:
            return _flags(saver.env), _flags(store.env)

    assert asyncio.run(open_both()) == (FLAGS[durable], FLAGS[durable])


def test_server_hooks_refuse_an_unknown_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(hooks.ENV_PATH, str(tmp_path / "server.lmdb"))
    monkeypatch.setenv(hooks.ENV_DURABLE, "yes")

    async def open_saver() -> None:
        async with hooks.checkpointer():
            pass

    with pytest.raises(InvalidInputError, match="DELTALOG_DURABLE='yes': need true"):
        asyncio.run(open_saver())
    assert list(tmp_path.iterdir()) == []
