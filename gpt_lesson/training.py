"""The course's training loop: seeded batches, AdamW, warmup + cosine schedule,
periodic train/val estimates, a tqdm progress bar and safe checkpoints.

Checkpoints are written and read by :mod:`gpt_lesson.checkpoints` (``save_checkpoint``,
``load_checkpoint``, also importable from here).

One loop serves every lesson. ``batch_size`` is the *global* batch of one optimizer
step; it is drawn from one seeded generator and cut into ``grad_accum_steps``
micro-batches, so the gradient of a step does not depend on how it is cut up.

The same loop trains data-parallel under ``torchrun`` (see :mod:`gpt_lesson.distributed`
and ``python -m gpt_lesson.train_ddp``): when a process group is active, every rank draws
the same global batch, keeps its own slice (``micro_batches(..., rank, world_size)``),
runs ``grad_accum_steps`` micro-batches of it, and DDP averages the gradients across ranks
once per step. Rank 0 evaluates, shows the progress bar and writes the checkpoint; the
other ranks receive its estimates, so every rank returns the same :class:`History`.
With one process all of that reduces to the plain loop, operation for operation.
"""
from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
from tqdm.auto import tqdm

from . import distributed
from .checkpoints import CheckpointError, load_checkpoint, non_finite_tensors, save_checkpoint
from .data import get_batch
from .model import GPT
from .validation import (
    check_bool,
    check_device,
    check_instance,
    check_int,
    check_longer_than_block,
    check_number,
    check_path,
    check_positive_int,
    check_tensor,
    check_token_ids,
)

__all__ = [
    "set_seed",
    "pick_device",
    "TrainConfig",
    "lr_at",
    "estimate_loss",
    "evaluate_split",
    "micro_batches",
    "History",
    "TrainingDiverged",
    "train",
    "CheckpointError",
    "save_checkpoint",
    "load_checkpoint",
]

MAX_SEED = 2**63 - 1  # torch's generators take 64-bit seeds; runs use seed + rank and seed + 1


def set_seed(seed: int) -> None:
    """Seed Python's and PyTorch's random generators."""
    check_int("seed", seed, minimum=0, maximum=MAX_SEED)
    random.seed(seed)
    torch.manual_seed(seed)


def pick_device(preferred: str | None = None) -> str:
    """``preferred`` if given and available, else the best of cuda, mps, cpu."""
    if preferred is not None:
        return check_device("device", preferred)
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


