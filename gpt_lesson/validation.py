"""Argument validation for the whole library, in one place.

Every public function checks its arguments with these helpers, so a bad value gets the
same kind of message everywhere: a ``TypeError`` when the *kind* of value is wrong, a
``ValueError`` when the kind is right but the value breaks a rule, and both name the
argument, the value and the rule (``n_embd=65 is not divisible by n_head=4``).
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import torch

__all__ = [
    "check_bool",
    "check_int",
    "check_positive_int",
    "check_number",
    "check_probability",
    "check_scale",
    "check_choice",
    "check_instance",
    "check_path",
    "check_device",
    "check_tensor",
    "check_token_ids",
    "check_longer_than_block",
    "check_language_model",
    "check_generator",
    "check_memory",
    "check_finite_logits",
    "check_attention_inputs",
    "check_model_call",
    "check_model_memory",
]


def check_bool(name: str, value: object) -> bool:
    """Raise unless ``value`` is a real ``bool`` (``"no"`` or ``1`` are not flags)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}={value!r} must be True or False, got {type(value).__name__}")
    return value


def check_int(
    name: str,
    value: object,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    rule: str | None = None,
) -> int:
    """Raise unless ``value`` is an int (not a bool) within ``[minimum, maximum]``.

    ``rule`` words the bounds for the message when plain numbers would not say where they
    come from (``rule="between 1 and vocab_size=65"``).
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r} must be an integer, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}={value} must be {rule or f'>= {minimum}'}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name}={value} must be {rule or f'<= {maximum}'}")
    return int(value)


def check_positive_int(name: str, value: object) -> int:
    """Raise unless ``value`` is an int (not a bool) greater than zero."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r} must be an integer, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name}={value} must be a positive integer (> 0)")
    return int(value)


def _bound_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high:g}"
    return "finite"


def check_number(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
    allow_none: bool = False,
    rule: str | None = None,
) -> float | None:
    """Raise unless ``value`` is a finite real number within the given bounds.

    ``min_open``/``max_open`` exclude the bound itself (``minimum=0, min_open=True``
    means "> 0"). ``allow_none`` lets ``None`` through (for "off" settings). NaN and
    infinities are always refused: they never make sense as a setting. ``rule`` words
    the bounds for the message (``rule="in [0, learning_rate=0.001]"``).
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        extra = " or None" if allow_none else ""
        raise TypeError(f"{name}={value!r} must be a number{extra}, got {type(value).__name__}")
    rule = rule or _bound_text(minimum, maximum, min_open, max_open)
    if not math.isfinite(value):
        raise ValueError(f"{name}={value} must be a finite number ({rule})")
    too_low = minimum is not None and (value <= minimum if min_open else value < minimum)
    too_high = maximum is not None and (value >= maximum if max_open else value > maximum)
    if too_low or too_high:
        raise ValueError(f"{name}={value} must be {rule}")
    return float(value)


def check_scale(name: str, value: object) -> float | None:
    """An attention scale: ``None`` (meaning the standard ``1/sqrt(d_k)``) or a finite number > 0."""
    return check_number(name, value, minimum=0.0, min_open=True, allow_none=True)


def check_probability(name: str, value: object) -> float:
    """Raise unless ``value`` is a number in [0, 1) (a dropout rate)."""
    return check_number(name, value, minimum=0.0, maximum=1.0, max_open=True)  # type: ignore[return-value]


def check_choice(name: str, value: object, choices: Sequence[object]) -> object:
    """Raise unless ``value`` is one of ``choices`` (compared with ``==``, bools never match ints)."""
    for c in choices:
        if type(value) is type(c) and value == c:
            return value
    raise ValueError(f"{name}={value!r} is not one of {tuple(choices)}")


def check_instance(name: str, value: object, kind: type | tuple[type, ...], *, allow_none: bool = False) -> object:
    """Raise a ``TypeError`` unless ``value`` is an instance of ``kind`` (or ``None`` when allowed)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        wanted = " or ".join(k.__name__ for k in kinds) + (" or None" if allow_none else "")
        raise TypeError(f"{name} must be a {wanted}, got {type(value).__name__} {value!r:.60}")
    return value


