"""Text data: a character tokenizer, the Tiny Shakespeare loader, splits and batches.

Tiny Shakespeare (Karpathy's char-rnn data set, 1,115,394 characters) is looked for,
in order, at:

1. the ``path`` argument of :func:`load_tiny_shakespeare`;
2. the file named by the environment variable ``GPT_LESSON_DATA``;
3. the local cache, ``$GPT_LESSON_CACHE`` or ``~/.cache/gpt_lesson/tinyshakespeare.txt``;
4. a download from :data:`TINY_SHAKESPEARE_URL` into the cache.

Every file is checked against :data:`TINY_SHAKESPEARE_SHA256` before it is used; a
download goes to a temporary file and is moved into the cache only once it checks out,
so a corrupt or truncated download never leaves a partial file behind.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.request
from pathlib import Path
from typing import Iterable, Sequence

import torch

from .validation import check_positive_int, check_tensor

__all__ = [
    "CharTokenizer",
    "TINY_SHAKESPEARE_URL",
    "TINY_SHAKESPEARE_SHA256",
    "TINY_SHAKESPEARE_SIZE",
    "DATA_ENV",
    "CACHE_ENV",
    "cache_dir",
    "sha256_of",
    "download",
    "load_tiny_shakespeare",
    "train_val_split",
    "get_batch",
]

TINY_SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TINY_SHAKESPEARE_SIZE = 1_115_394
TINY_SHAKESPEARE_FILE = "tinyshakespeare.txt"
DATA_ENV = "GPT_LESSON_DATA"
CACHE_ENV = "GPT_LESSON_CACHE"


class CharTokenizer:
    """Maps each character of a fixed vocabulary to an integer id and back.

    The vocabulary is the sorted set of characters of ``text``, so the same text
    always gives the same ids.
    """

    def __init__(self, text: str | Iterable[str]) -> None:
        chars = sorted(set(text))
        if not chars:
            raise ValueError("cannot build a tokenizer from empty text: the vocabulary would be empty")
        for ch in chars:
            if not isinstance(ch, str) or len(ch) != 1:
                raise TypeError(f"the vocabulary must be single characters, got {ch!r}")
        self.chars: list[str] = chars
        self.stoi = {ch: i for i, ch in enumerate(chars)}
        self.itos = dict(enumerate(chars))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def __len__(self) -> int:
        return len(self.chars)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"

    def encode(self, text: str) -> list[int]:
        """The ids of each character of ``text``; unknown characters raise a ValueError naming them."""
        if not isinstance(text, str):
            raise TypeError(f"encode() takes a str, got {type(text).__name__}")
        unknown = sorted({ch for ch in text if ch not in self.stoi})
        if unknown:
            raise ValueError(
                f"characters {unknown} are not in the vocabulary of {self.vocab_size} characters; "
                "a character tokenizer only knows the characters it was built from"
            )
        return [self.stoi[ch] for ch in text]

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """The text for a sequence of ids (a list or a 1-D tensor)."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"decode() takes a 1-D sequence of ids, got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        out = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"token id {i!r} must be an integer")
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is out of range: ids must be in [0, vocab_size={self.vocab_size})")
            out.append(self.itos[i])
        return "".join(out)


def cache_dir() -> Path:
    """Where downloaded data and trained checkpoints are kept."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "gpt_lesson"


def sha256_of(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _verify(path: Path, sha256: str) -> None:
    digest = sha256_of(path)
    if digest != sha256:
        raise ValueError(
            f"{path} has sha256 {digest}, expected {sha256} (size {path.stat().st_size:,} bytes): "
            "the file is corrupt or truncated; delete it and download it again"
        )


def download(url: str, dest: str | os.PathLike, sha256: str, timeout: float = 30.0) -> Path:
    """Download ``url`` to ``dest`` only if its sha256 matches; no partial file is ever left at ``dest``."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=dest.name + ".", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            for chunk in iter(lambda: resp.read(1 << 16), b""):
                out.write(chunk)
        _verify(tmp, sha256)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def load_tiny_shakespeare(
    path: str | os.PathLike | None = None,
    *,
    download_if_missing: bool = True,
    url: str = TINY_SHAKESPEARE_URL,
    sha256: str = TINY_SHAKESPEARE_SHA256,
) -> str:
    """The Tiny Shakespeare text, checked against its sha256 (see the module docstring for the search order)."""
    if path is None and os.environ.get(DATA_ENV):
        path = os.environ[DATA_ENV]
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"no Tiny Shakespeare file at {path} (from the path argument or ${DATA_ENV}); "
                f"download {url} to that path, or unset ${DATA_ENV} to use the cache"
            )
    else:
        path = cache_dir() / TINY_SHAKESPEARE_FILE
        if not path.is_file():
            if not download_if_missing:
                raise FileNotFoundError(f"{path} does not exist and download_if_missing=False")
            try:
                download(url, path, sha256)
            except OSError as e:  # URLError, timeouts and socket errors are all OSErrors
                raise FileNotFoundError(
                    f"could not download Tiny Shakespeare from {url} ({e}). With no network, "
                    f"copy the file (1,115,394 bytes) to {path}, or set ${DATA_ENV}=/path/to/tinyshakespeare.txt, "
                    "or pass path= to load_tiny_shakespeare()"
                ) from e
    _verify(path, sha256)
    return path.read_text(encoding="utf-8")


def train_val_split(data: torch.Tensor, train_fraction: float = 0.9) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``train_fraction`` of the tokens for training, the rest for validation (no shuffling)."""
    check_tensor("data", data, dims=1)
    if isinstance(train_fraction, bool) or not isinstance(train_fraction, (int, float)):
        raise TypeError(f"train_fraction={train_fraction!r} must be a number")
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction={train_fraction} must be strictly between 0 and 1")
    n = int(train_fraction * len(data))
    return data[:n], data[n:]


def get_batch(
    data: torch.Tensor,
    block_size: int,
    batch_size: int,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """A random batch ``(x, y)`` of shape (batch_size, block_size); ``y`` is ``x`` shifted left by one."""
    check_tensor("data", data, dims=1)
    check_positive_int("block_size", block_size)
    check_positive_int("batch_size", batch_size)
    if len(data) <= block_size:
        raise ValueError(f"data has {len(data)} tokens; it needs more than block_size={block_size}")
    ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size)
    x = data[ix[:, None] + offsets]  # (B, T)
    y = data[ix[:, None] + offsets + 1]  # (B, T)
    return x.to(device), y.to(device)
