"""Mask explorer: the ``tril`` mask, ``masked_fill(-inf)``, the softmax, and what leaks without it.

Every number is computed here, with :mod:`gpt_lesson.attention`, by :func:`mask_view_data`: for the
explorer, once up front for every setting its controls reach (:func:`mask_payload`). Every mask of the
explorer lets each query row see a first run of the keys (the past, the real tokens, or both), so the
weights of any setting are the softmax of a row over its first ``m`` keys: the payload holds those
for every row and every ``m``, and, per setting, how many keys each row sees, the leak and the NaN
rows. The browser (``js/src/mask.mjs``) looks them up, formats the read-outs and draws.
"""
from __future__ import annotations

import math
from functools import cache

import numpy as np
import torch
import traitlets
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from ..attention import apply_mask, attention_scores, attention_weights, causal_mask, padding_mask
from ..validation import check_choice, check_positive_int
from ..viz import plot_attention, shade_masked
from ._common import CSS, ExplorerWidget, Painter, esm, one_thread
from .labels import label

__all__ = ["MASKS", "MAX_T", "mask_matrix", "demo_scores", "mask_view_data", "mask_payload", "MaskPainter",
           "draw_mask_view", "MaskExplorer"]

MASKS = ("causal", "none", "padding", "causal+padding")
MAX_T = 32  # beyond this the cells are too small to read
SLIDER_MAX_T = 16
MASK_FIGSIZE = (10.0, 8.6)
_D_DEMO = 8  # size of the random demo queries and keys
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


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


def demo_scores(T: int, seed: int = 0) -> torch.Tensor:
    """Scaled scores (T, T) of ``T`` random queries and keys of size 8, drawn with ``seed``.

    The draws are made for MAX_T positions and cut: the scores of a shorter sequence are the top-left
    corner of a longer one's, so changing T keeps the numbers of the positions that stay.
    """
    check_positive_int("T", T)
    if T > MAX_T:
        raise ValueError(f"T={T} is too long to draw readably; use T <= {MAX_T}")
    return _all_scores(seed)[:T, :T].clone()


