"""What a check says: its labels, its message templates, the bugs it names and the printed verdict.

:mod:`gpt_lesson.checks.runner` runs the learner's code and decides; this module holds the words
and the :class:`CheckResult`. Labels (``CheckResult.diagnosis``) are stable English identifiers;
every text a learner reads is a template translated by :func:`gpt_lesson.i18n._` and formatted
afterwards (:func:`say`), so a catalogue in another language can cover them.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..i18n import N_, _


def say(template: str, **fields: Any) -> str:
    """``template`` in the learner's language, with ``fields`` filled in after translation."""
    return _(template).format(**fields)


# Labels any check can give.
NOT_ATTEMPTED = N_("not attempted yet")
RAISED = N_("raised an exception")
WRONG_TYPE = N_("wrong type")
WRONG_SHAPE = N_("wrong shape")
NON_FINITE = N_("NaN or inf in the output")
WRONG_VALUES = N_("wrong values")
WRONG_VALUE = N_("wrong value")
COMPLEX_OUTPUT = N_("complex output")
INTEGER_OUTPUT = N_("integer output")
BOOL_OUTPUT = N_("bool output")
FLOAT_NOT_INT = N_("float instead of int")
CALLED_LIBRARY = N_("called the library's function")
RULE_BROKEN = N_("used what the exercise rules out")
RULE_NOT_USED = N_("did not use what the exercise asks for")
INPUT_MODIFIED = N_("changed its input in place")
NOT_DETERMINISTIC = N_("different output on each call")
TIMED_OUT = N_("did not finish in time")
DIMS_PERMUTED = N_("dimensions in another order")
STEP_DIFFERS = N_("a step differs from the lesson's")
TAMPERED = N_("the check or the library was replaced")

