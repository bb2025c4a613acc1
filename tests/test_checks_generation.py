"""The checks of lessons 10 and 11 (gpt_lesson.checks.generation): correct solutions in several styles pass,
every classic mistake gets its own named diagnosis, the library's answer is refused.

The solutions are written here the way learners write them (sort and cumsum, Hugging Face's shifted mask,
a threshold search, a Python loop, through log-probabilities), independently of the check's variants.
"""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from gpt_lesson import checks
from gpt_lesson.checks import generation as G
from gpt_lesson.checks.runner import close
from gpt_lesson.i18n import set_language, translations

# ================================================================ top-p: correct solutions


def top_p_sort_cumsum(probs, p):
    s, idx = torch.sort(probs, dim=-1, descending=True)
    before = s.cumsum(dim=-1) - s  # mass of the more likely tokens
    s = s * (before < p)
    s = s / s.sum(dim=-1, keepdim=True)
    return torch.zeros_like(probs).scatter(-1, idx, s)


def top_p_hugging_face_style(probs, p):
    s, idx = torch.sort(probs, descending=False)
    remove = s.cumsum(dim=-1) <= 1 - p
    remove[..., -1] = False
    remove = remove.scatter(-1, idx, remove)
    out = probs.masked_fill(remove, 0.0)
    return out / out.sum(dim=-1, keepdim=True)


def top_p_shifted_mask(probs, p):
    s, idx = probs.sort(dim=-1, descending=True)
    remove = s.cumsum(-1) > p
    remove[..., 1:] = remove[..., :-1].clone()  # keep the first token above the threshold
    remove[..., 0] = False
    s[remove] = 0.0
    out = torch.empty_like(probs).scatter_(-1, idx, s)
    return out / out.sum(-1, keepdim=True)


def top_p_threshold(probs, p):
    s = probs.sort(dim=-1, descending=True).values
    n = (s.cumsum(dim=-1) < p).sum(dim=-1, keepdim=True)  # tokens before the one that crosses p
    smallest_kept = s.gather(-1, n)
    out = torch.where(probs >= smallest_kept, probs, torch.zeros_like(probs))
    return out / out.sum(dim=-1, keepdim=True)


def top_p_python_loop(probs, p):
    flat = probs.reshape(-1, probs.shape[-1])
    out = torch.zeros_like(flat)
    for r in range(flat.shape[0]):
        total = 0.0
        for i in sorted(range(flat.shape[1]), key=lambda i: -float(flat[r, i])):
            out[r, i] = flat[r, i]
            total += float(flat[r, i])
            if total >= p:
                break
        out[r] = out[r] / out[r].sum()
    return out.reshape(probs.shape)


def top_p_through_logits(probs, p):
    logits = probs.log()
    s, idx = logits.sort(dim=-1, descending=True)
    sorted_probs = s.softmax(dim=-1)
    s = s.masked_fill(sorted_probs.cumsum(-1) - sorted_probs >= p, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, idx, s).softmax(dim=-1)


def top_p_float64_searchsorted(probs, p):
    s, idx = torch.sort(probs.double(), dim=-1, descending=True)
    total = s.cumsum(dim=-1)
    n = torch.searchsorted(total.contiguous(), torch.full(total.shape[:-1] + (1,), p, dtype=torch.float64))
    keep = torch.arange(s.size(-1)) <= n
    s = torch.where(keep, s, 0.0)
    return torch.zeros_like(s).scatter(-1, idx, s / s.sum(-1, keepdim=True))


TOP_P_SOLUTIONS = [top_p_sort_cumsum, top_p_hugging_face_style, top_p_shifted_mask, top_p_threshold,
                   top_p_python_loop, top_p_through_logits, top_p_float64_searchsorted]


