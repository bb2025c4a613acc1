// Attention explorer: one head of the model on the learner's text, stage by stage.
// Python sends q, k and v of every layer and head once per text; the stages (raw QK^T, scaled,
// masked, softmax), the row read-outs and the (query, key) step-through are computed here, so
// every control, hover and click answers without a round trip (and without a kernel).
import {
  buttonGroup, causalMask, Chart, colorbarGradient, drawMatrixImage, FONT, fmt, h, hatch, labeller, labelStep,
  legend, painted, probeKernel, rowEntropy, rowSums, sizeCanvas, stages, textColorAt, ticks, tickText, Tooltip,
  unpack, update, batched, viewHeight,
} from "./core.mjs";

const STAGES = ["raw", "scaled", "masked", "weights"];
const HEAT_MARGIN = { l: 48, r: 56, t: 4, b: 42 };

// Decode Python's payload once: q, k, v as (layer, head, T, d) arrays.
export function decode(payload) {
  const { T, n_layer: L, n_head: H, head_size: d } = payload;
  return {
    T, L, H, d, text: payload.text, tokens: payload.tokens, scale: payload.scale, notice: payload.notice || "",
    q: unpack(payload.q), k: unpack(payload.k), v: unpack(payload.v),
    mask: payload.causal ? causalMask(T) : null, cache: new Map(),
  };
}

function slice(data, x, layer, head) {
  const n = data.T * data.d, off = (layer * data.H + head) * n;
  return data[x].subarray(off, off + n);
}

// The four stages of one head, computed once per payload.
export function headStages(data, layer, head) {
  const key = layer + "," + head;
  if (!data.cache.has(key)) {
    data.cache.set(key, stages(slice(data, "q", layer, head), slice(data, "k", layer, head), data.T, data.d,
      data.scale, data.mask));
  }
  return data.cache.get(key);
}

// The step-through of the (query, key) cell, as attention_view_data's "cell".
export function cellStep(data, layer, head, query, key) {
  const st = headStages(data, layer, head), T = data.T, d = data.d;
  const row = st.weights.subarray(query * T, query * T + T);
  if (key === null || key === undefined) {
    key = 0;
    for (let j = 1; j < T; j++) if (row[j] > row[key]) key = j;
  }
  const q = slice(data, "q", layer, head).subarray(query * d, query * d + d);
  const k = slice(data, "k", layer, head).subarray(key * d, key * d + d);
  const v = slice(data, "v", layer, head);
  const products = q.map((x, c) => x * k[c]);
  let dot = 0;
  for (const p of products) dot += p;
  const output = new Float64Array(d), contribution = new Float64Array(d);
  for (let j = 0; j < T; j++) for (let c = 0; c < d; c++) output[c] += row[j] * v[j * d + c];
  for (let c = 0; c < d; c++) contribution[c] = row[key] * v[key * d + c];
  return {
    query, key, products, dot, raw: st.raw[query * T + key], scaled: st.scaled[query * T + key],
    visible: !data.mask || data.mask[query * T + key] === 1, weight: row[key], row, output, contribution,
  };
}

// The read-outs of attention_view_data for one head, or every head of the layer (head "all").
export function readouts(data, layer, head) {
  const heads = head === "all" ? [...Array(data.H).keys()] : [head];
  let maxW = -Infinity, maxErr = 0, hSum = 0, n = 0;
  const entropy = [];
  for (const hh of heads) {
    const w = headStages(data, layer, hh).weights;
    for (const x of w) maxW = Math.max(maxW, x);
    for (const s of rowSums(w, data.T, data.T)) maxErr = Math.max(maxErr, Math.abs(s - 1));
    const e = rowEntropy(w, data.T, data.T);
    entropy.push(e);
    for (const x of e) { hSum += x; n++; }
  }
  return { max_weight: maxW, max_sum_error: maxErr, mean_entropy: hSum / n, entropy };
}

// The read-out lines the explorer shows (the Python side writes the same from its own numbers).
export function readoutLines(L, data, layer, head, query, key) {
  const r = readouts(data, layer, head);
  const lines = [L(r.max_sum_error < 1e-5 ? "rows_sum_to_one" : "rows_do_not_sum_to_one",
    { tol: 1e-5, err: r.max_sum_error }) + " · " + L("mean_entropy", { h: r.mean_entropy }) + " · " +
    L("largest_weight", { w: r.max_weight })];
  if (head !== "all" && query !== null && query !== undefined) {
    const c = cellStep(data, layer, head, query, null);
    let s = 0;
    for (const x of c.row) s += x;
    lines.push(L("query_readout", { i: query, tok: data.tokens[query], sum: s, h: r.entropy[0][query], w: c.weight,
      j: c.key, ktok: data.tokens[c.key] }));
  }
  return lines;
}

