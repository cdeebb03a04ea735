"""Expected results from speedscope's Jest snapshots (``*.test.ts.snap``).

speedscope's test helper dumps an imported profile as ``"a;b;c VALUE"`` lines, one per
run of the call tree in time order, with values formatted for the profile's unit
(``5``, ``2.00s``, ``140.00ms``). :func:`expected_stacks` sums them per stack, in the
profile's base unit (nanoseconds for times), which is what aiflame's folded output holds.
"""

from __future__ import annotations

import re

_SCALE = {"": 1.0, "ns": 1.0, "µs": 1e3, "ms": 1e6, "s": 1e9}


def expected_stacks(snapshot: str, name: str | None = None, n: int = 1) -> dict[str, float]:
    """Stack -> summed value of the snapshot ``exports[`NAME n`]`` (or the first one)."""
    if name is not None:
        start = snapshot.index(f"exports[`{name} {n}`]")
        snapshot = snapshot[start:]
    block = snapshot[snapshot.index('"stacks": [') + len('"stacks": [') :]
    block = block[: block.index("],")]
    out: dict[str, float] = {}
    for line in re.findall(r'^\s*"(.*)",$', block, flags=re.M):
        stack, value = line.rsplit(" ", 1)
        number, unit = re.fullmatch(r"([\d.]+)(ns|µs|ms|s|)", value).groups()
        out[stack] = out.get(stack, 0.0) + float(number) * _SCALE[unit]
    return out


def folded_values(text: str) -> dict[str, float]:
    """aiflame's folded output as stack -> value."""
    out = {}
    for line in text.splitlines():
        stack, value = line.rsplit(" ", 1)
        out[stack] = float(value)
    return out
