"""The course's trained model: a character-level GPT on Tiny Shakespeare.

Lesson 09 trains it, lesson 10 and the explorers reuse it. The weights are cached in
``gpt_lesson.data.cache_dir() / CHECKPOINT_NAME``; when the file is missing (or was made
with other settings) the same seeded run produces it again, so every reader gets the
same model.

Why these settings (measured on a 2-core CPU, see lesson 09 and ``benchmarks/``):

* the nanoGPT CPU recipe's model (4 layers, 4 heads, 128 dims, no dropout): about
  0.8 M parameters is what a 2-core CPU trains in about a minute;
* a context of 32 characters instead of 64, with 32 rows per batch instead of 12: the same
  tokens per step come from more, shorter windows. Attention costs less, and at this
  loss level (about 1.9 nats) a character model uses little context beyond a few words;
* ``attn_impl="sdpa"``: the fused attention kernel, faster per step than the explicit one;
* a higher peak learning rate with a short warmup and a cosine decay to a tenth of it:
  the decay lets the last steps settle into a lower loss, so fewer tokens reach the
  target (validation loss <= 1.88 within 1.0 M training tokens).
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path

import torch

from .checkpoints import write_bytes_atomically
from .data import CharTokenizer, cache_dir, load_tiny_shakespeare, sha256_of, train_val_split
from .i18n import _
from .model import GPT, GPTConfig
from .training import (
    CheckpointError,
    History,
    TrainConfig,
    evaluate_split,
    load_checkpoint,
    save_checkpoint,
    set_seed,
    train,
)
from .validation import check_bool, check_instance, check_path

__all__ = [
    "SHAKESPEARE_CONFIG",
    "TRAIN_CONFIG",
    "CHECKPOINT_NAME",
    "TOKEN_BUDGET",
    "TARGET_VAL_LOSS",
    "checkpoint_path",
    "digest_path",
    "training_lock",
    "load_data",
    "train_model",
    "load_trained",
    "load_trained_model",
]

# Tiny Shakespeare has 65 distinct characters.
SHAKESPEARE_CONFIG = GPTConfig(
    vocab_size=65,
    n_embd=128,
    n_head=4,
    n_layer=4,
    block_size=32,
    dropout=0.0,
    attn_impl="sdpa",
)

TRAIN_CONFIG = TrainConfig(
    max_steps=976,  # 976 steps x 32 rows x 32 tokens = 999,424 training tokens (<= 1.0 M)
    batch_size=32,
    learning_rate=5e-3,
    min_lr=5e-4,
    warmup_steps=50,
    weight_decay=0.0,
    beta2=0.99,
    grad_clip=1.0,
    eval_interval=200,
    eval_iters=10,
    seed=1337,
)

CHECKPOINT_NAME = "shakespeare_char.pt"
TOKEN_BUDGET = 1_000_000
TARGET_VAL_LOSS = 1.88


def checkpoint_path() -> Path:
    """Where the trained weights are cached."""
    return cache_dir() / CHECKPOINT_NAME


def digest_path(path: Path) -> Path:
    """The file beside a trained checkpoint that holds its sha256, written by :func:`train_model`."""
    return path.with_name(path.name + ".sha256")


def _lock(f) -> None:  # noqa: ANN001 (an open file)
    """Block until this process holds the lock on ``f``: fcntl.flock on POSIX, msvcrt.locking on Windows."""
    try:
        import fcntl
    except ImportError:  # Windows: lock the first byte; locking() retries for 10 s, then raises: retry
        import msvcrt
        while True:
            try:
                msvcrt.locking(f.fileno(), msvcrt.LK_LOCK, 1)
                return
            except OSError:
                continue
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        warnings.warn(_("another process is training the model for {path}; waiting for it to finish, then "
                        "loading its result").format(path=f.name.removesuffix(".lock")), stacklevel=4)
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)


@contextmanager
def training_lock(path: Path) -> Iterator[None]:
    """Hold ``<path>.lock`` so that one process trains the model for ``path`` and the others wait.

    An exclusive lock held by the open file: the OS releases it when the process ends, even by
    kill -9, so a crashed trainer never blocks the others. The lock file itself stays (removing
    it would let two processes lock two different files).
    """
    lock_file = path.with_name(path.name + ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a+b") as f:
        _lock(f)
        yield  # the lock goes with the file when it is closed


def _owner(path: Path) -> str | None:
    """``"user NAME (uid N)"`` when ``path`` belongs to another user than this process's, else None."""
    if not hasattr(os, "getuid"):  # Windows: no uid to compare
        return None
    uid = path.stat().st_uid
    if uid == os.getuid():
        return None
    try:
        import pwd
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _untrusted(path: Path) -> str | None:
    """Why the cached checkpoint ``path`` is not to be used, or None: its trainer's digest and its owner.

    :func:`train_model` writes the file's sha256 beside it; a file that does not match it was
    replaced or changed after training. A file with no digest (the caches of older versions) is
    used when it is this user's own; another user's is not.
    """
    digest, owner = digest_path(path), _owner(path)
    if digest.is_file():
        expected = digest.read_text(encoding="utf-8", errors="replace").split()[:1]
        if expected != [sha256_of(path)]:
            return (f"it does not match the sha256 its trainer wrote beside it in {digest.name}: it was replaced "
                    f"or changed after training" + (f" (the file belongs to {owner})" if owner else ""))
        if owner:
            warnings.warn(_("the cached model {path} was trained by {owner}, not by you; it matches the digest "
                            "its trainer wrote, so it is used").format(path=path, owner=owner), stacklevel=3)
        return None
    if owner:
        return f"it belongs to {owner}, not to you, and has no digest from its trainer beside it"
    return None


