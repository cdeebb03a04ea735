"""What leaves the host, decided on the host: Prometheus-style relabel rules and process
filters, applied to a process's labels before any profile, telemetry or trace carries them.

Relabel rules (``[[relabel]]`` in the agent's TOML, in order, as Prometheus's
``relabel_configs``)::

    [[relabel]]                       # no continuous profiles of the host's shells
    action = "drop"
    source_labels = ["comm"]
    regex = "sh|bash|dash"

    [[relabel]]                       # team from the namespace where nothing set it
    action = "replace"
    source_labels = ["team", "namespace"]
    separator = ";"
    regex = ";(.+)"
    target_label = "team"
    replacement = "$1"

    [[relabel]]
    action = "labeldrop"
    regex = "container_id|pod_uid"

Actions: ``keep`` / ``drop`` (the process, when the joined ``source_labels`` match or do
not), ``replace`` (``target_label`` set to ``replacement`` with ``$1``/``${name}`` groups
of the match; an empty result removes the label), ``labelkeep`` / ``labeldrop`` (labels
whose names match), ``labelmap`` (labels whose names match copied to ``replacement``).
``regex`` is anchored at both ends (Python's ``re`` syntax, close to Prometheus's RE2);
``separator`` defaults to ``;``, ``regex`` to ``(.*)``, ``replacement`` to ``$1``. Names
starting with ``__`` are scratch labels and removed after the last rule.

Process filters (``[processes] include`` / ``exclude``: lists of ``{label = regex}``
tables, each table matching when all its labels match; ``command``, the process's command
line, may be matched although it never leaves the host): an excluded process, or one that
matches no ``include`` table where some are given, is not profiled at all (its samples are
not even symbolized) and its GPU time is attributed to no workload.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ACTIONS = ("keep", "drop", "replace", "labelkeep", "labeldrop", "labelmap")
_GROUP = re.compile(r"\$(?:\{(\w+)\}|(\d+))")


class RuleError(ValueError):
    """A rule that cannot be used (the configuration says which)."""


@dataclass(frozen=True)
class RelabelRule:
    action: str = "replace"
    source_labels: tuple[str, ...] = ()
    separator: str = ";"
    regex: re.Pattern[str] = re.compile("(.*)")
    target_label: str = ""
    replacement: str = "$1"

    @classmethod
    def from_config(cls, table: Mapping[str, Any]) -> RelabelRule:
        known = {"action", "source_labels", "separator", "regex", "target_label", "replacement"}
        unknown = sorted(set(table) - known)
        if unknown:
            raise RuleError(f"unknown key {unknown[0]!r}")
        action = table.get("action", "replace")
        if action not in ACTIONS:
            raise RuleError(f"action {action!r}: expected one of {', '.join(ACTIONS)}")
        sources = table.get("source_labels", [])
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise RuleError("source_labels: expected a list of label names")
        for key in ("separator", "regex", "target_label", "replacement"):
            if key in table and not isinstance(table[key], str):
                raise RuleError(f"{key}: expected a string")
        try:
            regex = re.compile(f"(?:{table.get('regex', '(.*)')})\\Z", re.DOTALL)
        except re.error as e:
            raise RuleError(f"regex {table.get('regex')!r}: {e}") from None
        rule = cls(
            action=action,
            source_labels=tuple(sources),
            separator=table.get("separator", ";"),
            regex=regex,
            target_label=table.get("target_label", ""),
            replacement=table.get("replacement", "$1"),
        )
        if action == "replace" and not rule.target_label:
            raise RuleError("replace needs a target_label")
        if action in ("keep", "drop") and not rule.source_labels:
            raise RuleError(f"{action} needs source_labels")
        return rule

    def expand(self, match: re.Match[str]) -> str:
        """``replacement`` with ``$1``, ``${1}``, ``${name}`` filled from ``match`` (an
        unknown group is empty, as in Prometheus)."""

        def group(m: re.Match[str]) -> str:
            ref = m.group(1) or m.group(2)
            try:
                return match.group(int(ref) if ref.isdigit() else ref) or ""
            except IndexError:  # no such group
                return ""

        return _GROUP.sub(group, self.replacement)


def relabel(labels: Mapping[str, str], rules: list[RelabelRule]) -> tuple[dict[str, str], bool]:
    """``labels`` after ``rules``, and whether the process is kept (False once a
    ``keep``/``drop`` rule drops it: the rules after it are not applied)."""
    out = dict(labels)
    for rule in rules:
        if rule.action in ("keep", "drop", "replace"):
            value = rule.separator.join(out.get(s, "") for s in rule.source_labels)
            match = rule.regex.match(value)
            if (rule.action == "keep" and match is None) or (
                rule.action == "drop" and match is not None
            ):
                return _final(out), False
            if rule.action == "replace" and match is not None:
                target = rule.expand(match) if "$" in rule.target_label else rule.target_label
                new = rule.expand(match)
                if new:
                    out[target] = new
                else:
                    out.pop(target, None)
        elif rule.action == "labelkeep":
            out = {k: v for k, v in out.items() if rule.regex.match(k)}
        elif rule.action == "labeldrop":
            out = {k: v for k, v in out.items() if not rule.regex.match(k)}
        elif rule.action == "labelmap":
            for k, v in list(out.items()):
                match = rule.regex.match(k)
                if match is not None:
                    out[rule.expand(match)] = v
    return _final(out), True


def _final(labels: dict[str, str]) -> dict[str, str]:
    """Without the scratch labels (``__``) and empty values."""
    return {k: v for k, v in labels.items() if not k.startswith("__") and v}


@dataclass(frozen=True)
class ProcessMatcher:
    """One ``{label = regex}`` table of ``[processes]``: all its labels must match."""

    patterns: tuple[tuple[str, re.Pattern[str]], ...]

    @classmethod
    def from_config(cls, table: Mapping[str, Any]) -> ProcessMatcher:
        if not table:
            raise RuleError("an empty table matches every process")
        out = []
        for label, regex in table.items():
            if not isinstance(regex, str):
                raise RuleError(f"{label}: expected a regular expression")
            try:
                out.append((label, re.compile(f"(?:{regex})\\Z", re.DOTALL)))
            except re.error as e:
                raise RuleError(f"{label} {regex!r}: {e}") from None
        return cls(tuple(out))

    def matches(self, values: Mapping[str, str]) -> bool:
        return all(p.match(values.get(label, "")) for label, p in self.patterns)


def selected(
    values: Mapping[str, str], include: list[ProcessMatcher], exclude: list[ProcessMatcher]
) -> bool:
    """Whether a process with these labels (and ``command``) is profiled."""
    if include and not any(m.matches(values) for m in include):
        return False
    return not any(m.matches(values) for m in exclude)
