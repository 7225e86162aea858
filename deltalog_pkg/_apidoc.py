"""Generate docs/api.md from the docstrings: ``python -m deltalog._apidoc [--check] [PATH]``.

The page lists every public method of each class in :data:`DOCUMENTED`
(inherited ones too, marked with the class that defines them) and every
public function of each module, with its signature and its Google-style
sections (Args, Returns, Yields, Raises, Example) as Markdown.
``tests/test_apidoc.py`` fails when the committed page differs from what this
prints, so editing a docstring means running ``python -m deltalog._apidoc``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["DOCUMENTED", "main", "render"]

# (import path, title) of what the page documents, in page order.
DOCUMENTED: list[tuple[str, str]] = [
    ("deltalog.engine.saver:DeltaLogSaver", "DeltaLogSaver"),
    ("deltalog.engine.memory:DeltaLogStore", "DeltaLogStore"),
    ("deltalog.engine.shared:OpenContext", "OpenContext"),
    ("deltalog.langgraph", "deltalog.langgraph"),
]

SECTIONS = ("Args", "Arguments", "Returns", "Yields", "Raises", "Example", "Examples", "Note")
HEADER = """# API reference

Generated from the docstrings by `python -m deltalog._apidoc` (do not edit by
hand; `tests/test_apidoc.py` checks it is current). Task-oriented pages:
[getting started](getting-started.md), [recipes](recipes.md),
[operations](operations.md), [channels](channels.md). Errors are all
subclasses of `deltalog.engine.errors.DeltaLogError`.
"""


class _Raw:
    """An annotation shown as written (``from __future__ import annotations`` keeps strings)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _signature(func: Callable[..., Any]) -> str:
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return "(...)"
    params = []
    for p in sig.parameters.values():
        if p.name in ("self", "cls"):
            continue
        ann = p.annotation
        params.append(p.replace(annotation=_Raw(ann) if isinstance(ann, str) else ann))
    ret = sig.return_annotation
    sig = sig.replace(
        parameters=params, return_annotation=_Raw(ret) if isinstance(ret, str) else ret
    )
    return str(sig).replace("typing.", "")


def _markdown(doc: str) -> str:
    """A Google-style docstring as Markdown: sections as bold labels, items as bullets."""
    out: list[str] = []
    lines = inspect.cleandoc(doc).splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        head = line.rstrip(":")
        if line.endswith(":") and head in SECTIONS:
            body: list[str] = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                body.append(lines[i])
                i += 1
            while body and not body[-1].strip():
                body.pop()
            out.append(f"**{head}**")
            out.append("")
            out.extend(_section(head, inspect.cleandoc("\n".join(body))))
            out.append("")
            continue
        warning = re.match(r'!!! (\w+) "(.*)"', line)
        if warning:
            i += 1
            text: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                text.append(lines[i].strip())
                i += 1
            body_text = " ".join(t for t in text if t)
            out.append(f"> **{warning.group(1).capitalize()} ({warning.group(2)}):** {body_text}")
            out.append("")
            continue
        out.append(line)
        i += 1
    return "\n".join(out).strip() + "\n"


def _section(head: str, body: str) -> Iterator[str]:
    if head.startswith("Example"):
        yield "```pycon"
        yield from body.splitlines()
        yield "```"
        return
    items: list[list[str]] = []
    for line in body.splitlines():
        if line and not line.startswith(" "):
            items.append([line.strip()])
        elif items:
            items[-1].append(line.strip())
    for item in items:
        text = " ".join(part for part in item if part)
        name, sep, rest = text.partition(": ")
        if head in ("Returns", "Yields") or not sep or " " in name.strip("*"):
            yield f"- {text}"
        else:
            yield f"- `{name}`: {rest}"


def _load(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


def _members(obj: Any) -> Iterator[tuple[str, Callable[..., Any], str | None]]:
    """(name, function, defining class when inherited) of public callables, sorted."""
    if inspect.ismodule(obj):
        for name in sorted(getattr(obj, "__all__", dir(obj))):
            value = getattr(obj, name)
            if callable(value) and not name.startswith("_") and not inspect.isclass(value):
                yield name, value, None
        return
    for name in sorted(dir(obj)):
        if name.startswith("_"):
            continue
        raw = inspect.getattr_static(obj, name)
        if isinstance(raw, (classmethod, staticmethod)):
            func = raw.__func__
        elif inspect.isfunction(raw):
            func = raw
        else:
            continue  # attributes and properties
        owner = next(c for c in obj.__mro__ if name in c.__dict__)
        yield name, func, None if owner is obj else owner.__name__


def render() -> str:
    """The whole page."""
    parts = [HEADER]
    for path, title in DOCUMENTED:
        obj = _load(path)
        where = path.replace(":", ".")
        parts.append(f"## {title}\n")
        parts.append(f"`{where}`\n")
        if obj.__doc__:
            parts.append(_markdown(obj.__doc__))
        if inspect.isclass(obj) and obj.__init__ is not object.__init__:
            parts.append(f"```text\n{title}{_signature(obj.__init__)}\n```\n")
        for name, func, inherited in _members(obj):
            parts.append(f"### {name}\n")
            parts.append(f"```text\n{name}{_signature(func)}\n```\n")
            if inherited:
                parts.append(f"*Inherited from `{inherited}`.*\n")
            doc = inspect.getdoc(func)
            parts.append(_markdown(doc) if doc else "*(no docstring)*\n")
            twin = re.match(r"Async :meth:`(\w+)`", doc or "")
            if twin and "Args:" not in (doc or ""):
                sync = twin.group(1)
                parts.append(f"Arguments, result and errors as for [`{sync}`](#{sync}).\n")
    return "\n".join(parts).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the page (default docs/api.md of the checkout), or ``--check`` it."""
    parser = argparse.ArgumentParser(prog="python -m deltalog._apidoc", description=__doc__)
    parser.add_argument("path", nargs="?", default="docs/api.md")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    page = render()
    target = Path(args.path)
    if args.check:
        current = target.read_text() if target.exists() else ""
        if current != page:
            print(f"{target} is stale: run python -m deltalog._apidoc", file=sys.stderr)
            return 1
        return 0
    target.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
