"""Imports point down the layers, and only the storage modules import lmdb (issue 16, "guards")."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"deltalog.engine": ROOT / "engine", "deltalog.channels": ROOT / "channels"}
PACKAGE_OF = {folder.name: package for package, folder in PACKAGES.items()}

# The layers, top to bottom. Every module of engine/ and channels/ is listed: a
# new module fails test_every_module_has_a_layer until it is given its room.
LAYERS: dict[str, str] = {
    # the public facade: re-exports the saver, the store and the errors
    "deltalog.engine": "facade",
    # command line: parses, formats, calls the services
    "deltalog.engine.__main__": "cli",
    "deltalog.engine.cli": "cli",
    "deltalog.engine.cli_common": "cli",
    "deltalog.engine.cli_serde": "cli",
    "deltalog.engine.cli_memory": "cli",
    "deltalog.engine.cli_inspect": "cli",
    "deltalog.engine.cli_ops": "cli",
    # services: the LangGraph interface and what runs over it
    "deltalog.engine.saver": "services",
    "deltalog.engine.access": "services",
    "deltalog.engine.maintenance": "services",
    "deltalog.engine.values": "services",
    "deltalog.engine.prepare": "services",
    "deltalog.engine.inspection": "services",
    "deltalog.engine.summaries": "services",
    "deltalog.engine.reads": "services",
    "deltalog.engine.shared": "services",
    "deltalog.engine.aio": "services",
    "deltalog.engine.memory": "services",
    "deltalog.engine.memory_search": "services",
    "deltalog.engine.memory_ttl": "services",
    "deltalog.engine.migrate": "services",
    "deltalog.engine.migrate_items": "services",
    "deltalog.engine.demo": "services",
    "deltalog.engine.reports": "services",
    # storage I/O: the LMDB layer and the caches of what it read
    "deltalog.engine.env": "storage",
    "deltalog.engine.env_open": "storage",
    "deltalog.engine.env_files": "storage",
    "deltalog.engine.group_commit": "storage",
    "deltalog.engine.txn_base": "storage",
    "deltalog.engine.merged": "storage",
    "deltalog.engine.packs": "storage",
    "deltalog.engine.blobs": "storage",
    "deltalog.engine.history": "storage",
    "deltalog.engine.queries": "storage",
    "deltalog.engine.verify_reads": "storage",
    "deltalog.engine.read_txn": "storage",
    "deltalog.engine.checkpoint_writes": "storage",
    "deltalog.engine.thread_ops": "storage",
    "deltalog.engine.write_txn": "storage",
    "deltalog.engine.table_check": "storage",
    "deltalog.engine.memory_io": "storage",
    "deltalog.engine.memory_gets": "storage",
    "deltalog.engine.memory_export": "storage",
    "deltalog.engine.memo": "storage",
    "deltalog.engine.cache": "storage",
    "deltalog.engine.copies": "storage",
    # format and pure logic: key bytes, record codec, plans and walks
    "deltalog.engine.keys": "format",
    "deltalog.engine.codec": "format",
    "deltalog.engine.splice": "format",
    "deltalog.engine.envelope": "format",
    "deltalog.engine.checkpoint_form": "format",
    "deltalog.engine.core": "format",
    "deltalog.engine.memory_chunks": "format",
    "deltalog.engine.memory_core": "format",
    "deltalog.engine.import_check": "format",
    "deltalog.engine.export": "format",
    "deltalog.engine.names": "format",
    "deltalog.engine.migrations": "format",
    "deltalog.engine.config": "format",
    # plain rows and the errors
    "deltalog.engine.store_rows": "rows",
    "deltalog.engine.errors": "rows",
    # LangGraph channel helpers: a stack of their own, below the services
    "deltalog.channels": "channels",
    "deltalog.channels.fields": "channels",
    "deltalog.channels.policy": "channels",
    "deltalog.channels.reducers": "channels",
    "deltalog.channels.replay": "channels",
}

# Which layers a module of each layer may import (its own included).
MAY_IMPORT: dict[str, frozenset[str]] = {
    "facade": frozenset({"facade", "cli", "services", "storage", "format", "rows", "channels"}),
    # The CLI reaches storage only through services (engine/access.py opens a
    # store for it; inspection is library code), issue 16.
    "cli": frozenset({"cli", "services", "format", "rows", "channels"}),
    "services": frozenset({"services", "storage", "format", "rows", "channels"}),
    "storage": frozenset({"storage", "format", "rows"}),
    "format": frozenset({"format", "rows"}),
    "rows": frozenset({"rows"}),
    "channels": frozenset({"channels"}),
}

# The only modules that may import lmdb: the environment facade, its opening,
# its files and error translation, and the table walk of verify.
LMDB_MODULES = frozenset(
    {
        "deltalog.engine.env",
        "deltalog.engine.env_open",
        "deltalog.engine.env_files",
        "deltalog.engine.table_check",
    }
)

# Known upward imports (importer, imported), each with its issue reference.
# This list may only shrink: a new upward import fails, and an entry that no
# longer occurs fails too, so it is taken out when fixed.
KNOWN_UPWARD_IMPORTS: frozenset[tuple[str, str]] = frozenset()

# Upward *calls* that no import shows: a lower module holds a callback the
# upper one hands it. The import walk cannot see these; each entry names the
# module and the callback's name, and fails once the name is gone (issue 16:
# "No upward calls: everything is serialized before a write transaction
# begins; the codec is handed its dictionaries, it does not fetch them").
KNOWN_UPWARD_CALLS: dict[tuple[str, str], str] = {}


# The modules that touch the `checkpoints` and `writes` databases themselves:
# txn_base owns their records (docs/design.md, "Turn packs": a merged view of
# plain records and packs will replace its cursors), and migrations rewrite old
# formats in place. Everything else asks txn_base.
RECORD_DB_OWNERS = frozenset({"deltalog.engine.txn_base", "deltalog.engine.migrations"})
RECORD_DBS = frozenset({"checkpoints", "writes"})


def record_db_uses(sources: dict[str, str]) -> list[tuple[str, int]]:
    """(module, line) of each ``<...>dbs.checkpoints`` / ``<...>dbs.writes`` outside
    RECORD_DB_OWNERS."""
    found: list[tuple[str, int]] = []
    for module, source in sources.items():
        if module in RECORD_DB_OWNERS:
            continue
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Attribute) or node.attr not in RECORD_DBS:
                continue
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name in ("dbs", "_dbs"):
                found.append((module, node.lineno))
    return sorted(found)


class Edge(NamedTuple):
    importer: str
    imported: str
    line: int


def source_modules() -> dict[str, Path]:
    """Every module file under engine/ and channels/, by its dotted name."""
    out: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([package, *parts])] = path
    return out


def imports(module: str, source: str, is_package: bool, known: Iterable[str]) -> Iterator[Edge]:
    """Every module ``module`` imports (at any depth, TYPE_CHECKING included).

    ``from P import name`` is an edge to ``P.name`` when that is a module,
    else to ``P`` itself (a name the package re-exports).
    """
    known = set(known)
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Edge(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                yield Edge(module, target if target in known else base, node.lineno)


def all_edges(sources: Mapping[str, str], packages: Iterable[str]) -> list[Edge]:
    packages = set(packages)
    return [
        edge
        for module, source in sources.items()
        for edge in imports(module, source, module in packages, sources)
    ]


def upward(edges: Iterable[Edge]) -> list[Edge]:
    """The edges between layered modules that the layer table does not allow."""
    return [
        e
        for e in edges
        if e.imported in LAYERS
        and e.importer in LAYERS
        and LAYERS[e.imported] not in MAY_IMPORT[LAYERS[e.importer]]
    ]


def lmdb_outside_storage(edges: Iterable[Edge]) -> list[Edge]:
    return [
        e for e in edges if e.imported.split(".")[0] == "lmdb" and e.importer not in LMDB_MODULES
    ]


def read_sources() -> tuple[dict[str, str], set[str]]:
    modules = source_modules()
    packages = {m for m, p in modules.items() if p.name == "__init__.py"}
    return {m: p.read_text() for m, p in modules.items()}, packages


def test_every_module_has_a_layer() -> None:
    """Each module under engine/ and channels/ is placed in the layer table."""
    modules = set(source_modules())
    assert modules - set(LAYERS) == set(), "give each new module a layer in LAYERS"
    assert set(LAYERS) - modules == set(), "LAYERS names a module that no longer exists"


def test_imports_point_down_the_layers() -> None:
    """No module imports a module of a layer above its own, beyond the known list."""
    sources, packages = read_sources()
    found = {(e.importer, e.imported): e.line for e in upward(all_edges(sources, packages))}
    new = {edge: line for edge, line in found.items() if edge not in KNOWN_UPWARD_IMPORTS}
    assert new == {}, "an import points up the layers (importer, imported): line"
    fixed = KNOWN_UPWARD_IMPORTS - set(found)
    assert fixed == set(), "no longer imported: take these out of KNOWN_UPWARD_IMPORTS"


def test_only_the_storage_modules_import_lmdb() -> None:
    """lmdb is imported by the modules in LMDB_MODULES and nowhere else in the packages."""
    sources, packages = read_sources()
    edges = all_edges(sources, packages)
    assert lmdb_outside_storage(edges) == []
    assert {e.importer for e in edges if e.imported == "lmdb"} == LMDB_MODULES


def test_known_upward_calls_are_still_there() -> None:
    """Each listed callback still exists; once the split removes one, its entry goes."""
    sources, _ = read_sources()
    for (module, name), what in KNOWN_UPWARD_CALLS.items():
        tree = ast.parse(sources[module])
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        names |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
        assert name in names, f"{what} ({module}.{name}) is gone: remove it from the list"


def test_the_walk_catches_an_upward_import_and_a_stray_lmdb() -> None:
    """The checker itself: planted bad imports in a copy of today's sources are found."""
    sources, packages = read_sources()
    sources["deltalog.engine.keys"] += "\nfrom deltalog.engine.env import Environment\n"
    sources["deltalog.engine.codec"] += (
        "\ndef f() -> None:\n    from deltalog.engine import saver\n"
    )
    sources["deltalog.engine.core"] += "\nfrom . import cache\n"
    sources["deltalog.engine.store_rows"] += "\nfrom deltalog.engine import DeltaLogSaver\n"
    sources["deltalog.channels.replay"] += "\nimport deltalog.engine.errors\n"
    sources["deltalog.engine.saver"] += "\nimport lmdb.cffi\n"
    edges = all_edges(sources, packages)
    assert {(e.importer, e.imported) for e in upward(edges)} == {
        ("deltalog.engine.keys", "deltalog.engine.env"),
        ("deltalog.engine.codec", "deltalog.engine.saver"),
        ("deltalog.engine.core", "deltalog.engine.cache"),
        ("deltalog.engine.store_rows", "deltalog.engine"),
        ("deltalog.channels.replay", "deltalog.engine.errors"),
    }
    assert [(e.importer, e.imported) for e in lmdb_outside_storage(edges)] == [
        ("deltalog.engine.saver", "lmdb.cffi")
    ]


