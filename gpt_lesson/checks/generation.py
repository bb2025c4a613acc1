"""Checks for lessons 10 and 11 (generation): the distributions sampling draws from.

``check_top_p`` checks a learner's nucleus filter ``top_p(probs, p)``. The classic mistakes are
variants of one parametrised implementation (which tokens are kept, which way the sort runs, which
dimension the running total and the renormalisation use, whether the result goes back to the
tokens' own order); an answer that matches none of them is still compared token by token with the
nucleus, so "one token too few" or "the right tokens, wrong values" are named whatever the style.

The inputs are drawn so that no running total lies within 2e-3 of ``p`` and the token that crosses
``p`` is more likely than the next one by at least 1e-4 (no tie at the edge): any correct way of finding the nucleus (sort and cumsum, a loop, a threshold
search, the sum from the least likely up) gives the same tokens.
"""
from __future__ import annotations

import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .. import sampling
from .runner import Forbidden, learner_check, randn, require_callable, run_cases, seeded
from .verdicts import N_, Bug, Case, CheckResult, Variant, Verdict, combinations, say

# Labels: stable identifiers in CheckResult.diagnosis.
TOP_P_CROSSING_DROPPED = N_("the token that crosses p dropped")
TOP_P_ONE_TOO_MANY = N_("one token more than the nucleus")
TOP_P_NOT_RENORMALISED = N_("nucleus not renormalised")
TOP_P_RENORMALISED_WRONG_DIM = N_("nucleus renormalised over the wrong dimension")
TOP_P_SOFTMAX_OF_PROBS = N_("softmax applied to probabilities")
TOP_P_NOT_SCATTERED = N_("sorted but not put back in the tokens' order")
TOP_P_CUMSUM_WRONG_DIM = N_("cumulative sum over the wrong dimension")
TOP_P_WRONG_DIM = N_("top-p over the wrong dimension")
TOP_P_ON_LOGITS = N_("p applied to logits instead of probabilities")
TOP_P_ASCENDING = N_("sorted from the least likely token")
TOP_P_EACH_PROB = N_("each probability compared with p")
TOP_P_RETURNED_MASK = N_("returned the mask, not the probabilities")
TOP_P_NOTHING_CUT = N_("nothing cut")
TOP_P_WRONG_TOKENS = N_("the wrong tokens kept")
TOP_P_WRONG_VALUES = N_("the right tokens, wrong values")

TEXTS = {
    "crossing": N_("the token whose probability makes the running total reach p belongs to the nucleus: keep "
                   "every token whose total *before* it is still below p (a running total that includes the "
                   "token itself, compared with < p, drops it; for a small p that leaves nothing at all)."),
    "one_more": N_("you kept one token after the one that crosses p. The nucleus ends with the token whose "
                   "running total first reaches p."),
    "not_renormalised": N_("you zeroed the tokens outside the nucleus but did not renormalise: divide the kept "
                           "probabilities by their sum (over the last dimension), so each row sums to 1 again."),
    "renorm_dim": N_("you divided by a sum over another dimension (or the whole tensor); each distribution is "
                     "one row of the last dimension: out / out.sum(dim=-1, keepdim=True)."),
    "softmax_of_probs": N_("you renormalised with a softmax, but the input is already probabilities: a softmax "
                           "exponentiates them again and flattens the distribution. Divide the kept probabilities "
                           "by their sum instead."),
    "not_scattered": N_("your values are in sorted order (most likely first), not at their tokens' positions. "
                        "Put each value back where its token was: the indices the sort returned tell where, e.g. "
                        "torch.zeros_like(probs).scatter(-1, indices, sorted_values)."),
    "cumsum_dim": N_("your running total runs over dimension {dim} instead of the vocabulary (the last one): "
                     "cumsum(dim=-1)."),
    "wrong_dim": N_("you sorted and summed over dimension 1; the vocabulary is the last dimension (dim=-1), "
                    "whatever the number of leading dimensions."),
    "on_logits": N_("you treated the input as logits (a softmax first): it is already probabilities, each row "
                    "summing to 1. Sort and sum the probabilities themselves."),
    "ascending": N_("you sorted from the least likely token up, so the nucleus came from the tail. Sort with "
                    "descending=True: the nucleus is the most likely tokens."),
    "each_prob": N_("you compared each probability with p; top-p compares the running total of the sorted "
                    "probabilities (cumsum) with p."),
    "mask": N_("you returned which tokens are kept (0 or 1); return their probabilities, renormalised."),
    "nothing_cut": N_("your output equals the input: no token was removed. Tokens after the one whose running "
                      "total reaches p get probability 0."),
    "wrong_tokens": N_("you kept as many tokens as the nucleus has, but not the same ones: {where}. After "
                       "sorting, put the kept values back at their tokens' indices."),
    "wrong_values": N_("you kept the right tokens, but their values are not the renormalised probabilities: "
                       "each kept token gets probs / (sum of the kept probs)."),
    "where_row": N_("in row {row}, tokens {got} instead of {expected}"),
    "case": N_("probs of shape {shape} with p={p}"),
    "passed": N_("Your top_p keeps the nucleus (with the token that crosses p) and renormalises it, on {count} "
                 "inputs."),
    "dim_hint": N_("the inputs have any number of leading dimensions, (vocab,), (B, vocab) or (B, T, vocab): "
                   "work on dim=-1 (the vocabulary), not dim=1."),
    "index_dtype": N_("scatter and gather need int64 indices: use the indices torch.sort returns."),
    "scatter_dtype": N_("scatter into a tensor of the probabilities' dtype: torch.zeros_like(probs)."),
}

