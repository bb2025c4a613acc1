"""Attention explorer: one head of a ``gpt_lesson`` model, stage by stage, on text the learner types.

The stages are those of :mod:`gpt_lesson.attention`, computed from the q and k that
:meth:`gpt_lesson.model.GPT.attention_records` captured: raw scores ``QK^T``, scaled by
``1/sqrt(d_k)``, masked (the future set to -inf) and the softmax weights.
"""
from __future__ import annotations

import html
import math
from collections import OrderedDict

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FixedFormatter

from ..attention import apply_mask, attention_scores, attention_weights, causal_mask, weighted_sum
from ..model import GPT
from ..viz import plot_attention, token_labels
from ._common import (Explorer, Painter, check_choice, check_index, dynamic_title, one_thread, row_entropy,
                      set_color_scale)

__all__ = ["STAGES", "AttentionData", "encode_text", "attention_view_data", "AttentionPainter",
           "draw_attention_view", "AttentionExplorer"]

STAGES = ("raw", "scaled", "masked", "weights")
STAGE_BUTTONS = {"raw": "QKᵀ raw", "scaled": "÷ √d_k", "masked": "masked", "weights": "softmax"}
STAGE_TITLES = {
    "raw": "raw scores QKᵀ",
    "scaled": "scaled scores QKᵀ/√d_k",
    "masked": "masked scores (future = −∞)",
    "weights": "softmax weights",
}
DEFAULT_TEXT = "First Citizen:\nBefore we proceed any further, hear me speak."
ATTENTION_FIGSIZE = (11.0, 6.2)


def check_model_and_tokenizer(model: object, tokenizer: object) -> None:
    """Raise unless ``model`` is a :class:`GPT` and ``tokenizer`` can encode/decode for its vocabulary."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a gpt_lesson GPT, got {type(model).__name__}")
    if not (callable(getattr(tokenizer, "encode", None)) and callable(getattr(tokenizer, "decode", None))):
        raise TypeError(f"tokenizer must have encode() and decode() (a CharTokenizer), got {type(tokenizer).__name__}")
    vocab = getattr(tokenizer, "vocab_size", None)
    if isinstance(vocab, int) and vocab > model.config.vocab_size:
        raise ValueError(
            f"the tokenizer has vocab_size={vocab} but the model only vocab_size={model.config.vocab_size}; "
            "use the tokenizer the model was built for"
        )


def encode_text(tokenizer, text: str, block_size: int) -> tuple[list[int], list[str], str]:
    """Token ids, one label per token, and a notice when the text was cut to ``block_size`` tokens.

    Raises a ValueError for empty text and for characters the tokenizer does not know.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text:
        raise ValueError("the text is empty: type at least one character")
    ids = tokenizer.encode(text)  # a CharTokenizer names the unknown characters in its ValueError
    notice = ""
    if len(ids) > block_size:
        notice = (f"The text has {len(ids)} tokens; showing the first {block_size} "
                  f"(the model's block_size={block_size}).")
        ids = ids[:block_size]
    return ids, [tokenizer.decode([i]) for i in ids], notice