MESSAGES = {
    "passed": N_("✅ {name}: passed. {text}"),
    "not_attempted": N_("⏳ {name}: not attempted yet. {text}"),
    "failed": N_("❌ {name}: not yet ({label}).\n{text}"),
    "stub": N_("Your function still raises NotImplementedError or returns None (a missing `return`?): "
               "fill it in and run this cell again."),
    "on_case": N_("On {description}:\n"),
    "raised": N_("   Your code raised {error}: {detail}"),
    "likely_cause": N_("\n   Likely cause: {hint}"),
    "likely_bug": N_("\n   Likely bug: {hint}"),
    "then_also": N_("\n   Then also: {hint}"),
    "expected_got": N_("   expected: {expected}\n   got:      {got}"),
    "row": N_("shape {shape}, [{where}:] = [{values}]"),
    "largest_difference": N_("\n   The largest difference is {diff:.4g}. Compare your steps with the lesson's, "
                             "one at a time."),
    "wrong_shape": N_("   expected shape {expected}, got shape {got}."),
    "non_finite": N_("\n   Your output has NaN or inf. NaN appears when -inf reaches a sum or a product "
                     "(e.g. masking after the softmax) or when a whole row is masked."),
    "not_tensor": N_("   Your function returned {kind}; return a torch.Tensor of shape {shape}."),
    "complex": N_("   Your output is a complex tensor ({dtype}); the answer is real. Return real numbers "
                  "(no torch.complex, .to(torch.cfloat) or torch.fft): the check does not drop the imaginary "
                  "part for you."),
    "bool": N_("   Your output holds True/False (dtype torch.bool): a comparison (==, <, >) where numbers "
               "were expected."),
    "integer": N_("   Your output has the integer dtype {dtype}: integer division (//), .long() or .int() "
                  "threw the fractions away. Keep a float tensor."),
    "called_gpt_lesson": N_("   You called gpt_lesson's own function {function}, which is what this check "
                            "compares with; write the steps yourself."),
    "called_torch": N_("   You called {function}, which computes the whole answer; write the steps yourself."),
    "rule_broken": N_("   This exercise asks for it without {rule}, and your function called {function}. Write the steps "
                      "yourself, as the exercise's text says."),
    "rule_not_used": N_("   This exercise asks you to use {rule}, and your function never called it."),
    "input_modified": N_("   Your function changed its argument {names} in place (an in-place operation such as +=, -=, "
                         "masked_fill_, .exp_(), .copy_() or .train() on a module given to it): the caller's {what} "
                         "changes too. Work on a new tensor (x = x + ..., masked_fill without the _) and leave the "
                         "arguments as they came."),
    "what_tensor": N_("tensor"),
    "what_module": N_("module"),
    "not_deterministic": N_("   Your function gave two different results for the same input: something random runs "
                            "inside it. F.dropout(x, p) drops at random unless you pass training=False; torch.rand/randn "
                            "or a layer created inside the function give new numbers on each call."),
    "timed_out": N_("   Your function did not return within {seconds:g} s, so the check stopped it. Look for a "
                    "loop that never ends (a while whose condition never changes) or work that grows with a size "
                    "the check did not ask for. If it keeps running, restart the kernel."),
    "dims_permuted": N_("   Your output has shape {got} and holds the right numbers with its dimensions in another "
                        "order: expected shape {expected}. A transpose or permute too many, or one missing."),
    "step_differs": N_("   {steps_ok}{step} differs from the lesson's: expected {expected}; of your intermediate "
                       "results of that shape, the closest was {closest}."),
    "step_differs_none": N_("   {steps_ok}{step} differs from the lesson's: expected {expected}; none of your "
                            "intermediate results has that shape."),
    "steps_ok": N_("Your steps agree with the lesson's up to {last}; "),
    "after_steps": N_("   Your steps agree with the lesson's up to {last}; what your function does after that "
                      "step differs."),
    "after_result": N_("   At one point your function had the right result; what it does after that changes it."),
    "largest_difference_only": N_("\n   The largest difference is {diff:.4g}."),
    "hint_3d_T": N_("`.T` on a {ndim}-D tensor reverses all its dimensions ({before} becomes {after}); to swap the "
                    "last two use .transpose(-2, -1) or .mT."),
    "hint_keepdim": N_("a reduction without keepdim=True: {call} gave shape {got} for an input of shape {shape}, and "
                       "that no longer lines up with the input. Pass keepdim=True (shape {kept})."),
    "hint_contiguous": N_("after a transpose the tensor is not contiguous: call .contiguous() before .view(), or use "
                          ".reshape()."),
    "hint_max_pair": N_(".max(dim) returns a pair (values, indices): use .max(dim, keepdim=True).values, or .amax(dim, "
                        "keepdim=True)."),
    "hint_float_size": N_("a size computed with / is a float; sizes are whole numbers: use // (C // n_head)."),
    "hint_dtype": N_("two tensors of different dtypes meet in one operation: convert one of them (.float(), "
                     ".to(x.dtype)) first."),
    "hint_super_init": N_("call super().__init__() first in your class's __init__, before you create its layers."),
    "hint_forward": N_("an nn.Module runs its method forward(self, x): define it (check its spelling)."),
    "hint_arguments": N_("the check calls your function with {count} arguments: give it exactly the parameters the "
                         "exercise names."),
    "hint_recursion": N_("your function calls itself: did you give it the name of a function it uses?"),
    "hint_name": N_("{detail}: run the cell that defines it first, or check its spelling."),
    "tampered": N_("   {what} is not the course's own: it was replaced by other code in this session. The check does "
                   "not grade against a replaced reference: restart the kernel and run the notebook from the top."),
    "value_mismatch": N_("   For {args} expected {expected}, got {got}."),
    "value_bool": N_("   For {args} your function returned {got}, a bool; return a whole number (int)."),
    "value_float": N_("   For {args} your function returned {got!r}, a float; return an int: use integer "
                      "division // (or int(...) once you know the division is exact)."),
    "value_str": N_("   For {args} your function returned the string {got!r}; return the number itself "
                    "(an int), not its text."),
    "value_array": N_("   For {args} your function returned {kind} of shape {shape}; return one Python int "
                      "(a one-element tensor becomes one with .item())."),
    "value_other": N_("   For {args} your function returned {kind}; return an int."),
    "passed_cases": N_("Your function gives the right number in all {count} cases."),
    "kind": N_("a {name}"),
    "kind_tuple": N_("a tuple of {count}"),
    "kind_layout": N_("a {layout} tensor"),
}


