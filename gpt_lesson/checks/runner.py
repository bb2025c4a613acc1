"""The one runner behind every exercise check.

A check builds a few seeded *cases* (inputs and the reference output) and hands them, with the
learner's function, to :func:`run_cases` (tensor answers) or :func:`run_value_cases` (whole
numbers). The runner calls the learner's code safely, refuses answers of the wrong kind, names
the bug when the answer equals one of the check's *variants* (classic mistakes it computes
itself), and prints and returns a :class:`CheckResult`.

What every check gets from here:

* an untouched stub (a ``raise NotImplementedError`` of the learner's own, or ``None``) is "not
  attempted yet", never an error; a ``NotImplementedError`` raised inside torch (an operator missing
  on the meta device or on MPS) is an error like any other;
* the learner's exceptions are reported, never raised, with a likely cause where the runner can see
  one (a reduction without ``keepdim=True``, ``.T`` on a 3-D tensor, ``view`` after a transpose, ...);
  only wrong arguments to a check raise;
* the learner's function runs in a thread of its own, with a time limit (:data:`CALL_TIMEOUT`, or
  ``GPT_LESSON_CHECK_TIMEOUT`` seconds): a solution that hangs is stopped and named, in a plain Python
  session, in a Jupyter kernel and under nbgrader alike. Its frames do not reach the check's: expected
  values a check computes after the call cannot be read from the learner's code;
* it runs on copies of the arguments (tensors cloned, modules deep-copied); :func:`run_cases` and
  :func:`run_value_cases` compare the copies afterwards (a function that changes its input in place is
  named) and call the function twice (a random result, dropout left on, is named);
* a solution that calls the function the check compares with (``gpt_lesson``'s own, or the torch
  function that computes the whole answer) is refused: :class:`Forbidden` watches the learner's call
  (Python frames through :func:`sys.setprofile`, torch functions and methods through a
  ``TorchFunctionMode``);
* an exercise's own rules: every check takes ``without=`` and ``using=`` (names of :data:`RULES`,
  "softmax", "gelu", "layer_norm", "tables", "sdpa"), so a lesson that says "without F.softmax" or
  "with one call to F.scaled_dot_product_attention" has its check enforce it;
* answers of the wrong kind (complex, integer, bool, a string for a number, a subclass of ``str``
  or ``int``) are named, not converted; a ``torch.Tensor`` subclass is judged as a plain tensor, so its
  ``__torch_function__`` cannot answer the comparisons;
* a wrong answer that is none of the check's variants still gets a pointer: the dimensions in another
  order, or the first step of the lesson's computation that none of the learner's intermediate results
  matches (:class:`Step`);
* :func:`learner_check` adds ``strict=`` (raise ``AssertionError`` on failure, for nbgrader),
  ``hidden=`` (more cases), ``without=``/``using=``, and runs the check without touching the caller's
  random state.

The comparisons use torch's C functions bound at import (``torch._C._VariableFunctions``, which no
code can replace), so patching ``torch.allclose`` does not change a verdict. What a check says
(labels, message templates, :class:`CheckResult`) lives in :mod:`gpt_lesson.checks.verdicts`.
"""
from __future__ import annotations

