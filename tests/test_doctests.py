"""Every example in the modules' docstrings runs as written (issue 16: CI runs the doctests)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from types import ModuleType

import pytest

PACKAGES = ("deltalog.engine", "deltalog.channels", "deltalog.bench")


def module_names() -> list[str]:
    """Every module of the three packages, found by walking them (new modules join by themselves)."""
    names: list[str] = []
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        names.append(package_name)
        names.extend(m.name for m in pkgutil.walk_packages(package.__path__, f"{package_name}."))
    return sorted(names)


MODULES = module_names()


def run_doctests(module: ModuleType) -> tuple[doctest.TestResults, str]:
    """Run the module's doctests; the results and the report of any failure."""
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(module, module.__name__):
        runner.run(test, out=report.append)
    return runner.summarize(verbose=False), "".join(report)


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests_pass(name: str) -> None:
    results, report = run_doctests(importlib.import_module(name))
    assert results.failed == 0, report


def test_the_doctests_are_found() -> None:
    """The walk finds the modules known to carry examples, and their examples run."""
    for name in ("deltalog.engine.cli_common", "deltalog.engine.demo", "deltalog.engine.migrate"):
        assert name in MODULES
        results, _ = run_doctests(importlib.import_module(name))
        assert results.attempted > 0, name
