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
                     (via_the_filter, "gpt_lesson.sampling's top-p filter")]:
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


def test_every_label_of_the_module_has_a_test():
    labels = {value for name, value in vars(G).items() if name.isupper() and isinstance(value, str)}
    tested = {diagnosis for _, diagnosis in TOP_P_BUGS}
    assert labels - tested == set()
