"""Checks for the graded variants of lessons 02-04's exercises (summative homework, ``tools/nbgrader_course``).

A course built with a teacher's secret seed (``python -m tools.nbgrader_course --secret-seed ...``) gives
each of these exercises a twist the public lesson does not have, so the lesson's solution does not pass:

- ``check_variant_scores``: the scores scaled by ``1 / (temperature * d_k ** power)`` (``power`` 1 is the
  1/d_k scaling of muP; the lesson divides by sqrt(d_k), power 0.5 and temperature 1);
- ``check_variant_softmax``: the weights ``softmax(scores / temperature)`` over the keys;
- ``check_variant_window``: one causal head whose query ``t`` sees only the last ``window`` positions
  ``t - window + 1 .. t`` (a sliding-window mask, as in Longformer or Mistral), not the whole past.

The sizes and seeds of the inputs are arguments: the course folder holds them (drawn from the teacher's
seed), the package does not. Each check names the same classic mistakes as the lesson's check (a missing
transpose, no scaling, a softmax over the wrong dimension, masking with 0, ...), the variant's own twist
taken into account, and says so when an answer does the lesson's task instead of the variant's.

:func:`grading_cases` reads the grader's own cases of a graded cell from the teacher's course folder
(``grading/cases.json``, written by the builder); on a student's machine there is none.
"""
from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from . import attention as _att
from .generation import TEMPERATURE_IGNORED, TEMPERATURE_MULTIPLIED  # lesson 10's names for the same mistakes
from .runner import Forbidden, learner_check, randn, require_callable, run_cases, seeded
from .verdicts import N_, Bug, Case, CheckResult, Variant, Verdict, combinations, say, variant

# Labels: stable identifiers in CheckResult.diagnosis (the others are lesson 02-04's, from .attention, and
# lesson 10's temperature labels, from .generation).
LESSON_SCALE = N_("scaled as in the lesson, not as this assignment asks")
WINDOW_IGNORED = N_("the whole past attended, not the window")

TEXTS = {
    "lesson_scale": N_("you divided by sqrt(d_k) = sqrt({hs}), the lesson's scaling; this assignment asks for the "
                       "scores divided by {divisor}."),
    "no_temperature_scores": N_("you left out the temperature: this assignment divides the scores by {divisor}."),
    "other_scale": N_("your scores are the product times {c:.4g}; this assignment asks for it divided by "
                      "{divisor} (times {want:.4g})."),
    "no_temperature": N_("your weights are softmax(scores): this assignment divides the scores by the temperature "
                         "{temperature:g} first, softmax(scores / {temperature:g})."),
    "inverted": N_("your weights are softmax(scores * {temperature:g}); divide by the temperature: "
                   "softmax(scores / {temperature:g})."),
    "inverted_scores": N_("you multiplied the scores by the temperature {temperature:g}; divide them by {divisor}."),
    "window_ignored": N_("each query sees its whole past; in this assignment query t sees only the last {window} "
                         "positions, t - {back} .. t."),
    "window_off": N_("your window holds {got} positions; this assignment's holds {window} (query t sees "
                     "t - {back} .. t)."),
    "case_qk": N_("q and k of shape {shape}"),
    "case_scores": N_("scores of shape {shape}"),
    "case_qkv": N_("q, k, v of shape {shape}"),
    "scores_passed": N_("Your scores equal q @ k^T / {divisor} on {count} inputs."),
    "softmax_passed": N_("Your weights equal softmax(scores / {temperature:g}) over the keys, even for large scores."),
    "window_passed": N_("Your head equals a causal head with a window of {window} positions on {count} inputs."),
}

