"""The architecture rules of issue 22 as tests, so later work cannot undo them.

Each test reads the source of the project's five packages (identity, wire, node, sync, agent) as it is: the import graph
that grimp builds from every `import` statement (those inside functions included, those under `if TYPE_CHECKING:`
left out), and the AST of every module. A failure lists every offender with its file and line.

The package direction is also written as import-linter contracts (`[tool.importlinter]` in pyproject.toml,
`lint-imports` in `make lint`); these tests state the whole rule, which import-linter cannot express in full (it has
no "every module of node except these" and no module-level circles).
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grimp
import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("identity", "wire", "node", "sync", "agent")
MAX_CLASS_LINES = 300
# agent.client.Client is the public API of the agent side: its methods stay as they are (it may delegate).
LARGE_CLASSES_ALLOWED = {"agent.client.Client"}
COMPOSITION_ROOT = "node.cli"  # the `bbs` CLI: the one module of node that may import the agent side
# node/'s top level holds only the modules that compose the features; everything else lives in a feature package
# (node/store/, node/web/, node/entries/, ...: docs/architecture.md, docs/decisions.md record 49). `errors` is what
# node/store/ and node/web/ both use, so neither holds it.
NODE_TOP_LEVEL = ("__init__", "app", "cli", "errors", "features", "routes", "service")
MAX_NODE_TOP_LEVEL = 10
MAX_CYCLES_SHOWN = 50  # per strongly connected group of modules

# Private names of the standard library or a third-party package that the project uses because there is no
# public spelling; each entry is the expression as written in the source, with the reason.
PRIVATE_NAMES_ALLOWED = {
    # The type of ArgumentParser.add_subparsers()'s result, needed to annotate a function that adds
    # subcommands; argparse exports no public name for it.
    "argparse._SubParsersAction": "argparse has no public name for the subparsers action type",
}


# ---- the sources ----------------------------------------------------------------------------------------------


def source_files() -> list[Path]:
    """Every Python file of the five packages, `__init__.py` included."""
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def module_name(path: Path) -> str:
    """The dotted module name of a source file (`node/store/db.py` -> `node.store.db`)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@functools.cache
def import_graph() -> grimp.ImportGraph:
    """The project's import graph: imports inside functions count, `if TYPE_CHECKING:` imports do not."""
    return grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)


def direct_imports() -> Iterator[tuple[str, str]]:
    """Every (importer, imported) pair of the project's modules, sorted."""
    graph = import_graph()
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            yield importer, imported


