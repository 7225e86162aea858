"""What every ``deltalog`` command shares: option decorators, output, errors, parsing.

The CLI is a thin layer over :class:`~deltalog.engine.DeltaLogSaver` (style
item 12, after sqlite-utils): commands open a saver, call one public method and
print its result as a table (rich) or, with ``--json``, as one JSON document on
stdout. Progress bars and warnings go to stderr, so stdout stays parseable.
A library error becomes one line on stderr and exit status 1
(:class:`DeltaLogGroup`); a usage error is click's, exit status 2.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import importlib
import importlib.util
import json
import logging
import os
import re
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import click
from deltalog.engine.errors import DeltaLogError, UntrustedTypeError
from deltalog.engine.saver import DeltaLogSaver
from deltalog.engine.store import Store
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.pregel import Pregel
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from ulid import ULID

__all__ = [
    "AES_KEY_ENV",
    "CONTEXT_SETTINGS",
    "SERDE_ENV",
    "TRUSTED_ENV",
    "CliError",
    "DeltaLogGroup",
    "Output",
    "StrictSerializer",
    "age_option",
    "cli_serde",
    "config_for",
    "dump_json",
    "graph_option",
    "human_bytes",
    "id_time",
    "import_attr",
    "json_option",
    "load_graph",
    "make_serde",
    "ns_option",
    "one_line",
    "open_saver",
    "parse_age",
    "progress_bar",
    "store_path",
    "to_jsonable",
]

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT_SETTINGS: dict[str, Any] = {
    "help_option_names": ["-h", "--help"],
    "max_content_width": 100,
}


class CliError(click.ClickException):
    """A one-line error of a command: printed as ``Error: ...`` on stderr, exit status 1."""


def one_line(exc: BaseException) -> str:
    """The exception's message on one line (LMDB and serde messages can span lines)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, (DeltaLogError, CliError)) else f"{type(exc).__name__}: {text}"


class DeltaLogGroup(click.Group):
    """The ``deltalog`` group: library errors become one line on stderr and exit 1.

    ``--traceback`` (on the group) re-raises instead, for bug reports.
    """

    #: Errors a user can cause (bad store, bad file, bad value) rather than bugs.
    user_errors: tuple[type[BaseException], ...] = (DeltaLogError, OSError, ValueError)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, BrokenPipeError):
            raise
        except self.user_errors as exc:
            if ctx.meta.get("deltalog.traceback"):
                raise
            raise CliError(one_line(exc)) from exc
        except Exception as exc:
            # A bug (or an error nothing translates yet): still one line, never a traceback.
            if ctx.meta.get("deltalog.traceback"):
                raise
            raise CliError(
                f"internal error: {one_line(exc)}; `deltalog --traceback ...` shows where "
                "(please report it)"
            ) from exc


# -- option decorators --------------------------------------------------------------


def store_path(
    *, exists: bool = True, name: str = "path", default: str | None = None
) -> Callable[[F], F]:
    """The PATH argument: a store folder (it must exist unless ``exists`` is False).

    With ``default``, PATH may be left out (``[PATH]`` in the usage line).
    """
    # No `default=None` for a required PATH: click 8.2+ would take it as a value and
    # let `deltalog threads` (no PATH) through to the command with None.
    extra: dict[str, Any] = {} if default is None else {"default": default}
    return click.argument(
        name,
        metavar="PATH" if default is None else "[PATH]",
        type=click.Path(file_okay=False, exists=exists, path_type=Path),
        required=default is None,
        **extra,
    )


def json_option(f: F) -> F:
    """``--json``: print one JSON document on stdout instead of tables."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print JSON on stdout (for scripts) instead of tables.",
    )(f)


def ns_option(f: F) -> F:
    """``--ns``: the checkpoint namespace ('' is the root graph)."""
    return click.option(
        "--ns",
        "checkpoint_ns",
        default="",
        show_default="'' (the root graph)",
        help="Checkpoint namespace (a subgraph's, as `deltalog threads` lists them).",
    )(f)


def graph_option(f: F) -> F:
    """``--graph module:attr``: the user's graph, for exact reducers."""
    return click.option(
        "--graph",
        "graph_spec",
        metavar="MODULE:ATTR",
        help="Your graph (compiled, a StateGraph, or a function returning one), e.g. "
        "myapp.agent:graph or ./agent.py:graph; gives every channel its exact reducer.",
    )(f)


