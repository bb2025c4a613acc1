"""Homework with nbgrader: the course folder built from the lessons, and a whole grading round.

The structure tests build every lesson's assignment and small synthetic ones (both exercise layouts,
an interview question, broken exercises). The end-to-end test builds the course folder for two lessons as
the guide says (a teacher's secret, so lesson 02's exercises are variants; a roster; MathJax bundled), runs
``nbgrader generate_assignment``, hands in a correct, a partly wrong (a classic bug, and on the variant the
public lesson's solution), an untouched and a hostile copy, runs ``nbgrader autograde``,
``generate_feedback`` and ``export``, and checks the scores in the gradebook and in the CSVs (nbgrader's
and the weighted one), the diagnoses in the feedback, and that the grader's own cases ran.
"""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from tools import nbgrader_course
from tools.exercises import find_exercises
from tools.nbgrader_course import assignment_notebook, build_course, check_source

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts" / "nbgrader"
LESSONS = [p for p in sorted((REPO / "notebooks").glob("*.ipynb"))
           if find_exercises(nbformat.read(p, as_version=4))]
E2E_LESSONS = ["01_tokens_and_embeddings", "02_attention"]
SOLUTION_RE = re.compile(r"### BEGIN SOLUTION\n.*?### END SOLUTION\n?", re.S)
HIDDEN_RE = re.compile(r"### BEGIN HIDDEN TESTS\n.*?### END HIDDEN TESTS\n?", re.S)


