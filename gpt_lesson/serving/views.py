"""Pictures of a paged cache and of a serving run (matplotlib).

:func:`plot_block_tables` draws each sequence's block table (its logical blocks, with the physical
block each one maps to) above the pool (the physical blocks, coloured by the sequence that holds them);
:func:`plot_timeline` draws when each request waited and ran.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING

from matplotlib.patches import Patch, Rectangle

from ..i18n import _
from .paged_cache import CacheSnapshot, PagedKVCache
from .scheduler import Finished

if TYPE_CHECKING:  # pyplot is imported when a picture is drawn: importing the package leaves the backend alone
    import matplotlib.pyplot as plt

__all__ = ["SEQUENCE_COLOURS", "plot_block_tables", "plot_timeline"]

# Okabe and Ito's colour-blind-safe palette (without black, kept for text).
SEQUENCE_COLOURS = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
_FREE, _EDGE = "#f2f2f2", "#555555"


def _colour(i: int) -> str:
    return SEQUENCE_COLOURS[i % len(SEQUENCE_COLOURS)]


def _block(ax: plt.Axes, x: float, y: float, filled: int, tpb: int, colour: str, label: str) -> None:
    """One block of ``tpb`` positions at (x, y), width 1: ``filled`` of them coloured, the rest hatched (held, empty)."""
    w = 1 / tpb
    for i in range(tpb):
        used = i < filled
        ax.add_patch(Rectangle((x + i * w, y), w, 0.8, facecolor=colour if used else "white",
                               edgecolor=colour if not used else "white", hatch=None if used else "///",
                               linewidth=0.5))
    ax.add_patch(Rectangle((x, y), 1, 0.8, fill=False, edgecolor=_EDGE, linewidth=1.2))
    ax.text(x + 0.5, y + 0.4, label, ha="center", va="center", fontsize=8,
            bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.8))


def plot_block_tables(cache: PagedKVCache | CacheSnapshot, names: Mapping[Hashable, str] | None = None,
                      title: str | None = None, axes: Sequence[plt.Axes] | None = None) -> list[plt.Axes]:
    """Each sequence's block table (top) and the physical pool it points into (bottom).

    In the top panel, row ``s`` shows sequence ``s``'s logical blocks 0, 1, ... each labelled with the
    physical block it maps to; in the bottom panel, block ``b`` of the pool shows which sequence's
    logical block it holds (``A.1``: logical block 1 of A). Coloured cells hold a key and value, hatched
    ones are held but still empty (the waste), grey blocks are free.
    """
    snap = cache.snapshot() if isinstance(cache, PagedKVCache) else cache
    if not isinstance(snap, CacheSnapshot):
        raise TypeError(f"cache must be a PagedKVCache or a CacheSnapshot, got {type(cache).__name__}")
    tpb, seqs = snap.tokens_per_block, list(snap.tables)
    names = {s: str(s) for s in seqs} | dict(names or {})
    if axes is None:
        import matplotlib.pyplot as plt

        longest = max((len(t) for t in snap.tables.values()), default=1)
        width = max(6.0, 0.62 * max(snap.num_blocks, longest) + 1.5)
        _fig, axes = plt.subplots(2, 1, figsize=(width, 1.2 + 0.45 * (len(seqs) + 2)),
                               gridspec_kw={"height_ratios": [max(len(seqs), 1), 1.4]})
    top, bottom = axes
    colours = {s: _colour(i) for i, s in enumerate(seqs)}
    for row, s in enumerate(seqs):
        y = len(seqs) - 1 - row
        length = snap.lengths[s]
        for logical, block in enumerate(snap.tables[s]):
            filled = min(tpb, max(0, length - logical * tpb))
            _block(top, logical * 1.15, y, filled, tpb, colours[s], f"→{block}")
        top.text(-0.2, y + 0.4, f"{names[s]} ({length})", ha="right", va="center", fontsize=9)
    longest = max((len(t) for t in snap.tables.values()), default=1)
    top.set_xlim(-0.1, max(longest, 1) * 1.15)
    top.set_ylim(-0.3, max(len(seqs), 1))
    top.set_xticks([i * 1.15 + 0.5 for i in range(longest)], [str(i) for i in range(longest)])
    top.set_yticks([])
    top.set_xlabel(_("logical block of the sequence (→ the physical block its block table names)"))
    top.set_title(title or _("block tables ({tpb} positions per block; sequence name (positions held))").format(tpb=tpb),
                  fontsize=10)
    for side in ("top", "right", "left"):
        top.spines[side].set_visible(False)

    owner = {b: (s, i) for s, t in snap.tables.items() for i, b in enumerate(t)}
    for b in range(snap.num_blocks):
        if b in owner:
            s, logical = owner[b]
            filled = min(tpb, max(0, snap.lengths[s] - logical * tpb))
            _block(bottom, b * 1.15, 0, filled, tpb, colours[s], f"{names[s]}.{logical}")
        else:
            bottom.add_patch(Rectangle((b * 1.15, 0), 1, 0.8, facecolor=_FREE, edgecolor=_EDGE, linewidth=1.2))
    bottom.set_xlim(-0.1, snap.num_blocks * 1.15)
    bottom.set_ylim(-0.1, 0.9)
    bottom.set_xticks([b * 1.15 + 0.5 for b in range(snap.num_blocks)], [str(b) for b in range(snap.num_blocks)])
    bottom.set_yticks([])
    bottom.set_xlabel(_("physical block of the pool"))
    used, held = sum(snap.lengths.values()), tpb * len(owner)
    free = len(snap.free_blocks)
    pool = (_("the pool: {n} of {total} blocks held, {used} of {held} held positions used, {free} block free")
            if free == 1 else
            _("the pool: {n} of {total} blocks held, {used} of {held} held positions used, {free} blocks free"))
    bottom.set_title(pool.format(n=len(owner), total=snap.num_blocks, used=used, held=held, free=free), fontsize=10)
    for side in ("top", "right", "left"):
        bottom.spines[side].set_visible(False)
    bottom.figure.legend(handles=[Patch(facecolor="0.5", label=_("key and value stored")),
                                  Patch(facecolor="white", edgecolor="0.5", hatch="///", label=_("held, still empty")),
                                  Patch(facecolor=_FREE, edgecolor=_EDGE, label=_("free block"))],
                         loc="lower center", ncol=3, fontsize=8, frameon=False)
    bottom.figure.tight_layout(rect=(0, 0.07, 1, 1))
    return list(axes)


def plot_timeline(finished: Mapping[Hashable, Finished], ax: plt.Axes | None = None, title: str | None = None
                  ) -> plt.Axes:
    """When each request waited (light) and ran (dark), in steps; one row per request, in arrival order."""
    if ax is None:
        import matplotlib.pyplot as plt

        _fig, ax = plt.subplots(figsize=(7, 0.3 * len(finished) + 1.2))
    done = sorted(finished.values(), key=lambda f: (f.request.arrival, str(f.request.request_id)))
    for row, f in enumerate(done):
        y = len(done) - 1 - row
        if f.waited_steps:
            ax.barh(y, f.waited_steps, left=f.request.arrival, color="#56B4E9", alpha=0.35, height=0.7)
        ax.barh(y, f.finished_step - f.admitted_step + 1, left=f.admitted_step, color="#0072B2", height=0.7)
    ax.set_yticks(range(len(done)), [str(f.request.request_id) for f in reversed(done)], fontsize=8)
    ax.set_xlabel(_("step (one forward of the model)"))
    ax.set_ylabel(_("request"))
    ax.set_title(title or _("requests over time"), fontsize=10)
    ax.legend(handles=[Patch(color="#56B4E9", alpha=0.35, label=_("waiting")), Patch(color="#0072B2", label=_("running"))],
              loc="upper right", fontsize=8)  # early requests end early: the top right stays empty
    return ax
