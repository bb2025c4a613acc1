// What the three explorers share: the stages of gpt_lesson.attention, number formatting in
// Python's format mini-language (one table of templates serves Python and the browser), colour
// maps, crisp canvases at any device-pixel ratio, small charts, controls and the tooltip.
// The math functions touch no DOM, so Node runs them in the tests against Python's numbers.

// ---- the stages, as gpt_lesson.attention computes them ----------------------------------------

// scores[i, j] = scale * sum_d q[i, d] k[j, d]; q is (Tq, d), k is (Tk, d), row-major.
export function attentionScores(q, k, Tq, Tk, d, scale = 1) {
  const out = new Float64Array(Tq * Tk);
  for (let i = 0; i < Tq; i++) {
    for (let j = 0; j < Tk; j++) {
      let s = 0;
      for (let c = 0; c < d; c++) s += q[i * d + c] * k[j * d + c];
      out[i * Tk + j] = s * scale;
    }
  }
  return out;
}

// tril(ones(T, T)): 1 where the query (row) may look at the key (column).
export function causalMask(T) {
  const m = new Uint8Array(T * T);
  for (let i = 0; i < T; i++) for (let j = 0; j <= i; j++) m[i * T + j] = 1;
  return m;
}

// Right padding: every query may look at the first nReal keys only.
export function paddingMask(nReal, T) {
  const m = new Uint8Array(T * T);
  for (let i = 0; i < T; i++) for (let j = 0; j < nReal; j++) m[i * T + j] = 1;
  return m;
}

export function andMasks(a, b) {
  return a.map((x, n) => x & b[n]);
}

// scores.masked_fill(mask == 0, -inf)
export function applyMask(scores, mask) {
  return scores.map((x, n) => (mask[n] ? x : -Infinity));
}

// softmax over each row, like torch: exp(x - max) / sum; a row of -inf gives NaN (0/0).
export function softmaxRows(x, rows, cols) {
  const out = new Float64Array(rows * cols);
  for (let i = 0; i < rows; i++) {
    let m = -Infinity;
    for (let j = 0; j < cols; j++) m = Math.max(m, x[i * cols + j]);
    let sum = 0;
    for (let j = 0; j < cols; j++) {
      const e = Math.exp(x[i * cols + j] - m);
      out[i * cols + j] = e;
      sum += e;
    }
    for (let j = 0; j < cols; j++) out[i * cols + j] /= sum;
  }
  return out;
}

// -sum w log w per row, in nats (0 log 0 = 0), like torch.special.xlogy.
export function rowEntropy(w, rows, cols) {
  const out = new Float64Array(rows);
  for (let i = 0; i < rows; i++) {
    let h = 0;
    for (let j = 0; j < cols; j++) {
      const p = w[i * cols + j];
      if (Number.isNaN(p)) { h = NaN; break; }
      if (p > 0) h -= p * Math.log(p);
    }
    out[i] = h;
  }
  return out;
}

export function rowSums(w, rows, cols) {
  const out = new Float64Array(rows);
  for (let i = 0; i < rows; i++) {
    let s = 0;
    for (let j = 0; j < cols; j++) s += w[i * cols + j];
    out[i] = s;
  }
  return out;
}

// The four stages of one head: raw q.k, scaled, masked (mask may be null) and softmax weights.
export function stages(q, k, T, d, scale, mask) {
  const raw = attentionScores(q, k, T, T, d, 1);
  const scaled = attentionScores(q, k, T, T, d, scale);
  const masked = mask ? applyMask(scaled, mask) : scaled;
  return { raw, scaled, masked, weights: softmaxRows(masked, T, T) };
}

// What experiments.softmax_stats reports for one row of probabilities p.
export function softmaxStats(p) {
  let max = -Infinity, entropy = 0, sq = 0;
  for (const x of p) {
    max = Math.max(max, x);
    entropy -= x * Math.log(Math.max(x, 1e-30));
  }
  // Frobenius norm of the softmax Jacobian diag(p) - p p^T
  for (let i = 0; i < p.length; i++) {
    for (let j = 0; j < p.length; j++) {
      const v = (i === j ? p[i] : 0) - p[i] * p[j];
      sq += v * v;
    }
  }
  return { max_weight: max, entropy, grad_norm: Math.sqrt(sq) };
}

