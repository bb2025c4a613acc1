"""Checks for lesson 09 (training): the learning-rate schedule, one training step, a loss estimate in
eval mode, and gradient accumulation.

Three of the four exercises are about autograd and the optimizer, so the learner's function runs with
gradients enabled (the runner's :func:`~gpt_lesson.checks.runner.call` runs under ``torch.no_grad()``)
and on a fresh small :class:`gpt_lesson.GPT` per case. The checks watch *how* the function works while
it runs, to name the bug when the result is wrong:

* the order of ``backward``, gradient clipping, ``optimizer.step`` and ``zero_grad`` (a profiler sees
  torch's own functions being entered; the optimizer handed in records its steps);
* the gradient the optimizer saw at its step (was it clipped, stale, zeroed?);
* the mode and the autograd state of every forward pass (dropout on? gradients tracked?) and the
  shapes of the micro-batches.

A result equal to the library's (the loop of :mod:`gpt_lesson.training`) passes, however it was written.
"""
from __future__ import annotations

import copy
import inspect
import math
import numbers
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import CodeType

import torch
import torch.nn as nn

from .. import training as lib
from ..model import GPT
from .runner import Forbidden, Outcome, close, kind_of, learner_check, require_callable, screen
from .verdicts import N_, WRONG_TYPE, Bug, CheckResult, Verdict, say

# Labels: stable identifiers in CheckResult.diagnosis.
WARMUP_OFF_BY_ONE = N_("warm-up off by one")
NO_WARMUP = N_("no warm-up")
WARMUP_WRONG = N_("warm-up values wrong")
DECAYS_TO_ZERO = N_("cosine decays to 0, not min_lr")
COSINE_NOT_REACHING_MIN = N_("cosine does not reach min_lr at max_steps")
COSINE_FROM_STEP_0 = N_("cosine measured from step 0")
COSINE_SHAPE = N_("not half a cosine from max_lr to min_lr")
LINEAR_DECAY = N_("linear decay instead of cosine")
NOT_HELD_AFTER_END = N_("rate not held at min_lr after max_steps")
DECAY_WRONG = N_("decay values wrong")
NOT_A_NUMBER = N_("learning rate is not a number")
NO_STEP = N_("optimizer.step() not called")
STEPPED_TWICE = N_("optimizer.step() called twice")
NO_BACKWARD = N_("loss.backward() not called")
STEP_BEFORE_BACKWARD = N_("step before backward")
ZERO_GRAD_BEFORE_STEP = N_("gradients zeroed between backward and step")
NO_ZERO_GRAD = N_("forgot zero_grad")
NOT_CLIPPED = N_("gradient not clipped")
CLIP_AFTER_STEP = N_("clip after step")
CLIP_BEFORE_BACKWARD = N_("clip before backward")
CLIP_BY_VALUE = N_("clipped by value, not by norm")
CLIP_WRONG_NORM = N_("clipped to another norm than max_norm")
WRONG_LOSS = N_("returned loss is not the batch's loss")
LOSS_NOT_RETURNED = N_("loss not returned")
WRONG_UPDATE = N_("weights after the step differ")
EVAL_MODE_MISSING = N_("forward in training mode (dropout on)")
GRADIENTS_TRACKED = N_("gradients tracked in estimate_loss")
MODE_NOT_RESTORED = N_("eval mode not restored")
LOSS_SUMMED = N_("losses summed, not averaged")
ONE_BATCH_ONLY = N_("one batch only")
WEIGHTS_CHANGED = N_("the model's weights changed")
WRONG_ESTIMATE = N_("wrong loss estimate")
LOSS_NOT_DIVIDED = N_("loss not divided by the number of micro-batches")
DIVIDED_TWICE = N_("divided by the number of micro-batches twice")
GRADIENT_SCALED = N_("accumulated gradient scaled wrongly")
ZERO_GRAD_IN_LOOP = N_("gradients zeroed inside the loop")
SAME_MICRO_BATCH = N_("the same micro-batch every time")
SPLIT_WRONG_DIM = N_("split along the time dimension")
NO_MICRO_BATCHES = N_("no micro-batches")
WRONG_GRADIENT = N_("accumulated gradient differs")
WRONG_MEAN_LOSS = N_("returned loss is not the mean over micro-batches")