class AttentionData:
    """One run of ``model`` over ``text``: the per-layer records and, per layer, the four stages.

    ``stages(layer)`` returns tensors of shape (n_head, T, T), computed once per layer
    with :mod:`gpt_lesson.attention` from the captured q and k, with the model's own
    scale and mask.
    """

    def __init__(self, model: GPT, tokenizer, text: str) -> None:
        check_model_and_tokenizer(model, tokenizer)
        cfg = model.config
        self.text = text
        self.ids, self.tokens, self.notice = encode_text(tokenizer, text, cfg.block_size)
        self.T = len(self.ids)
        self.n_layer, self.n_head, self.head_size = cfg.n_layer, cfg.n_head, cfg.head_size
        device = next(model.parameters()).device
        idx = torch.tensor([self.ids], dtype=torch.long, device=device)
        with one_thread():
            records = model.attention_records(idx)
        self.records = [{name: t.cpu() for name, t in rec.items()} for rec in records]
        self.scale_arg = cfg.attn_scale  # None: attention_scores uses 1/sqrt(d_k), as the model does
        self.scale = cfg.head_size ** -0.5 if cfg.attn_scale is None else cfg.attn_scale
        self.mask = causal_mask(self.T) if getattr(cfg, "causal", True) else None
        self._stages: dict[int, dict[str, torch.Tensor]] = {}

    def stages(self, layer: int) -> dict[str, torch.Tensor]:
        """Raw, scaled and masked scores and the weights of every head of ``layer``, each (n_head, T, T)."""
        check_index("layer", layer, self.n_layer, "the model's layer list")
        if layer not in self._stages:
            with one_thread():
                self._stages[layer] = self._compute_stages(layer)
        return self._stages[layer]

    def _compute_stages(self, layer: int) -> dict[str, torch.Tensor]:
        rec = self.records[layer]
        raw = attention_scores(rec["q"], rec["k"], scale=1.0)  # (1, nh, T, T)
        scaled = attention_scores(rec["q"], rec["k"], scale=self.scale_arg)
        masked = apply_mask(scaled, self.mask) if self.mask is not None else scaled
        weights = attention_weights(masked)
        return {"raw": raw[0], "scaled": scaled[0], "masked": masked[0], "weights": weights[0]}


def _check_head(head: object, n_head: int) -> int | str:
    if head == "all" and isinstance(head, str):
        return head
    if isinstance(head, str):
        raise ValueError(f"head={head!r} must be a head number or 'all'")
    return check_index("head", head, n_head, "the layer's head list")


def attention_view_data(
    data: AttentionData,
    layer: int = 0,
    head: int | str = 0,
    stage: str = "weights",
    query: int | None = None,
    key: int | None = None,
) -> dict:
    """Everything the attention view shows for these settings (the explorer's ``view``).

    ``matrix`` is the chosen stage, (T, T) for one head or (n_head, T, T) for ``head="all"``;
    ``weights`` the softmax weights of the same head(s); ``readouts`` the row sums,
    row entropies (nats) and largest weight; with a ``query`` (one head only), ``cell``
    holds the step-through of the (query, key) cell (``key=None``: the key with the
    largest weight).
    """
    stages = data.stages(layer)
    head = _check_head(head, data.n_head)
    check_choice("stage", stage, STAGES)
    if query is not None:
        if head == "all":
            raise ValueError("query needs one head: choose a head number instead of head='all'")
        check_index("query", query, data.T, "the text's token list")
    if key is not None:
        if query is None:
            raise ValueError("key needs a query: give query= as well")
        check_index("key", key, data.T, "the text's token list")
    pick = slice(None) if head == "all" else head
    weights = stages["weights"][pick]
    view = {
        "tokens": data.tokens, "T": data.T, "layer": layer, "head": head, "stage": stage,
        "notice": data.notice, "scale": data.scale, "head_size": data.head_size, "mask": data.mask,
        "matrix": stages[stage][pick], "weights": weights,
        "readouts": {"row_sums": weights.sum(-1), "entropy": row_entropy(weights),
                     "max_weight": float(weights.max())},
        "cell": None,
    }
    if query is not None:
        rec = data.records[layer]
        if key is None:
            key = int(weights[query].argmax())
        q, k, v = rec["q"][0, head, query], rec["k"][0, head, key], rec["v"][0, head]  # (hs,), (hs,), (T, hs)
        w = stages["weights"][head, query, key]
        view["cell"] = {
            "query": query, "key": key, "products": q * k, "dot": float((q * k).sum()),
            "raw": float(stages["raw"][head, query, key]), "scaled": float(stages["scaled"][head, query, key]),
            "visible": data.mask is None or bool(data.mask[query, key] != 0),
            "weight": float(w), "row": weights[query],
            "contribution": w * v[key], "output": weighted_sum(weights[query:query + 1], v)[0],
        }
    return view