def test_the_design_doc_places_every_module_as_the_table_does() -> None:
    """docs/design.md "Where things live" lists each module once, in its LAYERS layer."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    placed: dict[str, str] = {}
    for row in section.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[1].startswith("`"):
            continue
        folder = ""
        for name in re.findall(r"`([^`]+\.py)`", cells[1]):
            folder, _, file = name.rpartition("/") if "/" in name else (folder, "/", name)
            parts = [PACKAGE_OF[folder], *Path(file).with_suffix("").parts]
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            assert module not in placed, f"{module} is listed twice"
            placed[module] = cells[0]
    assert placed == LAYERS


def test_only_txn_base_touches_the_checkpoint_and_write_databases() -> None:
    """Every reader and writer of checkpoint and write records goes through txn_base's
    accessors (checkpoint_cursor, write_cursor, checkpoint_raw, ...), so the turn pack's
    merged view has one place to go; a planted direct use is found."""
    sources, _ = read_sources()
    assert record_db_uses(sources) == []
    sources["deltalog.engine.queries"] += "\n\ndef f(self):\n    return self.dbs.writes\n"
    sources["deltalog.engine.env"] += "\n\ndef g(env):\n    return env._dbs.checkpoints\n"
    planted = record_db_uses(sources)
    assert [m for m, _ in planted] == ["deltalog.engine.env", "deltalog.engine.queries"]