def age_option(f: F) -> F:
    """``--older-than``: an age like 7d / 12h / 30m or an ISO instant."""
    return click.option(
        "--older-than",
        "older_than",
        metavar="AGE",
        callback=lambda ctx, param, value: None if value is None else _age_param(value),
        help="Remove checkpoints older than AGE: 90s, 30m, 12h, 7d, 2w, or an ISO-8601 "
        "instant (2024-05-01T00:00:00+00:00). The latest checkpoint always stays.",
    )(f)


def _age_param(value: str) -> timedelta | datetime:
    try:
        return parse_age(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--older-than") from None


# -- parsing ----------------------------------------------------------------------------

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> timedelta | datetime:
    """Parse ``--older-than``: a duration (``90s``, ``30m``, ``12h``, ``7d``, ``2w``) or an instant.

    >>> parse_age("36h")
    datetime.timedelta(days=1, seconds=43200)
    >>> parse_age("2024-05-01T00:00:00+00:00")
    datetime.datetime(2024, 5, 1, 0, 0, tzinfo=datetime.timezone.utc)

    Raises:
        ValueError: Neither form; a naive instant (no time zone); an age too long to subtract.
    """
    m = _AGE.match(text)
    if m:
        try:
            age = timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])
            datetime.now(timezone.utc) - age  # the cut-off must be a representable instant
        except OverflowError:
            raise ValueError(
                f"{text!r} reaches back past the year 1; pass a shorter age, e.g. 3650d"
            ) from None
        return age
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an age (90s, 30m, 12h, 7d, 2w) nor an ISO-8601 instant"
        ) from None
    if when.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone; add one, e.g. {text.strip()}+00:00")
    return when


_GREGORIAN_TO_UNIX_100NS = 0x01B21DD213814000


def id_time(checkpoint_id: str | None) -> datetime | None:
    """When a checkpoint id was minted, read from the id itself (no decoding of the record).

    LangGraph's ids are UUIDv6 (a 60-bit count of 100 ns since 1582-10-15 in
    the first 64 bits); UUIDv7 and ULIDs carry milliseconds since 1970; UUIDv1
    has the v6 clock in another order. Other ids carry no time: None.

    >>> id_time("1f1ec6b3-ea2d-6ef8-800d-77846f2dee9b").year >= 2025
    True
    >>> id_time("01ARZ3NDEKTSV4RRFFQ69G5FAV").isoformat()
    '2016-07-30T23:54:10.259000+00:00'
    >>> id_time("not-an-id") is None
    True
    """
    if not checkpoint_id:
        return None
    try:
        if len(checkpoint_id) == 26:
            when: datetime = ULID.from_str(checkpoint_id).datetime
            return when.astimezone(timezone.utc)
        u = uuid.UUID(checkpoint_id)
    except ValueError:
        return None
    if u.version == 6:
        ticks = ((u.int >> 80) << 12) | ((u.int >> 64) & 0x0FFF)
    elif u.version == 1:
        ticks = u.time
    elif u.version == 7:
        return datetime.fromtimestamp((u.int >> 80) / 1000, tz=timezone.utc)
    else:
        return None
    return datetime.fromtimestamp((ticks - _GREGORIAN_TO_UNIX_100NS) / 1e7, tz=timezone.utc)


def human_bytes(n: float) -> str:
    """``1536`` → ``'1.5 KiB'``.

    >>> human_bytes(512), human_bytes(1536), human_bytes(3 * 1024**3)
    ('512 B', '1.5 KiB', '3.0 GiB')
    """
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            break
    return f"{n:.1f} {unit}"


def config_for(
    thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None
) -> RunnableConfig:
    """A ``RunnableConfig`` naming a thread, a namespace and optionally a checkpoint."""
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


# -- the serializer of CLI reads (issue 15.14, 15.16) ---------------------------------------

TRUSTED_ENV = "DELTALOG_TRUSTED"
SERDE_ENV = "DELTALOG_SERDE"
AES_KEY_ENV = "LANGGRAPH_AES_KEY"

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


# -- the store and the user's graph ------------------------------------------------------


@contextlib.contextmanager
def open_saver(
    path: Path | str, *, readonly: bool = False, serde: SerializerProtocol | None = None
) -> Iterator[DeltaLogSaver]:
    """Open the store at ``path`` (read-only for inspection) and close it afterwards.

    Values are read with ``serde``, by default :func:`cli_serde` (strict, unless ``--trusted``).
    """
    serde = serde if serde is not None else cli_serde()
    saver: DeltaLogSaver | None = None
    if readonly:
        try:
            saver = DeltaLogSaver(Store(path, readonly=True), serde=serde)
        except DeltaLogError:
            # A read-only open can fail where a normal one works (an older
            # deltalog, a lock file only a writer may create): inspect anyway.
            saver = None
    if saver is None:
        saver = DeltaLogSaver.from_path(path, serde=serde)
    try:
        yield saver
    finally:
        saver.close()