# What the course builder (tools/nbgrader_course) writes into graded notebooks, in the course's language.
COURSE_TEXTS = {
    "graded_cell": N_("Your turn {number}: graded, {points} points. This cell runs the check on your answer;\n"
                      "when the homework is graded it also runs it on inputs you have not seen."),
    "fresh": N_("the course's checks, fresh: no name in this notebook reaches them"),
    "cases": N_("the grader's own cases, from the teacher's course folder (none on your machine)"),
    "variant": N_("**This assignment's variant.** It differs from the lesson, and the lesson's solution does not "
                  "pass it."),
    "variant_scores": N_("Write `{fn}(q, k)` as the lesson asks, but divide the scores by **{divisor}** instead of "
                         "sqrt(d_k), with d_k = q.size(-1)."),
    "variant_softmax": N_("Write `{fn}(scores)` as the lesson asks, but return the weights "
                          "**softmax(scores / {temperature:g})** over the keys: a temperature of {temperature:g}."),
    "variant_window": N_("Write `{fn}(q, k, v)` as the lesson asks, but with a **sliding window of {window} "
                         "positions**: query t sees only the keys t - {back} .. t (never the future). The scores are "
                         "still scaled by 1/sqrt(d_k)."),
    "free_text": N_("**{question}: your answer** (graded by hand, {points} points). Answer in a few sentences, with "
                    "a number where the question asks for one."),
}

_CASES_FILE = ("grading", "cases.json")  # in the course folder, beside nbgrader_config.py
_LEVELS = 4  # how far up from the notebook's folder the course folder may be (autograded/<student>/<assignment>/)


def grading_cases(assignment: str, cell: str, start: str | os.PathLike | None = None) -> list[dict]:
    """The grader's own cases of graded cell ``cell`` of ``assignment``: a list of keyword arguments, one more
    call of the check each. They are read from ``grading/cases.json`` of the course folder (the nearest folder
    above ``start``, the working directory by default, that holds it and ``nbgrader_config.py``); on a student's
    machine there is none, and the list is empty. While nbgrader autogrades (``NBGRADER_EXECUTION=autograde``) a
    missing file is an error, so a submission is never graded on the visible cases alone without a word; a file
    that is there but malformed is always an error."""
    for label, value in (("assignment", assignment), ("cell", cell)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"grading_cases() needs a non-empty str {label}, got {value!r}")
    here = Path(start if start is not None else os.getcwd()).resolve()
    file = next((folder.joinpath(*_CASES_FILE) for folder in [here, *here.parents][:_LEVELS]
                 if folder.joinpath(*_CASES_FILE).is_file() and (folder / "nbgrader_config.py").is_file()), None)
    if file is None:
        if os.environ.get("NBGRADER_EXECUTION") == "autograde":
            raise ValueError(f"grading {assignment}: no {'/'.join(_CASES_FILE)} in a course folder above {here}; "
                             "rebuild the course folder (python -m tools.nbgrader_course) before autograding")
        return []
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{file}: not valid JSON ({e}); rebuild the course folder") from None
    cases = data.get(assignment, {}).get(cell, []) if isinstance(data, dict) else None
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise ValueError(f"{file}: the cases of {assignment}/{cell} must be a list of objects, got {cases!r:.80}")
    return cases


def _sizes(name: str, sizes: object) -> list[tuple[int, tuple[int, ...]]]:
    """``[[seed, [dims...]], ...]`` as given in a course folder, checked."""
    if not isinstance(sizes, (list, tuple)) or not sizes:
        raise ValueError(f"{name}(): sizes must be a non-empty list of [seed, [dims]], got {sizes!r}")
    out = []
    for item in sizes:
        ok = (isinstance(item, (list, tuple)) and len(item) == 2 and type(item[0]) is int
              and isinstance(item[1], (list, tuple)) and all(type(d) is int and 1 <= d <= 64 for d in item[1]))
        if not ok:
            raise ValueError(f"{name}(): each size is [seed, [dims]] with whole dims 1..64, got {item!r}")
        out.append((item[0], tuple(item[1])))
    return out


def _positive(name: str, label: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}(): {label} must be a positive number, got {value!r}")
    return float(value)