def import_lines(importer: str, imported: str) -> str:
    """Where `importer` imports `imported`: `file:line` of each import statement."""
    details = import_graph().get_import_details(importer=importer, imported=imported)
    path = ROOT / Path(*importer.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    return ", ".join(where(path, detail["line_number"]) for detail in details) or importer


def within(module: str, package: str) -> bool:
    """True if `module` is `package` or one of its submodules."""
    return module == package or module.startswith(package + ".")


# ---- no import circles ----------------------------------------------------------------------------------------


def test_the_graph_is_built_from_this_tree() -> None:
    """The rules below read the tree under test, not another installed copy of the packages."""
    import node

    assert Path(node.__file__).resolve().parent == ROOT / "node"
    assert "wire.api" in import_graph().modules


def test_no_import_circles() -> None:
    """No module reaches itself through imports (inside functions too; `TYPE_CHECKING` imports aside)."""
    digraph: nx.DiGraph[str] = nx.DiGraph(direct_imports())
    circles: list[str] = []
    for group in sorted(nx.strongly_connected_components(digraph), key=min):
        if len(group) == 1 and not digraph.has_edge(next(iter(group)), next(iter(group))):
            continue
        cycles = [_rotated(cycle) for cycle in itertools.islice(nx.simple_cycles(digraph.subgraph(group)), 1000)]
        cycles.sort(key=lambda cycle: (len(cycle), cycle))
        circles.append(f"modules in one circle: {', '.join(sorted(group))}")
        for cycle in cycles[:MAX_CYCLES_SHOWN]:
            steps = [f"{a} ({import_lines(a, b)})" for a, b in itertools.pairwise([*cycle, cycle[0]])]
            circles.append("  " + " -> ".join([*steps, cycle[0]]))
        if len(cycles) > MAX_CYCLES_SHOWN:
            circles.append(f"  ... and {len(cycles) - MAX_CYCLES_SHOWN} more circles through these modules")
    assert not circles, "import circles:\n" + "\n".join(circles)


def _rotated(cycle: list[str]) -> list[str]:
    """A cycle written from its smallest module, so the same circle always reads the same."""
    start = cycle.index(min(cycle))
    return cycle[start:] + cycle[:start]


# ---- package direction ----------------------------------------------------------------------------------------


def direction_error(importer: str, imported: str) -> str | None:
    """Why an import breaks the package direction (identity <- wire <- {sync, node, agent}), or None."""
    if within(importer, "identity") and not within(imported, "identity"):
        return "identity imports nothing else of the project"
    if within(importer, "wire") and not (within(imported, "identity") or within(imported, "wire")):
        return "wire imports only identity and wire"
    if within(importer, "sync") and not any(within(imported, p) for p in ("identity", "wire", "sync")):
        return "sync imports only identity, wire and sync"
    if within(importer, "agent") and within(imported, "node"):
        return "agent imports nothing of node (its REST API is the way in)"
    if within(importer, "node") and importer != COMPOSITION_ROOT:
        if within(imported, "agent"):
            return f"only {COMPOSITION_ROOT} (the bbs CLI) imports the agent side"
        if imported == COMPOSITION_ROOT:
            return f"nothing imports {COMPOSITION_ROOT}: it is the composition root, on top of everything"
    return None


def test_package_direction() -> None:
    """identity imports nothing of ours; wire only identity; sync only identity and wire; agent nothing of node;
    no node module imports agent except the composition root node.cli."""
    offenders = [
        f"{importer} -> {imported} ({import_lines(importer, imported)}): {why}"
        for importer, imported in direct_imports()
        if (why := direction_error(importer, imported)) is not None
    ]
    assert not offenders, "imports against the package direction:\n" + "\n".join(offenders)


def test_the_composition_root_imports_the_agent_side_lazily() -> None:
    """node.cli imports agent modules only inside the function of the subcommand that needs them."""
    path = ROOT / "node" / "cli.py"
    eager = [
        f"{where(path, node.lineno)}: {ast.unparse(node)}"
        for node in parsed(path).body
        if isinstance(node, ast.Import | ast.ImportFrom)
        and any(within(name, "agent") for name in _imported_modules(node))
    ]
    assert not eager, "node.cli imports the agent side at module level:\n" + "\n".join(eager)


def _imported_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return [node.module or ""]


# ---- node's top level ----------------------------------------------------------------------------------------


def test_node_top_level_holds_only_the_composition_modules() -> None:
    """node/'s top level holds the modules that compose the node (at most 10, named in NODE_TOP_LEVEL); every
    other module lives in the feature package it belongs to (scripts/house_move.py moved them there)."""
    assert len(NODE_TOP_LEVEL) <= MAX_NODE_TOP_LEVEL
    found = sorted(path.stem for path in (ROOT / "node").glob("*.py"))
    extra = [f"node/{name}.py" for name in found if name not in NODE_TOP_LEVEL]
    assert not extra, (
        "modules at node/'s top level that belong in a feature package (or, if one composes the node, in "
        "NODE_TOP_LEVEL, at most 10):\n" + "\n".join(extra)
    )


# ---- where SQL lives -------------------------------------------------------------------------------------------

SQL_CALLS = ("execute", "executemany", "executescript")
SIDE_CALL = "fetch"  # node/store/side.py's SideConnection.fetch: SQL on a process's own connection
# Modules that run SQL although they are not store modules, each with the reason. The rest of the list is the
# store-module step of issue 33 still to do: each line goes when its module's SQL moves to its feature's store.
SQL_OUTSIDE_STORES_ALLOWED = {
    "agent.runtime.memory": "the agent runtime's own memory database (the agent side, not the node's log)",
}


def is_store_module(module: str) -> bool:
    """A store module (docs/architecture.md, "Where SQL lives"): one of node/store/, a feature's `store.py`, or a
    module of a feature's `store/` package."""
    parts = module.split(".")
    return parts[:2] == ["node", "store"] or "store" in parts[2:]


def _names_side(value: ast.expr) -> bool:
    """`side` or `<anything>.side`: how every holder of a SideConnection names it."""
    return (isinstance(value, ast.Name) and value.id == "side") or (
        isinstance(value, ast.Attribute) and value.attr == "side"
    )


def test_sql_runs_only_in_store_modules() -> None:
    """No module outside the store modules (and the migration runner, node/store/db.py) calls execute,
    executemany or executescript, or a side connection's fetch (`side.fetch`, `self.side.fetch`), but those of
    SQL_OUTSIDE_STORES_ALLOWED; an allowed module that no longer runs SQL leaves the list."""
    offenders: list[str] = []
    running: set[str] = set()
    for path in source_files():
        module = module_name(path)
        for node in ast.walk(parsed(path)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and (node.func.attr in SQL_CALLS or (node.func.attr == SIDE_CALL and _names_side(node.func.value)))
                and not is_store_module(module)
                and module != "node.store.side"
            ):
                running.add(module)
                if module not in SQL_OUTSIDE_STORES_ALLOWED:
                    offenders.append(f"{where(path, node.lineno)}: .{node.func.attr}(...) in {module}")
    assert not offenders, "SQL outside the store modules (move it to the feature's store):\n" + "\n".join(offenders)
    stale = sorted(set(SQL_OUTSIDE_STORES_ALLOWED) - running)
    assert not stale, "no longer run SQL: take them off SQL_OUTSIDE_STORES_ALLOWED:\n" + "\n".join(stale)


# Tables a feature owns that no module outside it names in its SQL: another feature asks the owner's store (a
# function with a docstring) instead, so the owner can change its tables without a reader it does not know of. The
# allowed pairs are the reads still to move, each with its reason; a pair no longer found leaves the list.
FEATURE_TABLES = {"node.redaction": ("redactions", "tombstones", "redacted_bodies", "purges")}
FOREIGN_TABLES_ALLOWED = {
    ("node.inbox.store", "redactions"): "the inbox page joins a notice to its redaction in one statement",
    ("node.inbox.store", "tombstones"): "the inbox page joins a notice to its tombstone in one statement",
    ("node.ops.store", "redacted_bodies"): "a backup's copy is emptied of set-aside bodies before any migration ran",
}
_TABLE_USE = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE)\s+(\w+)")  # SQL here spells its keywords in capitals


