// What the three explorers share: reading Python's arrays, formatting the label table's templates
// (d3-format), colour maps, crisp canvases, small charts, controls that keep their keys, the tooltip,
// and the conversation with the kernel. Every number an explorer shows was computed by Python
// (gpt_lesson.attention, gpt_lesson.experiments) and arrives in its payload: nothing here computes
// attention, a softmax or a statistic.
import { formatLocale } from "d3-format";

// Python's minus sign ("-", not d3's default U+2212), so both sides write the same text
const LOCALE = formatLocale({ decimal: ".", thousands: ",", grouping: [3], currency: ["", ""], minus: "-" });

// ---- data sent by Python ----------------------------------------------------------------------

function bytesOf(view) {
  if (view instanceof ArrayBuffer) return new Uint8Array(view);
  if (ArrayBuffer.isView(view)) return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  throw new TypeError("expected binary data from Python, got " + typeof view);
}

// Little-endian typed arrays (copied, so the alignment of the message's buffer does not matter).
export function float32s(view) {
  return new Float32Array(bytesOf(view).slice().buffer);
}

// A tensor Python's pack_tensor wrote: float32, or int16/int8 with one float32 scale per channel of
// each group of rows (value = integer * scale), as a Float64Array in the tensor's row-major order.
export function unpack(packed) {
  const b = bytesOf(packed.data);
  if (packed.dtype === "float32") return Float64Array.from(new Float32Array(b.slice().buffer));
  const ints = packed.dtype === "int16" ? new Int16Array(b.slice().buffer) : new Int8Array(b.slice().buffer);
  const scales = float32s(packed.scales);
  const ch = packed.channels, rows = packed.rows_per_group, out = new Float64Array(ints.length);
  for (let n = 0; n < ints.length; n++) out[n] = ints[n] * scales[Math.floor(n / (rows * ch)) * ch + (n % ch)];
  return out;
}

// ---- formatting: the label table's templates, "{name:spec}", with d3-format ----------------------

// The table writes specs in Python's format mini-language (Python formats the static pictures);
// d3-format follows the same language, except that "g" keeps trailing zeros unless asked ("~").
const FORMATS = new Map();
function formatter(spec) {
  if (!FORMATS.has(spec)) FORMATS.set(spec, LOCALE.format(spec.replace(/~?g$/, "~g")));
  return FORMATS.get(spec);
}

export function formatValue(x, spec) {
  if (typeof x !== "number") return String(x);
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (!spec) return String(x);
  let out = formatter(spec)(x);
  // Python keeps the sign of a negative number that rounds to zero ("-0.000"), d3-format drops it;
  // Python writes at least two exponent digits ("1.02e+03"), d3-format one
  if ((x < 0 || Object.is(x, -0)) && !out.includes("-")) out = "-" + out;
  return out.replace(/e([+-])(\d)$/, "e$10$2");
}

// fmt("query {i} '{tok}': {w:.3f}", {i: 3, tok: "a", w: 0.25}) -> "query 3 'a': 0.250"
export function fmt(template, fields = {}) {
  return template.replace(/\{(\w+)(?::([^{}]*))?\}/g, (whole, name, spec) =>
    name in fields ? formatValue(fields[name], spec) : whole);
}

