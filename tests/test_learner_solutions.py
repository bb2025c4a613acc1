"""The corpus of learner solutions (tests/learner_solutions/): every right answer passes its lesson's check,
every wrong one fails with a diagnosis (the one listed, when one is), nothing makes a check raise, and at
most 10% of the wrong answers get only a generic message (issue 22 part 3).

``python tests/learner_solutions/report.py --list generic`` prints the same counts and the messages.
"""
from __future__ import annotations

import collections
import warnings

import pytest

from tests.learner_solutions import exercises
from tests.learner_solutions._registry import run

EXERCISES = exercises()
OUTCOMES: dict[str, list] = {}


def _outcomes(ex) -> list:
    if ex.key not in OUTCOMES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the wrong answers' own warnings (x.T on 3-D tensors, ...)
            OUTCOMES[ex.key] = [run(s) for s in ex.solutions]
    return OUTCOMES[ex.key]


def test_the_corpus_covers_every_exercise_of_lessons_01_to_08_with_several_hundred_solutions():
    keys = [ex.key.split()[0] for ex in EXERCISES]
    assert keys == ["01.1", "01.2", "01.3", "02.1", "02.2", "03.1", "03.2", "04.1", "04.2", "05.1", "05.2", "06.1",
                    "06.2", "07.1", "07.2", "08.1", "08.2", "08.3"]
    solutions = [s for ex in EXERCISES for s in ex.solutions]
    assert len(solutions) >= 400
    for ex in EXERCISES:  # right answers in several styles and typical wrong ones, for every exercise
        assert sum(s.right for s in ex.solutions) >= 7 and sum(not s.right for s in ex.solutions) >= 10, ex.key


@pytest.mark.parametrize("ex", EXERCISES, ids=[ex.key.split()[0] for ex in EXERCISES])
def test_every_solution_gets_the_right_verdict(ex):
    bad = [o for o in _outcomes(ex) if o.verdict not in ("accepted", "named", "generic")]
    assert not bad, "\n\n".join(f"{o.verdict}: {o.solution.name} (expected {o.solution.labels or 'a pass'}, "
                                f"got {o.diagnosis!r})\n{o.message}" for o in bad)


def test_at_most_a_tenth_of_the_wrong_answers_get_a_generic_message():
    outcomes = [o for ex in EXERCISES for o in _outcomes(ex)]
    counts = collections.Counter(o.verdict for o in outcomes)
    wrong = sum(1 for o in outcomes if not o.solution.right)
    print(f"\n{len(outcomes)} solutions: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    assert counts["false accept"] == counts["false reject"] == counts["crash"] == counts["misnamed"] == 0
    assert counts["generic"] <= 0.10 * wrong, [o.solution.name for o in outcomes if o.verdict == "generic"]
