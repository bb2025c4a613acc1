"""Checkpoints: the weights and config of a :class:`~gpt_lesson.model.GPT`, saved and loaded safely.

* :func:`save_checkpoint` writes atomically (:func:`gpt_lesson.data.write_atomically`: a temp file
  renamed into place, so a good file is never replaced by half of one), refuses NaN or infinite
  weights, stores only what ``torch.load(weights_only=True)`` reads back, and stores a sha256 of
  every tensor, of the config and of the extra values (``"digest"``); a full disk is an error naming the file.
* :func:`load_checkpoint` first checks the zip archive's CRC-32 of every member (``testzip``) and
  names what a file is when it is no checkpoint (a legacy .tar file, junk in front of a zip);
  it reads with ``weights_only=True`` and checks everything before it builds a model (the digest
  last, when the file has one): the file is readable and plain (a pickle asking to run code is refused), its config is a
  valid :class:`~gpt_lesson.model.GPTConfig`, its tensors are what ``GPT(config)`` holds (PyTorch's
  strict loading into the model built on the meta device, so a damaged config cannot make it
  allocate a huge model), and the weights are finite.

Every problem with a file raises :class:`CheckpointError`, which names the file and says what to do.
"""
from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import pickle
import re
import tarfile
import zipfile
from dataclasses import fields
from pathlib import Path

import torch

from .data import write_atomically
from .model import GPT, GPTConfig
from .validation import check_device, check_instance, check_path

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint", "non_finite_tensors",
           "check_writable_file", "write_bytes_atomically", "weights_digest"]


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


