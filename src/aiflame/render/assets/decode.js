// Decoding of the embedded profile (written by aiflame/render/flamedata.py).
//
// The page carries a JSON header and one base64 zlib stream of binary sections. The
// browser inflates it natively (DecompressionStream), so a tree of millions of nodes
// costs a few MB in the file and a few hundred ms to open, with no network request.
(function (A) {
  "use strict";

  function base64Bytes(text) {
    if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(text);
    const bin = atob(text);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  async function inflate(bytes) {
    // A Blob stream is local: unlike fetch() of a data: URL it is not a network request.
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  // Integers stored as byte planes: every value's low byte, then every next byte. One
  // pass per width (not one per plane): this runs over millions of nodes at start-up.
  function readPlanes(buf, s) {
    const n = s.count;
    const p = (j) => buf.subarray(s.offset + j * n, s.offset + (j + 1) * n);
    if (s.width === 1) return Uint32Array.from(p(0));
    const out = s.width <= 4 ? new Uint32Array(n) : new Float64Array(n);
    const p0 = p(0);
    const p1 = p(1);
    if (s.width === 2) {
      for (let i = 0; i < n; i++) out[i] = p0[i] | (p1[i] << 8);
    } else if (s.width === 3) {
      const p2 = p(2);
      for (let i = 0; i < n; i++) out[i] = p0[i] | (p1[i] << 8) | (p2[i] << 16);
    } else {
      for (let i = 0; i < n; i++) out[i] = p0[i] + p1[i] * 256;
      for (let j = 2; j < s.width; j++) {
        const pj = p(j);
        const scale = 2 ** (8 * j);
        for (let i = 0; i < n; i++) out[i] += pj[i] * scale;
      }
    }
    return out;
  }

  // LEB128 values below 2**53 (multiplications, not 32-bit shifts, past 28 bits).
  function readVarints(buf, pos, count, out) {
    for (let k = 0; k < count; k++) {
      let b = buf[pos++];
      let v = b & 0x7f;
      let scale = 128;
      while (b & 0x80) {
        b = buf[pos++];
        v += (b & 0x7f) * scale;
        scale *= 128;
      }
      out[k] = v;
    }
    return pos;
  }

  // A mostly-zero value column: gaps between the non-zero positions, then the values.
  function readSparse(buf, s, n) {
    const col = new Float64Array(n);
    const gaps = new Float64Array(s.count);
    let pos = readVarints(buf, s.offset, s.count, gaps);
    let vals;
    if (s.values === "varint") {
      vals = new Float64Array(s.count);
      readVarints(buf, pos, s.count, vals);
    } else {
      const copy = buf.slice(pos, pos + 8 * s.count); // aligned copy for the typed view
      vals = new Float64Array(copy.buffer);
    }
    let at = -1;
    for (let k = 0; k < s.count; k++) {
      at += gaps[k] + 1;
      col[at] = vals[k];
    }
    return col;
  }

  // The string table is a JSON array (ASCII): one native JSON.parse is far faster than
  // tens of thousands of TextDecoder calls.
  function readStrings(buf, s) {
    const bytes = buf.subarray(s.offset, s.offset + s.length);
    return JSON.parse(new TextDecoder("ascii").decode(bytes));
  }

  // Returns the raw columns; tree.js builds the navigable structure on top.
  A.decode = async function (header, base64) {
    const bytes = base64Bytes(base64);
    performance.mark("aiflame-base64");
    const buf = await inflate(bytes);
    performance.mark("aiflame-inflated");
    const sec = {};
    for (const s of header.sections) sec[s.name] = s;
    const n = header.nodes;
    const frame = readPlanes(buf, sec["node.frame"]);
    const pops = readPlanes(buf, sec["node.pops"]);
    const depth = header.maxDepth < 65535 ? new Uint16Array(n) : new Uint32Array(n);
    let d = 0;
    for (let i = 1; i < n; i++) depth[i] = d = d + 1 - pops[i];
    const self = header.types.map((_, t) => readSparse(buf, sec["node.self." + t], n));
    const lines = new Float64Array(sec["frame.line"].count);
    readVarints(buf, sec["frame.line"].offset, lines.length, lines);
    return {
      header,
      frame,
      depth,
      self,
      frameName: readPlanes(buf, sec["frame.name"]),
      frameKind: readPlanes(buf, sec["frame.kind"]),
      frameFile: readPlanes(buf, sec["frame.file"]),
      frameLine: lines,
      strings: readStrings(buf, sec["strings"]),
    };
  };

  // For other sections of the page (memchart.js): the same readers.
  A.base64Bytes = base64Bytes;
  A.inflate = inflate;
  A.readPlanes = readPlanes;
  A.readVarints = readVarints;
})((window.aiflame = window.aiflame || {}));
