"""Checks for lessons 10 and 11 (generation): the distributions sampling draws from, and the cached decode step.

* ``check_temperature_top_k``: ``fn(logits, temperature, top_k)``, the distribution of temperature and
  top-k sampling, compared with :func:`gpt_lesson.sampling.next_token_probs`.
* ``check_top_p``: the nucleus filter ``fn(probs, p)``. The classic mistakes are variants of one
  parametrised implementation (which tokens are kept, which way the sort runs, which dimension the
  running total and the renormalisation use, whether the result goes back to the tokens' own order); an
  answer that matches none of them is still compared token by token with the nucleus, so "one token too
  few" or "the right tokens, wrong values" are named whatever the style. The inputs are drawn so that no
  running total lies within 2e-3 of ``p`` and the token that crosses ``p`` is more likely than the next
  one by at least 1e-4 (no tie at the edge): any correct way of finding the nucleus (sort and cumsum, a
  loop, a threshold search, the sum from the least likely up) gives the same tokens.
* ``check_decode_step``: ``fn(model, token, cache)``, one token through a GPT with a cache the learner
  appends to (one ``{"k", "v"}`` dict per layer). It is fed a sequence one token at a time from an empty
  cache and compared with the uncached ``model(tokens)`` at every position; the mistakes (positions
  restarted at 0, a cache never advanced or appended twice, a causal mask on the single query, ...) are
  steps computed with those mistakes, and what the cache holds afterwards names the rest.
"""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .. import sampling
from ..model import GPT, Block, CausalSelfAttention, KVCache, LayerKVCache
from .attention import LOG_SOFTMAX, NOT_NORMALISED, SOFTMAX_WRONG_DIM
from .runner import Forbidden, close, learner_check, randn, require_callable, run_cases, seeded
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
TEMPERATURE_MULTIPLIED = N_("logits multiplied by the temperature")
TEMPERATURE_IGNORED = N_("temperature ignored")
TEMPERATURE_AFTER_SOFTMAX = N_("temperature applied after the softmax")
TOP_K_IGNORED = N_("top-k ignored")
TOP_K_SMALLEST = N_("the k smallest logits kept")
TOP_K_MASKED_WITH_ZERO = N_("cut logits set to 0 instead of -inf")
TOP_K_NOT_RENORMALISED = N_("top-k cut after the softmax, not renormalised")
TOP_K_OFF_BY_ONE = N_("top-k keeps one token too many or too few")
TOP_K_VALUES_ONLY = N_("only the k kept probabilities returned")
TOP_K_WRONG_COUNT = N_("top-k keeps another number of tokens")
DECODE_POSITIONS_RESTARTED = N_("positions restarted at 0")
DECODE_POSITION_ONE_AHEAD = N_("position one ahead")
DECODE_CACHE_NOT_ADVANCED = N_("cache not advanced")
DECODE_APPENDED_TWICE = N_("keys appended twice")
DECODE_CACHE_LENGTH = N_("cache holds another number of positions")
DECODE_MASKED_SINGLE_QUERY = N_("causal mask applied to the single query")
DECODE_OWN_KEY_LEFT_OUT = N_("the new token's own key left out")
DECODE_NOT_SCALED = N_("scores not scaled")
DECODE_FIRST_TOKEN_WRONG = N_("wrong already at the first token")
DECODE_LATER_TOKEN_WRONG = N_("wrong from a later token on")

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
    "temp_multiplied": N_("you multiplied the logits by the temperature; divide them: logits / temperature (a "
                          "temperature below 1 must sharpen the distribution, above 1 flatten it)."),
    "temp_ignored": N_("your distribution does not depend on the temperature: divide the logits by it before the "
                       "softmax."),
    "temp_after": N_("you divided the probabilities by the temperature after the softmax, so the rows no longer sum "
                     "to 1; divide the logits before the softmax."),
    "temp_power": N_("you raised the probabilities to the power 1/temperature but did not renormalise; dividing the "
                     "logits before the softmax does both at once."),
    "k_ignored": N_("every token can still be drawn: keep only the top_k largest logits (the others get -inf "
                    "before the softmax)."),
    "k_smallest": N_("you kept the k smallest logits (largest=False, or an ascending sort); top-k keeps the k "
                     "largest."),
    "k_zero": N_("you set the cut logits to 0; exp(0) = 1, so they keep some probability. Set them to "
                 "float('-inf'), which the softmax turns into exact zeros."),
    "k_after": N_("you zeroed the probabilities outside the top k after the softmax but did not renormalise: cut "
                  "the logits (-inf) before the softmax, or divide by the new row sums."),
    "k_one_more": N_("you kept k + 1 tokens: the threshold is the k-th largest logit, torch.topk(logits, k)"
                     ".values[..., -1:], and a logit is kept when it is >= that value."),
    "k_one_fewer": N_("you kept k - 1 tokens: a logit equal to the k-th largest is kept too (>=, not >)."),
    "k_values_only": N_("you returned the probabilities of the k kept tokens only; return the whole distribution "
                        "over the vocabulary, with 0 for the cut tokens, in the tokens' order."),
    "k_count": N_("in row {row} your distribution gives {got} tokens a probability above 0; with top_k={k} "
                  "exactly {k} can be drawn."),
    "softmax_dim": N_("each position's distribution runs over the vocabulary, the last dimension: softmax(..., "
                      "dim=-1)."),
    "log_probs": N_("you returned log-probabilities (log_softmax); sampling needs the probabilities themselves."),
    "not_normalised": N_("your rows do not sum to 1: the result must be a probability distribution over the "
                         "vocabulary."),
    "case_logits": N_("logits of shape {shape} with temperature={temperature}, top_k={top_k}"),
    "temperature_passed": N_("Your distribution equals gpt_lesson.sampling.next_token_probs on {count} inputs."),
    "k_none": N_("top_k=None means no cut: leave the logits as they are when top_k is None."),
    "positions_zero": N_("every step used position 0: the new token sits at position t, the number of tokens "
                         "already in the cache (cache[0][\"k\"].size(2)), so look up position_embedding_table at t, "
                         "not torch.arange(1)."),
    "position_one_ahead": N_("your positions are one ahead: the first token is at position 0, so the new token's "
                             "position is the cache length *before* this step appends to it."),
    "not_advanced": N_("after the whole sequence your cache is still empty: each step attended to its own token "
                       "only. Store the concatenated keys and values back into the layer's dict "
                       "(layer[\"k\"] = torch.cat(...)): a new local variable does not change the cache."),
    "twice": N_("each step appended its keys and values twice (your cache holds 2 positions per token): append "
                "once, in one place, and attend to what is stored."),
    "cache_length": N_("after {T} tokens your cache holds {got} positions per layer; it should hold exactly {T}, "
                       "one per token."),
    "masked_query": N_("the single new query saw only the first key: a causal mask (tril[:1], or "
                       "is_causal=True, which aligns the mask top-left) hides the past from it. The newest token may "
                       "see every cached position: no mask is needed for one query at the end."),
    "own_key": N_("the new token attended to the earlier positions only: append its key and value to the cache "
                  "first, then attend over all of them (it must see itself too)."),
    "not_scaled": N_("divide the scores by sqrt(head_size), as the model's attention does."),
    "first_token": N_("the logits differ already at the first token, when the cache is still empty: the bug is in "
                      "the forward pass itself (embeddings, ln1, attention, c_proj, the residual additions, ffwd, "
                      "ln_f, lm_head), not in the cache. Compare your step with the model's own steps."),
    "later_token": N_("the first {n} token(s) are right, token {t} is not: the forward pass is right, so look at "
                      "what the cache holds and which position the new token gets."),
    "step_shape": N_("at step {t} your decode_step returned a tensor of shape {shape}; return the next token's "
                     "logits, shape (B, vocab_size) = {expected}"),
    "case_decode": N_("a GPT with {n_layer} layer(s), {n_head} head(s) of size {hs}, fed tokens of shape ({B}, {T}) "
                      "one at a time"),
    "decode_passed": N_("Your cached steps give the uncached model's logits at every position, on {count} models."),
    "cat_dim": N_("concatenate along the positions, dim=2 of (B, n_head, t, head_size)."),
    "position_range": N_("a position looked up outside the table: the new token's position is the cache length "
                         "before the append (0 for the first token), at most block_size - 1."),
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