def check_writable_file(name: str, path: Path, what: str) -> Path:
    """Raise now, before any work, unless a file can be written at ``path`` (a folder or no rights: refused).

    Creates the folder if it is missing (the save would), then creates and removes a probe file in
    it: the same operations the atomic save does, so a folder, a path below a file, a read-only
    disk or missing rights are found before a run that would lose its result.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, f"{name}={str(path)!r} is a folder: {what} needs a file path "
                                              f"(e.g. {str(path / 'model.pt')!r})")
    folder = path.parent
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, f"{name}={str(path)!r} cannot be written: {existing} is a file, "
                                                f"not a folder, so {what} cannot go below it")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".{path.name}.{os.getpid()}.probe"
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        probe.unlink()
    except OSError as e:
        raise OSError(e.errno, f"{name}={str(path)!r} cannot be written ({what} goes in the folder {folder}): "
                               f"{e.strerror or e}. Choose a path in a folder you can write to") from e
    return path


# errno values of a full disk (ENOSPC) and of a full quota (EDQUOT, where the OS has it).
_FULL = {errno.ENOSPC} | ({errno.EDQUOT} if hasattr(errno, "EDQUOT") else set())


def write_bytes_atomically(path: Path, data: bytes, what: str) -> Path:
    """:func:`gpt_lesson.data.write_atomically` of ``data``; a full disk names the file and says so.

    A full disk shows up as ``ENOSPC`` from ``write``, ``flush`` or ``fsync``: the error then
    says "no space left", names ``path``, how many bytes were asked for, and that an existing
    file was left as it was (the temp file is removed by ``write_atomically``).
    """
    existed = path.exists()
    try:
        return write_atomically(path, lambda f: f.write(data), suffix=".tmp", what=what)
    except OSError as e:
        if e.errno not in _FULL:
            raise
        kept = f"; the old {path} was left as it was" if existed else ""
        raise OSError(e.errno, f"no space left on the device to write {what} {path} ({len(data):,} bytes){kept}. "
                               "Free some disk space (or quota) and save again") from e


def _tensor_digest(t: torch.Tensor) -> str:
    t = t.detach().cpu().contiguous()
    h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _plain_form(value: object) -> object:
    """A JSON-able form of a plain checkpoint value that tells apart what ``==`` would not (1 and 1.0 and True,
    a list and a tuple, the key order aside): the input of the ``extra`` digest."""
    if isinstance(value, torch.Tensor):
        return ["tensor", _tensor_digest(value)]
    if isinstance(value, dict):
        return ["dict", sorted([repr(k), _plain_form(v)] for k, v in value.items())]
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        return [type(value).__name__, [_plain_form(v) for v in value]]
    return [type(value).__name__, repr(value)]


def weights_digest(state: dict[str, torch.Tensor], config: dict, extra: dict | None = None) -> dict:
    """sha256 of every tensor (dtype, shape and bytes), of the config and of ``extra`` (when given):
    ``{"config": hex, "model": {name: hex}, "extra": hex}``."""
    digest = {"config": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest(),
              "model": {name: _tensor_digest(t) for name, t in state.items()}}
    if extra is not None:
        digest["extra"] = hashlib.sha256(json.dumps(_plain_form(extra)).encode()).hexdigest()
    return digest


_PLAIN = (type(None), bool, int, float, str, torch.Tensor, torch.Size, torch.dtype, torch.device)


def _check_plain(name: str, value: object, inside: tuple[int, ...] = ()) -> None:
    """Raise unless ``value`` holds only what ``torch.load(weights_only=True)`` reads back (and no cycle)."""
    if isinstance(value, (dict, list, tuple)):
        if id(value) in inside:
            raise ValueError(f"{name} refers back to a dict or list that contains it (a cycle): a checkpoint "
                             "cannot hold a self-referencing value; store a copy without the loop")
        inside = inside + (id(value),)
    if isinstance(value, dict):
        for k, v in value.items():
            _check_plain(f"{name}[{k!r}]", k, inside)
            _check_plain(f"{name}[{k!r}]", v, inside)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_plain(f"{name}[{i}]", v, inside)
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
    config = model.config.to_dict()
    payload = {"model": state, "config": config, "extra": extra, "digest": weights_digest(state, config, extra)}
    # Serialised in memory first: a full disk is then an OSError of the write that names the file
    # (torch.save writing straight to the file says only "inline_container.cc: unexpected pos").
    buf = io.BytesIO()
    torch.save(payload, buf)
    return write_bytes_atomically(path, buf.getvalue(), "the checkpoint")


_ZIP = b"PK\x03\x04"  # torch.save writes a zip archive; its first member starts with this


def _check_archive(path: Path, size: int) -> None:
    """Raise unless ``path`` is an archive torch.load can read whose members all pass their CRC-32 check.

    Names what the file is when it is not one: a legacy .tar checkpoint, a zip archive with other
    bytes in front of it, or something that is neither a zip archive nor a pickle.
    """
    with open(path, "rb") as f:
        head = f.read(512)
    if head.startswith(_ZIP):
        try:
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()  # reads every member and compares its CRC-32: milliseconds
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
            raise CheckpointError(path, f"the file is not a readable PyTorch checkpoint ({size:,} bytes; "
                                        f"{type(e).__name__}: {e}); it was probably cut short by an interrupted "
                                        "save or copy") from None
        if bad is not None:
            raise CheckpointError(path, f"the file is damaged: the archive member {bad!r} fails its CRC-32 check "
                                        "(its bytes changed after it was written: a faulty disk, memory or copy)")
        return
    try:
        is_tar = tarfile.is_tarfile(path)
    except OSError:
        is_tar = False
    if is_tar:
        raise CheckpointError(path, "it is a PyTorch checkpoint in the legacy .tar format of very old PyTorch "
                                    "versions, which torch.load cannot read with weights_only=True (safely)",
                              "Load it once with torch.load(..., weights_only=False) only if you trust who made "
                              "it, then save the model again with save_checkpoint(); or train it again")
    with open(path, "rb") as f:
        at = f.read(1 << 20).find(_ZIP)
    if at > 0:
        raise CheckpointError(path, f"the file is not a readable PyTorch checkpoint: {at:,} bytes of something else "
                                    f"(starting {head[:16]!r}) come before its zip archive, so it was damaged or "
                                    "wrapped by another tool")
    if not head.startswith(b"\x80"):  # neither zip nor pickle (the legacy format torch.save wrote before 1.6)
        raise CheckpointError(path, f"the file is not a readable PyTorch checkpoint ({size:,} bytes, starting "
                                    f"{head[:16]!r}: neither the zip archive torch.save writes nor a pickle); it is "
                                    "another kind of file, or its start was overwritten")


def _read_checkpoint(path: Path, device: str) -> object:
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(path, "the file is empty (0 bytes): a save or copy was interrupted")
    _check_archive(path, size)
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


def _check_digest(path: Path, ckpt: dict, state: dict[str, torch.Tensor]) -> None:
    """Raise if the digest stored at saving no longer matches the tensors or the config.

    The zip's CRC-32 is recomputed by whoever rewrites the archive; the digest inside the pickle
    catches a change made below it (a weight or a config value edited and the archive rezipped).
    Checkpoints written before the digest existed have none and load on the CRC and the other checks.
    """
    stored = ckpt.get("digest")
    if stored is None:
        return
    if not (isinstance(stored, dict) and isinstance(stored.get("config"), str)
            and isinstance(stored.get("model"), dict)):
        raise CheckpointError(path, "the file is damaged: its 'digest' entry is not the one save_checkpoint writes")
    # Checkpoints saved before the digest covered ``extra`` have no "extra" entry: their extra is not checked.
    extra = ckpt.get("extra", {}) if "extra" in stored else None
    if "extra" in stored and not isinstance(stored["extra"], str):
        raise CheckpointError(path, "the file is damaged: its 'digest' entry is not the one save_checkpoint writes")
    now = weights_digest(state, ckpt["config"], extra)
    changed = [name for name in sorted(set(now["model"]) | set(stored["model"]))
               if now["model"].get(name) != stored["model"].get(name)]
    if now.get("extra") != stored.get("extra"):
        changed.insert(0, "its extra values")
    if now["config"] != stored["config"]:
        changed.insert(0, "its config")
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        raise CheckpointError(path, "the file is damaged: the sha256 digest stored when it was saved no longer "
                                    f"matches {', '.join(changed[:3])}{more} (changed after saving)")


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
    _check_digest(path, ckpt, state)
    if model is None:
        model = GPT(config)
    try:
        model.load_state_dict(state, strict=True)
    except (RuntimeError, ValueError) as e:
        raise CheckpointError(path, str(e)) from None
    return model.to(device), ckpt  # type: ignore[return-value]
