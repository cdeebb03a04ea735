// Fleet: where the GPU hours go and where they are wasted. GPUs in use over time stacked by
// a chosen label with the GPUs nobody holds on top (capacity), busy vs allocated, estimated
// FLOP/s, the groups with their idle hours (held, not busy) and the hosts with their
// unallocated hours (GPUs nobody holds); a group drills down to its Workload page.
"use strict";

(() => {
  const { el, fmt, api, params, setParam } = UI;
  const main = document.getElementById("main");
  const DEFAULT_GROUPS = ["team", "model", "user", "job_id", "namespace", "pod", "service_name", "host", "gpu_model"];
  const SORTS = [["allocated", "allocated GPU hours"], ["idle", "idle GPU hours"], ["busy", "busy GPU hours"]];

  const groupSel = el("select", { id: "group-by" });
  const topSel = el("select", { id: "top" }, [5, 10, 20, 50].map((n) => el("option", { value: n, text: n })));
  const sortSel = el("select", { id: "sort" }, SORTS.map(([v, t]) => el("option", { value: v, text: t })));
  const csv = el("a", { id: "csv", href: "#", text: "download CSV" });
  main.append(
    el("h1", { text: "Fleet: GPU hours" }),
    el("div", { class: "controls" },
      el("label", { text: "group by" }), groupSel,
      el("label", { text: "top" }), topSel,
      el("label", { text: "rank by" }), sortSel, csv),
    el("div", { class: "cards", id: "cards" }),
    el("div", { class: "chart", id: "gpu-hours" }),
    el("div", { class: "grid2" },
      el("div", { class: "chart small", id: "busy" }),
      el("div", { class: "chart small", id: "flops" })),
    el("h2", { text: "Groups" }),
    el("div", { id: "groups" }),
    el("h2", { text: "Idle capacity by host" }),
    el("div", { id: "hosts" }));

  function fillGroups(names) {
    const current = params.get("group_by") || "team";
    const all = [...new Set([...DEFAULT_GROUPS, ...names])];
    groupSel.replaceChildren(...all.map((n) => el("option", { value: n, text: n })));
    groupSel.value = all.includes(current) ? current : "team";
    topSel.value = params.get("top") || "10";
    sortSel.value = SORTS.some(([v]) => v === params.get("sort")) ? params.get("sort") : "allocated";
  }

  function card(key, value, id, note) {
    return el("div", { class: "card", "data-card": id },
      el("div", { class: "v", text: value }),
      el("div", { class: "k", text: key }),
      note ? el("div", { class: "k", text: note }) : null);
  }

  const share = (part, whole) => (whole > 0 ? fmt.pct(part / whole) + " of capacity" : null);

  async function load() {
    const r = UI.range("now-7d");
    const q = { from: r.from, to: r.to, group_by: groupSel.value, top: topSel.value, sort: sortSel.value };
    setParam("group_by", groupSel.value);
    setParam("top", topSel.value);
    setParam("sort", sortSel.value === "allocated" ? null : sortSel.value);
    csv.href = "/api/v1/attribution.csv?" + UI.query(q);
    const data = await api("/api/v1/attribution", q);
    UI.state.data.attribution = data;
    const f = data.fleet;
    const idle = f.idle_gpu_hours === null ? null : f.idle_gpu_hours;
    document.getElementById("cards").replaceChildren(
      card("capacity GPU hours", fmt.hours(f.capacity_gpu_hours), "capacity"),
      card("allocated GPU hours", fmt.hours(f.allocated_gpu_hours), "allocated",
        share(f.allocated_gpu_hours, f.capacity_gpu_hours)),
      card("unallocated GPU hours (nobody holds)", fmt.hours(f.unallocated_gpu_hours), "unallocated",
        share(f.unallocated_gpu_hours, f.capacity_gpu_hours)),
      card("idle GPU hours (held, not busy)", fmt.hours(idle), "idle",
        idle === null ? null : share(idle, f.capacity_gpu_hours)),
      card("busy GPU hours", fmt.hours(f.busy_gpu_hours), "busy"),
      card("device utilization", fmt.pct(f.metrics.device_utilization.value), "utilization"),
      card("SM active", fmt.pct(f.metrics.sm_active.value), "sm"),
      card("est. FLOP/s per GPU", fmt.si(f.metrics.flops.value, "FLOP/s"), "flops"),
      card(`${data.group_by} groups`, String(data.groups_total), "groups"));

    // GPUs in use, per group, and those nobody holds on top: the stack reaches capacity.
    const b = UI.buckets(data);
    const groups = data.groups.map((g) => g.key);
    const gpuSeries = groups.map((k) => ({ name: k, values: b.perHour(data.series[k].allocated) }));
    gpuSeries.push({ name: "unallocated", values: b.perHour(data.capacity_series.unallocated),
                     color: "#ced4da", area: { color: "#e9ecef" } });
    gpuSeries.push({ name: "capacity", values: b.perHour(data.capacity_series.capacity), stack: false,
                     dashed: true, color: "#495057" });
    const mean = `mean per ${data.step_s >= 3600 ? data.step_s / 3600 + " h" : data.step_s >= 60 ? data.step_s / 60 + " min" : data.step_s + " s"}`;
    UI.chart("gpu-hours", Object.assign(
      UI.timeAxisOption(b.times, gpuSeries, "GPUs", true, fmt.gpus),
      { title: { text: `GPUs in use by ${data.group_by} (${mean}), unallocated on top`, right: 24, top: 4,
                 textStyle: { fontSize: 12, color: "#667085", fontWeight: "normal" } } }));
    const sum = (c) => data.timestamps.map((_, i) => groups.reduce((a, k) => a + data.series[k][c][i], 0));
    UI.chart("busy", UI.timeAxisOption(b.times, [
      { name: "allocated", values: b.perHour(sum("allocated")) },
      { name: "busy", values: b.perHour(sum("busy")) },
      { name: "useful (SM active)", values: b.perHour(sum("useful")), dashed: true }], "GPUs", false, fmt.gpus));
    UI.chart("flops", UI.timeAxisOption(b.times,
      [{ name: "estimated FLOP/s (fleet)", values: b.perSecond(sum("flop")) }], "FLOP/s", false));
    UI.state.charts["gpu-hours"].off("click");
    UI.state.charts["gpu-hours"].on("click", (e) => drill(e.seriesName));

    const cols = [
      { title: data.group_by, value: (g) => g.key },
      { title: "allocated GPU-h", num: true, value: (g) => fmt.hours(g.allocated_gpu_hours) },
      { title: "share", num: true, value: (g) => fmt.pct(g.share) },
      { title: "busy GPU-h", num: true, value: (g) => fmt.hours(g.busy_gpu_hours) },
      { title: "idle GPU-h", num: true, value: (g) => fmt.hours(g.idle_gpu_hours) },
      { title: "device util.", num: true, value: (g) => fmt.pct(g.metrics.device_utilization.value) },
      { title: "SM active", num: true, value: (g) => fmt.pct(g.metrics.sm_active.value) },
      { title: "power / GPU", num: true, value: (g) => fmt.si(g.metrics.power_watts.value, "W") },
      { title: "FLOP/s / GPU (est.)", num: true, value: (g) => fmt.si(g.metrics.flops.value, "FLOP/s") },
      { title: "FLOP/s (traces)", num: true, value: (g) => fmt.si(g.metrics.flops.measured, "FLOP/s") },
      { title: "GPU-h / TB input", num: true, value: (g) => fmt.num(g.metrics.gpu_hours_per_tb_input.value, 2) },
      { title: "% roofline", num: true, value: (g) => fmt.pct(g.metrics.pct_of_roofline.value) },
    ];
    const rows = data.groups.map((g) => Object.assign({ __click: g.key !== "other" && g.key !== "(none)" }, g));
    const box = document.getElementById("groups");
    box.replaceChildren(rows.length ? UI.table(cols, rows, (g) => drill(g.key))
      : el("div", { class: "empty", text: "no telemetry in this time range: point aiflame agents at this server" }));
    box.append(el("p", { class: "basis", text:
      `Ranked by ${SORTS.find(([v]) => v === data.sort)[1]}. Idle: allocated minus busy, over the time busy ` +
      "was measured. FLOP/s (est.): " + f.metrics.flops.basis + ". SM active, power, utilization: GPM and " +
      "NVML over the allocated time where measured. % roofline and measured FLOP/s: analyzed traces." }));

    const hostCols = [
      { title: "host", value: (h) => h.host },
      { title: "GPU model", value: (h) => h.gpu_model || "–" },
      { title: "GPUs", num: true, value: (h) => h.gpus || "–" },
      { title: "capacity GPU-h", num: true, value: (h) => fmt.hours(h.capacity_gpu_hours) },
      { title: "allocated GPU-h", num: true, value: (h) => fmt.hours(h.allocated_gpu_hours) },
      { title: "unallocated GPU-h", num: true, value: (h) => fmt.hours(h.unallocated_gpu_hours) },
      { title: "unallocated", num: true, value: (h) => h.capacity_gpu_hours > 0
          ? fmt.pct(h.unallocated_gpu_hours / h.capacity_gpu_hours) : "–" },
      { title: "idle GPU-h (held)", num: true, value: (h) => fmt.hours(h.idle_gpu_hours) },
    ];
    const hostBox = document.getElementById("hosts");
    hostBox.replaceChildren(data.hosts.length ? UI.table(hostCols, data.hosts,
        (h) => { location.href = UI.link("workload", { label: "host", value: h.host }); })
      : el("div", { class: "empty", text: "no GPU telemetry in this time range" }));
    hostBox.append(el("p", { class: "basis", text:
      "Unallocated: the GPUs the hosts listed that no workload held (capacity minus allocated). " +
      "Idle (held): allocated to a workload that kept it busy less than all the time." }));
  }

  function drill(key) {
    if (!key || key === "other" || key === "(none)" || key === "unallocated" || key === "capacity") return;
    location.href = UI.link("workload", { label: groupSel.value, value: key });
  }

  UI.state.ready = (async () => {
    try {
      const r = UI.range("now-7d");
      const labels = await api("/api/v1/telemetry/labels", { from: r.from, to: r.to });
      fillGroups(Object.keys(labels.labels || {}));
      for (const s of [groupSel, topSel, sortSel]) s.addEventListener("change", () => load().catch(UI.showError));
      UI.initRange("now-7d", () => load().catch(UI.showError));
      await load();
    } catch (e) { UI.showError(e); throw e; }
  })();
})();
