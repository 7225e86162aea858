"""The serializer CLI commands read and write with (issue 15.14, 15.16).

Kept apart from :mod:`deltalog.engine.cli_common` because it subclasses
LangGraph's serde: importing it loads LangGraph, which ``deltalog --help``,
``threads`` and ``stats`` never do (issue 19, fast start). Commands import it
when they open a saver.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import click
from deltalog.engine.cli_common import (
    AES_KEY_ENV,
    TRUSTED_ENV,
    CliError,
    import_attr,
    one_line,
)
from deltalog.engine.errors import UntrustedTypeError
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

__all__ = ["StrictSerializer", "cli_serde", "make_serde"]

_events = threading.local()


def _on_serde_event(event: SerdeEvent) -> None:
    seen: list[SerdeEvent] | None = getattr(_events, "seen", None)
    if seen is not None and event["kind"] in ("msgpack_blocked", "msgpack_method_blocked"):
        seen.append(event)


_listening: list[bool] = []


class _QuietWhileRefusing(logging.Filter):
    """Drop LangGraph's "Blocked deserialization" warning where the CLI raises its own error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(_events, "seen", None) is None


class StrictSerializer(JsonPlusSerializer):
    """LangGraph's serde in strict msgpack mode: only its built-in allowlist of safe types
    is constructed (a crafted record can name ``os.system``; it comes back as plain data).

    With ``refuse_blocked``, a value naming a type the allowlist blocks raises
    :class:`UntrustedTypeError` instead: commands that write what they read
    (``migrate``, ``prune --graph``) would otherwise store it as a plain dict.
    """

    def __init__(self, *, refuse_blocked: bool = False) -> None:
        super().__init__(pickle_fallback=False, allowed_msgpack_modules=None)
        self.refuse_blocked = refuse_blocked
        if not _listening:
            register_serde_event_listener(_on_serde_event)
            logging.getLogger(JsonPlusSerializer.__module__).addFilter(_QuietWhileRefusing())
            _listening.append(True)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Load like JsonPlusSerializer; with ``refuse_blocked``, refuse blocked types."""
        if not self.refuse_blocked:
            return super().loads_typed(data)
        outer = getattr(_events, "seen", None)
        _events.seen = []
        try:
            value = super().loads_typed(data)
            blocked = _events.seen
        finally:
            _events.seen = outer
        if blocked:
            names = ", ".join(sorted({f"{e['module']}.{e['name']}" for e in blocked}))
            raise UntrustedTypeError(
                f"a stored value names {names}, which LangGraph's strict msgpack allowlist "
                "blocks; copying it would store plain data instead. If the store's contents "
                f"are yours, re-run as `deltalog --trusted ...` (or set {TRUSTED_ENV}=1)"
            )
        return value


def make_serde(
    *, trusted: bool = False, spec: str | None = None, refuse_blocked: bool = False
) -> SerializerProtocol:
    """The serializer CLI commands read and write with.

    Default: :class:`StrictSerializer` (safe on files from anyone); ``trusted``:
    LangGraph's default ``JsonPlusSerializer`` (constructs any type a record
    names: only for your own stores); ``spec`` (``MODULE:ATTR``): your serializer,
    used as it is. With ``LANGGRAPH_AES_KEY`` set (and no ``spec``), values are
    decrypted with ``EncryptedSerializer.from_pycryptodome_aes()`` around it.

    Raises:
        CliError: ``spec`` does not import or is not a serializer; the AES key is unusable.
    """
    if spec:
        obj = import_attr(spec, "--serde")
        if isinstance(obj, type) or (not hasattr(obj, "loads_typed") and callable(obj)):
            try:
                obj = obj()  # a serializer class, or a factory
            except Exception as exc:
                raise CliError(f"--serde {spec!r}: calling it failed: {one_line(exc)}") from exc
        if not (hasattr(obj, "loads_typed") and hasattr(obj, "dumps_typed")):
            raise CliError(
                f"--serde {spec!r} is a {type(obj).__name__}; point it at a serializer "
                "(with dumps_typed/loads_typed) or a function returning one"
            )
        serde: SerializerProtocol = obj
        return serde
    base: SerializerProtocol = (
        JsonPlusSerializer() if trusted else StrictSerializer(refuse_blocked=refuse_blocked)
    )
    if os.environ.get(AES_KEY_ENV):
        try:
            return EncryptedSerializer.from_pycryptodome_aes(serde=base)
        except (ValueError, ImportError) as exc:
            raise CliError(f"{AES_KEY_ENV}: {one_line(exc)}") from None
    return base


def cli_serde(*, refuse_blocked: bool = False) -> SerializerProtocol:
    """:func:`make_serde` with the ``--trusted`` / ``--serde`` options of this invocation."""
    ctx = click.get_current_context(silent=True)
    meta: dict[str, Any] = ctx.meta if ctx is not None else {}
    return make_serde(
        trusted=bool(meta.get("deltalog.trusted")),
        spec=meta.get("deltalog.serde"),
        refuse_blocked=refuse_blocked,
    )
