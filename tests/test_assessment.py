"""Summative homework (issue 29): variants from a secret seed, the grader's own cases in the teacher's folder,
released copies without links to the public solutions, the question bank, the roster, the weighted grades and the
rubrics of the work graded by hand, in both editions. The English course's whole nbgrader round on a variant (right,
typical-wrong, blank, hostile and absent students, no checksum or score warnings, feedback without a remote script,
weighted grades) is the round of tests/test_nbgrader.py, whose course is built with a secret. Here, every lesson of
each edition is built and released once (``released_course``), and the tests that need a whole course share that
build: the released copies, the weighted export, and the Chinese course's round on lesson 02's variant (right,
typical-wrong and blank students, the feedback in Chinese)."""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from gpt_lesson import checks
from tools import assessment, nbgrader_course
from tools.exercises import find_exercises
from tools.nbgrader_course import LEAK_PATTERNS, assignment_notebook, build_course, released_markdown

REPO = Path(__file__).resolve().parents[1]
SECRET, OTHER = b"teacher-secret-1", b"another-secret-2"
VARIED_LESSONS = ["02_attention", "03_causal_mask", "04_softmax_scaling"]


def _lesson(name: str, edition: str = "") -> nbformat.NotebookNode:
    return nbformat.read(REPO / "notebooks" / edition / f"{name}.ipynb", as_version=4)


def _exercise_calls():
    for name in VARIED_LESSONS:
        nb = _lesson(name)
        for ex in find_exercises(nb):
            for call in ex.checks(nb):
                yield name, ex, nb, call


def _run(code: str, check: str, fn: str, kwargs: dict) -> checks.CheckResult:
    namespace: dict = {}
    exec("import math\nimport torch\nimport torch.nn.functional as F\n" + code, namespace)
    return getattr(checks, check)(namespace[fn], **kwargs)


# ---------------------------------------------------------------------------------------------------
# Variants


@pytest.mark.parametrize("name,ex,nb,call", list(_exercise_calls()), ids=lambda v: v if isinstance(v, str) else "")
def test_the_public_solution_fails_the_variant_and_the_variants_own_passes(name, ex, nb, call, capsys):
    variant = assessment.make_variant(SECRET, name, ex.number, call)
    assert variant is not None
    fn = re.match(r"\w+\((\w+)", call).group(1)
    public = nbgrader_course._solution_code(ex, nb)
    assert _run(public, call.split("(")[0], fn, {}).passed  # the lesson's own check
    for kwargs in [variant.kwargs, *variant.grading]:
        kwargs = {**kwargs, **variant.rules}
        own = _run(variant.solution, variant.check, fn, kwargs)
        assert own.passed, own.message
        lesson = _run(public, variant.check, fn, kwargs)
        assert not lesson.passed and lesson.attempted
        # The diagnosis names what the public solution does: the lesson's scaling, no temperature, no window.
        assert lesson.diagnosis in (checks.LESSON_SCALE, checks.TEMPERATURE_IGNORED, checks.WINDOW_IGNORED), \
            lesson.message


def test_same_seed_same_variants_other_seed_others():
    calls = [(name, ex.number, call) for name, ex, _, call in _exercise_calls()]
    first = [assessment.make_variant(SECRET, *c) for c in calls]
    again = [assessment.make_variant(SECRET, *c) for c in calls]
    other = [assessment.make_variant(OTHER, *c) for c in calls]
    assert [(v.kwargs, v.grading, v.solution) for v in first] == [(v.kwargs, v.grading, v.solution) for v in again]
    assert [(v.kwargs, v.grading) for v in first] != [(v.kwargs, v.grading) for v in other]
    # The sizes of the inputs differ for every exercise, the twists for most.
    assert all(a.kwargs["sizes"] != b.kwargs["sizes"] for a, b in zip(first, other))


def test_every_lesson_check_has_a_variant_or_a_reason():
    called = set()
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        called |= {call.split("(")[0] for ex in find_exercises(nb) for call in ex.checks(nb)}
    assert called <= set(assessment.VARIANT_CHECKS) | set(assessment.NO_VARIANT), \
        called - set(assessment.VARIANT_CHECKS) - set(assessment.NO_VARIANT)
    assert not set(assessment.VARIANT_CHECKS) & set(assessment.NO_VARIANT)