// experiments.scale_factor
export function scaleFactor(dK, scaling, temperature) {
  if (scaling === "none") return 1;
  if (scaling === "sqrt") return 1 / Math.sqrt(dK);
  return 1 / Math.sqrt(dK) / temperature;
}

// ---- data sent by Python ----------------------------------------------------------------------

function bytesOf(view) {
  if (view instanceof ArrayBuffer) return new Uint8Array(view);
  if (ArrayBuffer.isView(view)) return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  throw new TypeError("expected binary data from Python, got " + typeof view);
}

// Little-endian typed arrays (copied, so the alignment of the message's buffer does not matter).
export function float32s(view) {
  const b = bytesOf(view);
  return new Float32Array(b.slice().buffer);
}

// A tensor of shape (..., channels) stored as int16 (or int8) with one float32 scale per
// channel group: value = integer * scale[group]. Python's pack_tensor writes it.
export function unpack(packed) {
  const b = bytesOf(packed.data);
  if (packed.dtype === "float32") return Float64Array.from(new Float32Array(b.slice().buffer));
  const ints = packed.dtype === "int16" ? new Int16Array(b.slice().buffer) : new Int8Array(b.slice().buffer);
  const scales = float32s(packed.scales);
  const ch = packed.channels, out = new Float64Array(ints.length);
  const rows = packed.rows_per_group; // rows sharing one set of channel scales
  for (let n = 0; n < ints.length; n++) {
    const group = Math.floor(n / (rows * ch));
    out[n] = ints[n] * scales[group * ch + (n % ch)];
  }
  return out;
}

// ---- formatting: the subset of Python's str.format that the label table uses ------------------

function pad2(e) {
  const s = String(Math.abs(e));
  return (e < 0 ? "-" : "+") + (s.length < 2 ? "0" + s : s);
}

// x.toFixed(n) with Python's rounding: JS rounds an exact half away from zero, Python to the
// even digit (f"{0.125:.2f}" is "0.12"). Halves are rare, but 1/8 is a weight of uniform attention.
function fixed(x, n) {
  const exact = Math.abs(x).toFixed(Math.min(100, n + 30));
  const dot = exact.indexOf("."), cut = dot + n + 1; // cut: the first digit dropped
  if (exact[cut] === "5" && /^0*$/.test(exact.slice(cut + 1))) {
    const kept = exact.slice(0, n === 0 ? dot : cut);
    if (Number(kept[kept.length - 1]) % 2 === 0) return (x < 0 ? "-" : "") + kept;
  }
  return x.toFixed(n);
}

// str(x) of a Python float: the shortest repr, with Python's exponent style
function pyRepr(x) {
  const s = String(x);
  if (!s.includes("e")) return s;
  const [mant, e] = s.split("e");
  return (mant.includes(".") ? mant : mant) + "e" + pad2(Number(e));
}

// Python's "{:.ne}": n digits after the point, the exponent with a sign and two digits at least,
// and exact halves rounded to the even digit
function expo(x, n) {
  let [mant, e] = x.toExponential(n).split("e");
  const [em, ee] = Math.abs(x).toExponential(Math.min(100, n + 30)).split("e");
  const digits = em.replace(".", "");
  if (digits[n + 1] === "5" && /^0*$/.test(digits.slice(n + 2)) && Number(digits[n]) % 2 === 0) {
    mant = (x < 0 ? "-" : "") + digits[0] + (n > 0 ? "." + digits.slice(1, n + 1) : "");
    e = ee;
  }
  return mant + "e" + pad2(Number(e));
}

function strip(s) {
  return s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s;
}

