// The call tree as flat typed arrays in DFS preorder, and the views derived from it.
//
// Preorder makes every subtree a contiguous range [i, end[i]): drawing can skip a whole
// subtree that is too narrow in one step, children are walked with c = end[c], and totals
// are one reverse pass. Nothing here allocates per node beyond typed arrays, so trees of
// millions of nodes stay fast.
(function (A) {
  "use strict";

  class Tree {
    // frame/depth: per node (node 0 is the root); self: one Float64Array per sample type.
    constructor(frames, frame, depth, self, rootLabel, maxDepth) {
      this.frames = frames; // the shared frame table (see A.FrameTable)
      this.frame = frame;
      this.depth = depth;
      this.self = self;
      this.rootLabel = rootLabel || null; // shown instead of the root frame's own name
      const n = (this.n = frame.length);
      if (maxDepth === undefined) {
        maxDepth = 0;
        for (let i = 0; i < n; i++) if (depth[i] > maxDepth) maxDepth = depth[i];
      }
      this.maxDepth = maxDepth;
      // One pass with the open path: a node's parent is the open node one level up, and
      // a node's subtree ends where the next node at its depth or above starts.
      const parent = (this.parent = new Int32Array(n));
      const end = (this.end = new Int32Array(n));
      const path = new Int32Array(maxDepth + 2);
      let top = 0; // depth of the deepest open node
      parent[0] = -1;
      for (let i = 1; i < n; i++) {
        const d = depth[i];
        for (; top >= d; top--) end[path[top]] = i;
        parent[i] = path[d - 1];
        path[d] = i;
        top = d;
      }
      for (; top >= 0; top--) end[path[top]] = n;
      this._totals = new Map();
      this._layout = new Map();
    }

    // Total (self + descendants) of sample type t, per node; cached.
    totals(t) {
      let tot = this._totals.get(t);
      if (tot) return tot;
      // Reverse preorder: when a node is reached its children are done, and their sum is
      // waiting in acc[depth + 1]. Sequential access only, unlike tot[parent[i]] += ...
      const self = this.self[t];
      const depth = this.depth;
      const acc = new Float64Array(this.maxDepth + 2);
      tot = new Float64Array(this.n);
      for (let i = this.n - 1; i >= 0; i--) {
        const d = depth[i];
        const v = self[i] + acc[d + 1];
        acc[d + 1] = 0;
        acc[d] += v;
        tot[i] = v;
      }
      this._totals.set(t, tot);
      return tot;
    }

    // Left edge of every node in value units: children are packed from their parent's
    // left edge in preorder (sorted by name), leaving the parent's self time on the right.
    xStart(t) {
      let x = this._layout.get(t);
      if (x) return x;
      const tot = this.totals(t);
      const n = this.n;
      x = new Float64Array(n);
      const next = new Float64Array(this.maxDepth + 2);
      const depth = this.depth;
      for (let i = 1; i < n; i++) {
        const d = depth[i];
        x[i] = next[d];
        next[d] += Math.max(0, tot[i]);
        next[d + 1] = x[i];
      }
      this._layout.set(t, x);
      return x;
    }

    // The full name (search, filters, copy) and the label drawn for it.
    nameOf(i) {
      if (i === 0 && this.rootLabel !== null) return this.rootLabel;
      return this.frames.name(this.frame[i]);
    }
    labelOf(i) {
      if (i === 0 && this.rootLabel !== null) return this.rootLabel;
      return this.frames.label(this.frame[i]);
    }
    // The label shortened to `room` characters (see A.fitLabel).
    fitLabelOf(i, room) {
      if (i === 0 && this.rootLabel !== null) return A.fitLabel(this.rootLabel, room);
      return this.frames.fitLabel(this.frame[i], room);
    }

    nameId(i) {
      return this.frames.nameId[this.frame[i]];
    }

    // Path from the root to i (inclusive).
    pathTo(i) {
      const out = [];
      for (let v = i; v >= 0; v = this.parent[v]) out.push(v);
      return out.reverse();
    }

    // First node (in preorder) whose name is `name`, or -1.
    find(name) {
      for (let i = 0; i < this.n; i++) if (this.nameOf(i) === name) return i;
      return -1;
    }
  }

  const ANNOTATION = /_\[[kjiw]\]$/;

  // Frames shared by every tree of a page: columns plus the string table.
  class FrameTable {
    constructor(data) {
      this.nameId = data.frameName;
      this.kind = data.frameKind;
      this.file = data.frameFile;
      this.line = data.frameLine;
      this.strings = data.strings;
      this.rootFrame = data.header.rootFrame;
      this.rootName = data.header.rootName;
      this.kindNames = data.header.kinds;
      this.count = this.nameId.length;
      this.labels = new Array(this.count + 1); // drawn names, made on first use
      this.parts = new Array(this.count + 1); // their parts for shortening (A.labelParts)
    }
    name(f) {
      return f === this.rootFrame ? this.rootName : this.strings[this.nameId[f]];
    }
    // The name as drawn: without FlameGraph's kind annotations (_[k] kernel, _[j] JIT,
    // _[i] inlined, _[w] waker), as flamegraph.pl shows it; the colour carries the kind.
    label(f) {
      let l = this.labels[f];
      if (l === undefined) l = this.labels[f] = this.name(f).replace(ANNOTATION, "");
      return l;
    }
    fitLabel(f, room) {
      const l = this.label(f);
      if (l.length <= room) return l;
      let p = this.parts[f];
      if (p === undefined) p = this.parts[f] = A.labelParts(l);
      return A.fitLabel(l, room, p);
    }
    kindSlug(f) {
      if (f === this.rootFrame) return "label";
      return this.kindNames[this.kind[f]] || "unknown";
    }
    location(f) {
      if (f === this.rootFrame || !this.file[f]) return "";
      const line = this.line[f];
      return this.strings[this.file[f]] + (line ? ":" + line : "");
    }
  }

  // Builds a merged tree from paths: child(parent, frame) returns the node reached from
  // `parent` through `frame`, creating it once. build() sorts children by frame id (frame
  // ids are in name order) and lays the result out in preorder like the page data.
  // Derived views of a multi-million-node tree go through here, so the columns are typed
  // arrays grown by doubling, and children are found by scanning a node's short list of
  // children (recently made nodes, so cache-friendly); only nodes with many children get a
  // Map. A global hash table of millions of entries was several times slower (cache and
  // TLB misses on every lookup).
  const SCAN = 8;

  class TreeBuilder {
    constructor(frames, nTypes, rootFrame, rootLabel, sizeHint) {
      this.frames = frames;
      this.nTypes = nTypes;
      this.rootLabel = rootLabel;
      this.m = 1;
      this.cap = 0;
      this.self = new Array(nTypes).fill(null);
      this._grow(Math.max(16, sizeHint || 16));
      this.parent[0] = -1;
      this.frame[0] = rootFrame;
      this.first[0] = -1;
      this.maps = new Map(); // node -> Map(frame -> child), for nodes with many children
    }
    _grow(cap) {
      const grow = (old, Type) => {
        const a = new Type(cap);
        if (old) a.set(old.subarray(0, this.m));
        return a;
      };
      this.parent = grow(this.parent, Int32Array);
      this.frame = grow(this.frame, Uint32Array);
      this.first = grow(this.first, Int32Array); // first child, -1 if none
      this.next = grow(this.next, Int32Array); // next sibling, -1 at the end
      this.kids = grow(this.kids, Int32Array); // number of children
      this.self = this.self.map((a) => grow(a, Float64Array));
      this.cap = cap;
    }
    child(p, f) {
      const big = this.kids[p] > SCAN ? this.maps.get(p) : null;
      if (big) {
        const id = big.get(f);
        if (id !== undefined) return id;
      } else {
        for (let c = this.first[p]; c !== -1; c = this.next[c]) if (this.frame[c] === f) return c;
      }
      if (this.m === this.cap) this._grow(2 * this.cap);
      const id = this.m++;
      this.parent[id] = p;
      this.frame[id] = f;
      this.first[id] = -1;
      this.next[id] = this.first[p];
      this.first[p] = id;
      const k = ++this.kids[p];
      if (big) big.set(f, id);
      else if (k > SCAN) {
        const map = new Map();
        for (let c = this.first[p]; c !== -1; c = this.next[c]) map.set(this.frame[c], c);
        this.maps.set(p, map);
      }
      return id;
    }
    addSelf(id, tree, i) {
      for (let t = 0; t < this.nTypes; t++) this.self[t][id] += tree.self[t][i];
    }
    addValues(id, values) {
      for (let t = 0; t < this.nTypes; t++) this.self[t][id] += values[t];
    }
    build() {
      const m = this.m;
      const parent = this.parent;
      const fr = this.frame;
      // Children lists in CSR form, each sorted by frame id.
      const start = new Int32Array(m + 1);
      for (let i = 1; i < m; i++) start[parent[i] + 1]++;
      for (let i = 0; i < m; i++) start[i + 1] += start[i];
      const kids = new Int32Array(Math.max(m - 1, 0));
      const fill = start.slice(0, m);
      for (let i = 1; i < m; i++) kids[fill[parent[i]]++] = i;
      for (let i = 0; i < m; i++) {
        if (start[i + 1] - start[i] > 1) {
          kids.subarray(start[i], start[i + 1]).sort((a, b) => fr[a] - fr[b]);
        }
      }
      // Iterative DFS; children pushed in reverse so the first one comes out first.
      const frame = new Uint32Array(m);
      const depth = new Uint32Array(m);
      const self = this.self.map(() => new Float64Array(m));
      const stack = new Int32Array(m);
      const stackDepth = new Int32Array(m);
      let sp = 0;
      let k = 0;
      stack[sp++] = 0;
      while (sp > 0) {
        const v = stack[--sp];
        const d = stackDepth[sp];
        frame[k] = fr[v];
        depth[k] = d;
        for (let t = 0; t < this.nTypes; t++) self[t][k] = this.self[t][v];
        k++;
        for (let c = start[v + 1] - 1; c >= start[v]; c--) {
          stack[sp] = kids[c];
          stackDepth[sp++] = d + 1;
        }
      }
      return new Tree(this.frames, frame, depth, self, this.rootLabel);
    }
  }

  // -- derived views ------------------------------------------------------------------

  // A per-frame 0/1 mask of the frames for which test(frame id) is true.
  function frameMask(frames, test) {
    const mask = new Uint8Array(frames.count + 1);
    for (let f = 0; f < frames.count; f++) if (test(f)) mask[f] = 1;
    return mask;
  }

  // The tree without the frames matched by `mask`: their children move up to their parent
  // (and merge with its other children of the same frame), their self values too.
  A.hideFrames = function (tree, mask) {
    const nT = tree.self.length;
    const b = new TreeBuilder(tree.frames, nT, tree.frame[0], tree.rootLabel, tree.n);
    const map = new Int32Array(tree.n);
    for (let i = 1; i < tree.n; i++) {
      const p = map[tree.parent[i]];
      map[i] = mask[tree.frame[i]] ? p : b.child(p, tree.frame[i]);
      b.addSelf(map[i], tree, i);
    }
    b.addSelf(0, tree, 0);
    return b.build();
  };

  // Everything called from the outermost occurrences of the masked frames, merged under
  // one root labelled `label` (the callee half of a sandwich, and "focus").
  A.calleesOf = function (tree, mask, label) {
    const nT = tree.self.length;
    let rootFrame = -1;
    const map = new Int32Array(tree.n).fill(-1);
    const b = new TreeBuilder(tree.frames, nT, 0, label);
    for (let i = 1; i < tree.n; i++) {
      const pm = map[tree.parent[i]];
      if (pm >= 0) map[i] = b.child(pm, tree.frame[i]);
      else if (mask[tree.frame[i]]) {
        map[i] = 0;
        if (rootFrame < 0) rootFrame = tree.frame[i];
      } else continue;
      b.addSelf(map[i], tree, i);
    }
    b.frame[0] = rootFrame < 0 ? tree.frame[0] : rootFrame;
    return b.build();
  };

  // The callers of the outermost occurrences of the masked frames, merged: the root is
  // the function, its children its direct callers, and so on up to the process roots.
  A.callersOf = function (tree, mask, label) {
    const nT = tree.self.length;
    const tots = [];
    for (let t = 0; t < nT; t++) tots.push(tree.totals(t));
    let rootFrame = -1;
    const b = new TreeBuilder(tree.frames, nT, 0, label);
    const vals = new Float64Array(nT);
    for (let i = 1; i < tree.n; i++) {
      if (!mask[tree.frame[i]]) continue;
      if (rootFrame < 0) rootFrame = tree.frame[i];
      let cur = 0;
      for (let u = tree.parent[i]; u > 0; u = tree.parent[u]) cur = b.child(cur, tree.frame[u]);
      for (let t = 0; t < nT; t++) vals[t] = tots[t][i];
      b.addValues(cur, vals);
      i = tree.end[i] - 1; // nested (recursive) occurrences are inside this one's total
    }
    b.frame[0] = rootFrame < 0 ? tree.frame[0] : rootFrame;
    return b.build();
  };

  // Sum of the totals of outermost matches: nested matches are inside their ancestor's
  // total already, so counting them again would exceed 100%.
  A.matchedTotal = function (tree, mask, t) {
    const tot = tree.totals(t);
    let sum = 0;
    for (let i = 1; i < tree.n; ) {
      if (mask[tree.frame[i]]) {
        sum += tot[i];
        i = tree.end[i];
      } else i++;
    }
    return sum;
  };

  // Per function name: self summed over all its nodes, total counted once per stack (only
  // at occurrences without an ancestor of the same name, so recursion is not counted twice).
  A.topFunctions = function (tree, t) {
    const tot = tree.totals(t);
    const self = tree.self[t];
    const nNames = tree.frames.strings.length + 1;
    const selfBy = new Float64Array(nNames);
    const totalBy = new Float64Array(nNames);
    const active = new Int32Array(nNames);
    const firstFrame = new Int32Array(nNames).fill(-1);
    const stackName = new Int32Array(tree.maxDepth + 2);
    const stackDepth = new Int32Array(tree.maxDepth + 2);
    let sp = 0;
    const rootName = nNames - 1; // the root is not a function
    for (let i = 1; i < tree.n; i++) {
      const d = tree.depth[i];
      while (sp > 0 && stackDepth[sp - 1] >= d) active[stackName[--sp]]--;
      const f = tree.frame[i];
      const nm = f === tree.frames.rootFrame ? rootName : tree.frames.nameId[f];
      selfBy[nm] += self[i];
      if (active[nm] === 0) totalBy[nm] += tot[i];
      if (firstFrame[nm] < 0) firstFrame[nm] = f;
      active[nm]++;
      stackName[sp] = nm;
      stackDepth[sp++] = d;
    }
    const rows = [];
    for (let nm = 0; nm < nNames - 1; nm++) {
      if (firstFrame[nm] >= 0 && (selfBy[nm] !== 0 || totalBy[nm] !== 0)) {
        rows.push({ nameId: nm, frame: firstFrame[nm], self: selfBy[nm], total: totalBy[nm] });
      }
    }
    return rows;
  };

  A.Tree = Tree;
  A.FrameTable = FrameTable;
  A.TreeBuilder = TreeBuilder;
  A.frameMask = frameMask;
})((window.aiflame = window.aiflame || {}));
