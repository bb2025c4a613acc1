// Mask explorer: the tril mask, masked_fill(-inf), the softmax, and what leaks without the mask.
// Python computed everything up front (widgets/mask_explorer.py): the demo scores, the softmax of
// every row over every visible prefix of its keys, and for every setting (T, mask, real tokens) how
// many keys each row sees, the leak and the NaN rows. Here they are looked up, formatted and drawn.
import {
  buttonGroup, colorAt, drawMatrix, float32s, FONT, fmt, h, isCompact, mount, hatch, painted, sizeCanvas, slider,
  textColorAt, Tooltip, update, viewHeight,
} from "./core.mjs";

const MASKS = ["causal", "none", "padding", "causal+padding"];
const MARGIN = { l: 26, r: 8, t: 18, b: 30 };
const NAN_RGB = [244, 166, 166];

export function stateKey(T, mask, nReal) {
  return mask.includes("padding") ? `${T}|${mask}|${nReal}` : `${T}|${mask}`;
}

// The view of one setting, as mask_view_data computes it: every value is Python's.
export function maskView(payload, T, mask, nReal) {
  const st = payload.states[stateKey(T, mask, nReal)];
  if (!st) throw new Error(`no mask data for T=${T}, mask=${mask}, n_real=${nReal}`);
  const M = payload.max_T, all = payload.cache || (payload.cache = { scores: float32s(payload.scores), prefix: float32s(payload.prefix) });
  const scores = new Float64Array(T * T), masked = new Float64Array(T * T), weights = new Float64Array(T * T);
  const m = new Uint8Array(T * T);
  for (let i = 0; i < T; i++) {
    const seen = parseInt(st.visible[i], 36); // the keys row i sees, one base-36 digit per row
    for (let j = 0; j < T; j++) {
      const n = i * T + j, s = all.scores[i * M + j];
      scores[n] = s;
      m[n] = j < seen ? 1 : 0;
      masked[n] = j < seen ? s : -Infinity;
      weights[n] = seen === 0 ? NaN : j < seen ? all.prefix[(i * M + seen - 1) * M + j] : 0;
    }
  }
  return { T, mask_name: mask, n_real: nReal, mask: m, scores, masked, weights, nan_rows: st.nan_rows,
    leak: st.leak === null ? NaN : st.leak, limit: payload.limits[T - 1] };
}

