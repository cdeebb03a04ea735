// The analysis report: breakdown bars, busy timeline, findings with flame graph links,
// tables, short-kernel histogram and roofline, drawn from the embedded JSON as DOM and
// inline SVG. Every string from the trace reaches the page through textContent.
(function (R) {
  "use strict";

  const SVGNS = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);
  const PARTS = [
    ["computation", "computation"],
    ["exposed_communication", "exposed communication"],
    ["exposed_memcpy", "exposed memcpy"],
    ["idle", "idle"],
  ];
  const FIELDS = [
    "total", "busy", "idle", "computation", "communication", "memcpy",
    "exposed_communication", "exposed_memcpy",
  ];
  const SEVERITY = { high: 0, medium: 1, low: 2 };

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    if (attrs) for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVGNS, tag);
    if (attrs) for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = String(text);
    return e;
  }

  // Same wording as the terminal report (render/analyze_format.py).
  function fmtUs(us) {
    if (us === null || us === undefined) return "?";
    const a = Math.abs(us);
    if (a >= 1e6) return (us / 1e6).toFixed(3) + " s";
    if (a >= 1e3) return (us / 1e3).toFixed(3) + " ms";
    if (a >= 1) return us.toFixed(2) + " us";
    if (a === 0) return "0";
    return (us * 1e3).toFixed(0) + " ns";
  }
  function pct(part, whole) {
    return whole ? ((100 * part) / whole).toFixed(1) + "%" : "-";
  }
  function num(v) {
    if (typeof v === "boolean") return v ? "yes" : "no";
    if (typeof v !== "number") return String(v);
    if (Number.isInteger(v)) return v.toLocaleString("en-US");
    if (Math.abs(v) >= 1e4) return Math.round(v).toLocaleString("en-US");
    return String(Number(v.toPrecision(3)));
  }
  // A finding's figure by its unit (as analyze_format.figure_text).
  function figureText(f) {
    const v = f.value;
    if (v === null || v === undefined) return "?";
    if (typeof v === "number") {
      if (f.unit === "us") return fmtUs(v);
      if (f.unit === "share") return (100 * v).toFixed(1) + "%";
      if (f.unit === "bytes") return fmtBytes(v);
      if (f.unit === "tflops") return v.toFixed(1) + " TFLOP/s";
    }
    return num(v);
  }
  function label(key) {
    return key.replace(/_(us|ns)$/, "").replace(/_/g, " ");
  }
  function fmtBytes(n) {
    if (n === null || n === undefined) return "?";
    for (const [u, k] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) if (Math.abs(n) >= k) return (n / k).toFixed(1) + " " + u;
    return num(n) + " B";
  }
  function shapeName(o) {
    const p = o.params || {};
    if ("M" in p && "N" in p && "K" in p) return o.op + " " + (p.B && p.B !== 1 ? p.B + "x" : "") + p.M + "x" + p.N + "x" + p.K;
    const extra = Object.entries(p).filter(([, v]) => typeof v !== "boolean").map(([k, v]) => k + "=" + (Array.isArray(v) ? v.join("x") : v));
    return (o.op + " " + extra.join(" ")).trim();
  }
  function shortFrame(name) {
    const m = /^([^()]+)\((\d+)\): (.+)$/.exec(name);
    if (m) return m[3] + " (" + m[1].split("/").pop() + ":" + m[2] + ")";
    const b = /^<built-in (?:method (\S+) of \S+ object at 0x[0-9a-f]+|function ([^>]+))>$/.exec(name);
    return b ? b[1] || b[2] : name;
  }
  function isStackList(v) {
    return Array.isArray(v) && v.length > 0 && v.every((x) => x && typeof x === "object" && Array.isArray(x.stack));
  }

  // -- tooltip ------------------------------------------------------------------------
  const tip = $("tip");
  function showTip(e, text) {
    tip.textContent = text;
    tip.hidden = false;
    const w = tip.offsetWidth;
    const h = tip.offsetHeight;
    let x = e.clientX + 12;
    let y = e.clientY + 12;
    if (x + w > window.innerWidth - 4) x = Math.max(4, e.clientX - w - 12);
    if (y + h > window.innerHeight - 4) y = Math.max(4, e.clientY - h - 12);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  function hideTip() {
    tip.hidden = true;
  }
  function withTip(node, text) {
    node.addEventListener("mousemove", (e) => showTip(e, typeof text === "function" ? text(e) : text));
    node.addEventListener("mouseleave", hideTip);
    return node;
  }

  // -- page ---------------------------------------------------------------------------
  class Report {
    constructor(data) {
      this.data = data;
      this.ranks = data.report.ranks || [];
      this.multi = this.ranks.length > 1;
    }

    rankName(r, i) {
      // The report names a trace without a rank by its file.
      const rank = r.name || (r.rank !== null && r.rank !== undefined ? "rank " + r.rank : "trace " + (i + 1));
      const devices = {};
      for (const d of r.devices || []) if (d) devices[d] = (devices[d] || 0) + 1;
      const named = Object.entries(devices).map(([d, n]) => (n > 1 ? n + " x " + d : d)).join(", ");
      return named ? rank + " · " + named : rank;
    }

    render() {
      this.renderInputs();
      this.renderBreakdown();
      this.renderTimeline();
      this.renderFindings();
      this.ranks.forEach((r, i) => this.renderRank(r, i));
      this.renderToc();
    }

    renderInputs() {
      const box = $("inputs");
      this.ranks.forEach((r, i) => box.append(el("div", null, this.rankName(r, i) + ": " + r.path)));
    }

    renderToc() {
      const toc = $("toc");
      const links = [["breakdown", "Breakdown"], ["timeline", "Timeline"], ["findings", "Findings"]];
      this.ranks.forEach((r, i) => links.push(["rank-" + i, this.rankName(r, i)]));
      for (const [id, text] of links) toc.append(el("a", { href: "#" + id }, text));
    }

    // Stacked bars, one per rank, and the numbers beneath them.
    renderBreakdown() {
      const bars = $("breakdown-bars");
      const legend = el("div", { class: "legend" });
      for (const [key, name] of PARTS) {
        const item = el("span");
        item.append(el("span", { class: "swatch " + key }), document.createTextNode(name));
        legend.append(item);
      }
      bars.append(legend);
      const table = $("breakdown-table");
      const head = el("tr");
      head.append(el("th", null, "GPU"));
      for (const f of FIELDS) head.append(el("th", { class: "num" }, label(f)));
      const thead = el("thead");
      thead.append(head);
      const body = el("tbody");
      const job = this.data.report.job || {};
      const jobName = job.same_job === false ? "all " + job.ranks + " traces" : "job: all " + job.ranks + " ranks";
      const jobRows = this.multi && job.time_breakdown_sum ? [[jobName, job.time_breakdown_sum]] : [];
      const groups = this.ranks.map((r, i) => [r, i]);
      if (jobRows.length) groups.push([{ time_breakdown: job.time_breakdown_sum, job: true }, -1]);
      groups.forEach(([r, i]) => {
        const rows = [[r.job ? jobRows[0][0] : this.rankName(r, i), r.time_breakdown]];
        const byDev = r.time_breakdown_by_device || {};
        if (Object.keys(byDev).length > 1) {
          for (const [dev, tb] of Object.entries(byDev)) rows.push(["  device " + dev, tb]);
        }
        for (const [name, tb] of rows) {
          if (!tb || !tb.total) continue;
          bars.append(this.breakdownBar(name, tb, i));
          const tr = el("tr", { "data-rank": String(i) });
          tr.append(el("td", null, name));
          for (const f of FIELDS) {
            const v = tb[f] || 0;
            const td = el("td", { class: "num", "data-field": f, "data-value": String(v) }, fmtUs(v));
            td.title = f === "total" ? "" : pct(v, tb.total) + " of total";
            tr.append(td);
          }
          body.append(tr);
        }
      });
      if (!body.children.length) {
        bars.append(el("p", { class: "note" }, "No GPU activity in the input: no breakdown."));
        table.hidden = true;
        return;
      }
      table.append(thead, body);
      if (jobRows.length) bars.after(this.jobNote(job));
    }

    // The straggler and the spread of computation across ranks, under the bars.
    jobNote(job) {
      const box = el("div", { id: "job-summary", class: "note" });
      const c = job.computation_us;
      const per = job.same_job === false ? "Computation per trace (separate runs: none waits for another): min " : "Computation per rank: min ";
      box.append(
        el(
          "p",
          null,
          per + fmtUs(c.min) + ", median " + fmtUs(c.median) + ", max " + fmtUs(c.max) +
            " (spread " + pct(job.computation_spread, 1) + "; slowest: " + job.slowest_rank + ").",
        ),
      );
      for (const s of job.stragglers || []) {
        box.append(
          el(
            "p",
            { class: "straggler" },
            "Straggler: " + s.rank + " computes " + pct(s.over_median, 1) +
              " longer than the median rank; the others wait for it at each collective.",
          ),
        );
      }
      return box;
    }

    breakdownBar(name, tb, rank) {
      const row = el("div", { class: "bar-row", "data-rank": String(rank) });
      row.append(el("span", { class: "bar-label", title: name }, name));
      const bar = el("div", { class: "bar" });
      for (const [key, text] of PARTS) {
        const v = tb[key] || 0;
        const part = el("span", { class: key, "data-field": key });
        part.style.width = (100 * v) / tb.total + "%";
        withTip(part, text + ": " + fmtUs(v) + " (" + pct(v, tb.total) + ")");
        bar.append(part);
      }
      row.append(bar, el("span", { class: "bar-total" }, fmtUs(tb.total)));
      return row;
    }

    // -- timeline -----------------------------------------------------------------------
    renderTimeline() {
      const box = $("timeline-rows");
      const rows = [];
      this.ranks.forEach((r, i) => {
        const tl = this.data.timelines[i] || {};
        for (const [dev, t] of Object.entries(tl)) if (t.bins) rows.push({ rank: i, dev, t });
      });
      if (!rows.length) {
        box.append(el("p", { class: "note" }, "No GPU activity in the input: no timeline."));
        return;
      }
      const longest = Math.max(...rows.map((x) => x.t.total_us));
      for (const x of rows) {
        const name = this.rankName(this.ranks[x.rank], x.rank) + ", device " + x.dev;
        const wrap = el("div", { class: "tl-row", "data-rank": String(x.rank), "data-device": x.dev });
        wrap.append(el("div", { class: "tl-label" }, name + " · " + fmtUs(x.t.total_us) + " · " + x.t.idle_gap_count.toLocaleString("en-US") + " idle gaps"));
        wrap.append(this.timelineSvg(x.t, longest));
        box.append(wrap);
      }
    }

    timelineSvg(t, longest) {
      const W = 1000;
      const H = 34;
      const G = 8; // gap marks under the bars
      const AX = 16; // axis
      const root = svg("svg", { class: "chart timeline", viewBox: "0 0 " + W + " " + (H + G + AX), preserveAspectRatio: "none" });
      const span = (W * t.total_us) / longest;
      const bw = span / t.bins;
      root.append(svg("rect", { x: 0, y: 0, width: span, height: H, fill: "#f1f2f5" }));
      const base = new Float64Array(t.bins);
      for (const key of ["computation", "exposed_communication", "exposed_memcpy"]) {
        const vals = t[key];
        let d = "";
        for (let i = 0; i < t.bins; i++) {
          const v = vals[i];
          if (v <= 0) continue;
          const h = v * H;
          const y = H - base[i] - h;
          d += "M" + (i * bw).toFixed(2) + " " + y.toFixed(2) + "h" + bw.toFixed(3) + "v" + h.toFixed(2) + "h" + (-bw).toFixed(3) + "z";
          base[i] += h;
        }
        if (d) root.append(svg("path", { d, fill: "var(--" + key + ")", class: "layer " + key }));
      }
      for (const [start, dur] of t.idle_gaps) {
        const x = (W * start) / longest;
        const w = Math.max(1.2, (W * dur) / longest);
        const g = svg("rect", { class: "gap", x: x.toFixed(2), y: H + 2, width: w.toFixed(2), height: G - 3 });
        withTip(g, "idle " + fmtUs(dur) + " from " + fmtUs(start));
        root.append(g);
      }
      this.axis(root, longest, W, H + G, (v) => fmtUs(v));
      // Hover: the slice under the pointer.
      const hit = svg("rect", { x: 0, y: 0, width: span, height: H, fill: "transparent" });
      withTip(hit, (e) => {
        const b = root.getBoundingClientRect();
        const i = Math.min(t.bins - 1, Math.max(0, Math.floor(((e.clientX - b.left) / b.width) * W / bw)));
        const from = (i * t.total_us) / t.bins;
        const busy = t.computation[i] + t.exposed_communication[i] + t.exposed_memcpy[i];
        return fmtUs(from) + " – " + fmtUs(from + t.total_us / t.bins) + "\nbusy " + (100 * busy).toFixed(1) + "%: computation " +
          (100 * t.computation[i]).toFixed(1) + "%, exposed comm " + (100 * t.exposed_communication[i]).toFixed(1) +
          "%, exposed memcpy " + (100 * t.exposed_memcpy[i]).toFixed(1) + "%";
      });
      root.append(hit);
      return root;
    }

    axis(root, max, W, y, fmt) {
      const g = svg("g", { class: "axis" });
      g.append(svg("line", { x1: 0, x2: W, y1: y, y2: y }));
      const step = niceStep(max / 8);
      for (let v = 0; v <= max * 1.0001; v += step) {
        const x = (W * v) / max;
        g.append(svg("line", { x1: x, x2: x, y1: y, y2: y + 3 }));
        g.append(svg("text", { x, y: y + 13, "text-anchor": v === 0 ? "start" : "middle" }, fmt(v)));
      }
      root.append(g);
    }

    // -- findings ---------------------------------------------------------------------
    renderFindings() {
      const box = $("findings-list");
      const all = [];
      this.ranks.forEach((r, i) => (r.findings || []).forEach((f, k) => all.push({ f, rank: i, k })));
      all.sort((a, b) => (SEVERITY[a.f.severity] ?? 3) - (SEVERITY[b.f.severity] ?? 3) || (b.f.cost_us || 0) - (a.f.cost_us || 0));
      if (!all.length) {
        box.append(el("p", { class: "note" }, "No findings: none of the rules saw its pattern cost more than 1% of the GPU time."));
        return;
      }
      for (const x of all) box.append(this.finding(x.f, x.rank, x.k));
    }

    finding(f, rank, k) {
      const r = this.ranks[rank];
      const sev = String(f.severity || "low");
      const card = el("div", { class: "finding " + sev, "data-rule": String(f.rule), "data-rank": String(rank) });
      const head = el("div", { class: "head" });
      head.append(el("span", { class: "sev " + sev }, sev));
      head.append(el("span", { class: "title" }, f.title || f.rule));
      const total = (r.time_breakdown || {}).total || 0;
      if (f.cost_us !== null && f.cost_us !== undefined) {
        const share = total ? ", " + pct(f.cost_us, total) + " of the GPU time" : "";
        head.append(el("span", { class: "cost", "data-value": String(f.cost_us) }, "~" + fmtUs(f.cost_us) + share));
      }
      if (this.multi) head.append(el("span", { class: "muted" }, this.rankName(r, rank)));
      card.append(head);
      if (f.summary) card.append(el("p", { class: "summary" }, f.summary));
      const dl = el("dl");
      for (const x of f.figures || []) dl.append(el("dt", null, x.label), el("dd", { "data-label": x.label }, figureText(x)));
      if (dl.children.length) card.append(dl);
      if ((f.items || []).length) {
        const ul = el("ul", { class: "items" });
        for (const it of f.items.slice(0, 5)) {
          const cost = it.cost_us === null || it.cost_us === undefined ? "" : " " + fmtUs(it.cost_us);
          ul.append(el("li", null, it.name + cost + (it.detail ? " (" + it.detail + ")" : "")));
        }
        card.append(ul);
      }
      // Stacks in the order the links were made for them (analysis/links.py).
      const link = (this.data.links[rank] || [])[k] || {};
      (f.top_stacks || []).forEach((st, n) => {
        if (n < 3) card.append(this.stackLine(st, (link.stacks || [])[n]));
      });
      if (f.fix) {
        const fix = el("div", { class: "fix" });
        fix.append(el("b", null, "Try: "), document.createTextNode(f.fix));
        card.append(fix);
      }
      if (f.assumption) card.append(el("p", { class: "muted assumption" }, "Estimate: " + f.assumption));
      if (this.data.flame && link.main) {
        const a = el("a", { class: "flame-link", href: this.data.flame + "#" + link.main }, "Show in the flame graph →");
        card.append(a);
      }
      return card;
    }

    stackLine(s, frag) {
      const linked = this.data.flame && frag;
      const div = el(linked ? "a" : "div", { class: "stack" });
      if (linked) {
        div.href = this.data.flame + "#" + frag;
        div.classList.add("stack-link");
      }
      const frames = s.stack.map(shortFrame);
      const shown = frames.slice(-5);
      if (frames.length > shown.length) div.append(el("span", { class: "sep" }, "… › "));
      shown.forEach((f, i) => {
        if (i) div.append(el("span", { class: "sep" }, " › "));
        div.append(el("span", { class: "frame" }, f));
      });
      const extra = [];
      if (typeof s.cost_us === "number") extra.push(fmtUs(s.cost_us));
      if (s.count !== undefined) extra.push(num(s.count) + "×");
      if (extra.length) div.append(el("span", { class: "sep" }, "  (" + extra.join(", ") + ")"));
      div.title = s.stack.join("\n");
      return div;
    }

    // -- per rank ---------------------------------------------------------------------
    renderRank(r, i) {
      const sec = el("section", { id: "rank-" + i, class: "rank" });
      sec.append(el("h2", null, this.rankName(r, i)));
      sec.append(el("div", { class: "muted" }, r.path + (r.workload ? " · " + r.workload.label : "")));
      const out = r.launch_not_in_trace;
      if (out) sec.append(el("p", { class: "note outside" }, num(out.activities) + " GPU activities (" + fmtUs(out.gpu_time_us) + ", " + (100 * out.share_of_busy).toFixed(1) + "% of the busy time) were launched before the profiler's window: counted in this breakdown, left out of TraceLens'."));
      this.idleSection(sec, r, i);
      this.launchSection(sec, r, i);
      this.syncSection(sec, r, i);
      this.copiesSection(sec, r, i);
      if ((r.top_kernels || []).length) sec.append(el("h3", null, "Top kernels by GPU time"), this.rowsTable(r.top_kernels, "kernels"));
      if ((r.top_ops || []).length) {
        sec.append(el("h3", null, "Top ops by GPU time they launch (shares of all GPU time)"), this.rowsTable(r.top_ops, "ops"));
        if (r.top_ops_unattributed_us) sec.append(el("p", { class: "note" }, fmtUs(r.top_ops_unattributed_us) + " of GPU time was launched by no operator (" + (r.top_ops_unattributed_why || "launches outside ops") + ")."));
      }
      if ((r.op_categories || []).length) {
        sec.append(el("h3", null, "GPU time by op category"));
        sec.append(this.table("categories", ["category", "time", "share of GPU time", "activities", "mostly"], r.op_categories.map((c) => [c.category, fmtUs(c.time_us), (100 * c.share).toFixed(1) + "%", num(c.count), (c.top || []).join(", ")])));
      }
      const g = r.graph_replays;
      if (g) sec.append(el("p", { class: "note graph-replays" }, num(g.activities) + " GPU activities of " + num(g.launches) + " graph launches run " + fmtUs(g.gpu_time_us) + " (" + (100 * g.share_of_gpu_time).toFixed(1) + "% of GPU time); " + (g.capture ? fmtUs(g.attributed_us) + " of it is hung under the ops of the capture trace." : "no operator is known for them (give --capture-trace).")));
      const sk = r.short_kernels || {};
      if (sk.kernels) {
        sec.append(el("h3", null, "Short kernels"));
        sec.append(el("p", null, "Kernels under " + sk.threshold_us + " us: " + num(sk.count) + " of " + num(sk.kernels) + " (" + (100 * sk.share_of_kernels).toFixed(1) + "%), " + fmtUs(sk.time_us) + " of GPU time."));
        if (sk.histogram && sk.histogram.counts.length) sec.append(this.histogram(sk.histogram));
      }
      this.efficiencySection(sec, r);
      if ((r.gemm || []).length) sec.append(el("h3", null, "GEMM shapes"), this.gemmTable(r.gemm));
      sec.append(el("h3", null, "Roofline"));
      this.roofline(sec, this.data.roofline[i]);
      for (const n of r.notes || []) sec.append(el("p", { class: "note" }, "Note: " + n));
      for (const [k, why] of Object.entries(r.unavailable || {})) {
        sec.append(el("p", { class: "note unavailable", "data-key": k }, "Not available: " + label(k) + ": " + why));
      }
      $("ranks").append(sec);
    }

    // A small table from column names and rows of cells; numbers right-aligned.
    table(kind, cols, rows) {
      const t = el("table", { class: "data", "data-table": kind });
      const h = el("tr");
      cols.forEach((c, j) => h.append(el("th", j ? { class: "num" } : null, c)));
      const thead = el("thead");
      thead.append(h);
      const body = el("tbody");
      for (const row of rows) {
        const tr = el("tr");
        row.forEach((c, j) => tr.append(el("td", j ? { class: "num" } : { class: "name" }, c)));
        body.append(tr);
      }
      t.append(thead, body);
      return t;
    }

    facts(pairs) {
      const d = el("dl", { class: "facts" });
      for (const [k, v] of pairs) if (v !== null && v !== undefined) d.append(el("dt", null, k), el("dd", null, v));
      return d;
    }

    // Stacks of a section, each a link into the flame graph where it was found there.
    sectionStacks(box, rank, key, stacks, title) {
      if (!isStackList(stacks)) return;
      const frags = (this.data.section_links[rank] || {})[key] || [];
      if (title) box.append(el("div", { class: "muted" }, title));
      stacks.slice(0, 3).forEach((s, j) => box.append(this.stackLine(s, frags[j])));
    }

    idleSection(sec, r, i) {
      const idle = r.idle;
      if (!idle || !idle.total_us) return;
      sec.append(el("h3", null, "Where the idle time goes"));
      const cats = idle.categories || {};
      const names = { host_wait: "waiting on the host (CPU launches too late)", sync_wait: "after a synchronize", kernel_wait: "between back-to-back kernels", event_wait: "waiting on an event / other stream", unlinked: "unlinked (no launch in the trace)" };
      const bar = el("div", { class: "bar idle-bar" });
      for (const [k, c] of Object.entries(cats)) {
        if (!c.time_us) continue;
        const part = el("span", { class: "idle-" + k, "data-field": k });
        part.style.width = (100 * c.time_us) / idle.total_us + "%";
        withTip(part, (names[k] || k) + ": " + fmtUs(c.time_us) + " (" + pct(c.time_us, idle.total_us) + ")");
        bar.append(part);
      }
      const row = el("div", { class: "bar-row" });
      row.append(el("span", { class: "bar-label" }, "idle " + fmtUs(idle.total_us)), bar, el("span", { class: "bar-total" }, num(idle.gaps) + " gaps"));
      sec.append(row);
      const rows = Object.entries(cats).map(([k, c]) => [names[k] || k, fmtUs(c.time_us), num(c.gaps), (100 * (c.share || 0)).toFixed(1) + "%"]);
      sec.append(this.table("idle", ["category", "time", "gaps", "share of idle"], rows));
      // What the CPU did during the gaps, time-weighted (analysis/causes.py).
      const causes = idle.causes || [];
      if (causes.length) {
        sec.append(el("h4", null, "What the CPU did while the GPU was idle"));
        sec.append(this.table("idle-causes", ["cause", "time", "share of idle", "gaps it leads"], causes.map((c) => [c.label, fmtUs(c.time_us), (100 * (c.share || 0)).toFixed(1) + "%", num(c.gaps)])));
        causes.slice(0, 4).forEach((c, n) => this.sectionStacks(sec, i, "idle/causes/" + n + "/top_stacks", c.top_stacks, "Stacks of '" + c.label + "':"));
      }
    }

    launchSection(sec, r, i) {
      const la = r.launch;
      if (!la || !la.launches) return;
      sec.append(el("h3", null, "Launch overhead"));
      const q = la.queue_depth || {};
      const lb = la.launch_bound || {};
      sec.append(this.facts([
        ["launches", num(la.launches) + " calls launching " + num(la.activities) + " GPU activities"],
        ["CPU time per launch", "median " + fmtUs((la.launch_us || {}).median) + ", p90 " + fmtUs((la.launch_us || {}).p90)],
        ["GPU time per launch", "median " + fmtUs((la.gpu_us || {}).median) + ", p90 " + fmtUs((la.gpu_us || {}).p90)],
        ["shorter than their launch", num(la.shorter_than_launch) + " (" + (100 * (la.share_shorter_than_launch || 0)).toFixed(1) + "%)"],
        ["launch to start", la.launch_to_start_us ? "median " + fmtUs(la.launch_to_start_us.median) + ", p90 " + fmtUs(la.launch_to_start_us.p90) : null],
        ["queue depth", q.mean !== undefined ? "mean " + q.mean.toFixed(2) + ", max " + num(q.max) + ", empty " + (100 * q.share_empty).toFixed(1) + "% of the time" : null],
        ["launch-bound phases", lb.phases ? num(lb.phases) + " over " + fmtUs(lb.time_us) + ", idle while launching in them " + fmtUs(lb.overhead_idle_us) : "none"],
      ]));
      if (q.bins && q.bins.mean_depth && q.bins.mean_depth.length) sec.append(this.depthChart(q.bins));
      const calls = Object.entries(la.by_call || {});
      if (calls.length) sec.append(this.table("launch-calls", ["launch call", "count", "CPU time", "median"], calls.map(([n, c]) => [n, num(c.count), fmtUs(c.cpu_time_us), fmtUs(c.median_us)])));
    }

    depthChart(bins) {
      const W = 1000;
      const H = 50;
      const v = bins.mean_depth;
      const max = Math.max(1, ...v);
      const root = svg("svg", { class: "chart depth", viewBox: "0 0 " + W + " " + (H + 16), preserveAspectRatio: "none" });
      let d = "M0 " + H;
      v.forEach((x, k) => {
        const y = H - (H * x) / max;
        d += "L" + ((W * k) / v.length).toFixed(1) + " " + y.toFixed(1) + "L" + ((W * (k + 1)) / v.length).toFixed(1) + " " + y.toFixed(1);
      });
      root.append(svg("path", { d: d + "L" + W + " " + H + "z", fill: "var(--accent)", "fill-opacity": 0.5 }));
      const total = bins.bin_us * v.length;
      this.axis(root, total, W, H, (t) => fmtUs(t));
      root.append(svg("text", { x: 4, y: 10 }, "queue depth (kernels queued or running), max " + num(max)));
      return root;
    }

    syncSection(sec, r, i) {
      const sy = r.sync;
      if (!sy || !sy.calls) return;
      sec.append(el("h3", null, "Synchronisation"));
      sec.append(el("p", null, num(sy.calls) + " calls block the CPU for " + fmtUs(sy.blocked_us) + "; the gaps after them hold " + fmtUs(sy.gpu_idle_after_us) + " of GPU idle, of which the calls caused " + fmtUs(sy.gpu_idle_caused_us) + " (the time they held the CPU back)."));
      const rows = Object.entries(sy.by_cause || sy.by_call || {}).map(([n, c]) => [n, num(c.count), fmtUs(c.blocked_us), fmtUs(c.gpu_idle_after_us), fmtUs(c.gpu_idle_caused_us)]);
      if (rows.length) sec.append(this.table("sync", ["cause", "calls", "CPU blocked", "GPU idle after", "GPU idle caused"], rows));
      this.sectionStacks(sec, i, "sync/top_stacks", sy.top_stacks, "Stacks that block:");
    }

    copiesSection(sec, r, i) {
      const mt = r.memory_traffic;
      if (!mt || !mt.copies) return;
      sec.append(el("h3", null, "Memory traffic"));
      const rows = (mt.by_kind || []).map((k) => [k.name, num(k.count), k.bytes === null || k.bytes === undefined ? "?" : fmtBytes(k.bytes), fmtUs(k.gpu_time_us), fmtUs(k.launch_cpu_time_us), k.gb_per_s ? k.gb_per_s.toFixed(2) : "?"]);
      sec.append(this.table("copies", ["copy", "count", "bytes", "GPU time", "CPU time of the calls", "GB/s"], rows));
      const small = mt.small_copies || {};
      if (small.count) {
        sec.append(el("p", null, num(small.count) + " copies under " + fmtBytes(small.threshold_bytes) + " (" + fmtBytes(small.bytes) + ", " + fmtUs(small.gpu_time_us) + " on the GPU, " + fmtUs(small.launch_cpu_time_us) + " of CPU calls)."));
        this.sectionStacks(sec, i, "memory_traffic/small_copies/top_stacks", small.top_stacks, "Stacks making small copies:");
      }
      const loop = mt.in_step_loop;
      if (loop && loop.copies) {
        sec.append(el("p", null, num(loop.copies) + " copies inside the step loop over " + num(loop.steps) + " steps (median " + num(loop.copies_per_step_median) + " per step; " + num(loop.htod_copies) + " host-to-device)."));
        this.sectionStacks(sec, i, "memory_traffic/in_step_loop/top_stacks", loop.top_stacks, "Stacks copying inside the loop:");
      }
    }

    efficiencySection(sec, r) {
      const eff = r.efficiency;
      if (!eff) return;
      sec.append(el("h3", null, "Efficiency"));
      const dev = eff.device || {};
      const m = eff.modelled || {};
      sec.append(this.facts([
        ["device", dev.name ? dev.name + " (peaks from " + dev.source + ")" : "unknown: no peaks"],
        ["MFU", eff.mfu === null || eff.mfu === undefined ? "?" : (100 * eff.mfu).toFixed(2) + "% of the timeline (" + (100 * (eff.mfu_busy || 0)).toFixed(2) + "% of the busy time)"],
        ["modelled ops", num(m.calls) + " calls, " + fmtUs(m.kernel_time_us) + " of kernel time (" + (100 * (m.share_of_busy || 0)).toFixed(1) + "% of busy)"],
        ["achieved", eff.achieved_tflops_per_s === null || eff.achieved_tflops_per_s === undefined ? "?" : eff.achieved_tflops_per_s.toFixed(1) + " TFLOP/s"],
      ]));
      const f = (v, d) => (v === null || v === undefined ? "?" : v.toFixed(d));
      const p = (v) => (v === null || v === undefined ? "?" : (100 * v).toFixed(1) + "%");
      const rows = (eff.ops || []).map((o) => [shapeName(o), String(o.precision || o.dtype || "?"), num(o.calls), fmtUs((o.kernel_time_us || {}).sum), f(o.flops_per_byte, 1), f(o.tflops_per_s, 1), p(o.pct_of_peak), p(o.pct_of_roofline), o.bound || "?"]);
      if (rows.length) sec.append(this.table("efficiency", ["op", "precision", "calls", "kernel time", "FLOP/byte", "TFLOP/s", "% of peak", "% of roofline", "bound"], rows));
    }

    rowsTable(rows, kind) {
      const t = el("table", { class: "data", "data-table": kind });
      const h = el("tr");
      for (const [c, cls] of [["name", ""], ["total", "num"], ["count", "num"], ["mean", "num"], ["share", "num"]]) h.append(el("th", cls ? { class: cls } : null, c));
      const thead = el("thead");
      thead.append(h);
      const body = el("tbody");
      for (const row of rows) {
        const tr = el("tr");
        tr.append(
          el("td", { class: "name" }, row.name),
          el("td", { class: "num", "data-value": String(row.total_us) }, fmtUs(row.total_us)),
          el("td", { class: "num" }, num(row.count)),
          el("td", { class: "num" }, fmtUs(row.mean_us)),
          el("td", { class: "num" }, (100 * row.share).toFixed(1) + "%")
        );
        body.append(tr);
      }
      t.append(thead, body);
      return t;
    }

    gemmTable(rows) {
      const t = el("table", { class: "data", "data-table": "gemm" });
      const cols = ["op", "B x M x N x K", "dtype", "calls", "kernel time", "GFLOP/call", "FLOP/byte", "TFLOP/s", "TB/s"];
      const h = el("tr");
      cols.forEach((c, j) => h.append(el("th", j > 2 ? { class: "num" } : null, c)));
      const thead = el("thead");
      thead.append(h);
      const body = el("tbody");
      for (const g of rows) {
        const tr = el("tr");
        const f = (v, d) => (v === null || v === undefined ? "?" : v.toFixed(d));
        tr.append(
          el("td", null, g.op),
          el("td", null, g.B + "x" + g.M + "x" + g.N + "x" + g.K),
          el("td", null, g.dtype),
          el("td", { class: "num" }, num(g.calls)),
          el("td", { class: "num" }, fmtUs((g.kernel_time_us || {}).sum)),
          el("td", { class: "num" }, f(g.flops / 1e9, 3)),
          el("td", { class: "num" }, f(g.flops_per_byte, 1)),
          el("td", { class: "num", "data-value": String(g.tflops_per_s) }, f(g.tflops_per_s, 1)),
          el("td", { class: "num" }, f(g.tb_per_s, 2))
        );
        body.append(tr);
      }
      t.append(thead, body);
      return t;
    }

    histogram(hist) {
      const W = 640;
      const H = 120;
      const root = svg("svg", { class: "chart histogram", viewBox: "0 0 " + W + " " + (H + 18) });
      root.style.maxWidth = W + "px";
      const counts = hist.counts;
      const edges = hist.bin_edges_us;
      const max = Math.max(...counts, 1);
      const bw = W / counts.length;
      counts.forEach((c, i) => {
        if (!c) return;
        const h = (H * c) / max;
        const r = svg("rect", { x: (i * bw).toFixed(2), y: (H - h).toFixed(2), width: Math.max(1, bw - 0.5).toFixed(2), height: h.toFixed(2), fill: "var(--accent)" });
        withTip(r, num(c) + " kernels of " + fmtUs(edges[i]) + " – " + fmtUs(edges[i + 1]));
        root.append(r);
      });
      const g = svg("g", { class: "axis" });
      g.append(svg("line", { x1: 0, x2: W, y1: H, y2: H }));
      g.append(svg("text", { x: 0, y: H + 14 }, fmtUs(edges[0])));
      g.append(svg("text", { x: W, y: H + 14, "text-anchor": "end" }, fmtUs(edges[edges.length - 1])));
      g.append(svg("text", { x: W / 2, y: H + 14, "text-anchor": "middle" }, "kernel duration (max " + num(max) + " per bin)"));
      root.append(g);
      return root;
    }

    // Log-log: arithmetic intensity (FLOP/byte) against achieved TFLOP/s, under the roofs
    // min(peak compute, peak bandwidth x intensity), one compute roof per precision, when
    // the peaks are known.
    roofline(sec, rf) {
      const box = el("div", { class: "roofline-box" });
      const pts = rf.points || [];
      const bw = rf.peak_tb_per_s;
      const roofs = bw ? (rf.roofs || []).filter((x) => x.tflops) : [];
      const peakOf = (p) => p.peak || (roofs.length ? roofs[roofs.length - 1].tflops : null);
      const roofAt = (ai, peak) => Math.min(peak, bw * ai);
      const pctOf = (p) => {
        if (p.pct_of_roofline !== undefined && p.pct_of_roofline !== null) return p.pct_of_roofline;
        const peak = peakOf(p);
        return bw && peak ? p.tflops / roofAt(p.ai, peak) : null;
      };
      if (pts.length) {
        const xs = pts.map((p) => p.ai);
        const ys = pts.map((p) => p.tflops);
        for (const r of roofs) {
          xs.push(r.tflops / bw);
          ys.push(r.tflops);
        }
        const lx0 = Math.floor(Math.log10(Math.min(...xs)) - 0.3);
        const lx1 = Math.ceil(Math.log10(Math.max(...xs)) + 0.3);
        const ly0 = Math.floor(Math.log10(Math.min(...ys)) - 0.3);
        const ly1 = Math.ceil(Math.log10(Math.max(...ys)) + 0.2);
        const W = 640;
        const H = 360;
        const L = 56;
        const B = 40;
        const X = (v) => L + ((Math.log10(v) - lx0) / (lx1 - lx0)) * (W - L - 10);
        const Y = (v) => H - B - ((Math.log10(v) - ly0) / (ly1 - ly0)) * (H - B - 10);
        const root = svg("svg", { class: "chart roofline", viewBox: "0 0 " + W + " " + H });
        const grid = svg("g", { class: "grid" });
        const axis = svg("g", { class: "axis" });
        for (let e = lx0; e <= lx1; e++) {
          grid.append(svg("line", { x1: X(10 ** e), x2: X(10 ** e), y1: 10, y2: H - B }));
          axis.append(svg("text", { x: X(10 ** e), y: H - B + 14, "text-anchor": "middle" }, num(10 ** e)));
        }
        for (let e = ly0; e <= ly1; e++) {
          grid.append(svg("line", { x1: L, x2: W - 10, y1: Y(10 ** e), y2: Y(10 ** e) }));
          axis.append(svg("text", { x: L - 4, y: Y(10 ** e) + 4, "text-anchor": "end" }, num(10 ** e)));
        }
        axis.append(svg("line", { x1: L, x2: W - 10, y1: H - B, y2: H - B }));
        axis.append(svg("line", { x1: L, x2: L, y1: 10, y2: H - B }));
        axis.append(svg("text", { x: (L + W) / 2, y: H - 6, "text-anchor": "middle" }, "arithmetic intensity (FLOP/byte)"));
        axis.append(svg("text", { x: 12, y: (H - B) / 2, "text-anchor": "middle", transform: "rotate(-90 12 " + (H - B) / 2 + ")" }, "achieved TFLOP/s"));
        root.append(grid, axis);
        const x0 = 10 ** lx0;
        const x1 = 10 ** lx1;
        roofs.forEach((r, k) => {
          const ridge = Math.min(Math.max(r.tflops / bw, x0), x1);
          const d = "M" + X(x0) + " " + Y(roofAt(x0, r.tflops)) + "L" + X(ridge) + " " + Y(roofAt(ridge, r.tflops)) + "L" + X(x1) + " " + Y(roofAt(x1, r.tflops));
          root.append(svg("path", { class: "roof", d, "data-label": r.label }));
          root.append(svg("text", { class: "roof-label", x: W - 12, y: Y(r.tflops) - 4, "text-anchor": "end" }, r.label + " peak " + num(r.tflops) + " TFLOP/s"));
          if (k === 0) root.append(svg("text", { class: "roof-label", x: X(x0) + 4, y: Y(roofAt(x0, r.tflops)) - 6 }, num(bw) + " TB/s"));
        });
        const maxT = Math.max(...pts.map((p) => p.time_us || 0), 0);
        for (const p of pts) {
          const r = maxT ? 3 + 7 * Math.sqrt((p.time_us || 0) / maxT) : 5;
          const c = svg("circle", { class: "pt", cx: X(p.ai).toFixed(2), cy: Y(p.tflops).toFixed(2), r: r.toFixed(2) });
          let text = p.name + (p.precision ? " (" + p.precision + ")" : "") + "\n" + num(p.ai) + " FLOP/byte, " + num(p.tflops) + " TFLOP/s";
          const q = pctOf(p);
          if (q !== null) text += "\n" + (100 * q).toFixed(1) + "% of roofline" + (p.bound ? ", " + p.bound + "-bound" : "");
          if (p.time_us) text += "\nkernel time " + fmtUs(p.time_us);
          withTip(c, text);
          root.append(c);
        }
        box.append(root);
        if (rf.device) box.append(el("div", { class: "muted" }, "roofs: " + rf.device));
        const rows = pts.map((p) => {
          const q = pctOf(p);
          return [p.name, String(p.precision || ""), num(p.ai), num(p.tflops), q === null ? "?" : (100 * q).toFixed(1) + "%"];
        });
        // The efficiency table above already lists these shapes with their % of roofline.
        if (rf.source !== "efficiency") box.append(this.table("roofline", ["op", "precision", "FLOP/byte", "TFLOP/s", "% of roofline"], rows));
      }
      for (const m of rf.missing || []) box.append(el("p", { class: "missing" }, m));
      sec.append(box);
    }
  }

  function niceStep(raw) {
    if (!(raw > 0)) return 1;
    const p = 10 ** Math.floor(Math.log10(raw));
    const m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }

  const data = JSON.parse($("aiflame-report").textContent);
  const report = new Report(data);
  report.render();
  R.report = report;
  R.data = data;
  R.ready = true;
})((window.aiflameReport = window.aiflameReport || {}));
