"""What every explorer shares: the browser module it runs, the talk with it, and the static picture.

An explorer is an :class:`anywidget.AnyWidget`: its controls are traits synced with an ES module
(``static/``, bundled from ``js/src``) that draws in the browser. Python computes every number an
explorer shows (with :mod:`gpt_lesson.attention` and :mod:`gpt_lesson.experiments`), once per text or
once up front, and sends them as compact binary arrays; the browser looks them up, formats and draws,
so a click or a hover never waits for Python, and a page exported with the widget state keeps working
without a kernel. The static matplotlib picture (``draw_*_view``, ``save_png``) is drawn from the same
numbers, for figures, GitHub's preview and PNG export.
"""
from __future__ import annotations

import base64
import io
import json
import os
import textwrap
import zlib
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import anywidget
import matplotlib.pyplot as plt
import numpy as np
import torch
import traitlets
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import offset_copy

from ..checkpoints import write_bytes_atomically
from ..i18n import display_width as _columns
from ..i18n import get_language, use_figure_fonts
from ..runtime import one_thread
from ..validation import check_choice, check_path
from .html_view import html_view
from .labels import labels_for

__all__ = ["ExplorerWidget", "Painter", "new_figure", "row_entropy", "dynamic_title", "one_thread", "esm", "esm_data",
           "esm_source", "CSS", "pack_tensor", "unpack_tensor", "embedded_state", "thin_tick_labels", "wrap_label"]

PNG_DPI = 80
STATIC = Path(__file__).with_name("static")


@cache
def esm_source(name: str) -> str:
    """The ES module of one explorer: ``static/<name>.mjs``, bundled by esbuild from ``js/src`` (see
    ``js/build.mjs``) with the shared core and d3-format, since a widget's module is one string."""
    return (STATIC / f"{name}.mjs").read_text(encoding="utf-8")


# The module travels in every saved widget state (once per explorer in a notebook and in an exported
# page), so it is sent deflated: a few lines inflate it with the browser's DecompressionStream and
# import it, the way anywidget itself imports a module from a string.
_LOADER = """const z = "{data}";
const bytes = Uint8Array.from(atob(z), (c) => c.charCodeAt(0));
const source = await new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"))).text();
const url = URL.createObjectURL(new Blob([source], {{ type: "text/javascript" }}));
const mod = await import(url);
URL.revokeObjectURL(url);
export default mod.default;
"""


@cache
def esm_data(name: str) -> str:
    """:func:`esm_source` deflated, in base64: what the widget's loader and the HTML view inflate."""
    return base64.b64encode(zlib.compress(esm_source(name).encode("utf-8"), 9)).decode("ascii")


@cache
def esm(name: str) -> str:
    """The module an explorer widget sends: :func:`esm_source` deflated, behind a small loader."""
    return _LOADER.format(data=esm_data(name))


CSS = (STATIC / "explorers.css").read_text(encoding="utf-8")


def pack_tensor(x: torch.Tensor, dtype: str) -> dict:
    """A tensor of shape (groups..., rows, channels) as bytes for the browser (``core.mjs: unpack``).

    ``float32`` is exact. ``int16`` and ``int8`` store ``round(x / scale)`` with one scale per
    channel of each group (the largest |x| of that channel maps to the largest integer), so a
    channel with large values does not cost the others their precision.
    """
    check_choice("dtype", dtype, ("float32", "int16", "int8"))
    x = x.detach().to(torch.float32).cpu()
    rows, channels = x.shape[-2], x.shape[-1]
    out = {"dtype": dtype, "channels": channels, "rows_per_group": rows}
    if dtype == "float32":
        out["data"] = x.contiguous().numpy().tobytes()
        return out
    top = 32767 if dtype == "int16" else 127
    grouped = x.reshape(-1, rows, channels)  # (groups, rows, channels)
    peak = grouped.abs().amax(dim=1)  # (groups, channels)
    scale = torch.where(peak > 0, peak / top, torch.ones_like(peak))
    ints = torch.round(grouped / scale[:, None, :]).clamp(-top, top)
    out["data"] = ints.to(torch.int16 if dtype == "int16" else torch.int8).numpy().tobytes()
    out["scales"] = scale.to(torch.float32).numpy().tobytes()
    return out


