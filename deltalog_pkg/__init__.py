"""deltalog: an embedded, event-sourced LMDB checkpointer for LangGraph.

>>> from deltalog import DeltaLogSaver  # doctest: +SKIP
>>> with DeltaLogSaver.from_conn_string("chat.lmdb") as saver:  # doctest: +SKIP
...     graph = builder.compile(checkpointer=saver)

``import deltalog`` is cheap: the names below load their modules (and
LangGraph) on first use. ``__version__`` is the one place the version is
written (pyproject.toml reads it; see CHANGELOG.md for what versions promise).
``python -m deltalog`` is the ``deltalog`` command.

Subpackages: :mod:`deltalog.engine` (the saver and store),
:mod:`deltalog.channels` (DeltaChannel reducers), :mod:`deltalog.bench`,
:mod:`deltalog.langgraph` (the ``langgraph.json`` hooks).
"""

from __future__ import annotations

import importlib

# Not `from typing import TYPE_CHECKING`: importing typing would double the
# cost of `import deltalog` (mypy reads the bare name the same way).
TYPE_CHECKING = False
__version__ = "0.1.0"

if TYPE_CHECKING:
    from typing import Any

    from deltalog.channels.fields import DeltaMessages, DeltaMessagesState
    from deltalog.engine.env import Environment
    from deltalog.engine.errors import DeltaLogError
    from deltalog.engine.memory import DeltaLogStore
    from deltalog.engine.saver import DeltaLogSaver

# Public name -> module that defines it, imported on first access (PEP 562).
_EXPORTS: dict[str, str] = {
    "DeltaLogSaver": "deltalog.engine.saver",
    "DeltaLogStore": "deltalog.engine.memory",
    "Environment": "deltalog.engine.env",
    "DeltaLogError": "deltalog.engine.errors",
    "DeltaMessages": "deltalog.channels.fields",
    "DeltaMessagesState": "deltalog.channels.fields",
}

__all__ = [
    "DeltaLogError",
    "DeltaLogSaver",
    "DeltaLogStore",
    "DeltaMessages",
    "DeltaMessagesState",
    "Environment",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'deltalog' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
