"""Interactive explorers (ipywidgets) and their static matplotlib fallbacks.

* :class:`AttentionExplorer` / :func:`draw_attention_view`: one head of a model on
  typed text, stage by stage (raw scores, scaled, masked, softmax weights);
* :class:`MaskExplorer` / :func:`draw_mask_view`: the ``tril`` mask, ``masked_fill(-inf)``,
  the leak to future positions and the NaN of a fully masked row;
* :class:`ScalingExplorer` / :func:`draw_scaling_view`: why q.k is divided by sqrt(d_k).

Each explorer draws its picture with the static function, so the live widget and the
PNG shown next to it on GitHub are the same picture; ``save_png(path)`` writes it.
Only ipywidgets APIs of both 7.x and 8.x are used, and nothing is loaded from the network.
"""
from .attention_explorer import AttentionExplorer, draw_attention_view
from .mask_explorer import MaskExplorer, draw_mask_view
from .scaling_explorer import ScalingExplorer, draw_scaling_view

__all__ = [
    "AttentionExplorer", "MaskExplorer", "ScalingExplorer",
    "draw_attention_view", "draw_mask_view", "draw_scaling_view",
]
