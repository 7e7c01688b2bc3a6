#!/usr/bin/env python3
"""Issue 33's regrouping of node/ into feature packages, as a script: the record of the move, and re-runnable.

Run it at the root of a clean checkout (`python scripts/house_move.py`). It

1. `git mv`s every module of `MOVES` (old module -> new module; a package moves whole) and the tests that mirror
   them (`tests/node/test_x.py` -> `tests/node/<pkg>/test_<new name>.py`, plus `EXTRA_TESTS`), creating the new
   packages with their `__init__.py` (docstrings in `PACKAGES`; the tests tree gets empty ones);
2. rewrites every reference to a moved module across the tracked tree: Python imports through the AST (`import
   x.y`, `from x.y import z`, `from x import y` where y is a moved module, inside functions too), module paths and
   file paths in Python strings and comments (`python -m ...`, `monkeypatch.setattr("x.y.z")`,
   `resources.files(...)`, docstrings), the same in every other text file (docs, pyproject.toml, Makefile, docker/,
   .ci/), `Path(__file__).parents[n]` in moved files, and and the few edits of `EDITS`;
3. sorts and formats the Python files it changed (ruff), then checks the result: no import of an old path, no old
   path or module name left in any text file, node/'s top level only `KEEP_TOP_LEVEL`. Anything left is listed
   and the exit status is 1, so what needs a hand is in front of you.

A bare `node.X` in prose can name the module or the `Node` attribute of the same name (`node.entries`,
`node.db`, ...): such mentions are rewritten only where the context says module (`from`/`import`/`-m` before
it, a module-level name of the old module after it) and are listed as "left as is" otherwise.

If a merged branch added a module at node/'s top level, the script refuses before it moves anything: add the
module to `MOVES` (or to `KEEP_TOP_LEVEL`) and run it again.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import shutil
import subprocess
import sys
import time
import tokenize
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

# ---- the table --------------------------------------------------------------------------------------------------

# old module -> new module. An entry whose old path is a folder moves the whole package (its submodules follow).
MOVES: dict[str, str] = {
    # the lowest floor but identity: the types on the wire, imported by sync and agent too (docs/decisions.md)
    "node.wire": "wire",
    # the log, the database and what a record passes on its way into it
    "node.db": "node.store.db",
    "node.migrations": "node.store.migrations",
    "node.projections": "node.store.projections",
    "node.equivocation": "node.store.equivocation",
    "node.idempotency": "node.store.idempotency",
    "node.sealing": "node.store.sealing",
    "node.submission": "node.store.submission",
    # the HTTP edge
    "node.http": "node.web.http",
    "node.auth": "node.web.auth",
    "node.limits": "node.web.limits",
    "node.appkeys": "node.web.appkeys",
    "node.background": "node.web.background",
    # entries, links and the reads over them
    "node.entries": "node.entries.posting",
    "node.links": "node.entries.links",
    "node.reads": "node.entries.reads",
    "node.queries": "node.entries.queries",
    # the feed: entries in arrival order, long-poll
    "node.feed": "node.feed.service",
    "node.feed_routes": "node.feed.routes",
    # subscriptions, notifications and their fan-out
    "node.inbox": "node.inbox.service",
    "node.notify": "node.inbox.notify",
    # agents, their credentials, key-proof sessions, portable identities
    "node.agents": "node.agents.service",
    "node.agent_auth": "node.agents.sessions",
    "node.agent_refs": "node.agents.refs",
    "node.portable": "node.agents.portable",
    "node.challenges": "node.agents.challenges",
    # the node's side of federation
    "node.sync_store": "node.federation.store",
    "node.peer_routes": "node.federation.routes",
    "node.peer_auth": "node.federation.peer_auth",
    "node.peer_cli": "node.federation.cli",
    # trust and community confidence
    "node.trust": "node.trust.service",
    # POST /nlip
    "node.nlip_endpoint": "node.nlip.endpoint",
    # operating a node: its data folder, configuration, logs, metrics, backups, checks
    "node.backup": "node.ops.backup",
    "node.doctor": "node.ops.doctor",
    "node.config": "node.ops.config",
    "node.datadir": "node.ops.datadir",
    "node.datalock": "node.ops.datalock",
    "node.logging_setup": "node.ops.logging_setup",
    "node.progress": "node.ops.progress",
    "node.ops_cli": "node.ops.cli",
    "node.metrics": "node.ops.metrics",
}

# The new packages, with the docstring of their __init__.py.
PACKAGES: dict[str, str] = {
    "wire": "The types on the wire: request and response bodies, query parameters, NLIP and CLI shapes. Imports only"
    " identity.",
    "node.store": "The log and the database: the writer thread, migrations, projections, and what a record passes"
    " on its way in.",
    "node.web": "The HTTP edge: the route table, authentication, rate limits, app keys and background work.",
    "node.entries": "Entries and links: posting them, and the reads and searches over them.",
    "node.feed": "The feed: entries in arrival order after a cursor, with long-poll.",
    "node.inbox": "The inbox: subscriptions, notifications and their fan-out.",
    "node.agents": "Agents registered on a node: credentials, key-proof sessions, names, portable identities.",
    "node.federation": "The node's side of federation: its sync store, peer routes, peer auth and the peer CLI.",
    "node.trust": "Trust and community confidence, computed from the entries and links a node holds.",
    "node.nlip": "POST /nlip: the six primitives for NLIP clients.",
    "node.ops": "Operating a node: data folder, configuration, logs, metrics, backups, doctor and the ops CLI.",
}

# Tests that do not mirror one module but belong with a moved one: old path -> new path.
EXTRA_TESTS: dict[str, str] = {
    "tests/node/test_entries_json.py": "tests/node/entries/test_entries_json.py",
    "tests/node/test_link_semantics.py": "tests/node/entries/test_link_semantics.py",
    "tests/node/test_links_retract.py": "tests/node/entries/test_links_retract.py",
    "tests/node/test_traversal.py": "tests/node/entries/test_traversal.py",
    "tests/node/test_inbox_page.py": "tests/node/inbox/test_inbox_page.py",
    "tests/node/test_fan_out.py": "tests/node/inbox/test_fan_out.py",
    "tests/node/test_agent_list.py": "tests/node/agents/test_agent_list.py",
    "tests/node/test_agent_type.py": "tests/node/agents/test_agent_type.py",
    "tests/node/test_api_keys.py": "tests/node/agents/test_api_keys.py",
    "tests/node/test_token_cache.py": "tests/node/agents/test_token_cache.py",
}

# What stays at node/'s top level: the composition modules (tests/test_architecture.py holds the same list).
KEEP_TOP_LEVEL = {"__init__", "app", "cli", "errors", "features", "routes", "service"}

# Edits the rewrite by module path cannot see: (file, old text, new text). The package lists that name the
# project's top-level packages (for the lifted `wire`), and paths written relative to node/.
EDITS: list[tuple[str, str, str]] = [
    ("pyproject.toml", 'include = ["identity*", "node*"', 'include = ["identity*", "wire*", "node*"'),
    ("Makefile", "mypy identity node sync agent", "mypy identity wire node sync agent"),
    (".pre-commit-config.yaml", "mypy identity node sync agent", "mypy identity wire node sync agent"),
    ("CONTRIBUTING.md", "mypy identity node sync agent", "mypy identity wire node sync agent"),
    ("docker/Dockerfile", "COPY identity/ identity/\n", "COPY identity/ identity/\nCOPY wire/ wire/\n"),
    # the check that no module registers anything on import covered wire as part of node: it keeps covering it
    (
        "tests/node/test_features.py",
        '@pytest.mark.parametrize("path", sorted(NODE_DIR.rglob("*.py")),'
        " ids=lambda p: str(p.relative_to(NODE_DIR)))\n",
        "# node's modules and those of wire, which was node's subpackage until issue 33"
        " (docs/decisions.md, record 49)\n"
        'SOURCES = sorted([*NODE_DIR.rglob("*.py"), *(NODE_DIR.parent / "wire").rglob("*.py")])\n\n\n'
        '@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(NODE_DIR.parent)))\n',
    ),
    ("tests/node/test_features.py", 'assert defined == {"appkeys.py"}', 'assert defined == {"web/appkeys.py"}'),
    (
        "tests/node/test_api_doc.py",
        'CORE_MODULES = ["service", "http", "routes", "auth", "agents", "queries", "notify", "projections", "db"]',
        'CORE_MODULES = ["service", "routes", "web/http", "web/auth", "agents/service", "entries/queries",'
        ' "inbox/notify", "store/projections", "store/db"]',
    ),
    # a bare `node.db` the rewrite cannot tell from the Node attribute (files named as they are after the move)
    ("node/federation/store.py", "over node.db and projections.append", "over node.store.db and projections.append"),
]

# The import-linter contracts once `wire` is a top-level package: they replace pyproject.toml's section from the
# comment that opens it to `[tool.mypy]` (a rewrite of names alone would keep contracts written for node.wire).
IMPORT_LINTER = """\
# The package direction: identity <- wire <- {sync, node, agent}, with the `bbs` CLI (node.cli) on top.
# tests/test_architecture.py states the whole rule (and no import circles, class size, private names, node/'s
# top level); these contracts say what import-linter can, and `lint-imports` (in `make lint`) checks them with
# their import chains.
[tool.importlinter]
root_packages = ["identity", "wire", "node", "sync", "agent"]
exclude_type_checking_imports = true

