"""Lesson 03, Your turn 1: ``causal_head(q, k, v)`` written out: scores, the tril mask, softmax, weighted sum."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from gpt_lesson import attention as A
from gpt_lesson.attention import causal_mask

from ._registry import Exercise

EX = Exercise("03.1 one causal head", "check_causal_attention", rules={"without": "sdpa"})
block_size = 8
tril = torch.tril(torch.ones(block_size, block_size))  # a learner's notebook-level buffer


@EX.right
def lesson(q, k, v):
    T, head_size = q.size(-2), q.size(-1)
    scores = q @ k.transpose(-2, -1) / head_size**0.5
    mask = torch.tril(torch.ones(T, T, device=q.device))
    scores = scores.masked_fill(mask == 0, float("-inf"))
    return F.softmax(scores, dim=-1) @ v


@EX.right
def sliced_buffer(q, k, v):
    B, T, C = q.shape
    big = torch.tril(torch.ones(16, 16))
    wei = q @ k.transpose(-2, -1) * C**-0.5
    wei = wei.masked_fill(big[:T, :T] == 0, float("-inf"))
    return F.softmax(wei, dim=-1) @ v


@EX.right
def triu_in_place(q, k, v):
    n = q.shape[1]
    mask = torch.triu(torch.ones(n, n), diagonal=1)
    s = q @ k.transpose(1, 2)
    s.masked_fill_(mask.bool(), -torch.inf)  # in place, on its own tensor
    return torch.softmax(s / k.shape[-1] ** 0.5, dim=-1) @ v


@EX.right
def einsum_where(q, k, v):
    T = q.shape[1]
    s = torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(q.shape[-1])
    s = torch.where(torch.ones(T, T, dtype=torch.bool).tril(), s, float("-inf"))
    return torch.einsum("bqk,bkd->bqd", s.softmax(-1), v)


@EX.right
def additive_mask(q, k, v):
    T = q.size(1)
    bias = torch.full((T, T), float("-inf")).triu(1)
    return F.softmax(q @ k.mT / math.sqrt(q.size(-1)) + bias, dim=-1) @ v


@EX.right
def large_negative_instead_of_inf(q, k, v):
    T = q.size(1)
    s = q @ k.mT / math.sqrt(q.size(-1))
    return F.softmax(s.masked_fill(torch.tril(torch.ones(T, T)) == 0, -1e9), dim=-1) @ v


@EX.right
def loop_over_queries(q, k, v):
    T, hs = q.shape[1], q.shape[2]
    rows = []
    for t in range(T):
        s = (q[:, t : t + 1] @ k[:, : t + 1].mT) / hs**0.5  # (B, 1, t+1): only the past
        rows.append(F.softmax(s, dim=-1) @ v[:, : t + 1])
    return torch.cat(rows, dim=1)


@EX.right
def float64_inside(q, k, v):
    q, k, v = q.double(), k.double(), v.double()
    T = q.size(1)
    s = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(),
                                                                        float("-inf"))
    return (s.softmax(-1) @ v).float()


@EX.right
def lesson_helpers(q, k, v):
    T = q.size(1)
    return A.attention_weights(A.apply_mask(A.attention_scores(q, k), causal_mask(T))) @ v


@EX.right
def scale_after_masking(q, k, v):
    T = q.size(1)
    s = (q @ k.mT).masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    return torch.softmax(s / math.sqrt(q.size(-1)), -1) @ v


@EX.right
def baddbmm(q, k, v):
    B, T, hs = q.shape
    bias = torch.zeros(B, T, T).masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
    return torch.baddbmm(bias, q, k.transpose(1, 2), alpha=hs**-0.5).softmax(-1).bmm(v)


# --- wrong answers
def head(mask_of_T=lambda T: torch.tril(torch.ones(T, T)), fill=float("-inf"), d=None, dim=-1, after=False):
    def fn(q, k, v):
        T = q.size(1)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1) if d is None else d)
        if not after:
            s = s.masked_fill(mask_of_T(T) == 0, fill)
        w = F.softmax(s, dim=dim)
        if after:
            w = w.masked_fill(mask_of_T(T) == 0, 0.0)
        return w @ v
    return fn


for name, fn, labels in [
    ("mask after the softmax", head(after=True), ("MASK_AFTER_SOFTMAX",)),
    ("mask with 0", head(fill=0.0), ("MASK_WITH_ZERO",)),
    ("no mask", head(mask_of_T=lambda T: torch.ones(T, T)), ("NO_MASK",)),
    ("triu", head(mask_of_T=lambda T: torch.triu(torch.ones(T, T))), ("MASK_WRONG_TRIANGLE",)),
    ("one ahead", head(mask_of_T=lambda T: torch.tril(torch.ones(T, T), diagonal=1)), ("MASK_ONE_OFF",)),
    ("one behind", head(mask_of_T=lambda T: torch.tril(torch.ones(T, T), diagonal=-1)), ("MASK_ONE_OFF",)),
    ("no scaling", head(d=1), ("NO_SCALING",)),
    ("divided by n_embd", head(d=64), ("SCALED_BY_N_EMBD",)),
    ("softmax over the queries", head(dim=-2), ("SOFTMAX_WRONG_DIM",)),
    ("fixed 8x8 mask", head(mask_of_T=lambda T: tril), ("RAISED",)),
]:
    EX.add((fn,), name=name, right=False, labels=labels, says=("tril[:T, :T]",) if "8x8" in name else ())


@EX.wrong("WEIGHTS_NOT_ON_V")
def weights_times_k(q, k, v):
    T = q.size(1)
    s = (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    return F.softmax(s, -1) @ k


@EX.wrong("MISSING_TRANSPOSE")
def no_transpose(q, k, v):
    T = q.size(1)
    s = (q @ k / math.sqrt(q.size(-1))).masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    return F.softmax(s, -1) @ v


@EX.wrong("KQ_TRANSPOSED")
def k_times_q(q, k, v):
    T = q.size(1)
    s = (k @ q.mT / math.sqrt(q.size(-1))).masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    return F.softmax(s, -1) @ v


@EX.wrong("RULE_BROKEN")
def uses_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@EX.wrong("CALLED_LIBRARY")
def library(q, k, v):
    return A.naive_attention(q, k, v, causal_mask(q.size(1)))[0]


@EX.wrong("INPUT_MODIFIED")
def scales_q_in_place(q, k, v):
    T = q.size(1)
    q.mul_(q.size(-1) ** -0.5)
    s = (q @ k.mT).masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    return F.softmax(s, -1) @ v


@EX.wrong("NOT_DETERMINISTIC")
def dropout_on_weights(q, k, v):
    T = q.size(1)
    s = (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    return F.dropout(F.softmax(s, -1), p=0.2) @ v


@EX.wrong("RAISED", says="`.T` on a 3-D tensor")
def three_d_T(q, k, v):
    T = q.size(1)
    s = (q @ k.T / math.sqrt(q.size(-1))).masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    return F.softmax(s, -1) @ v


@EX.wrong("RAISED", says="keepdim=True")
def own_softmax_without_keepdim(q, k, v):
    T = q.size(1)
    s = (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    e = (s - s.amax(-1)).exp()
    return e / e.sum(-1, keepdim=True) @ v


@EX.wrong("UNIFORM_WEIGHTS")
def plain_average_of_the_past(q, k, v):
    T = q.size(1)
    w = torch.tril(torch.ones(T, T))
    return (w / w.sum(-1, keepdim=True)) @ v


@EX.wrong("BOOL_MASK_INVERTED")
def hides_where_tril_is_one(q, k, v):
    T = q.size(1)
    s = (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(torch.tril(torch.ones(T, T)) == 1, float("-inf"))
    return F.softmax(s, -1) @ v


@EX.wrong("SCALED_BY_HEAD_SIZE")
def by_head_size(q, k, v):
    T = q.size(1)
    s = (q @ k.mT / q.size(-1)).masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
    return F.softmax(s, -1) @ v