def test_a_features_tables_are_named_only_in_its_own_modules() -> None:
    """No module outside a feature of FEATURE_TABLES names one of its tables after FROM, JOIN, INTO or UPDATE in a
    string, but the pairs of FOREIGN_TABLES_ALLOWED; an allowed pair no longer found leaves the list."""
    offenders: list[str] = []
    found: set[tuple[str, str]] = set()
    for path in source_files():
        module = module_name(path)
        owned = {t: owner for owner, tables in FEATURE_TABLES.items() if not within(module, owner) for t in tables}
        for node in ast.walk(parsed(path)):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            for table in _TABLE_USE.findall(node.value):
                if table in owned:
                    found.add((module, table))
                    if (module, table) not in FOREIGN_TABLES_ALLOWED:
                        offenders.append(f"{where(path, node.lineno)}: {table} (of {owned[table]}) in {module}")
    assert not offenders, "another feature's table named (ask its store instead):\n" + "\n".join(offenders)
    stale = sorted(f"{m}: {t}" for m, t in set(FOREIGN_TABLES_ALLOWED) - found)
    assert not stale, "no longer named: take them off FOREIGN_TABLES_ALLOWED:\n" + "\n".join(stale)


# ---- class size -----------------------------------------------------------------------------------------------


def test_no_class_over_300_lines() -> None:
    """No class spans more than 300 lines (`class` line to its last line), agent.client.Client aside."""
    offenders: list[str] = []
    for path in source_files():
        for qualname, cls in _classes(parsed(path), module_name(path)):
            lines = cls.end_lineno - cls.lineno + 1 if cls.end_lineno else 0
            if lines > MAX_CLASS_LINES and qualname not in LARGE_CLASSES_ALLOWED:
                offenders.append(f"{qualname} ({where(path, cls.lineno)}): {lines} lines")
    assert not offenders, f"classes over {MAX_CLASS_LINES} lines:\n" + "\n".join(offenders)