[[tool.importlinter.contracts]]
name = "layers: identity <- wire <- {sync, node, agent}"
type = "layers"
layers = ["sync : node : agent", "wire", "identity"]

[[tool.importlinter.contracts]]
name = "sync imports neither node nor agent"
type = "forbidden"
source_modules = ["sync"]
forbidden_modules = ["node", "agent"]

[[tool.importlinter.contracts]]
name = "agent and node are independent but for the bbs CLI"
type = "independence"
modules = ["agent", "node"]
ignore_imports = ["node.cli -> agent.**"]  # the composition root: lazy imports per subcommand

"""
IMPORT_LINTER_START = "# The package direction:"
IMPORT_LINTER_END = "[tool.mypy]"

# Files the rewrite leaves alone: this script (its table names the old paths on purpose).
NOT_REWRITTEN = {"scripts/house_move.py"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".yaml", ".yml", ".cfg", ".ini", ".sh", ".sql", ".json", ".js",
                 ".html", ".css", ".tsv", ".sample", ""}  # fmt: skip
PROJECT_ROOTS = ("identity", "wire", "node", "sync", "agent", "tests", "scenarios", "docker")

# ---- moves --------------------------------------------------------------------------------------------------------


def module_path(root: Path, module: str) -> Path:
    """The file (`a/b.py`) or package folder (`a/b/`, with its `__init__.py`) of a dotted module name, whichever
    exists (the file if neither)."""
    base = root.joinpath(*module.split("."))
    return base if (base / "__init__.py").is_file() else base.with_suffix(".py")


@dataclass
class Plan:
    """What moves: files and folders (old path -> new path, relative to the root), and module names."""

    paths: dict[str, str] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)  # exact module renames (files)
    packages: dict[str, str] = field(default_factory=dict)  # package renames (their submodules follow)
    depth: dict[str, int] = field(default_factory=dict)  # new path of a moved .py file -> change of its depth
    toplevel: dict[str, set[str]] = field(default_factory=dict)  # old file module -> its module-level names

    def translate(self, module: str) -> str | None:
        """The new name of a module, or None if it does not move."""
        if module in self.modules:
            return self.modules[module]
        for old in sorted(self.packages, key=len, reverse=True):
            if module == old or module.startswith(old + "."):
                return self.packages[old] + module[len(old) :]
        return None


def plan(root: Path) -> tuple[Plan, list[str]]:
    """The moves for this tree; notes for entries of the table whose old path is gone (moved already or never)."""
    p, notes = Plan(), []
    for old, new in MOVES.items():
        src = module_path(root, old)
        if not src.exists():
            notes.append(f"{old}: {src.relative_to(root)} does not exist (already moved?), skipped")
            continue
        if src.is_dir():
            dst = root.joinpath(*new.split("."))
            p.packages[old] = new
            p.paths[rel(src, root)] = rel(dst, root)
            tests_src, tests_dst = root / "tests" / src.relative_to(root), root / "tests" / dst.relative_to(root)
            if tests_src.is_dir():
                p.paths[rel(tests_src, root)] = rel(tests_dst, root)
                p.packages["tests." + old] = "tests." + new
            for f in src.rglob("*.py"):
                p.depth[rel(dst / f.relative_to(src), root)] = len(new.split(".")) - len(old.split("."))
            for f in tests_src.rglob("*.py") if tests_src.is_dir() else ():
                p.depth[rel(tests_dst / f.relative_to(tests_src), root)] = len(new.split(".")) - len(old.split("."))
            continue
        dst = root.joinpath(*new.split(".")).with_suffix(".py")
        p.modules[old] = new
        p.paths[rel(src, root)] = rel(dst, root)
        p.depth[rel(dst, root)] = len(new.split(".")) - len(old.split("."))
        p.toplevel[old] = module_level_names(src)
        test_src = root / "tests" / src.parent.relative_to(root) / f"test_{src.name}"
        if test_src.is_file():
            test_dst = root / "tests" / dst.parent.relative_to(root) / f"test_{dst.name}"
            add_test_move(p, root, test_src, test_dst)
    for old_path, new_path in EXTRA_TESTS.items():
        if (root / old_path).is_file():
            add_test_move(p, root, root / old_path, root / new_path)
        else:
            notes.append(f"EXTRA_TESTS: {old_path} does not exist, skipped")
    return p, notes


def add_test_move(p: Plan, root: Path, src: Path, dst: Path) -> None:
    p.paths[rel(src, root)] = rel(dst, root)
    p.modules[dotted(src, root)] = dotted(dst, root)
    p.depth[rel(dst, root)] = len(dst.relative_to(root).parts) - len(src.relative_to(root).parts)


def rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def dotted(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts)


def module_level_names(path: Path) -> set[str]:
    """The names a module defines at its top level (functions, classes, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def move(root: Path, p: Plan) -> list[str]:
    """`git mv` every planned path, creating the new packages' `__init__.py` files; returns the files created."""
    created: list[str] = []
    for src, dst in p.paths.items():
        target = root / dst
        if target.exists():  # a folder left by an earlier run, holding only what git ignores (__pycache__)
            leftovers = [f for f in target.rglob("*") if f.is_file() and "__pycache__" not in f.parts]
            if leftovers or target.is_file():
                raise SystemExit(f"house_move: refusing: {dst} exists already ({len(leftovers)} files in it)")
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        git(root, "mv", src, dst)
    for package, doc in PACKAGES.items():
        init = root.joinpath(*package.split("."), "__init__.py")
        if init.parent.is_dir() and not init.exists():
            init.write_text(f'"""{doc}"""\n', encoding="utf-8")
            created.append(rel(init, root))
    for dst in p.paths.values():  # the tests tree has an __init__.py in every folder
        if not dst.startswith("tests/"):
            continue
        folder = (root / dst).parent if dst.endswith(".py") else (root / dst)
        while folder != root / "tests":
            init = folder / "__init__.py"
            if not init.exists():
                init.write_text("", encoding="utf-8")
                created.append(rel(init, root))
            folder = folder.parent
    if created:
        git(root, "add", *created)
    return created


# ---- rewriting text ---------------------------------------------------------------------------------------------


@dataclass
class Rewriter:
    """Rewrites old module names and file paths in text; collects the ambiguous mentions it leaves."""

    plan: Plan
    ambiguous_names: set[str]  # last parts of old modules that are also attributes of `Node`
    left: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        files = {old: new for old, new in self.plan.paths.items() if old.endswith(".py")}
        folders = {old: new for old, new in self.plan.paths.items() if not old.endswith(".py")}
        self.path_map = files | folders
        alternatives = [re.escape(p) + r"(?![\w])" for p in files] + [re.escape(p) + r"(?![\w.-])" for p in folders]
        self.path_re = re.compile(r"(?<![\w.-])(" + "|".join(sorted(alternatives, key=len, reverse=True)) + ")")
        names = sorted([*self.plan.modules, *self.plan.packages], key=len, reverse=True)
        self.new_modules = {*self.plan.modules.values(), *self.plan.packages.values(), *PACKAGES}
        self.dotted_re = re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in names) + r")((?:\.\w+)*)(?![\w])")

    def paths(self, text: str) -> str:
        def swap(match: re.Match[str]) -> str:
            old = match.group(1)
            for prefix in sorted(self.path_map, key=len, reverse=True):
                if old == prefix or old.startswith(prefix + "/"):
                    return self.path_map[prefix] + old[len(prefix) :]
            return old

        return self.path_re.sub(swap, text)

    def modules(self, text: str, where: str) -> str:
        def swap(match: re.Match[str]) -> str:
            new = self.decide(text, match)
            if new is None:
                self.left.append(f"{where}: {match.group(0)!r} (the module or a Node attribute?) in: "
                                 f"{line_of(text, match)}")  # fmt: skip
                return match.group(0)
            return new

        return self.dotted_re.sub(swap, text)

    def decide(self, text: str, match: re.Match[str]) -> str | None:
        """The new spelling of a dotted mention (itself if it names no old module), or None when ambiguous."""
        name, rest = match.group(1), match.group(2)
        full = name + rest
        if name in self.plan.packages:
            return (self.plan.translate(full) or full) if rest else self.plan.packages[name]
        first = rest[1:].split(".")[0] if rest else ""
        if first and f"{name}.{first}" in self.new_modules:
            return full  # a module of the package that now has the old module's name (node.entries.links)
        last = name.rsplit(".", 1)[-1]
        before = text[max(0, match.start() - 10) : match.start()]
        module_like = (
            name.startswith("tests.")
            or text[match.end() : match.end() + 1] == ":"  # "node.x: what it holds", "node.x:main"
            or last not in self.ambiguous_names
            or re.search(r"(\bfrom|\bimport|-m)\s+$", before) is not None
            or (bool(first) and first in self.plan.toplevel.get(name, set()))
        )
        return self.plan.modules[name] + rest if module_like else None

    def code_in_text(self, text: str) -> str:
        """`from x import y` written in a string or in prose (`python -c "from node import datalock; ..."`), where
        y is a moved module: as the AST rewrite would write it, statements joined by `; `."""

        def swap(match: re.Match[str]) -> str:
            names = [name.strip() for name in match.group(2).split(",")]
            try:
                tree = ast.parse(f"from {match.group(1)} import {', '.join(names)}")
            except SyntaxError:
                return match.group(0)
            statement = tree.body[0]
            assert isinstance(statement, ast.ImportFrom)
            new = import_edit(statement, self.plan, [], "")
            return "; ".join(new) if new else match.group(0)

        return FROM_IMPORT_RE.sub(swap, text)

    def text(self, text: str, where: str) -> str:
        return self.code_in_text(self.modules(self.paths(text), where))