import contextvars
import copy
import ctypes
import dis
import functools
import inspect
import itertools
import math
import os
import random
import re
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ..i18n import _
from ..runtime import one_thread
from ..validation import check_bool
from .verdicts import (
    BOOL_OUTPUT,
    CALLED_LIBRARY,
    COMPLEX_OUTPUT,
    DIMS_PERMUTED,
    FLOAT_NOT_INT,
    INPUT_MODIFIED,
    INTEGER_OUTPUT,
    MESSAGES,
    NON_FINITE,
    NOT_DETERMINISTIC,
    RAISED,
    RULE_BROKEN,
    RULE_NOT_USED,
    STEP_DIFFERS,
    TAMPERED,
    TIMED_OUT,
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
CALL_TIMEOUT = 30.0  # seconds one call of the learner's function may take (GPT_LESSON_CHECK_TIMEOUT overrides)

_MISSING = object()
# The torch namespaces whose functions and classes the checks and the references use: what an answer cell
# could replace (torch.softmax, F.softmax, Tensor.softmax, torch._C._VariableFunctions, ...) to make a
# reference agree with it. Their objects are captured once, when the checks are first imported.
_TORCH_NAMESPACES = {"torch": torch, "torch.nn.functional": F, "torch.Tensor": torch.Tensor, "torch.nn": nn,
                     "torch.special": torch.special, "torch.linalg": torch.linalg, "torch._C": torch._C}


def _static(owner: object, name: str) -> object:
    """``owner.name`` as stored (no descriptor run): the class in the MRO that holds it, or the module's dict."""
    for holder in (owner.__mro__ if isinstance(owner, type) else (owner,)):
        found = vars(holder).get(name, _MISSING)
        if found is not _MISSING:
            return found
    return _MISSING


def _torch_snapshot() -> dict[str, tuple[object, str, object, bool]]:
    """Every public callable of :data:`_TORCH_NAMESPACES`: ``{"torch.softmax": (owner, name, object, own)}``,
    ``own`` telling whether the owner itself holds it (not a base class)."""
    snapshot = {}
    for label, owner in _TORCH_NAMESPACES.items():
        names = ({n for k in owner.__mro__ for n in vars(k)} if isinstance(owner, type) else set(vars(owner)))
        for name in names:
            if name.startswith("__"):
                continue
            obj = _static(owner, name)
            if callable(obj) or isinstance(obj, (staticmethod, classmethod)) or name == "_VariableFunctions":
                own = name in vars(owner)
                snapshot[f"{label}.{name}"] = (owner, name, obj, own)
    return snapshot


def _first_snapshot() -> dict[str, tuple[object, str, object, bool]]:
    """The snapshot of the first import of this module; a fresh copy (:func:`fresh_checks`) inherits it, so it
    compares with torch as it was before any answer cell ran, not as it is when the copy is made."""
    first = sys.modules.get(f"{__name__.split('.')[0]}.checks.runner")
    bound = vars(first).get("_TORCH_AT_IMPORT") if first is not None else None
    same_file = getattr(first, "__file__", None) == __file__
    return bound if same_file and isinstance(bound, dict) and bound else _torch_snapshot()


_TORCH_AT_IMPORT = _first_snapshot()


def torch_replacements() -> list[str]:
    """Names of torch (``torch.softmax``, ``torch.nn.functional.softmax``, ``torch.Tensor.softmax``,
    ``torch._C._VariableFunctions``) that hold another object than when the checks were first imported."""
    return [name for name, (owner, attr, obj, _) in _TORCH_AT_IMPORT.items()
            if (now := _static(owner, attr)) is not obj and not _torch_made(now, obj)]


def _torch_made(now: object, then: object) -> bool:
    """Whether ``now``, found where ``then`` was, is torch's own change (torch._dynamo wraps torch.manual_seed
    when it is first imported): a Python function whose code (not what it wraps) is in torch's folder, or the
    builtin of the same name."""
    code = getattr(now, "__code__", None)
    if isinstance(code, CodeType):
        return os.path.abspath(code.co_filename).startswith(_TORCH_DIR + os.sep)
    if isinstance(now, (types.BuiltinFunctionType, types.MethodDescriptorType)):
        return getattr(now, "__name__", None) == getattr(then, "__name__", "")
    return False


def _restore_torch(names: Iterable[str]) -> None:
    """Put back what :func:`torch_replacements` found (an answer that patched torch while it was checked)."""
    for name in names:
        owner, attr, obj, own = _TORCH_AT_IMPORT[name]
        if own:
            setattr(owner, attr, obj)
        elif attr in vars(owner):
            delattr(owner, attr)


# Bound at import, from torch's C extension types (immutable: no assignment can replace their functions),
# taken from the first import's snapshot: a fresh copy made after torch._C._VariableFunctions was replaced
# still compares with the real one.
_VF = _TORCH_AT_IMPORT["torch._C._VariableFunctions"][2]
_TB = _TORCH_AT_IMPORT["torch._C.TensorBase"][2]
_NO_TORCH_FUNCTION = _TORCH_AT_IMPORT["torch._C.DisableTorchFunction"][2]
_PLAIN_TENSOR = _TORCH_AT_IMPORT["torch.Tensor"][2] if "torch.Tensor" in _TORCH_AT_IMPORT else torch.Tensor
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_CHECKS_DIR = Path(__file__).resolve().parent
_PACKAGE_DIR = _CHECKS_DIR.parent
_fresh_copies = itertools.count(1)


# ----------------------------------------------------------------------------------------------
# What the learner's code must not call, and the exercises' own rules


class Forbidden:
    """Functions the learner's code must not call: each the whole answer a check compares with.

    Give functions, methods or classes (every method defined in the class counts) with the name a
    message shows. While :meth:`watch` is active, :func:`sys.setprofile` sees every Python frame
    entered (code objects compare by content, so a fresh copy of the same module is recognised too)
    and every C function called, and a ``TorchFunctionMode`` sees every torch function and tensor
    method; the first forbidden one is remembered in ``hit``.
    """

    def __init__(self, entries: dict[object, str]) -> None:
        self.codes: dict[CodeType, str] = {}
        self.builtins: list[tuple[object, str]] = []
        self.torch_functions: dict[object, str] = {}
        self.merge(entries)
        self.hit: str | None = None

    def merge(self, entries: dict[object, str]) -> Forbidden:
        for obj, name in entries.items():
            codes = _code_objects(obj)
            for code in codes:
                self.codes.setdefault(code, name)
            if not codes and callable(obj):
                self.builtins.append((obj, name))
                try:
                    self.torch_functions.setdefault(obj, name)
                except TypeError:  # an unhashable callable: found by identity among the builtins only
                    pass
        return self

    def __bool__(self) -> bool:
        return bool(self.codes or self.builtins)

    @contextmanager
    def watch(self) -> Iterator[None]:
        """Watch the current thread (kept for checks that call the learner's code themselves)."""
        tracker = _Tracker(self, (), record=False)
        with tracker.active(sys.getprofile()):
            yield
        self.hit = tracker.library


def _code_objects(obj: object) -> list[CodeType]:
    if inspect.isclass(obj):
        return [code for member in vars(obj).values() for code in _code_objects(member)]
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        return [c for f in (obj.fget, obj.fset) if f is not None for c in _code_objects(f)]
    code = getattr(inspect.unwrap(obj), "__code__", None) if callable(obj) else None
    return [code] if isinstance(code, CodeType) else []


def _rule_codes(obj: object) -> list[CodeType]:
    """What counts as using ``obj`` for a rule: a class by its ``forward`` (printing a module is not using it)."""
    return _code_objects(obj.forward) if inspect.isclass(obj) and hasattr(obj, "forward") else _code_objects(obj)


def _is_parameter_lookup(func: object, args: tuple, kwargs: dict) -> str | None:
    """Rows of an embedding table picked by token ids (``weight[idx]``, ``index_select``): the table's lookup."""
    if func in (_TB.__getitem__, torch.Tensor.__getitem__) and len(args) == 2:
        table, index = args
        indices = index if isinstance(index, tuple) else (index,)
        picks = any(isinstance(i, torch.Tensor) and not i.is_floating_point() and i.dtype != torch.bool
                    for i in indices)
        if isinstance(table, nn.Parameter) and picks:
            return "weight[idx]"
    if func in (torch.index_select, torch.Tensor.index_select, torch.take, torch.Tensor.take, torch.gather,
                torch.Tensor.gather) and args and isinstance(args[0], nn.Parameter):
        return getattr(func, "__name__", "index_select")
    return None


@dataclass(frozen=True)
class Rule:
    """An exercise's rule: ``shown`` in messages, the functions it covers, and an optional predicate."""

    shown: str
    entries: dict
    predicate: Callable[[object, tuple, dict], str | None] | None = None


RULES: dict[str, Rule] = {
    "softmax": Rule("F.softmax or torch.softmax", {
        F.softmax: "F.softmax", torch.softmax: "torch.softmax", torch.Tensor.softmax: "Tensor.softmax",
        torch.special.softmax: "torch.special.softmax", torch._softmax: "torch._softmax",
        F.log_softmax: "F.log_softmax", torch.log_softmax: "torch.log_softmax",
        torch.Tensor.log_softmax: "Tensor.log_softmax", torch.special.log_softmax: "torch.special.log_softmax",
        F.softmin: "F.softmin", F.gumbel_softmax: "F.gumbel_softmax", nn.Softmax: "nn.Softmax",
        nn.LogSoftmax: "nn.LogSoftmax", nn.Softmin: "nn.Softmin"}),
    "gelu": Rule("F.gelu or nn.GELU", {F.gelu: "F.gelu", nn.GELU: "nn.GELU"}),
    "layer_norm": Rule("F.layer_norm or nn.LayerNorm", {
        F.layer_norm: "F.layer_norm", torch.layer_norm: "torch.layer_norm",
        torch.native_layer_norm: "torch.native_layer_norm", nn.LayerNorm: "nn.LayerNorm",
        F.group_norm: "F.group_norm", torch.group_norm: "torch.group_norm", nn.GroupNorm: "nn.GroupNorm",
        F.batch_norm: "F.batch_norm", torch.batch_norm: "torch.batch_norm", F.instance_norm: "F.instance_norm",
        torch.instance_norm: "torch.instance_norm"}),
    "tables": Rule("calling the tables (nn.Embedding, F.embedding, weight[idx])", {
        nn.Embedding: "nn.Embedding", F.embedding: "F.embedding", torch.embedding: "torch.embedding"},
        _is_parameter_lookup),
    "sdpa": Rule("F.scaled_dot_product_attention", {
        F.scaled_dot_product_attention: "F.scaled_dot_product_attention",
        F.multi_head_attention_forward: "F.multi_head_attention_forward", nn.MultiheadAttention: "nn.MultiheadAttention"}),
}


@dataclass(frozen=True)
class Rules:
    """What the current check's exercise rules out (``without``) and asks for (``using``)."""

    without: tuple[str, ...] = ()
    using: tuple[str, ...] = ()


_NO_RULES = Rules()
_RULES: contextvars.ContextVar[Rules] = contextvars.ContextVar("gpt_lesson_check_rules", default=_NO_RULES)


def _rule_names(check: str, argument: str, value: object) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, (list, tuple, set)) else None
    if names is None or not all(isinstance(n, str) for n in names):
        raise TypeError(f"{check}(): {argument}= takes a rule name or a list of them (one of {sorted(RULES)}), "
                        f"got {value!r:.60}")
    unknown = [n for n in names if n not in RULES]
    if unknown:
        raise ValueError(f"{check}(): {argument}={value!r} names no rule: each must be one of {sorted(RULES)}")
    return names


