"""The explorers driven without a browser: set control values, check the data they show."""
from __future__ import annotations

import io
import math

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import PIL.Image
import pytest
import torch

from gpt_lesson import GPT, CharTokenizer, GPTConfig
from gpt_lesson.attention import apply_mask, attention_scores, attention_weights, causal_mask, padding_mask
from gpt_lesson.experiments import qk_variance, softmax_stats
from gpt_lesson.widgets import (AttentionExplorer, MaskExplorer, ScalingExplorer, draw_attention_view,
                                draw_mask_view, draw_scaling_view)
from gpt_lesson.widgets._common import Painter, check_choice, new_figure, one_thread
from gpt_lesson.widgets.attention_explorer import AttentionData, attention_view_data
from gpt_lesson.widgets.mask_explorer import mask_view_data
from gpt_lesson.widgets.scaling_explorer import ScalingData, scaling_view_data

TEXT = "to be, or not to be: that is the question."


@pytest.fixture(scope="module")
def tok() -> CharTokenizer:
    return CharTokenizer(TEXT + "TBO")


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


def same_picture(widget_png: bytes, fig) -> float:
    """Fraction of pixels where the explorer's PNG and the static figure (saved at 80 dpi) differ."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, facecolor="white")
    a, b = pixels(widget_png), pixels(buf.getvalue())
    assert a.shape == b.shape
    return float((np.abs(a - b).sum(-1) > 0).mean())


# -- attention explorer -------------------------------------------------------------------------
def test_attention_stages_equal_the_library_and_the_model(model, tok):
    ex = AttentionExplorer(model, tok, "to be or not")
    idx = torch.tensor([tok.encode("to be or not")])
    records = model.attention_records(idx)
    T = idx.size(1)
    for layer in (0, 1):
        ex.layer.value = layer
        q, k = records[layer]["q"], records[layer]["k"]
        raw = attention_scores(q, k, scale=1.0)[0]
        scaled = attention_scores(q, k)[0]
        masked = apply_mask(scaled, causal_mask(T))
        expected = {"raw": raw, "scaled": scaled, "masked": masked, "weights": attention_weights(masked)}
        for stage, want in expected.items():
            ex.stage.value = stage
            for head in range(4):
                ex.head.value = head
                assert torch.equal(ex.view["matrix"], want[head]), (layer, stage, head)
        # ...and the model's own captured scores and weights
        torch.testing.assert_close(ex.data.stages(layer)["scaled"], records[layer]["scores"][0])
        torch.testing.assert_close(ex.data.stages(layer)["weights"], records[layer]["weights"][0])
        torch.testing.assert_close(raw * model.config.head_size ** -0.5, scaled)


def test_attention_rows_sum_to_one_and_future_is_exactly_zero(model, tok):
    ex = AttentionExplorer(model, tok, TEXT[:16], head="all")
    w = ex.view["weights"]  # (nh, T, T)
    assert w.shape == (4, 16, 16)
    torch.testing.assert_close(w.sum(-1), torch.ones(4, 16))
    future = torch.triu(torch.ones(16, 16, dtype=torch.bool), diagonal=1)
    assert (w[:, future] == 0).all()
    assert (w[:, ~future] > 0).all()
    r = ex.view["readouts"]
    torch.testing.assert_close(r["row_sums"], torch.ones(4, 16))
    assert r["max_weight"] == pytest.approx(float(w.max()))
    # entropy of row 0 is 0 (one visible key), of the last row at most ln(16)
    assert float(r["entropy"][0, 0]) == pytest.approx(0.0, abs=1e-6)
    assert 0 < float(r["entropy"][0, -1]) <= math.log(16) + 1e-6
    assert "every row sums to 1" in ex.readout.value


def test_attention_masked_stage_is_minus_inf_in_the_future(model, tok):
    ex = AttentionExplorer(model, tok, "not to be", stage="masked")
    m = ex.view["matrix"]
    future = torch.triu(torch.ones(9, 9, dtype=torch.bool), diagonal=1)
    assert torch.isneginf(m[future]).all() and torch.isfinite(m[~future]).all()


def test_attention_step_through_of_one_cell(model, tok):
    ex = AttentionExplorer(model, tok, "to be or not", head=2)
    ex.query.value = 5
    cell = ex.view["cell"]
    st = ex.data.stages(0)
    j = int(st["weights"][2, 5].argmax())  # default key: the largest weight
    assert cell["key"] == j
    rec = ex.data.records[0]
    q, k, v = rec["q"][0, 2, 5], rec["k"][0, 2, j], rec["v"][0, 2]
    torch.testing.assert_close(cell["products"], q * k)
    assert cell["dot"] == pytest.approx(float(st["raw"][2, 5, j]), abs=1e-6)
    assert cell["scaled"] == pytest.approx(cell["raw"] * model.config.head_size ** -0.5, abs=1e-6)
    assert cell["weight"] == pytest.approx(float(st["weights"][2, 5, j]))
    torch.testing.assert_close(cell["output"], st["weights"][2, 5] @ v)
    torch.testing.assert_close(cell["contribution"], st["weights"][2, 5, j] * v[j])
    ex.key.value = 9  # a future key: masked, weight exactly 0
    assert ex.view["cell"]["visible"] is False and ex.view["cell"]["weight"] == 0.0
    ex.head.value = "all"  # a grid of heads has no single row to step through
    assert ex.view["cell"] is None and ex.view["matrix"].shape == (4, 12, 12)


def test_attention_head_change_only_redraws(model, tok):
    ex = AttentionExplorer(model, tok, TEXT[:16])
    runs, builds, redraws, png = ex.model_runs, ex.painter.builds, ex.redraws, ex.png
    ex.head.value = 1
    ex.stage.value = "raw"
    ex.layer.value = 1
    assert ex.model_runs == runs  # the model ran once for this text
    assert ex.painter.builds == builds  # same layout: only data, colours and texts were updated
    assert ex.redraws == redraws + 3
    assert ex.png != png


def test_going_back_to_a_layout_reuses_it(model, tok):
    ex = AttentionExplorer(model, tok, TEXT[:16])
    ex.head.value = "all"
    ex.head.value = 0

    def builds():
        return sum(painter.builds for painter, _ in ex._layouts.values())

    before = builds()
    ex.head.value = "all"
    ex.head.value = 1
    ex.query.value = 4
    ex.query.value = -1
    assert builds() == before + 1  # only the query's layout (row and step-through) was new
    assert len(ex._layouts) == 3 and ex.view["head"] == 1
    assert same_picture(ex.png, draw_attention_view(model, tok, TEXT[:16], head=1)) < 0.001


def test_attention_text_is_cached(model, tok):
    ex = AttentionExplorer(model, tok, "to be")
    assert ex.model_runs == 1
    ex.text.value = "not to be"
    assert ex.model_runs == 2 and ex.view["T"] == 9
    assert len(ex.query.options) == 10  # "none" and one entry per token
    ex.text.value = "to be"
    assert ex.model_runs == 2  # seen before: no new forward pass


def test_attention_new_text_of_the_same_length_only_relabels(model, tok):
    ex = AttentionExplorer(model, tok, "to be or not", query=3)
    builds = ex.painter.builds
    ex.text.value = "not to be or"
    assert ex.painter.builds == builds and ex.model_runs == 2
    assert same_picture(ex.png, draw_attention_view(model, tok, "not to be or", query=3)) < 0.001


def test_attention_typing_redraws_only_the_changed_tick_labels(model, tok):
    text = "to be or not to "  # block_size=16 tokens: every one labelled on both axes
    ex = AttentionExplorer(model, tok, text)
    full_draws = []
    draw = ex._fig.canvas.draw
    ex._fig.canvas.draw = lambda: (full_draws.append(1), draw())
    # "O" is wider than any other label on the y axis, so the axis label "query" moves left:
    # only then is the whole figure drawn again; otherwise only the changed labels are.
    for new, expected_full_draws in ((text[:-1] + "b", 0), ("T" + text[1:-1] + "b", 0),
                                     (text[:5] + "OTB" + text[8:], 1), (text[:-1] + "n", 2)):
        ex.text.value = new
        assert len(full_draws) == expected_full_draws, new
        fresh = AttentionExplorer(model, tok, new)  # drawn from scratch
        assert np.array_equal(pixels(ex.png), pixels(fresh.png)), new
        assert same_picture(ex.png, draw_attention_view(model, tok, new)) < 0.001


def test_attention_bad_text_shows_a_message_not_a_traceback(model, tok):
    ex = AttentionExplorer(model, tok, "to be")
    ex.query.value = 3
    ex.text.value = "to bé"
    assert "['é']" in ex.error and "not in the vocabulary" in ex.message.value
    assert ex.view == {"error": ex.error}
    ex.text.value = ""
    assert "empty" in ex.error and "empty" in ex.message.value
    ex.text.value = "to"  # recovers; the query that pointed past the text is reset
    assert ex.error == "" and ex.view["T"] == 2 and ex.query.value == -1 and ex.view["cell"] is None


def test_attention_long_text_is_truncated_with_a_notice(model, tok):
    ex = AttentionExplorer(model, tok, TEXT)  # 42 characters, block_size 16
    assert ex.view["T"] == 16 and len(ex.data.tokens) == 16
    assert "showing the first 16" in ex.message.value and "block_size=16" in ex.message.value


def test_attention_without_causal_mask_shows_the_future(tok):
    torch.manual_seed(0)
    model = GPT(GPTConfig(tok.vocab_size, 32, 4, 1, 16, dropout=0.0, causal=False))
    ex = AttentionExplorer(model, tok, "to be or")
    assert ex.view["mask"] is None
    w = ex.view["weights"]
    assert float(w[0, 1:].sum()) > 0  # position 0 attends to later positions
    torch.testing.assert_close(w, model.attention_records(torch.tensor([tok.encode("to be or")]))[0]["weights"][0, 0])


def test_attention_widget_and_static_figure_are_the_same_picture(model, tok):
    ex = AttentionExplorer(model, tok, "to be or not", head=1, stage="masked", query=4, key=2)
    fig = draw_attention_view(model, tok, "to be or not", layer=0, head=1, stage="masked", query=4, key=2)
    assert isinstance(fig, matplotlib.figure.Figure)
    assert same_picture(ex.png, fig) < 0.001
    ex.head.value = "all"
    ex.stage.value = "weights"
    assert same_picture(ex.png, draw_attention_view(model, tok, "to be or not", head="all")) < 0.001


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
    with pytest.raises(error, match=words.replace("(", r"\(").replace(".", r"\.")):
        draw_attention_view(model, tok, "to be or not", **kwargs)
    with pytest.raises(error):
        AttentionExplorer(model, tok, "to be or not", **kwargs)


def test_attention_bad_inputs(model, tok):
    with pytest.raises(TypeError, match="gpt_lesson GPT"):
        draw_attention_view("model", tok, "to be")
    with pytest.raises(TypeError, match="encode"):
        AttentionExplorer(model, object(), "to be")
    with pytest.raises(TypeError, match="text must be a str"):
        AttentionExplorer(model, tok, 42)
    with pytest.raises(TypeError, match="text must be a str"):
        draw_attention_view(model, tok, None)
    with pytest.raises(ValueError, match="not in the vocabulary"):
        draw_attention_view(model, tok, "zebra")
    with pytest.raises(ValueError, match="empty"):
        draw_attention_view(model, tok, "")
    with pytest.raises(ValueError, match="vocab_size"):
        AttentionExplorer(GPT(5, 8, 2, 1, 8), tok, "to")
    with pytest.raises(ValueError, match="valid text"):
        AttentionExplorer(model, tok, "zebra", query=0)
    data = AttentionData(model, tok, "to be")
    with pytest.raises(ValueError, match="layer=5"):
        data.stages(5)
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
    assert (v["weights"][causal_mask(8) == 0] == 0).all()
    torch.testing.assert_close(v["weights"].sum(-1), torch.ones(8))
    assert "leak to the future: 0.000" in ex.readout.value and "keeps the diagonal" in ex.readout.value


def test_no_mask_leaks():
    ex = MaskExplorer(T=8)
    ex.mask.value = "none"
    assert ex.view["leak"] > 0.1
    assert (ex.view["weights"] > 0).all()
    assert "can read the future" in ex.readout.value


def test_padding_hides_padded_keys():
    ex = MaskExplorer(T=8, mask="padding", n_real=5)
    w = ex.view["weights"]
    assert (w[:, 5:] == 0).all() and (w[:, :5] > 0).all()
    assert torch.equal(ex.view["mask"], padding_mask([5], 8)[0].expand(8, 8))
    assert ex.view["leak"] > 0  # padding alone does not stop a query reading later real tokens
    ex.mask.value = "causal+padding"
    assert ex.view["leak"] == 0.0
    assert (ex.view["weights"][:, 5:] == 0).all()


def test_fully_masked_rows_give_nan_and_are_explained():
    ex = MaskExplorer(T=6, mask="causal+padding", n_real=0)
    v = ex.view
    assert v["nan_rows"] == list(range(6))
    assert torch.isnan(v["weights"]).all()
    assert "0/0 = NaN" in v["explanation"] and "keeps the diagonal" in v["explanation"]
    assert math.isnan(v["leak"]) and "undefined" in ex.readout.value
    ex.n_real.value = 1  # one real token: every query sees key 0, no NaN
    assert ex.view["nan_rows"] == [] and not torch.isnan(ex.view["weights"]).any()


@pytest.mark.parametrize("T", range(1, 17))
def test_the_causal_mask_never_gives_nan(T):
    assert mask_view_data(T, "causal")["nan_rows"] == []


def test_mask_sliders_stay_consistent():
    ex = MaskExplorer(T=8, mask="padding", n_real=8)
    assert ex.n_real.disabled is False
    ex.T.value = 4
    assert ex.n_real.max == 4 and ex.n_real.value == 4 and ex.view["T"] == 4 and ex.view["n_real"] == 4
    ex.T.value = 12
    assert ex.n_real.max == 12 and ex.view["weights"].shape == (12, 12)
    ex.mask.value = "causal"
    assert ex.n_real.disabled is True


def test_mask_widget_and_static_figure_are_the_same_picture():
    ex = MaskExplorer(T=6, mask="causal")
    ex.mask.value = "causal+padding"
    ex.n_real.value = 0
    assert same_picture(ex.png, draw_mask_view(6, "causal+padding", n_real=0)) < 0.001


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
    with pytest.raises(error, match=words):
        draw_mask_view(**{"T": 8, **kwargs})


def test_mask_explorer_bad_settings():
    with pytest.raises(ValueError, match="slider's range"):
        MaskExplorer(T=20)
    with pytest.raises(ValueError, match="mask='future'"):
        MaskExplorer(mask="future")


# -- scaling explorer ---------------------------------------------------------------------------
@pytest.mark.parametrize("d_k", [16, 256, 1024])
def test_variance_is_near_d_k_unscaled_and_near_1_scaled(d_k):
    ex = ScalingExplorer(d_k=d_k, scaling="none")
    assert ex.view["variance"] == pytest.approx(d_k, rel=0.1)
    assert ex.view["variance"] == qk_variance(d_k, 2000, 1.0, 0)  # the number comes from experiments
    ex.scaling.value = "sqrt"
    assert ex.view["variance"] == pytest.approx(1.0, rel=0.1)
    assert float(ex.view["samples"].var()) == pytest.approx(ex.view["variance"], rel=1e-5)  # the histogram's data


def test_temperature_divides_the_spread():
    ex = ScalingExplorer(d_k=64, scaling="temperature", temperature=2.0)
    assert ex.temperature.disabled is False
    assert ex.view["variance"] == pytest.approx(0.25, rel=0.1)
    ex.scaling.value = "sqrt"
    assert ex.temperature.disabled is True


def test_unscaled_softmax_saturates_and_loses_its_gradient():
    ex = ScalingExplorer(d_k=1024, scaling="none")
    s = ex.view["softmax"]
    ref = softmax_stats(1024, 16, 1.0, 0)  # the numbers come from experiments
    assert torch.equal(s["weights"], ref["weights"]) and s["grad_norm"] == ref["grad_norm"]
    assert s["max_weight"] > 0.99 and s["grad_norm"] < 0.05
    ex.scaling.value = "sqrt"
    scaled = ex.view["softmax"]
    assert scaled["max_weight"] < 0.7 and scaled["entropy"] > 1.0 and scaled["grad_norm"] > 5 * s["grad_norm"]
    torch.testing.assert_close(scaled["weights"].sum(), torch.tensor(1.0))


def test_scaling_recomputes_only_what_changed():
    ex = ScalingExplorer(d_k=64)
    builds = ex.painter.builds
    ex.d_k.value = 128
    ex.scaling.value = "none"
    ex.scaling.value = "sqrt"
    assert sorted(ex.data._dots) == [64, 128]  # samples drawn once per d_k, reused for every scaling
    assert ex.painter.builds == builds
    ex.d_k.value = 64
    assert sorted(ex.data._dots) == [64, 128] and ex.view["d_k"] == 64


def test_scaling_widget_and_static_figure_are_the_same_picture():
    ex = ScalingExplorer(d_k=64)
    ex.d_k.value = 512
    ex.scaling.value = "none"
    assert same_picture(ex.png, draw_scaling_view(512, "none")) < 0.001


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
    with pytest.raises(error, match=words):
        draw_scaling_view(**kwargs)
    with pytest.raises(error):
        ScalingExplorer(**kwargs)


def test_scaling_explorer_temperature_outside_the_slider():
    with pytest.raises(ValueError, match="temperature=100"):
        ScalingExplorer(scaling="temperature", temperature=100)
    assert scaling_view_data(8, "temperature", 100)["scale"] == pytest.approx(8 ** -0.5 / 100)
    with pytest.raises(TypeError, match="seed"):
        ScalingData(seed=1.0)


# -- shared behaviour ---------------------------------------------------------------------------
def test_explorers_do_not_interfere_and_never_touch_pyplot(model, tok):
    before = plt.get_fignums()
    a = AttentionExplorer(model, tok, "to be")
    b = AttentionExplorer(model, tok, "or not")
    m1, m2 = MaskExplorer(), MaskExplorer()
    s = ScalingExplorer()
    assert plt.get_fignums() == before  # no figure for the inline backend to show twice
    figs = {id(e._fig) for e in (a, b, m1, m2, s)}
    assert len(figs) == 5
    pngs = {name: e.png for name, e in (("a", a), ("b", b), ("m2", m2), ("s", s))}
    a.head.value = 3
    m1.mask.value = "none"
    assert b.png == pngs["b"] and m2.png == pngs["m2"] and s.png == pngs["s"] and a.png != pngs["a"]
    assert b.view["head"] == 0 and m2.view["mask_name"] == "causal"


def test_each_control_changes_the_picture(model, tok):
    ex = AttentionExplorer(model, tok, "to be or")
    for widget, value in ((ex.stage, "raw"), (ex.head, 2), (ex.layer, 1), (ex.query, 3), (ex.key, 0),
                          (ex.text, "not to be")):
        png = ex.png
        widget.value = value
        assert ex.png != png, widget.description
    mx = MaskExplorer()
    for widget, value in ((mx.mask, "padding"), (mx.n_real, 2), (mx.T, 5)):
        png = mx.png
        widget.value = value
        assert mx.png != png, widget.description
    sx = ScalingExplorer()
    for widget, value in ((sx.d_k, 8), (sx.scaling, "temperature"), (sx.temperature, 3.0)):
        png = sx.png
        widget.value = value
        assert sx.png != png, widget.description


def test_one_thread_restores_the_thread_count_even_after_an_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with one_thread():
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before


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


def test_explorers_display_their_widget(model, tok, capsys):
    from IPython.core.formatters import DisplayFormatter

    ex = MaskExplorer(T=3)
    assert "gpt-lesson-mask-explorer" in ex.widget._dom_classes
    DisplayFormatter().format(ex)  # what IPython does with the last expression of a cell
    assert "VBox" in capsys.readouterr().out  # no frontend here, so display() prints the widget's repr
    assert "gpt-lesson-attention-explorer" in AttentionExplorer(model, tok, "to").widget._dom_classes


def test_shared_helpers_check_their_arguments():
    with pytest.raises(ValueError, match="nothing painted"):
        Painter().render_png()
    with pytest.raises(TypeError, match="matplotlib Figure"):
        new_figure((4, 3), fig="figure")
    with pytest.raises(ValueError, match="is not one of"):
        check_choice("mask", ["causal"], ("causal", "none"))
    with pytest.raises(ValueError, match="is not one of"):
        check_choice("flag", True, (1, 0))
