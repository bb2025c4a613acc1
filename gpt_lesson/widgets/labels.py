"""Every label, tooltip and read-out of the explorers, as one table of templates.

The templates use the format mini-language with named fields (``{w:.3f}``). The browser formats
them with d3-format (``js/src/core.mjs``: ``fmt``), which implements the same mini-language; the
static pictures format their titles with Python's ``str.format``. The read-out lines under each
explorer are written by the browser only. Each string goes through :func:`gpt_lesson.i18n._` when
the table is built: a translated catalogue gives every explorer its language without touching the
front end.
"""
from __future__ import annotations

from ..i18n import C_, _

__all__ = ["labels_for", "label"]


def _common() -> dict[str, str]:
    return {
        "axis_key": _("key"),
        "axis_query": _("query"),
        "weight": _("weight"),
        "score": _("score"),
        "hover_minus_inf": _("masked: −∞"),
        "hover_weight": _("softmax weight {w:.3f}"),
    }


def _attention() -> dict[str, str]:
    return {
        "text": _("text"),
        "tip_text": _("The text the model reads. Edit it and the model runs again (newlines are kept and shown as ⏎)."),
        "error_empty": _("The text is empty: type at least one character."),
        "error_unknown": _("The model does not know {n} of these characters: {chars}. It reads only the {vocab} "
                           "characters of the text it was trained on: replace or delete them. The numbers below "
                           "are those of the last text it could read."),
        "kernel_lost": _("Python does not answer (was the kernel restarted?): run this cell again to edit the "
                         "text. Every other control still works."),
        "tip_text_static": _("Editing the text needs a running Python kernel; every other control works here."),
        "layer": _("layer"),
        "model": _("model"),
        "tip_model": _("Show the explorer of this model: every control is kept"),
        "tip_layer": _("Show the attention of layer {i}"),
        "head": _("head"),
        "all_heads": _("all"),
        "tip_all_heads": _("Every head of the layer side by side; click one to open it"),
        "tip_head": _("Show head {i}"),
        "stage": _("stage"),
        "stage_raw": _("QKᵀ raw"),
        "stage_scaled": _("÷ √d_k"),
        "stage_masked": _("masked"),
        "stage_weights": _("softmax"),
        "tip_stage_raw": _("Raw scores: q·k for every (query, key) pair"),
        "tip_stage_scaled": _("Scores times the scale 1/√d_k"),
        "tip_stage_masked": _("Scaled scores with the future set to −∞ (masked_fill)"),
        "tip_stage_weights": _("Softmax over each row: the attention weights"),
        "tip_clear_query": _("Clear the query (Esc)"),
        "colors": _("colours"),
        "colors_shared": _("shared"),
        "colors_own": _("per stage"),
        "tip_colors_shared": _("Raw, scaled and masked scores on one colour scale (the raw scores'), so the "
                               "scaling shows"),
        "tip_colors_own": _("Each stage on its own colour scale"),
        "stage_change": _("spread of a row's scores (std): q·k {raw:.2f} → × {scale:.3g} → {scaled:.2f}; then "
                          "the mask (−∞) and exp(s) / Σ exp(s)"),
        "tip_strip": _("The text: hover a character to preview its row (its weights tint the text), click it to "
                       "pick it as the query"),
        "tip_char": _("key {j} '{tok}': weight {w:.3f}"),
        "tip_char_pick": _("{j} '{tok}': hover to preview its row, click to pick it"),
        "overview_title": _("Every layer and head (softmax weights): click one to open it."),
        "tip_overview": _("Every layer and head of the model: click a thumbnail to open it"),
        "tip_thumb": _("layer {layer}, head {h}: mean row entropy {e:.2f} nats (click to open)"),
        "layer_short": _("layer {i}"),
        "head_short": _("h{h}"),
        "tip_heatmap": _("Attention heatmap: hover a cell for its numbers, click a cell to pick the query and key; "
                         "arrow keys move them, Esc clears them and gives the keyboard back to the notebook"),
        "rows_sum_to_one": _("every row sums to 1 (to within 1e-5)"),
        "rows_do_not_sum_to_one": _("the rows do not sum to 1: largest |sum − 1| = {err:.1e}"),
        "mean_entropy": _("mean row entropy {h:.2f} nats"),
        "largest_weight": _("largest weight {w:.3f}"),
        "query_readout": _("query {i} '{tok}': row sum {sum:.4f}, entropy {h:.2f} nats, largest weight {w:.3f} "
                           "on key {j} '{ktok}'"),
        "running_model": _("running the model…"),
        "no_kernel": _("No kernel: the text is fixed, every other control works."),
        "pick_head_hint": _("click a head to open it"),
        "pick_query_hint": _("click a row to pick the query"),
        "selection": _("query {i} '{tok}' · key {j} '{ktok}'"),
        "largest_key": _("(largest weight)"),
        "head_title": _("head {h}"),
        "heat_title": _("Layer {layer}, {who}: {stage} · {T} tokens"),
        "title_raw": _("raw scores QKᵀ"),
        "title_scaled": _("scaled scores QKᵀ × {scale:.3g}"),
        "title_masked": _("masked scores (future = −∞)"),
        "title_weights": _("softmax weights"),
        "hover_cell": _("query {i} '{tok}' → key {j} '{ktok}'"),
        "hover_raw": _("raw score q·k {v:.3f}"),
        "hover_scaled": _("scaled score {v:.3f}"),
        "hover_masked": _("masked score {v:.3f}"),
        "hover_weights": _("softmax weight {v:.3f}"),
        "hover_dot": _("q·k = Σ of {n} products = {dot:.3f}; × {scale:.3g} = {scaled:.3f}"),
        "hover_masked_cell": _("the future: masked, weight 0"),
        "hint_all_heads": _("Every head of the layer, same colour scale. Click a head to open it, with its rows and "
                            "the step-through of one (query, key) cell."),
        "hint_pick_query": _("Click a cell of the heatmap (or a character of the text) to pick a query: its "
                             "weights over the keys appear here, with the step-through of one (query, key) cell: "
                             "q·k, the scaling, the mask, the softmax and the weighted sum of V."),
        "axis_key_position": _("key position (hatched: the future, masked)"),
        "tip_bar_key": _("key {j} '{tok}': weight {w:.3f} (click to step through)"),
        "axis_channel": _("channel d of the head"),
        "tip_product": _("channel {c}: q[d]·k[d] = {q:.3f} × {k:.3f} = {p:.4f}"),
        "row_title": _("query {i} '{tok}': its weights over the keys"),
        "dot_title": _("q[{i}]·k[{j}] = Σ of {n} products = {dot:.3f}"),
        "chain": _("× {scale:.3g} = {scaled:.3f} → visible → exp({scaled:.3f}) / Σ exp over the {n} visible keys "
                   "({sum:.4g}) = weight {w:.3f}"),
        "chain_masked": _("× {scale:.3g} = {scaled:.3f} → masked: −∞ → exp(−∞) = 0: weight 0"),
        "legend_output": _("output of the query = Σ_j w_j·v_j"),
        "legend_share": _("the chosen key's share w·v"),
        "notice_truncated": _("The text has {n} tokens; showing the first {block} (the model's block_size={block})."),
    }