def load_graph(spec: str) -> Pregel[Any, Any, Any, Any]:
    """Import the user's graph from ``module:attr`` or ``path/to/file.py:attr``.

    The attribute may be a compiled graph, a ``StateGraph`` (compiled here
    without a checkpointer) or a function of no arguments returning either.
    The current folder is importable, as with ``python -m``.

    Raises:
        CliError: The spec is malformed, the import fails, or the object is not a graph.
    """
    return _as_graph(import_attr(spec, "--graph"), spec)


def import_attr(spec: str, option: str) -> Any:
    """The object ``module:attr`` or ``path/to/file.py:attr`` names (for ``option``).

    Raises:
        CliError: The spec is malformed, the import fails, or the attribute is missing.
    """
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"{option} {spec!r}: expected MODULE:ATTR, e.g. myapp.agent:graph")
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            file = Path(module_name).resolve()
            # A private module name: never shadows an installed module, and
            # registering it lets typing resolve the file's annotations.
            name = f"_deltalog_graph_{abs(hash(str(file))):x}_{file.stem}"
            mod_spec = importlib.util.spec_from_file_location(name, file)
            if mod_spec is None or mod_spec.loader is None:
                raise ImportError(f"cannot load {file}")
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module
            mod_spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
    except Exception as exc:
        raise CliError(
            f"{option} {spec!r}: cannot import {module_name!r}: {one_line(exc)}"
        ) from exc
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CliError(f"{option} {spec!r}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _as_graph(obj: Any, spec: str) -> Pregel[Any, Any, Any, Any]:
    from langgraph.graph import StateGraph

    if isinstance(obj, Pregel):
        return obj
    if isinstance(obj, StateGraph):
        return obj.compile()
    if callable(obj) and not isinstance(obj, type):
        try:
            made = obj()
        except TypeError as exc:
            raise CliError(f"--graph {spec!r}: calling it failed: {one_line(exc)}") from exc
        if isinstance(made, (Pregel, StateGraph)):
            return _as_graph(made, spec)
    raise CliError(
        f"--graph {spec!r} is a {type(obj).__name__}; point it at a compiled graph, a "
        "StateGraph or a function returning one"
    )


# -- output --------------------------------------------------------------------------------


def to_jsonable(value: Any) -> Any:
    """A JSON-ready form of a state value: messages as dicts, seeds unwrapped, bytes as base64.

    >>> from langchain_core.messages import AIMessage
    >>> to_jsonable({"m": [AIMessage("hi", id="a-1")], "n": (1, 2)})
    {'m': [{'role': 'ai', 'id': 'a-1', 'content': 'hi'}], 'n': [1, 2]}
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, BaseMessage):
        out: dict[str, Any] = {"role": value.type, "id": value.id, "content": value.content}
        if value.name:
            out["name"] = value.name
        for key in ("tool_calls", "tool_call_id"):
            extra = getattr(value, key, None)
            if extra:
                out[key] = to_jsonable(extra)
        return out
    if isinstance(value, _DeltaSnapshot):
        return to_jsonable(value.value)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((to_jsonable(v) for v in value), key=repr)
    if isinstance(value, (bytes, bytearray)):
        return {"$b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        with contextlib.suppress(Exception):
            return to_jsonable(dump(mode="json"))
    return repr(value)


def dump_json(value: Any) -> str:
    """The CLI's JSON: indented, UTF-8, anything unknown through :func:`to_jsonable`."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=to_jsonable)


class Output:
    """stdout (tables or JSON) and stderr (progress, warnings) of one command."""

    def __init__(self, as_json: bool = False) -> None:
        self.as_json = as_json
        self.console = Console(highlight=False, soft_wrap=False)
        self.err = Console(stderr=True, highlight=False)

    def json(self, value: Any) -> None:
        """Print one JSON document on stdout."""
        click.echo(dump_json(value))

    def warn(self, message: str) -> None:
        """One warning line on stderr."""
        self.err.print(f"[yellow]warning:[/yellow] {message}", soft_wrap=True)


def progress_bar(out: Output, *, transient: bool = False) -> Progress:
    """A progress bar on stderr; shown only when stderr is a terminal (never in pipes)."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=out.err,
        disable=not out.err.is_terminal,
        transient=transient,
    )
