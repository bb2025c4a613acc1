"""Checks for lesson 07: LayerNorm written out, and the pre-LN transformer block.

The block's variants are every way the two sublayers can go wrong (post-LN, no LayerNorm, the
LayerNorm applied to the residual stream, no residual, the FFN reading the block's input) and
the two LayerNorms swapped, alone or together; the diagnosis is the first bug in the order of
the code, the message names the others.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import model, reference
from .runner import Forbidden, learner_check, randn, require_callable, run_cases, seeded
from .verdicts import N_, Bug, Case, CheckResult, Variant, Verdict, combinations, say

# Labels: stable identifiers in CheckResult.diagnosis.
POST_LN = N_("post-LN where pre-LN was asked")
HALF_PRE_LN = N_("half-fixed pre-LN")
MISSING_RESIDUAL = N_("missing residual")
LAYER_NORMS_SWAPPED = N_("layer norms swapped")
NO_LAYER_NORM = N_("no layer norm")
LN_ON_STREAM = N_("LayerNorm applied to the stream")
FFN_READS_OLD_X = N_("FFN reads the old x")
UNBIASED_VARIANCE = N_("unbiased variance")
EPS_OUTSIDE_SQRT = N_("eps outside the square root")
EPS_MISSING = N_("no eps")
EPS_IGNORED = N_("eps argument ignored")
LN_WRONG_DIM = N_("normalised over the wrong dimension")
NO_MEAN_SUBTRACTION = N_("no mean subtraction")
NO_GAIN = N_("gain (weight) missing")
NO_BIAS = N_("bias missing")
GAIN_BIAS_SWAPPED = N_("gain and bias swapped")

TEXTS = {
    "post_both": N_("you normalised after adding (post-LN: ln(x + sa(x))). Pre-LN normalises the input of each "
                    "sublayer and leaves the residual stream alone: x = x + sa(ln1(x))."),
    "post_attention": N_("the attention sublayer is still post-LN, ln1(x + sa(x)): make it x = x + sa(ln1(x)), "
                         "like the feed-forward one."),
    "post_ffwd": N_("half-fixed: the attention sublayer is pre-LN, but the feed-forward one is still post-LN, "
                    "ln2(x + ffwd(x)); make it x = x + ffwd(ln2(x))."),
    "no_residual_both": N_("you dropped both residual connections: add the input back, x = x + sa(ln1(x)) and "
                           "x = x + ffwd(ln2(x))."),
    "no_residual_attention": N_("the attention sublayer has no residual connection: x = x + sa(ln1(x))."),
    "no_residual_ffwd": N_("the feed-forward sublayer has no residual connection: x = x + ffwd(ln2(x))."),
    "no_ln_both": N_("you did not apply the layer norms: x = x + sa(ln1(x)), then x = x + ffwd(ln2(x))."),
    "no_ln_attention": N_("the attention sublayer reads x without ln1: x = x + sa(ln1(x))."),
    "no_ln_ffwd": N_("the feed-forward sublayer reads x without ln2: x = x + ffwd(ln2(x))."),
    "stream_attention": N_("you normalised the residual stream itself (x = ln1(x), then x + sa(x)): the "
                           "normalised x is what gets added to. Normalise only the sublayer's input: "
                           "x = x + sa(ln1(x))."),
    "stream_ffwd": N_("you normalised the residual stream itself before the feed-forward (x = ln2(x), then "
                      "x + ffwd(x)); normalise only its input: x = x + ffwd(ln2(x))."),
    "old_x": N_("the feed-forward reads the block's input, not the stream after attention: compute "
                "x = x + sa(ln1(x)) first, then x = x + ffwd(ln2(x)) with that new x."),
    "swapped": N_("ln1 belongs before the attention (sa) and ln2 before the feed-forward (ffwd)."),
    "case_x": N_("x of shape {shape}"),
    "case_x_eps": N_("x of shape {shape}, eps={eps}"),
    "block_passed": N_("Your block equals gpt_lesson.model.Block's pre-LN forward."),
    "unbiased": N_("you used the unbiased variance (var() or std() divide by C - 1); LayerNorm divides by C: "
                   "x.var(dim=-1, keepdim=True, unbiased=False)."),
    "eps_outside": N_("eps is outside the square root: (x - mean) / (std + eps); LayerNorm computes "
                      "(x - mean) / sqrt(var + eps)."),
    "eps_missing": N_("you left out eps: sqrt(var + eps) keeps a row with (almost) no variance from dividing by 0."),
    "eps_ignored": N_("your function ignores its eps argument (the check passed eps={eps}): use eps, not a "
                      "constant."),
    "wrong_dim": N_("you normalised over dim={dim}; LayerNorm normalises each position's vector, over the last "
                    "dimension: mean and var with dim=-1, keepdim=True."),
    "no_mean": N_("you did not subtract the mean: (x - mean) / sqrt(var + eps)."),
    "no_gain": N_("the gain is missing: multiply by weight, y * weight + bias."),
    "no_bias": N_("the bias is missing: y * weight + bias."),
    "gain_bias_swapped": N_("gain and bias are swapped: y * weight + bias (weight multiplies, bias is added)."),
    "needs_eps": N_("your function must take eps as its fourth argument: def fn(x, weight, bias, eps=1e-5)."),
    "layer_norm_passed": N_("Your LayerNorm equals F.layer_norm over the last dimension, eps included."),
}


def _bug(label: str, key: str, **fields: object) -> Bug:
    return Bug(label, TEXTS[key], fields)


# ----------------------------------------------------------------------------------------------
# The block


def _sublayer(x: torch.Tensor, ln: nn.Module, f: nn.Module, kind: str, x0: torch.Tensor) -> torch.Tensor:
    if kind == "pre":
        return x + f(ln(x))
    if kind == "post":
        return ln(x + f(x))
    if kind == "no LN":
        return x + f(x)
    if kind == "stream":
        x = ln(x)
        return x + f(x)
    if kind == "no residual":
        return f(ln(x))
    return x + f(ln(x0))  # "old x": the FFN reads the block's input


def _block(x, ln1, sa, ln2, ffwd, attention: str, feed_forward: str, swapped: bool) -> torch.Tensor:
    first, second = (ln2, ln1) if swapped else (ln1, ln2)
    h = _sublayer(x, first, sa, attention, x)
    return _sublayer(h, second, ffwd, feed_forward, x)


def _block_bugs(attention: str, feed_forward: str, swapped: bool) -> list[Bug]:
    """The bugs of one combination, merged where one fix covers both sublayers."""
    both = {"post": (POST_LN, "post_both"), "no residual": (MISSING_RESIDUAL, "no_residual_both"),
            "no LN": (NO_LAYER_NORM, "no_ln_both")}
    if attention == feed_forward and attention in both:
        bugs = [_bug(*both[attention])]
    else:
        one = {"post": (HALF_PRE_LN, "post"), "no residual": (MISSING_RESIDUAL, "no_residual"),
               "no LN": (NO_LAYER_NORM, "no_ln"), "stream": (LN_ON_STREAM, "stream"),
               "old x": (FFN_READS_OLD_X, "old_x")}
        bugs = []
        for kind, where in ((attention, "attention"), (feed_forward, "ffwd")):
            if kind != "pre":
                label, key = one[kind]
                bugs.append(_bug(label, key if kind == "old x" else f"{key}_{where}"))
    return bugs + ([_bug(LAYER_NORMS_SWAPPED, "swapped")] if swapped else [])


def _block_variants() -> Iterator[Variant]:
    kinds = ("pre", "post", "no LN", "stream", "no residual")
    combos = [(a, f, s) for a, f, s in itertools.product(kinds, kinds + ("old x",), (False, True))]
    for a, f, s in sorted(combos, key=lambda c: len(_block_bugs(*c))):
        bugs = _block_bugs(a, f, s)
        if bugs:
            yield Variant(tuple(bugs), lambda *args, c=(a, f, s): _block(*args, *c))


def _block_modules(C: int, nh: int, block_size: int) -> tuple[nn.Module, ...]:
    """LayerNorms with random affine parameters (so swapping them shows) and eval-mode sublayers."""
    ln1, ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
    for ln in (ln1, ln2):
        with torch.no_grad():
            ln.weight.copy_(1 + 0.5 * torch.randn(C))
            ln.bias.copy_(0.3 * torch.randn(C))
    sa = model.CausalSelfAttention(C, nh, block_size, dropout=0.0).eval()
    ffwd = model.FeedForward(C, dropout=0.0).eval()
    return ln1, sa, ln2, ffwd


@learner_check
def check_block(fn: Callable[..., torch.Tensor], *, strict: bool = False, hidden: bool = False) -> CheckResult:
    """Check ``fn(x, ln1, sa, ln2, ffwd)`` -> a pre-LN block: ``x + sa(ln1(x))``, then ``x + ffwd(ln2(x))``.

    ``x`` is (B, T, C); the four modules are given (``sa`` a CausalSelfAttention, ``ffwd`` a FeedForward).
    """
    name = "check_block"
    require_callable(name, fn)
    sizes = [(12, (2, 5, 12, 3)), (13, (1, 3, 8, 2))] + ([(42, (3, 8, 16, 4)), (43, (2, 2, 6, 1))] if hidden else [])
    cases = []
    for seed, (B, T, C, nh) in sizes:
        torch.manual_seed(seed)
        mods = _block_modules(C, nh, block_size=8)
        x = torch.randn(B, T, C)
        with torch.no_grad():
            expected = _block(x, *mods, "pre", "pre", False)
        cases.append(Case((x, *mods), say(TEXTS["case_x"], shape=(B, T, C)), expected, _block_variants()))
    forbidden = Forbidden({model.Block: "gpt_lesson.model.Block", reference.Block: "gpt_lesson.reference.Block"})
    return run_cases(Verdict(name), fn, cases, forbidden=forbidden, success=say(TEXTS["block_passed"]))


# ----------------------------------------------------------------------------------------------
# LayerNorm


def _layer_norm(*args: object) -> torch.Tensor:
    """LayerNorm with chosen mistakes: ``(x, weight, bias[, eps], center, unbiased, eps_mode, affine, dim)``."""
    *inputs, center, unbiased, eps_mode, affine, dim = args
    x, weight, bias, *given = inputs
    eps = given[0] if given else 1e-5  # the learner's function runs with its default eps unless one is passed
    e = {"inside": eps, "outside": eps, "none": 0.0, "fixed": 1e-5}[eps_mode]
    xc = x - x.mean(dim, keepdim=True) if center else x
    var = x.var(dim, keepdim=True, unbiased=unbiased)
    y = xc / (var.sqrt() + e) if eps_mode == "outside" else xc / (var + e).sqrt()
    return {"gain+bias": lambda: y * weight + bias, "bias": lambda: y + bias, "gain": lambda: y * weight,
            "swapped": lambda: y * bias + weight, "none": lambda: y}[affine]()


def _layer_norm_variants(eps: float | None) -> Iterator[Variant]:
    knobs = [
        [(True, None), (False, _bug(NO_MEAN_SUBTRACTION, "no_mean"))],
        [(False, None), (True, _bug(UNBIASED_VARIANCE, "unbiased"))],
        [("inside", None), ("outside", _bug(EPS_OUTSIDE_SQRT, "eps_outside")),
         ("none", _bug(EPS_MISSING, "eps_missing"))]
        + ([("fixed", _bug(EPS_IGNORED, "eps_ignored", eps=eps))] if eps is not None else []),
        [("gain+bias", None), ("bias", _bug(NO_GAIN, "no_gain")), ("gain", _bug(NO_BIAS, "no_bias")),
         ("swapped", _bug(GAIN_BIAS_SWAPPED, "gain_bias_swapped"))],
        [(-1, None), (1, _bug(LN_WRONG_DIM, "wrong_dim", dim=1)), (0, _bug(LN_WRONG_DIM, "wrong_dim", dim=0))],
    ]
    return combinations(knobs, _layer_norm, max_bugs=2)


@learner_check
def check_layer_norm(fn: Callable[..., torch.Tensor], *, strict: bool = False, hidden: bool = False) -> CheckResult:
    """Check ``fn(x, weight, bias, eps=1e-5)`` -> LayerNorm of ``x`` over its last dimension.

    ``(x - mean) / sqrt(var + eps) * weight + bias`` with the biased variance, as ``F.layer_norm``.
    The first input has rows of tiny variance (where eps matters); the last passes ``eps`` explicitly.
    """
    name = "check_layer_norm"
    require_callable(name, fn)
    sizes = [(44, (2, 5, 8), 1e-3, None), (45, (3, 4, 6), 1.0, None), (46, (2, 3, 10), 0.05, 1e-2)]
    sizes += [(47, (1, 7, 16), 3.0, None), (48, (4, 2, 4), 1e-3, 1e-3)] if hidden else []
    cases = []
    for seed, (B, T, C), spread, eps in sizes:
        g = seeded(seed)
        x = randn(g, B, T, C) * spread + randn(g, B, T, 1) * 2 * spread  # rows with their own mean
        weight, bias = 1 + 0.5 * randn(g, C), 0.3 * randn(g, C)
        args = (x, weight, bias) if eps is None else (x, weight, bias, eps)
        expected = F.layer_norm(x, (C,), weight, bias, 1e-5 if eps is None else eps)
        description = say(TEXTS["case_x"] if eps is None else TEXTS["case_x_eps"], shape=(B, T, C), eps=eps)
        cases.append(Case(args, description, expected, _layer_norm_variants(eps)))
    forbidden = Forbidden({F.layer_norm: "torch.nn.functional.layer_norm", nn.LayerNorm: "torch.nn.LayerNorm",
                           torch.layer_norm: "torch.layer_norm", torch.native_layer_norm: "torch.native_layer_norm"})
    return run_cases(Verdict(name), fn, cases, forbidden=forbidden, hints=[("positional argument", TEXTS["needs_eps"])],
                     success=say(TEXTS["layer_norm_passed"]))
