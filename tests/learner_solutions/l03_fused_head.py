"""Lesson 03, Your turn 2: ``fused_causal_head(q, k, v)`` with one call to F.scaled_dot_product_attention."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from gpt_lesson import attention as A

from ._registry import Exercise

EX = Exercise("03.2 the same head with PyTorch's fused kernel", "check_causal_attention", rules={"using": "sdpa"})
tril = torch.tril(torch.ones(8, 8))


@EX.right
def is_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@EX.right
def bool_mask(q, k, v):
    T = q.size(-2)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tril(torch.ones(T, T, dtype=torch.bool)))


@EX.right
def additive_inf_mask(q, k, v):
    T = q.size(1)
    bias = torch.zeros(T, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


@EX.right
def explicit_scale(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(q.size(-1)))


@EX.right
def with_dropout_zero(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)


@EX.right
def four_d_heads(q, k, v):
    out = F.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), is_causal=True)
    return out.squeeze(1)


@EX.right
def float64_inputs(q, k, v):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True).float()


@EX.right
def sliced_bool_buffer(q, k, v):
    T = q.size(1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=tril[:T, :T].bool()) if T <= 8 else \
        F.scaled_dot_product_attention(q, k, v, is_causal=True)


# --- wrong answers
@EX.wrong("NO_MASK")
def no_mask(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


@EX.wrong("FLOAT_MASK_ADDED")
def float_tril(q, k, v):
    T = q.size(1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tril(torch.ones(T, T)))


@EX.wrong("BOOL_MASK_INVERTED")
def inverted_bool_mask(q, k, v):
    T = q.size(1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tril(torch.ones(T, T)) == 0)


@EX.wrong("RAISED", says="not both")
def mask_and_is_causal(q, k, v):
    T = q.size(1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(T, T).tril().bool(), is_causal=True)


@EX.wrong("RULE_NOT_USED")
def written_out(q, k, v):
    T = q.size(1)
    s = (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    return F.softmax(s, -1) @ v


@EX.wrong("NOT_DETERMINISTIC")
def dropout_on(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True)


@EX.wrong("NO_SCALING")
def scale_one(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)


@EX.wrong("SCALED_BY_HEAD_SIZE")
def scale_head_size(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / q.size(-1))


@EX.wrong("KQ_TRANSPOSED")
def k_and_q_swapped(q, k, v):
    return F.scaled_dot_product_attention(k, q, v, is_causal=True)


@EX.wrong("SDPA_ARGS_ORDER")
def v_and_k_swapped(q, k, v):
    return F.scaled_dot_product_attention(q, v, k, is_causal=True)


@EX.wrong("RAISED", says="tril[:T, :T]")
def fixed_size_mask(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=tril.bool())


@EX.wrong("WRONG_TYPE")
def returns_a_tuple(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True), None


@EX.wrong("CALLED_LIBRARY")
def library_wrapper(q, k, v):
    return A.sdpa_attention(q, k, v, is_causal=True)


@EX.wrong("DIMS_PERMUTED")
def transposed_output(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)


@EX.wrong("WRONG_SCALING")
def scale_by_length(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=q.size(1) ** -0.5)