_ALIAS = r"\w+(?:\s+as\s+\w+)?"
FROM_IMPORT_RE = re.compile(rf"\bfrom\s+([A-Za-z_][\w.]*)\s+import\s+({_ALIAS}(?:\s*,\s*{_ALIAS})*)")


def line_of(text: str, match: re.Match[str]) -> str:
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start : end if end != -1 else len(text)].strip()[:160]


def node_attributes(root: Path) -> set[str]:
    """The attributes `Node.__init__` sets (node/service.py): `node.X` in prose may mean one of them."""
    tree = ast.parse((root / "node" / "service.py").read_text(encoding="utf-8"))
    return {
        n.attr
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == "Node"
        for n in ast.walk(cls)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    }


# ---- rewriting Python -------------------------------------------------------------------------------------------


def offsets(source: str) -> Callable[[int, int], int]:
    """(line, utf-8 byte column) as the AST gives them -> offset into the str."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def at(lineno: int, col: int) -> int:
        line = lines[lineno - 1] if lineno - 1 < len(lines) else ""
        return starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", "replace"))

    return at


def import_edit(node: ast.Import | ast.ImportFrom, p: Plan, manual: list[str], where: str) -> list[str] | None:
    """The statements that replace an import, or None when it names nothing that moved."""
    if isinstance(node, ast.Import):
        out, changed = [], False
        for alias in node.names:
            new = p.translate(alias.name)
            if new is None:
                out.append(f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else ""))
                continue
            changed = True
            if alias.asname:
                out.append(f"import {new} as {alias.asname}")
            else:
                out.append(f"import {new}")
                manual.append(f"{where}:{node.lineno}: `import {alias.name}` became `import {new}`: its uses as"
                              f" `{alias.name}.` in the code need the new name")  # fmt: skip
        return out if changed else None
    if node.level or node.module is None:
        manual.append(f"{where}:{node.lineno}: a relative import, not rewritten")
        return None
    module = node.module
    moved_module = p.translate(module)
    groups: dict[str, list[str]] = {}
    changed = moved_module is not None
    for alias in node.names:
        target = p.translate(f"{module}.{alias.name}") if alias.name != "*" else None
        if target is not None and target != f"{moved_module}.{alias.name}":
            changed = True
            parent, name = target.rsplit(".", 1) if "." in target else ("", target)
            bound = alias.asname or alias.name
            spelled = name if bound == name else f"{name} as {bound}"
            if parent:
                groups.setdefault(f"from {parent} import", []).append(spelled)
            else:
                groups.setdefault("import", []).append(f"{name} as {bound}" if bound != name else name)
            continue
        spelled = alias.name if alias.asname is None else f"{alias.name} as {alias.asname}"
        groups.setdefault(f"from {moved_module or module} import", []).append(spelled)
    if not changed:
        return None
    return [f"{head} {', '.join(names)}" for head, names in groups.items()]


def rewrite_python(source: str, p: Plan, rw: Rewriter, where: str, depth: int, manual: list[str]) -> str:
    """Imports through the AST, strings and comments through the tokenizer, `Path(__file__)` climbs by `depth`."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        manual.append(f"{where}: does not parse ({exc.msg}), rewritten as text")
        return rw.text(source, where)
    at = offsets(source)
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        statements = import_edit(node, p, manual, where)
        if statements is None:
            continue
        start, end = at(node.lineno, node.col_offset), at(node.end_lineno or node.lineno, node.end_col_offset or 0)
        line_start = source.rfind("\n", 0, start) + 1
        own_line = source[line_start:start].strip() == ""
        glue = "\n" + " " * node.col_offset if own_line else "; "
        edits.append((start, end, glue.join(statements)))
    spans = [(s, e) for s, e, _ in edits]
    for start, end, string in strings_and_comments(source):
        if any(s <= start < e for s, e in spans):
            continue
        new = whole_module_string(string, source[:start], p) or rw.text(string, where)
        if new != string:
            edits.append((start, end, new))
    out = source
    for start, end, text in sorted(edits, reverse=True):
        out = out[:start] + text + out[end:]
    if depth:
        out = climb(out, depth, where, manual)
    return out


