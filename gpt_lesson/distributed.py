"""Data-parallel training with PyTorch's own engine: process groups, DDP and rank-0 chores.

``torchrun`` starts one process per device and tells each who it is through environment
variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).
:func:`setup` reads them and joins the process group; without them it returns a
one-process context and touches nothing, so the same script runs with plain ``python``.

:func:`gpt_lesson.training.train` uses the small helpers below; with one process each of them
is a no-op, so the single-process loop computes exactly what it did before DDP existed.
The backend is ``gloo`` on CPU and ``nccl`` on CUDA GPUs; nothing else changes.

Lesson 12's self-checks on this arithmetic live with the other checks, in
:mod:`gpt_lesson.checks`.
"""
from __future__ import annotations

import inspect
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from .validation import check_choice, check_int, check_positive_int

__all__ = [
    "BACKENDS",
    "DistContext",
    "ranks_from_env",
    "setup",
    "teardown",
    "process_group",
    "rank_and_world_size",
    "wrap_model",
    "set_gradient_sync",
    "is_main",
    "all_reduce_mean",
    "broadcast_floats",
    "barrier",
    "effective_batch",
    "grad_accum_steps_for",
    "allreduce_bytes",
]

BACKENDS = ("gloo", "nccl")
# torch 2.13 renamed DDP's broadcast_buffers to forward_sync_buffers (the old name warns).
_NO_BUFFER_SYNC = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters
                   else "broadcast_buffers")


@dataclass(frozen=True)
class DistContext:
    """Who this process is: its global ``rank``, ``local_rank`` on its machine, the ``world_size``.

    ``backend`` is None for a plain single process (no process group was created).
    """

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    backend: str | None = None
    device: str = "cpu"

    @property
    def is_main(self) -> bool:
        """Rank 0 logs, evaluates and writes checkpoints."""
        return self.rank == 0


def _env_int(env: Mapping[str, str], name: str, minimum: int, maximum: int | None = None, rule: str | None = None) -> int:
    raw = env.get(name)
    if raw is None:
        raise ValueError(f"${name} is not set; torchrun sets RANK, WORLD_SIZE and LOCAL_RANK together")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"${name}={raw!r} must be an integer") from None
    return check_int(f"${name}", value, minimum=minimum, maximum=maximum, rule=rule)


