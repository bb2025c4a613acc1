// Scaling explorer: why attention divides q.k by sqrt(d_k).
// Python drew the random q.k samples and one row of scores for every d_k stop once; the scaling,
// the temperature, the softmax, its entropy and its gradient size are computed here.
import {
  batched, buttonGroup, Chart, h, labeller, legend, painted, scaleFactor, slider, softmaxStats, ticks, tickText,
  Tooltip, update, viewHeight,
} from "./core.mjs";

const SCALINGS = ["none", "sqrt", "temperature"];
const TAU = { lo: -1, hi: 1, step: 0.05 }; // log10 of the temperature

// What ScalingData.view computes, for one setting, from the per-stop data Python sent.
export function scalingView(p, dK, scaling, temperature) {
  const n = p.stops.indexOf(dK);
  if (n < 0) throw new Error("d_k=" + dK + " is not one of the stops " + p.stops.join(", "));
  const scale = scaleFactor(dK, scaling, temperature);
  const row = p.rows[n].map((x) => x * scale);
  let m = -Infinity;
  for (const x of row) m = Math.max(m, x);
  const e = row.map((x) => Math.exp(x - m)), sum = e.reduce((a, b) => a + b, 0);
  const weights = e.map((x) => x / sum);
  const counts = p.counts[n], bins = counts.length, lo = p.lo[n] * scale, hi = p.hi[n] * scale;
  const width = (hi - lo) / bins;
  const edges = [...Array(bins + 1).keys()].map((b) => lo + b * width);
  const density = counts.map((c) => c / (p.n_samples * width));
  return {
    d_k: dK, scaling, temperature, scale, n_samples: p.n_samples, T: p.T,
    variance: p.var_raw[n] * scale * scale, theory_variance: dK * scale * scale,
    softmax: { weights, ...softmaxStats(weights), uniform_entropy: Math.log(p.T) },
    histogram: { edges, density },
  };
}

// Entropy and gradient size of the softmax at every stop of the d_k grid, for one scaling.
export function curves(p, scaling, temperature) {
  const grid = p.grid;
  return grid.map((dK) => {
    const n = p.stops.indexOf(dK), s = scaleFactor(dK, scaling, temperature);
    const row = p.rows[n].map((x) => x * s);
    let m = -Infinity;
    for (const x of row) m = Math.max(m, x);
    const e = row.map((x) => Math.exp(x - m)), sum = e.reduce((a, b) => a + b, 0);
    const st = softmaxStats(e.map((x) => x / sum));
    return { d_k: dK, variance: dK * s * s, entropy: st.entropy, grad_norm: st.grad_norm };
  });
}

export function readoutLine(L, v) {
  const s = v.softmax;
  return L("scaling_readout", { v: v.variance, t: v.theory_variance, m: s.max_weight, h: s.entropy, T: v.T,
    u: s.uniform_entropy, g: s.grad_norm });
}