def test_variant_checks_name_the_classic_mistakes(capsys):
    kw = {"power": 1.0, "temperature": 1.0, "sizes": [[7, [2, 5, 5]], [8, [1, 4, 6]]]}
    assert checks.check_variant_scores(lambda q, k: q @ k / q.size(-1), **kw).diagnosis == checks.MISSING_TRANSPOSE
    assert checks.check_variant_scores(lambda q, k: q @ k.transpose(-2, -1), **kw).diagnosis == checks.NO_SCALING
    assert checks.check_variant_softmax(lambda s: (s / 2).softmax(dim=-2), temperature=2.0).diagnosis == \
        checks.SOFTMAX_WRONG_DIM
    assert checks.check_variant_softmax(lambda s: (s * 2).softmax(dim=-1), temperature=2.0).diagnosis == \
        checks.TEMPERATURE_MULTIPLIED
    assert checks.check_variant_softmax(lambda s: None, temperature=2.0).diagnosis == checks.NOT_ATTEMPTED

    def head(q, k, v, w=3, fill=float("-inf"), dim=-1):
        T = q.size(-2)
        ones = torch.ones(T, T, dtype=torch.bool)
        visible = torch.tril(ones) & torch.triu(ones, diagonal=-(w - 1))
        return (q @ k.transpose(-2, -1) / q.size(-1) ** 0.5).masked_fill(~visible, fill).softmax(dim) @ v

    import torch
    assert checks.check_variant_window(head, window=3).passed
    assert checks.check_variant_window(lambda q, k, v: head(q, k, v, fill=0.0), window=3).diagnosis == \
        checks.MASK_WITH_ZERO
    assert checks.check_variant_window(lambda q, k, v: head(q, k, v, 4), window=3).diagnosis == checks.MASK_ONE_OFF
    assert checks.check_variant_window(lambda q, k, v: head(q, k, v, 2), window=3).diagnosis == checks.MASK_ONE_OFF
    assert checks.check_variant_window(lambda q, k, v: head(q, k, v, dim=-2), window=3).diagnosis == \
        checks.SOFTMAX_WRONG_DIM


@pytest.mark.parametrize("call,match", [
    ("check_variant_scores(f, power=0.5, temperature=1.0)", "the lesson's own task"),
    ("check_variant_scores(f, power=-1)", "power must be a positive number"),
    ("check_variant_softmax(f, temperature=1)", "the lesson's own task"),
    ("check_variant_softmax(f, temperature=2.0, sizes=[[1, [2, 3, 4]]])", r"sizes are \[B, T\]"),
    ("check_variant_window(f, window=1)", "window must be a whole number of at least 2"),
    ("check_variant_window(f, window=3, sizes=[[1, [1, 3, 4]]])", "must exceed the window"),
    ("check_variant_window(f, window=3, sizes='big')", "sizes must be a non-empty list"),
    ("check_variant_window(f, window=3, sizes=[[1, [1, 300, 4]]])", "whole dims 1..64"),
])
def test_variant_checks_refuse_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        eval(call, {**vars(checks), "f": lambda *a: None})