export function formatNumber(x, spec) {
  if (typeof x !== "number") return String(x);
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (!spec) return Number.isInteger(x) ? String(x) : pyRepr(x);
  const m = /^\.(\d+)([feg%])$/.exec(spec);
  if (spec === "d") return String(Math.round(x));
  if (!m) return String(x);
  const n = Number(m[1]), kind = m[2];
  if (kind === "f") return fixed(x, n);
  if (kind === "%") return fixed(100 * x, n) + "%";
  if (kind === "e") return expo(x, n);
  // g: n significant digits, exponent form when exp < -4 or exp >= n, trailing zeros removed
  const p = Math.max(n, 1);
  if (x === 0) return "0";
  const [mant, e] = expo(x, p - 1).split("e");
  const exp = Number(e);
  if (exp < -4 || exp >= p) return strip(mant) + "e" + pad2(exp);
  return strip(fixed(x, p - 1 - exp));
}

// fmt("query {i} '{tok}': {w:.3f}", {i: 3, tok: "a", w: 0.25}) -> "query 3 'a': 0.250"
export function fmt(template, fields = {}) {
  return template.replace(/\{(\w+)(?::([^{}]*))?\}/g, (whole, name, spec) =>
    name in fields ? formatNumber(fields[name], spec) : whole);
}

// ---- colour maps (colour-blind safe: viridis for weights, RdBu reversed for signed scores) -----

const ANCHORS = {
  viridis: ["#440154", "#482475", "#414487", "#355f8d", "#2a788e", "#21918c", "#22a884", "#44bf70",
    "#7ad151", "#bddf26", "#fde725"],
  RdBu_r: ["#053061", "#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7", "#fddbc7", "#f4a582",
    "#d6604d", "#b2182b", "#67001f"],
};
const LUTS = {};

function hex(c) {
  return [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16));
}

// 256 colours interpolated between the anchors: lut[3 * n .. 3 * n + 2]
export function lut(name) {
  if (!LUTS[name]) {
    const a = ANCHORS[name].map(hex), out = new Uint8Array(256 * 3);
    for (let n = 0; n < 256; n++) {
      const t = (n / 255) * (a.length - 1), i = Math.min(Math.floor(t), a.length - 2), f = t - i;
      for (let c = 0; c < 3; c++) out[3 * n + c] = Math.round(a[i][c] * (1 - f) + a[i + 1][c] * f);
    }
    LUTS[name] = out;
  }
  return LUTS[name];
}

export function colorAt(name, t) {
  const l = lut(name), n = Math.max(0, Math.min(255, Math.round(t * 255)));
  return `rgb(${l[3 * n]},${l[3 * n + 1]},${l[3 * n + 2]})`;
}

// dark text on light cells, white on dark ones
export function textColorAt(name, t) {
  const l = lut(name), n = Math.max(0, Math.min(255, Math.round(t * 255)));
  const y = 0.299 * l[3 * n] + 0.587 * l[3 * n + 1] + 0.114 * l[3 * n + 2];
  return y < 128 ? "#fff" : "#111";
}

// ---- DOM helpers ----------------------------------------------------------------------------

export function h(tag, attrs = {}, children = []) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of [].concat(children)) if (c) el.append(c);
  return el;
}

// A row of toggle buttons; options are [value, label, tooltip].
export function buttonGroup(name, options, onPick) {
  const el = h("div", { class: "gl-group", role: "group", "data-control": name });
  const buttons = new Map();
  for (const [value, label, tip] of options) {
    const b = h("button", { type: "button", class: "gl-btn", title: tip, "data-value": String(value), text: label });
    b.addEventListener("click", () => onPick(value));
    buttons.set(String(value), b);
    el.append(b);
  }
  return {
    el,
    set(value) {
      for (const [v, b] of buttons) {
        const on = v === String(value);
        b.classList.toggle("gl-on", on);
        b.setAttribute("aria-pressed", on ? "true" : "false");
      }
    },
    disable(off) { for (const b of buttons.values()) b.disabled = off; },
  };
}

