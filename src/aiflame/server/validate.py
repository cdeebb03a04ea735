"""Checks of a request's fields at the door, against what the store can hold.

What the server acknowledges must be storable: a time, rate, size or count that the store's
columns cannot hold (a time past the year 2106 of ``toDateTime``, an integer past 64 bits, a
float that is infinite or not a number) is refused here as a 400 that names the field, before
anything is logged or queued. Every parser of a body or a parameter goes through these
helpers, so a new endpoint gets the same bounds.
"""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any, TypeVar

import msgspec

from aiflame.server.errors import BadRequest

# Unix milliseconds the store's time columns hold everywhere (DateTime64 columns, and the
# TTLs and partitions made with toDateTime, whose range ends in 2106).
MIN_TIME_MS = 0
MAX_TIME_MS = 4_102_444_800_000  # 2100-01-01
FUTURE_SLACK_MS = 3_600_000  # a clock up to an hour ahead of the server's is accepted
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
UINT32_MAX = 2**32 - 1
UINT16_MAX = 2**16 - 1
FLOAT32_MAX = 3.4e38

_REL = re.compile(r"now(?:-(\d{1,12})([smhdw]))?\Z")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

T = TypeVar("T")


def _short(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text[:40]) if isinstance(value, str) else text[:40]


def number(value: object, field: str, lo: float, hi: float) -> float:
    """A finite number (or its text) within [lo, hi], else a 400 naming ``field``."""
    if isinstance(value, bool):
        raise BadRequest(f"{field} must be a number, not {value}")
    if isinstance(value, str):
        try:
            v = float(value.strip())
        except ValueError:
            raise BadRequest(f"{field} must be a number, not {_short(value)}") from None
    elif isinstance(value, int | float):
        try:
            v = float(value)
        except OverflowError:
            raise BadRequest(f"{field} is out of range ({lo:g} to {hi:g})") from None
    else:
        raise BadRequest(f"{field} must be a number, not {type(value).__name__}")
    if not math.isfinite(v):
        raise BadRequest(f"{field} must be a finite number, not {_short(value)}")
    if not lo <= v <= hi:
        raise BadRequest(f"{field} is out of range ({lo:g} to {hi:g}): {_short(value)}")
    return v


def integer(value: object, field: str, lo: int, hi: int) -> int:
    """An integer (a JSON number without a fraction, or its text) within [lo, hi]."""
    if isinstance(value, int) and not isinstance(value, bool):
        v = value
    else:
        f = number(value, field, -float(2**64), float(2**64))
        if f != int(f):
            raise BadRequest(f"{field} must be an integer, not {_short(value)}")
        v = int(f)
    if not lo <= v <= hi:
        raise BadRequest(f"{field} is out of range ({lo} to {hi}): {_short(value)}")
    return v


def time_ms(text: str | None, field: str, default_ms: int) -> int:
    """A time parameter of a read endpoint: Unix milliseconds, Unix seconds (below 1e11),
    or Grafana's relative ``now``/``now-6h``; within the years the store holds."""
    if text is None or text.strip() == "":
        return default_ms
    m = _REL.match(text.strip())
    if m:
        now = int(time.time() * 1000)
        back = int(m.group(1)) * _UNITS[m.group(2)] * 1000 if m.group(1) else 0
        return max(MIN_TIME_MS, now - back)
    try:
        v = float(text)
    except ValueError:
        raise BadRequest(
            f"invalid time for {field}: {_short(text)} (Unix ms or s, or now-6h)"
        ) from None
    if not math.isfinite(v):
        raise BadRequest(f"invalid time for {field}: {_short(text)} (not a finite number)")
    ms = v * 1000 if abs(v) < 1e11 else v
    if not MIN_TIME_MS <= ms <= MAX_TIME_MS:
        raise BadRequest(f"{field} is outside the times the store holds (1970 to 2100)")
    return int(ms)


