"""Checks for lesson 15 (serving): the bookkeeping of a paged KV cache.

The learner writes the three functions :mod:`gpt_lesson.serving.paged_cache` is built on: ``locate``
(a position to its physical block and offset), ``grow_table`` (take blocks from the free list when a
sequence crosses a block boundary) and ``free_sequence_blocks`` (give a finished sequence's blocks
back). They take plain lists (and a dict of tables) and return new ones; each check calls the
learner's function on fresh copies, compares what it returns, and notices a function that changes the
lists it was given.
"""
from __future__ import annotations

import numbers
from collections.abc import Callable, Hashable, Sequence

import torch

from ..serving import paged_cache as lib
from .runner import Forbidden, call, kind_of, learner_check, require_callable, screen
from .verdicts import N_, WRONG_TYPE, WRONG_VALUE, Bug, CheckResult, Verdict, say

# Labels: stable identifiers in CheckResult.diagnosis.
LOGICAL_BLOCK = N_("logical block instead of physical")
BLOCK_OFFSET_SWAPPED = N_("block and offset swapped")
OFFSET_AS_INDEX = N_("offset used as the table index")
DIVIDED_BY_TABLE_LENGTH = N_("divided by the table's length")
SLOT_NOT_PAIR = N_("a slot number, not (block, offset)")
PARTIAL_BLOCK_MISSING = N_("no block for the partial last block")
EXTRA_BLOCK_AT_BOUNDARY = N_("one block too many at a boundary")
BLOCK_EVERY_CALL = N_("a block taken on every call")
BLOCKS_TAKEN_AGAIN = N_("blocks the table has taken again")
TAKEN_FROM_THE_END = N_("blocks taken from the end of the free list")
NOT_REMOVED_FROM_FREE = N_("blocks left on the free list")
INPUTS_CHANGED = N_("changed the lists it was given")
TABLE_KEPT = N_("finished sequence's table kept")
BLOCKS_NOT_FREED = N_("blocks not given back")
SOME_BLOCKS_LOST = N_("some blocks lost")
FREED_TO_THE_FRONT = N_("blocks put at the front of the free list")
FREED_TWICE = N_("blocks given back twice")
OTHER_TABLES_DROPPED = N_("other sequences' tables dropped")

