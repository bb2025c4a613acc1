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
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
from torch import nn
from tqdm.auto import tqdm

from . import distributed
from .checkpoints import (
    CheckpointError,
    check_writable_file,
    load_checkpoint,
    non_finite_tensors,
    save_checkpoint,
)
from .data import get_batch
from .model import GPT
from .validation import (
    check_bool,
    check_device,
    check_instance,
    check_int,
    check_language_model,
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


@dataclass(frozen=True)
class TrainConfig:
    """Everything the loop needs besides the model and the data, checked once when it is made."""

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
        object.__setattr__(self, "device", check_device("device", self.device))
        check_bool("progress", self.progress)
        path = check_path("checkpoint_path", self.checkpoint_path, allow_none=True)
        # A str: checkpoints hold no Path objects.
        object.__setattr__(self, "checkpoint_path", None if path is None else str(path))
        if self.batch_size % self.grad_accum_steps:
            raise ValueError(
                f"batch_size={self.batch_size} is not divisible by grad_accum_steps={self.grad_accum_steps}; "
                "every micro-batch must have the same size"
            )


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate at ``step`` (from 0): linear warmup, then cosine decay to ``min_lr`` (or constant)."""
    check_int("step", step, minimum=0)
    check_instance("cfg", cfg, TrainConfig)
    if step < cfg.warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.warmup_steps
    if cfg.min_lr is None:
        return cfg.learning_rate
    span = max(1, cfg.max_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (cfg.learning_rate - cfg.min_lr)


def _check_tokens(name: str, data: object, model: nn.Module) -> torch.Tensor:
    """A 1-D sequence of the model's token ids, longer than one window and its target."""
    check_tensor(name, data, dims=1)
    check_token_ids(data.reshape(1, -1), model.config.vocab_size, name=name)  # type: ignore[union-attr]
    return check_longer_than_block(name, data, model.config.block_size)  # type: ignore[arg-type]


@torch.no_grad()
def _mean_losses(model: nn.Module, splits: dict[str, torch.Tensor], batch_size: int, eval_iters: int, seed: int,
                 device: str) -> dict[str, float]:
    was_training = model.training
    model.eval()
    try:
        out = {}
        for name, data in splits.items():
            g = torch.Generator().manual_seed(seed)
            losses = [model(*get_batch(data, model.config.block_size, batch_size, g, device))[1].item()
                      for _ in range(eval_iters)]
            out[name] = sum(losses) / len(losses)
        return out
    finally:
        model.train(was_training)


def estimate_loss(
    model: nn.Module,
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
    check_language_model("model", model)
    check_instance("splits", splits, dict)
    for name, data in splits.items():
        _check_tokens(f"splits[{name!r}]", data, model)  # type: ignore[arg-type]
    check_positive_int("batch_size", batch_size)
    check_positive_int("eval_iters", eval_iters)
    check_int("seed", seed, minimum=0, maximum=MAX_SEED)
    return _mean_losses(model, splits, batch_size, eval_iters, seed, check_device("device", device))


@torch.no_grad()
def evaluate_split(model: nn.Module, data: torch.Tensor, batch_size: int = 64, device: str = "cpu") -> float:
    """The exact mean loss over every non-overlapping ``block_size`` window of ``data``."""
    check_language_model("model", model)
    _check_tokens("data", data, model)
    check_positive_int("batch_size", batch_size)
    T = model.config.block_size
    n = (len(data) - 1) // T
    x = data[: n * T].view(n, T)
    y = data[1: n * T + 1].view(n, T)
    was_training = model.training
    model.eval()
    try:
        total = 0.0
        for i in range(0, n, batch_size):
            _, loss = model(x[i:i + batch_size].to(device), y[i:i + batch_size].to(device))
            total += loss.item() * x[i:i + batch_size].numel()
    finally:
        model.train(was_training)
    return total / (n * T)


def micro_batches(x: torch.Tensor, y: torch.Tensor, n_micro: int, rank: int = 0, world_size: int = 1):
    """This rank's share of a global batch, cut into ``n_micro`` equal micro-batches."""
    check_tensor("x", x, min_dim=1)
    check_tensor("y", y, min_dim=1)
    if x.shape != y.shape:
        raise ValueError(f"x of shape {tuple(x.shape)} and y of shape {tuple(y.shape)} must have the same shape "
                         "(inputs and their targets)")
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


def _diverged(step: int, what: str, cfg: TrainConfig, hist: History) -> TrainingDiverged:
    kept = f"; {cfg.checkpoint_path} was left as it was" if cfg.checkpoint_path else ""
    return TrainingDiverged(
        f"training stopped at step {step}: {what}. The run diverged, so its weights are no longer usable and "
        f"nothing was saved{kept}. Try a lower learning_rate (now {cfg.learning_rate:g}), gradient clipping "
        f"(grad_clip, now {cfg.grad_clip}) or a warmup (warmup_steps, now {cfg.warmup_steps})", step, hist)


def _check_run(model: object, train_data: object, val_data: object, cfg: object, callback: object) -> TrainConfig:
    """``train``'s arguments, checked before anything moves (the config was checked when it was made)."""
    check_language_model("model", model)
    cfg = TrainConfig() if cfg is None else check_instance("cfg", cfg, TrainConfig)
    _check_tokens("train_data", train_data, model)  # type: ignore[arg-type]
    _check_tokens("val_data", val_data, model)  # type: ignore[arg-type]
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be a function of (step, history) or None, got {type(callback).__name__}")
    if cfg.checkpoint_path and not isinstance(model, GPT):  # type: ignore[union-attr]
        raise TypeError(f"checkpoint_path needs a gpt_lesson GPT (save_checkpoint stores its config); "
                        f"got {type(model).__name__}: train without it and save the model yourself")
    if cfg.checkpoint_path and distributed.is_main():  # a folder or no rights: found now, not after every step
        check_writable_file("checkpoint_path", cfg.checkpoint_path, "the checkpoint")  # type: ignore[union-attr]
    world_size = distributed.rank_and_world_size()[1]
    if cfg.batch_size % (cfg.grad_accum_steps * world_size):  # type: ignore[union-attr]
        raise ValueError(
            f"batch_size={cfg.batch_size} cannot be cut into world_size={world_size} ranks x "  # type: ignore[union-attr]
            f"grad_accum_steps={cfg.grad_accum_steps} equal micro-batches"  # type: ignore[union-attr]
        )
    return cfg  # type: ignore[return-value]


def _accumulate(model: nn.Module, micro: list[tuple[torch.Tensor, torch.Tensor]], device: str) -> float:
    """Forward and backward of each micro-batch; the loss of the whole step, averaged over every rank.

    The gradients add up over the micro-batches (each loss divided by their number, so the sum is
    the mean); under DDP only the last backward all-reduces them (nanoGPT's one line).
    """
    total = 0.0
    for i, (xb, yb) in enumerate(micro):
        distributed.set_gradient_sync(model, i == len(micro) - 1)
        _, loss = model(xb, yb)
        (loss / len(micro)).backward()
        total += loss.item() / len(micro)
    return distributed.all_reduce_mean(total, device=device)


def _evaluate(model: nn.Module, splits: dict[str, torch.Tensor], cfg: TrainConfig, step: int, hist: History) -> None:
    """Rank 0 estimates both losses on the unwrapped model; the other ranks receive its numbers."""
    est = [0.0, 0.0]
    if distributed.is_main():
        out = _mean_losses(model, splits, cfg.batch_size, cfg.eval_iters, cfg.seed + 1, cfg.device)
        est = [out["train"], out["val"]]
    train_loss, val_loss = distributed.broadcast_floats(est, device=cfg.device)
    hist.eval_step.append(step)
    hist.train.append(train_loss)
    hist.val.append(val_loss)


def _save(model: GPT, cfg: TrainConfig, hist: History) -> None:
    """Rank 0 writes the checkpoint once every rank has finished (a failed rank never reaches the barrier)."""
    distributed.barrier()
    if distributed.is_main():
        save_checkpoint(cfg.checkpoint_path, model, extra={"history": hist.to_dict(), "train_config": asdict(cfg)})


def train(
    model: nn.Module,
    train_data: torch.Tensor,
    val_data: torch.Tensor,
    cfg: TrainConfig | None = None,
    callback: Callable[[int, History], None] | None = None,
) -> History:
    """Train ``model`` in place and return its :class:`History`.

    Estimates train/val loss at step 0, every ``eval_interval`` steps and at the end; stops at
    the first loss (or weights) that is not finite (:class:`TrainingDiverged`), so a diverged run
    never replaces a good checkpoint. Saves one at the end when ``cfg.checkpoint_path`` is set: a
    path that cannot be written (a folder, no rights) is refused before the first step, and if the
    save still fails (a full disk) the ``OSError`` carries the run's history as ``err.history``.
    Any language model of the course trains (``model(x, y)`` returns ``(logits, loss)``, and
    ``model.config`` has ``vocab_size`` and ``block_size``).

    Under an active process group (``torchrun``), ``cfg.batch_size`` stays the global batch:
    each of the ``world_size`` ranks runs ``grad_accum_steps`` micro-batches of
    ``batch_size / (world_size * grad_accum_steps)`` rows. ``callback`` runs on every rank.
    """
    cfg = _check_run(model, train_data, val_data, cfg, callback)
    if cfg.warmup_steps > cfg.max_steps:
        warnings.warn(f"warmup_steps={cfg.warmup_steps} is more than max_steps={cfg.max_steps}: the run ends during "
                      f"the warm-up, so the learning rate never reaches learning_rate={cfg.learning_rate:g} (it stops "
                      f"at {lr_at(cfg.max_steps - 1, cfg):.3g}). Use fewer warm-up steps or more steps",
                      UserWarning, stacklevel=2)
    rank, world_size = distributed.rank_and_world_size()
    set_seed(cfg.seed + rank)  # the same weights everywhere (DDP copies rank 0's), each rank its own dropout
    model.to(cfg.device).train()
    ddp_model = distributed.wrap_model(model, cfg.device)  # ``model`` itself with one process
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, betas=(0.9, cfg.beta2),
                                  weight_decay=cfg.weight_decay)
    batches = torch.Generator().manual_seed(cfg.seed)  # the same global batches on every rank
    splits, hist, start = {"train": train_data, "val": val_data}, History(), time.perf_counter()
    _evaluate(model, splits, cfg, 0, hist)
    bar = tqdm(range(cfg.max_steps), disable=not cfg.progress or rank != 0, desc="training", unit="step")
    for step in bar:
        lr = lr_at(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(train_data, model.config.block_size, cfg.batch_size, batches, cfg.device)
        loss = _accumulate(ddp_model, micro_batches(x, y, cfg.grad_accum_steps, rank, world_size), cfg.device)
        if not math.isfinite(loss):  # every rank sees the same mean, so every rank stops here
            bar.close()
            raise _diverged(step + 1, f"the loss is {loss} (learning rate {lr:g} at this step)", cfg, hist)
        if cfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        hist.record(step + 1, loss, lr, x.numel())
        if (step + 1) % cfg.eval_interval == 0 or step + 1 == cfg.max_steps:
            _evaluate(model, splits, cfg, step + 1, hist)
            bar.set_postfix(train=f"{hist.train[-1]:.3f}", val=f"{hist.val[-1]:.3f}")
        if callback is not None:
            callback(step + 1, hist)
    bar.close()
    hist.seconds = time.perf_counter() - start
    bad = non_finite_tensors(model.state_dict())  # the last update could still have made them NaN
    if bad:
        raise _diverged(len(hist.step), f"the last update made the weights non-finite (NaN or inf in {bad[0]})",
                        cfg, hist)
    if cfg.checkpoint_path:
        try:
            _save(model, cfg, hist)  # type: ignore[arg-type]
        except OSError as e:  # a full disk, or the folder changed during the run: the history is kept
            e.history = hist  # type: ignore[attr-defined]
            raise
    return hist
