"""Plot helpers draw what they promise: masked cells shaded, right colour maps, labelled axes."""
import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.collections import PatchCollection

from gpt_lesson import attention as A
from gpt_lesson.training import History
from gpt_lesson.viz import plot_attention, plot_loss_curves, token_labels


def test_weights_heatmap_shades_the_future():
    w = A.attention_weights(A.apply_mask(torch.randn(5, 5), A.causal_mask(5)))
    ax = plot_attention(w, tokens=list("hello"), mask=A.causal_mask(5), title="weights")
    shaded = [c for c in ax.collections if isinstance(c, PatchCollection)]
    assert len(shaded) == 1 and len(shaded[0].get_paths()) == 4  # one run per row with a future
    assert ax.images[0].get_cmap().name == "viridis" and ax.images[0].get_clim() == (0.0, 1.0)
    assert [t.get_text() for t in ax.get_xticklabels()] == list("hello")
    assert ax.get_legend().get_texts()[0].get_text() == "masked (future)"
    assert "query" in ax.get_ylabel() and "key" in ax.get_xlabel()
    plt.close("all")


def test_signed_scores_use_diverging_map_centred_at_zero():
    ax = plot_attention(torch.tensor([[-2.0, 1.0], [0.5, 3.0]]))
    lo, hi = ax.images[0].get_clim()
    assert ax.images[0].get_cmap().name == "RdBu_r" and lo == -hi == -3.0
    plt.close("all")


def test_token_labels_make_whitespace_visible():
    assert token_labels([" ", "\n", "a"]) == ["␣", "⏎", "a"]


def test_plot_attention_rejects_wrong_rank():
    with pytest.raises(ValueError, match="2-D"):
        plot_attention(torch.zeros(2, 3, 3))


def test_loss_curves_plot_estimates():
    h = History(step=[1, 2, 3], loss=[3.0, 2.5, 2.0], eval_step=[0, 3], train=[3.1, 2.0], val=[3.2, 2.2])
    ax = plot_loss_curves(h)
    assert len(ax.lines) == 3 and list(ax.lines[2].get_ydata()) == [3.2, 2.2]
    plt.close("all")