def whole_module_string(string: str, before: str, p: Plan) -> str | None:
    """A string literal that is exactly an old module's name ("node.trust") names the module, unless it is joined
    to a path (`tmp_path / "node.db"`: a file name)."""
    quote = string.lstrip("rRbBuU")[:1]
    body = string.lstrip("rRbBuU").strip(quote) if quote in ("'", '"') else ""
    new = p.modules.get(body)
    if new is None or before.rstrip().endswith("/"):
        return None
    return string.replace(body, new)


def strings_and_comments(source: str) -> Iterable[tuple[int, int, str]]:
    """(start, end, text) of every string literal and comment of a Python source."""
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.STRING, tokenize.COMMENT):
            yield starts[tok.start[0] - 1] + tok.start[1], starts[tok.end[0] - 1] + tok.end[1], tok.string


PARENTS_RE = re.compile(r"(Path\(__file__\)(?:\.resolve\(\))?\.parents\[)(\d+)(\])")
PARENT_CHAIN_RE = re.compile(r"(Path\(__file__\)(?:\.resolve\(\))?)((?:\.parent\b)+)")


def climb(source: str, depth: int, where: str, manual: list[str]) -> str:
    """A file `depth` folders deeper than before climbs `depth` more to reach the same place."""

    def parents(match: re.Match[str]) -> str:
        return f"{match.group(1)}{int(match.group(2)) + depth}{match.group(3)}"

    def chain(match: re.Match[str]) -> str:
        count = match.group(2).count(".parent")
        if count < 2:
            manual.append(f"{where}: `{match.group(0)}` names a folder beside a moved file: check it still exists")
            return match.group(0)
        return match.group(1) + ".parent" * (count + depth)

    return PARENT_CHAIN_RE.sub(chain, PARENTS_RE.sub(parents, source))


