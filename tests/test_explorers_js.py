"""The browser modules of the explorers compute the numbers Python computes.

Node runs ``gpt_lesson/widgets/static/*.mjs`` (tests/js/check_explorers.mjs) on inputs written
here: random q and k, the payloads the explorers send, and every mask and scaling setting. Its
stages, step-throughs, read-outs and formatted labels are compared with ``gpt_lesson.attention``,
``attention_view_data``, ``mask_view_data`` and ``ScalingData.view``.
"""
from __future__ import annotations

import base64
import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from gpt_lesson import GPT, CharTokenizer
from gpt_lesson.attention import apply_mask, attention_scores, attention_weights, causal_mask
from gpt_lesson.widgets import MaskExplorer, ScalingExplorer
from gpt_lesson.widgets.attention_explorer import AttentionData, attention_payload, attention_view_data, readout_lines
from gpt_lesson.widgets.labels import labels_for
from gpt_lesson.widgets.mask_explorer import MASKS, mask_view_data
from gpt_lesson.widgets.mask_explorer import readout_lines as mask_lines
from gpt_lesson.widgets.scaling_explorer import D_K_GRID, SCALINGS, ScalingData
from gpt_lesson.widgets.scaling_explorer import readout_lines as scaling_lines

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "js" / "check_explorers.mjs"
TEXT = "to be, or not to be: that is the question."

# Python format specs the label table uses, on numbers that test rounding (0.125 is a tie).
FORMAT_CASES = [(spec, x) for spec in (".3f", ".2f", ".4f", ".0f", ".1e", ".0e", ".3g", ".4g", ".2g", ".3e")
                for x in (0.0, 0.125, 0.375, -0.125, 2.5, 3.5, 1.0005, 0.0001234, 123456.789, -0.00049, 1e-7,
                          0.99999, 5e-5, 1 / 3, -2 / 3, 1024.0, 0.05, 12.0)]


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


