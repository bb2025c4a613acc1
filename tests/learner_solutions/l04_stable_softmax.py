"""Lesson 04, Your turn 2: ``stable_softmax(scores)`` without F.softmax or torch.softmax."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._registry import Exercise

EX = Exercise("04.2 a softmax that does not overflow", "check_softmax_weights", rules={"without": "softmax"})


@EX.right
def lesson(scores):
    shifted = scores - scores.amax(dim=-1, keepdim=True)
    e = torch.exp(shifted)
    return e / e.sum(dim=-1, keepdim=True)


@EX.right
def max_values(scores):
    m, _ = scores.max(dim=-1, keepdim=True)
    e = (scores - m).exp()
    return e / e.sum(-1, keepdim=True)


@EX.right
def logsumexp(scores):
    return torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))


@EX.right
def float64(scores):
    s = scores.double()
    e = (s - s.amax(-1, keepdim=True)).exp()
    return (e / e.sum(-1, keepdim=True)).float()


@EX.right
def method_chain(scores):
    e = scores.sub(scores.amax(-1, keepdim=True)).exp()
    return e.div(e.sum(-1, keepdim=True))


@EX.right
def row_by_row(scores):
    out = torch.empty_like(scores)
    for b in range(scores.shape[0]):
        for t in range(scores.shape[1]):
            row = scores[b, t]
            e = torch.exp(row - row.max())
            out[b, t] = e / e.sum()
    return out


@EX.right
def torch_functions(scores):
    e = torch.exp(torch.sub(scores, torch.amax(scores, -1, keepdim=True)))
    return torch.div(e, torch.sum(e, -1, keepdim=True))


@EX.right
def unsqueeze_instead_of_keepdim(scores):
    e = torch.exp(scores - scores.amax(-1).unsqueeze(-1))
    return e / e.sum(-1).unsqueeze(-1)


@EX.right
def clone_then_in_place(scores):
    s = scores.clone()
    s -= s.amax(-1, keepdim=True)
    s.exp_()
    return s / s.sum(-1, keepdim=True)


# --- wrong answers
@EX.wrong("RULE_BROKEN")
def f_softmax(scores):
    return F.softmax(scores, dim=-1)


@EX.wrong("RULE_BROKEN")
def torch_softmax(scores):
    return torch.softmax(scores, dim=-1)


@EX.wrong("RULE_BROKEN")
def tensor_method(scores):
    return scores.softmax(-1)


@EX.wrong("RULE_BROKEN")
def softmax_module(scores):
    return nn.Softmax(dim=-1)(scores)


@EX.wrong("RULE_BROKEN")
def exp_of_log_softmax(scores):
    return F.log_softmax(scores, dim=-1).exp()


@EX.wrong("RULE_BROKEN")
def special_softmax(scores):
    return torch.special.softmax(scores, -1)


@EX.wrong("SOFTMAX_OVERFLOW")
def no_shift(scores):
    return scores.exp() / scores.exp().sum(-1, keepdim=True)


@EX.wrong("GLOBAL_MAX")
def one_max_for_everything(scores):
    e = torch.exp(scores - scores.max())
    return e / e.sum(-1, keepdim=True)


@EX.wrong("MAX_WRONG_DIM")
def max_over_queries(scores):
    e = torch.exp(scores - scores.amax(dim=-2, keepdim=True))
    return e / e.sum(-1, keepdim=True)


@EX.wrong("RAISED", says="keepdim=True")
def max_without_keepdim(scores):
    e = torch.exp(scores - scores.amax(dim=-1))
    return e / e.sum(dim=-1, keepdim=True)


@EX.wrong("RAISED", says="keepdim=True")
def sum_without_keepdim(scores):
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1)


@EX.wrong("RAISED", says=".values")
def max_returns_a_pair(scores):
    e = torch.exp(scores - scores.max(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


@EX.wrong("MIN_NOT_MAX")
def subtracts_the_min(scores):
    finite = scores.masked_fill(torch.isinf(scores), float("inf"))
    e = torch.exp(scores - finite.amin(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


@EX.wrong("INPUT_MODIFIED")
def in_place_on_the_input(scores):
    scores -= scores.amax(-1, keepdim=True)
    scores.exp_()
    return scores / scores.sum(-1, keepdim=True)


@EX.wrong("NOT_NORMALISED")
def no_division(scores):
    return torch.exp(scores - scores.amax(-1, keepdim=True))


@EX.wrong("SUM_WRONG_DIM")
def sum_over_queries(scores):
    e = torch.exp(scores - scores.amax(-1, keepdim=True))
    return e / e.sum(-2, keepdim=True)


@EX.wrong("SOFTMAX_WRONG_DIM")
def everything_over_dim_minus_two(scores):
    e = torch.exp(scores - scores.amax(-2, keepdim=True))
    return e / e.sum(-2, keepdim=True)


@EX.wrong("LOG_SOFTMAX")
def log_probabilities(scores):
    return scores - torch.logsumexp(scores, -1, keepdim=True)
