"""Mask explorer: the ``tril`` mask, ``masked_fill(-inf)``, the softmax, and what leaks without it."""
from __future__ import annotations

import html
import math

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from ..validation import check_positive_int
from ..attention import apply_mask, attention_scores, attention_weights, causal_mask, padding_mask
from ..viz import plot_attention, shade_masked
from ._common import Explorer, Painter, check_choice, one_thread, set_color_scale

__all__ = ["MASKS", "MAX_T", "mask_matrix", "mask_view_data", "MaskPainter", "draw_mask_view", "MaskExplorer"]

MASKS = ("causal", "none", "padding", "causal+padding")
MAX_T = 32  # beyond this the cells are too small to read
SLIDER_MAX_T = 16
MASK_FIGSIZE = (10.0, 8.6)
_D_DEMO = 8  # size of the random demo queries and keys


def default_n_real(T: int) -> int:
    """Real tokens when the caller does not say: the last quarter of the positions is padding."""
    return T - T // 4


def mask_matrix(T: int, mask: str, n_real: int) -> torch.Tensor:
    """The (T, T) mask, 1 = the query (row) may look at the key (column), 0 = hidden.

    ``padding`` hides the keys after the first ``n_real`` positions (right padding, as
    :func:`gpt_lesson.attention.padding_mask`); ``causal+padding`` combines both.
    """
    ones = torch.ones(T, T)
    pad = padding_mask([n_real], T)[0].expand(T, T)  # (1, T) key mask, the same for every query row
    return {"causal": causal_mask(T), "none": ones, "padding": pad, "causal+padding": causal_mask(T) * pad}[mask]


def _check_n_real(n_real: object, T: int) -> int:
    if isinstance(n_real, bool) or not isinstance(n_real, int):
        raise TypeError(f"n_real={n_real!r} must be an integer (the number of real, unpadded tokens)")
    if not 0 <= n_real <= T:
        raise ValueError(f"n_real={n_real} must be between 0 and T={T}")
    return n_real


def mask_view_data(T: int = 8, mask: str = "causal", n_real: int | None = None, seed: int = 0) -> dict:
    """Scores of ``T`` random queries and keys, the mask, the masked scores and the weights.

    ``leak`` is the weight that goes to future keys (column > row), averaged over the
    query rows that are not NaN: exactly 0 with a causal mask. ``nan_rows`` lists the
    rows whose every key is hidden (their softmax is 0/0 = NaN); ``explanation`` says why.
    """
    check_positive_int("T", T)
    if T > MAX_T:
        raise ValueError(f"T={T} is too long to draw readably; use T <= {MAX_T}")
    check_choice("mask", mask, MASKS)
    n_real = default_n_real(T) if n_real is None else _check_n_real(n_real, T)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed={seed!r} must be an integer")
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(T, _D_DEMO, generator=g)
    k = torch.randn(T, _D_DEMO, generator=g)
    scores = attention_scores(q, k)  # (T, T), scaled by 1/sqrt(d_k)
    m = mask_matrix(T, mask, n_real)
    masked = apply_mask(scores, m)
    weights = attention_weights(masked)
    nan_rows = [i for i in range(T) if bool(torch.isnan(weights[i]).any())]
    ok = ~torch.isnan(weights).any(-1)  # (T,) rows with a real distribution
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    leak = float((weights * future)[ok].sum() / ok.sum()) if bool(ok.any()) else float("nan")
    if nan_rows:
        rows = ", ".join(map(str, nan_rows))
        explanation = (f"Row(s) {rows}: every key is masked, so softmax(−∞, …, −∞) = 0/0 = NaN. "
                       "The causal mask alone never does this: it keeps the diagonal, so each query sees at least itself.")
    elif mask in ("causal", "causal+padding"):
        explanation = "No row is fully masked: the causal mask keeps the diagonal (each query sees itself), so no NaN."
    else:
        explanation = "No row is fully masked, so no NaN."
    return {"T": T, "mask_name": mask, "n_real": n_real, "mask": m, "scores": scores, "masked": masked,
            "weights": weights, "leak": leak, "nan_rows": nan_rows, "explanation": explanation}


