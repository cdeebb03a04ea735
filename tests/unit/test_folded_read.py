"""read_counts' fast path for plain "stack 123" lines agrees with parse_line on every line."""

from __future__ import annotations

from aiflame.sources.folded import importer as folded
from aiflame.sources.inputs import Input

LINES = [
    "a;b 12",
    "a;b 3",  # summed with the line above, and with the next two
    "a;b  4",  # two spaces: the stack is rstripped
    "a;b\t5",  # tab separated
    "a b;c 6",  # a space inside a name
    "a;c 7 ",  # trailing space
    "a;c 8\t",
    "a;d 1.5",  # fractional
    "a;e ١٢",  # Arabic-Indic digits: float() reads them
    "a;f ²",  # a digit float() does not read: ignored
    "a;g " + "9" * 400,  # overflows to inf: ignored
    "a;h -3",
    "a;i nan",
    " 5",  # no stack
    "   ",
    "",
    "   lead;x 2",
    "a;j 0",
]


def reference(text: str) -> tuple[dict[str, float], int]:
    counts: dict[str, float] = {}
    ignored = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        parsed = folded.parse_line(line)
        if parsed is None:
            ignored += 1
        else:
            counts[parsed[0]] = counts.get(parsed[0], 0.0) + parsed[1]
    return counts, ignored


def test_fast_path_matches_parse_line(tmp_path):
    text = "\n".join(LINES) + "\n"
    path = tmp_path / "x.folded"
    path.write_text(text, encoding="utf-8")
    counts, ignored = folded.read_counts(Input(str(path)))
    expected, expected_ignored = reference(text)
    assert counts == expected and list(counts) == list(expected)
    assert ignored == expected_ignored == 5
    assert counts["a;b"] == 12 + 3 + 4 + 5 and counts["a;e"] == 12
