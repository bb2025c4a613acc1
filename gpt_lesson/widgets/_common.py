"""What every explorer shares: its own figure, PNG rendering, display and saving.

Each explorer draws with the same function as its static fallback, into a
:class:`matplotlib.figure.Figure` that it owns and that pyplot never sees, so a
notebook can hold several explorers without one drawing into another's figure and
without the inline backend showing stray copies. The picture travels to the browser
as PNG bytes in an ``ipywidgets.Image`` (the same in ipywidgets 7 and 8).
"""
from __future__ import annotations

import io
import math
import os
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import PIL.Image
import torch
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox, offset_copy

__all__ = ["Explorer", "Painter", "check_choice", "check_index", "new_figure", "row_entropy",
           "set_color_scale", "dynamic_title", "one_thread"]

PNG_DPI = 80


def check_choice(name: str, value: object, choices: Sequence[object]) -> object:
    """Raise a ValueError unless ``value`` is one of ``choices`` (a TypeError for unhashable values)."""
    try:
        ok = value in choices
    except TypeError:
        ok = False
    if not ok or isinstance(value, bool):
        raise ValueError(f"{name}={value!r} is not one of {tuple(choices)}")
    return value


def check_index(name: str, value: object, size: int, what: str) -> int:
    """Raise unless ``value`` is an int in [0, size): ``what`` names the thing being indexed."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r} must be an integer, got {type(value).__name__}")
    if not 0 <= value < size:
        raise ValueError(f"{name}={value} is out of range: {what} has {size}, so use 0..{size - 1}")
    return value


def new_figure(figsize: tuple[float, float], fig: Figure | None = None) -> Figure:
    """A blank figure to draw a view into.

    ``fig=None`` makes a pyplot figure, so a notebook shows it with ``plt.show()``;
    explorers pass their own figure, which is cleared and reused for every redraw.
    """
    if fig is None:
        return plt.figure(figsize=figsize)
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure or None, got {type(fig).__name__}")
    fig.clear()
    fig.set_size_inches(figsize)
    return fig


def set_color_scale(im, cmap: str, vmin: float, vmax: float) -> bool:
    """Give an image its colour map and limits; True if anything changed (then redraw its colour bar).

    Setting an unchanged colour map still costs matplotlib a round of callbacks, so skip it.
    """
    changed = False
    if im.get_cmap().name != cmap:
        im.set_cmap(cmap)
        changed = True
    if tuple(im.get_clim()) != (vmin, vmax):
        im.set_clim(vmin, vmax)
        changed = True
    return changed


def dynamic_title(ax, fontsize: float = 10) -> Text:
    """A title that update() rewrites: a text 6 points above the axes, like ``ax.set_title``.

    matplotlib places ``ax.title`` only during a full draw, so a title that is redrawn
    on its own over the saved background needs a fixed place.
    """
    shifted = offset_copy(ax.transAxes, fig=ax.figure, y=6, units="points")
    return ax.text(0.5, 1.0, "", transform=shifted, ha="center", va="bottom", fontsize=fontsize)


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread inside the block, then restore the caller's thread count.

    An explorer runs the model on one short sequence: the matrices are so small that
    handing them to a second thread costs more than the work, and on a shared 2-core
    machine the threads wait for each other (a 64-token forward pass of the benchmark's
    model took about 200 ms on 2 threads and 1 ms on one).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def row_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each row of a probability matrix (0 log 0 counts as 0)."""
    return -torch.special.xlogy(weights, weights).sum(-1)


