"""Checks for lesson 06: the position-wise feed-forward network (FFN).

The check finds the learner's two weight matrices (and biases), copies them into the library's
:class:`gpt_lesson.model.FeedForward` and compares the outputs, so every wrong formula shows: an
activation in the wrong place or of the wrong kind, a wrong constant in the tanh GELU, an extra
layer, a residual inside the FFN. Any layout of the weights passes: ``nn.Sequential`` as in the
lesson, nanoGPT's ``MLP`` (``c_fc``/``c_proj``), raw ``nn.Parameter`` matrices used with ``@`` or
einsum.

ReLU fails: it makes a working FFN (the 2017 Transformer used it), but the lesson's FFN, like
GPT-2's, uses GELU, and the message says so.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import model, reference
from ..i18n import _
from .runner import (
    Forbidden,
    Step,
    call,
    close,
    exercise_rules,
    expected_got,
    first_differing_step,
    kind_of,
    learner_check,
    randn,
    require_callable,
    screen,
    seeded,
    tensor_kind_problem,
)
from .verdicts import (
    MESSAGES,
    N_,
    NON_FINITE,
    NOT_DETERMINISTIC,
    RULE_BROKEN,
    STEP_DIFFERS,
    WRONG_SHAPE,
    WRONG_TYPE,
    WRONG_VALUES,
    Bug,
    CheckResult,
    Verdict,
    say,
)

# Bound at import: a later assignment to gpt_lesson.model does not change the reference or what is refused.
_FeedForward, _SourceFeedForward = model.FeedForward, reference.FeedForward

# Labels: stable identifiers in CheckResult.diagnosis.
NO_EXPANSION = N_("no 4x expansion")
NO_NONLINEARITY = N_("no non-linearity")
NOT_POSITION_WISE = N_("mixes positions")
EXTRA_LAYER = N_("an extra hidden layer")
MISSING_LAYER = N_("a Linear layer missing")
UNEXPECTED_PARAMETERS = N_("parameters an FFN does not have")
RELU_NOT_GELU = N_("ReLU instead of GELU")
OTHER_ACTIVATION = N_("another activation than GELU")
SOFTMAX_ACTIVATION = N_("softmax as the activation")
ACTIVATION_AFTER_PROJECTION = N_("activation after the output projection")
ACTIVATION_BEFORE_FIRST_LINEAR = N_("activation before the first Linear")
RESIDUAL_INSIDE_FFN = N_("residual inside the FFN")
GELU_COEFFICIENT = N_("tanh GELU: wrong cubic coefficient")
GELU_SQRT_CONSTANT = N_("tanh GELU: wrong constant for sqrt(2/pi)")
GELU_MISSING_HALF = N_("tanh GELU without the 0.5")
GELU_MISSING_H = N_("tanh GELU without the factor h")
GELU_MISSING_CUBIC = N_("tanh GELU without the cubic term")
PLAIN_TANH = N_("plain tanh instead of GELU")
EXACT_NOT_TANH = N_("nn.GELU() where the tanh formula was asked")
TANH_NOT_EXACT = N_("tanh GELU where nn.GELU() was asked")
INSTANCE_NOT_FACTORY = N_("an instance instead of the class")
ACTIVATION_TWICE = N_("activation applied twice")
GELU_SIGMOID_APPROXIMATION = N_("sigmoid approximation of GELU")
GELU_CUBIC_TERM = N_("tanh GELU: the cubic term misplaced")
GELU_SIGN = N_("tanh GELU: 1 - tanh instead of 1 + tanh")

TEXTS = {
    "on_size": N_("On n_embd={C}:\n"),
    "instance": N_("   You passed an instance, {kind}(...); pass the class itself, check_feed_forward({kind}), or a "
                   "function of n_embd: the check builds the module for several sizes."),
    "not_module": N_("   check_feed_forward needs an nn.Module, got {kind}."),
    "shape": N_("   expected shape {expected}, got shape {got}: the FFN must map n_embd back to n_embd."),
    "non_finite": N_("   your output has NaN or inf."),
    "random": N_("   Your module gave two different outputs for the same input in eval mode. F.dropout(x, p) drops "
                 "at random unless you pass training=self.training: use an nn.Dropout module, which stops in eval "
                 "mode. Layers created inside forward get new random weights on every call: create them in "
                 "__init__."),
    "twice": N_("you applied the activation twice (GELU(GELU(h))); once, between the two Linear layers."),
    "sigmoid_gelu": N_("you used h * sigmoid(1.702 * h), the sigmoid approximation of GELU; this exercise asks for "
                       "the tanh one: 0.5 * h * (1 + tanh(sqrt(2 / pi) * (h + 0.044715 * h**3)))."),
    "cubic_term": N_("your cubic term is {used}; inside the tanh it is h + 0.044715 * h**3 (the cube of h alone)."),
    "sign": N_("you wrote 1 - tanh(...); GELU is 0.5 * h * (1 + tanh(...))."),
    "rule_gelu": N_("   This exercise asks for the tanh formula written out with torch.tanh, and your module called "
                    "{function}. Write 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))."),
    "step_hidden": N_("the first Linear's output h"),
    "step_activation": N_("the activation GELU(h)"),
    "problem": N_("   Likely bug ({label}): {hint}"),
    "width": N_("your hidden layer has {width} units ({ratio:g} x n_embd); expand to 4 * n_embd = {four}: "
                "nn.Linear(n_embd, 4 * n_embd)."),
    "extra": N_("your module has {count} weight matrices {shapes}; the FFN has two: n_embd -> 4 * n_embd, then "
                "4 * n_embd -> n_embd, with one activation between them."),
    "missing": N_("your module has the weight matrices {shapes}; the FFN has two: nn.Linear(n_embd, 4 * n_embd) "
                  "and nn.Linear(4 * n_embd, n_embd)."),
    "unexpected": N_("your module has parameters {shapes} besides the two Linear layers; the FFN has only those "
                     "(LayerNorm belongs to the block, not inside the FFN)."),
    "linear": N_("your module is linear: two nn.Linear layers with nothing in between collapse into one. Put "
                 "nn.GELU() between them."),
    "mixing": N_("changing position 0 changed other positions' outputs; the FFN must act on each position on its "
                 "own (only nn.Linear on the last dim)."),
    "relu": N_("you used ReLU. ReLU makes a working FFN too (the 2017 Transformer used it), but this lesson's FFN, "
               "like GPT-2's and gpt_lesson.model.FeedForward, uses GELU, and the check compares your numbers "
               "with GELU's: use nn.GELU() (or write the tanh formula where the exercise asks for it)."),
    "other_activation": N_("your activation is {activation}, not GELU: use nn.GELU()."),
    "softmax": N_("you applied a softmax between the layers; the FFN's activation works on each unit on its own: "
                  "nn.GELU()."),
    "after_projection": N_("the activation comes after the output projection; it belongs between the two "
                           "Linear layers: Linear -> GELU -> Linear."),
    "before_first": N_("the activation comes before the first Linear; it belongs between the two Linear layers: "
                       "Linear -> GELU -> Linear."),
    "residual": N_("your FFN adds its input back (x + ...). The block adds the residual (x = x + ffwd(ln2(x))); "
                   "the FFN itself returns only the projection."),
    "coefficient": N_("your cubic coefficient is {used}; the tanh GELU uses 0.044715: "
                      "0.5 * h * (1 + tanh(sqrt(2 / pi) * (h + 0.044715 * h**3)))."),
    "sqrt_constant": N_("you used {used} where the formula has sqrt(2 / pi) = 0.7979: math.sqrt(2 / math.pi)."),
    "missing_half": N_("the factor 0.5 is missing: 0.5 * h * (1 + tanh(...)); without it the output is twice GELU."),
    "missing_h": N_("the factor {missing} is missing: GELU is h times a gate, 0.5 * h * (1 + tanh(...)), not the gate "
                    "alone."),
    "missing_cubic": N_("the cubic term is missing: tanh(sqrt(2 / pi) * (h + 0.044715 * h**3))."),
    "plain_tanh": N_("you used tanh(h) as the activation; GELU is 0.5 * h * (1 + tanh(sqrt(2 / pi) * (h + 0.044715 "
                     "* h**3)))."),
    "exact_not_tanh": N_("you used the exact GELU (nn.GELU() or F.gelu); this exercise asks for the tanh formula "
                         "written out: 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))."),
    "tanh_not_exact": N_("you used the tanh approximation of GELU; this exercise asks for the exact one, nn.GELU()."),
    "global_size": N_("your layers do not fit n_embd: build them from the n_embd argument, not a global "
                      "(nn.Linear(n_embd, 4 * n_embd), then nn.Linear(4 * n_embd, n_embd))."),
    "passed": N_("Your FFN maps n_embd={C} -> {hidden} -> {C} with {activation}, position by position: with your "
                 "weights copied into gpt_lesson.model.FeedForward the outputs are equal ({n_params} parameters)."),
    "gelu_exact": N_("GELU"),
    "gelu_tanh": N_("the tanh GELU"),
}
GELU_MODES = ("either", "exact", "tanh")
_SQRT_2_PI = math.sqrt(2 / math.pi)


def _gelu_tanh(h: torch.Tensor, coefficient: float = 0.044715, constant: float = _SQRT_2_PI, half: float = 0.5,
               times_h: bool = True) -> torch.Tensor:
    gate = half * (1 + torch.tanh(constant * (h + coefficient * h**3)))
    return h * gate if times_h else gate


def _matrices(module: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor], list[tuple[int, ...]]]:
    """The module's weight matrices and bias vectors (as float32 copies, whatever the module's dtype); the shapes
    of anything else. A bias stored as a (1, n) row or (n, 1) column counts as a vector."""
    mats, vecs, other = [], [], []
    for p in module.parameters():
        p = p.detach()
        if not p.is_floating_point():
            other.append(p)
            continue
        p = p.float()
        if p.dim() > 2 and all(s == 1 for s in p.shape[2:]):  # Conv1d with kernel 1
            p = p.reshape(p.shape[0], p.shape[1])
        if p.dim() >= 2 and sum(s != 1 for s in p.shape) == 1:  # a bias as a row, a column, (1, 1, n)
            p = p.reshape(-1)
        (mats if p.dim() == 2 else vecs if p.dim() == 1 else other).append(p)
    return mats, vecs, [tuple(p.shape) for p in other]


def _structure_problem(mats: list[torch.Tensor], vecs: list[torch.Tensor], other: list, C: int) -> Bug | None:
    shapes = [tuple(m.shape) for m in mats]
    if mats:
        first = shapes[0]
        width = first[1] if first[0] == C else first[0]
        if width != 4 * C:
            return Bug(NO_EXPANSION, TEXTS["width"], {"width": width, "ratio": width / C, "four": 4 * C})
    if len(mats) > 2:
        return Bug(EXTRA_LAYER, TEXTS["extra"], {"count": len(mats), "shapes": shapes})
    if len(mats) < 2 or any(s not in ((4 * C, C), (C, 4 * C)) for s in shapes):
        return Bug(MISSING_LAYER, TEXTS["missing"], {"shapes": shapes})
    strange = other + [tuple(v.shape) for v in vecs if len(v) not in (C, 4 * C)]
    if strange or sum(len(v) == C for v in vecs) > 1 or sum(len(v) == 4 * C for v in vecs) > 1:
        return Bug(UNEXPECTED_PARAMETERS, TEXTS["unexpected"], {"shapes": strange or [tuple(v.shape) for v in vecs]})
    return None


def _candidates(mats: list[torch.Tensor], vecs: list[torch.Tensor], C: int) -> Iterator[tuple]:
    """Ways to read two matrices as (W1: 4C x C, b1, W2: C x 4C, b2), in the nn.Linear convention."""
    b1 = next((v for v in vecs if len(v) == 4 * C), None)
    b2 = next((v for v in vecs if len(v) == C), None)
    for up, down in ((mats[0], mats[1]), (mats[1], mats[0])):
        yield (up if up.shape == (4 * C, C) else up.T, b1, down if down.shape == (C, 4 * C) else down.T, b2)


def _reference(W1: torch.Tensor, b1: torch.Tensor | None, W2: torch.Tensor, b2: torch.Tensor | None) -> nn.Module:
    """gpt_lesson.model.FeedForward with the learner's weights copied in."""
    C = W1.shape[1]
    ref = _FeedForward(C, dropout=0.0).eval()
    with torch.no_grad():
        ref.net[0].weight.copy_(W1)
        ref.net[0].bias.copy_(b1 if b1 is not None else torch.zeros(4 * C))
        ref.net[2].weight.copy_(W2)
        ref.net[2].bias.copy_(b2 if b2 is not None else torch.zeros(C))
    return ref


