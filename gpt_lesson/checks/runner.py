"""The one runner behind every exercise check.

A check builds a few seeded *cases* (inputs and the reference output) and hands them, with the
learner's function, to :func:`run_cases` (tensor answers) or :func:`run_value_cases` (whole
numbers). The runner calls the learner's code safely, refuses answers of the wrong kind, names
the bug when the answer equals one of the check's *variants* (classic mistakes it computes
itself), and prints and returns a :class:`CheckResult`.

What every check gets from here:

* an untouched stub (``NotImplementedError`` or ``None``) is "not attempted yet", never an error;
* the learner's exceptions are reported, never raised; only wrong arguments to a check raise;
* a solution that calls the function the check compares with (``gpt_lesson``'s own, or the torch
  function that computes the whole answer) is refused: :class:`Forbidden` watches the learner's
  call with :func:`sys.setprofile` and notices that function's code object being entered;
* answers of the wrong kind (complex, integer, bool, a string for a number) are named, not converted;
* :func:`learner_check` adds ``strict=`` (raise ``AssertionError`` on failure, for nbgrader) and
  ``hidden=`` (more cases) and runs the check without touching the caller's random state.

What a check says (labels, message templates, :class:`CheckResult`) lives in
:mod:`gpt_lesson.checks.verdicts`.
"""
from __future__ import annotations

import functools
import inspect
import math
import numbers
import random
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from types import CodeType
from typing import Any

import torch

from ..i18n import _
from ..validation import check_bool
from .verdicts import (
    BOOL_OUTPUT,
    CALLED_LIBRARY,
    COMPLEX_OUTPUT,
    FLOAT_NOT_INT,
    INTEGER_OUTPUT,
    MESSAGES,
    NON_FINITE,
    RAISED,
    WRONG_SHAPE,
    WRONG_TYPE,
    WRONG_VALUE,
    WRONG_VALUES,
    Bug,
    Case,
    CheckResult,
    Variant,
    Verdict,
    say,
)

_ATOL, _RTOL = 1e-5, 1e-4  # the tolerance of every comparison


# ----------------------------------------------------------------------------------------------
# Calling the learner's code


class Forbidden:
    """Functions the learner's code must not call: each the whole answer a check compares with.

    Give functions, methods or classes (every method defined in the class counts) with the name a
    message shows. While :meth:`watch` is active, :func:`sys.setprofile` sees every Python frame
    entered and every C function called; the first forbidden one is remembered in ``hit``.
    """

    def __init__(self, entries: dict[object, str]) -> None:
        self.codes: dict[CodeType, str] = {}
        self.builtins: list[tuple[object, str]] = []
        for obj, name in entries.items():
            for code in _code_objects(obj):
                self.codes[code] = name
            if not _code_objects(obj) and callable(obj):
                self.builtins.append((obj, name))
        self.hit: str | None = None

    @contextmanager
    def watch(self) -> Iterator[None]:
        self.hit = None
        previous = sys.getprofile()
        if previous is not None and not (inspect.isfunction(previous) or inspect.ismethod(previous)):
            yield  # a C-level profiler (cProfile) is running: it cannot be chained, so leave it alone
            return

        def profiler(frame, event, arg):  # noqa: ANN001 - the profiler protocol
            if previous is not None:  # a Python profiler already running keeps seeing every event
                previous(frame, event, arg)
            if self.hit is not None:
                return
            if event == "call":
                self.hit = self.codes.get(frame.f_code)
            elif event == "c_call":
                self.hit = next((name for obj, name in self.builtins if arg is obj), None)

        sys.setprofile(profiler)
        try:
            yield
        finally:
            sys.setprofile(previous)


def _code_objects(obj: object) -> list[CodeType]:
    if inspect.isclass(obj):
        return [code for member in vars(obj).values() for code in _code_objects(member)]
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        return [c for f in (obj.fget, obj.fset) if f is not None for c in _code_objects(f)]
    code = getattr(inspect.unwrap(obj), "__code__", None) if callable(obj) else None
    return [code] if isinstance(code, CodeType) else []


