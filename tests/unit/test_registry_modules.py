"""The registry's table of importers: each format names the module that reads it, and every
importer module under sources/ is in the table."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from aiflame.errors import AiflameError
from aiflame.sources import registry

SOURCES = Path(registry.__file__).parent


def test_each_format_names_its_importer():
    for fmt, name in registry.MODULE_OF_FORMAT.items():
        assert fmt == importlib.import_module(name).FORMAT, name
    assert registry.formats() == list(registry.MODULE_OF_FORMAT)


def test_every_importer_is_registered():
    declaring = set()
    for path in SOURCES.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = [
            t.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            for t in node.targets
            if isinstance(t, ast.Name)
        ]
        if "FORMAT" in targets:
            rel = path.relative_to(SOURCES.parent.parent).with_suffix("")
            declaring.add(".".join(rel.parts))
    assert declaring == set(registry.MODULE_OF_FORMAT.values())


def test_an_unknown_format_is_one_error():
    with pytest.raises(AiflameError, match=r"unknown input format 'nope' \(known: hpctoolkit, "):
        registry._module_of("nope")