// A labelled range slider; onInput gets the number while dragging.
export function slider(name, { label, tip, min, max, step = 1, value, onInput, show }) {
  const input = h("input", { type: "range", min, max, step, value, title: tip, "aria-label": label,
    "data-control": name });
  const out = h("span", { class: "gl-readout" });
  const wrap = h("label", { class: "gl-slider", title: tip }, [h("span", { class: "gl-label", text: label }), input, out]);
  input.addEventListener("input", () => onInput(Number(input.value)));
  // Arrow keys move the slider here too (inside JupyterLab's notebook, their default action is prevented)
  const keys = { ArrowRight: 1, ArrowUp: 1, ArrowLeft: -1, ArrowDown: -1, PageUp: 5, PageDown: -5 };
  input.addEventListener("keydown", (e) => {
    const lo = Number(input.min), hi = Number(input.max), st = Number(input.step) || 1;
    let v = Number(input.value);
    if (e.key in keys) v += keys[e.key] * st;
    else if (e.key === "Home") v = lo;
    else if (e.key === "End") v = hi;
    else return;
    e.preventDefault();
    v = Math.min(hi, Math.max(lo, Math.round(v / st) * st));
    if (v !== Number(input.value)) { input.value = v; onInput(Number(input.value)); }
  });
  return {
    el: wrap, input,
    set(v, text) {
      if (Number(input.value) !== v) input.value = v;
      out.textContent = text !== undefined ? text : (show ? show(v) : String(v));
    },
    range(lo, hi) { input.min = lo; input.max = hi; },
    disable(off) { input.disabled = off; wrap.classList.toggle("gl-disabled", off); },
  };
}

export class Tooltip {
  constructor(root) {
    this.el = h("div", { class: "gl-tip", role: "tooltip" });
    this.el.style.display = "none";
    this.root = root;
    root.append(this.el);
  }
  show(event, lines) {
    this.el.replaceChildren(...lines.map((l) => h("div", { text: l })));
    this.el.style.display = "block";
    const box = this.root.getBoundingClientRect();
    let x = event.clientX - box.left + 14, y = event.clientY - box.top + 14;
    const w = this.el.offsetWidth, hgt = this.el.offsetHeight;
    if (x + w > box.width) x = Math.max(0, event.clientX - box.left - w - 10);
    if (y + hgt > box.height) y = Math.max(0, event.clientY - box.top - hgt - 10);
    this.el.style.transform = `translate(${x}px, ${y}px)`;
  }
  hide() { this.el.style.display = "none"; }
}

// ---- canvases ---------------------------------------------------------------------------------

// The height the explorer may fill: the window's. Inside the explorer's HTML view (a frame whose
// height follows the explorer, html_view.mjs), the page around the frame decides instead.
export function viewHeight() {
  if (typeof window === "undefined") return 900;
  const fromHost = typeof window.glViewHeight === "function" ? window.glViewHeight() : 0;
  return fromHost || window.innerHeight || 900;
}

// Size a canvas in CSS pixels and draw in CSS pixels at the screen's resolution.
export function sizeCanvas(canvas, w, h) {
  const dpr = (typeof window !== "undefined" && window.devicePixelRatio) || 1;
  const W = Math.round(w * dpr), H = Math.round(h * dpr);
  if (canvas.width !== W || canvas.height !== H) {
    canvas.width = W;
    canvas.height = H;
  }
  if (canvas.style.width !== w + "px") canvas.style.width = w + "px";
  if (canvas.style.height !== h + "px") canvas.style.height = h + "px";
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.dpr = dpr;
  return ctx;
}

export const FONT = "11px system-ui, -apple-system, 'Segoe UI', sans-serif";

// A hatch pattern for hidden (-inf / masked) cells: dark lines on light grey, visible on any map.
const PATTERNS = new WeakMap();

