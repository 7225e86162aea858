"""Every ```python block in README.md and docs/*.md runs as written (issue 19.6).

Blocks of one page run in order in one namespace, in a fresh folder; a
block whose lines start with ``>>>`` runs as a doctest and must print what
the page shows. The only way out is a first line ``# not run: <reason>``,
visible on the page. A ```text block right after a block is its output.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import doctest
import io
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```\n(?:\n```text\n(.*?)^```\n)?", re.S | re.M)
OPT_OUT = re.compile(r"^# not run: \S")


def blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """(line, code, shown output) of each ```python block of a page."""
    text = page.read_text()
    return [
        (text.count("\n", 0, m.start()) + 2, m.group(1), m.group(2)) for m in BLOCK.finditer(text)
    ]


def _run_source(code: str, name: str, namespace: dict[str, Any]) -> None:
    # dont_inherit: the page's code does not get this file's `from __future__` imports.
    compiled = compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    result = eval(compiled, namespace)
    if asyncio.iscoroutine(result):
        asyncio.run(result)


def _run_doctest(code: str, name: str, namespace: dict[str, Any]) -> None:
    test = doctest.DocTestParser().get_doctest(code, namespace, name, name, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out = io.StringIO()
    runner.run(test, out=out.write, clear_globs=False)
    assert runner.failures == 0, out.getvalue()


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=lambda p: p.name)
def test_page_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each block of the page runs; a block followed by a ```text block prints exactly that."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    # A real module: typing.get_type_hints (StateGraph, TypedDict) looks classes up there.
    module = types.ModuleType(f"docs_{page.stem.replace('-', '_')}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace: dict[str, Any] = module.__dict__
    ran = 0
    for line, code, shown in blocks(page):
        name = f"{page.relative_to(ROOT)}:{line}"
        if OPT_OUT.match(code):
            continue
        if code.lstrip().startswith(">>>"):
            _run_doctest(code, name, namespace)
        else:
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                _run_source(code, name, namespace)
            if shown is not None:
                assert buffer.getvalue() == shown, f"{name} printed {buffer.getvalue()!r}"
        ran += 1
    for value in namespace.values():  # savers a page left open
        close = getattr(value, "close", None)
        if type(value).__name__ == "DeltaLogSaver" and callable(close):
            close()
    assert ran > 0, f"every block of {page.name} opted out"


def test_opt_out_is_rare_and_explained() -> None:
    """Opted-out blocks say why on their first line; a page opts out at most two."""
    for page in PAGES:
        skipped = [line for line, code, _ in blocks(page) if OPT_OUT.match(code)]
        assert len(skipped) <= 2, (page.name, skipped)
    assert sys.version_info >= (3, 10)