def ranks_from_env(env: Mapping[str, str] | None = None) -> tuple[int, int, int] | None:
    """``(rank, local_rank, world_size)`` from torchrun's variables, or None when none is set."""
    env = os.environ if env is None else env
    if not any(name in env for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return None
    world_size = _env_int(env, "WORLD_SIZE", 1)
    rank = _env_int(env, "RANK", 0, world_size - 1, f"in [0, WORLD_SIZE={world_size})")
    local_rank = _env_int(env, "LOCAL_RANK", 0, rank, f"in [0, RANK={rank}]")
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not env.get(name):
            raise ValueError(f"${name} is not set; launch with torchrun, which sets it for every process")
    return rank, local_rank, world_size


def setup(backend: str | None = None) -> DistContext:
    """Join the process group described by torchrun's variables (a no-op without them).

    ``backend`` defaults to ``nccl`` when CUDA is available and ``gloo`` otherwise; with
    ``nccl`` each process uses the GPU ``cuda:LOCAL_RANK``.
    """
    if backend is not None:
        check_choice("backend", backend, BACKENDS)
    ranks = ranks_from_env()
    if ranks is None:
        return DistContext(device="cuda" if torch.cuda.is_available() else "cpu")
    rank, local_rank, world_size = ranks
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    device = "cpu"
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise ValueError("backend='nccl' needs CUDA GPUs, but torch.cuda.is_available() is False; use 'gloo'")
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(device)
    dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
    return DistContext(rank, local_rank, world_size, backend, device)


def teardown() -> None:
    """Leave the process group, if this process joined one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def process_group(backend: str | None = None) -> Iterator[DistContext]:
    """``with process_group() as ctx:`` joins on entry and always leaves, even after an error."""
    ctx = setup(backend)
    try:
        yield ctx
    finally:
        teardown()


def rank_and_world_size() -> tuple[int, int]:
    """This process's rank and the number of processes: ``(0, 1)`` without a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def wrap_model(model: nn.Module, device: str = "cpu") -> nn.Module:
    """The model in DDP when there are several processes, else the model itself.

    Buffers are not re-sent before each forward: the GPT's only buffers are the constant
    causal masks, identical on every rank, so that traffic would be wasted.
    """
    _, world_size = rank_and_world_size()
    if world_size == 1:
        return model
    device_ids = [torch.device(device).index] if torch.device(device).type == "cuda" else None
    return DDP(model, device_ids=device_ids, **{_NO_BUFFER_SYNC: False})


def set_gradient_sync(model: nn.Module, sync: bool) -> None:
    """Whether the next backward of a DDP ``model`` all-reduces the gradients (a no-op without DDP).

    When accumulating, every micro-batch but the last sets ``sync=False``: the gradients add up on
    each rank and are sent once per optimizer step. nanoGPT's one line,
    ``model.require_backward_grad_sync = last_micro_step``, the flag ``DDP.no_sync()`` sets too.
    """
    if isinstance(model, DDP):
        model.require_backward_grad_sync = sync


def is_main() -> bool:
    """Whether this process is rank 0 (or the only one): it evaluates, shows progress and writes files."""
    return rank_and_world_size()[0] == 0


def all_reduce_mean(value: float, device: str = "cpu") -> float:
    """The mean of ``value`` over all ranks (``value`` itself with one process)."""
    _, world_size = rank_and_world_size()
    if world_size == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.item() / world_size


def broadcast_floats(values: list[float], src: int = 0, device: str = "cpu") -> list[float]:
    """Rank ``src``'s ``values`` on every rank (``values`` itself with one process)."""
    _, world_size = rank_and_world_size()
    if world_size == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.broadcast(t, src=src)
    return t.tolist()


def barrier() -> None:
    """Wait until every rank gets here (nothing to wait for with one process)."""
    if rank_and_world_size()[1] > 1:
        dist.barrier()


# --- the arithmetic of data parallelism -------------------------------------------------

def effective_batch(micro_batch_size: int, grad_accum_steps: int, world_size: int) -> int:
    """Rows per optimizer step: each of ``world_size`` ranks runs ``grad_accum_steps`` micro-batches."""
    for name, v in (("micro_batch_size", micro_batch_size), ("grad_accum_steps", grad_accum_steps),
                    ("world_size", world_size)):
        check_positive_int(name, v)
    return micro_batch_size * grad_accum_steps * world_size


def grad_accum_steps_for(batch_size: int, micro_batch_size: int, world_size: int) -> int:
    """Micro-batches per rank so that ``world_size`` ranks together make a global ``batch_size``."""
    for name, v in (("batch_size", batch_size), ("micro_batch_size", micro_batch_size),
                    ("world_size", world_size)):
        check_positive_int(name, v)
    if batch_size % (micro_batch_size * world_size):
        raise ValueError(
            f"batch_size={batch_size} is not divisible by micro_batch_size={micro_batch_size} x "
            f"world_size={world_size}; every rank must run the same number of equal micro-batches"
        )
    return batch_size // (micro_batch_size * world_size)


def allreduce_bytes(model: nn.Module, bytes_per_number: int | None = None) -> int:
    """Bytes of gradient each rank all-reduces per optimizer step: every trainable parameter once.

    Buffers (the ``tril`` masks) have no gradient and are not sent. ``bytes_per_number``
    defaults to each parameter's own element size (4 for float32).
    """
    if bytes_per_number is not None:
        check_positive_int("bytes_per_number", bytes_per_number)
    return sum(p.numel() * (bytes_per_number or p.element_size()) for p in model.parameters() if p.requires_grad)
