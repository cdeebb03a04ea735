"""The import direction of docs/architecture.md: lower layers never import higher ones."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "aiflame"

# package -> the aiflame packages it may import (besides itself)
ALLOWED = {
    "model": set(),
    "errors": set(),
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


# The one import against the direction, and why: Jupyter looks up _repr_html_ on the
# object's class, so Profile's lives on it and hands over to the notebook display module,
# imported only when a notebook displays a profile.
EXCEPTIONS = {("model/profile.py", "notebook")}


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


def test_layers_import_only_downwards():
    violations = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        layer = rel.parts[0].removesuffix(".py")
        if layer not in ALLOWED:
            continue  # cli, the package root: may import everything
        for pkg in imported_packages(path) - {layer, "__init__"}:
            if pkg not in ALLOWED[layer] and (rel.as_posix(), pkg) not in EXCEPTIONS:
                violations.append(f"{rel} imports aiflame.{pkg}")
    assert not violations, "\n".join(violations)


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
