"""Scaling explorer: why attention divides q.k by sqrt(d_k).

The numbers come from :mod:`gpt_lesson.experiments` (``scale_factor``, ``qk_variance``,
``softmax_stats``), so the explorer shows exactly what the lessons compute.
"""
from __future__ import annotations

import html
import math

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.figure import Figure

from ..validation import check_positive_int
from ..experiments import SCALINGS, qk_variance, scale_factor, softmax_stats
from ._common import Explorer, Painter, check_choice, dynamic_title, one_thread

__all__ = ["SCALINGS", "D_K_GRID", "ScalingData", "scaling_view_data", "ScalingPainter", "draw_scaling_view",
           "ScalingExplorer"]

MAX_D_K = 1024
D_K_GRID = tuple(2 ** i for i in range(11))  # 1, 2, 4, ..., 1024: the slider's stops
SCALING_LABELS = {"none": "none", "sqrt": "1/√d_k", "temperature": "1/(√d_k·τ)"}
SCALING_FIGSIZE = (11.0, 7.0)
TEMPERATURE_RANGE = (0.1, 10.0)


def _check_d_k(d_k: object) -> int:
    check_positive_int("d_k", d_k)
    if d_k > MAX_D_K:  # type: ignore[operator]
        raise ValueError(f"d_k={d_k} is larger than {MAX_D_K}, the largest head size the explorer shows")
    return d_k  # type: ignore[return-value]


class ScalingData:
    """The explorer's measurements, each computed once per setting that it depends on.

    ``n_samples`` random (q, k) pairs with unit-variance entries give the spread of
    q.k; ``T`` random keys give one softmax row. The same ``seed`` is used throughout.
    """

    def __init__(self, n_samples: int = 2000, T: int = 16, seed: int = 0) -> None:
        check_positive_int("n_samples", n_samples)
        check_positive_int("T", T)
        if T < 2:
            raise ValueError(f"T={T} must be at least 2: a softmax over one key is always 1")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"seed={seed!r} must be an integer")
        self.n_samples, self.T, self.seed = n_samples, T, seed
        self._dots: dict[int, torch.Tensor] = {}
        self._variance: dict[tuple[int, float], float] = {}
        self._curves: dict[tuple[str, float], dict] = {}

    def dots(self, d_k: int) -> torch.Tensor:
        """Unscaled q.k of ``n_samples`` pairs: the same draws as ``experiments.qk_variance``."""
        if d_k not in self._dots:
            g = torch.Generator().manual_seed(self.seed)
            q = torch.randn(self.n_samples, d_k, generator=g)
            k = torch.randn(self.n_samples, d_k, generator=g)
            self._dots[d_k] = (q * k).sum(-1)
        return self._dots[d_k]

    def variance(self, d_k: int, scale: float) -> float:
        if (d_k, scale) not in self._variance:
            self._variance[(d_k, scale)] = qk_variance(d_k, self.n_samples, scale, self.seed)
        return self._variance[(d_k, scale)]

    def curves(self, scaling: str, temperature: float) -> dict:
        """Softmax saturation over the d_k grid for one scaling: max weight, entropy, gradient norm."""
        key = (scaling, float(temperature))
        if key not in self._curves:
            rows = [softmax_stats(d, self.T, scale_factor(d, scaling, temperature), self.seed) for d in D_K_GRID]
            self._curves[key] = {
                "d_k": list(D_K_GRID),
                "variance": [d * scale_factor(d, scaling, temperature) ** 2 for d in D_K_GRID],  # theory
                **{name: [r[name] for r in rows] for name in ("max_weight", "entropy", "grad_norm")},
            }
        return self._curves[key]

    def view(self, d_k: int = 64, scaling: str = "sqrt", temperature: float = 1.0) -> dict:
        """Everything the scaling view shows for these settings (the explorer's ``view``)."""
        _check_d_k(d_k)
        check_choice("scaling", scaling, SCALINGS)
        scale = scale_factor(d_k, scaling, temperature)  # checks temperature
        return {
            "d_k": d_k, "scaling": scaling, "temperature": float(temperature), "scale": scale,
            "n_samples": self.n_samples, "T": self.T,
            "samples": self.dots(d_k) * scale,
            "variance": self.variance(d_k, scale),
            "theory_variance": d_k * scale ** 2,
            "softmax": softmax_stats(d_k, self.T, scale, self.seed),
            "curves": self.curves(scaling, temperature),
            "curves_none": self.curves("none", 1.0),
        }