def unix_seconds(text: str | None, field: str, default_s: float) -> float:
    """A time of Pyroscope's ``/ingest`` (``from``, ``until``): Unix seconds, or milliseconds
    or nanoseconds (told apart by size, as Pyroscope does)."""
    if text is None or text.strip() == "":
        return default_s
    v = number(text, field, 0.0, 1e20)
    if v > 1e11:
        v /= 1e3 if v < 1e14 else 1e9
    if v * 1000 > MAX_TIME_MS:
        raise BadRequest(f"{field} is outside the times the store holds (1970 to 2100)")
    return v


def not_in_future(ms: int, received_ms: int, field: str) -> None:
    if ms > received_ms + FUTURE_SLACK_MS:
        raise BadRequest(f"{field} is more than 1 h in the future")


def json_loads(body: bytes, what: str = "the body") -> Any:
    """Strict JSON: no NaN or Infinity, numbers that fit a float, nesting within Python's
    recursion limit (a body nested 100,000 deep is a 400, not a crash)."""

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(body or b"{}", parse_constant=constant)
    except RecursionError:
        raise BadRequest(f"{what} is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"{what} is not JSON: {str(e)[:120]}") from None


def decode_json(decoder: msgspec.json.Decoder, body: bytes, what: str) -> Any:
    """A body decoded against a typed schema: a wrong type or a value out of its bounds is
    a 400 that names the field (``$.gpus[0].index``)."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as e:
        raise BadRequest(f"invalid {what}: {e}") from None
    except msgspec.DecodeError as e:
        raise BadRequest(f"the body is not JSON: {e}") from None
    except RecursionError:
        raise BadRequest(f"invalid {what}: nested too deeply") from None


# -- label selectors ------------------------------------------------------------------------
# A selector is parsed, turned into SQL and matched against every series in the range: its
# size is what a reader controls of a query's cost, so it is bounded at the door (Grafana's
# selectors, even with multi-value variables as regex alternations, are far below these).
MAX_SELECTOR_BYTES = 64 << 10
MAX_MATCHERS = 64
MAX_REGEX_BYTES = 16 << 10
MAX_SELECTORS = 16  # selectors of one LabelNames / LabelValues / Series call
MAX_GROUP_BY = 16  # labels a series query groups by (each one a column of its SQL)


def check_selector_size(text: str) -> None:
    if len(text) > MAX_SELECTOR_BYTES:
        raise BadRequest(
            f"the label selector is {len(text):,} characters long; at most "
            f"{MAX_SELECTOR_BYTES:,} are accepted"
        )


def check_matcher_count(n: int) -> None:
    if n > MAX_MATCHERS:
        raise BadRequest(f"the label selector has more than {MAX_MATCHERS} matchers")


def check_selector_count(n: int) -> None:
    if n > MAX_SELECTORS:
        raise BadRequest(f"{n} label selectors in one call; at most {MAX_SELECTORS}")


def check_group_by(n: int) -> None:
    if n > MAX_GROUP_BY:
        raise BadRequest(f"group_by names {n} labels; at most {MAX_GROUP_BY}")


def check_regex(pattern: str, label: str) -> None:
    """A matcher's regex must compile in RE2, the store's regex engine (ClickHouse's
    ``match``), anchored as the query anchors it; ``a{1000000}`` and Perl's lookarounds are
    a 400 here rather than an error of the store."""
    if len(pattern) > MAX_REGEX_BYTES:
        raise BadRequest(
            f"the regex of label {label[:60]!r} is longer than {MAX_REGEX_BYTES:,} characters"
        )
    try:
        _re2().compile(f"^(?:{pattern})$", _RE2_OPTIONS)
    except Exception as e:  # re2.error, or a pattern RE2 cannot encode
        why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else e
        raise BadRequest(f"invalid regex for label {label[:60]!r}: {str(why)[:200]}") from None


_RE2_OPTIONS: Any = None


def _re2() -> Any:
    global _RE2_OPTIONS
    import re2

    if _RE2_OPTIONS is None:
        opts = re2.Options()
        opts.log_errors = False  # a client's bad regex is its 400, not a line in our log
        _RE2_OPTIONS = opts
    return re2
