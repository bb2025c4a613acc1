// Mask explorer: the tril mask, masked_fill(-inf), the softmax, and what leaks without the mask.
// Python sends the random demo scores for every T of the slider once; mask type, T and the number
// of real tokens are applied here.
import {
  andMasks, applyMask, batched, buttonGroup, causalMask, colorAt, drawMatrix, float32s, FONT, fmt, h, hatch, labeller,
  paddingMask, painted, sizeCanvas, slider, softmaxRows, textColorAt, Tooltip, update, viewHeight,
} from "./core.mjs";

const MASKS = ["causal", "none", "padding", "causal+padding"];
const MARGIN = { l: 26, r: 8, t: 18, b: 30 };

export function maskMatrix(T, mask, nReal) {
  if (mask === "causal") return causalMask(T);
  if (mask === "none") return new Uint8Array(T * T).fill(1);
  if (mask === "padding") return paddingMask(nReal, T);
  return andMasks(causalMask(T), paddingMask(nReal, T));
}

// The scores of T random queries and keys: Python drew them for T = 1..max_T.
export function demoScores(payload, T) {
  const all = float32s(payload.scores);
  let off = 0;
  for (let t = 1; t < T; t++) off += t * t;
  return Float64Array.from(all.subarray(off, off + T * T));
}

// What mask_view_data computes, from the same scores.
export function maskView(scores, T, mask, nReal) {
  const m = maskMatrix(T, mask, nReal);
  const masked = applyMask(scores, m);
  const weights = softmaxRows(masked, T, T);
  const nanRows = [];
  let leakSum = 0, okRows = 0;
  for (let i = 0; i < T; i++) {
    let nan = false, future = 0;
    for (let j = 0; j < T; j++) {
      const w = weights[i * T + j];
      if (Number.isNaN(w)) nan = true;
      if (j > i) future += w;
    }
    if (nan) nanRows.push(i); else { leakSum += future; okRows++; }
  }
  return { T, mask_name: mask, n_real: nReal, mask: m, scores, masked, weights, nan_rows: nanRows,
    leak: okRows ? leakSum / okRows : NaN };
}

export function readoutLines(L, v) {
  let leak;
  if (Number.isNaN(v.leak)) leak = L("leak_undefined");
  else leak = L("leak", { leak: v.leak, verdict: v.leak === 0 ? L("verdict_none") : L("verdict_leak") });
  let why;
  if (v.nan_rows.length) why = L("explain_nan", { rows: v.nan_rows.join(", ") });
  else if (v.mask_name === "causal" || v.mask_name === "causal+padding") why = L("explain_causal");
  else why = L("explain_no_nan");
  return [leak, why];
}

class MaskView {
  constructor(model, el) {
    this.model = model;
    this.L = labeller(model);
    this.root = h("div", { class: "gl-explorer gl-mask", "data-explorer": "mask",
      // keys pressed in the explorer (arrows on a slider or the heatmap) are not JupyterLab's shortcuts
      "data-lm-suppress-shortcuts": "true" });
    el.append(this.root);
    this.build();
    this.redraw = batched(() => this.draw());
    this.names = ["T", "mask", "n_real", "payload", "labels"];
    for (const n of this.names) model.on("change:" + n, this.redraw);
    // the width comes from the observer: reading it in draw() would force a layout of the whole page
    this.resize = new ResizeObserver((entries) => { this.width = entries[0].contentRect.width; this.redraw(); });
    this.resize.observe(el);
    this.onWindow = () => this.redraw(); // the window's height sets the size of the pictures
    window.addEventListener("resize", this.onWindow);
    this.draw();
  }

  destroy() {
    this.resize.disconnect();
    window.removeEventListener("resize", this.onWindow);
    for (const n of this.names) this.model.off("change:" + n, this.redraw);
  }