# ---- the whole tree ---------------------------------------------------------------------------------------------


def tracked_text_files(root: Path) -> list[Path]:
    files = []
    for name in git(root, "ls-files", "-z").split("\0"):
        if not name or name in NOT_REWRITTEN:
            continue
        path = root / name
        if not path.is_file() or path.is_symlink():
            continue
        if path.suffix not in TEXT_SUFFIXES and path.name not in ("Makefile", "Dockerfile", "run"):
            continue
        files.append(path)
    return files


def rewrite_tree(root: Path, p: Plan, rw: Rewriter, manual: list[str], before: dict[Path, set[str]]) -> list[Path]:
    """Rewrite every tracked text file; `before` gets the lines of each file it changes, as they were."""
    changed: list[Path] = []
    for path in tracked_text_files(root):
        try:
            source = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        where = rel(path, root)
        if path.suffix == ".py":
            new = rewrite_python(source, p, rw, where, p.depth.get(where, 0), manual)
        else:
            new = rw.text(source, where)
        if new != source:
            before[path] = set(source.splitlines())
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def edits(root: Path, manual: list[str]) -> list[Path]:
    """The import-linter contracts and `EDITS`; what is not found is listed for a hand."""
    changed = []
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    start, end = text.find(IMPORT_LINTER_START), text.find(IMPORT_LINTER_END)
    if IMPORT_LINTER in text:
        pass
    elif 0 <= start < end:
        pyproject.write_text(text[:start] + IMPORT_LINTER + text[end:], encoding="utf-8")
        changed.append(pyproject)
    else:
        manual.append("pyproject.toml: the [tool.importlinter] section was not found: write its contracts by hand")
    for name, old, new in EDITS:
        path = root / name
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        if new in text:
            continue
        if old not in text:
            manual.append(f"{name}: expected {old!r}, not found")
            continue
        path.write_text(text.replace(old, new), encoding="utf-8")
        changed.append(path)
    return changed


