"""``querier.v1.QuerierService``: what Grafana's Pyroscope data source calls.

ProfileTypes, LabelNames, LabelValues, Series, SelectMergeStacktraces (names and levels,
``max_nodes``), SelectMergeProfile (pprof), SelectSeries (step, group_by, aggregation,
limit), Diff and GetProfileStats; Connect unary calls, binary or JSON. Times are Unix
milliseconds, steps seconds, as in Pyroscope.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from aiflame.proto.pyroscope.google.v1 import profile_pb2 as google_profile
from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q
from aiflame.proto.pyroscope.types.v1 import types_pb2 as t
from aiflame.render.pprof import build_message
from aiflame.server import connect
from aiflame.server.bodies import content_decoded, read_body
from aiflame.server.errors import BadRequest, NotFound
from aiflame.server.query import flame, labels, series
from aiflame.server.query.diff import flame_graph_diff
from aiflame.server.query.select import Selection
from aiflame.server.routes_ingest import tenant_of
from aiflame.server.state import ServerState, run_blocking

_MAX_QUERY_BODY = 4 << 20


def _selection(request: Request, m) -> Selection:  # type: ignore[no-untyped-def]
    ids = tuple(getattr(m, "profile_id_selector", ()))
    return Selection.make(
        tenant_of(request), m.profile_typeID, m.label_selector, m.start, m.end, ids
    )


def _symbols(state: ServerState) -> flame.Symbols:
    if not hasattr(state, "symbols"):
        state.symbols = flame.Symbols(state.store)  # type: ignore[attr-defined]
    return state.symbols  # type: ignore[attr-defined]


def _profile_types(
    state: ServerState, request: Request, m: q.ProfileTypesRequest
) -> q.ProfileTypesResponse:
    out = q.ProfileTypesResponse()
    for pt in labels.profile_types(state.store, tenant_of(request), m.start, m.end):
        out.profile_types.add(
            ID=pt.id,
            name=pt.name,
            sample_type=pt.sample_type,
            sample_unit=pt.sample_unit,
            period_type=pt.period_type,
            period_unit=pt.period_unit,
        )
    return out


def _label_names(
    state: ServerState, request: Request, m: t.LabelNamesRequest
) -> t.LabelNamesResponse:
    names = labels.label_names(state.store, tenant_of(request), list(m.matchers), m.start, m.end)
    return t.LabelNamesResponse(names=names)


def _label_values(
    state: ServerState, request: Request, m: t.LabelValuesRequest
) -> t.LabelValuesResponse:
    if not m.name:
        raise BadRequest("LabelValues needs a label name")
    values = labels.label_values(
        state.store, tenant_of(request), m.name, list(m.matchers), m.start, m.end
    )
    return t.LabelValuesResponse(names=values)


def _series(state: ServerState, request: Request, m: q.SeriesRequest) -> q.SeriesResponse:
    out = q.SeriesResponse()
    for lb in labels.series_labels(
        state.store, tenant_of(request), list(m.matchers), list(m.label_names), m.start, m.end
    ):
        s = out.labels_set.add()
        for k, v in sorted(lb.items()):
            s.labels.add(name=k, value=v)
    return out


def _merge_stacktraces(
    state: ServerState, request: Request, m: q.SelectMergeStacktracesRequest
) -> q.SelectMergeStacktracesResponse:
    sel = _selection(request, m)
    merged = flame.merged_stacks(state.store, _symbols(state), sel)
    fg = flame.flame_graph(
        merged, _symbols(state), m.max_nodes if m.HasField("max_nodes") else None
    )
    return q.SelectMergeStacktracesResponse(flamegraph=fg)


def _merge_profile(
    state: ServerState, request: Request, m: q.SelectMergeProfileRequest
) -> google_profile.Profile:
    sel = _selection(request, m)
    merged = flame.merged_stacks(state.store, _symbols(state), sel)
    profile = flame.to_profile(merged, _symbols(state), sel.profile_type)
    profile.meta["time_range_ns"] = (sel.start_ms * 1_000_000, sel.end_ms * 1_000_000)
    data = build_message(profile).SerializeToString()
    return google_profile.Profile.FromString(data)


def _select_series(
    state: ServerState, request: Request, m: q.SelectSeriesRequest
) -> q.SelectSeriesResponse:
    sel = _selection(request, m)
    average = m.HasField("aggregation") and m.aggregation == t.TIME_SERIES_AGGREGATION_TYPE_AVERAGE
    result = series.select_series(
        state.store,
        sel,
        m.step,
        list(m.group_by),
        average=average,
        limit=m.limit if m.HasField("limit") else None,
    )
    out = q.SelectSeriesResponse()
    for s in result:
        ps = out.series.add()
        for k, v in sorted(s.labels.items()):
            ps.labels.add(name=k, value=v)
        for ts, value in zip(s.timestamps_ms, s.values, strict=True):
            ps.points.add(timestamp=ts, value=value)
    return out


def _diff(state: ServerState, request: Request, m: q.DiffRequest) -> q.DiffResponse:
    left, right = _selection(request, m.left), _selection(request, m.right)
    sym = _symbols(state)
    a = flame.merged_stacks(state.store, sym, left)
    b = flame.merged_stacks(state.store, sym, right)
    limit = m.left.max_nodes if m.left.HasField("max_nodes") else None
    return q.DiffResponse(flamegraph=flame_graph_diff(a, b, sym, limit))


def _profile_stats(
    state: ServerState, request: Request, m: t.GetProfileStatsRequest
) -> t.GetProfileStatsResponse:
    ingested, oldest, newest = labels.profile_stats(state.store, tenant_of(request))
    return t.GetProfileStatsResponse(
        data_ingested=ingested, oldest_profile_time=oldest, newest_profile_time=newest
    )


METHODS: dict[str, tuple[type, Callable]] = {
    "ProfileTypes": (q.ProfileTypesRequest, _profile_types),
    "LabelNames": (t.LabelNamesRequest, _label_names),
    "LabelValues": (t.LabelValuesRequest, _label_values),
    "Series": (q.SeriesRequest, _series),
    "SelectMergeStacktraces": (q.SelectMergeStacktracesRequest, _merge_stacktraces),
    "SelectMergeProfile": (q.SelectMergeProfileRequest, _merge_profile),
    "SelectSeries": (q.SelectSeriesRequest, _select_series),
    "Diff": (q.DiffRequest, _diff),
    "GetProfileStats": (t.GetProfileStatsRequest, _profile_stats),
}


async def querier(request: Request) -> Response:
    method = request.path_params["method"]
    if method not in METHODS:
        raise NotFound(f"querier.v1.QuerierService has no method {method!r} here")
    state: ServerState = request.app.state.server
    codec = connect.codec_of(request)
    body = content_decoded(request, await read_body(request, _MAX_QUERY_BODY), _MAX_QUERY_BODY)
    message_type, handler = METHODS[method]
    msg = connect.parse(message_type, body, codec)
    result = await run_blocking(handler, state, request, msg)
    return connect.respond(result, codec)


Handler = Callable[[Request], Awaitable[Response]]