TEXTS = {
    # the schedule
    "lr_case": N_("max_lr={max_lr:g}, min_lr={min_lr:g}, warmup_steps={warmup}, max_steps={max_steps}"),
    "lr_mismatch": N_("   For {case}, step {step} ({phase}): expected {expected:.6g}, got {got:.6g}."),
    "lr_not_number": N_("   For {case}, step {step} your function returned {kind}; return the learning rate, "
                        "a float."),
    "phase_warmup": N_("warm-up"),
    "phase_decay": N_("cosine decay"),
    "phase_after": N_("after max_steps"),
    "warm_from_0": N_("your warm-up starts at 0 at step 0, so the first update is wasted and the peak comes one "
                      "step late; step 0 is the first of warmup_steps steps: it gets max_lr / warmup_steps, and "
                      "step warmup_steps - 1 gets max_lr."),
    "warm_plus_1": N_("your warm-up never reaches max_lr: (step + 1) / (warmup_steps + 1) is nanoGPT's "
                      "convention; this course's loop (lr_at) reaches max_lr at step warmup_steps - 1."),
    "warm_le": N_("at step warmup_steps your rate is above max_lr: the warm-up covers the steps 0 to "
                  "warmup_steps - 1 (step < warmup_steps), then the decay starts at max_lr."),
    "no_warm": N_("there is no warm-up: the rate starts at max_lr. For step < warmup_steps it should rise "
                  "linearly, reaching max_lr at step warmup_steps - 1."),
    "warm_wrong": N_("your warm-up differs from a straight line from max_lr / warmup_steps (step 0) up to max_lr "
                     "(step warmup_steps - 1)."),
    "to_zero": N_("your cosine ends at 0, not at min_lr: add min_lr and scale the cosine by (max_lr - min_lr)."),
    "span": N_("your cosine has not reached min_lr at max_steps: the decay lasts max_steps - warmup_steps steps, "
               "so measure its progress as (step - warmup_steps) / (max_steps - warmup_steps)."),
    "from_0": N_("your cosine starts at step 0 instead of at the end of the warm-up: right after the warm-up the "
                 "rate drops below max_lr. Measure the decay's progress from step warmup_steps."),
    "shape_full": N_("your cosine runs a whole period and comes back up to max_lr; half a period goes from max_lr "
                     "down to min_lr: cos(pi * progress) with progress from 0 to 1."),
    "shape_half": N_("your decay starts above max_lr: the factor 0.5 * (1 + cos(pi * progress)) runs from 1 to 0 "
                     "(without the 0.5 it runs from 2 to 0)."),
    "shape_rising": N_("your schedule rises during the decay: with progress from 0 to 1, 0.5 * (1 + cos(pi * "
                       "progress)) falls from 1 to 0; 1 - cos(...) rises."),
    "linear": N_("your decay is a straight line; the schedule is half a cosine (slow at first, fastest in the "
                 "middle, slow at the end)."),
    "not_held": N_("after max_steps your rate moves away from min_lr again; from max_steps on it stays at min_lr "
                   "(clamp the progress at 1)."),
    "decay_wrong": N_("your decay differs from min_lr + 0.5 * (max_lr - min_lr) * (1 + cos(pi * progress))."),
    "lr_passed": N_("Your schedule equals the course's (lr_at) at every step of {count} schedules."),
    "zero_division": N_("warmup_steps may be 0 (no warm-up): only divide by warmup_steps inside the warm-up branch."),
    # the training step
    "step_case": N_("GPT({V}, {C}, {nh}, {L}, {bs}), batches of shape {shape}, {optimizer}, max_norm={max_norm}"),
    "call_k": N_("   Call {k} of {n} (each call is one step on a new batch):\n"),
    "no_step": N_("the optimizer you were given never took a step: call optimizer.step() (the optimizer passed "
                  "in, not another one)."),
    "stepped_twice": N_("optimizer.step() ran {count} times in one call: one training step is one update."),
    "no_backward": N_("loss.backward() was never called, so there is no gradient for the optimizer."),
    "step_first": N_("optimizer.step() ran before loss.backward(): the step used the gradient of the previous "
                     "batch (or none). Order: forward, loss, backward, clip, step."),
    "zeroed_early": N_("the gradient was zeroed between backward and step, so the optimizer saw no gradient: "
                       "zero it before the forward pass or after the step."),
    "no_zero": N_("the gradients of the previous step were still there: backward adds to .grad, so without "
                  "optimizer.zero_grad() each step uses the sum of all the gradients so far."),
    "not_clipped": N_("the gradient reached optimizer.step() with norm {norm:.3f}, above max_norm={max_norm}: clip "
                      "it with torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) before the step."),
    "clip_after": N_("you clipped after optimizer.step(): the update had already used the unclipped gradient. "
                     "Clip between backward and step."),
    "clip_before": N_("you clipped before loss.backward(): at that point there is no new gradient to clip. "
                      "Clip between backward and step."),
    "clip_value": N_("clip_grad_value_ cuts every value separately; the course clips the norm of the whole "
                     "gradient (clip_grad_norm_), which keeps its direction."),
    "clip_norm": N_("the gradient reached the step with norm {norm:.3f}, not max_norm={max_norm}: clip to the "
                    "max_norm you were given, not a fixed number."),
    "wrong_loss": N_("   Your weights after the step are right, but you returned {got:.6f}; this batch's loss "
                     "before the update is {expected:.6f}. Return loss.item() of this step's forward pass."),
    "no_return": N_("   Your step changed the weights but returned None: return the loss (loss.item())."),
    "loss_kind": N_("   Your function returned {kind}; return the loss, a float (loss.item())."),
    "weights": N_("   After your step, {count} of {total} parameter tensors differ from the course's step "
                  "(forward, loss.backward(), clip_grad_norm_, optimizer.step(), zero_grad), e.g. {names}."),
    "update_pointer": N_("the gradient at optimizer.step() differed from this batch's clipped gradient "
                         "(largest difference {diff:.3g}): compare each step of yours with the lesson's order."),
    "update_pointer_same": N_("the gradient at optimizer.step() was right, so the difference comes after it (a "
                              "second update, changed weights or optimizer settings?)."),
    "step_passed": N_("Your step gives the same loss and the same weights as the course's loop, {calls} steps "
                      "in a row, on {count} models and optimizers."),
    "no_grad_hint": N_("backward needs the graph of the loss: do not call it on loss.item() (a float) or inside "
                       "torch.no_grad()."),
    "twice_hint": N_("backward ran twice on the same graph: call loss.backward() once per forward pass."),
    "unpack_hint": N_("the model returns two things: logits, loss = model(x, y)."),
    "float_backward_hint": N_("loss.item() is a float without a graph; call backward on the loss tensor and "
                              "return loss.item() at the end."),
    # the estimate
    "est_case": N_("GPT({V}, {C}, {nh}, {L}, {bs}) with dropout {p}, {n} batches of shape {shape}, "
                   "the model in {mode} before the call"),
    "mode_training": N_("training mode"),
    "mode_eval": N_("eval mode"),
    "train_mode": N_("the forward pass ran in training mode, so dropout was on and the estimate is noisy (and "
                     "too high): call model.eval() before the loop."),
    "tracked": N_("the forward pass tracked gradients: an estimate needs no backward, so wrap it in "
                  "torch.no_grad() (or decorate the function with @torch.no_grad()); autograd otherwise keeps "
                  "every activation of every batch in memory."),
    "not_restored_train": N_("the model was in training mode before your function and in eval mode after it: "
                             "training would go on without dropout. Remember model.training and put it back."),
    "not_restored_eval": N_("the model was in eval mode before your function and in training mode after it: put "
                            "back the mode it had (model.train(was_training)), not always train mode."),
    "summed": N_("you returned the sum of the {n} batch losses; the estimate is their mean."),
    "one_batch": N_("you returned the loss of one batch only; average over all the batches."),
    "changed": N_("your function changed the model's weights: an estimate only runs forward passes."),
    "est_mismatch": N_("   expected {expected:.6f} (the mean loss over the batches, eval mode), got {got:.6f}."),
    "est_passed": N_("Your estimate equals the mean loss in eval mode, without gradients, with the mode put back, "
                     "on {count} cases."),
    # accumulation
    "acc_case": N_("GPT({V}, {C}, {nh}, {L}, {bs}), a batch of shape {shape}, n_micro={n}"),
    "not_divided": N_("your gradient is {n} times the full batch's: backward adds the micro-batches' gradients, so "
                      "divide each micro-batch's loss by n_micro before backward."),
    "twice": N_("your gradient is 1/{n} of the full batch's: you divided by n_micro twice (the loss and again the "
                "gradient?)."),
    "scaled": N_("your gradient is {factor:.4g} times the full batch's: divide each micro-batch's loss by "
                 "n_micro, nothing else."),
    "zero_in_loop": N_("only the last micro-batch's gradient is left: zeroing the gradients inside the loop "
                       "throws away the ones accumulated before. Let backward add them up."),
    "same_rows": N_("your gradient is the first micro-batch's alone: either every micro-batch held the same rows "
                    "(micro-batch i is rows i*m to (i+1)*m of the batch, with m = B // n_micro), or the loop "
                    "stopped after the first one."),
    "wrong_dim": N_("your micro-batches have shape {shape}: you split along the time dimension (dim 1). Split the "
                    "rows (dim 0): x[i*m:(i+1)*m]."),
    "no_micro": N_("you ran the whole batch of {B} rows in one forward pass; the point is n_micro forward and "
                   "backward passes of {m} rows each, so that a batch too large for memory still fits."),
    "no_grad_acc": N_("there is no gradient on the model's parameters after your function: call backward on each "
                      "micro-batch's (divided) loss."),
    "grad_mismatch": N_("   {count} of {total} parameter gradients differ from the full batch's, e.g. {names} "
                        "(largest difference {diff:.3g})."),
    "mean_loss": N_("   Your gradient is right, but you returned {got:.6f}; the mean of the micro-batches' losses "
                    "(the full batch's loss) is {expected:.6f}."),
    "acc_no_return": N_("   Your gradients are there but you returned None: return the mean loss of the "
                        "micro-batches (a float)."),
    "acc_passed": N_("Your micro-batches give the full batch's gradient and loss on {count} cases."),
}


