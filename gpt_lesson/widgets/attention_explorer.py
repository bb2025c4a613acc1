"""Attention explorer: every head of a ``gpt_lesson`` model, stage by stage, on text the learner types.

Python runs the model once per text and computes every number the explorer shows (:mod:`.attention_data`);
the browser (``js/src/attention.mjs``) looks them up, writes the read-outs and draws: the heatmap of a
stage, the text strip tinted by the chosen query's weights, the layers x heads overview and the
step-through of one (query, key) cell. :class:`AttentionPainter` draws the same numbers with matplotlib.
"""
from __future__ import annotations

import math
from collections import OrderedDict

import anywidget
import ipywidgets
import numpy as np
import torch
import traitlets
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..model import GPT
from ..validation import check_choice
from ..viz import plot_attention, token_labels
from ._common import CSS, ExplorerWidget, Painter, dynamic_title, esm, one_thread, thin_tick_labels, wrap_label
from .attention_data import (
    DEFAULT_TEXT,
    STAGES,
    AttentionData,
    attention_payload,
    attention_view_data,
    check_head,
    check_model_and_tokenizer,
    check_position,
    encode_text,
    notice_text,
)
from .labels import label

__all__ = ["STAGES", "COLOR_SCALES", "AttentionData", "encode_text", "attention_view_data", "attention_payload",
           "AttentionPainter", "draw_attention_view", "AttentionExplorer", "ModelSwitch"]

COLOR_SCALES = ("shared", "own")  # the signed stages on one colour scale (the raw scores'), or each on its own

ATTENTION_FIGSIZE = (11.0, 6.4)  # room for the truncation notice under the title


def _stage_title(view: dict) -> str:
    if view["stage"] == "scaled":
        return label("attention", "title_scaled", scale=view["scale"])
    return label("attention", "title_" + view["stage"])


def _shown(matrix: torch.Tensor) -> np.ndarray:
    """-inf (masked) cells become NaN, which imshow leaves blank under the shading."""
    data = matrix.numpy()
    return np.where(np.isfinite(data), data, np.nan)


def _signed_limit(view: dict) -> float:
    """The colour range of the signed stages: the largest |raw score| of the head (or the layer's heads)
    for raw, scaled and masked alike, so the scaling is seen; with colors="own", the stage's own range."""
    lim = view["readouts"]["limit"]
    if view.get("colors", "shared") == "own" and view["stage"] != "raw":
        lim *= view["scale"]
    return lim if lim > 0 else 1.0


def _fit_ylim(ax, values: list[float]) -> None:
    lo, hi = min(values + [0.0]), max(values + [0.0])
    pad = 0.08 * (hi - lo) or 1.0
    ax.set_ylim(lo - pad, hi + pad)