def _leak_text(view: dict) -> str:
    if view["leak"] != view["leak"]:  # NaN: no row has a distribution to measure
        return "leak to the future: undefined (every row is NaN)"
    verdict = "nothing leaks" if view["leak"] == 0 else "the model can read the future"
    return f"leak to the future: {view['leak']:.3f} of each row's weight on average ({verdict})"


def _remove(artists: list) -> None:
    for a in artists:
        a.remove()


class MaskPainter(Painter):
    """Draws the mask view: the mask, the scores before and after masked_fill, the weights."""

    figsize = MASK_FIGSIZE

    def layout_key(self, view: dict) -> object:
        return view["T"]

    def build(self, fig: Figure, view: dict) -> None:
        T = view["T"]
        labels = [str(i) for i in range(T)]
        self.axes = list(fig.subplots(2, 2, gridspec_kw={"left": 0.07, "right": 0.95, "top": 0.9, "bottom": 0.13,
                                                         "wspace": 0.3, "hspace": 0.35}).flat)
        titles = ["mask: 1 = may look, 0 = hidden", "scores before masked_fill",
                  "after masked_fill(mask == 0, −∞)", "weights after softmax"]
        self.images, self.cbars, self.cells = [], [], []
        for n, (ax, title) in enumerate(zip(self.axes, titles)):
            plot_attention(torch.zeros(T, T), labels, ax=ax, signed=False, colorbar=n > 0, annotate=False,
                           title=title)
            ax.set_xlabel("key", fontsize=9)
            ax.set_ylabel("query", fontsize=9)
            self.images.append(ax.images[0])
            self.cbars.append(ax.images[0].colorbar)
            self.cells.append([[ax.text(j, i, "", ha="center", va="center", fontsize=8) for j in range(T)]
                               for i in range(T)] if T <= 8 else [])
        self.title = fig.suptitle(" ", fontsize=12)
        self.footer = fig.text(0.01, 0.015, "", fontsize=9, va="bottom")
        self.extra: list = []  # shading, NaN patches and legends, made anew by each update

    def update(self, view: dict) -> None:
        T, m, w = view["T"], view["mask"], view["weights"]
        lim = float(view["scores"].abs().max()) or 1.0
        values = [m, view["scores"], view["masked"], w]
        for n, (im, data) in enumerate(zip(self.images, values)):
            signed = n in (1, 2)
            im.set_data(np.where(torch.isfinite(data).numpy(), data.numpy(), np.nan))
            if set_color_scale(im, "RdBu_r" if signed else "viridis", -lim if signed else 0.0,
                               lim if signed else 1.0) and n:
                self.cbars[n].update_normal(im)
                self.cbars[n].set_label("score" if signed else "weight")
        numbers = [data.tolist() for data in values]  # Python floats: indexing a tensor per cell is slow
        shown = m.tolist()
        for n, cells in enumerate(self.cells):
            for i, row in enumerate(cells):
                for j, txt in enumerate(row):
                    v = numbers[n][i][j]
                    hidden = shown[i][j] == 0
                    if n == 0:
                        txt.set_text(str(int(v)))
                    elif n == 2:  # the visible scores are those of the panel before; show what changed
                        txt.set_text("−∞" if hidden else "")
                    else:
                        txt.set_text("" if (n == 3 and hidden) or not math.isfinite(v) else f"{v:.2f}")
                    dark = v < 0.5 if n in (0, 3) else abs(v) > 0.6 * lim  # white text on dark cells
                    txt.set_color("white" if dark else "black")
        _remove(self.extra)
        ax2, ax3 = self.axes[2], self.axes[3]
        n2, n3 = len(ax2.collections), len(ax3.collections)
        shade_masked(ax2, m, label="−∞")
        shade_masked(ax3, m, label="weight 0 (hidden)")
        handles = list(ax3.get_legend().legend_handles) if ax3.get_legend() is not None else []
        nan_patches = [ax3.add_patch(Rectangle((-0.5, i - 0.5), T, 1, facecolor="#f4a6a6", edgecolor="tab:red",
                                               hatch="xx")) for i in view["nan_rows"]]
        if nan_patches:
            handles.append(Patch(facecolor="#f4a6a6", edgecolor="tab:red", hatch="xx", label="NaN (0/0)"))
        if handles:
            ax3.legend(handles=handles, loc="upper right", fontsize=8, framealpha=0.9)
        self.extra = [*ax2.collections[n2:], *ax3.collections[n3:], *nan_patches]
        legends = [ax.get_legend() for ax in (ax2, ax3) if ax.get_legend() is not None]
        pad = f", {view['n_real']} real tokens then padding" if "padding" in view["mask_name"] else ""
        self.title.set_text(f"Mask: {view['mask_name']} (T={T}{pad})")
        self.footer.set_text(_leak_text(view) + "\n" + view["explanation"])
        # The scores before masking, and so the colour ranges, depend on T only (a new layout):
        # panel 1 and the colour bars stay in the saved background.
        changing = [0, 2, 3]
        self.dynamic = [*(self.images[n] for n in changing), *ax2.collections[n2:], *ax3.collections[n3:],
                        *nan_patches, *(t for n in changing for row in self.cells[n] for t in row),
                        *(s for n in changing for s in self.axes[n].spines.values()), *legends,
                        self.title, self.footer]  # the colour bars' ranges depend on T only


