"""Checks for lesson 12 (scaling out): the arithmetic of data parallelism.

The answers are whole numbers; the runner refuses a float, a string, a bool, an array or a tensor
by name instead of converting it.
"""
from __future__ import annotations

from collections.abc import Callable

from torch import nn

from .. import distributed as lib
from ..model import GPT
from .runner import Forbidden, learner_check, require_callable, run_value_cases
from .verdicts import N_, Bug, CheckResult, Verdict, say

# Labels: stable identifiers in CheckResult.diagnosis.
ONE_RANK_ONLY = N_("one rank's rows only")
NO_GRAD_ACCUM = N_("gradient accumulation left out")
ONE_MICRO_BATCH = N_("one micro-batch only")
OTHER_RANKS_IGNORED = N_("other ranks ignored")
ROWS_PER_RANK = N_("rows per rank, not micro-batches")
VALUES_NOT_BYTES = N_("values, not bytes")
COUNTED_BUFFERS = N_("buffers counted")
FLOAT64_BYTES = N_("8 bytes per value (float64)")
BITS_NOT_BYTES = N_("bits, not bytes")

TEXTS = {
    "one_rank": N_("you counted one rank's rows; each of the world_size ranks runs its own micro-batches."),
    "no_accum": N_("you left out gradient accumulation; each rank runs grad_accum_steps micro-batches per step."),
    "one_micro": N_("that is one micro-batch; multiply by the micro-batches per rank and by the ranks."),
    "ignored_ranks": N_("you ignored the other ranks: with that many micro-batches on each of the world_size "
                        "ranks the global batch would be world_size times too large."),
    "rows_per_rank": N_("that is the rows per rank, not the number of micro-batches; divide by micro_batch_size too."),
    "values": N_("that is the number of values, not bytes; each float32 takes 4 bytes."),
    "buffers": N_("you counted the state_dict, which holds the tril buffers; buffers have no gradient and are "
                  "never all-reduced: count model.parameters()."),
    "float64": N_("8 bytes is float64; the gradients are float32 (4 bytes)."),
    "bits": N_("32 is the bits of a float32; a float32 takes 4 bytes."),
    "model": N_("a GPT with {n_params:,} parameters"),
}


def _bug(label: str, key: str) -> Bug:
    return Bug(label, TEXTS[key])


@learner_check
def check_effective_batch(fn: Callable[[int, int, int], int], *, strict: bool = False,
                          hidden: bool = False) -> CheckResult:
    """Check ``fn(micro_batch_size, grad_accum_steps, world_size) -> rows per optimizer step``."""
    name = "check_effective_batch"
    require_callable(name, fn)
    cases = [((8, 1, 1), 8), ((4, 3, 2), 24), ((2, 4, 8), 64), ((16, 2, 4), 128)]
    cases += [((3, 5, 7), 105), ((1, 16, 3), 48)] if hidden else []

    def diagnose(args: tuple, got: int) -> Bug | None:
        m, a, w = args
        options = [(m * a, ONE_RANK_ONLY, "one_rank"), (m * w, NO_GRAD_ACCUM, "no_accum"),
                   (m, ONE_MICRO_BATCH, "one_micro")]
        return next((_bug(label, key) for value, label, key in options if got == value), None)

    forbidden = Forbidden({lib.effective_batch: "gpt_lesson.distributed.effective_batch"})
    return run_value_cases(Verdict(name), fn, cases, diagnose=diagnose, forbidden=forbidden)


@learner_check
def check_grad_accum_steps(fn: Callable[[int, int, int], int], *, strict: bool = False,
                           hidden: bool = False) -> CheckResult:
    """Check ``fn(batch_size, micro_batch_size, world_size) -> micro-batches per rank``."""
    name = "check_grad_accum_steps"
    require_callable(name, fn)
    cases = [((32, 8, 1), 4), ((32, 8, 2), 2), ((64, 4, 4), 4), ((12, 6, 2), 1)]
    cases += [((96, 4, 3), 8), ((40, 5, 8), 1)] if hidden else []

    def diagnose(args: tuple, got: int) -> Bug | None:
        b, m, w = args
        options = [(b // m, OTHER_RANKS_IGNORED, "ignored_ranks"), (b // w, ROWS_PER_RANK, "rows_per_rank")]
        return next((_bug(label, key) for value, label, key in options if got == value), None)

    forbidden = Forbidden({lib.grad_accum_steps_for: "gpt_lesson.distributed.grad_accum_steps_for"})
    return run_value_cases(Verdict(name), fn, cases, diagnose=diagnose, forbidden=forbidden)


@learner_check
def check_allreduce_bytes(fn: Callable[[nn.Module], int], *, strict: bool = False,
                          hidden: bool = False) -> CheckResult:
    """Check ``fn(model) -> bytes of gradient all-reduced per step`` on a few small GPTs (float32)."""
    name = "check_allreduce_bytes"
    require_callable(name, fn)
    models = [GPT(65, 32, 4, 2, 16, dropout=0.0), GPT(30, 48, 3, 1, 24, dropout=0.0)]
    models += [GPT(11, 8, 2, 3, 40, dropout=0.0)] if hidden else []
    cases = [((m,), lib.allreduce_bytes(m)) for m in models]

    def diagnose(args: tuple, got: int) -> Bug | None:
        model = args[0]
        n_params = sum(p.numel() for p in model.parameters())
        with_buffers = sum(t.numel() for t in model.state_dict().values())
        options = [(n_params, VALUES_NOT_BYTES, "values"), (with_buffers * 4, COUNTED_BUFFERS, "buffers"),
                   (with_buffers, COUNTED_BUFFERS, "buffers"), (n_params * 8, FLOAT64_BYTES, "float64"),
                   (n_params * 32, BITS_NOT_BYTES, "bits")]
        return next((_bug(label, key) for value, label, key in options if got == value), None)

    def describe(args: tuple) -> str:
        return say(TEXTS["model"], n_params=sum(p.numel() for p in args[0].parameters()))

    forbidden = Forbidden({lib.allreduce_bytes: "gpt_lesson.distributed.allreduce_bytes"})
    return run_value_cases(Verdict(name), fn, cases, diagnose=diagnose, forbidden=forbidden, describe=describe)
