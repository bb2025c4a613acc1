"""The explorers driven from Python: set their controls (traits), check what they compute and send.

What the browser draws from the sent data is checked in test_explorers_js.py (the same numbers
under Node) and test_browser.py (the painted page).
"""
from __future__ import annotations

import base64
import io
import json
import math
import re
import zlib
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import PIL.Image
import pytest
import torch

from gpt_lesson import GPT, CharTokenizer, GPTConfig
from gpt_lesson.attention import apply_mask, attention_scores, attention_weights, causal_mask, padding_mask
from gpt_lesson.experiments import qk_variance, softmax_stats
from gpt_lesson.validation import check_choice
from gpt_lesson.widgets import (
    AttentionExplorer,
    MaskExplorer,
    ScalingExplorer,
    draw_attention_view,
    draw_mask_view,
    draw_scaling_view,
)
from gpt_lesson.widgets import labels as labels_module
from gpt_lesson.widgets._common import (
    Painter,
    embedded_state,
    esm,
    esm_source,
    new_figure,
    one_thread,
    pack_tensor,
    unpack_tensor,
)
from gpt_lesson.widgets.attention_explorer import AttentionData, attention_payload, attention_view_data
from gpt_lesson.widgets.labels import label, labels_for
from gpt_lesson.widgets.mask_explorer import MASKS, demo_scores, mask_view_data
from gpt_lesson.widgets.scaling_explorer import TAUS, ScalingData, scaling_view_data

TEXT = "to be, or not to be: that is the question."
SOURCES = Path(__file__).resolve().parents[1] / "gpt_lesson" / "widgets" / "js" / "src"


@pytest.fixture(scope="module")
def tok() -> CharTokenizer:
    return CharTokenizer(TEXT + "TBO\n")


@pytest.fixture(scope="module")
def model(tok) -> GPT:
    torch.manual_seed(0)
    return GPT(tok.vocab_size, 32, 4, 2, 16, dropout=0.0)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(PIL.Image.open(io.BytesIO(png)).convert("RGB")).astype(int)


def png_of(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, facecolor="white")
    return buf.getvalue()


# -- attention explorer -------------------------------------------------------------------------
def test_attention_stages_equal_the_library_and_the_model(model, tok):
    ex = AttentionExplorer(model, tok, "to be or not")
    idx = torch.tensor([tok.encode("to be or not")])
    records = model.attention_records(idx)
    T = idx.size(1)
    for layer in (0, 1):
        ex.layer = layer
        q, k = records[layer]["q"], records[layer]["k"]
        raw = attention_scores(q, k, scale=1.0)[0]
        scaled = attention_scores(q, k)[0]
        masked = apply_mask(scaled, causal_mask(T))
        expected = {"raw": raw, "scaled": scaled, "masked": masked, "weights": attention_weights(masked)}
        for stage, want in expected.items():
            ex.stage = stage
            for head in range(4):
                ex.head = head
                assert torch.equal(ex.view["matrix"], want[head]), (layer, stage, head)
        # ...and the model's own captured scores and weights
        torch.testing.assert_close(ex.data.stages["scaled"][layer], records[layer]["scores"][0])
        torch.testing.assert_close(ex.data.stages["weights"][layer], records[layer]["weights"][0])


def test_attention_rows_sum_to_one_and_future_is_exactly_zero(model, tok):
    ex = AttentionExplorer(model, tok, TEXT[:16], head="all")
    w = ex.view["weights"]  # (nh, T, T)
    assert w.shape == (4, 16, 16)
    torch.testing.assert_close(w.sum(-1), torch.ones(4, 16))
    future = torch.triu(torch.ones(16, 16, dtype=torch.bool), diagonal=1)
    assert (w[:, future] == 0).all() and (w[:, ~future] > 0).all()
    r = ex.view["readouts"]
    assert r["max_weight"] == pytest.approx(float(w.max()))
    assert float(r["entropy"][0, 0]) == pytest.approx(0.0, abs=1e-6)  # row 0 sees one key
    assert 0 < float(r["entropy"][0, -1]) <= math.log(16) + 1e-6
    assert r["mean_entropy"] == pytest.approx(float(r["entropy"].mean()))
    assert r["max_sum_error"] == pytest.approx(float((w.sum(-1) - 1).abs().max()), abs=1e-9)
    raw = ex.data.stages["raw"][0]
    assert r["limit"] == pytest.approx(float(raw.abs().max()))  # the shared colour scale of the signed stages
    assert r["raw_std"] == pytest.approx(float(raw.std(-1, correction=0).mean()), rel=1e-5)
    assert r["scaled_std"] == pytest.approx(r["raw_std"] * model.config.head_size ** -0.5, rel=1e-5)


def test_attention_masked_stage_is_minus_inf_in_the_future(model, tok):
    ex = AttentionExplorer(model, tok, "not to be", stage="masked")
    m = ex.view["matrix"]
    future = torch.triu(torch.ones(9, 9, dtype=torch.bool), diagonal=1)
    assert torch.isneginf(m[future]).all() and torch.isfinite(m[~future]).all()