def unpack_tensor(packed: dict, shape: Sequence[int]) -> torch.Tensor:
    """The values the browser reconstructs from :func:`pack_tensor` (used by the tests and the static view)."""
    dt = {"float32": np.float32, "int16": np.int16, "int8": np.int8}[packed["dtype"]]
    x = torch.from_numpy(np.frombuffer(packed["data"], dtype=dt).astype(np.float64))
    if packed["dtype"] != "float32":
        scales = torch.from_numpy(np.frombuffer(packed["scales"], dtype=np.float32).astype(np.float64))
        x = x.reshape(-1, packed["rows_per_group"], packed["channels"]) * scales.reshape(-1, 1, packed["channels"])
    return x.reshape(*shape)


def embedded_state(widget: anywidget.AnyWidget) -> dict:
    """The widget's entry in a notebook's saved widget state, as nbclient and JupyterLab write it.

    Binary traits become base64 ``buffers``; the size of ``json.dumps`` of this is what one explorer
    adds to a saved notebook and to an exported HTML page.
    """
    from ipywidgets.widgets.widget import _remove_buffers

    state, paths, buffers = _remove_buffers(widget.get_state())
    entry = {"model_name": state["_model_name"], "model_module": state["_model_module"],
             "model_module_version": state["_model_module_version"], "state": state}
    if buffers:
        entry["buffers"] = [{"encoding": "base64", "path": p, "data": base64.b64encode(bytes(b)).decode()}
                            for p, b in zip(paths, buffers)]
    return entry


def embedded_state_bytes(widget: anywidget.AnyWidget) -> int:
    return len(json.dumps(embedded_state(widget), separators=(",", ":")).encode())


# -- the static picture ------------------------------------------------------------------------------
def new_figure(figsize: tuple[float, float], fig: Figure | None = None) -> Figure:
    """A blank figure to draw a view into.

    ``fig=None`` makes a pyplot figure, so a notebook shows it with ``plt.show()``;
    an explorer's ``save_png`` passes a figure of its own that pyplot never sees.
    """
    if fig is None:
        return plt.figure(figsize=figsize)
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure or None, got {type(fig).__name__}")
    fig.clear()
    fig.set_size_inches(figsize)
    return fig


def dynamic_title(ax, fontsize: float = 10) -> Text:
    """A title text 6 points above the axes, like ``ax.set_title``, that :meth:`Painter.update` rewrites."""
    shifted = offset_copy(ax.transAxes, fig=ax.figure, y=6, units="points")
    return ax.text(0.5, 1.0, "", transform=shifted, ha="center", va="bottom", fontsize=fontsize)


def thin_tick_labels(ax, every: int) -> None:
    """Show every ``every``-th tick label on both axes (long texts: 60 labels would overlap)."""
    if every <= 1:
        return
    for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
        for n, t in enumerate(labels):
            t.set_visible(n % every == 0)


def wrap_label(text: str, width: int) -> list[str]:
    """The lines of ``text`` at most ``width`` columns wide: :func:`textwrap.wrap` for text of narrow
    characters (English, unchanged), and for Chinese a break between any two characters, a Chinese
    character counting two columns (Chinese has no spaces to break at)."""
    if _columns(text) == len(text):
        return textwrap.wrap(text, width)
    lines, line = [], ""
    for c in text:
        if line and _columns(line + c) > width:
            if c == " " or _columns(c) == 2:
                cut = len(line)
            else:  # do not cut a Latin word or a number: break after the last space or wide character
                cut = max((i + 1 for i, ch in enumerate(line) if ch == " " or _columns(ch) == 2), default=len(line))
            lines.append(line[:cut].rstrip())
            line = line[cut:].lstrip()
        line += c
    if line.strip():
        lines.append(line.strip())
    return lines


