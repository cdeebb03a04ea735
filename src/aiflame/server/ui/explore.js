// Explore: the flame graph of any label selection and time range (aiflame's page: zoom,
// search, sandwich, top table), or the diff of two selections or two time ranges.
"use strict";

(() => {
  const { el, api, params, setParam } = UI;
  const main = document.getElementById("main");
  const typeSel = el("select", { id: "profile-type" });
  const selector = el("input", { id: "selector", class: "selector", value: params.get("selector") || "{}",
                                 spellcheck: "false", "aria-label": "label selector" });
  const nameSel = el("select", { id: "label-name" }, el("option", { value: "", text: "label…" }));
  const valueSel = el("select", { id: "label-value" }, el("option", { value: "", text: "value…" }));
  const diff = el("input", { type: "checkbox", id: "diff" });
  const baseSel = el("input", { id: "base-selector", class: "selector", spellcheck: "false",
                                placeholder: "baseline selector (empty: the same)", value: params.get("diff_selector") || "" });
  const baseFrom = el("input", { id: "base-from", placeholder: "baseline from (now-2h)", value: params.get("diff_from") || "" });
  const baseTo = el("input", { id: "base-to", placeholder: "baseline to (now-1h)", value: params.get("diff_to") || "" });
  const show = el("button", { class: "primary", id: "show", type: "button", text: "show" });
  const pprof = el("a", { id: "pprof", href: "#", text: "download pprof" });
  const frame = el("iframe", { class: "flame", id: "flame", title: "flame graph" });
  main.append(
    el("h1", { text: "Explore" }),
    el("div", { class: "controls" }, el("label", { text: "profile" }), typeSel, selector, nameSel, valueSel, show, pprof),
    el("div", { class: "controls" }, el("label", {}, diff, " compare with a baseline:"), baseSel, baseFrom, baseTo),
    frame);
  diff.checked = params.has("diff_selector") || params.has("diff_from");

  function run() {
    const r = UI.range("now-1h");
    const q = { profile_type: typeSel.value, selector: selector.value, from: r.from, to: r.to };
    setParam("profile_type", typeSel.value);
    setParam("selector", selector.value);
    for (const k of ["diff_selector", "diff_from", "diff_to"]) setParam(k, null);
    pprof.href = "/api/v1/flamegraph?" + UI.query(Object.assign({ format: "pprof" }, q));
    if (diff.checked) {
      q.diff_selector = baseSel.value || selector.value;
      if (baseFrom.value) q.diff_from = baseFrom.value;
      if (baseTo.value) q.diff_to = baseTo.value;
      setParam("diff_selector", q.diff_selector);
      setParam("diff_from", q.diff_from);
      setParam("diff_to", q.diff_to);
    }
    frame.src = "/api/v1/flamegraph?" + UI.query(q);
    UI.state.data.frameSrc = frame.src;
  }

  async function loadLabels() {
    const r = UI.range("now-1h");
    const l = await api("/api/v1/labels", { from: r.from, to: r.to });
    const types = l.profile_types.length ? l.profile_types : ["process_cpu:cpu:nanoseconds:cpu:nanoseconds"];
    typeSel.replaceChildren(...types.map((t) => el("option", { value: t, text: t })));
    const want = params.get("profile_type");
    typeSel.value = types.includes(want) ? want : types[0];
    nameSel.replaceChildren(el("option", { value: "", text: "label…" }),
      ...l.names.filter((n) => !n.startsWith("__")).map((n) => el("option", { value: n, text: n })));
  }

  nameSel.addEventListener("change", async () => {
    if (!nameSel.value) return;
    const r = UI.range("now-1h");
    const v = await api("/api/v1/labels", { name: nameSel.value, from: r.from, to: r.to });
    valueSel.replaceChildren(el("option", { value: "", text: "value…" }),
      ...v.values.map((x) => el("option", { value: x, text: x })));
  });
  valueSel.addEventListener("change", () => {
    if (!nameSel.value || !valueSel.value) return;
    const esc = valueSel.value.replaceAll("\\", "\\\\").replaceAll('"', '\\"');
    const inner = selector.value.trim().replace(/^\{|\}$/g, "").trim();
    selector.value = "{" + (inner ? inner + ", " : "") + `${nameSel.value}="${esc}"` + "}";
  });
  show.addEventListener("click", run);
  selector.addEventListener("keydown", (e) => { if (e.key === "Enter") run(); });

  UI.state.ready = (async () => {
    try {
      UI.initRange("now-1h", run);
      await loadLabels();
      run();
    } catch (e) { UI.showError(e); throw e; }
  })();
})();