def test_attention_step_through_of_one_cell(model, tok):
    ex = AttentionExplorer(model, tok, "to be or not", head=2)
    ex.query = 5
    cell = ex.view["cell"]
    st = {name: x[0] for name, x in ex.data.stages.items()}
    j = int(st["weights"][2, 5].argmax())  # default key: the largest weight
    assert cell["key"] == j
    rec = model.attention_records(torch.tensor([tok.encode("to be or not")]))[0]
    q, k, v = rec["q"][0, 2, 5], rec["k"][0, 2, j], rec["v"][0, 2]
    torch.testing.assert_close(cell["products"], q * k)
    assert cell["dot"] == pytest.approx(float(st["raw"][2, 5, j]), abs=1e-6)
    assert cell["scaled"] == pytest.approx(cell["raw"] * model.config.head_size ** -0.5, abs=1e-6)
    assert cell["weight"] == pytest.approx(float(st["weights"][2, 5, j]))
    torch.testing.assert_close(cell["output"], st["weights"][2, 5] @ v)
    torch.testing.assert_close(cell["contribution"], st["weights"][2, 5, j] * v[j])
    # the softmax's denominator: exp(scaled) / sum of exp over the 6 visible keys is the weight
    assert cell["n_visible"] == 6
    assert math.exp(cell["scaled"]) / cell["sum_exp"] == pytest.approx(cell["weight"], rel=1e-5)
    ex.key = 9  # a future key: masked, weight exactly 0
    assert ex.view["cell"]["visible"] is False and ex.view["cell"]["weight"] == 0.0
    ex.head = "all"  # a grid of heads has no single row to step through; the query is kept for later
    assert ex.view["cell"] is None and ex.view["matrix"].shape == (4, 12, 12) and ex.query == 5
    ex.head = 1
    assert ex.view["cell"]["query"] == 5 and ex.view["cell"]["key"] == 9


def test_controls_need_no_model_run_and_send_no_new_data(model, tok):
    ex = AttentionExplorer(model, tok, TEXT[:16])
    runs, payload = ex.model_runs, ex.payload
    sent = []
    ex.observe(lambda change: sent.append(change["name"]), names=["payload"])
    for name, value in (("head", 1), ("stage", "raw"), ("layer", 1), ("query", 3), ("key", 0), ("head", "all")):
        setattr(ex, name, value)
    assert ex.model_runs == runs and ex.payload is payload and sent == []


def test_attention_payload_holds_every_layer_and_head(model, tok):
    ex = AttentionExplorer(model, tok, "to be\nor not")
    p = ex.payload
    assert p["text"] == "to be\nor not" and p["T"] == 12 and (p["n_layer"], p["n_head"], p["head_size"]) == (2, 4, 8)
    assert p["tokens"][5] == "⏎" and p["tokens"][2] == "␣"  # the newline and spaces are kept, shown as symbols
    assert p["causal"] is True and p["scale"] == pytest.approx(8 ** -0.5)
    for name in ("q", "k", "v", "output"):
        assert p[name]["dtype"] == "float32"  # small enough to send exactly
        got = unpack_tensor(p[name], (2, 4, 12, 8))
        assert torch.equal(got.float(), getattr(ex.data, name))
    for name in ("raw", "scaled", "weights"):  # every stage, as the library computed it
        assert torch.equal(unpack_tensor(p[name], (2, 4, 12, 12)).float(), ex.data.stages[name])
    rows = unpack_tensor(p["rows"], (2, 4, 12, len(p["row_stats"])))
    assert torch.equal(rows.float(), ex.data.row_stats)
    assert rows[..., p["row_stats"].index("argmax")].tolist() == ex.data.stages["weights"].argmax(-1).tolist()
    heads = unpack_tensor(p["heads"], (2, 4, len(p["head_stats"])))
    layers = unpack_tensor(p["layers"], (2, len(p["head_stats"])))
    ex.layer, ex.head = 1, 3
    assert heads[1, 3].tolist() == pytest.approx([ex.view["readouts"][n] for n in p["head_stats"]], rel=1e-6)
    ex.head = "all"
    assert layers[1].tolist() == pytest.approx([ex.view["readouts"][n] for n in p["head_stats"]], rel=1e-6)


def test_attention_payload_shrinks_within_its_budget(model, tok):
    data = AttentionData(model, tok, TEXT[:16])
    squares, vectors = 2 * 4 * 16 * 16, 2 * 4 * 16 * 8
    assert attention_payload(data, budget=10**9)["v"]["dtype"] == "float32"
    data._payload = None
    p = attention_payload(data, budget=math.ceil((4 * squares + 6 * vectors) / 3) * 4)
    assert (p["raw"]["dtype"], p["q"]["dtype"], p["v"]["dtype"], p["output"]["dtype"]) == ("int16", "int16", "int8", "int8")
    assert p["scaled"]["like"] == "raw" and "data" not in p["scaled"]  # the raw scores' integers, other scales
    checks = [("q", data.q, 1 / 32767), ("k", data.k, 1 / 32767), ("v", data.v, 1 / 127), ("output", data.output, 1 / 127),
              ("raw", data.stages["raw"], 1 / 32767), ("scaled", data.stages["scaled"], 1 / 32767),
              ("weights", data.stages["weights"], 1 / 32767)]
    p = {**p, "scaled": {**p["raw"], "scales": p["scaled"]["scales"]}}  # as the browser reads it
    for name, x, tol in checks:
        x = x.double()
        peak = x.abs().amax(dim=2, keepdim=True)  # per layer, head and channel
        err = (unpack_tensor(p[name], x.shape) - x).abs()
        assert (err <= 0.51 * peak * tol + 1e-6 * peak).all(), name  # half a step (float32 arithmetic: a bit more)
    data._payload = None
    p = attention_payload(data, budget=100)
    assert {p[n]["dtype"] for n in ("raw", "weights", "q", "k", "v", "output")} == {"int8"}
    assert p["rows"]["dtype"] == "float32"  # the read-outs' statistics stay exact