// The label table Python sent: L("key", fields) formats one template.
export function labeller(model) {
  return (key, fields) => {
    const t = (model.get("labels") || {})[key];
    return t === undefined ? key : fmt(t, fields);
  };
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

function lutIndex(t) {
  return 3 * Math.max(0, Math.min(255, Math.round(t * 255)));
}

export function colorAt(name, t) {
  const l = lut(name), n = lutIndex(t);
  return `rgb(${l[n]},${l[n + 1]},${l[n + 2]})`;
}

// dark text on light cells, white on dark ones
export function textColorAt(name, t) {
  const l = lut(name), n = lutIndex(t);
  return 0.299 * l[n] + 0.587 * l[n + 1] + 0.114 * l[n + 2] < 128 ? "#fff" : "#111";
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

// Where the keyboard goes back to on Esc: the notebook cell around the explorer (JupyterLab, Notebook 7),
// so its shortcuts work again; elsewhere the control just lets go of the focus.
function giveFocusBack(el) {
  el.blur();
  const cell = el.closest(".jp-Cell");
  const notebook = el.closest(".jp-Notebook");
  if (cell && notebook) {
    const app = typeof window !== "undefined" ? window.jupyterapp : null;
    const panel = app && app.shell && app.shell.currentWidget;
    if (panel && panel.content && panel.content.node === notebook && typeof panel.content.activate === "function") {
      panel.content.mode = "command";
      panel.content.activate();
      return;
    }
    (notebook.tabIndex >= 0 ? notebook : cell).focus();
  }
}

// A focusable control keeps its keys: JupyterLab matches its shortcuts (m, a, b, x, d d, arrows ...)
// on the focused element itself, so every control carries the attribute that tells Lumino to leave
// its keys alone (an attribute on an outer box does not help). Esc gives the focus back to the notebook.
export function ownKeys(el, onEscape) {
  el.setAttribute("data-lm-suppress-shortcuts", "true");
  el.addEventListener("keydown", (e) => {
    if (e.key !== "Escape") return;
    if (onEscape) onEscape(e);
    e.preventDefault();
    e.stopPropagation();
    giveFocusBack(el);
  });
  return el;
}

// A row of toggle buttons; options are [value, label, tooltip]. Left/right arrows move between them.
export function buttonGroup(name, options, onPick) {
  const el = h("div", { class: "gl-group", role: "group", "data-control": name });
  const buttons = new Map();
  const list = [];
  for (const [value, label, tip] of options) {
    const b = ownKeys(h("button", { type: "button", class: "gl-btn", title: tip, "data-value": String(value), text: label }));
    b.addEventListener("click", () => onPick(value));
    b.addEventListener("keydown", (e) => {
      const step = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 }[e.key];
      if (!step) return;
      e.preventDefault();
      const n = list.indexOf(b), next = list[Math.max(0, Math.min(list.length - 1, n + step))];
      if (next !== b && !next.disabled) { next.focus(); next.click(); }
    });
    buttons.set(String(value), b);
    list.push(b);
    el.append(b);
  }
  let shown = null; // the value the buttons show (set again to it: nothing to write)
  return {
    el,
    set(value) {
      if (shown === String(value)) return;
      shown = String(value);
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
  const input = ownKeys(h("input", { type: "range", min, max, step, value, title: tip, "aria-label": label,
    "data-control": name }));
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

// ---- layout ----------------------------------------------------------------------------------

// The height the explorer may fill: the window's. Inside the explorer's HTML view (a frame whose
// height follows the explorer, html_view.mjs), the page around the frame decides instead.
export function viewHeight() {
  if (typeof window === "undefined") return 900;
  const fromHost = typeof window.glViewHeight === "function" ? window.glViewHeight() : 0;
  return fromHost || window.innerHeight || 900;
}

// The compact layout (a slide deck's projector mode puts the class gl-compact on the frame's page): the
// explorer packs its controls and read-outs around its pictures to fit one 1280x720 screen at 2.3x.
export function isCompact(el) {
  return !!(el && el.closest && el.closest(".gl-compact"));
}

// Call onWidth(width) when the element's width changes, in the next animation frame: a redraw inside
// the observer's own callback changes the layout it measures ("ResizeObserver loop completed with
// undelivered notifications"). The window's height also sizes the pictures: a window resize counts.
export function watchSize(el, onWidth) {
  let width = -1, frame = 0; // (the first width is always told, 0 too: a view built hidden knows it)
  const later = () => {
    if (frame) return;
    frame = requestAnimationFrame(() => { frame = 0; onWidth(width); });
  };
  const observer = new ResizeObserver((entries) => {
    const w = Math.round(entries[0].contentRect.width);
    if (w !== width) { width = w; later(); }
  });
  observer.observe(el);
  window.addEventListener("resize", later);
  return () => { observer.disconnect(); window.removeEventListener("resize", later); if (frame) cancelAnimationFrame(frame); };
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

// Draw a (rows, cols) matrix, one pixel per cell in an image scaled up without smoothing (crisp
// blocks), then the hidden cells covered with the pattern in one fill. value -> t in [0, 1] ->
// colour map; non-finite values are light grey; colorOf(n) may override a cell's colour.
export function drawMatrix(ctx, values, rows, cols, box, cmap, t, hidden, pattern, colorOf) {
  const l = lut(cmap), img = new ImageData(cols, rows), px = img.data;
  for (let n = 0; n < rows * cols; n++) {
    const v = values[n], own = colorOf ? colorOf(n) : null;
    if (own) { px[4 * n] = own[0]; px[4 * n + 1] = own[1]; px[4 * n + 2] = own[2]; } else if (Number.isFinite(v)) {
      const k = lutIndex(t(v));
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

// A selection mark that does not depend on hue: a thick black box with a white line inside it.
export function markBox(ctx, x, y, w, hgt, width = 3) {
  ctx.save();
  ctx.lineWidth = width;
  ctx.strokeStyle = "#000";
  ctx.strokeRect(x + width / 2, y + width / 2, w - width, hgt - width);
  ctx.lineWidth = 1;
  ctx.strokeStyle = "#fff";
  ctx.strokeRect(x + width + 0.5, y + width + 0.5, Math.max(0, w - 2 * width - 1), Math.max(0, hgt - 2 * width - 1));
  ctx.restore();
}

// A vertical colour bar of a colour map as one gradient (top = 1).
export function colorbarGradient(ctx, x, y, w, hgt, cmap) {
  const g = ctx.createLinearGradient(0, y + hgt, 0, y);
  for (let n = 0; n <= 10; n++) g.addColorStop(n / 10, colorAt(cmap, n / 10));
  ctx.fillStyle = g;
  ctx.fillRect(x, y, w, hgt);
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
  if (a >= 1e4 || a < 1e-3) return formatValue(v, ".0e");
  return formatValue(v, ".3~g");
}

// A small chart: a frame with x and y scales, ticks and axis titles.
// Shrink the context's font so that text is at most room px wide; returns half its width (+1 px).
function fitFont(c, text, room) {
  const w = c.measureText(text).width;
  if (w > room) {
    const px = parseFloat(c.font.match(/([\d.]+)px/)?.[1]) || 11;
    c.font = c.font.replace(/[\d.]+px/, `${Math.floor(px * room / w)}px`);
  }
  return c.measureText(text).width / 2 + 1;
}

export class Chart {
  constructor(canvas, w, h, margin = { l: 44, r: 10, t: 8, b: 34 }) {
    this.ctx = sizeCanvas(canvas, w, h);
    this.w = w; this.h = h; this.m = margin;
    this.box = { x: margin.l, y: margin.t, w: w - margin.l - margin.r, h: h - margin.t - margin.b };
  }
  scales(x, y) {
    // x, y: {lo, hi, log?: base}
    const map = (s, a, b) => {
      const f = s.log ? (v) => Math.log10(v) / Math.log10(s.log) : (v) => v;
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
    if (xLabel) { // centred under the plot, moved (a narrow chart: shrunk) so that it stays inside the canvas
      c.save(); c.textAlign = "center"; c.textBaseline = "bottom";
      const half = fitFont(c, xLabel, this.w - 2);
      c.fillText(xLabel, Math.max(half, Math.min(this.w - half, b.x + b.w / 2)), this.h - 1); c.restore();
    }
    if (yLabel) {
      // centred on the plot, moved (a short chart: shrunk) so that it stays inside the canvas
      c.save();
      const half = fitFont(c, yLabel, this.h - 2);
      c.translate(10, Math.max(half, Math.min(this.h - half, b.y + b.h / 2))); c.rotate(-Math.PI / 2);
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
  // bars from x0[n] to x1[n] (x units); colors: one CSS colour or a function of the index
  spans(x0, x1, ys, colors) {
    const c = this.ctx, y0 = this.y(Math.max(this.ys.lo, Math.min(this.ys.hi, 0)));
    c.save();
    c.beginPath(); c.rect(this.box.x, this.box.y, this.box.w, this.box.h); c.clip();
    ys.forEach((v, n) => {
      const a = this.x(x0[n]), b = this.x(x1[n]), y = this.y(v);
      c.fillStyle = typeof colors === "function" ? colors(n) : colors;
      c.fillRect(a, Math.min(y, y0), Math.max(1, b - a), Math.abs(y - y0));
    });
    c.restore();
    return this;
  }
  // bars centred on the integers 0..n-1, `width` wide
  bars(ys, width, colors) {
    const x0 = [], x1 = [];
    ys.forEach((_, n) => { x0.push(n - width / 2); x1.push(n + width / 2); });
    return this.spans(x0, x1, ys, colors);
  }
  hline(v, color = "#666", dash = null) {
    const c = this.ctx, y = Math.round(this.y(v)) + 0.5;
    c.save(); c.strokeStyle = color; c.setLineDash(dash || []); c.lineWidth = 1;
    c.beginPath(); c.moveTo(this.box.x, y); c.lineTo(this.box.x + this.box.w, y); c.stroke(); c.restore();
    return this;
  }
  vline(v, color = "#000") {
    const c = this.ctx, x = Math.round(this.x(v)) + 0.5;
    c.save(); c.strokeStyle = color; c.lineWidth = 2; c.setLineDash([4, 2]);
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

// Mount an explorer's view: build it once in a new root box of el, then draw it again (batched) when
// one of the traits `names` changes and when the output area changes width. Returns the teardown.
export function mount(view, model, el, kind, names) {
  view.model = model;
  view.L = labeller(model);
  view.root = h("div", { class: `gl-explorer gl-${kind}`, "data-explorer": kind });
  el.append(view.root);
  view.build();
  view.redraw = batched(() => view.draw());
  for (const n of names) model.on("change:" + n, view.redraw);
  const stopWatch = watchSize(el, (w) => { view.width = w; view.draw(); });
  view.draw();
  return () => {
    stopWatch();
    for (const n of names) model.off("change:" + n, view.redraw);
  };
}

// The width of a text in the canvases' font (px), to leave room for labels before a canvas is sized.
let MEASURE = null;
export function textWidth(text, font = FONT) {
  if (!MEASURE) MEASURE = document.createElement("canvas").getContext("2d");
  MEASURE.font = font;
  return MEASURE.measureText(text).width;
}