def test_grading_cases_come_only_from_the_course_folder(tmp_path, monkeypatch):
    from gpt_lesson.checks.variants import grading_cases

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert grading_cases("02_attention", "x#0", start=tmp_path) == []  # a student's machine
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(ValueError, match="rebuild the course folder"):
        grading_cases("02_attention", "x#0", start=tmp_path)
    (tmp_path / "grading").mkdir()
    (tmp_path / "nbgrader_config.py").write_text("")
    (tmp_path / "grading" / "cases.json").write_text(json.dumps({"02_attention": {"x#0": [{"hidden": True}]}}))
    deep = tmp_path / "autograded" / "alice" / "02_attention"
    deep.mkdir(parents=True)
    assert grading_cases("02_attention", "x#0", start=deep) == [{"hidden": True}]
    assert grading_cases("02_attention", "other#0", start=deep) == []
    (tmp_path / "grading" / "cases.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        grading_cases("02_attention", "x#0", start=deep)
    (tmp_path / "grading" / "cases.json").write_text(json.dumps({"02_attention": {"x#0": "all"}}))
    with pytest.raises(ValueError, match="must be a list of objects"):
        grading_cases("02_attention", "x#0", start=deep)
    with pytest.raises(TypeError, match="non-empty str cell"):
        grading_cases("02_attention", "", start=deep)


def test_secrets_are_checked(tmp_path):
    with pytest.raises(ValueError, match="at least 8 characters"):
        assessment.read_secret("short")
    with pytest.raises(ValueError, match="exactly one"):
        assessment.read_secret(None, None)
    with pytest.raises(ValueError, match="does not exist"):
        assessment.read_secret(None, tmp_path / "missing")
    (tmp_path / "seed").write_text("a-long-enough-secret\nignored\n")
    assert assessment.read_secret(None, tmp_path / "seed") == b"a-long-enough-secret"


# ---------------------------------------------------------------------------------------------------
# The seeded assignment: the twist stated, its solution for the teacher, its cases outside the notebook


@pytest.mark.parametrize("edition", ["", "zh"])
def test_seeded_assignment_states_the_twist_and_keeps_the_cases_out(edition):
    nb = _lesson("03_causal_mask", edition)
    source, graded = assignment_notebook(nb, "03_causal_mask", secret=SECRET)
    cells = {c.metadata["nbgrader"]["grade_id"]: c for c in source.cells}
    for g in graded:
        number = g.grade_id.split("-")[2]
        variant = g.variants[0]
        text = cells[f"your-turn-{number}-variant"].source
        assert f"{variant.kwargs['window']}" in text and ("sliding window" in text or "滑动窗口" in text)
        assert variant.solution.strip() in cells[f"your-turn-{number}-answer"].source
        test = cells[g.grade_id].source
        assert f"_checks.{variant.check}(" in test and "hidden=True" not in test and "BEGIN HIDDEN" not in test
        for case in variant.grading:  # the grader's sizes are in grading/cases.json, not in the notebook
            assert str(case["sizes"]) not in "\n".join(c.source for c in source.cells)
            assert {**case, **variant.rules} in g.cases[f"{g.grade_id}#0"]
        # Every call's value is assigned: no output nbgrader would try to read as a partial score.
        assert all(line.startswith(("#", "from ", "_checks = ", "_verdict = ", "for _case", "    _verdict = "))
                   for line in test.splitlines()), test
        if edition == "zh":
            assert "动手练习" in test.splitlines()[0] and "计分" in test.splitlines()[0]


def test_released_markdown_has_no_links_to_the_solutions():
    en, zh = _lesson("02_attention"), _lesson("02_attention", "zh")
    for nb in (en, zh):
        text = "\n".join(released_markdown(c.source) for c in nb.cells if c.cell_type == "markdown")
        for pattern in LEAK_PATTERNS:
            assert not re.search(pattern, text), pattern
    head = released_markdown(en.cells[0].source)
    assert head.strip() == "# 02 · Attention: averaging the past, then Query, Key, Value"
    assert released_markdown("See [the glossary](../docs/glossary.md).") == "See [the glossary](../docs/glossary.md)."


# ---------------------------------------------------------------------------------------------------
# The question bank


def test_question_bank_has_six_kinds_with_worked_answers_that_differ_by_seed():
    bank = assessment.question_bank(SECRET, 4)
    assert len(bank) >= 6 and all(len(items) == 4 for items in bank.values())
    assert bank == assessment.question_bank(SECRET, 4)
    other = assessment.question_bank(OTHER, 4)
    for kind in bank:
        assert [q["question"] for q in bank[kind]] != [q["question"] for q in other[kind]], kind
        assert len({q["question"] for q in bank[kind]}) > 1, kind  # the variants of one kind differ
        assert all(q["answer"] and q["question"] for q in bank[kind])
    with pytest.raises(ValueError, match="variants must be a whole number"):
        assessment.question_bank(SECRET, 0)


WRONG_LIBRARY = {  # a changed library function per question kind: its answer must change with it
    "attention_weight": ("gpt_lesson.attention", "attention_weights", lambda real: lambda s: real(s) * 0.5),
    "causal_mask": ("gpt_lesson.attention", "causal_mask", lambda real: lambda T, *a, **k: real(T + 1)[:T, : T + 1]),
    "parameter_count": ("gpt_lesson.model", "count_parameters_by_part",
                        lambda real: lambda m: {k: v + 1 for k, v in real(m).items()}),
    "kv_cache_size": ("gpt_lesson.experiments", "kv_cache_bytes", lambda real: lambda *a, **k: real(*a, **k) + 1),
    "head_shapes": ("gpt_lesson.attention", "split_heads", lambda real: lambda x, n: real(x, n).unsqueeze(0)),
    "grad_accumulation": ("gpt_lesson.distributed", "grad_accum_steps_for",
                          lambda real: lambda *a, **k: real(*a, **k) + 1),
}


@pytest.mark.parametrize("kind", sorted(assessment.QUESTION_KINDS))
def test_question_bank_answers_are_computed_by_the_library(kind, monkeypatch):
    """Each answer changes when the library function it comes from does: it is computed, not written down."""
    import importlib

    make = assessment.QUESTION_KINDS[kind]
    honest = make(assessment.derive_rng(SECRET, "question", kind, "0"))
    module, function, wrong = WRONG_LIBRARY[kind]
    mod = importlib.import_module(module)
    monkeypatch.setattr(mod, function, wrong(getattr(mod, function)))
    changed = make(assessment.derive_rng(SECRET, "question", kind, "0"))
    assert changed["question"] == honest["question"] and changed["answer"] != honest["answer"]


def test_build_writes_the_question_bank_and_variants_only_into_the_teachers_folder(tmp_path):
    lessons = [REPO / "notebooks" / "02_attention.ipynb"]
    build_course(lessons, tmp_path / "course", secret=SECRET, questions=3)
    bank = json.loads((tmp_path / "course" / "question_bank" / "bank.json").read_text())
    assert bank == json.loads(json.dumps(assessment.question_bank(SECRET, 3)))
    answers = (tmp_path / "course" / "question_bank" / "answers.md").read_text()
    assert bank["kv_cache_size"][0]["answer"] in answers
    variants = json.loads((tmp_path / "course" / "grading" / "variants.json").read_text())
    assert set(variants["02_attention"]) == {"your-turn-1-check", "your-turn-2-check"}
    release_text = (tmp_path / "course" / "source" / "02_attention" / "02_attention.ipynb").read_text()
    assert bank["kv_cache_size"][0]["question"] not in release_text
    build_course(lessons, tmp_path / "plain")  # no secret: no variants, no bank, the public hidden cases
    assert not (tmp_path / "plain" / "question_bank").exists()
    cases = json.loads((tmp_path / "plain" / "grading" / "cases.json").read_text())
    assert cases["02_attention"] == {"your-turn-1-check#0": [{"hidden": True}], "your-turn-2-check#0": [{"hidden": True}]}


# ---------------------------------------------------------------------------------------------------
# Manual steps: the config, the roster, the weights


def test_an_edited_config_is_kept_unless_asked(tmp_path, capsys):
    lessons = [REPO / "notebooks" / "02_attention.ipynb"]
    out = tmp_path / "course"
    build_course(lessons, out)
    config = out / "nbgrader_config.py"
    config.write_text(config.read_text() + 'c.Exchange.root = "/srv/exchange"\n')
    edited = config.read_text()
    notes: list[str] = []
    build_course(lessons, out, notes=notes)
    assert config.read_text() == edited and (out / "nbgrader_config.py.new").is_file()
    assert any("kept your" in n for n in notes)
    build_course(lessons, out, overwrite_config=True, notes=notes)
    assert config.read_text() != edited and (out / "nbgrader_config.py.bak").read_text() == edited
    assert "https://" not in config.read_text() and "extra_template_basedirs" in config.read_text()
    macro = (out / "templates" / "feedback" / "mathjax.html.j2").read_text()
    assert 'src="{{ url }}"' in macro and "../../../mathjax/MathJax.js" in macro and "https://" not in macro


def test_roster_is_read_and_checked(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("id,first_name,last_name,email\nalice,Alice,Liddell,a@x.org\nbob,,,\n")
    assert assessment.read_roster(roster) == [
        {"id": "alice", "first_name": "Alice", "last_name": "Liddell", "email": "a@x.org"},
        {"id": "bob", "first_name": None, "last_name": None, "email": None}]
    for text, match in [("name\nalice\n", "one of them 'id'"), ("id\nalice\nalice\n", "appears twice"),
                        ("id\n../etc\n", "student id '../etc'"), ("id\n", "lists no student")]:
        roster.write_text(text)
        with pytest.raises(ValueError, match=match):
            assessment.read_roster(roster)
    with pytest.raises(ValueError, match="does not exist"):
        assessment.read_roster(tmp_path / "none.csv")


def test_plan_weights_come_from_the_teaching_guide(tmp_path):
    plan = assessment.plan_weights()
    assert [(p["name"], p["weight"]) for p in plan["parts"]] == [
        ("Homework", 50.0), ("Interview answers", 20.0), ("Oral exam", 30.0)]
    assert plan["parts"][0]["lessons"] == [f"{n:02d}" for n in range(1, 11)] and plan["parts"][1]["lessons"] == ["11"]
    assert plan["parts"][2]["lessons"] == [] and plan["bonus"] == {"12": "homework"}
    broken = tmp_path / "teaching.md"
    broken.write_text("## 2. Assessment plan\n\n| Part | Weight | What | How |\n|---|---|---|---|\n"
                      "| Homework | 60 % | lessons 01-10 | nbgrader |\n\n## 3. Next\n")
    with pytest.raises(ValueError, match="add up to 100 %"):
        assessment.plan_weights(broken)


# ---------------------------------------------------------------------------------------------------
# Released copies of every assignment, both editions, through nbgrader generate_assignment


def _nbgrader(course: Path, *args: str, timeout: float = 1800) -> str:
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def released_course(tmp_path_factory):
    """``get(edition)``: the course of every lesson of an edition ("" or "zh") with exercises, built with the
    secret and the project and put through ``nbgrader generate_assignment *``, once per edition for every test of
    this module that needs it (the build and the release of 15 assignments take minutes on 2 cores)."""
    built: dict[str, dict] = {}

    def get(edition: str) -> dict:
        if edition not in built:
            folder = REPO / "notebooks" / edition
            lessons = [p for p in sorted(folder.glob("[0-9]*.ipynb")) if find_exercises(nbformat.read(p, as_version=4))]
            course = tmp_path_factory.mktemp(f"released-{edition or 'en'}")
            summaries = build_course(lessons, course, secret=SECRET, project=True)
            log = _nbgrader(course, "generate_assignment", "*")  # every assignment in source/
            built[edition] = {"course": course, "lessons": lessons, "summaries": {s.name: s for s in summaries},
                              "log": log}
        return built[edition]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("edition", ["", "zh"])
def test_released_copies_hold_no_links_to_solutions(released_course, edition):
    built = released_course(edition)
    course, summaries = built["course"], built["summaries"]
    for s in summaries.values():
        release = course / "release" / s.name / f"{s.name}.ipynb"
        text = "\n".join(c.source for c in nbformat.read(release, as_version=4).cells)
        for pattern in LEAK_PATTERNS:
            assert not re.search(pattern, text, re.I), (s.name, pattern)
        assert "BEGIN SOLUTION" not in text and "hidden=True" not in text
    assert sorted(summaries) == sorted([p.stem for p in built["lessons"]] + ["project"])
    assert "checksum" not in built["log"].lower()
    # nbgrader took the project's task cells and lesson 11's answer cells, with the rubric's points, in both editions
    from nbgrader.api import Gradebook

    assessment.gradebook_path_ready()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        project = gb.find_notebook("project", "project")
        assert sorted(c.max_score for c in project.task_cells) == [3, 3, 4, 5, 5]
        assert gb.find_assignment("11_interview_questions").max_score == 18.0


# The Chinese course's whole round on lesson 02's variant: a right, a typical-wrong and a blank student, as
# tests/test_nbgrader.py grades the English course (which adds a hostile one, a roster and the exports).
ZH_ROUND = "02_attention"
ZH_STUDENTS = ("correct", "typical_wrong", "blank")


@pytest.fixture(scope="module")
def zh_graded(released_course, shakespeare_path):
    from tests.test_nbgrader import _plan

    built = released_course("zh")
    course, summary = built["course"], built["summaries"][ZH_ROUND]
    plan = _plan(REPO / "notebooks" / "zh" / f"{ZH_ROUND}.ipynb", summary)
    release = course / "release" / ZH_ROUND / f"{ZH_ROUND}.ipynb"
    for student in ZH_STUDENTS:
        nb = nbformat.read(release, as_version=4)
        cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
        for item in plan:
            if student != "blank":  # blank: handed in as released
                code = item["solution"] if student == "correct" else item["partly"]
                cells[item["answer"]].source = cells[item["answer"]].source.rstrip("\n") + "\n\n" + code.rstrip("\n") + "\n"
        folder = course / "submitted" / student / ZH_ROUND
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{ZH_ROUND}.ipynb")
    os.environ.setdefault("GPT_LESSON_DATA", str(shakespeare_path))
    log = _nbgrader(course, "autograde", ZH_ROUND) + _nbgrader(course, "generate_feedback", ZH_ROUND)
    return {"course": course, "summary": summary, "plan": plan, "log": log}


@pytest.mark.slow
def test_the_chinese_course_grades_a_variant(zh_graded):
    from nbgrader.api import Gradebook

    course, plan = zh_graded["course"], zh_graded["plan"]
    assert all(item["label"] and item["partly"] != item["solution"] for item in plan)  # every exercise is varied
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        scores = {s: gb.find_submission(ZH_ROUND, s).score for s in ZH_STUDENTS}
    assert scores == {"correct": zh_graded["summary"].points, "typical_wrong": 0.0, "blank": 0.0}
    assert zh_graded["summary"].points == 4
    log = zh_graded["log"]
    assert "checksum" not in log.lower() and "has changed" not in log and "cannot be converted" not in log


@pytest.mark.slow
def test_the_chinese_feedback_names_the_bug_in_chinese(zh_graded):
    import html

    from gpt_lesson.checks.verdicts import say
    from gpt_lesson.i18n import _, language

    course, plan = zh_graded["course"], zh_graded["plan"]
    page = lambda student: html.unescape(  # noqa: E731
        (course / "feedback" / student / ZH_ROUND / f"{ZH_ROUND}.html").read_text(encoding="utf-8"))
    wrong, blank, right = page("typical_wrong"), page("blank"), page("correct")
    with language("zh"):
        for item in plan:  # the classic bug and, on the variant, the lesson's own solution, each by its Chinese name
            assert f"还没通过（{_(item['label'])}）" in wrong, item["label"]
            assert f"not yet ({item['label']})" not in wrong
        attempted = _(checks.NOT_ATTEMPTED)
    assert attempted in blank and "还没通过" not in right and right.count("：通过") >= 2 * len(plan)
    # The graded cells' comments are Chinese too (the message catalogue), in every student's feedback.
    with language("zh"):
        comment = say(_(nbgrader_course.COURSE_TEXTS["graded_cell"]), number=1, points=2).split("\n")[0]
    assert comment.startswith("动手练习 1：计分") and all(comment in p for p in (wrong, blank, right))
    assert "Your turn 1: graded" not in wrong


# ---------------------------------------------------------------------------------------------------
# Work graded by hand: lesson 11's Q1-Q3 and the project, with the guide's rubrics; the plans' weights


def test_rubrics_come_from_the_teaching_guide(tmp_path):
    rubric = assessment.rubrics()
    assert sorted(rubric) == ["Q1", "Q2", "Q3", "project"]
    assert [sum(c["points"] for c in rubric[q]) for q in ("Q1", "Q2", "Q3")] == [4, 4, 4]
    assert rubric["Q1"][0]["criterion"] == "roles of query, key and value"
    assert [(c["criterion"], c["points"]) for c in rubric["project"]] == [
        ("Question and baseline", 3), ("Implementation is correct", 5), ("Evidence", 5), ("Interpretation", 4),
        ("Communication", 3)]
    guide = tmp_path / "teaching.md"
    guide.write_text("## 1. Glance\n\n## 2. Assessment plan\n\n- Q1 (x): roles (1); variance (2).\n\n## 3. Next\n")
    assert assessment.rubrics(guide) == {"Q1": [{"criterion": "roles", "points": 1},
                                                {"criterion": "variance", "points": 2}]}
    guide.write_text("## 1. Glance\n\n## 2. Assessment plan\n\n- Q1 (x): a long answer without any points.\n\n## 3.\n")
    with pytest.raises(ValueError, match="Q1's rubric must list criteria"):
        assessment.rubrics(guide)


def test_interview_answer_cells_carry_the_rubric_for_the_graders_only():
    from tests.test_nbgrader import student_version

    nb = _lesson("11_interview_questions")
    rubric = assessment.rubrics()
    source, graded = assignment_notebook(nb, "11_interview_questions", points_per_question=7, rubric=rubric)
    free = {g.grade_id: g.points for g in graded if g.kind == "free text"}
    assert free == {"q1-answer": 4, "q2-answer": 4, "q3-answer": 4}  # the rubric's points, not 7
    cells = {c.metadata["nbgrader"]["grade_id"]: c for c in source.cells}
    student = "\n".join(c.source for c in student_version(source).cells)
    for q in ("Q1", "Q2", "Q3"):
        teacher = cells[f"{q.lower()}-answer"].source
        assert cells[f"{q.lower()}-answer"].metadata["nbgrader"]["points"] == 4
        for c in rubric[q]:
            assert f"- ({c['points']}) {c['criterion']}" in teacher.split("### END SOLUTION")[0]
            assert c["criterion"] not in student
    assert nbgrader_course.RUBRIC_HEADING not in student
    heavier = {**rubric, "Q2": rubric["Q2"] + [{"criterion": "names the padding mask's shape", "points": 2}]}
    _, graded = assignment_notebook(nb, "11_interview_questions", rubric=heavier)
    assert {g.grade_id: g.points for g in graded if g.kind == "free text"}["q2-answer"] == 6


def test_the_project_is_built_from_the_rubric_into_the_teachers_folder_only(tmp_path):
    out = tmp_path / "course"
    summaries = build_course([REPO / "notebooks" / "02_attention.ipynb"], out, project=True)
    assert [s.name for s in summaries] == ["02_attention", "project"]
    nb = nbformat.read(out / "source" / "project" / "project.ipynb", as_version=4)
    rubric = assessment.rubrics()["project"]
    tasks = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("task")]
    assert [(c.metadata["nbgrader"]["points"], c.source.splitlines()[0]) for c in tasks] == [
        (c["points"], f"### {c['criterion']} ({c['points']} points)") for c in rubric]
    assert all(c.cell_type == "markdown" and not c.metadata["nbgrader"]["grade"] and c.metadata["nbgrader"]["locked"]
               for c in tasks)  # nbgrader's task cells: graded by hand, but not grade cells of their own
    assert summaries[1].points == 20 and all(g.kind == "free text" for g in summaries[1].graded)
    sheet = (out / "grading" / "rubric.md").read_text()
    for key in ("Q1", "Q2", "Q3"):
        assert all(c["criterion"] in sheet for c in assessment.rubrics()[key])
    assert all(c["full"] in sheet for c in rubric) and "The project (20 points)" in sheet
    # Nothing of it in the public notebooks.
    public = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "notebooks").rglob("*.ipynb"))
    assert nbgrader_course.RUBRIC_HEADING not in public and not any(c["full"] in public for c in rubric)
    assert "Project: one experiment" not in public
    with pytest.raises(ValueError, match="needs a rubric"):
        nbgrader_course.project_notebook([])
    plain = build_course([REPO / "notebooks" / "02_attention.ipynb"], tmp_path / "plain")
    assert [s.name for s in plain] == ["02_attention"] and not (tmp_path / "plain" / "source" / "project").exists()