def test_pack_tensor_keeps_zero_channels_and_checks_its_dtype():
    x = torch.zeros(2, 3, 4)
    x[..., 1] = torch.tensor([0.5, -1.0, 0.25])
    for dtype, top in (("int16", 32767), ("int8", 127)):
        got = unpack_tensor(pack_tensor(x, dtype), x.shape)
        assert torch.equal(got[..., [0, 2, 3]], torch.zeros(2, 3, 3, dtype=torch.float64))  # no 0/0 for a zero channel
        assert (got[..., 1] - x[..., 1]).abs().max() <= 0.51 / top
    with pytest.raises(ValueError, match="dtype='float16'"):
        pack_tensor(x, "float16")


def test_embedded_state_of_64_tokens_4_layers_4_heads_is_under_400_kb(tok):
    text = (TEXT * 2)[:64]
    torch.manual_seed(0)
    big = GPT(tok.vocab_size, 64, 4, 4, 64, dropout=0.0)
    ex = AttentionExplorer(big, tok, text)
    entry = embedded_state(ex)
    size = len(json.dumps(entry, separators=(",", ":")))
    assert ex.view["T"] == 64 and size == ex.embedded_state_bytes()
    # every stage of 4 x 4 heads (int8 at this size: DATA_BUDGET) is in it, and it stays within bounds
    assert ex.payload["raw"]["dtype"] == "int8"
    assert 250_000 < size < 400_000
    assert {b["path"][0] for b in entry["buffers"]} == {"payload"}
    assert MaskExplorer().embedded_state_bytes() < 80_000 and ScalingExplorer().embedded_state_bytes() < 90_000


def test_the_module_sent_is_the_source_deflated():
    for kind in ("attention", "mask", "scaling"):
        loader = esm(kind)
        data = re.search(r'const z = "([A-Za-z0-9+/=]+)";', loader).group(1)
        assert zlib.decompress(base64.b64decode(data)).decode() == esm_source(kind)
        assert "DecompressionStream" in loader and "export default" in loader
        source = esm_source(kind)
        # the bundle esbuild made: the core and d3-format inside, nothing left to import
        assert "./core.mjs" not in source and "import " not in source.split("\n", 2)[2][:200]
        assert source.startswith("// gpt-lesson explorers: built by gpt_lesson/widgets/js/build.mjs")
        assert "d3-format" in source.split("\n")[1] and "export{" in source.replace(" ", "")


def test_attention_text_is_cached_and_new_text_sends_new_data(model, tok):
    ex = AttentionExplorer(model, tok, "to be")
    assert ex.model_runs == 1
    ex.query = 4
    ex.text = "not to be"
    assert ex.model_runs == 2 and ex.view["T"] == 9 and ex.payload["T"] == 9 and ex.query == 4
    ex.text = "to"  # the query points past the new text: dropped, in Python and (by its own rule) the browser
    assert ex.query is None and ex.view["cell"] is None
    ex.text = "to be"
    assert ex.model_runs == 3  # "to" was new; "to be" was seen before: no new forward pass


def test_attention_bad_text_shows_a_message_not_a_traceback(model, tok):
    ex = AttentionExplorer(model, tok, "to be")
    ex.text = "to bé“”"
    # which characters, and what to do: not a raw list
    assert ex.error.startswith("The model does not know 3 of these characters: 'é' '“' '”'.")
    assert "replace or delete them" in ex.error and str(tok.vocab_size) in ex.error
    assert ex.payload == {"text": "to bé“”", "error": ex.error} and ex.view == {"error": ex.error}
    ex.text = "中文"
    assert "2 of these characters: '中' '文'" in ex.error
    ex.text = ""
    assert ex.error == "The text is empty: type at least one character."
    ex.text = "to"  # recovers
    assert ex.error == "" and ex.view["T"] == 2 and ex.payload["T"] == 2


def test_attention_long_text_is_truncated_with_a_notice(model, tok):
    ex = AttentionExplorer(model, tok, TEXT)  # 42 characters, block_size 16
    assert ex.view["T"] == 16 and len(ex.data.tokens) == 16
    assert ex.payload["notice"] == "The text has 42 tokens; showing the first 16 (the model's block_size=16)."


def test_attention_without_causal_mask_shows_the_future(tok):
    torch.manual_seed(0)
    model = GPT(GPTConfig(tok.vocab_size, 32, 4, 1, 16, dropout=0.0, causal=False))
    ex = AttentionExplorer(model, tok, "to be or")
    assert ex.view["mask"] is None and ex.payload["causal"] is False
    w = ex.view["weights"]
    assert float(w[0, 1:].sum()) > 0  # position 0 attends to later positions
    torch.testing.assert_close(w, model.attention_records(torch.tensor([tok.encode("to be or")]))[0]["weights"][0, 0])


def test_attention_static_picture_is_drawn_from_the_view(model, tok):
    ex = AttentionExplorer(model, tok, "to be or not", head=1, stage="masked", query=4, key=2)
    fig = draw_attention_view(model, tok, "to be or not", layer=0, head=1, stage="masked", query=4, key=2)
    assert isinstance(fig, matplotlib.figure.Figure)
    assert np.array_equal(pixels(ex.png), pixels(png_of(fig)))
    ex.head, ex.stage = "all", "weights"
    assert np.array_equal(pixels(ex.png), pixels(png_of(draw_attention_view(model, tok, "to be or not", head="all"))))


