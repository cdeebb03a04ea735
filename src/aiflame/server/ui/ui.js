// Shared by every page of the aiflame server UI: the time range, API calls, DOM helpers,
// number formats and charts. Text from profiles and labels is only ever set as textContent.
"use strict";

const UI = (() => {
  const params = new URLSearchParams(location.search);
  const tenant = params.get("tenant");
  const state = { charts: {}, data: {}, ready: null };
  window.aiflameUI = state;

  function setParam(key, value) {
    if (value === null || value === undefined || value === "") params.delete(key);
    else params.set(key, value);
    history.replaceState(null, "", location.pathname + "?" + params.toString());
  }

  // Relative times (now-6h) stay relative in the URL; the API resolves them.
  function range(defaultFrom) {
    return { from: params.get("from") || defaultFrom, to: params.get("to") || "now" };
  }

  function query(extra) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(extra || {})) {
      if (v !== null && v !== undefined && v !== "") q.set(k, v);
    }
    if (tenant) q.set("tenant", tenant);
    return q.toString();
  }

  async function api(path, extra, options) {
    const headers = Object.assign({}, (options && options.headers) || {});
    if (tenant) headers["X-Scope-OrgID"] = tenant;
    const resp = await fetch(path + "?" + query(extra), Object.assign({}, options, { headers }));
    const text = await resp.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
    if (!resp.ok) {
      const why = (body && (body.error || body.message)) || text || resp.statusText;
      throw new Error(`${path}: ${resp.status} ${why}`);
    }
    return body;
  }

  function link(page, extra) {
    const base = Object.assign({ from: params.get("from"), to: params.get("to") }, extra);
    return `/ui/${page}?` + query(base);
  }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function showError(err) {
    const box = document.getElementById("error");
    box.textContent = String(err && err.message ? err.message : err);
    box.hidden = false;
  }

  const fmt = {
    hours: (x) => (x === null || x === undefined ? "–" : x >= 100 ? x.toFixed(0) : x.toFixed(2)),
    pct: (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%"),
    num: (x, d = 1) => (x === null || x === undefined ? "–" : Number(x).toFixed(d)),
    // Engineering units: 18e15 FLOP/s is "18 PFLOP/s", never 18,000,000,000,000,000.
    si(x, unit) {
      if (x === null || x === undefined || Number.isNaN(x)) return "–";
      const three = (v) => {  // three significant digits, no trailing zeros
        const a = Math.abs(v);
        const text = v.toFixed(a >= 99.95 || a === 0 ? 0 : a >= 9.995 ? 1 : 2);
        return text.includes(".") ? text.replace(/0+$/, "").replace(/\.$/, "") : text;
      };
      const p = [["E", 1e18], ["P", 1e15], ["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]];
      for (const [s, v] of p) if (Math.abs(x) >= v) return three(x / v) + " " + s + unit;
      return three(Number(x)) + " " + unit;
    },
    gpus: (x) => (x === null || x === undefined ? "–" : x >= 100 ? x.toFixed(0) : x.toFixed(1)),
    time: (ms) => new Date(ms).toISOString().replace("T", " ").slice(0, 19),
  };

  function chart(id, option) {
    const node = document.getElementById(id);
    let c = state.charts[id];
    if (!c) {
      c = echarts.init(node, null, { renderer: "canvas" });
      state.charts[id] = c;
      window.addEventListener("resize", () => c.resize());
    }
    c.setOption(option, true);
    return c;
  }

  // A chart over time: values of null are gaps (no telemetry), drawn as gaps, not ramps;
  // each value holds until the next bucket (a step), as the mean of its bucket does.
  // ``format`` formats the axis and the tooltip (engineering units by default).
  function timeAxisOption(timestamps, series, unit, stacked, format) {
    const f = format || ((v) => fmt.si(v, unit));
    return {
      animation: false,
      tooltip: { trigger: "axis", valueFormatter: (v) => f(v) },
      legend: { type: "scroll", top: 4 },
      grid: { left: 72, right: 24, top: 40, bottom: 48 },
      dataZoom: [{ type: "inside" }, { type: "slider", height: 16, bottom: 8 }],
      xAxis: { type: "time" },
      yAxis: { type: "value", name: unit, nameTextStyle: { align: "left" }, axisLabel: { formatter: f } },
      series: series.map((s) => ({
        name: s.name,
        type: "line",
        showSymbol: false,
        connectNulls: false,
        step: "end",
        stack: s.stack === false ? undefined : stacked ? "total" : undefined,
        areaStyle: stacked && s.stack !== false ? (s.area || {}) : undefined,
        color: s.color,
        lineStyle: s.dashed ? { type: "dashed" } : undefined,
        data: timestamps.map((t, i) => [t, s.values[i]]),
      })),
    };
  }

  // The buckets of an attribution answer, every one of the range (the API lists only those
  // with telemetry): their times, their length in hours (the last may be cut by the range's
  // end) and whether any telemetry fell in them. ``per(values)`` turns the API's GPU hours
  // per bucket into GPUs (GPU hours per hour: the same whatever the bucket), null where no
  // telemetry came (a gap).
  function buckets(data) {
    const step = data.step_s * 1000;
    const times = [];
    for (let t = data.from; t < data.to && times.length < 20000; t += step) times.push(t);
    const at = new Map(data.timestamps.map((t, i) => [t, i]));
    const hours = times.map((t) => Math.min(step, data.to - t) / 3.6e6);
    const perHour = (values) => times.map((t, i) => (at.has(t) ? values[at.get(t)] / hours[i] : null));
    const perSecond = (values) => times.map((t, i) => (at.has(t) ? values[at.get(t)] / (hours[i] * 3600) : null));
    return { times, hours, perHour, perSecond };
  }

  // The time range control in the header, shared by every page.
  function initRange(defaultFrom, onChange) {
    const sel = document.getElementById("range");
    const custom = document.getElementById("custom");
    const r = range(defaultFrom);
    const known = [...sel.options].map((o) => o.value);
    if (r.to === "now" && known.includes(r.from)) sel.value = r.from;
    else {
      sel.value = "custom";
      custom.hidden = false;
      const toLocal = (v) => (/^\d+$/.test(v) ? new Date(Number(v)).toISOString().slice(0, 19) : "");
      document.getElementById("from").value = toLocal(r.from);
      document.getElementById("to").value = toLocal(r.to);
    }
    sel.addEventListener("change", () => {
      if (sel.value === "custom") { custom.hidden = false; return; }
      custom.hidden = true;
      setParam("from", sel.value);
      setParam("to", null);
      onChange();
    });
    document.getElementById("apply-range").addEventListener("click", () => {
      const f = Date.parse(document.getElementById("from").value + "Z");
      const t = Date.parse(document.getElementById("to").value + "Z");
      if (!(f < t)) { showError("the custom range needs a start before its end"); return; }
      setParam("from", String(f));
      setParam("to", String(t));
      onChange();
    });
  }

  function table(columns, rows, onRow) {
    const head = el("tr", {}, columns.map((c) => el("th", { class: c.num ? "num" : "" , text: c.title })));
    const body = rows.map((r) =>
      el("tr", { class: onRow && r.__click !== false ? "click" : "", onclick: onRow ? () => onRow(r) : null },
        columns.map((c) => {
          const v = c.value(r);
          return el("td", { class: c.num ? "num" : "" }, v instanceof Node ? v : String(v));
        })));
    return el("table", {}, el("thead", {}, head), el("tbody", {}, body));
  }

  return { params, tenant, state, setParam, range, query, api, link, el, showError, fmt, chart,
           timeAxisOption, buckets, initRange, table };
})();
