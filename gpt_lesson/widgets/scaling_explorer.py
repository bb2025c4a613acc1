"""Scaling explorer: why attention divides q.k by sqrt(d_k).

The numbers come from :mod:`gpt_lesson.experiments` (``scale_factor``, ``qk_variance``,
``softmax_stats``), so the explorer shows exactly what the lessons compute. Python draws the
random samples of every d_k stop once and sends their summary (variance, histogram counts, one
row of scores); the browser (``static/scaling.mjs``) applies the scaling and the softmax itself.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import traitlets
from matplotlib.figure import Figure

from ..experiments import SCALINGS, qk_variance, scale_factor, softmax_stats
from ..validation import check_positive_int
from ._common import CSS, ExplorerWidget, Painter, check_choice, dynamic_title, esm, one_thread
from .labels import label

__all__ = ["SCALINGS", "D_K_GRID", "ScalingData", "scaling_view_data", "readout_lines", "ScalingPainter",
           "draw_scaling_view", "ScalingExplorer"]

MAX_D_K = 1024
D_K_GRID = tuple(2 ** i for i in range(11))  # 1, 2, 4, ..., 1024: the slider's stops
SCALING_FIGSIZE = (11.0, 7.0)
TEMPERATURE_RANGE = (0.1, 10.0)
BINS = 50


def _check_d_k(d_k: object) -> int:
    check_positive_int("d_k", d_k)
    if d_k > MAX_D_K:  # type: ignore[operator]
        raise ValueError(f"d_k={d_k} is larger than {MAX_D_K}, the largest head size the explorer shows")
    return d_k  # type: ignore[return-value]


def _check_temperature(temperature: object) -> float:
    scale_factor(1, "temperature", temperature)  # type and sign checks
    lo, hi = TEMPERATURE_RANGE
    if not lo <= temperature <= hi:  # type: ignore[operator]
        raise ValueError(f"temperature={temperature} is outside the slider's range {lo}..{hi}")
    return float(temperature)  # type: ignore[arg-type]


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
        self._summary: dict[int, dict] = {}

    def dots(self, d_k: int) -> torch.Tensor:
        """Unscaled q.k of ``n_samples`` pairs: the same draws as ``experiments.qk_variance``."""
        if d_k not in self._dots:
            g = torch.Generator().manual_seed(self.seed)
            q = torch.randn(self.n_samples, d_k, generator=g)
            k = torch.randn(self.n_samples, d_k, generator=g)
            self._dots[d_k] = (q * k).sum(-1)
        return self._dots[d_k]

    def summary(self, d_k: int) -> dict:
        """What the browser needs of one d_k: variance and histogram of the unscaled q.k, one row of scores.

        Scaling by a positive factor multiplies every sample, so the histogram of the scaled scores
        is these counts on scaled bin edges, and the variance scales by factor².
        """
        if d_k not in self._summary:
            dots = self.dots(d_k)
            lo, hi = float(dots.min()), float(dots.max())
            counts, _ = np.histogram(dots.numpy(), bins=BINS, range=(lo, hi))
            g = torch.Generator().manual_seed(self.seed)  # the draws of experiments.softmax_stats
            q = torch.randn(1, d_k, generator=g)
            k = torch.randn(self.T, d_k, generator=g)
            row = (q @ k.transpose(-2, -1))[0]  # the unscaled scores of one query over T keys
            self._summary[d_k] = {"var_raw": float(dots.var()), "lo": lo, "hi": hi,
                                  "counts": counts.tolist(), "row": row.tolist()}
        return self._summary[d_k]

    def histogram(self, d_k: int, scale: float) -> dict:
        """Bin edges and densities of ``scale * q.k`` (the same numbers the browser draws)."""
        s = self.summary(d_k)
        lo, width = s["lo"] * scale, (s["hi"] - s["lo"]) * scale / BINS
        edges = lo + width * np.arange(BINS + 1)
        return {"edges": edges, "density": np.asarray(s["counts"]) / (self.n_samples * width)}

    def payload(self, stops: list[int]) -> dict:
        """Everything the browser needs for the d_k ``stops`` (which include the whole grid)."""
        with one_thread():
            rows = [self.summary(d) for d in stops]
        return {"stops": list(stops), "grid": list(D_K_GRID), "n_samples": self.n_samples, "T": self.T,
                **{name: [r[name] for r in rows] for name in ("var_raw", "lo", "hi", "counts")},
                "rows": [r["row"] for r in rows]}

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
            "histogram": self.histogram(d_k, scale),
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


def readout_lines(view: dict) -> list[str]:
    """The read-out line under the explorer, from Python's numbers (the browser writes the same)."""
    s = view["softmax"]
    return [label("scaling", "scaling_readout", v=view["variance"], t=view["theory_variance"], m=s["max_weight"],
                  h=s["entropy"], T=view["T"], u=s["uniform_entropy"], g=s["grad_norm"])]