def test_raw_and_scaled_stages_share_one_colour_scale_and_look_different(model, tok):
    pictures, limits = {}, {}
    for stage in ("raw", "scaled", "masked"):
        fig = draw_attention_view(model, tok, "to be or not", stage=stage)
        limits[stage] = fig.axes[0].images[0].get_clim()
        pictures[stage] = pixels(png_of(fig))
    assert limits["raw"] == limits["scaled"] == limits["masked"]  # one scale: the raw scores' largest |value|
    heat = (slice(60, 420), slice(60, 420))  # inside the heatmap
    changed = (pictures["raw"][heat] != pictures["scaled"][heat]).any(-1).mean()
    assert changed > 0.5, changed  # x 0.354 makes most cells visibly paler
    own = draw_attention_view(model, tok, "to be or not", stage="scaled", colors="own").axes[0].images[0].get_clim()
    assert own[1] == pytest.approx(limits["raw"][1] * 8 ** -0.5)
    with pytest.raises(ValueError, match="colors='some'"):
        draw_attention_view(model, tok, "to be", colors="some")


@pytest.mark.parametrize("stage", ["raw", "scaled", "masked", "weights"])
def test_attention_static_picture_of_every_stage_has_its_title(model, tok, stage):
    fig = draw_attention_view(model, tok, "to be or not", stage=stage, query=3)
    title = fig._suptitle.get_text()
    assert title.startswith("Layer 0, head 0: ") and title.endswith(" · 12 tokens")
    assert ("× 0.354" in title) == (stage == "scaled")


def test_attention_static_picture_shows_the_step_through_and_thins_long_labels(model, tok):
    torch.manual_seed(0)
    long_model = GPT(tok.vocab_size, 32, 4, 1, 64, dropout=0.0)
    text = (TEXT * 2)[:60]
    fig = draw_attention_view(long_model, tok, text, query=20)
    cell = AttentionExplorer(long_model, tok, text, query=20).view["cell"]
    titles = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert label("attention", "dot_title", i=20, j=cell["key"], n=8, dot=cell["dot"]) in titles
    assert f"({cell['sum_exp']:.4g}) = weight {cell['weight']:.3f}" in titles  # the chain ends with exp(s)/sum exp
    heat = fig.axes[0]
    shown = [t.get_text() for t in heat.get_yticklabels() if t.get_visible()]
    assert len(heat.get_yticks()) == 60 and len(shown) == 30 and shown[:3] == ["t", "␣", "e"]  # every other one


@pytest.mark.parametrize("kwargs, error, words", [
    ({"stage": "softmax"}, ValueError, "stage='softmax'"),
    ({"head": 4}, ValueError, "head=4"),
    ({"head": "every"}, ValueError, "head='every'"),
    ({"head": 1.0}, TypeError, "head=1.0"),
    ({"layer": 2}, ValueError, "layer=2"),
    ({"layer": -1}, ValueError, "layer=-1"),
    ({"query": 12}, ValueError, "query=12"),
    ({"query": 1, "head": "all"}, ValueError, "one head"),
    ({"key": 1}, ValueError, "key needs a query"),
    ({"query": 1, "key": 99}, ValueError, "key=99"),
])
def test_attention_bad_settings(model, tok, kwargs, error, words):
    with pytest.raises(error, match=re.escape(words)):
        draw_attention_view(model, tok, "to be or not", **kwargs)
    with pytest.raises(error):
        AttentionExplorer(model, tok, "to be or not", **kwargs)


@pytest.mark.parametrize("name, value, error, words", [
    ("layer", 2, ValueError, "layer=2"),
    ("head", 7, ValueError, "head=7"),
    ("head", "every", ValueError, "head='every'"),
    ("stage", "soft", ValueError, "stage='soft'"),
    ("query", 12, ValueError, "query=12"),
    ("key", -1, ValueError, "key=-1"),
])
def test_attention_bad_values_set_from_python(model, tok, name, value, error, words):
    ex = AttentionExplorer(model, tok, "to be or not")
    before = ex.view
    with pytest.raises(error, match=re.escape(words)):
        setattr(ex, name, value)
    assert ex.view is before


def test_attention_bad_inputs(model, tok):
    with pytest.raises(TypeError, match="gpt_lesson GPT"):
        draw_attention_view("model", tok, "to be")
    with pytest.raises(TypeError, match="encode"):
        AttentionExplorer(model, object(), "to be")
    with pytest.raises(TypeError, match="text must be a str"):
        AttentionExplorer(model, tok, 42)
    with pytest.raises(TypeError, match="text must be a str"):
        draw_attention_view(model, tok, None)
    with pytest.raises(ValueError, match="does not know 1 of these characters: 'z'"):
        draw_attention_view(model, tok, "zebra")
    with pytest.raises(ValueError, match="empty"):
        draw_attention_view(model, tok, "")
    with pytest.raises(ValueError, match="vocab_size"):
        AttentionExplorer(GPT(5, 8, 2, 1, 8), tok, "to")
    with pytest.raises(ValueError, match="valid text"):
        AttentionExplorer(model, tok, "zebra", query=0)
    data = AttentionData(model, tok, "to be")
    with pytest.raises(ValueError, match="layer=5 must be in 0..1"):
        attention_view_data(data, layer=5)
    with pytest.raises(ValueError, match="stage"):
        attention_view_data(data, stage="raw scores")