def _classes(tree: ast.AST, prefix: str) -> Iterator[tuple[str, ast.ClassDef]]:
    """Every class with its qualified name, nested classes included."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.ClassDef):
            yield f"{prefix}.{child.name}", child
            yield from _classes(child, f"{prefix}.{child.name}")
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _classes(child, f"{prefix}.{child.name}.<locals>")
        else:
            yield from _classes(child, prefix)


# ---- private names --------------------------------------------------------------------------------------------


def is_private(name: str) -> bool:
    """`_x` and the name-mangled `__x` are private; dunder names (`__x__`) are not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_name_uses(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, expression) of every reach into another module's or object's private names.

    The rule:
    - `from m import _x`, `import m._x` and `from m._x import y` reach into a private name or module;
    - `m._x`, where `m` is any name an import statement binds (a module, or a class or function of one), reaches
      into what that module keeps private;
    - `obj._x` on any other object reaches into that object's private state: every expression except the names
      `self` and `cls` (the instance or class whose own code this is, in any method or function nested in one)
      and `super()` (the same object, through its parent class's code); `self.db._x` counts, as `db` is another
      object. Name-mangled attributes follow the same rule: `self.__x` is fine, `obj.__x` is not.
    Dunder names (`__init__`, `__name__`, ...) are never private. Names reached through `getattr` with a string
    are not seen.
    """
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported.add(alias.asname or alias.name.split(".")[0])
                if any(is_private(part) for part in alias.name.split(".")):
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                imported.add(alias.asname or alias.name)
                if is_private(alias.name) or any(is_private(part) for part in module.split(".") if part):
                    yield node.lineno, f"{module}.{alias.name}"
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        yield node.lineno, ast.unparse(node)


def test_no_module_reaches_into_private_names() -> None:
    """See `private_name_uses` for the rule; PRIVATE_NAMES_ALLOWED lists the few outside names used by necessity."""
    offenders = [
        f"{where(path, line)}: {expression}"
        for path in source_files()
        for line, expression in sorted(set(private_name_uses(parsed(path))))
        if expression not in PRIVATE_NAMES_ALLOWED
    ]
    assert not offenders, "reaches into private names:\n" + "\n".join(offenders)


def test_the_private_name_rule() -> None:
    """The rule itself, on a made-up module: what counts as reaching in and what does not."""
    source = """
import argparse
import os.path
from m import _hidden, visible
from m._inner import thing

class A(Base):
    def method(self, other):
        self._mine = visible._theirs
        other._state = cls._shared
        super()._parent()
        self.__mangled, other.__mangled
        self.db._writer
        return self.__class__, other.__dict__, os.path._joinrealpath
"""
    found = [expression for _, expression in sorted(private_name_uses(ast.parse(source)))]
    assert found == [
        "m._hidden",
        "m._inner.thing",
        "visible._theirs",
        "other._state",
        "other.__mangled",
        "self.db._writer",
        "os.path._joinrealpath",
    ]


# ---- a test file for every module -----------------------------------------------------------------------------


def mirrored_test_file(path: Path) -> Path:
    """`pkg/sub/mod.py` -> `tests/pkg/sub/test_mod.py`."""
    relative = path.relative_to(ROOT)
    return ROOT / "tests" / relative.parent / f"test_{relative.name}"


def collected_counts(files: list[Path]) -> tuple[dict[Path, int], str]:
    """How many tests pytest collects from each file, and its output when some file failed to collect."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         "--continue-on-collection-errors", *(str(f.relative_to(ROOT)) for f in files)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    counts = dict.fromkeys(files, 0)
    for line in result.stdout.splitlines():
        if "::" in line and not line.startswith(("ERROR", "FAILED")):
            file = ROOT / line.split("::", 1)[0]
            if file in counts:
                counts[file] += 1
    errors = result.stdout if re.search(r"^ERROR ", result.stdout, re.MULTILINE) else ""
    return counts, errors


def test_every_module_has_a_test_file_that_collects_tests() -> None:
    """Every module under identity/, node/, sync/, agent/ (not `__init__.py`) has its tests in the mirrored path,
    and pytest collects at least one test there."""
    modules = [path for path in source_files() if path.name != "__init__.py"]
    expected = {path: mirrored_test_file(path) for path in modules}
    missing = [f"{path.relative_to(ROOT)} -> {test.relative_to(ROOT)}" for path, test in expected.items()
               if not test.is_file()]  # fmt: skip
    present = [test for test in expected.values() if test.is_file()]
    counts, errors = collected_counts(present) if present else ({}, "")
    empty = [f"{test.relative_to(ROOT)} collects no test" for test in present if counts[test] == 0]
    problems = [*(f"no test file: {line}" for line in missing), *empty]
    assert not problems, (
        f"{len(missing)} modules without a test file, {len(empty)} test files without tests:\n"
        + "\n".join(problems)
        + (f"\n\npytest's collection errors:\n{errors}" if errors else "")
    )
