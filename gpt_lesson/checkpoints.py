"""Checkpoints: the weights and config of a :class:`~gpt_lesson.model.GPT`, saved and loaded safely.

* :func:`save_checkpoint` writes atomically (:func:`gpt_lesson.data.write_atomically`: a temp file
  renamed into place, so a good file is never replaced by half of one), refuses NaN or infinite
  weights, and stores only what ``torch.load(weights_only=True)`` reads back.
* :func:`load_checkpoint` reads with ``weights_only=True`` and checks everything before it builds a
  model: the file is readable and plain (a pickle asking to run code is refused), its config is a
  valid :class:`~gpt_lesson.model.GPTConfig`, its tensors are what ``GPT(config)`` holds (PyTorch's
  strict loading into the model built on the meta device, so a damaged config cannot make it
  allocate a huge model), and the weights are finite.

Every problem with a file raises :class:`CheckpointError`, which names the file and says what to do.
"""
from __future__ import annotations

import os
import pickle
import re
from dataclasses import fields
from pathlib import Path

import torch

from .data import write_atomically
from .model import GPT, GPTConfig
from .validation import check_device, check_instance, check_path

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint", "non_finite_tensors"]


def non_finite_tensors(tensors: dict[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors holding a NaN or an infinity."""
    return [name for name, t in tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: unreadable, unsafe, or not matching its model. Names the file."""

    def __init__(self, path: Path, problem: str, advice: str | None = None) -> None:
        if advice is None:
            advice = ("Delete it and write it again (save_checkpoint, or train with checkpoint_path=); "
                      "lesson 09's model is retrained by gpt_lesson.shakespeare.load_trained()")
        super().__init__(f"cannot load the checkpoint {path}: {problem}. {advice}")
        self.path, self.problem = path, problem


_PLAIN = (type(None), bool, int, float, str, torch.Tensor, torch.Size, torch.dtype, torch.device)


def _check_plain(name: str, value: object) -> None:
    """Raise unless ``value`` holds only what ``torch.load(weights_only=True)`` reads back."""
    if isinstance(value, dict):
        for k, v in value.items():
            _check_plain(f"{name}[{k!r}]", k)
            _check_plain(f"{name}[{k!r}]", v)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_plain(f"{name}[{i}]", v)
    elif not isinstance(value, _PLAIN):
        raise TypeError(
            f"{name} is a {type(value).__name__}: a checkpoint holds only tensors, numbers, strings, None, lists, "
            "tuples and dicts, so that it loads with weights_only=True; convert it (e.g. str(path))"
        )


def save_checkpoint(path: str | os.PathLike, model: GPT, extra: dict | None = None) -> Path:
    """Write the weights and config to ``path`` atomically (a temp file, then a rename).

    Refuses weights that are NaN or infinite (a diverged run) and ``extra`` values that
    ``weights_only`` loading could not read back: an existing file at ``path`` is then left as
    it was. The file is complete or absent, never half-written.
    """
    path = check_path("path", path)  # type: ignore[assignment]
    check_instance("model", model, GPT)
    extra = {} if extra is None else check_instance("extra", extra, dict)  # type: ignore[assignment]
    _check_plain("extra", extra)
    state = model.state_dict()
    bad = non_finite_tensors(state)
    if bad:
        kept = f"; {path} was left as it was" if path.exists() else ""
        raise ValueError(f"model has NaN or infinite weights (in {', '.join(bad[:3])}): refusing to save them "
                         f"to {path}{kept}. A run whose weights are not finite has diverged")
    payload = {"model": state, "config": model.config.to_dict(), "extra": extra}
    return write_atomically(path, lambda f: torch.save(payload, f), suffix=".tmp", what="the checkpoint")


def _read_checkpoint(path: Path, device: str) -> object:
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(path, "the file is empty (0 bytes): a save or copy was interrupted")
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as e:
        if "Weights only load failed" not in str(e):
            raise CheckpointError(path, f"the file is damaged ({size:,} bytes; {e})") from None
        asked = re.search(r"GLOBAL (\S+)", str(e))
        raise CheckpointError(
            path, "it is not a plain checkpoint: besides tensors and numbers it asks to load Python objects"
            + (f" ({asked.group(1)})" if asked else "") + ", which could run code, so it was refused for safety",
            "Use checkpoints written by save_checkpoint() or train(); delete this file unless you know who made it "
            "and what it contains") from None
    except Exception as e:  # EOFError, OSError, RuntimeError, KeyError...: torch's words for a broken file
        raise CheckpointError(path, f"the file is not a readable PyTorch checkpoint ({size:,} bytes; "
                                    f"{type(e).__name__}: {str(e)[:200] or 'no details'}); it was probably cut "
                                    "short by an interrupted save or copy, or is another kind of file") from None


# Fields an older GPTConfig had and the model no longer reads: dropped when a checkpoint is loaded.
_RETIRED_FIELDS = ("capture_attention",)  # attention capture moved to gpt_lesson.capture (forward hooks)


def _checkpoint_parts(path: Path, ckpt: object) -> tuple[dict[str, torch.Tensor], GPTConfig]:
    """The state dict and the validated config of a loaded checkpoint; nothing is allocated."""
    if not isinstance(ckpt, dict) or "model" not in ckpt or "config" not in ckpt:
        found = sorted(map(str, ckpt))[:6] if isinstance(ckpt, dict) else type(ckpt).__name__
        raise CheckpointError(path, f"it is not a gpt_lesson checkpoint (expected keys 'model' and 'config', "
                                    f"found {found})")
    state, config = ckpt["model"], ckpt["config"]
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise CheckpointError(path, "its 'model' entry is not a state dict (parameter names -> tensors)")
    if not isinstance(config, dict):
        raise CheckpointError(path, f"its 'config' is a {type(config).__name__}, not a dict of GPTConfig fields")
    names = [f.name for f in fields(GPTConfig)]
    unknown = sorted(map(str, set(config) - set(names) - set(_RETIRED_FIELDS)))
    if unknown:
        raise CheckpointError(path, f"its config has unknown keys {unknown} (GPTConfig has {names})")
    try:
        return state, GPTConfig(**{k: v for k, v in config.items() if k in names})
    except (TypeError, ValueError) as e:
        raise CheckpointError(path, f"its config is invalid: {e}") from None


def _check_fits(path: Path, state: dict[str, torch.Tensor], config: GPTConfig) -> None:
    """Raise unless ``state`` is exactly what ``GPT(config)`` holds: PyTorch's strict loading, with no memory.

    The model is built on the meta device (names and shapes only, no numbers), so a damaged config
    asking for petabytes costs nothing; its blocks are counted first, as each is a Python object.
    """
    blocks = {k.split(".")[1] for k in state if k.startswith("blocks.")}
    if len(blocks) != config.n_layer:
        raise CheckpointError(path, f"its config says n_layer={config.n_layer} but it holds {len(blocks)} blocks")
    # A causal=False model drops the mask it is given (lesson 11 loads a causal model's weights on purpose), so a
    # file must not say causal=False over causal masks: one flipped bit in its config would open the future.
    masks = [] if config.causal else [k for k, t in state.items() if k.endswith(".sa.tril") and isinstance(t, torch.Tensor)
                                      and t.dim() == 2 and t.size(0) == t.size(1) > 1 and torch.equal(t, t.tril())]
    if masks:
        raise CheckpointError(path, f"its config says causal=False but {masks[0]} is a causal mask (lower-triangular): "
                                    "the file is damaged or was edited")
    with torch.device("meta"):
        skeleton = GPT(config)
    try:
        skeleton.load_state_dict(state, strict=True, assign=True)
    except ValueError as e:  # an edited causal mask (CausalSelfAttention's own check)
        raise CheckpointError(path, str(e)) from None
    except RuntimeError as e:  # PyTorch's report: missing, unexpected and mis-shaped tensors
        report = " ".join(line.strip() for line in str(e).splitlines()).rstrip(".")
        raise CheckpointError(path, f"its tensors do not fit its config {config}: {report[:1500]}") from None


# Options that change what the model computes; the others (dropout, the attention kernel) do not.
_SAME_FUNCTION = ("vocab_size", "n_embd", "n_head", "n_layer", "block_size", "causal", "attn_scale")


def load_checkpoint(path: str | os.PathLike, model: GPT | None = None, device: str = "cpu") -> tuple[GPT, dict]:
    """Load a checkpoint with ``weights_only=True``; builds the model from its config when none is given.

    Everything is checked before a model is built: that the file is a readable, plain
    checkpoint, that its tensors are exactly those of a GPT of its config (PyTorch's strict
    loading, on the meta device: a damaged config cannot make this allocate a huge model), and
    that the weights are finite. A ``model`` given must have the checkpoint's sizes and options
    (``causal``, ``attn_scale``); ``dropout`` and ``attn_impl`` may differ. Any problem raises
    :class:`CheckpointError` naming the file.
    """
    path = check_path("path", path)  # type: ignore[assignment]
    check_instance("model", model, GPT, allow_none=True)
    device = check_device("device", device)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder, not a checkpoint file")
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    ckpt = _read_checkpoint(path, device)
    state, config = _checkpoint_parts(path, ckpt)
    if model is not None:
        differ = [f"{k}={getattr(config, k)!r} (the model given: {getattr(model.config, k)!r})"
                  for k in _SAME_FUNCTION if getattr(config, k) != getattr(model.config, k)]
        if differ:
            raise CheckpointError(path, f"it was saved from a model with {', '.join(differ)}", "Load it without a "
                                        "model (load_checkpoint(path) builds the right one) or into a model of its config")
    _check_fits(path, state, config)
    bad = non_finite_tensors(state)
    if bad:
        raise CheckpointError(path, f"it holds NaN or infinite weights (in {', '.join(bad[:3])}): the run that "
                                    "saved it had diverged", "Delete it and train again (a lower learning rate "
                                    "or grad_clip helps)")
    if model is None:
        model = GPT(config)
    try:
        model.load_state_dict(state, strict=True)
    except (RuntimeError, ValueError) as e:
        raise CheckpointError(path, str(e)) from None
    return model.to(device), ckpt  # type: ignore[return-value]