@dataclass
class CheckResult:
    """The verdict of a check: truthy when ``passed``.

    ``attempted`` is False for an untouched stub; ``diagnosis`` is a short stable label of the likely
    bug (None when passed); ``message`` is what was printed.
    """

    passed: bool
    attempted: bool
    diagnosis: str | None
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:  # short: the full message has already been printed
        return f"CheckResult(passed={self.passed}, attempted={self.attempted}, diagnosis={self.diagnosis!r})"


@dataclass(frozen=True)
class Bug:
    """A named mistake: its stable ``label`` and a ``hint`` template with its ``fields``."""

    label: str
    hint: str
    fields: dict = field(default_factory=dict)

    def text(self) -> str:
        return say(self.hint, **self.fields)


@dataclass(frozen=True)
class Variant:
    """A classic mistake the check computes: if the learner's answer equals it, the bugs are named.

    ``bugs`` are in the order a reader meets them in the code; the first one is the diagnosis.
    """

    bugs: tuple[Bug, ...]
    compute: Callable[..., Any]


def variant(label: str, hint: str, compute: Callable[..., Any], **fields: Any) -> Variant:
    """A one-bug :class:`Variant`."""
    return Variant((Bug(label, hint, fields),), compute)


def combinations(knobs: Sequence[Sequence[tuple[object, Bug | None]]], compute: Callable[..., Any],
                 max_bugs: int = 3) -> Iterator[Variant]:
    """Variants from independent knobs, fewest bugs first.

    Each knob lists ``(value, bug)`` options, the first one correct (``bug`` None); a variant
    calls ``compute(*case_args, *values)`` and names its bugs in the order of the knobs.
    """
    for n in range(1, max_bugs + 1):
        for choice in itertools.product(*knobs):
            bugs = tuple(b for _, b in choice if b is not None)
            if len(bugs) == n:
                yield Variant(bugs, functools.partial(_apply, compute, tuple(value for value, _ in choice)))


def _apply(compute: Callable[..., Any], values: tuple, *args: Any) -> Any:
    return compute(*args, *values)


@dataclass
class Case:
    """One input of a check: the arguments, a description, the reference output and the variants.

    ``variants`` may be a generator: it is consumed only if the learner's answer is wrong.
    ``expected`` may be a function of no arguments, called once the learner's function has returned (the
    reference then exists in no frame the learner's code could reach). ``steps`` (a list of
    :class:`gpt_lesson.checks.runner.Step`, or a function giving one) are the lesson's intermediate
    results, for a pointer to the first step that differs.
    """

    args: tuple
    description: str
    expected: Any
    variants: Iterable[Variant] = ()
    steps: Any = ()


def bug_text(bugs: Sequence[Bug]) -> str:
    """"Likely bug: ..." for the first bug, "Then also: ..." for the others."""
    text = say(MESSAGES["likely_bug"], hint=bugs[0].text()) if bugs else ""
    return text + "".join(say(MESSAGES["then_also"], hint=b.text()) for b in bugs[1:])


# ----------------------------------------------------------------------------------------------
# Verdicts


class Verdict:
    """Prints and returns the verdict of the check called ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _report(self, passed: bool, attempted: bool, label: str | None, message: str) -> CheckResult:
        print(message)
        return CheckResult(passed, attempted, label, message)

    def passed(self, text: str) -> CheckResult:
        return self._report(True, True, None, say(MESSAGES["passed"], name=self.name, text=text))

    def not_attempted(self) -> CheckResult:
        text = say(MESSAGES["stub"])
        return self._report(False, False, NOT_ATTEMPTED, say(MESSAGES["not_attempted"], name=self.name, text=text))

    def failed(self, label: str, text: str) -> CheckResult:
        # A diagnosis may name several labels ("no 4x expansion; no non-linearity"): translate each.
        shown = "; ".join(_(part) for part in label.split("; "))
        return self._report(False, True, label, say(MESSAGES["failed"], name=self.name, label=shown, text=text))

    def failed_with(self, bugs: Sequence[Bug], text: str) -> CheckResult:
        """Fail with the first of ``bugs`` as the diagnosis and every hint in the message."""
        return self.failed(bugs[0].label, text + bug_text(bugs))
