"""Lesson 02, Your turn 1: ``my_scores(q, k)``, the scaled scores (B, T, T)."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from gpt_lesson import attention as A
from gpt_lesson.attention import causal_mask

from ._registry import Exercise

EX = Exercise("02.1 scaled scores", "check_attention_scores")
n_embd, n_head = 64, 4  # the lesson's model sizes, in the notebook's namespace


@EX.right
def lesson(q, k):
    head_size = q.size(-1)
    return q @ k.transpose(-2, -1) / head_size**0.5


@EX.right
def m_transpose(q, k):
    return q @ k.mT / math.sqrt(k.shape[-1])


@EX.right
def permute(q, k):
    return torch.matmul(q, k.permute(0, 2, 1)) * q.shape[2] ** -0.5


@EX.right
def bmm(q, k):
    return torch.bmm(q, k.transpose(1, 2)).div(math.sqrt(q.size(-1)))


@EX.right
def einsum(q, k):
    return torch.einsum("btd,bsd->bts", q, k) / torch.tensor(q.shape[-1]).sqrt()


@EX.right
def scale_q_first(q, k):
    return (q / math.sqrt(q.size(-1))) @ k.transpose(-1, -2)


@EX.right
def broadcast_product(q, k):
    return (q.unsqueeze(2) * k.unsqueeze(1)).sum(-1) / math.sqrt(q.size(-1))


@EX.right
def per_batch_loop(q, k):
    hs = q.shape[-1]
    return torch.stack([q[b] @ k[b].T for b in range(q.shape[0])]) / hs**0.5


@EX.right
def numpy_float64(q, k):
    out = np.matmul(q.numpy().astype(np.float64), np.swapaxes(k.numpy(), 1, 2).astype(np.float64))
    return torch.from_numpy(out / np.sqrt(q.shape[-1]))


@EX.right
def rsqrt_tensor(q, k):
    return q @ k.transpose(-2, -1) * torch.rsqrt(torch.tensor(float(q.size(-1))))


# --- wrong answers
@EX.wrong("NO_SCALING")
def no_scaling(q, k):
    return q @ k.transpose(-2, -1)


@EX.wrong("SCALED_BY_HEAD_SIZE")
def by_head_size(q, k):
    return q @ k.transpose(-2, -1) / q.size(-1)


@EX.wrong("SCALED_BY_N_EMBD")
def by_n_embd(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(n_embd)


@EX.wrong("WRONG_SCALING")
def by_length(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(1))


@EX.wrong("MISSING_TRANSPOSE")
def no_transpose(q, k):
    return q @ k / math.sqrt(q.size(-1))


@EX.wrong("KQ_TRANSPOSED")
def k_times_q(q, k):
    return k @ q.transpose(-2, -1) / math.sqrt(q.size(-1))


@EX.wrong("RAISED", says="`.T` on a 3-D tensor")
def three_d_T(q, k):
    return q @ k.T / math.sqrt(q.size(-1))


@EX.wrong("WRONG_SCALING")
def multiplied(q, k):
    return q @ k.transpose(-2, -1) * math.sqrt(q.size(-1))


@EX.wrong("SOFTMAX_IN_SCORES")
def softmax_too(q, k):
    return F.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)


@EX.wrong("CALLED_LIBRARY")
def library(q, k):
    return A.attention_scores(q, k)


@EX.wrong("CALLED_LIBRARY")
def via_naive_attention(q, k):
    return A.naive_attention(q, k, k)[1]


@EX.wrong("FLOOR_DIVISION")
def floor_division(q, k):
    return (q @ k.transpose(-2, -1)) // math.sqrt(q.size(-1))


@EX.wrong("INPUT_MODIFIED")
def scales_q_in_place(q, k):
    q /= math.sqrt(q.size(-1))
    return q @ k.transpose(-2, -1)


@EX.wrong("NOT_DETERMINISTIC")
def dropout_on_scores(q, k):
    return F.dropout(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), p=0.1)


@EX.wrong("SCORES_MASKED")
def masked_already(q, k):
    T = q.size(1)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return s.masked_fill(causal_mask(T) == 0, float("-inf"))


@EX.wrong("WRONG_TYPE")
def returns_a_tuple(q, k):
    s = q @ k.transpose(-2, -1)
    return s / math.sqrt(q.size(-1)), s


@EX.wrong("PRECEDENCE")
def power_precedence(q, k):
    return q @ k.transpose(-2, -1) / q.size(-1) ** 1 / 2


@EX.wrong("WRONG_SCALING")
def by_batch_size(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(0))


@EX.wrong("DIMS_PERMUTED", "KQ_TRANSPOSED")
def transposed_result(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).transpose(-2, -1)


@EX.wrong("SCALED_BY_N_EMBD")
def fixed_head_size(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(n_embd // n_head)
