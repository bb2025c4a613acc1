"""Checks for lesson 07: LayerNorm written out, and the pre-LN transformer block.

The block's variants are every way the two sublayers can go wrong (post-LN, no LayerNorm, the
LayerNorm applied to the residual stream, no residual, the FFN reading the block's input) and
the two LayerNorms swapped, alone or together; the diagnosis is the first bug in the order of
the code, the message names the others.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import model, reference
from .runner import RULES, Forbidden, Step, learner_check, randn, require_callable, run_cases, seeded
from .verdicts import N_, Bug, Case, CheckResult, Variant, Verdict, combinations, say

# Bound at import: a later assignment to gpt_lesson.model does not change the reference or what is refused.
_Block, _SourceBlock = model.Block, reference.Block
_CausalSelfAttention, _FeedForward = model.CausalSelfAttention, model.FeedForward

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
STD_NOT_VAR = N_("square root of the standard deviation")
RMS_NOT_LAYER_NORM = N_("RMSNorm instead of LayerNorm")
LN_REUSED = N_("one LayerNorm for both sublayers")
SUBLAYERS_SWAPPED = N_("feed-forward before attention")
RESIDUAL_DOUBLED = N_("input added twice")

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
    "std_not_var": N_("you took the square root of the standard deviation: sqrt(std + eps). LayerNorm divides by "
                      "sqrt(var + eps), the variance under the root (var = std**2)."),
    "whole_tensor": N_("you took the mean and variance of the whole tensor (no dim); LayerNorm normalises each "
                       "position's vector on its own: dim=-1, keepdim=True."),
    "rms": N_("you divided by the root mean square without centring: that is RMSNorm (Llama's). LayerNorm "
              "subtracts the mean first and divides by sqrt(var + eps)."),
    "ln_reused": N_("you used {used} before both sublayers; each has its own: x + sa(ln1(x)), then x + ffwd(ln2(x))."),
    "sublayers_swapped": N_("the feed-forward runs before the attention; a block attends first: x = x + sa(ln1(x)), "
                            "then x = x + ffwd(ln2(x))."),
    "residual_doubled": N_("you added the input twice (x + x + ...): the residual adds it once, x = x + sa(ln1(x))."),
    "step_ln1": N_("ln1(x)"),
    "step_sa": N_("sa(ln1(x))"),
    "step_stream": N_("the stream after attention, x + sa(ln1(x))"),
    "step_ln2": N_("ln2 of that stream"),
    "step_ffwd": N_("ffwd(ln2(...))"),
    "step_mean": N_("the mean over the last dimension"),
    "step_centred": N_("x minus its mean"),
    "step_var": N_("the variance (divided by C)"),
    "step_normalised": N_("the normalised x, (x - mean) / sqrt(var + eps)"),
    "step_gain": N_("the normalised x times the gain"),
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
    yield Variant((_bug(LN_REUSED, "ln_reused", used="ln1"),),
                  lambda x, ln1, sa, ln2, ffwd: _block(x, ln1, sa, ln1, ffwd, "pre", "pre", False))
    yield Variant((_bug(LN_REUSED, "ln_reused", used="ln2"),),
                  lambda x, ln1, sa, ln2, ffwd: _block(x, ln2, sa, ln2, ffwd, "pre", "pre", False))
    yield Variant((_bug(SUBLAYERS_SWAPPED, "sublayers_swapped"),),
                  lambda x, ln1, sa, ln2, ffwd: _block(x, ln2, ffwd, ln1, sa, "pre", "pre", False))
    yield Variant((_bug(RESIDUAL_DOUBLED, "residual_doubled"),),
                  lambda x, ln1, sa, ln2, ffwd: (lambda h: h + ffwd(ln2(h)))(x + x + sa(ln1(x))))


def _block_steps(x, ln1, sa, ln2, ffwd) -> list[Step]:  # noqa: ANN001 - the modules of a case
    a = ln1(x)
    b = sa(a)
    h = x + b
    c = ln2(h)
    return [Step(TEXTS["step_ln1"], a), Step(TEXTS["step_sa"], b), Step(TEXTS["step_stream"], h),
            Step(TEXTS["step_ln2"], c), Step(TEXTS["step_ffwd"], ffwd(c))]


def _block_modules(C: int, nh: int, block_size: int) -> tuple[nn.Module, ...]:
    """LayerNorms with random affine parameters (so swapping them shows) and eval-mode sublayers."""
    ln1, ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
    for ln in (ln1, ln2):
        with torch.no_grad():
            ln.weight.copy_(1 + 0.5 * torch.randn(C))
            ln.bias.copy_(0.3 * torch.randn(C))
    sa = _CausalSelfAttention(C, nh, block_size, dropout=0.0).eval()
    ffwd = _FeedForward(C, dropout=0.0).eval()
    return ln1, sa, ln2, ffwd


def _no_grad(f: Callable, *args: object) -> object:
    with torch.no_grad():
        return f(*args)


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
        expected = functools.partial(_no_grad, _block, x, *mods, "pre", "pre", False)
        cases.append(Case((x, *mods), say(TEXTS["case_x"], shape=(B, T, C)), expected, _block_variants(),
                          functools.partial(_no_grad, _block_steps, x, *mods)))
    forbidden = Forbidden({_Block: "gpt_lesson.model.Block", _SourceBlock: "gpt_lesson.reference.Block"})
    return run_cases(Verdict(name), fn, cases, forbidden=forbidden, success=say(TEXTS["block_passed"]))


# ----------------------------------------------------------------------------------------------
# LayerNorm


def _layer_norm(*args: object) -> torch.Tensor:
    """LayerNorm with chosen mistakes: ``(x, weight, bias[, eps], center, unbiased, eps_mode, affine, dim)``."""
    *inputs, center, unbiased, eps_mode, affine, dim = args
    x, weight, bias, *given = inputs
    eps = given[0] if given else 1e-5  # the learner's function runs with its default eps unless one is passed
    e = {"inside": eps, "outside": eps, "none": 0.0, "fixed": 1e-5, "std": eps}[eps_mode]
    dims = tuple(range(x.dim())) if dim is None else dim
    xc = x - x.mean(dims, keepdim=True) if center else x
    var = x.var(dims, keepdim=True, unbiased=unbiased)
    if eps_mode == "std":
        y = xc / (var.sqrt() + e).sqrt()
    else:
        y = xc / (var.sqrt() + e) if eps_mode == "outside" else xc / (var + e).sqrt()
    return {"gain+bias": lambda: y * weight + bias, "bias": lambda: y + bias, "gain": lambda: y * weight,
            "swapped": lambda: y * bias + weight, "none": lambda: y}[affine]()


def _full_name(short: str) -> str:
    """"F.layer_norm" -> "torch.nn.functional.layer_norm", "nn.LayerNorm" -> "torch.nn.LayerNorm" (for messages)."""
    for prefix, full in (("F.", "torch.nn.functional."), ("nn.", "torch.nn.")):
        if short.startswith(prefix):
            return full + short[len(prefix):]
    return short


def _layer_norm_variants(eps: float | None) -> Iterator[Variant]:
    knobs = [
        [(True, None), (False, _bug(NO_MEAN_SUBTRACTION, "no_mean"))],
        [(False, None), (True, _bug(UNBIASED_VARIANCE, "unbiased"))],
        [("inside", None), ("outside", _bug(EPS_OUTSIDE_SQRT, "eps_outside")),
         ("none", _bug(EPS_MISSING, "eps_missing")), ("std", _bug(STD_NOT_VAR, "std_not_var"))]
        + ([("fixed", _bug(EPS_IGNORED, "eps_ignored", eps=eps))] if eps is not None else []),
        [("gain+bias", None), ("bias", _bug(NO_GAIN, "no_gain")), ("gain", _bug(NO_BIAS, "no_bias")),
         ("swapped", _bug(GAIN_BIAS_SWAPPED, "gain_bias_swapped"))],
        [(-1, None), (1, _bug(LN_WRONG_DIM, "wrong_dim", dim=1)), (0, _bug(LN_WRONG_DIM, "wrong_dim", dim=0)),
         (None, _bug(LN_WRONG_DIM, "whole_tensor"))],
    ]
    yield Variant((_bug(RMS_NOT_LAYER_NORM, "rms"),), _rms_norm)
    yield from combinations(knobs, _layer_norm, max_bugs=2)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * weight + bias


def _layer_norm_steps(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> list[Step]:
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    y = (x - mean) / (var + eps).sqrt()
    return [Step(TEXTS["step_mean"], mean), Step(TEXTS["step_centred"], x - mean), Step(TEXTS["step_var"], var),
            Step(TEXTS["step_normalised"], y), Step(TEXTS["step_gain"], y * weight)]


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
        expected = functools.partial(F.layer_norm, x, (C,), weight, bias, 1e-5 if eps is None else eps)
        description = say(TEXTS["case_x"] if eps is None else TEXTS["case_x_eps"], shape=(B, T, C), eps=eps)
        cases.append(Case(args, description, expected, _layer_norm_variants(eps),
                          functools.partial(_layer_norm_steps, *args)))
    # F.layer_norm and nn.LayerNorm, and the norms that compute it in disguise (group_norm with one group, ...)
    forbidden = Forbidden({f: _full_name(n) for f, n in RULES["layer_norm"].entries.items()})
    return run_cases(Verdict(name), fn, cases, forbidden=forbidden, hints=[("positional argument", TEXTS["needs_eps"])],
                     success=say(TEXTS["layer_norm_passed"]))
