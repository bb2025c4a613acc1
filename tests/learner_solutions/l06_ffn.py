"""Lesson 06, Your turns 1 and 2: ``make_ffn(n_embd)`` and ``MyFeedForward`` with the tanh GELU written out."""
from __future__ import annotations

import math
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F

from gpt_lesson import model as M
from gpt_lesson.model import Block

from ._registry import Exercise

FFN = Exercise("06.1 build the FFN", "check_feed_forward")
TANH = Exercise("06.2 an FFN class with the tanh GELU written out", "check_feed_forward", kwargs={"gelu": "tanh"})
SQRT_2_PI = math.sqrt(2 / math.pi)


@FFN.right
def lesson(n_embd):
    return nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd), nn.Dropout(0.1))


@FFN.right
def no_dropout(n_embd):
    return nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))


@FFN.right
def ordered_dict(n):
    return nn.Sequential(OrderedDict(fc=nn.Linear(n, 4 * n), act=nn.GELU(), proj=nn.Linear(4 * n, n),
                                     drop=nn.Dropout(0.2)))


@FFN.right
def tanh_approximation(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.GELU(approximate="tanh"), nn.Linear(4 * n, n))


class NanoMLP(nn.Module):
    def __init__(self, n_embd, bias=False):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


FFN.right(NanoMLP)


class RawParameters(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.W1 = nn.Parameter(torch.randn(n, 4 * n) / n**0.5)
        self.b1 = nn.Parameter(torch.zeros(4 * n))
        self.W2 = nn.Parameter(torch.randn(4 * n, n) / (4 * n) ** 0.5)
        self.b2 = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        return F.gelu(x @ self.W1 + self.b1) @ self.W2 + self.b2


FFN.right(RawParameters)


class RowBiases(nn.Module):  # biases stored as (1, n) rows
    def __init__(self, n):
        super().__init__()
        self.W1 = nn.Parameter(torch.randn(n, 4 * n) * 0.3)
        self.b1 = nn.Parameter(torch.randn(1, 4 * n) * 0.1)
        self.W2 = nn.Parameter(torch.randn(4 * n, n) * 0.2)
        self.b2 = nn.Parameter(torch.randn(1, n) * 0.1)

    def forward(self, x):
        return F.gelu(x @ self.W1 + self.b1) @ self.W2 + self.b2


FFN.right(RowBiases)


@FFN.right
def float64_module(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.GELU(), nn.Linear(4 * n, n)).double()


@FFN.right
def bfloat16_module(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.GELU(), nn.Linear(4 * n, n)).to(torch.bfloat16)


class Conv1dFFN(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.up = nn.Conv1d(n, 4 * n, kernel_size=1)
        self.down = nn.Conv1d(4 * n, n, kernel_size=1)

    def forward(self, x):
        return self.down(F.gelu(self.up(x.transpose(1, 2)))).transpose(1, 2)


FFN.right(Conv1dFFN)


@FFN.right
def with_identity(n):
    return nn.Sequential(nn.Identity(), nn.Linear(n, 4 * n), nn.GELU(), nn.Linear(4 * n, n), nn.Identity())


# --- wrong answers
@FFN.wrong("NO_EXPANSION")
def no_expansion(n):
    return nn.Sequential(nn.Linear(n, n), nn.GELU(), nn.Linear(n, n))


@FFN.wrong("NO_EXPANSION")
def twice_not_four_times(n):
    return nn.Sequential(nn.Linear(n, 2 * n), nn.GELU(), nn.Linear(2 * n, n))


@FFN.wrong("NO_NONLINEARITY")
def no_activation(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.Linear(4 * n, n))


@FFN.wrong("RELU_NOT_GELU")
def relu(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.ReLU(), nn.Linear(4 * n, n))


@FFN.wrong("OTHER_ACTIVATION")
def silu(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.SiLU(), nn.Linear(4 * n, n))


@FFN.wrong("OTHER_ACTIVATION")
def mish(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.Mish(), nn.Linear(4 * n, n))


@FFN.wrong("PLAIN_TANH")
def tanh(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.Tanh(), nn.Linear(4 * n, n))


@FFN.wrong("ACTIVATION_AFTER_PROJECTION")
def gelu_last(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.Linear(4 * n, n), nn.GELU())


@FFN.wrong("ACTIVATION_BEFORE_FIRST_LINEAR")
def gelu_first(n):
    return nn.Sequential(nn.GELU(), nn.Linear(n, 4 * n), nn.Linear(4 * n, n))


@FFN.wrong("EXTRA_LAYER")
def three_layers(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.GELU(), nn.Linear(4 * n, 4 * n), nn.GELU(), nn.Linear(4 * n, n))


class WithResidual(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n, 4 * n), nn.GELU(), nn.Linear(4 * n, n))

    def forward(self, x):
        return x + self.net(x)


FFN.wrong("RESIDUAL_INSIDE_FFN")(WithResidual)


class AlwaysDropping(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc, self.proj = nn.Linear(n, 4 * n), nn.Linear(4 * n, n)

    def forward(self, x):
        return F.dropout(self.proj(F.gelu(self.fc(x))), 0.1)  # training=True unless told otherwise


FFN.wrong("NOT_DETERMINISTIC")(AlwaysDropping)


class WithLayerNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.ln = nn.LayerNorm(n)
        self.net = nn.Sequential(nn.Linear(n, 4 * n), nn.GELU(), nn.Linear(4 * n, n))

    def forward(self, x):
        return self.net(self.ln(x))


FFN.wrong("UNEXPECTED_PARAMETERS")(WithLayerNorm)


@FFN.wrong("RAISED", says="n_embd argument")
def fixed_size(n):
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))