def check_path(name: str, value: object, *, allow_none: bool = False) -> Path | None:
    """A file path given as a ``str`` or ``os.PathLike``, with ``~`` expanded; never empty, no NUL byte."""
    if value is None and allow_none:
        return None
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        extra = " or None" if allow_none else ""
        raise TypeError(f"{name}={value!r} must be a file path (str or pathlib.Path){extra}, got {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{name}={value!r} must be a file path, got an empty name")
    if "\0" in text:
        raise ValueError(f"{name}={text!r} holds a NUL byte (\\x00): no file can have that name; "
                         "a path is text without NUL characters")
    return Path(os.path.expanduser(text))


DEVICE_TYPES = ("cpu", "cuda", "mps")


def check_device(name: str, value: object, *, allow_none: bool = False) -> str | None:
    """A device this machine has: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"`` (or a ``torch.device``).

    Returns it as a string (``torch.device("cpu")`` -> ``"cpu"``), so it can be stored in a
    checkpoint and compared.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, torch.device):
        value = str(value)
    if not isinstance(value, str):
        extra = " (or None)" if allow_none else ""
        raise TypeError(f"{name}={value!r} must be a device name such as 'cpu' or 'cuda'{extra}, "
                        f"got {type(value).__name__}")
    try:
        device = torch.device(value)
    except RuntimeError:
        raise ValueError(f"{name}={value!r} is not a device: use one of {DEVICE_TYPES} (or 'cuda:N' for GPU N)") from None
    if device.type not in DEVICE_TYPES:
        raise ValueError(f"{name}={value!r} is not one of {DEVICE_TYPES}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}={value!r} was asked for but torch.cuda.is_available() is False; use 'cpu'")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{name}={value!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{name}={value!r} was asked for but torch.backends.mps.is_available() is False; use 'cpu'")
    return value


def check_tensor(name: str, value: object, *, dims: int | None = None, min_dim: int | None = None) -> torch.Tensor:
    """Raise unless ``value`` is a tensor with ``dims`` dimensions (or at least ``min_dim``)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if dims is not None and value.dim() != dims:
        raise ValueError(f"{name} must have {dims} dimensions, got shape {tuple(value.shape)}")
    if min_dim is not None and value.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions, got shape {tuple(value.shape)}")
    return value


_INT_DTYPES = (torch.int64, torch.int32)  # what nn.Embedding accepts


def _check_ids_kind(name: str, ids: object) -> torch.Tensor:
    """A (B, T) tensor of integer ids with T >= 1 (its values are not read)."""
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.dim() != 2:  # type: ignore[union-attr]
        raise ValueError(f"{name} must have shape (B, T), got shape {tuple(ids.shape)} "  # type: ignore[union-attr]
                         f"({ids.dim()} dimensions)")  # type: ignore[union-attr]
    if ids.dtype not in _INT_DTYPES:  # type: ignore[union-attr]
        raise TypeError(f"{name} must hold integer token ids (torch.long), got dtype {ids.dtype}; "  # type: ignore
                        f"convert with {name}.long()")
    if ids.size(1) == 0:  # type: ignore[union-attr]
        raise ValueError(f"{name} has T=0 tokens; give at least one token")
    return ids  # type: ignore[return-value]


def check_token_ids(
    idx: object,
    vocab_size: int,
    block_size: int | None = None,
    *,
    name: str = "idx",
    ignore_index: int | None = None,
) -> torch.Tensor:
    """Raise unless ``idx`` is a (B, T) int64/int32 tensor of ids in [0, vocab_size), T <= block_size.

    ``name`` is the argument the message blames (``idx`` or ``targets``). With
    ``ignore_index`` set, that value is allowed too (targets to be skipped by the loss).
    """
    _check_ids_kind(name, idx)
    if block_size is not None and idx.size(1) > block_size:
        raise ValueError(
            f"{name} has sequence length T={idx.size(1)}, longer than block_size={block_size}; "
            "crop the context to the last block_size tokens"
        )
    if idx.numel():
        ids = idx if ignore_index is None else idx[idx != ignore_index]
        if ids.numel():
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= vocab_size:
                bad = lo if lo < 0 else hi
                allowed = "" if ignore_index is None else f" (or ignore_index={ignore_index})"
                raise ValueError(
                    f"{name} holds token id {bad}, out of range: ids must be in [0, vocab_size={vocab_size}){allowed}"
                )
    return idx