@contextmanager
def exercise_rules(without: str | Sequence[str] = (), using: str | Sequence[str] = ()) -> Iterator[None]:
    """Add rules for the checks run inside (``without``/``using`` as :func:`learner_check` takes them)."""
    current = _RULES.get()
    token = _RULES.set(Rules(current.without + _rule_names("exercise_rules", "without", without),
                             current.using + _rule_names("exercise_rules", "using", using)))
    try:
        yield
    finally:
        _RULES.reset(token)


# ----------------------------------------------------------------------------------------------
# Watching the learner's call: forbidden functions, rules, intermediate results


_REDUCTIONS = {"amax", "amin", "max", "min", "sum", "mean", "var", "std", "logsumexp", "prod", "norm", "median"}


class _Tracker(TorchFunctionMode):
    """Watches one call of the learner's function, in the thread it runs in.

    Through :func:`sys.setprofile`: the Python functions entered (forbidden ones are remembered). Through
    the ``TorchFunctionMode``: every torch function and tensor method (forbidden ones, the exercise's
    rules, and, when ``record`` is set, every floating-point tensor produced, for :class:`Step` pointers);
    also the things a hint can name: ``.T`` on a tensor that is not 2-D, a reduction without keepdim.
    """

    def __init__(self, forbidden: Forbidden | None, rules: Iterable[tuple[str, Rule, bool]], record: bool,
                 observe: Callable[[Any], str | None] | None = None) -> None:
        super().__init__()
        self.observe = observe
        self.observed: str | None = None
        self.forbidden = forbidden
        self.rules = list(rules)  # (name, rule, required)
        self.rule_codes = {code: (name, shown) for name, rule, required in self.rules if not required
                           for obj, shown in rule.entries.items() for code in _rule_codes(obj)}
        self.rule_functions = {}
        self.required_functions = {}
        self.required_codes = {}
        for name, rule, required in self.rules:
            target = self.required_functions if required else self.rule_functions
            for obj, shown in rule.entries.items():
                if not _code_objects(obj):
                    target[obj] = (name, shown)
                elif required:
                    for code in _rule_codes(obj):
                        self.required_codes[code] = name
        self.record = record
        self.library: str | None = None
        self.broken: tuple[str, str] | None = None  # (rule, the function called)
        self.used: set[str] = set()
        self.recorded: list[torch.Tensor] = []
        self.transposed_3d: tuple[int, tuple, tuple] | None = None
        self.reductions: list[tuple[str, tuple, tuple]] = []  # (call, input shape, output shape) without keepdim

    # --- the profiler: Python frames
    def _profile(self, frame, event, arg) -> None:  # noqa: ANN001 - the profiler protocol
        if event == "call":
            code = frame.f_code
            if self.library is None and self.forbidden is not None:
                self.library = self.forbidden.codes.get(code)
            if self.broken is None and code in self.rule_codes:
                name, shown = self.rule_codes[code]
                self.broken = (name, shown)
            if code in self.required_codes:
                self.used.add(self.required_codes[code])
            if self.observe is not None and self.observed is None:
                self.observed = self.observe(frame)
        elif event == "c_call" and self.library is None and self.forbidden is not None:
            self.library = next((name for obj, name in self.forbidden.builtins if arg is obj), None)

    @contextmanager
    def active(self, previous: Callable | None) -> Iterator[None]:
        """Profile and track the current thread; ``previous`` (a Python profiler already running) keeps its events."""
        chained = previous if inspect.isfunction(previous) or inspect.ismethod(previous) else None

        def profiler(frame, event, arg):  # noqa: ANN001 - the profiler protocol
            if chained is not None:
                chained(frame, event, arg)
            self._profile(frame, event, arg)

        before = sys.getprofile()
        sys.setprofile(profiler)
        try:
            with self:
                yield
        finally:
            sys.setprofile(before)

    # --- the mode: torch functions and tensor methods
    def _lookup(self, table: dict, func: object):
        try:
            return table.get(func)
        except TypeError:  # an unhashable callable (a method-wrapper): compare by equality
            return next((v for k, v in table.items() if k == func), None)

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - the mode protocol
        kwargs = kwargs or {}
        if self.library is None and self.forbidden is not None:
            self.library = self._lookup(self.forbidden.torch_functions, func)
        if self.broken is None:
            found = self._lookup(self.rule_functions, func)
            if found is None:
                for name, rule, required in self.rules:
                    shown = rule.predicate(func, args, kwargs) if rule.predicate and not required else None
                    if shown:
                        found = (name, shown)
                        break
            self.broken = found
        required = self._lookup(self.required_functions, func)
        if required is not None:
            self.used.add(required[0])
        out = func(*args, **kwargs)
        self._note(func, args, kwargs, out)
        return out

    def _note(self, func: object, args: tuple, kwargs: dict, out: object) -> None:
        owner = getattr(func, "__self__", None)
        if self.transposed_3d is None and owner is _TB.__dict__.get("T") and args and isinstance(args[0], torch.Tensor):
            t = args[0]
            if t.dim() > 2:
                self.transposed_3d = (t.dim(), tuple(t.shape), tuple(reversed(t.shape)))
        name = getattr(func, "__name__", "")
        if name in _REDUCTIONS and args and isinstance(args[0], torch.Tensor) and not kwargs.get("keepdim"):
            dim = kwargs.get("dim", args[1] if len(args) > 1 and isinstance(args[1], int) else None)
            result = out[0] if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor) else out
            if isinstance(dim, int) and isinstance(result, torch.Tensor) and result.dim() == args[0].dim() - 1:
                shown = f"{name}(dim={dim})"
                self.reductions.append((shown, tuple(args[0].shape), tuple(result.shape), dim))
        if self.record and len(self.recorded) < 2000:
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.layout == torch.strided \
                        and t.numel() <= 1 << 16 and t.device.type != "meta":
                    self.recorded.append(_TB.clone(_TB.detach(t)))


