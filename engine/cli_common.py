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
import io
import json
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click
from deltalog.engine.config import config_for
from deltalog.engine.errors import DeltaLogError, NotAStoreError
from rich.console import Console
from rich.measure import Measurement
from rich.padding import Padding
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text
from ulid import ULID

if TYPE_CHECKING:
    # Imported where used: `deltalog --help`, `threads` and `stats` never load
    # LangGraph or LangChain (issue 19, fast start).
    from deltalog.engine.access import Environment
    from deltalog.engine.saver import DeltaLogSaver
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.pregel import Pregel

__all__ = [
    "AES_KEY_ENV",
    "CONTEXT_SETTINGS",
    "SERDE_ENV",
    "TRUSTED_ENV",
    "CliError",
    "DeltaLogGroup",
    "Output",
    "OwnerOnlyFile",
    "age_option",
    "config_for",
    "dump_json",
    "graph_option",
    "human_bytes",
    "id_time",
    "import_attr",
    "json_option",
    "jsonl_option",
    "load_graph",
    "ns_option",
    "one_line",
    "open_saver",
    "open_store",
    "parse_age",
    "progress_bar",
    "read_stream",
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
        with _ctrl_c_noted() as interrupted:
            try:
                return super().invoke(ctx)
            except (click.ClickException, click.exceptions.Exit, click.Abort, BrokenPipeError):
                raise
            except Exception as exc:
                if interrupted():
                    # Ctrl-C inside a C extension's callback (ormsgpack's, serializing
                    # a value) comes out as that extension's TypeError or ValueError.
                    raise KeyboardInterrupt from exc
                if ctx.meta.get("deltalog.traceback"):
                    raise
                if isinstance(exc, self.user_errors):
                    raise CliError(one_line(exc)) from exc
                # A bug (or an error nothing translates yet): still one line, never a traceback.
                raise CliError(
                    f"internal error: {one_line(exc)}; `deltalog --traceback ...` shows where "
                    "(please report it)"
                ) from exc


@contextlib.contextmanager
def _ctrl_c_noted() -> Iterator[Callable[[], bool]]:
    """Note a SIGINT while Python's own handler is in place (it still raises
    KeyboardInterrupt); yields whether one came."""
    import signal
    import threading

    came: list[bool] = []
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or (
        previous is not signal.default_int_handler
    ):
        yield lambda: False
        return

    def handler(signum: int, frame: Any) -> None:
        came.append(True)
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, handler)
    try:
        yield lambda: bool(came)
    finally:
        signal.signal(signal.SIGINT, previous)


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


def jsonl_option(f: F) -> F:
    """``--jsonl``: JSON Lines on stdout, one object per row (for piping)."""
    return click.option(
        "--jsonl",
        "as_jsonl",
        is_flag=True,
        help="Print JSON Lines on stdout: one JSON object per row (for jq, sqlite-utils).",
    )(f)


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


# -- the serializer of CLI reads (issue 15.14, 15.16): deltalog.engine.cli_serde ----------

TRUSTED_ENV = "DELTALOG_TRUSTED"
SERDE_ENV = "DELTALOG_SERDE"
AES_KEY_ENV = "LANGGRAPH_AES_KEY"


# -- the store and the user's graph ------------------------------------------------------


@contextlib.contextmanager
def open_saver(
    path: Path | str,
    *,
    readonly: bool = False,
    create: bool = True,
    serde: SerializerProtocol | None = None,
) -> Iterator[DeltaLogSaver]:
    """Open the store at ``path`` (read-only for inspection) and close it afterwards.

    A read-only open has one path and never falls back to a writable one: a
    folder that holds no deltalog store is refused with exit status 2 and
    nothing is created or changed (R12, issue 15.5). So is a folder without
    ``data.mdb`` for a writable open with ``create`` False (prune, copy, delete).
    Values are read with ``serde``, by default
    :func:`~deltalog.engine.cli_serde.cli_serde` (strict, unless ``--trusted``).
    """
    from deltalog.engine import access
    from deltalog.engine.cli_serde import cli_serde

    serde = serde if serde is not None else cli_serde()
    try:
        saver = access.open_saver(path, readonly=readonly, create=create, serde=serde)
    except NotAStoreError as exc:
        raise NotAStoreCliError(one_line(exc)) from exc
    try:
        yield saver
    finally:
        saver.close()


