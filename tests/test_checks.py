"""Every check accepts the reference solution, names each classic bug, survives stubs and
learner exceptions, and rejects bad arguments.

The buggy solutions here are written the way a learner would write them (independently of the
variants inside gpt_lesson.checks), so a test passes only if the check really recognises the bug.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from gpt_lesson import checks
from gpt_lesson.attention import attention_scores, causal_mask, merge_heads, naive_attention, split_heads
from gpt_lesson.data import CharTokenizer
from gpt_lesson.model import FeedForward


def tril_of(x: torch.Tensor) -> torch.Tensor:
    T = x.size(-2)
    return torch.tril(torch.ones(T, T))


# ---------------------------------------------------------------- reference solutions
def ref_scores(q, k):
    return attention_scores(q, k)


def ref_softmax(scores):
    return F.softmax(scores, dim=-1)


def ref_causal(q, k, v):
    return naive_attention(q, k, v, causal_mask(q.size(1)))[0]


def ref_split(x, n_head):
    return split_heads(x, n_head)


def ref_merge(y):
    return merge_heads(y)


def ref_block(x, ln1, sa, ln2, ffwd):
    x = x + sa(ln1(x))
    return x + ffwd(ln2(x))


def ref_embeddings(idx, tok_table, pos_table):
    return tok_table(idx) + pos_table(torch.arange(idx.shape[1]))


# ---------------------------------------------------------------- buggy solutions
N_EMBD = 64  # a learner's notebook-level global


def scores_by_n_embd(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(N_EMBD)


def scores_unscaled(q, k):
    return q @ k.transpose(-2, -1)


def scores_no_transpose(q, k):
    return q @ k / math.sqrt(q.size(-1))


def scores_by_head_size(q, k):
    return q @ k.transpose(-2, -1) / q.size(-1)


def scores_wrong_dim_for_d_k(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(1))  # T, not head_size


def softmax_dim_minus_2(scores):
    return F.softmax(scores, dim=-2)


def softmax_dim_1(scores):
    return torch.softmax(scores, dim=1)


def causal(q, k, v, *, d=None, mask="before", dim=-1, transpose=True):
    """A learner's head with one knob per classic mistake."""
    scores = (q @ k.transpose(-2, -1)) if transpose else (q @ k)
    scores = scores / math.sqrt(q.size(-1) if d is None else d)
    tril = tril_of(q)
    if mask == "before":
        scores = scores.masked_fill(tril == 0, float("-inf"))
    elif mask == "zero":
        scores = scores.masked_fill(tril == 0, 0)
    weights = torch.softmax(scores, dim=dim)
    if mask == "after":
        weights = weights * tril
    return weights @ v


def split_no_transpose(x, n_head):
    B, T, C = x.shape
    return x.view(B, n_head, T, C // n_head)


def split_forgot_transpose_shape(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head)


def merge_no_transpose(y):
    B, nh, T, hs = y.shape
    return y.reshape(B, T, nh * hs)


def ffn_no_expansion(n_embd):
    return nn.Sequential(nn.Linear(n_embd, n_embd), nn.GELU(), nn.Linear(n_embd, n_embd))


def ffn_no_nonlinearity(n_embd):
    return nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.Linear(4 * n_embd, n_embd))


def ffn_neither(n_embd):
    return nn.Sequential(nn.Linear(n_embd, n_embd), nn.Linear(n_embd, n_embd))


def ffn_relu(n_embd):
    return nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.ReLU(), nn.Linear(4 * n_embd, n_embd))


def block_post_ln(x, ln1, sa, ln2, ffwd):
    x = ln1(x + sa(x))
    return ln2(x + ffwd(x))


def block_no_residual(x, ln1, sa, ln2, ffwd):
    x = sa(ln1(x))
    return ffwd(ln2(x))


def block_no_ffwd_residual(x, ln1, sa, ln2, ffwd):
    x = x + sa(ln1(x))
    return ffwd(ln2(x))


def block_swapped_ln(x, ln1, sa, ln2, ffwd):
    x = x + sa(ln2(x))
    return x + ffwd(ln1(x))


def block_no_attention_residual(x, ln1, sa, ln2, ffwd):
    x = sa(ln1(x))
    return x + ffwd(ln2(x))


def block_no_ln(x, ln1, sa, ln2, ffwd):
    x = x + sa(x)
    return x + ffwd(x)