TEMPERATURE_TOP_K_HINTS = [("NoneType", TEXTS["k_none"])]
DECODE_HINTS = [("Sizes of tensors must match", TEXTS["cat_dim"]), ("index out of range", TEXTS["position_range"])]


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
                                  sampling._top_p_filter: "gpt_lesson.sampling._top_p_filter"}
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


# ----------------------------------------------------------------------------------------------
# Temperature and top-k


def _temperature_top_k(logits: torch.Tensor, temperature: float, top_k: int | None, temp: str, cut: str,
                       dim: int) -> torch.Tensor:
    """``softmax(logits / temperature)`` over the top k, computed one way or another: the variants."""
    scaled = {"divide": lambda z: z / temperature, "multiply": lambda z: z * temperature,
              "ignored": lambda z: z, "after": lambda z: z, "power": lambda z: z}[temp](logits)
    if top_k is None or cut == "ignored":
        keep = torch.ones_like(logits, dtype=torch.bool)
    else:
        k = {"right": top_k, "one more": top_k + 1, "one fewer": top_k - 1}.get(cut, top_k)
        if k < 1 or k > logits.size(-1):
            raise ValueError("this variant does not exist for this k")
        largest = cut != "smallest"
        kth = torch.topk(logits, k, dim=-1, largest=largest).values[..., -1:]
        keep = logits >= kth if largest else logits <= kth
    if top_k is not None and cut == "values only":
        return F.softmax(torch.topk(scaled, top_k, dim=-1).values, dim=dim)
    if cut == "zero":
        probs = F.softmax(scaled.masked_fill(~keep, 0.0), dim=dim)
    elif cut == "after":
        probs = F.softmax(scaled, dim=dim) * keep
    else:
        probs = F.softmax(scaled.masked_fill(~keep, float("-inf")), dim=dim)
    if temp == "after":
        probs = probs / temperature
    elif temp == "power":
        probs = probs ** (1 / temperature)
    return probs


