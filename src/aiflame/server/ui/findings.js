// Findings: fleet-wide anti-patterns of analyzed traces, ranked by the GPU hours they cost,
// each charged to the workloads whose traces show it (a job, a pod, a service, a process's
// workload on its host), with the evidence stacks, the fix and the trace's report.
"use strict";

(() => {
  const { el, fmt, api, params, setParam } = UI;
  const main = document.getElementById("main");
  const KEYS = [["workload", "workload (job, pod, service or process)"], ["job_id", "job_id"],
    ["pod", "pod"], ["namespace", "namespace"], ["model", "model"], ["team", "team"], ["user", "user"],
    ["service_name", "service_name"], ["host", "host"]];
  const keySel = el("select", { id: "workload-label" }, KEYS.map(([k, t]) => el("option", { value: k, text: t })));
  keySel.value = KEYS.some(([k]) => k === params.get("workload_label")) ? params.get("workload_label") : "workload";
  main.append(
    el("h1", { text: "Findings across the fleet" }),
    el("div", { class: "controls" }, el("label", { text: "charged to" }), keySel),
    el("div", { id: "rules" }),
    el("p", { class: "basis", text: "GPU hours: each workload whose traces show a finding is charged the "
      + "mean share of the GPU timeline it costs over that workload's analyzed traces in the range, times "
      + "the GPU hours that workload was allocated (telemetry of exactly that job, pod, service or process); "
      + "without telemetry, only the time measured in the traces." }));

  function stacks(w) {
    return el("div", {}, (w.top_stacks || []).slice(0, 2).map((s) =>
      el("div", { class: "stack", title: (s.stack || []).join(" → "),
        text: s.text || (s.stack || []).slice(-4).join(" → ") })));
  }

  function traceLinks(w) {
    const id = encodeURIComponent(w.trace_id);
    return el("span", {},
      el("a", { href: `/api/v1/traces/${id}/report?` + UI.query({}), target: "_blank", text: "report" }), " · ",
      el("a", { href: `/api/v1/traces/${id}/flamegraph?` + UI.query({}), target: "_blank", text: "flame graph" }));
  }

  async function load() {
    const r = UI.range("now-7d");
    setParam("workload_label", keySel.value === "workload" ? null : keySel.value);
    const data = await api("/api/v1/findings", { from: r.from, to: r.to, workload_label: keySel.value });
    UI.state.data.findings = data;
    const box = document.getElementById("rules");
    if (!data.rules.length) {
      box.replaceChildren(el("div", { class: "empty", text: "no findings: no analyzed trace in the range" }));
      return;
    }
    const byWorkload = keySel.value === "workload";
    box.replaceChildren(...data.rules.map((rule) => el("section", { class: "rule", "data-rule": rule.rule },
      el("h2", {}, el("span", { class: "sev-" + rule.severity, text: `[${rule.severity}] ` }),
         rule.title, el("span", { class: "muted", text: ` · ${rule.rule} · ${fmt.hours(rule.gpu_hours)} GPU hours` })),
      el("p", { class: "muted", text: "fix: " + rule.fix }),
      UI.table([
        { title: byWorkload ? "workload" : keySel.value, value: (w) => w.key },
        { title: "identified by", value: (w) => byWorkload ? w.identity : `${w.workloads} workload(s)` },
        { title: "GPU hours", num: true, value: (w) => fmt.hours(w.gpu_hours) },
        { title: "share of GPU time", num: true, value: (w) => fmt.pct(w.share) },
        { title: "allocated GPU-h", num: true, value: (w) => fmt.hours(w.allocated_gpu_hours) },
        { title: "traces", num: true, value: (w) => `${w.traces} of ${w.traces_analyzed}` },
        { title: "costliest stacks", value: stacks },
        { title: "", value: traceLinks },
      ], rule.workloads.map((w) => Object.assign({ __click: !!w.label }, w)), (w) => {
        if (w.label) location.href = UI.link("workload", { label: w.label, value: w.value });
      }))));
  }

  keySel.addEventListener("change", () => load().catch(UI.showError));
  UI.state.ready = (async () => {
    try {
      UI.initRange("now-7d", () => load().catch(UI.showError));
      await load();
    } catch (e) { UI.showError(e); throw e; }
  })();
})();