def row_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each row of a probability matrix (0 log 0 counts as 0)."""
    return -torch.special.xlogy(weights, weights).sum(-1)


class Painter:
    """Draws one kind of view into a matplotlib figure: :meth:`build` lays it out, :meth:`update` fills it."""

    figsize: tuple[float, float] = (8.0, 5.0)

    def build(self, fig: Figure, view: dict) -> None:  # pragma: no cover - every painter overrides it
        raise NotImplementedError

    def update(self, view: dict) -> None:  # pragma: no cover - every painter overrides it
        raise NotImplementedError

    def draw(self, view: dict, fig: Figure | None = None) -> Figure:
        """Paint ``view`` into ``fig`` (cleared) or a new pyplot figure: the static picture.

        The picture is labelled in the language :func:`gpt_lesson.set_language` chose, as the live
        explorer is; Chinese text is drawn with the font the package ships (see :mod:`gpt_lesson.i18n`),
        so no machine shows empty boxes for want of a system CJK font.
        """
        use_figure_fonts(get_language())
        fig = new_figure(self.figsize, fig)
        self.build(fig, view)
        self.update(view)
        return fig


class ExplorerWidget(anywidget.AnyWidget):
    """Base of the explorers: the module and style they run, their label table, and the static picture.

    Subclasses set ``kind`` ("attention", "mask" or "scaling") and ``painter``, keep ``self.view``
    (the numbers the picture shows, computed by Python: what notebooks assert on) up to date,
    and fill ``payload``, the data the browser draws from.
    """

    kind = ""
    painter: type[Painter] = Painter
    _controls: tuple[str, ...] = ()  # the traits the page sets, in the order __repr__ lists them
    labels = traitlets.Dict().tag(sync=True)
    payload = traitlets.Dict().tag(sync=True)

    def __init__(self, **traits) -> None:
        super().__init__(labels=labels_for(self.kind), **traits)
        self.add_class(f"gpt-lesson-{self.kind}-explorer")
        self.on_msg(self._on_front_end_message)

    def __repr__(self) -> str:
        """What a page without widgets (GitHub, a terminal) shows: the explorer and its controls."""
        shown = []
        for name in self._controls:
            value = getattr(self, name)
            if isinstance(value, str) and len(value) > 40:
                value = value[:37] + "..."
            shown.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"

    def _repr_mimebundle_(self, **kwargs):
        """The widget view, and next to it the self-contained HTML view (:mod:`.html_view`).

        Front ends with a widget manager rank the widget view first and show the live widget; pages
        without one (nbconvert's HTML, the slide decks, a RISE slideshow) show the HTML view, whose
        controls work in the page without a kernel.
        """
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        return {**data, "text/html": self.html_view()}, metadata

    def html_view(self) -> str:
        """The explorer as it is now (controls, text, data, labels) in an ``<iframe srcdoc>`` that needs
        no widget manager and no kernel: what pages without widgets show."""
        state = {name: getattr(self, name) for name in (*self._controls, "payload", "labels")}
        return html_view(self.kind, state, code=esm_data(self.kind), css=CSS, title=type(self).__name__)

    def html_view_bytes(self) -> int:
        """Bytes the HTML view adds to a stored notebook's output (UTF-8, before the notebook's JSON escaping)."""
        return len(self.html_view().encode("utf-8"))

    def _on_front_end_message(self, widget, content, buffers) -> None:
        # The page asks whether a kernel is there (an exported page gets no answer and says so).
        if isinstance(content, dict) and content.get("type") == "ping":
            self.send({"type": "pong"})

    def figure(self) -> Figure:
        """The static picture of what the explorer shows now, in a figure of its own (pyplot never sees it)."""
        fig = Figure(figsize=self.painter.figsize, dpi=PNG_DPI)
        FigureCanvasAgg(fig)
        return self.painter().draw(self.view, fig)

    @property
    def png(self) -> bytes:
        """The static picture as PNG bytes (80 dpi)."""
        buf = io.BytesIO()
        self.figure().savefig(buf, format="png", dpi=PNG_DPI, facecolor="white")
        return buf.getvalue()

    def save_png(self, path: str | os.PathLike) -> Path:
        """Write the static picture of what the explorer shows now to ``path`` (a .png file); returns the path."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        path = check_path("path", path)
        if path.suffix.lower() != ".png":
            raise ValueError(f"path={str(path)!r} must end in .png: save_png writes a PNG image")
        if not path.parent.is_dir():
            raise ValueError(f"the folder {str(path.parent)!r} does not exist; create it first")
        # A temp file renamed into place: an old picture is never replaced by half of a new one.
        return write_bytes_atomically(path, self.png, "the picture")

    def embedded_state_bytes(self) -> int:
        """Bytes this explorer adds to a saved notebook's widget state (and to an exported page)."""
        return embedded_state_bytes(self)