def divisor_text(power: float, temperature: float) -> str:
    """How a variant's divisor reads: "d_k", "(2 * sqrt(d_k))", "(0.5 * d_k)"."""
    base = {1.0: "d_k", 0.5: "sqrt(d_k)"}.get(power, f"d_k ** {power:g}")
    return base if temperature == 1 else f"({temperature:g} * {base})"


# ----------------------------------------------------------------------------------------------
# Scores


def _variant_scale(power: float, temperature: float, hs: int) -> float:
    return 1.0 / (temperature * hs**power)


def _scores_diagnose(power: float, temperature: float) -> Callable[[torch.Tensor, Case], list[Bug] | None]:
    def diagnose(out: torch.Tensor, case: Case) -> list[Bug] | None:
        q, k = case.args
        hs = q.size(-1)
        want = _variant_scale(power, temperature, hs)
        divisor = divisor_text(power, temperature)
        fitted = _att.fitted_product(out, q, k)
        if fitted is None:
            return None
        bugs, c = fitted
        if math.isclose(c, want, rel_tol=1e-3):
            return bugs or None
        if math.isclose(c, hs**-0.5, rel_tol=1e-3):
            bugs.append(Bug(LESSON_SCALE, TEXTS["lesson_scale"], {"hs": hs, "divisor": divisor}))
        elif math.isclose(c, 1.0, rel_tol=1e-3):
            bugs.append(_att._bug(_att.NO_SCALING, "no_scaling", hs=hs))
        elif temperature != 1 and math.isclose(c, hs**-power, rel_tol=1e-3):
            bugs.append(Bug(TEMPERATURE_IGNORED, TEXTS["no_temperature_scores"], {"divisor": divisor}))
        elif temperature != 1 and math.isclose(c, temperature * hs**-power, rel_tol=1e-3):
            fields = {"temperature": temperature, "divisor": divisor}
            bugs.append(Bug(TEMPERATURE_MULTIPLIED, TEXTS["inverted_scores"], fields))
        else:
            bugs.append(Bug(_att.WRONG_SCALING, TEXTS["other_scale"], {"c": c, "divisor": divisor, "want": want}))
        return bugs
    return diagnose


@learner_check
def check_variant_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *, power: float = 1.0,
                         temperature: float = 1.0, sizes: Sequence = ((0, (2, 6, 6)), (1, (3, 5, 8))),
                         strict: bool = False, hidden: bool = False) -> CheckResult:
    """Check ``fn(q, k)`` -> ``q @ k^T / (temperature * d_k ** power)``, shape (B, T, T), on inputs of ``sizes``
    (``[seed, [B, T, d_k]]`` each). ``hidden`` is accepted for the graded cells' form; the cases are the sizes."""
    name = "check_variant_scores"
    require_callable(name, fn)
    power, temperature = _positive(name, "power", power), _positive(name, "temperature", temperature)
    if math.isclose(power, 0.5) and math.isclose(temperature, 1.0):
        raise ValueError(f"{name}(): power 0.5 with temperature 1 is the lesson's own task, not a variant")
    cases = []
    for seed, dims in _sizes(name, sizes):
        if len(dims) != 3:
            raise ValueError(f"{name}(): sizes are [B, T, d_k], got {list(dims)}")
        g = seeded(seed)
        q, k = randn(g, *dims), randn(g, *dims)
        scale = _variant_scale(power, temperature, dims[-1])
        cases.append(Case((q, k), say(TEXTS["case_qk"], shape=dims),
                          functools.partial(lambda q, k, s: (q @ k.transpose(-2, -1)) * s, q, k, scale),
                          _scores_twists(scale)))
    forbidden = Forbidden({_att.lib.attention_scores: "gpt_lesson.attention.attention_scores",
                           _att.lib.naive_attention: "gpt_lesson.attention.naive_attention"})
    return run_cases(Verdict(name), fn, cases, forbidden=forbidden, hints=_att.TRANSPOSE_TEXTS,
                     diagnose=_scores_diagnose(power, temperature),
                     success=say(TEXTS["scores_passed"], divisor=divisor_text(power, temperature), count=len(cases)))