TEXTS = {
    "locate_args": N_("block_table={table}, position={position}, tokens_per_block={tpb}"),
    "grow_args": N_("block_table={table}, new_length={new_length}, tokens_per_block={tpb}, free_blocks={free}"),
    "free_args": N_("tables={tables}, free_blocks={free}, seq_id={seq_id!r}"),
    "mismatch": N_("   For {args}\n   expected: {expected}\n   got:      {got}"),
    "not_pair": N_("   For {args} your function returned {kind} {value}; return a pair {shape}."),
    "inputs_changed": N_("   For {args}\n   your function changed {which} in place (now {now}). The caller still uses "
                         "the lists it passed: return new lists and leave those as they were (slice, "
                         "free_blocks[k:], and concatenate, block_table + taken, instead of pop, append or del)."),
    "logical": N_("you returned the logical block, position // tokens_per_block: that is where the block sits in "
                  "the sequence. The block table says which physical block of the pool it is: "
                  "block_table[position // tokens_per_block]."),
    "swapped": N_("you returned (offset, block); return the physical block first, then the offset in it."),
    "offset_index": N_("you indexed the block table with the offset, position % tokens_per_block; its index is the "
                       "logical block, position // tokens_per_block. The offset is the second value you return."),
    "table_length": N_("you divided by len(block_table); every block holds tokens_per_block positions, whatever the "
                       "length of the table: divmod(position, tokens_per_block)."),
    "slot": N_("that is the slot number block * tokens_per_block + offset (the row of the pool's tensor); this "
               "function returns the pair (block, offset) it is made from."),
    "index_error": N_("the block table has one entry per logical block: index it with position // tokens_per_block."),
    "index_error_grow": N_("an index went past the end of a list: take a block only while the table is too short "
                           "(len(block_table) * tokens_per_block < new_length)."),
    "floor": N_("new_length // tokens_per_block counts only the full blocks: positions past the last full block "
                "need one more. Round up: -(-new_length // tokens_per_block) or math.ceil."),
    "extra": N_("new_length // tokens_per_block + 1 takes one block too many when new_length fills its last block "
                "exactly (a multiple of tokens_per_block). Round up instead: -(-new_length // tokens_per_block)."),
    "every_call": N_("you took a block on every call; a sequence needs a new block only when new_length no longer "
                     "fits in the blocks it has: len(block_table) * tokens_per_block."),
    "again": N_("you took as many blocks as new_length needs in all, but the table already has some: take only "
                "the difference, blocks needed - len(block_table)."),
    "from_end": N_("take the blocks from the front of free_blocks (free_blocks[:k]), as the pool hands them out; "
                   "you took them from the end."),
    "not_removed": N_("the blocks you gave the sequence are still on the free list you returned: the pool would hand "
                      "them to another sequence, whose keys would overwrite these. Return free_blocks[k:]."),
    "kept": N_("the finished sequence's table is still in the tables you returned: its blocks are now free and "
               "held at once, and the next sequence to take them would overwrite keys this one still points to. "
               "Leave seq_id out of the new dict."),
    "not_freed": N_("you removed the table but did not put its blocks on the free list: they are lost to the pool "
                    "for good (a leak). Add them to the end of free_blocks."),
    "some_lost": N_("only part of the finished sequence's blocks went back to the free list; give back all of "
                    "tables[seq_id]."),
    "front": N_("put the freed blocks on the end of the free list (free_blocks + tables[seq_id]), not the front: "
                "blocks are taken from the front, so the ones that have been free longest go first."),
    "twice": N_("the freed blocks are on the free list twice: the pool would give each to two sequences."),
    "others_dropped": N_("the other sequences' tables are missing from the dict you returned; drop only seq_id's."),
    "pair_locate": N_("(block, offset)"),
    "pair_grow": N_("(new_block_table, new_free_blocks) of two lists"),
    "pair_free": N_("(new_tables, new_free_blocks): a dict of lists and a list"),
    "passed_locate": N_("Your function finds the right (block, offset) through the block table in all {count} cases."),
    "passed_grow": N_("Your function takes exactly the blocks each sequence needs, from the front of the free list, "
                      "in all {count} cases."),
    "passed_free": N_("Your function gives every block of the finished sequence back and drops only its table, in "
                      "all {count} cases."),
}


def _bug(label: str, key: str) -> Bug:
    return Bug(label, TEXTS[key])


def _int(value: object) -> int | None:
    """``value`` as an int when it is a whole number (int, NumPy integer, 0-d integer tensor); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not (value.is_floating_point() or value.is_complex()
                                                                     or value.dtype == torch.bool):
        return int(value.item())
    return None


def _int_list(value: object) -> list[int] | None:
    if not isinstance(value, (list, tuple)):
        return None
    out = [_int(v) for v in value]
    return None if any(v is None for v in out) else out  # type: ignore[return-value]


def _pair(value: object) -> tuple[object, object] | None:
    return tuple(value) if isinstance(value, (list, tuple)) and len(value) == 2 else None  # type: ignore[return-value]


def _forbidden() -> Forbidden:
    return Forbidden({lib.locate: "gpt_lesson.serving.locate", lib.grow_table: "gpt_lesson.serving.grow_table",
                      lib.free_sequence_blocks: "gpt_lesson.serving.free_sequence_blocks",
                      lib.PagedKVCache: "gpt_lesson.serving.PagedKVCache"})


Mistake = tuple[Callable[[], object], str, str]  # what the mistake computes, its label, its text


def _begin(name: str, fn: object, cases: list, hidden_cases: list, hidden: bool) -> tuple[Verdict, list, Forbidden]:
    """The verdict, the cases (with the hidden ones when asked) and the library functions a check refuses."""
    require_callable(name, fn)
    return Verdict(name), cases + (hidden_cases if hidden else []), _forbidden()


def _first_bug(got: object, mistakes: Sequence[Mistake]) -> Bug | None:
    """The first classic mistake whose result equals ``got`` (a mistake that cannot run on the case is no match)."""
    for compute, label, key in mistakes:
        try:
            value = compute()
        except Exception:
            continue
        if value == got:
            return _bug(label, key)
    return None


def _locate_mistakes(table: list[int], position: int, tpb: int) -> list[Mistake]:
    logical, offset = divmod(position, tpb)
    return [
        (lambda: (logical, offset), LOGICAL_BLOCK, "logical"),
        (lambda: (offset, table[logical]), BLOCK_OFFSET_SWAPPED, "swapped"),
        (lambda: (table[offset], offset), OFFSET_AS_INDEX, "offset_index"),
        (lambda: (table[position // len(table)], position % len(table)), DIVIDED_BY_TABLE_LENGTH, "table_length"),
    ]


def _grow(table: list[int], free: list[int], needed: int) -> tuple[list[int], list[int]]:
    """``needed`` blocks from the front of the free list (none when it is not positive)."""
    needed = max(needed, 0)
    if needed > len(free):
        raise ValueError("not enough free blocks")
    return table + free[:needed], free[needed:]


def _grow_mistakes(table: list[int], new_length: int, tpb: int, free: list[int]) -> list[Mistake]:
    have, full, ceil = len(table), new_length // tpb, lib.blocks_for(new_length, tpb)
    k = ceil - have  # the blocks to take
    return [
        (lambda: _grow(table, free, full - have), PARTIAL_BLOCK_MISSING, "floor"),
        (lambda: _grow(table, free, full + 1 - have), EXTRA_BLOCK_AT_BOUNDARY, "extra"),
        (lambda: _grow(table, free, 1), BLOCK_EVERY_CALL, "every_call"),
        (lambda: _grow(table, free, ceil), BLOCKS_TAKEN_AGAIN, "again"),
        (lambda: (table + free[len(free) - k:], free[:len(free) - k]), TAKEN_FROM_THE_END, "from_end"),
        (lambda: (table + free[::-1][:k], free[:len(free) - k]), TAKEN_FROM_THE_END, "from_end"),  # pop() k times
        (lambda: (table + free[:k], free), NOT_REMOVED_FROM_FREE, "not_removed"),
    ]


def _free_mistakes(tables: dict[Hashable, list[int]], free: list[int], seq_id: Hashable) -> list[Mistake]:
    gone = tables[seq_id]
    rest = {s: t for s, t in tables.items() if s != seq_id}
    return [
        (lambda: (tables, free + gone), TABLE_KEPT, "kept"),
        (lambda: (rest, free), BLOCKS_NOT_FREED, "not_freed"),
        (lambda: (rest, gone + free), FREED_TO_THE_FRONT, "front"),
        (lambda: (rest, free + gone + gone), FREED_TWICE, "twice"),
        (lambda: ({}, free + gone), OTHER_TABLES_DROPPED, "others_dropped"),
    ]


def _fail(verdict: Verdict, bug: Bug | None, text: str) -> CheckResult:
    return verdict.failed_with([bug], text) if bug else verdict.failed(WRONG_VALUE, text)


def _changed(verdict: Verdict, args: str, which: str, now: object) -> CheckResult:
    """The answer is right, but the function also changed an argument in place."""
    return verdict.failed(INPUTS_CHANGED, say(TEXTS["inputs_changed"], args=args, which=which, now=now))


# ----------------------------------------------------------------------------------------------
# Your turn 1: a position through the block table


_LOCATE_CASES = [([12, 5, 30, 8], 7, 3), ([12, 5, 30, 8], 0, 3), ([12, 5, 30, 8], 11, 3), ([4, 9], 16, 16),
                 ([3, 0, 6], 2, 1)]
_LOCATE_HIDDEN = [([40, 1, 17, 23, 2], 14, 4), ([7], 15, 16), ([9, 3, 11], 6, 3)]


@learner_check
def check_locate(fn: Callable[[list[int], int, int], tuple[int, int]], *, strict: bool = False,
                 hidden: bool = False) -> CheckResult:
    """Check ``fn(block_table, position, tokens_per_block) -> (physical block, offset)``."""
    verdict, cases, forbidden = _begin("check_locate", fn, _LOCATE_CASES, _LOCATE_HIDDEN, hidden)
    for table, position, tpb in cases:
        args = say(TEXTS["locate_args"], table=table, position=position, tpb=tpb)
        given = list(table)
        outcome = call(fn, (given, position, tpb), forbidden)
        early = screen(verdict, outcome, hints=[("index out of range", TEXTS["index_error"])])
        if early is not None:
            return early
        expected = lib.locate(table, position, tpb)
        value = outcome.value
        pair = _pair(value)
        got = None if pair is None else (_int(pair[0]), _int(pair[1]))
        if got is None or None in got:
            if _int(value) == expected[0] * tpb + expected[1]:
                return verdict.failed_with([_bug(SLOT_NOT_PAIR, "slot")], say(
                    TEXTS["mismatch"], args=args, expected=expected, got=value))
            return verdict.failed(WRONG_TYPE, say(TEXTS["not_pair"], args=args, kind=kind_of(value),
                                                  value=repr(value)[:40], shape=say(TEXTS["pair_locate"])))
        if got != expected:
            bug = _first_bug(got, _locate_mistakes(table, position, tpb))
            return _fail(verdict, bug, say(TEXTS["mismatch"], args=args, expected=expected, got=got))
        if given != table:
            return _changed(verdict, args, "block_table", given)
    return verdict.passed(say(TEXTS["passed_locate"], count=len(cases)))


# ----------------------------------------------------------------------------------------------
# Your turn 2: grow a table at a block boundary


# (block_table, new_length, tokens_per_block, free_blocks). The order matters for the diagnosis: the first
# case tells most mistakes apart, the second (no growth inside a block) catches a block taken on every
# call, the third (an exact multiple of the block size) one block too many at a boundary.
_GROW_CASES = [([6, 2], 9, 4, [5, 0, 7, 3]), ([6, 2], 7, 4, [5, 0, 7]), ([6, 2], 8, 4, [5, 0, 7]),
               ([], 1, 4, [3, 1]), ([], 10, 4, [8, 1, 6, 2]), ([9], 2, 1, [4, 0])]
_GROW_HIDDEN = [([], 16, 16, [2, 5]), ([1, 4, 0], 13, 4, [3]), ([7, 8], 6, 3, [2, 0]), ([0], 31, 16, [9, 3])]


@learner_check
def check_grow_table(fn: Callable[[list[int], int, int, list[int]], tuple[list[int], list[int]]], *,
                     strict: bool = False, hidden: bool = False) -> CheckResult:
    """Check ``fn(block_table, new_length, tokens_per_block, free_blocks) -> (new_block_table, new_free_blocks)``."""
    verdict, cases, forbidden = _begin("check_grow_table", fn, _GROW_CASES, _GROW_HIDDEN, hidden)
    for table, new_length, tpb, free in cases:
        args = say(TEXTS["grow_args"], table=table, new_length=new_length, tpb=tpb, free=free)
        given_table, given_free = list(table), list(free)
        outcome = call(fn, (given_table, new_length, tpb, given_free), forbidden)
        early = screen(verdict, outcome, hints=[("index out of range", TEXTS["index_error_grow"]),
                                                ("pop from empty list", TEXTS["index_error_grow"])])
        if early is not None:
            return early
        pair = _pair(outcome.value)
        got = None if pair is None else (_int_list(pair[0]), _int_list(pair[1]))
        if got is None or None in got:
            return verdict.failed(WRONG_TYPE, say(TEXTS["not_pair"], args=args, kind=kind_of(outcome.value),
                                                  value=repr(outcome.value)[:60], shape=say(TEXTS["pair_grow"])))
        expected = lib.grow_table(table, new_length, tpb, free)
        if got != expected:
            bug = _first_bug(got, _grow_mistakes(table, new_length, tpb, free))
            return _fail(verdict, bug, say(TEXTS["mismatch"], args=args, expected=expected, got=got))
        for which, now, before in (("block_table", given_table, table), ("free_blocks", given_free, free)):
            if now != before:
                return _changed(verdict, args, which, now)
    return verdict.passed(say(TEXTS["passed_grow"], count=len(cases)))


# ----------------------------------------------------------------------------------------------
# Your turn 3: free a finished sequence's blocks


_FREE_CASES = [({"a": [3, 0, 6], "b": [1, 4], "c": [5]}, [2, 7], "a"), ({"x": [], "y": [0]}, [1], "x"),
               ({0: [2], 1: [0, 1]}, [], 1)]
_FREE_HIDDEN = [({"s": [4, 2, 9, 1]}, [0, 3, 5], "s"), ({5: [1], 6: [7, 3], 7: [0]}, [2], 6)]


@learner_check
def check_free_sequence_blocks(
        fn: Callable[[dict[Hashable, list[int]], list[int], Hashable], tuple[dict[Hashable, list[int]], list[int]]],
        *, strict: bool = False, hidden: bool = False) -> CheckResult:
    """Check ``fn(tables, free_blocks, seq_id) -> (new_tables, new_free_blocks)``."""
    verdict, cases, forbidden = _begin("check_free_sequence_blocks", fn, _FREE_CASES, _FREE_HIDDEN, hidden)
    for tables, free, seq_id in cases:
        args = say(TEXTS["free_args"], tables=tables, free=free, seq_id=seq_id)
        given_tables, given_free = {s: list(t) for s, t in tables.items()}, list(free)
        outcome = call(fn, (given_tables, given_free, seq_id), forbidden)
        early = screen(verdict, outcome)
        if early is not None:
            return early
        pair = _pair(outcome.value)
        got_tables = pair[0] if pair is not None and isinstance(pair[0], dict) else None
        got_free = _int_list(pair[1]) if pair is not None else None
        table_lists = None if got_tables is None else {s: _int_list(t) for s, t in got_tables.items()}
        if table_lists is None or got_free is None or any(t is None for t in table_lists.values()):
            return verdict.failed(WRONG_TYPE, say(TEXTS["not_pair"], args=args, kind=kind_of(outcome.value),
                                                  value=repr(outcome.value)[:60], shape=say(TEXTS["pair_free"])))
        got = (table_lists, got_free)
        expected = lib.free_sequence_blocks(tables, free, seq_id)
        if got != expected:
            bug = _first_bug(got, _free_mistakes(tables, free, seq_id))
            rest, everything = expected[0], free + tables[seq_id]
            if bug is None and got[0] == rest and len(got[1]) < len(everything) and set(got[1]) <= set(everything):
                bug = _bug(SOME_BLOCKS_LOST, "some_lost")
            shown = lambda value: f"({value[0]}, {value[1]})"  # noqa: E731 - one line for the message
            return _fail(verdict, bug, say(TEXTS["mismatch"], args=args, expected=shown(expected), got=shown(got)))
        for which, now, before in (("tables", given_tables, tables), ("free_blocks", given_free, free)):
            if now != before:
                return _changed(verdict, args, which, now)
    return verdict.passed(say(TEXTS["passed_free"], count=len(cases)))