# -- mask explorer ------------------------------------------------------------------------------
def test_causal_mask_leaks_nothing_and_the_weights_match_the_library():
    ex = MaskExplorer(T=8, mask="causal")
    v = ex.view
    assert v["leak"] == 0.0 and v["nan_rows"] == []
    assert torch.equal(v["mask"], causal_mask(8))
    assert torch.equal(v["masked"], apply_mask(v["scores"], causal_mask(8)))
    assert torch.equal(v["weights"], attention_weights(v["masked"]))
    torch.testing.assert_close(v["weights"].sum(-1), torch.ones(8))


def test_mask_payload_holds_every_setting_the_controls_reach():
    ex = MaskExplorer(seed=3)
    p = ex.payload
    assert p["max_T"] == 16 and p["seed"] == 3
    scores = torch.from_numpy(np.frombuffer(p["scores"], dtype=np.float32).copy()).reshape(16, 16)
    prefix = torch.from_numpy(np.frombuffer(p["prefix"], dtype=np.float32).copy()).reshape(16, 16, 16)
    assert torch.equal(scores, demo_scores(16, 3))
    for T in range(1, 17):
        assert torch.equal(demo_scores(T, 3), scores[:T, :T])  # a shorter T keeps the numbers of its positions
        assert p["limits"][T - 1] == pytest.approx(float(scores[:T, :T].abs().max()))
        for mask in MASKS:
            for n_real in (range(T + 1) if "padding" in mask else (None,)):
                v = mask_view_data(T, mask, n_real, seed=3)
                st = p["states"][f"{T}|{mask}|{n_real}" if n_real is not None else f"{T}|{mask}"]
                seen = [int(c, 36) for c in st["visible"]]
                assert seen == v["mask"].sum(-1).int().tolist()
                assert st["nan_rows"] == v["nan_rows"]
                assert (st["leak"] is None) == math.isnan(v["leak"]) and (st["leak"] is None or st["leak"] == v["leak"])
                # the weights the browser builds from the prefix softmaxes: the view's weights
                for i, m in enumerate(seen):
                    row = torch.zeros(T) if m else torch.full((T,), float("nan"))
                    if m:
                        row[:m] = prefix[i, m - 1, :m]
                    torch.testing.assert_close(row, v["weights"][i], equal_nan=True, rtol=0, atol=3e-7)
    assert len(p["states"]) == sum(2 + 2 * (T + 1) for T in range(1, 17))


def test_no_mask_leaks():
    ex = MaskExplorer(T=8)
    ex.mask = "none"
    assert ex.view["leak"] > 0.1 and (ex.view["weights"] > 0).all()


def test_padding_hides_padded_keys():
    ex = MaskExplorer(T=8, mask="padding", n_real=5)
    w = ex.view["weights"]
    assert (w[:, 5:] == 0).all() and (w[:, :5] > 0).all()
    assert torch.equal(ex.view["mask"], padding_mask([5], 8)[0].expand(8, 8))
    assert ex.view["leak"] > 0  # padding alone does not stop a query reading later real tokens
    ex.mask = "causal+padding"
    assert ex.view["leak"] == 0.0 and (ex.view["weights"][:, 5:] == 0).all()


def test_fully_masked_rows_give_nan_and_are_explained():
    ex = MaskExplorer(T=6, mask="causal+padding", n_real=0)
    v = ex.view
    assert v["nan_rows"] == list(range(6)) and torch.isnan(v["weights"]).all()
    assert math.isnan(v["leak"])
    ex.n_real = 1  # one real token: every query sees key 0, no NaN
    assert ex.view["nan_rows"] == [] and not torch.isnan(ex.view["weights"]).any()


@pytest.mark.parametrize("T", range(1, 17))
def test_the_causal_mask_never_gives_nan(T):
    assert mask_view_data(T, "causal")["nan_rows"] == []


def test_mask_controls_stay_consistent():
    ex = MaskExplorer(T=8, mask="padding", n_real=8)
    ex.T = 4
    assert ex.n_real == 4 and ex.view["T"] == 4 and ex.view["n_real"] == 4
    ex.T = 12
    assert ex.n_real == 4 and ex.view["weights"].shape == (12, 12)
    with ex.hold_trait_notifications():  # what the browser sends when the slider moves: both at once
        ex.T, ex.n_real = 3, 3
    assert ex.view["T"] == 3 and ex.view["n_real"] == 3


def test_mask_static_picture_is_drawn_from_the_view():
    ex = MaskExplorer(T=6, mask="causal")
    ex.mask = "causal+padding"
    ex.n_real = 0
    assert np.array_equal(pixels(ex.png), pixels(png_of(draw_mask_view(6, "causal+padding", n_real=0))))
    fig = draw_mask_view(6, "causal+padding", n_real=0)
    legend = [t.get_text() for t in fig.axes[3].get_legend().get_texts()]
    assert label("mask", "key_nan") in legend  # the NaN rows are marked and named


@pytest.mark.parametrize("kwargs, error, words", [
    ({"T": 0}, ValueError, "T=0"),
    ({"T": 2.5}, TypeError, "T=2.5"),
    ({"T": 33}, ValueError, "T=33"),
    ({"mask": "tril"}, ValueError, "mask='tril'"),
    ({"n_real": -1}, ValueError, "n_real=-1"),
    ({"n_real": 9}, ValueError, "n_real=9"),
    ({"n_real": "3"}, TypeError, "n_real='3'"),
    ({"seed": "x"}, TypeError, "seed='x'"),
])
def test_mask_bad_settings(kwargs, error, words):
    with pytest.raises(error, match=re.escape(words)):
        draw_mask_view(**{"T": 8, **kwargs})


