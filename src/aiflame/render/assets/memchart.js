// The memory-over-time chart of a GPU memory page, and the flame graph of what was live at
// a moment chosen on it (data written by aiflame/render/memtimeline.py).
//
// The chart is inline SVG: total bytes live (allocated) per point of the timeline, a step
// line since memory only changes at allocator events, with the peak marked and labelled.
// A click selects the nearest point: the flame graph then shows the allocations live at
// that instant (alloc <= k < free). A drag selects the points in the range j..k: the flame
// graph shows every allocation live at some moment of it (alloc <= k and free > j), so its
// total can exceed the highest point of the range. The selection replaces the self values
// of the peak-bytes column (the tree's shape does not change); "Back to the peak" restores
// the importer's own values. Hovering the chart shows a crosshair on the point a click
// would pick, with its time and the bytes allocated and reserved then. Names only ever
// reach the DOM as textContent.
(function (A) {
  "use strict";

  const $ = (id) => document.getElementById(id);
  // The SVG namespace, from the page's own <svg> (the page names no URL at all).
  const NS = $("mem-svg").namespaceURI;
  const HEIGHT = 170;
  const M = { left: 76, right: 18, top: 24, bottom: 22 }; // plot margins, css px
  const DRAG = 4; // px of movement that make a click a drag

  function svg(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function numbers(buf, s) {
    const out = new Float64Array(s.count);
    if (s.enc === "f64") out.set(new Float64Array(buf.slice(s.offset, s.offset + 8 * s.count).buffer));
    else A.readVarints(buf, s.offset, s.count, out);
    if (s.enc === "varint-delta") for (let i = 1; i < out.length; i++) out[i] += out[i - 1];
    return out;
  }

  async function decode(h, base64) {
    const buf = await A.inflate(A.base64Bytes(base64));
    const sec = {};
    for (const s of h.sections) sec[s.name] = s;
    return {
      time: numbers(buf, sec.time),
      live: numbers(buf, sec.live),
      reserved: numbers(buf, sec.reserved),
      node: A.readPlanes(buf, sec.node),
      alloc: A.readPlanes(buf, sec.alloc),
      free: A.readPlanes(buf, sec.free),
      size: numbers(buf, sec.size),
    };
  }

  const bytes = (v) => A.formatValue(v, "bytes");
  const exact = (v) => A.formatValue(v, "count") + " bytes";

  class MemoryChart {
    constructor(app, h, d) {
      this.app = app;
      this.h = h;
      this.d = d;
      this.m = d.time.length;
      this.peakTree = app.baseTree; // the importer's values, restored by clear()
      this.metric = h.metric;
      this.metricLabel = this.option().textContent;
      this.sel = null; // {from, to}: point indices, from === to for an instant
      this.box = $("mem-chart");
      this.svg = $("mem-svg");
      this.hoverK = -1; // the point under the pointer, -1: none
      this.tip = document.createElement("div");
      this.tip.id = "mem-tip";
      this.tip.setAttribute("role", "tooltip");
      this.tip.hidden = true;
      document.body.append(this.tip);
      this.hasReserved = d.reserved.some((v) => v > 0);
      $("mem-clear").addEventListener("click", () => this.clear());
      $("metric").addEventListener("change", () => this.showStatus());
      this.bindPointer();
      this.draw();
      this.showStatus();
      new ResizeObserver(() => this.draw()).observe(this.box);
    }

    // -- time and geometry --------------------------------------------------------------

    timeText(k) {
      const t = this.d.time[k] - this.d.time[0];
      if (this.h.unit !== "us") return "event " + A.formatValue(t, "count");
      return t ? "+" + A.formatValue(t * 1000, "nanoseconds") : "+0 ms";
    }

    layout() {
      const d = this.d;
      const m = this.m;
      const w = Math.max(200, this.box.clientWidth);
      const pw = w - M.left - M.right;
      const ph = HEIGHT - M.top - M.bottom;
      let vmax = 0;
      for (let k = 0; k < m; k++) vmax = Math.max(vmax, d.live[k], d.reserved[k]);
      vmax = vmax || 1;
      const t0 = d.time[0];
      const span = d.time[m - 1] - t0 || 1;
      this.width = w;
      this.xOf = (t) => M.left + ((t - t0) / span) * pw;
      this.yOf = (v) => M.top + ph - (v / vmax) * ph;
      this.px = new Float64Array(m);
      this.py = new Float64Array(m);
      for (let k = 0; k < m; k++) {
        this.px[k] = this.xOf(d.time[k]);
        this.py[k] = this.yOf(d.live[k]);
      }
      this.vmax = vmax;
      this.base = M.top + ph;
    }

    // A step line through the points: the value holds until the next point.
    stepPath(values, close) {
      const m = this.m;
      const px = this.px;
      const parts = new Array(m + 2);
      const y0 = this.yOf(values[0]);
      parts[0] = close ? "M" + px[0].toFixed(1) + " " + this.base + "V" + y0.toFixed(1) : "M" + px[0].toFixed(1) + " " + y0.toFixed(1);
      for (let k = 1; k < m; k++) parts[k] = "H" + px[k].toFixed(1) + "V" + this.yOf(values[k]).toFixed(1);
      parts[m] = close ? "V" + this.base + "Z" : "";
      return parts.join("");
    }

    draw() {
      if (!this.box.clientWidth) return;
      this.layout();
      const d = this.d;
      const s = this.svg;
      s.setAttribute("width", this.width);
      s.setAttribute("viewBox", "0 0 " + this.width + " " + HEIGHT);
      const items = [];
      for (let g = 0; g <= 4; g++) {
        const v = (this.vmax * g) / 4;
        const y = this.yOf(v);
        items.push(svg("line", { class: "mem-grid", x1: M.left, x2: this.width - M.right, y1: y, y2: y }));
        items.push(svg("text", { class: "mem-axis", x: M.left - 6, y: y + 4, "text-anchor": "end" }, bytes(v)));
      }
      for (let g = 0; g <= 4; g++) {
        const k = g === 4 ? this.m - 1 : this.nearestTime(d.time[0] + ((d.time[this.m - 1] - d.time[0]) * g) / 4);
        const anchor = g === 0 ? "start" : g === 4 ? "end" : "middle";
        items.push(svg("text", { class: "mem-axis", x: this.px[k], y: HEIGHT - 6, "text-anchor": anchor }, this.timeText(k)));
      }
      items.push(svg("path", { id: "mem-reserved", class: "mem-reserved", d: this.stepPath(d.reserved, false) }));
      items.push(svg("path", { id: "mem-live", class: "mem-live", d: this.stepPath(d.live, true) }));
      const p = this.h.peakIndex;
      const x = this.px[p];
      const y = this.py[p];
      items.push(svg("line", { class: "mem-peak-line", x1: x, x2: x, y1: M.top - 4, y2: this.base }));
      items.push(svg("circle", { id: "mem-peak", class: "mem-peak", cx: x, cy: y, r: 4 }));
      const label = "peak " + bytes(d.live[p]) + " (" + exact(d.live[p]) + ") at " + this.timeText(p);
      const right = x > this.width / 2;
      items.push(svg("text", { id: "mem-peak-label", class: "mem-peak-label", x: right ? x - 6 : x + 6, y: M.top - 8, "text-anchor": right ? "end" : "start" }, label));
      this.selLayer = svg("g", { id: "mem-selection" });
      this.hoverLayer = svg("g", { id: "mem-hover" });
      items.push(this.selLayer, this.hoverLayer);
      s.replaceChildren(...items);
      this.drawSelection();
      this.drawHover();
    }

    drawSelection(dragFrom, dragTo) {
      const g = this.selLayer;
      if (!g) return;
      const items = [];
      if (dragFrom !== undefined) {
        const a = Math.min(dragFrom, dragTo);
        items.push(svg("rect", { class: "mem-range", x: a, y: M.top, width: Math.abs(dragTo - dragFrom), height: this.base - M.top }));
      } else if (this.sel) {
        const { from, to } = this.sel;
        if (from === to) {
          const x = this.px[from];
          items.push(svg("line", { class: "mem-cursor", x1: x, x2: x, y1: M.top, y2: this.base }));
          items.push(svg("circle", { class: "mem-cursor-dot", cx: x, cy: this.py[from], r: 3.5 }));
        } else {
          const a = this.px[from];
          items.push(svg("rect", { class: "mem-range", x: a, y: M.top, width: Math.max(2, this.px[to] - a), height: this.base - M.top }));
        }
      }
      g.replaceChildren(...items);
    }

    // -- picking points -----------------------------------------------------------------

    nearestTime(t) {
      const time = this.d.time;
      let lo = 0;
      let hi = this.m - 1;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (time[mid] < t) lo = mid + 1;
        else hi = mid;
      }
      if (lo > 0 && t - time[lo - 1] < time[lo] - t) lo--;
      return lo;
    }

    // The point nearest to (x, y): nearest in x, then (points drawn at the same x, several
    // events in one microsecond or one pixel) nearest in y.
    pointAt(x, y) {
      const px = this.px;
      let best = 0;
      for (let k = 1; k < this.m; k++) if (Math.abs(px[k] - x) < Math.abs(px[best] - x)) best = k;
      const bx = px[best];
      let pick = best;
      for (let k = 0; k < this.m; k++) {
        if (Math.abs(px[k] - bx) < 0.5 && Math.abs(this.py[k] - y) < Math.abs(this.py[pick] - y)) pick = k;
      }
      return pick;
    }

    bindPointer() {
      const local = (e) => {
        const b = this.svg.getBoundingClientRect();
        return [e.clientX - b.left, e.clientY - b.top];
      };
      let start = null;
      this.svg.addEventListener("mousedown", (e) => {
        if (e.button !== 0) return;
        e.preventDefault();
        start = local(e);
        this.hover(-1);
      });
      this.svg.addEventListener("mousemove", (e) => {
        if (start) return; // a drag draws its range instead
        const [x, y] = local(e);
        const inside = x >= M.left - DRAG && x <= this.width - M.right + DRAG;
        this.hover(inside ? this.pointAt(x, y) : -1, e.clientX, e.clientY);
      });
      this.svg.addEventListener("mouseleave", () => this.hover(-1));
      window.addEventListener("mousemove", (e) => {
        if (!start) return;
        const [x] = local(e);
        if (Math.abs(x - start[0]) >= DRAG) this.drawSelection(start[0], x);
      });
      window.addEventListener("mouseup", (e) => {
        if (!start) return;
        const [x, y] = local(e);
        const x0 = start[0];
        start = null;
        if (Math.abs(x - x0) < DRAG) {
          const k = this.pointAt(x, y);
          this.select(k, k);
          return;
        }
        const lo = Math.min(x, x0);
        const hi = Math.max(x, x0);
        let from = -1;
        let to = -1;
        for (let k = 0; k < this.m; k++) {
          if (this.px[k] >= lo && this.px[k] <= hi) {
            if (from < 0) from = k;
            to = k;
          }
        }
        if (from < 0) from = to = this.pointAt((lo + hi) / 2, y);
        this.select(from, to);
      });
    }

    // -- hover: crosshair and values ----------------------------------------------------

    // Show point k under the pointer (client coordinates cx, cy), or nothing for k < 0.
    hover(k, cx, cy) {
      this.hoverK = k;
      this.drawHover();
      const tip = this.tip;
      if (k < 0) {
        tip.hidden = true;
        return;
      }
      const d = this.d;
      const rows = [
        ["time", this.timeText(k)],
        ["allocated", bytes(d.live[k]) + " (" + exact(d.live[k]) + ")"],
      ];
      if (this.hasReserved) rows.push(["reserved", bytes(d.reserved[k]) + " (" + exact(d.reserved[k]) + ")"]);
      if (k === this.h.peakIndex) rows.push(["", "the peak"]);
      const table = document.createElement("table");
      table.className = "tip-rows";
      for (const [name, value] of rows) {
        const tr = table.insertRow();
        const th = document.createElement("th");
        th.textContent = name;
        tr.append(th);
        tr.insertCell().textContent = value;
      }
      const hint = document.createElement("div");
      hint.className = "tip-hint";
      hint.textContent = "Click: what was live at this instant. Drag: during a range.";
      tip.replaceChildren(table, hint);
      tip.hidden = false;
      // Beside the pointer, on the side with room.
      const w = tip.offsetWidth;
      const hgt = tip.offsetHeight;
      const left = cx + 14 + w > window.innerWidth ? cx - 14 - w : cx + 14;
      const top = cy + 14 + hgt > window.innerHeight ? cy - 14 - hgt : cy + 14;
      tip.style.left = Math.max(0, left) + "px";
      tip.style.top = Math.max(0, top) + "px";
    }

    drawHover() {
      const g = this.hoverLayer;
      if (!g) return;
      const k = this.hoverK;
      if (k < 0 || k >= this.m) {
        g.replaceChildren();
        return;
      }
      const x = this.px[k];
      g.replaceChildren(
        svg("line", { class: "mem-hover-line", x1: x, x2: x, y1: M.top, y2: this.base }),
        svg("line", { class: "mem-hover-line", x1: M.left, x2: this.width - M.right, y1: this.py[k], y2: this.py[k] }),
        svg("circle", { class: "mem-hover-dot", cx: x, cy: this.py[k], r: 3.5 }),
      );
    }

    // -- what was live ------------------------------------------------------------------

    // Bytes per page node of the allocations live at some point of from..to.
    liveColumn(from, to) {
      const d = this.d;
      const col = new Float64Array(this.peakTree.n);
      const { node, alloc, free, size } = d;
      for (let i = 0; i < node.length; i++) {
        if (alloc[i] <= to && free[i] > from) col[node[i]] += size[i];
      }
      return col;
    }

    select(from, to) {
      this.sel = { from, to };
      const base = this.peakTree;
      const self = base.self.slice();
      self[this.metric] = this.liveColumn(from, to);
      const label = from === to ? "live at " + this.timeText(from) : "live in " + this.timeText(from) + " – " + this.timeText(to);
      this.show(new A.Tree(base.frames, base.frame, base.depth, self, base.rootLabel, base.maxDepth), label);
    }

    clear() {
      this.sel = null;
      this.show(this.peakTree, this.metricLabel);
    }

    // The metric choice's entry of this chart's metric (empty metrics have none).
    option() {
      return $("metric").querySelector('option[value="' + this.metric + '"]');
    }

    show(tree, label) {
      const app = this.app;
      app.baseTree = tree;
      app.metric = this.metric;
      const select = $("metric");
      this.option().textContent = label;
      select.value = String(this.metric);
      app.applyFilters(); // the user's focus/hide filters apply to the new values too
      $("mem-clear").disabled = !this.sel;
      this.drawSelection();
      this.showStatus();
    }

    showStatus() {
      const d = this.d;
      const sel = this.sel;
      let text;
      if (!sel && this.app.metric !== this.metric) {
        text = "Click the chart for what was live at an instant, drag across it for a range.";
      } else if (!sel) {
        const p = this.h.peakIndex;
        text = "Shown: live at the peak, " + this.timeText(p) + ": " + bytes(d.live[p]) + " (" + exact(d.live[p]) + ")";
      } else {
        const total = this.app.baseTree.totals(this.metric)[0];
        if (sel.from === sel.to) {
          text = "Shown: live at " + this.timeText(sel.from) + ": " + bytes(total) + " (" + exact(total) + ")";
        } else {
          let most = sel.from;
          for (let k = sel.from; k <= sel.to; k++) if (d.live[k] > d.live[most]) most = k;
          text =
            "Shown: live at some moment in " + this.timeText(sel.from) + " – " + this.timeText(sel.to) +
            ": " + bytes(total) + " (" + exact(total) + "); at most " + bytes(d.live[most]) + " at once, at " + this.timeText(most);
        }
      }
      $("mem-status").textContent = text;
      $("mem-status").title = text; // in full, when the line is cut
    }

  }

  // The panel's static parts, laid out before the flame graph measures its box.
  function preparePanel(h) {
    $("mem-svg").setAttribute("height", HEIGHT);
    $("mem-device").textContent = "(" + (h.scope || "device " + h.device) + ")";
    writeLegend(h);
    $("memory").hidden = false;
  }

  function writeLegend(h) {
    const how = document.createElement("b");
    how.textContent = "How to read: ";
    const text =
      "the blue area is the bytes allocated (live) over time, the dashed line the bytes reserved by the caching allocator. " +
      "Hover the chart for the time and bytes at a point; click it to see what was live at that instant; drag across it to see every allocation live at some moment " +
      "of the range (so its total can exceed the highest point of the range). " +
      (h.legend ? h.legend + " " : "") +
      "Hover a box: total is the bytes of the allocations made under it, self those made right there.";
    $("mem-legend").replaceChildren(how, document.createTextNode(text));
  }

  const dataText = $("aiflame-memory") ? $("aiflame-memory").textContent : "";
  const memHeader = dataText ? JSON.parse($("aiflame-header").textContent).memory : null;
  if (memHeader) preparePanel(memHeader);

  // Resolves to the chart, or null on a page without memory data.
  A.memoryReady = A.ready.then(async (app) => {
    if (!memHeader) return null;
    const d = await decode(memHeader, dataText);
    const chart = (A.memory = new MemoryChart(app, memHeader, d));
    // For tests: the page coordinates of point k.
    chart.clientPoint = (k) => {
      const b = chart.svg.getBoundingClientRect();
      return { x: b.left + chart.px[k], y: b.top + chart.py[k] };
    };
    return chart;
  });
})((window.aiflame = window.aiflame || {}));