def _scaling_label(view: dict) -> str:
    text = label("scaling", "scaling_" + view["scaling"])
    if view["scaling"] == "temperature":
        text += label("scaling", "tau_suffix", t=view["temperature"])
    return text


class ScalingPainter(Painter):
    """Draws the scaling view: spread of the scores, variance vs d_k, one softmax row, saturation vs d_k."""

    figsize = SCALING_FIGSIZE

    def build(self, fig: Figure, view: dict) -> None:
        L = lambda key, **f: label("scaling", key, **f)  # noqa: E731
        self.title = fig.suptitle(" ", fontsize=12)
        self.footer = fig.text(0.01, 0.012, "", fontsize=8.5, va="bottom", wrap=True)
        (ax_h, ax_v), (ax_s, ax_e) = fig.subplots(2, 2, gridspec_kw={"left": 0.08, "right": 0.97, "top": 0.89,
                                                                     "bottom": 0.12, "hspace": 0.55, "wspace": 0.28})
        self.ax_h, self.ax_v, self.ax_s, self.ax_e = ax_h, ax_v, ax_s, ax_e
        self.hist = ax_h.stairs(np.zeros(BINS), np.linspace(-1, 1, BINS + 1), fill=True, color="tab:blue", alpha=0.75,
                                label=L("legend_measured"))
        (self.normal,) = ax_h.plot([], [], color="tab:orange", label=L("legend_normal"))
        ax_h.set_xlabel(L("axis_score"))
        ax_h.set_ylabel(L("axis_density"))
        ax_h.legend(fontsize=8, loc="upper right")

        grid = list(D_K_GRID)
        ax_v.loglog(grid, grid, "--", color="0.6", label=L("legend_none_variance"))
        (self.var_line,) = ax_v.loglog(grid, grid, color="tab:blue", label=L("legend_theory"))
        (self.var_point,) = ax_v.loglog([1], [1], "o", color="tab:red", label=L("legend_measured_point"))
        ax_v.set_ylim(5e-3, 2e3)  # covers none, sqrt and τ in 0.1..10
        ax_v.set_xlabel(L("axis_d_k"))
        ax_v.set_ylabel(L("axis_variance"))
        ax_v.grid(alpha=0.3, which="both")
        ax_v.legend(fontsize=8, loc="upper left")
        ax_v.set_title(L("variance_title"), fontsize=10)

        self.bars = ax_s.bar(range(view["T"]), np.zeros(view["T"]), color="tab:blue")
        ax_s.axhline(1 / view["T"], color="0.5", linestyle=":", label=L("legend_uniform", T=view["T"]))
        ax_s.set_ylim(0, 1)
        ax_s.set_xlabel(L("axis_key"))
        ax_s.set_ylabel(L("weight"))
        ax_s.legend(fontsize=8, loc="upper right")
        self.s_title = dynamic_title(ax_s, 10)

        c0 = view["curves_none"]
        ax_e.semilogx(grid, c0["entropy"], "--", color="tab:green", alpha=0.45, base=2)
        ax_e.semilogx(grid, c0["grad_norm"], "--", color="tab:purple", alpha=0.45, base=2,
                      label=L("legend_no_scaling"))
        (self.ent_line,) = ax_e.semilogx(grid, grid, "-o", color="tab:green", markersize=3, base=2,
                                         label=L("legend_entropy"))
        (self.grad_line,) = ax_e.semilogx(grid, grid, "-o", color="tab:purple", markersize=3, base=2,
                                          label=L("legend_gradient"))
        self.d_k_line = ax_e.axvline(1, color="tab:red", linewidth=1)
        ax_e.set_ylim(0, 1.1 * math.log(view["T"]))
        ax_e.set_xlabel(L("axis_d_k"))
        ax_e.set_title(L("saturation_title"), fontsize=10)
        ax_e.grid(alpha=0.3)
        ax_e.legend(fontsize=7, ncol=3, loc="lower left", bbox_to_anchor=(0.0, -0.42), frameon=False)

    def update(self, view: dict) -> None:
        L = lambda key, **f: label("scaling", key, **f)  # noqa: E731
        d_k = view["d_k"]
        self.title.set_text(L("scaling_title", d_k=d_k, label=_scaling_label(view), scale=view["scale"]))
        self.footer.set_text(readout_lines(view)[0])
        hist = view["histogram"]
        edges, density = hist["edges"], hist["density"]
        lo, hi = float(edges[0]), float(edges[-1])
        self.hist.set_data(density, edges)
        sd = math.sqrt(view["theory_variance"])
        grid = np.linspace(lo, hi, 200)
        normal = np.exp(-grid ** 2 / (2 * sd ** 2)) / (sd * math.sqrt(2 * math.pi))
        self.normal.set_data(grid, normal)
        self.ax_h.set_xlim(lo, hi)
        self.ax_h.set_ylim(0, 1.1 * max(float(density.max()), float(normal.max())))
        self.ax_h.set_title(L("hist_title", n=view["n_samples"], v=view["variance"]), fontsize=10)
        c = view["curves"]
        self.var_line.set_ydata(c["variance"])
        self.var_point.set_data([d_k], [view["variance"]])
        s = view["softmax"]
        for bar, w in zip(self.bars, s["weights"].tolist()):
            bar.set_height(w)
        self.s_title.set_text(L("row_softmax_title", m=s["max_weight"], h=s["entropy"]))
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


