"""Checks for lesson 05 (and 10): splitting the channels into heads and merging them back."""
from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from .. import attention as _attention
from .runner import Forbidden, learner_check, randn, require_callable, run_cases, seeded
from .verdicts import N_, Case, CheckResult, Verdict, say, variant

# Bound at import: a later assignment to gpt_lesson.attention does not change the reference.
_split_heads, _merge_heads = _attention.split_heads, _attention.merge_heads

# Labels: stable identifiers in CheckResult.diagnosis.
MISSING_TRANSPOSE = N_("missing transpose")
SPLIT_WRONG_ORDER = N_("channels split in the wrong order")
MERGE_WITHOUT_TRANSPOSE = N_("heads merged without transposing back")
MERGE_WRONG_ORDER = N_("channels merged in the wrong order")
HEADS_SUMMED = N_("heads summed instead of placed side by side")
HEADS_CAT_POSITIONS = N_("heads concatenated along the positions")
HEADS_LAST_ONLY = N_("one head only")

TEXTS = {
    "split_view": N_("x.view(B, n_head, T, head_size) mixes positions and channels. Split the channels first, "
                     "then swap: x.view(B, T, n_head, head_size).transpose(1, 2)."),
    "split_no_swap": N_("you returned (B, T, n_head, head_size); add .transpose(1, 2) to get "
                        "(B, n_head, T, head_size)."),
    "split_order": N_("view(B, T, head_size, n_head) gives each head every n_head-th channel; each head owns a "
                      "contiguous slice: view(B, T, n_head, head_size)."),
    "merge_no_swap": N_("you reshaped (B, n_head, T, head_size) straight to (B, T, C), which mixes positions. "
                        "Transpose back first: y.transpose(1, 2).contiguous().view(B, T, C)."),
    "merge_order": N_("your channels are ordered (head_size, n_head); put the heads side by side: "
                      "y.transpose(1, 2) gives (B, T, n_head, head_size), then view(B, T, C)."),
    "contiguous": N_("after a transpose the tensor is not contiguous: call .contiguous() before .view(), or use "
                     ".reshape()."),
    "summed": N_("you added the heads together ({how}); each head's output keeps its own channels, side by side: "
                 "y.transpose(1, 2).reshape(B, T, n_head * head_size)."),
    "cat_positions": N_("you concatenated the heads along the positions (dim 1 of the result), making n_head * T "
                        "rows; put them side by side along the channels: torch.cat(..., dim=-1)."),
    "one_head": N_("you returned one head's output, (B, T, head_size); the merge keeps all n_head heads side by "
                   "side: (B, T, n_head * head_size)."),
    "fixed_size": N_("a size in your view/reshape is a fixed number, or from the wrong dimension: take every size "
                     "from the input (B, T, C = x.shape; head_size = C // n_head), the check uses several."),
    "case_split": N_("x of shape {shape} with n_head={nh} (head_size={hs})"),
    "case_merge": N_("y of shape {shape}"),
    "split_passed": N_("Your split equals gpt_lesson.attention.split_heads."),
    "merge_passed": N_("Your merge equals gpt_lesson.attention.merge_heads."),
}


HINTS = [("is invalid for input of size", TEXTS["fixed_size"])]


@learner_check
def check_split_heads(fn: Callable[[torch.Tensor, int], torch.Tensor], *, strict: bool = False,
                      hidden: bool = False) -> CheckResult:
    """Check ``fn(x, n_head)``: (B, T, C) -> (B, n_head, T, head_size)."""
    name = "check_split_heads"
    require_callable(name, fn)
    sizes = [(6, (2, 5, 12, 3)), (7, (1, 3, 10, 2))] + ([(36, (3, 4, 16, 4)), (37, (2, 6, 6, 2))] if hidden else [])
    cases = []
    for seed, (B, T, C, nh) in sizes:
        x = randn(seeded(seed), B, T, C)
        variants = [
            variant(MISSING_TRANSPOSE, TEXTS["split_view"],
                    lambda x, n: x.reshape(x.size(0), n, x.size(1), x.size(2) // n)),
            variant(MISSING_TRANSPOSE, TEXTS["split_no_swap"],
                    lambda x, n: x.reshape(x.size(0), x.size(1), n, x.size(2) // n)),
            variant(SPLIT_WRONG_ORDER, TEXTS["split_order"],
                    lambda x, n: x.reshape(x.size(0), x.size(1), x.size(2) // n, n).permute(0, 3, 1, 2)),
        ]
        cases.append(Case((x, nh), say(TEXTS["case_split"], shape=(B, T, C), nh=nh, hs=C // nh),
                          functools.partial(_split_heads, x, nh), variants))
    forbidden = Forbidden({_split_heads: "gpt_lesson.attention.split_heads"})
    return run_cases(Verdict(name), fn, cases, forbidden=forbidden, hints=HINTS, success=say(TEXTS["split_passed"]))


@learner_check
def check_merge_heads(fn: Callable[[torch.Tensor], torch.Tensor], *, strict: bool = False,
                      hidden: bool = False) -> CheckResult:
    """Check ``fn(y)``: (B, n_head, T, head_size) -> (B, T, C), heads side by side."""
    name = "check_merge_heads"
    require_callable(name, fn)
    sizes = [(8, (2, 3, 5, 4)), (9, (1, 2, 3, 5))] + ([(38, (3, 4, 2, 6)), (39, (1, 1, 6, 3))] if hidden else [])
    cases = []
    for seed, (B, nh, T, hs) in sizes:
        y = randn(seeded(seed), B, nh, T, hs)
        variants = [
            variant(MERGE_WITHOUT_TRANSPOSE, TEXTS["merge_no_swap"], lambda y: y.reshape(y.size(0), y.size(2), -1)),
            variant(MERGE_WRONG_ORDER, TEXTS["merge_order"],
                    lambda y: y.permute(0, 2, 3, 1).reshape(y.size(0), y.size(2), -1)),
            variant(HEADS_SUMMED, TEXTS["summed"], lambda y: y.sum(dim=1), how="y.sum(dim=1)"),
            variant(HEADS_SUMMED, TEXTS["summed"], lambda y: y.mean(dim=1), how="y.mean(dim=1)"),
            variant(HEADS_CAT_POSITIONS, TEXTS["cat_positions"], lambda y: torch.cat(y.unbind(dim=1), dim=1)),
            variant(HEADS_LAST_ONLY, TEXTS["one_head"], lambda y: y[:, -1]),
            variant(HEADS_LAST_ONLY, TEXTS["one_head"], lambda y: y[:, 0]),
        ]
        cases.append(Case((y,), say(TEXTS["case_merge"], shape=(B, nh, T, hs)), functools.partial(_merge_heads, y),
                          variants))
    forbidden = Forbidden({_merge_heads: "gpt_lesson.attention.merge_heads"})
    return run_cases(Verdict(name), fn, cases, forbidden=forbidden,
                     hints=[("view size is not compatible", TEXTS["contiguous"])] + HINTS,
                     success=say(TEXTS["merge_passed"]))