def _bug(label: str, key: str, **fields: object) -> Bug:
    return Bug(label, TEXTS[key], fields)


def _text(key: str, **fields: object) -> str:
    return say(TEXTS[key], **fields)


# ----------------------------------------------------------------------------------------------
# Calling the learner's code with autograd on, and watching what it calls


def _code_of(obj: object) -> CodeType | None:
    """The code object behind a function (decorators unwrapped), or None."""
    try:
        obj = inspect.unwrap(obj)  # type: ignore[arg-type]
    except ValueError:
        pass
    code = getattr(obj, "__code__", None)
    return code if isinstance(code, CodeType) else None


def _raised_by(fn: Callable, error: BaseException) -> bool:
    """True when ``error`` was raised by ``fn``'s own code (a stub), not deeper (inside torch)."""
    code = _code_of(fn)
    tb, last = error.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return code is None or last is None or last.tb_frame.f_code is code


def _call(fn: Callable, args: tuple, forbidden: Forbidden | None = None, watch=None) -> Outcome:
    """Run ``fn(*args)`` with gradients enabled; a NotImplementedError from the stub itself is "not attempted"."""
    watches = [w for w in (watch, forbidden.watch() if forbidden is not None else None) if w is not None]
    try:
        with torch.enable_grad(), _nested(watches):
            value = fn(*args)
    except NotImplementedError as e:
        if _raised_by(fn, e):
            return Outcome(stub=True)
        return Outcome(error=e, library=forbidden.hit if forbidden else None)
    except Exception as e:  # the learner's error is reported, never raised
        return Outcome(error=e, library=forbidden.hit if forbidden else None)
    return Outcome(value=value, library=forbidden.hit if forbidden else None)


@contextmanager
def _nested(managers: list) -> Iterator[None]:
    if not managers:
        yield
        return
    with managers[0], _nested(managers[1:]):
        yield