def check_longer_than_block(name: str, data: torch.Tensor, block_size: int) -> torch.Tensor:
    """Raise unless the 1-D token sequence ``data`` has more than ``block_size`` tokens (one window and its target)."""
    if len(data) <= block_size:
        raise ValueError(f"{name} has {len(data)} tokens; it needs more than block_size={block_size}")
    return data


def check_language_model(name: str, value: object) -> torch.nn.Module:
    """Raise a ``TypeError`` unless ``value`` is a course language model: a module with ``config.vocab_size``
    and ``config.block_size`` (a GPT; lesson 14's GPT-2 and Llama too) whose ``forward(idx, targets)``
    returns ``(logits, loss)``."""
    if not isinstance(value, torch.nn.Module):
        raise TypeError(f"{name} must be a language model (a gpt_lesson GPT), got {type(value).__name__} {value!r:.60}")
    config = getattr(value, "config", None)
    if not all(isinstance(getattr(config, size, None), int) for size in ("vocab_size", "block_size")):
        raise TypeError(f"{name} must be a language model of the course (a GPT, with config.vocab_size and "
                        f"config.block_size), got a {type(value).__name__} without them")
    return value


def check_generator(name: str, value: object) -> torch.Generator | None:
    """``None`` (torch's global random state) or a ``torch.Generator`` (``torch.Generator().manual_seed(0)``)."""
    if value is not None and not isinstance(value, torch.Generator):
        raise TypeError(f"{name}={value!r:.60} must be a torch.Generator (torch.Generator().manual_seed(seed)) or "
                        f"None, got {type(value).__name__}")
    return value