def split_interleaved(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, C // n_head, n_head).permute(0, 3, 1, 2)


def merge_interleaved(y):
    B, nh, T, hs = y.shape
    return y.permute(0, 2, 3, 1).reshape(B, T, nh * hs)


def scores_transposed_q(q, k):
    return q.transpose(-2, -1) @ k / math.sqrt(q.size(-1))


def scores_multiplied(q, k):
    return q @ k.transpose(-2, -1) * math.sqrt(q.size(-1))


def causal_triu(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(torch.triu(torch.ones(q.size(1), q.size(1))) == 0, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def emb_position_only(idx, tok_table, pos_table):
    return pos_table(torch.arange(idx.shape[1])).repeat(idx.shape[0], 1, 1)


def emb_multiplied(idx, tok_table, pos_table):
    return tok_table(idx) * pos_table(torch.arange(idx.shape[1]))


def emb_token_only(idx, tok_table, pos_table):
    return tok_table(idx)


def emb_positions_from_ids(idx, tok_table, pos_table):
    return tok_table(idx) + pos_table(idx)


def emb_concatenated(idx, tok_table, pos_table):
    B, T = idx.shape
    return torch.cat([tok_table(idx), pos_table(torch.arange(T)).expand(B, T, -1)], dim=-1)


# ---------------------------------------------------------------- stubs and crashing solutions
def stub_raises(*args):
    raise NotImplementedError


def stub_returns_none(*args):
    return None


def crashes(*args):
    raise ZeroDivisionError("oops in the learner's code")


CHECKS = {  # check -> reference solution
    checks.check_attention_scores: ref_scores,
    checks.check_softmax_weights: ref_softmax,
    checks.check_causal_attention: ref_causal,
    checks.check_split_heads: ref_split,
    checks.check_merge_heads: ref_merge,
    checks.check_feed_forward: FeedForward,
    checks.check_block: ref_block,
    checks.check_embeddings: ref_embeddings,
}

BUGS = [  # (check, buggy solution, expected diagnosis)
    (checks.check_attention_scores, scores_by_n_embd, checks.SCALED_BY_N_EMBD),
    (checks.check_attention_scores, scores_unscaled, checks.NO_SCALING),
    (checks.check_attention_scores, scores_no_transpose, checks.MISSING_TRANSPOSE),
    (checks.check_attention_scores, scores_by_head_size, checks.SCALED_BY_HEAD_SIZE),
    (checks.check_attention_scores, scores_wrong_dim_for_d_k, checks.WRONG_SCALING),
    (checks.check_attention_scores, scores_transposed_q, checks.MISSING_TRANSPOSE),
    (checks.check_attention_scores, scores_multiplied, checks.WRONG_SCALING),
    (checks.check_softmax_weights, softmax_dim_minus_2, checks.SOFTMAX_WRONG_DIM),
    (checks.check_softmax_weights, softmax_dim_1, checks.SOFTMAX_WRONG_DIM),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, mask="after"), checks.MASK_AFTER_SOFTMAX),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, mask="zero"), checks.MASK_WITH_ZERO),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, mask="none"), checks.NO_MASK),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, d=N_EMBD), checks.SCALED_BY_N_EMBD),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, d=128), checks.SCALED_BY_N_EMBD),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, d=1), checks.NO_SCALING),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, dim=-2), checks.SOFTMAX_WRONG_DIM),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, transpose=False), checks.MISSING_TRANSPOSE),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, d=q.size(-1) ** 2), checks.SCALED_BY_HEAD_SIZE),
    (checks.check_causal_attention, causal_triu, checks.MASK_WRONG_TRIANGLE),
    (checks.check_split_heads, split_no_transpose, checks.MISSING_TRANSPOSE),
    (checks.check_split_heads, split_interleaved, checks.SPLIT_WRONG_ORDER),
    (checks.check_merge_heads, merge_interleaved, checks.MERGE_WRONG_ORDER),
    (checks.check_split_heads, split_forgot_transpose_shape, checks.MISSING_TRANSPOSE),
    (checks.check_merge_heads, merge_no_transpose, checks.MERGE_WITHOUT_TRANSPOSE),
    (checks.check_feed_forward, ffn_no_expansion, checks.NO_EXPANSION),
    (checks.check_feed_forward, ffn_no_nonlinearity, checks.NO_NONLINEARITY),
    (checks.check_feed_forward, ffn_neither, f"{checks.NO_EXPANSION}; {checks.NO_NONLINEARITY}"),
    (checks.check_block, block_post_ln, checks.POST_LN),
    (checks.check_block, block_no_residual, checks.MISSING_RESIDUAL),
    (checks.check_block, block_no_ffwd_residual, checks.MISSING_RESIDUAL),
    (checks.check_block, block_swapped_ln, checks.LAYER_NORMS_SWAPPED),
    (checks.check_block, block_no_attention_residual, checks.MISSING_RESIDUAL),
    (checks.check_block, block_no_ln, checks.NO_LAYER_NORM),
    (checks.check_embeddings, emb_position_only, checks.MISSING_TOKEN_EMBEDDING),
    (checks.check_embeddings, emb_multiplied, checks.EMBEDDINGS_NOT_ADDED),
    (checks.check_embeddings, emb_token_only, checks.MISSING_POSITION_EMBEDDING),
    (checks.check_embeddings, emb_positions_from_ids, checks.POSITIONS_FROM_TOKEN_IDS),
    (checks.check_embeddings, emb_concatenated, checks.EMBEDDINGS_NOT_ADDED),
]