@dataclass
class TrainConfig:
    """Everything the loop needs besides the model and the data."""

    max_steps: int = 2000
    batch_size: int = 12
    learning_rate: float = 1e-3
    min_lr: float | None = None  # cosine decay target; None keeps the rate constant
    warmup_steps: int = 0
    weight_decay: float = 0.0
    beta2: float = 0.99
    grad_clip: float | None = 1.0
    grad_accum_steps: int = 1
    eval_interval: int = 200
    eval_iters: int = 20
    seed: int = 1337
    device: str = "cpu"
    progress: bool = True
    checkpoint_path: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field (``train`` calls it again, in case a field was changed after creation)."""
        for name in ("max_steps", "batch_size", "grad_accum_steps", "eval_interval", "eval_iters"):
            check_positive_int(name, getattr(self, name))
        check_int("warmup_steps", self.warmup_steps, minimum=0)
        check_number("learning_rate", self.learning_rate, minimum=0, min_open=True)
        check_number("min_lr", self.min_lr, minimum=0, maximum=self.learning_rate, allow_none=True,
                     rule=f"in [0, learning_rate={self.learning_rate}], or None for a constant rate")
        check_number("weight_decay", self.weight_decay, minimum=0)
        check_number("beta2", self.beta2, minimum=0, maximum=1, max_open=True)
        # 0 would freeze training, a negative norm turn it into gradient ascent.
        check_number("grad_clip", self.grad_clip, minimum=0, min_open=True, allow_none=True,
                     rule="> 0 (the largest gradient norm), or None for no clipping")
        check_int("seed", self.seed, minimum=0, maximum=MAX_SEED)
        self.device = check_device("device", self.device)
        check_bool("progress", self.progress)
        path = check_path("checkpoint_path", self.checkpoint_path, allow_none=True)
        self.checkpoint_path = None if path is None else str(path)  # a str: checkpoints hold no Path objects
        if self.batch_size % self.grad_accum_steps:
            raise ValueError(
                f"batch_size={self.batch_size} is not divisible by grad_accum_steps={self.grad_accum_steps}; "
                "every micro-batch must have the same size"
            )


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate at ``step``: linear warmup, then cosine decay to ``min_lr`` (or constant)."""
    if step < cfg.warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.warmup_steps
    if cfg.min_lr is None:
        return cfg.learning_rate
    span = max(1, cfg.max_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (cfg.learning_rate - cfg.min_lr)


@torch.no_grad()
def estimate_loss(
    model: GPT,
    splits: dict[str, torch.Tensor],
    batch_size: int,
    eval_iters: int,
    seed: int = 0,
    device: str = "cpu",
) -> dict[str, float]:
    """Mean loss over ``eval_iters`` batches of each split, in eval mode.

    The batches come from a generator seeded with ``seed``, so every estimate of a run
    uses the same batches and successive estimates are comparable.
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("eval_iters", eval_iters)
    was_training = model.training
    model.eval()
    out = {}
    for name, data in splits.items():
        g = torch.Generator().manual_seed(seed)
        losses = [model(*get_batch(data, model.config.block_size, batch_size, g, device))[1].item()
                  for _ in range(eval_iters)]
        out[name] = sum(losses) / len(losses)
    model.train(was_training)
    return out


@torch.no_grad()
def evaluate_split(model: GPT, data: torch.Tensor, batch_size: int = 64, device: str = "cpu") -> float:
    """The exact mean loss over every non-overlapping ``block_size`` window of ``data``."""
    check_tensor("data", data, dims=1)
    check_positive_int("batch_size", batch_size)
    T = model.config.block_size
    check_longer_than_block("data", data, T)
    n = (len(data) - 1) // T
    x = data[: n * T].view(n, T)
    y = data[1: n * T + 1].view(n, T)
    was_training = model.training
    model.eval()
    total = 0.0
    for i in range(0, n, batch_size):
        _, loss = model(x[i:i + batch_size].to(device), y[i:i + batch_size].to(device))
        total += loss.item() * x[i:i + batch_size].numel()
    model.train(was_training)
    return total / (n * T)


def micro_batches(x: torch.Tensor, y: torch.Tensor, n_micro: int, rank: int = 0, world_size: int = 1):
    """This rank's share of a global batch, cut into ``n_micro`` equal micro-batches."""
    check_tensor("x", x, min_dim=1)
    check_positive_int("n_micro", n_micro)
    check_positive_int("world_size", world_size)
    check_int("rank", rank, minimum=0, maximum=world_size - 1, rule=f"in [0, world_size={world_size})")
    B = x.size(0)
    if B % (n_micro * world_size):
        raise ValueError(f"batch of {B} rows cannot be cut into {world_size} ranks x {n_micro} micro-batches")
    per_rank = B // world_size
    xs, ys = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
    return list(zip(xs.chunk(n_micro), ys.chunk(n_micro)))


@dataclass
class History:
    """What a run measured: the loss of every step and the periodic estimates."""

    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    eval_step: list[int] = field(default_factory=list)
    train: list[float] = field(default_factory=list)
    val: list[float] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0

    def record(self, step: int, loss: float, lr: float, tokens: int) -> None:
        """Add one optimizer step: its number (from 1), mean loss, learning rate and tokens seen."""
        self.step.append(step)
        self.loss.append(loss)
        self.lr.append(lr)
        self.tokens += tokens

    def to_dict(self) -> dict:
        return asdict(self)


class TrainingDiverged(FloatingPointError):
    """The loss (or the weights) stopped being finite numbers: the run diverged and was stopped.

    ``step`` is the optimizer step (from 1) where it was seen; ``history`` holds the steps before.
    """

    def __init__(self, message: str, step: int, history: History) -> None:
        super().__init__(message)
        self.step, self.history = step, history


def _diverged(step: int, what: str, cfg: TrainConfig, hist: History, bar=None) -> TrainingDiverged:
    if bar is not None:
        bar.close()
    kept = f"; {cfg.checkpoint_path} was left as it was" if cfg.checkpoint_path else ""
    return TrainingDiverged(
        f"training stopped at step {step}: {what}. The run diverged, so its weights are no longer usable and "
        f"nothing was saved{kept}. Try a lower learning_rate (now {cfg.learning_rate:g}), gradient clipping "
        f"(grad_clip, now {cfg.grad_clip}) or a warmup (warmup_steps, now {cfg.warmup_steps})", step, hist)


def _check_weights(model: GPT, cfg: TrainConfig, hist: History) -> None:
    bad = non_finite_tensors(model.state_dict())
    if bad:
        raise _diverged(len(hist.step), f"the last update made the weights non-finite (NaN or inf in {bad[0]})",
                        cfg, hist)


def _check_run(model: object, train_data: object, val_data: object, cfg: object) -> TrainConfig:
    """``train``'s arguments, checked before anything moves: the config (again) and the two token sequences."""
    check_instance("model", model, GPT)
    cfg = TrainConfig() if cfg is None else check_instance("cfg", cfg, TrainConfig)
    cfg.validate()  # type: ignore[union-attr]
    c = model.config  # type: ignore[union-attr]
    for name, data in (("train_data", train_data), ("val_data", val_data)):
        check_tensor(name, data, dims=1)
        check_token_ids(data.reshape(1, -1), c.vocab_size, name=name)  # type: ignore[union-attr]
        check_longer_than_block(name, data, c.block_size)  # type: ignore[arg-type]
    return cfg  # type: ignore[return-value]


def train(
    model: GPT,
    train_data: torch.Tensor,
    val_data: torch.Tensor,
    cfg: TrainConfig | None = None,
    callback: Callable[[int, History], None] | None = None,
) -> History:
    """Train ``model`` in place and return its :class:`History`.

    Estimates train/val loss at step 0, every ``eval_interval`` steps and at the end.
    Saves a checkpoint at the end when ``cfg.checkpoint_path`` is set.

    Under an active process group (``torchrun``), ``cfg.batch_size`` stays the global batch:
    each of the ``world_size`` ranks runs ``grad_accum_steps`` micro-batches of
    ``batch_size / (world_size * grad_accum_steps)`` rows. ``callback`` runs on every rank.
    """
    cfg = _check_run(model, train_data, val_data, cfg)
    # A NaN or infinite loss stops the run at once (TrainingDiverged), before the update,
    # so a diverged run never reaches save_checkpoint and a good file is never replaced.
    rank, world_size = distributed.rank_and_world_size()
    if cfg.batch_size % (cfg.grad_accum_steps * world_size):
        raise ValueError(
            f"batch_size={cfg.batch_size} cannot be cut into world_size={world_size} ranks x "
            f"grad_accum_steps={cfg.grad_accum_steps} equal micro-batches"
        )
    is_main = rank == 0
    # Same weights everywhere (DDP also copies rank 0's at wrapping), but each rank its own
    # dropout masks, as the rows of one big batch would get; rank 0 keeps the plain seed.
    set_seed(cfg.seed + rank)
    device = cfg.device
    model.to(device)
    model.train()
    ddp_model = distributed.wrap_model(model, device)  # ``model`` itself with one process
    block_size = model.config.block_size
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, betas=(0.9, cfg.beta2),
                                  weight_decay=cfg.weight_decay)
    batch_gen = torch.Generator().manual_seed(cfg.seed)
    hist = History()
    splits = {"train": train_data, "val": val_data}

    def evaluate(step: int) -> None:
        # Rank 0 estimates on the unwrapped model; the others wait for its numbers.
        est = [0.0, 0.0]
        if is_main:
            out = estimate_loss(model, splits, cfg.batch_size, cfg.eval_iters, seed=cfg.seed + 1, device=device)
            est = [out["train"], out["val"]]
        train_loss, val_loss = distributed.broadcast_floats(est, device=device)
        hist.eval_step.append(step)
        hist.train.append(train_loss)
        hist.val.append(val_loss)

    start = time.perf_counter()
    evaluate(0)
    bar = tqdm(range(cfg.max_steps), disable=not cfg.progress or not is_main, desc="training", unit="step")
    for step in bar:
        lr = lr_at(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        # Every rank draws the whole global batch from the same generator and keeps its slice,
        # so the batch of a step does not depend on the number of processes.
        x, y = get_batch(train_data, block_size, cfg.batch_size, batch_gen, device)
        micro = micro_batches(x, y, cfg.grad_accum_steps, rank, world_size)
        step_loss = 0.0
        for i, (xb, yb) in enumerate(micro):
            with distributed.sync_gradients(ddp_model, sync=i == len(micro) - 1):
                _, loss = ddp_model(xb, yb)
                (loss / cfg.grad_accum_steps).backward()  # DDP then averages over the ranks
            step_loss += loss.item() / cfg.grad_accum_steps
        step_loss = distributed.all_reduce_mean(step_loss, device=device)
        if not math.isfinite(step_loss):  # every rank sees the same mean, so every rank stops here
            raise _diverged(step + 1, f"the loss is {step_loss} (learning rate {lr:g} at this step)", cfg, hist, bar)
        if cfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        hist.record(step + 1, step_loss, lr, x.numel())
        if (step + 1) % cfg.eval_interval == 0 or step + 1 == cfg.max_steps:
            evaluate(step + 1)
            bar.set_postfix(train=f"{hist.train[-1]:.3f}", val=f"{hist.val[-1]:.3f}")
        if callback is not None:
            callback(step + 1, hist)
    bar.close()
    hist.seconds = time.perf_counter() - start
    _check_weights(model, cfg, hist)  # the last update could still have made them NaN
    if cfg.checkpoint_path:
        # Only a run that every rank finished is saved: a failed rank never reaches the barrier.
        distributed.barrier()
        if is_main:
            save_checkpoint(cfg.checkpoint_path, model, extra={"history": hist.to_dict(), "train_config": asdict(cfg)})
    return hist
