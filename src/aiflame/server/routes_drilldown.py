"""What Grafana's Profiles Drilldown app asks beyond the querier, with Pyroscope's semantics.

- ``GET /pyroscope/render?query=TYPE{SELECTOR}&from&until[&max-nodes][&format=json|dot]
  [&groupBy&aggregation]``: the flame graph as Pyroscope's "flamebearer" JSON (names,
  delta-encoded levels, ticks, units) with its timeline, or the call graph in DOT (the
  app's export menu and its assistant).
- ``GET /pyroscope/render-diff?leftQuery&leftFrom&leftUntil&rightQuery&rightFrom
  &rightUntil[&max-nodes]``: the diff of two selections as "double" flamebearer JSON.
- ``GET /pyroscope/label-values?label=NAME``: Pyroscope's older label values call.
- ``settings.v1.SettingsService/{Get,Set,Delete}``: the app's settings of each tenant
  (``pluginSettings``: max nodes, export options...), kept in the store.
- ``settings.v1.RecordingRulesService/*``: no recording rules are kept here (the list is
  empty; creating one is refused with a message).

Times are Unix milliseconds or seconds, or relative (``now-1h``), as Pyroscope takes them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from google.protobuf.message import Message
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from aiflame.proto.pyroscope.settings.v1 import recording_rules_pb2 as rr
from aiflame.proto.pyroscope.settings.v1 import setting_pb2 as st
from aiflame.server import connect
from aiflame.server.bodies import content_decoded, read_body
from aiflame.server.errors import BadRequest, Conflict, NotFound
from aiflame.server.labels import NAME_LABEL, ProfileType, parse_selector
from aiflame.server.query import flame, labels, series
from aiflame.server.query.diff import flame_graph_diff
from aiflame.server.query.dot import call_graph
from aiflame.server.query.labels import format_matchers
from aiflame.server.query.select import Selection
from aiflame.server.routes_api import parse_time
from aiflame.server.routes_ingest import tenant_of
from aiflame.server.state import ServerState, run_blocking

_MAX_BODY = 1 << 20
DEFAULT_TIMELINE_POINTS = 1500  # Pyroscope's timeline resolution
# Pyroscope's step table (pkg/querier/timeline): an interval up to the first number (ms)
# is rounded to the second.
_STEPS_MS = (
    (15_000, 10_000), (17_500, 15_000), (25_000, 20_000), (45_000, 30_000),
    (90_000, 60_000), (210_000, 120_000), (450_000, 300_000), (750_000, 600_000),
    (1_050_000, 900_000), (1_500_000, 1_200_000), (2_700_000, 1_800_000),
    (5_400_000, 3_600_000), (9_000_000, 7_200_000), (16_200_000, 10_800_000),
    (32_400_000, 21_600_000), (86_400_000, 43_200_000), (172_800_000, 86_400_000),
    (604_800_000, 86_400_000), (1_814_400_000, 604_800_000), (3_628_800_000, 2_592_000_000),
)  # fmt: skip


def timeline_step_s(start_ms: int, end_ms: int) -> int:
    """The timeline's step: the range over 1,500 points, at least 15 s, rounded as Grafana
    and Pyroscope round intervals."""
    interval = (end_ms - start_ms) // DEFAULT_TIMELINE_POINTS
    if interval < 15_000:
        return 15
    for upto, step in _STEPS_MS:
        if interval <= upto:
            return step // 1000
    return 31_536_000


def _state(request: Request) -> ServerState:
    return request.app.state.server


def _symbols(state: ServerState) -> flame.Symbols:
    if not hasattr(state, "symbols"):
        state.symbols = flame.Symbols(state.store)  # type: ignore[attr-defined]
    return state.symbols  # type: ignore[attr-defined]


# -- /pyroscope/render and render-diff ------------------------------------------------------
def parse_query(text: str | None, what: str) -> tuple[ProfileType, str]:
    """``TYPE{SELECTOR}`` -> the profile type and the selector of the other labels."""
    if not text:
        raise BadRequest(f"{what!r} is required")
    matchers = parse_selector(text)
    names = [m for m in matchers if m.name == NAME_LABEL]
    if not names:
        raise BadRequest(f"{what!r} must contain a profile-type selection")
    try:
        pt = ProfileType.parse(names[0].value)
    except BadRequest:
        raise BadRequest(f"failed to parse {what!r}: {names[0].value[:120]!r}") from None
    return pt, format_matchers([m for m in matchers if m.name != NAME_LABEL])


def _max_nodes(request: Request) -> int | None:
    for key in ("maxNodes", "max-nodes"):
        raw = request.query_params.get(key)
        if raw:
            try:
                return int(raw)
            except ValueError:
                raise BadRequest(f"{key} must be an integer") from None
    return None


def _window(request: Request, f: str, u: str) -> tuple[int, int]:
    now = int(time.time() * 1000)
    start = parse_time(request.query_params.get(f), now)
    end = parse_time(request.query_params.get(u), now)
    return start, end


def _units(pt: ProfileType) -> tuple[str, int]:
    """Flamebearer units and sample rate, as Pyroscope exports a profile type."""
    if pt.sample_type in ("inuse_objects", "alloc_objects", "goroutine", "samples"):
        return "objects", 100
    if pt.sample_type == "cpu":
        return "samples", 1_000_000_000
    return pt.sample_unit, 100


def flamebearer(fg, pt: ProfileType, fmt: str = "single") -> dict:  # type: ignore[no-untyped-def]
    units, rate = _units(pt)
    return {
        "version": 1,
        "flamebearer": {
            "names": list(fg.names),
            "levels": [list(level.values) for level in fg.levels],
            "numTicks": int(fg.total),
            "maxSelf": int(fg.max_self),
        },
        "metadata": {
            "format": fmt,
            "spyName": "",
            "sampleRate": rate,
            "units": units,
            "name": pt.sample_type,
        },
        "timeline": None,
        "groups": None,
        "heatmap": None,
    }


def timeline(points: list[tuple[int, float]], start_ms: int, end_ms: int, step_s: int) -> dict:
    """Pyroscope's timeline: the steps from the start (snapped to the step), zeros where
    there is no point."""
    step_ms = step_s * 1000
    s0, s1 = start_ms // step_ms * step_ms, end_ms // step_ms * step_ms
    samples = [0] * max(0, (s1 - s0) // step_ms)
    for ts, value in points:
        i = (ts - s0) // step_ms
        if 0 <= i < len(samples):
            samples[i] += int(value)
    return {
        "startTime": s0 // 1000,
        "samples": samples,
        "durationDelta": step_s,
        "watermarks": None,
    }


def _render(state: ServerState, tenant: str, request: Request) -> Response:
    pt, selector = parse_query(request.query_params.get("query"), "query")
    start, end = _window(request, "from", "until")
    max_nodes = _max_nodes(request)
    sel = Selection.make(tenant, pt.id, selector, start, end)
    sym = _symbols(state)
    merged = flame.merged_stacks(state.store, sym, sel)
    if request.query_params.get("format") == "dot":
        if not merged.lengths.size:
            return PlainTextResponse("")
        text = call_graph(merged, sym, pt.sample_unit, max_nodes or 100, pt.id)
        return PlainTextResponse(text, media_type="text/vnd.graphviz")
    out = flamebearer(flame.flame_graph(merged, sym, max_nodes), pt)
    step = timeline_step_s(start, end)
    group_by = request.query_params.getlist("groupBy")
    average = request.query_params.get("aggregation") == "avg"
    snapped = Selection.make(tenant, pt.id, selector, start // (step * 1000) * step * 1000, end)
    found = series.select_series(state.store, snapped, step, group_by, average=average)
    points = list(zip(found[0].timestamps_ms, found[0].values, strict=True)) if found else []
    out["timeline"] = timeline(points if len(found) == 1 else [], start, end, step)
    if group_by:
        out["groups"] = {
            s.labels.get(group_by[0], "*"): timeline(
                list(zip(s.timestamps_ms, s.values, strict=True)), start, end, step
            )
            for s in found
        }
    return JSONResponse(out)


async def render(request: Request) -> Response:
    state = _state(request)
    return await run_blocking(_render, state, tenant_of(request), request)


def _render_diff(state: ServerState, tenant: str, request: Request) -> Response:
    left_pt, left_sel = parse_query(request.query_params.get("leftQuery"), "leftQuery")
    right_pt, right_sel = parse_query(request.query_params.get("rightQuery"), "rightQuery")
    if left_pt.id != right_pt.id:
        raise BadRequest("profile types must match")
    sym = _symbols(state)
    sides = []
    for selector, f, u in (
        (left_sel, "leftFrom", "leftUntil"),
        (right_sel, "rightFrom", "rightUntil"),
    ):
        start, end = _window(request, f, u)
        sel = Selection.make(tenant, left_pt.id, selector, start, end)
        sides.append(flame.merged_stacks(state.store, sym, sel))
    fg = flame_graph_diff(sides[0], sides[1], sym, _max_nodes(request))
    out = flamebearer(fg, left_pt, "double")
    out["leftTicks"], out["rightTicks"] = int(fg.leftTicks), int(fg.rightTicks)
    return JSONResponse(out)


async def render_diff(request: Request) -> Response:
    state = _state(request)
    return await run_blocking(_render_diff, state, tenant_of(request), request)


async def label_values(request: Request) -> Response:
    """Pyroscope's older call: ``label=__name__`` lists the profile type ids."""
    state = _state(request)
    name = request.query_params.get("label")
    if not name:
        raise BadRequest("label parameter is required")
    tenant = tenant_of(request)
    if name == NAME_LABEL:
        types = await run_blocking(labels.profile_types, state.store, tenant, 0, 0)
        return JSONResponse([t.id for t in types])
    values = await run_blocking(labels.label_values, state.store, tenant, name, [], 0, 0)
    return JSONResponse(values)


