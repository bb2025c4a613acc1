// Scaling explorer: why attention divides q.k by sqrt(d_k).
// Python measured everything up front (widgets/scaling_explorer.py), for every d_k stop and every
// setting of the controls (no scaling, 1/sqrt(d_k), 1/(sqrt(d_k)·τ) for each τ of the slider): the
// variance of the scores, their histogram, one query's softmax, and the softmax's largest weight,
// entropy and gradient size averaged over many queries. Here they are looked up, formatted and drawn.
import {
  buttonGroup, Chart, float32s, h, isCompact, mount, legend, painted, slider, ticks, tickText, Tooltip, unpack, update,
  viewHeight,
} from "./core.mjs";

const SCALINGS = ["none", "sqrt", "temperature"];

// The index of a setting in Python's table: "none", "sqrt", or "temperature" at one of the taus.
export function settingIndex(p, scaling, temperature) {
  if (scaling !== "temperature") return p.settings.indexOf(scaling);
  let best = -1;
  p.settings.forEach((s, n) => {
    if (s.startsWith("temperature@") && (best < 0 || Math.abs(p.taus[n] - temperature) < Math.abs(p.taus[best] - temperature))) best = n;
  });
  return best;
}

function tables(p) {
  if (!p.cache) {
    p.cache = { table: float32s(p.table), rows: unpack(p.rows), counts: float32s(p.counts), normal: float32s(p.normal) };
  }
  return p.cache;
}

// What ScalingData.view holds for one setting, from Python's table.
export function scalingView(p, dK, scaling, temperature) {
  const n = p.stops.indexOf(dK), s = settingIndex(p, scaling, temperature);
  if (n < 0) throw new Error("d_k=" + dK + " is not one of the stops " + p.stops.join(", "));
  const t = tables(p), F = p.fields.length, S = p.settings.length, B = p.bins, N = p.normal_points;
  const at = (stop, setting) => Object.fromEntries(p.fields.map((f, k) => [f, t.table[(stop * S + setting) * F + k]]));
  const row = at(n, s);
  return {
    d_k: dK, scaling, temperature: scaling === "temperature" ? p.taus[s] : temperature, setting: s,
    scale: row.scale, n_samples: p.n_samples, T: p.T, n_rows: p.n_rows, uniform_entropy: p.uniform_entropy, ...row,
    weights: t.rows.subarray((n * S + s) * p.T, (n * S + s + 1) * p.T),
    counts: t.counts.subarray(n * B, (n + 1) * B), normal: t.normal.subarray(n * N, (n + 1) * N),
    curve: (setting) => p.grid.map((d) => at(p.stops.indexOf(d), setting)),
  };
}

export function readoutLine(L, v) {
  return L("scaling_readout", { v: v.variance, t: v.theory, n: v.n_rows, m: v.mean_max_weight, h: v.mean_entropy,
    T: v.T, u: v.uniform_entropy, g: v.mean_grad_norm });
}

class ScalingView {
  constructor(model, el) {
    this.destroy = mount(this, model, el, "scaling", ["d_k", "scaling", "temperature", "payload", "labels"]);
  }

  taus() {
    const p = this.model.get("payload");
    return p.settings.map((s, n) => [s, n]).filter(([s]) => s.startsWith("temperature@")).map(([, n]) => n);
  }

  build() {
    const L = this.L, m = this.model, p = m.get("payload");
    this.dk = slider("d_k", { label: L("d_k"), tip: L("tip_d_k"), min: 0, max: p.stops.length - 1, step: 1,
      value: p.stops.indexOf(m.get("d_k")), onInput: (n) => update(m, { d_k: p.stops[n] }) });
    this.scalingGroup = buttonGroup("scaling", SCALINGS.map((s) => [s, L("scaling_" + s), L("tip_scaling_" + s)]),
      (v) => update(m, { scaling: v }));
    const taus = this.taus();
    this.tau = slider("temperature", { label: L("tau"), tip: L("tip_tau"), min: 0, max: taus.length - 1, step: 1,
      value: taus.indexOf(settingIndex(p, "temperature", m.get("temperature"))),
      onInput: (n) => update(m, { temperature: m.get("payload").taus[this.taus()[n]] }) });
    this.root.append(h("div", { class: "gl-row gl-controls" }, [this.dk.el,
      h("span", {}, [h("span", { class: "gl-label", text: L("scaling") }), this.scalingGroup.el]), this.tau.el]));
    this.title = h("div", { class: "gl-title gl-wrap" });
    this.root.append(this.title);
    const panel = (part) => {
      const c = h("canvas", { "data-part": part });
      const t = h("div", { class: "gl-sub gl-wrap" }), k = h("div");
      const el = h("div", { class: "gl-panel" }, [t, c, k]);
      return { canvas: c, title: t, key: k, el };
    };
    this.panels = { hist: panel("histogram"), variance: panel("variance"), row: panel("softmax"), sat: panel("saturation") };
    const keys = {
      hist: [["rgba(33,102,172,0.75)", L("legend_measured")], ["#000", L("legend_normal")]],
      variance: [["#999", L("legend_none_variance"), true], ["#2166ac", L("legend_theory")],
        ["#000", L("legend_measured_point")]],
      row: [["#777", L("legend_uniform", { T: p.T }), true]],
      sat: [["#1b7837", L("legend_entropy")], ["#762a83", L("legend_gradient")], ["rgba(0,0,0,0.45)", L("legend_no_scaling"), true]],
    };
    for (const [name, items] of Object.entries(keys)) this.panels[name].key.append(legend(items));
    this.grid = h("div", { class: "gl-grid" }, Object.values(this.panels).map((p) => p.el));
    this.root.append(this.grid);
    this.readout = h("div", { class: "gl-readouts", "data-part": "readout" });
    this.root.append(this.readout);
    this.tip = new Tooltip(this.root);
  }