class Events:
    """Which of torch's training functions the learner's code entered, in order.

    ``backward``, ``clip`` (``clip_grad_norm_``), ``clip_value`` (``clip_grad_value_``) and ``zero``
    (``Optimizer.zero_grad`` / ``Module.zero_grad``) are seen by a profiler, like
    :class:`~gpt_lesson.checks.runner.Forbidden`; the spying optimizer adds ``step``.
    """

    def __init__(self) -> None:
        self.log: list[str] = []
        self.codes: dict[CodeType, str] = {}
        for obj, name in ((torch.Tensor.backward, "backward"), (torch.autograd.backward, "backward"),
                          (torch.nn.utils.clip_grad_norm_, "clip"), (torch.nn.utils.clip_grad_value_, "clip_value"),
                          (torch.optim.Optimizer.zero_grad, "zero"), (nn.Module.zero_grad, "zero")):
            code = _code_of(obj)
            if code is not None:
                self.codes[code] = name

    def add(self, name: str) -> None:
        self.log.append(name)

    @contextmanager
    def watch(self) -> Iterator[None]:
        previous = sys.getprofile()
        if previous is not None and not (inspect.isfunction(previous) or inspect.ismethod(previous)):
            yield  # a C-level profiler (cProfile) is running: leave it alone, name fewer bugs
            return
        active: list[CodeType] = []

        def profiler(frame, event, arg):  # noqa: ANN001 - the profiler protocol
            if previous is not None:
                previous(frame, event, arg)
            if event == "call":
                name = self.codes.get(frame.f_code)
                if name is not None:
                    if not active:  # torch's own nested calls (Tensor.backward -> autograd.backward) count once
                        self.add(name)
                    active.append(frame.f_code)
            elif event == "return" and active and frame.f_code is active[-1]:
                active.pop()

        sys.setprofile(profiler)
        try:
            yield
        finally:
            sys.setprofile(previous)

    def first(self, name: str) -> int | None:
        return self.log.index(name) if name in self.log else None

    def count(self, name: str) -> int:
        return self.log.count(name)


def _spy_optimizer(cls: type[torch.optim.Optimizer], params, events: Events, seen: list, **kwargs):
    """An optimizer of class ``cls`` that logs each step and keeps the gradient it saw."""

    class Spy(cls):  # type: ignore[misc, valid-type]
        def step(self, closure=None):  # noqa: ANN001 - the optimizer protocol
            events.add("step")
            seen.append([None if p.grad is None else p.grad.detach().clone()
                         for group in self.param_groups for p in group["params"]])
            return super().step(closure)

    Spy.__name__ = Spy.__qualname__ = cls.__name__
    return Spy(params, **kwargs)


def _grads(model: nn.Module) -> list[torch.Tensor | None]:
    return [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]


def _norm(grads: list[torch.Tensor | None]) -> float:
    present = [g.double() for g in grads if g is not None]
    return math.sqrt(sum(float((g * g).sum()) for g in present)) if present else 0.0


def _same_grads(a: list[torch.Tensor | None], b: list[torch.Tensor | None]) -> bool:
    return len(a) == len(b) and all((x is None and y is None) or (x is not None and y is not None and close(x, y))
                                    for x, y in zip(a, b))


def _clipped(grads: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    total = _norm(grads)
    factor = min(1.0, max_norm / (total + 1e-6))
    return [g * factor for g in grads]


def _is_zero(grads: list[torch.Tensor | None]) -> bool:
    return all(g is None or not g.any() for g in grads)


def _as_float(value: object) -> float | None:
    """A real number given as a float, an int, a NumPy scalar or a one-element real tensor; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, torch.Tensor):
        if value.numel() == 1 and (value.is_floating_point() or not (value.is_complex() or value.dtype == torch.bool)):
            return float(value.detach().reshape(()).item())
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    return None


def _model(seed: int, sizes: tuple[int, int, int, int, int], dropout: float = 0.0) -> GPT:
    torch.manual_seed(seed)
    return GPT(*sizes, dropout=dropout)


def _batch(seed: int, V: int, B: int, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(V, (B, T), generator=g), torch.randint(V, (B, T), generator=g)


def _differing(a: nn.Module, b: nn.Module) -> list[str]:
    theirs = dict(b.named_parameters())
    return [n for n, p in a.named_parameters() if not close(p.detach(), theirs[n].detach())]


ERROR_HINTS = [("does not require grad", "no_grad_hint"), ("backward through the graph a second time", "twice_hint"),
               ("too many values to unpack", "unpack_hint"), ("not enough values to unpack", "unpack_hint"),
               ("has no attribute 'backward'", "float_backward_hint"), ("division by zero", "zero_division")]


def _screen(verdict: Verdict, outcome: Outcome, where: str = "") -> CheckResult | None:
    return screen(verdict, outcome, where, [(fragment, TEXTS[key]) for fragment, key in ERROR_HINTS])


# ----------------------------------------------------------------------------------------------
# 1. The learning-rate schedule


@dataclass(frozen=True)
class _Schedule:
    """A way of computing the schedule; the defaults are the course's (``lr_at``)."""

    warm: str = "ok"      # ok | from0 | plus1 | le | none
    span: str = "ok"      # ok | max_steps | from0
    target: str = "ok"    # ok | zero
    shape: str = "cos"    # cos | full | no_half | rising | linear
    clamp: bool = True

    def __call__(self, step: int, M: float, m: float, W: int, S: int) -> float:
        if self.warm != "none" and (step < W or (self.warm == "le" and step <= W)):
            if self.warm == "from0":
                return M * step / W
            if self.warm == "plus1":
                return M * (step + 1) / (W + 1)
            return M * (step + 1) / W
        start, span = {"ok": (W, S - W), "max_steps": (W, S), "from0": (0, S)}[self.span]
        if self.warm == "none":
            start, span = 0, S
        progress = (step - start) / max(1, span)
        if self.clamp:
            progress = min(1.0, progress)
        low = 0.0 if self.target == "zero" else m
        factor = {"cos": 0.5 * (1 + math.cos(math.pi * progress)), "full": 0.5 * (1 + math.cos(2 * math.pi * progress)),
                  "no_half": 1 + math.cos(math.pi * progress), "rising": 0.5 * (1 - math.cos(math.pi * progress)),
                  "linear": 1 - progress}[self.shape]
        return low + factor * (M - low)


_SCHEDULE_BUGS = [
    ("warm", "from0", WARMUP_OFF_BY_ONE, "warm_from_0"), ("warm", "plus1", WARMUP_OFF_BY_ONE, "warm_plus_1"),
    ("warm", "le", WARMUP_OFF_BY_ONE, "warm_le"), ("warm", "none", NO_WARMUP, "no_warm"),
    ("target", "zero", DECAYS_TO_ZERO, "to_zero"), ("span", "max_steps", COSINE_NOT_REACHING_MIN, "span"),
    ("span", "from0", COSINE_FROM_STEP_0, "from_0"), ("shape", "full", COSINE_SHAPE, "shape_full"),
    ("shape", "no_half", COSINE_SHAPE, "shape_half"), ("shape", "rising", COSINE_SHAPE, "shape_rising"),
    ("shape", "linear", LINEAR_DECAY, "linear"), ("clamp", False, NOT_HELD_AFTER_END, "not_held"),
]


def _schedule_variants() -> Iterator[tuple[list[Bug], _Schedule]]:
    """One bug, then two bugs together (in the order a reader meets them)."""
    for attr, value, label, key in _SCHEDULE_BUGS:
        yield [_bug(label, key)], _Schedule(**{attr: value})
    for i, (a1, v1, l1, k1) in enumerate(_SCHEDULE_BUGS):
        for a2, v2, l2, k2 in _SCHEDULE_BUGS[i + 1:]:
            if a1 != a2:
                yield [_bug(l1, k1), _bug(l2, k2)], _Schedule(**{a1: v1, a2: v2})


def _lr_close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 + 1e-6 * abs(b)


@learner_check
def check_lr_schedule(fn: Callable[[int, float, float, int, int], float], *, strict: bool = False,
                      hidden: bool = False) -> CheckResult:
    """Check ``fn(step, max_lr, min_lr, warmup_steps, max_steps)`` -> the learning rate of ``step`` (from 0).

    The course's schedule (:func:`gpt_lesson.training.lr_at`): a linear warm-up reaching ``max_lr`` at
    step ``warmup_steps - 1``, then half a cosine down to ``min_lr`` at ``max_steps``, held after it.
    """
    name = "check_lr_schedule"
    require_callable(name, fn)
    verdict = Verdict(name)
    cases = [(1e-3, 1e-4, 10, 100), (6e-3, 3e-4, 4, 30), (2e-2, 1e-3, 0, 25)]
    cases += [(5e-3, 5e-4, 50, 976), (3e-3, 1e-3, 1, 7), (1e-2, 0.0, 3, 12)] if hidden else []
    forbidden = Forbidden({lib.lr_at: "gpt_lesson.training.lr_at"})
    for M, m, W, S in cases:
        case = say(TEXTS["lr_case"], max_lr=M, min_lr=m, warmup=W, max_steps=S)
        cfg = lib.TrainConfig(max_steps=S, learning_rate=M, min_lr=m, warmup_steps=W, progress=False)
        steps = range(S + 4)
        expected = [lib.lr_at(s, cfg) for s in steps]
        got: list[float] = []
        for s in steps:
            outcome = _call(fn, (s, M, m, W, S), forbidden)
            if outcome.value is None and outcome.error is None:
                outcome.stub = True  # a missing return, as the runner counts it
            early = _screen(verdict, outcome, case + "\n")
            if early is not None:
                return early
            value = _as_float(outcome.value)
            if value is None or math.isnan(value):
                return verdict.failed(NOT_A_NUMBER, say(TEXTS["lr_not_number"], case=case, step=s,
                                                        kind=kind_of(outcome.value)))
            got.append(value)
        first = next((s for s in steps if not _lr_close(got[s], expected[s])), None)
        if first is None:
            continue
        phase = "phase_warmup" if first < W else "phase_decay" if first <= S else "phase_after"
        text = say(TEXTS["lr_mismatch"], case=case, step=first, phase=_text(phase), expected=expected[first],
                   got=got[first])
        for bugs, schedule in _schedule_variants():
            if all(_lr_close(got[s], schedule(s, M, m, W, S)) for s in steps):
                return verdict.failed_with(bugs, text)
        label, key = {"phase_warmup": (WARMUP_WRONG, "warm_wrong"), "phase_decay": (DECAY_WRONG, "decay_wrong"),
                      "phase_after": (NOT_HELD_AFTER_END, "not_held")}[phase]
        return verdict.failed_with([_bug(label, key)], text)
    return verdict.passed(say(TEXTS["lr_passed"], count=len(cases)))


# ----------------------------------------------------------------------------------------------
# 2. One training step


@dataclass
class _StepCase:
    seed: int
    sizes: tuple[int, int, int, int, int]
    shape: tuple[int, int]
    optimizer: type[torch.optim.Optimizer]
    options: dict
    max_norm: float

    def describe(self) -> str:
        V, C, nh, L, bs = self.sizes
        opts = ", ".join(f"{k}={v}" for k, v in self.options.items())
        return say(TEXTS["step_case"], V=V, C=C, nh=nh, L=L, bs=bs, shape=self.shape,
                   optimizer=f"{self.optimizer.__name__}({opts})", max_norm=self.max_norm)


def _step_cases(hidden: bool) -> list[_StepCase]:
    """SGD first: its update is the clipped gradient itself, so a step without clipping shows at once."""
    cases = [_StepCase(70, (11, 16, 2, 2, 8), (4, 8), torch.optim.SGD, {"lr": 0.5}, 0.25),
             _StepCase(71, (7, 24, 3, 1, 6), (3, 5), torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}, 0.1)]
    if hidden:
        cases += [_StepCase(72, (13, 8, 2, 3, 10), (2, 10), torch.optim.SGD, {"lr": 0.3, "momentum": 0.9}, 0.05),
                  _StepCase(73, (5, 12, 4, 2, 4), (5, 4), torch.optim.AdamW, {"lr": 3e-3, "betas": (0.9, 0.99)}, 0.5)]
    return cases


def _reference_step(model: GPT, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                    max_norm: float) -> tuple[float, list[torch.Tensor]]:
    """The course's step (the loop of gpt_lesson.training.train); also returns the unclipped gradient."""
    _, loss = model(x, y)
    loss.backward()
    fresh = _grads(model)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item(), fresh  # type: ignore[return-value]


def _diagnose_step(events: Events, seen: list, stale: list[torch.Tensor | None], fresh: list[torch.Tensor],
                   max_norm: float) -> Bug:
    """The likely bug of a step whose weights came out wrong, from what the learner's code did."""
    steps = events.count("step")
    if steps == 0:
        return _bug(NO_STEP, "no_step")
    if steps > 1:
        return _bug(STEPPED_TWICE, "stepped_twice", count=steps)
    if events.first("backward") is None:
        return _bug(NO_BACKWARD, "no_backward")
    backward, step = events.first("backward"), events.first("step")
    if step < backward:  # type: ignore[operator]
        return _bug(STEP_BEFORE_BACKWARD, "step_first")
    at_step = seen[0]
    if _is_zero(at_step):
        return _bug(ZERO_GRAD_BEFORE_STEP, "zeroed_early")
    if not _is_zero(stale) and "zero" not in events.log[:backward]:
        summed = [g if s is None else g + s for g, s in zip(fresh, stale)]
        if any(_same_grads(at_step, option) for option in (summed, _clipped(summed, max_norm))) \
                or not _same_grads(at_step, _clipped(fresh, max_norm)):
            return _bug(NO_ZERO_GRAD, "no_zero")
    if "clip_value" in events.log:
        return _bug(CLIP_BY_VALUE, "clip_value")
    clip = events.first("clip")
    norm = _norm(at_step)
    if clip is None:
        return _bug(NOT_CLIPPED, "not_clipped", norm=norm, max_norm=max_norm)
    if clip > step:  # type: ignore[operator]
        return _bug(CLIP_AFTER_STEP, "clip_after")
    if clip < backward:  # type: ignore[operator]
        return _bug(CLIP_BEFORE_BACKWARD, "clip_before")
    if abs(norm - max_norm) > 1e-3 * max_norm:
        return _bug(CLIP_WRONG_NORM, "clip_norm", norm=norm, max_norm=max_norm)
    expected = _clipped(fresh, max_norm)
    if _same_grads(at_step, expected):
        return _bug(WRONG_UPDATE, "update_pointer_same")
    diff = max(float((a - b).abs().max()) for a, b in zip(at_step, expected) if a is not None)
    return _bug(WRONG_UPDATE, "update_pointer", diff=diff)


@learner_check
@torch.enable_grad()  # the references run autograd, whatever mode the caller is in
def check_train_step(fn: Callable[[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor, float], float], *,
                     strict: bool = False, hidden: bool = False) -> CheckResult:
    """Check ``fn(model, optimizer, x, y, max_norm)`` -> the loss: one training step of lesson 09's loop.

    The step: forward (``model(x, y)`` gives ``logits, loss``), ``loss.backward()``, the gradient norm
    clipped to ``max_norm``, ``optimizer.step()``, the gradients zeroed; returns ``loss.item()``. The check
    runs three steps in a row on each case and compares the loss and every weight with the course's step.
    """
    name = "check_train_step"
    require_callable(name, fn)
    verdict = Verdict(name)
    cases = _step_cases(hidden)
    calls = 3
    for case in cases:
        V, C, nh, L, bs = case.sizes
        theirs = _model(case.seed, case.sizes)
        ours = copy.deepcopy(theirs)
        events, seen = Events(), []
        optimizer = _spy_optimizer(case.optimizer, theirs.parameters(), events, seen, **case.options)
        ref_optimizer = case.optimizer(ours.parameters(), **case.options)
        for k in range(1, calls + 1):
            x, y = _batch(case.seed * 10 + k, V, *case.shape)
            stale = _grads(theirs)
            loss, fresh = _reference_step(ours, ref_optimizer, x, y, case.max_norm)
            events.log.clear()
            seen.clear()
            where = case.describe() + "\n" + say(TEXTS["call_k"], k=k, n=calls)
            weights = [p.detach().clone() for p in theirs.parameters()]
            outcome = _call(fn, (theirs, optimizer, x.clone(), y.clone(), case.max_norm), watch=events.watch())
            if outcome.error is not None or outcome.stub:
                early = _screen(verdict, outcome, where if k > 1 or outcome.error is not None else "")
                if early is not None:
                    return early
            moved = any(not torch.equal(w, p.detach()) for w, p in zip(weights, theirs.parameters()))
            if outcome.value is None and k == 1 and not moved and not events.log:
                return verdict.not_attempted()  # an untouched stub that returns None
            differ = _differing(theirs, ours)
            if differ:
                bug = _diagnose_step(events, seen, stale, fresh, case.max_norm)
                text = where + _text("weights", count=len(differ), total=len(list(theirs.parameters())),
                                     names=", ".join(differ[:3]))
                return verdict.failed_with([bug], text)
            if outcome.value is None:
                return verdict.failed(LOSS_NOT_RETURNED, where + _text("no_return"))
            got = _as_float(outcome.value)
            if got is None:
                return verdict.failed(WRONG_TYPE, where + _text("loss_kind", kind=kind_of(outcome.value)))
            if not math.isclose(got, loss, rel_tol=1e-4, abs_tol=1e-5):
                return verdict.failed(WRONG_LOSS, where + _text("wrong_loss", got=got, expected=loss))
    return verdict.passed(say(TEXTS["step_passed"], calls=calls, count=len(cases)))


