"""Lesson 07, Your turn 1: ``my_layer_norm(x, weight, bias, eps=1e-5)`` with tensor operations."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._registry import Exercise

EX = Exercise("07.1 LayerNorm by hand", "check_layer_norm")


@EX.right
def lesson(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return weight * (x - mean) / torch.sqrt(var + eps) + bias


@EX.right
def rsqrt_correction(x, weight, bias, eps=1e-5):
    xc = x - x.mean(-1, keepdim=True)
    return xc * torch.rsqrt(x.var(-1, keepdim=True, correction=0) + eps) * weight + bias


@EX.right
def mean_of_squares(x, weight, bias, eps=1e-5):
    xc = x - x.mean(-1, keepdim=True)
    return torch.addcmul(bias, xc / (xc.pow(2).mean(-1, keepdim=True) + eps).sqrt(), weight)


@EX.right
def var_mean(x, weight, bias, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return (x - mean) / (var + eps) ** 0.5 * weight + bias


@EX.right
def float64(x, weight, bias, eps=1e-5):
    xd = x.double()
    y = (xd - xd.mean(-1, keepdim=True)) / (xd.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
    return (y * weight.double() + bias.double()).float()


@EX.right
def std_squared(x, weight, bias, eps=1e-5):
    std = x.std(dim=-1, keepdim=True, unbiased=False)
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(std**2 + eps) * weight + bias


@EX.right
def row_loop(x, weight, bias, eps=1e-5):
    out = torch.empty_like(x)
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            row = x[b, t]
            m = row.sum() / row.numel()
            v = ((row - m) ** 2).sum() / row.numel()
            out[b, t] = (row - m) / (v + eps).sqrt() * weight + bias
    return out


@EX.right
def method_chain(x, weight, bias, eps=1e-5):
    centred = x.sub(x.mean(-1, keepdim=True))
    return centred.div(centred.square().mean(-1, keepdim=True).add(eps).sqrt()).mul(weight).add(bias)


@EX.right
def clone_first(x, weight, bias, eps=1e-5):
    y = x.clone()
    y -= y.mean(-1, keepdim=True)
    y /= torch.sqrt(y.pow(2).mean(-1, keepdim=True) + eps)
    return y * weight + bias


# --- wrong answers
def ln(**bugs):
    def fn(x, weight, bias, eps=1e-5):
        dim = bugs.get("dim", -1)
        xc = x if bugs.get("no_mean") else x - x.mean(dim, keepdim=True)
        var = x.var(dim, keepdim=True, unbiased=bool(bugs.get("unbiased")))
        e = 0.0 if bugs.get("no_eps") else (1e-5 if bugs.get("fixed_eps") else eps)
        y = xc / (var.sqrt() + e) if bugs.get("eps_outside") else xc / (var + e).sqrt()
        if bugs.get("swap"):
            return y * bias + weight
        return y * (1 if bugs.get("no_gain") else weight) + (0 if bugs.get("no_bias") else bias)
    return fn


for name, bugs, label in [
    ("unbiased variance", {"unbiased": True}, "UNBIASED_VARIANCE"),
    ("eps outside the root", {"eps_outside": True}, "EPS_OUTSIDE_SQRT"),
    ("no eps", {"no_eps": True}, "EPS_MISSING"),
    ("eps argument ignored", {"fixed_eps": True}, "EPS_IGNORED"),
    ("over dim 1", {"dim": 1}, "LN_WRONG_DIM"),
    ("no mean subtraction", {"no_mean": True}, "NO_MEAN_SUBTRACTION"),
    ("no gain", {"no_gain": True}, "NO_GAIN"),
    ("no bias", {"no_bias": True}, "NO_BIAS"),
    ("gain and bias swapped", {"swap": True}, "GAIN_BIAS_SWAPPED"),
    ("unbiased and eps outside", {"unbiased": True, "eps_outside": True}, "UNBIASED_VARIANCE"),
]:
    EX.add((ln(**bugs),), name=name, right=False, labels=(label,))


@EX.wrong("CALLED_LIBRARY")
def f_layer_norm(x, weight, bias, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


@EX.wrong("CALLED_LIBRARY")
def layer_norm_module(x, weight, bias, eps=1e-5):
    ln_ = nn.LayerNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        ln_.weight.copy_(weight)
        ln_.bias.copy_(bias)
    return ln_(x)


@EX.wrong("CALLED_LIBRARY")
def group_norm_in_disguise(x, weight, bias, eps=1e-5):
    B, T, C = x.shape
    y = F.group_norm(x.reshape(B * T, C, 1), 1, eps=eps).reshape(B, T, C)
    return y * weight + bias


@EX.wrong("CALLED_LIBRARY")
def batch_norm_in_disguise(x, weight, bias, eps=1e-5):
    B, T, C = x.shape
    rows = x.reshape(B * T, C).T  # each position becomes a "channel", normalised over its C entries
    y = F.batch_norm(rows, None, None, training=True, eps=eps).T.reshape(B, T, C)
    return y * weight + bias


@EX.wrong("RAISED", says="keepdim=True")
def mean_without_keepdim(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1)
    var = x.var(dim=-1, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


@EX.wrong("STD_NOT_VAR")
def root_of_the_std(x, weight, bias, eps=1e-5):
    xc = x - x.mean(-1, keepdim=True)
    return xc / torch.sqrt(x.std(-1, keepdim=True, unbiased=False) + eps) * weight + bias


@EX.wrong("LN_WRONG_DIM")
def statistics_of_the_whole_tensor(x, weight, bias, eps=1e-5):
    return (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps) * weight + bias


@EX.wrong("INPUT_MODIFIED")
def centres_the_input_in_place(x, weight, bias, eps=1e-5):
    x -= x.mean(-1, keepdim=True)
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight + bias


@EX.wrong("RAISED", says="eps")
def no_eps_parameter(x, weight, bias):
    xc = x - x.mean(-1, keepdim=True)
    return xc / torch.sqrt(xc.pow(2).mean(-1, keepdim=True) + 1e-5) * weight + bias


@EX.wrong("RMS_NOT_LAYER_NORM", "NO_MEAN_SUBTRACTION")
def rms_norm(x, weight, bias, eps=1e-5):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight + bias


@EX.wrong("LN_WRONG_DIM")
def over_positions(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=1, keepdim=True)
    var = x.var(dim=1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias
