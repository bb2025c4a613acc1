"""Matplotlib helpers shared by lessons, explorers and the figure builder."""
from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.collections import PatchCollection
from matplotlib.patches import Patch, Rectangle

from .i18n import _

__all__ = ["token_labels", "plot_attention", "shade_masked", "plot_loss_curves"]


def _as_numpy(x: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().float().numpy()
    return np.asarray(x, dtype=float)


def token_labels(tokens: Sequence[str]) -> list[str]:
    """Readable axis labels: spaces and newlines made visible, position numbers added."""
    shown = {" ": "␣", "\n": "⏎", "\t": "⇥"}
    return [f"{shown.get(t, t)}" for t in tokens]


def shade_masked(ax: plt.Axes, mask: torch.Tensor | np.ndarray, label: str | None = None) -> None:
    """Cover the cells where ``mask == 0`` with a grey hatched patch and add a legend entry (``label``,
    by default "masked (future)" in the current language)."""
    label = _("masked (future)") if label is None else label
    m = _as_numpy(mask) == 0
    rects = []
    for i, row in enumerate(m):
        j = 0
        while j < len(row):  # one rectangle per run of masked cells in the row
            if row[j]:
                start = j
                while j < len(row) and row[j]:
                    j += 1
                rects.append(Rectangle((start - 0.5, i - 0.5), j - start, 1))
            else:
                j += 1
    if rects:
        ax.add_collection(PatchCollection(rects, facecolor="0.85", edgecolor="0.55", hatch="///", linewidth=0))
        ax.legend(handles=[Patch(facecolor="0.85", edgecolor="0.55", hatch="///", label=label)],
                  loc="upper right", fontsize=8, framealpha=0.9)


def plot_attention(
    values: torch.Tensor | np.ndarray,
    tokens: Sequence[str] | None = None,
    ax: plt.Axes | None = None,
    mask: torch.Tensor | np.ndarray | None = None,
    title: str | None = None,
    signed: bool | None = None,
    colorbar: bool = True,
    annotate: bool | None = None,
) -> plt.Axes:
    """Heatmap of a (T_q, T_k) matrix with query rows and key columns.

    ``signed`` scores (before the softmax) use the diverging ``RdBu_r`` map centred at 0;
    weights use ``viridis`` on 0..1. By default ``signed`` is guessed from the data.
    Cells where ``mask == 0`` are shaded and labelled. Small matrices get their numbers
    written in the cells.
    """
    data = _as_numpy(values)
    if data.ndim != 2:
        raise ValueError(f"plot_attention takes a 2-D (T_q, T_k) matrix, got shape {data.shape}")
    if ax is None:
        _fig, ax = plt.subplots(figsize=(4.5, 4))
    finite = data[np.isfinite(data)]
    if signed is None:
        signed = bool(finite.size and (finite.min() < 0 or finite.max() > 1))
    shown = np.where(np.isfinite(data), data, np.nan)
    if signed:
        lim = float(np.abs(finite).max()) if finite.size else 1.0
        im = ax.imshow(shown, cmap="RdBu_r", vmin=-lim or -1, vmax=lim or 1)
    else:
        im = ax.imshow(shown, cmap="viridis", vmin=0.0, vmax=1.0)
    if mask is not None:
        shade_masked(ax, mask)
    Tq, Tk = data.shape
    if tokens is not None:
        labels = token_labels(tokens)
        if len(labels) >= max(Tq, Tk):
            ax.set_xticks(range(Tk), labels[:Tk], fontsize=7 if Tk > 16 else 9)
            ax.set_yticks(range(Tq), labels[:Tq], fontsize=7 if Tq > 16 else 9)
    if annotate is None:
        annotate = max(Tq, Tk) <= 8
    if annotate:
        for i in range(Tq):
            for j in range(Tk):
                if np.isfinite(data[i, j]) and (mask is None or _as_numpy(mask)[i, j] != 0):
                    ax.text(j, i, f"{data[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if (not signed and data[i, j] < 0.5) else "black")
    ax.set_xlabel(_("key (attended-to position)"))
    ax.set_ylabel(_("query (attending position)"))
    if title:
        ax.set_title(title, fontsize=10)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label=_("score") if signed else _("weight"))
    return ax


def plot_loss_curves(history, ax: plt.Axes | None = None, title: str | None = None) -> plt.Axes:
    """Per-step training loss (faint) and the periodic train/val estimates (lines with markers), titled
    ``title`` (by default "Training and validation loss" in the current language).

    ``history`` is a :class:`gpt_lesson.training.History` or its ``to_dict()``.
    """
    h = history if isinstance(history, dict) else history.to_dict()
    if ax is None:
        _fig, ax = plt.subplots(figsize=(6, 3.5))
    if h.get("loss"):
        ax.plot(h["step"], h["loss"], color="0.75", linewidth=0.8, label=_("train (per step)"))
    ax.plot(h["eval_step"], h["train"], "o-", color="tab:blue", markersize=3, label=_("train (estimate)"))
    ax.plot(h["eval_step"], h["val"], "s-", color="tab:orange", markersize=3, label=_("validation (estimate)"))
    ax.set_xlabel(_("optimizer step"))
    ax.set_ylabel(_("cross-entropy loss (nats)"))
    ax.set_title(_("Training and validation loss") if title is None else title)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax
