"""Lesson 13's models: the source's ``GPT(1000, 64, 4, 3, 128)`` on BPE tokens of Tiny Shakespeare, and a
character-level model of the same size trained for about the same time, both cached like lesson 09's model.

* The tokenizer is the course's byte-level BPE with the source's ``vocab_size = 1000`` (743 merges, 256
  bytes, ``<|endoftext|>``), trained on the training part of the text only (the first 90 %), so the
  validation text is new to the tokenizer as well as to the model.
* Both models have the source's sizes (64 dims, 4 heads, 3 layers, a context of 128 tokens); only the
  vocabulary differs (1,000 tokens against 65 characters). Dropout is off, as in lesson 09: a run this
  short does not overfit. Both train with the same batch, learning rates and seed for about the same time:
  a BPE step costs about 1.36 times a character step (its output layer scores 1,000 tokens instead of 65;
  0.077 s against 0.056 s of one core's time, measured), so the BPE model takes 300 steps
  (:data:`TRAIN_CONFIG`) and the character model 410 (:data:`CHAR_TRAIN_CONFIG`). The step counts are fixed,
  not timed, so every run gives the same models; the lesson prints both training times.
* They are compared in **bits per character** on the same validation text: the model's total
  cross-entropy over the validation tokens, in bits, divided by the number of characters those tokens
  spell. A loss per token cannot be compared across tokenizers (a BPE token carries about 2.4 characters,
  so its loss is larger even for a better model); per character it can.

The checkpoints live in ``gpt_lesson.data.cache_dir()``; a file made with other settings (or for another
tokenizer: the checkpoint stores a fingerprint of the merges) is trained again. The character model goes
through :func:`gpt_lesson.shakespeare.load_trained` with this lesson's settings.
"""
from __future__ import annotations

import hashlib
import json
import math
import warnings
from dataclasses import replace
from pathlib import Path

import torch

from . import shakespeare
from .bpe import BPETokenizer
from .data import CharTokenizer, cache_dir, load_tiny_shakespeare
from .model import GPT, GPTConfig
from .training import CheckpointError, TrainConfig, evaluate_split, load_checkpoint, save_checkpoint, set_seed, train
from .validation import check_bool, check_instance, check_tensor

__all__ = [
    "BPE_VOCAB_SIZE",
    "BPE_CONFIG",
    "CHAR_CONFIG",
    "TRAIN_CONFIG",
    "CHAR_TRAIN_CONFIG",
    "BPE_CHECKPOINT",
    "CHAR_CHECKPOINT",
    "split_text",
    "fingerprint",
    "bpe_data",
    "load_bpe_model",
    "load_char_model",
    "bits_per_character",
    "CHINESE_TEXT",
    "course_chinese_text",
    "token_html",
]

BPE_VOCAB_SIZE = 1000
BPE_CONFIG = GPTConfig(vocab_size=BPE_VOCAB_SIZE, n_embd=64, n_head=4, n_layer=3, block_size=128, dropout=0.0,
                       attn_impl="sdpa")
CHAR_CONFIG = replace(BPE_CONFIG, vocab_size=65)
TRAIN_CONFIG = TrainConfig(
    max_steps=300,  # 300 steps x 16 rows x 128 tokens = 614,400 tokens for each model
    batch_size=16,
    learning_rate=5e-3,
    min_lr=5e-4,
    warmup_steps=30,
    weight_decay=0.0,
    beta2=0.99,
    grad_clip=1.0,
    eval_interval=300,  # estimates at the start and the end only: the lesson compares exact validation numbers
    eval_iters=5,
    seed=1337,
)
CHAR_TRAIN_CONFIG = replace(TRAIN_CONFIG, max_steps=410, eval_interval=410)  # the same time as 300 BPE steps
BPE_CHECKPOINT = "subword_bpe1000.pt"
CHAR_CHECKPOINT = "subword_char.pt"


def split_text(text: str, train_fraction: float = 0.9) -> tuple[str, str]:
    """The first 90 % of the characters for training, the rest for validation: lesson 09's split, as text."""
    check_instance("text", text, str)
    n = int(train_fraction * len(text))
    return text[:n], text[n:]


def fingerprint(tokenizer: BPETokenizer) -> str:
    """A short sha256 of the merges, the pattern and the special tokens: which tokenizer a checkpoint needs."""
    check_instance("tokenizer", tokenizer, BPETokenizer)
    what = json.dumps([list(tokenizer.merges), tokenizer.pattern, list(tokenizer.special_tokens)])
    return hashlib.sha256(what.encode("utf-8")).hexdigest()[:16]


def bpe_data(tokenizer: BPETokenizer, text: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiny Shakespeare's training and validation text, each encoded by ``tokenizer``, as two id tensors."""
    check_instance("tokenizer", tokenizer, BPETokenizer)
    train_text, val_text = split_text(load_tiny_shakespeare() if text is None else text)
    return (torch.tensor(tokenizer.encode(train_text), dtype=torch.long),
            torch.tensor(tokenizer.encode(val_text), dtype=torch.long))


def _bpe_settings(tokenizer: BPETokenizer) -> dict:
    return {**shakespeare._settings(BPE_CONFIG, TRAIN_CONFIG), "tokenizer": fingerprint(tokenizer)}


def load_bpe_model(tokenizer: BPETokenizer, train_if_missing: bool = True) -> tuple[GPT, dict]:
    """The BPE model (eval mode) and its ``extra`` (history, training seconds, settings), trained if needed.

    ``tokenizer`` must be the one the lesson trains (``bpe.train`` on the training text, 1,000 tokens):
    a cached model made for other merges is trained again.
    """
    check_instance("tokenizer", tokenizer, BPETokenizer)
    check_bool("train_if_missing", train_if_missing)
    if tokenizer.vocab_size != BPE_CONFIG.vocab_size:
        raise ValueError(f"tokenizer.vocab_size={tokenizer.vocab_size} does not match the model's "
                         f"vocab_size={BPE_CONFIG.vocab_size}")
    path = cache_dir() / BPE_CHECKPOINT
    wanted = _bpe_settings(tokenizer)
    if path.is_file():
        try:
            model, ckpt = load_checkpoint(path)
        except CheckpointError as e:
            warnings.warn(f"the cached model {path} could not be used ({e.problem}); training it again",
                          stacklevel=2)
        else:
            extra = ckpt.get("extra")
            if isinstance(extra, dict) and {k: extra.get(k) for k in wanted} == wanted:
                return model.eval(), extra
    if not train_if_missing:
        raise FileNotFoundError(f"no BPE model made with the current settings and tokenizer at {path}; "
                                "call load_bpe_model(tokenizer, train_if_missing=True)")
    train_ids, val_ids = bpe_data(tokenizer)
    cfg = replace(TRAIN_CONFIG, progress=False)
    set_seed(cfg.seed)  # the initial weights depend on the seed too
    model = GPT(BPE_CONFIG)
    history = train(model, train_ids, val_ids, cfg)
    extra = {"history": history.to_dict(), **wanted}
    save_checkpoint(path, model, extra=extra)
    return model.eval(), extra


def load_char_model(train_if_missing: bool = True) -> tuple[GPT, CharTokenizer, dict]:
    """The character-level model of the same size (eval mode), its tokenizer and ``extra``; lesson 09's machinery."""
    return shakespeare.load_trained(train_if_missing, config=CHAR_CONFIG, train_config=CHAR_TRAIN_CONFIG,
                                    path=cache_dir() / CHAR_CHECKPOINT)


@torch.no_grad()
def bits_per_character(model: GPT, ids: torch.Tensor, decode) -> float:
    """Bits per character of ``model`` on the token sequence ``ids`` (which ``decode`` turns back into text).

    The exact mean loss over every non-overlapping window (:func:`gpt_lesson.training.evaluate_split`),
    times the number of predicted tokens, in bits (divided by ln 2), divided by the characters those
    predicted tokens spell. Comparable across tokenizers: the same text costs the same characters.
    """
    check_instance("model", model, GPT)
    check_tensor("ids", ids, dims=1)
    if not callable(decode):
        raise TypeError(f"decode must be a function from ids to text (tokenizer.decode), got {type(decode).__name__}")
    T = model.config.block_size
    n = (len(ids) - 1) // T  # evaluate_split's windows: their targets are ids[1 : n*T + 1]
    nats = evaluate_split(model, ids) * n * T
    chars = len(decode(ids[1:n * T + 1].tolist()))
    return nats / math.log(2) / chars


CHINESE_TEXT = Path(__file__).resolve().parent / "corpora" / "zh_course.txt"


def course_chinese_text() -> str:
    """Chinese text written for this course: the Chinese paragraphs of lessons 01-12 of its Chinese edition.

    The markdown of ``notebooks/zh/01-12``, paragraph by paragraph, keeping those at least 40 % Chinese
    characters (73,856 characters, 40,605 of them Chinese), taken on 2026-12-01 and shipped with the package
    (``gpt_lesson/corpora/zh_course.txt``): the same text from a checkout or an installed package, and
    lesson 13's numbers do not change when a translation is edited.
    """
    return CHINESE_TEXT.read_text(encoding="utf-8").rstrip("\n")


_TINTS = ("#cde3f5", "#fbe0c3", "#d5ecd0", "#f6d0d8", "#e2d9f0", "#f3ecc0")


def token_html(tokenizer: BPETokenizer, text: str, *, title: str | None = None) -> str:
    """``text`` as its tokens, each tinted in turn; hovering a token shows its id and its number of bytes.

    A token that is part of a character (a Chinese character GPT-2 cuts into bytes) shows as U+FFFD (�).
    Static HTML: it shows the same in JupyterLab, an exported page and the slides.
    """
    check_instance("tokenizer", tokenizer, BPETokenizer)
    check_instance("text", text, str)
    import html

    spans = []
    for k, i in enumerate(tokenizer.encode(text)):
        piece = tokenizer.token_bytes(i)
        shown = html.escape(piece.decode("utf-8", errors="replace")).replace("\n", "↵<br>")
        spans.append(f'<span title="id {i}, {len(piece)} byte{"s" if len(piece) != 1 else ""}" '
                     f'style="background:{_TINTS[k % len(_TINTS)]};white-space:pre;border-radius:3px;'
                     f'padding:1px 0;margin:0 1px">{shown}</span>')
    head = f"<div style='font-weight:bold;margin-bottom:4px'>{html.escape(title)}</div>" if title else ""
    return (f"<div style='font-family:var(--jp-code-font-family, monospace);line-height:1.9'>{head}{''.join(spans)}"
            f"<div style='color:#555;margin-top:4px'>{len(spans)} tokens, {len(text.encode('utf-8'))} bytes</div></div>")
