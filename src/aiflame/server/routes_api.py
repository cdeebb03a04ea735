"""aiflame's own JSON API: traces and their analyses, GPU-hour attribution (JSON and CSV),
fleet findings, a workload's page data, flame graph pages of any selection (and diffs),
fleet-wide trace requests, agents, and the server's own metrics.

Times are Unix milliseconds, seconds, or Grafana's relative forms (``now``, ``now-6h``).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pyarrow as pa
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from aiflame.server import validate
from aiflame.server.bodies import read_body
from aiflame.server.errors import BadRequest, NotFound
from aiflame.server.labels import check_labels, matchers_sql, parse_selector
from aiflame.server.query import attribution, findings, flame, labels
from aiflame.server.query.requests import REQUEST_KINDS, request_created
from aiflame.server.query.select import Selection
from aiflame.server.routes_ingest import tenant_of
from aiflame.server.state import ServerState, run_blocking
from aiflame.server.store.writer import Work

_MS = pa.timestamp("ms", tz="UTC")


def parse_time(text: str | None, default_ms: int, field: str = "time") -> int:
    return validate.time_ms(text, field, default_ms)


def _range(request: Request, default_s: int = 3600) -> tuple[int, int]:
    now = int(time.time() * 1000)
    end = parse_time(request.query_params.get("to"), now, "to")
    start = parse_time(request.query_params.get("from"), max(0, end - default_s * 1000), "from")
    if end <= start:
        raise BadRequest("'to' must be after 'from'")
    return start, end


def _int(request: Request, name: str, default: int, lo: int = 0, hi: int = 10**9) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    v = validate.number(raw, name, -1e18, 1e18)
    return max(lo, min(hi, int(v)))


def _state(request: Request) -> ServerState:
    return request.app.state.server


def _symbols(state: ServerState) -> flame.Symbols:
    if not hasattr(state, "symbols"):
        state.symbols = flame.Symbols(state.store)  # type: ignore[attr-defined]
    return state.symbols  # type: ignore[attr-defined]


# -- attribution, findings, workloads -------------------------------------------------------
def _attribution_query(request: Request) -> attribution.Query:
    start, end = _range(request, 7 * 86400)
    span_s = (end - start) / 1000
    auto = 3600 if span_s > 2 * 86400 else 300 if span_s > 6 * 3600 else 60
    step = _int(request, "step", auto, 1, 400 * 86400)
    # Buckets aligned to the roll-up they read, so an hour is never cut in two.
    align = 3_600_000 if step % 3600 == 0 else 60_000 if step % 60 == 0 else 1000
    return attribution.Query(
        tenant=tenant_of(request),
        start_ms=start // align * align,
        end_ms=end,
        step_s=step,
        group_by=request.query_params.get("group_by", "team"),
        selector=request.query_params.get("selector", ""),
        top=_int(request, "top", 10, 0, 1000),
        sort=request.query_params.get("sort") or "allocated",
    )


async def get_attribution(request: Request) -> Response:
    state = _state(request)
    q = _attribution_query(request)
    if request.query_params.get("format") == "csv" or request.url.path.endswith(".csv"):
        text = await run_blocking(attribution.attribution_csv, state.store, q)
        name = f"gpu-hours-by-{q.group_by}.csv"
        return Response(
            text,
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )
    return JSONResponse(await run_blocking(attribution.attribution, state.store, q))


async def get_findings(request: Request) -> Response:
    state = _state(request)
    start, end = _range(request, 7 * 86400)
    key = request.query_params.get("workload_label") or findings.WORKLOAD
    result = await run_blocking(
        findings.fleet_findings,
        state.store,
        tenant_of(request),
        start,
        end,
        key,
        request.query_params.get("selector", ""),
    )
    return JSONResponse(result)


def _workload(
    state: ServerState, tenant: str, label: str, value: str, start: int, end: int
) -> dict:
    sel = {label: value}
    check_labels(list(sel.items()))
    params: dict[str, Any] = {"t": tenant, "k": label, "v": value, "t0": start, "t1": end}
    db = state.store.db
    where = (
        "tenant = {t:String} AND labels[{k:String}] = {v:String} "
        "AND start >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
        "AND start < fromUnixTimestamp64Milli({t1:Int64}, 'UTC')"
    )
    hosts = state.store.rows(
        f"SELECT host, groupUniqArray(labels['rank']), groupUniqArray(labels['gpu_model']), "
        f"sum(allocated_gpu_seconds) / 3600, sum(ifNull(busy_gpu_seconds, 0)) / 3600, "
        f"length(groupUniqArrayArray(gpu_uuids)) "
        f"FROM {db}.workload_telemetry WHERE {where} GROUP BY host ORDER BY host",
        params,
    )
    types = state.store.rows(
        f"SELECT DISTINCT profile_type FROM {db}.series WHERE tenant = {{t:String}} "
        "AND labels[{k:String}] = {v:String} "
        "AND hour >= toStartOfHour(fromUnixTimestamp64Milli({t0:Int64}, 'UTC')) "
        "AND hour < fromUnixTimestamp64Milli({t1:Int64}, 'UTC') ORDER BY profile_type",
        params,
    )
    traces = _trace_list(state, tenant, start, end, f'{{{label}="{_esc(value)}"}}', 100)
    # Ranks are labels of processes, not of workloads: the profiles and traces carry them.
    ranks: dict[str, set[str]] = {}
    for host, found in state.store.rows(
        f"SELECT labels['host'], groupUniqArray(labels['rank']) FROM {db}.series "
        "WHERE tenant = {t:String} AND labels[{k:String}] = {v:String} "
        "AND mapContains(labels, 'rank') "
        "AND hour >= toStartOfHour(fromUnixTimestamp64Milli({t0:Int64}, 'UTC')) "
        "AND hour < fromUnixTimestamp64Milli({t1:Int64}, 'UTC') GROUP BY labels['host']",
        params,
    ):
        ranks.setdefault(host, set()).update(found)
    for t in traces:
        if t["labels"].get("rank"):
            ranks.setdefault(t["labels"].get("host", ""), set()).add(t["labels"]["rank"])
    return {
        "label": label,
        "value": value,
        "from": start,
        "to": end,
        "selector": f'{{{label}="{_esc(value)}"}}',
        "hosts": [
            {
                "host": h,
                "ranks": sorted((r for r in ranks.get(h, ()) if r), key=_rank_order),
                "gpu_models": sorted(g for g in gpus if g),
                "allocated_gpu_hours": alloc,
                "busy_gpu_hours": busy,
                "gpus": n,
            }
            for h, _, gpus, alloc, busy, n in hosts
        ],
        "profile_types": [r[0] for r in types],
        "traces": traces,
    }


def _rank_order(rank: str) -> tuple[int, str]:
    return (int(rank), "") if rank.isdigit() else (1 << 62, rank)


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"')


async def get_workload(request: Request) -> Response:
    state = _state(request)
    start, end = _range(request, 86400)
    label = request.query_params.get("label", "job_id")
    value = request.query_params.get("value")
    if value is None:
        raise BadRequest("value is required (e.g. label=job_id&value=8812)")
    data = await run_blocking(_workload, state, tenant_of(request), label, value, start, end)
    return JSONResponse(data)


# -- traces ---------------------------------------------------------------------------------
def _trace_list(
    state: ServerState, tenant: str, start: int, end: int, selector: str, limit: int
) -> list[dict]:
    params: dict[str, Any] = {"t": tenant, "t0": start, "t1": end, "n": limit}
    cond = matchers_sql(parse_selector(selector), "labels", params)
    db = state.store.db
    rows = state.store.rows(
        "SELECT trace_id, toUnixTimestamp64Milli(received), labels, format, status, error, "
        "ranks, gpu_time_us, busy_share, achieved_tflops, mfu, pct_of_roofline, device, bytes "
        f"FROM {db}.traces FINAL WHERE tenant = {{t:String}} "
        "AND received >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
        f"AND received < fromUnixTimestamp64Milli({{t1:Int64}}, 'UTC') AND {cond} "
        "ORDER BY received DESC LIMIT {n:UInt32}",
        params,
    )
    ids = [r[0] for r in rows]
    counts = (
        dict(
            state.store.rows(
                f"SELECT trace_id, count() FROM {db}.findings FINAL WHERE tenant = {{t:String}} "
                "AND trace_id IN {ids:Array(String)} GROUP BY trace_id",
                {"t": tenant, "ids": ids},
            )
        )
        if ids
        else {}
    )
    keys = ("trace_id", "received", "labels", "format", "status", "error", "ranks",
            "gpu_time_us", "busy_share", "achieved_tflops", "mfu", "pct_of_roofline",
            "device", "bytes")  # fmt: skip
    out = []
    for r in rows:
        d = dict(zip(keys, r, strict=True))
        d["labels"] = dict(d["labels"])
        d["findings"] = int(counts.get(d["trace_id"], 0))
        out.append(d)
    return out


async def list_traces(request: Request) -> Response:
    state = _state(request)
    start, end = _range(request, 7 * 86400)
    rows = await run_blocking(
        _trace_list,
        state,
        tenant_of(request),
        start,
        end,
        request.query_params.get("selector", ""),
        _int(request, "limit", 200, 1, 10000),
    )
    return JSONResponse({"traces": rows})


def _trace(state: ServerState, tenant: str, trace_id: str) -> dict:
    db = state.store.db
    rows = state.store.rows(
        "SELECT trace_id, toUnixTimestamp64Milli(received), labels, request_id, format, status, "
        "error, ranks, gpu_time_us, duration_us, busy_share, achieved_tflops, mfu, "
        f"pct_of_roofline, device, bytes, report FROM {db}.traces FINAL "
        "WHERE tenant = {t:String} AND trace_id = {i:String}",
        {"t": tenant, "i": trace_id},
    )
    if not rows:
        raise NotFound(f"no trace {trace_id}")
    keys = ("trace_id", "received", "labels", "request_id", "format", "status", "error",
            "ranks", "gpu_time_us", "duration_us", "busy_share", "achieved_tflops", "mfu",
            "pct_of_roofline", "device", "bytes", "report")  # fmt: skip
    d = dict(zip(keys, rows[0], strict=True))
    d["labels"] = dict(d["labels"])
    report = d.pop("report")
    d["report"] = json.loads(report) if report else None
    found = state.store.rows(
        "SELECT rank, rule, severity, title, cost_us, share, fix, evidence "
        f"FROM {db}.findings FINAL WHERE tenant = {{t:String}} AND trace_id = {{i:String}} "
        "ORDER BY cost_us DESC",
        {"t": tenant, "i": trace_id},
    )
    d["findings"] = [
        {"rank": r, "rule": rule, "severity": sev, "title": title, "cost_us": cost,
         "share": share, "fix": fix, "evidence": json.loads(ev) if ev else {}}
        for r, rule, sev, title, cost, share, fix, ev in found
    ]  # fmt: skip
    return d


async def get_trace(request: Request) -> Response:
    state = _state(request)
    data = await run_blocking(_trace, state, tenant_of(request), request.path_params["trace_id"])
    return JSONResponse(data)


async def trace_flamegraph(request: Request) -> Response:
    state = _state(request)
    tenant, trace_id = tenant_of(request), request.path_params["trace_id"]
    key = f"{tenant}/{trace_id}"
    page = state.page_cache.get(key)
    if page is None:
        blob = await run_blocking(state.trace_blob, tenant, trace_id)
        if blob is None:
            raise NotFound(f"no trace {trace_id}")
        fut = state.analyzer.flame(blob, f"Trace {trace_id}")
        import asyncio

        try:
            page = await asyncio.wrap_future(fut)
        except Exception as e:
            raise BadRequest(f"this trace has no flame graph: {e}") from None
        if len(state.page_cache) > 32:
            state.page_cache.clear()
        state.page_cache[key] = str(page)
    return HTMLResponse(page)


async def trace_report(request: Request) -> Response:
    """The trace's HTML report, as ``aiflame analyze -o`` writes it, linking into the
    trace's flame graph page."""
    state = _state(request)
    tenant, trace_id = tenant_of(request), request.path_params["trace_id"]
    key = f"{tenant}/{trace_id}/report"
    page = state.page_cache.get(key)
    if page is None:
        blob = await run_blocking(state.trace_blob, tenant, trace_id)
        if blob is None:
            raise NotFound(f"no trace {trace_id}")
        query = request.url.query
        fut = state.analyzer.report(
            blob, f"trace {trace_id}", "flamegraph" + (f"?{query}" if query else "")
        )
        import asyncio

        try:
            page = await asyncio.wrap_future(fut)
        except Exception as e:
            raise BadRequest(f"this trace has no report: {e}") from None
        if len(state.page_cache) > 32:
            state.page_cache.clear()
        state.page_cache[key] = str(page)
    return HTMLResponse(page)