@dataclass
class Outcome:
    """What the learner's call gave: a ``value``, an ``error``, a stub, or a forbidden ``library`` call."""

    value: Any = None
    error: Exception | None = None
    stub: bool = False
    library: str | None = None


def clone_args(args: tuple) -> tuple:
    """Fresh copies of the tensor arguments: the learner may change them in place (``masked_fill_``)."""
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def call(fn: Callable, args: tuple, forbidden: Forbidden | None = None) -> Outcome:
    """Run the learner's ``fn(*args)`` on copies of the arguments (no autograd), catching what it raises."""
    watch = forbidden.watch() if forbidden is not None else nullcontext()
    try:
        with torch.no_grad(), watch:
            value = fn(*clone_args(args))
    except NotImplementedError:
        return Outcome(stub=True)
    except Exception as e:  # the learner's error is reported, never raised: the notebook runs on
        return Outcome(error=e, library=forbidden.hit if forbidden else None)
    return Outcome(value=value, stub=value is None, library=forbidden.hit if forbidden else None)


def exception_text(error: BaseException, hints: Sequence[tuple[str, str]] = ()) -> str:
    """The learner's exception, with the first hint whose fragment appears in its text."""
    text = say(MESSAGES["raised"], error=type(error).__name__, detail=error)
    for fragment, hint in hints:
        if fragment in str(error):
            return text + say(MESSAGES["likely_cause"], hint=_(hint))
    return text


def screen(verdict: Verdict, outcome: Outcome, where: str = "",
           hints: Sequence[tuple[str, str]] = ()) -> CheckResult | None:
    """The verdict for a stub, a forbidden call or an exception; None when there is a value to judge."""
    if outcome.stub:
        return verdict.not_attempted()
    if outcome.library is not None:
        template = "called_gpt_lesson" if outcome.library.startswith("gpt_lesson") else "called_torch"
        return verdict.failed(CALLED_LIBRARY, where + say(MESSAGES[template], function=outcome.library))
    if outcome.error is not None:
        return verdict.failed(RAISED, where + exception_text(outcome.error, hints))
    return None


# ----------------------------------------------------------------------------------------------
# Judging tensors


def kind_of(value: object) -> str:
    """What a value is, for a message: "a list", "a tuple of 2"."""
    if isinstance(value, tuple):
        return say(MESSAGES["kind_tuple"], count=len(value))
    return say(MESSAGES["kind"], name=type(value).__name__)


def tensor_kind_problem(out: object, shape: tuple[int, ...]) -> tuple[str, str] | None:
    """A label and text when ``out`` is not a real floating-point tensor (nothing is converted)."""
    if not isinstance(out, torch.Tensor):
        return WRONG_TYPE, say(MESSAGES["not_tensor"], kind=kind_of(out), shape=shape)
    if out.is_complex():
        return COMPLEX_OUTPUT, say(MESSAGES["complex"], dtype=out.dtype)
    if out.dtype == torch.bool:
        return BOOL_OUTPUT, say(MESSAGES["bool"])
    if not out.is_floating_point():
        return INTEGER_OUTPUT, say(MESSAGES["integer"], dtype=out.dtype)
    if out.layout != torch.strided:
        return WRONG_TYPE, say(MESSAGES["not_tensor"], kind=say(MESSAGES["kind_layout"], layout=out.layout),
                                   shape=shape)
    return None


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape and equal values (float64, NaN equal to NaN) within the checks' tolerance."""
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=_ATOL, rtol=_RTOL, equal_nan=True)


def match_variant(out: torch.Tensor, case: Case) -> Variant | None:
    """The first variant of ``case`` whose output equals ``out``."""
    for v in case.variants:
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a variant's own warnings are not the learner's business
                candidate = v.compute(*clone_args(case.args))
        except Exception:  # a variant that cannot run on this input cannot be the learner's bug
            continue
        if isinstance(candidate, torch.Tensor) and close(out, candidate):
            return v
    return None


