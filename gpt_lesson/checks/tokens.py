"""Checks for lesson 01 (and 08, 09): a character tokenizer, and token + position embeddings."""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn as nn

from .. import data
from .runner import (
    Forbidden,
    Step,
    call,
    close,
    is_whole_number,
    kind_of,
    learner_check,
    match_variant,
    require_callable,
    run_cases,
    screen,
)
from .verdicts import N_, Bug, Case, CheckResult, Verdict, say, variant

_CharTokenizer = data.CharTokenizer  # bound at import: a later assignment to gpt_lesson.data does not change it

# Labels: stable identifiers in CheckResult.diagnosis.
ENCODE_NOT_IDS = N_("encode did not return integer ids")
WRONG_LENGTH = N_("not one id per character")
DECODE_NOT_STR = N_("decode did not return a string")
ROUND_TRIP_CHANGED = N_("round trip changed the text")
INCONSISTENT_IDS = N_("same character, different ids")
ORD_IDS = N_("ord/chr code points as ids")
ONE_BASED = N_("ids start at 1")
UNSORTED_VOCAB = N_("vocabulary not sorted")
IDS_NOT_0_TO_V = N_("ids not 0..V-1")
MISSING_POSITION_EMBEDDING = N_("missing position embedding")
MISSING_TOKEN_EMBEDDING = N_("missing token embedding")
POSITIONS_FROM_TOKEN_IDS = N_("position embedding looked up with token ids")
POSITIONS_OFF_BY_ONE = N_("positions arange(1, T+1)")
EMBEDDINGS_NOT_ADDED = N_("embeddings not added")
ONE_HOT_NO_NUM_CLASSES = N_("F.one_hot without num_classes")
POSITIONS_FROM_BATCH = N_("positions arange(B), the batch size")
POSITIONS_REVERSED = N_("positions in reverse")