// 1, 2 or 5 times a power of ten, at least x
function niceTop(x) {
  if (!(x > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((v) => v >= x * (1 - 1e-12));
}

function signedLimit(mats) {
  let lim = 0;
  for (const m of mats) for (const x of m) if (Number.isFinite(x)) lim = Math.max(lim, Math.abs(x));
  return lim > 0 ? lim : 1;
}

class AttentionView {
  constructor(model, el) {
    this.model = model;
    this.L = labeller(model);
    this.live = null; // null: not known yet; false: no kernel (an exported page)
    this.hover = null;
    this.data = null;
    this.root = h("div", { class: "gl-explorer gl-attention", "data-explorer": "attention",
      // keys pressed in the explorer (arrows on a slider or the heatmap) are not JupyterLab's shortcuts
      "data-lm-suppress-shortcuts": "true" });
    el.append(this.root);
    this.build();
    this.redraw = batched(() => this.draw());
    for (const name of ["text", "layer", "head", "stage", "query", "key", "payload", "labels"]) {
      model.on("change:" + name, this.redraw);
    }
    // the width comes from the observer: reading it in draw() would force a layout of the whole page
    this.resize = new ResizeObserver((entries) => { this.width = entries[0].contentRect.width; this.redraw(); });
    this.resize.observe(el);
    this.onWindow = () => this.redraw(); // the window's height sets the size of the pictures
    window.addEventListener("resize", this.onWindow);
    this.stopProbe = probeKernel(model, (live) => { this.live = live; this.redraw(); });
    this.draw();
  }

  destroy() {
    this.resize.disconnect();
    window.removeEventListener("resize", this.onWindow);
    this.stopProbe();
    for (const name of ["text", "layer", "head", "stage", "query", "key", "payload", "labels"]) {
      this.model.off("change:" + name, this.redraw);
    }
  }

  set(values) { update(this.model, values); }

  build() {
    const L = this.L, m = this.model;
    this.textarea = h("textarea", { rows: 2, spellcheck: "false", "data-control": "text", title: L("tip_text") });
    this.textarea.addEventListener("input", () => this.set({ text: this.textarea.value }));
    this.busy = h("span", { class: "gl-sub" });
    this.root.append(h("div", { class: "gl-text" }, [h("span", { class: "gl-label", text: L("text") }), this.textarea]));
    const p = m.get("payload") || {};
    const nL = p.n_layer || 1, nH = p.n_head || 1;
    this.layerGroup = buttonGroup("layer", [...Array(nL).keys()].map((i) => [i, String(i), L("tip_layer", { i })]),
      (v) => this.set({ layer: v }));
    this.headGroup = buttonGroup("head", [["all", L("all_heads"), L("tip_all_heads")],
      ...[...Array(nH).keys()].map((i) => [i, String(i), L("tip_head", { i })])], (v) => this.set({ head: v }));
    this.stageGroup = buttonGroup("stage", STAGES.map((s) => [s, L("stage_" + s), L("tip_stage_" + s)]),
      (v) => this.set({ stage: v }));
    this.selection = h("span", { class: "gl-selection", "data-control": "selection" });
    this.clearQuery = h("button", { type: "button", class: "gl-btn", "data-control": "clear-query", text: "✕",
      title: L("tip_clear_query") });
    this.clearQuery.addEventListener("click", () => this.set({ query: null, key: null }));
    this.root.append(h("div", { class: "gl-row gl-controls" }, [
      h("span", {}, [h("span", { class: "gl-label", text: L("layer") }), this.layerGroup.el]),
      h("span", {}, [h("span", { class: "gl-label", text: L("head") }), this.headGroup.el]),
      h("span", {}, [h("span", { class: "gl-label", text: L("stage") }), this.stageGroup.el]),
      this.selection, this.busy,
    ]));
    this.message = h("div", { class: "gl-message" });
    this.root.append(this.message);
    this.heatTitle = h("div", { class: "gl-title" });
    this.heat = h("canvas", { tabindex: "0", "data-part": "heatmap", "aria-label": L("tip_heatmap"), role: "img" });
    this.overlay = h("canvas", { "aria-hidden": "true" });
    this.stack = h("div", { class: "gl-stack" }, [this.heat, this.overlay]);
    this.side = h("div", { class: "gl-side", "data-part": "side" });
    this.main = h("div", { class: "gl-main" }, [h("div", {}, [this.heatTitle, this.stack]), this.side]);
    this.root.append(this.main);
    this.readout = h("div", { class: "gl-readouts", "data-part": "readout" });
    this.root.append(this.readout);
    this.tip = new Tooltip(this.root);
    this.heat.addEventListener("mousemove", (e) => this.onHover(e));
    this.heat.addEventListener("mouseleave", () => { this.hover = null; this.tip.hide(); this.drawOverlay(); });
    this.heat.addEventListener("click", (e) => this.onClick(e));
    this.heat.addEventListener("keydown", (e) => this.onKey(e));
  }

  // -- state ------------------------------------------------------------------------------------
  state() {
    const m = this.model, p = m.get("payload") || {};
    if (p.q && (!this.data || this.data.payload !== p)) {
      this.data = decode(p);
      this.data.payload = p;
      this.root.dataset.texts = String(Number(this.root.dataset.texts || 0) + 1); // texts drawn so far
    }
    const head = m.get("head");
    return { text: m.get("text"), layer: m.get("layer"), head, stage: m.get("stage"), query: m.get("query"),
      key: m.get("key"), payload: p };
  }

  effective(s) {
    const T = this.data ? this.data.T : 0;
    const query = s.head === "all" || s.query === null || s.query === undefined || s.query >= T ? null : s.query;
    const key = query === null || s.key === null || s.key === undefined || s.key >= T ? null : s.key;
    return { query, key };
  }

  // -- drawing ----------------------------------------------------------------------------------
  draw() {
    const L = this.L, s = this.state(), data = this.data;
    if (document.activeElement !== this.textarea && this.textarea.value !== s.text) this.textarea.value = s.text;
    this.textarea.readOnly = this.live === false;
    this.textarea.title = this.live === false ? L("tip_text_static") : L("tip_text");
    this.layerGroup.set(s.layer);
    this.headGroup.set(s.head);
    this.stageGroup.set(s.stage);
    const p = s.payload;
    this.busy.textContent = this.live !== false && p.text !== undefined && p.text !== s.text ? L("running_model") : "";
    this.message.className = "gl-message" + (p.error ? " gl-error" : "");
    this.message.textContent = p.error ? p.error : (this.live === false ? L("no_kernel") + " " : "") + (p.notice || "");
    this.main.classList.toggle("gl-dim", !!p.error);
    if (!data) { painted(this.root); return; }
    const { query, key } = this.effective(s);
    this.layoutSizes();
    this.drawHeat(s, query, key);
    this.drawOverlay();
    this.drawSide(s, query, key);
    this.readout.replaceChildren(...readoutLines(L, data, s.layer, s.head, query, key).map((t) => h("div", { text: t })));
    this.selection.replaceChildren(...this.selectionText(s, query, key));
    painted(this.root);
  }

  selectionText(s, query, key) {
    const L = this.L, data = this.data;
    if (s.head === "all") return [h("span", { class: "gl-sub", text: L("pick_head_hint") })];
    if (query === null) return [h("span", { class: "gl-sub", text: L("pick_query_hint") })];
    const c = cellStep(data, s.layer, s.head, query, key);
    const text = L("selection", { i: query, tok: data.tokens[query], j: c.key, ktok: data.tokens[c.key] }) +
      (key === null ? " " + L("largest_key") : "");
    return [h("span", { class: "gl-sub", text }), this.clearQuery];
  }

  layoutSizes() {
    const W = Math.max(420, (this.width || this.root.clientWidth || 900) - 10); // inside the padding
    const winH = viewHeight();
    this.sideW = W >= 760 ? Math.max(260, Math.min(430, W * 0.42)) : Math.max(260, W - 20);
    const room = W >= 760 ? W - this.sideW - 14 : W;
    this.S = Math.max(180, Math.min(room - HEAT_MARGIN.l - HEAT_MARGIN.r, winH - 380, 470));
    this.main.style.flexWrap = W >= 760 ? "nowrap" : "wrap";
  }

  // Boxes of the heatmaps: one head, or a grid of every head of the layer.
  boxes(s) {
    const S = this.S, M = HEAT_MARGIN;
    if (s.head !== "all") return [{ head: s.head, x: M.l, y: M.t, w: S, h: S }];
    const H = this.data.H, cols = Math.ceil(Math.sqrt(H)), rows = Math.ceil(H / cols), gap = 10, title = 14;
    const m = Math.min((S - gap * (cols - 1)) / cols, (S - rows * title - gap * (rows - 1)) / rows);
    return [...Array(H).keys()].map((hh) => ({
      head: hh, x: M.l + (hh % cols) * (m + gap), y: M.t + Math.floor(hh / cols) * (m + gap + title) + title, w: m, h: m,
    }));
  }

  drawHeat(s, query, key) {
    const L = this.L, data = this.data, T = data.T, S = this.S, M = HEAT_MARGIN;
    const W = S + M.l + M.r, H = S + M.t + M.b;
    const ctx = sizeCanvas(this.heat, W, H);
    sizeCanvas(this.overlay, W, H);
    this.heatBoxes = this.boxes(s);
    const mats = this.heatBoxes.map((b) => headStages(data, s.layer, b.head)[s.stage]);
    const signed = s.stage !== "weights", shaded = data.mask && (s.stage === "masked" || s.stage === "weights");
    const lim = signed ? signedLimit(mats) : 1;
    const cmap = signed ? "RdBu_r" : "viridis";
    const t = (v) => (signed ? (v + lim) / (2 * lim) : v);
    const pattern = hatch(ctx);
    const hidden = shaded ? (n) => data.mask[n] === 0 : null;
    ctx.font = FONT;
    this.heatBoxes.forEach((b, n) => {
      const grid = drawMatrixImage(ctx, mats[n], T, T, b, cmap, t, hidden, pattern);
      b.xs = grid.xs; b.ys = grid.ys;
      if (s.head === "all") {
        ctx.fillStyle = "#222"; ctx.textAlign = "left"; ctx.textBaseline = "bottom";
        ctx.fillText(L("head_title", { h: b.head }), b.x, b.y - 2);
      }
    });
    const one = this.heatBoxes[0];
    if (s.head !== "all" && T <= 8) { // small matrices: the numbers in the cells
      ctx.textAlign = "center"; ctx.textBaseline = "middle";
      for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) {
        const v = mats[0][i * T + j];
        if (!Number.isFinite(v) || (hidden && hidden(i * T + j))) continue;
        ctx.fillStyle = textColorAt(cmap, t(v));
        ctx.fillText(fmt("{v:.2f}", { v }), (one.xs[j] + one.xs[j + 1]) / 2, (one.ys[i] + one.ys[i + 1]) / 2);
      }
    }
    // token labels on the axes of the first (or only) heatmap: every step-th when they would overlap
    if (s.head !== "all" || T <= 16) {
      for (const b of s.head === "all" ? this.heatBoxes.filter((_, n) => n % Math.ceil(Math.sqrt(data.H)) === 0) : [one]) {
        this.yLabels(ctx, b, data.tokens, s.head === "all" ? 9 : 11);
      }
      const bottom = s.head === "all" ? this.heatBoxes.slice(-Math.ceil(Math.sqrt(data.H))) : [one];
      for (const b of bottom) this.xLabels(ctx, b, data.tokens, s.head === "all" ? 9 : 11);
    }
    ctx.fillStyle = "#333"; ctx.textAlign = "center"; ctx.textBaseline = "bottom";
    ctx.fillText(L("axis_key"), M.l + S / 2, H - 1);
    ctx.save(); ctx.translate(9, M.t + S / 2); ctx.rotate(-Math.PI / 2); ctx.textBaseline = "middle";
    ctx.fillText(L("axis_query"), 0, 0); ctx.restore();
    this.colorbar(ctx, M.l + S + 12, M.t, S, cmap, signed ? -lim : 0, lim, signed ? L("score") : L("weight"));
    if (shaded) {
      ctx.fillStyle = pattern; ctx.fillRect(M.l + S + 12, M.t + S + 8, 12, 12);
      ctx.strokeStyle = "#888"; ctx.strokeRect(M.l + S + 12.5, M.t + S + 8.5, 11, 11);
      ctx.fillStyle = "#333"; ctx.textAlign = "left"; ctx.textBaseline = "middle";
      ctx.fillText(s.stage === "masked" ? "−∞" : "0", M.l + S + 28, M.t + S + 14);
    }
    const who = s.head === "all" ? L("all_heads") : L("head_title", { h: s.head });
    this.heatTitle.textContent = L("heat_title", { layer: s.layer, who, stage: this.stageTitle(s.stage), T });
    this.heat.dataset.stage = s.stage;
    this.heat.dataset.limit = String(lim);
  }

  stageTitle(stage) {
    return stage === "scaled" ? this.L("title_scaled", { scale: this.data.scale }) : this.L("title_" + stage);
  }

  yLabels(ctx, b, tokens, size) {
    const T = tokens.length, step = labelStep(T, b.h, size + 1);
    ctx.font = `${size}px ui-monospace, Menlo, Consolas, monospace`;
    ctx.fillStyle = "#333"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    for (let i = 0; i < T; i += step) ctx.fillText(tokens[i], b.x - 4, (b.ys[i] + b.ys[i + 1]) / 2);
    ctx.font = FONT;
  }

  xLabels(ctx, b, tokens, size) {
    const T = tokens.length, step = labelStep(T, b.w, size + 1);
    ctx.font = `${size}px ui-monospace, Menlo, Consolas, monospace`;
    ctx.fillStyle = "#333"; ctx.textAlign = "center"; ctx.textBaseline = "top";
    for (let j = 0; j < T; j += step) ctx.fillText(tokens[j], (b.xs[j] + b.xs[j + 1]) / 2, b.y + b.h + 3);
    ctx.font = FONT;
  }

  colorbar(ctx, x, y, hgt, cmap, lo, hi, label) {
    colorbarGradient(ctx, x, y, 10, hgt, cmap);
    ctx.strokeStyle = "#888"; ctx.strokeRect(x + 0.5, y + 0.5, 10, hgt - 1);
    ctx.fillStyle = "#333"; ctx.textAlign = "left"; ctx.textBaseline = "middle";
    for (const v of ticks(lo, hi, 4)) ctx.fillText(tickText(v), x + 13, y + hgt * (1 - (v - lo) / (hi - lo)));
    ctx.save(); ctx.translate(x + 50, y + hgt / 2); ctx.rotate(Math.PI / 2); ctx.textAlign = "center";
    ctx.fillText(label, 0, 0); ctx.restore();
  }

  // Selection and hover marks on their own canvas: a hover repaints only this layer.
  drawOverlay() {
    if (!this.data || !this.heatBoxes) return;
    const s = this.state(), { query, key } = this.effective(s), T = this.data.T;
    const ctx = this.overlay.getContext("2d"), dpr = ctx.dpr || window.devicePixelRatio || 1;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, this.overlay.width, this.overlay.height);
    const rect = (b, i0, i1, j0, j1, color, width) => {
      ctx.strokeStyle = color; ctx.lineWidth = width;
      ctx.strokeRect(b.xs[j0] + width / 2, b.ys[i0] + width / 2, b.xs[j1] - b.xs[j0] - width, b.ys[i1] - b.ys[i0] - width);
    };
    for (const b of this.heatBoxes) {
      if (query !== null && b.head === s.head) {
        rect(b, query, query + 1, 0, T, "#ff7f0e", 2);
        const c = cellStep(this.data, s.layer, s.head, query, key);
        rect(b, query, query + 1, c.key, c.key + 1, "#d62728", 2);
      }
      if (this.hover) rect(b, this.hover.i, this.hover.i + 1, this.hover.j, this.hover.j + 1, "#000", 1.5);
    }
  }

  hit(e) {
    const r = this.heat.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
    for (const b of this.heatBoxes || []) {
      if (x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + b.h) {
        const T = this.data.T;
        const j = Math.min(T - 1, Math.floor(((x - b.x) / b.w) * T)), i = Math.min(T - 1, Math.floor(((y - b.y) / b.h) * T));
        return { head: b.head, i, j };
      }
      // the token labels left of and below a heatmap pick a query row or a key column
      if (x < b.x && x >= 0 && y >= b.y && y < b.y + b.h) return { head: b.head, i: Math.floor(((y - b.y) / b.h) * this.data.T), j: null };
      if (y >= b.y + b.h && y < b.y + b.h + 30 && x >= b.x && x < b.x + b.w) return { head: b.head, i: null, j: Math.floor(((x - b.x) / b.w) * this.data.T) };
    }
    return null;
  }

  onHover(e) {
    const L = this.L, data = this.data, spot = this.hit(e);
    if (!data || !spot || spot.i === null || spot.j === null) {
      this.hover = null; this.tip.hide(); this.drawOverlay();
      if (spot) this.tip.show(e, [spot.i === null ? L("tip_pick_key", { j: spot.j, tok: data.tokens[spot.j] })
        : L("tip_pick_query", { i: spot.i, tok: data.tokens[spot.i] })]);
      return;
    }
    const s = this.state(), { i, j, head } = spot, T = data.T;
    this.hover = spot;
    this.drawOverlay();
    const st = headStages(data, s.layer, head), n = i * T + j;
    const c = cellStep(data, s.layer, head, i, j);
    const lines = [L("hover_cell", { i, tok: data.tokens[i], j, ktok: data.tokens[j] }) +
      (s.head === "all" ? " · " + L("head_title", { h: head }) : "")];
    const value = st[s.stage][n];
    lines.push(Number.isFinite(value) ? L("hover_" + s.stage, { v: value }) : L("hover_minus_inf"));
    lines.push(L("hover_dot", { n: data.d, dot: c.dot, scale: data.scale, scaled: c.scaled }));
    if (!c.visible) lines.push(L("hover_masked_cell"));
    else if (s.stage !== "weights") lines.push(L("hover_weight", { w: c.weight })); // (the weights stage said it)
    this.tip.show(e, lines);
    this.heat.dataset.hover = `${head},${i},${j}`;
    painted(this.root);
  }

  onClick(e) {
    const spot = this.hit(e);
    if (!spot) return;
    const s = this.state();
    if (s.head === "all") {
      this.set(spot.i === null || spot.j === null ? { head: spot.head } : { head: spot.head, query: spot.i, key: spot.j });
    } else if (spot.j === null) this.set({ query: spot.i, key: null });
    else if (spot.i === null) this.set({ key: spot.j, query: s.query === null ? spot.j : s.query });
    else this.set({ query: spot.i, key: spot.j });
  }

  onKey(e) {
    const s = this.state(), T = this.data ? this.data.T : 0;
    if (!T || s.head === "all") return;
    const q = s.query === null ? T - 1 : s.query;
    const k = s.key === null ? cellStep(this.data, s.layer, s.head, q, null).key : s.key;
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (e.key === "Escape") this.set({ query: null, key: null });
    else if (moves[e.key]) {
      const [di, dj] = moves[e.key];
      this.set({ query: Math.max(0, Math.min(T - 1, q + di)), key: Math.max(0, Math.min(T - 1, k + dj)) });
    } else return;
    e.preventDefault();
  }

  // -- the query's row and the step-through of one cell -------------------------------------------
  // The panels are made once and drawn again in place; their hover handlers read this.step.
  sidePanels() {
    if (this.panels) return this.panels;
    const L = this.L, P = {};
    const keyAt = (canvas, x, n) => Math.round(((x - 50) / (canvas.clientWidth - 58)) * n - 0.5);
    P.row = h("canvas", { "data-part": "row" });
    P.rowTitle = h("div", { class: "gl-sub" });
    P.row.addEventListener("click", (e) => {
      const st = this.step, j = keyAt(P.row, e.clientX - P.row.getBoundingClientRect().left, st.data.T);
      if (j >= 0 && j < st.data.T) this.set({ key: j });
    });
    P.row.addEventListener("mousemove", (e) => {
      const st = this.step, j = keyAt(P.row, e.clientX - P.row.getBoundingClientRect().left, st.data.T);
      if (j >= 0 && j < st.data.T) this.tip.show(e, [L("tip_bar_key", { j, tok: st.data.tokens[j], w: st.c.row[j] })]);
      else this.tip.hide();
    });
    P.qk = h("canvas", { "data-part": "products" });
    P.dot = h("div", { class: "gl-sub", "data-part": "dot" });
    P.chain = h("div", { class: "gl-sub", "data-part": "chain" });
    P.qk.addEventListener("mousemove", (e) => {
      const st = this.step, d = st.data.d, n = keyAt(P.qk, e.clientX - P.qk.getBoundingClientRect().left, d);
      if (n < 0 || n >= d) { this.tip.hide(); return; }
      const q = slice(st.data, "q", st.layer, st.head)[st.c.query * d + n];
      const k = slice(st.data, "k", st.layer, st.head)[st.c.key * d + n];
      this.tip.show(e, [L("tip_product", { c: n, q, k, p: st.c.products[n] })]);
    });
    P.v = h("canvas", { "data-part": "values" });
    for (const c of [P.row, P.qk]) c.addEventListener("mouseleave", () => this.tip.hide());
    P.hint = h("div", { class: "gl-hint" });
    P.step = [
      h("div", { class: "gl-panel" }, [P.rowTitle, P.row]),
      h("div", { class: "gl-panel" }, [P.dot, P.chain, P.qk]),
      h("div", { class: "gl-panel" }, [legend([["#9a9a9a", L("legend_output")], ["#d62728", L("legend_share")]]), P.v]),
    ];
    this.panels = P;
    return P;
  }

  drawSide(s, query, key) {
    const L = this.L, data = this.data, P = this.sidePanels();
    if (query === null) {
      P.hint.textContent = s.head === "all" ? L("hint_all_heads") : L("hint_pick_query");
      if (this.side.firstChild !== P.hint) this.side.replaceChildren(P.hint);
      return;
    }
    if (this.side.firstChild !== P.step[0]) this.side.replaceChildren(...P.step);
    const c = cellStep(data, s.layer, s.head, query, key), T = data.T, d = data.d;
    this.step = { c, data, layer: s.layer, head: s.head };
    const w = this.sideW, ph = Math.max(92, Math.min(128, (this.S - 90) / 3)), margin = { l: 50, r: 8, t: 6, b: 26 };
    // 1. the query's weights over the keys; the weights of a long row are small: the scale follows the largest
    const top = Math.min(1, niceTop(1.1 * Math.max(...c.row)));
    const row = new Chart(P.row, w, ph, margin).scales({ lo: -0.5, hi: T - 0.5 }, { lo: 0, hi: top });
    if (data.mask && query < T - 1) {
      const ctx = row.ctx, x0 = row.x(query + 0.5);
      ctx.fillStyle = hatch(ctx); ctx.fillRect(x0, row.box.y, row.box.x + row.box.w - x0, row.box.h);
    }
    const keys = [...Array(T).keys()], channels = [...Array(d).keys()];
    row.bars(keys, Array.from(c.row), 0.8, (j) => (j === c.key ? "#d62728" : "#1f77b4"))
      .axes({ xTicks: ticks(0, T - 1, 6).filter(Number.isInteger), yTicks: ticks(0, top, 2), xLabel: L("axis_key_position"), yLabel: L("weight") });
    P.rowTitle.textContent = L("row_title", { i: query, tok: data.tokens[query] });
    // 2. q[d] k[d], channel by channel, and the chain to the weight
    const lo = Math.min(0, ...c.products), hi = Math.max(0, ...c.products), pad = 0.08 * (hi - lo) || 1;
    new Chart(P.qk, w, ph, margin).scales({ lo: -0.6, hi: d - 0.4 }, { lo: lo - pad, hi: hi + pad })
      .bars(channels, Array.from(c.products), 0.8, (n) => (c.products[n] >= 0 ? "#2ca02c" : "#9467bd"))
      .hline(0).axes({ xTicks: ticks(0, d - 1, 6).filter(Number.isInteger), yTicks: ticks(lo, hi, 4), xLabel: L("axis_channel") });
    P.dot.textContent = L("dot_title", { i: query, j: c.key, n: d, dot: c.dot });
    const step = c.visible ? L("step_visible") : L("step_masked");
    P.chain.textContent = L("chain", { scale: data.scale, scaled: c.scaled, step, w: c.weight });
    // 3. the weighted sum of V and the chosen key's share
    const all = [...c.output, ...c.contribution], vlo = Math.min(0, ...all), vhi = Math.max(0, ...all), vpad = 0.08 * (vhi - vlo) || 1;
    new Chart(P.v, w, ph, margin).scales({ lo: -0.6, hi: d - 0.4 }, { lo: vlo - vpad, hi: vhi + vpad })
      .bars(channels, Array.from(c.output), 0.8, "#9a9a9a")
      .bars(channels, Array.from(c.contribution), 0.4, "#d62728")
      .hline(0).axes({ xTicks: ticks(0, d - 1, 6).filter(Number.isInteger), yTicks: ticks(vlo, vhi, 4), xLabel: L("axis_channel") });
  }
}

function render({ model, el }) {
  const view = new AttentionView(model, el);
  return () => view.destroy();
}

export default { render };