def load_data(path: str | os.PathLike | None = None) -> tuple[str, CharTokenizer, torch.Tensor, torch.Tensor]:
    """Tiny Shakespeare as ``(text, tokenizer, train_data, val_data)``, split 90/10 without shuffling."""
    text = load_tiny_shakespeare(path)
    tokenizer = CharTokenizer(text)
    data = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    train_data, val_data = train_val_split(data, 0.9)
    return text, tokenizer, train_data, val_data


def _settings(config: GPTConfig, train_config: TrainConfig) -> dict:
    # What decides the weights; a cached checkpoint made with other settings is stale.
    # progress, checkpoint_path and device change how a run looks or where it goes, not its result.
    tc = {k: v for k, v in asdict(train_config).items() if k not in ("progress", "checkpoint_path", "device")}
    # The key as the cached checkpoints were first written: with the config field capture_attention
    # (always False; capture now lives in gpt_lesson.capture), so those caches stay valid.
    return {"config": {**config.to_dict(), "capture_attention": False}, "train_config": tc}


def _check_settings(config: object, train_config: object, path: object) -> tuple[GPTConfig, TrainConfig, Path]:
    """The defaults filled in and every argument checked."""
    config = SHAKESPEARE_CONFIG if config is None else check_instance("config", config, GPTConfig)
    train_config = TRAIN_CONFIG if train_config is None else check_instance("train_config", train_config, TrainConfig)
    path = checkpoint_path() if path is None else check_path("path", path)
    return config, train_config, path  # type: ignore[return-value]


def train_model(
    progress: bool = True,
    *,
    config: GPTConfig | None = None,
    train_config: TrainConfig | None = None,
    path: str | os.PathLike | None = None,
) -> tuple[GPT, History]:
    """Train the Shakespeare model from scratch (seeded) and save it to ``path``.

    Defaults: :data:`SHAKESPEARE_CONFIG`, :data:`TRAIN_CONFIG` and :func:`checkpoint_path`.
    The checkpoint also stores the history (with the exact validation loss of the
    final model under ``extra["val_loss"]``) so lesson 09 can plot the run without
    repeating it.
    """
    config, train_config, path = _check_settings(config, train_config, path)
    train_config = replace(train_config, progress=check_bool("progress", progress), checkpoint_path=None)
    tokenizer, train_data, val_data = load_data()[1:]
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(
            f"config.vocab_size={config.vocab_size} does not match the data's {tokenizer.vocab_size} characters"
        )
    set_seed(train_config.seed)  # the initial weights depend on the seed too
    model = GPT(config)
    history = train(model, train_data, val_data, train_config)
    val_loss = evaluate_split(model, val_data, device=train_config.device)
    extra = {"history": history.to_dict(), "val_loss": val_loss, **_settings(config, train_config)}
    save_checkpoint(path, model, extra=extra)
    # The trainer's word on the file: a checkpoint put there by anyone else does not match it.
    write_bytes_atomically(digest_path(path), f"{sha256_of(path)}  {path.name}\n".encode(), "the digest")
    model.eval()
    return model, history


