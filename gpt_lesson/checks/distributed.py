"""Self-checks for lesson 12 (scaling out): the arithmetic of data parallelism."""
from __future__ import annotations

from typing import Callable

from torch import nn

from ..distributed import allreduce_bytes
from . import CheckResult

# --- self-checks for the lesson's exercises ---------------------------------------------

def _verdict(passed: bool, attempted: bool, message: str, diagnosis: str | None = None) -> CheckResult:
    mark = "✅" if passed else ("⏳" if not attempted else "❌")
    print(f"{mark} {message}")
    return CheckResult(passed, attempted, diagnosis, f"{mark} {message}")


def _run_cases(name: str, fn: Callable, cases: list[tuple[tuple, int]],
               diagnose: Callable[[tuple, object], str | None]) -> CheckResult:
    """Call ``fn`` on each case; an untouched stub is 'not attempted yet', never an error."""
    for args, expected in cases:
        try:
            got = fn(*args)
        except NotImplementedError:
            return _verdict(False, False, f"{name}: not attempted yet (the stub raises NotImplementedError).")
        except Exception as e:  # a learner's bug is reported, not raised, so the notebook runs on
            return _verdict(False, True, f"{name}: your function raised {type(e).__name__}: {e}", "raised")
        if got is None:
            return _verdict(False, False, f"{name}: not attempted yet (the function returns None).")
        if got != expected:
            diagnosis = diagnose(args, got)
            hint = f" Likely bug: {diagnosis}." if diagnosis else ""
            return _verdict(False, True, f"{name}: for {args} expected {expected}, got {got}.{hint}",
                            diagnosis or "wrong value")
    return _verdict(True, True, f"{name}: passed ({len(cases)} cases).")


def check_effective_batch(fn: Callable[[int, int, int], int]) -> CheckResult:
    """Check ``fn(micro_batch_size, grad_accum_steps, world_size) -> rows per optimizer step``."""
    cases = [((8, 1, 1), 8), ((4, 3, 2), 24), ((2, 4, 8), 64), ((16, 2, 4), 128)]

    def diagnose(args: tuple, got: object) -> str | None:
        m, a, w = args
        if got == m * a:
            return "you counted one rank's rows; each of the world_size ranks runs its own micro-batches"
        if got == m * w:
            return "you left out gradient accumulation; each rank runs grad_accum_steps micro-batches per step"
        if got == m:
            return "that is one micro-batch; multiply by the micro-batches per rank and by the ranks"
        return None

    return _run_cases("check_effective_batch", fn, cases, diagnose)


def check_grad_accum_steps(fn: Callable[[int, int, int], int]) -> CheckResult:
    """Check ``fn(batch_size, micro_batch_size, world_size) -> micro-batches per rank``."""
    cases = [((32, 8, 1), 4), ((32, 8, 2), 2), ((64, 4, 4), 4), ((12, 6, 2), 1)]

    def diagnose(args: tuple, got: object) -> str | None:
        b, m, w = args
        if got == b // m:
            return ("you ignored the other ranks: with that many micro-batches on each of the "
                    "world_size ranks the global batch would be world_size times too large")
        if got == b // w:
            return "that is the rows per rank, not the number of micro-batches; divide by micro_batch_size too"
        return None

    return _run_cases("check_grad_accum_steps", fn, cases, diagnose)


def check_allreduce_bytes(fn: Callable[[nn.Module], int]) -> CheckResult:
    """Check ``fn(model) -> bytes of gradient all-reduced per step`` on a few small GPTs (float32)."""
    from ..model import GPT

    models = [GPT(65, 32, 4, 2, 16, dropout=0.0), GPT(30, 48, 3, 1, 24, dropout=0.0)]
    cases = [((m,), allreduce_bytes(m)) for m in models]

    def diagnose(args: tuple, got: object) -> str | None:
        model = args[0]
        n_params = sum(p.numel() for p in model.parameters())
        with_buffers = sum(t.numel() for t in model.state_dict().values())
        if got == n_params:
            return "that is the number of values, not bytes; each float32 takes 4 bytes"
        if got == with_buffers * 4 or got == with_buffers:
            return ("you counted the state_dict, which holds the tril buffers; buffers have no "
                    "gradient and are never all-reduced: count model.parameters()")
        if got == n_params * 8:
            return "8 bytes is float64; the gradients are float32 (4 bytes)"
        if got == n_params * 32:
            return "32 is the bits of a float32; a float32 takes 4 bytes"
        return None

    return _run_cases("check_allreduce_bytes", fn, cases, diagnose)