def _mask() -> dict[str, str]:
    return {
        "T": _("T"),
        "tip_T": _("Sequence length: the number of query and key positions"),
        "real_tokens": _("real tokens"),
        "tip_real_tokens": _("Real tokens before the padding (padding masks only)"),
        "mask": _("mask"),
        "mask_causal": _("causal"),
        "mask_none": C_("mask", "none"),
        "mask_padding": _("padding"),
        "mask_causal+padding": _("causal+padding"),
        "tip_mask_causal": _("tril: each query sees itself and the past"),
        "tip_mask_none": _("No mask: every query sees every key, the future too"),
        "tip_mask_padding": _("Hide the padding keys after the real tokens"),
        "tip_mask_causal+padding": _("Both: the past only, and no padding"),
        "tip_mask_panels": _("The mask, the scores before and after masked_fill, the weights; hover a cell"),
        "mask_title": _("Mask: {mask} (T={T}{pad})"),
        "title_padding": _(", {n} real tokens then padding"),
        "panel_mask": _("mask: 1 = may look, 0 = hidden"),
        "panel_scores": _("scores before masked_fill"),
        "panel_masked": _("after masked_fill(mask == 0, −∞)"),
        "panel_weights": _("weights after softmax"),
        "key_hidden": _("hidden: −∞ before the softmax, weight 0 after"),
        "key_nan": _("NaN (0/0): a row with every key hidden"),
        "hover_mask_cell": _("query {i} → key {j}"),
        "hover_visible": _("mask 1: may look"),
        "hover_hidden": _("mask 0: hidden"),
        "hover_score": _("score {v:.3f}"),
        "hover_score_kept": _("masked_fill keeps the score"),
        "hover_nan": _("weight NaN: softmax(−∞, …, −∞) = 0/0"),
        "leak_undefined": _("leak to the future: undefined (every row is NaN)"),
        "leak": _("leak to the future: {leak:.3f} of each row's weight on average ({verdict})"),
        "verdict_none": _("nothing leaks"),
        "verdict_leak": _("the model can read the future"),
        "explain_nan": _("Row(s) {rows}: every key is masked, so softmax(−∞, …, −∞) = 0/0 = NaN. The causal mask "
                         "alone never does this: it keeps the diagonal, so each query sees at least itself."),
        "explain_causal": _("No row is fully masked: the causal mask keeps the diagonal (each query sees itself), "
                            "so no NaN."),
        "explain_no_nan": _("No row is fully masked, so no NaN."),
    }