def load_trained(
    train_if_missing: bool = True,
    progress: bool = False,
    *,
    config: GPTConfig | None = None,
    train_config: TrainConfig | None = None,
    path: str | os.PathLike | None = None,
) -> tuple[GPT, CharTokenizer, dict]:
    """``(model, tokenizer, extra)`` from the cache, training first if the cache is missing or stale.

    ``extra`` holds ``history`` (a :class:`History` as a dict), ``val_loss`` (exact, on the
    whole validation split) and the settings that made the weights. The checkpoint is
    read with ``weights_only=True``.
    """
    explicit_path = path is not None
    config, train_config, path = _check_settings(config, train_config, path)
    check_bool("train_if_missing", train_if_missing)
    check_bool("progress", progress)
    tokenizer = load_data()[1]
    wanted = _settings(config, train_config)
    model, extra = _cached(path, wanted, train_if_missing)
    if extra is None and train_if_missing and not explicit_path and not _writable(path.parent):
        # A shared, read-only cache (a JupyterHub's) without a model made with these settings:
        # train into the learner's own cache instead of failing after the training.
        fallback = Path.home() / ".cache" / "gpt_lesson" / CHECKPOINT_NAME
        if fallback != path:
            warnings.warn(_("the cache folder {folder} cannot be written; using {fallback} for the trained "
                            "model instead").format(folder=path.parent, fallback=fallback), stacklevel=2)
            return load_trained(train_if_missing, progress, config=config, train_config=train_config, path=fallback)
    if extra is None:
        if not train_if_missing:
            raise FileNotFoundError(
                f"no checkpoint made with the current settings at {path}; "
                "call load_trained_model(train_if_missing=True) or gpt_lesson.shakespeare.train_model()"
            )
        with training_lock(path):  # one process trains; the others wait here, then load its result
            model, extra = _cached(path, wanted, train_if_missing, quiet=True)
            if extra is None:
                train_model(progress, config=config, train_config=train_config, path=path)
                model, ckpt = load_checkpoint(path)
                extra = ckpt["extra"]
    model.eval()  # type: ignore[union-attr]
    return model, tokenizer, extra  # type: ignore[return-value]


def _cached(path: Path, wanted: dict, train_if_missing: bool, quiet: bool = False) -> tuple[GPT | None, dict | None]:
    """``(model, extra)`` of a usable cached checkpoint made with the ``wanted`` settings, else ``(None, None)``.

    A damaged or untrusted file is said out loud (``quiet``: not twice), or raised without ``train_if_missing``.
    """
    if not path.is_file():
        return None, None
    try:
        problem = _untrusted(path)
        if problem:
            raise CheckpointError(path, problem)
        model, ckpt = load_checkpoint(path)
    except CheckpointError as e:
        if not train_if_missing:
            raise CheckpointError(path, e.problem, "Call load_trained_model(train_if_missing=True) to train it "
                                                   "again and replace the file") from None
        if not quiet:
            warnings.warn(_("the cached model {path} could not be used ({problem}); training it again and "
                            "replacing the file").format(path=path, problem=e.problem), stacklevel=3)
        return None, None
    extra = ckpt.get("extra")
    if not isinstance(extra, dict) or {"config": extra.get("config"),
                                       "train_config": extra.get("train_config")} != wanted:
        return None, None  # made with other settings: do not pass it off as this model
    return model, extra


def _writable(folder: Path) -> bool:
    """Whether files can be created in ``folder`` (or in the nearest existing parent that would hold it)."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return os.access(probe, os.W_OK)


def load_trained_model(train_if_missing: bool = True, progress: bool = False) -> tuple[GPT, CharTokenizer]:
    """The trained Shakespeare model (in eval mode) and its tokenizer; see :func:`load_trained`."""
    model, tokenizer, _ = load_trained(train_if_missing, progress)
    return model, tokenizer
