"""Train the course's GPT data-parallel: one process per device, launched by torchrun.

    torchrun --standalone --nproc_per_node=2 -m gpt_lesson.train_ddp --max-steps 200

runs two processes on one machine (``gloo`` on CPU, ``nccl`` on GPUs). The same command
without torchrun (``python -m gpt_lesson.train_ddp ...``) trains in one process with the
same global batch, so the two runs can be compared step for step. Several machines:
``torchrun --nnodes N --nproc_per_node G --rdzv-backend c10d --rdzv-endpoint HOST:PORT``.

Every rank runs :func:`gpt_lesson.training.train`, the course's one training loop. Rank 0
prints, writes the checkpoint (atomically) and the history JSON. ``--fail-at-step K``
makes rank ``--fail-rank`` raise after step K, to see what a crashed rank does to a run:
torchrun stops the others, exits non-zero and names the failed rank, and no checkpoint
is written.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
from torch.distributed.elastic.multiprocessing.errors import record

from . import distributed
from .checkpoints import check_writable_file, write_bytes_atomically
from .data import (
    CACHE_ENV,
    DATA_ENV,
    TINY_SHAKESPEARE_FILE,
    CharTokenizer,
    cache_dir,
    load_tiny_shakespeare,
    train_val_split,
)
from .i18n import _
from .model import GPT, GPTConfig
from .training import History, TrainConfig, train
from .validation import check_int, check_path, check_positive_int

__all__ = ["InjectedFailure", "build_parser", "check_args", "check_sizes", "load_tokens", "run", "main",
           "median_step_seconds", "timed_steps"]


class InjectedFailure(RuntimeError):
    """Raised on purpose by ``--fail-at-step``."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchrun --standalone --nproc_per_node=N -m gpt_lesson.train_ddp",
        description="Train the course GPT with DistributedDataParallel (also runs as one plain process).",
    )
    data = p.add_argument_group("data")
    data.add_argument("--data", default=None,
                      help="a UTF-8 text file (default: Tiny Shakespeare, found as gpt_lesson.data explains)")
    data.add_argument("--max-chars", type=int, default=None, help="use only the first N characters")
    model = p.add_argument_group("model")
    model.add_argument("--n-layer", type=int, default=4)
    model.add_argument("--n-head", type=int, default=4)
    model.add_argument("--n-embd", type=int, default=128)
    model.add_argument("--block-size", type=int, default=64)
    model.add_argument("--dropout", type=float, default=0.0,
                       help="0 makes the 1- and N-process runs comparable number for number")
    tr = p.add_argument_group("training (batch sizes are global: the same whatever the number of processes)")
    tr.add_argument("--max-steps", type=int, default=200)
    tr.add_argument("--batch-size", type=int, default=32, help="global batch (rows per optimizer step)")
    acc = tr.add_mutually_exclusive_group()
    acc.add_argument("--micro-batch-size", type=int, default=None,
                     help="rows per forward pass on one rank; micro-batches per rank = batch / (micro x ranks)")
    acc.add_argument("--grad-accum-steps", type=int, default=None, help="micro-batches per rank (default 1)")
    tr.add_argument("--lr", type=float, default=1e-3)
    tr.add_argument("--min-lr", type=float, default=None)
    tr.add_argument("--warmup-steps", type=int, default=0)
    tr.add_argument("--eval-interval", type=int, default=50)
    tr.add_argument("--eval-iters", type=int, default=10)
    tr.add_argument("--seed", type=int, default=1337)
    tr.add_argument("--backend", choices=distributed.BACKENDS, default=None,
                    help="default: nccl with CUDA, else gloo")
    out = p.add_argument_group("output")
    out.add_argument("--checkpoint", default=None, help="where rank 0 writes the final checkpoint")
    out.add_argument("--history", default=None, help="where rank 0 writes the losses and step times (JSON)")
    out.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    fail = p.add_argument_group("fault injection (for the tests and lesson 12)")
    fail.add_argument("--fail-at-step", type=int, default=None, help="raise on --fail-rank after this step")
    fail.add_argument("--fail-rank", type=int, default=1)
    return p


