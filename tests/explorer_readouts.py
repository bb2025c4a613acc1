"""The read-out lines an explorer shows, written here from Python's numbers and the label table.

The browser formats its read-outs itself (d3-format fills the label table's templates); these helpers
fill the same templates with Python's ``str.format`` from the numbers Python computed, so a test can
compare the page's text with what Python would say (tests/test_explorers_js.py under Node,
tests/test_browser.py and tests/test_html_view.py in Chromium).
"""
from __future__ import annotations

import math

import numpy as np

from gpt_lesson.widgets.labels import label

SHOWN = {" ": "␣", "\n": "⏎"}


def attention_lines(view: dict) -> list[str]:
    """The attention explorer's read-out lines for ``view`` (``AttentionExplorer.view``)."""
    r = view["readouts"]
    if r["max_sum_error"] < 1e-5:
        first = label("attention", "rows_sum_to_one")
    else:
        first = label("attention", "rows_do_not_sum_to_one", err=r["max_sum_error"])
    lines = [" · ".join([first, label("attention", "mean_entropy", h=r["mean_entropy"]),
                         label("attention", "largest_weight", w=r["max_weight"])])]
    cell = view["cell"]
    if cell is not None:
        i, row = cell["query"], cell["row"]
        j = int(row.argmax())
        tokens = view["tokens"]
        lines.append(label("attention", "query_readout", i=i, tok=SHOWN.get(tokens[i], tokens[i]),
                           sum=float(r["row_sums"][i]), h=float(r["entropy"][i]), w=float(row[j]), j=j,
                           ktok=SHOWN.get(tokens[j], tokens[j])))
    return lines


def mask_lines(v: dict) -> list[str]:
    """The mask explorer's first two read-out lines for ``v`` (``mask_view_data``)."""
    def L(key, **f):
        return label("mask", key, **f)

    if math.isnan(v["leak"]):
        leak = L("leak_undefined")
    else:
        leak = L("leak", leak=v["leak"], verdict=L("verdict_none" if v["leak"] == 0 else "verdict_leak"))
    if v["nan_rows"]:
        why = L("explain_nan", rows=", ".join(map(str, v["nan_rows"])))
    elif v["mask_name"] in ("causal", "causal+padding"):
        why = L("explain_causal")
    else:
        why = L("explain_no_nan")
    return [leak, why]


def _f32(x: float) -> float:
    return float(np.float32(x))  # the browser reads the table as float32


def scaling_line(v: dict) -> str:
    """The scaling explorer's read-out line for ``v`` (``ScalingData.view``)."""
    m = v["mean"]
    return label("scaling", "scaling_readout", v=_f32(v["variance"]), t=_f32(v["theory_variance"]), n=v["n_rows"],
                 m=_f32(m["max_weight"]), h=_f32(m["entropy"]), T=v["T"], u=v["softmax"]["uniform_entropy"],
                 g=_f32(m["grad_norm"]))