  build() {
    const L = this.L, m = this.model, maxT = (m.get("payload") || {}).max_T || 16;
    this.T = slider("T", { label: L("T"), tip: L("tip_T"), min: 1, max: maxT, value: m.get("T"), onInput: (T) => {
      // keep the real tokens within the new length, as the Python side does
      update(m, { T, n_real: Math.min(m.get("n_real"), T) });
    } });
    this.nReal = slider("n_real", { label: L("real_tokens"), tip: L("tip_real_tokens"), min: 0, max: m.get("T"),
      value: m.get("n_real"), onInput: (n) => update(m, { n_real: n }) });
    this.maskGroup = buttonGroup("mask", MASKS.map((k) => [k, L("mask_" + k), L("tip_mask_" + k)]),
      (v) => update(m, { mask: v }));
    this.root.append(h("div", { class: "gl-row gl-controls" }, [this.T.el, this.nReal.el,
      h("span", {}, [h("span", { class: "gl-label", text: L("mask") }), this.maskGroup.el])]));
    this.title = h("div", { class: "gl-title" });
    this.canvas = h("canvas", { "data-part": "panels", role: "img", "aria-label": L("tip_mask_panels") });
    this.root.append(this.title, this.canvas);
    this.readout = h("div", { class: "gl-readouts", "data-part": "readout" });
    this.root.append(this.readout);
    this.tip = new Tooltip(this.root);
    this.canvas.addEventListener("mousemove", (e) => this.onHover(e));
    this.canvas.addEventListener("mouseleave", () => { this.tip.hide(); this.hover = null; this.draw(); });
  }

  view() {
    const m = this.model, p = m.get("payload"), T = m.get("T");
    if (!this.cache || this.cache.payload !== p) this.cache = { payload: p, scores: new Map() };
    if (!this.cache.scores.has(T)) this.cache.scores.set(T, demoScores(p, T));
    return maskView(this.cache.scores.get(T), T, m.get("mask"), m.get("n_real"));
  }