def _readout_text(view: dict) -> str:
    r = view["readouts"]
    err = float((r["row_sums"] - 1).abs().max())
    text = (f"every row sums to 1 (largest |sum − 1| = {err:.1e}) · mean row entropy "
            f"{float(r['entropy'].mean()):.2f} nats · largest weight {r['max_weight']:.3f}")
    cell = view["cell"]
    if cell is not None:
        i, row = cell["query"], cell["row"]
        j = int(row.argmax())
        labels = token_labels(view["tokens"])
        text += (f"\nquery {i} '{labels[i]}': row sum {float(row.sum()):.4f}, entropy "
                 f"{float(view['readouts']['entropy'][i]):.2f} nats, largest weight {float(row[j]):.3f} on key {j} '{labels[j]}'")
    return text


def _stage_title(view: dict) -> str:
    if view["stage"] == "scaled":
        return f"scaled scores QKᵀ × {view['scale']:.3g}"
    return STAGE_TITLES[view["stage"]]


def _shown(matrix: torch.Tensor) -> np.ndarray:
    """-inf (masked) cells become NaN, which imshow leaves blank under the shading."""
    data = matrix.numpy()
    return np.where(np.isfinite(data), data, np.nan)


def _signed_limit(matrix: torch.Tensor) -> float:
    finite = matrix[torch.isfinite(matrix)]
    return float(finite.abs().max()) if finite.numel() and float(finite.abs().max()) > 0 else 1.0