def _accepted(x: torch.Tensor, weights: tuple, gelu: str) -> list[torch.Tensor]:
    """The right outputs for the learner's weights: the exact GELU from the library's FeedForward, the tanh formula."""
    W1, b1, W2, b2 = weights
    outs = [_reference(*weights)(x)] if gelu in ("either", "exact") else []
    return outs + ([F.linear(_gelu_tanh(F.linear(x, W1, b1)), W2, b2)] if gelu in ("either", "tanh") else [])


def _variants(x: torch.Tensor, W1, b1, W2, b2, gelu: str) -> Iterator[tuple[Bug, Callable[[], torch.Tensor]]]:
    """The classic mistakes, computed with the learner's weights."""
    h = F.linear(x, W1, b1)

    def proj(a: torch.Tensor) -> torch.Tensor:
        return F.linear(a, W2, b2)

    def bug(label: str, key: str, **fields: object) -> Bug:
        return Bug(label, TEXTS[key], fields)

    if gelu == "tanh":
        yield bug(EXACT_NOT_TANH, "exact_not_tanh"), lambda: proj(F.gelu(h))
    if gelu == "exact":
        yield bug(TANH_NOT_EXACT, "tanh_not_exact"), lambda: proj(_gelu_tanh(h))
    yield bug(NO_NONLINEARITY, "linear"), lambda: proj(h)
    yield bug(RELU_NOT_GELU, "relu"), lambda: proj(F.relu(h))
    yield bug(PLAIN_TANH, "plain_tanh"), lambda: proj(torch.tanh(h))
    yield bug(SOFTMAX_ACTIVATION, "softmax"), lambda: proj(F.softmax(h, dim=-1))
    for activation, f in (("SiLU", F.silu), ("sigmoid", torch.sigmoid), ("ELU", F.elu), ("LeakyReLU", F.leaky_relu),
                          ("Mish", F.mish), ("Hardswish", F.hardswish), ("ReLU6", F.relu6), ("Softplus", F.softplus),
                          ("SELU", F.selu), ("CELU", F.celu), ("Hardtanh", F.hardtanh)):
        yield bug(OTHER_ACTIVATION, "other_activation", activation=activation), lambda f=f: proj(f(h))
    for act in (F.gelu, _gelu_tanh):
        yield bug(ACTIVATION_TWICE, "twice"), lambda act=act: proj(act(act(h)))
    yield bug(GELU_SIGMOID_APPROXIMATION, "sigmoid_gelu"), lambda: proj(h * torch.sigmoid(1.702 * h))
    yield (bug(GELU_CUBIC_TERM, "cubic_term", used="h + 0.044715 * h**2"),
           lambda: proj(0.5 * h * (1 + torch.tanh(_SQRT_2_PI * (h + 0.044715 * h**2)))))
    yield (bug(GELU_CUBIC_TERM, "cubic_term", used="(h + 0.044715 * h)**3"),
           lambda: proj(0.5 * h * (1 + torch.tanh(_SQRT_2_PI * (h + 0.044715 * h) ** 3))))
    yield bug(GELU_SIGN, "sign"), lambda: proj(0.5 * h * (1 - torch.tanh(_SQRT_2_PI * (h + 0.044715 * h**3))))
    for used in (0.44715, 0.0044715, 0.47715):
        yield bug(GELU_COEFFICIENT, "coefficient", used=used), lambda used=used: proj(_gelu_tanh(h, coefficient=used))
    for used, value in (("sqrt(pi / 2)", math.sqrt(math.pi / 2)), ("2 / pi", 2 / math.pi), ("sqrt(2 * pi)",
                                                                                          math.sqrt(2 * math.pi))):
        yield (bug(GELU_SQRT_CONSTANT, "sqrt_constant", used=used),
               lambda value=value: proj(_gelu_tanh(h, constant=value)))
    yield bug(GELU_MISSING_HALF, "missing_half"), lambda: proj(_gelu_tanh(h, half=1.0))
    yield bug(GELU_MISSING_H, "missing_h", missing="h"), lambda: proj(_gelu_tanh(h, times_h=False))
    yield bug(GELU_MISSING_H, "missing_h", missing="0.5 * h"), lambda: proj(_gelu_tanh(h, half=1.0, times_h=False))
    yield bug(GELU_MISSING_CUBIC, "missing_cubic"), lambda: proj(_gelu_tanh(h, coefficient=0.0))
    for act in (F.gelu, _gelu_tanh):
        yield bug(ACTIVATION_AFTER_PROJECTION, "after_projection"), lambda act=act: act(proj(h))
        yield bug(ACTIVATION_BEFORE_FIRST_LINEAR, "before_first"), lambda act=act: proj(F.linear(act(x), W1, b1))
        yield bug(RESIDUAL_INSIDE_FFN, "residual"), lambda act=act: x + proj(act(h))