@cache
def _all_scores(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(MAX_T, _D_DEMO, generator=g)
    k = torch.randn(MAX_T, _D_DEMO, generator=g)
    return attention_scores(q, k)  # (MAX_T, MAX_T), scaled by 1/sqrt(d_k)


def mask_view_data(T: int = 8, mask: str = "causal", n_real: int | None = None, seed: int = 0) -> dict:
    """Scores of ``T`` random queries and keys, the mask, the masked scores and the weights.

    ``leak`` is the weight that goes to future keys (column > row), averaged over the
    query rows that are not NaN: exactly 0 with a causal mask. ``nan_rows`` lists the
    rows whose every key is hidden (their softmax is 0/0 = NaN).
    """
    check_positive_int("T", T)
    if T > MAX_T:
        raise ValueError(f"T={T} is too long to draw readably; use T <= {MAX_T}")
    check_choice("mask", mask, MASKS)
    n_real = default_n_real(T) if n_real is None else _check_n_real(n_real, T)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed={seed!r} must be an integer")
    scores = demo_scores(T, seed)
    m = mask_matrix(T, mask, n_real)
    masked = apply_mask(scores, m)
    weights = attention_weights(masked)
    nan_rows = [i for i in range(T) if bool(torch.isnan(weights[i]).any())]
    ok = ~torch.isnan(weights).any(-1)  # (T,) rows with a real distribution
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    leak = float((weights * future)[ok].sum() / ok.sum()) if bool(ok.any()) else float("nan")
    view = {"T": T, "mask_name": mask, "n_real": n_real, "mask": m, "scores": scores, "masked": masked,
            "weights": weights, "leak": leak, "nan_rows": nan_rows}
    return view


@cache
def _payload(seed: int) -> dict:
    return mask_payload(seed, SLIDER_MAX_T)


def mask_payload(seed: int = 0, max_T: int = 16) -> dict:
    """Every number the browser needs for the slider's settings (T = 1..max_T, every mask and real-token count).

    ``prefix`` holds, for each query row i and each m = 1..max_T, the softmax of the row's first m scores
    (what :func:`mask_view_data` computes for a mask that shows that row m keys); ``states`` maps each
    setting to how many keys each row sees, the leak (None: undefined) and the NaN rows, all from
    :func:`mask_view_data`.
    """
    M = max_T
    with one_thread():
        prefix = torch.stack([mask_view_data(M, "padding", m, seed)["weights"] for m in range(1, M + 1)], 1)  # (i, m, j)
        states = {}
        for T in range(1, M + 1):
            for mask in MASKS:
                for n_real in (range(T + 1) if "padding" in mask else (default_n_real(T),)):
                    v = mask_view_data(T, mask, n_real, seed)
                    key = f"{T}|{mask}|{n_real}" if "padding" in mask else f"{T}|{mask}"
                    # the keys each row sees, one base-36 digit per row ("0".."g")
                    seen = "".join(_DIGITS[int(x)] for x in v["mask"].sum(-1).tolist())
                    states[key] = {"visible": seen,
                                   "leak": None if math.isnan(v["leak"]) else v["leak"], "nan_rows": v["nan_rows"]}
        limits = [float(demo_scores(T, seed).abs().max()) for T in range(1, M + 1)]
    return {"max_T": M, "seed": seed, "scores": demo_scores(M, seed).numpy().tobytes(),
            "prefix": prefix.to(torch.float32).contiguous().numpy().tobytes(), "states": states, "limits": limits}


class MaskPainter(Painter):
    """Draws the mask view: the mask, the scores before and after masked_fill, the weights."""

    figsize = MASK_FIGSIZE

    def build(self, fig: Figure, view: dict) -> None:
        T = view["T"]
        labels = [str(i) for i in range(T)]
        self.axes = list(fig.subplots(2, 2, gridspec_kw={"left": 0.07, "right": 0.95, "top": 0.9, "bottom": 0.16,
                                                         "wspace": 0.3, "hspace": 0.35}).flat)
        titles = [label("mask", k) for k in ("panel_mask", "panel_scores", "panel_masked", "panel_weights")]
        self.images, self.cbars, self.cells = [], [], []
        for n, (ax, title) in enumerate(zip(self.axes, titles)):
            plot_attention(torch.zeros(T, T), labels, ax=ax, signed=False, colorbar=n > 0, annotate=False,
                           title=title)
            ax.set_xlabel(label("mask", "axis_key"), fontsize=9)
            ax.set_ylabel(label("mask", "axis_query"), fontsize=9)
            self.images.append(ax.images[0])
            self.cbars.append(ax.images[0].colorbar)
            self.cells.append([[ax.text(j, i, "", ha="center", va="center", fontsize=8) for j in range(T)]
                               for i in range(T)] if T <= 8 else [])
        self.title = fig.suptitle(" ", fontsize=12)

    def update(self, view: dict) -> None:
        T, m, w = view["T"], view["mask"], view["weights"]
        lim = float(view["scores"].abs().max()) or 1.0
        values = [m, view["scores"], view["masked"], w]
        for n, (im, data) in enumerate(zip(self.images, values)):
            signed = n in (1, 2)
            im.set_data(np.where(torch.isfinite(data).numpy(), data.numpy(), np.nan))
            im.set_cmap("RdBu_r" if signed else "viridis")
            im.set_clim(-lim if signed else 0.0, lim if signed else 1.0)
            if n:
                self.cbars[n].update_normal(im)
                self.cbars[n].set_label(label("mask", "score" if signed else "weight"))
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
                    if hidden and n in (2, 3):
                        dark = False  # on the light grey hatching: dark text
                    else:
                        dark = v < 0.5 if n in (0, 3) else abs(v) > 0.6 * lim
                    txt.set_color("white" if dark else "black")
        ax2, ax3 = self.axes[2], self.axes[3]
        shade_masked(ax2, m, label="−∞")
        shade_masked(ax3, m, label=label("mask", "key_hidden"))
        handles = list(ax3.get_legend().legend_handles) if ax3.get_legend() is not None else []
        for i in view["nan_rows"]:
            ax3.add_patch(Rectangle((-0.5, i - 0.5), T, 1, facecolor="#f4a6a6", edgecolor="tab:red", hatch="xx"))
        if view["nan_rows"]:
            handles.append(Patch(facecolor="#f4a6a6", edgecolor="tab:red", hatch="xx", label=label("mask", "key_nan")))
        if handles:  # below the panel, never over its cells
            ax3.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=8, ncol=1,
                       frameon=False)
        if ax2.get_legend() is not None:
            ax2.get_legend().remove()
        pad = label("mask", "title_padding", n=view["n_real"]) if "padding" in view["mask_name"] else ""
        self.title.set_text(label("mask", "mask_title", mask=label("mask", "mask_" + view["mask_name"]), T=T, pad=pad))