def test_mask_explorer_bad_settings():
    with pytest.raises(ValueError, match="slider's range"):
        MaskExplorer(T=20)
    with pytest.raises(ValueError, match="mask='future'"):
        MaskExplorer(mask="future")
    ex = MaskExplorer()
    for name, value, error in (("T", 17, ValueError), ("T", 0, ValueError), ("mask", "tril", ValueError),
                               ("n_real", 17, ValueError), ("n_real", -1, ValueError)):
        with pytest.raises(error, match=f"{name}={value!r}"):
            setattr(ex, name, value)


# -- scaling explorer ---------------------------------------------------------------------------
@pytest.mark.parametrize("d_k", [16, 256, 1024])
def test_variance_is_near_d_k_unscaled_and_near_1_scaled(d_k):
    ex = ScalingExplorer(d_k=d_k, scaling="none")
    assert ex.view["variance"] == pytest.approx(d_k, rel=0.1)
    assert ex.view["variance"] == qk_variance(d_k, 2000, 1.0, 0)  # the number comes from experiments
    ex.scaling = "sqrt"
    assert ex.view["variance"] == pytest.approx(1.0, rel=0.1)
    assert ex.view["variance"] == pytest.approx(qk_variance(d_k, 2000, d_k ** -0.5, 0), rel=1e-5)
    assert float(ex.view["samples"].var()) == pytest.approx(ex.view["variance"], rel=1e-5)


def test_temperature_divides_the_spread():
    ex = ScalingExplorer(d_k=64, scaling="temperature", temperature=2.0)
    assert ex.temperature_enabled
    assert ex.view["variance"] == pytest.approx(0.25, rel=0.1)
    ex.scaling = "sqrt"
    assert not ex.temperature_enabled


def test_unscaled_softmax_saturates_and_loses_its_gradient():
    ex = ScalingExplorer(d_k=1024, scaling="none")
    s = ex.view["softmax"]
    ref = softmax_stats(1024, 16, 1.0, 0)  # the numbers come from experiments
    assert torch.equal(s["weights"], ref["weights"]) and s["grad_norm"] == ref["grad_norm"]
    assert s["max_weight"] > 0.99 and s["grad_norm"] < 0.05
    ex.scaling = "sqrt"
    scaled = ex.view["softmax"]
    assert scaled["max_weight"] < 0.7 and scaled["entropy"] > 1.0 and scaled["grad_norm"] > 5 * s["grad_norm"]


def test_scaling_payload_holds_every_setting_of_every_stop():
    ex = ScalingExplorer(d_k=48)
    p = ex.payload
    assert p["stops"] == sorted({48, *(2 ** i for i in range(11))}) and 48 not in p["grid"]
    assert p["settings"][:2] == ["none", "sqrt"] and len(p["settings"]) == 2 + len(TAUS)
    S, F = len(p["settings"]), len(p["fields"])
    table = torch.from_numpy(np.frombuffer(p["table"], dtype=np.float32).copy()).reshape(len(p["stops"]), S, F)
    rows = unpack_tensor(p["rows"], (len(p["stops"]), S, 16))
    counts = np.frombuffer(p["counts"], dtype=np.float32).reshape(len(p["stops"]), p["bins"])
    data = ScalingData()
    for n, d_k in enumerate(p["stops"]):
        assert counts[n].sum() == 2000
        for m, (name, tau) in enumerate(zip(p["settings"], p["taus"])):
            scaling = name.split("@")[0]
            view = data.view(d_k, scaling, tau)
            got = dict(zip(p["fields"], table[n, m].tolist()))
            assert got["variance"] == pytest.approx(view["variance"], rel=1e-6)
            assert got["mean_entropy"] == pytest.approx(view["mean"]["entropy"], rel=1e-6)
            assert got["max_weight"] == pytest.approx(view["softmax"]["max_weight"], rel=1e-6)
            assert (rows[n, m] - view["softmax"]["weights"]).abs().max() < 1e-4
    ex.d_k, ex.scaling = 1024, "none"
    ex.temperature = TAUS[7]
    assert ex.payload is p  # every setting the controls reach was sent up front: no new data for a control
    ex.temperature = 3.7  # between the slider's stops (set from Python): the payload gains that setting
    assert "temperature@3.7" in ex.payload["settings"]


def test_the_saturation_curves_are_averages_over_many_queries():
    """One random query per d_k made the curves jagged; the mean of 200 (lesson 04's draws) is smooth."""
    v = ScalingData().view(64, "sqrt")
    grid = v["curves"]["d_k"]
    runs = {d: [softmax_stats(d, 16, d ** -0.5, seed) for seed in range(200)] for d in (4, 1024)}
    for d in (4, 1024):
        mean = sum(r["entropy"] for r in runs[d]) / 200
        assert v["curves"]["entropy"][grid.index(d)] == pytest.approx(mean, rel=1e-5)
    scaled = v["curves"]["entropy"][2:]  # d_k >= 4: the scaled entropy stays flat, no dip at 1024
    assert max(scaled) - min(scaled) < 0.05 * max(scaled)
    unscaled = v["curves_none"]["entropy"]
    assert all(a > b for a, b in zip(unscaled[1:], unscaled[2:]))  # without scaling it only falls


def test_scaling_static_picture_is_drawn_from_the_view():
    ex = ScalingExplorer(d_k=64)
    ex.d_k = 512
    ex.scaling = "none"
    assert np.array_equal(pixels(ex.png), pixels(png_of(draw_scaling_view(512, "none"))))


