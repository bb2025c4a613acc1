"""Lesson 01, Your turn 1: ``my_encode``/``my_decode`` for the characters in ``chars`` (the check gets both)."""
from __future__ import annotations

import bisect

import numpy as np
import torch

from gpt_lesson import CharTokenizer

from ._registry import Exercise

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n")
CHARS = sorted(set(TEXT + "XYZQJ!&;-'3$"))  # the vocabulary of the whole text: more characters than the sample
STOI = {ch: i for i, ch in enumerate(CHARS)}
ITOS = {i: ch for i, ch in enumerate(CHARS)}
tokenizer = CharTokenizer(TEXT + "XYZQJ!&;-'3$")  # the lesson's own tokenizer, in the notebook's namespace

EX = Exercise("01.1 a tokenizer of your own", "check_tokenizer", extra_args=(TEXT,), kwargs={"chars": CHARS})


def pair(name: str, right: bool, *labels: str):
    def register(make):
        EX.add(make(), name=name, right=right, labels=labels)
        return make
    return register


def _decode(ids):
    return "".join(ITOS[int(i)] for i in ids)


@pair("dict comprehensions", True)
def _():
    return (lambda s: [STOI[c] for c in s]), (lambda ids: "".join(ITOS[i] for i in ids))


@pair("zip and range", True)
def _():
    stoi = dict(zip(CHARS, range(len(CHARS))))
    itos = dict(zip(range(len(CHARS)), CHARS))
    return (lambda s: [stoi[c] for c in s]), (lambda ids: "".join(itos[i] for i in ids))


@pair("list.index and indexing", True)
def _():
    return (lambda s: [CHARS.index(c) for c in s]), (lambda ids: "".join(CHARS[i] for i in ids))


@pair("tensor of ids", True)
def _():
    return (lambda s: torch.tensor([STOI[c] for c in s], dtype=torch.long)), _decode


@pair("numpy array of ids", True)
def _():
    return (lambda s: np.array([STOI[c] for c in s])), (lambda ids: "".join(ITOS[i] for i in ids.tolist()))


@pair("list of numpy integers", True)
def _():
    return (lambda s: list(np.array([STOI[c] for c in s], dtype=np.int64))), _decode


@pair("map and dict.get", True)
def _():
    return (lambda s: list(map(STOI.get, s))), (lambda ids: "".join(map(ITOS.get, ids)))


@pair("tuple of ids", True)
def _():
    return (lambda s: tuple(STOI[c] for c in s)), (lambda ids: "".join(ITOS[i] for i in ids))


@pair("bisect in the sorted vocabulary", True)
def _():
    return (lambda s: [bisect.bisect_left(CHARS, c) for c in s]), (lambda ids: "".join(CHARS[i] for i in ids))


@pair("a class of its own", True)
def _():
    class Tok:
        def __init__(self, chars):
            self.chars = list(chars)
            self.lookup = {c: i for i, c in enumerate(self.chars)}

        def encode(self, s):
            return [self.lookup[c] for c in s]

        def decode(self, ids):
            return "".join(self.chars[i] for i in ids)
    tok = Tok(CHARS)
    return tok.encode, tok.decode


@pair("str.join over a list and explicit loops", True)
def _():
    def encode(s):
        out = []
        for c in s:
            out.append(STOI[c])
        return out

    def decode(ids):
        pieces = []
        for i in ids:
            pieces.append(ITOS[i])
        return "".join(pieces)
    return encode, decode


@pair("int32 tensor ids", True)
def _():
    return (lambda s: torch.tensor([STOI[c] for c in s], dtype=torch.int32)), _decode


# --- wrong answers
@pair("ord and chr", False, "ORD_IDS")
def _():
    return (lambda s: [ord(c) for c in s]), (lambda ids: "".join(map(chr, ids)))


@pair("ids from 1", False, "ONE_BASED")
def _():
    return (lambda s: [STOI[c] + 1 for c in s]), (lambda ids: "".join(ITOS[i - 1] for i in ids))


@pair("enumerate(start=1)", False, "ONE_BASED")
def _():
    stoi = {c: i for i, c in enumerate(CHARS, start=1)}
    itos = {i: c for c, i in stoi.items()}
    return (lambda s: [stoi[c] for c in s]), (lambda ids: "".join(itos[i] for i in ids))


@pair("reverse sorted vocabulary", False, "UNSORTED_VOCAB")
def _():
    chars = sorted(CHARS, reverse=True)
    stoi, itos = {c: i for i, c in enumerate(chars)}, dict(enumerate(chars))
    return (lambda s: [stoi[c] for c in s]), (lambda ids: "".join(itos[i] for i in ids))


@pair("vocabulary of the sample text only", False, "UNSORTED_VOCAB", "IDS_NOT_0_TO_V")
def _():
    chars = sorted(set(TEXT))  # built from the text given, not from chars
    stoi, itos = {c: i for i, c in enumerate(chars)}, dict(enumerate(chars))
    return (lambda s: [stoi[c] for c in s]), (lambda ids: "".join(itos[i] for i in ids))


@pair("decode with stoi", False, "RAISED")  # the hint names itos
def _():
    return (lambda s: [STOI[c] for c in s]), (lambda ids: "".join(STOI[i] for i in ids))


@pair("decode returns a list", False, "DECODE_NOT_STR")
def _():
    return (lambda s: [STOI[c] for c in s]), (lambda ids: [ITOS[i] for i in ids])


@pair("encode returns text", False, "ENCODE_NOT_IDS")
def _():
    return (lambda s: " ".join(str(STOI[c]) for c in s)), (lambda ids: "".join(ITOS[int(i)] for i in ids.split()))


@pair("encode drops the last character", False, "WRONG_LENGTH")
def _():
    return (lambda s: [STOI[c] for c in s[:-1]]), (lambda ids: "".join(ITOS[i] for i in ids))


@pair("decode joins with spaces", False, "ROUND_TRIP_CHANGED")
def _():
    return (lambda s: [STOI[c] for c in s]), (lambda ids: " ".join(ITOS[i] for i in ids))


@pair("the lesson's tokenizer", False, "CALLED_LIBRARY")
def _():
    return tokenizer.encode, tokenizer.decode


@pair("a new CharTokenizer", False, "CALLED_LIBRARY")
def _():
    return (lambda s: CharTokenizer(TEXT + "XYZQJ!&;-'3$").encode(s)), _decode


@pair("ids doubled", False, "IDS_NOT_0_TO_V")
def _():
    return (lambda s: [2 * STOI[c] for c in s]), (lambda ids: "".join(ITOS[i // 2] for i in ids))


@pair("float tensor ids", False, "ENCODE_NOT_IDS")
def _():
    return (lambda s: torch.tensor([float(STOI[c]) for c in s])), _decode


@pair("a vocabulary per call", False, "ROUND_TRIP_CHANGED", "UNSORTED_VOCAB", "IDS_NOT_0_TO_V")
def _():
    def encode(s):
        local = sorted(set(s))  # numbers the characters of this input, not of the vocabulary
        return [local.index(c) for c in s]
    return encode, (lambda ids: "".join(ITOS[i] for i in ids))


@pair("a str whose != is always False", False, "DECODE_NOT_STR", "WRONG_TYPE")
def _():
    class Agreeable(str):
        def __ne__(self, other):
            return False

        def __eq__(self, other):
            return True
    return (lambda s: [STOI[c] for c in s]), (lambda ids: Agreeable("nothing like the text"))


@pair("ids as strings", False, "ENCODE_NOT_IDS")
def _():
    return (lambda s: [str(STOI[c]) for c in s]), (lambda ids: "".join(ITOS[int(i)] for i in ids))


@pair("decode drops the first character", False, "ROUND_TRIP_CHANGED")
def _():
    return (lambda s: [STOI[c] for c in s]), (lambda ids: "".join(ITOS[i] for i in ids)[1:])