def _temperature_top_k_variants(top_k: int | None) -> list[Variant]:
    temps = [("divide", None), ("multiply", _bug(TEMPERATURE_MULTIPLIED, "temp_multiplied")),
             ("ignored", _bug(TEMPERATURE_IGNORED, "temp_ignored")),
             ("after", _bug(TEMPERATURE_AFTER_SOFTMAX, "temp_after")),
             ("power", _bug(TEMPERATURE_AFTER_SOFTMAX, "temp_power"))]
    cuts = [("right", None)]
    if top_k is not None:
        cuts += [("ignored", _bug(TOP_K_IGNORED, "k_ignored")), ("smallest", _bug(TOP_K_SMALLEST, "k_smallest")),
                 ("zero", _bug(TOP_K_MASKED_WITH_ZERO, "k_zero")), ("after", _bug(TOP_K_NOT_RENORMALISED, "k_after")),
                 ("one more", _bug(TOP_K_OFF_BY_ONE, "k_one_more")), ("one fewer", _bug(TOP_K_OFF_BY_ONE, "k_one_fewer")),
                 ("values only", _bug(TOP_K_VALUES_ONLY, "k_values_only"))]
    dims = [(-1, None), (0, _bug(SOFTMAX_WRONG_DIM, "softmax_dim"))]
    log_probs = Variant((_bug(LOG_SOFTMAX, "log_probs"),),
                        lambda z, t, k: torch.log(_temperature_top_k(z, t, k, "divide", "right", -1)))
    return [log_probs, *combinations([temps, cuts, dims], _temperature_top_k, max_bugs=2)]


def _draw_logits(seed: int, shape: tuple[int, ...], top_k: int | None) -> torch.Tensor:
    """Seeded logits (..., vocab) whose k-th and (k+1)-th largest differ by at least 0.05 in every row."""
    g = seeded(seed)
    for _ in range(1000):
        logits = randn(g, *shape) * 2
        if top_k is None or top_k == shape[-1]:
            return logits
        s = torch.sort(logits, dim=-1, descending=True).values
        if (s[..., top_k - 1] - s[..., top_k]).min() > 0.05:
            return logits
    raise RuntimeError(f"no logits of shape {shape} fit top_k={top_k}")  # pragma: no cover - sizes are fixed


