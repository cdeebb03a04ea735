"""A selection of profile data: tenant, profile type, label selector and time range."""

from __future__ import annotations

from dataclasses import dataclass

from aiflame.server import validate
from aiflame.server.errors import BadRequest
from aiflame.server.labels import ProfileType, parse_selector
from aiflame.server.query.type_labels import selector_sql

HOUR_MS = 3_600_000
MAX_RANGE_MS = 400 * 86400 * 1000


@dataclass(frozen=True)
class Selection:
    tenant: str
    profile_type: str
    selector: str
    start_ms: int
    end_ms: int
    profile_ids: tuple[str, ...] = ()  # only these profiles (Pyroscope's profile_id_selector)
    span_ids: tuple[int, ...] = ()  # only the samples of these spans (span_selector)

    @classmethod
    def make(
        cls,
        tenant: str,
        profile_type: str,
        selector: str,
        start_ms: int,
        end_ms: int,
        profile_ids: tuple[str, ...] = (),
        span_ids: tuple[int, ...] = (),
    ) -> Selection:
        ProfileType.parse(profile_type)
        validate.integer(start_ms, "start", validate.MIN_TIME_MS, validate.MAX_TIME_MS)
        validate.integer(end_ms, "end", validate.MIN_TIME_MS, validate.MAX_TIME_MS)
        if end_ms <= start_ms:
            raise BadRequest("the time range is empty (end must be after start)")
        if end_ms - start_ms > MAX_RANGE_MS:
            raise BadRequest("the time range is longer than 400 days")
        parse_selector(selector)  # a bad selector is a 400 before any SQL runs
        if len(profile_ids) > 100_000 or len(span_ids) > 100_000:
            raise BadRequest("at most 100,000 profile or span ids in one selection")
        return cls(
            tenant,
            profile_type,
            selector,
            int(start_ms),
            int(end_ms),
            tuple(profile_ids),
            tuple(span_ids),
        )

    def params(self) -> dict[str, object]:
        return {
            "tenant": self.tenant,
            "pt": self.profile_type,
            "t0": self.start_ms,
            "t1": self.end_ms,
        }

    def series_sql(self, db: str, params: dict[str, object]) -> str:
        """Ids of the series of this profile type whose labels match, active in the range."""
        cond = selector_sql(self.selector, params)
        return (
            f"SELECT DISTINCT series_id FROM {db}.series WHERE tenant = {{tenant:String}} "
            "AND profile_type = {pt:String} "
            "AND hour >= toStartOfHour(fromUnixTimestamp64Milli({t0:Int64}, 'UTC')) "
            "AND hour < fromUnixTimestamp64Milli({t1:Int64}, 'UTC') "
            f"AND {cond}"
        )


TEN_MIN_MS = 600_000


def _pieces(
    start: int, end: int, rolled_until: int | None = None
) -> list[tuple[str, str, int, int]]:
    """[start, end) as whole hours (hourly roll-up), whole ten minutes (10-minute roll-up)
    and the rest (the samples): (table, time column, from ms, to ms). The roll-ups hold
    every sample before ``rolled_until`` (None: every one); the samples after it are read
    as they are."""
    out: list[tuple[str, str, int, int]] = []

    def split(a: int, b: int, unit: int, table: str, col: str, finer) -> None:
        u0, u1 = -(-a // unit) * unit, b // unit * unit
        if u0 < u1:
            out.append((table, col, u0, u1))
            for x, y in ((a, u0), (u1, b)):
                if x < y:
                    finer(x, y)
        elif a < b:
            finer(a, b)

    def raw(a: int, b: int) -> None:
        out.append(("samples", "time", a, b))

    def tens(a: int, b: int) -> None:
        split(a, b, TEN_MIN_MS, "samples_10m", "bucket", raw)

    limit = end if rolled_until is None else max(start, min(end, rolled_until))
    split(start, limit, HOUR_MS, "samples_1h", "hour", tens)
    if limit < end:
        raw(limit, end)
    return out


def stack_values_sql(
    sel: Selection, db: str, params: dict[str, object], rolled_until: int | None = None
) -> str:
    """``(stack_id, value)`` rows of the selection, summed per stack. Whole hours come from
    the hourly roll-up, whole ten minutes from the 10-minute one, the rest from the samples
    themselves, so "the last hour" reads about 20 minutes of raw samples (and what is newer
    than ``rolled_until``, the roll-ups' watermark: up to about ten minutes)."""
    params.update(sel.params())
    series = sel.series_sql(db, params)
    if sel.span_ids:
        # The samples of those spans (kept beside the samples, by span id).
        params["spans"] = list(sel.span_ids)
        return (
            f"SELECT stack_id, sum(value) AS value FROM {db}.span_samples WHERE tenant = "
            "{tenant:String} AND profile_type = {pt:String} AND series_id IN (" + series + ") "
            "AND time >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
            "AND time < fromUnixTimestamp64Milli({t1:Int64}, 'UTC') "
            "AND span_id IN {spans:Array(UInt64)} GROUP BY stack_id HAVING value != 0"
        )
    if sel.profile_ids:
        # Those profiles' own rows: their series and time, from the profiles table.
        params["pids"] = list(sel.profile_ids)
        return (
            f"SELECT stack_id, sum(value) AS value FROM {db}.samples WHERE tenant = "
            "{tenant:String} AND profile_type = {pt:String} AND series_id IN (" + series + ") "
            "AND time >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
            "AND time < fromUnixTimestamp64Milli({t1:Int64}, 'UTC') "
            "AND (series_id, time) IN (SELECT arrayJoin(series_ids), time FROM "
            f"{db}.profiles WHERE tenant = {{tenant:String}} AND profile_id IN "
            "{pids:Array(String)}) GROUP BY stack_id HAVING value != 0"
        )
    base = (
        "tenant = {tenant:String} AND profile_type = {pt:String} AND series_id IN (" + series + ")"
    )
    ms = "fromUnixTimestamp64Milli({%s:Int64}, 'UTC')"
    parts: list[str] = []
    for table, col, a, b in _pieces(sel.start_ms, sel.end_ms, rolled_until):
        ka, kb = f"p{len(parts)}a", f"p{len(parts)}b"
        params[ka], params[kb] = a, b
        parts.append(
            f"SELECT stack_id, value FROM {db}.{table} WHERE {base} "
            f"AND {col} >= {ms % ka} AND {col} < {ms % kb}"
        )
    inner = " UNION ALL ".join(parts)
    return (
        f"SELECT stack_id, sum(value) AS value FROM ({inner}) GROUP BY stack_id HAVING value != 0"
    )
