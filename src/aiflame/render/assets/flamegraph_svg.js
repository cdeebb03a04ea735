// The SVG flame graph's behaviour (render/svg.py embeds it): click a frame to zoom into
// it, Reset Zoom (or Esc) to go back, Search (or Ctrl-F) to highlight names matching a
// regular expression, with the share of the total they cover. Frames keep their drawn
// geometry in their <rect>; the first zoom remembers it, so any zoom is computed from it.
"use strict";
var aiflameSvg = {};

function init(evt) {
  var S = aiflameSvg;
  var root = document.documentElement;
  S.xpad = parseFloat(root.getAttribute("data-xpad"));
  S.fh = parseFloat(root.getAttribute("data-frame-height"));
  S.charWidth = parseFloat(root.getAttribute("data-char-width"));
  S.base = parseFloat(root.getAttribute("data-base"));
  S.inverted = root.getAttribute("data-inverted") === "1";
  S.searchColor = root.getAttribute("data-search-color");
  S.width = parseFloat(root.getAttribute("width"));
  S.inner = S.width - 2 * S.xpad;
  S.details = document.getElementById("details").firstChild;
  S.matched = document.getElementById("matched").firstChild;
  S.unzoom = document.getElementById("unzoom");
  S.searchButton = document.getElementById("search");
  S.frames = [];
  S.zoomed = null;
  S.term = null;
  var groups = document.getElementById("frames").children;
  for (var i = 0; i < groups.length; i++) {
    var g = groups[i];
    var rect = g.getElementsByTagName("rect")[0];
    var info = g.getElementsByTagName("title")[0].textContent;
    var y = parseFloat(rect.getAttribute("y"));
    var f = {
      g: g,
      rect: rect,
      text: g.getElementsByTagName("text")[0] || null,
      info: info,
      // The title is "name (value, share)": the name is what precedes the last " (".
      name: info.slice(0, info.lastIndexOf(" (")),
      x: parseFloat(rect.getAttribute("x")),
      w: parseFloat(rect.getAttribute("width")),
      depth: Math.round((S.inverted ? y - S.base : S.base - y) / S.fh),
      fill: rect.getAttribute("fill"),
    };
    g.setAttribute("data-i", String(i));
    S.frames.push(f);
  }
  S.frames.forEach(function (f) {
    f.room = f.w;
  });
  fitAll(labelled(S.frames));
  var area = document.getElementById("frames");
  area.addEventListener("click", function (e) {
    var f = frameOf(e.target);
    if (f) zoom(f);
  });
  area.addEventListener("mouseover", function (e) {
    var f = frameOf(e.target);
    if (f) S.details.nodeValue = f.info;
  });
  area.addEventListener("mouseout", function () {
    S.details.nodeValue = " ";
  });
  S.unzoom.addEventListener("click", unzoom);
  S.searchButton.addEventListener("click", function () {
    if (S.term !== null) resetSearch();
    else searchPrompt();
  });
  window.addEventListener("keydown", function (e) {
    if ((e.ctrlKey || e.metaKey) && e.key === "f") {
      e.preventDefault();
      searchPrompt();
    } else if (e.key === "Escape") {
      if (S.term !== null) resetSearch();
      else unzoom();
    }
  });
}

function labelled(frames) {
  return frames.filter(function (f) {
    return f.text && f.text.textContent && !f.g.classList.contains("hide");
  });
}

function frameOf(node) {
  while (node && node.parentNode && node.parentNode.id !== "frames") node = node.parentNode;
  if (!node || !node.getAttribute) return null;
  var i = node.getAttribute("data-i");
  return i === null ? null : aiflameSvg.frames[+i];
}

// `name` in at most `chars` characters, as render/svg.py's elide (and the HTML page):
// a Python frame's location is cut from its start, then dropped; a C++ signature loses
// its "void " and parameters; what remains is cut in the middle, a trailing number whole.
function elide(name, chars) {
  if (chars < 3) return "";
  if (name.length <= chars) return name;
  var m = /^(.*\S) \(([^()]*(?::\d+|\.py))\)$/.exec(name);
  if (m) {
    var room = chars - m[1].length - 3;
    if (room >= 8) return m[1] + " (\u2026" + m[2].slice(m[2].length - room + 1) + ")";
    return elideMiddle(m[1], chars);
  }
  var sig = splitSignature(name);
  if (sig[1] && sig[0].length + sig[1].length <= chars) return sig[0] + sig[1];
  var t = templateParts(sig[0]);
  return t ? fitTemplate(t[0], t[1], chars) : elideMiddle(sig[0], chars);
}

