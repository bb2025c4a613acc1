// Runs the explorers' browser modules (the bundles the package ships, static/*.mjs) under Node on
// payloads Python wrote, and prints what they read and write as JSON; tests/test_explorers_js.py
// compares it with Python's numbers and with Python's formatting of the same templates.
//   node tests/js/check_explorers.mjs cases.json > results.json
import { readFileSync } from "node:fs";
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
const labeller = (table) => (key, fields) => attention.fmt(table[key], fields);

const cases = revive(JSON.parse(readFileSync(process.argv[2], "utf8")));
const results = {};

results.format = cases.format.map(([spec, x]) => attention.formatValue(x, spec));
results.templates = cases.templates.map(([template, fields]) => attention.fmt(template, fields));

results.attention = cases.attention.map((c) => {
  const data = attention.decode(c.payload), L = labeller(c.labels);
  const heads = [];
  for (let layer = 0; layer < data.L; layer++) {
    for (let head = 0; head < data.H; head++) {
      heads.push(Object.fromEntries(["raw", "scaled", "masked", "weights"].map((stage) =>
        [stage, out(attention.stageMatrix(data, stage, layer, head))])));
    }
  }
  const cells = c.cells.map(([layer, head, query, key]) => {
    const s = attention.cellStep(data, layer, head, query, key);
    return { key: s.key, dot: s.dot, raw: s.raw, scaled: s.scaled, visible: s.visible, weight: s.weight,
      sum_exp: s.sum_exp, n_visible: s.n_visible, products: out(s.products), output: out(s.output),
      contribution: out(s.contribution) };
  });
  const readouts = c.readouts.map(([layer, head, query]) => attention.readoutLines(L, data, layer, head, query));
  const stageLines = c.readouts.map(([layer, head]) => attention.stageLine(L, data, layer, head));
  return { heads, cells, readouts, stageLines };
});

results.mask = cases.mask.map((c) => {
  const v = mask.maskView(c.payload, c.T, c.mask, c.n_real);
  return { mask: out(v.mask), scores: out(v.scores), masked: out(v.masked), weights: out(v.weights),
    leak: String(v.leak), nan_rows: v.nan_rows, lines: mask.readoutLines(labeller(c.labels), v) };
});

results.scaling = cases.scaling.map((c) => {
  const v = scaling.scalingView(c.payload, c.d_k, c.scaling, c.temperature);
  const curve = v.curve(v.setting);
  return { scale: v.scale, variance: v.variance, theory: v.theory, lo: v.lo, hi: v.hi, weights: out(v.weights),
    max_weight: v.max_weight, entropy: v.entropy, mean_entropy: v.mean_entropy, mean_grad_norm: v.mean_grad_norm,
    counts: out(v.counts), curve_entropy: curve.map((r) => r.mean_entropy), temperature: v.temperature,
    line: scaling.readoutLine(labeller(c.labels), v) };
});

process.stdout.write(JSON.stringify(results));