LINE_LENGTH = 120  # pyproject.toml [tool.ruff] line-length


def reflow(root: Path, files: Iterable[Path], before: dict[Path, set[str]], manual: list[str]) -> None:
    """Lines a longer path made too long (`before` holds each file's lines as they were): a comment or a line
    inside a triple-quoted string is split at its last space that fits; any other is listed for a hand."""
    for path in sorted(set(files)):
        if path.suffix != ".py" or not path.exists():
            continue
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines(keepends=True)
        if all(len(line.rstrip("\n")) <= LINE_LENGTH for line in lines):
            continue
        inside: dict[int, int] = {}  # line number -> where the text of a triple-quoted string starts on it
        opened: dict[int, int] = {}  # line number inside such a string -> the line the string opens on
        comment: dict[int, int] = {}  # line number -> column of a comment that starts its line
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            body = tok.string.lstrip("rRbBuUfF")
            if tok.type == tokenize.STRING and body[:3] in ('"""', "'''"):
                inside[tok.start[0]] = tok.start[1] + len(tok.string) - len(body) + 3
                opened[tok.start[0]] = tok.start[0]
                for n in range(tok.start[0] + 1, tok.end[0] + 1):
                    inside[n], opened[n] = 0, tok.start[0]
            elif tok.type == tokenize.COMMENT and not tok.line[: tok.start[1]].strip():
                comment[tok.start[0]] = tok.start[1]
        out: list[str] = []
        for n, line in enumerate(lines, start=1):
            text = line.rstrip("\n")
            if len(text) <= LINE_LENGTH or text in before.get(path, set()):
                out.append(line)
                continue
            indent = len(text) - len(text.lstrip())
            lone = LONE_STRING_RE.match(text)
            if lone and n not in inside and n not in comment:  # a string alone on its line, inside brackets
                split = split_lone_string(lone)
                if split is not None:
                    out.append(split + line[len(text) :])
                    continue
            first = comment[n] + 2 if n in comment else inside.get(n)
            cut = text.rfind(" ", (first or 0) + 1, LINE_LENGTH + 1) if first is not None else -1
            if cut <= indent:
                manual.append(f"{rel(path, root)}:{n}: longer than {LINE_LENGTH} characters after the rewrite")
                out.append(line)
                continue
            if n in comment:
                prefix = " " * comment[n] + "# "
            else:  # inside a string: continue at the indentation of the line the string starts on
                opening = lines[opened[n] - 1]
                prefix = " " * (len(opening) - len(opening.lstrip()))
            out.append(text[:cut].rstrip() + "\n")
            out.append(prefix + text[cut + 1 :] + line[len(text) :])
        path.write_text("".join(out), encoding="utf-8")