TOP_P_HINTS = [
    ("Dimension out of range", TEXTS["dim_hint"]),
    ("for index", TEXTS["index_dtype"]),
    ("Expected self.dtype to be equal to src.dtype", TEXTS["scatter_dtype"]),
]


def _bug(label: str, key: str, **fields: object) -> Bug:
    return Bug(label, TEXTS[key], fields)


# ----------------------------------------------------------------------------------------------
# Top-p


def _nucleus(probs: torch.Tensor, p: float, source: str, keep: str, order: str, dim: int, cum_dim: int | None,
             renorm: str, placement: str) -> torch.Tensor:
    """The nucleus of ``probs`` computed one way or another: the variants of :func:`check_top_p`."""
    x = F.softmax(probs, dim=dim) if source == "logits" else probs
    s, idx = torch.sort(x, dim=dim, descending=order == "descending")
    total = s.cumsum(dim=dim if cum_dim is None else cum_dim)
    kept = {"before": total - s < p, "crossing dropped": total < p, "one more": total - s < p,
            "each": s >= p}[keep]
    if keep == "one more":  # also the token after the crossing one
        kept = kept | torch.cat([kept.narrow(dim, 0, 1), kept.narrow(dim, 0, kept.size(dim) - 1)], dim=dim)
    if placement == "mask":
        values = kept.to(x.dtype)
    elif renorm == "softmax":
        values = F.softmax(s.masked_fill(~kept, float("-inf")), dim=dim)
    else:
        values = s * kept
    if placement == "gather":  # the inverse permutation applied instead of the permutation
        values = values.gather(dim, idx)
    elif placement != "sorted":
        values = torch.zeros_like(values).scatter(dim, idx, values)
    if placement == "mask" or renorm in ("softmax", "none"):
        return values
    over = {"sum": dim, "dim0": 0, "all": None}[renorm]
    return values / (values.sum() if over is None else values.sum(dim=over, keepdim=True))


def _top_p_variants(shape: tuple[int, ...]) -> list:
    sources = [("probs", None), ("logits", _bug(TOP_P_ON_LOGITS, "on_logits"))]
    keeps = [("before", None), ("crossing dropped", _bug(TOP_P_CROSSING_DROPPED, "crossing")),
             ("one more", _bug(TOP_P_ONE_TOO_MANY, "one_more")), ("each", _bug(TOP_P_EACH_PROB, "each_prob"))]
    orders = [("descending", None), ("ascending", _bug(TOP_P_ASCENDING, "ascending"))]
    dims = [(-1, None)] + ([(1, _bug(TOP_P_WRONG_DIM, "wrong_dim"))] if len(shape) > 2 else [])
    cum_dims = [(None, None)] + [(d, _bug(TOP_P_CUMSUM_WRONG_DIM, "cumsum_dim", dim=d))
                                 for d in range(len(shape) - 1)]
    renorms = [("sum", None), ("none", _bug(TOP_P_NOT_RENORMALISED, "not_renormalised")),
               ("softmax", _bug(TOP_P_SOFTMAX_OF_PROBS, "softmax_of_probs"))]
    renorms += [("dim0", _bug(TOP_P_RENORMALISED_WRONG_DIM, "renorm_dim"))] if len(shape) > 1 else []
    renorms += [("all", _bug(TOP_P_RENORMALISED_WRONG_DIM, "renorm_dim"))]
    placements = [("scatter", None), ("sorted", _bug(TOP_P_NOT_SCATTERED, "not_scattered")),
                  ("gather", _bug(TOP_P_NOT_SCATTERED, "not_scattered")), ("mask", _bug(TOP_P_RETURNED_MASK, "mask"))]
    nothing_cut = Variant((_bug(TOP_P_NOTHING_CUT, "nothing_cut"),), lambda probs, p: probs.clone())
    return [nothing_cut, *combinations([sources, keeps, orders, dims, cum_dims, renorms, placements], _nucleus,
                                       max_bugs=2)]