class NotAStoreCliError(CliError):
    """PATH holds no deltalog store: a usage error (exit status 2), nothing was touched."""

    exit_code = 2


@contextlib.contextmanager
def open_store(path: Path | str) -> Iterator[Environment]:
    """Open the store at ``path`` read-only, without the saver (so without LangGraph).

    For the commands that read keys and record sizes only (``threads``,
    ``stats``, ``readers``). A folder that holds no deltalog store is refused
    as :func:`open_saver` refuses it (exit status 2, nothing touched).
    """
    from deltalog.engine.access import open_environment

    try:
        store = open_environment(path)
    except NotAStoreError as exc:
        raise NotAStoreCliError(one_line(exc)) from exc
    try:
        yield store
    finally:
        store.close()


#: The first bytes of a zstd frame (RFC 8878): how `import` knows a compressed stream.
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def read_stream(source: IO[Any]) -> IO[Any]:
    """``source`` as it should be read: decompressed when it starts with a zstd frame.

    Works on text and binary streams alike (stdin, files) and returns the same
    kind; nothing is consumed from ``source`` before the check.
    """
    text = isinstance(source, io.TextIOBase)
    raw = source.buffer if text else source  # type: ignore[attr-defined]
    if hasattr(raw, "peek"):
        head = raw.peek(4)[:4]
    elif raw.seekable():
        at = raw.tell()
        head = raw.read(4)
        raw.seek(at)
    else:
        raw = io.BufferedReader(raw)
        head = raw.peek(4)[:4]
        if not text:
            source = raw
    if head != ZSTD_MAGIC:
        return source
    import zstandard

    plain = io.BufferedReader(
        zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)  # type: ignore[arg-type]
    )
    return io.TextIOWrapper(plain, encoding="utf-8") if text else plain


def load_graph(spec: str) -> Pregel[Any, Any, Any, Any]:
    """Import the user's graph from ``module:attr`` or ``path/to/file.py:attr``.

    The attribute may be a compiled graph, a ``StateGraph`` (compiled here
    without a checkpointer) or a function of no arguments returning either.
    The current folder is importable, as with ``python -m``.

    Raises:
        CliError: The spec is malformed, the import fails, or the object is not a graph.
    """
    return _as_graph(import_attr(spec, "--graph"), spec)


def module_from_file(path: str | os.PathLike[str]) -> ModuleType:
    """Run the Python file at ``path`` as a module of its own and return it.

    Raises:
        ImportError: The file cannot be loaded (and what running it raises).
    """
    file = Path(path).resolve()
    # A private module name: never shadows an installed module, and
    # registering it lets typing (and dataclasses) resolve the file's annotations.
    name = f"_deltalog_graph_{abs(hash(str(file))):x}_{file.stem}"
    mod_spec = importlib.util.spec_from_file_location(name, file)
    if mod_spec is None or mod_spec.loader is None:
        raise ImportError(f"cannot load {file}")
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = module
    mod_spec.loader.exec_module(module)
    return module


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
            module = module_from_file(module_name)
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
    from langgraph.pregel import Pregel

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


class OwnerOnlyFile(click.File):
    """``click.File`` for output: a file it creates is 0600 whatever the umask (issue 15.10).

    Opened on first use, like ``click.File(lazy=True)``, so a command that
    fails before writing creates nothing; ``-`` is stdout.
    """

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "-" or hasattr(value, "write"):
            return super().convert(value, param, ctx)
        lazy = _OwnerOnlyOutput(os.fspath(value), self.encoding or "utf-8")
        if ctx is not None:
            ctx.call_on_close(lazy.close)
        return lazy