def draw_mask_view(T: int = 8, mask: str = "causal", *, n_real: int | None = None, seed: int = 0,
                   fig: Figure | None = None) -> Figure:
    """The mask explorer's picture: the mask, scores before and after ``masked_fill``, the weights.

    ``mask`` is one of ``"causal"``, ``"none"``, ``"padding"``, ``"causal+padding"``;
    ``n_real`` real tokens come before the padding (default: the last quarter is padding).
    """
    return MaskPainter().draw(mask_view_data(T, mask, n_real, seed), fig)


class MaskExplorer(Explorer):
    """Live view of the mask: sequence length, mask choice and the number of real (unpadded) tokens."""

    css_class = "gpt-lesson-mask-explorer"

    def __init__(self, T: int = 8, mask: str = "causal", *, n_real: int | None = None, seed: int = 0) -> None:
        check_positive_int("T", T)
        if T > SLIDER_MAX_T:
            raise ValueError(f"T={T} is beyond the slider's range 1..{SLIDER_MAX_T}; draw_mask_view() goes to {MAX_T}")
        self.view = mask_view_data(T, mask, n_real, seed)  # validates every argument before any widget exists
        self.painter = MaskPainter()
        super().__init__()
        self.seed = seed
        self.T = widgets.IntSlider(value=T, min=1, max=SLIDER_MAX_T, description="T")
        self.mask = widgets.ToggleButtons(options=list(MASKS), value=mask, description="mask")
        self.n_real = widgets.IntSlider(value=self.view["n_real"], min=0, max=T, description="real tokens")
        self.readout = widgets.HTML(value="")
        for w in (self.T, self.mask, self.n_real):
            w.observe(self._on_change, names="value")
        self._finish([widgets.HBox([self.T, self.n_real]), self.mask, self.readout])
        self._update()

    def _on_change(self, change: dict) -> None:
        if self._holding:
            return
        if change["owner"] is self.T:
            self._holding = True
            try:  # keep the padding share when T changes
                self.n_real.max = max(self.n_real.max, change["new"])
                self.n_real.value = min(self.n_real.value, change["new"])
                self.n_real.max = change["new"]
            finally:
                self._holding = False
        self._update()

    def _update(self) -> None:
        self.n_real.disabled = "padding" not in self.mask.value
        with one_thread():  # tiny tensors: a second thread costs more than it saves
            self.view = mask_view_data(self.T.value, self.mask.value, self.n_real.value, self.seed)
        self.readout.value = html.escape(_leak_text(self.view)) + "<br>" + html.escape(self.view["explanation"])
        self.redraw()