def _draw_probs(seed: int, shape: tuple[int, ...], p: float, spread: float) -> torch.Tensor:
    """Seeded probabilities (..., vocab): no running total within 2e-3 of p, no near tie at the nucleus's edge.

    Unless p is below every row's largest probability (the nucleus is one token), at least two
    tokens are kept in every row, so a dropped crossing token never leaves a row empty.
    """
    g = seeded(seed)
    for _ in range(1000):
        probs = F.softmax(randn(g, *shape) * spread, dim=-1)
        s = torch.sort(probs, dim=-1, descending=True).values
        total = s.cumsum(dim=-1)
        crossing = (total < p).sum(dim=-1, keepdim=True)  # where the running total reaches p
        after = torch.cat([s, torch.zeros_like(s[..., :1])], dim=-1).gather(-1, crossing + 1)
        tiny_p = bool((s[..., 0] > p + 2e-3).all())
        if (total - p).abs().min() < 2e-3 or (s.gather(-1, crossing) - after).min() < 1e-4:
            continue
        if tiny_p or bool((s[..., 0] < p).all()):
            return probs
    raise RuntimeError(f"no probabilities of shape {shape} fit p={p}")  # pragma: no cover - sizes are fixed


def _support_bugs(out: torch.Tensor, case: Case) -> list[Bug] | None:
    """Name a wrong nucleus by the tokens it keeps, whatever the code looked like."""
    probs, _ = case.args
    expected = case.expected
    if out.shape != expected.shape:
        return None
    rows_out = (out > 1e-12).reshape(-1, out.size(-1))
    rows_exp = (expected > 0).reshape(-1, out.size(-1))
    order = torch.sort(probs.reshape(-1, out.size(-1)), dim=-1, descending=True).indices
    count_out, count_exp = rows_out.sum(-1), rows_exp.sum(-1)
    ranked_out = rows_out.gather(-1, order)  # kept or not, most likely token first
    is_prefix = bool((ranked_out == (torch.arange(out.size(-1)) < count_out[:, None])).all())
    if torch.equal(rows_out, rows_exp):
        return [_bug(TOP_P_WRONG_VALUES, "wrong_values")]
    first_places = torch.arange(out.size(-1)) < count_out[:, None]
    if torch.equal(rows_out, first_places) and not torch.equal(rows_exp, first_places):
        return [_bug(TOP_P_NOT_SCATTERED, "not_scattered")]  # values left where the sort put them
    if is_prefix and torch.equal(count_out, count_exp - 1):
        return [_bug(TOP_P_CROSSING_DROPPED, "crossing")]
    if is_prefix and torch.equal(count_out, count_exp + 1):
        return [_bug(TOP_P_ONE_TOO_MANY, "one_more")]
    if torch.equal(count_out, count_exp):
        row = int((rows_out != rows_exp).any(-1).nonzero()[0])
        where = say(TEXTS["where_row"], row=row, got=rows_out[row].nonzero().flatten().tolist(),
                    expected=rows_exp[row].nonzero().flatten().tolist())
        return [_bug(TOP_P_WRONG_TOKENS, "wrong_tokens", where=where)]
    return None


def _top_p_forbidden() -> Forbidden:
    entries: dict[object, str] = {sampling.next_token_probs: "gpt_lesson.sampling.next_token_probs",
                                  sampling.sample_next: "gpt_lesson.sampling.sample_next",
                                  sampling._top_p_filter: "gpt_lesson.sampling's top-p filter"}
    hf = sys.modules.get("transformers.generation.logits_process")
    if hf is not None:  # imported by the learner: Hugging Face's own top-p is the whole answer too
        entries[hf.TopPLogitsWarper] = "transformers' TopPLogitsWarper"
    return Forbidden(entries)


@learner_check
def check_top_p(fn: Callable[[torch.Tensor, float], torch.Tensor], *, strict: bool = False,
                hidden: bool = False) -> CheckResult:
    """Check ``fn(probs, p)``: the nucleus of ``probs`` (..., vocab), renormalised, same shape.

    The nucleus is the smallest set of the most likely tokens whose total probability is >= p (the
    token that crosses p is kept); every other token gets 0.
    """
    name = "check_top_p"
    require_callable(name, fn)
    # The first input is 3-D, so that work over the wrong dimension shows (every classic mistake gives a
    # different answer on it); the last visible one has a p below every row's largest probability: the
    # nucleus is the most likely token alone.
    sizes = [(50, (3, 4, 10), 0.75, 1.5), (51, (4, 12), 0.6, 1.5), (52, (16,), 0.35, 1.0), (53, (3, 7), 0.05, 1.0)]
    sizes += [(54, (2, 2, 2, 9), 0.75, 2.0), (55, (5, 20), 0.97, 1.0), (56, (1, 40), 0.5, 3.0),
              (57, (6, 2), 0.3, 1.0)] if hidden else []
    cases = []
    for seed, shape, p, spread in sizes:
        probs = _draw_probs(seed, shape, p, spread)
        expected = sampling.next_token_probs(probs.double().log(), top_p=p).to(probs.dtype)
        cases.append(Case((probs, p), say(TEXTS["case"], shape=shape, p=p), expected, _top_p_variants(shape)))
    return run_cases(Verdict(name), fn, cases, forbidden=_top_p_forbidden(), hints=TOP_P_HINTS,
                     diagnose=_support_bugs, success=say(TEXTS["passed"], count=len(cases)))
