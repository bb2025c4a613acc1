"""Checks for lessons 02-04 (and the attention exercises of 08, 09, 11): scores, softmax, one causal head.

The causal head's variants are every combination of up to two classic mistakes (how the scores
are multiplied, how they are scaled, how the mask is applied, which dimension the softmax runs
over, which tensor the weights multiply); the diagnosis is the first of them in the order of the
code, the message lists the others.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from .. import attention as _attention
from .. import model, reference
from .runner import Forbidden, Step, close, learner_check, randn, require_callable, run_cases, seeded
from .verdicts import N_, Bug, Case, CheckResult, Variant, Verdict, combinations, say, variant

# The library functions the checks compare with, bound at import: replacing gpt_lesson.attention.attention_scores
# later (with the learner's own function, say) changes neither the reference nor what counts as calling it.
lib = SimpleNamespace(**{name: getattr(_attention, name) for name in (
    "attention_scores", "attention_weights", "causal_mask", "naive_attention", "sdpa_attention", "apply_mask",
    "weighted_sum", "one_query_attention")})
_CausalSelfAttention, _SourceCausalSelfAttention = model.CausalSelfAttention, reference.CausalSelfAttention

# Labels: stable identifiers in CheckResult.diagnosis.
SCALED_BY_N_EMBD = N_("scaled by n_embd (d_model) instead of head size")
SCALED_BY_HEAD_SIZE = N_("scaled by head size instead of its square root")
NO_SCALING = N_("no scaling")
WRONG_SCALING = N_("wrong scaling")
MISSING_TRANSPOSE = N_("missing transpose")
KQ_TRANSPOSED = N_("k @ q^T (scores transposed)")
SOFTMAX_WRONG_DIM = N_("softmax over the wrong dimension")
SOFTMAX_OVERFLOW = N_("softmax overflows (no max subtracted)")
GLOBAL_MAX = N_("max of the whole tensor subtracted")
MAX_WRONG_DIM = N_("max taken over the wrong dimension")
LOG_SOFTMAX = N_("log-probabilities instead of probabilities")
NOT_NORMALISED = N_("not normalised")
MASK_AFTER_SOFTMAX = N_("masking after the softmax")
MASK_WITH_ZERO = N_("masking with 0 instead of -inf")
NO_MASK = N_("no mask")
MASK_WRONG_TRIANGLE = N_("mask hides the past instead of the future")
MASK_ONE_OFF = N_("mask one off")
FLOAT_MASK_ADDED = N_("float tril passed as attn_mask to SDPA (added, not hidden)")
BOOL_MASK_INVERTED = N_("bool mask inverted")
WEIGHTS_NOT_ON_V = N_("weights applied to q or k, not v")
SOFTMAX_IN_SCORES = N_("softmax applied to the scores")
SCORES_MASKED = N_("scores masked already")
FLOOR_DIVISION = N_("floor division // in the scaling")
PRECEDENCE = N_("hs ** 1/2 is hs / 2")
SUM_WRONG_DIM = N_("row sums taken over the wrong dimension")
SUM_OF_WHOLE = N_("divided by the sum of the whole tensor")
SIGMOID_NOT_SOFTMAX = N_("sigmoid instead of softmax")
NEG_INF_AS_ZERO = N_("-inf turned into 0 before the softmax")
MIN_NOT_MAX = N_("row minimum subtracted instead of the maximum")
TEMPERATURE = N_("scores scaled before the softmax")
UNIFORM_WEIGHTS = N_("uniform average instead of softmax weights")
SDPA_ARGS_ORDER = N_("q, k, v passed in another order")

TEXTS = {
    "no_scaling": N_("you did not scale the scores: divide them by sqrt(head_size) = sqrt({hs})."),
    "by_head_size": N_("you divided by head_size = {hs}; divide by its square root, sqrt({hs}) = {root:.3f}."),
    "by_n_embd": N_("did you divide by sqrt(n_embd) = sqrt({d:.4g}) instead of sqrt(head_size) = sqrt({hs})? "
                    "Take the head size from q.size(-1)."),
    "multiplied": N_("your scores are {factor:.2f}x too large: did you multiply by sqrt(head_size) instead of "
                     "dividing?"),
    "other_scale": N_("you divided by sqrt({d:.4g}); divide by sqrt(head_size) = sqrt({hs}), with "
                      "head_size = q.size(-1)."),
    "q_at_k": N_("you multiplied q @ k; the scores are q @ k.transpose(-2, -1) (each query dotted with each key)."),
    "qT_at_k": N_("you transposed q instead of k: the scores are q @ k.transpose(-2, -1), shape (B, T, T)."),
    "kq": N_("you computed k @ q^T, the transpose of the scores: row i would hold key i against every query. "
             "Queries index the rows: q @ k.transpose(-2, -1)."),
    "dim_keys": N_("each query's row must sum to 1, so the softmax runs over the keys: dim=-1. "
                   "Your columns sum to 1 instead."),
    "dim_batch": N_("you took the softmax over the batch (dim=0; also what F.softmax does without dim=); use "
                    "dim=-1, the keys."),
    "overflow": N_("your softmax gives NaN for large scores: exp(800) overflows to inf and inf / inf is NaN. "
                   "Subtract each row's largest score first, scores - scores.amax(dim=-1, keepdim=True): a "
                   "softmax does not change when a whole row is shifted, and the largest exponent becomes 0."),
    "global_max": N_("you subtracted the largest score of the whole tensor: rows far below it underflow to "
                     "0 / 0 = NaN. Subtract each row's own max: scores.amax(dim=-1, keepdim=True)."),
    "max_dim": N_("you subtracted a max taken over another dimension, so each row was shifted by different "
                  "amounts: use scores.amax(dim=-1, keepdim=True)."),
    "log_softmax": N_("you returned log-probabilities (log_softmax); the weights are the probabilities: "
                      "softmax(scores, dim=-1)."),
    "not_normalised": N_("you exponentiated but did not divide by the row sums: e / e.sum(dim=-1, keepdim=True)."),
    "after": N_("you masked the weights after the softmax, so the rows no longer sum to 1. Mask the scores "
                "with -inf first, then take the softmax."),
    "after_inf": N_("you filled the weights with -inf after the softmax; mask the scores (before the softmax), "
                    "which turns -inf into exact zeros."),
    "zero": N_("you filled the future scores with 0; exp(0) = 1, so the future still gets weight. Use "
               "masked_fill(tril == 0, float('-inf'))."),
    "none": N_("every position attends to the future: apply the causal mask (tril) to the scores before "
               "the softmax."),
    "triu": N_("your mask keeps the future and hides the past: use torch.tril (lower triangle), not triu."),
    "one_ahead": N_("your mask is one off: torch.tril(..., diagonal=1) lets each query see the next token too. "
                    "Use the default diagonal=0: position t sees 0..t."),
    "one_behind": N_("your mask is one off: torch.tril(..., diagonal=-1) hides each query from itself, and "
                     "the first row has nothing left to see. Use the default diagonal=0."),
    "added": N_("the mask was added to the scores instead of hiding them: F.scaled_dot_product_attention adds a "
                "float attn_mask, so a tril of 1.0 and 0.0 adds 1 to the past and hides nothing. Pass a bool "
                "mask (True = may attend: tril.bool()) or is_causal=True."),
    "inverted": N_("your mask is inverted: each query sees only the future. For masked_fill hide where "
                   "tril == 0; a bool attn_mask for SDPA is True where attending is allowed: tril.bool()."),
    "by_length": N_("you divided by sqrt(T) = sqrt({T}), the sequence length q.size(1); the head size is the last "
                    "dimension, q.size(-1) = {hs}."),
    "not_v": N_("you multiplied the weights by {used}; the output is the weighted sum of the values: weights @ v."),
    "dim_head": N_("the softmax must run over the keys (dim=-1) so each query's weights sum to 1."),
    "softmax_in_scores": N_("you applied the softmax: this exercise returns the scores themselves, before the "
                            "softmax turns them into weights."),
    "scores_masked": N_("you masked the scores: this exercise returns all T x T scores; the causal mask comes in "
                        "lesson 03, on top of them."),
    "floor_division": N_("you divided with //, which rounds every score down to a whole number: use / "
                         "(q @ k.transpose(-2, -1) / math.sqrt(head_size))."),
    "precedence": N_("your scores are divided by {divisor:g}, not sqrt({hs}): ** binds before /, so hs ** 1/2 is "
                     "(hs ** 1) / 2. Write hs ** 0.5 or math.sqrt(hs)."),
    "sum_wrong_dim": N_("you shifted and exponentiated each row, then divided by sums over dim=-2 (down each "
                        "column): divide by e.sum(dim=-1, keepdim=True), each query's row."),
    "sum_of_whole": N_("you divided by the sum of the whole tensor (e.sum() without dim): each row must sum to 1, so "
                       "divide by e.sum(dim=-1, keepdim=True)."),
    "sigmoid": N_("you applied a sigmoid to each score on its own; softmax makes each row sum to 1: "
                  "exp(s - max) / sum over the row."),
    "neg_inf_zero": N_("you replaced the masked -inf by 0 before the softmax, so the future gets weight exp(0) = 1 "
                       "again; exp(-inf) is exactly 0: subtract the row maximum and exponentiate, -inf and all."),
    "min_not_max": N_("you subtracted each row's minimum: the largest exponent is then far above 0 and exp "
                      "overflows on large scores. Subtract the maximum: scores.amax(dim=-1, keepdim=True)."),
    "temperature": N_("your weights are softmax({factor:.3g} * scores): the scores were multiplied (or divided) "
                      "by a constant before the softmax. Take the softmax of the scores as they come."),
    "uniform": N_("you averaged the visible values uniformly (lesson 02's first step); the head weighs them by "
                  "softmax(q @ k^T / sqrt(head_size)) with the causal mask."),
    "sdpa_order": N_("F.scaled_dot_product_attention takes (query, key, value) in that order; you passed them as "
                     "({order})."),
    "step_product": N_("the product q @ k^T"),
    "step_scaled": N_("the scaled scores"),
    "step_masked": N_("the masked scores (-inf above the diagonal)"),
    "step_weights": N_("the weights (softmax over the keys)"),
    "step_shifted": N_("the shifted scores (each row's maximum subtracted)"),
    "step_exp": N_("their exponentials"),
    "case_qk": N_("q and k of shape {shape}"),
    "case_scores": N_("scores of shape {shape}"),
    "case_large": N_("large scores (100x the first inputs' and more) of shape {shape}"),
    "case_qkv": N_("q, k, v of shape {shape}"),
    "scores_passed": N_("Your scores equal gpt_lesson.attention.attention_scores on {count} inputs."),
    "softmax_passed": N_("Your weights equal F.softmax(scores, dim=-1): each row sums to 1, even for large scores."),
    "head_passed": N_("Your head equals gpt_lesson.attention.naive_attention with a causal mask."),
}

TRANSPOSE_TEXTS = [("cannot be multiplied", N_("a missing transpose: the scores are q @ k.transpose(-2, -1)."))]
MASK_SIZE_TEXTS = [
    ("must match the size", N_("the mask must be (T, T) for this input: build it from the input, tril = "
                               "torch.tril(torch.ones(T, T)) with T = q.size(1), or slice a bigger one: "
                               "tril[:T, :T].")),
    ("should not be set when is_causal", N_("pass either attn_mask or is_causal=True to "
                                            "F.scaled_dot_product_attention, not both.")),
]
# n_embd values a notebook is likely to use: a learner who scales by sqrt(n_embd) uses one of them.
COMMON_N_EMBD = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


def _bug(label: str, key: str, **fields: object) -> Bug:
    return Bug(label, TEXTS[key], fields)


def _scale_bug(c: float, hs: int) -> Bug | None:
    """What dividing the raw product by ``1 / c`` means; None for the right 1/sqrt(head_size)."""
    d = 1 / c**2  # the learner computed product / sqrt(d)
    if math.isclose(d, hs, rel_tol=1e-3):
        return None
    if hs > 2 and math.isclose(c, 1 / (2 * hs), rel_tol=1e-3):  # scores / hs ** 1 / 2 = scores / hs / 2
        return _bug(PRECEDENCE, "precedence", hs=hs, divisor=2 * hs)
    if hs > 2 and math.isclose(c, 2 / hs, rel_tol=1e-3):  # scores / (hs ** 1 / 2) = scores / (hs / 2)
        return _bug(PRECEDENCE, "precedence", hs=hs, divisor=hs / 2)
    if math.isclose(d, 1, rel_tol=1e-3):
        return _bug(NO_SCALING, "no_scaling", hs=hs)
    if math.isclose(d, hs**2, rel_tol=1e-3):
        return _bug(SCALED_BY_HEAD_SIZE, "by_head_size", hs=hs, root=math.sqrt(hs))
    if d > hs:
        return _bug(SCALED_BY_N_EMBD, "by_n_embd", d=d, hs=hs)
    if d < 1:
        return _bug(WRONG_SCALING, "multiplied", factor=c * math.sqrt(hs))
    return _bug(WRONG_SCALING, "other_scale", d=d, hs=hs)


# ----------------------------------------------------------------------------------------------
# Scores


_PRODUCT = {
    "qk": lambda q, k: q @ k.transpose(-2, -1),
    "kq": lambda q, k: k @ q.transpose(-2, -1),
    "q_at_k": lambda q, k: q @ k,
    "qT_at_k": lambda q, k: q.transpose(-2, -1) @ k,
}


def fitted_product(out: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[list[Bug], float] | None:
    """``out`` as ``c * product(q, k)`` for one of the products of :data:`_PRODUCT` and a constant ``c > 0``:
    (the bugs the product names, ``c``), or None."""
    for key, product in _PRODUCT.items():
        try:
            p = product(q, k).double()
        except RuntimeError:
            continue
        if p.shape != out.shape:
            continue
        c = (out.double() * p).sum().item() / (p * p).sum().item()
        if c <= 0 or not close(out, c * p):
            continue
        return ([] if key == "qk" else [_bug(KQ_TRANSPOSED if key == "kq" else MISSING_TRANSPOSE, key)]), c
    return None


def _diagnose_scores(out: torch.Tensor, case: Case) -> list[Bug] | None:
    """Scores that are some product of q and k times a constant: name the product, then the scale."""
    q, k = case.args
    fitted = fitted_product(out, q, k)
    if fitted is None:
        return None
    bugs, c = fitted
    scale = _scale_bug(c, q.size(-1))
    return bugs + ([scale] if scale else []) or None


@learner_check
def check_attention_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *, strict: bool = False,
                           hidden: bool = False) -> CheckResult:
    """Check ``fn(q, k)`` -> scaled scores ``q @ k^T / sqrt(head_size)`` of shape (B, T, T).

    ``q`` and ``k`` have shape (B, T, head_size).
    """
    name = "check_attention_scores"
    require_callable(name, fn)
    # The first input has T == head_size, so that a missing transpose still runs and can be named;
    # the second has T != head_size, to catch code that reads d_k from the wrong dimension.
    sizes = [(0, (2, 6, 6)), (1, (3, 5, 8))] + ([(30, (1, 7, 16)), (31, (4, 3, 2))] if hidden else [])
    cases = []
    for seed, (B, T, hs) in sizes:
        g = seeded(seed)
        q, k = randn(g, B, T, hs), randn(g, B, T, hs)
        cases.append(Case((q, k), say(TEXTS["case_qk"], shape=(B, T, hs)),
                          functools.partial(lib.attention_scores, q, k), _scores_variants()))
    forbidden = Forbidden({lib.attention_scores: "gpt_lesson.attention.attention_scores",
                           lib.naive_attention: "gpt_lesson.attention.naive_attention"})
    return run_cases(Verdict(name), fn, cases, forbidden=forbidden, hints=TRANSPOSE_TEXTS, diagnose=_diagnose_scores,
                     success=say(TEXTS["scores_passed"], count=len(cases)))


def _scores_variants() -> list[Variant]:
    def scaled(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))

    def masked(q: torch.Tensor, k: torch.Tensor, fill: float) -> torch.Tensor:
        return scaled(q, k).masked_fill(_masks(q.size(-2))[0] == 0, fill)

    return [
        variant(SOFTMAX_IN_SCORES, TEXTS["softmax_in_scores"], lambda q, k: F.softmax(scaled(q, k), dim=-1)),
        variant(SOFTMAX_IN_SCORES, TEXTS["softmax_in_scores"], lambda q, k: F.softmax(q @ k.transpose(-2, -1), -1)),
        variant(SCORES_MASKED, TEXTS["scores_masked"], lambda q, k: masked(q, k, float("-inf"))),
        variant(SCORES_MASKED, TEXTS["scores_masked"], lambda q, k: masked(q, k, 0.0)),
        variant(FLOOR_DIVISION, TEXTS["floor_division"],
                lambda q, k: torch.floor_divide(q @ k.transpose(-2, -1), math.sqrt(q.size(-1)))),
    ]


# ----------------------------------------------------------------------------------------------
# Softmax


def _softmax_cases(hidden: bool) -> list[Case]:
    cases = []
    sizes = [(2, (2, 5)), (3, (3, 7))] + ([(32, (1, 9)), (33, (2, 2))] if hidden else [])
    for seed, (B, T) in sizes:
        scores = randn(seeded(seed), B, T, T) * 2
        cases.append(Case((scores.masked_fill(lib.causal_mask(T) == 0, float("-inf")),),
                          say(TEXTS["case_scores"], shape=(B, T, T)), None))
    # Large scores (100x and more, as lesson 04 suggests trying): exp overflows in float32 and float64.
    # The second batch entry lies far below the first, so subtracting one global max underflows.
    big = randn(seeded(4), 2, 4, 4) * 250
    big[0] += 600
    big[1] -= 1500
    cases.append(Case((big.masked_fill(lib.causal_mask(4) == 0, float("-inf")),),
                      say(TEXTS["case_large"], shape=(2, 4, 4)), None))
    for case in cases:
        case.expected = functools.partial(F.softmax, case.args[0], dim=-1)
        case.variants = _softmax_variants()
        case.steps = functools.partial(_softmax_steps, case.args[0])
    return cases


def _softmax_steps(s: torch.Tensor) -> list[Step]:
    shifted = s - s.amax(dim=-1, keepdim=True)
    return [Step(TEXTS["step_shifted"], shifted), Step(TEXTS["step_exp"], shifted.exp())]


def _shifted(s: torch.Tensor, m: torch.Tensor, total: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    e = (s - m).exp()
    return e / (e.sum(dim=-1, keepdim=True) if total is None else total(e))


def _softmax_variants() -> list[Variant]:
    def naive(s: torch.Tensor) -> torch.Tensor:
        return s.exp() / s.exp().sum(dim=-1, keepdim=True)

    def row_max(s: torch.Tensor) -> torch.Tensor:
        return s.amax(dim=-1, keepdim=True)

    def row_min(s: torch.Tensor) -> torch.Tensor:  # of the visible scores: -inf is not a minimum anyone takes
        return s.masked_fill(torch.isinf(s), float("inf")).amin(dim=-1, keepdim=True)

    return [
        variant(SOFTMAX_WRONG_DIM, TEXTS["dim_keys"], lambda s: F.softmax(s, dim=-2)),
        variant(SOFTMAX_WRONG_DIM, TEXTS["dim_batch"], lambda s: F.softmax(s, dim=0)),
        variant(SOFTMAX_OVERFLOW, TEXTS["overflow"], naive),
        variant(SOFTMAX_OVERFLOW, TEXTS["overflow"], lambda s: naive(s.double())),
        variant(GLOBAL_MAX, TEXTS["global_max"], lambda s: _shifted(s, s.max())),
        variant(MAX_WRONG_DIM, TEXTS["max_dim"], lambda s: _shifted(s, s.amax(dim=-2, keepdim=True))),
        variant(LOG_SOFTMAX, TEXTS["log_softmax"], lambda s: F.log_softmax(s, dim=-1)),
        variant(NOT_NORMALISED, TEXTS["not_normalised"], lambda s: (s - row_max(s)).exp()),
        variant(NOT_NORMALISED, TEXTS["not_normalised"], lambda s: s.exp()),
        variant(SUM_WRONG_DIM, TEXTS["sum_wrong_dim"], lambda s: _shifted(s, row_max(s), lambda e: e.sum(-2, True))),
        variant(SUM_OF_WHOLE, TEXTS["sum_of_whole"], lambda s: _shifted(s, row_max(s), lambda e: e.sum())),
        variant(SIGMOID_NOT_SOFTMAX, TEXTS["sigmoid"], torch.sigmoid),
        variant(NEG_INF_AS_ZERO, TEXTS["neg_inf_zero"], lambda s: F.softmax(torch.nan_to_num(s, neginf=0.0), -1)),
        variant(MIN_NOT_MAX, TEXTS["min_not_max"], lambda s: _shifted(s, row_min(s))),
    ]


def _diagnose_softmax(out: torch.Tensor, case: Case) -> list[Bug] | None:
    """Weights that are softmax(c * scores) for a constant c != 1: a temperature the exercise did not ask for."""
    s = case.args[0].double()
    o = out.double()
    visible = torch.isfinite(s) & (o > 0)
    if visible.sum() < 4:
        return None
    # log o = c * s - log Z per row: c from the differences to each row's mean over its visible keys.
    logs = torch.where(visible, o.log(), 0.0)
    scores = torch.where(visible, s, 0.0)
    count = visible.sum(-1, keepdim=True).clamp(min=1)
    ds = torch.where(visible, scores - scores.sum(-1, keepdim=True) / count, 0.0)
    dl = torch.where(visible, logs - logs.sum(-1, keepdim=True) / count, 0.0)
    denominator = (ds * ds).sum().item()
    if denominator == 0:
        return None
    c = (ds * dl).sum().item() / denominator
    if not math.isfinite(c) or abs(c - 1) < 1e-3 or c <= 0:
        return None
    if close(out, F.softmax(case.args[0].double() * c, dim=-1)):
        return [_bug(TEMPERATURE, "temperature", factor=c)]
    return None


@learner_check
def check_softmax_weights(fn: Callable[[torch.Tensor], torch.Tensor], *, strict: bool = False,
                          hidden: bool = False) -> CheckResult:
    """Check ``fn(scores)`` -> attention weights: softmax over the last dimension (the keys).

    The inputs are causal scores (-inf above the diagonal) and, last, scores so large that
    ``exp(s) / sum`` overflows: a stable softmax subtracts each row's max first. Lesson 04's exercise
    passes ``without="softmax"``: no F.softmax, torch.softmax, Tensor.softmax, nn.Softmax, log_softmax.
    """
    name = "check_softmax_weights"
    require_callable(name, fn)
    forbidden = Forbidden({lib.attention_weights: "gpt_lesson.attention.attention_weights",
                           lib.naive_attention: "gpt_lesson.attention.naive_attention"})
    return run_cases(Verdict(name), fn, _softmax_cases(hidden), forbidden=forbidden, diagnose=_diagnose_softmax,
                     success=say(TEXTS["softmax_passed"]))


# ----------------------------------------------------------------------------------------------
# One causal head


def _head(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, product: str, scale: float | None, mask: str,
          dim: int, values: str = "v") -> torch.Tensor:
    """One causal head with chosen mistakes: the variants of :func:`check_causal_attention`."""
    T, hs = q.size(-2), q.size(-1)
    scores = _PRODUCT[product](q, k) * (hs**-0.5 if scale is None else scale)
    tril, hidden = _masks(T)
    hide = hidden.get(mask)
    if hide is not None:
        scores = scores.masked_fill(hide, float("-inf"))
    elif mask == "zero":
        scores = scores.masked_fill(tril == 0, 0.0)
    elif mask == "added":
        scores = scores + tril
    weights = F.softmax(scores, dim=dim)
    if mask == "after":
        weights = weights.masked_fill(tril == 0, 0.0)
    elif mask == "after -inf":
        weights = weights.masked_fill(tril == 0, float("-inf"))
    return weights @ {"v": v, "q": q, "k": k}[values]


@functools.lru_cache(maxsize=16)
def _masks(T: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The causal tril of size T and, for each way of masking, where it hides (True = hidden)."""
    ones = torch.ones(T, T)
    tril = torch.tril(ones)
    return tril, {"before": tril == 0, "wrong triangle": tril.T == 0, "one ahead": torch.tril(ones, diagonal=1) == 0,
                  "one behind": torch.tril(ones, diagonal=-1) == 0, "inverted": tril == 1}


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, diagonal: int, inverted: bool) -> torch.Tensor:
    """SDPA with a bool mask that leaves some query nothing to see: zeros where the explicit head gives NaN."""
    allowed = torch.tril(torch.ones(q.size(-2), q.size(-2)), diagonal=diagonal).bool()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=~allowed if inverted else allowed)


