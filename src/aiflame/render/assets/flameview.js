// A flame graph on a <canvas>: layout of the visible nodes, drawing, hit testing.
//
// Only nodes at least MIN_WIDTH css pixels wide are drawn; since a child is never wider
// than its parent, a narrow node's whole subtree is skipped in one step (preorder ranges),
// so a redraw costs the number of visible nodes, not the size of the tree. Zooming in makes
// the narrow nodes wide enough to appear: the data always holds every node.
//
// Folding: on the unzoomed graph, a chain of frames at the bottom that never branches
// (a launcher: <module>, multiprocessing's spawn_main, a harness's run...) takes one row
// instead of one per frame, so the model above it is on the first screen. A click on that
// row unfolds it; zooming shows every frame as usual.
(function (A) {
  "use strict";

  const MIN_WIDTH = 0.5;
  const FOLD_MIN = 4; // fold chains of at least this many frames
  const ROW = 18;
  const PAD = 4;
  const FONT = '12px "DejaVu Sans Mono", Menlo, Consolas, "Liberation Mono", monospace';
  const FOLD_COLOR = "#d5dae3";

  class FlameView {
    // opts: onHover(node, event), onClick(node, event), onContext(node, event)
    constructor(canvas, opts) {
      this.canvas = canvas;
      this.ctx = canvas.getContext("2d", { alpha: false });
      this.opts = opts || {};
      this.tree = null;
      this.metric = 0;
      this.zoom = 0;
      this.inverted = false;
      this.mask = null; // search matches (per frame), drawn in SEARCH_COLOR
      this.hover = -1;
      this.colorOf = () => "#ccc";
      this.background = "#fbfbf8"; // darker in diff pages, where unchanged frames are white
      this.visible = new Int32Array(4096);
      this.nVisible = 0;
      this.rows = 1;
      this.minRows = 1;
      this.cssWidth = 0;
      this.pending = false;
      this.foldChains = !!this.opts.foldChains;
      // Folded chains, by head: {head, members (node ids, by depth - 1), count, last: the
      // node the chain leads to, drawn on the row above it}.
      this.folds = [];
      this.foldByHead = new Map();
      this.ctx.font = FONT;
      this.charWidth = this.ctx.measureText("MMMMMMMMMM").width / 10 || 7.2;
      // The hover outline lives on a transparent canvas on top, so moving the pointer
      // redraws one rectangle, not the graph.
      this.overlay = document.createElement("canvas");
      this.overlay.className = "overlay";
      canvas.after(this.overlay);
      this.octx = this.overlay.getContext("2d");
      canvas.addEventListener("mousemove", (e) => this._onMove(e));
      canvas.addEventListener("mouseleave", (e) => this._setHover(-1, e));
      canvas.addEventListener("click", (e) => {
        const i = this.nodeAtEvent(e);
        if (this.opts.onClick) this.opts.onClick(i, e);
      });
      canvas.addEventListener("contextmenu", (e) => {
        const i = this.nodeAtEvent(e);
        if (i >= 0 && this.opts.onContext) {
          e.preventDefault();
          this.opts.onContext(i, e);
        }
      });
    }

    setTree(tree, metric) {
      this.tree = tree;
      this.metric = metric;
      this.zoom = 0;
      this.hover = -1;
      this.minRows = 1;
      this._setFolds([]);
    }

    // The chains to fold on the unzoomed graph: from each root's child, the frames that
    // have one visible child and no visible self value of their own.
    _findFolds(tot, scale) {
      const tree = this.tree;
      const folds = [];
      if (!this.foldChains || this.zoom !== 0) return folds;
      for (let c = 1; c < tree.end[0]; c = tree.end[c]) {
        if (tot[c] * scale < MIN_WIDTH) continue;
        const members = [];
        let cur = c;
        for (;;) {
          let only = -1;
          let rest = tot[cur];
          for (let k = cur + 1; k < tree.end[cur]; k = tree.end[k]) {
            if (tot[k] * scale < MIN_WIDTH) continue;
            if (only >= 0) {
              only = -2; // a branch: the chain ends here
              break;
            }
            only = k;
          }
          if (only < 0) break;
          rest -= tot[only];
          if (rest * scale >= MIN_WIDTH) break; // its own time shows: not just a link
          members.push(cur);
          cur = only;
        }
        if (members.length >= FOLD_MIN) folds.push({ head: c, last: cur, members, count: members.length });
      }
      return folds;
    }

    // The fold drawn as node i's row (i its head), or null.
    foldAt(i) {
      return this.foldByHead.get(i) || null;
    }

    // Display row of node i (0 = the root's row): its depth, less the rows folded below it;
    // -1 for a fold's member other than its head (drawn as the head), -2 for a node beside
    // a fold's chain (too thin to see).
    _row(i) {
      const tree = this.tree;
      const folds = this.folds;
      let lo = 0;
      let hi = folds.length - 1; // the last fold whose head is at or before i
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (folds[mid].head <= i) lo = mid;
        else hi = mid - 1;
      }
      const f = folds[lo];
      const d = tree.depth[i];
      if (!f || i < f.head || i >= tree.end[f.head]) return d;
      if (d <= f.count) return i === f.head ? 1 : f.members[d - 1] === i ? -1 : -2;
      return i >= f.last && i < tree.end[f.last] ? d - f.count + 1 : -2;
    }

    _setFolds(folds) {
      this.folds = folds; // in preorder of their heads
      this.foldByHead = new Map(folds.map((f) => [f.head, f]));
    }

    unfold() {
      this.foldChains = false;
      this._setFolds([]);
    }

    setZoom(i) {
      this.zoom = i >= 0 && i < this.tree.n ? i : 0;
    }

    // The nodes to draw: the zoomed node's ancestors (full width), then its subtree.
    _layout() {
      const tree = this.tree;
      const tot = tree.totals(this.metric);
      const z = this.zoom;
      const scale = tot[z] > 0 ? this.cssWidth / tot[z] : 0;
      let vis = this.visible;
      let k = 0;
      let maxDepth = tree.depth[z];
      for (let v = tree.parent[z]; v >= 0; v = tree.parent[v]) vis[k++] = v;
      this._setFolds(this._findFolds(tot, scale));
      const folded = this.folds.length > 0;
      const end = tree.end[z];
      for (let i = z; i < end; ) {
        if (tot[i] * scale < MIN_WIDTH) {
          i = tree.end[i];
          continue;
        }
        let row = tree.depth[i];
        if (folded) {
          row = this._row(i);
          if (row === -2) {
            i = tree.end[i]; // beside a fold's chain, too thin to see
            continue;
          }
          if (row === -1) {
            i++; // inside a fold: drawn as its head
            continue;
          }
        }
        if (k === vis.length) {
          const grown = new Int32Array(vis.length * 2);
          grown.set(vis);
          vis = this.visible = grown;
        }
        vis[k++] = i;
        if (row > maxDepth) maxDepth = row;
        i++;
      }
      this.nVisible = k;
      this.scale = scale;
      // The canvas only grows while one tree is shown: resizing reallocates its backing
      // store, which costs more than the whole redraw of a zoom.
      this.rows = Math.max(maxDepth + 1, this.minRows);
      this.minRows = this.rows;
    }

    // Geometry of node i in css pixels relative to the canvas, or null if not drawn.
    rectOf(i) {
      const tree = this.tree;
      const z = this.zoom;
      const x = tree.xStart(this.metric);
      const tot = tree.totals(this.metric);
      let left, width;
      if (i === z || tree.end[i] > z && i < z) {
        left = 0; // z itself or one of its ancestors
        width = this.cssWidth;
      } else if (i > z && i < tree.end[z]) {
        left = (x[i] - x[z]) * this.scale;
        width = tot[i] * this.scale;
      } else return null;
      if (width < MIN_WIDTH) return null;
      const d = this.folds.length ? this._row(i) : tree.depth[i];
      if (d < 0) return null;
      const top = this.inverted ? PAD + d * ROW : PAD + (this.rows - 1 - d) * ROW;
      return { x: left, y: top, w: width, h: ROW - 1 };
    }

    draw() {
      if (!this.tree) return;
      const canvas = this.canvas;
      const dpr = window.devicePixelRatio || 1;
      this.cssWidth = Math.max(1, canvas.parentElement.clientWidth);
      this._layout();
      const cssHeight = this.rows * ROW + 2 * PAD;
      const ctx = this.ctx;
      if (canvas.width !== Math.round(this.cssWidth * dpr) || canvas.height !== Math.round(cssHeight * dpr)) {
        canvas.width = Math.round(this.cssWidth * dpr);
        canvas.height = Math.round(cssHeight * dpr);
        canvas.style.width = this.cssWidth + "px";
        canvas.style.height = cssHeight + "px";
        // A resize resets the context's state.
        ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
        ctx.font = FONT;
        ctx.textBaseline = "middle";
      }
      // The box scrolls when the graph is taller than the window: keep the root in sight
      // (the bottom of a flame graph, the top of an icicle) when the shape changes.
      const shape = this.rows + (this.inverted ? "i" : "f");
      if (shape !== this.shape) {
        this.shape = shape;
        const box = canvas.parentElement;
        box.scrollTop = this.inverted ? 0 : box.scrollHeight;
      }
      ctx.fillStyle = this.background;
      ctx.fillRect(0, 0, this.cssWidth, cssHeight);
      // Boxes first, then all labels with one fill style: style changes are what cost.
      const tree = this.tree;
      const mask = this.mask;
      const cw = this.charWidth;
      const x = tree.xStart(this.metric);
      const tot = tree.totals(this.metric);
      const z = this.zoom;
      const x0 = x[z];
      const scale = this.scale;
      const top = (d) => (this.inverted ? PAD + d * ROW : PAD + (this.rows - 1 - d) * ROW);
      const labels = [];
      const lightLabels = [];
      const folded = this.folds.length > 0;
      let style = "";
      for (let k = 0; k < this.nVisible; k++) {
        const i = this.visible[k];
        const left = i < z ? 0 : (x[i] - x0) * scale; // ancestors of z span the width
        const w = i < z ? this.cssWidth : tot[i] * scale;
        const y = top(folded ? this._row(i) : tree.depth[i]);
        const fold = folded ? this.foldAt(i) : null;
        let color;
        if (fold) color = mask && fold.members.some((m) => mask[tree.frame[m]]) ? A.SEARCH_COLOR : FOLD_COLOR;
        else color = mask && mask[tree.frame[i]] ? A.SEARCH_COLOR : this.colorOf(i);
        if (color !== style) ctx.fillStyle = style = color;
        ctx.globalAlpha = i < z ? 0.55 : 1; // the zoomed node's callers: context, faded
        ctx.fillRect(left, y, w > 3 ? w - 1 : w, ROW - 1);
        if (w >= 3 * cw + 6) (A.labelInk(color) === A.DARK_INK ? labels : lightLabels).push(i, left, y, w);
      }
      ctx.globalAlpha = 1;
      // Two inks, each set once: white only on boxes too dark for the usual one.
      for (const [list, ink] of [[labels, A.DARK_INK], [lightLabels, "#fff"]]) {
        ctx.fillStyle = ink;
        for (let k = 0; k < list.length; k += 4) {
          const text = this._label(list[k], list[k + 3]);
          ctx.fillText(text, list[k + 1] + 3, list[k + 2] + (ROW - 1) / 2 + 0.5);
        }
      }
      const ov = this.overlay;
      if (ov.width !== canvas.width || ov.height !== canvas.height) {
        ov.width = canvas.width;
        ov.height = canvas.height;
        ov.style.width = canvas.style.width;
        ov.style.height = canvas.style.height;
        this.octx.setTransform(dpr, 0, 0, dpr, 0, 0);
      }
      this.drawHover();
    }

    // The text drawn in node i's box of width w (css px).
    _label(i, w) {
      const room = Math.floor((w - 6) / this.charWidth);
      const fold = this.folds.length ? this.foldAt(i) : null;
      return fold ? this.foldLabel(fold, room) : this.tree.fitLabelOf(i, room);
    }

    // The label drawn on node i now ("" if none: not drawn, or too narrow for one).
    labelText(i) {
      const r = this.rectOf(i);
      if (!r || r.w < 3 * this.charWidth + 6) return "";
      return this._label(i, r.w);
    }

    // "12 frames: <module> › … › run_on_input", as much as fits in `room` characters.
    foldLabel(fold, room) {
      const tree = this.tree;
      const first = tree.labelOf(fold.head);
      const last = tree.labelOf(fold.members[fold.count - 1]);
      const text = "▸ " + fold.count + " frames: " + first + " › … › " + last;
      return A.elideMiddle(text, room);
    }

    drawHover() {
      const ctx = this.octx;
      ctx.clearRect(0, 0, this.cssWidth, this.rows * ROW + 2 * PAD);
      const r = this.hover >= 0 ? this.rectOf(this.hover) : null;
      if (!r) return;
      ctx.strokeStyle = "#000";
      ctx.lineWidth = 1.5;
      ctx.strokeRect(r.x + 0.75, r.y + 0.75, Math.max(r.w - 2.5, 1), r.h - 1.5);
    }

    // Coalesce redraws (resizes) into one per animation frame.
    requestDraw() {
      if (this.pending) return;
      this.pending = true;
      requestAnimationFrame(() => {
        this.pending = false;
        this.draw();
      });
    }

    // The node under css point (px, py) of the canvas, or -1.
    nodeAt(px, py) {
      const tree = this.tree;
      if (!tree || px < 0 || px >= this.cssWidth) return -1;
      const row = Math.floor((py - PAD) / ROW);
      if (row < 0 || row >= this.rows) return -1;
      const d = this.inverted ? row : this.rows - 1 - row;
      const z = this.zoom;
      if (d < tree.depth[z]) {
        let v = z;
        while (tree.depth[v] > d) v = tree.parent[v];
        return v;
      }
      const x = tree.xStart(this.metric);
      const tot = tree.totals(this.metric);
      const value = x[z] + px / this.scale;
      let cur = z;
      const rowOf = this.folds.length ? (i) => this._row(i) : (i) => tree.depth[i];
      while (rowOf(cur) < d) {
        let next = -1;
        for (let c = cur + 1; c < tree.end[cur]; c = tree.end[c]) {
          if (value >= x[c] && value < x[c] + tot[c]) {
            next = c;
            break;
          }
        }
        if (next < 0) return -1;
        cur = next;
      }
      return this.rectOf(cur) ? cur : -1;
    }

    nodeAtEvent(e) {
      const b = this.canvas.getBoundingClientRect();
      return this.nodeAt(e.clientX - b.left, e.clientY - b.top);
    }

    _onMove(e) {
      this._setHover(this.nodeAtEvent(e), e);
    }

    _setHover(i, e) {
      if (i !== this.hover) {
        this.hover = i;
        this.drawHover();
      }
      if (this.opts.onHover) this.opts.onHover(i, e);
    }
  }

  A.FlameView = FlameView;
})((window.aiflame = window.aiflame || {}));
