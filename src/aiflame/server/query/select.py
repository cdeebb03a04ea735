"""A selection of profile data: tenant, profile type, label selector and time range."""

from __future__ import annotations

from dataclasses import dataclass

from aiflame.server.errors import BadRequest
from aiflame.server.labels import ProfileType, matchers_sql, parse_selector

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

    @classmethod
    def make(
        cls,
        tenant: str,
        profile_type: str,
        selector: str,
        start_ms: int,
        end_ms: int,
        profile_ids: tuple[str, ...] = (),
    ) -> Selection:
        ProfileType.parse(profile_type)
        if end_ms <= start_ms:
            raise BadRequest("the time range is empty (end must be after start)")
        if end_ms - start_ms > MAX_RANGE_MS:
            raise BadRequest("the time range is longer than 400 days")
        parse_selector(selector)  # a bad selector is a 400 before any SQL runs
        if len(profile_ids) > 100_000:
            raise BadRequest("at most 100,000 profile ids in one selection")
        return cls(tenant, profile_type, selector, int(start_ms), int(end_ms), tuple(profile_ids))

    def params(self) -> dict[str, object]:
        return {
            "tenant": self.tenant,
            "pt": self.profile_type,
            "t0": self.start_ms,
            "t1": self.end_ms,
        }

    def series_sql(self, db: str, params: dict[str, object]) -> str:
        """Ids of the series of this profile type whose labels match, active in the range."""
        cond = matchers_sql(parse_selector(self.selector), "labels", params)
        return (
            f"SELECT DISTINCT series_id FROM {db}.series WHERE tenant = {{tenant:String}} "
            "AND profile_type = {pt:String} "
            "AND hour >= toStartOfHour(fromUnixTimestamp64Milli({t0:Int64}, 'UTC')) "
            "AND hour < fromUnixTimestamp64Milli({t1:Int64}, 'UTC') "
            f"AND {cond}"
        )

    def hours(self) -> tuple[int, int]:
        """Whole hours inside the range [h0, h1) (empty when h0 >= h1), in ms."""
        h0 = -(-self.start_ms // HOUR_MS) * HOUR_MS
        h1 = self.end_ms // HOUR_MS * HOUR_MS
        return h0, h1


def stack_values_sql(sel: Selection, db: str, params: dict[str, object]) -> str:
    """``(stack_id, value)`` rows of the selection, summed per stack. Whole hours come from
    the hourly roll-up, the partial hours at either end from the samples themselves."""
    params.update(sel.params())
    series = sel.series_sql(db, params)
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
    h0, h1 = sel.hours()
    base = (
        "tenant = {tenant:String} AND profile_type = {pt:String} AND series_id IN (" + series + ")"
    )
    ms = "fromUnixTimestamp64Milli({%s:Int64}, 'UTC')"
    parts = []
    if h0 < h1:
        params.update(h0=h0, h1=h1)
        parts.append(
            f"SELECT stack_id, value FROM {db}.samples_1h WHERE {base} "
            f"AND hour >= {ms % 'h0'} AND hour < {ms % 'h1'}"
        )
        edges = [("t0", "h0"), ("h1", "t1")]
    else:
        edges = [("t0", "t1")]
    for a, b in edges:
        if params[a] < params[b]:
            parts.append(
                f"SELECT stack_id, value FROM {db}.samples WHERE {base} "
                f"AND time >= {ms % a} AND time < {ms % b}"
            )
    inner = " UNION ALL ".join(parts)
    return (
        f"SELECT stack_id, sum(value) AS value FROM ({inner}) GROUP BY stack_id HAVING value != 0"
    )