# -- flame graphs of a selection --------------------------------------------------------------
def _flame_page(
    state: ServerState, tenant: str, params: dict[str, str], start: int, end: int
) -> tuple[str, str]:
    from aiflame.render.html import render_html
    from aiflame.render.pprof import render_pprof

    pt = params.get("profile_type") or "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
    selector = params.get("selector", "")
    sel = Selection.make(tenant, pt, selector, start, end)
    sym = _symbols(state)
    merged = flame.merged_stacks(state.store, sym, sel)
    title = f"{pt.split(':')[0]} {selector or '{}'}"
    profile = flame.to_profile(merged, sym, pt, title)
    fmt = params.get("format", "html")
    if fmt == "pprof":
        return render_pprof(profile).hex(), "pprof"
    diff_sel = params.get("diff_selector")
    if diff_sel is not None or params.get("diff_from"):
        from aiflame.transforms.diff import diff_profiles

        d0 = parse_time(params.get("diff_from"), start, "diff_from")
        d1 = parse_time(params.get("diff_to"), end, "diff_to")
        base_sel = Selection.make(
            tenant, pt, diff_sel if diff_sel is not None else selector, d0, d1
        )
        base = flame.to_profile(flame.merged_stacks(state.store, sym, base_sel), sym, pt)
        base.meta["title"] = "base"
        profile = diff_profiles(base, profile, normalize=params.get("normalize") == "1")
        title = f"diff: {diff_sel if diff_sel is not None else selector} -> {selector or '{}'}"
        profile.meta["title"] = title
    return render_html(profile, title=title), "html"


