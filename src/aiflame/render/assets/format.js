// Units and colours.
(function (A) {
  "use strict";

  // Same rules as aiflame/render/units.py, so the page and the CLI print the same values.
  A.formatValue = function (value, unit) {
    const a = Math.abs(value);
    if (unit === "nanoseconds") {
      for (const [scale, suffix] of [[1e9, "s"], [1e6, "ms"], [1e3, "us"]]) {
        if (a >= scale) return (value / scale).toFixed(3) + " " + suffix;
      }
      return value.toFixed(0) + " ns";
    }
    if (unit === "bytes") {
      for (const [scale, suffix] of [[2 ** 30, "GiB"], [2 ** 20, "MiB"], [2 ** 10, "KiB"]]) {
        if (a >= scale) return (value / scale).toFixed(2) + " " + suffix;
      }
      return value.toFixed(0) + " B";
    }
    const text = grouped(value);
    return unit === "count" || !unit ? text : text + " " + unit;
  };

  // 1234567.5 -> "1,234,567.50" (toLocaleString would load ICU data at start-up).
  function grouped(value) {
    const fixed = Math.abs(value).toFixed(Number.isInteger(value) ? 0 : 2);
    const dot = fixed.indexOf(".");
    let int = dot < 0 ? fixed : fixed.slice(0, dot);
    const frac = dot < 0 ? "" : fixed.slice(dot);
    int = int.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return (value < 0 ? "-" : "") + int + frac;
  }

  // "1,234 samples" for counts; durations and sizes carry their own unit.
  A.formatWithName = function (value, type) {
    const text = A.formatValue(value, type.unit);
    return type.unit === "count" ? text + " " + type.name : text;
  };

  A.percent = function (part, whole) {
    if (!whole) return "0%";
    const p = (100 * part) / whole;
    return (Math.abs(p) >= 10 || p === 0 ? p.toFixed(1) : p.toFixed(2)) + "%";
  };

  // -- labels -------------------------------------------------------------------------

  // `text` in at most `room` characters, cut in the middle as speedscope does, so both the
  // start and the distinguishing end stay: "nn.Mod…Layer_10", "sm90_xmma…cublas". A number
  // at the end stays whole while there is room for it ("n…10", not "nn…0").
  const TRAILING_NUMBER = /\d+$/;
  A.elideMiddle = function (text, room) {
    if (text.length <= room) return text;
    if (room < 2) return room === 1 ? "…" : "";
    let head = Math.ceil((room - 1) / 2);
    const number = TRAILING_NUMBER.exec(text);
    if (number && room - 2 >= number[0].length) head = Math.min(head, room - 1 - number[0].length);
    const tail = room - 1 - head;
    return text.slice(0, head) + "…" + (tail ? text.slice(text.length - tail) : "");
  };

  // A frame's name split into what may give way first: a Python frame's location
  // "fn (pkg/file.py:12)", a C++ function's parameter list "kern<T>(int, float*)".
  const LOCATION = /^(.*\S) \(([^()]*(?::\d+|\.py))\)$/;
  function labelParts(text) {
    const m = LOCATION.exec(text);
    if (m) return { name: m[1], loc: m[2], params: "" };
    if (text.endsWith(")")) {
      let depth = 0;
      for (let i = text.length - 1; i > 0; i--) {
        const c = text[i];
        if (c === ")") depth++;
        else if (c === "(" && --depth === 0) {
          // "Memcpy DtoH (Device -> Pinned)" is not a signature: "(" must follow a name.
          if (text[i - 1] === " " || i < 2) break;
          const name = text.slice(0, i).replace(/^void /, "");
          return { name, loc: "", params: text.slice(i) };
        }
      }
    }
    return { name: text, loc: "", params: "" };
  }
  A.labelParts = labelParts;

  // The label drawn in a box of `room` characters: the whole text if it fits; else the
  // location is cut from its start (the file name and line stay), then dropped; a
  // signature's parameters go first; what remains is cut in the middle.
  A.fitLabel = function (text, room, parts) {
    if (text.length <= room) return text;
    const p = parts || labelParts(text);
    if (p.loc) {
      const locRoom = room - p.name.length - 3; // " (" + ")"
      if (locRoom >= 8) return p.name + " (" + elideStart(p.loc, locRoom) + ")";
    } else if (p.params) {
      const full = p.name + p.params;
      if (full.length <= room) return full;
    }
    const t = templateParts(p.name);
    return t ? fitTemplate(t.head, t.args, room) : A.elideMiddle(p.name, room);
  };

  // "ns::kern<args>" -> its head and its template arguments; null for other names.
  function templateParts(name) {
    if (!name.endsWith(">")) return null;
    let depth = 0;
    for (let i = name.length - 1; i > 0; i--) {
      const c = name[i];
      if (c === ">") depth++;
      else if (c === "<" && --depth === 0) {
        const head = name.slice(0, i);
        return /[A-Za-z0-9_]$/.test(head) ? { head, args: name.slice(i + 1, -1) } : null;
      }
    }
    return null;
  }

  // A templated kernel's label keeps what tells it apart from its siblings: the function's
  // own name (namespaces go first) and its arguments with lambdas written "λN" and the
  // qualifiers of names dropped but the one that says where a lambda is defined, each cut
  // in the middle when both do not fit: "par_ranged1d_kernel<update_halo_kernel::λ13>",
  // "par_r…ernel<update_h…nel::λ13>" where the middle cut of the whole name left "clove…1)]>".
  function fitTemplate(head, args, room) {
    const key = compactTemplateArgs(args);
    const cut = head.lastIndexOf("::");
    const shortHead = cut < 0 ? head : head.slice(cut + 2);
    for (const h of [head, shortHead]) if (h.length + key.length + 2 <= room) return h + "<" + key + ">";
    const avail = room - 2;
    if (avail < 12) return A.elideMiddle(isOneArgument(key) ? key : shortHead, room);
    const keyRoom = Math.min(key.length, avail - Math.min(shortHead.length, Math.max(4, Math.floor(avail * 0.4))));
    return A.elideMiddle(shortHead, avail - keyRoom) + "<" + A.elideMiddle(key, keyRoom) + ">";
  }

  // Where only one of the two fits, a template of one named argument is told apart by it
  // (CloverLeaf's "par_ranged2d_kernel<PdV_kernel::λ2>" reads "PdV_k…l::λ2").
  function isOneArgument(key) {
    if (key.includes("…") || !/[A-Za-z_]{3}/.test(key)) return false;
    let depth = 0;
    for (const c of key) {
      if ("<([{".includes(c)) depth++;
      else if (">)]}".includes(c)) depth--;
      else if (c === "," && depth === 0) return false;
    }
    return true;
  }

  function compactTemplateArgs(args) {
    return args
      .replace(/\[lambda\([^()]*\) \(instance (\d+)\)\]/g, "λ$1") // nvcc: [lambda(int) (instance 3)]
      .replace(/\{lambda\([^()]*\)#(\d+)\}/g, "λ$1") // Itanium: {lambda(int)#1}
      .replace(/\(anonymous namespace\)::/g, "")
      .replace(/(?:[A-Za-z_][A-Za-z0-9_]*::)+(?=[A-Za-z_~])/g, "");
  }
  A.templateParts = templateParts;

  // The end of `text` in `room` characters, "…/modeling_qwen2.py:243".
  function elideStart(text, room) {
    return text.length <= room ? text : "…" + text.slice(text.length - room + 1);
  }

  // -- colours ------------------------------------------------------------------------

  // Each kind has a hue family; the name's hash picks the shade inside it, so the same
  // function has the same colour everywhere and neighbours are told apart.
  // [base r, g, b] + v * [range r, g, b], v in [0, 1).
  const PALETTE = {
    "gpu-instruction": { label: "GPU instruction", base: [60, 185, 60], range: [60, 60, 50] },
    "gpu-source": { label: "GPU source line", base: [70, 200, 200], range: [50, 45, 45] },
    "gpu-kernel": { label: "GPU kernel", base: [120, 205, 130], range: [50, 45, 40] },
    "gpu-stall": { label: "GPU stall reason", base: [175, 175, 175], range: [30, 30, 30] },
    native: { label: "C (native)", base: [215, 70, 60], range: [40, 70, 60] },
    cpp: { label: "C++", base: [205, 190, 55], range: [45, 50, 40] },
    kernel: { label: "Linux kernel", base: [230, 130, 30], range: [25, 60, 30] },
    python: { label: "Python", base: [95, 150, 230], range: [50, 50, 25] },
    jit: { label: "JIT", base: [200, 120, 215], range: [40, 50, 35] },
    runtime: { label: "CUDA/HIP runtime", base: [150, 115, 220], range: [40, 40, 30] },
    label: { label: "label", base: [150, 170, 200], range: [25, 25, 25] },
    delimiter: { label: "- (CPU | GPU)", base: [165, 165, 165], range: [0, 0, 0] },
    unknown: { label: "other", base: [205, 185, 155], range: [30, 30, 30] },
  };
  A.PALETTE = PALETTE;

  // Stall reasons are coloured by their normalized class (aiflame/model/gpu.py), so the
  // same kind of stall reads the same on NVIDIA, AMD and Intel samples.
  const STALL_CLASSES = {
    "memory latency": { base: [225, 75, 70], range: [25, 30, 25] },
    "short dependency": { base: [240, 150, 55], range: [15, 40, 30] },
    synchronization: { base: [165, 105, 215], range: [30, 30, 25] },
    "front end": { base: [85, 135, 225], range: [30, 35, 20] },
    "scheduler/pipe": { base: [215, 190, 45], range: [25, 30, 40] },
    issued: { base: [160, 205, 160], range: [20, 20, 20] },
    other: { base: [165, 165, 165], range: [25, 25, 25] },
  };
  A.STALL_CLASSES = STALL_CLASSES;

  A.stallColor = function (cls, name) {
    const p = STALL_CLASSES[cls] || STALL_CLASSES.other;
    const v = nameHash(name);
    const c = [0, 1, 2].map((k) => Math.round(p.base[k] + v * p.range[k]));
    return "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")";
  };
  A.SEARCH_COLOR = "rgb(230,0,230)";

  // A search as a RegExp, as editors search: a query in lower case ignores case, one with a
  // capital letter matches it; `ignoreCase` (the page's "Aa" button) or a leading "(?i)"
  // (how Python and PCRE write it; JavaScript rejects inline flags) ignores it always. Not
  // a valid regex: the literal text (literal: true).
  A.searchRegex = function (text, ignoreCase) {
    let body = String(text);
    let flags = ignoreCase ? "i" : "";
    if (body.startsWith("(?i)")) {
      body = body.slice(4);
      flags = "i";
    }
    if (body === body.toLowerCase()) flags = "i";
    try {
      return { re: new RegExp(body, flags), literal: false };
    } catch (err) {
      return { re: new RegExp(body.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), flags), literal: true };
    }
  };

  // FNV-1a of the name, folded to [0, 1): stable across pages and sessions.
  function nameHash(name) {
    let h = 0x811c9dc5;
    for (let i = 0; i < name.length; i++) {
      h ^= name.charCodeAt(i);
      h = Math.imul(h, 0x01000193);
    }
    return (h >>> 0) / 4294967296;
  }

  A.kindColor = function (kind, name) {
    const p = PALETTE[kind] || PALETTE.unknown;
    const v = nameHash(name);
    const r = Math.round(p.base[0] + v * p.range[0]);
    const g = Math.round(p.base[1] + v * p.range[1]);
    const b = Math.round(p.base[2] + v * p.range[2]);
    return "rgb(" + r + "," + g + "," + b + ")";
  };

  // The label ink for a box of `color` ("rgb(r,g,b)" or "#rrggbb"): dark, unless white
  // reads better (WCAG contrast), as on the saturated blue of the largest shrink.
  const DARK_INK = "#111";
  const LIGHT_INK = "#fff";
  const inks = new Map();
  A.labelInk = function (color) {
    let ink = inks.get(color);
    if (ink === undefined) {
      let rgb = /^rgb\((\d+),\s*(\d+),\s*(\d+)\)$/.exec(color);
      if (rgb) rgb = rgb.slice(1).map(Number);
      else if (/^#[0-9a-f]{6}$/i.test(color)) rgb = [1, 3, 5].map((k) => parseInt(color.slice(k, k + 2), 16));
      ink = DARK_INK;
      if (rgb) {
        const lin = rgb.map((c) => (c / 255 <= 0.04045 ? c / 255 / 12.92 : ((c / 255 + 0.055) / 1.055) ** 2.4));
        const lum = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
        const dark = (lum + 0.05) / (0.0056 + 0.05); // #111's luminance is 0.0056
        const light = 1.05 / (lum + 0.05);
        if (light > dark) ink = LIGHT_INK;
      }
      inks.set(color, ink);
    }
    return ink;
  };
  A.DARK_INK = DARK_INK;

  // Differential colour as flamegraph.pl draws it: white for no change, towards red for
  // growth and blue for shrinkage, saturated at the largest change in the graph (linear,
  // from white rather than from flamegraph.pl's 210, so that "no change" stays distinct).
  A.diffColor = function (delta, maxDelta) {
    if (!maxDelta || !delta) return "rgb(255,255,255)";
    const k = Math.min(1, Math.abs(delta) / maxDelta);
    const c = Math.round(235 * (1 - k));
    return delta > 0 ? "rgb(255," + c + "," + c + ")" : "rgb(" + c + "," + c + ",255)";
  };
})((window.aiflame = window.aiflame || {}));