def _steps(x: torch.Tensor, candidates: list[tuple], gelu: str) -> list[Step]:
    """The lesson's steps with the learner's own weights (the first way of reading them)."""
    if not candidates:
        return []
    W1, b1, _, _ = candidates[0]
    h = F.linear(x, W1, b1)
    return [Step(TEXTS["step_hidden"], h), Step(TEXTS["step_activation"], _gelu_tanh(h) if gelu == "tanh" else F.gelu(h))]


def _is_affine(module: nn.Module, x1: torch.Tensor, x2: torch.Tensor, forbidden: Forbidden) -> bool:
    """True when module(x1 + x2) == module(x1) + module(x2) - module(0): no non-linearity."""
    outs = [call(module, (x,), forbidden).value for x in (x1 + x2, x1, x2, torch.zeros_like(x1))]
    outs = [o.float() if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in outs]
    if not all(isinstance(o, torch.Tensor) and o.is_floating_point() and o.shape == x1.shape for o in outs):
        return False
    return torch.allclose(outs[0], outs[1] + outs[2] - outs[3], atol=1e-4, rtol=1e-3)


def _mixes_positions(module: nn.Module, x: torch.Tensor, out: torch.Tensor, forbidden: Forbidden) -> bool:
    x2 = x.clone()
    x2[:, 0] += 1.0
    out2 = call(module, (x2,), forbidden).value
    return isinstance(out2, torch.Tensor) and out2.shape == out.shape and not torch.allclose(
        out2[:, 1:], out[:, 1:], atol=1e-5)


