"""Print the corpus counts: ``python tests/learner_solutions/report.py [--package DIR] [--list VERDICT ...]``.

Runs every learner solution through the checks of the ``gpt_lesson`` in this checkout, or in ``DIR`` (a
checkout of another version: the same corpus measures it, with the lessons' check calls as they are).
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _import_corpus(package: Path | None):
    """The corpus, with ``gpt_lesson`` imported from ``package`` (a checkout's root) or from this checkout."""
    sys.path.insert(0, str(package.resolve() if package else ROOT))
    import gpt_lesson  # noqa: F401 - from there, before the corpus imports it

    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))  # for ``tests.learner_solutions``
    from tests.learner_solutions import exercises
    from tests.learner_solutions._registry import run
    return exercises, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", nargs="*", default=[], metavar="VERDICT",
                        help="print the solutions with these verdicts (e.g. 'false accept' generic crash)")
    parser.add_argument("--package", type=Path, help="a checkout whose gpt_lesson to measure (default: this one)")
    parser.add_argument("--no-rules", action="store_true",
                        help="call the checks without the exercises' rule arguments (without=/using=)")
    args = parser.parse_args(argv)
    exercises, run = _import_corpus(args.package)
    if args.no_rules:
        for ex in exercises():
            ex.rules = {}
    import gpt_lesson

    print(f"gpt_lesson from {Path(gpt_lesson.__file__).parent}\n")
    totals: collections.Counter = collections.Counter()
    outcomes = []
    for ex in exercises():
        counts = collections.Counter()
        for solution in ex.solutions:
            outcome = run(solution)
            outcomes.append(outcome)
            counts[outcome.verdict] += 1
        totals.update(counts)
        right = sum(s.right for s in ex.solutions)
        print(f"{ex.key:<52} {right:3d} right {len(ex.solutions) - right:3d} wrong  "
              + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    wrong = sum(1 for o in outcomes if not o.solution.right)
    print(f"\n{len(outcomes)} solutions ({len(outcomes) - wrong} right, {wrong} wrong): "
          + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))
    print(f"generic messages: {totals['generic']} of {wrong} wrong answers ({100 * totals['generic'] / wrong:.1f}%)")
    for o in outcomes:
        if o.verdict in args.list:
            print(f"\n--- {o.verdict}: {o.solution.exercise.key} / {o.solution.name} "
                  f"(expected {o.solution.labels or 'pass'}, got {o.diagnosis!r}, {o.seconds:.2f} s)\n{o.message}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