class _OwnerOnlyOutput:
    """A text file opened (see :func:`~deltalog.engine.access.open_owner_only`) on first use."""

    def __init__(self, path: str, encoding: str) -> None:
        self.name = path
        self.encoding = encoding
        self._file: IO[str] | None = None

    def _open(self) -> IO[str]:
        if self._file is None:
            from deltalog.engine.access import open_owner_only

            self._file = os.fdopen(open_owner_only(self.name), "w", encoding=self.encoding)
        return self._file

    def write(self, text: str) -> int:
        return self._open().write(text)

    def flush(self) -> None:
        self._open().flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def to_jsonable(value: Any) -> Any:
    """A JSON-ready form of a state value: messages as dicts, seeds unwrapped, bytes as base64.

    >>> from langchain_core.messages import AIMessage
    >>> to_jsonable({"m": [AIMessage("hi", id="a-1")], "n": (1, 2)})
    {'m': [{'role': 'ai', 'id': 'a-1', 'content': 'hi'}], 'n': [1, 2]}
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if _is_instance(value, "langchain_core.messages", "BaseMessage"):
        out: dict[str, Any] = {"role": value.type, "id": value.id, "content": value.content}
        if value.name:
            out["name"] = value.name
        for key in ("tool_calls", "tool_call_id"):
            extra = getattr(value, key, None)
            if extra:
                out[key] = to_jsonable(extra)
        return out
    if _is_instance(value, "langgraph.checkpoint.serde.types", "_DeltaSnapshot"):
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


def _is_instance(value: Any, module: str, name: str) -> bool:
    """``isinstance(value, module.name)`` without importing ``module``.

    No object of a class exists before its module is imported, so a module
    absent from ``sys.modules`` answers False at no cost.
    """
    loaded = sys.modules.get(module)
    cls = getattr(loaded, name, None) if loaded is not None else None
    return isinstance(cls, type) and isinstance(value, cls)


def dump_json(value: Any) -> str:
    """The CLI's JSON: indented, UTF-8, anything unknown through :func:`to_jsonable`."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=to_jsonable)


#: Width of stdout when it is not a terminal and COLUMNS is unset: tables and
#: lines keep their natural width in pipes and files (ids never wrap).
PIPE_WIDTH = 4096


class Output:
    """stdout (tables or JSON) and stderr (progress, warnings) of one command."""

    def __init__(self, as_json: bool = False) -> None:
        self.as_json = as_json
        self.console = Console(highlight=False, soft_wrap=False)
        if not self.console.is_terminal and not os.environ.get("COLUMNS"):
            self.console.width = PIPE_WIDTH
        self.err = Console(stderr=True, highlight=False)

    def json(self, value: Any) -> None:
        """Print one JSON document on stdout."""
        click.echo(dump_json(value))

    def jsonl(self, rows: Iterable[Any]) -> None:
        """Print JSON Lines on stdout: one compact JSON object per row."""
        for row in rows:
            click.echo(json.dumps(row, ensure_ascii=False, default=to_jsonable))

    def table(self, table: Table) -> None:
        """Print a table; one whose unwrappable cells (ids) cannot fit becomes a listing.

        A row's first cell (an id) then stands alone on its line, never wrapped
        or cut; the other cells follow as ``header: value`` pairs.
        """
        wide = self.console.options.update_width(PIPE_WIDTH)
        if (
            not any(c.no_wrap for c in table.columns)
            or Measurement.get(self.console, wide, table).minimum <= self.console.width
        ):
            self.console.print(table)
            return
        if table.title:
            self.console.print(table.title)
        columns = table.columns
        for i in range(table.row_count):
            cells = [_plain(c._cells[i]) if i < len(c._cells) else "" for c in columns]
            self.console.print(Text(cells[0], style="bold"), overflow="ignore", crop=False)
            pairs = [
                f"{c.header}: {v}" for c, v in zip(columns[1:], cells[1:], strict=True) if c.header
            ]
            self.console.print(Padding(Text("  ".join(pairs)), (0, 0, 0, 4)))

    def warn(self, message: str) -> None:
        """One warning line on stderr."""
        self.err.print(f"[yellow]warning:[/yellow] {message}", soft_wrap=True)


def _plain(cell: Any) -> str:
    """A table cell's text: markup strings are parsed (``escape``d ids come back as they are)."""
    return cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain


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
