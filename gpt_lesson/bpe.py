"""Byte-level BPE (byte pair encoding, 字节对编码) that a learner can read, and GPT-2's real tokenizer.

A byte-level BPE tokenizer starts from the 256 byte values, so any UTF-8 text (Chinese, emoji, code)
can be encoded, and learns **merges**: "the pair of tokens (a, b) becomes the new token n". Training
repeats one step: count every adjacent pair, merge the most frequent one everywhere, until the
vocabulary has ``vocab_size`` tokens. Encoding applies the learned merges in the order they were
learned; decoding joins the tokens' bytes.

Before counting, the text is cut into chunks by GPT-2's regular expression (:data:`GPT2_SPLIT_PATTERN`:
contractions, words with their leading space, numbers, punctuation, whitespace), so a merge never
crosses from a word into the next one. Special tokens (``<|endoftext|>``) are whole tokens of their own
that merges never touch.

* :func:`train`: counts of adjacent pairs kept up to date as merges happen (only the pairs around each
  replaced pair change), so a vocabulary of 1,000 on Tiny Shakespeare takes seconds;
  :func:`train_by_recounting` is the textbook loop that recounts everything after every merge (the same
  merges, far slower). Ties between equally frequent pairs go to the smaller pair of ids, compared as
  ``(first, second)``: the earlier-made tokens win, and among bytes the lower byte value.
* :class:`BPETokenizer`: ``encode``, ``decode`` (bytes that are not valid UTF-8 on their own, such as
  half of a Chinese character, decode with U+FFFD and never raise), ``save``/``load`` of the merges.
* :func:`gpt2_tokenizer`: OpenAI's ``encoder.json`` and ``vocab.bpe`` (50,257 tokens), from ``folder=``,
  ``$GPT_LESSON_GPT2``, the course cache or a download, every file checked against its sha256.
"""
from __future__ import annotations

import heapq
import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import regex
import torch

from .data import DownloadError, _what_is_wrong, cache_dir, download, write_atomically
from .validation import check_bool, check_instance, check_int, check_path, check_tensor

__all__ = [
    "GPT2_SPLIT_PATTERN",
    "ENDOFTEXT",
    "GPT2_ENV",
    "GPT2_FILES",
    "bytes_to_unicode",
    "pre_split",
    "pair_counts",
    "merge",
    "train",
    "train_by_recounting",
    "BPETokenizer",
    "load_gpt2_files",
    "gpt2_files",
    "gpt2_tokenizer",
]

# GPT-2's pre-tokenisation (its encoder.py): contractions, an optional space and letters, an optional
# space and digits, an optional space and other symbols, whitespace not followed by a non-space (so
# the last space of a run stays with the next word), any other whitespace.
GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
ENDOFTEXT = "<|endoftext|>"
GPT2_ENV = "GPT_LESSON_GPT2"
_BASE = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
# name -> (url, sha256): the published files, the same pins as tiktoken's GPT-2 loader.
GPT2_FILES = {
    "encoder.json": (_BASE + "encoder.json", "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"),
    "vocab.bpe": (_BASE + "vocab.bpe", "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"),
}
_FORMAT = "#gpt-lesson-bpe v1"
_CACHE_LIMIT = 200_000  # chunks remembered by encode (GPT-2's encoder.py keeps such a cache too)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from each byte value to a printable character, used to write tokens as text.

    The 188 printable bytes (``!`` to ``~``, ``¡`` to ``¬``, ``®`` to ``ÿ``) stand for themselves; the
    other 68 (control characters, the space, ...) are given the characters from U+0100 on, in byte order.
    So the space, byte 32, is written ``Ġ`` (U+0120) in ``vocab.bpe``.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _compiled(pattern: str | None) -> regex.Pattern | None:
    if pattern is None:
        return None
    check_instance("pattern", pattern, str)
    try:
        return regex.compile(pattern)
    except regex.error as e:
        raise ValueError(f"pattern={pattern!r:.80} is not a regular expression: {e}") from None


def pre_split(text: str, pattern: str | None = GPT2_SPLIT_PATTERN) -> list[str]:
    """``text`` cut into the chunks BPE works on (GPT-2's rule by default; ``None``: one chunk)."""
    check_instance("text", text, str)
    compiled = _compiled(pattern)
    if compiled is None:
        return [text] if text else []
    return compiled.findall(text)