@pytest.mark.parametrize("solution", TOP_P_SOLUTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("hidden", [False, True])
def test_top_p_correct_solutions_pass(solution, hidden, capsys):
    result = checks.check_top_p(solution, hidden=hidden)
    assert result.passed, capsys.readouterr().out
    assert "✅ check_top_p: passed" in capsys.readouterr().out


# ================================================================ top-p: the classic mistakes


def _sorted(probs, dim=-1, descending=True):
    return torch.sort(probs, dim=dim, descending=descending)


def crossing_dropped(probs, p):
    s, idx = _sorted(probs)
    s = s * (s.cumsum(-1) < p)  # the total *including* the token
    return torch.zeros_like(probs).scatter(-1, idx, s / s.sum(-1, keepdim=True))


def crossing_dropped_but_one_kept(probs, p):
    s, idx = _sorted(probs)
    keep = s.cumsum(-1) <= p
    keep[..., 0] = True
    s = s * keep
    return torch.zeros_like(probs).scatter(-1, idx, s / s.sum(-1, keepdim=True))


def crossing_dropped_in_a_loop(probs, p):
    flat = probs.reshape(-1, probs.shape[-1])
    out = torch.zeros_like(flat)
    for r in range(flat.shape[0]):
        total = 0.0
        for i in sorted(range(flat.shape[1]), key=lambda i: -float(flat[r, i])):
            total += float(flat[r, i])
            if total >= p:
                break
            out[r, i] = flat[r, i]
        out[r] = out[r] / out[r].sum().clamp_min(1e-9)
    return out.reshape(probs.shape)


def crossing_dropped_uniform(probs, p):
    # Two mistakes no variant computes: the crossing token dropped, and the kept tokens made uniform.
    s, idx = _sorted(probs)
    keep = (s.cumsum(-1) < p).float()
    keep[..., 0] = 1.0
    return torch.zeros_like(probs).scatter(-1, idx, keep / keep.sum(-1, keepdim=True))


def one_token_too_many_uniform(probs, p):
    s, idx = _sorted(probs)
    keep = (s.cumsum(-1) - s < p)
    keep[..., 1:] |= keep[..., :-1].clone()
    keep = keep.float()
    return torch.zeros_like(probs).scatter(-1, idx, keep / keep.sum(-1, keepdim=True))


def right_tokens_uniform(probs, p):
    s, idx = _sorted(probs)
    keep = (s.cumsum(-1) - s < p).float()
    return torch.zeros_like(probs).scatter(-1, idx, keep / keep.sum(-1, keepdim=True))


def not_renormalised(probs, p):
    s, idx = _sorted(probs)
    return torch.zeros_like(probs).scatter(-1, idx, s * (s.cumsum(-1) - s < p))


def renormalised_over_the_batch(probs, p):
    s, idx = _sorted(probs)
    out = torch.zeros_like(probs).scatter(-1, idx, s * (s.cumsum(-1) - s < p))
    return out / out.sum(dim=0, keepdim=True)


def renormalised_with_softmax(probs, p):
    s, idx = _sorted(probs)
    kept = s.masked_fill(s.cumsum(-1) - s >= p, float("-inf"))
    return torch.zeros_like(probs).scatter(-1, idx, F.softmax(kept, dim=-1))


def not_scattered_back(probs, p):
    s, _ = _sorted(probs)
    s = s * (s.cumsum(-1) - s < p)
    return s / s.sum(-1, keepdim=True)


def gathered_instead_of_scattered(probs, p):
    s, idx = _sorted(probs)
    s = s * (s.cumsum(-1) - s < p)
    return (s / s.sum(-1, keepdim=True)).gather(-1, idx)


def cumsum_over_dim_1(probs, p):
    s, idx = _sorted(probs)
    total = s.cumsum(dim=1)
    s = s * (total - s < p)
    return torch.zeros_like(probs).scatter(-1, idx, s / s.sum(-1, keepdim=True))


def everything_over_dim_1(probs, p):
    s, idx = _sorted(probs, dim=1)
    s = s * (s.cumsum(1) - s < p)
    return torch.zeros_like(probs).scatter(1, idx, s / s.sum(1, keepdim=True))


def softmax_first(probs, p):
    return top_p_sort_cumsum(F.softmax(probs, dim=-1), p)


def ascending_sort(probs, p):
    s, idx = _sorted(probs, descending=False)
    s = s * (s.cumsum(-1) - s < p)
    return torch.zeros_like(probs).scatter(-1, idx, s / s.sum(-1, keepdim=True))


def each_probability_against_p(probs, p):
    out = probs * (probs >= p)
    return out / out.sum(-1, keepdim=True)


def returned_the_mask(probs, p):
    s, idx = _sorted(probs)
    keep = (s.cumsum(-1) - s < p).float()
    return torch.zeros_like(probs).scatter(-1, idx, keep)


def nothing_cut(probs, p):
    return probs / probs.sum(-1, keepdim=True)


def wrong_tokens(probs, p):
    # the right number of tokens, but the sort's indices reversed when putting them back
    s, idx = _sorted(probs)
    s = s * (s.cumsum(-1) - s < p)
    return torch.zeros_like(probs).scatter(-1, idx.flip(-1), s / s.sum(-1, keepdim=True))


TOP_P_BUGS = [
    (crossing_dropped, G.TOP_P_CROSSING_DROPPED),
    (crossing_dropped_but_one_kept, G.TOP_P_CROSSING_DROPPED),
    (crossing_dropped_in_a_loop, G.TOP_P_CROSSING_DROPPED),
    (crossing_dropped_uniform, G.TOP_P_CROSSING_DROPPED),
    (one_token_too_many_uniform, G.TOP_P_ONE_TOO_MANY),
    (right_tokens_uniform, G.TOP_P_WRONG_VALUES),
    (not_renormalised, G.TOP_P_NOT_RENORMALISED),
    (renormalised_over_the_batch, G.TOP_P_RENORMALISED_WRONG_DIM),
    (renormalised_with_softmax, G.TOP_P_SOFTMAX_OF_PROBS),
    (not_scattered_back, G.TOP_P_NOT_SCATTERED),
    (gathered_instead_of_scattered, G.TOP_P_NOT_SCATTERED),
    (cumsum_over_dim_1, G.TOP_P_CUMSUM_WRONG_DIM),
    (everything_over_dim_1, G.TOP_P_WRONG_DIM),
    (softmax_first, G.TOP_P_ON_LOGITS),
    (ascending_sort, G.TOP_P_ASCENDING),
    (each_probability_against_p, G.TOP_P_EACH_PROB),
    (returned_the_mask, G.TOP_P_RETURNED_MASK),
    (nothing_cut, G.TOP_P_NOTHING_CUT),
    (wrong_tokens, G.TOP_P_WRONG_TOKENS),
]


@pytest.mark.parametrize("buggy,diagnosis", TOP_P_BUGS, ids=[f.__name__ for f, _ in TOP_P_BUGS])
def test_top_p_names_each_bug(buggy, diagnosis, capsys):
    result = checks.check_top_p(buggy)
    out = capsys.readouterr().out
    assert not result.passed and result.attempted
    assert result.diagnosis == diagnosis, out
    assert "Likely bug:" in out and "expected:" in out and "got:" in out


def test_top_p_wrong_tokens_says_where():
    result = checks.check_top_p(wrong_tokens)
    assert "in row 0, tokens [" in result.message and "] instead of [" in result.message


def test_top_p_two_bugs_name_both(capsys):
    def dropped_and_unnormalised(probs, p):
        s, idx = _sorted(probs)
        return torch.zeros_like(probs).scatter(-1, idx, s * (s.cumsum(-1) < p))
    result = checks.check_top_p(dropped_and_unnormalised)
    assert result.diagnosis == G.TOP_P_CROSSING_DROPPED
    assert "Then also: you zeroed the tokens outside the nucleus but did not renormalise" in result.message


def test_top_p_values_left_in_sorted_order_are_named_whatever_else_is_wrong():
    def sorted_dropped_and_unnormalised(probs, p):  # three mistakes: more than the variants combine
        s, _ = _sorted(probs)
        return s * (s.cumsum(-1) < p)
    result = checks.check_top_p(sorted_dropped_and_unnormalised)
    assert result.diagnosis == G.TOP_P_NOT_SCATTERED


def test_every_single_mistake_gives_its_own_answer_on_the_first_input():
    """The first case decides most verdicts: on it, no two classic mistakes (nor the input itself, nor the
    right answer) coincide, so each is named for what it is."""
    probs, p = G._draw_probs(50, (3, 4, 10), 0.75, 1.5), 0.75
    expected = G.sampling.next_token_probs(probs.double().log(), top_p=p).float()
    outputs = [("the answer", expected)]
    for v in G._top_p_variants(probs.shape):
        if len(v.bugs) == 1:
            outputs.append((v.bugs[0].label, v.compute(probs.clone(), p)))
    assert len({label for label, _ in outputs}) == 14
    for (label_a, a), (label_b, b) in itertools.combinations(outputs, 2):
        assert label_a == label_b or not close(a, b), (label_a, label_b)


def test_top_p_inputs_have_no_tie_or_total_near_p():
    for seed, shape, p, spread in [(50, (3, 4, 10), 0.75, 1.5), (55, (5, 20), 0.97, 1.0), (57, (6, 2), 0.3, 1.0)]:
        probs = G._draw_probs(seed, shape, p, spread)
        assert torch.allclose(probs.sum(-1), torch.ones(shape[:-1]))
        s = probs.sort(dim=-1, descending=True).values
        assert (s.cumsum(-1) - p).abs().min() >= 2e-3


# ================================================================ top-p: refusals, stubs, errors


def test_top_p_refuses_the_librarys_top_p(capsys):
    from gpt_lesson import sampling

    def via_next_token_probs(probs, p):
        return sampling.next_token_probs(probs.log(), top_p=p)

    def via_the_filter(probs, p):
        return sampling._top_p_filter(probs.log(), p).softmax(-1)

    for fn, name in [(via_next_token_probs, "gpt_lesson.sampling.next_token_probs"),
                     (via_the_filter, "gpt_lesson.sampling._top_p_filter")]:
        result = checks.check_top_p(fn)
        assert result.diagnosis == checks.CALLED_LIBRARY and name in result.message


def test_top_p_refuses_hugging_faces_warper(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers.generation.logits_process import TopPLogitsWarper

    def via_hugging_face(probs, p):
        logits = probs.log().reshape(-1, probs.size(-1))
        return TopPLogitsWarper(p)(None, logits).softmax(-1).reshape(probs.shape)

    result = checks.check_top_p(via_hugging_face)
    assert result.diagnosis == checks.CALLED_LIBRARY and "TopPLogitsWarper" in result.message


def test_top_p_stub_is_not_attempted_and_strict_raises(capsys):
    def stub(probs, p):
        raise NotImplementedError

    result = checks.check_top_p(stub)
    assert not result.attempted and result.diagnosis == checks.NOT_ATTEMPTED
    with pytest.raises(AssertionError, match="not attempted yet"):
        checks.check_top_p(stub, strict=True)
    with pytest.raises(AssertionError, match="the token that crosses p dropped"):
        checks.check_top_p(crossing_dropped, strict=True)
    assert checks.check_top_p(top_p_sort_cumsum, strict=True).passed


def test_top_p_hard_coded_dimension_gets_a_hint():
    def three_dims_only(probs, p):
        s, idx = torch.sort(probs, dim=2, descending=True)
        s = s * (s.cumsum(2) - s < p)
        return torch.zeros_like(probs).scatter(2, idx, s / s.sum(2, keepdim=True))

    result = checks.check_top_p(three_dims_only)
    assert result.diagnosis == checks.RAISED
    assert "On probs of shape (4, 12) with p=0.6" in result.message
    assert "Likely cause:" in result.message and "dim=-1" in result.message


def test_top_p_integer_indices_hint():
    def float_indices(probs, p):
        s, idx = torch.sort(probs, dim=-1, descending=True)
        s = s * (s.cumsum(-1) - s < p)
        return torch.zeros_like(probs).scatter(-1, idx.float(), s / s.sum(-1, keepdim=True))

    result = checks.check_top_p(float_indices)
    assert result.diagnosis == checks.RAISED and "int64 indices" in result.message


def test_top_p_leaves_the_random_state_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    checks.check_top_p(top_p_sort_cumsum, hidden=True)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_top_p_feedback_in_chinese(capsys):
    try:
        set_language("zh")
        result = checks.check_top_p(crossing_dropped)
    finally:
        set_language("en")
    zh = translations("zh")
    assert result.diagnosis == G.TOP_P_CROSSING_DROPPED
    assert zh.gettext(G.TOP_P_CROSSING_DROPPED) != G.TOP_P_CROSSING_DROPPED
    assert zh.gettext(G.TOP_P_CROSSING_DROPPED) in result.message
    assert any("\u4e00" <= ch <= "\u9fff" for ch in result.message)


# ================================================================ temperature and top-k


def tk_karpathy(logits, temperature, top_k):
    logits = logits / temperature
    if top_k is not None:
        v, _ = torch.topk(logits, top_k)
        logits[logits < v[..., [-1]]] = -float("Inf")
    return F.softmax(logits, dim=-1)


def tk_scatter(logits, temperature, top_k):
    z = logits / temperature
    if top_k:
        values, idx = z.topk(top_k, dim=-1)
        z = torch.full_like(z, float("-inf")).scatter(-1, idx, values)
    z = z - z.amax(dim=-1, keepdim=True)
    e = z.exp()
    return e / e.sum(dim=-1, keepdim=True)


def tk_probabilities_float64(logits, temperature, top_k):
    p = torch.softmax(logits.double() / temperature, dim=-1)
    if top_k is not None:
        kth = p.sort(dim=-1, descending=True).values[..., top_k - 1:top_k]
        p = torch.where(p >= kth, p, 0.0)
        p = p / p.sum(dim=-1, keepdim=True)
    return p.float()


def tk_sort_threshold(logits, temperature, top_k):
    out = logits.clone() / temperature
    if top_k is not None and top_k < logits.size(-1):
        threshold = out.sort(dim=-1, descending=True).values[..., top_k - 1].unsqueeze(-1)
        out = out.masked_fill(out < threshold, float("-inf"))
    return out.softmax(-1)


TK_SOLUTIONS = [tk_karpathy, tk_scatter, tk_probabilities_float64, tk_sort_threshold]


@pytest.mark.parametrize("solution", TK_SOLUTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("hidden", [False, True])
def test_temperature_top_k_correct_solutions_pass(solution, hidden, capsys):
    assert checks.check_temperature_top_k(solution, hidden=hidden).passed, capsys.readouterr().out


def _cut(z, top_k, fill=float("-inf"), op="<"):
    if top_k is None:
        return z
    kth = torch.topk(z, top_k).values[..., -1:]
    return z.masked_fill(z < kth if op == "<" else z <= kth, fill)


TK_BUGS = [
    (lambda z, t, k: F.softmax(_cut(z * t, k), -1), G.TEMPERATURE_MULTIPLIED),
    (lambda z, t, k: F.softmax(_cut(z, k), -1), G.TEMPERATURE_IGNORED),
    (lambda z, t, k: F.softmax(_cut(z, k), -1) / t, G.TEMPERATURE_AFTER_SOFTMAX),
    (lambda z, t, k: F.softmax(_cut(z, k), -1) ** (1 / t), G.TEMPERATURE_AFTER_SOFTMAX),
    (lambda z, t, k: F.softmax(z / t, -1), G.TOP_K_IGNORED),
    (lambda z, t, k: F.softmax(z / t if k is None else (z / t).masked_fill(
        z > torch.topk(z, k, largest=False).values[..., -1:], float("-inf")), -1), G.TOP_K_SMALLEST),
    (lambda z, t, k: F.softmax(_cut(z / t, k, fill=0.0), -1), G.TOP_K_MASKED_WITH_ZERO),
    (lambda z, t, k: F.softmax(z / t, -1) * (_cut(z, k) > float("-inf")), G.TOP_K_NOT_RENORMALISED),
    (lambda z, t, k: F.softmax(_cut(z / t, k, op="<="), -1), G.TOP_K_OFF_BY_ONE),
    (lambda z, t, k: F.softmax(_cut(z / t, None if k is None else k + 1), -1), G.TOP_K_OFF_BY_ONE),
    (lambda z, t, k: F.softmax(z / t if k is None else torch.topk(z / t, k).values, -1), G.TOP_K_VALUES_ONLY),
    (lambda z, t, k: F.softmax(_cut(z / t, k), 0), G.SOFTMAX_WRONG_DIM),
    (lambda z, t, k: F.log_softmax(_cut(z / t, k), -1), G.LOG_SOFTMAX),
    (lambda z, t, k: (_cut(z / t, k) - _cut(z / t, k).amax(-1, keepdim=True)).exp(), G.NOT_NORMALISED),
    (lambda z, t, k: F.softmax(_cut(z / t, None if k is None else max(1, k // 2)), -1), G.TOP_K_WRONG_COUNT),
]


@pytest.mark.parametrize("buggy,diagnosis", TK_BUGS, ids=[f"{i}-{d}" for i, (_, d) in enumerate(TK_BUGS)])
def test_temperature_top_k_names_each_bug(buggy, diagnosis, capsys):
    result = checks.check_temperature_top_k(buggy)
    out = capsys.readouterr().out
    assert not result.passed and result.diagnosis == diagnosis, out
    assert "Likely bug:" in out


def test_temperature_top_k_none_gets_a_hint_and_the_library_is_refused():
    def no_none(logits, temperature, top_k):
        kth = torch.topk(logits, top_k).values[..., -1:]
        return F.softmax(logits.masked_fill(logits < kth, float("-inf")) / temperature, -1)

    result = checks.check_temperature_top_k(no_none)
    assert result.diagnosis == checks.RAISED and "top_k=None means no cut" in result.message
    assert "On logits of shape (4, 9) with temperature=1.5, top_k=None" in result.message
    from gpt_lesson.sampling import next_token_probs
    result = checks.check_temperature_top_k(lambda z, t, k: next_token_probs(z, t, k))
    assert result.diagnosis == checks.CALLED_LIBRARY and "next_token_probs" in result.message
    assert not checks.check_temperature_top_k(lambda z, t, k: None).attempted


# ================================================================ the decode step


def append_kv(layer, k_new, v_new):
    layer["k"] = torch.cat([layer["k"], k_new], dim=2)
    layer["v"] = torch.cat([layer["v"], v_new], dim=2)
    return layer["k"], layer["v"]


def appended_not_stored(layer, k_new, v_new):
    return torch.cat([layer["k"], k_new], dim=2), torch.cat([layer["v"], v_new], dim=2)


def appended_twice(layer, k_new, v_new):
    append_kv(layer, k_new, v_new)
    return append_kv(layer, k_new, v_new)


def appended_on_the_wrong_dim(layer, k_new, v_new):
    layer["k"] = torch.cat([layer["k"], k_new], dim=1)
    layer["v"] = torch.cat([layer["v"], v_new], dim=1)
    return layer["k"], layer["v"]


def make_decode_step(position="cache length", attention="by hand", append=append_kv, mask=False, scale=True,
                     attend_before_append=False, ln_f=True):
    """A learner's decode step: embeddings, then per block ln1, q/k/v, the cache, attention, c_proj, ffwd."""
    def decode_step(model, token, cache):
        B = token.size(0)
        C = model.token_embedding_table.embedding_dim
        t = cache[0]["k"].size(2)  # tokens already cached: the new token's position
        pos = {"cache length": t, "zero": 0, "one ahead": t + 1}[position]
        x = model.token_embedding_table(token) + model.position_embedding_table(torch.tensor([pos]))
        for block, layer in zip(model.blocks, cache):
            nh = block.sa.n_head
            hs = C // nh
            q, k, v = block.sa.c_attn(block.ln1(x)).split(C, dim=2)
            q, k, v = (z.view(B, 1, nh, hs).transpose(1, 2) for z in (q, k, v))
            if attend_before_append:
                keys, values = layer["k"], layer["v"]
                append(layer, k, v)
            else:
                keys, values = append(layer, k, v)
            if attention == "sdpa":
                y = F.scaled_dot_product_attention(q, keys, values, is_causal=mask)
            elif attention == "einsum":
                w = torch.einsum("bhqd,bhkd->bhqk", q, keys) / hs**0.5
                y = torch.einsum("bhqk,bhkd->bhqd", w.softmax(-1), values)
            else:
                w = q @ keys.transpose(-2, -1)
                if scale:
                    w = w / hs**0.5
                if mask:
                    n = keys.size(2)
                    w = w.masked_fill(torch.tril(torch.ones(n, n))[:1, :n] == 0, float("-inf"))
                y = w.softmax(dim=-1) @ values
            x = x + block.sa.c_proj(y.transpose(1, 2).reshape(B, 1, C))
            x = x + block.ffwd(block.ln2(x))
        return model.lm_head(model.ln_f(x) if ln_f else x)[:, -1, :]
    return decode_step


def decode_step_with_a_counter(model, token, cache):
    """Another style: the position kept in the cache dicts, F.layer_norm-free, logits (B, 1, V) returned."""
    step = make_decode_step(attention="einsum")
    return step(model, token, cache)[:, None, :]


DECODE_SOLUTIONS = [make_decode_step(), make_decode_step(attention="sdpa"), make_decode_step(attention="einsum"),
                    decode_step_with_a_counter]


@pytest.mark.parametrize("i", range(len(DECODE_SOLUTIONS)))
@pytest.mark.parametrize("hidden", [False, True])
def test_decode_step_correct_solutions_pass(i, hidden, capsys):
    assert checks.check_decode_step(DECODE_SOLUTIONS[i], hidden=hidden).passed, capsys.readouterr().out


DECODE_BUGS = [
    (dict(position="zero"), G.DECODE_POSITIONS_RESTARTED),
    (dict(position="one ahead"), G.DECODE_POSITION_ONE_AHEAD),
    (dict(append=appended_not_stored), G.DECODE_CACHE_NOT_ADVANCED),
    (dict(append=appended_twice), G.DECODE_APPENDED_TWICE),
    (dict(mask=True), G.DECODE_MASKED_SINGLE_QUERY),
    (dict(mask=True, attention="sdpa"), G.DECODE_MASKED_SINGLE_QUERY),
    (dict(attend_before_append=True), G.DECODE_OWN_KEY_LEFT_OUT),
    (dict(scale=False), G.DECODE_NOT_SCALED),
    (dict(ln_f=False), G.DECODE_FIRST_TOKEN_WRONG),
]


@pytest.mark.parametrize("bug,diagnosis", DECODE_BUGS, ids=[d for _, d in DECODE_BUGS])
def test_decode_step_names_each_bug(bug, diagnosis, capsys):
    result = checks.check_decode_step(make_decode_step(**bug))
    out = capsys.readouterr().out
    assert not result.passed and result.diagnosis == diagnosis, out
    assert "Likely bug:" in out


def test_decode_step_later_token_and_cache_length_diagnoses():
    def wrong_after_three(model, token, cache):
        logits = make_decode_step()(model, token, cache)
        return logits + 1.0 if cache[0]["k"].size(2) > 3 else logits

    result = checks.check_decode_step(wrong_after_three)
    assert result.diagnosis == G.DECODE_LATER_TOKEN_WRONG and "the first 3 token(s) are right, token 4" in result.message

    def drops_the_oldest(layer, k_new, v_new):  # a window of 3 positions: the cache stops growing
        append_kv(layer, k_new, v_new)
        layer["k"], layer["v"] = layer["k"][:, :, -3:], layer["v"][:, :, -3:]
        return layer["k"], layer["v"]

    result = checks.check_decode_step(make_decode_step(append=drops_the_oldest))
    assert result.diagnosis == G.DECODE_CACHE_LENGTH and "after 6 tokens your cache holds [3] positions" in result.message


def test_decode_step_errors_get_hints_and_shapes_are_named():
    result = checks.check_decode_step(make_decode_step(append=appended_on_the_wrong_dim))
    assert result.diagnosis == checks.RAISED and "dim=2" in result.message
    result = checks.check_decode_step(lambda model, token, cache: torch.zeros(token.size(0), 3))
    assert result.diagnosis == checks.RAISED and "at step 1 your decode_step returned a tensor of shape" in result.message
    assert not checks.check_decode_step(lambda model, token, cache: None).attempted


def test_decode_step_refuses_the_models_own_forward_and_cache():
    def whole_sequence(model, token, cache):
        cache[0].setdefault("tokens", []).append(token)  # keeps the tokens and reruns the model: no KV cache
        return model(torch.cat(cache[0]["tokens"], dim=1))[0][:, -1]

    def library_cache(model, token, cache):
        from gpt_lesson.model import KVCache
        kv = cache[0].setdefault("kv", KVCache.for_model(model, batch_size=token.size(0)))
        return model(token, kv_cache=kv)[0][:, -1]

    for fn in (whole_sequence, library_cache):
        result = checks.check_decode_step(fn)
        assert result.diagnosis == checks.CALLED_LIBRARY, result.message


def test_decode_models_make_every_mistake_visible():
    model = G._decode_model(70, 11, 12, 3, 2, 8)
    tokens = torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(170))
    expected = model(tokens)[0]
    outputs = [("answer", expected)]
    for v in G._decode_variants():
        if len(v.bugs) == 1:
            try:
                outputs.append((v.bugs[0].label, v.compute(model, tokens)))
            except IndexError:  # keys appended twice: positions run off the table (named from the error)
                assert v.bugs[0].label == G.DECODE_APPENDED_TWICE
    assert len(outputs) == 7
    for (a, x), (b, y) in itertools.combinations(outputs, 2):
        assert a == b or not close(x, y), (a, b)
    assert close(G._run_steps(make_decode_step(), model, tokens), expected)


def test_every_label_of_the_module_has_a_test():
    labels = {value for name, value in vars(G).items() if name.isupper() and isinstance(value, str)}
    tested = {d for _, d in TOP_P_BUGS} | {d for _, d in TK_BUGS} | {d for _, d in DECODE_BUGS}
    tested |= {G.DECODE_LATER_TOKEN_WRONG, G.DECODE_CACHE_LENGTH}  # tested on their own above
    assert labels - tested == set()
