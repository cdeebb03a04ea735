// The page: toolbar, tabs, tooltip, context menu, search, filters, sandwich, top table.
//
// Every string that comes from a profile reaches the DOM through textContent (never
// innerHTML) or is drawn on the canvas, so a frame named like an HTML tag is just text.
(function (A) {
  "use strict";

  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    if (attrs) for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  class App {
    constructor(data) {
      const h = (this.header = data.header);
      this.types = h.types;
      this.frames = new A.FrameTable(data);
      this.baseTree = new A.Tree(this.frames, data.frame, data.depth, data.self, null, h.maxDepth);
      this.tree = this.baseTree;
      this.diff = h.diff || null;
      this.metric = this.diff ? this.diff.test : h.metric || 0;
      this.colorMode = this.diff ? "diff-self" : "kind";
      this.filters = []; // [{op: "focus" | "hide", nameId, name}]
      this.searchMask = null;
      this.ignoreCase = false; // the "Aa" button: every search ignores case
      this.sandwichName = -1;
      this.topSort = this.diff ? { key: "delta", dir: "abs" } : { key: "self", dir: "desc" };
      this.topUnfold = false; // true: a differential table shows its wrapper rows too
      this.kindColors = new Array(this.frames.count + 1);
      this.tooltipNode = -1;
      this.menuNode = -1;

      this.view = new A.FlameView($("flame"), {
        foldChains: true,
        onHover: (i, e) => this.showTooltip(this.view, i, e),
        onClick: (i) => {
          if (i >= 0 && this.view.foldAt(i)) this.unfold();
          else if (i >= 0) this.zoomTo(i); // a click on the background keeps the zoom
        },
        onContext: (i, e) => this.openMenu(this.view, i, e),
      });
      this.view.inverted = !!h.inverted;
      if (this.diff) this.view.background = "#e4e5e8";
      this.view.colorOf = (i) => this.colorOf(this.view.tree, i);
      this.swCallers = this.makeSideView("sw-callers", false);
      this.swCallees = this.makeSideView("sw-callees", true);
      this.bindControls();
      this.buildLegend();
      this.setTree(this.baseTree);
      this.updateInvertButton();
    }

    makeSideView(id, inverted) {
      const v = new A.FlameView($(id), {
        onHover: (i, e) => this.showTooltip(v, i, e),
        onClick: (i) => {
          if (i < 0) return;
          v.setZoom(i);
          v.draw();
        },
        onContext: (i, e) => this.openMenu(v, i, e),
      });
      v.inverted = inverted;
      if (this.diff) v.background = "#e4e5e8";
      v.colorOf = (i) => this.colorOf(v.tree, i);
      return v;
    }

    // -- state changes ----------------------------------------------------------------

    setTree(tree) {
      this.tree = tree;
      this.deltaCache = new Map();
      this.view.setTree(tree, this.metric);
      this.view.mask = this.searchMask;
      this.refresh();
    }

    refresh() {
      this.view.draw();
      this.updateCrumbs();
      this.updateSummary();
      this.updateMatched();
      if (this.tab === "top") this.renderTop();
      if (this.tab === "sandwich") this.renderSandwich();
    }

    zoomTo(i) {
      this.view.setZoom(i < 0 ? 0 : i);
      this.view.draw();
      this.updateCrumbs();
    }

    resetZoom() {
      this.zoomTo(0);
    }

    // Show the frames of the folded chains (for good: zooming shows them anyway).
    unfold() {
      this.view.unfold();
      this.view.hover = -1;
      $("tooltip").hidden = true;
      this.tooltipNode = -1;
      this.view.draw();
    }

    setMetric(t) {
      this.metric = t;
      const z = this.view.zoom;
      this.view.metric = t;
      if (!(this.tree.totals(t)[z] > 0)) this.view.setZoom(0);
      for (const v of [this.swCallers, this.swCallees]) v.metric = t;
      this.refresh();
    }

    applyFilters() {
      let tree = this.baseTree;
      for (const f of this.filters) {
        const mask = A.frameMask(this.frames, (fr) => this.frames.nameId[fr] === f.nameId);
        tree = f.op === "hide" ? A.hideFrames(tree, mask) : A.calleesOf(tree, mask, f.name);
      }
      this.setTree(tree);
      this.renderFilters();
    }

    addFilter(op, node, view) {
      const tree = view.tree;
      if (node === 0 && tree.rootLabel === null) return;
      this.filters.push({ op, nameId: tree.nameId(node), name: tree.nameOf(node) });
      this.applyFilters();
    }

    // A value with its unit; in a differential graph the types are named "base" and
    // "test", so counts read as samples rather than "30 test".
    fmt(value, type) {
      if (this.diff && type.unit === "count") return A.formatValue(value, "count") + " samples";
      return A.formatWithName(value, type);
    }

    // -- colours ----------------------------------------------------------------------

    colorOf(tree, i) {
      if (this.colorMode !== "kind" && this.diff) return this.diffColorOf(tree, i);
      const f = tree.frame[i];
      let c = this.kindColors[f];
      if (c === undefined) {
        const slug = this.frames.kindSlug(f);
        const cls = slug === "gpu-stall" ? this.stallClass(f) : null;
        c = this.kindColors[f] = cls
          ? A.stallColor(cls, this.frames.name(f))
          : A.kindColor(slug, this.frames.name(f));
      }
      return c;
    }

    // The normalized class of a GPU stall-reason frame ("memory latency"...), or null.
    stallClass(f) {
      const g = this.header.gpu;
      return (g && g.stallClasses && g.stallClasses[this.frames.name(f)]) || null;
    }

    // Per-node deltas (test - base) of self or total, and the largest magnitude.
    deltas(tree) {
      const key = this.colorMode;
      let cache = tree === this.tree ? this.deltaCache : (tree._deltas = tree._deltas || new Map());
      let d = cache.get(key);
      if (d) return d;
      const b = this.diff.base;
      const t = this.diff.test;
      const base = key === "diff-total" ? tree.totals(b) : tree.self[b];
      const test = key === "diff-total" ? tree.totals(t) : tree.self[t];
      const delta = new Float64Array(tree.n);
      let max = 0;
      for (let i = 0; i < tree.n; i++) {
        delta[i] = test[i] - base[i];
        if (i > 0 && Math.abs(delta[i]) > max) max = Math.abs(delta[i]);
      }
      d = { delta, max };
      cache.set(key, d);
      return d;
    }

    diffColorOf(tree, i) {
      const d = this.deltas(tree);
      return A.diffColor(d.delta[i], d.max);
    }

    // -- tooltip and menu -------------------------------------------------------------

    showTooltip(view, i, e) {
      const tip = $("tooltip");
      if (i < 0 || !$("menu").hidden) {
        tip.hidden = true;
        this.tooltipNode = -1;
        return;
      }
      if (i !== this.tooltipNode || view !== this.tooltipView) {
        this.tooltipNode = i;
        this.tooltipView = view;
        tip.replaceChildren(...this.describe(view.tree, i));
      }
      tip.hidden = false;
      const pad = 14;
      const w = tip.offsetWidth;
      const hgt = tip.offsetHeight;
      let x = e.clientX + pad;
      let y = e.clientY + pad;
      if (x + w > window.innerWidth - 4) x = Math.max(4, e.clientX - w - pad);
      if (y + hgt > window.innerHeight - 4) y = Math.max(4, e.clientY - hgt - pad);
      tip.style.left = x + "px";
      tip.style.top = y + "px";
    }

    // The tooltip's content: name, kind, values, location; DOM nodes with textContent.
    describe(tree, i) {
      const fold = tree === this.view.tree ? this.view.foldAt(i) : null;
      if (fold) return this.describeFold(tree, fold);
      const f = tree.frame[i];
      const out = [el("div", { class: "tip-name" }, tree.labelOf(i))];
      const kind = A.PALETTE[this.frames.kindSlug(f)] || A.PALETTE.unknown;
      const rows = el("table", { class: "tip-rows" });
      const row = (k, v, cls) => {
        const tr = el("tr", cls ? { class: cls } : null);
        tr.append(el("th", null, k), el("td", null, v));
        rows.append(tr);
      };
      row("kind", kind.label);
      if (this.frames.kindSlug(f) === "gpu-stall" && this.stallClass(f)) {
        row("stall class", this.stallClass(f));
      }
      const t = this.metric;
      const type = this.types[t];
      const all = this.baseTree.totals(t)[0];
      const tot = tree.totals(t)[i];
      const self = tree.self[t][i];
      row("total", this.fmt(tot, type) + " (" + A.percent(tot, all) + " of all)");
      row("self", this.fmt(self, type) + " (" + A.percent(self, all) + " of all)");
      if (this.diff) {
        const bt = this.types[this.diff.base];
        const b = tree.totals(this.diff.base)[i];
        const delta = tot - b;
        const sign = delta > 0 ? "+" : "";
        const names = this.diff.names || {};
        row(names.base ? "base (" + names.base + ")" : "base", this.fmt(b, bt));
        row(names.test ? "test (" + names.test + ")" : "test", this.fmt(tot, type));
        const change = b ? sign + A.percent(delta, b) : tot ? "new" : "-";
        row("delta", sign + A.formatValue(delta, type.unit) + " (" + change + ")", delta > 0 ? "grow" : delta < 0 ? "shrink" : "");
        const sd = self - tree.self[this.diff.base][i];
        row("self delta", (sd > 0 ? "+" : "") + A.formatValue(sd, type.unit));
      }
      const loc = this.frames.location(f);
      if (loc) row("file", loc);
      out.push(rows);
      out.push(el("div", { class: "tip-hint" }, "click: zoom · right-click: focus, hide, sandwich"));
      return out;
    }

    // A folded chain: how many frames, which ones, and its value.
    describeFold(tree, fold) {
      const out = [el("div", { class: "tip-name" }, fold.count + " frames of one call chain, folded")];
      const list = el("ol", { class: "tip-chain" });
      const shown = fold.count <= 14 ? fold.members : [...fold.members.slice(0, 6), -1, ...fold.members.slice(-6)];
      for (const m of shown) {
        list.append(el("li", m < 0 ? { class: "gap" } : null, m < 0 ? "…" : A.fitLabel(tree.labelOf(m), 90)));
      }
      out.push(list);
      const t = this.metric;
      const type = this.types[t];
      const tot = tree.totals(t)[fold.head];
      const all = this.baseTree.totals(t)[0];
      const rows = el("table", { class: "tip-rows" });
      const tr = el("tr");
      tr.append(el("th", null, "total"), el("td", null, this.fmt(tot, type) + " (" + A.percent(tot, all) + " of all)"));
      rows.append(tr);
      out.push(rows);
      out.push(el("div", { class: "tip-hint" }, "click: show these frames · right-click: the first one"));
      return out;
    }

    openMenu(view, i, e) {
      const menu = $("menu");
      this.menuNode = i;
      this.menuView = view;
      $("tooltip").hidden = true;
      const name = view.tree.nameOf(i);
      $("menu-name").textContent = name;
      const isRoot = i === 0 && view.tree.rootLabel === null;
      for (const b of menu.querySelectorAll("button[data-needs-frame]")) b.disabled = isRoot;
      menu.hidden = false;
      const w = menu.offsetWidth;
      const hgt = menu.offsetHeight;
      menu.style.left = Math.min(e.clientX, window.innerWidth - w - 4) + "px";
      menu.style.top = Math.min(e.clientY, window.innerHeight - hgt - 4) + "px";
    }

    closeMenu() {
      $("menu").hidden = true;
    }

    menuAction(act) {
      const view = this.menuView;
      const i = this.menuNode;
      this.closeMenu();
      if (!view || i < 0) return;
      if (act === "zoom") {
        if (view === this.view) this.zoomTo(i);
        else {
          view.setZoom(i);
          view.draw();
        }
      } else if (act === "focus" || act === "hide") {
        this.addFilter(act, i, view);
      } else if (act === "sandwich") {
        this.sandwichName = view.tree.nameId(i);
        this.showTab("sandwich");
      } else if (act === "copy") {
        const text = view.tree.nameOf(i);
        if (navigator.clipboard) navigator.clipboard.writeText(text).catch(() => {});
      }
    }

    // -- toolbar pieces ---------------------------------------------------------------

    updateCrumbs() {
      const box = $("crumbs");
      const tree = this.tree;
      const path = tree.pathTo(this.view.zoom);
      const items = [];
      path.forEach((v, k) => {
        if (k) items.push(el("span", { class: "sep" }, "›"));
        const label = tree.labelOf(v);
        const b = el("button", { class: "crumb", type: "button", title: label }, A.fitLabel(label, 48));
        b.addEventListener("click", () => this.zoomTo(v));
        if (k === path.length - 1) b.classList.add("current");
        items.push(b);
      });
      box.replaceChildren(...items);
      $("reset").disabled = this.view.zoom === 0;
    }

    updateSummary() {
      const t = this.metric;
      const type = this.types[t];
      let text = "Total: " + this.fmt(this.baseTree.totals(t)[0], type);
      // With no metric to choose from, the choice does not say which one this is: a time
      // or a size must still be named ("wall-time" of CPU slices is not CPU time).
      if (!this.diff && $("metric-box").hidden && type.unit !== "count") {
        text = "Total " + type.name + ": " + this.fmt(this.baseTree.totals(t)[0], type);
      }
      if (this.diff) {
        const b = this.baseTree.totals(this.diff.base)[0];
        const x = this.baseTree.totals(this.diff.test)[0];
        const names = this.diff.names || {};
        const base = names.base ? "base (" + names.base + ") " : "base ";
        const test = names.test ? "test (" + names.test + ") " : "test ";
        text = base + this.fmt(b, this.types[this.diff.base]) + " → " + test + this.fmt(x, type);
        if (b) text += " (" + (x >= b ? "+" : "") + A.percent(x - b, b) + ")";
        if (this.diff.normalized) text += ", base normalized to test's total";
      }
      if (this.tree !== this.baseTree) {
        text += " · shown: " + this.fmt(this.tree.totals(t)[0], type);
      }
      $("total").textContent = text;
    }

    setSearch(text) {
      const status = $("search-status");
      status.textContent = "";
      $("search").classList.remove("bad");
      if (!text) {
        this.searchMask = null;
      } else {
        const found = A.searchRegex(text, this.ignoreCase);
        const re = found.re;
        if (found.literal) {
          // Not a valid regex: a search for the literal text instead, and said so.
          $("search").classList.add("bad");
          status.textContent = "(not a regex: literal match)";
        }
        const frames = this.frames;
        this.searchMask = A.frameMask(frames, (f) => re.test(frames.name(f)));
      }
      this.view.mask = this.searchMask;
      this.swCallers.mask = this.swCallees.mask = this.searchMask;
      this.view.draw();
      this.updateMatched();
      if (this.tab === "sandwich") this.renderSandwich();
    }

    // The "Aa" button: every search ignores case (else only searches in lower case do).
    setIgnoreCase(on) {
      this.ignoreCase = !!on;
      $("search-case").setAttribute("aria-pressed", String(this.ignoreCase));
      this.setSearch($("search").value);
    }

    updateMatched() {
      const box = $("matched");
      if (!this.searchMask) {
        box.textContent = "";
        box.hidden = true;
        return;
      }
      const t = this.metric;
      const m = A.matchedTotal(this.tree, this.searchMask, t);
      const all = this.tree.totals(t)[0];
      box.hidden = false;
      box.textContent = "matched: " + A.percent(m, all) + " (" + this.fmt(m, this.types[t]) + ")";
    }

    renderFilters() {
      const box = $("filters");
      const items = this.filters.map((f, k) => {
        const chip = el("span", { class: "chip " + f.op });
        chip.append(el("span", { class: "chip-op" }, f.op === "hide" ? "hidden:" : "focus:"));
        chip.append(el("span", { class: "chip-name" }, f.name));
        const x = el("button", { type: "button", title: "remove this filter" }, "×");
        x.addEventListener("click", () => {
          this.filters.splice(k, 1);
          this.applyFilters();
        });
        chip.append(x);
        return chip;
      });
      box.replaceChildren(...items);
    }

    // "gpu-samples (count, 1 = 1024 cycles)": what one GPU PC sample stands for.
    metricLabel(type) {
      const g = this.header.gpu;
      if (type.name === "gpu-samples" && g && g.period) {
        return type.name + " (" + type.unit + ", 1 = " + A.formatValue(g.period, "count") + " " + g.periodUnit + ")";
      }
      return type.name + " (" + type.unit + ")";
    }

    updateInvertButton() {
      $("invert").textContent = this.view.inverted ? "Flame view" : "Icicle view";
      $("invert").title = this.view.inverted ? "root at the bottom" : "root at the top";
    }

    buildLegend() {
      const used = new Set();
      for (let f = 0; f < this.frames.count; f++) used.add(this.frames.kindSlug(f));
      const box = $("kinds");
      const items = [];
      if (this.diff) {
        for (const [cls, text] of [["grow", "grew"], ["shrink", "shrank"], ["same", "no change"]]) {
          const it = el("span", { class: "kind" });
          it.append(el("span", { class: "swatch " + cls }), el("span", null, text));
          items.push(it);
        }
      }
      const g = this.header.gpu;
      if (g && g.classes && g.classes.length) used.delete("gpu-stall"); // its own legend below
      for (const slug of Object.keys(A.PALETTE)) {
        if (!used.has(slug)) continue;
        const p = A.PALETTE[slug];
        const it = el("span", { class: "kind", "data-kind": slug });
        const sw = el("span", { class: "swatch" });
        sw.style.background = A.kindColor(slug, "");
        it.append(sw, el("span", null, p.label));
        items.push(it);
      }
      box.replaceChildren(...items);
      this.buildStallLegend();
      if (this.diff) {
        $("howto-diff").hidden = false;
        $("colormode-box").hidden = false;
      }
    }

    // GPU PC samples: one swatch per stall class present, with the reasons in it.
    buildStallLegend() {
      const box = $("stalls");
      const g = this.header.gpu;
      if (!box || !g || !g.classes || !g.classes.length) return;
      const reasons = {};
      for (const [name, cls] of Object.entries(g.stallClasses || {})) {
        (reasons[cls] = reasons[cls] || []).push(name);
      }
      const items = [el("span", { class: "stall-title" }, "GPU stall reasons:")];
      for (const cls of g.classes) {
        const it = el("span", { class: "kind stall-class", "data-stall-class": cls });
        const sw = el("span", { class: "swatch" });
        sw.style.background = A.stallColor(cls, "");
        const names = (reasons[cls] || []).sort();
        it.title = names.join(", ");
        it.append(sw, el("span", null, cls), el("span", { class: "stall-names" }, names.join(", ")));
        items.push(it);
      }
      if (g.join) items.push(el("span", { class: "stall-join" }, g.join));
      box.replaceChildren(...items);
      box.hidden = false;
    }

    // -- tabs: top functions and sandwich ---------------------------------------------

    showTab(name) {
      this.tab = name;
      for (const b of document.querySelectorAll(".tabs button")) {
        b.classList.toggle("active", b.dataset.tab === name);
      }
      for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== "tab-" + name;
      $("crumbs").style.visibility = name === "flame" ? "" : "hidden";
      if (name === "flame") this.view.draw();
      if (name === "top") this.renderTop();
      if (name === "sandwich") this.renderSandwich();
    }

    // Per function: self and total (or, in a differential graph, base and test totals,
    // their delta and delta %), sorted by the chosen column.
    renderTop() {
      const t = this.metric;
      const type = this.types[t];
      let rows = this.diff ? this.topDiffRows() : A.topFunctions(this.tree, t);
      const folded = this.diff && !this.topUnfold ? rows.filter((r) => r.into) : [];
      if (folded.length) rows = rows.filter((r) => !r.into);
      this.sortTop(rows);
      for (const th of document.querySelectorAll("#top-table th[data-key]")) {
        th.classList.toggle("sorted", th.dataset.key === this.topSort.key);
        th.dataset.dir = th.dataset.key === this.topSort.key ? this.topSort.dir : "";
      }
      const all = this.tree.totals(t)[0];
      const limit = 1000;
      const body = [];
      const names = this.frames.strings;
      for (const r of rows.slice(0, limit)) {
        const tr = el("tr");
        const name = el("td", { class: "fn" });
        const sw = el("span", { class: "swatch" });
        sw.style.background = A.kindColor(this.frames.kindSlug(r.frame), names[r.nameId]);
        name.append(sw, el("span", null, this.frames.label(r.frame)));
        if (r.wrappers && !this.topUnfold) {
          const callers = r.wrappers.map((w) => this.frames.label(w.frame));
          const badge = el("span", { class: "wrappers" }, " +" + callers.length + " callers");
          badge.title = "callers whose change is all this function's:\n" + callers.join("\n");
          name.append(badge);
        }
        tr.append(name);
        const num = (text, cls) => el("td", { class: cls ? "num " + cls : "num" }, text);
        if (this.diff) {
          const sign = r.delta > 0 ? "+" : "";
          const cls = r.delta > 0 ? "grow" : r.delta < 0 ? "shrink" : "";
          const pct = r.base ? sign + A.percent(r.delta, r.base) : r.test ? "new" : "-";
          tr.append(
            num(A.formatValue(r.base, type.unit)),
            num(A.formatValue(r.test, type.unit)),
            num(sign + A.formatValue(r.delta, type.unit), cls),
            num(pct, cls)
          );
        } else {
          tr.append(
            num(A.formatValue(r.self, type.unit)),
            num(A.percent(r.self, all)),
            num(A.formatValue(r.total, type.unit)),
            num(A.percent(r.total, all))
          );
        }
        tr.addEventListener("click", () => {
          this.sandwichName = r.nameId;
          this.showTab("sandwich");
        });
        body.push(tr);
      }
      $("top-body").replaceChildren(...body);
      const note = $("top-note");
      note.textContent =
        rows.length > limit ? "showing the first " + limit + " of " + rows.length + " functions" : rows.length + " functions";
      if (this.diff && (folded.length || this.topUnfold)) {
        const toggle = el("a", { href: "#", id: "top-unfold" }, this.topUnfold ? "fold them" : "show them");
        toggle.addEventListener("click", (e) => {
          e.preventDefault();
          this.topUnfold = !this.topUnfold;
          this.renderTop();
        });
        const what = this.topUnfold
          ? "; callers whose change is all their one callee's are shown ("
          : "; " + folded.length + " callers whose change is all their one callee's are folded into it (";
        note.append(what, toggle, ")");
      }
    }

    // Wrappers in a differential table: a function with no change of its own whose calls
    // all go to one other function with the same change (`<module>`, `_call_impl`,
    // `forward`... above the one op that changed) tells nothing that callee does not. Each
    // gets `into` (the row it folds into, following chains) and that row `wrappers`.
    foldWrapperRows(rows) {
      const { base, test } = this.diff;
      const tree = this.tree;
      const nNames = tree.frames.strings.length;
      const onlyChild = new Int32Array(nNames).fill(-1); // -1 none yet, -2 several
      const selfDelta = new Float64Array(nNames);
      const baseTotal = tree.totals(base);
      const testTotal = tree.totals(test);
      for (let i = 1; i < tree.n; i++) {
        if (baseTotal[i] === 0 && testTotal[i] === 0) continue; // no cost in either
        const nm = tree.nameId(i);
        selfDelta[nm] += tree.self[test][i] - tree.self[base][i];
        const p = tree.parent[i];
        if (p <= 0) continue;
        const pn = tree.nameId(p);
        if (pn === nm) continue; // recursion
        if (onlyChild[pn] === -1) onlyChild[pn] = nm;
        else if (onlyChild[pn] !== nm) onlyChild[pn] = -2;
      }
      const byName = new Map(rows.map((r) => [r.nameId, r]));
      const same = (a, b) => Math.abs(a - b) <= 1e-9 * Math.max(Math.abs(a), Math.abs(b));
      const next = (r) => {
        const c = onlyChild[r.nameId];
        const child = c >= 0 ? byName.get(c) : undefined;
        const passes = r.delta !== 0 && same(selfDelta[r.nameId], 0) && child && same(child.delta, r.delta);
        return passes ? child : undefined;
      };
      for (const r of rows) {
        let target = next(r);
        for (let hops = 0; target && hops < nNames; hops++) {
          const further = next(target);
          if (!further) break;
          target = further;
        }
        if (target && target !== r) {
          r.into = target;
          (target.wrappers = target.wrappers || []).push(r);
        }
      }
      for (const r of rows) if (r.wrappers) r.wrappers.sort((a, b) => b.base + b.test - (a.base + a.test));
    }

    // Base and test totals per function (recursion counted once in each).
    topDiffRows() {
      const { base, test } = this.diff;
      const byName = new Map();
      for (const r of A.topFunctions(this.tree, base)) {
        byName.set(r.nameId, { nameId: r.nameId, frame: r.frame, base: r.total, test: 0 });
      }
      for (const r of A.topFunctions(this.tree, test)) {
        const row = byName.get(r.nameId);
        if (row) row.test = r.total;
        else byName.set(r.nameId, { nameId: r.nameId, frame: r.frame, base: 0, test: r.total });
      }
      const rows = [...byName.values()];
      for (const r of rows) {
        r.delta = r.test - r.base;
        // New functions rank above every finite change; vanished ones are -100%.
        r.pct = r.base ? r.delta / r.base : r.test ? Infinity : 0;
      }
      this.foldWrapperRows(rows);
      return rows;
    }

    // Names sort by their order in the string table (numbers in names as numbers); a
    // column of changes also sorts by size ("abs"), the largest change first either way.
    sortTop(rows) {
      const { key, dir } = this.topSort;
      if (key === "name") {
        rows.sort((a, b) => (dir === "desc" ? b.nameId - a.nameId : a.nameId - b.nameId));
        return;
      }
      if (dir === "abs") {
        rows.sort((a, b) => Math.abs(b[key]) - Math.abs(a[key]) || a.nameId - b.nameId);
        return;
      }
      const sign = dir === "desc" ? -1 : 1;
      rows.sort((a, b) => sign * (a[key] - b[key]) || a.nameId - b.nameId);
    }

    // The next sort after a click on column `key`: a new column starts descending (names
    // ascending, changes by size); a second click turns the order around.
    nextTopSort(key) {
      const s = this.topSort;
      const changes = key === "delta" || key === "pct";
      if (s.key !== key) return { key, dir: key === "name" ? "asc" : changes ? "abs" : "desc" };
      if (changes) return { key, dir: s.dir === "abs" ? "desc" : s.dir === "desc" ? "asc" : "abs" };
      return { key, dir: s.dir === "desc" ? "asc" : "desc" };
    }

    // The table's columns in a differential graph: each input's total and the change.
    diffTableHead() {
      const names = this.diff.names || {};
      const head = (key, text, title) => el("th", { "data-key": key, class: key === "name" ? "" : "num", title }, text);
      const tr = el("tr");
      tr.append(
        head("name", "Function"),
        head("base", names.base ? "Base: " + names.base : "Base", "total in the base profile"),
        head("test", names.test ? "Test: " + names.test : "Test", "total in the test profile"),
        head("delta", "Delta", "test - base"),
        head("pct", "Delta %", "(test - base) / base")
      );
      document.querySelector("#top-table thead").replaceChildren(tr);
    }

    renderSandwich() {
      const nm = this.sandwichName;
      const empty = nm < 0;
      $("sw-empty").hidden = !empty;
      $("sw-body").hidden = empty;
      if (empty) return;
      const name = this.frames.strings[nm];
      $("sw-title").textContent = name.replace(/_\[[kjiw]\]$/, "");
      const mask = A.frameMask(this.frames, (f) => this.frames.nameId[f] === nm);
      const callers = A.callersOf(this.tree, mask, name);
      const callees = A.calleesOf(this.tree, mask, name);
      for (const [v, tree] of [[this.swCallers, callers], [this.swCallees, callees]]) {
        v.setTree(tree, this.metric);
        v.mask = this.searchMask;
        v.draw();
      }
      const t = this.metric;
      const type = this.types[t];
      const all = this.tree.totals(t)[0];
      const tot = callees.totals(t)[0];
      const self = callees.self[t][0];
      $("sw-values").textContent =
        "total " + this.fmt(tot, type) + " (" + A.percent(tot, all) + "), self " +
        this.fmt(self, type) + " (" + A.percent(self, all) + ")";
    }

    // -- wiring -----------------------------------------------------------------------

    bindControls() {
      const metric = $("metric");
      // A metric with no data (gpu-time of a CPU-only run) is not offered, unless shown.
      this.types.forEach((type, t) => {
        if (type.total === 0 && t !== this.metric) return;
        metric.append(el("option", { value: String(t) }, this.metricLabel(type)));
      });
      metric.value = String(this.metric);
      metric.addEventListener("change", () => this.setMetric(Number(metric.value)));
      if (metric.options.length < 2 || this.diff) $("metric-box").hidden = true;

      const mode = $("colormode");
      mode.addEventListener("change", () => {
        this.colorMode = mode.value;
        this.view.draw();
        if (this.tab === "sandwich") this.renderSandwich();
      });

      $("reset").addEventListener("click", () => this.resetZoom());
      $("invert").addEventListener("click", () => {
        this.view.inverted = !this.view.inverted;
        this.updateInvertButton();
        this.view.draw();
      });
      let timer = 0;
      $("search-case").addEventListener("click", () => this.setIgnoreCase(!this.ignoreCase));
      $("search").addEventListener("input", () => {
        clearTimeout(timer);
        timer = setTimeout(() => this.setSearch($("search").value), 120);
      });
      $("search").addEventListener("keydown", (e) => {
        if (e.key === "Enter") {
          clearTimeout(timer);
          this.setSearch($("search").value);
        }
      });
      for (const b of document.querySelectorAll(".tabs button")) {
        b.addEventListener("click", () => this.showTab(b.dataset.tab));
      }
      if (this.diff) this.diffTableHead();
      for (const th of document.querySelectorAll("#top-table th[data-key]")) {
        th.addEventListener("click", () => {
          this.topSort = this.nextTopSort(th.dataset.key);
          this.renderTop();
        });
      }
      for (const b of document.querySelectorAll("#menu button[data-act]")) {
        b.addEventListener("click", () => this.menuAction(b.dataset.act));
      }
      document.addEventListener("click", (e) => {
        if (!$("menu").contains(e.target)) this.closeMenu();
      });
      document.addEventListener("keydown", (e) => {
        if (e.key === "Escape") {
          if (!$("menu").hidden) this.closeMenu();
          else if (document.activeElement === $("search") && $("search").value) {
            $("search").value = "";
            this.setSearch("");
          } else this.resetZoom();
        } else if (e.key === "/" && document.activeElement !== $("search")) {
          e.preventDefault();
          $("search").focus();
        }
      });
      // The graph scrolls inside its box, so the toolbar stays in view over deep stacks.
      const fit = () => {
        const box = $("flame-box");
        const top = box.getBoundingClientRect().top + window.scrollY;
        box.style.maxHeight = Math.max(240, window.innerHeight - top - 12) + "px";
      };
      fit();
      window.addEventListener("resize", fit);
      const resize = new ResizeObserver(() => {
        if (this.tab === "sandwich") {
          this.swCallers.requestDraw();
          this.swCallees.requestDraw();
        } else this.view.requestDraw();
      });
      resize.observe($("flame-box"));
      this.tab = "flame";
    }
  }

  // Start-up: decode, build, first draw. `ready` resolves once the graph is on the canvas.
  A.ready = (async function () {
    const header = JSON.parse($("aiflame-header").textContent);
    const data = await A.decode(header, $("aiflame-data").textContent);
    performance.mark("aiflame-decoded");
    const app = (A.app = new App(data));
    performance.mark("aiflame-first-draw");
    $("loading").hidden = true;
    A.test = {
      app,
      find: (name) => app.tree.find(name),
      rect: (i, view) => {
        const v = view || app.view;
        const r = v.rectOf(i);
        if (!r) return null;
        const b = v.canvas.getBoundingClientRect();
        return { x: b.left + r.x, y: b.top + r.y, w: r.w, h: r.h };
      },
      color: (i) => app.colorOf(app.tree, i),
      pixel: (x, y, view) => {
        const v = view || app.view;
        const b = v.canvas.getBoundingClientRect();
        const dpr = window.devicePixelRatio || 1;
        const p = v.ctx.getImageData(Math.round((x - b.left) * dpr), Math.round((y - b.top) * dpr), 1, 1).data;
        return [p[0], p[1], p[2]];
      },
    };
    return app;
  })().catch((err) => {
    const box = $("loading");
    box.hidden = false;
    box.textContent = "Could not open this profile: " + err;
    throw err;
  });
})((window.aiflame = window.aiflame || {}));
