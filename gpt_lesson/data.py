"""Text data: a character tokenizer, the Tiny Shakespeare loader, splits and batches.

Tiny Shakespeare (Karpathy's char-rnn data set, 1,115,394 characters) is looked for,
in order, at:

1. the ``path`` argument of :func:`load_tiny_shakespeare`;
2. the file named by the environment variable ``GPT_LESSON_DATA``;
3. the local cache, ``$GPT_LESSON_CACHE`` or ``~/.cache/gpt_lesson/tinyshakespeare.txt``;
4. a download from :data:`TINY_SHAKESPEARE_URL` into the cache.

Every file is checked against :data:`TINY_SHAKESPEARE_SHA256` before it is used, and a
file that does not match is described (empty, truncated, Windows line endings, an HTML
page...). Files are written with :func:`write_atomically`: to a temporary file that is
renamed into place once complete, so a failed or killed download or save never leaves a
partial file where a good one is expected.
"""
from __future__ import annotations

import glob
import hashlib
import http.client
import numbers
import os
import re
import secrets
import socket
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import BinaryIO

import torch

from .validation import (
    check_bool,
    check_device,
    check_generator,
    check_instance,
    check_int,
    check_longer_than_block,
    check_number,
    check_path,
    check_positive_int,
    check_tensor,
)

__all__ = [
    "CharTokenizer",
    "TINY_SHAKESPEARE_URL",
    "TINY_SHAKESPEARE_SHA256",
    "TINY_SHAKESPEARE_SIZE",
    "DATA_ENV",
    "CACHE_ENV",
    "DownloadError",
    "cache_dir",
    "sha256_of",
    "write_atomically",
    "remove_stale_temp_files",
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
        check_instance("text", text, str)
        unknown = sorted({ch for ch in text if ch not in self.stoi})
        if unknown:
            raise ValueError(
                f"characters {unknown} are not in the vocabulary of {self.vocab_size} characters; "
                "a character tokenizer only knows the characters it was built from"
            )
        return [self.stoi[ch] for ch in text]

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """The text for a sequence of ids (a list, a 1-D tensor or a 1-D NumPy array; NumPy integers count)."""
        if isinstance(ids, torch.Tensor):
            check_tensor("ids", ids, dims=1)
            ids = ids.tolist()
        elif type(ids).__module__ == "numpy" and hasattr(ids, "ndim"):  # an array: its items as Python numbers
            if ids.ndim != 1:
                raise ValueError(f"ids must be a 1-D sequence of token ids, got an array of shape {ids.shape}")
            ids = ids.tolist()
        rule = f"in [0, vocab_size={self.vocab_size})"
        return "".join(self.itos[check_int(f"ids[{n}]", _plain_int(i), minimum=0, maximum=self.vocab_size - 1,
                                           rule=rule)] for n, i in enumerate(ids))


def _plain_int(value: object) -> object:
    """A NumPy integer (``np.int64(3)``) as the Python int it stands for; anything else unchanged."""
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, int)) and type(value).__module__ == "numpy":
        return int(value)
    return value