def _temperature_top_k_bugs(out: torch.Tensor, case: Case) -> list[Bug] | None:
    logits, _, top_k = case.args
    if out.shape != case.expected.shape:
        return None
    kept = (out > 1e-12).sum(dim=-1)
    if top_k is not None and bool((kept != top_k).any()):
        row = int((kept != top_k).reshape(-1).nonzero()[0])
        return [_bug(TOP_K_WRONG_COUNT, "k_count", got=int(kept.reshape(-1)[row]), k=top_k, row=row)]
    if not torch.allclose(out.sum(dim=-1).double(), torch.ones(out.shape[:-1], dtype=torch.float64), atol=1e-4):
        return [_bug(NOT_NORMALISED, "not_normalised")]
    return None


@learner_check
def check_temperature_top_k(fn: Callable[[torch.Tensor, float, int | None], torch.Tensor], *, strict: bool = False,
                            hidden: bool = False) -> CheckResult:
    """Check ``fn(logits, temperature, top_k)``: ``softmax(logits / temperature)`` over the ``top_k`` largest.

    ``logits`` has shape (..., vocab); ``temperature`` > 0; ``top_k=None`` means no cut.
    """
    name = "check_temperature_top_k"
    require_callable(name, fn)
    sizes = [(60, (2, 3, 12), 0.7, 4), (61, (4, 9), 1.5, None), (62, (10,), 0.5, 3), (63, (3, 8), 2.0, 1)]
    sizes += [(64, (2, 2, 2, 7), 0.3, 5), (65, (5, 30), 3.0, 29), (66, (1, 50), 1.0, None),
              (67, (6, 2), 0.9, 2)] if hidden else []
    cases = []
    for seed, shape, temperature, top_k in sizes:
        logits = _draw_logits(seed, shape, top_k)
        cases.append(Case((logits, temperature, top_k),
                          say(TEXTS["case_logits"], shape=shape, temperature=temperature, top_k=top_k),
                          sampling.next_token_probs(logits, temperature, top_k), _temperature_top_k_variants(top_k)))
    forbidden = Forbidden({sampling.next_token_probs: "gpt_lesson.sampling.next_token_probs",
                           sampling.sample_next: "gpt_lesson.sampling.sample_next"})
    return run_cases(Verdict(name), fn, cases, forbidden=forbidden, hints=TEMPERATURE_TOP_K_HINTS,
                     diagnose=_temperature_top_k_bugs, success=say(TEXTS["temperature_passed"], count=len(cases)))


# ----------------------------------------------------------------------------------------------
# The KV cache: one decode step


