"""docs/analyze.md's JSON schema and docs/analyze.schema.json are generated from the typed
records of the report; they are kept up to date (``python tools/analyze_schema.py --write``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from aiflame.analysis import analyze, schema

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("analyze_schema", ROOT / "tools/analyze_schema.py")
assert spec is not None and spec.loader is not None
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def test_the_documented_schema_is_the_code_s():
    doc = (ROOT / "docs/analyze.md").read_text(encoding="utf-8")
    assert tool.doc_block() in doc
    assert (ROOT / "docs/analyze.schema.json").read_text(
        encoding="utf-8"
    ) == tool.json_schema_text()


def test_every_record_is_in_the_outline():
    outline = tool.outline()
    records = [
        v for v in vars(schema).values()
        if isinstance(v, type) and issubclass(v, schema.Record) and v is not schema.Record
    ]  # fmt: skip
    for r in records:
        assert f"\n{r.__name__}" in "\n" + outline, r.__name__


def test_a_report_validates_against_the_json_schema():
    jsonschema = __import__("pytest").importorskip("jsonschema")
    bert = ROOT / "tests/data/kineto/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    report = json.loads(schema.to_json(analyze([str(bert)])))
    jsonschema.validate(report, schema.json_schema())
