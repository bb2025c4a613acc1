"""The browser modules of the explorers show Python's numbers and say what the label table says.

Node runs the bundles the package ships (``gpt_lesson/widgets/static/*.mjs``, through
tests/js/check_explorers.mjs) on payloads written here. Every number they show must be the one Python
computed (``attention_view_data``, ``mask_view_data``, ``ScalingData.view``): they look numbers up, they
do not compute them. Their read-out lines must be the label table's templates filled with those numbers,
as Python's ``str.format`` fills them (d3-format implements the same mini-language). The bundles must
be built from the current sources (``js/build.mjs`` records the sources' digest).
"""
from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from explorer_readouts import attention_lines, mask_lines, scaling_line

from gpt_lesson import GPT, CharTokenizer
from gpt_lesson.widgets import MaskExplorer, ScalingExplorer
from gpt_lesson.widgets.attention_explorer import AttentionData, attention_payload, attention_view_data
from gpt_lesson.widgets.labels import label, labels_for
from gpt_lesson.widgets.mask_explorer import MASKS, mask_view_data
from gpt_lesson.widgets.scaling_explorer import SCALINGS, TAUS

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "js" / "check_explorers.mjs"
JS = ROOT / "gpt_lesson" / "widgets" / "js"
STATIC = ROOT / "gpt_lesson" / "widgets" / "static"
TEXT = "to be, or not to be: that is the question."

# The format specs the label table uses, on numbers away from exact decimal ties (where JavaScript's
# toFixed rounds half up and Python to even) and in the fixed-point range of "g".
SPECS = (".3f", ".2f", ".4f", ".0f", ".3g", ".4g", ".2g")
# (Negative numbers that round to zero keep their sign, "-0.000", as in Python: formatValue sees to it.)
VALUES = (0.0, 0.1251, 0.3749, -0.1251, 2.4999, 3.5001, 1.0004, 0.01234, 123.456, -0.0051, 0.99999, 1 / 3, -2 / 3,
          12.0, 1024.0, 0.0626, 0.354, 0.0884)
FORMAT_CASES = [(spec, x) for spec in SPECS for x in VALUES]


def node() -> str:
    exe = shutil.which("node")
    if exe is None:
        message = "node not found: the check of the browser modules needs Node.js (apt-get install nodejs)"
        if os.environ.get("GPT_LESSON_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return exe


def _jsonable(x):
    if isinstance(x, bytes):
        return {"__b64__": base64.b64encode(x).decode()}
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, torch.Tensor):
        return x.tolist()
    return x


def as_tensor(values) -> torch.Tensor:
    return torch.tensor([float(v) for v in values], dtype=torch.float64)


@pytest.fixture(scope="module")
def tok() -> CharTokenizer:
    return CharTokenizer(TEXT + "TBO")


@pytest.fixture(scope="module")
def model(tok) -> GPT:
    torch.manual_seed(0)
    return GPT(tok.vocab_size, 32, 4, 2, 16, dropout=0.0)