# A one-line string literal alone on its line (a call's argument or an element of a list), with its comma.
LONE_STRING_RE = re.compile(r'^(?P<indent> *)(?P<prefix>[rRfFbBuU]{0,2})"(?P<body>[^"\\]*)"(?P<tail>,?)$')


def split_lone_string(match: re.Match[str]) -> str | None:
    """The literal as two adjacent literals on two lines, split at a space outside `{...}`, or None."""
    indent, prefix, body, tail = (match.group(k) for k in ("indent", "prefix", "body", "tail"))
    room = LINE_LENGTH - len(indent) - len(prefix) - 2
    depth, cut = 0, -1
    for i, char in enumerate(body):
        depth += (char == "{") - (char == "}")
        if char == " " and depth == 0 and i <= room:
            cut = i
    if cut <= 0:
        return None
    first, second = body[:cut], body[cut:]
    plain = prefix.replace("f", "").replace("F", "")
    head_prefix = prefix if "{" in first else plain
    tail_prefix = prefix if "{" in second else plain
    return f'{indent}{head_prefix}"{first}"\n{indent}{tail_prefix}"{second}"{tail}'


def tidy(root: Path, files: Iterable[Path]) -> None:
    """Sort the imports and format the Python files the move changed (ruff from .venv, else from PATH)."""
    python = sorted({rel(f, root) for f in files if f.suffix == ".py" and f.exists()})
    ruff = root / ".venv" / "bin" / "ruff"
    command = str(ruff) if ruff.exists() else shutil.which("ruff")
    if not python or command is None:
        if python:
            print("ruff not found: imports not sorted, files not formatted", file=sys.stderr)
        return
    for chunk in range(0, len(python), 200):
        part = python[chunk : chunk + 200]
        subprocess.run([command, "check", "--quiet", "--fix", "--select", "I", *part], cwd=root, check=False)
        subprocess.run([command, "format", "--quiet", *part], cwd=root, check=False)


# ---- the check --------------------------------------------------------------------------------------------------


