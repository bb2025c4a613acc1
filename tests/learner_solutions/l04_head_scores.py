"""Lesson 04, Your turn 1: ``head_scores(q, k)`` for a head of any size (the check varies head_size)."""
from __future__ import annotations

import math

import torch

from ._registry import Exercise

EX = Exercise("04.1 scores for a head of any size", "check_attention_scores")
n_embd, n_head = 64, 4
head_size = n_embd // n_head  # 16: the lesson's model, in the notebook's namespace


@EX.right
def lesson(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


@EX.right
def d_k_from_k(q, k):
    d_k = k.size(-1)
    return (q @ k.transpose(1, 2)) * (1.0 / math.sqrt(d_k))


@EX.right
def pow_minus_half(q, k):
    scale = q.size(-1) ** -0.5
    return torch.matmul(q * scale, k.transpose(-2, -1))


@EX.right
def shape_unpacking(q, k):
    B, T, hs = q.shape
    return q @ k.reshape(B, T, hs).transpose(1, 2) / hs**0.5


@EX.right
def sqrt_of_a_tensor(q, k):
    return q.matmul(k.mT) / torch.sqrt(torch.tensor(q.shape[-1], dtype=q.dtype))


@EX.right
def einsum_scaled_inside(q, k):
    return torch.einsum("bid,bjd->bij", q / q.shape[-1] ** 0.25, k / k.shape[-1] ** 0.25)


@EX.right
def float64(q, k):
    return (q.double() @ k.double().mT) / math.sqrt(q.size(-1))


@EX.right
def numel_over_rows(q, k):
    hs = q[0, 0].numel()
    return q @ k.mT / math.sqrt(hs)


# --- wrong answers
@EX.wrong("SCALED_BY_N_EMBD")
def the_lessons_head_size(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(head_size)


@EX.wrong("SCALED_BY_N_EMBD")
def sqrt_n_embd(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(n_embd)


@EX.wrong("SCALED_BY_N_EMBD")
def divide_by_four(q, k):
    return q @ k.transpose(-2, -1) / 4  # sqrt(16), typed as a number


@EX.wrong("NO_SCALING")
def forgot_scaling(q, k):
    return torch.einsum("btd,bsd->bts", q, k)


@EX.wrong("SCALED_BY_HEAD_SIZE")
def divides_by_d_k(q, k):
    return q @ k.transpose(-2, -1) / k.size(-1)


@EX.wrong("WRONG_SCALING")
def size_1_is_not_the_head(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(1))


@EX.wrong("PRECEDENCE")
def precedence(q, k):
    return q @ k.transpose(-2, -1) / q.size(-1) ** 1 / 2


@EX.wrong("MISSING_TRANSPOSE")
def transposed_q(q, k):
    return q.transpose(-2, -1) @ k / math.sqrt(q.size(-1))


@EX.wrong("KQ_TRANSPOSED", "DIMS_PERMUTED")
def keys_first(q, k):
    return k @ q.transpose(-2, -1) / math.sqrt(q.size(-1))


@EX.wrong("WRONG_SCALING")
def times_root(q, k):
    return q @ k.transpose(-2, -1) * math.sqrt(q.size(-1))


@EX.wrong("INPUT_MODIFIED")
def divides_k_in_place(q, k):
    k.div_(math.sqrt(k.size(-1)))
    return q @ k.transpose(-2, -1)


@EX.wrong("WRONG_SCALING")
def log_instead_of_sqrt(q, k):
    return q @ k.transpose(-2, -1) / math.log(q.size(-1))


@EX.wrong("RAISED", says="`.T` on a 3-D tensor")
def dot_T(q, k):
    return torch.matmul(q, k.T) / math.sqrt(q.shape[-1])