export function hatch(ctx) {
  const cached = PATTERNS.get(ctx);
  if (cached && cached.dpr === ctx.dpr) return cached.pattern;
  const c = document.createElement("canvas");
  const dpr = ctx.dpr || 1, s = Math.round(6 * dpr);
  c.width = c.height = s;
  const g = c.getContext("2d");
  g.fillStyle = "#e3e3e3";
  g.fillRect(0, 0, s, s);
  g.strokeStyle = "#555";
  g.lineWidth = Math.max(1, dpr);
  g.beginPath();
  g.moveTo(0, s); g.lineTo(s, 0);
  g.moveTo(-s / 2, s / 2); g.lineTo(s / 2, -s / 2);
  g.moveTo(s / 2, s + s / 2); g.lineTo(s + s / 2, s / 2);
  g.stroke();
  const p = ctx.createPattern(c, "repeat");
  if (p && p.setTransform) p.setTransform(new DOMMatrix().scale(1 / dpr));
  PATTERNS.set(ctx, { dpr: ctx.dpr, pattern: p });
  return p;
}

// Cell edges snapped to device pixels, so cells are crisp and touch without gaps.
export function edges(x0, size, n, dpr) {
  const e = new Float64Array(n + 1);
  for (let i = 0; i <= n; i++) e[i] = Math.round((x0 + (size * i) / n) * dpr) / dpr;
  return e;
}

// Draw a (rows, cols) matrix; color(value) gives a CSS colour or null for a hidden cell.
export function drawMatrix(ctx, values, rows, cols, box, color, hidden, pattern) {
  const dpr = ctx.dpr || 1;
  const xs = edges(box.x, box.w, cols, dpr), ys = edges(box.y, box.h, rows, dpr);
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < cols; j++) {
      const n = i * cols + j;
      ctx.fillStyle = hidden && hidden(n) ? pattern : color(values[n], n);
      ctx.fillRect(xs[j], ys[i], xs[j + 1] - xs[j], ys[i + 1] - ys[i]);
    }
  }
  return { xs, ys };
}

// The same picture as drawMatrix for a large matrix, fast: one pixel per cell in an image that is
// scaled up without smoothing (crisp blocks), then the hidden cells covered with the pattern in
// one fill. value -> t in [0, 1] -> colour map; non-finite values are light grey.
export function drawMatrixImage(ctx, values, rows, cols, box, cmap, t, hidden, pattern) {
  const l = lut(cmap), img = new ImageData(cols, rows), px = img.data;
  for (let n = 0; n < rows * cols; n++) {
    const v = values[n];
    if (Number.isFinite(v)) {
      const k = 3 * Math.max(0, Math.min(255, Math.round(t(v) * 255)));
      px[4 * n] = l[k]; px[4 * n + 1] = l[k + 1]; px[4 * n + 2] = l[k + 2];
    } else {
      px[4 * n] = px[4 * n + 1] = px[4 * n + 2] = 0xe3;
    }
    px[4 * n + 3] = 255;
  }
  const tile = document.createElement("canvas");
  tile.width = cols; tile.height = rows;
  tile.getContext("2d").putImageData(img, 0, 0);
  const dpr = ctx.dpr || 1, xs = edges(box.x, box.w, cols, dpr), ys = edges(box.y, box.h, rows, dpr);
  ctx.save();
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(tile, xs[0], ys[0], xs[cols] - xs[0], ys[rows] - ys[0]);
  if (hidden) {
    ctx.beginPath();
    for (let i = 0; i < rows; i++) {
      for (let j = 0; j < cols; j++) {
        if (!hidden(i * cols + j)) continue;
        let e = j;
        while (e + 1 < cols && hidden(i * cols + e + 1)) e++;
        ctx.rect(xs[j], ys[i], xs[e + 1] - xs[j], ys[i + 1] - ys[i]);
        j = e;
      }
    }
    ctx.fillStyle = pattern;
    ctx.fill();
  }
  ctx.restore();
  return { xs, ys };
}

// A vertical colour bar of a colour map as one gradient (top = 1).
export function colorbarGradient(ctx, x, y, w, hgt, cmap) {
  const g = ctx.createLinearGradient(0, y + hgt, 0, y);
  for (let n = 0; n <= 10; n++) g.addColorStop(n / 10, colorAt(cmap, n / 10));
  ctx.fillStyle = g;
  ctx.fillRect(x, y, w, hgt);
}

// Tick labels along a matrix: every step-th, so they never overlap.
export function labelStep(n, pixels, minPx = 12) {
  return Math.max(1, Math.ceil(n / Math.max(1, Math.floor(pixels / minPx))));
}