class Painter:
    """Draws one kind of view into a figure in two steps, so a redraw is cheap.

    :meth:`build` lays out the axes, tick labels, colour bars and artists (slow in
    matplotlib: a tick label is several objects); :meth:`update` only sets their data,
    colours and texts. :meth:`paint` builds again only when :meth:`layout_key` changes
    (e.g. the number of tokens), so most control changes cost one ``update`` and one
    PNG encoding. The static ``draw_*_view`` functions paint a fresh figure with the
    same painter, so the live picture and the static one are drawn by the same code.
    """

    figsize: tuple[float, float] = (8.0, 5.0)

    def __init__(self) -> None:
        self._key: object = None
        self._fig: Figure | None = None
        self._background = None
        self._bare = None  # the background with the texts of self.labels left out
        self._drawn: list = []  # (text, box) of each label as the saved background shows it
        self.builds = 0
        # Artists that update() changes, in drawing order. render_png() draws everything
        # else once (the background: axes, tick labels...) and then only these.
        self.dynamic: list[Artist] = []
        # Tick labels whose texts update() may change while their places stay (new text of the
        # same length): they are laid out in the background but drawn on their own.
        self.labels: list[Text] = []

    def layout_key(self, view: dict) -> object:
        """What the layout depends on; views with equal keys differ only in data."""
        return None

    def build(self, fig: Figure, view: dict) -> None:  # pragma: no cover - every painter overrides it
        raise NotImplementedError

    def update(self, view: dict) -> None:  # pragma: no cover - every painter overrides it
        raise NotImplementedError

    def paint(self, fig: Figure, view: dict) -> Figure:
        key = self.layout_key(view)
        if fig is not self._fig or key != self._key:
            new_figure(self.figsize, fig)
            self.dynamic = []
            self.build(fig, view)
            self._fig, self._key, self._background, self._bare = fig, key, None, None
            self.builds += 1
        self.update(view)
        return fig

    def render_png(self) -> bytes:
        """PNG bytes of the painted figure, redrawing only the dynamic artists over a saved background.

        The result is the picture ``savefig`` gives (the same artists in the same order),
        at the figure's own dpi.
        """
        fig = self._fig
        if fig is None:
            raise ValueError("nothing painted yet: call paint() first")
        canvas = fig.canvas
        self.dynamic = [a for a in self.dynamic if a is not None]
        changed = self._changed_labels(canvas.get_renderer()) if self._background is not None else {}
        if self._bare is None:
            shown = [a.get_visible() for a in self.dynamic]
            for a in self.dynamic:
                a.set_visible(False)
            # Transparent, not hidden: the labels still take their room, so the axis labels
            # beside them are placed as in a full draw.
            alphas = [t.get_alpha() for t in self.labels]
            for t in self.labels:
                t.set_alpha(0.0)
            canvas.draw()
            self._bare = np.array(canvas.buffer_rgba())
            for t, alpha in zip(self.labels, alphas):
                t.set_alpha(alpha)
            for a, visible in zip(self.dynamic, shown):
                a.set_visible(visible)
            self._background = None
        renderer = canvas.get_renderer()
        pixels = np.asarray(canvas.buffer_rgba())
        if self._background is None:
            pixels[...] = self._bare
            for t in self.labels:
                t.draw(renderer)
            self._background = pixels.copy()
            self._drawn = [(t.get_text(), t.get_window_extent(renderer)) for t in self.labels]
        else:
            self._redraw_labels(changed, pixels, renderer)
            pixels[...] = self._background
        for a in self.dynamic:
            a.draw(renderer)  # an invisible artist draws nothing
        width, height = canvas.get_width_height()
        image = PIL.Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
        buf = io.BytesIO()
        image.save(buf, format="png", compress_level=1)
        return buf.getvalue()

    def label_room(self, drawn: list) -> object:
        """What else in the picture depends on the labels' (text, box) pairs ``drawn``: when it
        changes, the whole figure is drawn again. None: nothing."""
        return None

    def _changed_labels(self, renderer) -> dict:
        """{index: new box} of the labels whose text differs from the saved background's.

        Forgets the label-free background when the new labels change :meth:`label_room`.
        """
        changed = {i: t.get_window_extent(renderer) for i, (t, (text, _)) in enumerate(zip(self.labels, self._drawn))
                   if t.get_text() != text}
        if changed:
            now = [(t.get_text(), changed.get(i, box)) for i, (t, (_, box)) in enumerate(zip(self.labels, self._drawn))]
            if self.label_room(now) != self.label_room(self._drawn):
                self._bare = None
        return changed

    def _redraw_labels(self, changed: dict, pixels: np.ndarray, renderer) -> None:
        """Bring the saved background up to date with the labels ``changed`` (index: new box).

        The labels overlap their neighbours, so the changed area is drawn again from the
        label-free background with every label that reaches into it, in drawing order,
        and only that area is copied into the saved background: the same pixels as
        drawing all the labels again.
        """
        if not changed:
            return
        boxes = [box for _, box in self._drawn]
        height, width = pixels.shape[:2]
        areas = []  # (x0, x1, y0, y1) in whole pixels, y up
        for i, new_box in changed.items():
            area = Bbox.union([boxes[i], new_box]).padded(3)  # antialiasing reaches past a glyph's box
            boxes[i] = new_box
            self._drawn[i] = (self.labels[i].get_text(), new_box)
            x0, x1 = max(int(math.floor(area.x0)), 0), min(int(math.ceil(area.x1)), width)
            y0, y1 = max(int(math.floor(area.y0)), 0), min(int(math.ceil(area.y1)), height)
            if x0 < x1 and y0 < y1:
                areas.append((x0, x1, y0, y1))
        pixels[...] = self._bare
        for t, box in zip(self.labels, boxes):
            if any(box.x1 + 3 >= x0 and box.x0 - 3 <= x1 and box.y1 + 3 >= y0 and box.y0 - 3 <= y1
                   for x0, x1, y0, y1 in areas):
                t.draw(renderer)
        for x0, x1, y0, y1 in areas:
            rows = slice(height - y1, height - y0)  # the pixel rows run from the top
            self._background[rows, x0:x1] = pixels[rows, x0:x1]

    def draw(self, view: dict, fig: Figure | None = None) -> Figure:
        """Paint ``view`` into ``fig`` (cleared) or a new pyplot figure: the static fallback."""
        return self.paint(new_figure(self.figsize, fig), view)


class Explorer:
    """Base of the explorers: controls above a message line and the picture.

    Subclasses set ``self.painter`` (a painter of their kind) before calling this
    ``__init__``, build their controls, call :meth:`_finish` with them, and update
    ``self.view``, the computed data the picture shows (what the tests check),
    before calling :meth:`redraw`.

    Each layout the explorer has shown keeps its own figure and painter (the last
    ``max_layouts``), so going back to a layout, e.g. from "all heads" to one head,
    costs an update, not a new layout.
    """

    css_class = "gpt-lesson-explorer"
    painter: Painter
    max_layouts = 4

    def __init__(self) -> None:
        self._layouts: OrderedDict[object, tuple[Painter, Figure]] = OrderedDict()
        self._fig: Figure | None = None
        self.image = widgets.Image(format="png")
        self.message = widgets.HTML(value="")
        self.view: dict = getattr(self, "view", {})  # a subclass may have computed it while validating
        self.png: bytes = b""
        self.redraws = 0
        self._holding = False  # True while several controls are set together: handlers wait for one redraw

    def _finish(self, controls: list[widgets.Widget]) -> None:
        self.widget = widgets.VBox([*controls, self.message, self.image])
        self.widget.add_class(self.css_class)
        self.widget.add_class("gpt-lesson-explorer")

    def redraw(self) -> None:
        """Draw the current view and send it to the Image widget."""
        key = self.painter.layout_key(self.view)
        if key in self._layouts:
            self._layouts.move_to_end(key)
        else:
            fig = Figure(figsize=self.painter.figsize, dpi=PNG_DPI)
            FigureCanvasAgg(fig)  # an Agg canvas of its own: pyplot's figure manager never knows this figure
            self._layouts[key] = (type(self.painter)(), fig)
            if len(self._layouts) > self.max_layouts:
                self._layouts.popitem(last=False)
        self.painter, self._fig = self._layouts[key]
        self.painter.paint(self._fig, self.view)
        self.png = self.painter.render_png()
        self.image.value = self.png
        self.redraws += 1

    def save_png(self, path: str | os.PathLike) -> Path:
        """Write the picture the explorer shows now to ``path`` (a .png file); returns the path."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        path = Path(path)
        if path.suffix.lower() != ".png":
            raise ValueError(f"path={str(path)!r} must end in .png: save_png writes a PNG image")
        if not path.parent.is_dir():
            raise ValueError(f"the folder {str(path.parent)!r} does not exist; create it first")
        path.write_bytes(self.png)
        return path

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
