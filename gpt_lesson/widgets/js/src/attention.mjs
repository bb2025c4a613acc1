// Attention explorer: every head of the model on the learner's text, stage by stage.
// Python runs the model once per text and sends every number this view shows (widgets/attention_data.py):
// the four stages of every layer and head, the weighted sums of V and the statistics of the read-outs.
// Here they are looked up, formatted and drawn, so every control, hover and click answers at once
// (and without a kernel). The one arithmetic done here is the step-through's channel-by-channel
// products q[d]·k[d] and w·v[key] of the picked cell.
import {
  batched, buttonGroup, Chart, colorbarGradient, drawMatrix, FONT, fmt, h, hatch, isCompact, labeller, legend, markBox, ownKeys, textWidth,
  painted, probeKernel, sizeCanvas, textColorAt, ticks, tickText, Tooltip, unpack, update, viewHeight, watchSize,
} from "./core.mjs";

export { fmt, formatValue } from "./core.mjs"; // for the tests: the label table's formatting

const STAGES = ["raw", "scaled", "masked", "weights"];
const HEAT_MARGIN = { l: 34, r: 62, t: 4, b: 34 }; // r: the colour bar, its ticks and its label
const TRANSITION_MS = 180;
const TRAITS = ["text", "layer", "head", "stage", "query", "key", "colors", "payload", "labels"];

// Python's payload, unpacked once: stages (layer, head, T, T), vectors (layer, head, T, d), statistics.
export function decode(p) {
  const at = (names) => Object.fromEntries(names.map((n, i) => [n, i]));
  return {
    T: p.T, L: p.n_layer, H: p.n_head, d: p.head_size, tokens: p.tokens, text: p.text, scale: p.scale,
    causal: p.causal, notice: p.notice || "",
    raw: unpack(p.raw), scaled: unpack(p.scaled.like ? { ...p[p.scaled.like], scales: p.scaled.scales } : p.scaled),
    weights: unpack(p.weights),
    q: unpack(p.q), k: unpack(p.k), v: unpack(p.v), output: unpack(p.output),
    rows: unpack(p.rows), heads: unpack(p.heads), layers: unpack(p.layers),
    R: at(p.row_stats), S: at(p.head_stats),
  };
}

function square(data, name, layer, head) {
  const n = data.T * data.T, off = (layer * data.H + head) * n;
  return data[name].subarray(off, off + n);
}

function vectors(data, name, layer, head) {
  const n = data.T * data.d, off = (layer * data.H + head) * n;
  return data[name].subarray(off, off + n);
}

// j is a key the query i may look at (the causal mask keeps the past and the query itself)
export function visible(data, i, j) {
  return !data.causal || j <= i;
}

// One stage of one head, (T, T): the masked stage is the scaled scores with the future hidden (-inf).
export function stageMatrix(data, stage, layer, head) {
  return square(data, stage === "masked" ? "scaled" : stage, layer, head);
}

// A statistic of one query row, of one head, or of every head of a layer (head "all").
export function rowStat(data, name, layer, head, query) {
  const n = Object.keys(data.R).length;
  return data.rows[((layer * data.H + head) * data.T + query) * n + data.R[name]];
}

export function headStat(data, name, layer, head) {
  const n = Object.keys(data.S).length;
  return head === "all" ? data.layers[layer * n + data.S[name]] : data.heads[(layer * data.H + head) * n + data.S[name]];
}

// The step-through of the (query, key) cell, as attention_view_data's "cell" (key null: the largest weight).
export function cellStep(data, layer, head, query, key) {
  const T = data.T, d = data.d;
  if (key === null || key === undefined) key = rowStat(data, "argmax", layer, head, query);
  const w = square(data, "weights", layer, head), row = w.subarray(query * T, query * T + T);
  const q = vectors(data, "q", layer, head).subarray(query * d, query * d + d);
  const k = vectors(data, "k", layer, head).subarray(key * d, key * d + d);
  const v = vectors(data, "v", layer, head).subarray(key * d, key * d + d);
  const weight = row[key];
  return {
    query, key, products: q.map((x, c) => x * k[c]), q, k,
    dot: square(data, "raw", layer, head)[query * T + key], raw: square(data, "raw", layer, head)[query * T + key],
    scaled: square(data, "scaled", layer, head)[query * T + key], visible: visible(data, query, key), weight, row,
    sum_exp: rowStat(data, "sum_exp", layer, head, query), n_visible: data.causal ? query + 1 : T,
    output: vectors(data, "output", layer, head).subarray(query * d, query * d + d),
    contribution: v.map((x) => weight * x),
  };
}

// The read-out lines under the explorer (the only place they are written).
export function readoutLines(L, data, layer, head, query) {
  const err = headStat(data, "max_sum_error", layer, head);
  const lines = [[err < 1e-5 ? L("rows_sum_to_one") : L("rows_do_not_sum_to_one", { err }),
    L("mean_entropy", { h: headStat(data, "mean_entropy", layer, head) }),
    L("largest_weight", { w: headStat(data, "max_weight", layer, head) })].join(" · ")];
  if (head !== "all" && query !== null && query !== undefined) {
    const j = rowStat(data, "argmax", layer, head, query);
    lines.push(L("query_readout", { i: query, tok: data.tokens[query], sum: rowStat(data, "row_sum", layer, head, query),
      h: rowStat(data, "entropy", layer, head, query), w: rowStat(data, "max_weight", layer, head, query), j,
      ktok: data.tokens[j] }));
  }
  return lines;
}

// What the scaling does to the scores, in one line: the spread of the rows before and after it.
export function stageLine(L, data, layer, head) {
  return L("stage_change", { raw: headStat(data, "raw_std", layer, head), scale: data.scale,
    scaled: headStat(data, "scaled_std", layer, head) });
}