  draw() {
    const L = this.L, m = this.model, v = this.view(), T = v.T;
    this.v = v;
    this.T.set(T);
    this.nReal.range(0, T);
    this.nReal.set(v.n_real);
    this.nReal.disable(!v.mask_name.includes("padding"));
    this.maskGroup.set(v.mask_name);
    const pad = v.mask_name.includes("padding") ? L("title_padding", { n: v.n_real }) : "";
    this.title.textContent = L("mask_title", { mask: L("mask_" + v.mask_name), T, pad });
    // four panels in a row when they fit, else two by two
    const W = Math.max(360, (this.width || this.root.clientWidth || 900) - 10), winH = viewHeight();
    const cols = W >= 4 * 175 ? 4 : 2, cell = MARGIN.l + MARGIN.r + 52;
    const P = Math.max(110, Math.min((W - 8) / cols - cell, cols === 4 ? winH - 330 : (winH - 330) / 2, 240));
    const pw = P + cell, ph = P + MARGIN.t + MARGIN.b;
    const ctx = sizeCanvas(this.canvas, pw * cols, ph * (4 / cols));
    const pattern = hatch(ctx);
    let lim = 0;
    for (const x of v.scores) lim = Math.max(lim, Math.abs(x));
    lim = lim || 1;
    const panels = [
      { key: "panel_mask", values: Float64Array.from(v.mask), cmap: "viridis", lo: 0, hi: 1 },
      { key: "panel_scores", values: v.scores, cmap: "RdBu_r", lo: -lim, hi: lim },
      { key: "panel_masked", values: v.masked, cmap: "RdBu_r", lo: -lim, hi: lim, hidden: true },
      { key: "panel_weights", values: v.weights, cmap: "viridis", lo: 0, hi: 1, hidden: true },
    ];
    this.boxes = [];
    const nan = new Set(v.nan_rows);
    panels.forEach((p, n) => {
      const box = { x: (n % cols) * pw + MARGIN.l, y: Math.floor(n / cols) * ph + MARGIN.t, w: P, h: P, panel: n };
      const t = (x) => (x - p.lo) / (p.hi - p.lo);
      const hidden = p.hidden ? (k) => v.mask[k] === 0 && !(n === 3 && nan.has(Math.floor(k / T))) : null;
      const g = drawMatrix(ctx, p.values, T, T, box, (x, k) => (n === 3 && nan.has(Math.floor(k / T)) ? "#f4a6a6"
        : Number.isFinite(x) ? colorAt(p.cmap, t(x)) : "#e3e3e3"), hidden, pattern);
      box.xs = g.xs; box.ys = g.ys;
      this.boxes.push(box);
      ctx.font = FONT; ctx.fillStyle = "#222"; ctx.textAlign = "left"; ctx.textBaseline = "bottom";
      ctx.fillText(L(p.key), box.x - MARGIN.l + 2, box.y - 4);
      // numbers in the cells when they are large enough to read
      const cw = P / T;
      ctx.textAlign = "center"; ctx.textBaseline = "middle";
      ctx.font = `${Math.min(11, Math.max(8, cw / 3.4))}px system-ui, sans-serif`;
      for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) {
        const k = i * T + j, x = p.values[k], cx = (g.xs[j] + g.xs[j + 1]) / 2, cy = (g.ys[i] + g.ys[i + 1]) / 2;
        let text = "";
        if (n === 3 && nan.has(i)) text = cw >= 26 ? "NaN" : "";
        else if (cw < 26) text = "";
        else if (n === 0) text = String(x);
        else if (n === 2) text = v.mask[k] === 0 ? "−∞" : "";
        else if (!(n === 3 && v.mask[k] === 0)) text = fmt("{v:.2f}", { v: x });
        if (!text) continue;
        ctx.fillStyle = (n === 2 && v.mask[k] === 0) || (n === 3 && nan.has(i)) ? "#000" : textColorAt(p.cmap, t(x));
        ctx.fillText(text, cx, cy);
      }
      ctx.font = FONT; ctx.fillStyle = "#333";
      const step = Math.max(1, Math.ceil(T / Math.floor(P / 14)));
      ctx.textAlign = "right";
      for (let i = 0; i < T; i += step) ctx.fillText(String(i), box.x - 3, (g.ys[i] + g.ys[i + 1]) / 2);
      ctx.textAlign = "center"; ctx.textBaseline = "top";
      for (let j = 0; j < T; j += step) ctx.fillText(String(j), (g.xs[j] + g.xs[j + 1]) / 2, box.y + P + 2);
      ctx.fillText(L("axis_key"), box.x + P / 2, box.y + P + 15);
      // colour bar
      const cx = box.x + P + 8;
      for (let s = 0; s < 48; s++) { ctx.fillStyle = colorAt(p.cmap, 1 - s / 47); ctx.fillRect(cx, box.y + (s * P) / 48, 8, P / 48 + 0.5); }
      ctx.strokeStyle = "#888"; ctx.strokeRect(cx + 0.5, box.y + 0.5, 8, P - 1);
      ctx.fillStyle = "#333"; ctx.textAlign = "left"; ctx.textBaseline = "middle";
      ctx.fillText(fmt("{v:.2g}", { v: p.hi }), cx + 11, box.y + 5);
      ctx.fillText(fmt("{v:.2g}", { v: p.lo }), cx + 11, box.y + P - 5);
      if (this.hover && this.hover.i !== undefined) {
        ctx.strokeStyle = "#000"; ctx.lineWidth = 1.5;
        const { i, j } = this.hover;
        ctx.strokeRect(g.xs[j] + 0.75, g.ys[i] + 0.75, g.xs[j + 1] - g.xs[j] - 1.5, g.ys[i + 1] - g.ys[i] - 1.5);
        ctx.lineWidth = 1;
      }
    });
    // a key for the marks, below the weights panel's title row
    this.readout.replaceChildren(...readoutLines(L, v).map((t) => h("div", { text: t })),
      h("div", { class: "gl-legend" }, [
        h("span", { class: "gl-key" }, [this.swatch(pattern), L("key_hidden")]),
        h("span", { class: "gl-key" }, [h("b", { style: "background:#f4a6a6" }), L("key_nan")])]));
    this.canvas.dataset.leak = String(v.leak);
    this.canvas.dataset.nanRows = v.nan_rows.join(",");
    painted(this.root);
  }

  swatch() {
    const c = h("canvas", { class: "gl-swatch" });
    const ctx = sizeCanvas(c, 12, 12);
    ctx.fillStyle = hatch(ctx); ctx.fillRect(0, 0, 12, 12);
    ctx.strokeStyle = "#888"; ctx.strokeRect(0.5, 0.5, 11, 11);
    return c;
  }

  onHover(e) {
    const L = this.L, v = this.v, r = this.canvas.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
    const b = (this.boxes || []).find((b) => x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + b.h);
    if (!b) { this.tip.hide(); if (this.hover) { this.hover = null; this.draw(); } return; }
    const T = v.T, j = Math.min(T - 1, Math.floor(((x - b.x) / b.w) * T)), i = Math.min(T - 1, Math.floor(((y - b.y) / b.h) * T));
    const k = i * T + j, lines = [L("hover_mask_cell", { i, j })];
    lines.push(v.mask[k] ? L("hover_visible") : L("hover_hidden"));
    lines.push(L("hover_score", { v: v.scores[k] }));
    lines.push(v.mask[k] ? L("hover_score_kept") : L("hover_minus_inf"));
    lines.push(Number.isNaN(v.weights[k]) ? L("hover_nan") : L("hover_weight", { w: v.weights[k] }));
    this.tip.show(e, lines);
    if (!this.hover || this.hover.i !== i || this.hover.j !== j) { this.hover = { i, j }; this.draw(); }
  }
}

function render({ model, el }) {
  const view = new MaskView(model, el);
  return () => view.destroy();
}

export default { render };