def timed_steps(step_seconds: list[float], eval_steps: list[int]) -> list[float]:
    """The step times worth timing: all but the first step (warm-up) and the steps that evaluated."""
    skip = set(eval_steps) | {1}
    return [t for i, t in enumerate(step_seconds, start=1) if i not in skip]


def median_step_seconds(step_seconds: list[float], eval_steps: list[int]) -> float:
    """Median wall time of a training step, leaving out the first step and the steps that evaluated."""
    times = timed_steps(step_seconds, eval_steps)
    if not times:
        raise ValueError("no step left to time: run more steps than the first and the evaluation steps")
    return statistics.median(times)


def check_args(args: argparse.Namespace) -> None:
    """Check the command line before any process group or data: each error names its option."""
    for option in ("max_steps", "batch_size", "eval_interval", "eval_iters", "n_layer", "n_head", "n_embd",
                   "block_size"):
        check_positive_int("--" + option.replace("_", "-"), getattr(args, option))
    for option in ("max_chars", "micro_batch_size", "grad_accum_steps", "fail_at_step"):
        if getattr(args, option) is not None:
            check_positive_int("--" + option.replace("_", "-"), getattr(args, option))
    check_int("--fail-rank", args.fail_rank, minimum=0)
    for option in ("data", "checkpoint", "history"):
        check_path("--" + option, getattr(args, option), allow_none=True)
    _check_distinct_files(args)
    for option, what in (("checkpoint", "the checkpoint"), ("history", "the history")):
        if getattr(args, option) is not None:  # found now, not after the run
            check_writable_file("--" + option, check_path("--" + option, getattr(args, option)), what)
    # The sizes and the training settings, as the library checks them (vocab_size is not known yet);
    # an error names the option too: "--lr: learning_rate=inf must be a finite number (> 0)".
    try:
        GPTConfig(1, args.n_embd, args.n_head, args.n_layer, args.block_size, dropout=args.dropout)
        TrainConfig(max_steps=args.max_steps, batch_size=args.batch_size, learning_rate=args.lr,
                    min_lr=args.min_lr, warmup_steps=args.warmup_steps, eval_interval=args.eval_interval,
                    eval_iters=args.eval_iters, seed=args.seed, progress=False)
    except (TypeError, ValueError) as e:
        field = str(e).split("=", 1)[0]
        option = {"learning_rate": "--lr"}.get(field, "--" + field.replace("_", "-"))
        raise type(e)(f"{option}: {e}") from None


