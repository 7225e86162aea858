"""``deltalog memory``: the long-term memory store's items from the shell.

A thin click layer over :class:`~deltalog.engine.memory.DeltaLogStore`.
Namespaces are written with dots (``users.u1`` is ``("users", "u1")``;
labels never hold a period). Reads open the store read-only.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from deltalog.engine.access import Environment, open_environment
from deltalog.engine.cli_common import CONTEXT_SETTINGS, Output, json_option, store_path
from deltalog.engine.errors import DeltaLogError, ItemValueError
from deltalog.engine.memory import DeltaLogStore
from langgraph.store.base import Item
from rich.table import Table

__all__ = ["memory_cmd"]


def _namespace(text: str) -> tuple[str, ...]:
    return tuple(text.split(".")) if text else ()


def _json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ItemValueError(
            f"{what} {text[:60]!r} is not JSON ({exc.msg}); quote it for the shell"
        ) from None


@contextlib.contextmanager
def _open(path: Path, *, readonly: bool) -> Iterator[DeltaLogStore]:
    if readonly:
        env: Environment | None = None
        with contextlib.suppress(DeltaLogError):
            env = open_environment(path)
        if env is not None:
            try:
                yield DeltaLogStore(env)
            finally:
                env.close()
            return
    with DeltaLogStore.from_path(path) as store:
        yield store


def _row(item: Item) -> dict[str, Any]:
    out = item.dict()
    out["namespace"] = ".".join(item.namespace)
    return out


def _print_items(out: Output, items: list[Any]) -> None:
    if out.as_json:
        out.json([_row(i) for i in items])
        return
    table = Table(
        "namespace",
        "key",
        "value",
        "updated",
        *(["score"] if items and getattr(items[0], "score", None) is not None else []),
    )
    for i in items:
        cells = [
            ".".join(i.namespace),
            i.key,
            json.dumps(i.value, ensure_ascii=False)[:80],
            i.updated_at.isoformat(timespec="seconds"),
        ]
        if len(table.columns) == 5:
            cells.append("" if i.score is None else f"{i.score:.4f}")
        table.add_row(*cells)
    out.console.print(table)


@click.group(
    "memory",
    short_help="List, read and edit long-term memory items.",
    context_settings=CONTEXT_SETTINGS,
    epilog="Examples:\n\n\b\n"
    "  deltalog memory ls app.lmdb users\n"
    "  deltalog memory get app.lmdb users.u1 profile\n"
    '  deltalog memory search app.lmdb users --filter \'{"visits": {"$gt": 2}}\'\n'
    "  deltalog memory put app.lmdb users.u1 profile '{\"visits\": 1}' --ttl 60\n"
    "  deltalog memory delete app.lmdb users.u1 profile\n"
    "  deltalog memory verify app.lmdb",
)
def memory_cmd() -> None:
    """The memory store (LangGraph's BaseStore) in PATH: ls, get, search, put, delete, verify.

    NAMESPACE is dotted: users.u1 is ("users", "u1"). See docs/memory.md.
    """


@memory_cmd.command("ls", context_settings=CONTEXT_SETTINGS)
@store_path()
@click.argument("prefix", default="", metavar="[NAMESPACE]")
@click.option("--max-depth", type=click.IntRange(min=1), help="Truncate namespaces to this depth.")
@click.option("--limit", type=click.IntRange(min=0), default=100, show_default=True)
@json_option
def ls_cmd(path: Path, prefix: str, max_depth: int | None, limit: int, as_json: bool) -> None:
    """List the namespaces holding items (under NAMESPACE)."""
    out = Output(as_json)
    with _open(path, readonly=True) as store:
        found = store.list_namespaces(
            prefix=_namespace(prefix) or None, max_depth=max_depth, limit=limit
        )
    if as_json:
        out.json([".".join(ns) for ns in found])
    else:
        for ns in found:
            out.console.print(".".join(ns))


@memory_cmd.command("get", context_settings=CONTEXT_SETTINGS)
@store_path()
@click.argument("namespace")
@click.argument("key")
@json_option
def get_cmd(path: Path, namespace: str, key: str, as_json: bool) -> None:
    """Print one item (exit status 1 if there is none)."""
    out = Output(as_json)
    with _open(path, readonly=True) as store:
        item = store.get(_namespace(namespace), key, refresh_ttl=False)
    if item is None:
        raise click.ClickException(f"no item {key!r} in namespace {namespace!r}")
    if as_json:
        out.json(_row(item))
    else:
        out.console.print_json(json.dumps(item.value, ensure_ascii=False))


@memory_cmd.command("search", context_settings=CONTEXT_SETTINGS)
@store_path()
@click.argument("prefix", default="", metavar="[NAMESPACE]")
@click.option("--filter", "filter_json", metavar="JSON", help='e.g. \'{"n": {"$gte": 2}}\'.')
@click.option("--limit", type=click.IntRange(min=0), default=10, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True)
@json_option
def search_cmd(
    path: Path, prefix: str, filter_json: str | None, limit: int, offset: int, as_json: bool
) -> None:
    """Items under NAMESPACE that match the filter (no semantic query: it needs the embedder)."""
    flt = _json_arg(filter_json, "--filter") if filter_json else None
    with _open(path, readonly=True) as store:
        items = store.search(
            _namespace(prefix), filter=flt, limit=limit, offset=offset, refresh_ttl=False
        )
    _print_items(Output(as_json), items)


@memory_cmd.command("put", context_settings=CONTEXT_SETTINGS)
@store_path(exists=False)
@click.argument("namespace")
@click.argument("key")
@click.argument("value")
@click.option(
    "--ttl", type=float, metavar="MINUTES", help="Expire this many minutes after the last access."
)
def put_cmd(path: Path, namespace: str, key: str, value: str, ttl: float | None) -> None:
    """Store VALUE (a JSON object) as KEY in NAMESPACE (no vectors: it needs the embedder)."""
    parsed = _json_arg(value, "VALUE")
    with _open(path, readonly=False) as store:
        store.put(_namespace(namespace), key, parsed, index=False, ttl=ttl)


@memory_cmd.command("delete", context_settings=CONTEXT_SETTINGS)
@store_path()
@click.argument("namespace")
@click.argument("key")
def delete_cmd(path: Path, namespace: str, key: str) -> None:
    """Delete KEY from NAMESPACE (and its vectors)."""
    with _open(path, readonly=False) as store:
        store.delete(_namespace(namespace), key)


@memory_cmd.command("verify", context_settings=CONTEXT_SETTINGS)
@store_path()
@json_option
def verify_cmd(path: Path, as_json: bool) -> None:
    """Check the memory records (exit status 1 when a problem is found)."""
    out = Output(as_json)
    with _open(path, readonly=True) as store:
        problems = store.verify()
    if as_json:
        out.json({"ok": not problems, "problems": problems})
    else:
        for p in problems:
            out.console.print(f"[red]problem[/red]: {p}", soft_wrap=True)
        out.console.print("memory records: ok" if not problems else f"{len(problems)} problem(s)")
    if problems:
        raise click.exceptions.Exit(1)