TEXTS = {
    "encode_raised": N_("encode(text) should look up each character in stoi: [stoi[ch] for ch in text]."),
    "decode_raised": N_("decode(ids) should look up each id in itos (id -> character) and join: "
                        "''.join(itos[i] for i in ids). Using stoi here is a common slip."),
    "in_encode": N_("In encode:\n"),
    "in_decode": N_("In decode:\n"),
    "not_ids": N_("   encode returned {kind} {value!r}; it should return a list of integers, one id per character: "
                  "[stoi[ch] for ch in text]."),
    "length": N_("   encode gave {got} ids for {expected} characters; give exactly one id per character."),
    "not_str": N_("   decode returned {kind}; join the characters into one string: ''.join(itos[i] for i in ids)."),
    "str_subclass": N_("   decode returned {kind}, a subclass of str with its own comparisons; return a plain str: "
                       "''.join(itos[i] for i in ids)."),
    "round_trip": N_("   expected: {expected!r} (from character {first})\n   got:      {got!r}{lengths}\n"
                     "   Likely bug: encode and decode must be inverse lookups: stoi = {{ch: i}}, itos = {{i: ch}}."),
    "lengths": N_(" ({got} characters instead of {expected})"),
    "ids_line": N_("   the characters {chars!r} got the ids {ids}"),
    "expected_ids": N_(", expected {expected}"),
    "inconsistent": N_("the character {char!r} got the ids {ids}: one character must always get the same id."),
    "ord": N_("your ids are the characters' Unicode code points, ord(ch): they run up to {top}, so the "
              "embedding table would need that many rows for a vocabulary of a few dozen characters. Number "
              "the sorted vocabulary instead: stoi = {{ch: i for i, ch in enumerate(chars)}}."),
    "one_based": N_("your ids start at 1: id 0 is unused, and the largest id equals vocab_size, one past the "
                    "embedding table. enumerate(chars) counts from 0; do not pass start=1 or add 1."),
    "unsorted": N_("your ids do not follow the sorted vocabulary: chars = sorted(set(text)) (a set has no "
                   "fixed order, so ids from list(set(text)) change from run to run). Number the sorted "
                   "characters 0, 1, ..., V-1."),
    "not_0_to_v": N_("your ids are not 0, 1, ..., V-1 over the sorted vocabulary: decode could not turn "
                     "0..{top} back into characters. Number the sorted characters with enumerate(chars)."),
    "tokenizer_passed": N_("decode(encode(text)) gives back all {n_chars:,} characters ({n_ids:,} ids), and the ids "
                           "are 0..V-1 in sorted-vocabulary order."),
    "pos_missing": N_("you returned only the token embedding; add the position embedding pos_table(torch.arange(T)), "
                      "or the model cannot tell positions apart."),
    "tok_missing": N_("you returned only the position embedding; add tok_table(idx)."),
    "pos_from_ids": N_("you looked up the position table with the token ids; positions are 0, 1, ..., T-1: "
                       "pos_table(torch.arange(T))."),
    "pos_off_by_one": N_("your positions are 1, 2, ..., T (torch.arange(1, T + 1)): the first position is 0, so "
                         "use torch.arange(T); with T = block_size the last one would not even be in the table."),
    "multiplied": N_("you multiplied the embeddings; GPT adds them: tok_emb + pos_emb."),
    "concatenated": N_("you concatenated the embeddings (2 * n_embd channels); GPT adds them: tok_emb + pos_emb."),
    "averaged": N_("you averaged the embeddings; GPT adds them: tok_emb + pos_emb."),
    "pos_from_batch": N_("your positions are 0..B-1 with B = idx.shape[0], the batch size; the positions are 0..T-1 "
                         "with T = idx.shape[1]: pos_table(torch.arange(T))."),
    "pos_reversed": N_("your positions run backwards (T-1, ..., 0); the first token is at position 0: "
                       "pos_table(torch.arange(T))."),
    "one_hot_size": N_("a one-hot matrix needs as many columns as the table it multiplies has rows: "
                       "F.one_hot(idx, tok_table.num_embeddings) for the tokens and F.one_hot(positions, "
                       "pos_table.num_embeddings) for the positions (a fixed number fits one table only)."),
    "step_tokens": N_("the token embedding tok_table(idx)"),
    "step_positions": N_("the position embedding pos_table(torch.arange(T))"),
    "one_hot": N_("F.one_hot(idx) without num_classes makes idx.max() + 1 columns, not vocab_size: it works only "
                  "when the largest id happens to be in the batch. Pass the table size: "
                  "F.one_hot(idx, tok_table.num_embeddings) (and pos_table.num_embeddings for the positions)."),
    "whole_table": N_("look up one position per token: pos_table(torch.arange(T)) with T = idx.shape[1], not the "
                      "whole table."),
    "out_of_range": N_("an index is past the end of a table: positions go 0..T-1 (torch.arange(T)) and token ids "
                       "0..vocab_size-1. The position table has block_size rows, so looking positions up with the "
                       "token ids (pos_table(idx)) fails as soon as an id is >= block_size."),
    "same_dtype": N_("F.one_hot gives integers: convert to float before the product, F.one_hot(...).float()."),
    "case_idx": N_("idx of shape {shape}"),
    "embeddings_passed": N_("Your embeddings equal tok_table(idx) + pos_table(torch.arange(T))."),
}


def _ids_list(ids: object) -> list[int] | None:
    """The ids as a list of ints, when ``ids`` is a sequence of ints or a 1-D integer tensor/array."""
    if isinstance(ids, torch.Tensor):
        whole = not (ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool)
        return ids.tolist() if ids.dim() == 1 and whole else None
    if type(ids).__module__ == "numpy":  # a NumPy array of integers
        whole = getattr(getattr(ids, "dtype", None), "kind", "") in "iu"
        return [int(i) for i in ids.tolist()] if getattr(ids, "ndim", 0) == 1 and whole else None
    if isinstance(ids, (list, tuple)) and all(is_whole_number(i) for i in ids):  # ints or NumPy integers
        return [int(i) for i in ids]
    return None


