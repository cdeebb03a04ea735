// Fleet: GPU hours over time stacked by a chosen label, busy vs allocated, estimated FLOP/s,
// and a table of the groups with their efficiency metrics; a group drills down to its page.
"use strict";

(() => {
  const { el, fmt, api, params, setParam } = UI;
  const main = document.getElementById("main");
  const DEFAULT_GROUPS = ["team", "model", "user", "job_id", "namespace", "pod", "host", "gpu_model"];

  const groupSel = el("select", { id: "group-by" });
  const topSel = el("select", { id: "top" }, [5, 10, 20, 50].map((n) => el("option", { value: n, text: n })));
  const csv = el("a", { id: "csv", href: "#", text: "download CSV" });
  main.append(
    el("h1", { text: "Fleet: GPU hours" }),
    el("div", { class: "controls" },
      el("label", { text: "group by" }), groupSel,
      el("label", { text: "top" }), topSel, csv),
    el("div", { class: "cards", id: "cards" }),
    el("div", { class: "chart", id: "gpu-hours" }),
    el("div", { class: "grid2" },
      el("div", { class: "chart small", id: "busy" }),
      el("div", { class: "chart small", id: "flops" })),
    el("h2", { text: "Groups" }),
    el("div", { id: "groups" }));

  function fillGroups(names) {
    const current = params.get("group_by") || "team";
    const all = [...new Set([...DEFAULT_GROUPS, ...names])];
    groupSel.replaceChildren(...all.map((n) => el("option", { value: n, text: n })));
    groupSel.value = all.includes(current) ? current : "team";
    topSel.value = params.get("top") || "10";
  }

  function card(key, value) {
    return el("div", { class: "card" }, el("div", { class: "v", text: value }), el("div", { class: "k", text: key }));
  }

  async function load() {
    const r = UI.range("now-7d");
    const q = { from: r.from, to: r.to, group_by: groupSel.value, top: topSel.value };
    setParam("group_by", groupSel.value);
    setParam("top", topSel.value);
    csv.href = "/api/v1/attribution.csv?" + UI.query(q);
    const data = await api("/api/v1/attribution", q);
    UI.state.data.attribution = data;
    const f = data.fleet;
    document.getElementById("cards").replaceChildren(
      card("allocated GPU hours", fmt.hours(f.allocated_gpu_hours)),
      card("busy GPU hours", fmt.hours(f.busy_gpu_hours)),
      card("device utilization", fmt.pct(f.metrics.device_utilization.value)),
      card("SM active", fmt.pct(f.metrics.sm_active.value)),
      card("est. FLOP/s per GPU", fmt.si(f.metrics.flops.value, "FLOP/s")),
      card(`${data.group_by} groups`, String(data.groups_total)));
    const ts = data.timestamps;
    const groups = data.groups.map((g) => g.key);
    UI.chart("gpu-hours", Object.assign(
      UI.timeAxisOption(ts, groups.map((k) => ({ name: k, values: data.series[k].allocated })), "GPU hours", true),
      { title: { text: `allocated GPU hours per ${data.step_s} s, by ${data.group_by}`, right: 24, top: 4, textStyle: { fontSize: 12, color: "#667085", fontWeight: "normal" } } }));
    const sum = (c) => ts.map((_, i) => groups.reduce((a, k) => a + data.series[k][c][i], 0));
    UI.chart("busy", UI.timeAxisOption(ts, [
      { name: "allocated", values: sum("allocated") },
      { name: "busy", values: sum("busy") },
      { name: "useful (SM active)", values: sum("useful"), dashed: true }], "GPU hours", false));
    const flops = sum("flop").map((v) => v / data.step_s);
    UI.chart("flops", UI.timeAxisOption(ts, [{ name: "estimated FLOP/s (fleet)", values: flops }], "FLOP/s", false));
    UI.state.charts["gpu-hours"].off("click");
    UI.state.charts["gpu-hours"].on("click", (e) => drill(e.seriesName));
    const cols = [
      { title: data.group_by, value: (g) => g.key },
      { title: "allocated GPU-h", num: true, value: (g) => fmt.hours(g.allocated_gpu_hours) },
      { title: "share", num: true, value: (g) => fmt.pct(g.share) },
      { title: "busy GPU-h", num: true, value: (g) => fmt.hours(g.busy_gpu_hours) },
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
      "FLOP/s (est.): " + f.metrics.flops.basis + ". SM active, power, utilization: GPM and NVML " +
      "over the allocated time where measured. % roofline and measured FLOP/s: analyzed traces." }));
  }

  function drill(key) {
    if (!key || key === "other" || key === "(none)") return;
    location.href = UI.link("workload", { label: groupSel.value, value: key });
  }

  UI.state.ready = (async () => {
    try {
      const r = UI.range("now-7d");
      const labels = await api("/api/v1/telemetry/labels", { from: r.from, to: r.to });
      fillGroups(Object.keys(labels.labels || {}));
      groupSel.addEventListener("change", () => load().catch(UI.showError));
      topSel.addEventListener("change", () => load().catch(UI.showError));
      UI.initRange("now-7d", () => load().catch(UI.showError));
      await load();
    } catch (e) { UI.showError(e); throw e; }
  })();
})();
