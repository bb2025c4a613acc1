"""Lesson 09's checks (gpt_lesson.checks.training): right answers in several styles pass, every named
mistake gets its own diagnosis, stubs and crashes are reported, and nothing leaks out of a check.

The solutions are written the way learners write them (nanoGPT's loop, the PyTorch tutorials' style,
hand-rolled variants), independently of the check's own reference.
"""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gpt_lesson import checks
from gpt_lesson import training as lib
from gpt_lesson.checks import training as tc
from gpt_lesson.checks.verdicts import CALLED_LIBRARY, NOT_ATTEMPTED, RAISED, WRONG_TYPE


def stub(*args):
    raise NotImplementedError


def returns_none(*args):
    return None


# ================================================================ 1. the learning-rate schedule
def lr_branches(step, max_lr, min_lr, warmup_steps, max_steps):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= max_steps:
        return min_lr
    progress = (step - warmup_steps) / (max_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


def lr_clamped(step, max_lr, min_lr, warmup_steps, max_steps):
    if step < warmup_steps:
        return (step + 1) / warmup_steps * max_lr
    ratio = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return min_lr + (max_lr - min_lr) * (math.cos(math.pi * ratio) + 1) / 2


def lr_numpy(step, max_lr, min_lr, warmup_steps, max_steps):
    warm = max_lr * (step + 1) / warmup_steps if step < warmup_steps else None
    t = np.clip((step - warmup_steps) / (max_steps - warmup_steps), 0.0, 1.0)
    cosine = 0.5 * (max_lr + min_lr) + 0.5 * (max_lr - min_lr) * np.cos(np.pi * t)
    return np.float64(warm if warm is not None else cosine)


def lr_tensor(step, max_lr, min_lr, warmup_steps, max_steps):
    if step < warmup_steps:
        return torch.tensor(max_lr * (step + 1) / warmup_steps, dtype=torch.float64)
    p = torch.tensor(min(step - warmup_steps, max_steps - warmup_steps) / (max_steps - warmup_steps),
                     dtype=torch.float64)
    return min_lr + (max_lr - min_lr) * 0.5 * (1 + torch.cos(torch.pi * p))


LR_STYLES = [lr_branches, lr_clamped, lr_numpy, lr_tensor]


@pytest.mark.parametrize("fn", LR_STYLES, ids=lambda f: f.__name__)
def test_lr_schedules_in_every_style_pass(fn):
    assert checks.check_lr_schedule(fn).passed
    assert checks.check_lr_schedule(fn, hidden=True).passed


def _cosine(step, M, m, W, S, *, start=None, span=None, low=None, shape="cos", clamp=True):
    start = W if start is None else start
    span = S - W if span is None else span
    p = (step - start) / span
    p = min(1.0, p) if clamp else p
    low = m if low is None else low
    factor = {"cos": 0.5 * (1 + math.cos(math.pi * p)), "full": 0.5 * (1 + math.cos(2 * math.pi * p)),
              "no_half": 1 + math.cos(math.pi * p), "rising": 0.5 * (1 - math.cos(math.pi * p)),
              "linear": 1 - p, "exp": 0.1 ** p}[shape]
    return low + factor * (M - low)


def lr_with(warm=None, **decay):
    def fn(step, M, m, W, S):
        if step < W or (warm == "le" and step <= W):
            if warm == "from0":
                return M * step / W
            if warm == "nanogpt":
                return M * (step + 1) / (W + 1)
            if warm == "square":
                return M * ((step + 1) / W) ** 2
            return M * (step + 1) / W
        return _cosine(step, M, m, W, S, **decay)
    return fn


def lr_no_warmup(step, M, m, W, S):
    return _cosine(step, M, m, 0, S)


LR_BUGS = [
    (lr_with("from0"), tc.WARMUP_OFF_BY_ONE, "first update is wasted"),
    (lr_with("nanogpt"), tc.WARMUP_OFF_BY_ONE, "nanoGPT's convention"),
    (lr_with("le"), tc.WARMUP_OFF_BY_ONE, "above max_lr"),
    (lr_no_warmup, tc.NO_WARMUP, "no warm-up"),
    (lr_with("square"), tc.WARMUP_WRONG, "straight line"),
    (lr_with(low=0.0), tc.DECAYS_TO_ZERO, "ends at 0"),
    (lambda s, M, m, W, S: lr_with(span=S)(s, M, m, W, S), tc.COSINE_NOT_REACHING_MIN, "max_steps - warmup_steps"),
    (lambda s, M, m, W, S: lr_with(start=0, span=S)(s, M, m, W, S), tc.COSINE_FROM_STEP_0, "starts at step 0"),
    (lr_with(shape="full"), tc.COSINE_SHAPE, "whole period"),
    (lr_with(shape="no_half"), tc.COSINE_SHAPE, "without the 0.5"),
    (lr_with(shape="rising"), tc.COSINE_SHAPE, "rises during the decay"),
    (lr_with(shape="linear"), tc.LINEAR_DECAY, "straight line"),
    (lr_with(clamp=False), tc.NOT_HELD_AFTER_END, "clamp the progress"),
    (lr_with(shape="exp"), tc.DECAY_WRONG, "min_lr + 0.5"),
    (lambda s, M, m, W, S: f"{lr_branches(s, M, m, W, S)}", tc.NOT_A_NUMBER, "a str"),
    (lambda s, M, m, W, S: [lr_branches(s, M, m, W, S)], tc.NOT_A_NUMBER, "a list"),
    (lambda s, M, m, W, S: float("nan"), tc.NOT_A_NUMBER, "a float"),
    (lambda s, M, m, W, S: True, tc.NOT_A_NUMBER, "a bool"),
]


@pytest.mark.parametrize("fn, label, fragment", LR_BUGS, ids=[f"{i}-{label}" for i, (_, label, _) in enumerate(LR_BUGS)])
def test_lr_bugs_are_named(fn, label, fragment):
    result = checks.check_lr_schedule(fn)
    assert not result.passed and result.attempted and result.diagnosis == label, result.message
    assert fragment in result.message


def test_lr_message_names_the_step_and_both_values():
    result = checks.check_lr_schedule(lr_with("from0"))
    assert "step 0 (warm-up): expected 0.0001, got 0." in result.message


def test_lr_two_bugs_are_both_named():
    result = checks.check_lr_schedule(lr_with("from0", low=0.0))
    assert result.diagnosis == tc.WARMUP_OFF_BY_ONE and "Then also: your cosine ends at 0" in result.message


def test_lr_division_by_zero_without_warmup_gets_a_hint():
    def divides(step, M, m, W, S):
        warm = min(1.0, (step + 1) / W)
        return M * warm if step < W else lr_branches(step, M, m, W, S)
    result = checks.check_lr_schedule(divides)
    assert result.diagnosis == RAISED and "warmup_steps may be 0" in result.message


def test_lr_calling_lr_at_is_refused():
    def wraps(step, M, m, W, S):
        return lib.lr_at(step, lib.TrainConfig(max_steps=S, learning_rate=M, min_lr=m, warmup_steps=W))
    assert checks.check_lr_schedule(wraps).diagnosis == CALLED_LIBRARY


@pytest.mark.parametrize("fn", [stub, returns_none])
def test_lr_stub_is_not_attempted(fn):
    result = checks.check_lr_schedule(fn)
    assert not result.attempted and result.diagnosis == NOT_ATTEMPTED


def test_lr_hidden_cases_catch_a_schedule_fitted_to_the_visible_ones():
    def fitted(step, M, m, W, S):
        return lr_branches(step, M, m, W, S) if S in (100, 30, 25) else 0.0
    assert checks.check_lr_schedule(fitted).passed
    assert not checks.check_lr_schedule(fitted, hidden=True).passed


# ================================================================ 2. one training step
def step_library_order(model, optimizer, x, y, max_norm):
    _, loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def step_zero_first(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    logits, loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
    optimizer.step()
    return loss.item()


def step_manual_loss(model, optimizer, x, y, max_norm):
    model.zero_grad(set_to_none=False)
    logits, _ = model(x)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    torch.autograd.backward(loss)
    torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
    optimizer.step()
    return loss.detach()


def step_hand_zeroed(model, optimizer, x, y, max_norm):
    for p in model.parameters():
        p.grad = None
    loss = model(x, y)[1]
    loss.backward()
    params = [p for p in model.parameters() if p.grad is not None]
    total = torch.sqrt(sum((p.grad ** 2).sum() for p in params))
    scale = min(1.0, max_norm / (float(total) + 1e-6))
    for p in params:
        p.grad.mul_(scale)
    optimizer.step()
    return float(loss.detach())


STEP_STYLES = [step_library_order, step_zero_first, step_manual_loss, step_hand_zeroed]


@pytest.mark.parametrize("fn", STEP_STYLES, ids=lambda f: f.__name__)
def test_training_steps_in_every_style_pass(fn):
    assert checks.check_train_step(fn).passed
    assert checks.check_train_step(fn, hidden=True).passed


def test_the_step_cases_clip_for_real():
    """Every case's gradient is larger than its max_norm, so a missing clip changes the update."""
    for case in tc._step_cases(hidden=True):
        model = tc._model(case.seed, case.sizes)
        x, y = tc._batch(case.seed * 10 + 1, case.sizes[0], *case.shape)
        model(x, y)[1].backward()
        assert tc._norm(tc._grads(model)) > 2 * case.max_norm


def _order(*parts):
    """A step made of the named parts, in this order."""
    def fn(model, optimizer, x, y, max_norm):
        loss = None
        for part in parts:
            if part == "forward":
                loss = model(x, y)[1]
            elif part == "backward":
                loss.backward()
            elif part == "clip":
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            elif part == "clip1":
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            elif part == "clip_value":
                torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
            elif part == "step":
                optimizer.step()
            elif part == "zero":
                optimizer.zero_grad()
            elif part == "double_lr":
                optimizer.param_groups[0]["lr"] *= 2
        return None if "no_return" in parts else loss.item()
    return fn


def step_new_loss(model, optimizer, x, y, max_norm):
    step_library_order(model, optimizer, x, y, max_norm)
    return model(x, y)[1].item()  # the loss after the update


STEP_BUGS = [
    (_order("zero", "forward", "backward", "clip"), tc.NO_STEP),
    (_order("zero", "forward", "backward", "clip", "step", "step"), tc.STEPPED_TWICE),
    (_order("zero", "forward", "clip", "step"), tc.NO_BACKWARD),
    (_order("zero", "forward", "clip", "step", "backward"), tc.STEP_BEFORE_BACKWARD),
    (_order("forward", "backward", "clip", "zero", "step"), tc.ZERO_GRAD_BEFORE_STEP),
    (_order("forward", "backward", "clip", "step"), tc.NO_ZERO_GRAD),
    (_order("zero", "forward", "backward", "step"), tc.NOT_CLIPPED),
    (_order("zero", "forward", "backward", "step", "clip"), tc.CLIP_AFTER_STEP),
    (_order("zero", "clip", "forward", "backward", "step"), tc.CLIP_BEFORE_BACKWARD),
    (_order("zero", "forward", "backward", "clip_value", "step"), tc.CLIP_BY_VALUE),
    (_order("zero", "forward", "backward", "clip1", "step"), tc.CLIP_WRONG_NORM),
    (step_new_loss, tc.WRONG_LOSS),
    (_order("zero", "forward", "backward", "clip", "step", "no_return"), tc.LOSS_NOT_RETURNED),
    (_order("zero", "forward", "backward", "clip", "double_lr", "step"), tc.WRONG_UPDATE),
    (lambda *a: str(step_library_order(*a)), WRONG_TYPE),
]


@pytest.mark.parametrize("fn, label", STEP_BUGS, ids=[f"{i}-{label}" for i, (_, label) in enumerate(STEP_BUGS)])
def test_training_step_bugs_are_named(fn, label):
    result = checks.check_train_step(fn)
    assert not result.passed and result.attempted and result.diagnosis == label, result.message


def test_training_step_message_names_the_call_and_the_parameters():
    result = checks.check_train_step(_order("forward", "backward", "clip", "step"))
    assert "Call 2 of 3" in result.message and "SGD(lr=0.5)" in result.message
    assert "parameter tensors differ" in result.message and "backward adds to .grad" in result.message


def test_training_step_not_clipped_names_the_norm():
    result = checks.check_train_step(_order("zero", "forward", "backward", "step"))
    assert "above max_norm=0.25" in result.message


@pytest.mark.parametrize("fn", [stub, returns_none])
def test_training_step_stub_is_not_attempted(fn):
    assert checks.check_train_step(fn).diagnosis == NOT_ATTEMPTED


@pytest.mark.parametrize("fn, fragment", [
    (lambda m, o, x, y, c: m(x, y)[1].item().backward(), "loss.item() is a float"),
    (lambda m, o, x, y, c: [m(x, y)[1].backward(), m(x, y)], "logits, loss = model(x, y)"),
])
def test_training_step_errors_get_a_hint(fn, fragment):
    def unpack_one(model, optimizer, x, y, max_norm):
        loss = model(x, y)
        loss.backward()
    if "logits" in fragment:
        fn = unpack_one
    result = checks.check_train_step(fn)
    assert result.diagnosis == RAISED and "Likely cause" in result.message, result.message
    assert fragment in result.message or "AttributeError" in result.message


def test_training_step_backward_under_no_grad_gets_a_hint():
    def under_no_grad(model, optimizer, x, y, max_norm):
        with torch.no_grad():
            loss = model(x, y)[1]
        loss.backward()
    result = checks.check_train_step(under_no_grad)
    assert result.diagnosis == RAISED and "inside torch.no_grad()" in result.message


def test_a_notimplementederror_from_inside_torch_is_not_a_stub():
    def deep(model, optimizer, x, y, max_norm):
        def helper():
            raise NotImplementedError("an op missing on this device")
        helper()
    result = checks.check_train_step(deep)
    assert result.attempted and result.diagnosis == RAISED and "missing on this device" in result.message


# ================================================================ 3. the loss estimate
@torch.no_grad()
def estimate_decorated(model, batches):
    was_training = model.training
    model.eval()
    losses = [model(x, y)[1].item() for x, y in batches]
    model.train(was_training)
    return sum(losses) / len(losses)


def estimate_inference_mode(model, batches):
    mode = model.training
    model.eval()
    try:
        with torch.inference_mode():
            return torch.stack([model(x, y)[1] for x, y in batches]).mean()
    finally:
        model.train(mode)


def estimate_numpy(model, batches):
    was = model.training
    model.eval()
    with torch.no_grad():
        out = np.mean([model(x, targets=y)[1].item() for x, y in batches])
    if was:
        model.train()
    return out


def estimate_running_total(model, batches):
    training = model.training
    model.train(False)
    total = 0.0
    with torch.no_grad():
        for x, y in batches:
            logits, _ = model(x)
            total += F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()
    model.train(training)
    return total / len(batches)


EST_STYLES = [estimate_decorated, estimate_inference_mode, estimate_numpy, estimate_running_total]


@pytest.mark.parametrize("fn", EST_STYLES, ids=lambda f: f.__name__)
def test_estimates_in_every_style_pass(fn):
    assert checks.check_estimate_loss(fn).passed
    assert checks.check_estimate_loss(fn, hidden=True).passed


def _estimate(eval_mode=True, no_grad=True, restore="saved", reduce="mean", touch=False):
    def fn(model, batches):
        was = model.training
        if eval_mode:
            model.eval()
        with torch.no_grad() if no_grad else torch.enable_grad():
            losses = [model(x, y)[1].item() for x, y in batches]
        if touch:
            with torch.no_grad():
                next(model.parameters()).add_(1.0)
        if restore == "saved":
            model.train(was)
        elif restore == "train":
            model.train()
        return {"mean": sum(losses) / len(losses), "sum": sum(losses), "last": losses[-1],
                "exp": math.exp(sum(losses) / len(losses)), "list": losses}[reduce]
    return fn


EST_BUGS = [
    (_estimate(eval_mode=False), tc.EVAL_MODE_MISSING, "model.eval()"),
    (_estimate(no_grad=False), tc.GRADIENTS_TRACKED, "torch.no_grad()"),
    (_estimate(restore="train"), tc.MODE_NOT_RESTORED, "was in eval mode before"),
    (_estimate(restore="none"), tc.MODE_NOT_RESTORED, "was in training mode before"),
    (_estimate(reduce="sum"), tc.LOSS_SUMMED, "sum of the 3 batch losses"),
    (_estimate(reduce="last"), tc.ONE_BATCH_ONLY, "one batch only"),
    (_estimate(touch=True), tc.WEIGHTS_CHANGED, "changed the model's weights"),
    (_estimate(reduce="exp"), tc.WRONG_ESTIMATE, "expected"),
    (_estimate(reduce="list"), WRONG_TYPE, "a list"),
]


@pytest.mark.parametrize("fn, label, fragment", EST_BUGS, ids=[f"{i}-{label}" for i, (_, label, _) in enumerate(EST_BUGS)])
def test_estimate_bugs_are_named(fn, label, fragment):
    result = checks.check_estimate_loss(fn)
    assert not result.passed and result.attempted and result.diagnosis == label, result.message
    assert fragment in result.message


def test_estimate_calling_the_library_is_refused():
    def library(model, batches):
        data = torch.cat([torch.cat([x[0], y[0, -1:]]) for x, y in batches])
        return lib.evaluate_split(model, data)
    assert checks.check_estimate_loss(library).diagnosis == CALLED_LIBRARY


@pytest.mark.parametrize("fn", [stub, returns_none])
def test_estimate_stub_is_not_attempted(fn):
    assert checks.check_estimate_loss(fn).diagnosis == NOT_ATTEMPTED


def test_estimate_leaves_a_tuple_error_with_a_hint():
    def item_of_tuple(model, batches):
        return sum(model(x, y).item() for x, y in batches)
    result = checks.check_estimate_loss(item_of_tuple)
    assert result.diagnosis == RAISED and "AttributeError" in result.message


# ================================================================ 4. gradient accumulation
def acc_chunk(model, x, y, n_micro):
    total = 0.0
    for xb, yb in zip(x.chunk(n_micro), y.chunk(n_micro)):
        _, loss = model(xb, yb)
        (loss / n_micro).backward()
        total += loss.item() / n_micro
    return total


def acc_slices(model, x, y, n_micro):
    m = x.size(0) // n_micro
    losses = []
    for i in range(n_micro):
        loss = model(x[i * m:(i + 1) * m], y[i * m:(i + 1) * m])[1]
        loss.div(n_micro).backward()
        losses.append(loss.detach())
    return torch.stack(losses).mean()


def acc_view(model, x, y, n_micro):
    B, T = x.shape
    xs, ys = x.view(n_micro, B // n_micro, T), y.view(n_micro, B // n_micro, T)
    mean = 0.0
    for xb, yb in zip(xs, ys):
        loss = model(xb, yb)[1] / n_micro
        loss.backward()
        mean += loss.item()
    return mean


def acc_split(model, x, y, n_micro):
    model.zero_grad(set_to_none=True)
    size = len(x) // n_micro
    out = []
    for xb, yb in zip(torch.split(x, size), torch.split(y, size)):
        logits, _ = model(xb)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), yb.reshape(-1))
        (loss * (1.0 / n_micro)).backward()
        out.append(loss.item())
    return float(np.mean(out))


ACC_STYLES = [acc_chunk, acc_slices, acc_view, acc_split]


@pytest.mark.parametrize("fn", ACC_STYLES, ids=lambda f: f.__name__)
def test_accumulations_in_every_style_pass(fn):
    assert checks.check_grad_accumulation(fn).passed
    assert checks.check_grad_accumulation(fn, hidden=True).passed


def _accumulate(divide="n", zero_in_loop=False, rows="ok", dim=0, reduce="mean", backward=True):
    def fn(model, x, y, n):
        B = x.size(0)
        m = B // n
        losses = []
        for i in range(n):
            if zero_in_loop:
                model.zero_grad()
            if dim == 1:
                t = x.size(1) // n
                xb, yb = x[:, i * t:(i + 1) * t], y[:, i * t:(i + 1) * t]
            else:
                j = 0 if rows == "same" else i
                xb, yb = x[j * m:(j + 1) * m], y[j * m:(j + 1) * m]
            loss = model(xb, yb)[1]
            scale = {"n": 1 / n, "none": 1.0, "twice": 1 / n ** 2, "third": 1 / 3}[divide]
            if backward:
                (loss * scale).backward()
            losses.append(loss.item())
        return {"mean": sum(losses) / n, "sum": sum(losses), "none": None, "str": "1.0"}[reduce]
    return fn


def acc_whole_batch(model, x, y, n):
    loss = model(x, y)[1]
    loss.backward()
    return loss.item()


def acc_inputs_as_targets(model, x, y, n):
    total = 0.0
    for xb in x.chunk(n):
        loss = model(xb, xb)[1] / n  # the inputs, not the next characters
        loss.backward()
        total += loss.item()
    return total


ACC_BUGS = [
    (_accumulate(divide="none"), tc.LOSS_NOT_DIVIDED, "2 times the full batch's"),
    (_accumulate(divide="twice"), tc.DIVIDED_TWICE, "1/2 of the full batch's"),
    (_accumulate(divide="third"), tc.GRADIENT_SCALED, "0.6667 times the full batch's"),
    (_accumulate(zero_in_loop=True), tc.ZERO_GRAD_IN_LOOP, "only the last micro-batch"),
    (_accumulate(rows="same"), tc.SAME_MICRO_BATCH, "the same rows"),
    (lambda m, x, y, n: _accumulate()(m, x[: len(x) // n], y[: len(y) // n], 1), tc.SAME_MICRO_BATCH, "stopped after"),
    (_accumulate(dim=1), tc.SPLIT_WRONG_DIM, "(8, 4)"),
    (acc_whole_batch, tc.NO_MICRO_BATCHES, "whole batch of 8 rows"),
    (_accumulate(backward=False), tc.NO_BACKWARD, "no gradient"),
    (acc_inputs_as_targets, tc.WRONG_GRADIENT, "parameter gradients differ"),
    (_accumulate(reduce="sum"), tc.WRONG_MEAN_LOSS, "mean of the micro-batches' losses"),
    (_accumulate(reduce="none"), tc.LOSS_NOT_RETURNED, "returned None"),
    (_accumulate(reduce="str"), WRONG_TYPE, "a str"),
]


@pytest.mark.parametrize("fn, label, fragment", ACC_BUGS, ids=[f"{i}-{label}" for i, (_, label, _) in enumerate(ACC_BUGS)])
def test_accumulation_bugs_are_named(fn, label, fragment):
    result = checks.check_grad_accumulation(fn)
    assert not result.passed and result.attempted and result.diagnosis == label, result.message
    assert fragment in result.message


@pytest.mark.parametrize("fn", [stub, returns_none])
def test_accumulation_stub_is_not_attempted(fn):
    assert checks.check_grad_accumulation(fn).diagnosis == NOT_ATTEMPTED


# ================================================================ all four
CHECKS = {checks.check_lr_schedule: lr_branches, checks.check_train_step: step_library_order,
          checks.check_estimate_loss: estimate_decorated, checks.check_grad_accumulation: acc_chunk}


def _states():
    return torch.random.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()


def reseeds(*args):
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    raise ValueError("after reseeding")


@pytest.mark.parametrize("check", list(CHECKS), ids=lambda c: c.__name__)
def test_checks_leave_the_random_state_threads_and_grad_mode_alone(check):
    torch.manual_seed(0)
    before, threads = _states(), torch.get_num_threads()
    with torch.no_grad():  # a learner's notebook may be in no-grad mode: the check still runs autograd
        for fn in (CHECKS[check], reseeds, stub):
            check(fn)
            assert torch.get_num_threads() == threads and not torch.is_grad_enabled()
    after = _states()
    assert torch.equal(before[0], after[0]) and before[1] == after[1] and np.array_equal(before[2], after[2])


@pytest.mark.parametrize("check", list(CHECKS), ids=lambda c: c.__name__)
def test_strict_raises_on_failure_and_returns_on_success(check, capsys):
    assert check(CHECKS[check], strict=True).passed
    with pytest.raises(AssertionError, match="not attempted"):
        check(stub, strict=True)
    with pytest.raises(TypeError, match=r"expects your function \(something callable\)"):
        check(None)


def test_the_profiler_is_restored_and_a_python_profiler_is_chained():
    import sys

    seen = []

    def outer(frame, event, arg):
        if event == "call":
            seen.append(frame.f_code.co_name)

    sys.setprofile(outer)
    try:
        assert checks.check_train_step(step_library_order).passed
        assert sys.getprofile() is outer
    finally:
        sys.setprofile(None)
    assert "step_library_order" in seen


def test_every_training_label_has_a_test():
    tables = [label for _, label, _ in LR_BUGS + EST_BUGS + ACC_BUGS] + [label for _, label in STEP_BUGS]
    labels = {v for k, v in vars(tc).items() if k.isupper() and isinstance(v, str)}
    assert labels - set(tables) == set()
    assert labels <= set(checks.LABELS.values())
