"""Checks for lesson 13 (subword tokens): one BPE merge, encoding with a merge list, GPT-2's pre-split.

The answers are lists (of ids or of text chunks) and a dict of pair counts; each check compares them with
:mod:`gpt_lesson.bpe` and names the classic mistakes it computes itself (a merge that overlaps, merges
applied in the wrong order, code points instead of UTF-8 bytes, GPT-2's rules left out of the pattern).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import regex

from .. import bpe as lib
from .runner import Forbidden, call, kind_of, learner_check, require_callable, screen
from .verdicts import N_, WRONG_TYPE, WRONG_VALUE, Bug, CheckResult, Verdict, say

# Labels: stable identifiers in CheckResult.diagnosis.
PAIRS_COUNTED_ONCE = N_("each pair counted once")
LAST_PAIR_MISSED = N_("last pair not counted")
OVERLAPS_NOT_COUNTED = N_("overlapping pairs not counted")
PAIRS_NOT_ADJACENT = N_("pairs of tokens that are not neighbours")
FIRST_OCCURRENCE_ONLY = N_("only the first occurrence merged")
MERGE_OVERLAPS = N_("merged tokens used twice")
LAST_TOKEN_DROPPED = N_("last token dropped")
PAIR_REVERSED = N_("pair matched in reverse")
RIGHT_TO_LEFT = N_("merged from the right")
MERGES_REVERSED = N_("merges applied in reverse order")
MERGES_SORTED = N_("merges applied in sorted order")
CODE_POINTS = N_("code points instead of UTF-8 bytes")
ONE_MERGE_ONLY = N_("stopped after one merge")
MOST_FREQUENT_FIRST = N_("most frequent pair instead of merge order")
TEXT_LOST = N_("chunks do not join back to the text")
SPACE_AFTER_WORD = N_("space attached after the word")
NO_CONTRACTIONS = N_("contractions not split off")
CONTRACTIONS_ANY_CASE = N_("contractions matched in any case")
NO_SPACE_LOOKAHEAD = N_("the last space of a run not given to the next word")
WORD_CLASS = N_("\\w instead of \\p{L} and \\p{N}")
ASCII_LETTERS = N_("ASCII letters only")
NO_LEADING_SPACE = N_("words without their leading space")

TEXTS = {
    "not_counts": N_("   count_pairs({ids}) returned {kind}; return a dict from each pair (a tuple of two ids) to its "
                     "count, e.g. {{(1, 2): 2, (2, 3): 1}}."),
    "not_ids": N_("   {call} returned {kind}; return a list of token ids (ints)."),
    "not_chunks": N_("   my_pre_split({text!r}) returned {kind}; return a list of strings (the chunks)."),
    "counts_mismatch": N_("   count_pairs({ids}):\n   expected: {expected}\n   got:      {got}"),
    "ids_mismatch": N_("   {call}:\n   expected: {expected}\n   got:      {got}"),
    "chunks_mismatch": N_("   my_pre_split({text!r}):\n   expected: {expected}\n   got:      {got}"),
    "once": N_("every pair got the count 1: you collected the pairs in a set (or checked `if pair not in counts`). "
               "Add 1 for every position: counts[pair] = counts.get(pair, 0) + 1."),
    "last_pair": N_("the last pair is missing: ids of length n have n - 1 adjacent pairs, (ids[i], ids[i + 1]) for i "
                    "in range(len(ids) - 1); zip(ids, ids[1:]) gives them all."),
    "overlaps": N_("you moved on by two tokens after each pair, so 5 5 5 5 counted (5, 5) twice, not three times: "
                   "counting looks at every position; only merging skips the two tokens it replaced."),
    "not_adjacent": N_("you paired tokens two apart (ids[i], ids[i + 2]); a pair is two neighbours: zip(ids, ids[1:])."),
    "first_only": N_("only the first occurrence was replaced: a merge replaces every occurrence of the pair, left "
                     "to right, in one pass (keep going after a match)."),
    "merge_overlaps": N_("after a match you moved on by one token, so the second token of the pair was used again; "
                         "skip both: i += 2 after a match, i += 1 otherwise."),
    "last_dropped": N_("the last token is missing: when the loop stops one before the end to look at pairs, the "
                       "last token still has to be copied (loop while i < len(ids), and only test a pair when "
                       "i + 1 < len(ids))."),
    "reversed": N_("you matched (ids[i], ids[i + 1]) == (pair[1], pair[0]): the pair is ordered, (a, b) means a then b."),
    "right_to_left": N_("you merged from the right end: in 5 5 5 the first two tokens merge, not the last two. "
                        "Scan from the left."),
    "merges_reversed": N_("you applied the merges last learned first: a merge may use tokens made by earlier merges, "
                          "so apply them in the order they were learned (the dict's order, or the smallest new id "
                          "first)."),
    "merges_sorted": N_("you applied the merges in sorted order of their pairs; apply them in the order they were "
                        "learned (the dict's insertion order, which is the order of the new ids)."),
    "code_points": N_("you started from the characters' code points, [ord(c) for c in text]; byte-level BPE starts "
                      "from the UTF-8 bytes, list(text.encode('utf-8')): 'é' is two bytes, 195 169, and ord('é') is "
                      "233."),
    "one_merge": N_("you stopped after the first merge that applied; keep merging until no learned pair is left."),
    "most_frequent": N_("you merged the most frequent pair of the text first: that is training. Encoding applies the "
                        "learned merges in the order they were learned, however often a pair occurs in this text."),
    "text_lost": N_("your chunks joined together are {joined!r}, not the text: every character, spaces included, must "
                    "be in exactly one chunk (str.split() drops the spaces; findall with the full pattern keeps them)."),
    "space_after": N_("you attached the space after a word ('Hello ' + 'world'); GPT-2 puts it before: ' ?\\p{{L}}+', "
                      "so 'world' and ' world' are the tokens."),
    "no_contractions": N_("the contractions 's 't 're 've 'm 'll 'd must be chunks of their own, and come first in the "
                          "pattern."),
    "any_case": N_("GPT-2 matches the contractions in lower case only: \"IT'S\" splits into 'IT', \"'\", 'S'. Drop the "
                   "IGNORECASE flag (a known quirk of GPT-2's pattern, kept for identical ids)."),
    "lookahead": N_("a run of spaces before a word must leave its last space to the word: '\\s+(?!\\S)' before the "
                    "plain '\\s+', so 'a   b' gives 'a', '  ', ' b'."),
    "word_class": N_("\\w matches letters, digits and '_' together, so 'abc123' stayed one chunk; GPT-2 separates "
                     "letters (\\p{{L}}) from numbers (\\p{{N}})."),
    "ascii": N_("[A-Za-z] misses every other letter (é, 中, ж): use \\p{{L}} from the regex package, any letter of any "
                "script."),
    "no_leading_space": N_("the space must go with the word after it (' ?\\p{{L}}+'), not be a chunk of its own."),
    "re_module": N_("Python's own re module has no \\p{L}; use the regex package: import regex; regex.findall(pattern, "
                    "text)."),
    "case_ids": N_("ids {ids}"),
    "merge_passed": N_("count_pairs and merge agree with gpt_lesson.bpe on all {n_counts} + {n_merges} cases "
                       "(overlaps, the last pair, no pairs at all)."),
    "encode_passed": N_("your encoder gives the library's ids on {count} texts, Chinese and accented letters "
                        "included, with merges whose order matters."),
    "split_passed": N_("your chunks equal GPT-2's pre-split on {count} texts (contractions, runs of spaces, "
                       "numbers, Chinese)."),
}


def _bug(label: str, key: str, **fields) -> Bug:
    return Bug(label, TEXTS[key], fields)


def _int_list(value: object) -> list[int] | None:
    if isinstance(value, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        return list(value)
    return None


def _judge_ids(verdict: Verdict, fn: Callable, args: tuple, shown: str, expected: list[int],
               variants: Callable[[], list[tuple[list[int], Bug]]], forbidden: Forbidden) -> CheckResult | None:
    """The verdict on one call whose answer is a list of ids; None when it is right."""
    out = call(fn, args, forbidden)
    early = screen(verdict, out, f"   {shown}:\n")
    if early is not None:
        return early
    got = _int_list(out.value)
    if got is None:
        return verdict.failed(WRONG_TYPE, say(TEXTS["not_ids"], call=shown, kind=kind_of(out.value)))
    if got == expected:
        return None
    text = say(TEXTS["ids_mismatch"], call=shown, expected=expected, got=got)
    bug = next((b for value, b in variants() if value == got), None)
    return verdict.failed_with([bug], text) if bug else verdict.failed(WRONG_VALUE, text)


# ----------------------------------------------------------------------------------------------
# 1. Count pairs and do one merge


COUNT_CASES = [[1, 2, 1, 2, 3], [5, 5, 5, 5], [4, 9, 4, 9, 4], [7], []]
MERGE_CASES = [([1, 2, 3, 1, 2], (1, 2), 9), ([5, 5, 5], (5, 5), 6), ([5, 5, 5, 5], (5, 5), 6),
               ([1, 2, 1], (2, 1), 7), ([1, 2, 3], (2, 3), 8), ([2, 1, 1, 2], (1, 2), 9), ([3], (1, 2), 4)]
HIDDEN_COUNTS = [[0, 0, 0], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]]
HIDDEN_MERGES = [([0, 0, 0, 0, 0], (0, 0), 1), ([8, 9, 8, 9, 8], (9, 8), 10)]


def _counts_variants(ids: list[int]) -> list[tuple[dict, Bug]]:
    def counted(pairs) -> dict:
        out: dict = {}
        for p in pairs:
            out[p] = out.get(p, 0) + 1
        return out

    return [({p: 1 for p in zip(ids, ids[1:])}, _bug(PAIRS_COUNTED_ONCE, "once")),
            (counted(zip(ids[:-2], ids[1:-1])), _bug(LAST_PAIR_MISSED, "last_pair")),
            (counted(zip(ids[::2], ids[1::2])), _bug(OVERLAPS_NOT_COUNTED, "overlaps")),
            (counted(zip(ids, ids[2:])), _bug(PAIRS_NOT_ADJACENT, "not_adjacent"))]


def _merge_variants(ids: list[int], pair: tuple[int, int], new: int) -> list[tuple[list[int], Bug]]:
    def scan(step_after_match: int, keep_last: bool = True, target: tuple[int, int] = pair, once: bool = False):
        out, i, done = [], 0, False
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == target and not done:
                out.append(new)
                i += step_after_match
                done = once
            elif i + 1 < len(ids) or keep_last:
                out.append(ids[i])
                i += 1
            else:
                i += 1
        return out

    right = lib.merge(ids[::-1], pair[::-1], new)[::-1]
    return [(scan(2, once=True), _bug(FIRST_OCCURRENCE_ONLY, "first_only")),
            (scan(1), _bug(MERGE_OVERLAPS, "merge_overlaps")),
            (scan(2, keep_last=False), _bug(LAST_TOKEN_DROPPED, "last_dropped")),
            (scan(2, target=pair[::-1]), _bug(PAIR_REVERSED, "reversed")),
            (right, _bug(RIGHT_TO_LEFT, "right_to_left"))]


@learner_check
def check_bpe_merge(count_pairs: Callable[[list[int]], dict], merge: Callable[[list[int], tuple, int], list[int]], *,
                    strict: bool = False, hidden: bool = False) -> CheckResult:
    """Check ``count_pairs(ids) -> {pair: count}`` and ``merge(ids, pair, new_id) -> ids`` against gpt_lesson.bpe."""
    name = "check_bpe_merge"
    require_callable(name, count_pairs, "your count_pairs function")
    require_callable(name, merge, "your merge function")
    verdict = Verdict(name)
    forbidden = Forbidden({lib.pair_counts: "gpt_lesson.bpe.pair_counts", lib.merge: "gpt_lesson.bpe.merge",
                           lib.BPETokenizer: "gpt_lesson.bpe.BPETokenizer"})
    count_cases = COUNT_CASES + (HIDDEN_COUNTS if hidden else [])
    merge_cases = MERGE_CASES + (HIDDEN_MERGES if hidden else [])
    for ids in count_cases:
        out = call(count_pairs, (list(ids),), forbidden)
        early = screen(verdict, out, say(TEXTS["case_ids"], ids=ids) + "\n")
        if early is not None:
            return early
        got = out.value
        if not isinstance(got, dict) or not all(isinstance(k, tuple) and len(k) == 2 for k in got):
            return verdict.failed(WRONG_TYPE, say(TEXTS["not_counts"], ids=ids, kind=kind_of(got)))
        got = {k: v for k, v in got.items() if v}  # a Counter may keep zero counts
        expected = lib.pair_counts(ids)
        if got != expected:
            text = say(TEXTS["counts_mismatch"], ids=ids, expected=expected, got=dict(got))
            bug = next((b for value, b in _counts_variants(ids) if value == got), None)
            return verdict.failed_with([bug], text) if bug else verdict.failed(WRONG_VALUE, text)
    for ids, pair, new in merge_cases:
        result = _judge_ids(verdict, merge, (list(ids), pair, new), f"merge({ids}, {pair}, {new})",
                            lib.merge(ids, pair, new), partial(_merge_variants, ids, pair, new), forbidden)
        if result is not None:
            return result
    return verdict.passed(say(TEXTS["merge_passed"], n_counts=len(count_cases), n_merges=len(merge_cases)))


# ----------------------------------------------------------------------------------------------
# 2. Encode with a merge list


def _apply_in_order(ids: list[int], merges: Sequence[tuple[tuple[int, int], int]], first_only: bool = False):
    for pair, new in merges:
        ids = _merge_once(ids, pair, new) if first_only else lib.merge(ids, pair, new)
    return ids


def _merge_once(ids: list[int], pair: tuple[int, int], new: int) -> list[int]:
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            return ids[:i] + [new] + ids[i + 2:]
    return ids


def _most_frequent_first(ids: list[int], merges: dict[tuple[int, int], int]) -> list[int]:
    while True:
        counts = {p: c for p, c in lib.pair_counts(ids).items() if p in merges}
        if not counts:
            return ids
        pair = min(counts, key=lambda p: (-counts[p], merges[p]))
        ids = lib.merge(ids, pair, merges[pair])


def _one_merge(ids: list[int], merges: dict[tuple[int, int], int]) -> list[int]:
    for pair, new in merges.items():
        merged = lib.merge(ids, pair, new)
        if merged != ids:
            return merged
    return ids


def _encode_variants(text: str, merges: dict[tuple[int, int], int]) -> list[tuple[list[int], Bug]]:
    data = list(text.encode("utf-8"))
    items = list(merges.items())
    # the most-frequent-first encoder equals the reversed order on the third case, and is told apart on none
    # before it: it is tried first
    return [(_most_frequent_first(data, merges), _bug(MOST_FREQUENT_FIRST, "most_frequent")),
            (_apply_in_order(data, items[::-1]), _bug(MERGES_REVERSED, "merges_reversed")),
            (_apply_in_order(data, sorted(items)), _bug(MERGES_SORTED, "merges_sorted")),
            (_apply_in_order([ord(c) for c in text], items), _bug(CODE_POINTS, "code_points")),
            (_one_merge(data, merges), _bug(ONE_MERGE_ONLY, "one_merge")),
            (_apply_in_order(data, items, first_only=True), _bug(FIRST_OCCURRENCE_ONLY, "first_only"))]


def _encode_cases(hidden: bool) -> list[tuple[str, dict[tuple[int, int], int]]]:
    """Texts with merges whose order matters: each case's variants differ from the right answer."""
    a, b = ord("a"), ord("b")
    # the first case tells reversed, sorted and one-merge-only orders apart from each other and from the answer
    cases = [("abaabbba", {(b, a): 256, (a, b): 257, (b, 256): 258}), ("aaab", {(a, a): 256, (256, a): 257, (a, b): 258}),
             ("abcbcbc", {(a, b): 256, (b, ord("c")): 257})]  # (b, c) is the most frequent pair, (a, b) the first merge
    for corpus, text in (("the theme of the thesis: then there, these three", "the other theses"),
                         ("café, crème brûlée, café au lait, déjà vu", "un café brûlé"),
                         ("字节对编码把常见的字节对合并成新的词元。字节对编码", "编码字节对")):
        tok = lib.train(corpus, 270, pattern=None, special_tokens=[])
        cases.append((text, dict(tok.merges)))
    if hidden:
        tok = lib.train("banana bandana cabana " * 3, 266, pattern=None, special_tokens=[])
        cases.append(("bananas in a cabana", dict(tok.merges)))
    return cases