def scaling_view_data(d_k: int = 64, scaling: str = "sqrt", temperature: float = 1.0, *,
                      n_samples: int = 2000, T: int = 16, seed: int = 0) -> dict:
    """The scaling view's data for one setting (see :meth:`ScalingData.view`)."""
    return ScalingData(n_samples, T, seed).view(d_k, scaling, temperature)


def _readout_text(view: dict) -> str:
    s = view["softmax"]
    return (f"variance of scale·q·k: {view['variance']:.2f} (theory {view['theory_variance']:.2f}) · "
            f"softmax of one row: largest weight {s['max_weight']:.3f}, entropy {s['entropy']:.3f} nats "
            f"(uniform ln {view['T']} = {s['uniform_entropy']:.2f}) · softmax gradient size {s['grad_norm']:.4f}")


class ScalingPainter(Painter):
    """Draws the scaling view: spread of the scores, variance vs d_k, one softmax row, saturation vs d_k."""

    figsize = SCALING_FIGSIZE

    def build(self, fig: Figure, view: dict) -> None:
        self.title = fig.suptitle(" ", fontsize=12)
        self.footer = fig.text(0.01, 0.015, "", fontsize=8.5, va="bottom")
        (ax_h, ax_v), (ax_s, ax_e) = fig.subplots(2, 2, gridspec_kw={"left": 0.08, "right": 0.97, "top": 0.89,
                                                                     "bottom": 0.12, "hspace": 0.5, "wspace": 0.28})
        self.ax_h, self.ax_v, self.ax_s, self.ax_e = ax_h, ax_v, ax_s, ax_e
        self.hist = ax_h.stairs(np.zeros(50), np.linspace(-1, 1, 51), fill=True, color="tab:blue", alpha=0.75,
                                label="measured")
        (self.normal,) = ax_h.plot([], [], color="tab:orange", label="normal with the theory's variance")
        ax_h.set_xlabel("score")
        ax_h.set_ylabel("density")
        ax_h.legend(fontsize=8, loc="upper right")

        grid = list(D_K_GRID)
        ax_v.loglog(grid, grid, "--", color="0.6", label="none: variance = d_k")
        (self.var_line,) = ax_v.loglog(grid, grid, color="tab:blue", label="chosen scaling: theory")
        (self.var_point,) = ax_v.loglog([1], [1], "o", color="tab:red", label="measured at this d_k")
        ax_v.set_ylim(5e-3, 2e3)  # fixed, so the axes need no redraw: covers none, sqrt and τ in 0.1..10
        ax_v.set_xlabel("d_k (head size)")
        ax_v.set_ylabel("variance")
        ax_v.grid(alpha=0.3, which="both")
        leg_v = ax_v.legend(fontsize=8, loc="upper left")
        ax_v.set_title("variance of the scores vs d_k", fontsize=10)

        self.bars = ax_s.bar(range(view["T"]), np.zeros(view["T"]), color="tab:blue")
        ax_s.axhline(1 / view["T"], color="0.5", linestyle=":", label=f"uniform 1/{view['T']}")
        ax_s.set_ylim(0, 1)
        ax_s.set_xlabel("key")
        ax_s.set_ylabel("weight")
        leg_s = ax_s.legend(fontsize=8, loc="upper right")
        self.s_title = dynamic_title(ax_s, 10)

        c0 = view["curves_none"]
        ax_e.semilogx(grid, c0["entropy"], "--", color="tab:green", alpha=0.45, base=2, label="entropy, no scaling")
        ax_e.semilogx(grid, c0["grad_norm"], "--", color="tab:purple", alpha=0.45, base=2,
                      label="gradient, no scaling")
        (self.ent_line,) = ax_e.semilogx(grid, grid, "-o", color="tab:green", markersize=3, base=2,
                                         label="entropy (nats)")
        (self.grad_line,) = ax_e.semilogx(grid, grid, "-o", color="tab:purple", markersize=3, base=2,
                                          label="softmax gradient size")
        self.d_k_line = ax_e.axvline(1, color="tab:red", linewidth=1)
        ax_e.set_ylim(0, 1.1 * math.log(view["T"]))
        ax_e.set_xlabel("d_k (head size)")
        ax_e.set_title("saturation: a one-hot softmax passes almost no gradient", fontsize=10)
        ax_e.grid(alpha=0.3)
        leg_e = ax_e.legend(fontsize=7, ncol=2, loc="upper right")
        self.dynamic = [ax_h, self.var_line, self.var_point, leg_v, *self.bars, *ax_s.spines.values(), leg_s,
                        self.s_title, self.ent_line, self.grad_line, self.d_k_line, leg_e, self.title, self.footer]

    def update(self, view: dict) -> None:
        d_k, label = view["d_k"], SCALING_LABELS[view["scaling"]]
        if view["scaling"] == "temperature":
            label += f", τ = {view['temperature']:.3g}"
        self.title.set_text(f"d_k = {d_k}, scaling {label}: scores × {view['scale']:.4g}")
        self.footer.set_text(_readout_text(view))

        x = view["samples"].numpy()
        lo, hi = float(x.min()), float(x.max())
        density, edges = np.histogram(x, bins=50, range=(lo, hi), density=True)
        self.hist.set_data(density, edges)
        sd = math.sqrt(view["theory_variance"])
        grid = np.linspace(lo, hi, 200)
        normal = np.exp(-grid ** 2 / (2 * sd ** 2)) / (sd * math.sqrt(2 * math.pi))
        self.normal.set_data(grid, normal)
        self.ax_h.set_xlim(lo, hi)
        self.ax_h.set_ylim(0, 1.1 * max(float(density.max()), float(normal.max())))
        self.ax_h.set_title(f"scale·q·k of {view['n_samples']} random pairs: variance {view['variance']:.2f}",
                            fontsize=10)

        c = view["curves"]
        self.var_line.set_ydata(c["variance"])
        self.var_point.set_data([d_k], [view["variance"]])
        s = view["softmax"]
        for bar, w in zip(self.bars, s["weights"].tolist()):
            bar.set_height(w)
        self.s_title.set_text(f"softmax of one query's scores: max {s['max_weight']:.2f}, "
                              f"entropy {s['entropy']:.2f} nats")
        self.ent_line.set_ydata(c["entropy"])
        self.grad_line.set_ydata(c["grad_norm"])
        self.d_k_line.set_xdata([d_k, d_k])