  draw() {
    const L = this.L, m = this.model, p = m.get("payload");
    const dK = m.get("d_k"), scaling = m.get("scaling"), tau = m.get("temperature");
    const v = scalingView(p, dK, scaling, tau);
    this.v = v;
    this.dk.set(p.stops.indexOf(dK), String(dK));
    this.scalingGroup.set(scaling);
    const taus = this.taus(), at = taus.indexOf(settingIndex(p, "temperature", tau));
    this.tau.set(at, L("tau_value", { t: p.taus[taus[at]] }));
    this.tau.disable(scaling !== "temperature");
    const label = L("scaling_" + scaling) + (scaling === "temperature" ? L("tau_suffix", { t: v.temperature }) : "");
    this.title.textContent = L("scaling_title", { d_k: dK, label, scale: v.scale });
    // the room inside the padding; four panels in a row when they fit, else two rows of two
    const W = Math.max(360, (this.width || this.root.clientWidth || 900) - 10), winH = viewHeight();
    const tight = this.tight = isCompact(this.root);
    const cols = !tight && W >= 4 * 220 + 3 * 16 ? 4 : 2;
    let pw = Math.floor((W - 16 * (cols - 1)) / cols);
    let ph = Math.round(Math.max(120, Math.min(220, cols === 4 ? winH - 340 : (winH - 420) / 2)));
    const texts = () => { // compact: the panels' titles and legends, the taller of each row
      const t = Object.values(this.panels).map((p) => p.title.offsetHeight + p.key.offsetHeight);
      return Math.max(t[0], t[1]) + Math.max(t[2], t[3]);
    };
    let used = 0;
    if (tight) { // projector mode: two by two beside the column of controls, title and read-out
      pw = Math.floor((W - this.title.offsetWidth - 8 - 8) / 2);
      used = texts();
      ph = Math.round(Math.max(50, (winH - 12 - used - 4) / 2));
    }
    for (const panel of Object.values(this.panels)) panel.el.style.width = pw + "px";
    this.drawHistogram(p, v, pw, ph);
    this.drawVariance(p, v, pw, ph);
    this.drawRow(v, pw, ph);
    this.drawSaturation(p, v, pw, ph);
    this.readout.replaceChildren(h("div", { class: "gl-wrap", text: readoutLine(L, v) }));
    if (tight && !this.again && texts() !== used) { // (its texts changed the room: once more)
      this.again = true;
      try { this.draw(); } finally { this.again = false; }
      return;
    }
    painted(this.root);
  }

  hoverOn(panel, chart, fn) {
    const c = panel.canvas;
    c.onmousemove = (e) => {
      const r = c.getBoundingClientRect(), lines = fn(e.clientX - r.left, e.clientY - r.top, chart);
      if (lines) this.tip.show(e, lines); else this.tip.hide();
    };
    c.onmouseleave = () => this.tip.hide();
  }

  // The scores' histogram in counts per bin: the bins are Python's, the x axis in scaled units.
  drawHistogram(p, v, w, hgt) {
    const L = this.L, P = this.panels.hist, B = p.bins, N = p.normal_points;
    const lo = v.lo, hi = v.hi, edge = (n, of) => lo + ((hi - lo) * n) / of;
    const x0 = [...Array(B).keys()].map((n) => edge(n, B)), x1 = [...Array(B).keys()].map((n) => edge(n + 1, B));
    const top = 1.1 * Math.max(...v.counts, ...v.normal);
    const chart = new Chart(P.canvas, w, hgt).scales({ lo, hi }, { lo: 0, hi: top });
    chart.spans(x0, x1, Array.from(v.counts), "rgba(33,102,172,0.75)")
      .line([...Array(N).keys()].map((n) => edge(n, N - 1)), Array.from(v.normal), { color: "#000" })
      .axes({ xTicks: ticks(lo, hi, 5), yTicks: ticks(0, top, 4), xLabel: L("axis_score"), yLabel: this.tight ? undefined : L("axis_count") });
    P.title.textContent = L("hist_title", { n: v.n_samples, v: v.variance });
    this.hoverOn(P, chart, (x) => {
      const b = Math.floor(((x - chart.box.x) / chart.box.w) * B);
      if (b < 0 || b >= B) return null;
      return [L("tip_bin", { a: x0[b], b: x1[b], c: v.counts[b] })];
    });
  }