def _grading(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def student_version(nb):
    """What nbgrader's ClearSolutions and ClearHiddenTests leave (with this course's empty code stub)."""
    out = nbformat.from_dict(nbformat.reads(nbformat.writes(nb), as_version=4))
    for cell in out.cells:
        if _grading(cell).get("solution"):
            cell.source = SOLUTION_RE.sub("" if cell.cell_type == "code" else "YOUR ANSWER HERE\n", cell.source)
        cell.source = HIDDEN_RE.sub("", cell.source)
    return out


# ---------------------------------------------------------------------------------------------------
# Every lesson's assignment


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_assignment_structure(lesson):
    nb = nbformat.read(lesson, as_version=4)
    exercises = find_exercises(nb)
    source, graded = assignment_notebook(nb, lesson.stem)
    nbformat.validate(source)
    cells = source.cells
    ids = [_grading(c)["grade_id"] for c in cells]
    assert len(ids) == len(set(ids)) and all(_grading(c) for c in cells)
    answers = [c for c in cells if _grading(c)["solution"] and c.cell_type == "code"]
    tests = [c for c in cells if _grading(c)["grade"] and not _grading(c)["solution"]]
    assert len(answers) == len(tests) == len(exercises)
    for ex, answer, test in zip(exercises, answers, tests):
        assert answer.source.count("### BEGIN SOLUTION") == 1 and answer.source.rstrip().endswith("### END SOLUTION")
        assert not _grading(answer)["locked"] and _grading(test)["locked"] and _grading(test)["points"] == 2
        assert "_checks = _fresh_checks()" in test.source  # the checks come fresh, not by a name in the notebook
        for call in ex.checks(nb):
            name = call.split("(")[0]
            assert re.search(rf"^_verdict = _checks\.{name}\(.*strict=True\)$", test.source, re.M)
            # The grader's own cases (here the check's hidden=True ones) come from the course folder's
            # grading/cases.json, not from a hidden-test block: the cell is the same in both versions.
            assert re.search(rf"^for _case in _checks\.variants\.grading_cases\('{lesson.stem}', "
                             rf"'your-turn-{ex.number}-check#\d'\):.*\n    _verdict = _checks\.{name}\(.*strict=True, "
                             rf"\*\*_case\)$", test.source, re.M)
            assert "BEGIN HIDDEN" not in test.source
            assert not re.search(rf"^{name}\(", test.source, re.M)
        # The solution's code is in the answer cell, and only there.
        for line in ex.solution(nb).splitlines():
            if len(line.strip()) > 25 and "return" in line:
                assert line in answer.source
                assert not any(line in c.source for c in cells if c is not answer)
    # Everything else is read-only; no speaker notes, no solution or answer blocks are left.
    for c in cells:
        g = _grading(c)
        if not g["solution"] and not g["grade"]:
            assert g["locked"] and c.metadata["editable"] is False
        assert not re.search(r"<summary>(<[^>]+>)*\s*(solution|model answer|answer|参考答案)", c.source, re.I)
        assert c.metadata.get("slideshow", {}).get("slide_type") != "notes"
    assert sum(g.points for g in graded) == 2 * len(exercises) + 4 * sum(g.kind == "free text" for g in graded)
    # The student version keeps the stub of each exercise and no hidden case.
    student = student_version(source)
    for c in student.cells:
        assert "hidden=True" not in c.source and "### BEGIN" not in c.source
    student_answers = [c for c in student.cells if _grading(c)["solution"] and c.cell_type == "code"]
    assert len(student_answers) == len(exercises)
    for answer in student_answers:
        assert "raise NotImplementedError" in answer.source or "return None" in answer.source, answer.source


def test_interview_questions_become_free_text_answers():
    lesson = REPO / "notebooks" / "11_interview_questions.ipynb"
    nb = nbformat.read(lesson, as_version=4)
    questions = [m.group(1) for c in nb.cells if c.cell_type == "markdown" for m in nbgrader_course.QUESTION_RE.finditer(c.source)]
    assert questions == ["Q1", "Q2", "Q3"]
    source, graded = assignment_notebook(nb, lesson.stem)
    free = [g for g in graded if g.kind == "free text"]
    assert [g.grade_id for g in free] == ["q1-answer", "q2-answer", "q3-answer"] and all(g.points == 4 for g in free)
    cells = {c.metadata["nbgrader"]["grade_id"]: c for c in source.cells}
    for q in ("q1", "q2", "q3"):
        cell = cells[f"{q}-answer"]
        assert cell.cell_type == "markdown" and _grading(cell)["solution"] and _grading(cell)["grade"]
    # The teacher's version holds the English model answers; the student's has none of it.
    assert "variance d_k" in cells["q1-answer"].source or "d_k" in cells["q1-answer"].source
    student = student_version(source)
    text = "\n".join(c.source for c in student.cells)
    assert "Model answer" not in text.replace("Model answer removed", "") and "参考答案（" not in text
    assert text.count("YOUR ANSWER HERE") == 3
    # Each answer cell comes right after its question's slide (and its "think first" text).
    order = [c.metadata["nbgrader"]["grade_id"] for c in source.cells]
    for q in ("q1", "q2", "q3"):
        heading = next(i for i, c in enumerate(source.cells) if re.match(rf"## {q.upper()}\b", c.source))
        assert heading < order.index(f"{q}-answer") <= heading + 2


# ---------------------------------------------------------------------------------------------------
# Small notebooks


def _lesson(*cells) -> nbformat.NotebookNode:
    nb = new_notebook(cells=[new_markdown_cell("# 99 · Tiny"), new_markdown_cell("## What you will learn"),
                             new_code_cell("import torch"), new_markdown_cell("## 1. Section"), *cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


SOLUTION = "<details><summary>Solution</summary>\n\n```python\ndef f(q, k):\n    return q @ k.transpose(-2, -1) / q.size(-1) ** 0.5\n```\n\nWhy it works.\n</details>"


def test_both_exercise_layouts_give_the_same_assignment():
    stub = "def f(q, k):\n    # your code\n    raise NotImplementedError"
    new_layout = _lesson(new_markdown_cell("### Your turn 1: scores"), new_code_cell(stub),
                         new_code_cell("result = check_attention_scores(f)"),
                         new_markdown_cell("<details><summary>Hint</summary>\n\nTranspose k.\n</details>"),
                         new_markdown_cell(SOLUTION))
    old_layout = _lesson(new_markdown_cell("### Your turn 1: scores"), new_code_cell(stub + "\n\n\nresult = check_attention_scores(f)"),
                         new_markdown_cell("<details><summary>Hint</summary>\n\nTranspose k.\n</details>"),
                         new_markdown_cell(SOLUTION))
    a, graded_a = assignment_notebook(new_layout, "99_tiny")
    b, graded_b = assignment_notebook(old_layout, "99_tiny")
    sources = lambda nb: [(c.cell_type, c.source) for c in nb.cells]  # noqa: E731
    assert sources(a) == sources(b)
    assert [(g.grade_id, g.points, g.checks) for g in graded_a] == [("your-turn-1-check", 2, ["check_attention_scores(f)"])]
    answer = next(c for c in a.cells if _grading(c).get("solution"))
    assert answer.source == (stub + "\n### BEGIN SOLUTION\ndef f(q, k):\n    return q @ k.transpose(-2, -1) / "
                             "q.size(-1) ** 0.5\n### END SOLUTION")
    assert "Why it works" not in "\n".join(c.source for c in a.cells)  # the solution's explanation too
    assert any("Transpose k." in c.source for c in a.cells)  # hints stay


def test_several_stub_cells_make_one_answer_cell_and_points_are_configurable():
    nb = _lesson(new_markdown_cell("### Your turn 1: scores"), new_code_cell("data = torch.ones(2)"),
                 new_code_cell("def f(q, k):\n    raise NotImplementedError"),
                 new_code_cell("check_attention_scores(f)\ncheck_softmax_weights(g)"), new_markdown_cell(SOLUTION))
    source, graded = assignment_notebook(nb, "99_tiny", points_per_check=5)
    answers = [c for c in source.cells if _grading(c).get("solution")]
    assert len(answers) == 1 and answers[0].source.startswith("data = torch.ones(2)\n\ndef f(q, k):")
    test = next(c for c in source.cells if _grading(c).get("grade"))
    assert _grading(test)["points"] == 5 and graded[0].points == 5
    assert "_verdict = _checks.check_attention_scores(f, strict=True)\n" in test.source
    assert "_verdict = _checks.check_softmax_weights(g, strict=True)\n" in test.source
    assert "    _verdict = _checks.check_attention_scores(f, strict=True, **_case)" in test.source
    assert "    _verdict = _checks.check_softmax_weights(g, strict=True, **_case)" in test.source
    assert graded[0].cases == {"your-turn-1-check#0": [{"hidden": True}], "your-turn-1-check#1": [{"hidden": True}]}


def test_check_source(monkeypatch):
    assert check_source("check_block(my_block)", hidden=False) == "check_block(my_block, strict=True)"
    assert check_source("check_block(my_block)", hidden=True, module="_checks") == \
        "_checks.check_block(my_block, strict=True, hidden=True)"
    assert check_source("check_softmax_weights(f, without='softmax')", hidden=False, module="_checks") == \
        "_checks.check_softmax_weights(f, without='softmax', strict=True)"
    assert check_source("check_tokenizer(e, d, text[:10], chars=chars, strict=False)", hidden=True) == \
        "check_tokenizer(e, d, text[:10], chars=chars, strict=True, hidden=True)"
    from gpt_lesson import checks

    monkeypatch.setattr(checks, "check_old_style", lambda fn: None, raising=False)
    assert check_source("check_old_style(f)", hidden=False) == \
        "_verdict = check_old_style(f)\nassert _verdict.passed, _verdict.message"
    assert check_source("check_old_style(f)", hidden=True) == ""
    with pytest.raises(ValueError, match="check_nothing is not a check of gpt_lesson.checks"):
        check_source("check_nothing(f)", hidden=False)
    with pytest.raises(ValueError, match="not a check call"):
        check_source("x.check_block(f)", hidden=False)


def test_broken_exercises_and_arguments_are_refused(tmp_path, capsys):
    no_check = _lesson(new_markdown_cell("### Your turn 1: scores"), new_code_cell("def f(): pass"),
                       new_markdown_cell(SOLUTION))
    with pytest.raises(ValueError, match="Your turn 1 .'scores'. has no cell that calls a check_\\* function"):
        assignment_notebook(no_check, "99_tiny")
    no_solution = _lesson(new_markdown_cell("### Your turn 1: scores"), new_code_cell("check_block(f)"))
    with pytest.raises(ValueError, match="has no ```python solution block"):
        assignment_notebook(no_solution, "99_tiny")
    fine = _lesson(new_markdown_cell("### Your turn 1: scores"), new_code_cell("check_block(f)"), new_markdown_cell(SOLUTION))
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="points_per_check must be a positive int"):
            assignment_notebook(fine, "99_tiny", points_per_check=bad)
    with pytest.raises(ValueError, match="course_id must be"):
        build_course([], tmp_path, course_id="my course")
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    nbformat.write(_lesson(new_markdown_cell("no exercise here")), nbs / "98_none.ipynb")
    assert nbgrader_course.main(["--notebooks", str(nbs), "--out", str(tmp_path / "c")]) == 2
    assert "none of the notebooks has an exercise" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        nbgrader_course.main(["--notebooks", str(nbs), "--only", "97_missing"])
    with pytest.raises(SystemExit):
        nbgrader_course.main(["--notebooks", str(nbs), "--points-per-check", "0"])


def test_build_course_writes_config_sources_and_figures(tmp_path, capsys):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "curve.png").write_bytes(b"\x89PNG fake")
    nb = _lesson(new_markdown_cell("![curve](../figures/curve.png)"), new_markdown_cell("### Your turn 1: scores"),
                 new_code_cell("def f(q, k):\n    raise NotImplementedError"),
                 new_code_cell("check_attention_scores(f)"), new_markdown_cell(SOLUTION))
    nbformat.write(nb, nbs / "99_tiny.ipynb")
    nbformat.write(_lesson(), nbs / "98_no_exercise.ipynb")
    out = tmp_path / "course"
    # MathJax is bundled (from npm, seconds) in the grading round below; here the folder is built without it
    assert nbgrader_course.main(["--notebooks", str(nbs), "--out", str(out), "--course-id", "ml101", "--no-mathjax"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"99_tiny\s+1\s+0\s+2", printed) and "98_no_exercise" not in printed
    config = (out / "nbgrader_config.py").read_text()
    assert 'c.CourseDirectory.course_id = "ml101"' in config and 'c.ClearSolutions.code_stub = {"python": ""}' in config
    compile(config, "nbgrader_config.py", "exec")
    source = nbformat.read(out / "source" / "99_tiny" / "99_tiny.ipynb", as_version=4)
    assert any("![curve](figures/curve.png)" in c.source for c in source.cells)
    assert (out / "source" / "99_tiny" / "figures" / "curve.png").read_bytes() == b"\x89PNG fake"
    assert sorted(p.name for p in (out / "source").iterdir()) == ["99_tiny"]
    assert not (out / "mathjax").exists()  # --no-mathjax


# ---------------------------------------------------------------------------------------------------
# A whole grading round with nbgrader

# A classic mistake per check, as the student would type it ({fn}: the function the check is given), and
# the diagnosis label the check must name for it.
BUGS = {
    "check_attention_scores": ("def {fn}(q, k):\n    return q @ k.transpose(-2, -1)\n", "NO_SCALING"),
    "check_softmax_weights": ("def {fn}(scores):\n    return scores.softmax(dim=-2)\n", "SOFTMAX_WRONG_DIM"),
    "check_embeddings": ("def {fn}(idx, tok_table, pos_table):\n    return tok_table(idx)\n",
                         "MISSING_POSITION_EMBEDDING"),
    "check_causal_attention": ("def {fn}(q, k, v):\n    T = q.size(-2)\n    s = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5\n"
                               "    s = s.masked_fill(torch.ones(T, T).tril() == 0, 0.0)\n    return s.softmax(dim=-1) @ v\n",
                               "MASK_WITH_ZERO"),
}
# Who hands in what. "untouched" is handed in as released (blank); "absent" is on the roster and hands in nothing.
# The untouched path is the same code in every lesson, so one lesson has it.
STUDENTS = {"01_tokens_and_embeddings": ("correct", "partly_wrong", "hostile"),
            "02_attention": ("correct", "partly_wrong", "untouched", "hostile")}
ROSTER = {"correct": ("Ada", "Right"), "partly_wrong": ("Bo", "Partly"), "untouched": ("Cy", "Blank"),
          "hostile": ("Eve", "Hostile"), "absent": ("Di", "Absent")}
# The course is built with a teacher's secret: lesson 02's exercises become variants (tools/assessment.py),
# lesson 01's have none and stay the lesson's.
SECRET = "teacher-secret-1"
# Issue 28 item 6: answers that try to get past the graded checks, one per exercise (in order), and what the
# feedback must say about each. Each scores 0.
HOSTILE = {
    "01_tokens_and_embeddings": [
        ("class _Agreeable(str):\n    __eq__ = lambda self, other: True\n    __ne__ = lambda self, other: False\n"
         "    __hash__ = str.__hash__\n\n\ndef my_encode(s):\n    return [chars.index(c) for c in s]\n\n\n"
         "def my_decode(ids):\n    return _Agreeable('anything')\n", "decode did not return a string"),
        ("class _Yes(torch.Tensor):\n    @classmethod\n    def __torch_function__(cls, func, types, args=(), "
         "kwargs=None):\n        if func in (torch.allclose, torch.equal):\n            return True\n"
         "        return super().__torch_function__(func, types, args, kwargs or {})\n\n\n"
         "def embed(idx, tok_table, pos_table):\n    return tok_table(idx).as_subclass(_Yes)\n",
         "missing position embedding"),
        ("def embed_one_hot(idx, tok_table, pos_table):\n    while True:\n        pass\n", "did not finish in time"),
    ],
    "02_attention": [
        ("def my_scores(q, k):\n    return q @ k.transpose(-2, -1)\n\n\ncheck_attention_scores = lambda *a, **k: None\n",
         "not yet (no scaling)"),
        ("import gpt_lesson.attention\n\n\ndef my_weights(scores):\n    return scores.softmax(dim=-2)\n\n\n"
         "gpt_lesson.attention.attention_weights = my_weights\n", "the check or the library was replaced"),
    ],
}


def _nbgrader(course: Path, *args: str, timeout: float = 1200) -> str:
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "GPT_LESSON_CHECK_TIMEOUT": "3"}  # the hostile student's endless loop is stopped after 3 s
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc.stdout + proc.stderr


def _plan(lesson: Path, summary) -> list[dict]:
    """Per exercise: its answer cell's grade_id, the correct code (the variant's, in a varied exercise), what
    the partly wrong student hands in and the diagnosis it gets (None: correct). The partly wrong student has
    the first exercise whose check has a known classic mistake wrong with that bug; in a varied exercise the
    others get the public lesson's solution (the typical mistake on a variant), elsewhere the right answer."""
    from gpt_lesson import checks

    nb = nbformat.read(lesson, as_version=4)
    plan, bug_used = [], False
    for i, (ex, g) in enumerate(zip(find_exercises(nb), summary.graded)):
        call = ex.checks(nb)[0]
        name, fn = re.match(r"(\w+)\((\w+)", call).groups()
        hostile, says = HOSTILE[lesson.stem][i]
        public = nbgrader_course._solution_code(ex, nb)
        variant = g.variants[0] if g.variants else None
        item = {"answer": f"your-turn-{ex.number}-answer", "check": f"your-turn-{ex.number}-check",
                "solution": variant.solution if variant else public, "partly": variant and public, "label": None,
                "bug": None, "hostile": hostile, "says": says}
        if variant:
            item["label"] = {"check_variant_scores": checks.LESSON_SCALE,
                             "check_variant_softmax": checks.TEMPERATURE_IGNORED,
                             "check_variant_window": checks.WINDOW_IGNORED}[variant.check]
        if not bug_used and name in BUGS:
            template, label = BUGS[name]
            item["bug"] = item["partly"] = template.format(fn=fn)
            item["label"] = getattr(checks, label)
            bug_used = True
        item["partly"] = item["partly"] or item["solution"]
        plan.append(item)
    assert bug_used, f"{lesson.stem}: no exercise with a known classic mistake ({sorted(BUGS)})"
    return plan


@pytest.fixture(scope="module")
def graded(tmp_path_factory, shakespeare_path):
    lessons = [REPO / "notebooks" / f"{name}.ipynb" for name in E2E_LESSONS]
    course = tmp_path_factory.mktemp("course")
    roster = course.parent / "roster.csv"
    roster.write_text("id,first_name,last_name,email\n" + "".join(f"{s},{f},{last},\n" for s, (f, last) in ROSTER.items()))
    started = time.perf_counter()
    # As the guide says: build with the secret and the roster (MathJax bundled), then again (the same course):
    # the second build gives what each assignment grades.
    assert nbgrader_course.main(["--notebooks", str(REPO / "notebooks"), "--out", str(course), "--only",
                                 *E2E_LESSONS, "--secret-seed", SECRET, "--roster", str(roster)]) == 0
    summaries = {s.name: s for s in build_course(lessons, course, secret=SECRET.encode())}
    times = {"build": time.perf_counter() - started}
    os.environ.setdefault("GPT_LESSON_DATA", str(shakespeare_path))
    t = time.perf_counter()
    logs = [_nbgrader(course, "generate_assignment", "*")]
    times["generate"] = time.perf_counter() - t
    plans = {}
    for name in E2E_LESSONS:
        release = course / "release" / name / f"{name}.ipynb"
        plans[name] = _plan(REPO / "notebooks" / f"{name}.ipynb", summaries[name])
        for student in STUDENTS[name]:
            nb = nbformat.read(release, as_version=4)
            cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
            for item in plans[name]:
                cell = cells[item["answer"]]
                stub = cell.source.rstrip("\n")
                if student != "untouched":
                    cell.source = stub + "\n\n" + item[{"correct": "solution", "partly_wrong": "partly",
                                                        "hostile": "hostile"}[student]].rstrip("\n") + "\n"
            folder = course / "submitted" / student / name
            folder.mkdir(parents=True)
            nbformat.write(nb, folder / f"{name}.ipynb")
    t = time.perf_counter()
    logs.append(_nbgrader(course, "autograde", "*"))
    times[f"autograde ({sum(len(v) for v in STUDENTS.values())} submissions)"] = time.perf_counter() - t
    logs.append(_nbgrader(course, "generate_feedback", "*"))
    _nbgrader(course, "export")
    times["total"] = time.perf_counter() - started
    print("\nnbgrader round: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
    return {"course": course, "summaries": summaries, "plans": plans, "log": "\n".join(logs)}


def _expected(graded, name: str, student: str) -> float:
    points = {g.grade_id: g.points for g in graded["summaries"][name].graded}
    if student not in STUDENTS[name] or student in ("untouched", "hostile"):
        return 0.0
    if student == "correct":
        return float(sum(points.values()))
    return float(sum(points[item["check"]] for item in graded["plans"][name] if item["partly"] == item["solution"]))


@pytest.mark.slow
def test_scores_in_the_gradebook(graded):
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{graded['course'] / 'gradebook.db'}") as gb:
        assert sorted(s.id for s in gb.students) == sorted(ROSTER)
        assert gb.find_student("correct").last_name == "Right"  # the roster's names
        for name in E2E_LESSONS:
            total = graded["summaries"][name].points
            for student in ROSTER:
                if student not in STUDENTS[name]:
                    with pytest.raises(MissingEntry):
                        gb.find_submission(name, student)
                    continue
                sub = gb.find_submission(name, student)
                assert (sub.score, sub.max_score) == (_expected(graded, name, student), total), (name, student)
                for item in graded["plans"][name]:
                    grade = gb.find_grade(item["check"], name, name, student)
                    full = student == "correct" or (student == "partly_wrong" and item["partly"] == item["solution"])
                    assert student != "hostile" or not full
                    assert grade.score == (grade.max_score if full else 0.0), (name, student, item["check"])
    assert _expected(graded, "01_tokens_and_embeddings", "partly_wrong") == 4.0  # 4 of 6 points
    # On the variant, the public lesson's solution scores nothing: the partly wrong student's 02 is all wrong.
    assert _expected(graded, "02_attention", "partly_wrong") == 0.0


@pytest.mark.slow
def test_nbgrader_raises_no_alarm(graded):
    """Issue 29: no "Attribute 'checksum' for cell ... has changed!" (the test cells are the same in both versions)
    and no "cannot be converted to a float" (no graded cell leaves a value nbgrader reads as a partial score)."""
    log = graded["log"]
    assert "checksum" not in log.lower(), [line for line in log.splitlines() if "checksum" in line.lower()][:3]
    assert "has changed" not in log and "cannot be converted" not in log
    # What else nbgrader and its kernels warn about has nothing to do with the cells: the kernel's TCP
    # transport, and the lessons' figures without alt text (nbconvert's accessibility check of the feedback).
    others = [line for line in log.splitlines() if "WARNING" in line and "Kernel is running over TCP" not in line
              and "Alternative text is missing" not in line]
    assert not others, others[:5]


@pytest.mark.slow
def test_scores_in_the_exported_csv(graded):
    with open(graded["course"] / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    got = {(r["assignment"], r["student_id"]): (float(r["score"]), float(r["max_score"])) for r in rows}
    assert got == {(name, student): (_expected(graded, name, student), float(graded["summaries"][name].points))
                   for name in E2E_LESSONS for student in ROSTER}


@pytest.mark.slow
def test_weighted_grades_export(graded, tmp_path):
    """--export-grades with the plan's weights (docs/teaching.md section 2), one row per student of the roster."""
    out = tmp_path / "weighted.csv"
    assert nbgrader_course.main(["--out", str(graded["course"]), "--export-grades", str(out)]) == 0
    with open(out, newline="") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    assert sorted(rows) == sorted(ROSTER) and rows["correct"]["last_name"] == "Right"
    homework = {s: sum(_expected(graded, n, s) for n in E2E_LESSONS) / sum(graded["summaries"][n].points
                                                                          for n in E2E_LESSONS) for s in ROSTER}
    assert homework["correct"] == 1.0 and homework["partly_wrong"] == 0.4 and homework["absent"] == 0.0
    for student, share in homework.items():
        assert rows[student]["Homework (%)"] == f"{100 * share:.1f}"
        assert rows[student]["weighted total (of 100)"] == f"{50 * share:.1f}"  # homework weighs 50 %
        assert rows[student]["Oral exam (%)"] == "" and rows[student]["weight graded so far (%)"] == "50"


@pytest.mark.slow
def test_feedback_names_the_bug_and_hidden_cases_ran(graded):
    import html

    course = graded["course"]
    assert (course / "mathjax" / "MathJax.js").is_file()
    for name in E2E_LESSONS:
        page = html.unescape((course / "feedback" / "partly_wrong" / name / f"{name}.html").read_text(encoding="utf-8"))
        for item in graded["plans"][name]:  # the bug by name; on the variant, the lesson's task by name
            if item["label"] and item["partly"] != item["solution"]:
                assert f"not yet ({item['label']})" in page, (name, item["label"])
        assert "Likely bug" in page
        if "untouched" in STUDENTS[name]:
            untouched = html.unescape((course / "feedback" / "untouched" / name / f"{name}.html").read_text(encoding="utf-8"))
            assert "not attempted yet" in untouched
        hostile = html.unescape((course / "feedback" / "hostile" / name / f"{name}.html").read_text(encoding="utf-8"))
        for item in graded["plans"][name]:  # every attempt on the graded checks is named in the feedback
            assert item["says"] in hostile, (name, item["says"])
        # The graded notebooks hold the grader's own cases (the student's copy did not), and they ran.
        graded_nb = nbformat.read(course / "autograded" / "correct" / name / f"{name}.ipynb", as_version=4)
        tests = [c for c in graded_nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
        assert tests and all("grading_cases(" in c.source for c in tests)
        for c in tests:  # the visible run and the grader's run both passed, and no value was read as a score
            printed = "".join(o.get("text", "") for o in c.outputs if o.output_type == "stream")
            visible = re.findall(r"^_verdict = _checks\.check_\w+\(.*strict=True\)$", c.source, re.M)
            assert visible and printed.count(": passed.") == 2 * len(visible), printed
            assert not [o for o in c.outputs if o.output_type == "execute_result"]
        released = (course / "release" / name / f"{name}.ipynb").read_text(encoding="utf-8")
        assert "hidden=True" not in released and "BEGIN SOLUTION" not in released
        # No feedback page loads a remote script or style sheet; MathJax comes from the course folder.
        for student in STUDENTS[name]:
            text = (course / "feedback" / student / name / f"{name}.html").read_text(encoding="utf-8")
            sources = re.findall(r"<script[^>]*\bsrc=[\"']([^\"']+)", text) + re.findall(
                r"<link[^>]*\bhref=[\"']([^\"']+)", text)
            assert sources and not [s for s in sources if re.match(r"(https?:)?//", s)], sources
            assert "../../../mathjax/MathJax.js" in text
    # The variant's checks graded lesson 02, with the variant's own inputs; lesson 01 kept the lesson's checks.
    variants = json.loads((course / "grading" / "variants.json").read_text())
    assert set(variants) == {"02_attention", "01_tokens_and_embeddings"} and variants["01_tokens_and_embeddings"] == {}
    source = (course / "source" / "02_attention" / "02_attention.ipynb").read_text(encoding="utf-8")
    assert "_checks.check_variant_scores(" in source and "_checks.check_variant_softmax(" in source


@pytest.mark.slow
@pytest.mark.browser
def test_feedback_screenshot(graded):
    """The partly wrong student's feedback where the check names the bug: test-artifacts/nbgrader/feedback.png."""
    from tools.slide_metrics import CHROMIUM, open_browser

    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing")
    name = E2E_LESSONS[-1]
    bug = next(item for item in graded["plans"][name] if item["bug"])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with open_browser(bare_fonts=False) as (ctx, _):
        page = ctx.new_page()
        page.set_viewport_size({"width": 1100, "height": 760})
        page.goto((graded["course"] / "feedback" / "partly_wrong" / name / f"{name}.html").as_uri())
        text = page.get_by_text(f"not yet ({bug['label']})").first
        text.scroll_into_view_if_needed()
        page.evaluate("(y) => window.scrollBy(0, y - 260)", text.bounding_box()["y"])
        page.wait_for_timeout(300)
        page.screenshot(path=str(ARTIFACTS / "feedback.png"))
    assert (ARTIFACTS / "feedback.png").stat().st_size > 20_000


# ---------------------------------------------------------------------------------------------------
# Issue 28 item 5: the tool never removes anything outside the folder it owns


def _tiny_lesson_file(folder: Path, name: str) -> Path:
    nb = _lesson(new_markdown_cell("### Your turn 1: scores"), new_code_cell("def f(q, k):\n    raise NotImplementedError"),
                 new_code_cell("check_attention_scores(f)"), new_markdown_cell(SOLUTION))
    path = folder / name
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize("name", ["...ipynb", "..ipynb", ".ipynb", ". .ipynb", " 02_x.ipynb", "02 x.ipynb",
                                  "-rf.ipynb", "02_x.v2.ipynb"])
def test_notebook_names_that_are_not_plain_lesson_names_are_refused(tmp_path, name):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    course = tmp_path / "course"
    keep = [course / "gradebook.db", course / "source" / "01_other" / "01_other.ipynb", tmp_path / "precious.txt"]
    for path in keep:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("keep me")
    path = nbs / name
    path.parent.mkdir(parents=True, exist_ok=True)
    _tiny_lesson_file(path.parent, path.name)
    with pytest.raises(ValueError, match="not a plain lesson name"):
        build_course([path], course)
    assert all(p.read_text() == "keep me" for p in keep)  # nothing outside the assignment's own folder went


def test_an_assignment_folder_that_resolves_outside_the_course_is_never_removed(tmp_path):
    """A symlinked source/<lesson> pointing elsewhere: the tool refuses instead of emptying the target."""
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    lesson = _tiny_lesson_file(nbs, "02_tiny.ipynb")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep me")
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    (course / "source" / "02_tiny").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ValueError, match="outside"):
        build_course([lesson], course)
    assert (elsewhere / "precious.txt").read_text() == "keep me"


def test_rebuilding_replaces_only_the_assignments_own_folder(tmp_path):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    lesson = _tiny_lesson_file(nbs, "02_tiny.ipynb")
    course = tmp_path / "course"
    build_course([lesson], course)
    stale = course / "source" / "02_tiny" / "stale.txt"
    stale.write_text("old build")
    neighbour = course / "source" / "03_other" / "03_other.ipynb"
    neighbour.parent.mkdir()
    neighbour.write_text("keep me")
    (course / "gradebook.db").write_text("keep me")
    build_course([lesson], course)
    assert not stale.exists() and (course / "source" / "02_tiny" / "02_tiny.ipynb").is_file()
    assert neighbour.read_text() == "keep me" and (course / "gradebook.db").read_text() == "keep me"


def test_answers_under_other_titles_are_kept_out_of_the_assignment():
    """Issue 28: an exercise whose solution says "💡 Worked solution" still becomes an answer cell; a block
    anywhere else that defines the exercise's function is not shown to the student."""
    solution = SOLUTION.replace("<summary>Solution</summary>", "<summary>💡 Worked solution</summary>")
    leak = "<details><summary>Click to reveal</summary>\n\n```python\ndef f(q, k):\n    return q @ k.mT\n```\n</details>"
    nb = _lesson(new_markdown_cell(leak), new_markdown_cell("### Your turn 1: scores"),
                 new_code_cell("def f(q, k):\n    raise NotImplementedError"),
                 new_code_cell("check_attention_scores(f)"), new_markdown_cell(solution))
    source, graded = assignment_notebook(nb, "99_tiny")
    student = student_version(source)
    text = "\n".join(c.source for c in student.cells)
    assert "q.size(-1) ** 0.5" not in text and "return q @ k.mT" not in text
    answer = next(c for c in source.cells if _grading(c).get("solution"))
    assert "return q @ k.transpose(-2, -1) / q.size(-1) ** 0.5" in answer.source


# ---------------------------------------------------------------------------------------------------
# Issue 28 item 6: a graded test cell cannot be passed by one line in the answer cell


def _test_cell(check_call: str = "check_attention_scores(f)") -> str:
    nb = _lesson(new_markdown_cell("### Your turn 1: scores"), new_code_cell("def f(q, k):\n    raise NotImplementedError"),
                 new_code_cell(check_call), new_markdown_cell(SOLUTION))
    source, _ = assignment_notebook(nb, "99_tiny")
    return next(c for c in source.cells if _grading(c).get("grade") and not _grading(c).get("solution")).source


def _run_test_cell(answer: str, check_call: str = "check_attention_scores(f)") -> None:
    namespace: dict = {}
    exec("import torch\nfrom gpt_lesson.checks import check_attention_scores, check_softmax_weights\n" + answer,
         namespace)
    import contextlib
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as course, contextlib.chdir(course):  # a course folder with its cases
        Path("nbgrader_config.py").write_text("")
        Path("grading").mkdir()
        Path("grading/cases.json").write_text(json.dumps({"99_tiny": {"your-turn-1-check#0": [{"hidden": True}]}}))
        exec(_test_cell(check_call), namespace)  # the test cell as autograding runs it, hidden cases included


WRONG = "def f(q, k):\n    return q @ k.transpose(-2, -1)\n"  # no scaling


@pytest.mark.parametrize("attack", [
    "check_attention_scores = lambda *a, **k: None",
    "import gpt_lesson.checks\ngpt_lesson.checks.check_attention_scores = lambda *a, **k: None",
    "import gpt_lesson.checks.attention\ngpt_lesson.checks.attention.check_attention_scores = lambda *a, **k: None",
    "import gpt_lesson.checks.runner as r\nr.close = lambda a, b: True\nr.judge_tensor = lambda *a, **k: None",
], ids=["bare name", "package attribute", "module attribute", "runner functions"])
def test_rebinding_the_check_does_not_pass_the_graded_cell(attack, capsys):
    import gpt_lesson.checks as package
    import gpt_lesson.checks.attention as module
    import gpt_lesson.checks.runner as runner

    saved = (package.check_attention_scores, module.check_attention_scores, runner.close, runner.judge_tensor)
    try:
        with pytest.raises(AssertionError, match="no scaling"):
            _run_test_cell(WRONG + attack)
    finally:
        (package.check_attention_scores, module.check_attention_scores, runner.close, runner.judge_tensor) = saved
    assert "not yet (no scaling)" in capsys.readouterr().out


def test_replacing_the_library_reference_makes_the_graded_cell_fail(monkeypatch, capsys):
    import gpt_lesson.attention as lib

    monkeypatch.setattr(lib, "attention_scores", lambda q, k: q @ k.transpose(-2, -1))  # the learner's own, wrong
    with pytest.raises(AssertionError, match="the check or the library was replaced"):
        _run_test_cell(WRONG)
    out = capsys.readouterr().out
    assert "gpt_lesson.attention.attention_scores is not the course's own" in out and "restart the kernel" in out


def test_a_replaced_library_class_or_method_is_found():
    import gpt_lesson.model as model
    from gpt_lesson.checks.runner import library_replacements

    assert library_replacements() == []
    namespace = {"__name__": "__main__"}  # as a notebook cell defines it
    exec("class MyFFN:\n    pass\n\n\ndef forward(self, idx):\n    return idx\n", namespace)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model, "FeedForward", namespace["MyFFN"])
        patch.setattr(model.GPT, "forward", namespace["forward"])
        assert sorted(library_replacements()) == ["gpt_lesson.model.FeedForward", "gpt_lesson.model.GPT.forward"]
    assert library_replacements() == []


def test_a_right_answer_passes_the_graded_cell_and_rules_stay_in_force(capsys):
    _run_test_cell("def f(q, k):\n    return q @ k.transpose(-2, -1) / q.size(-1) ** 0.5\n")
    assert capsys.readouterr().out.count(": passed.") == 2  # the visible and the hidden run
    with pytest.raises(AssertionError, match="used what the exercise rules out"):
        _run_test_cell("import torch.nn.functional as F\nf = lambda s: F.softmax(s, dim=-1)\n",
                       "check_softmax_weights(f, without='softmax')")


def test_the_course_config_restores_test_cells():
    config = nbgrader_course.NBGRADER_CONFIG.format(course_id="x", text_stub="y", mathjax_url="m")
    assert "c.OverwriteCells.add_missing_cells = True" in config  # a deleted test cell is put back
    compile(config, "nbgrader_config.py", "exec")
