"""The import direction of docs/architecture.md: lower layers never import higher ones, and
no modules import each other in a circle.

Every import counts, wherever it is written: at the top of a module, inside a function
(imported on first use is still a dependency) and under ``if TYPE_CHECKING:`` (a type the
module's signatures name is part of what the module means; a circle of types is broken
with a protocol or a shared module of the types, as for the ones a circle of code would
need). What Python imports implicitly is not an edge: importing ``aiflame.a.b`` runs
``aiflame/a/__init__.py`` first, but that does not make ``b`` depend on all that the
package's ``__init__`` imports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "aiflame"

# package -> the aiflame packages it may import (besides itself)
ALLOWED = {
    "model": set(),
    "errors": set(),
    "version": set(),
    "symbolize": {"model", "errors"},
    "proto": {"model"},  # pprof schema + conventions, shared by its importer and exporter
    "sources": {"model", "errors", "symbolize", "transforms", "proto"},
    "transforms": {"model", "errors", "symbolize"},
    # analysis reads its inputs through the sources registry (its library entry point)
    "analysis": {"model", "errors", "symbolize", "transforms", "sources"},
    # the analysis report's renderers read its typed records
    "render": {"model", "errors", "transforms", "symbolize", "proto", "analysis"},
    "collectors": {"model", "errors", "symbolize", "sources", "transforms"},
    # The fleet server uses every layer below it (importers, renderers, the analysis
    # library); it is no command's helper; nothing but the command line imports it.
    "server": {
        "model",
        "errors",
        "symbolize",
        "sources",
        "transforms",
        "analysis",
        "render",
        "proto",
    },
    # the per-host daemon: everything but the command line
    "agent": {
        "model",
        "errors",
        "symbolize",
        "sources",
        "transforms",
        "analysis",
        "render",
        "proto",
        "collectors",
    },
    # the MCP server (aiflame mcp): the analyses of files and a server's API, for AI agents
    "mcp": {
        "model",
        "errors",
        "symbolize",
        "sources",
        "transforms",
        "analysis",
        "render",
        "proto",
    },
}


# Leaves that import nothing of the project: every layer may import them.
LEAVES = {"errors", "version"}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "aiflame" and len(parts) > 1:
                found.add(parts[1])
    return found


def upward_imports(src: Path) -> list[str]:
    """Each import of a layer it may not import (see ALLOWED), as "file imports package"."""
    violations = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        layer = rel.parts[0].removesuffix(".py")
        if layer not in ALLOWED:
            continue  # cli, notebook, the package root: may import everything
        for pkg in sorted(imported_packages(path) - {layer, "__init__"} - LEAVES):
            if pkg not in ALLOWED[layer]:
                violations.append(f"{rel} imports aiflame.{pkg}")
    return violations


def test_layers_import_only_downwards():
    violations = upward_imports(SRC)
    assert not violations, "\n".join(violations)


def test_an_upward_import_is_found(tmp_path):
    root = tmp_path / "aiflame"
    for rel, text in {
        "model/profile.py": "def show(self):\n    from aiflame.notebook import profile_html\n",
        "render/html.py": "from aiflame.model import Profile\nfrom aiflame.version import v\n",
        "notebook.py": "from aiflame.render import html\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    assert upward_imports(root) == ["model/profile.py imports aiflame.notebook"]


def test_only_the_command_line_imports_the_server():
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] in ("server", "cli"):
            continue
        if "server" in imported_packages(path):
            offenders.append(str(rel))
    assert not offenders, offenders


def test_nothing_but_the_cli_imports_the_agent():
    importers = [
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if path.relative_to(SRC).parts[0] not in ("agent", "cli")
        and "agent" in imported_packages(path)
    ]
    assert not importers, "the agent is imported by " + ", ".join(importers)


def test_nothing_but_the_cli_imports_the_mcp_server():
    importers = [
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if path.relative_to(SRC).parts[0] not in ("mcp", "cli") and "mcp" in imported_packages(path)
    ]
    assert not importers, "aiflame.mcp is imported by " + ", ".join(importers)


def test_the_walker_sees_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import aiflame.cli.main\nfrom aiflame.render import html\nimport os\n")
    assert imported_packages(f) == {"cli", "render"}


# -- import cycles -------------------------------------------------------------------------


def module_name(src: Path, path: Path) -> str:
    parts = [src.name, *path.relative_to(src).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(tree: ast.Module, module: str, modules: set[str]) -> Iterator[str]:
    """The module each import statement anywhere in ``tree`` names: ``from p import x`` names
    ``p.x`` where that is a module, else ``p`` (x is defined in p); ``import p.q.f`` where
    ``p.q.f`` is no module names ``p.q``."""
    is_package = f"{module}.__init__" in modules
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            prefix = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix
                     for a in node.names]  # fmt: skip
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                yield name


def import_graph(src: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package tree it imports, from every module's AST."""
    paths = {module_name(src, p): p for p in sorted(src.rglob("*.py"))}
    modules = set(paths) | {module_name(src, p) + ".__init__" for p in src.rglob("__init__.py")}
    return {
        name: set(_imported_modules(ast.parse(path.read_text(encoding="utf-8")), name, modules))
        for name, path in paths.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: one per strongly connected component of more than one module,
    each spelled as a path that starts and ends at the same module (Tarjan's algorithm,
    iterative, so a deep graph cannot overflow the stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return [_circle(graph, set(c)) for c in components]


def _circle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside it."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if child not in came_from:
                    came_from[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"no circle in {sorted(component)}")


def test_no_import_cycles():
    found = cycles(import_graph(SRC))
    assert not found, "modules that import each other in a circle:\n" + "\n".join(
        " -> ".join(c) for c in found
    )


def test_a_cycle_is_found(tmp_path):
    """The check can fail: a circle through an import inside a function and one under
    TYPE_CHECKING, in a synthetic package, and none where the imports only go down."""
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "sub/__init__.py": "",
        "sub/a.py": "from pkg.sub import b\n",
        "sub/b.py": "def f():\n    from pkg import c\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.a import X\n",
        "d.py": "import pkg.c\nfrom pkg.sub import a\n",
    }
    for rel, text in files.items():
        (root / rel).write_text(text)
    graph = import_graph(root)
    assert graph["pkg.d"] == {"pkg.c", "pkg.sub.a"}
    assert cycles(graph) == [["pkg.c", "pkg.sub.a", "pkg.sub.b", "pkg.c"]]
    (root / "c.py").write_text("X = 1\n")
    assert cycles(import_graph(root)) == []
