// Runs the explorers' browser modules under Node on inputs that Python wrote, and prints what
// they compute as JSON; tests/test_explorers_js.py compares it with Python's numbers.
//   node tests/js/check_explorers.mjs cases.json > results.json
import { readFileSync } from "node:fs";
import * as core from "../../gpt_lesson/widgets/static/core.mjs";
import * as attention from "../../gpt_lesson/widgets/static/attention.mjs";
import * as mask from "../../gpt_lesson/widgets/static/mask.mjs";
import * as scaling from "../../gpt_lesson/widgets/static/scaling.mjs";

// {"__b64__": "..."} in the JSON stands for bytes (Python's bytes values)
function revive(x) {
  if (Array.isArray(x)) return x.map(revive);
  if (x && typeof x === "object") {
    if (typeof x.__b64__ === "string") return new DataView(new Uint8Array(Buffer.from(x.__b64__, "base64")).buffer);
    return Object.fromEntries(Object.entries(x).map(([k, v]) => [k, revive(v)]));
  }
  return x;
}

// NaN and infinities survive JSON as strings
const out = (a) => Array.from(a, (v) => (Number.isFinite(v) ? v : String(v)));
const labeller = (table) => (key, fields) => core.fmt(table[key], fields);

const cases = revive(JSON.parse(readFileSync(process.argv[2], "utf8")));
const results = {};

results.format = cases.format.map(([spec, x]) => core.formatNumber(x, spec));

results.stages = cases.stages.map((c) => {
  const q = Float64Array.from(c.q), k = Float64Array.from(c.k);
  const st = core.stages(q, k, c.T, c.d, c.scale, c.causal ? core.causalMask(c.T) : null);
  return Object.fromEntries(Object.entries(st).map(([name, m]) => [name, out(m)]));
});

results.attention = cases.attention.map((c) => {
  const data = attention.decode(c.payload), L = labeller(c.labels);
  const heads = [];
  for (let layer = 0; layer < data.L; layer++) {
    for (let head = 0; head < data.H; head++) {
      const st = attention.headStages(data, layer, head);
      heads.push(Object.fromEntries(Object.entries(st).map(([name, m]) => [name, out(m)])));
    }
  }
  const cells = c.cells.map(([layer, head, query, key]) => {
    const s = attention.cellStep(data, layer, head, query, key);
    return { key: s.key, dot: s.dot, raw: s.raw, scaled: s.scaled, visible: s.visible, weight: s.weight,
      products: out(s.products), output: out(s.output), contribution: out(s.contribution) };
  });
  const readouts = c.readouts.map(([layer, head, query]) => attention.readoutLines(L, data, layer, head, query, null));
  return { heads, cells, readouts };
});

results.mask = cases.mask.map((c) => {
  const scores = mask.demoScores(c.payload, c.T), v = mask.maskView(scores, c.T, c.mask, c.n_real);
  return { mask: out(v.mask), masked: out(v.masked), weights: out(v.weights), leak: String(v.leak),
    nan_rows: v.nan_rows, lines: mask.readoutLines(labeller(c.labels), v) };
});

results.scaling = cases.scaling.map((c) => {
  const v = scaling.scalingView(c.payload, c.d_k, c.scaling, c.temperature);
  const curves = scaling.curves(c.payload, c.scaling, c.temperature);
  return { scale: v.scale, variance: v.variance, theory_variance: v.theory_variance,
    weights: out(v.softmax.weights), max_weight: v.softmax.max_weight, entropy: v.softmax.entropy,
    grad_norm: v.softmax.grad_norm, edges: out(v.histogram.edges), density: out(v.histogram.density),
    curves: { entropy: curves.map((x) => x.entropy), grad_norm: curves.map((x) => x.grad_norm),
      variance: curves.map((x) => x.variance) },
    line: scaling.readoutLine(labeller(c.labels), v) };
});

process.stdout.write(JSON.stringify(results));