# The project's criteria as the two guides name them (docs/teaching.md and docs/teaching.zh-CN.md, section 1).
PROJECT_CRITERIA_ZH = {"Question and baseline": "问题与基线", "Implementation is correct": "实现正确", "Evidence": "证据",
                       "Interpretation": "解释", "Communication": "表达"}


def _english_words(text: str) -> list[str]:
    """Runs of three or more English words outside code spans and formulas: English prose left in Chinese text."""
    text = re.sub(r"`[^`]*`|\$[^$]*\$|\b(?:nbgrader|formgrader|top-p|RMSNorm|GELU|SwiGLU|BPE|CPU|GPT|softmax)\b",
                  " ", text)
    return re.findall(r"[A-Za-z]{2,}(?:[ ,]+[A-Za-z]{2,}){2,}", text)


def test_the_chinese_course_has_the_chinese_rubrics_with_the_same_criteria_and_points(tmp_path):
    """Issue 27 item 10: lesson 11's rubric (teacher's copy), the project's brief and task cells and the graders'
    sheet of a course built from notebooks/zh are Chinese, from docs/teaching.zh-CN.md, with the criteria and
    points of the English course; the teacher's copy holds the Chinese model answer."""
    from tests.test_nbgrader import student_version

    en, zh = assessment.rubrics(), assessment.rubrics(assessment.TEACHING["zh"])
    assert sorted(zh) == sorted(en) == ["Q1", "Q2", "Q3", "project"]
    for key in en:
        assert [c["points"] for c in zh[key]] == [c["points"] for c in en[key]], key
        assert all(nbgrader_course._is_chinese(c["criterion"]) for c in zh[key]), key
    assert [PROJECT_CRITERIA_ZH[c["criterion"]] for c in en["project"]] == [c["criterion"] for c in zh["project"]]
    out = tmp_path / "course"
    summaries = build_course([REPO / "notebooks" / "zh" / "11_interview_questions.ipynb"], out, project=True)
    english = {s.name: s for s in build_course([REPO / "notebooks" / "11_interview_questions.ipynb"],
                                               tmp_path / "english", project=True)}
    for s in summaries:  # the same graded cells, with the same points, as the English course
        assert [(g.kind, g.points) for g in s.graded] == [(g.kind, g.points) for g in english[s.name].graded]
        assert s.name == "project" or [g.grade_id for g in s.graded] == [g.grade_id for g in english[s.name].graded]
    # Lesson 11: each answer cell holds the Chinese model answer and the Chinese rubric, for the graders only.
    source = nbformat.read(out / "source" / "11_interview_questions" / "11_interview_questions.ipynb", as_version=4)
    cells = {c.metadata["nbgrader"]["grade_id"]: c for c in source.cells}
    student = "\n".join(c.source for c in student_version(source).cells)
    for q in ("Q1", "Q2", "Q3"):
        teacher = cells[f"{q.lower()}-answer"].source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
        assert f"**批改用评分标准（{sum(c['points'] for c in zh[q])} 分）**" in teacher
        for c in zh[q]:
            assert f"- （{c['points']} 分）{c['criterion']}" in teacher and c["criterion"] not in student
        assert not any(c["criterion"] in teacher for c in en[q])
        answer = teacher.split("**批改用评分标准")[0]
        assert nbgrader_course._is_chinese(answer) and len(answer) > 300, answer[:200]  # the model answer, not a note
        assert not _english_words(answer), _english_words(answer)
    assert "批改用评分标准" not in student
    # The project: the brief, the summary and every task cell Chinese, one task cell per criterion with its points.
    project = nbformat.read(out / "source" / "project" / "project.ipynb", as_version=4)
    tasks = [c for c in project.cells if c.metadata.get("nbgrader", {}).get("task")]
    assert [(c.metadata["nbgrader"]["points"], c.source.splitlines()[0]) for c in tasks] == [
        (c["points"], f"### {c['criterion']}（{c['points']} 分）") for c in zh["project"]]
    for c, criterion in zip(tasks, zh["project"]):
        assert all(criterion[level] in c.source for level in ("full", "partial", "none"))
    for cell in project.cells:
        assert nbgrader_course._is_chinese(cell.source) and not _english_words(cell.source), cell.source[:200]
    assert project.cells[0].source.startswith("# 项目：") and "## 如何评分（20 分）" in project.cells[3].source
    # The graders' sheet.
    sheet = (out / "grading" / "rubric.md").read_text(encoding="utf-8")
    assert sheet.startswith("# 人工评分的评分标准") and "## 项目（20 分）" in sheet and "## 第 11 课 Q1（4 分）" in sheet
    for key in zh:
        assert all(f"- **{c['points']} 分**：{c['criterion']}" in sheet for c in zh[key])
        assert not any(c["criterion"] in sheet for c in en[key])
    assert not _english_words(sheet), _english_words(sheet)