def draw_mask_view(T: int = 8, mask: str = "causal", *, n_real: int | None = None, seed: int = 0,
                   fig: Figure | None = None) -> Figure:
    """The mask explorer's picture: the mask, scores before and after ``masked_fill``, the weights.

    ``mask`` is one of ``"causal"``, ``"none"``, ``"padding"``, ``"causal+padding"``;
    ``n_real`` real tokens come before the padding (default: the last quarter is padding).
    """
    return MaskPainter().draw(mask_view_data(T, mask, n_real, seed), fig)


class MaskExplorer(ExplorerWidget):
    """Live view of the mask: sequence length ``T``, ``mask`` and ``n_real`` (real tokens before the padding).

    The three are traits, settable from Python too; ``view`` holds what Python computed for them.
    """

    kind = "mask"
    painter = MaskPainter
    _controls = ("T", "mask", "n_real")
    _esm = esm("mask")
    _css = CSS

    T = traitlets.Int(8).tag(sync=True)
    mask = traitlets.Unicode("causal").tag(sync=True)
    n_real = traitlets.Int(6).tag(sync=True)

    def __init__(self, T: int = 8, mask: str = "causal", *, n_real: int | None = None, seed: int = 0) -> None:
        check_positive_int("T", T)
        if T > SLIDER_MAX_T:
            raise ValueError(f"T={T} is beyond the slider's range 1..{SLIDER_MAX_T}; draw_mask_view() goes to {MAX_T}")
        self.view = mask_view_data(T, mask, n_real, seed)  # validates every argument before any widget exists
        self.seed = seed
        self._ready = False
        super().__init__(T=T, mask=mask, n_real=self.view["n_real"], payload=_payload(seed))
        self._ready = True

    @traitlets.validate("T")
    def _valid_T(self, proposal):
        T = check_positive_int("T", proposal["value"])
        if T > SLIDER_MAX_T:
            raise ValueError(f"T={T} is beyond the slider's range 1..{SLIDER_MAX_T}")
        return T

    @traitlets.validate("mask")
    def _valid_mask(self, proposal):
        return check_choice("mask", proposal["value"], MASKS)

    @traitlets.validate("n_real")
    def _valid_n_real(self, proposal):
        return _check_n_real(proposal["value"], SLIDER_MAX_T)

    @traitlets.observe("T")
    def _on_T(self, change) -> None:
        if self._ready and self.n_real > change["new"]:  # keep the real tokens within the new length
            ready, self._ready = self._ready, False
            self.n_real = change["new"]
            self._ready = ready

    @traitlets.observe("T", "mask", "n_real")
    def _on_control(self, change) -> None:
        if self._ready:
            with one_thread():  # tiny tensors: a second thread costs more than it saves
                self.view = mask_view_data(self.T, self.mask, min(self.n_real, self.T), self.seed)