// Nice round tick values between lo and hi (about n of them).
export function ticks(lo, hi, n = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return out;
}

export function tickText(v) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (Number.isInteger(v) && a < 1e5) return String(v);
  if (a >= 1e4 || a < 1e-3) return formatNumber(v, ".0e");
  return String(Number(v.toPrecision(3)));
}

// A small chart: a frame with x and y scales, ticks and axis titles.
export class Chart {
  constructor(canvas, w, h, margin = { l: 44, r: 10, t: 8, b: 34 }) {
    this.ctx = sizeCanvas(canvas, w, h);
    this.w = w; this.h = h; this.m = margin;
    this.box = { x: margin.l, y: margin.t, w: w - margin.l - margin.r, h: h - margin.t - margin.b };
  }
  scales(x, y) {
    // x, y: {lo, hi, log?: base}
    const map = (s, a, b) => {
      const f = s.log ? (v) => Math.log(v) / Math.log(s.log) : (v) => v;
      const lo = f(s.lo), hi = f(s.hi);
      return (v) => a + ((f(v) - lo) / (hi - lo || 1)) * (b - a);
    };
    this.xs = x; this.ys = y;
    this.x = map(x, this.box.x, this.box.x + this.box.w);
    this.y = map(y, this.box.y + this.box.h, this.box.y);
    return this;
  }
  axes({ xTicks, yTicks, xLabel, yLabel, xText = tickText, yText = tickText, grid = false }) {
    const c = this.ctx, b = this.box;
    if (grid) { // behind what is drawn already
      c.save();
      c.globalCompositeOperation = "destination-over";
      c.strokeStyle = "#e6e6e6";
      c.lineWidth = 1;
      c.beginPath();
      for (const v of xTicks || []) { const x = Math.round(this.x(v)) + 0.5; c.moveTo(x, b.y + 1); c.lineTo(x, b.y + b.h - 1); }
      for (const v of yTicks || []) { const y = Math.round(this.y(v)) + 0.5; c.moveTo(b.x + 1, y); c.lineTo(b.x + b.w - 1, y); }
      c.stroke();
      c.restore();
    }
    c.font = FONT;
    c.fillStyle = "#333";
    c.strokeStyle = "#999";
    c.lineWidth = 1;
    c.strokeRect(b.x + 0.5, b.y + 0.5, b.w - 1, b.h - 1);
    c.textAlign = "center"; c.textBaseline = "top";
    for (const v of xTicks || []) {
      const x = this.x(v);
      c.strokeStyle = "#999"; c.beginPath(); c.moveTo(x, b.y + b.h); c.lineTo(x, b.y + b.h + 3); c.stroke();
      c.fillText(xText(v), x, b.y + b.h + 4);
    }
    c.textAlign = "right"; c.textBaseline = "middle";
    for (const v of yTicks || []) {
      const y = this.y(v);
      c.strokeStyle = "#999"; c.beginPath(); c.moveTo(b.x - 3, y); c.lineTo(b.x, y); c.stroke();
      c.fillText(yText(v), b.x - 5, y);
    }
    if (xLabel) { c.textAlign = "center"; c.textBaseline = "bottom"; c.fillText(xLabel, b.x + b.w / 2, this.h - 1); }
    if (yLabel) {
      c.save(); c.translate(10, b.y + b.h / 2); c.rotate(-Math.PI / 2);
      c.textAlign = "center"; c.textBaseline = "middle"; c.fillText(yLabel, 0, 0); c.restore();
    }
    return this;
  }
  line(xs, ys, { color = "#1f77b4", width = 1.5, dash = null, dots = false } = {}) {
    const c = this.ctx;
    c.save();
    c.beginPath(); c.rect(this.box.x, this.box.y, this.box.w, this.box.h); c.clip();
    c.strokeStyle = color; c.lineWidth = width; c.setLineDash(dash || []);
    c.beginPath();
    xs.forEach((x, n) => (n ? c.lineTo(this.x(x), this.y(ys[n])) : c.moveTo(this.x(x), this.y(ys[n]))));
    c.stroke();
    if (dots) {
      c.fillStyle = color;
      xs.forEach((x, n) => { c.beginPath(); c.arc(this.x(x), this.y(ys[n]), 2.2, 0, 2 * Math.PI); c.fill(); });
    }
    c.restore();
    return this;
  }
  // bars centred on x with a width in x units; colors: one CSS colour or a function of the index
  bars(xs, ys, width, colors) {
    const c = this.ctx, y0 = this.y(Math.max(this.ys.lo, Math.min(this.ys.hi, 0)));
    c.save();
    c.beginPath(); c.rect(this.box.x, this.box.y, this.box.w, this.box.h); c.clip();
    xs.forEach((x, n) => {
      const a = this.x(x - width / 2), b = this.x(x + width / 2), y = this.y(ys[n]);
      c.fillStyle = typeof colors === "function" ? colors(n) : colors;
      c.fillRect(a, Math.min(y, y0), Math.max(1, b - a), Math.abs(y - y0));
    });
    c.restore();
    return this;
  }
  hline(v, color = "#666", dash = null) {
    const c = this.ctx, y = Math.round(this.y(v)) + 0.5;
    c.save(); c.strokeStyle = color; c.setLineDash(dash || []); c.lineWidth = 1;
    c.beginPath(); c.moveTo(this.box.x, y); c.lineTo(this.box.x + this.box.w, y); c.stroke(); c.restore();
    return this;
  }
  vline(v, color = "#d62728") {
    const c = this.ctx, x = Math.round(this.x(v)) + 0.5;
    c.save(); c.strokeStyle = color; c.lineWidth = 1.5;
    c.beginPath(); c.moveTo(x, this.box.y); c.lineTo(x, this.box.y + this.box.h); c.stroke(); c.restore();
    return this;
  }
}