def pair_counts(ids: Sequence[int], counts: dict[tuple[int, int], int] | None = None) -> dict[tuple[int, int], int]:
    """How often each adjacent pair occurs in ``ids`` (added to ``counts`` when given)."""
    counts = {} if counts is None else counts
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def merge(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """``ids`` with every occurrence of ``pair`` replaced by ``new_id``, left to right (``a a a`` -> ``n a``)."""
    out, i, n = [], 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


# ----------------------------------------------------------------------------------------------
# Training


def _check_training(text: object, vocab_size: object, special_tokens: object) -> list[str]:
    check_instance("text", text, str)
    if not text:
        raise ValueError("text='' is empty: BPE learns its merges from the pairs of a text, give it some")
    specials = _check_specials(special_tokens)
    check_int("vocab_size", vocab_size, minimum=256 + len(specials),
              rule=f">= 256 + {len(specials)} special token(s) = {256 + len(specials)}: every byte value is a token "
                   "before the first merge")
    return specials


def _check_specials(special_tokens: object) -> list[str]:
    if isinstance(special_tokens, str) or not isinstance(special_tokens, Iterable):
        raise TypeError(f"special_tokens={special_tokens!r:.60} must be a list of strings, e.g. ['{ENDOFTEXT}']")
    specials = list(special_tokens)
    for s in specials:
        if not isinstance(s, str) or not s:
            raise ValueError(f"special_tokens holds {s!r}: each special token must be a non-empty string")
    if len(set(specials)) != len(specials):
        raise ValueError(f"special_tokens={specials} holds the same token twice")
    return specials


def _chunk_counts(text: str, pattern: str | None, specials: list[str]) -> tuple[list[list[int]], list[int]]:
    """The distinct chunks of ``text`` as lists of byte values, and how often each occurs.

    Special tokens are cut out first, so no merge ever learns from them.
    """
    pieces = regex.split("|".join(regex.escape(s) for s in specials), text) if specials else [text]
    counts: Counter[str] = Counter()
    for piece in pieces:
        counts.update(pre_split(piece, pattern))
    chunks = [list(chunk.encode("utf-8")) for chunk in counts]
    return chunks, list(counts.values())


def _too_few_pairs(vocab_size: int, made: int, n_specials: int) -> ValueError:
    return ValueError(f"vocab_size={vocab_size} is more than this text supports: after {made} merges every chunk "
                      f"is a single token (at most vocab_size={256 + made + n_specials}); give more text or a "
                      "smaller vocab_size")


def _merge_counting(ids: list[int], pair: tuple[int, int], new_id: int, f: int, counts: dict, changed: set,
                    where: dict, c: int) -> list[int]:
    """:func:`merge`, updating the pair counts where the merge changes them (``f``: how often the chunk occurs).

    At each replaced ``a b`` with neighbours ``x`` and ``y``: ``(x, a)``, ``(a, b)`` and ``(b, y)`` go, ``(x, n)`` and
    ``(n, y)`` come. The left neighbour is taken from the merged output, so ``a b a b`` correctly gives ``(n, n)``.
    """
    a, b = pair
    out, i, size = [], 0, len(ids)
    while i < size:
        if i + 1 < size and ids[i] == a and ids[i + 1] == b:
            gone, new = [pair], []
            if out:
                gone.append((out[-1], a))
                new.append((out[-1], new_id))
            if i + 2 < size:
                gone.append((b, ids[i + 2]))
                new.append((new_id, ids[i + 2]))
            for p in gone:
                counts[p] -= f
                changed.add(p)
            for p in new:
                counts[p] += f
                changed.add(p)
                where[p].add(c)
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def train(text: str, vocab_size: int, *, pattern: str | None = GPT2_SPLIT_PATTERN,
          special_tokens: Sequence[str] = (ENDOFTEXT,)) -> BPETokenizer:
    """Learn ``vocab_size - 256 - len(special_tokens)`` merges from ``text``; pair counts updated incrementally.

    The text is cut into chunks (``pattern``, GPT-2's by default) and each distinct chunk is kept once
    with its count. After a merge only the chunks that contained the merged pair are visited, and only
    the pairs around each replaced pair change (:func:`_merge_counting`). A heap holds the counts, so the most frequent pair
    (ties: the smaller pair of ids) is found without scanning them all; entries made stale by later
    changes are skipped when they come up.
    """
    specials = _check_training(text, vocab_size, special_tokens)
    chunks, freqs = _chunk_counts(text, pattern, specials)
    n_merges = vocab_size - 256 - len(specials)
    counts: dict[tuple[int, int], int] = defaultdict(int)
    where: dict[tuple[int, int], set[int]] = defaultdict(set)  # pair -> chunks that held it (some stale)
    for c, ids in enumerate(chunks):
        for pair in zip(ids, ids[1:]):
            counts[pair] += freqs[c]
            where[pair].add(c)
    heap = [(-n, pair) for pair, n in counts.items()]
    heapq.heapify(heap)
    merges: list[tuple[int, int]] = []
    while len(merges) < n_merges:
        while heap and counts.get(heap[0][1], 0) != -heap[0][0]:
            heapq.heappop(heap)  # a count that has changed since it was pushed
        if not heap:
            raise _too_few_pairs(vocab_size, len(merges), len(specials))
        pair = heapq.heappop(heap)[1]
        new_id = 256 + len(merges)
        merges.append(pair)
        changed: set[tuple[int, int]] = set()
        for c in where.pop(pair):  # some of them no longer hold the pair: then nothing changes
            chunks[c] = _merge_counting(chunks[c], pair, new_id, freqs[c], counts, changed, where, c)
        for p in changed:
            if counts[p] > 0:
                heapq.heappush(heap, (-counts[p], p))
            else:
                del counts[p]
    return BPETokenizer(merges, pattern=pattern, special_tokens=specials)


def train_by_recounting(text: str, vocab_size: int, *, pattern: str | None = GPT2_SPLIT_PATTERN,
                        special_tokens: Sequence[str] = (ENDOFTEXT,)) -> BPETokenizer:
    """The textbook loop: recount every pair of every chunk after each merge. Same merges as :func:`train`."""
    specials = _check_training(text, vocab_size, special_tokens)
    chunks, freqs = _chunk_counts(text, pattern, specials)
    merges: list[tuple[int, int]] = []
    for new_id in range(256, vocab_size - len(specials)):
        counts: dict[tuple[int, int], int] = {}
        for ids, f in zip(chunks, freqs):
            for pair in zip(ids, ids[1:]):
                counts[pair] = counts.get(pair, 0) + f
        if not counts:
            raise _too_few_pairs(vocab_size, len(merges), len(specials))
        pair = min(counts, key=lambda p: (-counts[p], p))  # the most frequent; ties: the smaller pair
        merges.append(pair)
        chunks = [merge(ids, pair, new_id) for ids in chunks]
    return BPETokenizer(merges, pattern=pattern, special_tokens=specials)


# ----------------------------------------------------------------------------------------------
# The tokenizer


class BPETokenizer:
    """A byte-level BPE tokenizer: 256 byte tokens, ``merges`` in the order learned, special tokens last.

    Merge ``i`` (a pair of token ids) makes token ``256 + i``. ``byte_ids[b]`` is the token of byte value
    ``b`` (``0..255`` in order for the course's tokenizers; GPT-2 numbers its bytes in another order).
    Special tokens get the ids after the merges, in the order given.
    """

    def __init__(self, merges: Sequence[tuple[int, int]], *, pattern: str | None = GPT2_SPLIT_PATTERN,
                 special_tokens: Sequence[str] = (ENDOFTEXT,), byte_ids: Sequence[int] | None = None) -> None:
        self.byte_ids = list(range(256)) if byte_ids is None else list(byte_ids)
        if sorted(self.byte_ids) != list(range(256)):
            raise ValueError("byte_ids must give each of the 256 byte values its own id in 0..255")
        self.pattern = pattern
        self._regex = _compiled(pattern)
        self.merges: dict[tuple[int, int], int] = {}  # pair -> new id, in the order learned
        self.vocab: dict[int, bytes] = {i: bytes([b]) for b, i in enumerate(self.byte_ids)}
        for i, pair in enumerate(merges):
            new_id = 256 + i
            if not (isinstance(pair, tuple) and len(pair) == 2
                    and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < new_id for t in pair)):
                raise ValueError(f"merges[{i}]={pair!r} must be a pair of token ids made before it (each in "
                                 f"[0, {new_id}))")
            if pair in self.merges:
                raise ValueError(f"merges[{i}]={pair} repeats an earlier merge")
            self.merges[pair] = new_id
            self.vocab[new_id] = self.vocab[pair[0]] + self.vocab[pair[1]]
        specials = _check_specials(special_tokens)
        self.special_tokens = {s: len(self.vocab) + k for k, s in enumerate(specials)}
        for s, i in self.special_tokens.items():
            self.vocab[i] = s.encode("utf-8")
        self._special_re = (regex.compile("(" + "|".join(regex.escape(s) for s in
                                                          sorted(specials, key=len, reverse=True)) + ")")
                            if specials else None)
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        """Byte tokens + merges + special tokens."""
        return len(self.vocab)

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return (f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
                f"special_tokens={list(self.special_tokens)})")

    # --- encoding ---------------------------------------------------------------------------
    def _encode_chunk(self, data: bytes) -> list[int]:
        """One chunk: its byte tokens, then the earliest-learned merge present, again and again."""
        ids = [self.byte_ids[b] for b in data]
        merges = self.merges
        while len(ids) >= 2:
            # merge ids grow with the order learned: the smallest new id is the earliest merge
            pair = min(zip(ids, ids[1:]), key=lambda p: merges.get(p, 1 << 62))
            if pair not in merges:
                break
            ids = merge(ids, pair, merges[pair])
        return ids

    def encode_ordinary(self, text: str) -> list[int]:
        """The ids of ``text`` with special tokens treated as ordinary text."""
        check_instance("text", text, str)
        chunks = self._regex.findall(text) if self._regex is not None else ([text] if text else [])
        out: list[int] = []
        cache = self._cache
        for chunk in chunks:
            ids = cache.get(chunk)
            if ids is None:
                ids = self._encode_chunk(chunk.encode("utf-8"))
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[chunk] = ids
            out.extend(ids)
        return out

    def encode(self, text: str, allowed_special: str | Iterable[str] = "all") -> list[int]:
        """The token ids of ``text``.

        ``allowed_special``: ``"all"`` (the default) turns every special token written in the text, such
        as ``<|endoftext|>``, into its one id; ``"none"`` encodes them as ordinary text; or a set of them.
        """
        check_instance("text", text, str)
        allowed = self._allowed(allowed_special)
        if not allowed:
            return self.encode_ordinary(text)
        pattern = regex.compile("(" + "|".join(regex.escape(s) for s in sorted(allowed, key=len, reverse=True)) + ")")
        out: list[int] = []
        for k, part in enumerate(pattern.split(text)):
            if k % 2:  # the separators that split() keeps: the special tokens themselves
                out.append(self.special_tokens[part])
            elif part:
                out.extend(self.encode_ordinary(part))
        return out

    def _allowed(self, allowed_special: object) -> set[str]:
        if allowed_special == "all":
            return set(self.special_tokens)
        if allowed_special == "none":
            return set()
        if isinstance(allowed_special, str) or not isinstance(allowed_special, Iterable):
            raise TypeError(f"allowed_special={allowed_special!r:.60} must be 'all', 'none' or a set of special "
                            "tokens")
        allowed = set(allowed_special)
        unknown = sorted(map(repr, allowed - set(self.special_tokens)))
        if unknown:
            raise ValueError(f"allowed_special names {', '.join(unknown)}, not special tokens of this tokenizer "
                             f"({list(self.special_tokens)})")
        return allowed

    # --- decoding ---------------------------------------------------------------------------
    def _id_list(self, ids: object) -> list[int]:
        if isinstance(ids, torch.Tensor):
            check_tensor("ids", ids, dims=1)
            if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
                raise TypeError(f"ids must hold integer token ids, got dtype {ids.dtype}")
            ids = ids.tolist()
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise TypeError(f"ids={ids!r:.60} must be a list of token ids or a 1-D tensor")
        top = self.vocab_size - 1
        return [check_int(f"ids[{n}]", i, minimum=0, maximum=top, rule=f"in [0, vocab_size={self.vocab_size})")
                for n, i in enumerate(ids)]

    def decode_bytes(self, ids: Sequence[int] | torch.Tensor) -> bytes:
        """The bytes the tokens stand for, joined (not necessarily valid UTF-8)."""
        vocab = self.vocab
        return b"".join(vocab[i] for i in self._id_list(ids))

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """The text of ``ids``; bytes that are no valid UTF-8 (half a character) become U+FFFD, never an error."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token."""
        return self.vocab[check_int("token_id", token_id, minimum=0, maximum=self.vocab_size - 1,
                                    rule=f"in [0, vocab_size={self.vocab_size})")]

    # --- files ------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the merges (one ``a b`` line each, in order), the pattern and the special tokens; atomically."""
        path = check_path("path", path)  # type: ignore[assignment]
        lines = [_FORMAT, "#pattern: " + json.dumps(self.pattern), "#special: " + json.dumps(list(self.special_tokens))]
        if self.byte_ids != list(range(256)):
            lines.append("#byte_ids: " + " ".join(map(str, self.byte_ids)))
        lines += [f"{a} {b}" for a, b in self.merges]
        data = ("\n".join(lines) + "\n").encode("utf-8")
        return write_atomically(path, lambda f: f.write(data), what="the merges")

    @classmethod
    def load(cls, path: str | os.PathLike) -> BPETokenizer:
        """Read a file written by :meth:`save`; a file that does not parse raises a ValueError naming the line."""
        path = check_path("path", path)  # type: ignore[assignment]
        if not path.is_file():
            raise FileNotFoundError(f"no merges file at {path}")
        try:
            lines = path.read_text(encoding="utf-8").split("\n")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path} is not a merges file: it is not UTF-8 text ({e.reason} at byte {e.start})") from None
        if lines[0].strip() != _FORMAT:
            raise ValueError(f"{path} is not a merges file written by BPETokenizer.save: its first line is "
                             f"{lines[0][:60]!r}, expected {_FORMAT!r}")
        header: dict[str, object] = {}
        merges = []
        for n, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            if line.startswith("#"):
                key, _, value = line[1:].partition(": ")
                try:
                    header[key] = json.loads(value) if key in ("pattern", "special") else [int(v) for v in value.split()]
                except ValueError:
                    raise ValueError(f"{path}, line {n}: cannot read the #{key} header {value[:60]!r}") from None
                continue
            parts = line.split()
            if len(parts) != 2 or not all(p.isdigit() for p in parts):
                raise ValueError(f"{path}, line {n}: expected a merge as two token ids 'a b', got {line[:60]!r}")
            merges.append((int(parts[0]), int(parts[1])))
        try:
            return cls(merges, pattern=header.get("pattern"), special_tokens=header.get("special", []),  # type: ignore[arg-type]
                       byte_ids=header.get("byte_ids"))  # type: ignore[arg-type]
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path} does not hold a valid tokenizer: {e}") from None


