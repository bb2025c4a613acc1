"""Checks for lesson 12 (scaling out): the arithmetic of data parallelism.

The answers are whole numbers; the runner refuses a float, a string, a bool, an array or a tensor
by name instead of converting it.
"""
from __future__ import annotations

import copy
import inspect
import io
import multiprocessing as mp
import os
import queue
import socket
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from .. import distributed as lib
from ..model import GPT
from ..training import micro_batches
from .runner import Forbidden, Outcome, close, fmt_row, learner_check, require_callable, run_value_cases, screen
from .verdicts import N_, WRONG_VALUES, Bug, CheckResult, Verdict, say

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
NEVER_REDUCED = N_("all_reduce never called")
SUMMED_NOT_AVERAGED = N_("summed, not averaged")
DIVIDED_TWICE_BY_WORLD = N_("divided by world_size twice")
REDUCED_WEIGHTS = N_("weights all-reduced instead of gradients")
REDUCED_A_COPY = N_("all-reduced a copy of the gradient")
SOME_PARAMETERS = N_("only some parameters averaged")
RANKS_HUNG = N_("a rank waited forever")
NO_PROCESSES = N_("could not start two processes")

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
    "avg_case": N_("Two ranks, GPT({V}, {C}, {nh}, {L}, {bs}), a global batch of shape {shape}: {rows} rows per rank"),
    "on_rank": N_("   On rank {rank}:\n"),
    "avg_mismatch": N_("   On rank {rank}, parameter {index}: expected (DDP's gradient) {expected}\n"
                       "   got:                                       {got}"),
    "avg_passed": N_("On {world} processes your function leaves the same gradients as DistributedDataParallel, "
                     "on {count} models."),
    "never": N_("your function never called torch.distributed.all_reduce, so each rank kept the gradient of its "
                "own rows: all-reduce every parameter's p.grad."),
    "summed": N_("your gradients are {world} times DDP's: all_reduce adds the ranks' gradients (ReduceOp.SUM); "
                 "divide by dist.get_world_size() to get their mean."),
    "divided_twice": N_("your gradients are half of DDP's: you divided by the world size twice (ReduceOp.AVG "
                        "already averages)."),
    "weights": N_("you all-reduced the weights (p or p.data), not the gradients: every rank already holds the same "
                  "weights; it is p.grad that differs between the ranks."),
    "copy": N_("the gradients on the model did not change: all_reduce works in place on the tensor you pass, and "
               "p.grad.clone() or p.grad / world_size is a new tensor. Pass p.grad itself (divide it in place, "
               "p.grad /= world_size)."),
    "some": N_("only {right} of the {total} parameters got DDP's gradient: average every one of "
               "model.parameters() (a return inside the loop?)."),
    "hung": N_("a rank waited more than {seconds} s in a collective the other rank never joined: every rank must "
               "call all_reduce the same number of times, in the same order (no `if rank == 0:` around it)."),
    "unfinished": N_("   Rank(s) {ranks} did not finish."),
    "fatal": N_("   The two processes reported: {detail}"),
    "no_fork": N_("   This check starts two processes by forking the notebook's process, which this system "
                  "(Windows) cannot do; run it on Linux, macOS or Colab, or run the lesson's torchrun cells."),
    "none_grad": N_("a parameter's p.grad is None: the check has already run backward, so do not set p.grad to "
                    "None (or zero it) in your function."),
}

AVERAGE_HINTS = [("NoneType", "none_grad")]


def _bug(label: str, key: str, **fields: object) -> Bug:
    return Bug(label, TEXTS[key], fields)


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


# ----------------------------------------------------------------------------------------------
# Averaging the gradients by hand, in two real processes


@dataclass
class _AverageCase:
    seed: int
    sizes: tuple[int, int, int, int, int]
    shape: tuple[int, int]  # the global batch: rows (split between the ranks), positions

    def describe(self) -> str:
        V, C, nh, L, bs = self.sizes
        return say(TEXTS["avg_case"], V=V, C=C, nh=nh, L=L, bs=bs, shape=self.shape, rows=self.shape[0] // WORLD_SIZE)


WORLD_SIZE = 2
_SECONDS = 20  # a collective that one rank never joins fails after this long (gloo's timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _calls_watch(calls: list[dict], model: nn.Module):
    """Record every dist.all_reduce the learner's code makes: its op, and which tensor it got."""
    code = inspect.unwrap(dist.all_reduce).__code__
    grads = {id(p.grad): n for n, p in model.named_parameters() if p.grad is not None}
    grad_ptrs = {p.grad.data_ptr() for p in model.parameters() if p.grad is not None}
    weight_ptrs = {p.data_ptr() for p in model.parameters()}

    def kind(t: object) -> str:
        if not isinstance(t, torch.Tensor):
            return "other"
        if id(t) in grads or (t.data_ptr() in grad_ptrs and t.dim() > 0):
            return "grad"
        return "weight" if t.data_ptr() in weight_ptrs else "other"

    previous = sys.getprofile()

    def profiler(frame, event, arg):  # noqa: ANN001 - the profiler protocol
        if previous is not None:
            previous(frame, event, arg)
        if event == "call" and frame.f_code is code:
            op = frame.f_locals.get("op")
            calls.append({"kind": kind(frame.f_locals.get("tensor")), "op": str(op)})

    return previous, profiler


def _rank_main(rank: int, port: int, fn: Callable, cases: list[_AverageCase], results) -> None:  # noqa: ANN001
    """One rank: for each case, DDP's gradient, the local one, and the one the learner's fn leaves."""
    sys.stdout = sys.stderr = io.StringIO()  # the learner's prints must not reach the notebook's streams,
    quiet = os.open(os.devnull, os.O_WRONLY)  # nor gloo's C++ warnings (a kernel may forward fd 1 and 2)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    torch.set_num_threads(1)
    out: list[dict] = []
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD_SIZE,
                                timeout=timedelta(seconds=_SECONDS))
        forbidden = Forbidden({DDP: "torch.nn.parallel.DistributedDataParallel"})
        for case in cases:
            torch.manual_seed(case.seed)
            model = GPT(*case.sizes, dropout=0.0)
            g = torch.Generator().manual_seed(case.seed)
            x = torch.randint(case.sizes[0], case.shape, generator=g)
            y = torch.randint(case.sizes[0], case.shape, generator=g)
            [(xr, yr)] = micro_batches(x, y, 1, rank, WORLD_SIZE)
            reference = DDP(copy.deepcopy(model))
            reference(xr, yr)[1].backward()
            ddp = [p.grad.detach().clone() for p in reference.module.parameters()]
            model(xr, yr)[1].backward()
            local = [p.grad.detach().clone() for p in model.parameters()]
            weights = [p.detach().clone() for p in model.parameters()]
            calls: list[dict] = []
            previous, profiler = _calls_watch(calls, model)
            record = {"ddp": ddp, "local": local, "calls": calls, "error": None, "stub": False}
            try:
                sys.setprofile(profiler)
                with forbidden.watch():
                    fn(model)
            except NotImplementedError as e:
                tb = e.__traceback__
                while tb is not None and tb.tb_next is not None:
                    tb = tb.tb_next
                own = getattr(inspect.unwrap(fn), "__code__", None)
                record["stub"] = tb is None or own is None or tb.tb_frame.f_code is own
                record["error"] = None if record["stub"] else ["NotImplementedError", str(e)]
            except Exception as e:  # reported by the parent, never raised
                record["error"] = [type(e).__name__, str(e)]
            finally:
                sys.setprofile(previous)
            record["library"] = forbidden.hit
            record["got"] = [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
            record["weights_changed"] = any(not torch.equal(a, p.detach()) for a, p in zip(weights, model.parameters()))
            out.append(record)
            if record["stub"] or record["error"] or record["library"]:
                break  # the other rank may be waiting in a collective: stop both at the first trouble
        dist.destroy_process_group()
    except Exception as e:  # the process group itself failed (a port taken, a timeout)
        out.append({"fatal": f"{type(e).__name__}: {e}"})
    buffer = io.BytesIO()  # bytes, not tensors: the queue would share tensors through this process's files
    torch.save(out, buffer)
    results.put((rank, buffer.getvalue()))


def _run_ranks(fn: Callable, cases: list[_AverageCase], seconds: float) -> tuple[dict[int, list[dict]], str | None]:
    """Fork two ranks that run ``fn``; their records, and a reason when they did not both finish."""
    if "fork" not in mp.get_all_start_methods():
        return {}, "no_fork"
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    port = _free_port()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+ warns about forking with threads
        procs = [ctx.Process(target=_rank_main, args=(r, port, fn, cases, results), daemon=True)
                 for r in range(WORLD_SIZE)]
        for p in procs:
            p.start()
    records: dict[int, list[dict]] = {}
    deadline = time.monotonic() + seconds
    try:
        while len(records) < WORLD_SIZE:
            rank, data = results.get(timeout=max(0.1, deadline - time.monotonic()))
            records[rank] = torch.load(io.BytesIO(data), weights_only=True)
    except queue.Empty:
        pass
    finally:
        for p in procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
    if len(records) < WORLD_SIZE:
        return records, "hung"
    return records, None


def _average_bug(records: dict[int, dict], n_params: int) -> Bug | None:
    """Name the bug behind gradients that differ from DDP's."""
    calls = [c for r in records.values() for c in r["calls"]]
    if not calls:
        return _bug(NEVER_REDUCED, "never")
    first = records[0]
    got, ddp, local = first["got"], first["ddp"], first["local"]

    def all_close(a: list, b: list, factor: float = 1.0) -> bool:
        return all(x is not None and close(x, factor * y) for x, y in zip(a, b))

    if all_close(got, ddp, WORLD_SIZE):
        return _bug(SUMMED_NOT_AVERAGED, "summed", world=WORLD_SIZE)
    if all_close(got, ddp, 1 / WORLD_SIZE):
        return _bug(DIVIDED_TWICE_BY_WORLD, "divided_twice")
    if any(r["weights_changed"] for r in records.values()) or any(c["kind"] == "weight" for c in calls):
        return _bug(REDUCED_WEIGHTS, "weights")
    if all_close(got, local) or all_close(got, local, 1 / WORLD_SIZE) or all(c["kind"] == "other" for c in calls):
        return _bug(REDUCED_A_COPY, "copy")
    right = sum(x is not None and close(x, y) for x, y in zip(got, ddp))
    if 0 < right < n_params:
        return _bug(SOME_PARAMETERS, "some", right=right, total=n_params)
    return None


def _rebuilt(error: list[str] | None) -> Exception | None:
    """The learner's exception from a rank, with its own class name, for the message."""
    if error is None:
        return None
    kind, detail = error
    return type(kind, (Exception,), {})(detail)


@learner_check
def check_allreduce_average(fn: Callable[[nn.Module], None], *, strict: bool = False,
                            hidden: bool = False) -> CheckResult:
    """Check ``fn(model)``: average the gradients over the ranks by hand, with ``torch.distributed.all_reduce``.

    The check starts two ``gloo`` processes (forked, so ``fn`` may come from a notebook). Each builds the
    same small GPT, runs forward and backward on its half of one batch, calls ``fn(model)`` and compares
    the gradients left in ``p.grad`` with the ones DistributedDataParallel computes for the same halves.
    Takes about a second.
    """
    name = "check_allreduce_average"
    require_callable(name, fn)
    verdict = Verdict(name)
    cases = [_AverageCase(100, (11, 16, 2, 2, 8), (4, 8)), _AverageCase(101, (7, 24, 3, 1, 6), (6, 5))]
    cases += [_AverageCase(102, (13, 8, 4, 3, 10), (2, 10))] if hidden else []
    records, trouble = _run_ranks(fn, cases, seconds=3 * _SECONDS)
    if trouble == "no_fork":
        return verdict.failed(NO_PROCESSES, say(TEXTS["no_fork"]))
    if trouble == "hung":
        missing = sorted(set(range(WORLD_SIZE)) - set(records))
        return verdict.failed_with([_bug(RANKS_HUNG, "hung", seconds=3 * _SECONDS)],
                                   say(TEXTS["unfinished"], ranks=missing))
    fatal = [out[-1]["fatal"] for out in records.values() if out and "fatal" in out[-1]]
    for i, case in enumerate(cases):
        per_rank = {rank: out[i] for rank, out in records.items() if i < len(out) and "fatal" not in out[i]}
        if len(per_rank) < WORLD_SIZE:
            detail = fatal[0] if fatal else ""
            if "imed out" in detail:
                return verdict.failed_with([_bug(RANKS_HUNG, "hung", seconds=_SECONDS)], say(TEXTS["fatal"], detail=detail))
            return verdict.failed(NO_PROCESSES, say(TEXTS["fatal"], detail=detail))
        timed_out = [rank for rank, r in per_rank.items() if r["error"] and "imed out" in r["error"][1]]
        if timed_out:
            return verdict.failed_with([_bug(RANKS_HUNG, "hung", seconds=_SECONDS)],
                                       say(TEXTS["fatal"], detail=": ".join(per_rank[timed_out[0]]["error"])))
        where = case.describe() + "\n"
        for rank in range(WORLD_SIZE):
            r = per_rank[rank]
            outcome = Outcome(stub=r["stub"], library=r["library"], error=_rebuilt(r["error"]))
            early = screen(verdict, outcome, where + say(TEXTS["on_rank"], rank=rank) if not r["stub"] else "",
                           [(fragment, TEXTS[key]) for fragment, key in AVERAGE_HINTS])
            if early is not None:
                return early
        n_params = len(per_rank[0]["ddp"])
        wrong = [rank for rank in range(WORLD_SIZE)
                 if not all(g is not None and close(g, d) for g, d in zip(per_rank[rank]["got"], per_rank[rank]["ddp"]))]
        if wrong:
            bug = _average_bug(per_rank, n_params)
            got, ddp = per_rank[wrong[0]]["got"], per_rank[wrong[0]]["ddp"]
            j = next(j for j, (g, d) in enumerate(zip(got, ddp)) if g is None or not close(g, d))
            text = where + say(TEXTS["avg_mismatch"], rank=wrong[0], index=j,
                               expected=fmt_row(ddp[j]), got="None" if got[j] is None else fmt_row(got[j]))
            return verdict.failed_with([bug], text) if bug else verdict.failed(WRONG_VALUES, text)
        if any(per_rank[rank]["weights_changed"] for rank in range(WORLD_SIZE)):
            return verdict.failed_with([_bug(REDUCED_WEIGHTS, "weights")], where.rstrip("\n"))
    return verdict.passed(say(TEXTS["avg_passed"], count=len(cases), world=WORLD_SIZE))