  drawVariance(p, v, w, hgt) {
    const L = this.L, P = this.panels.variance, grid = p.grid;
    const now = v.curve(v.setting), none = v.curve(p.settings.indexOf("none"));
    const chart = new Chart(P.canvas, w, hgt, { l: 44, r: 18, t: 8, b: 34 }).scales({ lo: 1, hi: grid[grid.length - 1], log: 2 }, { lo: 5e-3, hi: 2e3, log: 10 });
    chart.line(grid, none.map((r) => r.theory), { color: "#999", dash: [5, 4] }).line(grid, now.map((r) => r.theory), { color: "#2166ac" });
    const ctx = chart.ctx, cx = chart.x(v.d_k), cy = chart.y(Math.max(5e-3, v.variance));
    ctx.fillStyle = "#000"; ctx.beginPath(); ctx.arc(cx, cy, 4.5, 0, 2 * Math.PI); ctx.fill();
    ctx.strokeStyle = "#fff"; ctx.lineWidth = 1.5; ctx.beginPath(); ctx.arc(cx, cy, 2.5, 0, 2 * Math.PI); ctx.stroke();
    chart.axes({ xTicks: this.tight ? [1, 16, 256] : [1, 4, 16, 64, 256, 1024],
      yTicks: this.tight ? [1e-2, 1, 100] : [1e-2, 1e-1, 1, 10, 100, 1000], xLabel: L("axis_d_k"),
      yLabel: this.tight ? undefined : L("axis_variance"), grid: true, yText: (t) => tickText(t) });
    P.title.textContent = L("variance_title");
    this.hoverOn(P, chart, (x) => {
      const n = Math.round(((x - chart.box.x) / chart.box.w) * (grid.length - 1));
      if (n < 0 || n >= grid.length) return null;
      return [L("tip_variance", { d: grid[n], v: now[n].theory })];
    });
  }

  drawRow(v, w, hgt) {
    const L = this.L, P = this.panels.row, T = v.T;
    const chart = new Chart(P.canvas, w, hgt).scales({ lo: -0.6, hi: T - 0.4 }, { lo: 0, hi: 1 });
    chart.bars(Array.from(v.weights), 0.8, "#2166ac").hline(1 / T, "#777", [2, 3])
      .axes({ xTicks: ticks(0, T - 1, 5).filter(Number.isInteger), yTicks: [0, 0.5, 1], xLabel: L("axis_key"), yLabel: this.tight ? undefined : L("weight") });
    P.title.textContent = L("row_softmax_title", { m: v.max_weight, h: v.entropy });
    this.hoverOn(P, chart, (x) => {
      const j = Math.round(((x - chart.box.x) / chart.box.w) * T - 0.5);
      return j >= 0 && j < T ? [L("tip_softmax_bar", { j, w: v.weights[j] })] : null;
    });
  }

  drawSaturation(p, v, w, hgt) {
    const L = this.L, P = this.panels.sat, grid = p.grid;
    const now = v.curve(v.setting), none = v.curve(p.settings.indexOf("none"));
    const top = 1.1 * p.uniform_entropy;
    const chart = new Chart(P.canvas, w, hgt, { l: 44, r: 18, t: 8, b: 34 }).scales({ lo: 1, hi: grid[grid.length - 1], log: 2 }, { lo: 0, hi: top });
    chart.line(grid, none.map((c) => c.mean_entropy), { color: "rgba(27,120,55,0.5)", dash: [5, 4] })
      .line(grid, none.map((c) => c.mean_grad_norm), { color: "rgba(118,42,131,0.5)", dash: [5, 4] })
      .line(grid, now.map((c) => c.mean_entropy), { color: "#1b7837", dots: true })
      .line(grid, now.map((c) => c.mean_grad_norm), { color: "#762a83", dots: true })
      .vline(v.d_k)
      .axes({ xTicks: this.tight ? [1, 16, 256] : [1, 4, 16, 64, 256, 1024], yTicks: ticks(0, top, this.tight ? 2 : 4), xLabel: L("axis_d_k"), grid: true });
    P.title.textContent = L("saturation_title", { n: v.n_rows });
    this.hoverOn(P, chart, (x) => {
      const n = Math.round(((x - chart.box.x) / chart.box.w) * (grid.length - 1));
      if (n < 0 || n >= grid.length) return null;
      return [L("tip_saturation", { d: grid[n], h: now[n].mean_entropy, g: now[n].mean_grad_norm,
        h0: none[n].mean_entropy, g0: none[n].mean_grad_norm })];
    });
  }
}

function render({ model, el }) {
  const view = new ScalingView(model, el);
  return () => view.destroy();
}

export default { render };