class ScalingView {
  constructor(model, el) {
    this.model = model;
    this.L = labeller(model);
    this.root = h("div", { class: "gl-explorer gl-scaling", "data-explorer": "scaling",
      // keys pressed in the explorer (arrows on a slider or the heatmap) are not JupyterLab's shortcuts
      "data-lm-suppress-shortcuts": "true" });
    el.append(this.root);
    this.build();
    this.redraw = batched(() => this.draw());
    this.names = ["d_k", "scaling", "temperature", "payload", "labels"];
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
    const L = this.L, m = this.model, p = m.get("payload");
    this.dk = slider("d_k", { label: L("d_k"), tip: L("tip_d_k"), min: 0, max: p.stops.length - 1, step: 1,
      value: p.stops.indexOf(m.get("d_k")), onInput: (n) => update(m, { d_k: p.stops[n] }) });
    this.scalingGroup = buttonGroup("scaling", SCALINGS.map((s) => [s, L("scaling_" + s), L("tip_scaling_" + s)]),
      (v) => update(m, { scaling: v }));
    this.tau = slider("temperature", { label: L("tau"), tip: L("tip_tau"), min: TAU.lo, max: TAU.hi, step: TAU.step,
      value: Math.log10(m.get("temperature")), onInput: (x) => update(m, { temperature: Math.min(10, Math.max(0.1, Math.pow(10, x))) }) });
    this.root.append(h("div", { class: "gl-row gl-controls" }, [this.dk.el,
      h("span", {}, [h("span", { class: "gl-label", text: L("scaling") }), this.scalingGroup.el]), this.tau.el]));
    this.title = h("div", { class: "gl-title" });
    this.root.append(this.title);
    const panel = (part) => {
      const c = h("canvas", { "data-part": part });
      const t = h("div", { class: "gl-sub" }), k = h("div");
      const el = h("div", { class: "gl-panel" }, [t, c, k]);
      return { canvas: c, title: t, key: k, el };
    };
    this.panels = { hist: panel("histogram"), variance: panel("variance"), row: panel("softmax"), sat: panel("saturation") };
    const keys = {
      hist: [["rgba(31,119,180,0.75)", L("legend_measured")], ["#ff7f0e", L("legend_normal")]],
      variance: [["#999", L("legend_none_variance"), true], ["#1f77b4", L("legend_theory")],
        ["#d62728", L("legend_measured_point")]],
      row: [["#777", L("legend_uniform", { T: p.T }), true]],
      sat: [["#2ca02c", L("legend_entropy")], ["#9467bd", L("legend_gradient")], ["rgba(0,0,0,0.45)", L("legend_no_scaling"), true]],
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
    this.tau.set(Math.round(Math.log10(tau) / TAU.step) * TAU.step, L("tau_value", { t: tau }));
    this.tau.disable(scaling !== "temperature");
    const label = L("scaling_" + scaling) + (scaling === "temperature" ? L("tau_suffix", { t: tau }) : "");
    this.title.textContent = L("scaling_title", { d_k: dK, label, scale: v.scale });
    // the room inside the padding; four panels in a row when they fit, else two rows of two
    const W = Math.max(360, (this.width || this.root.clientWidth || 900) - 10), winH = viewHeight();
    const cols = W >= 4 * 200 + 3 * 16 ? 4 : 2;
    const pw = Math.floor((W - 16 * (cols - 1)) / cols);
    const ph = Math.max(130, Math.min(230, cols === 4 ? winH - 330 : (winH - 380) / 2));
    for (const panel of Object.values(this.panels)) panel.el.style.width = pw + "px";
    this.drawHistogram(v, pw, ph);
    this.drawVariance(p, v, scaling, tau, pw, ph);
    this.drawRow(v, pw, ph);
    this.drawSaturation(p, v, scaling, tau, pw, ph);
    this.readout.textContent = readoutLine(L, v);
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

  drawHistogram(v, w, hgt) {
    const L = this.L, P = this.panels.hist, { edges, density } = v.histogram;
    const sd = Math.sqrt(v.theory_variance), lo = edges[0], hi = edges[edges.length - 1];
    const xs = [...Array(200).keys()].map((n) => lo + ((hi - lo) * n) / 199);
    const normal = xs.map((x) => Math.exp(-(x * x) / (2 * sd * sd)) / (sd * Math.sqrt(2 * Math.PI)));
    const top = 1.1 * Math.max(...density, ...normal);
    const chart = new Chart(P.canvas, w, hgt).scales({ lo, hi }, { lo: 0, hi: top });
    const width = edges[1] - edges[0];
    chart.bars(edges.slice(0, -1).map((e) => e + width / 2), density, width, "rgba(31,119,180,0.75)")
      .line(xs, normal, { color: "#ff7f0e" })
      .axes({ xTicks: ticks(lo, hi, 5), yTicks: ticks(0, top, 4), xLabel: L("axis_score"), yLabel: L("axis_density") });
    P.title.textContent = L("hist_title", { n: v.n_samples, v: v.variance });
    this.hoverOn(P, chart, (x) => {
      const b = Math.floor(((x - chart.box.x) / chart.box.w) * density.length);
      if (b < 0 || b >= density.length) return null;
      return [L("tip_bin", { a: edges[b], b: edges[b + 1], d: density[b] })];
    });
  }

  drawVariance(p, v, scaling, tau, w, hgt) {
    const L = this.L, P = this.panels.variance, grid = p.grid;
    const theory = grid.map((d) => d * Math.pow(scaleFactor(d, scaling, tau), 2));
    const chart = new Chart(P.canvas, w, hgt, { l: 44, r: 18, t: 8, b: 34 }).scales({ lo: 1, hi: grid[grid.length - 1], log: 2 }, { lo: 5e-3, hi: 2e3, log: 10 });
    chart.line(grid, grid, { color: "#999", dash: [5, 4] }).line(grid, theory, { color: "#1f77b4" });
    const ctx = chart.ctx;
    ctx.fillStyle = "#d62728"; ctx.beginPath(); ctx.arc(chart.x(v.d_k), chart.y(Math.max(5e-3, v.variance)), 4, 0, 2 * Math.PI); ctx.fill();
    chart.axes({ xTicks: [1, 4, 16, 64, 256, 1024], yTicks: [1e-2, 1e-1, 1, 10, 100, 1000], xLabel: L("axis_d_k"),
      yLabel: L("axis_variance"), grid: true, yText: (t) => tickText(t) });
    P.title.textContent = L("variance_title");
    this.hoverOn(P, chart, (x) => {
      const n = Math.round(((x - chart.box.x) / chart.box.w) * (grid.length - 1));
      if (n < 0 || n >= grid.length) return null;
      return [L("tip_variance", { d: grid[n], v: theory[n] })];
    });
  }

  drawRow(v, w, hgt) {
    const L = this.L, P = this.panels.row, s = v.softmax, T = v.T;
    const chart = new Chart(P.canvas, w, hgt).scales({ lo: -0.6, hi: T - 0.4 }, { lo: 0, hi: 1 });
    chart.bars([...Array(T).keys()], s.weights, 0.8, "#1f77b4").hline(1 / T, "#777", [2, 3])
      .axes({ xTicks: ticks(0, T - 1, 5).filter(Number.isInteger), yTicks: [0, 0.5, 1], xLabel: L("axis_key"), yLabel: L("weight") });
    P.title.textContent = L("row_softmax_title", { m: s.max_weight, h: s.entropy });
    this.hoverOn(P, chart, (x) => {
      const j = Math.round(((x - chart.box.x) / chart.box.w) * T - 0.5);
      return j >= 0 && j < T ? [L("tip_softmax_bar", { j, w: s.weights[j] })] : null;
    });
  }

  drawSaturation(p, v, scaling, tau, w, hgt) {
    const L = this.L, P = this.panels.sat, grid = p.grid;
    const now = curves(p, scaling, tau), none = curves(p, "none", 1);
    const top = 1.1 * Math.log(p.T);
    const chart = new Chart(P.canvas, w, hgt, { l: 44, r: 18, t: 8, b: 34 }).scales({ lo: 1, hi: grid[grid.length - 1], log: 2 }, { lo: 0, hi: top });
    chart.line(grid, none.map((c) => c.entropy), { color: "rgba(44,160,44,0.5)", dash: [5, 4] })
      .line(grid, none.map((c) => c.grad_norm), { color: "rgba(148,103,189,0.5)", dash: [5, 4] })
      .line(grid, now.map((c) => c.entropy), { color: "#2ca02c", dots: true })
      .line(grid, now.map((c) => c.grad_norm), { color: "#9467bd", dots: true })
      .vline(v.d_k)
      .axes({ xTicks: [1, 4, 16, 64, 256, 1024], yTicks: ticks(0, top, 4), xLabel: L("axis_d_k"), grid: true });
    P.title.textContent = L("saturation_title");
    this.hoverOn(P, chart, (x) => {
      const n = Math.round(((x - chart.box.x) / chart.box.w) * (grid.length - 1));
      if (n < 0 || n >= grid.length) return null;
      return [L("tip_saturation", { d: grid[n], h: now[n].entropy, g: now[n].grad_norm, h0: none[n].entropy, g0: none[n].grad_norm })];
    });
  }
}

function render({ model, el }) {
  const view = new ScalingView(model, el);
  return () => view.destroy();
}

export default { render };