@pytest.mark.parametrize("kwargs, error, words", [
    ({"d_k": 0}, ValueError, "d_k=0"),
    ({"d_k": 2048}, ValueError, "d_k=2048"),
    ({"d_k": 1.5}, TypeError, "d_k=1.5"),
    ({"scaling": "log"}, ValueError, "scaling='log'"),
    ({"scaling": "temperature", "temperature": 0}, ValueError, "temperature=0"),
    ({"temperature": "hot"}, TypeError, "temperature='hot'"),
    ({"n_samples": 0}, ValueError, "n_samples=0"),
    ({"T": 1}, ValueError, "T=1"),
])
def test_scaling_bad_settings(kwargs, error, words):
    with pytest.raises(error, match=re.escape(words)):
        draw_scaling_view(**kwargs)
    with pytest.raises(error):
        ScalingExplorer(**kwargs)


def test_scaling_explorer_values_outside_its_controls():
    with pytest.raises(ValueError, match="temperature=100"):
        ScalingExplorer(scaling="temperature", temperature=100)
    assert scaling_view_data(8, "temperature", 100)["scale"] == pytest.approx(8 ** -0.5 / 100)
    with pytest.raises(TypeError, match="seed"):
        ScalingData(seed=1.0)
    ex = ScalingExplorer()
    with pytest.raises(ValueError, match="d_k=48 is not one of the slider's stops"):
        ex.d_k = 48
    with pytest.raises(ValueError, match="temperature=0.05"):
        ex.temperature = 0.05


# -- shared behaviour ---------------------------------------------------------------------------
def test_explorers_never_touch_pyplot(model, tok):
    before = plt.get_fignums()
    explorers = [AttentionExplorer(model, tok, "to be"), MaskExplorer(), ScalingExplorer()]
    for ex in explorers:
        assert ex.png.startswith(b"\x89PNG")
    assert plt.get_fignums() == before  # no figure for the inline backend to show twice


def test_explorers_answer_the_pages_ping(model, tok):
    for ex in (AttentionExplorer(model, tok, "to"), MaskExplorer(), ScalingExplorer()):
        sent: list = []
        ex.send = sent.append
        ex._on_front_end_message(ex, {"type": "ping"}, [])
        ex._on_front_end_message(ex, {"type": "something else"}, [])
        assert sent == [{"type": "pong"}]


def test_explorers_display_as_widgets(model, tok):
    ex = MaskExplorer(T=3)
    bundle = ex._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == ex.model_id
    assert "gpt-lesson-mask-explorer" in ex._dom_classes
    assert "gpt-lesson-attention-explorer" in AttentionExplorer(model, tok, "to")._dom_classes


def test_save_png(tmp_path):
    ex = MaskExplorer(T=4)
    out = ex.save_png(tmp_path / "mask.png")
    assert out.read_bytes() == ex.png and ex.png.startswith(b"\x89PNG")
    assert PIL.Image.open(out).size == (800, 688)  # figsize (10, 8.6) at 80 dpi
    with pytest.raises(ValueError, match=r"must end in \.png"):
        ex.save_png(tmp_path / "mask.jpg")
    with pytest.raises(ValueError, match="does not exist"):
        ex.save_png(tmp_path / "missing" / "mask.png")
    with pytest.raises(TypeError, match="path must be"):
        ex.save_png(3)


def test_one_thread_restores_the_thread_count_even_after_an_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with one_thread():
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before


def test_shared_helpers_check_their_arguments():
    with pytest.raises(TypeError, match="matplotlib Figure"):
        new_figure((4, 3), fig="figure")
    with pytest.raises(ValueError, match="is not one of"):
        check_choice("mask", ["causal"], ("causal", "none"))
    with pytest.raises(ValueError, match="is not one of"):
        check_choice("flag", True, (1, 0))
    with pytest.raises(NotImplementedError):
        Painter().draw({})


# -- the label table ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["attention", "mask", "scaling"])
def test_every_label_the_browser_asks_for_is_in_the_table(kind):
    source = (SOURCES / f"{kind}.mjs").read_text()
    asked = {k for k in re.findall(r'\bL\("([\w+]+)"', source) if not k.endswith("_")}
    for prefix, values in (("stage_", ("raw", "scaled", "masked", "weights")), ("tip_stage_", ("raw", "scaled", "masked", "weights")),
                           ("title_", ("raw", "masked", "weights")), ("hover_", ("raw", "scaled", "masked", "weights")),
                           ("mask_", ("causal", "none", "padding", "causal+padding")),
                           ("tip_mask_", ("causal", "none", "padding", "causal+padding")),
                           ("scaling_", ("none", "sqrt", "temperature")), ("tip_scaling_", ("none", "sqrt", "temperature"))):
        if re.search(rf'L\("{prefix}" \+', source):  # keys built as L("stage_" + s)
            asked |= {prefix + v for v in values}
    table = labels_for(kind)
    assert asked and not asked - set(table), sorted(asked - set(table))


def test_every_label_goes_through_the_translation_function(monkeypatch):
    monkeypatch.setattr(labels_module, "_", lambda s: "«" + s + "»")
    monkeypatch.setattr(labels_module, "C_", lambda context, s: "«" + s + "»")  # the two "none" (msgctxt)
    for kind in ("attention", "mask", "scaling"):
        assert all(v.startswith("«") and v.endswith("»") for v in labels_for(kind).values())
    assert label("mask", "verdict_none") == "«nothing leaks»"
    ex = MaskExplorer()
    assert ex.labels["verdict_none"] == "«nothing leaks»"  # the browser gets the translated table
    with pytest.raises(ValueError, match="explorer='masks'"):
        labels_for("masks")
    with pytest.raises(ValueError, match="key='nope'"):
        label("mask", "nope")