def _scaling() -> dict[str, str]:
    return {
        "d_k": _("d_k"),
        "tip_d_k": _("Head size d_k: the length of q and k"),
        "scaling": _("scaling"),
        "scaling_none": C_("scaling", "none"),
        "scaling_sqrt": _("1/√d_k"),
        "scaling_temperature": _("1/(√d_k·τ)"),
        "tip_scaling_none": _("Use q·k as it is"),
        "tip_scaling_sqrt": _("Divide q·k by √d_k, as attention does"),
        "tip_scaling_temperature": _("Divide by √d_k and by a temperature τ"),
        "tau": _("τ"),
        "tip_tau": _("Temperature τ (with the 1/(√d_k·τ) scaling): above 1 flattens the softmax, below 1 sharpens it"),
        "tau_value": _("{t:.3g}"),
        "tau_suffix": _(", τ = {t:.3g}"),
        "scaling_title": _("d_k = {d_k}, scaling {label}: scores × {scale:.4g}"),
        "axis_score": _("score"),
        "axis_count": _("pairs per bin"),
        "hist_title": _("scale·q·k of {n} random pairs: variance {v:.2f}"),
        "legend_measured": _("measured"),
        "legend_normal": _("normal with the theory's variance"),
        "tip_bin": _("scores in [{a:.3g}, {b:.3g}): {c:.0f} pairs"),
        "axis_d_k": _("d_k (head size)"),
        "axis_variance": _("variance"),
        "variance_title": _("variance of the scores vs d_k"),
        "legend_none_variance": _("none: variance = d_k"),
        "legend_theory": _("chosen scaling: theory"),
        "legend_measured_point": _("measured at this d_k"),
        "tip_variance": _("d_k = {d}: theory variance {v:.3g}"),
        "row_softmax_title": _("softmax of one query's scores: max {m:.2f}, entropy {h:.2f} nats"),
        "legend_uniform": _("uniform 1/{T}"),
        "tip_softmax_bar": _("key {j}: weight {w:.3f}"),
        "saturation_title": _("saturation (mean of {n} queries): a one-hot softmax passes almost no gradient"),
        "legend_entropy": _("entropy (nats)"),
        "legend_gradient": _("softmax gradient size"),
        "legend_no_scaling": _("dashed: no scaling"),
        "tip_saturation": _("d_k = {d}: entropy {h:.2f} nats, gradient {g:.3f} (no scaling: {h0:.2f}, {g0:.3f})"),
        "scaling_readout": _("variance of scale·q·k: {v:.2f} (theory {t:.2f}) · softmax over {T} keys, mean of {n} "
                             "queries: largest weight {m:.3f}, entropy {h:.3f} nats (uniform ln {T} = {u:.2f}), "
                             "gradient size {g:.4f}"),
    }


_TABLES = {"attention": _attention, "mask": _mask, "scaling": _scaling}


def labels_for(explorer: str) -> dict[str, str]:
    """The templates one explorer uses (shared ones included), in the current language."""
    if explorer not in _TABLES:
        raise ValueError(f"explorer={explorer!r} is not one of {tuple(_TABLES)}")
    return {**_common(), **_TABLES[explorer]()}


def label(explorer: str, key: str, **fields: object) -> str:
    """One template of ``explorer``'s table, formatted: ``label("mask", "leak", leak=0.0, verdict=...)``."""
    table = labels_for(explorer)
    if key not in table:
        raise ValueError(f"key={key!r} is not a label of the {explorer} explorer")
    return table[key].format(**fields)