def empty_cache(model: GPT, batch_size: int) -> list[dict[str, torch.Tensor]]:
    """The exercise's cache: one ``{"k", "v"}`` dict per layer, each (B, n_head, 0, head_size) to start."""
    n_embd = model.token_embedding_table.embedding_dim
    cache = []
    for block in model.blocks:
        shape = (batch_size, block.sa.n_head, 0, n_embd // block.sa.n_head)
        cache.append({"k": torch.zeros(shape), "v": torch.zeros(shape)})
    return cache


def _run_steps(step: Callable, model: GPT, tokens: torch.Tensor,
               record: dict | None = None) -> torch.Tensor | object:
    """Feed ``tokens`` (B, T) one at a time to ``step(model, token, cache)``; its logits stacked: (B, T, vocab)."""
    B, T = tokens.shape
    V = model.lm_head.out_features
    cache = empty_cache(model, B)
    if record is not None:
        record["cache"] = cache
    rows = []
    for t in range(T):
        if record is not None:
            record["step"] = t
        out = step(model, tokens[:, t:t + 1], cache)
        if out is None or not isinstance(out, torch.Tensor):
            return out  # a stub, or an answer of the wrong kind: the runner names it
        if out.shape == (B, 1, V):
            out = out[:, 0]
        if out.shape != (B, V):
            raise ValueError(say(TEXTS["step_shape"], t=t + 1, shape=tuple(out.shape), expected=(B, V)))
        rows.append(out)
    return torch.stack(rows, dim=1)


def _step(model: GPT, token: torch.Tensor, cache: list[dict[str, torch.Tensor]], position: str, store: str,
          attend: str, scale: str) -> torch.Tensor:
    """One cached decode step with chosen mistakes: the variants of :func:`check_decode_step`."""
    B, C = token.size(0), model.token_embedding_table.embedding_dim
    t = cache[0]["k"].size(2)
    pos = {"right": t, "zero": 0, "one ahead": t + 1}[position]
    x = model.token_embedding_table(token) + model.position_embedding_table.weight[pos]  # (B, 1, C)
    for block, layer in zip(model.blocks, cache):
        nh = block.sa.n_head
        hs = C // nh
        q, k, v = (z.view(B, 1, nh, hs).transpose(1, 2) for z in block.sa.c_attn(block.ln1(x)).split(C, dim=2))
        past_k, past_v = layer["k"], layer["v"]
        new_k, new_v = (torch.cat([k, k], dim=2), torch.cat([v, v], dim=2)) if store == "twice" else (k, v)
        k_all, v_all = torch.cat([past_k, new_k], dim=2), torch.cat([past_v, new_v], dim=2)
        if store != "not advanced":
            layer["k"], layer["v"] = k_all, v_all
        keys, values = {"all": (k_all, v_all), "past": (past_k, past_v),
                        "first": (k_all[:, :, :1], v_all[:, :, :1])}[attend]
        scores = q @ keys.transpose(-2, -1) * (hs**-0.5 if scale == "right" else 1.0)  # (B, nh, 1, keys)
        out = F.softmax(scores, dim=-1) @ values  # (B, nh, 1, hs)
        x = x + block.sa.c_proj(out.transpose(1, 2).reshape(B, 1, C))
        x = x + block.ffwd(block.ln2(x))
    return model.lm_head(model.ln_f(x))[:, 0]


def _buggy_run(model: GPT, tokens: torch.Tensor, position: str, store: str, attend: str,
               scale: str) -> torch.Tensor:
    return _run_steps(functools.partial(_step, position=position, store=store, attend=attend, scale=scale),
                      model, tokens)


def _decode_variants() -> list[Variant]:
    positions = [("right", None), ("zero", _bug(DECODE_POSITIONS_RESTARTED, "positions_zero")),
                 ("one ahead", _bug(DECODE_POSITION_ONE_AHEAD, "position_one_ahead"))]
    stores = [("once", None), ("not advanced", _bug(DECODE_CACHE_NOT_ADVANCED, "not_advanced")),
              ("twice", _bug(DECODE_APPENDED_TWICE, "twice"))]
    attends = [("all", None), ("first", _bug(DECODE_MASKED_SINGLE_QUERY, "masked_query")),
               ("past", _bug(DECODE_OWN_KEY_LEFT_OUT, "own_key"))]
    scales = [("right", None), ("none", _bug(DECODE_NOT_SCALED, "not_scaled"))]
    return list(combinations([positions, stores, attends, scales], _buggy_run, max_bugs=2))


def _cache_lengths(record: dict) -> set[int]:
    """The number of positions each layer of the learner's cache holds (one value when they agree)."""
    layers = record.get("cache", [])
    return {layer["k"].size(2) for layer in layers if isinstance(layer, dict) and isinstance(layer.get("k"), torch.Tensor)
            and layer["k"].dim() == 4}


def _decode_bugs(record: dict) -> Callable[[torch.Tensor, Case], list[Bug] | None]:
    """Name a wrong decode step by what its cache holds afterwards and by the first token it gets wrong."""
    def diagnose(out: torch.Tensor, case: Case) -> list[Bug] | None:
        _, tokens = case.args
        T = tokens.size(1)
        lengths = _cache_lengths(record)
        if lengths == {0}:
            return [_bug(DECODE_CACHE_NOT_ADVANCED, "not_advanced")]
        if lengths == {2 * T}:
            return [_bug(DECODE_APPENDED_TWICE, "twice")]
        if lengths and lengths != {T}:
            return [_bug(DECODE_CACHE_LENGTH, "cache_length", T=T, got=sorted(lengths))]
        if out.shape != case.expected.shape:
            return None
        wrong = [t for t in range(T) if not close(out[:, t], case.expected[:, t])]
        if wrong and wrong[0] == 0:
            return [_bug(DECODE_FIRST_TOKEN_WRONG, "first_token")]
        if wrong:
            return [_bug(DECODE_LATER_TOKEN_WRONG, "later_token", n=wrong[0], t=wrong[0] + 1)]
        return None
    return diagnose


def _decode_model(seed: int, vocab: int, n_embd: int, n_head: int, n_layer: int, block_size: int) -> GPT:
    """A small GPT with weights large enough that every mistake shows in the logits (the usual init is tiny)."""
    g = seeded(seed)
    model = GPT(vocab, n_embd, n_head, n_layer, block_size, dropout=0.0).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = randn(g, *p.shape)
            p.copy_(1 + 0.2 * noise if name.endswith(("ln1.weight", "ln2.weight", "ln_f.weight")) else 0.5 * noise)
    return model


@learner_check
def check_decode_step(fn: Callable[[GPT, torch.Tensor, list], torch.Tensor], *, strict: bool = False,
                      hidden: bool = False) -> CheckResult:
    """Check ``fn(model, token, cache)``: one cached decode step, compared with the uncached model token by token.

    ``token`` (B, 1) is the newest token; ``cache`` holds one dict per layer with ``"k"`` and ``"v"`` of shape
    (B, n_head, t, head_size) for the t tokens seen so far (t = 0 at the start): the step appends this token's
    keys and values and returns the next token's logits (B, vocab_size). The check feeds a sequence one token
    at a time from an empty cache; step t's logits must equal ``model(tokens)`` at position t.
    """
    name = "check_decode_step"
    require_callable(name, fn)
    sizes = [(70, (11, 12, 3, 2, 8), (2, 6)), (71, (7, 16, 2, 1, 5), (3, 5))]
    sizes += [(72, (9, 8, 1, 3, 10), (1, 10)), (73, (13, 20, 4, 2, 6), (4, 3))] if hidden else []
    record: dict = {}
    cases = []
    for seed, (vocab, n_embd, n_head, n_layer, block_size), (B, T) in sizes:
        model = _decode_model(seed, vocab, n_embd, n_head, n_layer, block_size)
        tokens = torch.randint(0, vocab, (B, T), generator=seeded(seed + 100))
        with torch.no_grad():
            expected = model(tokens)[0]
        description = say(TEXTS["case_decode"], n_layer=n_layer, n_head=n_head, hs=n_embd // n_head, B=B, T=T)
        cases.append(Case((model, tokens), description, expected, _decode_variants()))

    def learner_run(model: GPT, tokens: torch.Tensor) -> object:
        return _run_steps(fn, model, tokens, record)

    forbidden = Forbidden({GPT.forward: "gpt_lesson.model.GPT.forward (model(...))",
                           Block.forward: "gpt_lesson.model.Block.forward",
                           CausalSelfAttention.forward: "gpt_lesson.model.CausalSelfAttention.forward",
                           LayerKVCache: "gpt_lesson.model.LayerKVCache", KVCache: "gpt_lesson.model.KVCache",
                           sampling.generate: "gpt_lesson.sampling.generate"})
    def on_error(error: Exception, case: Case) -> list[Bug] | None:
        # Keys appended twice make the cache twice as long, so the position read from it runs off the table.
        step, lengths = record.get("step", 0), _cache_lengths(record)
        return [_bug(DECODE_APPENDED_TWICE, "twice")] if step > 0 and lengths == {2 * step} else None

    return run_cases(Verdict(name), learner_run, cases, forbidden=forbidden, hints=DECODE_HINTS,
                     diagnose=_decode_bugs(record), on_error=on_error,
                     success=say(TEXTS["decode_passed"], count=len(cases)))