// A legend drawn as DOM beside a chart (never over the data): [[colour, text, dashed?], ...]
export function legend(items) {
  return h("div", { class: "gl-legend" }, items.map(([color, text, dashed]) =>
    h("span", { class: "gl-key" }, [h("i", { style: `border-top: 3px ${dashed ? "dashed" : "solid"} ${color}` }), text])));
}

// ---- the conversation with Python -------------------------------------------------------------

// Set traits in the model and send them to Python when a kernel is there. Without a kernel
// (an exported page) the change stays in the page, and every view of the model still updates.
export function update(model, values) {
  for (const [k, v] of Object.entries(values)) model.set(k, v);
  try { model.save_changes(); } catch (e) { /* no kernel: nothing to tell */ }
}

// Ask Python whether it is there; calls onLive(true) when it answers, onLive(false) otherwise.
export function probeKernel(model, onLive, wait = 2000) {
  if (model.no_kernel) { // the HTML view's stand-in model knows there is none
    const timer = setTimeout(() => onLive(false), 0);
    return () => clearTimeout(timer);
  }
  let answered = false;
  const onMsg = (msg) => {
    if (msg && msg.type === "pong") { answered = true; onLive(true); }
  };
  model.on("msg:custom", onMsg);
  try { model.send({ type: "ping" }); } catch (e) { /* no comm */ }
  const timer = setTimeout(() => { if (!answered) onLive(false); }, wait);
  return () => { clearTimeout(timer); model.off("msg:custom", onMsg); };
}

// The label table Python sent: L("key", fields) formats one template.
export function labeller(model) {
  return (key, fields) => {
    const t = (model.get("labels") || {})[key];
    return t === undefined ? key : fmt(t, fields);
  };
}

// Run fn once per task however many traits changed (several arrive together).
export function batched(fn) {
  let queued = false;
  return () => {
    if (queued) return;
    queued = true;
    queueMicrotask(() => { queued = false; fn(); });
  };
}

// Paint counter for the tests and the benchmark: each finished paint records its time.
export function painted(root) {
  const n = Number(root.dataset.paints || 0) + 1;
  root.dataset.paints = String(n);
  root.dataset.paintedAt = String(typeof performance !== "undefined" ? performance.now() : 0);
}