def _input_files(args: argparse.Namespace) -> list[tuple[str, str]]:
    """``(option, path)`` of every file the run reads: --data, or the Tiny Shakespeare file it falls back to."""
    if args.data is not None:
        return [("--data", args.data)]
    if os.environ.get(DATA_ENV):
        return [(f"--data (from ${DATA_ENV})", os.environ[DATA_ENV])]
    try:
        default = cache_dir() / TINY_SHAKESPEARE_FILE
    except (TypeError, ValueError):  # a bad $GPT_LESSON_CACHE: load_tokens names it
        return []
    return [(f"--data (default: Tiny Shakespeare in ${CACHE_ENV} or the cache)", str(default))]


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one file: after ~, relative parts and symlinks are resolved, or as hard links."""
    ra, rb = (os.path.realpath(os.path.expanduser(p)) for p in (a, b))
    if ra == rb:
        return True
    try:
        return os.path.samefile(ra, rb)
    except OSError:  # one of them does not exist yet: different files
        return False


def _check_distinct_files(args: argparse.Namespace) -> None:
    """Refuse an output that is an input or another output: writing it would destroy the other file."""
    outputs = [(f"--{o}", getattr(args, o)) for o in ("checkpoint", "history") if getattr(args, o) is not None]
    inputs = _input_files(args)
    for i, (out, path) in enumerate(outputs):
        for other, other_path in outputs[:i] + inputs:
            if _same_file(path, other_path):
                where = os.path.realpath(os.path.expanduser(path))
                raise ValueError(f"{out}={path!r} is the same file as {other}={other_path!r} ({where}): writing "
                                 f"{out} would destroy it. Give each output a file of its own, apart from the inputs")


def _splits_fit(n_tokens: int, block_size: int) -> bool:
    n_train = int(0.9 * n_tokens)  # train_val_split's cut
    return n_train > block_size and n_tokens - n_train > block_size


def check_sizes(args: argparse.Namespace, n_tokens: int, world_size: int) -> int:
    """Check what depends on the data and the ranks; returns the micro-batches per rank.

    Both splits (90/10) must hold more than one window of ``--block-size`` tokens, and the global
    batch must cut into equal micro-batches on every rank.
    """
    if not _splits_fit(n_tokens, args.block_size):
        need = next(n for n in range(args.block_size, 20 * args.block_size + 40) if _splits_fit(n, args.block_size))
        what = f"--max-chars={args.max_chars}" if args.max_chars is not None else f"--data {args.data or 'the text'}"
        raise ValueError(f"{what} gives {n_tokens:,} tokens: the validation split (10%) and the training split "
                         f"(90%) each need more than --block-size={args.block_size} tokens, so use at least "
                         f"{need:,} characters (or a smaller --block-size)")
    if args.micro_batch_size is not None:
        try:
            return distributed.grad_accum_steps_for(args.batch_size, args.micro_batch_size, world_size)
        except ValueError:
            raise ValueError(f"--micro-batch-size={args.micro_batch_size} does not divide --batch-size="
                             f"{args.batch_size} over {world_size} process(es): the global batch must be a "
                             "multiple of micro-batch size x processes") from None
    accum = args.grad_accum_steps or 1
    if args.batch_size % (accum * world_size):
        raise ValueError(f"--batch-size={args.batch_size} cannot be cut into {world_size} process(es) x "
                         f"--grad-accum-steps={accum} equal micro-batches: make it a multiple of {accum * world_size}")
    return accum


def load_tokens(path: str | None, max_chars: int | None) -> tuple[torch.Tensor, CharTokenizer]:
    """The token ids and tokenizer of ``--data`` (Tiny Shakespeare without it), cut to ``--max-chars``."""
    if path is None:
        text = load_tiny_shakespeare()
    else:
        file = check_path("--data", path)
        if not file.is_file():  # type: ignore[union-attr]
            raise FileNotFoundError(f"--data {file}: no such file")
        raw = file.read_bytes()  # type: ignore[union-attr]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"--data {file} is not UTF-8 text: byte 0x{raw[e.start]:02x} at offset {e.start:,} "
                             "cannot be decoded. Give a plain text file (a binary file such as a checkpoint or "
                             "an image cannot be read as characters)") from None
        if not text:
            raise ValueError(f"--data {file} is empty; give a text file to train on")
    if max_chars is not None:
        text = text[:check_positive_int("--max-chars", max_chars)]
    tok = CharTokenizer(text)
    return torch.tensor(tok.encode(text), dtype=torch.long), tok


def _write_json_atomically(path: str, payload: dict) -> None:
    data = json.dumps(payload, indent=1).encode("utf-8")
    write_bytes_atomically(check_path("--history", path), data, "the history")  # type: ignore[arg-type]


def run(args: argparse.Namespace, ctx: distributed.DistContext,
        tokens: tuple[torch.Tensor, CharTokenizer] | None = None) -> History:
    """Build the data and model, train with :func:`gpt_lesson.training.train`, report on rank 0.

    ``tokens`` is what :func:`load_tokens` returns, when the caller has loaded it already.
    """
    check_args(args)
    if args.fail_at_step is not None and not 0 <= args.fail_rank < ctx.world_size:
        raise ValueError(f"--fail-rank={args.fail_rank} is not a rank of this run (world size {ctx.world_size})")
    data, tok = tokens if tokens is not None else load_tokens(args.data, args.max_chars)
    accum = check_sizes(args, len(data), ctx.world_size)
    train_data, val_data = train_val_split(data)
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP checks by copying rank 0's)
    model = GPT(tok.vocab_size, args.n_embd, args.n_head, args.n_layer, args.block_size, dropout=args.dropout)
    cfg = TrainConfig(
        max_steps=args.max_steps, batch_size=args.batch_size, learning_rate=args.lr, min_lr=args.min_lr,
        warmup_steps=args.warmup_steps, grad_accum_steps=accum, eval_interval=args.eval_interval,
        eval_iters=args.eval_iters, seed=args.seed, device=ctx.device, progress=not args.no_progress,
        checkpoint_path=args.checkpoint,
    )
    micro = args.batch_size // (ctx.world_size * accum)
    if ctx.is_main:
        backend = ctx.backend or _("none (one process)")
        print(f"world_size={ctx.world_size} backend={backend} device={ctx.device}")
        print(_("global batch {batch} rows = {world} rank(s) x {accum} micro-batch(es) x {micro} rows; "
                "{params:,} parameters; {nbytes:,} bytes all-reduced per step").format(
                    batch=args.batch_size, world=ctx.world_size, accum=accum, micro=micro,
                    params=model.num_parameters(), nbytes=distributed.allreduce_bytes(model)), flush=True)

    stamps: list[float] = []

    def on_step(step: int, hist: History) -> None:
        stamps.append(time.perf_counter())
        if step == args.fail_at_step and ctx.rank == args.fail_rank:
            raise InjectedFailure(_("rank {rank}: injected failure after step {step} (--fail-at-step)").format(
                rank=ctx.rank, step=step))

    start = time.perf_counter()
    hist = train(model, train_data, val_data, cfg, callback=on_step)
    if ctx.is_main:
        step_seconds = [b - a for a, b in zip([start] + stamps[:-1], stamps)]
        timed = timed_steps(step_seconds, hist.eval_step)
        median = statistics.median(timed) if timed else None  # None: every step after the first evaluated
        timing = (_("median step {ms:.1f} ms").format(ms=1000 * median) if median is not None else
                  _("median step not measured (every step but the first evaluated; raise --eval-interval)"))
        print(_("step {step}: train loss {train:.4f}, val loss {val:.4f}; {timing}").format(
            step=hist.step[-1], train=hist.train[-1], val=hist.val[-1], timing=timing))
        if args.checkpoint:
            print(_("checkpoint written to {path}").format(path=args.checkpoint))
        if args.history:
            _write_json_atomically(args.history, {
                "world_size": ctx.world_size, "backend": ctx.backend, "grad_accum_steps": accum,
                "micro_batch_size": micro, "n_params": model.num_parameters(),
                "allreduce_bytes": distributed.allreduce_bytes(model), "step_seconds": step_seconds,
                "median_step_seconds": median, "history": hist.to_dict(),
            })
    return hist


@record  # torchrun then prints the failed rank's exception in its summary
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_args(args)
    except (TypeError, ValueError, OSError) as e:
        # exits with status 2, before any process group or data ("[Errno 21]" left out: the text says it)
        parser.error(e.strerror if isinstance(e, OSError) and e.strerror else str(e))
    try:
        tokens = load_tokens(args.data, args.max_chars)
    except (OSError, ValueError) as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    try:
        ranks = distributed.ranks_from_env()
        check_sizes(args, len(tokens[0]), 1 if ranks is None else ranks[2])
    except ValueError as e:
        parser.error(str(e))  # before any process group or training
    with distributed.process_group(args.backend) as ctx:
        run(args, ctx, tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
