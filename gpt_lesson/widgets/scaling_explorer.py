"""Scaling explorer: why attention divides q.k by sqrt(d_k).

Every number is computed here, with :mod:`gpt_lesson.experiments` and :mod:`gpt_lesson.attention`:
:class:`ScalingData` draws the random samples of every d_k stop once and measures, for each setting
of the controls (no scaling, 1/sqrt(d_k), 1/(sqrt(d_k)·τ) for each τ of the slider), the variance and
histogram of the scores, one query's softmax (``experiments.softmax_stats``) and the softmax's largest
weight, entropy and gradient size averaged over many queries (the draws of ``softmax_stats`` with
seeds 0, 1, ..., as lesson 04 averages them). The browser (``js/src/scaling.mjs``) looks them up,
formats the read-outs and draws.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import traitlets
from matplotlib.figure import Figure

from ..attention import attention_scores, attention_weights
from ..experiments import SCALINGS, scale_factor, softmax_stats
from ..validation import check_choice, check_positive_int
from ._common import CSS, ExplorerWidget, Painter, dynamic_title, esm, one_thread, pack_tensor, row_entropy, wrap_label
from .labels import label

__all__ = ["SCALINGS", "D_K_GRID", "TAUS", "ScalingData", "scaling_view_data", "ScalingPainter", "draw_scaling_view",
           "ScalingExplorer"]

MAX_D_K = 1024
D_K_GRID = tuple(2 ** i for i in range(11))  # 1, 2, 4, ..., 1024: the slider's stops
TEMPERATURE_RANGE = (0.1, 10.0)
TAUS = tuple(round(10 ** (n / 20), 6) for n in range(-20, 21))  # the τ slider: 0.1 .. 10, 20 steps a decade
SCALING_FIGSIZE = (11.0, 7.0)
BINS = 50
NORMAL_POINTS = 101
FIELDS = ("scale", "variance", "theory", "lo", "hi", "max_weight", "entropy", "grad_norm",
          "mean_max_weight", "mean_entropy", "mean_grad_norm")


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


def _setting_name(scaling: str, temperature: float) -> str:
    return f"temperature@{temperature:g}" if scaling == "temperature" else scaling


class ScalingData:
    """The explorer's measurements, each computed once.

    ``n_samples`` random (q, k) pairs with unit-variance entries give the spread of q.k (the draws of
    ``experiments.qk_variance``); ``n_rows`` queries, each with ``T`` random keys, give the softmax
    statistics (query r is the draw of ``softmax_stats(seed=seed + r)``; query 0 is the one drawn).
    """

    def __init__(self, n_samples: int = 2000, T: int = 16, seed: int = 0, n_rows: int = 200) -> None:
        check_positive_int("n_samples", n_samples)
        check_positive_int("T", T)
        check_positive_int("n_rows", n_rows)
        if T < 2:
            raise ValueError(f"T={T} must be at least 2: a softmax over one key is always 1")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"seed={seed!r} must be an integer")
        self.n_samples, self.T, self.seed, self.n_rows = n_samples, T, seed, n_rows
        self._stop: dict[int, dict] = {}
        self._table: dict[tuple[int, str], dict] = {}

    def stop(self, d_k: int) -> dict:
        """What does not depend on the scaling at one d_k: the unscaled q.k samples, their histogram
        and variance, and the unscaled scores of the ``n_rows`` queries over their T keys."""
        if d_k not in self._stop:
            g = torch.Generator().manual_seed(self.seed)
            q = torch.randn(self.n_samples, d_k, generator=g)
            k = torch.randn(self.n_samples, d_k, generator=g)
            dots = (q * k).sum(-1)
            lo, hi = float(dots.min()), float(dots.max())
            counts, _ = np.histogram(dots.numpy(), bins=BINS, range=(lo, hi))
            # the theory's normal density (variance d_k) in counts per bin, at NORMAL_POINTS points over [lo, hi]:
            # in these units it is the same curve for every positive scaling of the scores
            xs = np.linspace(lo, hi, NORMAL_POINTS)
            normal = self.n_samples * (hi - lo) / BINS * np.exp(-xs ** 2 / (2 * d_k)) / math.sqrt(2 * math.pi * d_k)
            rows = []
            for r in range(self.n_rows):  # the draws of softmax_stats(d_k, T, scale, seed + r)
                gr = torch.Generator().manual_seed(self.seed + r)
                qr = torch.randn(1, d_k, generator=gr)
                kr = torch.randn(self.T, d_k, generator=gr)
                rows.append(attention_scores(qr, kr, scale=1.0)[0])
            self._stop[d_k] = {"dots": dots, "var_raw": float(dots.var()), "lo": lo, "hi": hi, "counts": counts,
                               "normal": normal, "rows": torch.stack(rows)}
        return self._stop[d_k]

    def measure(self, d_k: int, scaling: str, temperature: float = 1.0) -> dict:
        """Every number of one (d_k, setting): see FIELDS; ``weights`` is query 0's softmax."""
        key = (d_k, _setting_name(scaling, temperature))
        if key not in self._table:
            scale = scale_factor(d_k, scaling, temperature)
            st = self.stop(d_k)
            p = attention_weights(st["rows"] * scale)  # (n_rows, T)
            jac = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
            grad = torch.linalg.matrix_norm(jac)  # (n_rows,) as softmax_stats computes it
            first = softmax_stats(d_k, self.T, scale, self.seed)
            self._table[key] = {
                "scale": scale, "variance": st["var_raw"] * scale ** 2, "theory": d_k * scale ** 2,
                "lo": st["lo"] * scale, "hi": st["hi"] * scale,
                "max_weight": first["max_weight"], "entropy": first["entropy"], "grad_norm": first["grad_norm"],
                "mean_max_weight": float(p.amax(-1).mean()), "mean_entropy": float(row_entropy(p).mean()),
                "mean_grad_norm": float(grad.mean()), "weights": first["weights"],
            }
        return self._table[key]

    def settings(self, temperature: float = 1.0) -> list[tuple[str, float]]:
        """The settings the controls reach: none, sqrt, and the temperature at every τ of the slider
        (and at ``temperature`` if it is not one of them)."""
        taus = sorted(set(TAUS) | {float(temperature)})
        return [("none", 1.0), ("sqrt", 1.0)] + [("temperature", t) for t in taus]

    def payload(self, stops: list[int], temperature: float = 1.0) -> dict:
        """Everything the browser needs for the d_k ``stops`` (which include the whole grid)."""
        settings = self.settings(temperature)
        with one_thread():
            cells = [[self.measure(d, s, t) for s, t in settings] for d in stops]
            table = torch.tensor([[[c[f] for f in FIELDS] for c in row] for row in cells], dtype=torch.float32)
            weights = torch.stack([torch.stack([c["weights"] for c in row]) for row in cells])  # (stops, settings, T)
            counts = np.stack([self.stop(d)["counts"] for d in stops]).astype(np.float32)
            normal = np.stack([self.stop(d)["normal"] for d in stops]).astype(np.float32)
        return {"stops": list(stops), "grid": list(D_K_GRID), "n_samples": self.n_samples, "T": self.T,
                "n_rows": self.n_rows, "uniform_entropy": math.log(self.T), "bins": BINS, "normal_points": NORMAL_POINTS,
                "settings": [_setting_name(s, t) for s, t in settings], "taus": [t for _, t in settings],
                "fields": list(FIELDS), "table": table.numpy().tobytes(), "rows": pack_tensor(weights, "int16"),
                "counts": counts.tobytes(), "normal": normal.tobytes()}

    def view(self, d_k: int = 64, scaling: str = "sqrt", temperature: float = 1.0) -> dict:
        """Everything the scaling view shows for these settings (the explorer's ``view``)."""
        _check_d_k(d_k)
        check_choice("scaling", scaling, SCALINGS)
        scale_factor(d_k, scaling, temperature)  # checks temperature
        with one_thread():
            m = self.measure(d_k, scaling, temperature)
            curves = [self.measure(d, scaling, temperature) for d in D_K_GRID]
            none = [self.measure(d, "none") for d in D_K_GRID]
            st = self.stop(d_k)
        edges = np.linspace(m["lo"], m["hi"], BINS + 1)
        pick = lambda rows, f: [r[f] for r in rows]  # noqa: E731
        return {
            "d_k": d_k, "scaling": scaling, "temperature": float(temperature), "scale": m["scale"],
            "n_samples": self.n_samples, "T": self.T, "n_rows": self.n_rows,
            "samples": st["dots"] * m["scale"], "histogram": {"edges": edges, "counts": st["counts"],
                                                              "normal": st["normal"]},
            "variance": m["variance"], "theory_variance": m["theory"],
            "softmax": {"weights": m["weights"], "max_weight": m["max_weight"], "entropy": m["entropy"],
                        "grad_norm": m["grad_norm"], "uniform_entropy": math.log(self.T)},
            "mean": {"max_weight": m["mean_max_weight"], "entropy": m["mean_entropy"], "grad_norm": m["mean_grad_norm"]},
            "curves": {"d_k": list(D_K_GRID), "variance": pick(curves, "theory"),
                       **{f: pick(curves, "mean_" + f) for f in ("max_weight", "entropy", "grad_norm")}},
            "curves_none": {"d_k": list(D_K_GRID), "variance": pick(none, "theory"),
                            **{f: pick(none, "mean_" + f) for f in ("max_weight", "entropy", "grad_norm")}},
        }


def scaling_view_data(d_k: int = 64, scaling: str = "sqrt", temperature: float = 1.0, *,
                      n_samples: int = 2000, T: int = 16, seed: int = 0, n_rows: int = 200) -> dict:
    """The scaling view's data for one setting (see :meth:`ScalingData.view`)."""
    return ScalingData(n_samples, T, seed, n_rows).view(d_k, scaling, temperature)


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
        (ax_h, ax_v), (ax_s, ax_e) = fig.subplots(2, 2, gridspec_kw={"left": 0.08, "right": 0.97, "top": 0.89,
                                                                     "bottom": 0.12, "hspace": 0.55, "wspace": 0.28})
        self.ax_h, self.ax_v, self.ax_s, self.ax_e = ax_h, ax_v, ax_s, ax_e
        self.hist = ax_h.stairs(np.zeros(BINS), np.linspace(-1, 1, BINS + 1), fill=True, color="#2166ac", alpha=0.75,
                                label=L("legend_measured"))
        (self.normal,) = ax_h.plot([], [], color="black", label=L("legend_normal"))
        ax_h.set_xlabel(L("axis_score"))
        ax_h.set_ylabel(L("axis_count"))
        ax_h.legend(fontsize=8, loc="upper right")

        grid = list(D_K_GRID)
        ax_v.loglog(grid, grid, "--", color="0.6", label=L("legend_none_variance"))
        (self.var_line,) = ax_v.loglog(grid, grid, color="#2166ac", label=L("legend_theory"))
        (self.var_point,) = ax_v.loglog([1], [1], "o", color="black", markerfacecolor="white", markeredgewidth=2,
                                        label=L("legend_measured_point"))
        ax_v.set_ylim(5e-3, 2e3)  # covers none, sqrt and τ in 0.1..10
        ax_v.set_xlabel(L("axis_d_k"))
        ax_v.set_ylabel(L("axis_variance"))
        ax_v.grid(alpha=0.3, which="both")
        ax_v.legend(fontsize=8, loc="upper left")
        ax_v.set_title(L("variance_title"), fontsize=10)

        self.bars = ax_s.bar(range(view["T"]), np.zeros(view["T"]), color="#2166ac")
        ax_s.axhline(1 / view["T"], color="0.5", linestyle=":", label=L("legend_uniform", T=view["T"]))
        ax_s.set_ylim(0, 1)
        ax_s.set_xlabel(L("axis_key"))
        ax_s.set_ylabel(L("weight"))
        ax_s.legend(fontsize=8, loc="upper right")
        self.s_title = dynamic_title(ax_s, 10)

        c0 = view["curves_none"]
        ax_e.semilogx(grid, c0["entropy"], "--", color="#1b7837", alpha=0.45, base=2)
        ax_e.semilogx(grid, c0["grad_norm"], "--", color="#762a83", alpha=0.45, base=2,
                      label=L("legend_no_scaling"))
        (self.ent_line,) = ax_e.semilogx(grid, grid, "-o", color="#1b7837", markersize=3, base=2,
                                         label=L("legend_entropy"))
        (self.grad_line,) = ax_e.semilogx(grid, grid, "-s", color="#762a83", markersize=3, base=2,
                                          label=L("legend_gradient"))
        self.d_k_line = ax_e.axvline(1, color="black", linewidth=1.5, linestyle="--")
        ax_e.set_ylim(0, 1.1 * math.log(view["T"]))
        ax_e.set_xlabel(L("axis_d_k"))
        ax_e.set_title("\n".join(wrap_label(L("saturation_title", n=view["n_rows"]), 50)), fontsize=10)
        ax_e.grid(alpha=0.3)
        ax_e.legend(fontsize=7, ncol=3, loc="lower left", bbox_to_anchor=(0.0, -0.42), frameon=False)

    def update(self, view: dict) -> None:
        L = lambda key, **f: label("scaling", key, **f)  # noqa: E731
        d_k = view["d_k"]
        self.title.set_text(L("scaling_title", d_k=d_k, label=_scaling_label(view), scale=view["scale"]))
        hist = view["histogram"]
        edges, counts, normal = hist["edges"], hist["counts"], hist["normal"]
        lo, hi = float(edges[0]), float(edges[-1])
        self.hist.set_data(counts, edges)
        self.normal.set_data(np.linspace(lo, hi, len(normal)), normal)
        self.ax_h.set_xlim(lo, hi)
        self.ax_h.set_ylim(0, 1.1 * max(float(counts.max()), float(normal.max())))
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
        payload = self.data.payload(self.stops, float(temperature))
        super().__init__(d_k=d_k, scaling=scaling, temperature=float(temperature), payload=payload)
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
        if not self._ready:
            return
        if self.temperature not in self.payload["taus"]:  # a τ set from Python, between the slider's stops
            self.payload = self.data.payload(self.stops, self.temperature)
        with one_thread():
            self.view = self.data.view(self.d_k, self.scaling, self.temperature)

    @property
    def temperature_enabled(self) -> bool:
        """The temperature slider acts only with the ``"temperature"`` scaling."""
        return self.scaling == "temperature"