def check(root: Path, p: Plan, rw: Rewriter) -> list[str]:
    """Every reference to an old path still in the tree, and what is at node/'s top level beyond KEEP_TOP_LEVEL."""
    problems: list[str] = []
    for old in p.paths:
        if (root / old).exists():
            problems.append(f"{old}: still exists")
    probe = Rewriter(p, rw.ambiguous_names)
    for path in tracked_text_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        where = rel(path, root)
        for match in probe.path_re.finditer(text):
            problems.append(f"{where}: old path {match.group(1)!r} in: {line_of(text, match)}")
        # Python code is checked through its imports; its strings and comments, and other files, as text
        pieces = [s for _, _, s in strings_and_comments(text)] if path.suffix == ".py" else [text]
        for piece in pieces:
            for match in FROM_IMPORT_RE.finditer(piece):
                for problem in import_problems(root, match.group(0), where, p):
                    problems.append(f"{problem} (written in text: {line_of(piece, match)})")
            for match in probe.dotted_re.finditer(piece):
                new = probe.decide(piece, match)
                if new is not None and new != match.group(0):
                    problems.append(f"{where}: old module {match.group(0)!r} in: {line_of(piece, match)}")
        if path.suffix == ".py":
            problems += import_problems(root, text, where, p)
    top = {f.stem for f in (root / "node").glob("*.py")} - KEEP_TOP_LEVEL
    if top:
        problems.append(f"node/ top level holds modules not in KEEP_TOP_LEVEL: {', '.join(sorted(top))}")
    return problems


def import_problems(root: Path, text: str, where: str, p: Plan) -> list[str]:
    """Imports of project modules that do not exist, or of an old module where a package of its name now is."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        names: list[tuple[str, str | None]]
        if isinstance(node, ast.Import):
            names = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [(node.module, a.name) for a in node.names]
        else:
            continue
        for module, name in names:
            if module.split(".")[0] not in PROJECT_ROOTS:
                continue
            if not exists(root, module):
                found.append(f"{where}:{node.lineno}: imports {module}, which does not exist")
            elif name is not None and f"{module}.{name}" in p.modules:
                found.append(f"{where}:{node.lineno}: `from {module} import {name}`: {module}.{name} moved")
            elif name is not None and module in p.modules and not exists(root, f"{module}.{name}"):
                found.append(f"{where}:{node.lineno}: `from {module} import {name}`: {module} is a package now")
    return found


def exists(root: Path, module: str) -> bool:
    base = root.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


# ---- main -------------------------------------------------------------------------------------------------------


def preflight(root: Path, allow_dirty: bool) -> list[str]:
    problems = []
    if not (root / "pyproject.toml").is_file() or not (root / "node").is_dir():
        problems.append(f"{root} is not the root of an Agent BBS checkout")
        return problems
    if not allow_dirty and git(root, "status", "--porcelain", "--untracked-files=no").strip():
        problems.append("the checkout has uncommitted changes (commit them, or pass --allow-dirty)")
    known = {old.split(".", 1)[1] for old in MOVES if old.count(".") == 1} | KEEP_TOP_LEVEL
    unknown = sorted(f.stem for f in (root / "node").glob("*.py") if f.stem not in known)
    if unknown:
        problems.append(
            "node/ top level has modules the table does not place: " + ", ".join(unknown)
            + " (add each to MOVES, or to KEEP_TOP_LEVEL, then run again)"
        )  # fmt: skip
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout (default: the current folder)")
    parser.add_argument("--allow-dirty", action="store_true", help="run on a checkout with uncommitted changes")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    started = time.monotonic()
    problems = preflight(root, args.allow_dirty)
    if problems:
        print("house_move: refusing:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    p, notes = plan(root)
    rw = Rewriter(p, node_attributes(root) & {old.rsplit(".", 1)[-1] for old in MOVES})
    manual: list[str] = []
    move(root, p)
    before: dict[Path, set[str]] = {}
    changed = rewrite_tree(root, p, rw, manual, before)
    changed += edits(root, manual)
    tidy(root, changed)
    reflow(root, changed, before, manual)
    tidy(root, changed)
    print(f"house_move: moved {len(p.paths)} paths, rewrote {len(set(changed))} files")
    for note in notes:
        print(f"note: {note}")
    for item in manual:
        print(f"by hand: {item}")
    for item in sorted(set(rw.left)):
        print(f"left as is: {item}")
    problems = check(root, p, rw)
    elapsed = time.monotonic() - started
    if problems:
        print(f"house_move: {len(problems)} references to old paths left ({elapsed:.1f} s):", file=sys.stderr)
        print("  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print(f"house_move: done, no old path left ({elapsed:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