async def flamegraph(request: Request) -> Response:
    state = _state(request)
    start, end = _range(request)
    body, kind = await run_blocking(
        _flame_page, state, tenant_of(request), dict(request.query_params), start, end
    )
    if kind == "pprof":
        return Response(
            bytes.fromhex(body),
            media_type="application/octet-stream",
            headers={"Content-Disposition": 'attachment; filename="profile.pb.gz"'},
        )
    return HTMLResponse(body)


# -- labels for the UI ------------------------------------------------------------------------
async def get_labels(request: Request) -> Response:
    state = _state(request)
    start, end = _range(request, 86400)
    tenant = tenant_of(request)
    name = request.query_params.get("name")
    selector = request.query_params.get("selector", "")
    if name:
        values = await run_blocking(
            labels.label_values, state.store, tenant, name, [selector], start, end
        )
        return JSONResponse({"name": name, "values": values})
    names = await run_blocking(labels.label_names, state.store, tenant, [selector], start, end)
    types = await run_blocking(labels.profile_types, state.store, tenant, start, end)
    return JSONResponse({"names": names, "profile_types": [t.id for t in types]})


async def telemetry_labels(request: Request) -> Response:
    """Label names and values of workloads in telemetry (for the Fleet page's group-by)."""
    state = _state(request)
    start, end = _range(request, 7 * 86400)
    params = {"t": tenant_of(request), "t0": start // 3_600_000 * 3_600_000, "t1": end}
    rows = await run_blocking(
        state.store.rows,
        f"SELECT k, groupUniqArray(100)(v) FROM (SELECT arrayJoin(labels) AS kv, kv.1 AS k, "
        f"kv.2 AS v FROM {state.store.db}.workload_1h WHERE tenant = {{t:String}} "
        "AND bucket >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
        "AND bucket < fromUnixTimestamp64Milli({t1:Int64}, 'UTC')) GROUP BY k ORDER BY k",
        params,
    )
    return JSONResponse({"labels": {k: sorted(v) for k, v in rows}})


# -- fleet-wide trace requests, agents ---------------------------------------------------------
async def post_trace_request(request: Request) -> Response:
    state = _state(request)
    tenant = tenant_of(request)
    doc = validate.json_loads(await read_body(request, 65536))
    if (
        not isinstance(doc, dict)
        or not isinstance(doc.get("selector"), dict)
        or not doc["selector"]
    ):
        raise BadRequest('a trace request needs a selector, e.g. {"selector": {"job_id": "8812"}}')
    selector = check_labels([(str(k), str(v)) for k, v in doc["selector"].items()])
    kind = doc.get("kind", "trace")
    if kind not in REQUEST_KINDS:
        raise BadRequest(f"kind must be one of {', '.join(REQUEST_KINDS)}")
    duration = doc.get("duration_ms")
    iterations = doc.get("iterations")
    if kind == "memory-snapshot":
        # A snapshot is of one instant: the allocator's state and its recent history.
        if duration is not None or iterations is not None or doc.get("start_time") is not None:
            raise BadRequest(
                "a memory-snapshot request takes no duration_ms, iterations or start_time"
            )
    elif (duration is None) == (iterations is None):
        raise BadRequest("give exactly one of duration_ms or iterations")
    if duration is not None and not (isinstance(duration, int) and 100 <= duration <= 60_000):
        raise BadRequest("duration_ms must be an integer from 100 to 60000")
    if iterations is not None and not (isinstance(iterations, int) and 1 <= iterations <= 1000):
        raise BadRequest("iterations must be an integer from 1 to 1000")
    start_time = doc.get("start_time")
    if start_time is not None:
        start_time = validate.number(start_time, "start_time", 0, validate.MAX_TIME_MS / 1000)
    expires_s = doc.get("expires_s", 600)
    if not isinstance(expires_s, int | float) or not 10 <= expires_s <= 86400:
        raise BadRequest("expires_s must be from 10 to 86400")
    request_id = "r-" + uuid.uuid4().hex[:12]
    now = int(time.time() * 1000)
    tables = {
        "trace_requests": {
            "tenant": [tenant],
            "request_id": [request_id],
            "created": pa.array([now], _MS),
            "expires": pa.array([now + int(expires_s * 1000)], _MS),
            "selector": pa.array([list(selector.items())], pa.map_(pa.string(), pa.string())),
            "duration_ms": pa.array([duration], pa.uint32()),
            "iterations": pa.array([iterations], pa.uint32()),
            "start_time": pa.array([start_time], pa.float64()),
            "kind": [kind],
        }
    }
    await state.store_works([Work(tables=tables, rows=1)])
    request_created(tenant)
    return JSONResponse(
        {"request_id": request_id, "kind": kind, "expires": now + int(expires_s * 1000)}
    )


async def list_trace_requests(request: Request) -> Response:
    state = _state(request)
    db = state.store.db
    tenant = tenant_of(request)
    rows = await run_blocking(
        state.store.rows,
        "SELECT r.request_id, toUnixTimestamp64Milli(r.created), "
        "toUnixTimestamp64Milli(r.expires), r.selector, r.kind, r.duration_ms, r.iterations, "
        f"(SELECT groupUniqArray(host) FROM {db}.trace_deliveries d WHERE d.tenant = {{t:String}} "
        "AND d.request_id = r.request_id), "
        f"(SELECT groupUniqArray(trace_id) FROM {db}.traces t WHERE t.tenant = {{t:String}} "
        "AND t.request_id = r.request_id) "
        f"FROM {db}.trace_requests AS r FINAL WHERE r.tenant = {{t:String}} "
        "ORDER BY r.created DESC LIMIT 200",
        {"t": tenant},
    )
    keys = ("request_id", "created", "expires", "selector", "kind", "duration_ms", "iterations",
            "delivered_to", "traces")  # fmt: skip
    out = []
    for r in rows:
        d = dict(zip(keys, r, strict=True))
        d["selector"] = dict(d["selector"])
        out.append(d)
    return JSONResponse({"requests": out})


async def list_agents(request: Request) -> Response:
    state = _state(request)
    rows = await run_blocking(
        state.store.rows,
        "SELECT host, agent_version, toUnixTimestamp64Milli(started), "
        "toUnixTimestamp64Milli(last_seen), gpus, spool_bytes, sampling_rate_hz "
        f"FROM {state.store.db}.agents FINAL WHERE tenant = {{t:String}} ORDER BY host",
        {"t": tenant_of(request)},
    )
    keys = ("host", "agent_version", "started", "last_seen", "gpus", "spool_bytes",
            "sampling_rate_hz")  # fmt: skip
    out = [dict(zip(keys, r, strict=True)) for r in rows]
    for d in out:
        d["gpus"] = json.loads(d["gpus"] or "[]")
    return JSONResponse({"agents": out})


async def store_stats(request: Request) -> Response:
    """Rows and bytes of every table (active parts), for capacity planning."""
    state = _state(request)
    rows = await run_blocking(
        state.store.rows,
        "SELECT table, sum(rows), count(), sum(bytes_on_disk), sum(data_compressed_bytes), "
        "sum(data_uncompressed_bytes) FROM system.parts WHERE database = {db:String} "
        "AND active GROUP BY table ORDER BY table",
        {"db": state.store.db},
    )
    keys = ("rows", "parts", "bytes_on_disk", "compressed_bytes", "uncompressed_bytes")
    tables = {r[0]: dict(zip(keys, (int(x) for x in r[1:]), strict=True)) for r in rows}
    return JSONResponse({"store": state.url.describe(), "tables": tables})


async def flush(request: Request) -> Response:
    """Wait until everything accepted before this request is in the store (pushes are
    answered once logged, and stored a moment later) and in its roll-ups."""
    state = _state(request)
    await state.store_works([])
    await state.roll_up_now()
    return JSONResponse({"flushed": True})


async def metrics(request: Request) -> Response:
    """The server's own counters in Prometheus' text format."""
    state = _state(request)
    c = state.counters
    lines = [
        "# TYPE aiflame_server_requests_total counter",
        *(
            f'aiflame_server_requests_total{{status="{k}"}} {v}'
            for k, v in sorted(c.requests.items())
        ),
        "# TYPE aiflame_server_rejected_total counter",
        *(
            f'aiflame_server_rejected_total{{reason="{k}"}} {v}'
            for k, v in sorted(c.rejected.items())
        ),
        "# TYPE aiflame_server_profiles_total counter",
        f"aiflame_server_profiles_total {c.profiles}",
        "# TYPE aiflame_server_sample_rows_total counter",
        f"aiflame_server_sample_rows_total {c.samples}",
        "# TYPE aiflame_server_telemetry_total counter",
        f"aiflame_server_telemetry_total {c.telemetry}",
        "# TYPE aiflame_server_traces_total counter",
        f"aiflame_server_traces_total {c.traces}",
        "# TYPE aiflame_server_batches_total counter",
        f"aiflame_server_batches_total {state.writer.committed_batches}",
        "# TYPE aiflame_server_rows_written_total counter",
        f"aiflame_server_rows_written_total {state.writer.committed_rows}",
        "# TYPE aiflame_server_commit_seconds_total counter",
        f"aiflame_server_commit_seconds_total {state.writer.commit_seconds:.3f}",
        "# TYPE aiflame_server_pprof_dictionaries_total counter",
        f'aiflame_server_pprof_dictionaries_total{{cache="hit"}} {state.dictionaries.hits}',
        f'aiflame_server_pprof_dictionaries_total{{cache="miss"}} {state.dictionaries.misses}',
        *_protection_metrics(state),
        "# TYPE aiflame_server_wal_bytes gauge",
        f"aiflame_server_wal_bytes {state.wal.size}",
        "# TYPE aiflame_server_uptime_seconds gauge",
        f"aiflame_server_uptime_seconds {time.time() - state.started:.0f}",
    ]
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


def _protection_metrics(state: ServerState) -> list[str]:
    """What the server refused or cut off to keep ingest going, and whether it can write."""
    from aiflame.server.connections import COUNTS

    health = state.writer.health
    return [
        "# TYPE aiflame_server_store_writable gauge",
        f"aiflame_server_store_writable {int(health.ok and state.wal_health.ok)}",
        "# TYPE aiflame_server_store_failures_total counter",
        f"aiflame_server_store_failures_total {health.failures + state.wal_health.failures}",
        "# TYPE aiflame_server_set_aside_total counter",
        f"aiflame_server_set_aside_total {state.writer.set_aside}",
        "# TYPE aiflame_server_queries_refused_total counter",
        f"aiflame_server_queries_refused_total {state.admission.refused}",
        "# TYPE aiflame_server_connections_cut_total counter",
        f'aiflame_server_connections_cut_total{{reason="idle"}} {COUNTS.idle_closed}',
        f'aiflame_server_connections_cut_total{{reason="header_timeout"}} {COUNTS.header_timeouts}',
        f'aiflame_server_connections_cut_total{{reason="body_too_slow"}} {COUNTS.body_timeouts}',
        f'aiflame_server_connections_cut_total{{reason="client_cap"}} {COUNTS.refused}',
        "# TYPE aiflame_server_open_connections gauge",
        f"aiflame_server_open_connections {sum(COUNTS.open_by_client.values())}",
    ]


ROUTES = [
    Route("/api/v1/attribution", get_attribution),
    Route("/api/v1/attribution.csv", get_attribution),
    Route("/api/v1/findings", get_findings),
    Route("/api/v1/workload", get_workload),
    Route("/api/v1/traces", list_traces, methods=["GET"]),
    Route("/api/v1/traces/{trace_id}", get_trace),
    Route("/api/v1/traces/{trace_id}/flamegraph", trace_flamegraph),
    Route("/api/v1/traces/{trace_id}/report", trace_report),
    Route("/api/v1/flamegraph", flamegraph),
    Route("/api/v1/labels", get_labels),
    Route("/api/v1/telemetry/labels", telemetry_labels),
    Route("/api/v1/trace-requests", post_trace_request, methods=["POST"]),
    Route("/api/v1/trace-requests", list_trace_requests, methods=["GET"]),
    Route("/api/v1/agents", list_agents),
    Route("/api/v1/admin/store", store_stats),
    Route("/api/v1/admin/flush", flush, methods=["POST"]),
    Route("/metrics", metrics),
]