# ----------------------------------------------------------------------------------------------
# 3. A loss estimate in eval mode, without gradients


@dataclass
class _Forwards:
    """What every forward pass of a model saw: its mode, autograd, and the input's shape."""

    modes: list[bool] = field(default_factory=list)
    grad: list[bool] = field(default_factory=list)
    shapes: list[tuple[int, ...]] = field(default_factory=list)

    @contextmanager
    def watch(self, model: nn.Module) -> Iterator[None]:
        def hook(module, args):  # noqa: ANN001 - the hook protocol
            self.modes.append(module.training)
            self.grad.append(torch.is_grad_enabled() and not torch.is_inference_mode_enabled())
            if args and isinstance(args[0], torch.Tensor):
                self.shapes.append(tuple(args[0].shape))

        handle = model.register_forward_pre_hook(hook)
        try:
            yield
        finally:
            handle.remove()


@learner_check
@torch.enable_grad()  # the references run autograd, whatever mode the caller is in
def check_estimate_loss(fn: Callable[[nn.Module, list], float], *, strict: bool = False,
                        hidden: bool = False) -> CheckResult:
    """Check ``fn(model, batches)`` -> the mean loss over ``batches`` (a list of ``(x, y)``).

    In eval mode (dropout off), without tracking gradients, with the model's mode put back afterwards:
    what :func:`gpt_lesson.training.estimate_loss` does for each split.
    """
    name = "check_estimate_loss"
    require_callable(name, fn)
    verdict = Verdict(name)
    cases = [(80, (11, 16, 2, 2, 8), 0.3, 3, (4, 8), True), (81, (9, 24, 3, 1, 6), 0.2, 4, (2, 6), False),
             (82, (7, 12, 2, 2, 5), 0.5, 2, (3, 5), True)]
    cases += [(83, (13, 8, 4, 3, 12), 0.25, 5, (2, 12), False)] if hidden else []
    forbidden = Forbidden({lib.estimate_loss: "gpt_lesson.training.estimate_loss",
                           lib.evaluate_split: "gpt_lesson.training.evaluate_split"})
    for seed, sizes, p, n, shape, training in cases:
        V, C, nh, L, bs = sizes
        model = _model(seed, sizes, dropout=p).train(training)
        batches = [_batch(seed * 10 + i, V, *shape) for i in range(n)]
        before = {k: v.clone() for k, v in model.state_dict().items()}
        with torch.no_grad():
            model.eval()
            losses = [model(x, y)[1].item() for x, y in batches]
            model.train(training)
        expected = sum(losses) / n
        where = say(TEXTS["est_case"], V=V, C=C, nh=nh, L=L, bs=bs, p=p, n=n, shape=shape,
                    mode=_text("mode_training" if training else "mode_eval")) + "\n"
        forwards = _Forwards()
        args = (model, [(x.clone(), y.clone()) for x, y in batches])
        outcome = _call(fn, args, forbidden, watch=forwards.watch(model))
        if outcome.value is None and outcome.error is None:
            outcome.stub = True  # a missing return, as the runner counts it
        early = _screen(verdict, outcome, where)
        if early is not None:
            return early
        got = _as_float(outcome.value)
        if got is None:
            return verdict.failed(WRONG_TYPE, where + _text("loss_kind", kind=kind_of(outcome.value)))
        text = where + _text("est_mismatch", expected=expected, got=got)
        if any(forwards.modes):
            return verdict.failed_with([_bug(EVAL_MODE_MISSING, "train_mode")], text)
        if any(forwards.grad) or (isinstance(outcome.value, torch.Tensor) and outcome.value.requires_grad):
            return verdict.failed_with([_bug(GRADIENTS_TRACKED, "tracked")], text)
        if any(not torch.equal(v, before[k]) for k, v in model.state_dict().items()):
            return verdict.failed_with([_bug(WEIGHTS_CHANGED, "changed")], text)
        if not math.isclose(got, expected, rel_tol=1e-4, abs_tol=1e-5):
            if math.isclose(got, n * expected, rel_tol=1e-4):
                return verdict.failed_with([_bug(LOSS_SUMMED, "summed", n=n)], text)
            if any(math.isclose(got, loss, rel_tol=1e-5, abs_tol=1e-6) for loss in losses):
                return verdict.failed_with([_bug(ONE_BATCH_ONLY, "one_batch")], text)
            return verdict.failed(WRONG_ESTIMATE, text)
        if model.training != training:
            key = "not_restored_train" if training else "not_restored_eval"
            return verdict.failed_with([_bug(MODE_NOT_RESTORED, key)], where.rstrip("\n"))
    return verdict.passed(say(TEXTS["est_passed"], count=len(cases)))


# ----------------------------------------------------------------------------------------------
# 4. Gradient accumulation