def _scores_twists(scale: float) -> list[Variant]:
    return [
        variant(_att.SOFTMAX_IN_SCORES, _att.TEXTS["softmax_in_scores"],
                lambda q, k: F.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)),
        variant(_att.FLOOR_DIVISION, _att.TEXTS["floor_division"],
                lambda q, k: torch.floor_divide(q @ k.transpose(-2, -1), 1 / scale)),
    ]


# ----------------------------------------------------------------------------------------------
# Softmax with a temperature


@learner_check
def check_variant_softmax(fn: Callable[[torch.Tensor], torch.Tensor], *, temperature: float = 2.0,
                          sizes: Sequence = ((2, (2, 5)), (3, (3, 7))), strict: bool = False,
                          hidden: bool = False) -> CheckResult:
    """Check ``fn(scores)`` -> ``softmax(scores / temperature, dim=-1)`` on causal scores of ``sizes``
    (``[seed, [B, T]]`` each), then on scores so large that a softmax without its max subtracted overflows."""
    name = "check_variant_softmax"
    require_callable(name, fn)
    t = _positive(name, "temperature", temperature)
    if math.isclose(t, 1.0):
        raise ValueError(f"{name}(): temperature 1 is the lesson's own task, not a variant")
    cases = []
    for seed, dims in _sizes(name, sizes):
        if len(dims) != 2:
            raise ValueError(f"{name}(): sizes are [B, T], got {list(dims)}")
        B, T = dims
        scores = randn(seeded(seed), B, T, T) * 2
        cases.append(Case((scores.masked_fill(_att.lib.causal_mask(T) == 0, float("-inf")),),
                          say(TEXTS["case_scores"], shape=(B, T, T)), None))
    big = randn(seeded(sum(s for s, _ in _sizes(name, sizes)) + 4), 2, 4, 4) * 250 * t
    big[0] += 600 * t
    big[1] -= 1500 * t
    cases.append(Case((big.masked_fill(_att.lib.causal_mask(4) == 0, float("-inf")),),
                      say(_att.TEXTS["case_large"], shape=(2, 4, 4)), None))
    for case in cases:
        case.expected = functools.partial(lambda s: F.softmax(s / t, dim=-1), case.args[0])
        case.variants = _softmax_twists(t)
    forbidden = Forbidden({_att.lib.attention_weights: "gpt_lesson.attention.attention_weights",
                           _att.lib.naive_attention: "gpt_lesson.attention.naive_attention"})
    return run_cases(Verdict(name), fn, cases, forbidden=forbidden, success=say(TEXTS["softmax_passed"], temperature=t))


def _softmax_twists(t: float) -> list[Variant]:
    twists = [variant(TEMPERATURE_IGNORED, TEXTS["no_temperature"], lambda s: F.softmax(s, dim=-1), temperature=t),
              variant(TEMPERATURE_MULTIPLIED, TEXTS["inverted"], lambda s: F.softmax(s * t, dim=-1), temperature=t)]
    # The lesson's classic mistakes, made on the scores divided by the temperature.
    twists += [Variant(v.bugs, functools.partial(lambda compute, s: compute(s / t), v.compute))
               for v in _att._softmax_variants()]
    return twists


# ----------------------------------------------------------------------------------------------
# A causal head with a sliding window


def _window_visible(T: int, window: int) -> torch.Tensor:
    ones = torch.ones(T, T, dtype=torch.bool)
    return torch.tril(ones) & torch.triu(ones, diagonal=-(window - 1))


def _window_head(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, scale: float | None, mask: str,
                 dim: int) -> torch.Tensor:
    T, hs = q.size(-2), q.size(-1)
    scores = q @ k.transpose(-2, -1) * (hs**-0.5 if scale is None else scale)
    sizes = {"window": window, "causal": T, "window+1": window + 1, "window-1": max(window - 1, 1)}
    if mask in sizes:
        scores = scores.masked_fill(~_window_visible(T, sizes[mask]), float("-inf"))
    elif mask == "zero":
        scores = scores.masked_fill(~_window_visible(T, window), 0.0)
    weights = F.softmax(scores, dim=dim)
    if mask == "after":
        weights = weights.masked_fill(~_window_visible(T, window), 0.0)
    return weights @ v


