"""Interactive explorers that draw in the browser, and their static matplotlib pictures.

* :class:`AttentionExplorer` / :func:`draw_attention_view`: one head of a model on
  typed text, stage by stage (raw scores, scaled, masked, softmax weights);
* :class:`MaskExplorer` / :func:`draw_mask_view`: the ``tril`` mask, ``masked_fill(-inf)``,
  the leak to future positions and the NaN of a fully masked row;
* :class:`ScalingExplorer` / :func:`draw_scaling_view`: why q.k is divided by sqrt(d_k);
* :class:`ModelSwitch`: attention explorers of several models (trained, untrained) behind one switch.

Each explorer is an ``anywidget`` widget: Python computes what needs the model or random draws
and sends it once; the browser module (``static/*.mjs``) computes the cheap stages and draws,
so controls, hovers and clicks answer at once, and a page exported with the widget state keeps
working without a kernel. ``view`` holds the numbers Python computed for the current settings;
the static functions draw the same view with matplotlib, and ``save_png(path)`` writes it.
Nothing is loaded from the network.
"""
from .attention_explorer import AttentionExplorer, ModelSwitch, draw_attention_view
from .mask_explorer import MaskExplorer, draw_mask_view, mask_view_data
from .scaling_explorer import ScalingExplorer, draw_scaling_view, scaling_view_data

__all__ = [
    "AttentionExplorer", "MaskExplorer", "ScalingExplorer", "ModelSwitch",
    "draw_attention_view", "draw_mask_view", "draw_scaling_view",
    "mask_view_data", "scaling_view_data",
]