# ----------------------------------------------------------------------------------------------
# GPT-2's tokenizer


def load_gpt2_files(encoder_json: str | os.PathLike, vocab_bpe: str | os.PathLike) -> BPETokenizer:
    """A :class:`BPETokenizer` from GPT-2's two files (checked for their structure, not their sha256).

    ``encoder.json`` maps each token, written with :func:`bytes_to_unicode`, to its id; ``vocab.bpe``
    lists the 50,000 merges in order after a ``#version`` line. In GPT-2 merge ``i`` makes id
    ``256 + i`` and ``<|endoftext|>`` is 50256, the same layout as the course's tokenizers.
    """
    enc_path, bpe_path = check_path("encoder_json", encoder_json), check_path("vocab_bpe", vocab_bpe)
    try:
        encoder = json.loads(Path(enc_path).read_text(encoding="utf-8"))  # type: ignore[arg-type]
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{enc_path} is not GPT-2's encoder.json: it does not parse as JSON ({e})") from None
    if not isinstance(encoder, dict) or not all(isinstance(v, int) for v in encoder.values()):
        raise ValueError(f"{enc_path} is not GPT-2's encoder.json: expected an object of token -> id")
    to_char = bytes_to_unicode()
    missing = [b for b in range(256) if to_char[b] not in encoder]
    if missing:
        raise ValueError(f"{enc_path} has no token for byte value(s) {missing[:5]}: not a byte-level vocabulary")
    byte_ids = [encoder[to_char[b]] for b in range(256)]
    lines = Path(bpe_path).read_text(encoding="utf-8").split("\n")  # type: ignore[arg-type]
    if not lines[0].startswith("#version"):
        raise ValueError(f"{bpe_path} is not GPT-2's vocab.bpe: its first line is {lines[0][:60]!r}, expected "
                         "'#version: 0.2'")
    merges = []
    for n, line in enumerate(lines[1:], start=2):
        if not line:
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(p in encoder for p in parts) or parts[0] + parts[1] not in encoder:
            raise ValueError(f"{bpe_path}, line {n}: {line[:60]!r} is not a merge of two tokens of {enc_path.name}")
        new_id = encoder[parts[0] + parts[1]]
        if new_id != 256 + len(merges):
            raise ValueError(f"{bpe_path}, line {n}: the merge {line!r} makes id {new_id} in {enc_path.name}, "
                             f"expected {256 + len(merges)} (merges in order after the 256 bytes)")
        merges.append((encoder[parts[0]], encoder[parts[1]]))
    specials = sorted((i, s) for s, i in encoder.items() if i >= 256 + len(merges))
    if [i for i, _ in specials] != list(range(256 + len(merges), 256 + len(merges) + len(specials))):
        raise ValueError(f"{enc_path}: the ids after the merges are not contiguous: {[i for i, _ in specials][:5]}")
    return BPETokenizer(merges, pattern=GPT2_SPLIT_PATTERN, special_tokens=[s for _, s in specials],
                        byte_ids=byte_ids)