// "ns::kern<args>" -> [head, args], or null (the page's format.js templateParts).
function templateParts(name) {
  if (name.charAt(name.length - 1) !== ">") return null;
  var depth = 0;
  for (var i = name.length - 1; i > 0; i--) {
    var c = name.charAt(i);
    if (c === ">") depth++;
    else if (c === "<" && --depth === 0) {
      var head = name.slice(0, i);
      return /[A-Za-z0-9_]$/.test(head) ? [head, name.slice(i + 1, -1)] : null;
    }
  }
  return null;
}

// A template of one named argument is told apart by it (the page's isOneArgument).
function isOneArgument(key) {
  if (key.indexOf("\u2026") >= 0 || !/[A-Za-z_]{3}/.test(key)) return false;
  var depth = 0;
  for (var i = 0; i < key.length; i++) {
    var c = key.charAt(i);
    if ("<([{".indexOf(c) >= 0) depth++;
    else if (">)]}".indexOf(c) >= 0) depth--;
    else if (c === "," && depth === 0) return false;
  }
  return true;
}

// The function's own name and its distinguishing arguments (the page's fitTemplate).
function fitTemplate(head, args, room) {
  var key = args
    .replace(/\[lambda\([^()]*\) \(instance (\d+)\)\]/g, "\u03bb$1")
    .replace(/\{lambda\([^()]*\)#(\d+)\}/g, "\u03bb$1")
    .replace(/\(anonymous namespace\)::/g, "")
    .replace(/(?:[A-Za-z_][A-Za-z0-9_]*::)+(?=[A-Za-z_~])/g, "");
  var cut = head.lastIndexOf("::");
  var shortHead = cut < 0 ? head : head.slice(cut + 2);
  if (head.length + key.length + 2 <= room) return head + "<" + key + ">";
  if (shortHead.length + key.length + 2 <= room) return shortHead + "<" + key + ">";
  var avail = room - 2;
  if (avail < 12) return elideMiddle(isOneArgument(key) ? key : shortHead, room);
  var keyRoom = Math.min(key.length, avail - Math.min(shortHead.length, Math.max(4, Math.floor(avail * 0.4))));
  return elideMiddle(shortHead, avail - keyRoom) + "<" + elideMiddle(key, keyRoom) + ">";
}

function splitSignature(text) {
  if (text.charAt(text.length - 1) !== ")") return [text, ""];
  var depth = 0;
  for (var i = text.length - 1; i > 0; i--) {
    var c = text.charAt(i);
    if (c === ")") depth++;
    else if (c === "(" && --depth === 0) {
      if (text.charAt(i - 1) === " " || i < 2) break;
      return [text.slice(0, i).replace(/^void /, ""), text.slice(i)];
    }
  }
  return [text, ""];
}

function elideMiddle(text, room) {
  if (text.length <= room) return text;
  var head = Math.floor(room / 2);
  var number = /\d+$/.exec(text);
  if (number && room - 2 >= number[0].length) head = Math.min(head, room - 1 - number[0].length);
  var tail = room - 1 - head;
  return text.slice(0, head) + "\u2026" + (tail ? text.slice(text.length - tail) : "");
}

function place(f, x, w) {
  f.rect.setAttribute("x", x.toFixed(4));
  f.rect.setAttribute("width", w.toFixed(4));
  var label = elide(f.name, Math.floor(w / aiflameSvg.charWidth));
  if (!f.text && label) {
    f.text = document.createElementNS("http://www.w3.org/2000/svg", "text");
    f.text.setAttribute("y", (parseFloat(f.rect.getAttribute("y")) + 11).toFixed(4));
    f.g.appendChild(f.text);
  }
  if (f.text) {
    f.text.setAttribute("x", (x + 3).toFixed(4));
    f.text.textContent = label;
  }
  f.room = w;
}

// Labels are sized by an average glyph width; where the font in use is wider (Verdana
// missing), they are cut further until they fit inside their frame. All labels are
// measured in one pass, then the overflowing ones shortened by the measured excess, and
// measured again: a few layouts in all, not one per label.
function fitAll(list) {
  for (var pass = 0; pass < 8 && list.length; pass++) {
    var over = [];
    for (var i = 0; i < list.length; i++) {
      var f = list[i];
      var chars = f.text.textContent.length;
      if (!chars) continue;
      var room = f.room - 4;
      var used = f.text.getComputedTextLength();
      if (used > room) over.push([f, Math.min(chars - 1, Math.floor((chars * room) / used))]);
    }
    for (var k = 0; k < over.length; k++) {
      over[k][0].text.textContent = elide(over[k][0].name, Math.max(0, over[k][1]));
    }
    list = over.map(function (o) {
      return o[0];
    });
  }
}

function zoom(target) {
  var S = aiflameSvg;
  var eps = 1e-6 * S.inner;
  var x0 = target.x;
  var x1 = target.x + target.w;
  var ratio = S.inner / target.w;
  for (var i = 0; i < S.frames.length; i++) {
    var f = S.frames[i];
    var g = f.g;
    var inside = f.x >= x0 - eps && f.x + f.w <= x1 + eps;
    var covers = f.x <= x0 + eps && f.x + f.w >= x1 - eps;
    if (f.depth >= target.depth && inside) {
      g.classList.remove("hide", "parent");
      place(f, S.xpad + (f.x - x0) * ratio, f.w * ratio);
    } else if (f.depth < target.depth && covers) {
      g.classList.remove("hide");
      g.classList.add("parent");
      place(f, S.xpad, S.inner);
    } else {
      g.classList.add("hide");
    }
  }
  fitAll(labelled(S.frames));
  S.zoomed = target;
  S.unzoom.classList.remove("hide");
  if (S.term !== null) search(S.term);
}

function unzoom() {
  var S = aiflameSvg;
  for (var i = 0; i < S.frames.length; i++) {
    var f = S.frames[i];
    f.g.classList.remove("hide", "parent");
    place(f, f.x, f.w);
  }
  fitAll(labelled(S.frames));
  S.zoomed = null;
  S.unzoom.classList.add("hide");
  if (S.term !== null) search(S.term);
}

function searchPrompt() {
  var term = prompt("Search for (regular expression):", aiflameSvg.term || "");
  if (term) search(term);
}

// As the HTML page searches: a term in lower case (or after "(?i)") ignores case.
function matcher(term) {
  var flags = "";
  if (term.indexOf("(?i)") === 0) {
    term = term.slice(4);
    flags = "i";
  }
  if (term === term.toLowerCase()) flags = "i";
  try {
    return new RegExp(term, flags);
  } catch (e) {
    return new RegExp(term.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), flags);
  }
}

function search(term) {
  var S = aiflameSvg;
  var re = matcher(term);
  var spans = [];
  for (var i = 0; i < S.frames.length; i++) {
    var f = S.frames[i];
    var hit = re.test(f.name);
    f.rect.setAttribute("fill", hit ? S.searchColor : f.fill);
    if (hit && !f.g.classList.contains("hide") && !f.g.classList.contains("parent")) {
      spans.push([parseFloat(f.rect.getAttribute("x")), parseFloat(f.rect.getAttribute("width"))]);
    }
  }
  // Matches inside another match are counted once: the outermost covers them.
  spans.sort(function (a, b) {
    return a[0] - b[0] || b[1] - a[1];
  });
  var covered = 0;
  var end = -Infinity;
  for (var k = 0; k < spans.length; k++) {
    var s = spans[k][0];
    var e = s + spans[k][1];
    if (s >= end - 1e-9) {
      covered += spans[k][1];
      end = e;
    } else if (e > end) {
      covered += e - end;
      end = e;
    }
  }
  var share = (100 * covered) / S.inner;
  S.term = term;
  S.searchButton.classList.add("show");
  S.searchButton.firstChild.nodeValue = "Reset Search";
  S.matched.nodeValue = "Matched: " + (share >= 99.995 ? "100" : share.toFixed(1)) + "%";
}

function resetSearch() {
  var S = aiflameSvg;
  for (var i = 0; i < S.frames.length; i++) S.frames[i].rect.setAttribute("fill", S.frames[i].fill);
  S.term = null;
  S.searchButton.classList.remove("show");
  S.searchButton.firstChild.nodeValue = "Search";
  S.matched.nodeValue = " ";
}