// The read-out lines under the explorer (the only place they are written).
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
    this.destroy = mount(this, model, el, "mask", ["T", "mask", "n_real", "payload", "labels"]);
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
    this.canvas.addEventListener("mouseleave", () => { this.tip.hide(); if (this.hover) { this.hover = null; this.draw(); } });
  }

  draw() {
    const L = this.L, m = this.model, T = m.get("T"), v = maskView(m.get("payload"), T, m.get("mask"), m.get("n_real"));
    this.v = v;
    this.T.set(T);
    this.nReal.range(0, T);
    this.nReal.set(v.n_real);
    this.nReal.disable(!v.mask_name.includes("padding"));
    this.maskGroup.set(v.mask_name);
    const pad = v.mask_name.includes("padding") ? L("title_padding", { n: v.n_real }) : "";
    this.title.textContent = L("mask_title", { mask: L("mask_" + v.mask_name), T, pad });
    // four panels in a row when they fit, else two by two; at T = 8 the cells are big enough for their numbers
    const W = Math.max(360, (this.width || this.root.clientWidth || 900) - 10), winH = viewHeight();
    const extra = MARGIN.l + MARGIN.r + 44;
    let cols = (W - 4 * extra) / 4 >= Math.max(150, 26 * Math.min(T, 8)) ? 4 : 2;
    let P = Math.floor(Math.max(110, Math.min(W / cols - extra, cols === 4 ? winH - 300 : (winH - 350) / 2, 300)));
    const tight = isCompact(this.root), top = tight ? MARGIN.t + 14 : MARGIN.t; // (compact: a panel's name in two lines)
    if (tight) { // projector mode: two by two beside the column of controls, title and read-outs
      cols = 2;
      P = Math.floor(Math.max(40, Math.min((W - this.title.offsetWidth - 8) / 2 - extra, (winH - 10) / 2 - top - MARGIN.b)));
    }
    const pw = P + extra, ph = P + top + MARGIN.b;
    const ctx = sizeCanvas(this.canvas, pw * cols, ph * (4 / cols));
    const pattern = hatch(ctx);
    const lim = v.limit || 1;
    const panels = [
      { key: "panel_mask", values: Float64Array.from(v.mask), cmap: "viridis", lo: 0, hi: 1 },
      { key: "panel_scores", values: v.scores, cmap: "RdBu_r", lo: -lim, hi: lim },
      { key: "panel_masked", values: v.masked, cmap: "RdBu_r", lo: -lim, hi: lim, hidden: true },
      { key: "panel_weights", values: v.weights, cmap: "viridis", lo: 0, hi: 1, hidden: true },
    ];
    this.boxes = [];
    const nan = new Set(v.nan_rows);
    const cw = P / T, numbers = cw >= 22;
    panels.forEach((p, n) => {
      const box = { x: (n % cols) * pw + MARGIN.l, y: Math.floor(n / cols) * ph + top, w: P, h: P, panel: n };
      const t = (x) => (x - p.lo) / (p.hi - p.lo);
      const hidden = p.hidden ? (k) => v.mask[k] === 0 && !(n === 3 && nan.has(Math.floor(k / T))) : null;
      const g = drawMatrix(ctx, p.values, T, T, box, p.cmap, t, hidden, pattern,
        n === 3 ? (k) => (nan.has(Math.floor(k / T)) ? NAN_RGB : null) : null);
      box.xs = g.xs; box.ys = g.ys;
      this.boxes.push(box);
      ctx.font = FONT; ctx.fillStyle = "#222"; ctx.textAlign = "left"; ctx.textBaseline = "bottom";
      const name = L(p.key), cut = tight && ctx.measureText(name).width > pw - 4 ? name.lastIndexOf(" ", Math.ceil(name.length / 2) + 2) : -1;
      if (cut > 0) { // two lines, broken at a space near the middle
        ctx.fillText(name.slice(0, cut), box.x - MARGIN.l + 2, box.y - 18);
        ctx.fillText(name.slice(cut + 1), box.x - MARGIN.l + 2, box.y - 4);
      } else ctx.fillText(name, box.x - MARGIN.l + 2, box.y - 4);
      // numbers in the cells when they are large enough to read
      ctx.textAlign = "center"; ctx.textBaseline = "middle";
      ctx.font = `${Math.min(11, Math.max(8, cw / 2.8))}px system-ui, sans-serif`;
      for (let i = 0; i < T && numbers; i++) for (let j = 0; j < T; j++) {
        const k = i * T + j, x = p.values[k], cx = (g.xs[j] + g.xs[j + 1]) / 2, cy = (g.ys[i] + g.ys[i + 1]) / 2;
        let text = "";
        if (n === 3 && nan.has(i)) text = "NaN";
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
        ctx.strokeStyle = "#000"; ctx.lineWidth = 2;
        const { i, j } = this.hover;
        ctx.strokeRect(g.xs[j] + 1, g.ys[i] + 1, g.xs[j + 1] - g.xs[j] - 2, g.ys[i + 1] - g.ys[i] - 2);
        ctx.lineWidth = 1;
      }
    });
    this.canvas.dataset.numbers = String(numbers);
    this.readout.replaceChildren(...readoutLines(L, v).map((t) => h("div", { class: "gl-wrap", text: t })),
      h("div", { class: "gl-legend" }, [
        h("span", { class: "gl-key" }, [this.swatch(), L("key_hidden")]),
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
