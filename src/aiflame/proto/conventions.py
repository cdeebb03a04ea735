"""What aiflame writes into pprof fields that pprof has no dedicated place for.

- Frame kinds: ``Function.system_name`` is ``"<name> [aiflame:<kind-slug>]"``. ``go tool
  pprof``, Pyroscope and Grafana show ``Function.name``, which stays the plain name, so
  other tools display frames as before; only aiflame reads the kind back (and only when
  the system name is exactly the name plus the marker).
- Fractional values: pprof values are integers. A sample type whose values are not whole
  numbers is written scaled by ``10**e`` with the unit ``"<unit>*1e-<e>"``; the importer
  divides them back.
- Numeric labels (``Label.num``/``num_unit``) become string labels ``"<num>"`` or
  ``"<num> <unit>"`` (pprof's own rendering); ``meta[NUMERIC_LABELS_META]`` lists their
  keys so that the exporter writes them back as numbers.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from aiflame.model import FrameKind

NUMERIC_LABELS_META = "pprof_numeric_labels"

_KIND_MARK = re.compile(r" \[aiflame:([a-z-]+)\]$")
_SCALED_UNIT = re.compile(r"^(.*)\*1e-([1-9])$")
_NUMERIC_LABEL = re.compile(r"^(-?\d{1,19})(?: (\S.*))?$")
_INT64_MAX = 2**63 - 1


def system_name_for(name: str, kind: FrameKind | int) -> str:
    """The ``Function.system_name`` that carries ``kind`` (the plain name for UNKNOWN)."""
    kind = FrameKind(kind)
    if kind == FrameKind.UNKNOWN:
        return name
    return f"{name} [aiflame:{kind.slug}]"


def kind_from_system_name(name: str, system_name: str) -> FrameKind | None:
    """The kind written by :func:`system_name_for`, or None if ``system_name`` has none."""
    if not system_name.endswith("]"):
        return None
    m = _KIND_MARK.search(system_name)
    if m is None or system_name[: m.start()] != name:
        return None
    return _kind_of_slug(m.group(1))


@lru_cache(maxsize=64)
def _kind_of_slug(slug: str) -> FrameKind:
    return FrameKind.from_slug(slug)


def integer_exponent(values: np.ndarray) -> int:
    """Smallest ``e`` (0..9) such that ``values * 10**e`` are whole numbers that fit int64."""
    if values.size == 0:
        return 0
    biggest = float(np.max(np.abs(values)))
    for e in range(10):
        scaled = values * 10.0**e
        if biggest * 10.0**e > _INT64_MAX / 2:
            return max(e - 1, 0)
        if np.all(np.abs(scaled - np.round(scaled)) <= 1e-6):
            return e
    return 9


def scaled_unit(unit: str, exponent: int) -> str:
    return unit if exponent == 0 else f"{unit}*1e-{exponent}"


def unscaled_unit(unit: str) -> tuple[str, int]:
    """(unit, exponent) of a unit written by :func:`scaled_unit`."""
    m = _SCALED_UNIT.match(unit)
    if m is None:
        return unit, 0
    return m.group(1), int(m.group(2))


def numeric_label_text(num: int, unit: str) -> str:
    return f"{num} {unit}" if unit else str(num)


def parse_numeric_label(text: str) -> tuple[int, str] | None:
    """(number, unit) of a label value written by :func:`numeric_label_text`."""
    m = _NUMERIC_LABEL.match(text)
    if m is None:
        return None
    num = int(m.group(1))
    if not -(2**63) <= num <= _INT64_MAX:
        return None
    return num, m.group(2) or ""
