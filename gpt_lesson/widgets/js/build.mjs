// Bundles the explorers' browser modules with esbuild: src/<name>.mjs, the shared src/core.mjs and
// d3-format become one ES module each in ../static/<name>.mjs, which the package ships and
// anywidget loads (a widget's module is one string: it cannot import its neighbours).
//   cd gpt_lesson/widgets/js && npm ci && npm run build
// The bundles are committed, so installing the package needs neither Node nor the network.
// Each bundle starts with the sha256 of the sources it was built from; tests/test_html_view.py
// recomputes it (sourcesDigest below, in Python) and fails when a source changed without a rebuild.
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const src = join(here, "src");
const ENTRIES = ["attention", "mask", "scaling", "switch", "html_view"];

// sha256 over package.json and every file of src/, in name order: "name\0content\0" each
export function sourcesDigest() {
  const hash = createHash("sha256");
  const files = [["package.json", join(here, "package.json")],
    ...readdirSync(src).sort().map((name) => ["src/" + name, join(src, name)])];
  for (const [name, path] of files) hash.update(name + "\0").update(readFileSync(path)).update("\0");
  return hash.digest("hex");
}

const d3 = JSON.parse(readFileSync(join(here, "node_modules", "d3-format", "package.json"), "utf8"));
const banner = `// gpt-lesson explorers: built by gpt_lesson/widgets/js/build.mjs, sources sha256 ${sourcesDigest()}\n` +
  `// bundles d3-format ${d3.version} (ISC licence, Copyright 2010-2021 Mike Bostock)`;

await esbuild.build({
  entryPoints: ENTRIES.map((name) => join(src, name + ".mjs")),
  outdir: join(here, "..", "static"),
  outExtension: { ".js": ".mjs" },
  bundle: true,
  format: "esm",
  target: "es2020",
  minify: true,
  legalComments: "none",
  banner: { js: banner },
  logLevel: "info",
});
