"""JSON that is always JSON: NaN and infinities (which ``json.dumps`` writes as the
non-standard tokens ``NaN`` and ``Infinity``) become ``null``, as ``JSON.stringify`` does."""

from __future__ import annotations

import json
import math
from typing import Any


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps(value, **options)`` with every non-finite float written as null."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:  # a NaN or an infinity somewhere: rare, so cleaned only then
        return json.dumps(finite(value), allow_nan=False, **options)


def finite(value: Any) -> Any:
    """A copy of JSON-like ``value`` with NaN and infinities replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


__all__ = ["dumps", "finite"]