def _id(value) -> str:
    return getattr(value, "__name__", str(value))


@pytest.mark.parametrize("check, solution", CHECKS.items(), ids=[c.__name__ for c in CHECKS])
def test_accepts_reference(check, solution, capsys):
    result = check(solution)
    assert result.passed and result.attempted and bool(result)
    assert result.diagnosis is None
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("check, buggy, diagnosis", BUGS,
                         ids=[f"{c.__name__}-{_id(b)}-{d}" for c, b, d in BUGS])
def test_names_each_bug(check, buggy, diagnosis, capsys):
    result = check(buggy)
    assert not result.passed and not bool(result)
    assert result.attempted
    assert result.diagnosis == diagnosis
    out = capsys.readouterr().out
    assert diagnosis in out and result.message in out  # what it returns is what it printed


def test_message_says_expected_and_received_and_the_numbers():
    result = checks.check_attention_scores(scores_by_n_embd)
    assert "expected:" in result.message and "got:" in result.message
    assert "sqrt(64)" in result.message and "sqrt(6)" in result.message  # the learner's n_embd and the head size


def test_wrong_shape_names_both_shapes():
    result = checks.check_attention_scores(lambda q, k: (q @ k.transpose(-2, -1))[:, :, :2])
    assert result.diagnosis == checks.WRONG_SHAPE
    assert "(2, 6, 6)" in result.message and "(2, 6, 2)" in result.message


def test_nan_output_is_reported():
    result = checks.check_softmax_weights(lambda s: torch.full_like(s, float("nan")))
    assert result.diagnosis == checks.NON_FINITE


def test_masking_after_softmax_with_inf_gives_nan_and_is_named():
    def after_inf(q, k, v):
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
        return w.masked_fill(tril_of(q) == 0, float("-inf")) @ v

    assert checks.check_causal_attention(after_inf).diagnosis == checks.MASK_AFTER_SOFTMAX


def test_shape_dependent_bug_is_caught_on_the_second_input():
    # Correct for T == head_size (the first input), wrong otherwise.
    result = checks.check_attention_scores(scores_wrong_dim_for_d_k)
    assert "On q and k of shape (3, 5, 8)" in result.message


def test_non_tensor_output_is_reported():
    result = checks.check_split_heads(lambda x, n: x.numpy())
    assert result.diagnosis == checks.WRONG_TYPE and "ndarray" in result.message


def test_view_after_transpose_gets_the_contiguous_hint():
    result = checks.check_merge_heads(lambda y: y.transpose(1, 2).view(y.size(0), y.size(2), -1))
    assert result.diagnosis == checks.RAISED and ".contiguous()" in result.message