# -- settings.v1 ----------------------------------------------------------------------------
def _setting_key(tenant: str, name: str) -> str:
    return f"tenant-setting/{tenant}/{name}"


def _settings(state: ServerState, tenant: str) -> dict[str, tuple[str, int]]:
    """name -> (value, modified at ms) of the tenant's settings (deleted ones left out)."""
    prefix = _setting_key(tenant, "")
    rows = state.store.rows(
        f"SELECT key, argMax(value, version) FROM {state.store.db}.settings "
        "WHERE startsWith(key, {p:String}) GROUP BY key",
        {"p": prefix},
    )
    out = {}
    for key, raw in rows:
        doc = json.loads(raw)
        if not doc.get("deleted"):
            out[key[len(prefix) :]] = (doc["value"], int(doc["modified_at"]))
    return out


def _write_setting(state: ServerState, tenant: str, name: str, doc: dict) -> None:
    state.store.command(
        f"INSERT INTO {state.store.db}.settings VALUES ({{k:String}}, {{v:String}}, {{t:UInt64}})",
        {"k": _setting_key(tenant, name), "v": json.dumps(doc), "t": time.time_ns()},
    )


def _settings_get(state: ServerState, tenant: str, m: st.GetSettingsRequest) -> Message:
    out = st.GetSettingsResponse()
    for name, (value, at) in sorted(_settings(state, tenant).items()):
        out.settings.add(name=name, value=value, modifiedAt=at)
    return out