def fmt_row(t: torch.Tensor, row: int = 0) -> str:
    """A few rounded numbers of one row of ``t``: enough to compare by eye."""
    if t.dim() == 0:
        return f"{t.item():.4f}"
    rows = t.reshape(-1, t.size(-1)) if t.numel() else t.reshape(1, -1)
    vals = ", ".join(f"{v:.4f}" for v in rows[min(row, len(rows) - 1)][:5].tolist())
    more = ", ..." if rows.size(1) > 5 else ""
    index, flat = [], row
    for size in reversed(tuple(t.shape[:-1])):
        index.append(flat % size)
        flat //= size
    where = "".join(f"{i}, " for i in reversed(index))
    return say(MESSAGES["row"], shape=tuple(t.shape), where=where, values=vals + more)


def expected_got(expected: torch.Tensor, got: torch.Tensor) -> str:
    """Expected and received values side by side, on the row where they differ most."""
    row = 0
    if expected.shape == got.shape and expected.numel() and expected.dim() > 0:
        diff = (expected.double() - got.double()).nan_to_num(nan=math.inf).abs()
        row = int(diff.reshape(-1, expected.size(-1)).amax(dim=1).argmax())
    return say(MESSAGES["expected_got"], expected=fmt_row(expected, row), got=fmt_row(got, row))


Diagnose = Callable[[torch.Tensor, Case], Sequence[Bug] | None]
OnError = Callable[[Exception, Case], Sequence[Bug] | None]


def judge_tensor(verdict: Verdict, out: object, case: Case, where: str,
                 diagnose: Diagnose | None = None) -> CheckResult | None:
    """The verdict on one tensor answer; None when it equals the reference."""
    problem = tensor_kind_problem(out, tuple(case.expected.shape))
    if problem is not None:
        return verdict.failed(problem[0], where + problem[1])
    out = out.detach()
    if close(out, case.expected):
        return None
    found = match_variant(out, case)
    if found is not None:
        return verdict.failed_with(found.bugs, where + expected_got(case.expected, out))
    if out.shape != case.expected.shape:
        return verdict.failed(WRONG_SHAPE, where + say(MESSAGES["wrong_shape"], expected=tuple(case.expected.shape),
                                                       got=tuple(out.shape)))
    if not torch.isfinite(out).all() and torch.isfinite(case.expected).all():
        return verdict.failed(NON_FINITE, where + expected_got(case.expected, out) + say(MESSAGES["non_finite"]))
    bugs = diagnose(out, case) if diagnose is not None else None
    if bugs:
        return verdict.failed_with(bugs, where + expected_got(case.expected, out))
    diff = (out.double() - case.expected.double()).abs().max().item()
    return verdict.failed(WRONG_VALUES, where + expected_got(case.expected, out)
                          + say(MESSAGES["largest_difference"], diff=diff))


def run_cases(verdict: Verdict, fn: Callable, cases: Iterable[Case], *, success: str,
              forbidden: Forbidden | None = None, hints: Sequence[tuple[str, str]] = (),
              diagnose: Diagnose | None = None, on_error: OnError | None = None) -> CheckResult:
    """Run ``fn`` on every case; the first case that fails decides the verdict.

    ``diagnose(out, case)`` may name bugs the variants do not cover; ``on_error(error, case)`` may
    name the bug behind an exception (it may run the learner's function again on other inputs).
    """
    for i, case in enumerate(cases):
        where = say(MESSAGES["on_case"], description=case.description) if i else ""
        outcome = call(fn, case.args, forbidden)
        if outcome.error is not None and outcome.library is None and on_error is not None:
            bugs = on_error(outcome.error, case)
            if bugs:
                return verdict.failed_with(bugs, where + exception_text(outcome.error))
        early = screen(verdict, outcome, where, hints)
        if early is not None:
            return early
        result = judge_tensor(verdict, outcome.value, case, where, diagnose)
        if result is not None:
            return result
    return verdict.passed(success)