def _order_bug(mapping: dict[str, int], vocab: list[str] | None, decode: Callable, like: object,
               forbidden: Forbidden) -> Bug | None:
    """The ids must be the positions of the characters in the sorted vocabulary, 0..V-1."""
    chars = sorted(mapping)
    ids = [mapping[c] for c in chars]
    index = {c: i for i, c in enumerate(vocab or ())}
    if vocab is not None and all(mapping[c] == index[c] for c in chars):
        return None
    if all(mapping[c] == ord(c) for c in chars):
        return Bug(ORD_IDS, TEXTS["ord"], {"top": max(ids)})
    if vocab is not None:
        if all(mapping[c] == index[c] + 1 for c in chars):
            return Bug(ONE_BASED, TEXTS["one_based"])
        if sorted(ids) == ids:
            return Bug(IDS_NOT_0_TO_V, TEXTS["not_0_to_v"], {"top": len(vocab) - 1})
        return Bug(UNSORTED_VOCAB, TEXTS["unsorted"])
    if any(a >= b for a, b in zip(ids, ids[1:])):
        return Bug(UNSORTED_VOCAB, TEXTS["unsorted"])
    if max(ids) >= 1 << 16:  # far more ids than any character vocabulary of a lesson
        return Bug(IDS_NOT_0_TO_V, TEXTS["not_0_to_v"], {"top": max(ids)})
    # Every id from 0 to the largest one must decode, to distinct characters in sorted order.
    probe = list(range(max(ids) + 1))
    if isinstance(like, torch.Tensor):
        asked: object = torch.tensor(probe)
    elif type(like).__module__ == "numpy":
        asked = sys.modules["numpy"].array(probe)
    else:
        asked = probe
    out = call(decode, (asked,), forbidden)
    prefix = out.value if out.error is None and not out.stub else None
    if isinstance(prefix, str) and len(prefix) == len(probe) and all(a < b for a, b in zip(prefix, prefix[1:])):
        return None
    if min(ids) == 1:
        return Bug(ONE_BASED, TEXTS["one_based"])
    return Bug(IDS_NOT_0_TO_V, TEXTS["not_0_to_v"], {"top": max(ids)})


@learner_check
def check_tokenizer(encode: Callable[[str], Sequence[int]], decode: Callable[[Sequence[int]], str], text: str, *,
                    chars: Iterable[str] | None = None, strict: bool = False, hidden: bool = False) -> CheckResult:
    """Check a character tokenizer: ``decode(encode(text)) == text``, with integer ids 0..V-1 in sorted order.

    The ids must be what :class:`gpt_lesson.data.CharTokenizer` gives: the position of each character
    in ``sorted(set(...))`` of the text the vocabulary was built from. Pass that vocabulary as
    ``chars`` for an exact comparison; without it the check asks ``decode`` for the ids 0, 1, ...
    and requires the sorted characters back.
    """
    name = "check_tokenizer"
    require_callable(name, encode, "your encode function")
    require_callable(name, decode, "your decode function")
    if not isinstance(text, str):
        raise TypeError(f"{name}() expects the text as a str, got {type(text).__name__}")
    if not text:
        raise ValueError(f"{name}() needs a non-empty text to round-trip")
    vocab = None
    if chars is not None:
        if isinstance(chars, (bytes, torch.Tensor)) or not all(isinstance(c, str) and len(c) == 1 for c in chars):
            raise TypeError(f"{name}() expects chars as single characters (a str or a list of them), got {chars!r:.60}")
        vocab = sorted(set(chars))
        missing = sorted(set(text) - set(vocab))
        if missing:
            raise ValueError(f"{name}(): the text has characters {missing[:10]} that are not in chars")
    verdict = Verdict(name)
    forbidden = Forbidden({_CharTokenizer: "gpt_lesson.data.CharTokenizer"})
    texts = [text] + ([text[::-1], "".join(sorted(set(text), reverse=True))] if hidden else [])
    for t in texts:
        out = call(encode, (t,), forbidden)
        early = screen(verdict, out, say(TEXTS["in_encode"]), [("", TEXTS["encode_raised"])])
        if early is not None:
            return early
        ids = _ids_list(out.value)
        if ids is None:
            return verdict.failed(ENCODE_NOT_IDS, say(TEXTS["not_ids"], kind=kind_of(out.value),
                                                      value=str(out.value)[:40]))
        if len(ids) != len(t):
            return verdict.failed(WRONG_LENGTH, say(TEXTS["length"], got=len(ids), expected=len(t)))
        back = call(decode, (out.value,), forbidden)
        early = screen(verdict, back, say(TEXTS["in_decode"]), [("", TEXTS["decode_raised"])])
        if early is not None:
            return early
        if type(back.value) is not str:
            key = "str_subclass" if isinstance(back.value, str) else "not_str"
            return verdict.failed(DECODE_NOT_STR, say(TEXTS[key], kind=kind_of(back.value)))
        if back.value != t:
            got = back.value
            first = next((i for i, (a, b) in enumerate(zip(t, got)) if a != b), min(len(t), len(got)))
            lengths = say(TEXTS["lengths"], got=len(got), expected=len(t)) if len(got) != len(t) else ""
            return verdict.failed(ROUND_TRIP_CHANGED, say(TEXTS["round_trip"], expected=t[first:first + 30],
                                                          first=first, got=got[first:first + 30], lengths=lengths))
        mapping: dict[str, int] = {}
        for ch, i in zip(t, ids):
            if mapping.setdefault(ch, i) != i:
                seen = sorted({j for c, j in zip(t, ids) if c == ch})
                line = say(TEXTS["ids_line"], chars=ch, ids=seen)
                bug = Bug(INCONSISTENT_IDS, TEXTS["inconsistent"], {"char": ch, "ids": seen})
                return verdict.failed_with([bug], line)
        bug = _order_bug(mapping, vocab, decode, out.value, forbidden)
        if bug is not None:
            shown = sorted(mapping)[:8]
            line = say(TEXTS["ids_line"], chars="".join(shown), ids=[mapping[c] for c in shown])
            if vocab is not None:
                line += say(TEXTS["expected_ids"], expected=[vocab.index(c) for c in shown])
            return verdict.failed_with([bug], line)
    return verdict.passed(say(TEXTS["tokenizer_passed"], n_chars=len(text), n_ids=len(text)))


