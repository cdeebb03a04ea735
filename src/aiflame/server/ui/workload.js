// Workload: one job / model / user (any label = value): its hosts and ranks, GPU hours over
// time, continuous CPU / GPU-API / GPU-memory flame graphs for the range, its traces and
// their findings, and a button that asks its hosts' agents for a trace now.
"use strict";

(() => {
  const { el, fmt, api, params } = UI;
  const main = document.getElementById("main");
  const label = params.get("label") || "job_id";
  const value = params.get("value");
  const KINDS = [["process_cpu", "CPU"], ["gpu_api", "GPU API"], ["memory", "GPU memory"]];

  if (value === null) {
    main.append(el("h1", { text: "Workload" }),
      el("div", { class: "empty", text: "choose a workload on the Fleet page (or give ?label=job_id&value=...)" }));
    UI.state.ready = Promise.resolve();
    return;
  }

  const selector = `{${label}="${value.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"}`;
  const frame = el("iframe", { class: "flame", id: "flame", title: "flame graph" });
  const tabs = el("div", { class: "tabs", id: "flame-tabs" });
  const traceBtn = el("button", { class: "primary", id: "trace-now", type: "button", text: "trace now (2 s)" });
  const snapshotBtn = el("button", { id: "snapshot-now", type: "button", text: "GPU memory snapshot" });
  const traceMsg = el("span", { class: "muted", id: "trace-msg" });
  main.append(
    el("h1", {}, `Workload ${label} = `, el("span", { id: "workload-value", text: value })),
    el("div", { class: "cards", id: "cards" }),
    el("div", { class: "chart small", id: "hours-by-host" }),
    el("h2", { text: "Hosts" }), el("div", { id: "hosts" }),
    el("h2", { text: "Continuous profiles" }), tabs, frame,
    el("h2", {}, "Traces ", traceBtn, " ", snapshotBtn, " ", traceMsg), el("div", { id: "traces" }));

  function card(k, v) {
    return el("div", { class: "card" }, el("div", { class: "v", text: v }), el("div", { class: "k", text: k }));
  }

  function showFlame(profileType) {
    const r = UI.range("now-1h");
    for (const b of tabs.children) b.classList.toggle("on", b.dataset.type === profileType);
    frame.src = "/api/v1/flamegraph?" + UI.query({ profile_type: profileType, selector, from: r.from, to: r.to });
  }

  async function load() {
    const r = UI.range("now-24h");
    const [w, attr] = await Promise.all([
      api("/api/v1/workload", { label, value, from: r.from, to: r.to }),
      api("/api/v1/attribution", { from: r.from, to: r.to, group_by: "host", selector, top: 50 }),
    ]);
    UI.state.data.workload = w;
    UI.state.data.attribution = attr;
    // ranks: those the profiles and traces of the workload carry
    const ranks = new Set(w.hosts.flatMap((h) => h.ranks));
    document.getElementById("cards").replaceChildren(
      card("allocated GPU hours", fmt.hours(attr.fleet.allocated_gpu_hours)),
      card("busy GPU hours", fmt.hours(attr.fleet.busy_gpu_hours)),
      card("device utilization", fmt.pct(attr.fleet.metrics.device_utilization.value)),
      card("hosts", String(w.hosts.length)),
      card("ranks", String(ranks.size || "–")),
      card("traces", String(w.traces.length)));
    const b = UI.buckets(attr);  // GPUs held per host over time (gaps where no telemetry)
    UI.chart("hours-by-host", UI.timeAxisOption(b.times,
      attr.groups.map((g) => ({ name: g.key, values: b.perHour(attr.series[g.key].allocated) })), "GPUs", true, fmt.gpus));
    document.getElementById("hosts").replaceChildren(w.hosts.length ? UI.table([
      { title: "host", value: (h) => h.host },
      { title: "ranks", value: (h) => h.ranks.join(", ") || "–" },
      { title: "GPUs", num: true, value: (h) => h.gpus },
      { title: "GPU model", value: (h) => h.gpu_models.join(", ") || "–" },
      { title: "allocated GPU-h", num: true, value: (h) => fmt.hours(h.allocated_gpu_hours) },
      { title: "busy GPU-h", num: true, value: (h) => fmt.hours(h.busy_gpu_hours) },
    ], w.hosts) : el("div", { class: "empty", text: "no telemetry of this workload in the range" }));
    const types = w.profile_types;
    tabs.replaceChildren(...types.map((t) => {
      const kind = KINDS.find(([k]) => t.startsWith(k + ":"));
      const name = (kind ? kind[1] : t.split(":")[0]) + " · " + t.split(":").slice(1, 3).join("/");
      return el("button", { type: "button", "data-type": t, text: name, onclick: () => showFlame(t) });
    }));
    if (types.length) showFlame(params.get("profile_type") || types.find((t) => t.startsWith("process_cpu:")) || types[0]);
    else {
      frame.hidden = true;
      tabs.replaceChildren(el("div", { class: "empty", text: "no profiles of this workload in the range" }));
    }
    document.getElementById("traces").replaceChildren(w.traces.length ? UI.table([
      { title: "received", value: (t) => fmt.time(t.received) },
      { title: "host", value: (t) => t.labels.host || "–" },
      { title: "rank", value: (t) => t.labels.rank || (t.ranks > 1 ? `${t.ranks} ranks` : "–") },
      { title: "format", value: (t) => t.format },
      { title: "status", value: (t) => t.status + (t.error ? ": " + t.error : "") },
      { title: "GPU busy", num: true, value: (t) => fmt.pct(t.busy_share) },
      { title: "TFLOP/s", num: true, value: (t) => fmt.num(t.achieved_tflops, 2) },
      { title: "MFU", num: true, value: (t) => fmt.pct(t.mfu) },
      { title: "% roofline", num: true, value: (t) => fmt.pct(t.pct_of_roofline) },
      { title: "findings", num: true, value: (t) => t.findings },
      { title: "", value: (t) => el("span", {},
          el("a", { href: "/api/v1/traces/" + encodeURIComponent(t.trace_id) + "/flamegraph?" + UI.query({}), target: "_blank", text: "flame graph" }), t.format === "torch-memory" ? null : " · ",
          t.format === "torch-memory" ? null : el("a", { href: "/api/v1/traces/" + encodeURIComponent(t.trace_id) + "/report?" + UI.query({}), target: "_blank", text: "report" })) },
    ], w.traces) : el("div", { class: "empty", text: "no traces of this workload in the range" }));
  }

  // A request is handed to the agents of the workload's hosts with their next heartbeat.
  async function request(body, what) {
    try {
      const sel = {}; sel[label] = value;
      const r = await api("/api/v1/trace-requests", {}, {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ selector: sel, ...body }) });
      traceMsg.textContent = `requested ${r.request_id}: the agents of its hosts ${what} at their next heartbeat`;
    } catch (e) { traceMsg.textContent = String(e.message || e); }
  }
  traceBtn.addEventListener("click", () => request({ duration_ms: 2000 }, "trace it"));
  snapshotBtn.addEventListener("click", () => request({ kind: "memory-snapshot" },
    "take a GPU memory snapshot of its processes (those run with the aiflame bootstrap)"));

  UI.state.ready = (async () => {
    try {
      UI.initRange("now-24h", () => load().catch(UI.showError));
      await load();
    } catch (e) { UI.showError(e); throw e; }
  })();
})();