def test_a_course_is_in_one_language(tmp_path):
    with pytest.raises(ValueError, match="a course is in one language.*'en': \\['02_attention.ipynb'\\]"):
        build_course([REPO / "notebooks" / "02_attention.ipynb", REPO / "notebooks" / "zh" / "03_causal_mask.ipynb"],
                     tmp_path / "course")
    assert not (tmp_path / "course").exists()  # refused before anything is written
    with pytest.raises(ValueError, match="lang must be one of \\['en', 'zh'\\], got 'fr'"):
        nbgrader_course.project_notebook(assessment.rubrics()["project"], lang="fr")
    with pytest.raises(ValueError, match="lang must be one of \\['en', 'zh'\\], got 'fr'"):
        assessment.rubric_markdown(assessment.rubrics(), "fr")


def test_the_plans_weights(tmp_path):
    project = assessment.plan_weights(plan="project")
    assert [(p["name"], p["weight"], p["lessons"][:1], p["assignments"]) for p in project["parts"]] == [
        ("Homework", 30.0, ["01"], []), ("Project", 50.0, [], ["project"]), ("Interview answers", 20.0, ["11"], [])]
    assert [p["weight"] for p in assessment.plan_weights(plan="exam")["parts"]] == [50.0, 20.0, 30.0]
    with pytest.raises(ValueError, match=r"no plan 'essay' in section 2 \(its plans: exam, project\)"):
        assessment.plan_weights(plan="essay")
    guide = tmp_path / "teaching.md"
    guide.write_text("## 2. Assessment plan\n\n### Plan `exam`\n\n| Part | Weight | What | How |\n|---|---|---|---|\n"
                     "| Homework | 100 % | lessons 01-10 | nbgrader |\n\n### Plan `project`\n\n"
                     "| Part | Weight | What | How |\n|---|---|---|---|\n| Homework | 40 % | lessons 01-10 | nbgrader |\n\n"
                     "## 3. Next\n")
    assert assessment.plan_weights(guide)["parts"][0]["weight"] == 100.0
    with pytest.raises(ValueError, match="the project plan's weights must add up to 100 %"):
        assessment.plan_weights(guide, plan="project")