def available_memory() -> int:
    """Bytes of memory this machine can hand out now (psutil's ``available``, else ``os.sysconf``)."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError):  # psutil is optional: the pages free, as the kernel counts them
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _bytes_text(n: int) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n:,} bytes ({n / size:.1f} {unit})"
    return f"{n:,} bytes"


def check_memory(name: str, value: object, nbytes: int, what: str) -> int:
    """Raise a ``ValueError`` before allocating when ``what`` (asked for by ``name=value``) needs more bytes than
    this machine has available now. Nothing is checked while building on the meta device (no memory is used)."""
    if torch.get_default_device().type == "meta":
        return nbytes
    free = available_memory()
    if nbytes > free:
        raise ValueError(f"{name}={value} asks for {what}: {_bytes_text(nbytes)}, more than the "
                         f"{_bytes_text(free)} of memory available on this machine; make {name} smaller")
    return nbytes


def check_finite_logits(name: str, logits: torch.Tensor) -> torch.Tensor:
    """Raise unless every row of ``logits`` is a distribution's logits: no NaN, no +inf, not all -inf.

    -inf alone is allowed (a token ruled out, as top-k does). Every decoding path (greedy, sampling,
    top-k, top-p, with or without a KV cache) calls this, so a broken model is refused the same way.
    """
    if bool(torch.isfinite(logits).all()):  # the usual case, one pass
        return logits
    bad = torch.isnan(logits) | (logits == float("inf"))
    empty = (logits == float("-inf")).all(dim=-1)
    if bool(bad.any()) or bool(empty.any()):
        what = "NaN or +inf" if bool(bad.any()) else "a row where every value is -inf: no token is possible"
        raise ValueError(f"{name} hold NaN or infinite values, so there is no distribution to choose a token from "
                         f"({what}); every row must be finite numbers, -inf only for tokens ruled out. The model's "
                         "weights or input are broken (a diverged training run?)")
    return logits


def check_attention_inputs(q: object, k: object, v: object | None = None) -> None:
    """q, k (and v) for attention: tensors of one dtype and device, with batch dimensions that broadcast,
    q and k of the same size d_k, and as many values as keys."""
    named = [("q", q), ("k", k)] + ([] if v is None else [("v", v)])
    for name, t in named:
        check_tensor(name, t, min_dim=2)
    for name, t in named[1:]:
        if t.dtype != q.dtype or t.device != q.device:  # type: ignore[union-attr]
            raise ValueError(f"{name} is {t.dtype} on {t.device} but q is {q.dtype} on {q.device}; "  # type: ignore
                             "q, k and v must have one dtype and one device")
        try:
            torch.broadcast_shapes(q.shape[:-2], t.shape[:-2])  # type: ignore[union-attr]
        except RuntimeError:
            raise ValueError(f"q of shape {tuple(q.shape)} and {name} of shape {tuple(t.shape)} "  # type: ignore
                             "have batch dimensions (all but the last two) that do not match; "
                             "they must be equal (or 1)") from None
    if q.size(-1) != k.size(-1):  # type: ignore[union-attr]
        raise ValueError(f"q has last dimension {q.size(-1)} but k has {k.size(-1)}; "  # type: ignore[union-attr]
                         "queries and keys must have the same size d_k")
    if v is not None and v.size(-2) != k.size(-2):  # type: ignore[union-attr]
        raise ValueError(f"k has {k.size(-2)} positions but v has {v.size(-2)}; "  # type: ignore[union-attr]
                         "every key needs its value")


def check_model_call(model: torch.nn.Module, idx: object, targets: object = None, ignore_index: int = -100) -> None:
    """The arguments of ``model(idx, targets)`` for a course model: ``idx`` (B, T) integer token ids on the
    model's device, ``targets`` of the same shape with at least one target the loss does not skip.

    Only kinds, shapes and devices are checked, never the ids themselves (no min/max: no device sync per
    call; an id outside the vocabulary is PyTorch's ``IndexError``), except the one test that would
    otherwise give a NaN loss, "every target skipped", which is read on the CPU only.
    """
    _check_ids_kind("idx", idx)
    param = next(model.parameters(), None)
    if param is not None and idx.device != param.device:  # type: ignore[union-attr]
        raise ValueError(f"idx is on {idx.device} but the model is on {param.device}; "  # type: ignore[union-attr]
                         f"move it with idx.to({str(param.device)!r})")
    if targets is None:
        return
    _check_ids_kind("targets", targets)
    if targets.shape != idx.shape or targets.device != idx.device:  # type: ignore[union-attr]
        raise ValueError(f"targets of shape {tuple(targets.shape)} on {targets.device} must have idx's shape "  # type: ignore
                         f"{tuple(idx.shape)} on {idx.device}: one target per position")  # type: ignore[union-attr]
    if targets.device.type == "cpu" and bool((targets == ignore_index).all()):  # type: ignore[union-attr]
        raise ValueError(f"targets are all ignore_index={ignore_index}: the loss would average over no tokens "
                         "(NaN); give at least one target that is a token id")


def check_model_memory(config: object) -> None:
    """Refuse, before any allocation, a GPT of ``config`` larger than the memory available now, naming the size
    that asks for the most (the embedding tables and lm_head: ``vocab_size``; the position table and the causal
    masks: ``block_size``; the blocks: ``n_layer``)."""
    c, itemsize = config, torch.get_default_dtype().itemsize
    C = c.n_embd  # type: ignore[attr-defined]
    numbers = {
        "vocab_size": 2 * c.vocab_size * C + c.vocab_size,  # type: ignore[attr-defined]
        "block_size": c.block_size * C + c.n_layer * c.block_size ** 2,  # type: ignore[attr-defined]
        "n_layer": c.n_layer * (12 * C * C + 13 * C),  # type: ignore[attr-defined]
    }
    name = max(numbers, key=numbers.get)  # type: ignore[arg-type]
    total = sum(numbers.values())
    check_memory(name, getattr(c, name), itemsize * total, f"a GPT of {total:,} numbers (weights and masks)")