class AttentionPainter(Painter):
    """Draws the attention view: one head (heatmap, and the query's row and step-through) or all heads."""

    figsize = ATTENTION_FIGSIZE

    def layout_key(self, view: dict) -> object:
        if view.get("error"):
            return "error"
        # Not the tokens themselves: new text of the same length only relabels the axes.
        return (view["head"] == "all", view["mask"] is not None, view["cell"] is not None,
                tuple(view["matrix"].shape), view["head_size"])

    # -- layout ---------------------------------------------------------------------------------
    def build(self, fig: Figure, view: dict) -> None:
        if view.get("error"):
            self.error = fig.text(0.5, 0.5, "", ha="center", va="center", fontsize=11, color="tab:red", wrap=True)
            self.dynamic = [self.error]
            return
        self.title = fig.suptitle(" ", fontsize=12)
        self.footer = fig.text(0.01, 0.015, "", fontsize=8.5, va="bottom")
        self.notice = fig.text(0.99, 0.955, "", fontsize=9, ha="right", color="tab:red")
        self.tokens = tuple(view["tokens"])
        self.labelled: list = []  # the axes whose ticks carry the tokens
        if view["head"] == "all":
            self._build_grid(fig, view)
        else:
            self._build_one(fig, view)
        self.dynamic += [self.cbar.ax, self.title, self.footer, self.notice]
        self.labels = self._tick_labels()

    def _tick_labels(self) -> list:
        self._label_edges = []  # per label: the edge of its group's box that the axis label sits beyond
        labels = []
        for n, ax in enumerate(self.labelled):
            for texts, edge in ((ax.get_xticklabels(), "y0"), (ax.get_yticklabels(), "x0")):
                labels += texts
                self._label_edges += [(n, edge)] * len(texts)
        return labels

    def label_room(self, drawn: list) -> object:
        """Per axes, the lowest edge of its x tick labels and the leftmost edge of its y tick labels.

        matplotlib puts the axis labels ("key" below, "query" on the left) just outside
        these edges, so while they stay, new tick texts leave the rest of the picture as it is.
        """
        room: dict = {}
        for (text, box), (n, edge) in zip(drawn, self._label_edges):
            if text:
                room[n, edge] = min(room.get((n, edge), math.inf), getattr(box, edge))
        return room

    def _heatmap(self, ax, view: dict, tokens, **kwargs) -> tuple:
        """A placeholder heatmap laid out by viz.plot_attention; returns (image, shading or None)."""
        T = view["T"]
        n = len(ax.collections)
        plot_attention(torch.zeros(T, T), tokens, ax=ax, mask=view["mask"], signed=False, annotate=False, **kwargs)
        shade = ax.collections[n] if len(ax.collections) > n else None
        return ax.images[0], shade

    def _build_one(self, fig: Figure, view: dict) -> None:
        T, tokens = view["T"], view["tokens"]
        gs = fig.add_gridspec(3, 2, width_ratios=[1.3, 1], hspace=0.9, wspace=0.3,
                              left=0.09, right=0.97, top=0.88, bottom=0.17)
        self.ax = ax = fig.add_subplot(gs[:, 0])
        self.im, self.shade = self._heatmap(ax, view, tokens)
        self.labelled = [ax]
        self.heat_title = dynamic_title(ax, 10)
        self.legend = ax.get_legend()
        self.cbar = self.im.colorbar
        self.cells = [[ax.text(j, i, "", ha="center", va="center", fontsize=7) for j in range(T)]
                      for i in range(T)] if T <= 8 else None
        self.dynamic = [self.im, self.shade, *(t for row in self.cells or [] for t in row)]
        if view["cell"] is None:
            hint = fig.add_subplot(gs[:, 1])
            hint.axis("off")
            hint.text(0.0, 0.5, "Choose a query token to see its row as a bar chart\nand a step-through of one "
                      "(query, key) cell:\nq·k, the scaling, the mask, the softmax\nand the weighted sum of V.",
                      fontsize=10, va="center", color="0.3")
            self.dynamic += [*ax.spines.values(), self.legend, self.heat_title]
            return
        self.row_rect = ax.add_patch(Rectangle((-0.5, 0), T, 1, fill=False, edgecolor="tab:orange", linewidth=2))
        self.cell_rect = ax.add_patch(Rectangle((0, 0), 1, 1, fill=False, edgecolor="tab:red", linewidth=2))
        hs = view["head_size"]

        self.ax_row = fig.add_subplot(gs[0, 1])
        self.row_bars = self.ax_row.bar(range(T), np.zeros(T), color="tab:blue")
        self.future = self.ax_row.add_patch(Rectangle((0, 0), 0, 1, transform=self.ax_row.get_xaxis_transform(),
                                                      facecolor="0.85", edgecolor="0.55", hatch="///", linewidth=0))
        if view["mask"] is not None:
            self.ax_row.legend(handles=[Patch(facecolor="0.85", edgecolor="0.55", hatch="///",
                                              label="future: masked")], fontsize=7, loc="upper right")
        self.ax_row.set_ylim(0, 1)
        self.ax_row.set_xlim(-0.5, T - 0.5)
        self.ax_row.set_xlabel("key position", fontsize=8)
        self.ax_row.set_ylabel("weight", fontsize=8)

        # The bar panels change their y range with every cell; without y tick labels their
        # frame stays the same, so only the bars, the zero line and the title are redrawn.
        self.ax_qk = fig.add_subplot(gs[1, 1])
        self.qk_bars = self.ax_qk.bar(range(hs), np.zeros(hs))
        self.qk_zero = self.ax_qk.axhline(0, color="0.4", linewidth=0.8)
        self.ax_qk.set_xlim(-0.6, hs - 0.4)
        self.ax_qk.set_xlabel("channel d of the head", fontsize=8)
        self.ax_qk.set_ylabel("q[d]·k[d]", fontsize=8)
        self.ax_qk.tick_params(left=False, labelleft=False)

        self.ax_v = fig.add_subplot(gs[2, 1])
        self.out_bars = self.ax_v.bar(range(hs), np.zeros(hs), color="0.6", label="output of the query = Σ_j w_j·v_j")
        self.share_bars = self.ax_v.bar(range(hs), np.zeros(hs), width=0.45, color="tab:red",
                                        label="the chosen key's share w·v")
        self.v_zero = self.ax_v.axhline(0, color="0.4", linewidth=0.8)
        self.ax_v.set_xlim(-0.6, hs - 0.4)
        self.ax_v.set_title("weighted sum of V", fontsize=9)
        self.ax_v.set_xlabel("channel d of the head", fontsize=8)
        self.ax_v.tick_params(left=False, labelleft=False)
        leg_v = self.ax_v.legend(fontsize=7, loc="lower right")
        self.row_title, self.qk_title = dynamic_title(self.ax_row, 9), dynamic_title(self.ax_qk, 9)
        self.dynamic += [self.row_rect, self.cell_rect, *ax.spines.values(), self.legend, self.heat_title,
                         *self.row_bars, self.future, *self.ax_row.spines.values(), self.ax_row.get_legend(),
                         self.row_title, *self.qk_bars, self.qk_zero, *self.ax_qk.spines.values(), self.qk_title,
                         *self.out_bars, *self.share_bars, self.v_zero, *self.ax_v.spines.values(), leg_v]

    def _build_grid(self, fig: Figure, view: dict) -> None:
        n_head, T = view["matrix"].size(0), view["T"]
        ncols = min(n_head, 4)
        nrows = math.ceil(n_head / ncols)
        axes = fig.subplots(nrows, ncols, squeeze=False,
                            gridspec_kw={"left": 0.06, "right": 0.9, "top": 0.86, "bottom": 0.17, "wspace": 0.35})
        tokens = view["tokens"] if T <= 16 else None
        self.images, self.shades = [], []
        for h, ax in enumerate(axes.flat):
            if h >= n_head:
                ax.axis("off")
                continue
            im, shade = self._heatmap(ax, view, tokens, title=f"head {h}", colorbar=False)
            self.images.append(im)
            self.shades.append(shade)
            if tokens is not None:
                self.labelled.append(ax)
            self.dynamic += [im, shade, *ax.spines.values()]
            if h % ncols:
                ax.set_ylabel("")
            if h and ax.get_legend() is not None:
                ax.get_legend().remove()
        self.legend = axes.flat[0].get_legend()
        self.dynamic.append(self.legend)
        self.cbar = fig.colorbar(self.images[0], ax=list(axes.flat), fraction=0.02, pad=0.02)

    # -- data -----------------------------------------------------------------------------------
    def update(self, view: dict) -> None:
        if view.get("error"):
            self.error.set_text(view["error"])
            return
        if tuple(view["tokens"]) != self.tokens:
            self._relabel(view["tokens"])
        head = view["head"]
        who = "all heads" if head == "all" else f"head {head}"
        self.title.set_text(f"Layer {view['layer']}, {who}: {STAGE_TITLES[view['stage']]} · {view['T']} tokens")
        self.footer.set_text(_readout_text(view))
        self.notice.set_text(view["notice"])
        stage = view["stage"]
        signed = stage != "weights"
        shaded = stage in ("masked", "weights")
        matrix = view["matrix"]
        lim = _signed_limit(matrix) if signed else 1.0
        images = self.images if head == "all" else [self.im]
        rescaled = False
        for h, im in enumerate(images):
            im.set_data(_shown(matrix[h] if head == "all" else matrix))
            rescaled |= set_color_scale(im, "RdBu_r" if signed else "viridis", -lim if signed else 0.0, lim)
        for shade in (self.shades if head == "all" else [self.shade]):
            if shade is not None:
                shade.set_visible(shaded)
        if self.legend is not None:
            self.legend.set_visible(shaded)
        if rescaled or self.cbar.ax.get_ylabel() == "":
            self.cbar.update_normal(images[0])
            self.cbar.set_label("score" if signed else "weight")
        if head != "all":
            self._update_one(view, signed, shaded)

    def _relabel(self, tokens: list[str]) -> None:
        """New text of the same length: new tick labels (as plot_attention sets them) on the same ticks."""
        T, labels = len(tokens), token_labels(tokens)
        for ax in self.labelled:
            for axis in (ax.xaxis, ax.yaxis):
                # What set_xticks(range(T), labels) leaves behind, without remaking the ticks:
                # the formatter for later full draws, and the texts of the tick labels drawn now.
                axis.set_major_formatter(FixedFormatter(labels))
                for tick, label in zip(axis.get_major_ticks(T), labels):
                    tick.label1.set_text(label)
        self.tokens = tuple(tokens)
        # render_png() redraws the labels whose text changed over the saved background, or
        # everything when the new labels move the axis labels (see label_room).

    def _update_one(self, view: dict, signed: bool, shaded: bool) -> None:
        self.heat_title.set_text(_stage_title(view))
        data, mask = view["matrix"], view["mask"]
        if self.cells is not None:
            for i, row in enumerate(self.cells):
                for j, txt in enumerate(row):
                    v = float(data[i, j])
                    hidden = shaded and mask is not None and mask[i, j] == 0
                    txt.set_text("" if hidden or not math.isfinite(v) else f"{v:.2f}")
                    txt.set_color("white" if (not signed and v < 0.5) else "black")
        cell = view["cell"]
        if cell is None:
            return
        T, i, j = view["T"], cell["query"], cell["key"]
        labels = token_labels(view["tokens"])
        self.row_rect.set_y(i - 0.5)
        self.cell_rect.set_xy((j - 0.5, i - 0.5))
        for c, (bar, w) in enumerate(zip(self.row_bars, cell["row"].tolist())):
            bar.set_height(w)
            bar.set_color("tab:red" if c == j else "tab:blue")
        if mask is not None:
            self.future.set_x(i + 0.5)
            self.future.set_width(T - 1 - i)
        self.row_title.set_text(f"query {i} '{labels[i]}': its weights over the keys")
        prods = cell["products"].tolist()
        for bar, p in zip(self.qk_bars, prods):
            bar.set_height(p)
            bar.set_color("tab:green" if p >= 0 else "tab:purple")
        _fit_ylim(self.ax_qk, prods)
        step = "visible" if cell["visible"] else "masked → −∞"
        self.qk_title.set_text(f"q[{i}]·k[{j}] = Σ of {len(prods)} products = {cell['dot']:.3f}\n"
                               f"× {view['scale']:.3g} = {cell['scaled']:.3f} → {step} → softmax weight "
                               f"{cell['weight']:.3f}")
        out, share = cell["output"].tolist(), cell["contribution"].tolist()
        for bar, o in zip(self.out_bars, out):
            bar.set_height(o)
        for bar, c in zip(self.share_bars, share):
            bar.set_height(c)
        _fit_ylim(self.ax_v, out + share)