@FFN.wrong("CALLED_LIBRARY")
def library(n):
    return M.FeedForward(n)


@FFN.wrong("CALLED_LIBRARY")
def borrowed_from_a_block(n):
    return Block(n, 1, 8).ffwd


@FFN.wrong("SOFTMAX_ACTIVATION")
def softmax_between(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.Softmax(dim=-1), nn.Linear(4 * n, n))


@FFN.wrong("ACTIVATION_TWICE")
def gelu_twice(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.GELU(), nn.GELU(), nn.Linear(4 * n, n))


@FFN.wrong("OTHER_ACTIVATION")
def sigmoid(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.Sigmoid(), nn.Linear(4 * n, n))


@FFN.wrong("NOT_POSITION_WISE")
def mixes_positions(n):
    class Mixer(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(n, 4 * n), nn.GELU(), nn.Linear(4 * n, n))

        def forward(self, x):
            return self.net(x.cumsum(dim=1))
    return Mixer()


@FFN.wrong("OTHER_ACTIVATION")
def leaky_relu(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.LeakyReLU(), nn.Linear(4 * n, n))


# --- Your turn 2: the tanh GELU written out
def tanh_class(formula, name):
    class TanhFFN(nn.Module):
        def __init__(self, n_embd):
            super().__init__()
            self.fc = nn.Linear(n_embd, 4 * n_embd)
            self.proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.proj(formula(self.fc(x)))
    TanhFFN.__name__ = TanhFFN.__qualname__ = name
    return TanhFFN


for name, formula in [
    ("lesson", lambda h: 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))),
    ("pow", lambda h: 0.5 * h * (1.0 + torch.tanh(SQRT_2_PI * (h + 0.044715 * torch.pow(h, 3))))),
    ("tensor constant", lambda h: 0.5 * h * (1 + torch.tanh(torch.sqrt(torch.tensor(2 / torch.pi))
                                                            * (h + 0.044715 * h * h * h)))),
    ("decimal constant", lambda h: h * 0.5 * (1 + torch.tanh(0.7978845608028654 * (h + 0.044715 * h**3)))),
    ("method calls", lambda h: h.mul(0.5).mul(1 + (SQRT_2_PI * (h + 0.044715 * h.pow(3))).tanh())),
    ("float64 inside", lambda h: (0.5 * h.double() * (1 + torch.tanh(SQRT_2_PI * (h.double() + 0.044715
                                                                                   * h.double() ** 3)))).float()),
]:
    TANH.right(tanh_class(formula, name.replace(" ", "_")))