class AttentionPainter(Painter):
    """Draws the attention view: one head (heatmap, and the query's row and step-through) or all heads."""

    figsize = ATTENTION_FIGSIZE

    def build(self, fig: Figure, view: dict) -> None:
        if view.get("error"):
            fig.text(0.5, 0.5, view["error"], ha="center", va="center", fontsize=11, color="#b2182b", wrap=True)
            return
        self.title = fig.suptitle(" ", fontsize=12, y=0.985)
        # the truncation notice sits under the title, never on it
        self.notice = fig.text(0.5, 0.925, notice_text(view), fontsize=9, ha="center", color="#b2182b")
        if view["head"] == "all":
            self._build_grid(fig, view)
        else:
            self._build_one(fig, view)

    def _heatmap(self, ax, view: dict, tokens, **kwargs):
        T = view["T"]
        plot_attention(torch.zeros(T, T), tokens, ax=ax, mask=view["mask"], signed=False, annotate=False, **kwargs)
        if tokens is not None:
            thin_tick_labels(ax, math.ceil(T / 32))
        shade = ax.collections[-1] if ax.collections else None
        return ax.images[0], shade

    def _build_one(self, fig: Figure, view: dict) -> None:
        T, tokens = view["T"], view["tokens"]
        gs = fig.add_gridspec(3, 2, width_ratios=[1.3, 1], hspace=1.45, wspace=0.3,
                              left=0.09, right=0.97, top=0.88, bottom=0.12)
        self.ax = ax = fig.add_subplot(gs[:, 0])
        self.im, self.shade = self._heatmap(ax, view, tokens)
        self.legend = ax.get_legend()
        self.heat_title = dynamic_title(ax, 10)
        self.cells = [[ax.text(j, i, "", ha="center", va="center", fontsize=7) for j in range(T)]
                      for i in range(T)] if T <= 8 else None
        if view["cell"] is None:
            hint = fig.add_subplot(gs[:, 1])
            hint.axis("off")
            hint.text(0.0, 0.5, "\n".join(wrap_label(label("attention", "hint_pick_query"), 46)),
                      fontsize=10, va="center", color="0.3")
            return
        # marks that do not rely on hue: a thick black box with a white line inside, around the row and the cell
        self.row_rect = [ax.add_patch(Rectangle((-0.5, 0), T, 1, fill=False, edgecolor=c, linewidth=w))
                         for c, w in (("black", 3.5), ("white", 1.2))]
        self.cell_rect = [ax.add_patch(Rectangle((0, 0), 1, 1, fill=False, edgecolor=c, linewidth=w))
                          for c, w in (("black", 3.0), ("white", 1.0))]
        hs = view["head_size"]
        self.ax_row = fig.add_subplot(gs[0, 1])
        self.row_bars = self.ax_row.bar(range(T), np.zeros(T), color="#2166ac")
        self.future = self.ax_row.add_patch(Rectangle((0, 0), 0, 1, transform=self.ax_row.get_xaxis_transform(),
                                                      facecolor="0.85", edgecolor="0.35", hatch="///", linewidth=0))
        self.ax_row.set_ylim(0, 1)
        self.ax_row.set_xlim(-0.5, T - 0.5)
        self.ax_row.set_xlabel(label("attention", "axis_key_position"), fontsize=8)
        self.ax_row.set_ylabel(label("attention", "weight"), fontsize=8)
        self.ax_qk = fig.add_subplot(gs[1, 1])
        self.qk_bars = self.ax_qk.bar(range(hs), np.zeros(hs))
        self.ax_qk.axhline(0, color="0.4", linewidth=0.8)
        self.ax_qk.set_xlim(-0.6, hs - 0.4)
        self.ax_qk.set_xlabel(label("attention", "axis_channel"), fontsize=8)
        self.ax_qk.set_ylabel("q[d]·k[d]", fontsize=8)
        self.ax_v = fig.add_subplot(gs[2, 1])
        self.out_bars = self.ax_v.bar(range(hs), np.zeros(hs), color="0.6", label=label("attention", "legend_output"))
        self.share_bars = self.ax_v.bar(range(hs), np.zeros(hs), width=0.45, color="black",
                                        label=label("attention", "legend_share"))
        self.ax_v.axhline(0, color="0.4", linewidth=0.8)
        self.ax_v.set_xlim(-0.6, hs - 0.4)
        self.ax_v.set_xlabel(label("attention", "axis_channel"), fontsize=8)
        # the legend above the panel, never over its bars
        self.ax_v.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, frameon=False,
                         borderaxespad=0.2)
        self.row_title, self.qk_title = dynamic_title(self.ax_row, 9), dynamic_title(self.ax_qk, 9)

    def _build_grid(self, fig: Figure, view: dict) -> None:
        n_head, T = view["matrix"].size(0), view["T"]
        ncols = min(n_head, 4)
        nrows = math.ceil(n_head / ncols)
        axes = fig.subplots(nrows, ncols, squeeze=False,
                            gridspec_kw={"left": 0.06, "right": 0.9, "top": 0.84, "bottom": 0.17, "wspace": 0.35})
        tokens = view["tokens"] if T <= 16 else None
        self.images, self.shades = [], []
        for h, ax in enumerate(axes.flat):
            if h >= n_head:
                ax.axis("off")
                continue
            im, shade = self._heatmap(ax, view, tokens, title=label("attention", "head_title", h=h), colorbar=False)
            self.images.append(im)
            self.shades.append(shade)
            if h % ncols:
                ax.set_ylabel("")
            if h and ax.get_legend() is not None:
                ax.get_legend().remove()
        self.legend = axes.flat[0].get_legend()
        self.cbar = fig.colorbar(self.images[0], ax=list(axes.flat), fraction=0.02, pad=0.02)

    def update(self, view: dict) -> None:
        if view.get("error"):
            return
        head = view["head"]
        who = label("attention", "all_heads") if head == "all" else label("attention", "head_title", h=head)
        self.title.set_text(label("attention", "heat_title", layer=view["layer"], who=who,
                                  stage=_stage_title(view), T=view["T"]))
        stage = view["stage"]
        signed = stage != "weights"
        shaded = stage in ("masked", "weights")
        matrix = view["matrix"]
        lim = _signed_limit(view) if signed else 1.0
        images = self.images if head == "all" else [self.im]
        for h, im in enumerate(images):
            im.set_data(_shown(matrix[h] if head == "all" else matrix))
            im.set_cmap("RdBu_r" if signed else "viridis")
            im.set_clim(-lim if signed else 0.0, lim)
        for shade in (self.shades if head == "all" else [self.shade]):
            if shade is not None:
                shade.set_visible(shaded)
        if self.legend is not None:
            self.legend.set_visible(shaded)
        cbar = self.cbar if head == "all" else self.im.colorbar
        cbar.update_normal(images[0])
        cbar.set_label(label("attention", "score" if signed else "weight"))
        if head != "all":
            self._update_one(view, signed, shaded)

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
        for r in self.row_rect:
            r.set_y(i - 0.5)
        for r in self.cell_rect:
            r.set_xy((j - 0.5, i - 0.5))
        for c, (bar, w) in enumerate(zip(self.row_bars, cell["row"].tolist())):
            bar.set_height(w)
            bar.set_color("black" if c == j else "#2166ac")
        if mask is not None:
            self.future.set_x(i + 0.5)
            self.future.set_width(T - 1 - i)
        self.row_title.set_text(label("attention", "row_title", i=i, tok=labels[i]))
        prods = cell["products"].tolist()
        for bar, p in zip(self.qk_bars, prods):
            bar.set_height(p)
            bar.set_color("#b2182b" if p >= 0 else "#2166ac")
        _fit_ylim(self.ax_qk, prods)
        chain = (label("attention", "chain", scale=view["scale"], scaled=cell["scaled"], sum=cell["sum_exp"],
                       n=cell["n_visible"], w=cell["weight"]) if cell["visible"]
                 else label("attention", "chain_masked", scale=view["scale"], scaled=cell["scaled"]))
        self.qk_title.set_text(label("attention", "dot_title", i=i, j=j, n=len(prods), dot=cell["dot"]) + "\n"
                               + "\n".join(wrap_label(chain, 70)))
        out, share = cell["output"].tolist(), cell["contribution"].tolist()
        for bar, o in zip(self.out_bars, out):
            bar.set_height(o)
        for bar, c in zip(self.share_bars, share):
            bar.set_height(c)
        _fit_ylim(self.ax_v, out + share)


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
    colors: str = "shared",
    fig: Figure | None = None,
) -> Figure:
    """The attention explorer's picture for these settings, as a matplotlib Figure.

    ``head`` is a number or ``"all"`` (a grid of every head); ``stage`` one of
    ``"raw"``, ``"scaled"``, ``"masked"``, ``"weights"``; ``query`` a token position
    whose row and (query, key) step-through are shown; ``colors`` ``"shared"`` (raw, scaled
    and masked on the raw scores' colour scale) or ``"own"``.
    """
    check_choice("colors", colors, COLOR_SCALES)
    view = attention_view_data(AttentionData(model, tokenizer, text), layer, head, stage, query, key)
    view["colors"] = colors
    return AttentionPainter().draw(view, fig)


class AttentionExplorer(ExplorerWidget):
    """Live view of one head's attention on text typed into the box.

    Controls (traits, settable from Python too): ``text``, ``layer``, ``head`` (a number or
    ``"all"``), ``stage``, ``query`` and ``key`` (None: none / the key with the largest weight).
    ``colors``: ``"shared"`` (default) draws raw, scaled and masked scores on one colour scale, so the
    scaling shows; ``"own"`` gives each stage its own. The model runs once per text (results cached);
    every other control is answered in the browser. ``view`` holds what Python computed for the
    current settings.
    """

    kind = "attention"
    painter = AttentionPainter
    _controls = ("text", "layer", "head", "stage", "query", "key", "colors")
    cache_size = 16
    _esm = esm("attention")
    _css = CSS

    text = traitlets.Unicode().tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    head = traitlets.Union([traitlets.Int(), traitlets.Unicode()], default_value=0).tag(sync=True)
    stage = traitlets.Unicode("weights").tag(sync=True)
    query = traitlets.Int(None, allow_none=True).tag(sync=True)
    key = traitlets.Int(None, allow_none=True).tag(sync=True)
    colors = traitlets.Unicode("shared").tag(sync=True)

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
        colors: str = "shared",
    ) -> None:
        check_model_and_tokenizer(model, tokenizer)
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        cfg = model.config
        check_position("layer", layer, cfg.n_layer, "the model's layer list")
        check_head(head, cfg.n_head)
        check_choice("stage", stage, STAGES)
        check_choice("colors", colors, COLOR_SCALES)
        self.model, self.tokenizer = model, tokenizer
        self._cache: OrderedDict[str, AttentionData] = OrderedDict()
        self.data: AttentionData | None = None
        self.error = ""
        self.model_runs = 0
        self.view: dict = {}
        self._ready = False
        super().__init__(text=text, layer=layer, head=head, stage=stage, colors=colors)
        self._load_text(text)
        if query is not None or key is not None:
            if self.data is None:
                raise ValueError(f"query/key need a valid text; the text gave: {self.error}")
            attention_view_data(self.data, layer, head, stage, query, key)  # raises for bad positions
            with self.hold_trait_notifications():
                self.query, self.key = query, key
        self._ready = True
        self._update()

    # -- checks of values set from Python ---------------------------------------------------------
    @traitlets.validate("layer")
    def _valid_layer(self, proposal):
        return check_position("layer", proposal["value"], self.model.config.n_layer, "the model's layer list")

    @traitlets.validate("head")
    def _valid_head(self, proposal):
        return check_head(proposal["value"], self.model.config.n_head)

    @traitlets.validate("stage")
    def _valid_stage(self, proposal):
        return check_choice("stage", proposal["value"], STAGES)

    @traitlets.validate("colors")
    def _valid_colors(self, proposal):
        return check_choice("colors", proposal["value"], COLOR_SCALES)

    @traitlets.validate("query", "key")
    def _valid_position(self, proposal):
        value = proposal["value"]
        if value is not None and self.data is not None:
            check_position(proposal["trait"].name, value, self.data.T, "the text's token list")
        return value

    # -- what each change recomputes -------------------------------------------------------------
    def _data_for(self, text: str) -> AttentionData:
        if text in self._cache:
            self._cache.move_to_end(text)
        else:
            self._cache[text] = AttentionData(self.model, self.tokenizer, text)
            self.model_runs += 1
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return self._cache[text]

    @traitlets.observe("text")
    def _on_text(self, change) -> None:
        if self._ready:
            self._load_text(change["new"])
            self._update()

    @traitlets.observe("layer", "head", "stage", "query", "key", "colors")
    def _on_control(self, change) -> None:
        if self._ready:
            self._update()

    def _load_text(self, text: str) -> None:
        try:
            self.data, self.error = self._data_for(text), ""
        except ValueError as e:  # empty text or unknown characters: say so instead of a traceback
            self.data, self.error = None, str(e)
        if self.data is None:
            self.payload = {"text": text, "error": self.error}
            return
        ready, self._ready = self._ready, False
        try:  # positions past the new text are dropped (the browser does the same)
            if self.query is not None and self.query >= self.data.T:
                self.query, self.key = None, None
            if self.key is not None and self.key >= self.data.T:
                self.key = None
        finally:
            self._ready = ready
        with one_thread():
            self.payload = attention_payload(self.data)

    def _update(self) -> None:
        if self.data is None:
            self.view = {"error": self.error}
            return
        query = None if self.head == "all" else self.query
        key = None if query is None else self.key
        with one_thread():
            self.view = attention_view_data(self.data, self.layer, self.head, self.stage, query, key)
        self.view["colors"] = self.colors