@pytest.mark.slow
def test_grades_export_applies_the_chosen_plan(released_course, tmp_path):
    """nbgrader takes the project's task cells and lesson 11's rubric cells (generate_assignment fills the
    gradebook from them); with scores entered as the formgrader stores them, --plan weights the parts. The
    gradebook is a copy of the released English course's (every lesson and the project, built once)."""
    import shutil

    course = tmp_path / "course"
    course.mkdir()
    shutil.copy2(released_course("")["course"] / "gradebook.db", course / "gradebook.db")
    from nbgrader.api import Gradebook

    assessment.gradebook_path_ready()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        max_scores = {a.name: a.max_score for a in gb.assignments}
        assert {n: max_scores[n] for n in ("02_attention", "11_interview_questions", "project")} == {
            "02_attention": 4.0, "11_interview_questions": 18.0, "project": 20.0}
        assert len(gb.find_notebook("project", "project").task_cells) == 5
        gb.update_or_create_student("ada")
        gb.update_or_create_student("bo")  # hands nothing in
        manual_scores = {"11_interview_questions": {"q1-answer": 4, "q2-answer": 2, "q3-answer": 0},
                         "project": {"rubric-1-question-and-baseline": 3, "rubric-2-implementation-is-correct": 5,
                                     "rubric-3-evidence": 2, "rubric-4-interpretation": 4, "rubric-5-communication": 1}}
        for name in max_scores:  # ada hands in everything
            manual = manual_scores.get(name, {})
            gb.add_submission(name, "ada")
            for grade in gb.find_submission(name, "ada").notebooks[0].grades:
                # autograded cells: full marks; graded by hand: the rubric points given above
                grade.manual_score = manual.get(grade.name, grade.max_score)
            gb.db.commit()
        assert [gb.find_submission(n, "ada").score for n in ("02_attention", "11_interview_questions", "project")] == [
            4.0, 12.0, 15.0]
    rows = {}
    for plan in ("exam", "project"):
        out = tmp_path / f"{plan}.csv"
        assert nbgrader_course.main(["--out", str(course), "--export-grades", str(out), "--plan", plan]) == 0
        with open(out, newline="") as f:
            rows[plan] = {r["student_id"]: r for r in csv.DictReader(f)}
    # exam: homework 50 % x 100 % + interview 20 % x 12/18; the oral exam is yours (30 % still to grade)
    assert rows["exam"]["ada"]["weighted total (of 100)"] == "63.3" and rows["exam"]["ada"]["Oral exam (%)"] == ""
    assert rows["exam"]["ada"]["weight graded so far (%)"] == "70" and "Project (%)" not in rows["exam"]["ada"]
    # project: homework 30 % x 100 % + project 50 % x 15/20 + interview 20 % x 12/18
    ada = rows["project"]["ada"]
    assert (ada["Homework (%)"], ada["Project (%)"], ada["Interview answers (%)"]) == ("100.0", "75.0", "66.7")
    assert ada["weighted total (of 100)"] == "80.8" and ada["weight graded so far (%)"] == "100"
    assert rows["project"]["bo"]["weighted total (of 100)"] == "0.0"
