"""Argument validation shared by the library: clear errors that name the bad value and the rule."""
from __future__ import annotations

import torch


def check_positive_int(name: str, value: object) -> int:
    """Raise unless ``value`` is an int (not a bool) greater than zero."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r} must be an integer, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name}={value} must be a positive integer (> 0)")
    return value


def check_probability(name: str, value: object) -> float:
    """Raise unless ``value`` is a number in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}={value!r} must be a number, got {type(value).__name__}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name}={value} must be in [0, 1)")
    return float(value)


def check_tensor(name: str, value: object, *, dims: int | None = None, min_dim: int | None = None) -> torch.Tensor:
    """Raise unless ``value`` is a tensor with ``dims`` dimensions (or at least ``min_dim``)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if dims is not None and value.dim() != dims:
        raise ValueError(f"{name} must have {dims} dimensions, got shape {tuple(value.shape)}")
    if min_dim is not None and value.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions, got shape {tuple(value.shape)}")
    return value


def check_token_ids(idx: object, vocab_size: int, block_size: int | None = None) -> torch.Tensor:
    """Raise unless ``idx`` is a (B, T) integer tensor of ids in [0, vocab_size) with T <= block_size."""
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"idx must be a torch.Tensor of token ids, got {type(idx).__name__}")
    if idx.dim() != 2:
        raise ValueError(f"idx must have shape (B, T), got shape {tuple(idx.shape)} ({idx.dim()} dimensions)")
    if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
        raise TypeError(f"idx must hold integer token ids (torch.long), got dtype {idx.dtype}")
    if idx.size(1) == 0:
        raise ValueError("idx has T=0 tokens; give at least one token")
    if block_size is not None and idx.size(1) > block_size:
        raise ValueError(
            f"sequence length T={idx.size(1)} is longer than block_size={block_size}; "
            "crop the context to the last block_size tokens"
        )
    if idx.numel():
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad} is out of range: ids must be in [0, vocab_size={vocab_size})")
    return idx