# ----------------------------------------------------------------------------------------------
# Embeddings


def _positions(idx: torch.Tensor, start: int = 0) -> torch.Tensor:
    return torch.arange(start, start + idx.size(1))


def _embedding_variants() -> list:
    return [
        variant(MISSING_POSITION_EMBEDDING, TEXTS["pos_missing"], lambda i, t, p: t(i)),
        variant(MISSING_TOKEN_EMBEDDING, TEXTS["tok_missing"],
                lambda i, t, p: p(_positions(i)).expand(i.size(0), -1, -1)),
        variant(POSITIONS_FROM_TOKEN_IDS, TEXTS["pos_from_ids"], lambda i, t, p: t(i) + p(i)),
        variant(POSITIONS_OFF_BY_ONE, TEXTS["pos_off_by_one"], lambda i, t, p: t(i) + p(_positions(i, 1))),
        variant(POSITIONS_REVERSED, TEXTS["pos_reversed"], lambda i, t, p: t(i) + p(_positions(i).flip(0))),
        variant(POSITIONS_FROM_BATCH, TEXTS["pos_from_batch"], lambda i, t, p: t(i) + p(torch.arange(i.size(0)))),
        variant(EMBEDDINGS_NOT_ADDED, TEXTS["multiplied"], lambda i, t, p: t(i) * p(_positions(i))),
        variant(EMBEDDINGS_NOT_ADDED, TEXTS["averaged"], lambda i, t, p: (t(i) + p(_positions(i))) / 2),
        variant(EMBEDDINGS_NOT_ADDED, TEXTS["concatenated"],
                lambda i, t, p: torch.cat([t(i), p(_positions(i)).expand(i.size(0), -1, -1)], dim=-1)),
    ]


def _embedding_case(seed: int, V: int, block_size: int, C: int, B: int, T: int, top: int | None = None) -> Case:
    torch.manual_seed(seed)
    tok, pos = _Embedding(V, C), _Embedding(block_size, C)
    idx = torch.randint(V if top is None else top, (B, T))

    def steps() -> list[Step]:
        with torch.no_grad():
            return [Step(TEXTS["step_tokens"], tok(idx)), Step(TEXTS["step_positions"], pos(torch.arange(T)))]

    def expected() -> torch.Tensor:
        with torch.no_grad():
            return tok(idx) + pos(torch.arange(T))
    return Case((idx, tok, pos), say(TEXTS["case_idx"], shape=(B, T)), expected, _embedding_variants(), steps)


