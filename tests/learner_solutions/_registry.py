"""The registry of the learner-solution corpus: one :class:`Exercise` per "Your turn" of lessons 01-08.

Each exercise module registers solutions the way learners write them: right answers in unusual styles
(``@EX.right``) and typical wrong ones (``@EX.wrong("LABEL", ...)``, with the diagnosis labels the check
may name, as constant names of :mod:`gpt_lesson.checks`). ``run`` calls the exercise's check the way the
lesson's check cell does and sorts the verdict into: accepted, false accept, false reject, crash, named,
misnamed (a label other than the ones listed, or a message without the cause ``says`` lists) and generic (``wrong values`` / ``wrong value``, or an
exception reported without a likely cause).
"""
from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

GENERIC_LABELS = ("WRONG_VALUES", "WRONG_VALUE")


@dataclass
class Solution:
    exercise: Exercise
    name: str
    args: tuple
    right: bool
    labels: tuple[str, ...] = ()
    says: tuple[str, ...] = ()  # fragments the message must hold (the likely cause it should name)


@dataclass
class Exercise:
    """One exercise: its check (a name in gpt_lesson.checks), the check call's other arguments, its solutions.

    ``kwargs`` are the arguments the lesson's check cell passes; ``rules`` the ones that state the exercise's
    own rules (``without=``, ``using=``), which a check that does not know them yet is called without.
    """

    key: str
    check: str
    extra_args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    rules: dict = field(default_factory=dict)
    solutions: list[Solution] = field(default_factory=list)

    def add(self, args: tuple, *, name: str, right: bool, labels: tuple[str, ...] = (),
            says: tuple[str, ...] = ()) -> None:
        if any(s.name == name for s in self.solutions):
            raise ValueError(f"{self.key}: two solutions named {name}")
        self.solutions.append(Solution(self, name, tuple(args), right, labels, says))

    def right(self, fn: Callable) -> Callable:
        self.add((fn,), name=getattr(fn, "__name__", repr(fn)), right=True)
        return fn

    def wrong(self, *labels: str, says: str | tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
        def register(fn: Callable) -> Callable:
            self.add((fn,), name=getattr(fn, "__name__", repr(fn)), right=False, labels=labels,
                     says=(says,) if isinstance(says, str) else tuple(says))
            return fn
        return register


@dataclass
class Outcome:
    solution: Solution
    verdict: str  # accepted, false accept, false reject, crash, named, misnamed, generic
    diagnosis: str | None
    message: str
    seconds: float


def _label_values(checks: Any, names: tuple[str, ...]) -> set[str] | None:
    """The label strings of ``names``; None when one of them does not exist in this version of the checks."""
    values = {getattr(checks, n, None) for n in names}
    return None if None in values else values


def run(solution: Solution) -> Outcome:
    from gpt_lesson import checks

    ex = solution.exercise
    check = getattr(checks, ex.check)
    args = solution.args + ex.extra_args
    out = io.StringIO()
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out):
            try:
                result = check(*args, **ex.kwargs, **ex.rules)
            except TypeError as e:  # a check that does not know the exercise's rules yet: the lesson's call
                if not ex.rules or "unexpected keyword" not in str(e):
                    raise
                result = check(*args, **ex.kwargs)
    except Exception as e:  # the check itself failed: the learner's code must never make it raise
        return Outcome(solution, "crash", None, f"{type(e).__name__}: {e}", time.perf_counter() - started)
    seconds = time.perf_counter() - started
    if solution.right:
        verdict = "accepted" if result.passed else "false reject"
        return Outcome(solution, verdict, result.diagnosis, result.message, seconds)
    if result.passed:
        return Outcome(solution, "false accept", None, result.message, seconds)
    generic = _label_values(checks, GENERIC_LABELS) or set()
    raised_without_cause = (result.diagnosis == getattr(checks, "RAISED", "")
                            and "Likely cause" not in result.message and "Likely bug" not in result.message)
    if result.diagnosis in generic or raised_without_cause:
        return Outcome(solution, "generic", result.diagnosis, result.message, seconds)
    expected = _label_values(checks, solution.labels)
    if solution.labels and expected is not None and result.diagnosis not in expected:
        return Outcome(solution, "misnamed", result.diagnosis, result.message, seconds)
    if expected is not None and not all(fragment in result.message for fragment in solution.says):
        return Outcome(solution, "misnamed", result.diagnosis, result.message, seconds)
    return Outcome(solution, "named", result.diagnosis, result.message, seconds)