class _SwitchButtons(anywidget.AnyWidget):
    """The buttons of :class:`ModelSwitch` (``js/src/switch.mjs``): one per model, keys kept inside."""

    _esm = esm("switch")
    _css = CSS
    names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    tips = traitlets.List(traitlets.Unicode()).tag(sync=True)
    label = traitlets.Unicode().tag(sync=True)
    index = traitlets.Int(0).tag(sync=True)


class ModelSwitch(ipywidgets.VBox):
    """Attention explorers of several models behind one switch, e.g. a trained model and the same
    model before training: ``ModelSwitch({"trained": a, "untrained": b})``.

    One button per model shows that model's explorer; the text, layer, head, stage, colours, query and
    key are linked between the explorers in the page (``jslink``), so a switch keeps every setting and
    the same cell is compared. Every explorer is built once and stays in the page (``panes``); the
    buttons show one and hide the others (``js/src/switch.mjs``), so a switch draws nothing new. Switching
    and the linked controls work without a kernel (an exported page); editing the text runs every model.
    The models must have the same number of layers and heads. ``shown`` is the explorer on screen.
    """

    def __init__(self, explorers: dict[str, AttentionExplorer]) -> None:
        if not isinstance(explorers, dict):
            raise TypeError(f"explorers must be a dict of name -> AttentionExplorer, got {type(explorers).__name__}")
        if len(explorers) < 2:
            raise ValueError(f"explorers must name at least 2 models to switch between, got {len(explorers)}")
        for name, explorer in explorers.items():
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"each model's name must be a non-empty str (its button's label), got {name!r}")
            if not isinstance(explorer, AttentionExplorer):
                raise TypeError(f"explorers[{name!r}] must be an AttentionExplorer, got {type(explorer).__name__}")
        names = list(explorers)
        first = explorers[names[0]]
        shape = (first.model.config.n_layer, first.model.config.n_head)
        for name in names[1:]:
            other = explorers[name]
            cfg = other.model.config
            if (cfg.n_layer, cfg.n_head) != shape:
                raise ValueError(f"explorers[{name!r}] has {cfg.n_layer} layers of {cfg.n_head} heads, "
                                 f"explorers[{names[0]!r}] {shape[0]} of {shape[1]}: the switch keeps the layer "
                                 "and head, so every model needs the same numbers")
            for trait in _SWITCHED:  # the first explorer's settings (the text first: positions depend on it)
                setattr(other, trait, getattr(first, trait))
        self.explorers = dict(explorers)
        self.buttons = _SwitchButtons(names=names, tips=[label("attention", "tip_model")] * len(names),
                                      label=label("attention", "model"))
        # (an ipywidgets.Stack would build the chosen explorer's view anew at each switch: seconds here)
        for k, explorer in enumerate(explorers.values()):
            explorer.add_class("gl-model-pane")
            explorer.add_class(f"gl-model-pane-{k}")
        self.panes = ipywidgets.VBox(children=list(explorers.values()))
        self.panes.add_class("gl-model-panes")
        self.links = [ipywidgets.jslink((first, trait), (explorers[name], trait))
                      for name in names[1:] for trait in _SWITCHED]
        super().__init__(children=[self.buttons, self.panes])
        self.add_class("gpt-lesson-model-switch")

    @property
    def shown(self) -> AttentionExplorer:
        """The explorer the switch shows now."""
        return list(self.explorers.values())[self.buttons.index]

    def __repr__(self) -> str:
        shown = self.shown
        settings = ", ".join(f"{t}={getattr(shown, t)!r}" for t in _SWITCHED)
        return f"ModelSwitch(models={list(self.explorers)!r}, shown={self.buttons.names[self.buttons.index]!r}, {settings})"

    def _repr_mimebundle_(self, **kwargs):
        """The widget view, and for pages without widgets the HTML view of the explorer shown now."""
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        return {**data, "text/plain": repr(self), "text/html": self.shown.html_view()}, metadata


_SWITCHED = ("text", "layer", "head", "stage", "colors", "query", "key")  # what ModelSwitch keeps across models
