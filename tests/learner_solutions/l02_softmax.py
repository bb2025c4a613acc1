"""Lesson 02, Your turn 2: ``my_weights(scores)``: masked scores (B, T, T) -> rows that sum to 1."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from gpt_lesson import attention as A

from ._registry import Exercise

EX = Exercise("02.2 softmax weights", "check_softmax_weights")


@EX.right
def lesson(scores):
    return F.softmax(scores, dim=-1)


@EX.right
def torch_softmax(scores):
    return torch.softmax(scores, -1)


@EX.right
def method(scores):
    return scores.softmax(dim=2)


EX.right(nn.Softmax(dim=-1))


@EX.right
def special(scores):
    return torch.special.softmax(scores, dim=-1)


@EX.right
def exp_of_log_softmax(scores):
    return F.log_softmax(scores, dim=-1).exp()


@EX.right
def by_hand_stable(scores):
    e = (scores - scores.max(dim=-1, keepdim=True).values).exp()
    return e / e.sum(dim=-1, keepdim=True)


@EX.right
def logsumexp(scores):
    return torch.exp(scores - scores.logsumexp(-1, keepdim=True))


@EX.right
def float64_then_back(scores):
    return F.softmax(scores.double(), dim=-1).float()


@EX.right
def index_none(scores):
    e = torch.exp(scores - scores.amax(-1)[..., None])
    return e / e.sum(-1)[..., None]


# --- wrong answers
@EX.wrong("SOFTMAX_WRONG_DIM")
def over_queries(scores):
    return F.softmax(scores, dim=-2)


@EX.wrong("SOFTMAX_WRONG_DIM")
def over_the_batch(scores):
    return torch.softmax(scores, dim=0)


@EX.wrong("SOFTMAX_WRONG_DIM")
def no_dim(scores):
    return F.softmax(scores)  # the implicit dim is 0 for a 3-D input


@EX.wrong("SOFTMAX_OVERFLOW")
def naive_exp(scores):
    return torch.exp(scores) / torch.exp(scores).sum(dim=-1, keepdim=True)


@EX.wrong("LOG_SOFTMAX")
def log_probs(scores):
    return F.log_softmax(scores, dim=-1)


@EX.wrong("NOT_NORMALISED")
def not_normalised(scores):
    return (scores - scores.amax(-1, keepdim=True)).exp()


@EX.wrong("SUM_OF_WHOLE")
def divides_by_the_total(scores):
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    return e / e.sum()


@EX.wrong("SIGMOID_NOT_SOFTMAX")
def sigmoid(scores):
    return torch.sigmoid(scores)


@EX.wrong("NEG_INF_AS_ZERO")
def inf_replaced_by_zero(scores):
    return F.softmax(torch.nan_to_num(scores, neginf=0.0), dim=-1)


@EX.wrong("CALLED_LIBRARY")
def library(scores):
    return A.attention_weights(scores)


@EX.wrong("NOT_DETERMINISTIC")
def dropout_on_weights(scores):
    return F.dropout(F.softmax(scores, dim=-1), p=0.1)


@EX.wrong("INPUT_MODIFIED")
def exp_in_place(scores):
    scores -= scores.amax(dim=-1, keepdim=True)
    scores.exp_()
    return scores / scores.sum(dim=-1, keepdim=True)


@EX.wrong("SUM_WRONG_DIM")
def sum_over_queries(scores):
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    return e / e.sum(dim=-2, keepdim=True)


@EX.wrong("GLOBAL_MAX")
def global_max(scores):
    e = (scores - scores.max()).exp()
    return e / e.sum(-1, keepdim=True)


@EX.wrong("RAISED", says="keepdim=True")
def forgot_keepdim(scores):
    e = (scores - scores.amax(dim=-1)).exp()
    return e / e.sum(dim=-1)


@EX.wrong("TEMPERATURE")
def halved_scores(scores):
    return F.softmax(scores / 2, dim=-1)


@EX.wrong("WRONG_TYPE")
def returns_numpy(scores):
    return F.softmax(scores, dim=-1).numpy()


# Attacks on the checker (issue 28): the answer replaces torch so that the reference agrees with it. The check
# sees torch change while it ran, puts it back and names it (gpt_lesson.checks.runner.torch_replacements).
@EX.wrong("TAMPERED", says="torch.nn.functional.softmax")
def replaces_f_softmax(scores):
    F.softmax = lambda x, dim=None, **kwargs: x
    return scores


@EX.wrong("TAMPERED", says="torch.softmax")
def replaces_torch_softmax(scores):
    torch.softmax = lambda x, dim=None, **kwargs: x
    return scores


@EX.wrong("TAMPERED", says="torch.Tensor.softmax")
def replaces_tensor_softmax(scores):
    torch.Tensor.softmax = lambda self, dim=None, **kwargs: self
    return scores


class _AgreeWithEverything:
    def __getattr__(self, name):
        return lambda *args, **kwargs: True


@EX.wrong("TAMPERED", says="torch._C._VariableFunctions")
def replaces_variable_functions(scores):
    torch._C._VariableFunctions = _AgreeWithEverything()
    return scores