def test_causal_head_with_a_fixed_size_mask_gets_a_hint():
    tril = torch.tril(torch.ones(8, 8))  # a learner's global mask for T=8

    def fixed_mask(q, k, v):
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(tril == 0, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    result = checks.check_causal_attention(fixed_mask)
    assert result.diagnosis == checks.RAISED and "tril[:T, :T]" in result.message


def test_relu_ffn_is_accepted():
    assert checks.check_feed_forward(ffn_relu).passed


def test_ffn_mixing_positions_is_rejected():
    class Mixer(nn.Module):
        def __init__(self, n_embd):
            super().__init__()
            self.net = FeedForward(n_embd, dropout=0.0)

        def forward(self, x):
            return self.net(x.cumsum(dim=1))

    assert checks.check_feed_forward(Mixer).diagnosis == checks.NOT_POSITION_WISE


def test_ffn_factory_must_return_a_module():
    assert checks.check_feed_forward(lambda n: torch.zeros(n)).diagnosis == checks.WRONG_TYPE


def test_ffn_with_a_global_size_gets_a_hint():
    result = checks.check_feed_forward(lambda n: FeedForward(16))
    assert result.diagnosis == checks.RAISED and "n_embd argument" in result.message


def test_ffn_stub_class_is_not_attempted():
    class Stub(nn.Module):
        def __init__(self, n_embd):
            super().__init__()

        def forward(self, x):
            raise NotImplementedError

    result = checks.check_feed_forward(Stub)
    assert not result.attempted and not result.passed


def test_embeddings_with_the_whole_position_table_gets_a_hint():
    result = checks.check_embeddings(lambda idx, tok, pos: tok(idx) + pos.weight)
    assert result.diagnosis == checks.RAISED and "torch.arange(T)" in result.message


def test_learner_input_mutation_does_not_affect_the_check():
    def in_place(q, k, v):
        q.mul_(0)  # destroys the caller's q if the check did not copy it
        return ref_causal(q, k, v)

    assert not checks.check_causal_attention(in_place).passed
    assert checks.check_causal_attention(ref_causal).passed


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    checks.check_block(ref_block)
    checks.check_feed_forward(FeedForward)
    assert torch.equal(torch.rand(3), expected)


# ---------------------------------------------------------------- stubs, crashes, bad arguments
@pytest.mark.parametrize("stub", [stub_raises, stub_returns_none])
@pytest.mark.parametrize("check", list(CHECKS), ids=[c.__name__ for c in CHECKS])
def test_untouched_stub_is_not_attempted(check, stub, capsys):
    result = check(stub)
    assert not result.attempted and not result.passed
    assert result.diagnosis == checks.NOT_ATTEMPTED
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("check", list(CHECKS), ids=[c.__name__ for c in CHECKS])
def test_learner_exception_is_reported_not_raised(check):
    result = check(crashes)
    assert result.attempted and not result.passed
    assert result.diagnosis == checks.RAISED
    assert "ZeroDivisionError" in result.message and "oops in the learner's code" in result.message


@pytest.mark.parametrize("check", list(CHECKS), ids=[c.__name__ for c in CHECKS])
@pytest.mark.parametrize("bad", [42, "fn", None])
def test_non_callable_raises_type_error(check, bad):
    with pytest.raises(TypeError, match="callable"):
        check(bad)


# ---------------------------------------------------------------- tokenizer
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak."


def test_tokenizer_accepts_char_tokenizer(capsys):
    tok = CharTokenizer(TEXT)
    result = checks.check_tokenizer(tok.encode, tok.decode, TEXT)
    assert result.passed and result.diagnosis is None
    assert "passed" in capsys.readouterr().out


def test_tokenizer_accepts_tensor_ids():
    tok = CharTokenizer(TEXT)
    assert checks.check_tokenizer(lambda s: torch.tensor(tok.encode(s)), tok.decode, TEXT).passed


def test_tokenizer_decode_returning_a_list():
    tok = CharTokenizer(TEXT)
    result = checks.check_tokenizer(tok.encode, lambda ids: [tok.itos[i] for i in ids], TEXT)
    assert result.diagnosis == checks.DECODE_NOT_STR


def test_tokenizer_encode_returning_text():
    tok = CharTokenizer(TEXT)
    assert checks.check_tokenizer(lambda s: s, tok.decode, TEXT).diagnosis == checks.ENCODE_NOT_IDS


def test_tokenizer_off_by_one_round_trip():
    tok = CharTokenizer(TEXT)
    result = checks.check_tokenizer(lambda s: [tok.stoi[c] + 1 for c in s],
                                    lambda ids: "".join(tok.itos.get(i, "?") for i in ids), TEXT)
    assert result.diagnosis == checks.ROUND_TRIP_CHANGED
    assert repr(TEXT[:30]) in result.message


def test_tokenizer_decode_with_stoi_is_reported():
    tok = CharTokenizer(TEXT)
    result = checks.check_tokenizer(tok.encode, lambda ids: "".join(tok.stoi[i] for i in ids), TEXT)
    assert result.diagnosis == checks.RAISED and "KeyError" in result.message and "itos" in result.message


@pytest.mark.parametrize("which", ["encode", "decode"])
@pytest.mark.parametrize("stub", [stub_raises, stub_returns_none])
def test_tokenizer_stub_is_not_attempted(which, stub):
    tok = CharTokenizer(TEXT)
    encode, decode = (stub, tok.decode) if which == "encode" else (tok.encode, stub)
    result = checks.check_tokenizer(encode, decode, TEXT)
    assert not result.attempted and not result.passed


def test_tokenizer_crash_is_reported():
    result = checks.check_tokenizer(crashes, crashes, TEXT)
    assert result.diagnosis == checks.RAISED and "ZeroDivisionError" in result.message


def test_tokenizer_bad_arguments():
    tok = CharTokenizer(TEXT)
    with pytest.raises(TypeError, match="encode"):
        checks.check_tokenizer("encode", tok.decode, TEXT)
    with pytest.raises(TypeError, match="decode"):
        checks.check_tokenizer(tok.encode, 3, TEXT)
    with pytest.raises(TypeError, match="str"):
        checks.check_tokenizer(tok.encode, tok.decode, [1, 2])
    with pytest.raises(ValueError, match="non-empty"):
        checks.check_tokenizer(tok.encode, tok.decode, "")


def test_result_repr_is_short_and_truthiness_follows_passed():
    r = checks.CheckResult(passed=False, attempted=True, diagnosis="no mask", message="long text " * 50)
    assert not r and "long text" not in repr(r) and "no mask" in repr(r)
    assert checks.CheckResult(True, True, None, "ok")


# Diagnoses tested one by one above, outside the BUGS table.
TESTED_ELSEWHERE = {checks.NOT_ATTEMPTED, checks.RAISED, checks.WRONG_TYPE, checks.WRONG_SHAPE, checks.NON_FINITE,
                    checks.NOT_POSITION_WISE, checks.DECODE_NOT_STR, checks.ENCODE_NOT_IDS,
                    checks.ROUND_TRIP_CHANGED, checks.WRONG_VALUES}


def test_every_diagnosis_has_a_test():
    labels = {value for name, value in vars(checks).items() if name.isupper() and isinstance(value, str)}
    tested = {label for _, _, diagnosis in BUGS for label in diagnosis.split("; ")} | TESTED_ELSEWHERE
    assert labels - tested == set()


def test_unknown_bug_gets_wrong_values_with_the_largest_difference():
    result = checks.check_softmax_weights(lambda s: F.softmax(s, dim=-1) + 0.01)
    assert result.diagnosis == checks.WRONG_VALUES and "largest difference is 0.01" in result.message


# --- lesson 12: the arithmetic of data parallelism ---------------------------------------

def _ddp_not_done(*args):
    raise NotImplementedError


DDP_CHECKS = [
    (checks.check_effective_batch, lambda m, a, w: m * a * w, [
        (lambda m, a, w: m * a, "you counted one rank's rows"),
        (lambda m, a, w: m * w, "you left out gradient accumulation"),
        (lambda m, a, w: m, "that is one micro-batch"),
    ]),
    (checks.check_grad_accum_steps, lambda b, m, w: b // (m * w), [
        (lambda b, m, w: b // m, "you ignored the other ranks"),
        (lambda b, m, w: b // w, "that is the rows per rank"),
    ]),
    (checks.check_allreduce_bytes, lambda model: 4 * sum(p.numel() for p in model.parameters()), [
        (lambda model: sum(p.numel() for p in model.parameters()), "number of values, not bytes"),
        (lambda model: 4 * sum(t.numel() for t in model.state_dict().values()), "tril buffers"),
        (lambda model: 8 * sum(p.numel() for p in model.parameters()), "8 bytes is float64"),
        (lambda model: 32 * sum(p.numel() for p in model.parameters()), "32 is the bits"),
    ]),
]


@pytest.mark.parametrize("check, solution, bugs", DDP_CHECKS, ids=lambda v: getattr(v, "__name__", ""))
def test_lesson12_self_checks(check, solution, bugs, capsys):
    ok = check(solution)
    assert ok and ok.passed and ok.attempted and "passed" in capsys.readouterr().out
    for stub in (_ddp_not_done, lambda *args: None):
        res = check(stub)
        assert not res and not res.attempted and "not attempted yet" in capsys.readouterr().out
    for bug, diagnosis in bugs:
        res = check(bug)
        assert not res and res.attempted and diagnosis in res.diagnosis and diagnosis in capsys.readouterr().out
    res = check(lambda *args: 1 / 0)
    assert not res and res.attempted and "ZeroDivisionError" in res.message
    res = check(lambda *args: 7)
    assert not res and res.diagnosis == "wrong value"