def _accumulation_bug(got: list[torch.Tensor | None], full: list[torch.Tensor], micro: list[list[torch.Tensor]],
                      forwards: _Forwards, B: int, T: int, n: int) -> Bug | None:
    """Name the bug behind a gradient that differs from the full batch's."""
    if all(g is None for g in got):
        return _bug(NO_BACKWARD, "no_grad_acc")
    if any(len(s) == 2 and s[0] == B and s[1] < T for s in forwards.shapes):
        shape = next(s for s in forwards.shapes if s[0] == B and s[1] < T)
        return _bug(SPLIT_WRONG_DIM, "wrong_dim", shape=shape)
    present = [(g, f) for g, f in zip(got, full) if g is not None]
    dot = sum(float((g.double() * f.double()).sum()) for g, f in present)
    ff = sum(float((f.double() ** 2).sum()) for _, f in present)
    factor = dot / ff if ff else 0.0
    if all(close(g, factor * f) for g, f in present) and abs(factor - 1) > 1e-3:
        if math.isclose(factor, n, rel_tol=1e-3):
            return _bug(LOSS_NOT_DIVIDED, "not_divided", n=n)
        if math.isclose(factor, 1 / n, rel_tol=1e-3):
            return _bug(DIVIDED_TWICE, "twice", n=n)
        return _bug(GRADIENT_SCALED, "scaled", factor=factor)
    last = micro[-1]
    if any(_same_grads(got, [c * g for g in last]) for c in (1.0, 1.0 / n)):
        return _bug(ZERO_GRAD_IN_LOOP, "zero_in_loop")
    first = micro[0]
    if any(_same_grads(got, [c * g for g in first]) for c in (1.0, float(n), 1.0 / n)):
        return _bug(SAME_MICRO_BATCH, "same_rows")
    return None


@learner_check
@torch.enable_grad()  # the references run autograd, whatever mode the caller is in
def check_grad_accumulation(fn: Callable[[nn.Module, torch.Tensor, torch.Tensor, int], float], *,
                            strict: bool = False, hidden: bool = False) -> CheckResult:
    """Check ``fn(model, x, y, n_micro)`` -> the mean loss, leaving the full batch's gradient in ``.grad``.

    ``x, y`` are one batch of ``B`` rows (``B`` divisible by ``n_micro``); the function runs ``n_micro``
    forward and backward passes of ``B / n_micro`` rows, each loss divided by ``n_micro``, so that the
    gradients add up to the gradient of the whole batch's mean loss (the model's gradients start empty).
    """
    name = "check_grad_accumulation"
    require_callable(name, fn)
    verdict = Verdict(name)
    cases = [(90, (11, 16, 2, 2, 8), (8, 8), 2), (91, (9, 24, 3, 1, 6), (12, 6), 3),
             (92, (7, 12, 2, 2, 5), (8, 5), 4)]
    cases += [(93, (13, 8, 4, 3, 12), (10, 12), 5), (94, (5, 20, 2, 1, 7), (6, 7), 6)] if hidden else []
    forbidden = Forbidden({lib.train: "gpt_lesson.training.train"})
    for seed, sizes, (B, T), n in cases:
        V, C, nh, L, bs = sizes
        model = _model(seed, sizes)
        x, y = _batch(seed, V, B, T)
        reference = copy.deepcopy(model)
        _, loss = reference(x, y)
        loss.backward()
        full = _grads(reference)
        m = B // n
        micro = []
        for i in range(n):
            reference.zero_grad(set_to_none=True)
            reference(x[i * m:(i + 1) * m], y[i * m:(i + 1) * m])[1].backward()
            micro.append(_grads(reference))
        where = say(TEXTS["acc_case"], V=V, C=C, nh=nh, L=L, bs=bs, shape=(B, T), n=n) + "\n"
        forwards = _Forwards()
        outcome = _call(fn, (model, x.clone(), y.clone(), n), forbidden, watch=forwards.watch(model))
        if outcome.error is not None or outcome.stub:
            early = _screen(verdict, outcome, where if outcome.error is not None else "")
            if early is not None:
                return early
        got = _grads(model)
        if outcome.value is None and all(g is None for g in got):
            return verdict.not_attempted()
        if not _same_grads(got, full):
            bug = _accumulation_bug(got, full, micro, forwards, B, T, n)
            differ = [name for (name, _), g, f in zip(model.named_parameters(), got, full)
                      if g is None or not close(g, f)]
            diffs = [float((g - f).abs().max()) for g, f in zip(got, full) if g is not None]
            text = where + _text("grad_mismatch", count=len(differ), total=len(full), names=", ".join(differ[:3]),
                                 diff=max(diffs) if diffs else float("nan"))
            return verdict.failed_with([bug], text) if bug else verdict.failed(WRONG_GRADIENT, text)
        if n > 1 and len(forwards.shapes) == 1 and forwards.shapes[0][0] == B:
            return verdict.failed_with([_bug(NO_MICRO_BATCHES, "no_micro", B=B, m=m)], where.rstrip("\n"))
        if outcome.value is None:
            return verdict.failed(LOSS_NOT_RETURNED, where + _text("acc_no_return"))
        value = _as_float(outcome.value)
        if value is None:
            return verdict.failed(WRONG_TYPE, where + _text("loss_kind", kind=kind_of(outcome.value)))
        if not math.isclose(value, loss.item(), rel_tol=1e-4, abs_tol=1e-5):
            return verdict.failed(WRONG_MEAN_LOSS, where + _text("mean_loss", got=value, expected=loss.item()))
    return verdict.passed(say(TEXTS["acc_passed"], count=len(cases)))


__all__ = ["check_lr_schedule", "check_train_step", "check_estimate_loss", "check_grad_accumulation", "Events"]