@learner_check
def check_feed_forward(cls_or_fn: Callable[[int], nn.Module], *, gelu: str = "either", strict: bool = False,
                       hidden: bool = False) -> CheckResult:
    """Check a factory ``cls_or_fn(n_embd)`` -> ``nn.Module`` mapping (B, T, n_embd) to (B, T, n_embd).

    The FFN expands to 4 * n_embd hidden units, applies GELU and projects back, on each position
    on its own. ``gelu="either"`` accepts the exact GELU (``nn.GELU()``) and the tanh formula;
    ``"exact"`` or ``"tanh"`` demands one of them (lesson 06's second exercise writes the tanh one, so
    ``"tanh"`` also refuses F.gelu and nn.GELU, even with ``approximate="tanh"``). A module whose
    parameters are float64 or bfloat16, or whose biases are (1, n) rows, is judged like any other.
    """
    name = "check_feed_forward"
    require_callable(name, cls_or_fn, "a class or function that takes n_embd and returns an nn.Module")
    if gelu not in GELU_MODES:
        raise ValueError(f"{name}(): gelu={gelu!r} must be one of {GELU_MODES}")
    verdict = Verdict(name)
    if isinstance(cls_or_fn, nn.Module):
        return verdict.failed(INSTANCE_NOT_FACTORY, say(TEXTS["instance"], kind=type(cls_or_fn).__name__))
    forbidden = Forbidden({_FeedForward: "gpt_lesson.model.FeedForward",
                           _SourceFeedForward: "gpt_lesson.reference.FeedForward"})
    def rules() -> AbstractContextManager:  # the tanh exercise asks for the formula written out
        return exercise_rules(without="gelu") if gelu == "tanh" else nullcontext()

    hints = [("cannot be multiplied", TEXTS["global_size"])]
    sizes = [(10, (2, 5, 8)), (11, (1, 4, 12))] + ([(40, (3, 6, 16)), (41, (2, 2, 4))] if hidden else [])
    for i, (seed, (B, T, C)) in enumerate(sizes):
        where = say(TEXTS["on_size"], C=C) if i else ""
        torch.manual_seed(seed)
        made = call(cls_or_fn, (C,), forbidden)
        early = screen(verdict, made, where, hints)
        if early is not None:
            return early
        module = made.value
        if not isinstance(module, nn.Module):
            return verdict.failed(WRONG_TYPE, where + say(TEXTS["not_module"], kind=kind_of(module)))
        module.eval()  # dropout off, so outputs are comparable
        # A module in float64 or bfloat16 is judged on its formula: a float32 copy runs on float32 inputs.
        if any(p.is_floating_point() and p.dtype != torch.float32 for p in module.parameters()):
            module = copy.deepcopy(module).float()
        x = randn(seeded(seed), B, T, C) * 2  # pre-activations spread over the range where activations differ
        with rules():
            outcomes = [call(module, (x,), forbidden) for _ in range(2)]  # twice: it must not raise, nor differ
        used_gelu = next((o.rule for o in outcomes if o.rule is not None and gelu == "tanh"), None)
        for outcome in outcomes:
            if used_gelu is not None:
                outcome.rule = None  # named below: the exact GELU has a diagnosis of its own
            early = screen(verdict, outcome, where, hints, pure=True)
            if early is not None:
                return early
        out, again = (o.value for o in outcomes)
        problem = tensor_kind_problem(out, (B, T, C)) or tensor_kind_problem(again, (B, T, C))
        if problem is not None:
            return verdict.failed(problem[0], where + problem[1])
        if tuple(out.shape) != (B, T, C):
            return verdict.failed(WRONG_SHAPE, where + say(TEXTS["shape"], expected=(B, T, C), got=tuple(out.shape)))
        if not torch.equal(out, again):
            return verdict.failed(NOT_DETERMINISTIC, where + say(TEXTS["random"]))
        if not torch.isfinite(out).all():
            return verdict.failed(NON_FINITE, where + say(TEXTS["non_finite"]))
        mats, vecs, other = _matrices(module)
        structure = _structure_problem(mats, vecs, other, C)
        if structure is not None and structure.label != UNEXPECTED_PARAMETERS:
            g = seeded(seed + 100)
            problems = [structure]
            if _is_affine(module, randn(g, B, T, C), randn(g, B, T, C), forbidden):
                problems.append(Bug(NO_NONLINEARITY, TEXTS["linear"]))
            if _mixes_positions(module, x, out, forbidden):
                problems.append(Bug(NOT_POSITION_WISE, TEXTS["mixing"]))
            text = "\n".join(say(TEXTS["problem"], label=_(b.label), hint=b.text()) for b in problems)
            return verdict.failed("; ".join(b.label for b in problems), where + text)
        if i == 0:
            n_params = sum(p.numel() for p in made.value.parameters())
        candidates = list(_candidates(mats, vecs, C)) if len(mats) == 2 else []
        with torch.no_grad():
            refs = [ref for c in candidates for ref in _accepted(x, c, gelu)]
            found = next((b for c in candidates for b, f in _variants(x, *c, gelu) if close(out, f())), None)
            accepted = any(close(out, ref) for ref in refs)
        expected = refs[0] if refs else out
        if used_gelu is not None and (found is None or found.label != EXACT_NOT_TANH):
            return verdict.failed(RULE_BROKEN, where + say(TEXTS["rule_gelu"], function=used_gelu[1]))
        if accepted:
            continue
        if found is not None:
            return verdict.failed_with([found], where + expected_got(expected, out))
        g = seeded(seed + 100)
        if _is_affine(module, randn(g, B, T, C), randn(g, B, T, C), forbidden):
            return verdict.failed_with([Bug(NO_NONLINEARITY, TEXTS["linear"])], where + expected_got(expected, out))
        if _mixes_positions(module, x, out, forbidden):
            return verdict.failed_with([Bug(NOT_POSITION_WISE, TEXTS["mixing"])], where)
        if structure is not None:
            return verdict.failed_with([structure], where)
        with rules():
            recorded = call(module, (x,), forbidden, record=True).recorded
        pointer = first_differing_step(_steps(x, candidates, gelu), recorded)
        if pointer is not None:
            return verdict.failed(STEP_DIFFERS, where + pointer)
        diff = (out.double() - expected.double()).abs().max().item()
        return verdict.failed(WRONG_VALUES, where + expected_got(expected, out)
                              + say(MESSAGES["largest_difference"], diff=diff))
    C = sizes[0][1][2]
    activation = say(TEXTS["gelu_tanh"] if gelu == "tanh" else TEXTS["gelu_exact"])
    return verdict.passed(say(TEXTS["passed"], C=C, hidden=4 * C, activation=activation, n_params=n_params))
