"""Labels of series, Prometheus-style label selectors and Pyroscope profile type ids.

A series is a set of labels (``service_name``, ``__name__``, workload labels...). Its id is a
64-bit hash of the sorted pairs, the same in every server process. Selectors are the ones
Grafana sends: ``{service_name="x", pod=~"a.*", job!="", "otel.scope.name"!~"b"}``, with
Prometheus' semantics (regexes are RE2, fully anchored; a missing label is the empty string).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from aiflame.server import validate
from aiflame.server.errors import BadRequest

# Pyroscope SDKs send OpenTelemetry-style names (``otel.scope.name``): dots are allowed.
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_.]*\Z")
MAX_NAME_BYTES = 128
MAX_VALUE_BYTES = 1024
MAX_LABELS = 64

NAME_LABEL = "__name__"
SERVICE_LABEL = "service_name"
TENANT_DEFAULT = "anonymous"


def check_labels(pairs: list[tuple[str, str]], limit: int = MAX_LABELS) -> dict[str, str]:
    """The labels as a dict, or BadRequest naming the first invalid one."""
    if len(pairs) > limit:
        raise BadRequest(f"{len(pairs)} labels in one series; at most {limit} are accepted")
    out: dict[str, str] = {}
    for name, value in pairs:
        if not LABEL_NAME.match(name) or len(name.encode()) > MAX_NAME_BYTES:
            raise BadRequest(f"invalid label name {name[:80]!r}")
        if len(value.encode()) > MAX_VALUE_BYTES:
            raise BadRequest(f"label {name} is longer than {MAX_VALUE_BYTES} bytes")
        if name in out and out[name] != value:
            raise BadRequest(f"label {name} given twice with different values")
        out[name] = value
    return out


def series_id(labels: dict[str, str]) -> int:
    """The 64-bit id of a label set (order-independent; stable across processes)."""
    h = hashlib.blake2b(digest_size=8)
    for k in sorted(labels):
        h.update(k.encode())
        h.update(b"\x00")
        h.update(labels[k].encode())
        h.update(b"\x01")
    return int.from_bytes(h.digest(), "little")


@dataclass(frozen=True)
class ProfileType:
    """``name:sample_type:sample_unit:period_type:period_unit``, as Pyroscope names them."""

    name: str
    sample_type: str
    sample_unit: str
    period_type: str
    period_unit: str

    @property
    def id(self) -> str:
        return ":".join(
            (self.name, self.sample_type, self.sample_unit, self.period_type, self.period_unit)
        )

    @classmethod
    def parse(cls, text: str) -> ProfileType:
        parts = text.split(":")
        if len(parts) != 5 or not parts[0] or not parts[1]:
            raise BadRequest(
                f"invalid profile type {text[:120]!r}: expected "
                "name:sample_type:sample_unit:period_type:period_unit"
            )
        return cls(*parts)


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str  # "=", "!=", "=~", "!~"
    value: str


_OPS = ("=~", "!~", "!=", "=")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "`": "`"}


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, why: str) -> BadRequest:
        return BadRequest(f"invalid label selector {self.text[:200]!r}: {why} at {self.pos}")

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, ch: str) -> None:
        if self.peek() != ch:
            raise self.fail(f"expected {ch!r}")
        self.pos += 1

    def name(self) -> str:
        self.skip()
        if self.peek() in ('"', "'", "`"):
            return self.string()
        m = re.compile(r"[a-zA-Z_][a-zA-Z0-9_.:]*").match(self.text, self.pos)
        if not m:
            raise self.fail("expected a label name")
        self.pos = m.end()
        return m.group(0)

    def op(self) -> str:
        self.skip()
        for op in _OPS:
            if self.text.startswith(op, self.pos):
                self.pos += len(op)
                return op
        raise self.fail("expected =, !=, =~ or !~")

    def string(self) -> str:
        self.skip()
        quote = self.text[self.pos : self.pos + 1]
        if quote not in ('"', "'", "`"):
            raise self.fail("expected a quoted value")
        self.pos += 1
        out: list[str] = []
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            self.pos += 1
            if ch == quote:
                return "".join(out)
            if ch == "\\" and quote != "`":
                esc = self.text[self.pos : self.pos + 1]
                if esc not in _ESCAPES:
                    raise self.fail("unknown escape")
                out.append(_ESCAPES[esc])
                self.pos += 1
            else:
                out.append(ch)
        raise self.fail("unterminated string")


def parse_selector(text: str) -> list[Matcher]:
    """Matchers of ``{a="b", ...}`` (``metric{...}`` matches ``__name__`` too); ``""`` is all."""
    validate.check_selector_size(text or "")
    s = _Scanner(text or "")
    matchers: list[Matcher] = []
    if not s.peek():
        return matchers
    if s.peek() != "{":
        matchers.append(Matcher(NAME_LABEL, "=", s.name()))
        if not s.peek():
            return matchers
    s.expect("{")
    while s.peek() != "}":
        name = s.name()
        op = s.op()
        matchers.append(Matcher(name, op, s.string()))
        validate.check_matcher_count(len(matchers))
        if op in ("=~", "!~"):
            validate.check_regex(matchers[-1].value, name)
        if s.peek() == ",":
            s.pos += 1
        elif s.peek() != "}":
            raise s.fail("expected ',' or '}'")
    s.pos += 1
    if s.peek():
        raise s.fail("unexpected text after '}'")
    return matchers


def matchers_sql(matchers: list[Matcher], column: str, params: dict[str, object]) -> str:
    """A SQL condition on a ``Map(String, String)`` column; values go to ``params``."""
    parts = []
    for m in matchers:
        k, v = f"m{len(params)}k", f"m{len(params)}v"
        params[k], params[v] = m.name, m.value
        cell = f"{column}[{{{k}:String}}]"
        if m.op == "=":
            parts.append(f"{cell} = {{{v}:String}}")
        elif m.op == "!=":
            parts.append(f"{cell} != {{{v}:String}}")
        else:
            # RE2 like Prometheus, anchored as Prometheus anchors it.
            params[v] = f"^(?:{m.value})$"
            neg = "NOT " if m.op == "!~" else ""
            parts.append(f"{neg}match({cell}, {{{v}:String}})")
    return " AND ".join(parts) if parts else "1"


def format_selector(labels: dict[str, str]) -> str:
    """The selector that matches exactly these labels' values (for links in the UI)."""

    def q(v: str) -> str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

    def n(k: str) -> str:
        return k if re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", k) else q(k)

    return "{" + ", ".join(f"{n(k)}={q(v)}" for k, v in sorted(labels.items())) + "}"
