"""Lesson 13's checks (gpt_lesson.checks.bpe): right answers pass, stubs are "not attempted", and each classic
mistake, written as a learner would write it, gets its own diagnosis."""
from __future__ import annotations

import re

import pytest
import regex

from gpt_lesson import bpe, checks
from gpt_lesson.checks import bpe as C


# ------------------------------------------------------------------------------------ learner code, right and wrong
def count_pairs(ids, bug=None):
    counts = {}
    if bug == "once":
        return {p: 1 for p in zip(ids, ids[1:])}
    if bug == "last":
        pairs = [(ids[i], ids[i + 1]) for i in range(len(ids) - 2)]
    elif bug == "skip":
        pairs = [(ids[i], ids[i + 1]) for i in range(0, len(ids) - 1, 2)]
    elif bug == "two_apart":
        pairs = list(zip(ids, ids[2:]))
    else:
        pairs = list(zip(ids, ids[1:]))
    for p in pairs:
        counts[p] = counts.get(p, 0) + 1
    return counts


def merge(ids, pair, new_id, bug=None):
    if bug == "right":
        return merge(ids[::-1], pair[::-1], new_id)[::-1]
    out, i, merged = [], 0, False
    target = pair[::-1] if bug == "reversed" else tuple(pair)
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == target and not (bug == "first" and merged):
            out.append(new_id)
            i += 1 if bug == "overlap" else 2
            merged = True
        elif bug == "drop_last" and i + 1 == len(ids):
            i += 1
        else:
            out.append(ids[i])
            i += 1
    return out


def encode(text, merges, bug=None):
    ids = [ord(c) for c in text] if bug == "ord" else list(text.encode("utf-8"))
    items = list(merges.items())
    if bug == "reversed":
        items = items[::-1]
    elif bug == "sorted":
        items = sorted(items)
    if bug == "frequent":
        while True:
            counts = {p: c for p, c in count_pairs(ids).items() if p in merges}
            if not counts:
                return ids
            best = max(counts, key=lambda p: (counts[p], -merges[p]))
            ids = merge(ids, best, merges[best])
    for pair, new in items:
        merged = merge(ids, pair, new, bug="first" if bug == "first" else None)
        if bug == "one" and merged != ids:
            return merged
        ids = merged
    return ids


GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def pre_split(text, pattern=GPT2, flags=0):
    return regex.findall(pattern, text, flags)


def stub(*args):
    raise NotImplementedError


# ------------------------------------------------------------------------------------ passing and not attempted
def test_right_answers_pass_with_hidden_cases_too():
    assert checks.check_bpe_merge(count_pairs, merge, hidden=True)
    assert checks.check_bpe_merge(lambda ids: __import__("collections").Counter(zip(ids, ids[1:])), merge)
    assert checks.check_bpe_encode(encode, hidden=True)
    assert checks.check_gpt2_pre_split(pre_split, hidden=True)


def test_a_rank_loop_encoder_passes_too():
    def by_rank(text, merges):
        ids = list(text.encode("utf-8"))
        while len(ids) >= 2:
            pair = min(zip(ids, ids[1:]), key=lambda p: merges.get(p, float("inf")))
            if pair not in merges:
                return ids
            ids = merge(ids, pair, merges[pair])
        return ids

    assert checks.check_bpe_encode(by_rank, hidden=True)


@pytest.mark.parametrize("run", [lambda: checks.check_bpe_merge(stub, stub), lambda: checks.check_bpe_encode(stub),
                                 lambda: checks.check_gpt2_pre_split(stub),
                                 lambda: checks.check_bpe_merge(count_pairs, lambda *a: None)])
def test_stubs_are_not_attempted(run, capsys):
    result = run()
    assert not result.passed and not result.attempted and result.diagnosis == checks.NOT_ATTEMPTED
    assert "not attempted yet" in capsys.readouterr().out


def test_strict_raises_for_nbgrader():
    with pytest.raises(AssertionError, match="merged from the right"):
        checks.check_bpe_merge(count_pairs, lambda *a: merge(*a, bug="right"), strict=True)