@learner_check
def check_bpe_encode(encode: Callable[[str, dict], list[int]], *, strict: bool = False,
                     hidden: bool = False) -> CheckResult:
    """Check ``encode(text, merges) -> ids``: UTF-8 bytes, then the merges ``{(a, b): new_id}`` in the order learned."""
    name = "check_bpe_encode"
    require_callable(name, encode, "your encode function")
    verdict = Verdict(name)
    forbidden = Forbidden({lib.BPETokenizer: "gpt_lesson.bpe.BPETokenizer"})
    cases = _encode_cases(hidden)
    for text, merges in cases:
        expected = lib.BPETokenizer(list(merges), pattern=None, special_tokens=[]).encode(text)
        result = _judge_ids(verdict, encode, (text, dict(merges)), f"my_encode({text!r}, merges)", expected,
                            partial(_encode_variants, text, merges), forbidden)
        if result is not None:
            return result
    return verdict.passed(say(TEXTS["encode_passed"], count=len(cases)))


# ----------------------------------------------------------------------------------------------
# 3. GPT-2's pre-split

_C = r"'s|'t|'re|'ve|'m|'ll|'d"
_SPLIT_VARIANTS = [
    (r"\p{L}+ ?|\p{N}+ ?|[^\s\p{L}\p{N}]+ ?|\s+", SPACE_AFTER_WORD, "space_after"),
    (r" ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+", NO_CONTRACTIONS, "no_contractions"),
    (r"(?i:" + _C + r")| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+", CONTRACTIONS_ANY_CASE, "any_case"),
    (_C + r"| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+", NO_SPACE_LOOKAHEAD, "lookahead"),
    (_C + r"| ?\w+| ?[^\s\w]+|\s+(?!\S)|\s+", WORD_CLASS, "word_class"),
    (_C + r"| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+", ASCII_LETTERS, "ascii"),
    (_C + r"|\p{L}+|\p{N}+|[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+", NO_LEADING_SPACE, "no_leading_space"),
]
SPLIT_TEXTS = ["Hello world", "it's they'll we've I'm you'd", "a   b", "abc123 4567!!", "你好，世界！",
               "IT'S LOUD", "tabs\t\tand\nnewlines\n\n", "  leading and trailing  ", "naïve café", "x = f(1)  # note"]