// 1, 2 or 5 times a power of ten, at least x
// Write a text only when it differs (writing the same text still replaces the node and its layout).
function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

function niceTop(x) {
  if (!(x > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((v) => v >= x * (1 - 1e-12));
}

class AttentionView {
  constructor(model, el) {
    this.model = model;
    this.L = labeller(model);
    this.live = null; // null: not known yet; false: no kernel (an exported page)
    this.lost = false; // the kernel stopped answering (restarted): the text cannot change
    this.hover = null; // a heatmap cell under the mouse
    this.preview = null; // a query previewed: hovered in the text strip, or a row hovered in the all-heads grid
    this.previewHead = null; // the grid's head under the mouse (its weights tint the text strip)
    this.data = null;
    this.root = h("div", { class: "gl-explorer gl-attention", "data-explorer": "attention" });
    el.append(this.root);
    this.build();
    this.redraw = batched(() => this.draw());
    for (const name of TRAITS) model.on("change:" + name, this.redraw);
    // a new size (or a window resize: the fonts or the zoom may have changed) draws every part again
    this.stopWatch = watchSize(el, (w) => { this.width = w; this.drawnFrom = {}; this.draw(); });
    this.stopProbe = probeKernel(model, (live) => { this.live = live; this.redraw(); });
    this.draw();
  }

  destroy() {
    this.stopWatch();
    this.stopProbe();
    clearTimeout(this.watchdog);
    if (this.anim) cancelAnimationFrame(this.anim);
    for (const name of TRAITS) this.model.off("change:" + name, this.redraw);
  }

  set(values) { update(this.model, values); }

  build() {
    const L = this.L, m = this.model;
    this.textarea = ownKeys(h("textarea", { rows: 2, spellcheck: "false", "data-control": "text", title: L("tip_text") }));
    this.textarea.addEventListener("input", () => { this.set({ text: this.textarea.value }); this.expectPayload(); });
    this.busy = h("span", { class: "gl-sub", "data-part": "busy" });
    this.root.append(h("div", { class: "gl-text" }, [h("span", { class: "gl-label", text: L("text") }), this.textarea]));
    const p = m.get("payload") || {};
    const nL = p.n_layer || 1, nH = p.n_head || 1;
    this.layerGroup = buttonGroup("layer", [...Array(nL).keys()].map((i) => [i, String(i), L("tip_layer", { i })]),
      (v) => this.set({ layer: v }));
    this.headGroup = buttonGroup("head", [["all", L("all_heads"), L("tip_all_heads")],
      ...[...Array(nH).keys()].map((i) => [i, String(i), L("tip_head", { i })])], (v) => this.set({ head: v }));
    this.stageGroup = buttonGroup("stage", STAGES.map((s) => [s, L("stage_" + s), L("tip_stage_" + s)]),
      (v) => this.set({ stage: v }));
    this.colorGroup = buttonGroup("colors", [["shared", L("colors_shared"), L("tip_colors_shared")],
      ["own", L("colors_own"), L("tip_colors_own")]], (v) => this.set({ colors: v }));
    this.selection = h("span", { class: "gl-selection", "data-control": "selection" });
    this.clearQuery = ownKeys(h("button", { type: "button", class: "gl-btn", "data-control": "clear-query", text: "✕",
      title: L("tip_clear_query") }));
    this.clearQuery.addEventListener("click", () => this.set({ query: null, key: null }));
    this.root.append(h("div", { class: "gl-row gl-controls" }, [
      h("span", {}, [h("span", { class: "gl-label", text: L("layer") }), this.layerGroup.el]),
      h("span", {}, [h("span", { class: "gl-label", text: L("head") }), this.headGroup.el]),
      h("span", {}, [h("span", { class: "gl-label", text: L("stage") }), this.stageGroup.el]),
      h("span", {}, [h("span", { class: "gl-label", text: L("colors") }), this.colorGroup.el]),
      this.selection, this.busy,
    ]));
    this.message = h("div", { class: "gl-message", "data-part": "message" });
    this.stageInfo = h("div", { class: "gl-sub gl-wrap", "data-part": "stage-line" });
    this.strip = h("div", { class: "gl-strip", "data-part": "strip", title: L("tip_strip") });
    this.strip.addEventListener("mouseleave", () => this.previewQuery(null));
    this.root.append(this.message, this.stageInfo, this.strip);
    this.heatTitle = h("div", { class: "gl-title" });
    this.heat = ownKeys(h("canvas", { tabindex: "0", "data-part": "heatmap", "aria-label": L("tip_heatmap"), role: "img" }),
      () => this.set({ query: null, key: null }));
    this.overlay = h("canvas", { "aria-hidden": "true" });
    this.stack = h("div", { class: "gl-stack" }, [this.heat, this.overlay]);
    this.side = h("div", { class: "gl-side", "data-part": "side" });
    this.main = h("div", { class: "gl-main" }, [h("div", { class: "gl-heat" }, [this.heatTitle, this.stack]), this.side]);
    this.root.append(this.main);
    this.readout = h("div", { class: "gl-readouts", "data-part": "readout" });
    this.root.append(this.readout);
    this.tip = new Tooltip(this.root);
    this.heat.addEventListener("mousemove", (e) => this.onHover(e));
    this.heat.addEventListener("mouseleave", () => {
      this.hover = null;
      this.tip.hide();
      if (!this.previewQuery(null)) this.drawOverlay();
    });
    this.heat.addEventListener("click", (e) => this.onClick(e));
    this.heat.addEventListener("keydown", (e) => this.onKey(e));
  }

  // -- state ------------------------------------------------------------------------------------
  state() {
    const m = this.model, p = m.get("payload") || {};
    if (p.raw && (!this.data || this.data.payload !== p)) {
      this.data = decode(p);
      this.data.payload = p;
      this.thumbs = null;
      this.root.dataset.texts = String(Number(this.root.dataset.texts || 0) + 1); // texts drawn so far
    }
    return { text: m.get("text"), layer: m.get("layer"), head: m.get("head"), stage: m.get("stage"),
      query: m.get("query"), key: m.get("key"), colors: m.get("colors") || "shared", payload: p, labels: m.get("labels") };
  }

  effective(s) {
    const T = this.data ? this.data.T : 0;
    const query = s.head === "all" || s.query === null || s.query === undefined || s.query >= T ? null : s.query;
    const key = query === null || s.key === null || s.key === undefined || s.key >= T ? null : s.key;
    return { query, key };
  }

  // After a new text: Python should answer with its data. If it does not, ask whether it is there;
  // no answer means the kernel was restarted (or stopped) and this cell must run again.
  expectPayload() {
    clearTimeout(this.watchdog);
    if (this.live === false) return;
    this.watchdog = setTimeout(() => {
      const s = this.state();
      if ((s.payload.text === undefined || s.payload.text === s.text) && !this.lost) return;
      probeKernel(this.model, (live) => {
        this.lost = !live;
        this.redraw();
      }, 1500);
    }, 2500);
  }

  // -- drawing ----------------------------------------------------------------------------------
  draw() {
    // hidden behind a model switch (another model's explorer is shown): drawn when it is seen again
    if (this.width === 0 && this.root.closest(".gl-model-pane[data-shown=false]")) return;
    const L = this.L, s = this.state(), data = this.data, p = s.payload;
    if (document.activeElement !== this.textarea && this.textarea.value !== s.text) this.textarea.value = s.text;
    this.textarea.readOnly = this.live === false || this.lost;
    this.textarea.title = this.live === false ? L("tip_text_static") : L("tip_text");
    this.layerGroup.set(s.layer);
    this.headGroup.set(s.head);
    this.stageGroup.set(s.stage);
    this.colorGroup.set(s.colors);
    this.colorGroup.disable(s.stage === "weights");
    const waiting = this.live !== false && p.text !== undefined && p.text !== s.text;
    if (!waiting) this.lost = false;
    this.busy.textContent = waiting && !this.lost ? L("running_model") : "";
    const stale = !!p.error || this.lost || !data;
    let message = p.error || "";
    if (this.lost) message = L("kernel_lost");
    else if (!p.error) message = (this.live === false && !isCompact(this.root) ? L("no_kernel") + " " : "") + (p.notice || "");
    this.message.className = "gl-message" + (p.error || this.lost ? " gl-error" : "");
    this.message.textContent = message;
    for (const part of [this.main, this.readout, this.strip, this.stageInfo]) part.classList.toggle("gl-dim", stale);
    this.root.dataset.stale = String(stale);
    if (!data) { painted(this.root); return; }
    const { query, key } = this.effective(s);
    this.root.classList.toggle("gl-picked", query !== null); // (the compact layout hides the stage line then)
    if (s.head !== "all" && this.previewHead !== null) { this.preview = null; this.previewHead = null; } // (the grid's)
    this.heat.dataset.preview = this.preview === null ? "" : String(this.preview);
    this.layoutSizes();
    setText(this.stageInfo, stageLine(L, data, s.layer, s.head));
    // Only what changed is drawn again: a query or key leaves the heatmap as it is (its marks are on the
    // overlay), a stage or the colours leave the side panels; the strip and the read-outs change in place.
    const blend = this.transition(s), size = `${this.S},${this.sideW},${this.compact},${this.tight},${window.devicePixelRatio || 1}`;
    if (blend || this.changed("heat", [data.payload, s.labels, size, s.layer, s.head, s.stage, s.colors])) {
      this.drawHeat(s, query, key, blend);
    }
    this.drawOverlay();
    this.drawStrip(s, query);
    if (this.changed("side", [data.payload, s.labels, size, s.layer, s.head, query, key])) this.drawSide(s, query, key);
    const lines = readoutLines(L, data, s.layer, s.head, query);
    if (this.changed("readout", lines)) this.readout.replaceChildren(...lines.map((t) => h("div", { text: t })));
    const selection = this.selectionText(s, query, key);
    if (this.changed("selection", selection)) {
      this.selection.replaceChildren(...selection.map((t) => (t ? h("span", { class: "gl-sub", text: t }) : this.clearQuery)));
    }
    // compact: sized from the rows' heights before this draw; once more if its texts changed them
    if (this.tight && !this.again && this.rowsHeight() !== this.tightRows) {
      this.again = true;
      try { this.draw(); } finally { this.again = false; }
      return;
    }
    painted(this.root);
  }

  // True when the values a part of the view was drawn from differ from the last ones (then kept).
  changed(part, values) {
    const last = (this.drawnFrom = this.drawnFrom || {})[part];
    if (last && last.length === values.length && last.every((v, n) => v === values[n])) return false;
    this.drawnFrom[part] = values;
    return true;
  }

  // A short transition between two stages of the same scores (raw -> scaled -> masked): the colours
  // move from one to the other, so the change of scale is seen, not only read.
  transition(s) {
    const last = this.shown, now = `${s.layer},${s.head},${s.colors},${this.data.payload === (last && last.payload)}`;
    const from = last && last.key === now && last.stage !== s.stage && last.stage !== "weights" && s.stage !== "weights"
      ? last.stage : null;
    this.shown = { key: now, stage: s.stage, payload: this.data.payload };
    if (!from || typeof requestAnimationFrame === "undefined") return null;
    const start = performance.now();
    const step = () => {
      const a = Math.min(1, (performance.now() - start) / TRANSITION_MS);
      const st = this.state(), { query, key } = this.effective(st);
      if (st.stage !== s.stage) return;
      this.drawHeat(st, query, key, a < 1 ? { from, a } : null);
      this.drawOverlay();
      if (a < 1) this.anim = requestAnimationFrame(step);
    };
    if (this.anim) cancelAnimationFrame(this.anim);
    this.anim = requestAnimationFrame(step);
    return { from, a: 0 };
  }

  selectionText(s, query, key) {
    const L = this.L, data = this.data;
    if (s.head === "all") return [L("pick_head_hint")];
    if (query === null) return [L("pick_query_hint")];
    const c = cellStep(data, s.layer, s.head, query, key);
    const text = L("selection", { i: query, tok: data.tokens[query], j: c.key, ktok: data.tokens[c.key] }) +
      (key === null ? " " + L("largest_key") : "");
    return [text, null]; // (null: the button that clears the query)
  }

  layoutSizes() {
    const W = Math.max(360, (this.width || this.root.clientWidth || 900) - 10); // inside the padding
    const winH = viewHeight(), M = HEAT_MARGIN;
    this.compact = W < 1100 || winH < 800;
    const beside = W >= (this.compact ? 500 : 600); // compact: the step-through stays beside the heatmap
    this.sideW = beside ? Math.max(230, Math.min(420, W * (this.compact ? 0.4 : 0.42))) : W - 10;
    const room = beside ? W - this.sideW - 14 : W;
    // the heatmap, the side panels and the read-outs fit the window's height with the controls above them
    this.S = Math.round(Math.max(150, Math.min(room - M.l - M.r, winH - (this.compact ? 440 : 400), 470)));
    this.main.style.flexWrap = beside ? "nowrap" : "wrap";
    this.tight = isCompact(this.root);
    if (this.tight) { // projector mode: the heatmap as large as the rows above and below it leave room for
      const rows = this.tightRows = this.rowsHeight();
      this.S = Math.round(Math.max(90, Math.min(W - 250 - M.l - M.r - 8, winH - rows - M.t - M.b - 40)));
      this.sideH = winH - rows - 22; // the step-through's height
      this.sideW = Math.max(150, W - this.S - M.l - M.r - 10);
      this.main.style.flexWrap = "nowrap";
    }
  }

  // The height of the rows above and below the heatmap (the compact layout sizes it to what is left).
  rowsHeight() {
    return [".gl-controls", ".gl-strip", ".gl-readouts", ".gl-message", "[data-part=stage-line]"]
      .map((q) => this.root.querySelector(q)).reduce((sum, e) => sum + (e && e.offsetHeight ? e.offsetHeight + 3 : 0), 0);
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

  // The colour range of the signed stages: shared (the largest |raw score| of the head, or of the
  // layer's heads, for raw, scaled and masked alike), or the stage's own.
  limit(s) {
    const big = headStat(this.data, "limit", s.layer, s.head);
    if (s.colors === "shared" || s.stage === "raw") return big > 0 ? big : 1;
    return big > 0 ? big * this.data.scale : 1;
  }

  drawHeat(s, query, key, blend) {
    const L = this.L, data = this.data, T = data.T, S = this.S, M = HEAT_MARGIN;
    const W = S + M.l + M.r, H = S + M.t + M.b;
    const ctx = sizeCanvas(this.heat, W, H);
    sizeCanvas(this.overlay, W, H);
    this.heatBoxes = this.boxes(s);
    const signed = s.stage !== "weights", shaded = data.causal && (s.stage === "masked" || s.stage === "weights");
    const lim = signed ? this.limit(s) : 1;
    const cmap = signed ? "RdBu_r" : "viridis";
    const t = (v) => (signed ? (v + lim) / (2 * lim) : v);
    const pattern = hatch(ctx);
    const hidden = shaded ? (n) => n % T > Math.floor(n / T) : null;
    ctx.font = FONT;
    this.heatBoxes.forEach((b) => {
      let values = stageMatrix(data, s.stage, s.layer, b.head);
      if (blend) { // mid-transition: the colours between the two stages
        const from = stageMatrix(data, blend.from, s.layer, b.head), a = blend.a;
        values = values.map((v, n) => (1 - a) * from[n] + a * v);
      }
      const grid = drawMatrix(ctx, values, T, T, b, cmap, t, hidden, pattern);
      b.xs = grid.xs; b.ys = grid.ys;
      if (s.head === "all") {
        ctx.fillStyle = "#222"; ctx.textAlign = "left"; ctx.textBaseline = "bottom";
        ctx.fillText(L("head_title", { h: b.head }), b.x, b.y - 2);
      }
    });
    const one = this.heatBoxes[0];
    if (s.head !== "all" && S / T >= 26) { // cells large enough: their numbers in them
      const values = stageMatrix(data, s.stage, s.layer, s.head);
      ctx.textAlign = "center"; ctx.textBaseline = "middle";
      for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) {
        const v = values[i * T + j];
        if (hidden && hidden(i * T + j)) continue;
        ctx.fillStyle = textColorAt(cmap, t(v));
        ctx.fillText(fmt("{v:.2f}", { v }), (one.xs[j] + one.xs[j + 1]) / 2, (one.ys[i] + one.ys[i + 1]) / 2);
      }
    }
    // positions along both axes, a round step apart (the text strip above names the tokens)
    ctx.fillStyle = "#555"; ctx.font = FONT;
    const every = [1, 2, 5, 10, 20, 50, 100].find((n) => (S / T) * n >= 22) || 100;
    for (let n = 0; n < T; n += every) {
      ctx.textAlign = "right"; ctx.textBaseline = "middle";
      ctx.fillText(String(n), one.x - 3, (one.ys[n] + one.ys[n + 1]) / 2);
      if (s.head !== "all") {
        ctx.textAlign = "center"; ctx.textBaseline = "top";
        ctx.fillText(String(n), (one.xs[n] + one.xs[n + 1]) / 2, one.y + one.h + 9);
      }
    }
    ctx.fillStyle = "#333"; ctx.textAlign = "center"; ctx.textBaseline = "bottom";
    ctx.fillText(L("axis_key"), M.l + S / 2, H - 1);
    ctx.save(); ctx.translate(9, M.t + S / 2); ctx.rotate(-Math.PI / 2); ctx.textBaseline = "middle";
    ctx.fillText(L("axis_query"), 0, 0); ctx.restore();
    this.colorbar(ctx, M.l + S + 10, M.t, S - (shaded ? 20 : 0), cmap, signed ? -lim : 0, lim, signed ? L("score") : L("weight"));
    if (shaded) {
      ctx.fillStyle = pattern; ctx.fillRect(M.l + S + 10, M.t + S - 12, 12, 12);
      ctx.strokeStyle = "#888"; ctx.strokeRect(M.l + S + 10.5, M.t + S - 11.5, 11, 11);
      ctx.fillStyle = "#333"; ctx.textAlign = "left"; ctx.textBaseline = "middle";
      ctx.fillText(s.stage === "masked" ? "−∞" : "0", M.l + S + 26, M.t + S - 6);
    }
    const who = s.head === "all" ? L("all_heads") : L("head_title", { h: s.head });
    this.heatTitle.textContent = L("heat_title", { layer: s.layer, who, stage: this.stageTitle(s.stage), T });
    this.heat.dataset.stage = s.stage;
    this.heat.dataset.limit = String(lim);
  }

  stageTitle(stage) {
    return stage === "scaled" ? this.L("title_scaled", { scale: this.data.scale }) : this.L("title_" + stage);
  }

  colorbar(ctx, x, y, hgt, cmap, lo, hi, label) {
    colorbarGradient(ctx, x, y, 10, hgt, cmap);
    ctx.strokeStyle = "#888"; ctx.strokeRect(x + 0.5, y + 0.5, 10, hgt - 1);
    ctx.fillStyle = "#333"; ctx.textAlign = "left"; ctx.textBaseline = "middle";
    // the end ticks' labels stay inside the canvas (the top one sat 1.5 px above it)
    for (const v of ticks(lo, hi, 4)) {
      ctx.fillText(tickText(v), x + 13, Math.max(y + 5, Math.min(y + hgt - 5, y + hgt * (1 - (v - lo) / (hi - lo)))));
    }
    // the label's glyphs end 6 px inside the canvas (at x + 52 half of them fell off its right edge)
    ctx.save(); ctx.translate(x + 44, y + hgt / 2); ctx.rotate(Math.PI / 2); ctx.textAlign = "center";
    ctx.fillText(label, 0, 0); ctx.restore();
  }

  // Selection and hover marks on their own canvas: a hover repaints only this layer. The marks do
  // not rely on hue: a thick black-and-white box around the query's row and its key's cell, a
  // bracket left of the row; the previewed row (text strip) dims the others.
  drawOverlay() {
    if (!this.data || !this.heatBoxes) return;
    const s = this.state(), { query, key } = this.effective(s), T = this.data.T;
    const ctx = this.overlay.getContext("2d"), dpr = ctx.dpr || window.devicePixelRatio || 1;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, this.overlay.width, this.overlay.height);
    const cell = (b, i0, i1, j0, j1) => [b.xs[j0], b.ys[i0], b.xs[j1] - b.xs[j0], b.ys[i1] - b.ys[i0]];
    const bracket = (b, i) => {
      const y0 = b.ys[i], y1 = b.ys[i + 1], x = b.x - 5;
      ctx.save(); ctx.strokeStyle = "#000"; ctx.lineWidth = 2.5;
      ctx.beginPath(); ctx.moveTo(x + 3, y0 - 1); ctx.lineTo(x, y0 - 1); ctx.lineTo(x, y1 + 1); ctx.lineTo(x + 3, y1 + 1);
      ctx.stroke(); ctx.restore();
    };
    const rowMark = this.preview !== null ? this.preview : query;
    for (const b of this.heatBoxes) {
      if (this.preview !== null) { // the other rows fade: the previewed row stands out
        ctx.fillStyle = "rgba(255,255,255,0.6)";
        if (this.preview > 0) ctx.fillRect(b.xs[0], b.ys[0], b.w, b.ys[this.preview] - b.ys[0]);
        if (this.preview < T - 1) ctx.fillRect(b.xs[0], b.ys[this.preview + 1], b.w, b.ys[T] - b.ys[this.preview + 1]);
      }
      if (rowMark !== null && (b.head === s.head || this.preview !== null)) {
        markBox(ctx, ...cell(b, rowMark, rowMark + 1, 0, T), T > 40 ? 2 : 3);
        bracket(b, rowMark);
      }
      if (query !== null && b.head === s.head && this.preview === null) {
        const c = cellStep(this.data, s.layer, s.head, query, key);
        markBox(ctx, ...cell(b, query, query + 1, c.key, c.key + 1), 2);
        const x = (b.xs[c.key] + b.xs[c.key + 1]) / 2, y = b.y + b.h + 2; // a pointer under the key's column
        ctx.fillStyle = "#000"; ctx.beginPath(); ctx.moveTo(x, y); ctx.lineTo(x - 5, y + 7); ctx.lineTo(x + 5, y + 7); ctx.fill();
      }
      if (this.hover && this.hover.head === b.head) {
        ctx.strokeStyle = "#000"; ctx.lineWidth = 1.5;
        const [x, y, w, hh] = cell(b, this.hover.i, this.hover.i + 1, this.hover.j, this.hover.j + 1);
        ctx.strokeRect(x + 0.75, y + 0.75, w - 1.5, hh - 1.5);
      }
    }
  }

  // -- the text strip: the real text, each character tinted by the query's weights -----------------
  drawStrip(s, query) {
    const data = this.data;
    if (!this.chars || this.chars.payload !== data.payload) {
      const spans = data.tokens.map((tok, i) => {
        const span = h("span", { class: "gl-char", "data-pos": String(i), text: tok });
        span.addEventListener("mouseenter", () => this.previewQuery(i));
        span.addEventListener("click", () => { if (this.state().head !== "all") this.set({ query: i, key: null }); });
        return span;
      });
      const out = [];
      spans.forEach((span, i) => { out.push(span); if (data.tokens[i] === "⏎") out.push(h("br")); });
      this.strip.replaceChildren(...out);
      this.chars = { payload: data.payload, spans, shown: spans.map(() => ({})) };
    }
    this.tintStrip(s, this.preview !== null ? this.preview : query, this.previewHead);
  }

  // The weights of query i tint the text: of the head shown, or in the grid of the head under the mouse.
  // Each span keeps what it was given last: only the styles, classes and titles that change are written.
  tintStrip(s, i, head = null) {
    const data = this.data, T = data.T, { spans, shown } = this.chars;
    const hd = s.head !== "all" ? s.head : head;
    const one = hd !== null && hd !== undefined && i !== null && i !== undefined;
    if (!this.changed("strip", [data.payload, s.labels, s.layer, one ? hd : null, i === undefined ? null : i])) return;
    const w = one ? square(data, "weights", s.layer, hd).subarray(i * T, i * T + T) : null;
    const top = one ? rowStat(data, "max_weight", s.layer, hd, i) : 1;
    const put = (span, was, name, value, write) => { if (was[name] !== value) { was[name] = value; write(span, value); } };
    for (let j = 0; j < T; j++) {
      const span = spans[j], was = shown[j];
      const a = one ? w[j] / (top || 1) : 0;
      put(span, was, "bg", one && visible(data, i, j) ? `rgba(33,102,172,${a.toFixed(3)})` : "", (el, v) => { el.style.backgroundColor = v; });
      put(span, was, "fg", a > 0.55 ? "#fff" : "", (el, v) => { el.style.color = v; });
      put(span, was, "query", i === j, (el, v) => el.classList.toggle("gl-query", v));
      put(span, was, "future", i !== null && i !== undefined && !visible(data, i, j), (el, v) => el.classList.toggle("gl-future", v));
      put(span, was, "title", one ? this.L("tip_char", { j, tok: data.tokens[j], w: w[j] })
        : this.L("tip_char_pick", { j, tok: data.tokens[j] }), (el, v) => { el.title = v; });
    }
    this.strip.dataset.query = i === null || i === undefined ? "" : String(i);
    this.strip.dataset.head = one ? String(hd) : "";
  }

  // Hovering a character previews its row (the heatmap marks it, the strip shows its weights); a click locks it.
  // In the all-heads grid, hovering a row previews that query's row in every head of the layer and on
  // every thumbnail of the overview, and the head under the mouse tints the text. False: nothing changed.
  previewQuery(i, head = null) {
    if (!this.data || (this.preview === i && this.previewHead === head)) return false;
    this.preview = i;
    this.previewHead = i === null ? null : head;
    const s = this.state(), { query } = this.effective(s);
    this.drawOverlay();
    this.tintStrip(s, i !== null ? i : query, this.previewHead);
    this.drawOverviewMarks();
    this.heat.dataset.preview = i === null ? "" : String(i);
    painted(this.root);
    return true;
  }

  hit(e) {
    const r = this.heat.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
    for (const b of this.heatBoxes || []) {
      if (x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + b.h) {
        const T = this.data.T;
        const j = Math.min(T - 1, Math.floor(((x - b.x) / b.w) * T)), i = Math.min(T - 1, Math.floor(((y - b.y) / b.h) * T));
        return { head: b.head, i, j };
      }
    }
    return null;
  }

  onHover(e) {
    const L = this.L, data = this.data, spot = this.hit(e);
    if (!data || !spot) {
      this.hover = null;
      this.tip.hide();
      if (!this.previewQuery(null)) this.drawOverlay();
      return;
    }
    const s = this.state(), { i, j, head } = spot, T = data.T;
    this.hover = spot;
    if (!(s.head === "all" && this.previewQuery(i, head))) this.drawOverlay(); // (a new row repaints it all)
    const value = stageMatrix(data, s.stage, s.layer, head)[i * T + j], seen = visible(data, i, j);
    const w = square(data, "weights", s.layer, head)[i * T + j];
    const lines = [L("hover_cell", { i, tok: data.tokens[i], j, ktok: data.tokens[j] }) +
      (s.head === "all" ? " · " + L("head_title", { h: head }) : "")];
    lines.push(s.stage === "masked" && !seen ? L("hover_minus_inf") : L("hover_" + s.stage, { v: value }));
    lines.push(L("hover_dot", { n: data.d, dot: square(data, "raw", s.layer, head)[i * T + j], scale: data.scale,
      scaled: square(data, "scaled", s.layer, head)[i * T + j] }));
    if (!seen) lines.push(L("hover_masked_cell"));
    else if (s.stage !== "weights") lines.push(L("hover_weight", { w })); // (the weights stage said it)
    this.tip.show(e, lines);
    this.heat.dataset.hover = `${head},${i},${j}`;
    painted(this.root);
  }

  onClick(e) {
    const spot = this.hit(e);
    if (!spot) return;
    this.heat.focus();
    const s = this.state();
    this.preview = null;
    this.previewHead = null;
    if (s.head === "all") this.set({ head: spot.head, query: spot.i, key: spot.j });
    else this.set({ query: spot.i, key: spot.j });
  }

  onKey(e) {
    const s = this.state(), T = this.data ? this.data.T : 0;
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (!moves[e.key]) return;
    e.preventDefault();
    if (!T || s.head === "all") return;
    const q = s.query === null ? T - 1 : s.query;
    const k = s.key === null ? cellStep(this.data, s.layer, s.head, q, null).key : s.key;
    const [di, dj] = moves[e.key];
    this.set({ query: Math.max(0, Math.min(T - 1, q + di)), key: Math.max(0, Math.min(T - 1, k + dj)) });
  }

  // -- the side: the layers x heads overview, or the query's row and the step-through of one cell ----
  sidePanels() {
    if (this.panels) return this.panels;
    const L = this.L, P = {};
    const keyAt = (canvas, x, n) => Math.round(((x - 50) / (canvas.clientWidth - 58)) * n - 0.5);
    P.row = h("canvas", { "data-part": "row" });
    P.rowTitle = h("div", { class: "gl-sub gl-wrap" });
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
    P.dot = h("div", { class: "gl-sub gl-wrap", "data-part": "dot" });
    P.chain = h("div", { class: "gl-sub gl-wrap", "data-part": "chain" });
    P.qk.addEventListener("mousemove", (e) => {
      const st = this.step, d = st.data.d, n = keyAt(P.qk, e.clientX - P.qk.getBoundingClientRect().left, d);
      if (n < 0 || n >= d) { this.tip.hide(); return; }
      this.tip.show(e, [L("tip_product", { c: n, q: st.c.q[n], k: st.c.k[n], p: st.c.products[n] })]);
    });
    P.v = h("canvas", { "data-part": "values" });
    for (const c of [P.row, P.qk]) c.addEventListener("mouseleave", () => this.tip.hide());
    P.hint = h("div", { class: "gl-hint gl-wrap" });
    P.overview = h("canvas", { "data-part": "overview", title: L("tip_overview") });
    P.overviewTitle = h("div", { class: "gl-sub gl-wrap", text: L("overview_title") });
    P.overview.addEventListener("click", (e) => {
      const spot = this.thumbAt(e);
      if (spot) this.set({ layer: spot.layer, head: spot.head, query: null, key: null });
    });
    P.overview.addEventListener("mousemove", (e) => {
      const spot = this.thumbAt(e);
      if (spot) this.tip.show(e, [L("tip_thumb", { layer: spot.layer, h: spot.head,
        e: headStat(this.data, "mean_entropy", spot.layer, spot.head) })]);
      else this.tip.hide();
    });
    P.overview.addEventListener("mouseleave", () => this.tip.hide());
    P.overviewMarks = h("canvas", { "aria-hidden": "true", "data-part": "overview-marks" });
    P.pick = [P.hint, P.overviewTitle, h("div", { class: "gl-stack" }, [P.overview, P.overviewMarks])];
    P.step = [
      h("div", { class: "gl-panel" }, [P.rowTitle, P.row]),
      h("div", { class: "gl-panel" }, [P.dot, P.chain, P.qk]),
      h("div", { class: "gl-panel" }, [legend([["#9a9a9a", L("legend_output")], ["#000", L("legend_share")]]), P.v]),
    ];
    this.panels = P;
    return P;
  }

  thumbAt(e) {
    const g = this.thumbGrid, r = this.panels.overview.getBoundingClientRect();
    if (!g) return null;
    const x = e.clientX - r.left - g.x0, y = e.clientY - r.top - g.y0;
    const head = Math.floor(x / (g.size + g.gap)), layer = Math.floor(y / (g.size + g.gap));
    if (head < 0 || layer < 0 || head >= this.data.H || layer >= this.data.L) return null;
    if (x - head * (g.size + g.gap) > g.size || y - layer * (g.size + g.gap) > g.size) return null;
    return { layer, head };
  }

  // Every layer and head at once, their softmax weights as thumbnails: click one to open it.
  drawOverview(s) {
    const data = this.data, P = this.panels, L = this.L;
    const gap = 6, y0 = 16;
    const x0 = 10 + Math.ceil(Math.max(...[...Array(data.L).keys()].map((l) => textWidth(L("layer_short", { i: l })))));
    const size = Math.max(18, Math.min(64, Math.floor((this.sideW - x0 - gap * data.H) / data.H),
      Math.floor((this.S - y0 - 30 - gap * data.L) / data.L)));
    const w = x0 + data.H * (size + gap), hh = y0 + data.L * (size + gap);
    const ctx = sizeCanvas(P.overview, w, hh);
    const pattern = hatch(ctx);
    ctx.font = FONT; ctx.fillStyle = "#333"; ctx.textBaseline = "middle";
    for (let l = 0; l < data.L; l++) {
      ctx.textAlign = "right";
      ctx.fillText(L("layer_short", { i: l }), x0 - 6, y0 + l * (size + gap) + size / 2);
      for (let hd = 0; hd < data.H; hd++) {
        const box = { x: x0 + hd * (size + gap), y: y0 + l * (size + gap), w: size, h: size };
        drawMatrix(ctx, square(data, "weights", l, hd), data.T, data.T, box, "viridis", (v) => v,
          data.causal ? (n) => n % data.T > Math.floor(n / data.T) : null, pattern);
        if (l === s.layer && (s.head === "all" || s.head === hd)) markBox(ctx, box.x - 3, box.y - 3, size + 6, size + 6, 2);
      }
    }
    ctx.textAlign = "center"; ctx.textBaseline = "bottom";
    for (let hd = 0; hd < data.H; hd++) ctx.fillText(L("head_short", { h: hd }), x0 + hd * (size + gap) + size / 2, y0 - 3);
    this.thumbGrid = { x0, y0, size, gap, w, h: hh };
    this.drawOverviewMarks();
  }

  // The previewed query's row on every thumbnail (on a canvas of its own over the overview): the other
  // rows fade and a black box holds the row, so one query is compared across every layer and head.
  drawOverviewMarks() {
    const P = this.panels, g = this.thumbGrid, data = this.data;
    if (!P || !g || !data || !P.overviewMarks.isConnected) return;
    const ctx = sizeCanvas(P.overviewMarks, g.w, g.h), i = this.preview;
    ctx.clearRect(0, 0, g.w, g.h);
    P.overviewMarks.dataset.row = i === null ? "" : String(i);
    if (i === null || i >= data.T) return;
    const row = g.size / data.T;
    ctx.fillStyle = "rgba(255,255,255,0.6)";
    ctx.strokeStyle = "#000";
    ctx.lineWidth = 1.5;
    for (let l = 0; l < data.L; l++) {
      for (let hd = 0; hd < data.H; hd++) {
        const x = g.x0 + hd * (g.size + g.gap), y = g.y0 + l * (g.size + g.gap), y0 = y + i * row;
        ctx.fillRect(x, y, g.size, y0 - y);
        ctx.fillRect(x, y0 + row, g.size, y + g.size - y0 - row);
        ctx.strokeRect(x - 1.25, y0 - 1.25, g.size + 2.5, row + 2.5);
      }
    }
  }

  drawSide(s, query, key) {
    const L = this.L, data = this.data, P = this.sidePanels();
    if (query === null) {
      P.hint.textContent = s.head === "all" ? L("hint_all_heads") : L("hint_pick_query");
      if (this.side.firstChild !== P.hint) this.side.replaceChildren(...P.pick);
      this.drawOverview(s);
      return;
    }
    if (this.side.firstChild !== P.step[0]) this.side.replaceChildren(...P.step);
    const c = cellStep(data, s.layer, s.head, query, key), T = data.T, d = data.d;
    this.step = { c, data, layer: s.layer, head: s.head };
    // compact: the three charts and their titles no taller than the heatmap beside them
    const w = this.sideW;
    let ph = Math.round(this.compact ? Math.max(48, Math.min(120, (this.S - 140) / 3))
      : Math.max(70, Math.min(120, (this.S - 100) / 3)));
    let margin = { l: 50, r: 8, t: 6, b: 26 };
    if (this.tight) { // projector mode: the three charts and their lines as high as the heatmap beside them
      P.rowTitle.textContent = L("row_title", { i: query, tok: data.tokens[query] });
      P.dot.textContent = L("dot_title", { i: query, j: c.key, n: d, dot: c.dot });
      P.chain.textContent = c.visible
        ? L("chain", { scale: data.scale, scaled: c.scaled, sum: c.sum_exp, n: c.n_visible, w: c.weight })
        : L("chain_masked", { scale: data.scale, scaled: c.scaled });
      // (its q·k products chart is left out: the line above it gives their sum)
      const lines = [P.rowTitle, P.dot, P.chain, P.v.previousSibling].reduce((sum, e) => sum + (e.offsetHeight || 15), 0);
      ph = Math.round(Math.max(40, (this.sideH - lines - 6) / 2));
      margin = { l: 34, r: 6, t: 5, b: 17 };
    }
    const xLabel = (text) => (this.tight ? undefined : text);
    // 1. the query's weights over the keys; the weights of a long row are small: the scale follows the largest
    const top = Math.min(1, niceTop(1.1 * rowStat(data, "max_weight", s.layer, s.head, query)));
    const row = new Chart(P.row, w, ph, margin).scales({ lo: -0.5, hi: T - 0.5 }, { lo: 0, hi: top });
    if (data.causal && query < T - 1) {
      const ctx = row.ctx, x0 = row.x(query + 0.5);
      ctx.fillStyle = hatch(ctx); ctx.fillRect(x0, row.box.y, row.box.x + row.box.w - x0, row.box.h);
    }
    row.bars(Array.from(c.row), 0.8, (j) => (j === c.key ? "#000" : "#2166ac"))
      .axes({ xTicks: ticks(0, T - 1, 6).filter(Number.isInteger), yTicks: ticks(0, top, 2), xLabel: xLabel(L("axis_key_position")), yLabel: xLabel(L("weight")) });
    P.rowTitle.textContent = L("row_title", { i: query, tok: data.tokens[query] });
    // 2. q[d] k[d], channel by channel, and the chain to the weight
    const lo = Math.min(0, ...c.products), hi = Math.max(0, ...c.products), pad = 0.08 * (hi - lo) || 1;
    new Chart(P.qk, w, ph, margin).scales({ lo: -0.6, hi: d - 0.4 }, { lo: lo - pad, hi: hi + pad })
      .bars(Array.from(c.products), 0.8, (n) => (c.products[n] >= 0 ? "#b2182b" : "#2166ac"))
      .hline(0).axes({ xTicks: ticks(0, d - 1, 6).filter(Number.isInteger), yTicks: ticks(lo, hi, 4), xLabel: xLabel(L("axis_channel")) });
    P.dot.textContent = L("dot_title", { i: query, j: c.key, n: d, dot: c.dot });
    P.chain.textContent = c.visible
      ? L("chain", { scale: data.scale, scaled: c.scaled, sum: c.sum_exp, n: c.n_visible, w: c.weight })
      : L("chain_masked", { scale: data.scale, scaled: c.scaled });
    // 3. the weighted sum of V and the chosen key's share
    const all = [...c.output, ...c.contribution], vlo = Math.min(0, ...all), vhi = Math.max(0, ...all), vpad = 0.08 * (vhi - vlo) || 1;
    new Chart(P.v, w, ph, margin).scales({ lo: -0.6, hi: d - 0.4 }, { lo: vlo - vpad, hi: vhi + vpad })
      .bars(Array.from(c.output), 0.8, "#9a9a9a")
      .bars(Array.from(c.contribution), 0.4, "#000")
      .hline(0).axes({ xTicks: ticks(0, d - 1, 6).filter(Number.isInteger), yTicks: ticks(vlo, vhi, this.tight ? 2 : 4), xLabel: xLabel(L("axis_channel")) });
  }
}

function render({ model, el }) {
  const view = new AttentionView(model, el);
  return () => view.destroy();
}

export default { render };