def _settings_set(state: ServerState, tenant: str, m: st.SetSettingsRequest) -> Message:
    if not m.HasField("setting") or not m.setting.name:
        raise BadRequest("no setting values provided")
    if len(m.setting.name) > 256 or len(m.setting.value) > 65536:
        raise BadRequest("a setting has a name of at most 256 and a value of at most 65,536 bytes")
    at = m.setting.modifiedAt if m.setting.modifiedAt > 0 else int(time.time() * 1000)
    old = _settings(state, tenant).get(m.setting.name)
    if old is not None and old[1] > at:
        raise Conflict(f"failed to update {m.setting.name}: newer update already written")
    doc = {"value": m.setting.value, "modified_at": at}
    _write_setting(state, tenant, m.setting.name, doc)
    return st.SetSettingsResponse(
        setting=st.Setting(name=m.setting.name, value=m.setting.value, modifiedAt=at)
    )


def _settings_delete(state: ServerState, tenant: str, m: st.DeleteSettingsRequest) -> Message:
    if not m.name:
        raise BadRequest("no setting name provided")
    at = int(time.time() * 1000)
    old = _settings(state, tenant).get(m.name)
    if old is not None and old[1] > at:
        raise Conflict(f"failed to delete {m.name}: newer update already written")
    _write_setting(state, tenant, m.name, {"deleted": True, "modified_at": at})
    return st.DeleteSettingsResponse()


def _no_rules(state: ServerState, tenant: str, m: Message) -> Message:
    return rr.ListRecordingRulesResponse()


def _rule_refused(state: ServerState, tenant: str, m: Message) -> Message:
    raise NotFound("recording rules are not kept by aiflame server (none is listed)")


SERVICES: dict[str, dict[str, tuple[type, Callable]]] = {
    "settings.v1.SettingsService": {
        "Get": (st.GetSettingsRequest, _settings_get),
        "Set": (st.SetSettingsRequest, _settings_set),
        "Delete": (st.DeleteSettingsRequest, _settings_delete),
    },
    "settings.v1.RecordingRulesService": {
        "ListRecordingRules": (rr.ListRecordingRulesRequest, _no_rules),
        "GetRecordingRule": (rr.GetRecordingRuleRequest, _rule_refused),
        "UpsertRecordingRule": (rr.UpsertRecordingRuleRequest, _rule_refused),
        "DeleteRecordingRule": (rr.DeleteRecordingRuleRequest, _rule_refused),
    },
}


async def settings_call(request: Request) -> Response:
    service, method = request.url.path.strip("/").split("/", 1)[0], request.path_params["method"]
    methods = SERVICES.get(service, {})
    if method not in methods:
        raise NotFound(f"{service} has no method {method!r} here")
    state = _state(request)
    codec = connect.codec_of(request)
    body = content_decoded(request, await read_body(request, _MAX_BODY), _MAX_BODY)
    message_type, handler = methods[method]
    msg = connect.parse(message_type, body, codec)
    result = await run_blocking(handler, state, tenant_of(request), msg)
    return connect.respond(result, codec)


ROUTES = [
    Route("/pyroscope/render", render),
    Route("/pyroscope/render-diff", render_diff),
    Route("/pyroscope/label-values", label_values),
    *(Route(f"/{service}/{{method}}", settings_call, methods=["POST"]) for service in SERVICES),
]