def _window_variants(T: int, hs: int, window: int) -> Iterator[Variant]:
    back = window - 1
    scales = [(None, None), (1.0, _att._bug(_att.NO_SCALING, "no_scaling", hs=hs)),
              (1 / hs, _att._bug(_att.SCALED_BY_HEAD_SIZE, "by_head_size", hs=hs, root=math.sqrt(hs)))]
    masks = [("window", None), ("causal", Bug(WINDOW_IGNORED, TEXTS["window_ignored"], {"window": window, "back": back})),
             ("window+1", Bug(_att.MASK_ONE_OFF, TEXTS["window_off"], {"got": window + 1, "window": window, "back": back})),
             ("window-1", Bug(_att.MASK_ONE_OFF, TEXTS["window_off"], {"got": window - 1, "window": window, "back": back})),
             ("zero", _att._bug(_att.MASK_WITH_ZERO, "zero")), ("none", _att._bug(_att.NO_MASK, "none")),
             ("after", _att._bug(_att.MASK_AFTER_SOFTMAX, "after"))]
    if window <= 1:
        masks = [m for m in masks if m[0] != "window-1"]
    dims = [(-1, None), (-2, _att._bug(_att.SOFTMAX_WRONG_DIM, "dim_head"))]
    yield from combinations([scales, masks, dims], functools.partial(_window_ref, window), max_bugs=2)


def _window_ref(window: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale, mask, dim) -> torch.Tensor:
    return _window_head(q, k, v, window, scale, mask, dim)


@learner_check
def check_variant_window(fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor], *, window: int = 3,
                         sizes: Sequence = ((4, (2, 6, 6)), (5, (3, 5, 8))), strict: bool = False,
                         hidden: bool = False) -> CheckResult:
    """Check ``fn(q, k, v)`` -> one causal head (scores scaled by 1/sqrt(d_k)) whose query ``t`` sees only the
    positions ``t - window + 1 .. t``; inputs of ``sizes`` (``[seed, [B, T, d_k]]`` each). Takes the lesson's
    rules (``without="sdpa"``, ``using="sdpa"``)."""
    name = "check_variant_window"
    require_callable(name, fn)
    if type(window) is not int or window < 2:
        raise ValueError(f"{name}(): window must be a whole number of at least 2, got {window!r}")
    cases = []
    for seed, dims in _sizes(name, sizes):
        if len(dims) != 3:
            raise ValueError(f"{name}(): sizes are [B, T, d_k], got {list(dims)}")
        B, T, hs = dims
        if T <= window:
            raise ValueError(f"{name}(): T = {T} must exceed the window {window}, or the window hides nothing")
        g = seeded(seed)
        q, k, v = (randn(g, B, T, hs) for _ in range(3))
        cases.append(Case((q, k, v), say(TEXTS["case_qkv"], shape=dims),
                          functools.partial(_window_head, q, k, v, window, None, "window", -1),
                          _window_variants(T, hs, window)))
    forbidden = Forbidden({_att.lib.naive_attention: "gpt_lesson.attention.naive_attention",
                           _att.lib.sdpa_attention: "gpt_lesson.attention.sdpa_attention"})
    return run_cases(Verdict(name), fn, cases, forbidden=forbidden, hints=_att.TRANSPOSE_TEXTS + _att.MASK_SIZE_TEXTS,
                     success=say(TEXTS["window_passed"], window=window, count=len(cases)))


__all__ = ["check_variant_scores", "check_variant_softmax", "check_variant_window", "divisor_text", "grading_cases",
           "COURSE_TEXTS", "LESSON_SCALE", "WINDOW_IGNORED"]