def gpt2_files(folder: str | os.PathLike | None = None, *, download_if_missing: bool = True) -> dict[str, Path]:
    """The paths of GPT-2's ``encoder.json`` and ``vocab.bpe``, each checked against its sha256.

    Looked for in ``folder``, else in the folder named by ``$GPT_LESSON_GPT2``, else in the course cache
    (``cache_dir() / "gpt2"``), where missing files are downloaded from OpenAI (checked before saving).
    """
    check_bool("download_if_missing", download_if_missing)
    source = "folder"
    if folder is None and os.environ.get(GPT2_ENV):
        folder, source = os.environ[GPT2_ENV], f"${GPT2_ENV}"
    local = folder is not None
    where = check_path(source, folder) if local else cache_dir() / "gpt2"
    paths = {}
    for name, (url, sha256) in GPT2_FILES.items():
        path = where / name  # type: ignore[operator]
        if not path.is_file():
            if local or not download_if_missing:
                raise FileNotFoundError(
                    f"no {name} in {where} ({source if local else 'the course cache'}); download {url} there, "
                    f"or point {GPT2_ENV} at a folder holding encoder.json and vocab.bpe")
            try:
                download(url, path, sha256)
            except DownloadError as e:
                raise FileNotFoundError(f"{e}. Without a network: copy GPT-2's {name} to {path}, or set "
                                        f"${GPT2_ENV}=/folder/with/encoder.json-and-vocab.bpe") from e
        problem = _what_is_wrong(path, sha256, None)
        if problem:
            raise ValueError(f"{path} {problem}; GPT-2's {name} is published at {url}")
        paths[name] = path
    return paths


def gpt2_tokenizer(folder: str | os.PathLike | None = None, *, download_if_missing: bool = True) -> BPETokenizer:
    """GPT-2's tokenizer (50,257 tokens) from OpenAI's files; see :func:`gpt2_files` for where they come from.

    ``encode(text)`` turns ``<|endoftext|>`` into id 50256; ``decode`` never raises on a cut character.
    """
    paths = gpt2_files(folder, download_if_missing=download_if_missing)
    return load_gpt2_files(paths["encoder.json"], paths["vocab.bpe"])