# ----------------------------------------------------------------------------------------------
# Calling the learner's code


@dataclass
class Outcome:
    """What the learner's call gave: a ``value``, an ``error``, a stub, or a forbidden ``library`` call.

    Also: the exercise ``rule`` it broke ((rule, function)) or did not follow (``missing``), the
    arguments it ``changed`` in place (their names), whether it ``timed_out``, and what a hint can use.
    """

    value: Any = None
    error: Exception | None = None
    stub: bool = False
    library: str | None = None
    rule: tuple[str, str] | None = None
    missing: str | None = None
    changed: list[str] = field(default_factory=list)
    changed_modules: bool = False
    timed_out: float | None = None
    observed: str | None = None
    recorded: list = field(default_factory=list)
    transposed_3d: tuple | None = None
    reductions: list = field(default_factory=list)


class _Stopped(BaseException):
    """Raised inside a learner's call that ran out of time (not an Exception: the learner's code does not catch it)."""


def call_timeout() -> float:
    """Seconds one call of the learner's function may take: ``GPT_LESSON_CHECK_TIMEOUT`` or :data:`CALL_TIMEOUT`."""
    text = os.environ.get("GPT_LESSON_CHECK_TIMEOUT", "")
    try:
        value = float(text) if text.strip() else CALL_TIMEOUT
    except ValueError:
        value = CALL_TIMEOUT
    return value if math.isfinite(value) and value > 0 else CALL_TIMEOUT


def _stop_thread(thread: threading.Thread) -> None:
    """Raise :class:`_Stopped` in ``thread`` at its next bytecode (CPython; elsewhere the thread runs on)."""
    try:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(_Stopped))
    except (AttributeError, TypeError, ValueError):  # not CPython
        pass


def _in_own_thread(target: Callable[[], Any], timeout: float) -> tuple[str, Any]:
    """``("value", v)``, ``("error", e)`` or ``("timeout", None)`` for ``target()`` run in a new thread.

    The thread's stack starts empty, so the learner's code cannot walk up into the check's frames. It
    runs in a copy of the caller's context (a Jupyter kernel routes its output to the running cell).
    """
    box: dict[str, Any] = {}
    context = contextvars.copy_context()

    def main() -> None:
        try:
            try:
                box["value"] = context.run(target)
            except BaseException as e:  # noqa: BLE001 - everything the learner's code raises is reported
                box["error"] = e
        except BaseException:  # noqa: BLE001 - a stop that arrived while the error was stored
            box.setdefault("error", _Stopped())

    thread = threading.Thread(target=main, name="gpt-lesson check", daemon=True)
    thread.start()
    try:
        thread.join(timeout)
    except KeyboardInterrupt:  # the learner interrupted the kernel: stop the call too, then let it through
        _stop_thread(thread)
        thread.join(1.0)
        raise
    if thread.is_alive():
        _stop_thread(thread)
        thread.join(2.0)
        return "timeout", None
    if isinstance(box.get("error"), _Stopped):
        return "timeout", None
    return ("error", box["error"]) if "error" in box else ("value", box.get("value"))


def clone_args(args: tuple) -> tuple:
    """Fresh copies of the arguments: tensors cloned, modules deep-copied, generators copied with their state,
    lists/tuples/dicts of them copied."""
    return tuple(_copy(a) for a in args)


def _copy(a: object) -> object:
    if isinstance(a, torch.Tensor):
        return a.clone()
    if isinstance(a, torch.Generator):  # the same draws on every call: sampling with it is reproducible
        twin = torch.Generator(device=a.device)
        twin.set_state(a.get_state())
        return twin
    if isinstance(a, nn.Module):
        return copy.deepcopy(a)
    if isinstance(a, (list, tuple)) and any(isinstance(x, (torch.Tensor, nn.Module, list, tuple, dict)) for x in a):
        return type(a)(_copy(x) for x in a) if not hasattr(a, "_fields") else type(a)(*(_copy(x) for x in a))
    if isinstance(a, dict) and any(isinstance(x, (torch.Tensor, nn.Module)) for x in a.values()):
        return {k: _copy(v) for k, v in a.items()}
    return a


def _same(a: object, b: object) -> bool:
    """Whether the copy ``b`` still equals the original ``a``: values, modes and parameters of modules."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
                and bool(_VF.equal(a, b) or _VF.allclose(a, b, rtol=0.0, atol=0.0, equal_nan=True)))
    if isinstance(a, nn.Module):
        if not isinstance(b, nn.Module) or [m.training for m in a.modules()] != [m.training for m in b.modules()]:
            return False
        sa, sb = a.state_dict(), b.state_dict()
        return list(sa) == list(sb) and all(_same(sa[k], sb[k]) for k in sa)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and any(isinstance(x, (torch.Tensor, nn.Module)) for x in a.values()):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return True


def _parameter_names(fn: Callable, count: int) -> list[str]:
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"#{i + 1}" for i in range(count)]


def _raised_by_a_stub(error: BaseException) -> bool:
    """A NotImplementedError raised by a ``raise`` statement of the learner's code (not inside torch)."""
    tb = error.__traceback__
    if tb is None:
        return True
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if os.path.abspath(code.co_filename).startswith(_TORCH_DIR):
        return False
    op = next((i.opname for i in dis.get_instructions(code) if i.offset == tb.tb_lasti), "RAISE_VARARGS")
    return op in ("RAISE_VARARGS", "RERAISE")