HIDDEN_SPLIT_TEXTS = ["Don't stop   now", "2026年12月1日", "ÉCOLE d'été", "\n\n  indented code\n"]


@learner_check
def check_gpt2_pre_split(split: Callable[[str], list[str]], *, strict: bool = False,
                         hidden: bool = False) -> CheckResult:
    """Check ``split(text) -> chunks`` against GPT-2's pre-tokenisation (:func:`gpt_lesson.bpe.pre_split`)."""
    name = "check_gpt2_pre_split"
    require_callable(name, split, "your pre-split function")
    verdict = Verdict(name)
    forbidden = Forbidden({lib.pre_split: "gpt_lesson.bpe.pre_split", lib.BPETokenizer: "gpt_lesson.bpe.BPETokenizer"})
    texts = SPLIT_TEXTS + (HIDDEN_SPLIT_TEXTS if hidden else [])
    hints = [("bad escape \\p", TEXTS["re_module"])]
    for text in texts:
        out = call(split, (text,), forbidden)
        early = screen(verdict, out, f"   my_pre_split({text!r}):\n", hints)
        if early is not None:
            return early
        got = out.value
        if not isinstance(got, (list, tuple)) or not all(isinstance(c, str) for c in got):
            return verdict.failed(WRONG_TYPE, say(TEXTS["not_chunks"], text=text, kind=kind_of(got)))
        got = list(got)
        expected = lib.pre_split(text)
        if got == expected:
            continue
        shown = say(TEXTS["chunks_mismatch"], text=text, expected=expected, got=got)
        if "".join(got) != text:
            return verdict.failed_with([_bug(TEXT_LOST, "text_lost", joined="".join(got))], shown)
        bug = next((_bug(label, key) for pattern, label, key in _SPLIT_VARIANTS
                    if regex.findall(pattern, text) == got), None)
        return verdict.failed_with([bug], shown) if bug else verdict.failed(WRONG_VALUE, shown)
    return verdict.passed(say(TEXTS["split_passed"], count=len(texts)))