class ScalingExplorer(ExplorerWidget):
    """Live view of the scaling: ``d_k`` (a slider over powers of two), ``scaling`` and ``temperature``.

    The three are traits, settable from Python too; ``view`` holds what Python computed for them.
    """

    kind = "scaling"
    painter = ScalingPainter
    _controls = ("d_k", "scaling", "temperature")
    _esm = esm("scaling")
    _css = CSS

    d_k = traitlets.Int(64).tag(sync=True)
    scaling = traitlets.Unicode("sqrt").tag(sync=True)
    temperature = traitlets.Float(1.0).tag(sync=True)

    def __init__(self, d_k: int = 64, scaling: str = "sqrt", *, temperature: float = 1.0,
                 n_samples: int = 2000, T: int = 16, seed: int = 0) -> None:
        self.data = ScalingData(n_samples, T, seed)
        self.view = self.data.view(d_k, scaling, temperature)  # validates before any widget exists
        _check_temperature(temperature)
        self.stops = sorted(set(D_K_GRID) | {d_k})
        self._ready = False
        super().__init__(d_k=d_k, scaling=scaling, temperature=float(temperature), payload=self.data.payload(self.stops))
        self._ready = True

    @traitlets.validate("d_k")
    def _valid_d_k(self, proposal):
        d_k = _check_d_k(proposal["value"])
        if d_k not in self.stops:
            raise ValueError(f"d_k={d_k} is not one of the slider's stops {tuple(self.stops)}")
        return d_k

    @traitlets.validate("scaling")
    def _valid_scaling(self, proposal):
        return check_choice("scaling", proposal["value"], SCALINGS)

    @traitlets.validate("temperature")
    def _valid_temperature(self, proposal):
        return _check_temperature(proposal["value"])

    @traitlets.observe("d_k", "scaling", "temperature")
    def _on_control(self, change) -> None:
        if self._ready:
            with one_thread():
                self.view = self.data.view(self.d_k, self.scaling, self.temperature)

    @property
    def temperature_enabled(self) -> bool:
        """The temperature slider acts only with the ``"temperature"`` scaling."""
        return self.scaling == "temperature"

    @property
    def readout(self) -> str:
        """The read-out line the explorer shows under the picture, as Python computes it."""
        return readout_lines(self.view)[0]
