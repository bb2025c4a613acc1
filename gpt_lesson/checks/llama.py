"""Checks for lesson 14: RMSNorm, rotary position embeddings and grouped-query attention's head sharing.

Each compares the learner's function with :mod:`gpt_lesson.llama` on small seeded inputs and names the
classic mistakes: for RMSNorm the mean of x instead of the mean of its squares, eps outside the square
root, the wrong dimension; for RoPE the pairs, the frequency formula, rotating v as well as q and k,
positions that ignore the cache; for GQA tiling the heads instead of interleaving them, or repeating along
another dimension.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import llama
from .block import EPS_IGNORED, EPS_MISSING, EPS_OUTSIDE_SQRT, LN_WRONG_DIM
from .runner import (
    Forbidden,
    call,
    judge_tensor,
    kind_of,
    learner_check,
    randn,
    require_callable,
    run_cases,
    screen,
    seeded,
    tensor_kind_problem,
)
from .verdicts import (
    MESSAGES,
    N_,
    WRONG_SHAPE,
    WRONG_TYPE,
    Bug,
    Case,
    CheckResult,
    Variant,
    Verdict,
    combinations,
    say,
    variant,
)

# Labels: stable identifiers in CheckResult.diagnosis.
MEAN_SUBTRACTED = N_("mean subtracted (LayerNorm, not RMSNorm)")
NOT_MEAN_OF_SQUARES = N_("mean of x instead of the mean of its squares")
MEAN_OF_ABS = N_("mean of |x| instead of the root mean square")
SUM_OF_SQUARES = N_("sum of squares instead of their mean")
STD_NOT_RMS = N_("standard deviation instead of the root mean square")
NO_SQUARE_ROOT = N_("square root missing")
NO_RMS_WEIGHT = N_("weight missing")
WEIGHT_ADDED = N_("weight added instead of multiplied")
INTERLEAVED_PAIRS = N_("pairs (2i, 2i+1) instead of (i, i + d/2)")
FREQ_EXPONENT = N_("frequency exponent i/d instead of 2i/d")
FREQ_INVERTED = N_("frequencies inverted")
THETA_IGNORED = N_("theta argument ignored")
NO_FREQUENCIES = N_("every pair at the same frequency")
ROTATED_BACKWARDS = N_("rotated the wrong way")
COS_SIN_SWAPPED = N_("cos and sin swapped")
V_ROTATED = N_("v rotated too")
Q_NOT_ROTATED = N_("q not rotated")
K_NOT_ROTATED = N_("k not rotated")
POSITIONS_FROM_ZERO = N_("positions ignored (counted from 0)")
POSITIONS_SHIFTED = N_("positions shifted by one")
HEADS_TILED = N_("kv heads tiled instead of interleaved")
REPEATED_N_HEAD_TIMES = N_("repeated n_head times instead of n_head // n_kv_head")
REPEATED_WRONG_DIM = N_("repeated along the wrong dimension")
NOT_REPEATED = N_("kv heads not repeated")

TEXTS = {
    "case_rms": N_("x of shape {shape}"),
    "case_rms_eps": N_("x of shape {shape}, eps={eps}"),
    "mean_subtracted": N_("you subtracted the mean first: that is LayerNorm. RMSNorm divides x itself by its root mean "
                          "square, x / sqrt(mean(x**2) + eps), and keeps the mean."),
    "mean_not_squares": N_("you took the mean of x; RMSNorm takes the mean of the squares, x.pow(2).mean(-1, "
                           "keepdim=True), then its square root."),
    "mean_abs": N_("you divided by the mean of |x|; RMSNorm divides by the root mean square: "
                   "sqrt(mean(x**2) + eps)."),
    "sum_squares": N_("you summed the squares; take their mean over the last dimension (divide by C): "
                      "x.pow(2).mean(-1, keepdim=True)."),
    "std": N_("x.std() subtracts the mean (and divides by C - 1): RMSNorm uses the root mean square of x itself, "
              "sqrt(mean(x**2) + eps)."),
    "no_sqrt": N_("you divided by the mean square itself; divide by its square root: x / sqrt(mean(x**2) + eps) "
                  "(or x * torch.rsqrt(...))."),
    "rms_eps_outside": N_("eps is outside the square root: x / (sqrt(mean(x**2)) + eps); RMSNorm computes "
                          "x / sqrt(mean(x**2) + eps)."),
    "rms_eps_missing": N_("you left out eps: sqrt(mean(x**2) + eps) keeps a row of (almost) zeros from dividing by 0."),
    "rms_eps_ignored": N_("your function ignores its eps argument (the check passed eps={eps}): use eps, not a "
                          "constant."),
    "rms_wrong_dim": N_("you averaged over dim={dim}; RMSNorm normalises each position's vector, over the last "
                        "dimension: mean(dim=-1, keepdim=True)."),
    "no_weight": N_("the weight is missing: multiply the normalised x by weight (RMSNorm has a gain and no bias)."),
    "weight_added": N_("you added the weight; RMSNorm multiplies by it: x / rms * weight."),
    "needs_eps": N_("your function must take eps as its third argument: def fn(x, weight, eps=1e-6)."),
    "rms_passed": N_("Your RMSNorm equals gpt_lesson.llama.RMSNorm over the last dimension, eps included."),
    "case_rope": N_("q, k, v of shape {shape} at positions {positions}, theta={theta}"),
    "stacked": N_("   (q, k, v compared together, stacked as (3, B, n_head, T, head_size): the first index is 0 for "
                  "q, 1 for k, 2 for v)\n"),
    "rope_not_triple": N_("   Your function returned {kind}; return the tuple (q, k, v), each of shape {shape}."),
    "rope_shapes": N_("   Your function returned tensors of shapes {got}; each of q, k, v keeps its shape {shape}."),
    "interleaved": N_("you paired channels (2i, 2i+1). Both pairings are RoPE, but Llama's weights in transformers "
                      "(and this lesson) pair channel i with i + d/2: rotate_half gives (-x2, x1) for the two halves "
                      "x1, x2."),
    "freq_exponent": N_("your exponent is i/d; the frequency of pair i is theta ** (-2i / d): torch.arange(0, d, 2) / d."),
    "freq_inverted": N_("your frequencies grow with i: theta ** (+2i/d). Pair i turns by theta ** (-2i / d) per "
                        "position: 1 for the first pair, about 1/theta for the last."),
    "theta_ignored": N_("your function ignores its theta argument (the check passed theta={theta}): the base of the "
                        "frequencies is theta."),
    "no_freq": N_("every pair turns by the same angle (the position): each pair i has its own frequency "
                  "theta ** (-2i / d)."),
    "backwards": N_("you rotated by minus the angle: the rotated x is x * cos + rotate_half(x) * sin with "
                    "rotate_half(x) = (-x2, x1), not (x2, -x1)."),
    "cos_sin_swapped": N_("cos and sin are swapped: x * cos(angle) + rotate_half(x) * sin(angle)."),
    "v_rotated": N_("you rotated v too. Positions enter through the scores q . k only; the values are what the "
                    "weights average, and stay as they are: return v unchanged."),
    "q_not_rotated": N_("q is not rotated: rotate both q and k, so that q . k depends on their distance."),
    "k_not_rotated": N_("k is not rotated: rotate both q and k, so that q . k depends on their distance."),
    "positions_zero": N_("you used positions 0, 1, 2, ... instead of the positions given ({positions}): with a KV "
                         "cache the new tokens sit after the cached ones, at positions past, past + 1, ..."),
    "positions_shifted": N_("your positions are off by one: rotate by positions * frequency with the positions as "
                            "given."),
    "rope_passed": N_("Your RoPE rotates q and k like gpt_lesson.llama.RotaryEmbedding and leaves v alone."),
    "case_kv": N_("kv of shape {shape} (n_kv_head={n_kv}) and n_head={n_head}"),
    "tiled": N_("you tiled the heads (kv heads 0, 1, 0, 1, ...: .repeat or torch.cat): query head h then reads kv "
                "head h % n_kv_head. GQA gives each kv head to n_head // n_kv_head consecutive query heads "
                "(0, 0, 1, 1, ...): kv.repeat_interleave(n_head // n_kv_head, dim=1)."),
    "n_head_times": N_("you repeated each kv head n_head times; repeat it n_head // n_kv_head times, so that "
                       "n_kv_head * (n_head // n_kv_head) = n_head heads come out."),
    "wrong_dim": N_("you repeated along dim={dim}; the heads are dim 1 of (B, n_kv_head, T, head_size): "
                    "repeat_interleave(n_rep, dim=1)."),
    "not_repeated": N_("your output still has n_kv_head heads; repeat each n_head // n_kv_head times along dim 1."),
    "kv_passed": N_("Your function gives query head h the kv head h // (n_head // n_kv_head), like "
                    "gpt_lesson.llama.repeat_kv."),
}


def _bug(label: str, key: str, **fields: object) -> Bug:
    return Bug(label, TEXTS[key], fields)


# ----------------------------------------------------------------------------------------------
# RMSNorm


def _rms_norm(*args: object) -> torch.Tensor:
    """RMSNorm with chosen mistakes: ``(x, weight[, eps], center, statistic, root, eps_mode, dim, weight_mode)``."""
    *inputs, center, statistic, root, eps_mode, dim, weight_mode = args
    x, weight, *given = inputs
    eps = given[0] if given else 1e-6
    e = {"inside": eps, "outside": eps, "none": 0.0, "fixed": 1e-6}[eps_mode]
    h = x - x.mean(dim, keepdim=True) if center else x
    stat = {"mean_sq": lambda: h.pow(2).mean(dim, keepdim=True), "mean": lambda: h.mean(dim, keepdim=True),
            "sum_sq": lambda: h.pow(2).sum(dim, keepdim=True), "std": lambda: h.var(dim, keepdim=True),
            "mean_abs": lambda: h.abs().mean(dim, keepdim=True) ** 2}[statistic]()  # squared: the root undoes it
    if root:
        y = h / (stat.sqrt() + e) if eps_mode == "outside" else h / (stat + e).sqrt()
    else:
        y = h / (stat + e)
    return {"times": lambda: y * weight, "none": lambda: y, "plus": lambda: y + weight}[weight_mode]()


def _rms_variants(eps: float | None) -> Iterator[Variant]:
    knobs = [
        [(False, None), (True, _bug(MEAN_SUBTRACTED, "mean_subtracted"))],
        [("mean_sq", None), ("mean", _bug(NOT_MEAN_OF_SQUARES, "mean_not_squares")),
         ("mean_abs", _bug(MEAN_OF_ABS, "mean_abs")), ("sum_sq", _bug(SUM_OF_SQUARES, "sum_squares")),
         ("std", _bug(STD_NOT_RMS, "std"))],
        [(True, None), (False, _bug(NO_SQUARE_ROOT, "no_sqrt"))],
        [("inside", None), ("outside", _bug(EPS_OUTSIDE_SQRT, "rms_eps_outside")),
         ("none", _bug(EPS_MISSING, "rms_eps_missing"))]
        + ([("fixed", _bug(EPS_IGNORED, "rms_eps_ignored", eps=eps))] if eps is not None else []),
        [(-1, None), (1, _bug(LN_WRONG_DIM, "rms_wrong_dim", dim=1)), (0, _bug(LN_WRONG_DIM, "rms_wrong_dim", dim=0))],
        [("times", None), ("none", _bug(NO_RMS_WEIGHT, "no_weight")), ("plus", _bug(WEIGHT_ADDED, "weight_added"))],
    ]
    return combinations(knobs, _rms_norm, max_bugs=2)


def _forbidden_norms() -> Forbidden:
    entries: dict[object, str] = {llama.RMSNorm: "gpt_lesson.llama.RMSNorm", nn.RMSNorm: "torch.nn.RMSNorm",
                                  F.rms_norm: "torch.nn.functional.rms_norm"}
    if hasattr(torch, "rms_norm"):
        entries[torch.rms_norm] = "torch.rms_norm"
    return Forbidden(entries)


@learner_check
def check_rms_norm(fn: Callable[..., torch.Tensor], *, strict: bool = False, hidden: bool = False) -> CheckResult:
    """Check ``fn(x, weight, eps=1e-6)`` -> RMSNorm of ``x`` over its last dimension, times ``weight``.

    The first input has rows of tiny values (where eps matters); the last passes ``eps`` explicitly.
    """
    name = "check_rms_norm"
    require_callable(name, fn)
    sizes = [(61, (2, 5, 8), 1e-3, None), (62, (3, 4, 6), 2.0, None), (63, (2, 3, 10), 0.05, 1e-2)]
    sizes += [(64, (1, 7, 16), 3.0, None), (65, (4, 2, 4), 1e-3, 1e-4)] if hidden else []
    cases = []
    for seed, (B, T, C), spread, eps in sizes:
        g = seeded(seed)
        x = randn(g, B, T, C) * spread + randn(g, B, T, 1) * spread  # rows with their own mean: mean != RMS
        weight = 1 + 0.5 * randn(g, C)
        args = (x, weight) if eps is None else (x, weight, eps)
        expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + (1e-6 if eps is None else eps)) * weight
        description = say(TEXTS["case_rms"] if eps is None else TEXTS["case_rms_eps"], shape=(B, T, C), eps=eps)
        cases.append(Case(args, description, expected, _rms_variants(eps)))
    return run_cases(Verdict(name), fn, cases, forbidden=_forbidden_norms(),
                     hints=[("positional argument", TEXTS["needs_eps"])], success=say(TEXTS["rms_passed"]))


# ----------------------------------------------------------------------------------------------
# RoPE


def _rope(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, theta: float | None,
          pairing: str = "half", freqs: str = "2i/d", direction: int = 1, swap: bool = False,
          rotated: str = "qk", where: str = "given") -> torch.Tensor:
    """(q, k, v) after RoPE with chosen mistakes, stacked: (3, B, nh, T, hs)."""
    d = q.size(-1)
    base = 10000.0 if theta is None or freqs == "theta ignored" else theta
    i = torch.arange(0, d, 2, dtype=torch.float32)
    inv = {"2i/d": lambda: 1.0 / base ** (i / d), "theta ignored": lambda: 1.0 / base ** (i / d),
           "i/d": lambda: 1.0 / base ** (i / 2 / d), "inverted": lambda: base ** (i / d),
           "none": lambda: torch.ones(d // 2)}[freqs]()
    pos = {"given": positions, "zero": torch.arange(len(positions)), "shifted": positions + 1}[where]
    angles = pos.to(torch.float32)[:, None] * inv  # (T, d/2)
    cos, sin = angles.cos(), angles.sin()
    if swap:
        cos, sin = sin, cos

    def rotate(x: torch.Tensor) -> torch.Tensor:
        if pairing == "half":
            x1, x2 = x.chunk(2, dim=-1)
        else:
            x1, x2 = x[..., 0::2], x[..., 1::2]
        r1, r2 = x1 * cos - direction * x2 * sin, x2 * cos + direction * x1 * sin
        return torch.cat((r1, r2), dim=-1) if pairing == "half" else torch.stack((r1, r2), dim=-1).flatten(-2)

    out = [rotate(t) if name in rotated else t for name, t in zip("qkv", (q, k, v))]
    return torch.stack(out)


def _rope_variants(theta: float | None, positions: torch.Tensor) -> Iterator[Variant]:
    starts_at_zero = bool(positions[0] == 0)
    knobs = [
        [("half", None), ("interleaved", _bug(INTERLEAVED_PAIRS, "interleaved"))],
        [("2i/d", None), ("i/d", _bug(FREQ_EXPONENT, "freq_exponent")), ("inverted", _bug(FREQ_INVERTED, "freq_inverted")),
         ("none", _bug(NO_FREQUENCIES, "no_freq"))]
        + ([("theta ignored", _bug(THETA_IGNORED, "theta_ignored", theta=theta))] if theta is not None else []),
        [(1, None), (-1, _bug(ROTATED_BACKWARDS, "backwards"))],
        [(False, None), (True, _bug(COS_SIN_SWAPPED, "cos_sin_swapped"))],
        [("qk", None), ("qkv", _bug(V_ROTATED, "v_rotated")), ("k", _bug(Q_NOT_ROTATED, "q_not_rotated")),
         ("q", _bug(K_NOT_ROTATED, "k_not_rotated"))],
        [("given", None), ("shifted", _bug(POSITIONS_SHIFTED, "positions_shifted"))]
        + ([] if starts_at_zero else [("zero", _bug(POSITIONS_FROM_ZERO, "positions_zero",
                                                    positions=positions.tolist()))]),
    ]

    def compute(q, k, v, positions, *rest):
        theta_arg = rest[0] if len(rest) > 6 else None
        return _rope(q, k, v, positions, theta_arg, *rest[-6:])

    return combinations(knobs, compute, max_bugs=2)


@learner_check
def check_rope(fn: Callable[..., tuple], *, strict: bool = False, hidden: bool = False) -> CheckResult:
    """Check ``fn(q, k, v, positions, theta=10000.0)`` -> ``(q, k, v)`` with q and k rotated by RoPE, v unchanged.

    q, k, v have shape (B, n_head, T, head_size); ``positions`` (T,) are the tokens' positions (after a
    KV cache of ``past`` tokens: past, past + 1, ...). Channel pairs are (i, i + head_size/2), turned by
    ``positions * theta ** (-2i / head_size)``, as :class:`gpt_lesson.llama.RotaryEmbedding` does.
    """
    name = "check_rope"
    require_callable(name, fn)
    sizes = [(71, (1, 2, 4, 8), 0, None), (72, (2, 1, 3, 6), 5, 100.0)]
    sizes += [(73, (2, 3, 5, 4), 0, 10.0), (74, (1, 2, 2, 10), 17, 500.0)] if hidden else []
    verdict = Verdict(name)
    forbidden = Forbidden({llama.apply_rope: "gpt_lesson.llama.apply_rope",
                           llama.RotaryEmbedding: "gpt_lesson.llama.RotaryEmbedding",
                           llama.rope_frequencies: "gpt_lesson.llama.rope_frequencies"})
    for i, (seed, shape, past, theta) in enumerate(sizes):
        g = seeded(seed)
        q, k, v = (randn(g, *shape) for _ in range(3))
        positions = torch.arange(past, past + shape[2])
        args = (q, k, v, positions) if theta is None else (q, k, v, positions, theta)
        description = say(TEXTS["case_rope"], shape=shape, positions=positions.tolist(), theta=theta or 10000.0)
        where = (say(MESSAGES["on_case"], description=description) if i else "") + say(TEXTS["stacked"])
        outcome = call(fn, args, forbidden)
        early = screen(verdict, outcome, where)
        if early is not None:
            return early
        out = outcome.value
        if not (isinstance(out, (tuple, list)) and len(out) == 3 and all(isinstance(t, torch.Tensor) for t in out)):
            return verdict.failed(WRONG_TYPE, where + say(TEXTS["rope_not_triple"], kind=kind_of(out), shape=shape))
        problem = next((p for p in (tensor_kind_problem(t, shape) for t in out) if p is not None), None)
        if problem is not None:
            return verdict.failed(problem[0], where + problem[1])
        if any(tuple(t.shape) != shape for t in out):
            return verdict.failed(WRONG_SHAPE, where + say(TEXTS["rope_shapes"], got=[tuple(t.shape) for t in out],
                                                           shape=shape))
        expected = _rope(q, k, v, positions, theta)
        case = Case(args, description, expected, _rope_variants(theta, positions))
        result = judge_tensor(verdict, torch.stack([t.detach().to(expected.dtype) for t in out]), case, where)
        if result is not None:
            return result
    return verdict.passed(say(TEXTS["rope_passed"]))


# ----------------------------------------------------------------------------------------------
# Grouped-query attention: which key/value head each query head reads


@learner_check
def check_repeat_kv(fn: Callable[[torch.Tensor, int], torch.Tensor], *, strict: bool = False,
                    hidden: bool = False) -> CheckResult:
    """Check ``fn(kv, n_head)``: (B, n_kv_head, T, head_size) -> (B, n_head, T, head_size), query head h
    reading kv head ``h // (n_head // n_kv_head)`` (``repeat_interleave`` along dim 1)."""
    name = "check_repeat_kv"
    require_callable(name, fn)
    sizes = [(81, (2, 2, 3, 4), 6), (82, (1, 1, 4, 2), 3)] + ([(83, (2, 3, 2, 5), 6), (84, (1, 4, 3, 2), 8)]
                                                             if hidden else [])
    cases = []
    for seed, shape, n_head in sizes:
        kv = randn(seeded(seed), *shape)
        n_rep = n_head // shape[1]
        variants = [
            variant(HEADS_TILED, TEXTS["tiled"], lambda kv, h: kv.repeat(1, h // kv.size(1), 1, 1)),
            variant(REPEATED_N_HEAD_TIMES, TEXTS["n_head_times"], lambda kv, h: kv.repeat_interleave(h, dim=1)),
            variant(NOT_REPEATED, TEXTS["not_repeated"], lambda kv, h: kv),
            *[variant(REPEATED_WRONG_DIM, TEXTS["wrong_dim"], lambda kv, h, d=d: kv.repeat_interleave(
                h // kv.size(1), dim=d), dim=d) for d in (0, 2, 3)],
            variant(REPEATED_N_HEAD_TIMES, TEXTS["n_head_times"], lambda kv, h: kv.repeat(1, h, 1, 1)),
        ]
        cases.append(Case((kv, n_head), say(TEXTS["case_kv"], shape=shape, n_kv=shape[1], n_head=n_head),
                          kv.repeat_interleave(n_rep, dim=1), variants))
    forbidden = Forbidden({llama.repeat_kv: "gpt_lesson.llama.repeat_kv"})
    return run_cases(Verdict(name), fn, cases, forbidden=forbidden, success=say(TEXTS["kv_passed"]))