def _sdpa_order(order: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    named = {"q": q, "k": k, "v": v}
    return F.scaled_dot_product_attention(*(named[n] for n in order.split(", ")), is_causal=True)


def _head_steps(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list[Step]:
    product = q @ k.transpose(-2, -1)
    scaled = product / math.sqrt(q.size(-1))
    masked = scaled.masked_fill(_masks(q.size(-2))[0] == 0, float("-inf"))
    return [Step(TEXTS["step_product"], product), Step(TEXTS["step_scaled"], scaled),
            Step(TEXTS["step_masked"], masked), Step(TEXTS["step_weights"], F.softmax(masked, dim=-1))]


def _head_variants(T: int, hs: int) -> Iterator[Variant]:
    products = [("qk", None), ("kq", _bug(KQ_TRANSPOSED, "kq")), ("q_at_k", _bug(MISSING_TRANSPOSE, "q_at_k"))]
    scales: list[tuple[object, Bug | None]] = [
        (None, None), (1.0, _bug(NO_SCALING, "no_scaling", hs=hs)),
        (1 / hs, _bug(SCALED_BY_HEAD_SIZE, "by_head_size", hs=hs, root=math.sqrt(hs))),
        (math.sqrt(hs), _bug(WRONG_SCALING, "multiplied", factor=hs)),
    ] + [(n**-0.5, _bug(SCALED_BY_N_EMBD, "by_n_embd", d=n, hs=hs)) for n in COMMON_N_EMBD if n != hs]
    scales += [(T**-0.5, _bug(WRONG_SCALING, "by_length", T=T, hs=hs))] if T != hs else []
    masks = [("before", None)] + [(m, _bug(label, key)) for m, label, key in [
        ("after", MASK_AFTER_SOFTMAX, "after"), ("after -inf", MASK_AFTER_SOFTMAX, "after_inf"),
        ("zero", MASK_WITH_ZERO, "zero"), ("none", NO_MASK, "none"), ("wrong triangle", MASK_WRONG_TRIANGLE, "triu"),
        ("one ahead", MASK_ONE_OFF, "one_ahead"), ("one behind", MASK_ONE_OFF, "one_behind"),
        ("added", FLOAT_MASK_ADDED, "added"), ("inverted", BOOL_MASK_INVERTED, "inverted")]]
    dims = [(-1, None), (-2, _bug(SOFTMAX_WRONG_DIM, "dim_head"))]
    values = [("v", None)] + [(t, _bug(WEIGHTS_NOT_ON_V, "not_v", used=t)) for t in ("q", "k")]
    yield Variant((_bug(BOOL_MASK_INVERTED, "inverted"),), lambda q, k, v: _sdpa(q, k, v, 0, True))
    yield Variant((_bug(MASK_ONE_OFF, "one_behind"),), lambda q, k, v: _sdpa(q, k, v, -1, False))
    yield Variant((_bug(UNIFORM_WEIGHTS, "uniform"),), lambda q, k, v: (_masks(T)[0] / _masks(T)[0].sum(-1, True)) @ v)
    for order in ("q, v, k", "k, v, q", "v, q, k", "v, k, q"):
        yield Variant((_bug(SDPA_ARGS_ORDER, "sdpa_order", order=order),), functools.partial(_sdpa_order, order))
    yield from combinations([products, scales, masks, dims, values], _head, max_bugs=2)


def _naive_head(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return lib.naive_attention(q, k, v, lib.causal_mask(q.size(-2)))[0]


@learner_check
def check_causal_attention(fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor], *,
                           strict: bool = False, hidden: bool = False) -> CheckResult:
    """Check ``fn(q, k, v)`` -> output (B, T, head_size) of one causal attention head.

    ``q``, ``k``, ``v`` have shape (B, T, head_size); scores are scaled by 1/sqrt(head_size).
    Any correct way passes: explicit masked_fill, ``F.scaled_dot_product_attention`` with
    ``is_causal=True`` or a bool mask, einsum. Lesson 03's exercises state their rules:
    ``without="sdpa"`` (the head written out, the mask built with torch.tril) and ``using="sdpa"`` (one
    call to F.scaled_dot_product_attention).
    """
    name = "check_causal_attention"
    require_callable(name, fn)
    sizes = [(4, (2, 6, 6)), (5, (3, 5, 8))] + ([(34, (1, 9, 4)), (35, (2, 1, 8))] if hidden else [])
    cases = []
    for seed, (B, T, hs) in sizes:
        g = seeded(seed)
        q, k, v = (randn(g, B, T, hs) for _ in range(3))
        expected = functools.partial(_naive_head, q, k, v)
        cases.append(Case((q, k, v), say(TEXTS["case_qkv"], shape=(B, T, hs)), expected, _head_variants(T, hs),
                          functools.partial(_head_steps, q, k, v)))
    forbidden = Forbidden({lib.naive_attention: "gpt_lesson.attention.naive_attention",
                           lib.sdpa_attention: "gpt_lesson.attention.sdpa_attention",
                           _CausalSelfAttention: "gpt_lesson.model.CausalSelfAttention",
                           _SourceCausalSelfAttention: "gpt_lesson.reference.CausalSelfAttention"})
    return run_cases(Verdict(name), fn, cases, forbidden=forbidden, hints=TRANSPOSE_TEXTS + MASK_SIZE_TEXTS,
                     success=say(TEXTS["head_passed"]))