def _template_cases() -> list:
    """Every template of the three tables with numbers in its fields (the field names tell the kind)."""
    out = []
    for kind in ("attention", "mask", "scaling"):
        for template in labels_for(kind).values():
            fields = {}
            for name, spec in re.findall(r"\{(\w+)(?::([^{}]*))?\}", template):
                if spec and spec[-1] in "fg%":
                    fields[name] = 0.4321 if spec.endswith("f") else 0.0884
                elif spec and spec.endswith("e"):
                    continue  # exponent form: d3 writes 1.2e-5 where Python writes 1.2e-05 (never a read-out here)
                else:
                    fields[name] = 7 if name in ("i", "j", "n", "T", "h", "d", "layer", "d_k", "block", "vocab") else "ab"
            if len(fields) == len(re.findall(r"\{(\w+)", template)):
                out.append((template, fields))
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory, model, tok):
    """Write every case, run Node once, return (cases, results)."""
    exe = node()
    att = []
    for text, budget in (("to be or not", 10**9), (TEXT, 10**9), (TEXT, 100)):  # float32, then int8
        data = AttentionData(model, tok, text)
        payload = attention_payload(data, budget)
        data._payload = None
        cells = [(layer, head, query, key) for layer in range(2) for head in range(4)
                 for query, key in ((0, None), (data.T - 1, None), (data.T // 2, 1), (data.T // 2, data.T - 1))]
        readouts = [(layer, head, query) for layer in range(2) for head in (0, 3, "all")
                    for query in ((None, data.T - 1) if head != "all" else (None,))]
        att.append({"data": data, "payload": payload, "labels": labels_for("attention"), "cells": cells,
                    "readouts": readouts})

    mexp = MaskExplorer()
    mask_cases = [{"payload": mexp.payload, "labels": mexp.labels, "T": T, "mask": m, "n_real": n}
                  for T in (1, 2, 5, 8, 16) for m in MASKS for n in sorted({0, 1, T // 2, T})]

    sexp = ScalingExplorer(d_k=64)
    scaling_cases = [{"payload": sexp.payload, "labels": sexp.labels, "d_k": d, "scaling": s, "temperature": t}
                     for d in (1, 16, 64, 1024) for s in SCALINGS
                     for t in ((TAUS[0], 1.0, TAUS[33]) if s == "temperature" else (1.0,))]
    cases = {"format": FORMAT_CASES, "templates": _template_cases(),
             "attention": [{k: v for k, v in c.items() if k != "data"} for c in att],
             "mask": mask_cases, "scaling": scaling_cases}
    path = tmp_path_factory.mktemp("js") / "cases.json"
    path.write_text(json.dumps(_jsonable(cases)))
    proc = subprocess.run([exe, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return {"attention": att, "mask": mask_cases, "scaling": scaling_cases, "sexp": sexp,
            "templates": cases["templates"]}, json.loads(proc.stdout)


def test_the_bundles_are_built_from_the_current_sources():
    """js/build.mjs writes the sources' sha256 into each bundle: a changed source needs `npm run build`."""
    digest = hashlib.sha256()
    files = [("package.json", JS / "package.json")] + [("src/" + p.name, p) for p in sorted((JS / "src").iterdir())]
    for name, path in files:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    for name in ("attention", "mask", "scaling", "html_view"):
        first = (STATIC / f"{name}.mjs").read_text().split("\n", 1)[0]
        assert first.endswith(digest.hexdigest()), f"static/{name}.mjs is older than js/src: run npm run build in {JS}"


def test_number_formatting_matches_python(run):
    _, results = run
    expected = [format(x, spec) for spec, x in FORMAT_CASES]
    mismatches = [(spec, x, want, got) for (spec, x), want, got in zip(FORMAT_CASES, expected, results["format"])
                  if want != got]
    assert not mismatches


def test_every_template_reads_the_same_from_both_formatters(run):
    cases, results = run
    assert len(cases["templates"]) > 100
    for (template, fields), got in zip(cases["templates"], results["templates"]):
        assert got == template.format(**fields), template


def test_attention_shows_the_numbers_python_computed(run):
    cases, results = run
    for case, got, exact in zip(cases["attention"], results["attention"], (True, True, False)):
        data = case["data"]
        assert (case["payload"]["raw"]["dtype"] == "float32") == exact
        n = 0
        for layer in range(data.n_layer):
            for head in range(data.n_head):
                for stage in ("raw", "scaled", "masked", "weights"):
                    want = data.stages[stage][layer, head].double()
                    g = as_tensor(got["heads"][n][stage]).reshape(data.T, data.T)
                    if stage != "masked":  # the browser hides the future itself (hatched): same numbers below
                        # float32: the same numbers; int8 with a scale per channel: within half a step
                        tol = 0 if exact else 0.51 * float(want.abs().amax()) / 127
                        torch.testing.assert_close(g, want, rtol=0, atol=tol + 1e-7)
                n += 1
        for (layer, head, query, key), c in zip(case["cells"], got["cells"]):
            view = attention_view_data(data, layer, head, "weights", query, key)["cell"]
            assert c["key"] == view["key"] and c["visible"] == view["visible"] and c["n_visible"] == view["n_visible"]
            assert c["sum_exp"] == pytest.approx(view["sum_exp"], rel=1e-6)  # row statistics: float32 always
            if exact:
                for name in ("dot", "raw", "scaled", "weight"):
                    assert c[name] == pytest.approx(view[name], abs=1e-7), name
                for name in ("products", "output", "contribution"):
                    torch.testing.assert_close(as_tensor(c[name]), view[name].double(), rtol=1e-6, atol=1e-7)
        if exact:  # the read-out lines: the table's templates with Python's numbers
            for (layer, head, query), lines, stage_line in zip(case["readouts"], got["readouts"], got["stageLines"]):
                view = attention_view_data(data, layer, head, "weights", query)
                assert lines == attention_lines(view), (layer, head, query)
                r = view["readouts"]
                assert stage_line == label("attention", "stage_change", raw=r["raw_std"], scale=data.scale,
                                           scaled=r["scaled_std"])


def test_mask_view_shows_mask_view_data(run):
    cases, results = run
    for case, got in zip(cases["mask"], results["mask"]):
        v = mask_view_data(case["T"], case["mask"], case["n_real"])
        T = case["T"]
        assert torch.equal(as_tensor(got["mask"]).reshape(T, T), v["mask"].double())
        assert torch.equal(as_tensor(got["scores"]).reshape(T, T), v["scores"].double())
        g = as_tensor(got["weights"]).reshape(T, T)
        assert torch.equal(torch.isnan(g), torch.isnan(v["weights"]))
        ok = ~torch.isnan(g)
        torch.testing.assert_close(g[ok], v["weights"].double()[ok], rtol=0, atol=3e-7)
        assert torch.equal(torch.isneginf(as_tensor(got["masked"]).reshape(T, T)), torch.isneginf(v["masked"]))
        assert got["nan_rows"] == v["nan_rows"]
        if math.isnan(v["leak"]):
            assert got["leak"] == "NaN"
        else:
            assert float(got["leak"]) == v["leak"]  # Python's number, not a second computation
        assert got["lines"] == mask_lines(v), (T, case["mask"], case["n_real"])


def test_scaling_view_shows_scaling_data(run):
    cases, results = run
    data = cases["sexp"].data
    for case, got in zip(cases["scaling"], results["scaling"]):
        v = data.view(case["d_k"], case["scaling"], case["temperature"])
        assert got["temperature"] == (case["temperature"] if case["scaling"] == "temperature" else 1.0)
        for name, want in (("scale", v["scale"]), ("variance", v["variance"]), ("theory", v["theory_variance"]),
                           ("lo", float(v["histogram"]["edges"][0])), ("hi", float(v["histogram"]["edges"][-1])),
                           ("max_weight", v["softmax"]["max_weight"]), ("entropy", v["softmax"]["entropy"]),
                           ("mean_entropy", v["mean"]["entropy"]), ("mean_grad_norm", v["mean"]["grad_norm"])):
            assert got[name] == pytest.approx(want, rel=1e-6), name  # float32 of Python's number
        torch.testing.assert_close(as_tensor(got["weights"]), v["softmax"]["weights"].double(), rtol=0, atol=2e-5)
        assert got["counts"] == v["histogram"]["counts"].tolist()
        torch.testing.assert_close(as_tensor(got["curve_entropy"]), as_tensor(v["curves"]["entropy"]), rtol=1e-6, atol=0)
        assert got["line"] == scaling_line(v), (case["d_k"], case["scaling"], case["temperature"])


def test_the_browser_modules_compute_no_attention():
    """The sources have no softmax, no exp, no matrix product and no statistic: Python sends them all."""
    for path in (JS / "src").glob("*.mjs"):
        source = path.read_text()
        code = "\n".join(line.split("//")[0] for line in source.splitlines())
        for pattern in (r"Math\.exp\(", r"Math\.log\(", r"softmax\w*\(", r"entropy\s*\("):
            assert not re.search(pattern, code), (path.name, pattern)