def draw_scaling_view(d_k: int = 64, scaling: str = "sqrt", temperature: float = 1.0, *,
                      n_samples: int = 2000, T: int = 16, seed: int = 0, fig: Figure | None = None) -> Figure:
    """The scaling explorer's picture: spread of q.k, one softmax row, saturation vs d_k.

    ``scaling`` is ``"none"``, ``"sqrt"`` (1/sqrt(d_k)) or ``"temperature"``
    (1/(sqrt(d_k)·temperature)), as in :func:`gpt_lesson.experiments.scale_factor`.
    """
    view = scaling_view_data(d_k, scaling, temperature, n_samples=n_samples, T=T, seed=seed)
    return ScalingPainter().draw(view, fig)


class ScalingExplorer(Explorer):
    """Live view of the scaling: d_k slider (log scale), scaling choice and temperature."""

    css_class = "gpt-lesson-scaling-explorer"

    def __init__(self, d_k: int = 64, scaling: str = "sqrt", *, temperature: float = 1.0,
                 n_samples: int = 2000, T: int = 16, seed: int = 0) -> None:
        self.data = ScalingData(n_samples, T, seed)
        self.view = self.data.view(d_k, scaling, temperature)  # validates before any widget exists
        lo, hi = TEMPERATURE_RANGE
        if not lo <= temperature <= hi:
            raise ValueError(f"temperature={temperature} is outside the slider's range {lo}..{hi}")
        self.painter = ScalingPainter()
        super().__init__()
        self.d_k = widgets.SelectionSlider(options=sorted(set(D_K_GRID) | {d_k}), value=d_k, description="d_k")
        self.scaling = widgets.ToggleButtons(options=[(SCALING_LABELS[s], s) for s in SCALINGS], value=scaling,
                                             description="scaling")
        self.temperature = widgets.FloatLogSlider(value=temperature, base=10, min=math.log10(lo), max=math.log10(hi),
                                                  step=0.05, description="τ")
        self.readout = widgets.HTML(value="")
        for w in (self.d_k, self.scaling, self.temperature):
            w.observe(self._on_change, names="value")
        self._finish([self.d_k, self.scaling, self.temperature, self.readout])
        self._update()

    def _on_change(self, change: dict) -> None:
        if not self._holding:
            self._update()

    def _update(self) -> None:
        self.temperature.disabled = self.scaling.value != "temperature"
        with one_thread():
            self.view = self.data.view(self.d_k.value, self.scaling.value, self.temperature.value)
        self.readout.value = html.escape(_readout_text(self.view))
        self.redraw()