def _plain(value: object) -> object:
    """A returned tensor as a plain ``torch.Tensor`` (a subclass's ``__torch_function__`` cannot answer for it)."""
    if isinstance(value, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            plain = _TB.as_subclass(value, _PLAIN_TENSOR) if type(value) is not _PLAIN_TENSOR else value
            return _TB.clone(_TB.detach(plain)) if plain.device.type != "meta" else _TB.detach(plain)
    if type(value) is tuple:
        return tuple(_plain(v) for v in value)
    return value


def call(fn: Callable, args: tuple, forbidden: Forbidden | None = None, *, record: bool = False,
         observe: Callable[[Any], str | None] | None = None) -> Outcome:
    """Run the learner's ``fn(*args)`` on copies of the arguments (no autograd), catching what it raises.

    The call runs in its own thread with a time limit, watched for forbidden functions and for the
    current exercise's rules; ``record=True`` also keeps its intermediate tensors (for :class:`Step`);
    ``observe(frame)`` sees every Python frame the call enters (its first answer that is not None is
    ``Outcome.observed``).
    """
    rules = _RULES.get()
    active = [(n, RULES[n], False) for n in rules.without] + [(n, RULES[n], True) for n in rules.using]
    copies = clone_args(args)
    tracker = _Tracker(forbidden, active, record, observe)
    caller_profiler = sys.getprofile()

    def run() -> Any:
        with torch.no_grad(), tracker.active(caller_profiler):
            return fn(*copies)

    timeout = call_timeout()
    kind, result = _in_own_thread(run, timeout)
    outcome = Outcome(library=tracker.library, recorded=tracker.recorded, transposed_3d=tracker.transposed_3d,
                      reductions=tracker.reductions, observed=tracker.observed)
    if tracker.broken is not None:
        outcome.rule = tracker.broken
    if kind == "timeout":
        outcome.timed_out = timeout
        outcome.error = TimeoutError(say(MESSAGES["timed_out"], seconds=timeout))
        return outcome
    if kind == "error":
        if isinstance(result, NotImplementedError) and _raised_by_a_stub(result) and outcome.library is None:
            outcome.stub = True
            return outcome
        if not isinstance(result, Exception):  # SystemExit, KeyboardInterrupt raised by the learner's code
            result = RuntimeError(f"{type(result).__name__}: {result}")
        outcome.error = result
        return outcome
    outcome.value = _plain(result)
    outcome.stub = result is None
    missing = [n for n in rules.using if n not in tracker.used]
    outcome.missing = missing[0] if missing else None
    changed = [i for i, (a, b) in enumerate(zip(args, copies)) if not _same(a, b)]
    outcome.changed = [name for i, name in enumerate(_parameter_names(fn, len(args))) if i in changed]
    outcome.changed_modules = any(isinstance(args[i], nn.Module) for i in changed)
    return outcome


# Likely causes every check can name, from the error's text and what the call did.
_GENERIC_HINTS = [
    ("view size is not compatible", "hint_contiguous"),
    ("torch.return_types", "hint_max_pair"),
    ("must be tuple of ints, but found element of type float", "hint_float_size"),
    ("type must be tuple of ints,but got float", "hint_float_size"),
    ("received an invalid combination of arguments", None),
    ("expected m1 and m2 to have the same dtype", "hint_dtype"),
    ("expected scalar type", "hint_dtype"),
    ("must have the same dtype", "hint_dtype"),
    ("cannot assign module before Module.__init__() call", "hint_super_init"),
    ("cannot assign parameter before Module.__init__() call", "hint_super_init"),
    ("object has no attribute '_modules'", "hint_super_init"),
    ("missing the required \"forward\" function", "hint_forward"),
    ("maximum recursion depth exceeded", "hint_recursion"),
]


def _seen_cause(error: BaseException, outcome: Outcome | None) -> str | None:
    """A likely cause the call itself showed: ``.T`` on a tensor that is not 2-D, a reduction without keepdim."""
    if outcome is None:
        return None
    if outcome.transposed_3d is not None:
        ndim, before, after = outcome.transposed_3d
        return say(MESSAGES["hint_3d_T"], ndim=ndim, before=before, after=after)
    m = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", str(error))
    if outcome.reductions and m:
        sizes = {int(m.group(1)), int(m.group(2))}
        for shown, shape, got, dim in outcome.reductions:
            # Broadcasting the reduced tensor against its input clashes exactly where the error says: keepdim.
            padded = (1,) * (len(shape) - len(got)) + tuple(got)
            clashes = [{a, b} for a, b in zip(shape, padded) if a != b and 1 not in (a, b)]
            if sizes in clashes:
                kept = tuple(1 if i == dim % len(shape) else s for i, s in enumerate(shape))
                return say(MESSAGES["hint_keepdim"], call=shown, got=got, shape=shape, kept=kept)
    return None


def _generic_hint(error: BaseException) -> str | None:
    text = str(error)
    for fragment, key in _GENERIC_HINTS:
        if fragment in text and key is not None:
            return say(MESSAGES[key])
    m = re.search(r"takes (\d+) positional arguments? but (\d+) (?:were|was) given", text)
    if m:
        return say(MESSAGES["hint_arguments"], count=int(m.group(2)) - ("self" in text))
    if isinstance(error, NameError):
        return say(MESSAGES["hint_name"], detail=text)
    return None


def exception_text(error: BaseException, hints: Sequence[tuple[str, str]] = (), outcome: Outcome | None = None) -> str:
    """The learner's exception with a likely cause: what the call showed (``.T`` on a 3-D tensor, a reduction
    without keepdim), else the first of the check's ``hints`` whose fragment is in the error's text, else one of
    the causes every check knows."""
    text = say(MESSAGES["raised"], error=type(error).__name__, detail=error)
    cause = _seen_cause(error, outcome)
    if cause is None:
        cause = next((_(hint) for fragment, hint in hints if fragment in str(error)), None)
    if cause is None:
        cause = _generic_hint(error)
    return text + say(MESSAGES["likely_cause"], hint=cause) if cause else text


def screen(verdict: Verdict, outcome: Outcome, where: str = "", hints: Sequence[tuple[str, str]] = (),
           *, pure: bool = False) -> CheckResult | None:
    """The verdict for a stub, a forbidden call, a broken rule, an exception, a time-out, or (``pure``) a changed
    argument; None when there is a value to judge."""
    if outcome.library is not None:
        template = "called_gpt_lesson" if outcome.library.startswith("gpt_lesson") else "called_torch"
        return verdict.failed(CALLED_LIBRARY, where + say(MESSAGES[template], function=outcome.library))
    if outcome.rule is not None:
        name, function = outcome.rule
        return verdict.failed(RULE_BROKEN, where + say(MESSAGES["rule_broken"], rule=RULES[name].shown,
                                                       function=function))
    if outcome.stub:
        return verdict.not_attempted()
    if outcome.timed_out is not None:
        return verdict.failed(TIMED_OUT, where + say(MESSAGES["timed_out"], seconds=outcome.timed_out))
    if outcome.error is not None:
        return verdict.failed(RAISED, where + exception_text(outcome.error, hints, outcome))
    if outcome.missing is not None:
        return verdict.failed(RULE_NOT_USED, where + say(MESSAGES["rule_not_used"], rule=RULES[outcome.missing].shown))
    if pure and outcome.changed:
        what = say(MESSAGES["what_module" if outcome.changed_modules else "what_tensor"])
        return verdict.failed(INPUT_MODIFIED, where + say(MESSAGES["input_modified"],
                                                          names=", ".join(outcome.changed), what=what))
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
    if out.layout != torch.strided or out.device.type == "meta":
        kind = say(MESSAGES["kind_layout"], layout=out.layout if out.layout != torch.strided else out.device)
        return WRONG_TYPE, say(MESSAGES["not_tensor"], kind=kind, shape=shape)
    return None


def _comparable(t: object) -> bool:
    return isinstance(t, torch.Tensor) and t.layout == torch.strided and t.device.type not in ("meta",)


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape and equal values (float64, NaN equal to NaN) within the checks' tolerance."""
    if not (_comparable(a) and _comparable(b)) or tuple(a.shape) != tuple(b.shape):
        return False
    with _NO_TORCH_FUNCTION():
        if a.is_complex() or b.is_complex():
            return bool(_VF.allclose(_TB.to(a, torch.complex128), _TB.to(b, torch.complex128), rtol=_RTOL,
                                     atol=_ATOL, equal_nan=True))
        return bool(_VF.allclose(_TB.double(a), _TB.double(b), rtol=_RTOL, atol=_ATOL, equal_nan=True))


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


def permuted_dims(out: torch.Tensor, expected: torch.Tensor) -> tuple[int, ...] | None:
    """The permutation of ``out``'s dimensions (not the identity) that gives ``expected``, if one does."""
    if out.dim() != expected.dim() or not 2 <= out.dim() <= 4 or sorted(out.shape) != sorted(expected.shape):
        return None
    for perm in itertools.permutations(range(out.dim())):
        if perm != tuple(range(out.dim())) and tuple(out.shape[p] for p in perm) == tuple(expected.shape):
            if close(out.permute(perm), expected):
                return perm
    return None


@dataclass
class Step:
    """One step of the lesson's computation for a case: a ``name`` for messages and its output ``value``.

    A check that gives its cases ``steps`` (in order) gets, for a wrong answer no variant explains, the
    first step that none of the learner's intermediate results matches.
    """

    name: str
    value: torch.Tensor


def first_differing_step(steps: Sequence[Step], recorded: Sequence[torch.Tensor],
                         result: torch.Tensor | None = None) -> str | None:
    """"Your steps agree with the lesson's up to X; Y differs ..." from the learner's intermediate results.

    With the expected ``result``: when one of the learner's intermediate results equals it, what came after
    changed a right answer, and that is what the text says.
    """
    if result is not None and any(close(t, result) for t in recorded if tuple(t.shape) == tuple(result.shape)):
        return say(MESSAGES["after_result"])
    if not steps:
        return None
    found = [any(close(t, s.value) for t in recorded if tuple(t.shape) == tuple(s.value.shape)) for s in steps]
    last = max((i for i, ok in enumerate(found) if ok), default=-1)
    if last == len(steps) - 1:
        return say(MESSAGES["after_steps"], last=_(steps[last].name))
    step = steps[last + 1]
    steps_ok = say(MESSAGES["steps_ok"], last=_(steps[last].name)) if last >= 0 else ""
    same_shape = [t for t in recorded if tuple(t.shape) == tuple(step.value.shape)]
    expected = fmt_row(step.value)
    if not same_shape:
        return say(MESSAGES["step_differs_none"], steps_ok=steps_ok, step=_(step.name), expected=expected)
    with _NO_TORCH_FUNCTION():
        closest = min(same_shape, key=lambda t: float((t.double() - step.value.double()).nan_to_num(nan=1e30)
                                                     .abs().max()))
    return say(MESSAGES["step_differs"], steps_ok=steps_ok, step=_(step.name), expected=expected,
               closest=fmt_row(closest))


Diagnose = Callable[[torch.Tensor, Case], Sequence[Bug] | None]
OnError = Callable[[Exception, Case], Sequence[Bug] | None]


def resolve(value: Any) -> Any:
    """A case's expected value or steps: given as is, or as a function computed once the learner's call is over."""
    return value() if callable(value) and not isinstance(value, (torch.Tensor, nn.Module)) else value


def judge_tensor(verdict: Verdict, out: object, case: Case, where: str,
                 diagnose: Diagnose | None = None, outcome: Outcome | None = None,
                 recorded: Callable[[], Sequence[torch.Tensor]] | None = None) -> CheckResult | None:
    """The verdict on one tensor answer; None when it equals the reference.

    ``recorded()`` gives the learner's intermediate results (the call run again with ``record=True``), asked
    for only when the answer is wrong and no variant explains it.
    """
    case.expected = resolve(case.expected)
    problem = tensor_kind_problem(out, tuple(case.expected.shape))
    if problem is not None:
        return verdict.failed(problem[0], where + problem[1])
    out = out.detach()
    if close(out, case.expected):
        return None
    found = match_variant(out, case)
    hint = ""
    if outcome is not None and outcome.transposed_3d is not None:
        ndim, before, after = outcome.transposed_3d
        hint = say(MESSAGES["likely_cause"], hint=say(MESSAGES["hint_3d_T"], ndim=ndim, before=before, after=after))
    if found is not None:
        return verdict.failed_with(found.bugs, where + expected_got(case.expected, out) + hint)
    same_shape = out.shape == case.expected.shape
    non_finite = not torch.isfinite(out).all() and torch.isfinite(case.expected).all()
    bugs = diagnose(out, case) if diagnose is not None and same_shape and not non_finite else None
    if bugs:
        return verdict.failed_with(bugs, where + expected_got(case.expected, out) + hint)
    perm = permuted_dims(out, case.expected)
    if perm is not None:
        return verdict.failed(DIMS_PERMUTED, where + say(MESSAGES["dims_permuted"], got=tuple(out.shape),
                                                         expected=tuple(case.expected.shape)) + hint)
    if not same_shape:
        return verdict.failed(WRONG_SHAPE, where + say(MESSAGES["wrong_shape"], expected=tuple(case.expected.shape),
                                                       got=tuple(out.shape)) + hint)
    if non_finite:
        return verdict.failed(NON_FINITE, where + expected_got(case.expected, out) + say(MESSAGES["non_finite"]))
    diff = (out.double() - case.expected.double()).abs().max().item()
    steps = resolve(getattr(case, "steps", ()))
    intermediates = outcome.recorded if outcome is not None and outcome.recorded else (
        recorded() if recorded is not None and steps else ())
    pointer = first_differing_step(steps, intermediates, case.expected) if steps else None
    if pointer is not None:
        return verdict.failed(STEP_DIFFERS, where + pointer + "\n" + expected_got(case.expected, out) + hint
                              + say(MESSAGES["largest_difference_only"], diff=diff))
    return verdict.failed(WRONG_VALUES, where + expected_got(case.expected, out) + hint
                          + say(MESSAGES["largest_difference"], diff=diff))


def _differs(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return _comparable(a) and _comparable(b) and not close(a, b)
    try:
        return bool(a != b) if type(a) is type(b) and isinstance(a, (int, float, str)) else False
    except Exception:
        return False


def run_cases(verdict: Verdict, fn: Callable, cases: Iterable[Case], *, success: str,
              forbidden: Forbidden | None = None, hints: Sequence[tuple[str, str]] = (),
              diagnose: Diagnose | None = None, on_error: OnError | None = None, pure: bool = True,
              twice: bool = True) -> CheckResult:
    """Run ``fn`` on every case; the first case that fails decides the verdict.

    ``diagnose(out, case)`` may name bugs the variants do not cover; ``on_error(error, case)`` may
    name the bug behind an exception (it may run the learner's function again on other inputs). A
    case's ``expected`` (and ``steps``) may be a function: it is computed after the learner's call.
    ``pure`` (default) fails a function that changes its arguments in place; ``twice`` (default) calls it
    a second time and fails a different result.
    """
    for i, case in enumerate(cases):
        where = say(MESSAGES["on_case"], description=case.description) if i else ""
        outcome = call(fn, case.args, forbidden)
        if outcome.error is not None and outcome.library is None and outcome.rule is None and on_error is not None \
                and outcome.timed_out is None:
            bugs = on_error(outcome.error, case)
            if bugs:
                return verdict.failed_with(bugs, where + exception_text(outcome.error))
        early = screen(verdict, outcome, where, hints, pure=pure)
        if early is not None:
            return early
        if twice:
            again = call(fn, case.args, forbidden)
            early = screen(verdict, again, where, hints, pure=pure)
            if early is not None:
                return early
            if _differs(outcome.value, again.value):
                return verdict.failed(NOT_DETERMINISTIC, where + say(MESSAGES["not_deterministic"]))
        result = judge_tensor(verdict, outcome.value, case, where, diagnose, outcome,
                              recorded=lambda case=case: call(fn, case.args, forbidden, record=True).recorded)
        if result is not None:
            return result
    return verdict.passed(success)


# ----------------------------------------------------------------------------------------------
# Judging whole numbers (lesson 12's arithmetic, parameter counts)


def is_whole_number(value: object) -> bool:
    """An ``int`` or a NumPy integer: exactly those types (a bool, or a subclass of int with its own ``==``, is not)."""
    if type(value) is int:
        return True
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.integer)


def int_kind_problem(got: object, args_text: str) -> tuple[str, str] | None:
    """A label and text when ``got`` is not a whole number (an int or a NumPy integer)."""
    if isinstance(got, bool):
        return WRONG_TYPE, say(MESSAGES["value_bool"], args=args_text, got=got)
    if is_whole_number(got):
        return None
    if isinstance(got, float):
        return FLOAT_NOT_INT, say(MESSAGES["value_float"], args=args_text, got=got)
    if isinstance(got, str):
        return WRONG_TYPE, say(MESSAGES["value_str"], args=args_text, got=str.__str__(got))
    shape = getattr(got, "shape", None)
    if shape is not None:
        return WRONG_TYPE, say(MESSAGES["value_array"], args=args_text, kind=kind_of(got), shape=tuple(shape))
    return WRONG_TYPE, say(MESSAGES["value_other"], args=args_text, kind=kind_of(got))


def whole(value: object) -> int:
    """A whole number (see :func:`is_whole_number`) as a Python int, without calling anything it defines."""
    return int.__index__(value) if type(value) is int else int(value)


def run_value_cases(verdict: Verdict, fn: Callable, cases: Sequence[tuple[tuple, int]], *,
                    diagnose: Callable[[tuple, int], Bug | None], forbidden: Forbidden | None = None,
                    describe: Callable[[tuple], str] = repr, pure: bool = True, twice: bool = True) -> CheckResult:
    """Run ``fn`` on ``(args, expected)`` cases whose answer is one whole number."""
    for args, expected in cases:
        outcome = call(fn, args, forbidden)
        early = screen(verdict, outcome, pure=pure)
        if early is not None:
            return early
        args_text = describe(args)
        problem = int_kind_problem(outcome.value, args_text)
        if problem is not None:
            return verdict.failed(*problem)
        got = whole(outcome.value)
        if twice:
            again = call(fn, args, forbidden)
            early = screen(verdict, again, pure=pure)
            if early is not None:
                return early
            if not is_whole_number(again.value) or whole(again.value) != got:
                return verdict.failed(NOT_DETERMINISTIC, say(MESSAGES["not_deterministic"]))
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
    try:
        with one_thread(), torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(python_state)
        if numpy_state is not None:
            numpy.random.set_state(numpy_state)


def learner_check(check: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
    """Make ``check`` a learner-facing check: ``strict=``/``hidden=`` validated, random state kept.

    With ``strict=True`` a failure (and an untouched stub) raises ``AssertionError(message)``
    after the verdict is printed, as an nbgrader test cell needs. ``without=`` and ``using=`` (rule
    names of :data:`RULES`, or lists of them) state the exercise's own rules: the learner's function
    must not call what ``without`` names, and must call what ``using`` names.
    """
    own = inspect.signature(check).parameters

    @functools.wraps(check)
    def wrapper(*args: Any, **kwargs: Any) -> CheckResult:
        strict = check_bool("strict", kwargs.get("strict", False))
        check_bool("hidden", kwargs.get("hidden", False))
        without = kwargs.get("without", ()) if "without" in own else kwargs.pop("without", ())
        using = kwargs.get("using", ()) if "using" in own else kwargs.pop("using", ())
        current = _RULES.get()
        rules = Rules(current.without + _rule_names(check.__name__, "without", without),
                      current.using + _rule_names(check.__name__, "using", using))
        before = torch_replacements()
        if strict and before:  # graded: never against a torch function replaced in this session
            result = _tampered(before)
        else:
            token = _RULES.set(rules)
            try:
                with isolated():
                    result = check(*args, **kwargs)
            finally:
                _RULES.reset(token)
            during = [name for name in torch_replacements() if name not in before]
            if during:  # the learner's function patched torch while it was checked: put it back, fail
                _restore_torch(during)
                result = _tampered(during)
        if strict and not result.passed:
            raise AssertionError(result.message)
        return result
    return wrapper


# ----------------------------------------------------------------------------------------------
# Graded checks (nbgrader): a fresh copy, and a library nobody replaced


# The library modules the checks compare with and refuse.
_LIBRARY_MODULES = ("attention", "model", "reference", "data", "distributed")


def _genuine(obj: object) -> bool:
    """Whether a function or class comes from a file of this package, of torch, or of the installed Python."""
    target = inspect.unwrap(obj) if callable(obj) else obj
    code = getattr(target, "__code__", None)
    if isinstance(code, CodeType) and code.co_filename.startswith("<"):
        # Code generated by the package itself (a dataclass's __init__) runs in the package's globals.
        return str(getattr(target, "__module__", "")).split(".")[0] == _PACKAGE_DIR.name
    if isinstance(code, CodeType):
        where = os.path.abspath(code.co_filename)
    elif inspect.isclass(target):
        name = getattr(target, "__module__", "")
        module = sys.modules.get(name, None)
        if name == "__main__" or module is None or not getattr(module, "__file__", None):
            return name == "builtins"  # a class from a notebook cell (its module is __main__) is not genuine
        where = os.path.abspath(module.__file__)
    else:
        return True  # a builtin: C code nobody wrote in a notebook
    homes = [str(_PACKAGE_DIR), _TORCH_DIR, sys.prefix, sys.base_prefix, sys.exec_prefix, *_site_folders()]
    return any(where.startswith(os.path.abspath(home) + os.sep) for home in homes if home)


@functools.lru_cache(maxsize=1)
def _site_folders() -> tuple[str, ...]:
    import site

    folders = list(getattr(site, "getsitepackages", lambda: [])())
    user = getattr(site, "getusersitepackages", lambda: "")()
    return tuple(folders + ([user] if isinstance(user, str) and user else []))


def library_replacements() -> list[str]:
    """Names of the library (``gpt_lesson.attention.attention_scores``, a method of ``gpt_lesson.model.GPT``) that
    now hold code from somewhere else (a notebook cell): what a graded check must not compare against."""
    found = []
    for short in _LIBRARY_MODULES:
        module = sys.modules.get(f"{_PACKAGE_DIR.name}.{short}")
        if module is None:
            continue
        for name, obj in list(vars(module).items()):
            if name.startswith("__") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if not _genuine(obj):
                found.append(f"{module.__name__}.{name}")
            elif inspect.isclass(obj) and getattr(obj, "__module__", "") == module.__name__:
                found += [f"{module.__name__}.{name}.{attr}" for attr, member in list(vars(obj).items())
                          if inspect.isfunction(member) and not _genuine(member)]
    return found


def _tampered(replaced: Sequence[str]) -> CheckResult:
    """The verdict when the library or torch holds code from this session (printed as every verdict is)."""
    return Verdict("graded check").failed(TAMPERED, say(MESSAGES["tampered"], what=", ".join(replaced[:3])))


def fresh_checks() -> Any:
    """A fresh copy of :mod:`gpt_lesson.checks`, executed from its files (not taken from ``sys.modules``).

    What an nbgrader test cell calls: a name the learner rebound (``check_x = lambda *a, **k: None``) or a
    function of ``gpt_lesson.checks`` replaced in the session does not reach it. It compares with the
    library as it is now, so a library function replaced by code from the notebook makes it fail (printed,
    and raised as ``AssertionError``): the grade never rests on a reference the learner wrote.
    """
    replaced = library_replacements() + torch_replacements()
    if replaced:
        raise AssertionError(_tampered(replaced).message)
    import importlib.util

    name = f"{_PACKAGE_DIR.name}._graded_checks_{next(_fresh_copies)}"
    spec = importlib.util.spec_from_file_location(name, _CHECKS_DIR / "__init__.py",
                                                  submodule_search_locations=[str(_CHECKS_DIR)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its relative imports need it there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module  # it shares the rest of the package (gpt_lesson.i18n: the session's language; the library)


def require_callable(check: str, value: object, what: str = "your function") -> None:
    """Wrong arguments to a check (not the learner's bug) raise a TypeError."""
    if not callable(value):
        raise TypeError(f"{check}() expects {what} (something callable), got {type(value).__name__} {value!r:.60}")


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


class _GuardedModule(types.ModuleType):
    """This module's type: what graded test cells import from it cannot be rebound from a notebook cell.

    ``runner.fresh_checks = lambda: fake`` raises; writing into ``vars(runner)`` changes nothing either,
    since the names below are read through the type. (In-process grading has limits all the same:
    docs/teaching.md §7.)
    """

    fresh_checks = property(lambda self: _GUARDED["fresh_checks"])
    library_replacements = property(lambda self: _GUARDED["library_replacements"])
    torch_replacements = property(lambda self: _GUARDED["torch_replacements"])

    def __setattr__(self, name: str, value: object) -> None:
        if name in _GUARDED:
            raise AttributeError(f"{self.__name__}.{name} is what graded checks run; it cannot be replaced")
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if name in _GUARDED:
            raise AttributeError(f"{self.__name__}.{name} is what graded checks run; it cannot be removed")
        super().__delattr__(name)


_GUARDED = {"fresh_checks": fresh_checks, "library_replacements": library_replacements,
            "torch_replacements": torch_replacements}
sys.modules[__name__].__class__ = _GuardedModule


__all__ = [
    "CALL_TIMEOUT", "RULES", "Diagnose", "Forbidden", "OnError", "Outcome", "Rule", "Rules", "Step", "call",
    "call_timeout", "clone_args", "close", "exception_text", "exercise_rules", "expected_got", "first_differing_step",
    "fmt_row", "fresh_checks", "int_kind_problem", "library_replacements", "torch_replacements", "is_whole_number", "isolated", "judge_tensor", "kind_of", "learner_check",
    "match_variant", "permuted_dims", "randn", "require_callable", "resolve", "run_cases", "run_value_cases",
    "screen", "seeded", "tensor_kind_problem", "whole",
]