class InPlaceGate(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        h = self.fc(x)
        gate = torch.tanh(SQRT_2_PI * (h + 0.044715 * h**3))
        gate.add_(1).mul_(0.5)
        return self.proj(h * gate)


TANH.right(InPlaceGate)


class GeluModule(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(SQRT_2_PI * (x + 0.044715 * x**3)))


class WithGeluModule(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), GeluModule(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        return self.net(x)


TANH.right(WithGeluModule)


class FunctionalLinears(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(4 * n_embd, n_embd) * 0.2)
        self.w2 = nn.Parameter(torch.randn(n_embd, 4 * n_embd) * 0.1)

    def forward(self, x):
        h = F.linear(x, self.w1)
        return F.linear(0.5 * h * (1 + torch.tanh(SQRT_2_PI * (h + 0.044715 * h**3))), self.w2)


TANH.right(FunctionalLinears)


WRONG_FORMULAS = {  # name: (activation, the diagnoses the check may give)
    "f_gelu_tanh": (lambda h: F.gelu(h, approximate="tanh"), ("RULE_BROKEN",)),
    "nn_gelu_tanh": (nn.GELU(approximate="tanh"), ("RULE_BROKEN",)),
    "exact_gelu": (nn.GELU(), ("EXACT_NOT_TANH",)),
    "coefficient_ten_times": (lambda h: 0.5 * h * (1 + torch.tanh(SQRT_2_PI * (h + 0.44715 * h**3))),
                              ("GELU_COEFFICIENT",)),
    "sqrt_pi_over_2": (lambda h: 0.5 * h * (1 + torch.tanh(math.sqrt(math.pi / 2) * (h + 0.044715 * h**3))),
                       ("GELU_SQRT_CONSTANT",)),
    "no_half": (lambda h: h * (1 + torch.tanh(SQRT_2_PI * (h + 0.044715 * h**3))), ("GELU_MISSING_HALF",)),
    "no_h": (lambda h: 0.5 * (1 + torch.tanh(SQRT_2_PI * (h + 0.044715 * h**3))), ("GELU_MISSING_H",)),
    "no_cubic": (lambda h: 0.5 * h * (1 + torch.tanh(SQRT_2_PI * h)), ("GELU_MISSING_CUBIC",)),
    "plain_tanh": (torch.tanh, ("PLAIN_TANH",)),
    "sigmoid_approximation": (lambda h: h * torch.sigmoid(1.702 * h), ("GELU_SIGMOID_APPROXIMATION",)),
    "square_not_cube": (lambda h: 0.5 * h * (1 + torch.tanh(SQRT_2_PI * (h + 0.044715 * h**2))),
                        ("GELU_CUBIC_TERM",)),
    "cube_of_the_sum": (lambda h: 0.5 * h * (1 + torch.tanh(SQRT_2_PI * (h + 0.044715 * h) ** 3)),
                        ("GELU_CUBIC_TERM",)),
    "relu": (torch.relu, ("RELU_NOT_GELU",)),
    "minus_one": (lambda h: 0.5 * h * (1 - torch.tanh(SQRT_2_PI * (h + 0.044715 * h**3))), ("GELU_SIGN",)),
}
for name, (formula, labels) in WRONG_FORMULAS.items():
    TANH.add((tanh_class(formula, name),), name=name, right=False, labels=labels)


class ForgotSuperInit(nn.Module):
    def __init__(self, n_embd):
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        h = self.fc(x)
        return self.proj(0.5 * h * (1 + torch.tanh(SQRT_2_PI * (h + 0.044715 * h**3))))


TANH.wrong("RAISED", says="super().__init__()")(ForgotSuperInit)


class LayersMadeInForward(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.n_embd = n_embd

    def forward(self, x):
        fc, proj = nn.Linear(self.n_embd, 4 * self.n_embd), nn.Linear(4 * self.n_embd, self.n_embd)
        h = fc(x)
        return proj(0.5 * h * (1 + torch.tanh(SQRT_2_PI * (h + 0.044715 * h**3))))


TANH.wrong("NOT_DETERMINISTIC", "MISSING_LAYER")(LayersMadeInForward)


class NoForward(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forwad(self, x):  # a typo: nn.Module never calls it
        return self.proj(self.fc(x))


TANH.wrong("RAISED", says="forward(self, x)")(NoForward)


class TanhOnOutput(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        y = self.proj(self.fc(x))
        return 0.5 * y * (1 + torch.tanh(SQRT_2_PI * (y + 0.044715 * y**3)))


TANH.wrong("ACTIVATION_AFTER_PROJECTION")(TanhOnOutput)
