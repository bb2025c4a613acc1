"""Regenerate every figure in ``figures/`` from the code: ``python -m tools.figures [--out figures/]``.

Each figure is one entry of :data:`FIGURES` (file name, drawing function, what it needs), so
adding a figure is one line. Figures of the trained Shakespeare model (attention heads,
training curves) load the cached checkpoint, or train it (about 90 s on 2 cores) unless
``--no-train`` is given, in which case they are skipped when no checkpoint is cached.
Benchmark plots are re-drawn from ``benchmarks/results/NAME.json`` as ``benchmark_NAME.png``.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # a command-line tool: never open a window
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

__all__ = ["FigureSpec", "FigureSkipped", "Context", "FIGURES", "benchmark_figures", "all_figures",
           "plot_benchmark", "write_figures"]

REPO_ROOT = Path(__file__).resolve().parents[1]
DPI = 110
ATTENTION_TEXT = "First Citizen:\nBefore we proceed"  # the first line of Tiny Shakespeare
SAMPLE_TEXT = "First Citizen:\nBefore we proceed any further, hear me speak."  # the untrained views (64 positions)


class FigureSkipped(Exception):
    """A figure cannot be drawn here (no checkpoint with --no-train, module not there yet)."""


@dataclass
class Context:
    """What the drawing functions share: the trained model is loaded (or trained) once."""

    train: bool = True
    benchmarks_dir: Path = REPO_ROOT / "benchmarks"
    _trained: tuple | None = field(default=None, repr=False)
    _untrained: tuple | None = field(default=None, repr=False)

    def untrained_model(self) -> tuple:
        """(model, tokenizer): the untrained model of explorers.ipynb (seed 1337, 2 layers of 4 heads)."""
        if self._untrained is None:
            from gpt_lesson.data import CharTokenizer, load_tiny_shakespeare
            from gpt_lesson.model import GPT

            try:
                tokenizer = CharTokenizer(load_tiny_shakespeare())
            except FileNotFoundError as e:
                raise FigureSkipped(f"Tiny Shakespeare is not available ({e})") from None
            torch.manual_seed(1337)
            model = GPT(tokenizer.vocab_size, n_embd=64, n_head=4, n_layer=2, block_size=64)
            self._untrained = (model.eval(), tokenizer)
        return self._untrained

    def checkpoint_path(self) -> Path:
        from gpt_lesson.shakespeare import checkpoint_path

        return checkpoint_path()

    def trained_model(self) -> tuple:
        """(model, tokenizer) of the Shakespeare run; raises FigureSkipped when it cannot be had."""
        if self._trained is None:
            from gpt_lesson.shakespeare import load_trained_model

            cached = self.checkpoint_path().is_file()
            if not self.train and not cached:
                raise FigureSkipped(f"no cached checkpoint at {self.checkpoint_path()} and --no-train was given")
            if not cached:
                print("training the Shakespeare model first (about 90 s on 2 cores; --no-train skips this) ...")
            try:
                model, tokenizer = load_trained_model(train_if_missing=self.train)
            except FileNotFoundError as e:  # a checkpoint made with other settings, and --no-train
                raise FigureSkipped(str(e)) from None
            self._trained = (model.eval(), tokenizer)
        return self._trained

    def training_history(self) -> dict:
        """The loss history stored in the checkpoint by :func:`gpt_lesson.training.train`."""
        from gpt_lesson.training import load_checkpoint

        self.trained_model()  # makes sure the checkpoint exists (or skips)
        _, ckpt = load_checkpoint(self.checkpoint_path())
        history = ckpt.get("extra", {}).get("history")
        if not history or not history.get("eval_step"):
            raise FigureSkipped(f"{self.checkpoint_path()} stores no training history")
        return history


@dataclass(frozen=True)
class FigureSpec:
    """One figure: the file it is saved as, the function that draws it, and whether it needs training."""

    filename: str
    draw: Callable[[Context], Figure]
    needs_training: bool = False
    about: str = ""
    dpi: int = DPI
    tight: bool = True  # crop to the drawn area (the explorer views keep their own canvas)


# --------------------------------------------------------------------------------------------
# Drawing functions that are more than one call


def _attention_steps(ctx: Context) -> Figure:
    """The steps of one causal head on six tokens: scaled scores, masked, softmax weights."""
    from gpt_lesson.attention import apply_mask, attention_scores, attention_weights, causal_mask
    from gpt_lesson.viz import plot_attention

    tokens = ["I", "love", "to", "eat", "ripe", "plums"]
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(6, 16, generator=gen), torch.randn(6, 16, generator=gen)
    scores = attention_scores(q, k)
    mask = causal_mask(6)
    masked = apply_mask(scores, mask)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.6))
    plot_attention(scores, tokens, ax=axes[0], title="1. scores q·kᵀ/√d_k", signed=True)
    plot_attention(masked, tokens, ax=axes[1], mask=mask, title="2. masked_fill(tril == 0, -inf)", signed=True)
    plot_attention(attention_weights(masked), tokens, ax=axes[2], mask=mask,
                   title="3. softmax over the keys: rows sum to 1", signed=False)
    fig.suptitle("One causal attention head, step by step (random q, k with d_k = 16)")
    fig.tight_layout()
    return fig


def _widget_view(name: str, **kwargs) -> Callable[[Context], Figure]:
    def draw(ctx: Context) -> Figure:
        from gpt_lesson import widgets

        return getattr(widgets, name)(**kwargs)
    return draw


def _trained_attention(**kwargs) -> Callable[[Context], Figure]:
    def draw(ctx: Context) -> Figure:
        from gpt_lesson.widgets import draw_attention_view

        model, tokenizer = ctx.trained_model()
        opts = dict(kwargs)
        layer = opts.pop("layer", 0)
        if layer == -1:  # the last layer, whatever the depth of the trained model
            layer = len(model.blocks) - 1
        return draw_attention_view(model, tokenizer, ATTENTION_TEXT, layer=layer, **opts)
    return draw


def _untrained_attention(**kwargs) -> Callable[[Context], Figure]:
    def draw(ctx: Context) -> Figure:
        from gpt_lesson.widgets import draw_attention_view

        model, tokenizer = ctx.untrained_model()
        return draw_attention_view(model, tokenizer, SAMPLE_TEXT, **kwargs)
    return draw


def _training_curves(ctx: Context) -> Figure:
    from gpt_lesson.viz import plot_loss_curves

    history = ctx.training_history()
    fig, ax = plt.subplots(figsize=(7, 4))
    plot_loss_curves(history, ax=ax, title="Tiny Shakespeare, character level: training and validation loss")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# The registry: one line per figure.

FIGURES: list[FigureSpec] = [
    FigureSpec("attention_steps.png", _attention_steps, about="scores, mask and softmax of one head on six tokens"),
    # The explorers' static views, with the settings of notebooks/explorers.ipynb:
    FigureSpec("explorer_attention.png", _trained_attention(layer=0, head=2, stage="weights", query=20), True,
               "attention explorer: layer 0, head 2 of the trained model, query 20", dpi=100, tight=False),
    FigureSpec("explorer_attention_all_heads.png", _untrained_attention(layer=0, head="all", stage="masked"),
               about="attention explorer: all heads, masked scores (untrained model)", dpi=100, tight=False),
    FigureSpec("explorer_mask.png", _widget_view("draw_mask_view", T=8, mask="causal"),
               about="mask explorer: the causal mask", dpi=100, tight=False),
    FigureSpec("explorer_mask_nan.png", _widget_view("draw_mask_view", T=8, mask="causal+padding", n_real=0),
               about="mask explorer: fully masked rows give NaN", dpi=100, tight=False),
    FigureSpec("explorer_scaling.png", _widget_view("draw_scaling_view", d_k=512, scaling="none"),
               about="scaling explorer: unscaled q.k at d_k=512", dpi=100, tight=False),
    FigureSpec("mask_none_leak.png", _widget_view("draw_mask_view", T=8, mask="none"), about="no mask: the future leaks"),
    FigureSpec("scaling_sqrt.png", _widget_view("draw_scaling_view", d_k=512, scaling="sqrt"), about="the same d_k scaled by 1/sqrt(d_k)"),
    # The trained Shakespeare model (cached checkpoint, or trained first unless --no-train):
    FigureSpec("attention_trained_head.png", _trained_attention(layer=0, head=0, stage="weights"), True, "layer 0, head 0 of the trained model"),
    FigureSpec("attention_trained_heads.png", _trained_attention(layer=-1, head="all", stage="weights"), True, "every head of the last layer"),
    FigureSpec("training_curves.png", _training_curves, True, "train/val loss of the Shakespeare run"),
]


# --------------------------------------------------------------------------------------------
# Benchmark plots


def _load_benchmark_module(path: Path):
    """Import ``benchmarks/NAME.py`` as its own script would run (its folder on sys.path)."""
    spec = importlib.util.spec_from_file_location(f"_gpt_lesson_benchmark_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.path.insert(0, str(path.parent))  # benchmark scripts import their helpers as `from _common import ...`
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    finally:
        sys.path.remove(str(path.parent))
    return module


def _table(data: object) -> list[dict] | None:
    """The first list of records (dicts with at least one number) found in a JSON document."""
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        if any(_is_number(v) for v in data[0].values()):
            return data
    children = data.values() if isinstance(data, dict) else data if isinstance(data, list) else []
    for child in children:
        found = _table(child)
        if found:
            return found
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def plot_benchmark(name: str, data: object) -> Figure:
    """A generic plot of a benchmark's table: the first numeric column on x, the others on y.

    Rows are grouped into lines by the first text column (e.g. ``impl``: naive / sdpa).
    Used when ``benchmarks/NAME.py`` has no ``plot(results) -> Figure`` of its own.
    """
    rows = _table(data)
    if not rows:
        raise FigureSkipped(f"benchmarks/results/{name}.json holds no table of numbers to plot")
    keys = list(rows[0])
    numeric = [k for k in keys if all(_is_number(r.get(k)) for r in rows)]
    text = [k for k in keys if all(isinstance(r.get(k), str) for r in rows)]
    if len(numeric) < 2:
        raise FigureSkipped(f"benchmarks/results/{name}.json: need two numeric columns, found {numeric}")
    x, ys = numeric[0], numeric[1:5]
    group = text[0] if text else None
    fig, axes = plt.subplots(1, len(ys), figsize=(4.2 * len(ys), 3.8), squeeze=False)
    for ax, y in zip(axes[0], ys):
        labels = sorted({r[group] for r in rows}) if group else [None]
        for label in labels:
            sel = sorted((r for r in rows if group is None or r[group] == label), key=lambda r: r[x])
            ax.plot([r[x] for r in sel], [r[y] for r in sel], "o-", markersize=3, label=label)
        values = [r[y] for r in rows if r[y] > 0]
        if values and max(values) / min(values) > 20:
            ax.set_yscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
        if group:
            ax.legend(title=group, fontsize=8)
    fig.suptitle(f"benchmark: {name} (benchmarks/results/{name}.json)")
    fig.tight_layout()
    return fig


def benchmark_figures(benchmarks_dir: Path) -> list[FigureSpec]:
    """One ``benchmark_NAME.png`` per ``benchmarks/results/NAME.json``.

    Drawn by ``plot(results)`` of ``benchmarks/NAME.py`` when it has one (the benchmark's own
    plot), else by :func:`plot_benchmark`.
    """
    specs = []
    for path in sorted((benchmarks_dir / "results").glob("*.json")):
        def draw(ctx: Context, path: Path = path) -> Figure:
            data = json.loads(path.read_text(encoding="utf-8"))
            script = ctx.benchmarks_dir / f"{path.stem}.py"
            if script.is_file():
                plot = getattr(_load_benchmark_module(script), "plot", None)
                if callable(plot):
                    return plot(data)
            return plot_benchmark(path.stem, data)
        specs.append(FigureSpec(f"benchmark_{path.stem}.png", draw, about=f"re-plotted from {path.name}"))
    return specs


def all_figures(ctx: Context) -> list[FigureSpec]:
    """The fixed registry plus one entry per benchmark result file."""
    return FIGURES + benchmark_figures(ctx.benchmarks_dir)


# --------------------------------------------------------------------------------------------


def write_figures(out_dir: str | os.PathLike, specs: list[FigureSpec], ctx: Context,
                  log: Callable[[str], None] = print) -> dict[str, Path | str]:
    """Draw and save each figure into ``out_dir``; returns filename -> path written or skip reason."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    done: dict[str, Path | str] = {}
    for spec in specs:
        start = time.perf_counter()
        try:
            fig = spec.draw(ctx)
        except FigureSkipped as e:
            done[spec.filename] = str(e)
            log(f"skipped {spec.filename}: {e}")
            continue
        if not isinstance(fig, Figure):
            raise TypeError(f"the function for {spec.filename} returned {type(fig).__name__}, not a matplotlib Figure")
        path = out / spec.filename
        fig.savefig(path, dpi=spec.dpi, bbox_inches="tight" if spec.tight else None, metadata={"Software": None})
        plt.close(fig)
        done[spec.filename] = path
        log(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB, {time.perf_counter() - start:.1f} s)")
    return done


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.figures``."""
    parser = argparse.ArgumentParser(prog="python -m tools.figures", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures",
                        help="output folder (default: the repository's figures/)")
    parser.add_argument("--no-train", action="store_true",
                        help="skip the figures of the trained model when no checkpoint is cached")
    parser.add_argument("--only", nargs="+", metavar="FILE", help="draw only these figures (file names)")
    parser.add_argument("--list", action="store_true", help="list the figures and exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    ctx = Context(train=not args.no_train)
    specs = all_figures(ctx)
    if args.list:
        for s in specs:
            print(f"{s.filename:32s} {'(needs the trained model) ' if s.needs_training else ''}{s.about}")
        return 0
    if args.only:
        unknown = set(args.only) - {s.filename for s in specs}
        if unknown:
            parser.error(f"unknown figure(s) {sorted(unknown)}; --list shows the names")
        specs = [s for s in specs if s.filename in args.only]
    start = time.perf_counter()
    done = write_figures(args.out, specs, ctx)
    written = sum(isinstance(v, Path) for v in done.values())
    print(f"{written} figures written, {len(done) - written} skipped, in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
