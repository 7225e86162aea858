"""How tools outside the engine open a store: the one door the CLI uses.

A read-only :class:`~deltalog.engine.env.Environment` needs no LangGraph (the
commands that read keys and sizes only start fast); a saver is opened
read-only for inspection or writable for the commands that change a store;
files a tool writes with checkpoint data are owner-only. Everything here
refuses a path that holds no deltalog store (:class:`NotAStoreError`) before
anything is created or changed (R12).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from deltalog.engine.env import Environment
from deltalog.engine.env_files import check_data_file, open_owner_only

if TYPE_CHECKING:
    from deltalog.engine.saver import DeltaLogSaver
    from langgraph.checkpoint.serde.base import SerializerProtocol

__all__ = ["Environment", "open_environment", "open_owner_only", "open_saver"]


def open_environment(path: Path | str) -> Environment:
    """The store at ``path``, read-only, without a saver (so without LangGraph)."""
    return Environment(path, readonly=True)


def open_saver(
    path: Path | str, *, readonly: bool, create: bool, serde: SerializerProtocol
) -> DeltaLogSaver:
    """A saver over the store at ``path``: read-only (inspection) or writable; a
    writable open with ``create`` False refuses a folder without ``data.mdb``."""
    from deltalog.engine.saver import DeltaLogSaver

    if readonly:
        return DeltaLogSaver(Environment(path, readonly=True), serde=serde)
    if not create:
        check_data_file(os.fspath(path), required=True)
    return DeltaLogSaver.from_path(path, serde=serde)