# ----------------------------------------------------------------------------------------------
# Judging whole numbers (lesson 12's arithmetic, parameter counts)


def int_kind_problem(got: object, args_text: str) -> tuple[str, str] | None:
    """A label and text when ``got`` is not a whole number (an int or a NumPy integer)."""
    if isinstance(got, bool):
        return WRONG_TYPE, say(MESSAGES["value_bool"], args=args_text, got=got)
    if isinstance(got, numbers.Integral):  # int, or a NumPy integer scalar
        return None
    if isinstance(got, float):
        return FLOAT_NOT_INT, say(MESSAGES["value_float"], args=args_text, got=got)
    if isinstance(got, str):
        return WRONG_TYPE, say(MESSAGES["value_str"], args=args_text, got=got)
    shape = getattr(got, "shape", None)
    if shape is not None:
        return WRONG_TYPE, say(MESSAGES["value_array"], args=args_text, kind=kind_of(got), shape=tuple(shape))
    return WRONG_TYPE, say(MESSAGES["value_other"], args=args_text, kind=kind_of(got))


def run_value_cases(verdict: Verdict, fn: Callable, cases: Sequence[tuple[tuple, int]], *,
                    diagnose: Callable[[tuple, int], Bug | None], forbidden: Forbidden | None = None,
                    describe: Callable[[tuple], str] = repr) -> CheckResult:
    """Run ``fn`` on ``(args, expected)`` cases whose answer is one whole number."""
    for args, expected in cases:
        outcome = call(fn, args, forbidden)
        early = screen(verdict, outcome)
        if early is not None:
            return early
        args_text = describe(args)
        problem = int_kind_problem(outcome.value, args_text)
        if problem is not None:
            return verdict.failed(*problem)
        got = int(outcome.value)
        if got != expected:
            bug = diagnose(args, got)
            text = say(MESSAGES["value_mismatch"], args=args_text, expected=expected, got=got)
            return verdict.failed_with([bug], text) if bug else verdict.failed(WRONG_VALUE, text)
    return verdict.passed(say(MESSAGES["passed_cases"], count=len(cases)))


# ----------------------------------------------------------------------------------------------
# Entry points


@contextmanager
def isolated() -> Iterator[None]:
    """Run on one thread, then restore the thread count and torch's, Python's and NumPy's random state.

    The checks' tensors are tiny: one thread is faster than waking a pool, and on a busy machine a
    pool of threads waits for cores that other programs hold.
    """
    python_state = random.getstate()
    numpy = sys.modules.get("numpy")
    numpy_state = numpy.random.get_state() if numpy is not None else None
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        torch.set_num_threads(threads)
        random.setstate(python_state)
        if numpy_state is not None:
            numpy.random.set_state(numpy_state)


def learner_check(check: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
    """Make ``check`` a learner-facing check: ``strict=``/``hidden=`` validated, random state kept.

    With ``strict=True`` a failure (and an untouched stub) raises ``AssertionError(message)``
    after the verdict is printed, as an nbgrader test cell needs.
    """
    @functools.wraps(check)
    def wrapper(*args: Any, **kwargs: Any) -> CheckResult:
        strict = check_bool("strict", kwargs.get("strict", False))
        check_bool("hidden", kwargs.get("hidden", False))
        with isolated():
            result = check(*args, **kwargs)
        if strict and not result.passed:
            raise AssertionError(result.message)
        return result
    return wrapper


def require_callable(check: str, value: object, what: str = "your function") -> None:
    """Wrong arguments to a check (not the learner's bug) raise a TypeError."""
    if not callable(value):
        raise TypeError(f"{check}() expects {what} (something callable), got {type(value).__name__} {value!r:.60}")


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)