def cache_dir() -> Path:
    """Where downloaded data and trained checkpoints are kept (``~`` in ``$GPT_LESSON_CACHE`` is expanded)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return check_path(f"${CACHE_ENV}", env)  # type: ignore[return-value]
    return Path.home() / ".cache" / "gpt_lesson"


def sha256_of(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- files written safely -------------------------------------------------------------------
# A file is written to a temporary name beside its destination, flushed to disk, then renamed
# over it: a reader sees the old file or the new one, never half of one. The temporary name
# says which process writes it (``NAME.<pid>@<host>.<random>.part``), so the next writer can
# remove what a killed process left behind. Files are created with mode 0o666 minus the
# umask, like any other file the user creates (mkstemp's 0o600 would hide a shared
# classroom cache from the other users).

STALE_TEMP_SECONDS = 600  # a temp file nobody has written to for this long belongs to a dead writer
_HOST = socket.gethostname()


def _temp_path(dest: Path, suffix: str) -> Path:
    return dest.with_name(f"{dest.name}.{os.getpid()}@{_HOST}.{secrets.token_hex(4)}{suffix}")


def _writer_is_gone(path: Path, dest: Path, suffix: str) -> bool:
    name, end = re.escape(dest.name), re.escape(suffix)
    match = re.fullmatch(name + r"\.(\d+)@(.*)\.[0-9a-f]{8}" + end, path.name)
    # Only our own temp names: this one, or mkstemp's 8 random characters (earlier versions). A file
    # the user named like it (``run.pt.old.tmp``) is never touched.
    if match is None and not re.fullmatch(name + r"\.[a-z0-9_]{8}" + end, path.name):
        return False
    try:
        idle = time.time() - path.stat().st_mtime
    except OSError:
        return False  # already gone
    if idle > STALE_TEMP_SECONDS:
        return True
    if match is None or match.group(2) != _HOST or os.name == "nt":  # os.kill(pid, 0) is no probe on Windows
        return False
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: alive, another user's process
        return False
    return False


def remove_stale_temp_files(dest: str | os.PathLike, suffix: str = ".part") -> list[Path]:
    """Delete the temp files (``dest.*<suffix>``) that writers of ``dest`` killed mid-way left.

    A temp file is stale when the process named in it no longer runs on this machine, or
    when nothing has written to it for :data:`STALE_TEMP_SECONDS`. Returns what was removed.
    """
    dest = Path(dest)
    removed = []
    try:
        candidates = list(dest.parent.glob(glob.escape(dest.name) + ".*" + suffix))
    except OSError:
        return removed
    for path in candidates:
        if _writer_is_gone(path, dest, suffix):
            try:
                path.unlink()
                removed.append(path)
            except OSError:  # another user's file in a shared folder: not ours to remove
                pass
    return removed


def _folder_error(folder: Path, e: OSError, what: str) -> OSError:
    # OSError(errno, text) is created as PermissionError, NotADirectoryError... as the errno says.
    return OSError(e.errno, f"cannot write {what} in the folder {folder}: {e.strerror or e}")


def write_atomically(
    dest: str | os.PathLike,
    write: Callable[[BinaryIO], None],
    *,
    suffix: str = ".tmp",
    what: str = "the file",
    check: Callable[[Path], None] | None = None,
) -> Path:
    """Write ``dest`` through ``write(file)`` so that it ends up complete or untouched, never half-written.

    Creates the folder if needed, removes stale temp files of earlier killed writers, writes a
    temp file beside ``dest``, flushes it to disk, runs ``check(temp_path)`` (which may raise
    to refuse the content) and renames the temp file over ``dest``. If anything fails, the
    temp file is removed and an existing ``dest`` is left as it was. Errors of the folder
    (missing rights, a file in the way, a full disk) name the folder.
    """
    dest = Path(dest)
    folder = dest.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _folder_error(folder, e, what) from e
    remove_stale_temp_files(dest, suffix)
    tmp = _temp_path(dest, suffix)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as e:
        raise _folder_error(folder, e, what) from e
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            try:
                f.flush()
                os.fsync(f.fileno())  # on disk before the rename: a crash cannot leave an empty file
            except OSError as e:
                raise _folder_error(folder, e, what) from e
        if check is not None:
            check(tmp)
        try:
            os.replace(tmp, dest)
        except OSError as e:
            raise OSError(e.errno, f"cannot replace {dest} with the new file: {e.strerror or e}") from e
    finally:
        tmp.unlink(missing_ok=True)
    return dest


# --- checking and fetching the data file -------------------------------------------------------

def _what_is_wrong(path: Path, sha256: str, size: int | None, shown: Path | None = None) -> str | None:
    """None if ``path`` has the expected sha256, else what it is instead, in words (``shown`` names it)."""
    digest = sha256_of(path)
    if digest == sha256:
        return None
    found = path.stat().st_size
    if found == 0:
        return "is empty (0 bytes)"
    raw = path.read_bytes()
    head = raw[:2048].lstrip().lower()
    if head.startswith(b"<!doctype html") or b"<html" in head:
        return "is an HTML page, not the text: a proxy, login page or error page answered instead"
    if b"\r\n" in raw and hashlib.sha256(raw.replace(b"\r\n", b"\n")).hexdigest() == sha256:
        return (
            "has Windows line endings (CRLF, \\r\\n) where the original has \\n: the right text, converted by a "
            "Windows editor, a download tool or git's core.autocrlf. Convert it back, e.g. with `dos2unix FILE` or "
            "in Python: p = pathlib.Path(r'FILE'); p.write_bytes(p.read_bytes().replace(b'\\r\\n', b'\\n'))"
        ).replace("FILE", str(shown or path))
    sums = f"sha256 {digest}, expected {sha256}"
    if size is None or found == size:
        what = "has the right size but other content" if found == size else "has other content than expected"
        return f"{what} ({found:,} bytes, {sums}): it is corrupt or a different file"
    if found < size:
        return f"has {found:,} bytes instead of {size:,} ({sums}): it is truncated (an interrupted download or copy)"
    return f"has {found:,} bytes instead of {size:,} ({sums}): it is a different file"


def _expected_size(sha256: str) -> int | None:
    return TINY_SHAKESPEARE_SIZE if sha256 == TINY_SHAKESPEARE_SHA256 else None


class DownloadError(OSError):
    """The network part of a download failed (no connection, a timeout, an HTTP error, a cut-off body)."""


def download(url: str, dest: str | os.PathLike, sha256: str, timeout: float = 30.0) -> Path:
    """Download ``url`` to ``dest`` only if its sha256 matches; no partial file is ever left at ``dest``.

    Raises :class:`DownloadError` when the network fails, ``ValueError`` when the body is not the
    expected file (saying what came instead), and an ``OSError`` naming the folder when
    ``dest``'s folder cannot be written. Temp files of earlier, killed downloads are removed.
    """
    check_instance("url", url, str)
    dest = check_path("dest", dest)  # type: ignore[assignment]
    check_instance("sha256", sha256, str)
    check_number("timeout", timeout, minimum=0, min_open=True)

    def fetch(out: BinaryIO) -> None:
        try:
            resp = urllib.request.urlopen(url, timeout=timeout)
        except ValueError as e:
            raise ValueError(f"url={url!r} cannot be downloaded: {e}") from None
        except (OSError, http.client.HTTPException) as e:
            raise DownloadError(f"could not download {url} ({getattr(e, 'reason', None) or e})") from e
        received = 0
        with resp:
            while True:
                try:
                    chunk = resp.read(1 << 16)
                except (OSError, http.client.HTTPException) as e:
                    raise DownloadError(f"the download of {url} was cut off after {received:,} bytes ({e!r})") from e
                if not chunk:
                    break
                out.write(chunk)
                received += len(chunk)
            announced = resp.headers.get("Content-Length", "")
            if announced.isdigit() and received < int(announced):  # the server closed the connection early
                raise DownloadError(f"the download of {url} was cut off after {received:,} bytes "
                                    f"(of {int(announced):,})")

    def verify(tmp: Path) -> None:
        problem = _what_is_wrong(tmp, sha256, _expected_size(sha256), shown=dest)
        if problem:
            raise ValueError(f"the file downloaded from {url} {problem}; nothing was saved to {dest}")

    return write_atomically(dest, fetch, suffix=".part", what=f"the download of {dest.name}", check=verify)


def _offline_advice(path: Path, lead: str) -> str:
    return (f"{lead}: copy the file ({TINY_SHAKESPEARE_SIZE:,} bytes) to {path}, or set "
            f"${DATA_ENV}=/path/to/tinyshakespeare.txt, or pass path= to load_tiny_shakespeare()")


def load_tiny_shakespeare(
    path: str | os.PathLike | None = None,
    *,
    download_if_missing: bool = True,
    url: str = TINY_SHAKESPEARE_URL,
    sha256: str = TINY_SHAKESPEARE_SHA256,
) -> str:
    """The Tiny Shakespeare text, checked against its sha256 (see the module docstring for the search order)."""
    check_bool("download_if_missing", download_if_missing)
    if path is None and os.environ.get(DATA_ENV):
        path = check_path(f"${DATA_ENV}", os.environ[DATA_ENV])
    if path is not None:
        path = check_path("path", path)
        if not path.is_file():  # type: ignore[union-attr]
            raise FileNotFoundError(
                f"no Tiny Shakespeare file at {path} (from the path argument or ${DATA_ENV}); "
                f"download {url} to that path, or unset ${DATA_ENV} to use the cache"
            )
        fix = f"replace it with a fresh copy of {url}"
    else:
        path = cache_dir() / TINY_SHAKESPEARE_FILE
        remove_stale_temp_files(path, ".part")
        if not path.is_file():
            if not download_if_missing:
                raise FileNotFoundError(f"{path} does not exist and download_if_missing=False")
            try:
                download(url, path, sha256)
            except DownloadError as e:
                raise FileNotFoundError(f"{e}. {_offline_advice(path, 'Without a network')}") from e
            except ValueError as e:
                lead = "If a proxy or firewall alters downloads here"
                raise ValueError(f"{e}. {_offline_advice(path, lead)}") from None
            except OSError as e:  # the cache folder cannot be written: no use copying the file there
                raise OSError(e.errno, f"{e.strerror}. Set ${CACHE_ENV} to a folder you can write to, or set "
                                       f"${DATA_ENV} to a copy of the file ({TINY_SHAKESPEARE_SIZE:,} bytes)") from e
        fix = "delete it and run again to download it anew"
    problem = _what_is_wrong(path, sha256, _expected_size(sha256))  # type: ignore[arg-type]
    if problem:
        raise ValueError(f"{path} {problem}; or {fix}" if "Windows" in problem else f"{path} {problem}; {fix}")
    return path.read_text(encoding="utf-8")  # type: ignore[union-attr]


def train_val_split(data: torch.Tensor, train_fraction: float = 0.9) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``train_fraction`` of the tokens for training, the rest for validation (no shuffling)."""
    check_tensor("data", data, dims=1)
    check_number("train_fraction", train_fraction, minimum=0, maximum=1, min_open=True, max_open=True)
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
    check_longer_than_block("data", data, block_size)
    check_generator("generator", generator)
    check_device("device", device)
    ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size)
    x = data[ix[:, None] + offsets]  # (B, T)
    y = data[ix[:, None] + offsets + 1]  # (B, T)
    return x.to(device), y.to(device)
