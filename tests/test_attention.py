"""The attention steps, one function each, compose into PyTorch's fused attention."""
import math

import pytest
import torch
import torch.nn.functional as F

from gpt_lesson import attention as A


def test_causal_mask_is_tril():
    m = A.causal_mask(4)
    assert torch.equal(m, torch.tensor([[1., 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]))


def test_scores_default_scale_is_one_over_sqrt_dk():
    torch.manual_seed(0)
    q, k = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    assert torch.allclose(A.attention_scores(q, k), q @ k.transpose(-2, -1) / 4.0)
    assert torch.allclose(A.attention_scores(q, k, scale=1.0), q @ k.transpose(-2, -1))


def test_masked_softmax_gives_exact_zeros_and_rows_sum_to_one():
    torch.manual_seed(0)
    scores = torch.randn(3, 6, 6)
    w = A.attention_weights(A.apply_mask(scores, A.causal_mask(6)))
    assert torch.all(w.triu(diagonal=1) == 0.0)  # exactly zero, not just small
    assert torch.allclose(w.sum(-1), torch.ones(3, 6))
    assert torch.equal(w[:, 0, 0], torch.ones(3))  # the first token can only see itself


def test_averaging_the_past_with_tril():
    x = torch.arange(12, dtype=torch.float32).view(1, 4, 3)
    w = A.attention_weights(A.apply_mask(torch.zeros(4, 4), A.causal_mask(4)))
    expected = torch.stack([x[0, : t + 1].mean(0) for t in range(4)])
    assert torch.allclose(A.weighted_sum(w, x)[0], expected)


def test_fully_masked_row_gives_nan_and_causal_never_does():
    scores = torch.randn(3, 3)
    w = A.attention_weights(A.apply_mask(scores, torch.tensor([[0., 0, 0], [1, 1, 0], [1, 1, 1]])))
    assert torch.isnan(w[0]).all() and not torch.isnan(w[1:]).any()
    assert not torch.isnan(A.attention_weights(A.apply_mask(torch.randn(50, 50), A.causal_mask(50)))).any()


def test_padding_mask_hides_only_padding():
    m = A.padding_mask([2, 4], 4)
    assert m.shape == (2, 1, 4)
    assert torch.equal(m[:, 0], torch.tensor([[1., 1, 0, 0], [1, 1, 1, 1]]))


def test_split_and_merge_are_inverse_and_head_major():
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).view(2, 3, 8)
    h = A.split_heads(x, 4)
    assert h.shape == (2, 4, 3, 2)
    assert torch.equal(h[0, 1, 2], x[0, 2, 2:4])  # head 1 holds channels 2..3
    assert torch.equal(A.merge_heads(h), x)


@pytest.mark.parametrize("masked", [True, False])
def test_naive_attention_equals_fused(masked):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 10, 8) for _ in range(3))
    mask = A.causal_mask(10) if masked else None
    out, scores, weights = A.naive_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=masked)
    assert (out - expected).abs().max() < 1e-5
    assert torch.allclose(scores, q @ k.transpose(-2, -1) / math.sqrt(8))
    assert (A.sdpa_attention(q, k, v, mask) - expected).abs().max() < 1e-5


def test_one_query_attention_equals_the_matrix_form():
    """The compiled decode step's attention: one query over L keys, as sums, gives softmax(q k^T s) v."""
    torch.manual_seed(0)
    q = torch.randn(2, 4, 1, 8)
    k, v = torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8)
    out = A.one_query_attention(q, k, v, 8 ** -0.5)
    assert out.shape == (2, 4, 1, 8)
    assert (out - F.scaled_dot_product_attention(q, k, v)).abs().max() < 1e-6
    assert (A.one_query_attention(q, k, v, 1.0) - F.softmax(q @ k.transpose(-2, -1), -1) @ v).abs().max() < 1e-6


def test_one_query_attention_rejects_several_queries():
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"one_query_attention takes one query per head, got q of shape \(1, 2, 3, 4\)"):
        A.one_query_attention(q, q, q, 0.5)