def test_explorers_show_their_controls_where_no_widget_can_be_drawn(model, tok):
    assert repr(MaskExplorer(T=5, mask="none")) == "MaskExplorer(T=5, mask='none', n_real=4)"
    assert repr(ScalingExplorer(d_k=16)) == "ScalingExplorer(d_k=16, scaling='sqrt', temperature=1.0)"
    text = "to be or not to be, that is the question"
    assert repr(AttentionExplorer(model, tok, text[:12], query=3)) == (
        "AttentionExplorer(text='to be or not', layer=0, head=0, stage='weights', query=3, key=None, colors='shared')")
    long = text + " again"  # 46 characters: the repr shows the first 37
    assert f"text={long[:37] + '...'!r}," in repr(AttentionExplorer(model, tok, long))


def test_the_two_none_options_are_translated_apart():
    """Issue 27 item 2: the mask's "none" and the scaling's "none" are one English word with two
    meanings; each carries its context (msgctxt), so the Chinese buttons say what they do."""
    from gpt_lesson.i18n import C_, language
    from tools.i18n import extract, problems

    contexts = sorted(m.context for m in extract() if m.id == "none")
    assert contexts == ["mask", "scaling"]
    with language("zh"):
        mask_none, scaling_none = labels_module.label("mask", "mask_none"), labels_module.label("scaling", "scaling_none")
        assert C_("no such context", "none") == "none"  # no catalogue entry: the English text
    assert (mask_none, scaling_none) == ("不遮住", "不缩放")
    assert labels_module.label("mask", "mask_none") == labels_module.label("scaling", "scaling_none") == "none"
    assert problems("zh") == []


def test_model_switch_links_every_control_and_shows_one_explorer(model, tok):
    """Issue 30 item 3: a trained/untrained switch. The second explorer takes the first one's settings,
    every control is linked in the page (jslink: works without a kernel), every explorer stays built in
    the page (panes marked for the buttons' module to show one: no ipywidgets.Stack, which builds the
    shown view anew at each switch), its repr names the models and the shown one's settings, and a page
    without widgets gets the shown explorer's HTML view."""
    import ipywidgets

    from gpt_lesson.widgets import ModelSwitch

    torch.manual_seed(5)
    other = GPT(model.config)
    a = AttentionExplorer(model, tok, "to be or not", layer=1, head=2, stage="scaled", query=4, key=1)
    b = AttentionExplorer(other, tok, "the")
    switch = ModelSwitch({"trained": a, "untrained": b})
    assert (b.text, b.layer, b.head, b.stage, b.query, b.key) == ("to be or not", 1, 2, "scaled", 4, 1)
    assert b.view["cell"]["query"] == 4 and b.model_runs == 2  # "the", then the first explorer's text
    assert not torch.equal(a.view["matrix"], b.view["matrix"])  # two models, one cell compared
    linked = {(link.source[1], link.target[0] is b) for link in switch.links}
    assert linked == {(t, True) for t in ("text", "layer", "head", "stage", "colors", "query", "key")}
    assert all(link.source[0] is a for link in switch.links)
    assert switch.children == (switch.buttons, switch.panes) and switch.panes.children == (a, b)
    assert not any(isinstance(w, ipywidgets.Stack) for w in (switch.panes, *switch.children))
    assert "gpt-lesson-model-switch" in switch._dom_classes and "gl-model-panes" in switch.panes._dom_classes
    assert [w._dom_classes[-2:] for w in (a, b)] == [("gl-model-pane", "gl-model-pane-0"), ("gl-model-pane", "gl-model-pane-1")]
    assert switch.buttons.names == ["trained", "untrained"] and switch.shown is a
    assert repr(switch) == ("ModelSwitch(models=['trained', 'untrained'], shown='trained', text='to be or not', "
                            "layer=1, head=2, stage='scaled', colors='shared', query=4, key=1)")
    switch.buttons.index = 1
    b.stage = "weights"  # (what jslink does in the page)
    assert switch.shown is b and repr(switch).startswith("ModelSwitch(models=['trained', 'untrained'], shown='untrained'")
    assert "stage='weights'" in repr(switch)
    data, _ = switch._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data and data["text/html"] == b.html_view()
    assert data["text/plain"] == repr(switch)


@pytest.mark.parametrize("explorers, error, words", [
    ([], TypeError, "must be a dict"),
    ({}, ValueError, "at least 2 models"),
    ({"": None, "b": None}, ValueError, "non-empty str"),
    ({"a": 1, "b": 2}, TypeError, r"explorers\['a'\] must be an AttentionExplorer, got int"),
])
def test_model_switch_bad_inputs(explorers, error, words):
    from gpt_lesson.widgets import ModelSwitch

    with pytest.raises(error, match=words):
        ModelSwitch(explorers)


def test_model_switch_needs_the_same_layers_and_heads(model, tok):
    from gpt_lesson.widgets import ModelSwitch

    torch.manual_seed(0)
    small = GPT(tok.vocab_size, n_embd=16, n_head=2, n_layer=1, block_size=64)
    a, b = AttentionExplorer(model, tok, "to be"), AttentionExplorer(small, tok, "to be")
    with pytest.raises(ValueError, match=r"explorers\['b'\] has 1 layers of 2 heads, explorers\['a'\] 2 of 4"):
        ModelSwitch({"a": a, "b": b})