def _fit_ylim(ax, values: list[float]) -> None:
    lo, hi = min(values + [0.0]), max(values + [0.0])
    pad = 0.08 * (hi - lo) or 1.0
    ax.set_ylim(lo - pad, hi + pad)


def draw_attention_view(
    model: GPT,
    tokenizer,
    text: str,
    layer: int = 0,
    head: int | str = 0,
    stage: str = "weights",
    query: int | None = None,
    *,
    key: int | None = None,
    fig: Figure | None = None,
) -> Figure:
    """The attention explorer's picture for these settings, as a matplotlib Figure.

    ``head`` is a number or ``"all"`` (a grid of every head); ``stage`` one of
    ``"raw"``, ``"scaled"``, ``"masked"``, ``"weights"``; ``query`` a token position
    whose row and (query, key) step-through are shown.
    """
    view = attention_view_data(AttentionData(model, tokenizer, text), layer, head, stage, query, key)
    return AttentionPainter().draw(view, fig)


class AttentionExplorer(Explorer):
    """Live view of one head's attention on text typed into the box.

    Controls: text, layer, head (or all heads), stage, query token and key token.
    The model runs once per text (results cached); other controls only recompute
    the view and redraw.
    """

    css_class = "gpt-lesson-attention-explorer"
    cache_size = 16

    def __init__(
        self,
        model: GPT,
        tokenizer,
        text: str = DEFAULT_TEXT,
        *,
        layer: int = 0,
        head: int | str = 0,
        stage: str = "weights",
        query: int | None = None,
        key: int | None = None,
    ) -> None:
        check_model_and_tokenizer(model, tokenizer)
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        cfg = model.config
        check_index("layer", layer, cfg.n_layer, "the model's layer list")
        _check_head(head, cfg.n_head)
        check_choice("stage", stage, STAGES)
        self.painter = AttentionPainter()
        super().__init__()
        self.model, self.tokenizer = model, tokenizer
        self._cache: OrderedDict[str, AttentionData] = OrderedDict()
        self.data: AttentionData | None = None
        self.error = ""
        self.model_runs = 0
        self.text = widgets.Text(value=text, description="text", layout=widgets.Layout(width="90%"))
        self.layer = widgets.Dropdown(options=[(f"layer {i}", i) for i in range(cfg.n_layer)], value=layer,
                                      description="layer")
        self.head = widgets.Dropdown(options=[("all heads", "all")] + [(f"head {h}", h) for h in range(cfg.n_head)],
                                     value=head, description="head")
        self.stage = widgets.ToggleButtons(options=[(STAGE_BUTTONS[s], s) for s in STAGES], value=stage,
                                           description="stage")
        self.query = widgets.Dropdown(options=[("none", -1)], value=-1, description="query")
        self.key = widgets.Dropdown(options=[("largest weight", -1)], value=-1, description="key")
        self.readout = widgets.HTML(value="")
        for w in (self.text, self.layer, self.head, self.stage, self.query, self.key):
            w.observe(self._on_change, names="value")
        self._finish([self.text, widgets.HBox([self.layer, self.head]), self.stage,
                      widgets.HBox([self.query, self.key]), self.readout])
        self._load_text(text)
        if query is not None or key is not None:
            if self.data is None:
                raise ValueError(f"query/key need a valid text; the text gave: {self.error}")
            attention_view_data(self.data, layer, head, stage, query, key)  # raises for bad positions
            self._holding = True
            self.query.value = query
            self.key.value = -1 if key is None else key
            self._holding = False
            self._update()

    # -- what each control change recomputes ---------------------------------------------------
    def _data_for(self, text: str) -> AttentionData:
        if text in self._cache:
            self._cache.move_to_end(text)
        else:
            self._cache[text] = AttentionData(self.model, self.tokenizer, text)
            self.model_runs += 1
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return self._cache[text]

    def _on_change(self, change: dict) -> None:
        if self._holding:
            return
        if change["owner"] is self.text:
            self._load_text(change["new"])
        else:
            self._update()

    def _load_text(self, text: str) -> None:
        try:
            self.data, self.error = self._data_for(text), ""
        except ValueError as e:  # empty text or unknown characters: say so instead of a traceback
            self.data, self.error = None, str(e)
        labels = token_labels(self.data.tokens) if self.data is not None else []
        self._holding = True
        try:
            for w, none_label in ((self.query, "none"), (self.key, "largest weight")):
                old = w.value
                w.options = [(none_label, -1)] + [(f"{i} '{s}'", i) for i, s in enumerate(labels)]
                w.value = old if old < len(labels) else -1
        finally:
            self._holding = False
        self._update()

    def _update(self) -> None:
        if self.data is None:
            self.view = {"error": self.error}
            self.message.value = f"<b style='color:#b00'>{html.escape(self.error)}</b>"
            self.readout.value = ""
        else:
            query = None if self.head.value == "all" or self.query.value < 0 else self.query.value
            key = None if query is None or self.key.value < 0 else self.key.value
            with one_thread():
                self.view = attention_view_data(self.data, self.layer.value, self.head.value, self.stage.value,
                                                query, key)
            notice = self.data.notice
            self.message.value = f"<b style='color:#b50'>{html.escape(notice)}</b>" if notice else ""
            self.readout.value = "<br>".join(html.escape(s) for s in _readout_text(self.view).split("\n"))
        self.redraw()
