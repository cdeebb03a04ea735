// Deep links: the URL fragment sets the metric, a search, focus filters and a zoom, so a
// report can link straight to the stack it talks about. Parameters (URL-encoded, any
// order; `path` and `focus` may repeat):
//   #metric=wall-time          the sample type shown
//   &search=^cudaStreamSync    highlight frames whose name matches (a regex: in lower case,
//                              or after "(?i)", it ignores case)
//   &case=i                    every search ignores case (the "Aa" button)
//   &focus=aten::item          keep only the callees of frames with this name (a filter)
//   &path=main&path=step&...   zoom to the node reached from the root through these names
// A path that is only partly in the graph zooms to its deepest node that is, and says so.
(function (A) {
  "use strict";

  // The child of node i named `name`, or -1: children of i are i + 1, end[i + 1], ...
  function childNamed(tree, i, name) {
    for (let c = i + 1; c < tree.end[i]; c = tree.end[c]) {
      if (tree.nameOf(c) === name) return c;
    }
    return -1;
  }

  // The node reached through `names` from the root, and how many names matched. The
  // root's own name may lead the path or not.
  function nodeAt(tree, names) {
    let i = 0;
    let matched = 0;
    for (const name of names) {
      if (matched === 0 && i === 0 && name === tree.nameOf(0)) continue;
      const c = childNamed(tree, i, name);
      if (c < 0) break;
      i = c;
      matched++;
    }
    return { node: i, matched };
  }

  // Former metric names that links may still carry (the model's METRIC_ALIASES).
  const METRIC_ALIASES = { "cpu-time": "wall-time" };

  function parse(hash) {
    const p = new URLSearchParams(hash.replace(/^#/, ""));
    return {
      metric: p.get("metric"),
      search: p.get("search"),
      ignoreCase: p.get("case") === "i",
      focus: p.getAll("focus"),
      path: p.getAll("path"),
    };
  }

  // Sets the page to what `hash` asks, replacing what an earlier fragment set.
  function apply(app, hash) {
    if (!hash || hash === "#") return null;
    const want = parse(hash);
    const status = { metric: null, search: null, focus: [], path: [], matched: 0, node: 0 };
    if (want.metric) {
      const name = METRIC_ALIASES[want.metric] || want.metric;
      let t = app.types.findIndex((type) => type.name === want.metric);
      if (t < 0) t = app.types.findIndex((type) => type.name === name);
      const offered = document.querySelector('#metric option[value="' + t + '"]');
      if (t >= 0 && offered && !app.diff) {
        document.getElementById("metric").value = String(t);
        app.setMetric(t);
        status.metric = want.metric;
      }
    }
    if (want.focus.length || app.filters.length) {
      app.filters = [];
      const frames = app.frames;
      for (const name of want.focus) {
        for (let f = 0; f < frames.count; f++) {
          if (frames.name(f) === name) {
            app.filters.push({ op: "focus", nameId: frames.nameId[f], name });
            status.focus.push(name);
            break;
          }
        }
      }
      app.applyFilters();
    }
    document.getElementById("search").value = want.search || "";
    app.ignoreCase = want.ignoreCase;
    document.getElementById("search-case").setAttribute("aria-pressed", String(want.ignoreCase));
    app.setSearch(want.search || "");
    status.search = want.search;
    app.zoomTo(0);
    if (want.path.length) {
      const hit = nodeAt(app.tree, want.path);
      status.path = want.path;
      status.matched = hit.matched;
      status.node = hit.node;
      app.zoomTo(hit.node);
      if (hit.matched < want.path.length) {
        document.getElementById("search-status").textContent =
          "(link: " + hit.matched + " of " + want.path.length + " frames of its stack found)";
      }
    }
    return status;
  }

  A.fragment = { parse, nodeAt, apply };
  // Applied once the graph is drawn, and again when the fragment changes (a report's
  // other links open the same page).
  A.fragmentApplied = A.ready.then((app) => {
    window.addEventListener("hashchange", () => {
      A.fragmentStatus = apply(app, location.hash);
    });
    return (A.fragmentStatus = apply(app, location.hash));
  });
})((window.aiflame = window.aiflame || {}));