# ------------------------------------------------------------------------------------ every diagnosis
BUGS = [
    (lambda: checks.check_bpe_merge(lambda ids: count_pairs(ids, "once"), merge), C.PAIRS_COUNTED_ONCE, "in a set"),
    (lambda: checks.check_bpe_merge(lambda ids: count_pairs(ids, "last"), merge), C.LAST_PAIR_MISSED, "n - 1 adjacent"),
    (lambda: checks.check_bpe_merge(lambda ids: count_pairs(ids, "skip"), merge), C.OVERLAPS_NOT_COUNTED,
     "counted (5, 5) twice"),
    (lambda: checks.check_bpe_merge(lambda ids: count_pairs(ids, "two_apart"), merge), C.PAIRS_NOT_ADJACENT,
     "two apart"),
    (lambda: checks.check_bpe_merge(count_pairs, lambda *a: merge(*a, bug="first")), C.FIRST_OCCURRENCE_ONLY,
     "every occurrence"),
    (lambda: checks.check_bpe_merge(count_pairs, lambda *a: merge(*a, bug="overlap")), C.MERGE_OVERLAPS, "i += 2"),
    (lambda: checks.check_bpe_merge(count_pairs, lambda *a: merge(*a, bug="drop_last")), C.LAST_TOKEN_DROPPED,
     "last token"),
    (lambda: checks.check_bpe_merge(count_pairs, lambda *a: merge(*a, bug="reversed")), C.PAIR_REVERSED,
     "the pair is ordered"),
    (lambda: checks.check_bpe_merge(count_pairs, lambda *a: merge(*a, bug="right")), C.RIGHT_TO_LEFT,
     "Scan from the left"),
    (lambda: checks.check_bpe_encode(lambda t, m: encode(t, m, "reversed")), C.MERGES_REVERSED, "last learned first"),
    (lambda: checks.check_bpe_encode(lambda t, m: encode(t, m, "sorted")), C.MERGES_SORTED, "sorted order"),
    (lambda: checks.check_bpe_encode(lambda t, m: encode(t, m, "ord")), C.CODE_POINTS, "195 169"),
    (lambda: checks.check_bpe_encode(lambda t, m: encode(t, m, "frequent")), C.MOST_FREQUENT_FIRST, "that is training"),
    (lambda: checks.check_bpe_encode(lambda t, m: encode(t, m, "one")), C.ONE_MERGE_ONLY, "keep merging"),
    (lambda: checks.check_bpe_encode(lambda t, m: encode(t, m, "first")), C.FIRST_OCCURRENCE_ONLY, "every occurrence"),
    (lambda: checks.check_gpt2_pre_split(str.split), C.TEXT_LOST, "str.split() drops the spaces"),
    (lambda: checks.check_gpt2_pre_split(lambda t: pre_split(t, r"\p{L}+ ?|\p{N}+ ?|[^\s\p{L}\p{N}]+ ?|\s+")),
     C.SPACE_AFTER_WORD, "GPT-2 puts it before"),
    (lambda: checks.check_gpt2_pre_split(lambda t: pre_split(t, GPT2[GPT2.index(" ?"):])), C.NO_CONTRACTIONS,
     "'s 't 're"),
    (lambda: checks.check_gpt2_pre_split(lambda t: pre_split(t, flags=regex.IGNORECASE)), C.CONTRACTIONS_ANY_CASE,
     "lower case only"),
    (lambda: checks.check_gpt2_pre_split(lambda t: pre_split(t, GPT2.replace(r"|\s+(?!\S)", ""))),
     C.NO_SPACE_LOOKAHEAD, "leave its last space"),
    (lambda: checks.check_gpt2_pre_split(lambda t: pre_split(t, r"'s|'t|'re|'ve|'m|'ll|'d| ?\w+| ?[^\s\w]+|\s+(?!\S)|\s+")),
     C.WORD_CLASS, "letters, digits and '_'"),
    (lambda: checks.check_gpt2_pre_split(lambda t: pre_split(t, r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+"
                                                               r"| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")), C.ASCII_LETTERS, "é, 中, ж"),
    (lambda: checks.check_gpt2_pre_split(lambda t: pre_split(t, GPT2.replace(" ?", ""))), C.NO_LEADING_SPACE,
     "with the word after it"),
]


@pytest.mark.parametrize("run, label, words", BUGS, ids=[b[1] for b in BUGS])
def test_each_mistake_is_named(run, label, words, capsys):
    result = run()
    out = capsys.readouterr().out
    assert not result.passed and result.attempted
    assert result.diagnosis == label, out
    assert words in out and "expected:" in out


def test_wrong_kinds_of_answers_are_named(capsys):
    r = checks.check_bpe_merge(lambda ids: list(zip(ids, ids[1:])), merge)
    assert r.diagnosis == checks.WRONG_TYPE and "return a dict from each pair" in r.message
    r = checks.check_bpe_merge(count_pairs, lambda ids, p, n: "9 3 9")
    assert r.diagnosis == checks.WRONG_TYPE and "return a list of token ids" in r.message
    r = checks.check_gpt2_pre_split(lambda t: t)
    assert r.diagnosis == checks.WRONG_TYPE and "return a list of strings" in r.message
    r = checks.check_bpe_encode(lambda t, m: [1, 2, 3])
    assert r.diagnosis == checks.WRONG_VALUE and "expected: [97, 256, 257, 258]" in r.message


def test_the_re_module_gets_its_hint(capsys):
    r = checks.check_gpt2_pre_split(lambda t: re.findall(GPT2, t))
    assert r.diagnosis == checks.RAISED and "use the regex package" in r.message


def test_calling_the_library_is_refused(capsys):
    r = checks.check_gpt2_pre_split(bpe.pre_split)
    assert r.diagnosis == checks.CALLED_LIBRARY and "gpt_lesson.bpe.pre_split" in r.message
    r = checks.check_bpe_merge(bpe.pair_counts, merge)
    assert r.diagnosis == checks.CALLED_LIBRARY
    r = checks.check_bpe_encode(lambda t, m: bpe.BPETokenizer(list(m), pattern=None, special_tokens=[]).encode(t))
    assert r.diagnosis == checks.CALLED_LIBRARY and "gpt_lesson.bpe.BPETokenizer" in r.message


def test_wrong_arguments_to_a_check_raise():
    with pytest.raises(TypeError, match="expects your count_pairs function"):
        checks.check_bpe_merge("count", merge)
    with pytest.raises(TypeError, match="strict='yes' must be True or False"):
        checks.check_bpe_encode(encode, strict="yes")


def test_the_learner_cannot_change_the_cases():
    def sneaky(ids, pair, new_id):
        out = merge(ids, pair, new_id)
        ids.clear()
        return out

    assert checks.check_bpe_merge(count_pairs, sneaky)
    assert checks.check_bpe_merge(count_pairs, merge)  # the cases are intact afterwards
    assert C.MERGE_CASES[0][0] == [1, 2, 3, 1, 2]


def test_every_label_of_the_module_is_tested_here():
    labels = {v for k, v in vars(C).items() if k.isupper() and not k.startswith("_") and isinstance(v, str)}
    tested = {label for _, label, _ in BUGS} | {checks.WRONG_TYPE, checks.WRONG_VALUE}
    assert labels - tested == set()


BPE_LABELS_TESTED = {label for _, label, _ in BUGS}  # for tests/test_checks.py's every-label test