@pytest.fixture(scope="module")
def run(tmp_path_factory, model, tok):
    """Write every case, run Node once, return (cases, results)."""
    exe = node()
    g = torch.Generator().manual_seed(0)
    stage_cases = []
    for T, d, scale, causal in ((1, 4, 0.5, True), (5, 8, 8 ** -0.5, True), (7, 3, 1.0, False), (12, 16, 0.25, True)):
        q, k = torch.randn(T, d, generator=g) * 2, torch.randn(T, d, generator=g) * 2
        stage_cases.append({"T": T, "d": d, "scale": scale, "causal": causal, "q": q.flatten(), "k": k.flatten()})

    att = []
    for text, budget in (("to be or not", 10**9), (TEXT, 10**9), (TEXT, 100)):  # float32, then int16 / int8
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
                     for d in (1, 16, 64, 1024) for s in SCALINGS for t in ((0.1, 1.0, 3.7) if s == "temperature"
                                                                            else (1.0,))]
    cases = {"format": FORMAT_CASES, "stages": stage_cases,
             "attention": [{k: v for k, v in c.items() if k != "data"} for c in att],
             "mask": mask_cases, "scaling": scaling_cases}
    path = tmp_path_factory.mktemp("js") / "cases.json"
    path.write_text(json.dumps(_jsonable(cases)))
    proc = subprocess.run([exe, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return {"stages": stage_cases, "attention": att, "mask": mask_cases, "scaling": scaling_cases,
            "sexp": sexp}, json.loads(proc.stdout)


def test_number_formatting_matches_python(run):
    _, results = run
    expected = [format(x, spec) for spec, x in FORMAT_CASES]
    mismatches = [(spec, x, want, got) for (spec, x), want, got in zip(FORMAT_CASES, expected, results["format"])
                  if want != got]
    assert not mismatches


def test_stages_match_gpt_lesson_attention(run):
    cases, results = run
    for case, got in zip(cases["stages"], results["stages"]):
        T, d = case["T"], case["d"]
        q, k = case["q"].reshape(T, d), case["k"].reshape(T, d)
        raw = attention_scores(q, k, scale=1.0)
        scaled = attention_scores(q, k, scale=case["scale"])
        masked = apply_mask(scaled, causal_mask(T)) if case["causal"] else scaled
        want = {"raw": raw, "scaled": scaled, "masked": masked, "weights": attention_weights(masked)}
        for name, w in want.items():
            g = as_tensor(got[name]).reshape(T, T)
            assert torch.equal(torch.isneginf(g), torch.isneginf(w.double())), name
            finite = torch.isfinite(w)
            torch.testing.assert_close(g[finite], w.double()[finite], rtol=1e-5, atol=1e-5, msg=name)


def test_attention_payload_gives_the_models_stages(run):
    cases, results = run
    for case, got, exact in zip(cases["attention"], results["attention"], (True, True, False)):
        data = case["data"]
        assert (case["payload"]["q"]["dtype"] == "float32") == exact
        n = 0
        for layer in range(data.n_layer):
            st = data.stages(layer)
            for head in range(data.n_head):
                for stage in ("raw", "scaled", "masked", "weights"):
                    want = st[stage][head].double()
                    g = as_tensor(got["heads"][n][stage]).reshape(data.T, data.T)
                    finite = torch.isfinite(want)
                    assert torch.equal(finite, torch.isfinite(g))
                    # float32 q, k: float rounding only; int16 with a scale per channel: still ~1e-4
                    tol = 2e-6 if exact else 5e-4
                    torch.testing.assert_close(g[finite], want[finite], rtol=0, atol=tol)
                n += 1
        for (layer, head, query, key), c in zip(case["cells"], got["cells"]):
            view = attention_view_data(data, layer, head, "weights", query, key)["cell"]
            assert c["key"] == view["key"] and c["visible"] == view["visible"]
            tol = 2e-6 if exact else 5e-4
            for name in ("dot", "raw", "scaled", "weight"):
                assert c[name] == pytest.approx(view[name], abs=tol), name
            torch.testing.assert_close(as_tensor(c["products"]), view["products"].double(), rtol=0, atol=tol)
            vtol = 2e-6 if exact else 0.02 * float(data.stacked("v").abs().max())  # v: int8 when not exact
            torch.testing.assert_close(as_tensor(c["output"]), view["output"].double(), rtol=0, atol=vtol)
            torch.testing.assert_close(as_tensor(c["contribution"]), view["contribution"].double(), rtol=0, atol=vtol)
        if exact:  # the read-out lines under the explorer: the same text from both sides
            for (layer, head, query), lines in zip(case["readouts"], got["readouts"]):
                assert lines == readout_lines(attention_view_data(data, layer, head, "weights", query)), (layer, head)


def test_mask_view_matches_mask_view_data(run):
    cases, results = run
    for case, got in zip(cases["mask"], results["mask"]):
        v = mask_view_data(case["T"], case["mask"], case["n_real"])
        T = case["T"]
        assert torch.equal(as_tensor(got["mask"]).reshape(T, T), v["mask"].double())
        g = as_tensor(got["weights"]).reshape(T, T)
        assert torch.equal(torch.isnan(g), torch.isnan(v["weights"]))
        ok = ~torch.isnan(g)
        torch.testing.assert_close(g[ok], v["weights"].double()[ok], rtol=0, atol=1e-6)
        assert torch.equal(torch.isneginf(as_tensor(got["masked"]).reshape(T, T)), torch.isneginf(v["masked"]))
        assert got["nan_rows"] == v["nan_rows"]
        if math.isnan(v["leak"]):
            assert got["leak"] == "NaN"
        else:
            assert float(got["leak"]) == pytest.approx(v["leak"], abs=1e-6)
            assert (float(got["leak"]) == 0) == (v["leak"] == 0)  # "nothing leaks" is exact on both sides
        assert got["lines"] == mask_lines(v), (T, case["mask"], case["n_real"])


def test_scaling_view_matches_scaling_data(run):
    cases, results = run
    data: ScalingData = cases["sexp"].data
    for case, got in zip(cases["scaling"], results["scaling"]):
        v = data.view(case["d_k"], case["scaling"], case["temperature"])
        assert got["scale"] == pytest.approx(v["scale"], rel=1e-12)
        assert got["variance"] == pytest.approx(v["variance"], rel=1e-5)
        assert got["theory_variance"] == pytest.approx(v["theory_variance"], rel=1e-12)
        torch.testing.assert_close(as_tensor(got["weights"]), v["softmax"]["weights"].double(), rtol=1e-5, atol=1e-7)
        for name in ("max_weight", "entropy", "grad_norm"):
            assert got[name] == pytest.approx(v["softmax"][name], rel=1e-4, abs=1e-6), name
        torch.testing.assert_close(as_tensor(got["edges"]), torch.as_tensor(v["histogram"]["edges"]), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(as_tensor(got["density"]), torch.as_tensor(v["histogram"]["density"]), rtol=1e-9, atol=0)
        curves = data.curves(case["scaling"], case["temperature"])
        for name in ("entropy", "grad_norm"):
            torch.testing.assert_close(as_tensor(got["curves"][name]), as_tensor(curves[name]), rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(as_tensor(got["curves"]["variance"]), as_tensor(curves["variance"]))
        assert got["line"] == scaling_lines(v)[0], (case["d_k"], case["scaling"], case["temperature"])


def test_histogram_is_the_histogram_of_the_scaled_samples():
    import numpy as np

    data = ScalingData()
    for d_k, scaling in ((16, "none"), (256, "sqrt")):
        v = data.view(d_k, scaling)
        samples = v["samples"].numpy()
        counts, edges = np.histogram(samples, bins=len(v["histogram"]["density"]), range=(samples.min(), samples.max()))
        np.testing.assert_allclose(edges, v["histogram"]["edges"], rtol=0, atol=1e-6 * (edges[-1] - edges[0]))
        got = v["histogram"]["density"] * len(samples) * (edges[1] - edges[0])
        assert np.abs(got - counts).max() <= 1  # a sample on a bin edge may fall either side after scaling
        assert d_k in D_K_GRID
