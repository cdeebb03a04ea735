"""``querier.v1.QuerierService``: what Grafana's Pyroscope data source and its Profiles
Drilldown app call.

ProfileTypes, LabelNames, LabelValues, Series, SelectMergeStacktraces (names and levels,
``max_nodes``, span, profile and call-site selectors, DOT and pprof formats),
SelectMergeSpanProfile, SelectMergeProfile (pprof), SelectSeries (step, group_by,
aggregation, limit, exemplars), SelectHeatmap (individual profiles or spans), Diff,
GetProfileStats and AnalyzeQuery; Connect unary calls, binary or JSON. Times are Unix
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
from aiflame.server.ingest.profiles import span_id_text, span_id_value
from aiflame.server.query import flame, frame_filter, heatmap, labels, series
from aiflame.server.query.diff import flame_graph_diff
from aiflame.server.query.dot import call_graph
from aiflame.server.query.select import Selection
from aiflame.server.routes_ingest import tenant_of
from aiflame.server.state import ServerState, run_blocking

_MAX_QUERY_BODY = 4 << 20


def span_ids(texts: list[str]) -> tuple[int, ...]:
    """Span ids of a span selector (16 hex digits each, as Pyroscope takes them)."""
    out = []
    for text in texts:
        value = span_id_value(text)
        if not value:
            raise BadRequest(f"invalid span id {text[:40]!r}: 16 hexadecimal digits expected")
        out.append(value)
    return tuple(out)


def _selection(request: Request, m) -> Selection:  # type: ignore[no-untyped-def]
    ids = tuple(getattr(m, "profile_id_selector", ()))
    spans = span_ids(list(getattr(m, "span_selector", ())))
    return Selection.make(
        tenant_of(request), m.profile_typeID, m.label_selector, m.start, m.end, ids, spans
    )


def _call_site(m) -> list[str]:  # type: ignore[no-untyped-def]
    if m.HasField("stack_trace_selector"):
        return [loc.name for loc in m.stack_trace_selector.call_site]
    return []


def _stacks(state: ServerState, request: Request, m, sel: Selection) -> flame.Merged:  # type: ignore[no-untyped-def]
    """The selection's merged stacks, narrowed by the request's stack trace selector (its
    call site and its frame filter)."""
    sym = _symbols(state)
    merged = flame.select_call_site(flame.merged_stacks(state.store, sym, sel), sym, _call_site(m))
    if request.state.codec == "json":
        ff = frame_filter.from_json(request.state.body)
    elif m.HasField("stack_trace_selector"):
        ff = frame_filter.from_proto(m.stack_trace_selector)
    else:
        return merged
    return frame_filter.select(merged, sym, ff)


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
    if m.trace_id_selector:
        raise BadRequest("trace_id_selector: this server keeps span ids, not trace ids")
    sel = _selection(request, m)
    sym = _symbols(state)
    merged = _stacks(state, request, m, sel)
    max_nodes = m.max_nodes if m.HasField("max_nodes") else None
    if m.format == q.PROFILE_FORMAT_DOT:
        unit = sel.profile_type.split(":")[2]
        return q.SelectMergeStacktracesResponse(
            dot=call_graph(merged, sym, unit, max_nodes or 100, sel.profile_type)
        )
    if m.format == q.PROFILE_FORMAT_PPROF:
        out = q.SelectMergeStacktracesResponse()
        out.pprof.profile.CopyFrom(_pprof(merged, sym, sel, max_nodes))
        return out
    if m.format == q.PROFILE_FORMAT_TREE:
        raise BadRequest("the tree format is not served here: ask for the flame graph or pprof")
    return q.SelectMergeStacktracesResponse(flamegraph=flame.flame_graph(merged, sym, max_nodes))


def _merge_span_profile(
    state: ServerState, request: Request, m: q.SelectMergeSpanProfileRequest
) -> q.SelectMergeSpanProfileResponse:
    if m.format == q.PROFILE_FORMAT_TREE:
        raise BadRequest("the tree format is not served here: ask for the flame graph")
    sel = _selection(request, m)
    if not sel.span_ids:
        raise BadRequest("SelectMergeSpanProfile needs span ids (span_selector)")
    sym = _symbols(state)
    merged = flame.merged_stacks(state.store, sym, sel)
    max_nodes = m.max_nodes if m.HasField("max_nodes") else None
    return q.SelectMergeSpanProfileResponse(flamegraph=flame.flame_graph(merged, sym, max_nodes))


def _pprof(
    merged: flame.Merged, sym: flame.Symbols, sel: Selection, max_nodes: int | None
) -> google_profile.Profile:
    profile = flame.to_profile(merged, sym, sel.profile_type, max_nodes=max_nodes)
    profile.meta["time_range_ns"] = (sel.start_ms * 1_000_000, sel.end_ms * 1_000_000)
    data = build_message(profile).SerializeToString()
    return google_profile.Profile.FromString(data)


def _merge_profile(
    state: ServerState, request: Request, m: q.SelectMergeProfileRequest
) -> google_profile.Profile:
    if m.trace_id_selector:
        raise BadRequest("trace_id_selector: this server keeps span ids, not trace ids")
    sel = _selection(request, m)
    merged = _stacks(state, request, m, sel)
    return _pprof(merged, _symbols(state), sel, m.max_nodes if m.HasField("max_nodes") else None)


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
    if m.exemplar_type == t.EXEMPLAR_TYPE_SPAN:
        raise BadRequest("span exemplars are for SelectHeatmap; SelectSeries has individual ones")
    if m.exemplar_type == t.EXEMPLAR_TYPE_INDIVIDUAL:
        series.add_exemplars(state.store, sel, m.step, list(m.group_by), result)
    out = q.SelectSeriesResponse()
    for s in result:
        ps = out.series.add()
        for k, v in sorted(s.labels.items()):
            ps.labels.add(name=k, value=v)
        for ts, value in zip(s.timestamps_ms, s.values, strict=True):
            point = ps.points.add(timestamp=ts, value=value)
            ex = s.exemplars.get(ts)
            if ex is not None:
                _exemplar(point.exemplars.add(), ex)
    return out


def _exemplar(out: t.Exemplar, p: heatmap.Point) -> None:
    out.timestamp, out.value = p.time_ms, p.value
    out.profile_id, out.span_id = p.profile_id, span_id_text(p.span_id)
    for k, v in sorted(p.labels.items()):
        out.labels.add(name=k, value=v)


_HEATMAP_KINDS = {
    q.HEATMAP_QUERY_TYPE_INDIVIDUAL: heatmap.INDIVIDUAL,
    q.HEATMAP_QUERY_TYPE_SPAN: heatmap.SPAN,
}
_EXEMPLAR_KINDS = {
    t.EXEMPLAR_TYPE_INDIVIDUAL: heatmap.INDIVIDUAL,
    t.EXEMPLAR_TYPE_SPAN: heatmap.SPAN,
}


def _select_heatmap(
    state: ServerState, request: Request, m: q.SelectHeatmapRequest
) -> q.SelectHeatmapResponse:
    kind = _HEATMAP_KINDS.get(m.query_type)
    if kind is None:
        raise BadRequest("a heatmap needs query_type individual or span")
    wanted = _EXEMPLAR_KINDS.get(m.exemplar_type)
    if wanted is not None and wanted != kind:
        raise BadRequest(f"{wanted} exemplars are only available for the {wanted} query type")
    if m.HasField("limit") and m.limit < 0:
        raise BadRequest(f"limit must be non-negative, got {m.limit}")
    if m.start >= m.end:
        raise BadRequest("start time must be before end time")
    sel = _selection(request, m)
    result = heatmap.select_heatmap(
        state.store, sel, m.step, list(m.group_by), kind, wanted is not None, m.limit
    )
    out = q.SelectHeatmapResponse()
    for hs in result:
        s = out.series.add()
        for k, v in sorted(hs.labels.items()):
            s.labels.add(name=k, value=v)
        for slot in hs.slots:
            x = s.slots.add(timestamp=slot.time_ms, y_min=slot.y_min, counts=slot.counts)
            for ex in slot.exemplars:
                _exemplar(x.exemplars.add(), ex)
    return out


def _analyze_query(
    state: ServerState, request: Request, m: q.AnalyzeQueryRequest
) -> q.AnalyzeQueryResponse:
    """What a query reads: its series, profiles, sample rows and their bytes."""
    scope = labels.query_scope(state.store, tenant_of(request), m.query, m.start, m.end)
    out = q.AnalyzeQueryResponse()
    out.query_scopes.add(component_type="store", component_count=1, **scope)
    out.query_impact.total_bytes_in_time_range = scope["profile_bytes"]
    out.query_impact.total_queried_series = scope["series_count"]
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
    "SelectMergeSpanProfile": (q.SelectMergeSpanProfileRequest, _merge_span_profile),
    "SelectMergeProfile": (q.SelectMergeProfileRequest, _merge_profile),
    "SelectSeries": (q.SelectSeriesRequest, _select_series),
    "SelectHeatmap": (q.SelectHeatmapRequest, _select_heatmap),
    "Diff": (q.DiffRequest, _diff),
    "GetProfileStats": (t.GetProfileStatsRequest, _profile_stats),
    "AnalyzeQuery": (q.AnalyzeQueryRequest, _analyze_query),
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
    request.state.codec, request.state.body = codec, body  # fields newer than the protos
    result = await run_blocking(handler, state, request, msg)
    return connect.respond(result, codec)


Handler = Callable[[Request], Awaitable[Response]]