_Embedding = nn.Embedding


@learner_check
def check_embeddings(fn: Callable[[torch.Tensor, nn.Embedding, nn.Embedding], torch.Tensor], *,
                     strict: bool = False, hidden: bool = False) -> CheckResult:
    """Check ``fn(idx, tok_table, pos_table)`` -> ``tok_emb + pos_emb`` of shape (B, T, n_embd).

    ``idx`` is (B, T) token ids; ``tok_table`` (vocab_size rows) and ``pos_table`` (block_size
    rows) are ``nn.Embedding`` modules, as ``GPT.token_embedding_table`` and
    ``GPT.position_embedding_table``. The first input leaves out the largest token id and is
    shorter than block_size, so ``F.one_hot`` without ``num_classes`` and ``arange(1, T + 1)`` show; the
    inputs differ in every size (vocabulary, block_size, n_embd, B, T), and the second has ids past
    block_size, so positions looked up with token ids fail there. Lesson 01's third exercise passes
    ``without="tables"``: no ``tok_table(idx)``, ``F.embedding`` or ``weight[idx]``.
    """
    name = "check_embeddings"
    require_callable(name, fn)
    sizes = [(14, 7, 8, 6, 2, 5, 6), (15, 11, 9, 4, 3, 9, None)]
    sizes += [(16, 5, 12, 8, 1, 3, None), (17, 13, 6, 5, 4, 6, None)] if hidden else []
    cases = [_embedding_case(*size) for size in sizes]

    def on_error(error: Exception, case: Case) -> list[Bug] | None:
        """Name the bug behind an error by running the learner's code again where that bug does not raise."""
        idx, tok, pos = case.args
        V, block_size = tok.num_embeddings, pos.num_embeddings
        text = str(error)
        if "cannot be multiplied" in text or "smaller than num_classes" in text:
            # Every id and every position present: F.one_hot without num_classes then gives full-size matrices.
            rows = -(-V // block_size)
            full = (torch.arange(rows * block_size) % V).view(rows, block_size)
            again = call(fn, (full, tok, pos))
            with torch.no_grad():
                expected = tok(full) + pos(torch.arange(block_size))
            if isinstance(again.value, torch.Tensor) and again.value.is_floating_point() \
                    and close(again.value, expected):
                return [Bug(ONE_HOT_NO_NUM_CLASSES, TEXTS["one_hot"])]
            return None
        if "must match the size" in text and idx.size(0) > 1:
            # One sequence: positions taken from the batch size (arange(B)) broadcast there and show as a variant.
            one = idx[:1]
            again = call(fn, (one, tok, pos))
            found = None
            if isinstance(again.value, torch.Tensor) and again.value.is_floating_point():
                found = match_variant(again.value, Case((one, tok, pos), "", None, _embedding_variants()))
            return list(found.bugs) if found is not None and found.bugs[0].label == POSITIONS_FROM_BATCH else None
        if "index out of range" in text:
            # Ids and positions that fit both tables: a bug that indexes past the end shows as a variant there.
            gentle = idx[:, : min(idx.size(1), block_size - 1)] % min(V, block_size - 1)
            again = call(fn, (gentle, tok, pos))
            probe = Case((gentle, tok, pos), "", None, _embedding_variants())
            found = None
            if isinstance(again.value, torch.Tensor) and again.value.is_floating_point():
                found = match_variant(again.value, probe)
            return list(found.bugs) if found is not None else None
        return None

    hints = [("must match the size", TEXTS["whole_table"]), ("index out of range", TEXTS["out_of_range"]),
             ("same dtype", TEXTS["same_dtype"]), ("cannot be multiplied", TEXTS["one_hot_size"]),
             ("smaller than num_classes", TEXTS["one_hot_size"])]
    return run_cases(Verdict(name), fn, cases, hints=hints, on_error=on_error, success=say(TEXTS["embeddings_passed"]))
