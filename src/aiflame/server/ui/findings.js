// Findings: fleet-wide anti-patterns of analyzed traces, ranked by the GPU hours they cost,
// with the workloads they cost them in, the evidence stacks and the fix.
"use strict";

(() => {
  const { el, fmt, api, params, setParam } = UI;
  const main = document.getElementById("main");
  const keySel = el("select", { id: "workload-label" },
    ["job_id", "job_name", "pod", "model", "team", "user", "service_name", "host"].map((k) => el("option", { value: k, text: k })));
  keySel.value = params.get("workload_label") || "job_id";
  main.append(
    el("h1", { text: "Findings across the fleet" }),
    el("div", { class: "controls" }, el("label", { text: "workloads by" }), keySel),
    el("div", { id: "rules" }),
    el("p", { class: "basis", text: "GPU hours: the share of the GPU timeline a finding costs in a workload's traces "
      + "(their mean) x that workload's allocated GPU hours in the range, from telemetry; without "
      + "telemetry, only the time measured in the traces." }));

  function stacks(w) {
    return el("div", {}, (w.top_stacks || []).slice(0, 2).map((s) =>
      el("div", { class: "stack", title: (s.stack || []).join(" → "),
        text: s.text || (s.stack || []).slice(-4).join(" → ") })));
  }

  async function load() {
    const r = UI.range("now-7d");
    setParam("workload_label", keySel.value);
    const data = await api("/api/v1/findings", { from: r.from, to: r.to, workload_label: keySel.value });
    UI.state.data.findings = data;
    const box = document.getElementById("rules");
    if (!data.rules.length) {
      box.replaceChildren(el("div", { class: "empty", text: "no findings: no analyzed trace in the range" }));
      return;
    }
    box.replaceChildren(...data.rules.map((rule) => el("section", { class: "rule", "data-rule": rule.rule },
      el("h2", {}, el("span", { class: "sev-" + rule.severity, text: `[${rule.severity}] ` }),
         rule.title, el("span", { class: "muted", text: ` · ${rule.rule} · ${fmt.hours(rule.gpu_hours)} GPU hours` })),
      el("p", { class: "muted", text: "fix: " + rule.fix }),
      UI.table([
        { title: keySel.value, value: (w) => w.key },
        { title: "GPU hours", num: true, value: (w) => fmt.hours(w.gpu_hours) },
        { title: "share of GPU time", num: true, value: (w) => fmt.pct(w.share) },
        { title: "allocated GPU-h", num: true, value: (w) => fmt.hours(w.allocated_gpu_hours) },
        { title: "traces", num: true, value: (w) => w.traces },
        { title: "costliest stacks", value: stacks },
        { title: "", value: (w) => el("a", { href: "/api/v1/traces/" + encodeURIComponent(w.trace_id) + "/flamegraph?" + UI.query({}), target: "_blank", text: "trace" }) },
      ], rule.workloads, (w) => { if (w.key !== "(none)") location.href = UI.link("workload", { label: keySel.value, value: w.key }); }))));
  }

  keySel.addEventListener("change", () => load().catch(UI.showError));
  UI.state.ready = (async () => {
    try {
      UI.initRange("now-7d", () => load().catch(UI.showError));
      await load();
    } catch (e) { UI.showError(e); throw e; }
  })();
})();
