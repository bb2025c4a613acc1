"""Build an nbgrader course folder from the lessons: homework with autograding and a gradebook.

    python -m tools.nbgrader_course --out course/        # every lesson with exercises
    python -m tools.nbgrader_course --out course/ --only 02_attention 03_causal_mask

writes ``course/nbgrader_config.py`` and one assignment per lesson, ``course/source/<lesson>/<lesson>.ipynb``
(with the figures it shows). Then, in ``course/``, nbgrader takes over (https://nbgrader.readthedocs.io)::

    nbgrader generate_assignment 02_attention     # release/: the student version
    nbgrader release_assignment 02_attention      # into the exchange, for the students' JupyterLab
    nbgrader collect 02_attention && nbgrader autograde 02_attention
    nbgrader generate_feedback 02_attention && nbgrader export   # feedback/ HTML, grades.csv

How a lesson becomes an assignment (the layout of a lesson's exercises: ``tools/exercises.py``):

- each exercise's stub cell(s) become one autograded answer cell: the stub as the lesson has it, then
  the solution between ``### BEGIN SOLUTION`` / ``### END SOLUTION`` (nbgrader removes it from the
  student version, so the student sees the stub; the teacher's version runs the solution);
- each exercise's check becomes a graded, read-only test cell worth ``--points-per-check`` points: the
  lesson's check call with ``strict=True`` (it raises ``AssertionError`` with the check's diagnosis when
  the answer is wrong or untouched), then the same check on the grader's own cases, which the cell reads
  from ``grading/cases.json`` of the teacher's course folder (``gpt_lesson.checks.variants.grading_cases``;
  a student's machine has none). The cell is the same in the teacher's and the student's version, so
  nbgrader's checksums match (no hidden-test block, whose removal changes the checksum of every test cell:
  nbgrader issue 1961), and every call's value is assigned, so nbgrader reads no output as a score. The
  cell calls the check through a fresh copy of ``gpt_lesson.checks`` (``runner.fresh_checks()``), not by
  the name the notebook holds, so an answer cell that rebinds ``check_x`` or replaces a library function
  the check compares with does not pass (the copy refuses to grade against a replaced library);
- with ``--secret-seed`` (or ``--secret-seed-file``), the exercises whose check has a variant
  (``tools/assessment.py``: lessons 02-04) get the variant: a cell under the heading states the twist, the
  teacher's solution and the graded cell are the variant's, its cases are drawn from the secret; the
  builder also writes ``grading/variants.json`` and a question bank with answer keys (``question_bank/``);
- released copies hold no launch badges, no links to the public notebooks and no sentence saying where
  the solutions are (``released_markdown``); Colab's install cell is left out;
- the solution blocks and speaker notes are left out, hints stay, every other answer block (lesson 11's
  self-quiz answers) is replaced by a note; prose and demonstrations become locked, read-only cells;
- an interview question (a ``## Q1 · ...`` heading, lesson 11) gets a manually graded free-text answer
  cell worth ``--points-per-question`` points in place of its model answers (the teacher's version holds
  the model answer in the course's language and the rubric, for the graders).

A course is in the language of its lessons: built from notebooks/zh, its graded cells speak Chinese (the
message catalogue) and its rubrics, the project's brief and ``grading/rubric.md`` are Chinese, from
docs/teaching.zh-CN.md.

Also: ``--roster CSV`` adds the students to the gradebook; an ``nbgrader_config.py`` you edited is kept
(``--overwrite-config`` replaces it); MathJax is bundled in ``mathjax/`` for the feedback pages;
``--export-grades CSV`` writes the weighted grades of docs/teaching.md section 2 (``--plan exam|project``);
``--project`` adds the project assignment, its rubric as task cells graded by hand; ``grading/rubric.md`` holds
the rubrics of everything graded by hand (lesson 11's Q1-Q3 and the project). The lessons themselves stay
as they are for self-study.
"""
from __future__ import annotations

import argparse
import ast
import copy
import inspect
import json
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell

from gpt_lesson.checks.variants import COURSE_TEXTS
from gpt_lesson.checks.verdicts import say
from gpt_lesson.i18n import _, language
from tools import assessment
from tools.exercises import YOUR_TURN_RE, Exercise, cell_text, find_exercises, without_magics
from tools.slides import _details_blocks, answer_kind, exercise_names, find_notebooks, select_notebooks, strip_solutions

__all__ = ["AssignmentSummary", "assignment_notebook", "build_course", "build_parser", "main", "check_source", "lesson_name",
           "NBGRADER_CONFIG", "QUESTION_RE", "PROJECT", "PROJECT_TEXTS", "COURSE_WORDS", "RUBRIC_HEADINGS",
           "project_notebook"]

REPO_ROOT = Path(__file__).resolve().parents[1]
SCHEMA_VERSION = 3
QUESTION_RE = re.compile(r"^##\s+(Q\d+)\b[^\n]*", re.M)
_FIGURE_RE = re.compile(r"\.\./figures/([\w.-]+\.(?:png|jpg|jpeg|gif|svg))")
_MODEL_ANSWER_KINDS = ("Model answer", "参考答案", "Sample answer")
_TEXT_STUB = "YOUR ANSWER HERE"
# An assignment is named after its lesson file: letters, digits, "_" and "-", starting with a letter or digit.
# Anything else ("..", ".", a leading "-", spaces, dots) is refused before a folder is touched.
_LESSON_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")

# The course folder's configuration. The solution region is replaced by nothing: the answer cell keeps the
# lesson's stub, which stands above the region. Autograding runs whole lessons: 10 minutes per cell at most.
NBGRADER_CONFIG = '''# nbgrader configuration of the gpt-lesson course folder (written by python -m tools.nbgrader_course).
c = get_config()  # noqa: F821 - nbgrader provides it
c.CourseDirectory.course_id = "{course_id}"
# An answer cell holds the lesson's stub, then the solution region: the student version keeps the stub.
c.ClearSolutions.code_stub = {{"python": ""}}
c.ClearSolutions.text_stub = "{text_stub}"
# A lesson runs top to bottom when graded, in a fresh kernel; its training cells take seconds to a minute on
# 2 cores. (A learner's function that hangs inside a check is stopped by the check itself, after 30 s.)
c.Execute.timeout = 600
# Test cells and read-only cells are restored from the gradebook (by their checksums) before grading, so an
# edited test cell does not count; a deleted one is put back instead of being skipped.
c.OverwriteCells.add_missing_cells = True
# Where release_assignment/collect exchange files with the students (shared by everyone on a JupyterHub).
# c.Exchange.root = "/srv/nbgrader/exchange"
# Feedback pages (feedback/<student>/<assignment>/*.html) load MathJax from this folder's mathjax/ (copied
# by the builder from the pinned npm package, sha512 checked), never from a CDN: nbgrader's feedback template
# calls nbconvert's mathjax() macro with its default CDN address, so templates/feedback/mathjax.html.j2, found
# first, gives the macro the local one. nbgrader's own feedback template stays in use.
import os as _os  # noqa: E402
import nbgrader as _nbgrader  # noqa: E402
c.HTMLExporter.extra_template_basedirs = [
    _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "templates"),
    _os.path.join(_os.path.dirname(_nbgrader.__file__), "server_extensions", "formgrader", "templates"),
]
'''
MATHJAX_URL = "../../../mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe"
# The macro nbconvert's templates import from mathjax.html.j2: the local MathJax, configured for the $...$ and
# $$...$$ of the lessons' markdown.
MATHJAX_MACRO = '''{%- macro mathjax(url="URL") -%}
<script type="text/x-mathjax-config">
MathJax.Hub.Config({
  tex2jax: {inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]], displayMath: [["$$", "$$"], ["\\\\[", "\\\\]"]],
            processEscapes: true, processEnvironments: true},
  messageStyle: "none"
});
</script>
<script src="{{ url }}"></script>
{%- endmacro %}
'''.replace("URL", MATHJAX_URL)


@dataclass
class GradedCell:
    grade_id: str
    points: int
    kind: str  # "check" (autograded) or "free text" (graded by hand)
    checks: list[str] = field(default_factory=list)  # the check calls of an autograded cell
    cases: dict[str, list[dict]] = field(default_factory=dict)  # the grader's own cases, by key (grading/cases.json)
    variants: list = field(default_factory=list)  # the assessment.Variant of each call (None: the lesson's task)


@dataclass
class AssignmentSummary:
    name: str
    notebook: Path
    graded: list[GradedCell]
    figures: list[str]

    @property
    def points(self) -> int:
        return sum(g.points for g in self.graded)

    @property
    def autograded_points(self) -> int:
        return sum(g.points for g in self.graded if g.kind == "check")


def _nbgrader(cell, *, grade_id: str, solution: bool = False, grade: bool = False, locked: bool = False,
              points: int | None = None):
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": SCHEMA_VERSION,
            "solution": solution}
    if points is not None:
        meta["points"] = points
    cell.metadata["nbgrader"] = meta
    if locked:
        cell.metadata["editable"] = False
        cell.metadata["deletable"] = False
    return cell


def _new_code(source: str, like=None):
    cell = new_code_cell(source)
    if like is not None and "slideshow" in like.metadata:
        cell.metadata["slideshow"] = copy.deepcopy(like.metadata["slideshow"])
    return cell


def _statements(source: str) -> tuple[list[str], list[str]]:
    """Split a cell into (its non-check statements, its top-level check calls), as source text."""
    lines = source.split("\n")
    try:
        body = ast.parse(without_magics(source)).body
    except SyntaxError:
        return [source], []
    code, checks = [], []
    for stmt in body:
        value = getattr(stmt, "value", None)
        text = "\n".join(lines[stmt.lineno - 1:stmt.end_lineno])
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id.startswith("check_"):
            checks.append(ast.unparse(value))
        else:
            code.append(text)
    return code, checks


def check_source(call: str, *, hidden: bool, module: str | None = None) -> str:
    """The graded form of a check call: ``strict=True`` (and ``hidden=True``) added, and with ``module`` the
    check called as an attribute of that name (``_checks.check_x(...)``) instead of by its bare name.

    With a check that has no ``strict`` argument (an older checks module), the cell asserts on the
    returned verdict instead, with the check's message, and there are no hidden cases ("").
    """
    node = ast.parse(call, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a check call: {call!r}")
    from gpt_lesson import checks

    check = getattr(checks, node.func.id, None)
    if check is None:
        raise ValueError(f"{node.func.id} is not a check of gpt_lesson.checks (the call was {call!r})")
    params = inspect.signature(check).parameters
    node.keywords = [k for k in node.keywords if k.arg not in ("strict", "hidden")]
    if module is not None:
        node.func = ast.Attribute(value=ast.Name(module, ast.Load()), attr=node.func.id, ctx=ast.Load())
    if "strict" not in params:  # no hidden cases either
        return "" if hidden else f"_verdict = {ast.unparse(node)}\nassert _verdict.passed, _verdict.message"
    node.keywords.append(ast.keyword("strict", ast.Constant(True)))
    if hidden:
        if "hidden" not in params:
            return ""
        node.keywords.append(ast.keyword("hidden", ast.Constant(True)))
    return ast.unparse(node)


_CHECKS = "_checks"  # the test cells' name for their fresh copy of gpt_lesson.checks


def _text(key: str, lang: str, **fields: object) -> str:
    """A text of the graded notebooks (``COURSE_TEXTS``) in the course's language, from the message catalogue."""
    with language(lang):
        return say(_(COURSE_TEXTS[key]), **fields)


def _test_source(number: int, calls: list[str], points: int, *, assignment: str = "assignment",
                 grade_id: str = "cell", lang: str = "en", variants: list | None = None) -> tuple[str, dict]:
    """A graded cell's source and the grader's own cases it reads (``{key: [kwargs, ...]}``).

    The source is the same in the teacher's and the student's version (no hidden-test block, so nbgrader's
    checksums match): the extra cases come from ``grading/cases.json`` in the teacher's course folder, which a
    student's machine does not have. Every call's value is assigned (``_verdict = ...``), so the cell has no
    output nbgrader would try to read as a partial score.
    """
    variants = variants or [None] * len(calls)
    comment = "\n".join(f"# {line}" for line in _text("graded_cell", lang, number=number, points=points).split("\n"))
    lines = [comment, "from gpt_lesson.checks.runner import fresh_checks as _fresh_checks",
             f"{_CHECKS} = _fresh_checks()  # {_text('fresh', lang)}"]
    cases: dict[str, list[dict]] = {}
    for i, (call, var) in enumerate(zip(calls, variants)):
        key = f"{grade_id}#{i}"
        if var is not None:
            fn = ast.unparse(ast.parse(call, mode="eval").body.args[0])
            visible = var.call(fn, _CHECKS)
            cases[key] = [{**c, **var.rules} for c in var.grading]
        else:
            visible = check_source(call, hidden=False, module=_CHECKS)
            hidden = check_source(call, hidden=True, module=_CHECKS)
            cases[key] = [{"hidden": True}] if hidden else []
        lines.append(visible if visible.startswith("_verdict =") else f"_verdict = {visible}")
        if cases[key]:
            node = ast.parse(visible, mode="eval").body
            if var is not None:  # each case holds all of the variant's arguments
                node.keywords = [k for k in node.keywords if k.arg == "strict"]
            node.keywords.append(ast.keyword(None, ast.Name("_case", ast.Load())))
            lines.append(f"for _case in {_CHECKS}.variants.grading_cases({assignment!r}, {key!r}):  "
                         f"# {_text('cases', lang)}")
            lines.append(f"    _verdict = {ast.unparse(node)}")
    return "\n".join(lines), cases


def _exercise_solution(ex: Exercise, nb, variants: list) -> str:
    """The teacher's solution of an exercise: the lesson's, or (in a seeded course) its variant's."""
    if not any(variants):
        return _solution_code(ex, nb)
    own = [v.solution.strip("\n") for v in variants if v is not None]
    return "\n\n\n".join(own)


def _variant_cell(ex: Exercise, variants: list, lang: str):
    lines = [_text("variant", lang)] + [_text(v.task_key, lang, **v.task_fields) for v in variants if v is not None]
    cell = new_markdown_cell("\n\n".join(lines))
    return cell


def _solution_code(ex: Exercise, nb) -> str:
    """The exercise's solution code, without any check call it may show."""
    return "\n\n".join(_statements(ex.solution(nb))[0])


def _answer_source(stub: str, solution: str) -> str:
    stub = stub.rstrip("\n")
    solution = solution.strip("\n")
    return f"{stub}\n### BEGIN SOLUTION\n{solution}\n### END SOLUTION"


def _is_chinese(text: str) -> bool:
    """Mostly Chinese: more CJK characters than Latin letters."""
    return sum("\u4e00" <= ch <= "\u9fff" for ch in text) > sum(ch.isascii() and ch.isalpha() for ch in text)


def _only_model_answers(markdown: str, lang: str = "en") -> tuple[bool, str | None]:
    """(the cell holds nothing but model answers, the text of the model answer in ``lang``). Lesson 11 gives
    each answer in both languages in both editions, under titles of the edition's language (tools/slides.py's
    ``answer_kind``), so the language is read from the answer's text."""
    blocks = _details_blocks(markdown)
    if not blocks:
        return False, None
    rest = markdown
    found = None
    for start, end in reversed(blocks):
        kind = answer_kind(markdown[start:end])
        if kind not in _MODEL_ANSWER_KINDS:
            return False, None
        body = re.sub(r"^<details\b[^>]*>\s*<summary\b[^>]*>.*?</summary>", "", markdown[start:end], flags=re.S)
        body = re.sub(r"</details\s*>\s*$", "", body).strip()
        if _is_chinese(body) == (lang == "zh"):
            found = body
        rest = rest[:start] + rest[end:]
    return (not rest.strip()), found


def _slide_type(cell) -> str:
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "-")


# What a released copy must not hold: the launch badges and links to the public notebooks (whose solutions
# are one click away), and the sentences that point at those solutions, in both editions.
_BADGE_RE = re.compile(r"^\[!\[[^\]]*\]\([^)]*\)\]\([^)]*\)[ \t]*\n?", re.M)
_NOTEBOOK_LINK_RE = re.compile(r"\[([^\]]*)\]\((?![a-z]+:)[^)\s]*\.ipynb(?:#[^)]*)?\)")
_REMOTE_NOTEBOOK_RE = re.compile(r"\[([^\]]*)\]\((?:https?://)[^)]*(?:colab|mybinder|nbviewer|github\.com)[^)]*\)")
_SOLUTION_WORDING_RE = re.compile(
    r"[^.\n]*\bone click away\b[^.\n]*\.[ \t]*|[^。\n]*(?:点一下|一键)[^。\n]*(?:答案|解答)[^。\n]*。", re.I)
LEAK_PATTERNS = (r"colab\.research\.google\.com", r"mybinder\.org", r"nbviewer", r"one click away",
                 r"\]\([^)]*\.ipynb", r"点一下[^。]*答案", r"github\.com/gpt-lesson")


def released_markdown(text: str) -> str:
    """A lesson's markdown as a released copy shows it: no launch badges, no links to the public notebooks (the
    link text stays), no sentence saying where the solutions are."""
    text = _BADGE_RE.sub("", text)
    text = _REMOTE_NOTEBOOK_RE.sub(r"\1", text)
    text = _NOTEBOOK_LINK_RE.sub(r"\1", text)
    text = _SOLUTION_WORDING_RE.sub("", text)
    return re.sub(r"^(?:English|Previous|Next|上一课|下一课)\s*[:：]\s*.*$\n?", "", text, flags=re.M)


def _lesson_language(nb) -> str:
    headings = [m.group(0) for c in nb.cells if c.cell_type == "markdown" for m in YOUR_TURN_RE.finditer(cell_text(c))]
    return "zh" if any("动手练习" in h for h in headings) else "en"


def assignment_notebook(nb, name: str, *, points_per_check: int = 2, points_per_question: int = 4,
                        secret: bytes | None = None, rubric: dict[str, list[dict]] | None = None):
    """The nbgrader source notebook for lesson ``nb`` and what is graded in it: ``(notebook, graded cells)``.

    With the teacher's ``secret``, the exercises whose check has a variant (``tools/assessment.py``) get it:
    a cell under the exercise's heading states the twist, the teacher's solution and the graded cell are the
    variant's. With a ``rubric`` (``assessment.rubrics()``), an interview question it covers is worth the
    rubric's points (not ``points_per_question``), and the teacher's version of its answer cell holds the
    rubric below the model answer, in the region nbgrader removes from the student version."""
    for label, value in (("points_per_check", points_per_check), ("points_per_question", points_per_question)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive int, got {value!r}")
    exercises = find_exercises(nb)
    role: dict[int, tuple[str, Exercise]] = {}
    for ex in exercises:
        if ex.check_cell is None:
            raise ValueError(f"{name}: Your turn {ex.number} ({ex.title!r}) has no cell that calls a check_* function")
        if not ex.solution_cells or not ex.solution(nb).strip():
            raise ValueError(f"{name}: Your turn {ex.number} ({ex.title!r}) has no ```python solution block")
        for i in ex.stub_cells:
            role[i] = ("stub", ex)
        role[ex.check_cell] = ("check", ex)
        for i in ex.solution_cells:
            role[i] = ("solution", ex)

    names = exercise_names(nb)  # a block that defines one of them is an answer, whatever its title
    lang = _lesson_language(nb)
    variants = {ex.number: [assessment.make_variant(secret, name, ex.number, c) if secret else None
                            for c in ex.checks(nb)] for ex in exercises}
    starts = {ex.start: ex for ex in exercises if any(variants[ex.number])}
    cells, graded = [], []
    question: str | None = None
    pending_answer: str | None = None  # the model answer of the current question, in the course's language

    def flush_question(at_end: bool = False) -> None:
        nonlocal question, pending_answer
        if question is None:
            return
        gid = f"{question.lower()}-answer"
        words = COURSE_WORDS[lang]
        text = pending_answer or words["no_model_answer"]
        points = points_per_question
        criteria = (rubric or {}).get(question)
        if criteria:
            points = sum(c["points"] for c in criteria)
            text += "\n\n**" + words["rubric"].format(heading=RUBRIC_HEADINGS[lang], points=points) + "**\n\n" + \
                "\n".join(words["criterion"].format(**c) for c in criteria)
        cell = new_markdown_cell(_text("free_text", lang, question=question, points=points)
                                 + f"\n\n### BEGIN SOLUTION\n{text}\n### END SOLUTION")
        cells.append(_nbgrader(cell, grade_id=gid, solution=True, grade=True, points=points))
        graded.append(GradedCell(gid, points, "free text"))
        question, pending_answer = None, None

    for i, cell in enumerate(nb.cells):
        text = cell_text(cell)
        kind, ex = role.get(i, (None, None))
        if _slide_type(cell) == "notes" and kind is None:
            continue  # speaker notes often give the answers away
        if kind == "solution":
            continue  # its code is in the answer cell's solution region
        if kind == "stub":
            if i != ex.stub_cells[0]:
                continue
            stub = "\n\n".join(cell_text(nb.cells[j]).rstrip("\n") for j in ex.stub_cells)
            answer = _new_code(_answer_source(stub, _exercise_solution(ex, nb, variants[ex.number])), like=cell)
            cells.append(_nbgrader(answer, grade_id=f"your-turn-{ex.number}-answer", solution=True))
            continue
        if kind == "check":
            code, calls = _statements(text)
            if not ex.stub_cells and any(c.strip() for c in code):
                # The older layout: the stub and the check call share one cell.
                answer = _new_code(_answer_source("\n\n".join(code), _exercise_solution(ex, nb, variants[ex.number])),
                                   like=cell)
                cells.append(_nbgrader(answer, grade_id=f"your-turn-{ex.number}-answer", solution=True))
            gid = f"your-turn-{ex.number}-check"
            source, cases = _test_source(ex.number, calls, points_per_check, assignment=name, grade_id=gid, lang=lang,
                                         variants=variants[ex.number])
            test = _new_code(source, like=cell)
            cells.append(_nbgrader(test, grade_id=gid, grade=True, locked=True, points=points_per_check))
            graded.append(GradedCell(gid, points_per_check, "check", calls, cases, variants[ex.number]))
            continue
        if cell.cell_type == "markdown":
            only_answers, answer = _only_model_answers(text, lang)
            if question is not None and only_answers:
                pending_answer = pending_answer or answer
                continue
            flush_question()
            m = QUESTION_RE.search(text)
            if m:
                question = m.group(1)
            shown, _ = strip_solutions(nbformat.v4.new_notebook(cells=[new_markdown_cell(text)]), names=names)
            new = new_markdown_cell(_FIGURE_RE.sub(r"figures/\1", released_markdown(shown.cells[0].source).rstrip()))
            new.metadata = copy.deepcopy(cell.metadata)
            cells.append(_nbgrader(new, grade_id=f"cell-{i}", locked=True))
            if i in starts:
                cells.append(_nbgrader(_variant_cell(starts[i], variants[starts[i].number], lang),
                                       grade_id=f"your-turn-{starts[i].number}-variant", locked=True))
            continue
        flush_question()
        if cell.cell_type == "code" and "google.colab" in text:
            continue  # Colab's install cell: it names the public repository, and a released copy runs elsewhere
        new = copy.deepcopy(cell)
        if new.cell_type == "code":
            new.outputs, new.execution_count = [], None
        cells.append(_nbgrader(new, grade_id=f"cell-{i}", locked=True))
    flush_question()

    for cell in cells:
        cell["id"] = cell.metadata["nbgrader"]["grade_id"]  # unique, and stable from one build to the next
    out = nbformat.v4.new_notebook(cells=cells, metadata=copy.deepcopy(nb.metadata))
    out.metadata.pop("widgets", None)
    nbformat.validate(out)
    return out, graded


RUBRIC_HEADING = "Rubric, for the graders"
RUBRIC_HEADINGS = {"en": RUBRIC_HEADING, "zh": "批改用评分标准"}
# The words the builder writes into a course of each language (the lessons' own text comes from the lesson, the
# graded cells' from the message catalogue, the rubrics from the teacher's guide of the edition).
COURSE_WORDS = {
    "en": {"no_model_answer": "(The model answer is in the teacher's copy of the lesson.)",
           "rubric": "{heading} ({points} points)", "criterion": "- ({points}) {criterion}"},
    "zh": {"no_model_answer": "（参考答案在教师版的课程笔记本里。）",
           "rubric": "{heading}（{points} 分）", "criterion": "- （{points} 分）{criterion}"},
}
PROJECT = "project"  # the project assignment's name (docs/teaching.md section 2, plan `project`)
PROJECT_BRIEF = """# Project: one experiment on the course's GPT

Choose one small experiment (or propose your own and have it approved in week 3):

- add top-p sampling or a repetition penalty and measure what it changes in the samples;
- swap LayerNorm for RMSNorm, or GELU for SwiGLU, and compare validation loss at equal parameters;
- train lesson 09's model on BPE tokens (lesson 13) and compare bits per character;
- measure the KV cache's speed-up across context lengths;
- reproduce one claim of lesson 11 with a new experiment.

Hand in this notebook. It must run top to bottom in a fresh kernel in at most 5 minutes on 2 CPU cores, with
a half-page summary in the cell below. Add as many cells as you need between the summary and *How it is
graded*; say before each cell what it shows. You present it in 5 minutes.

`gpt_lesson` has everything the lessons built: `from gpt_lesson.model import GPT, GPTConfig`,
`from gpt_lesson.training import train`, `from gpt_lesson.data import load_tiny_shakespeare, get_batch`."""
PROJECT_GRADING = ("## How it is graded ({points} points)\n\nBy hand, one cell per criterion below: full, "
                   "partial or no points for each.")
PROJECT_TEXTS = {
    "en": {"brief": PROJECT_BRIEF, "grading": PROJECT_GRADING,
           "summary": "## Summary\n\n(Half a page: your question, the baseline, what you changed, the numbers, what "
                      "they show and what they do not.)",
           "code": "# Your experiment: seed everything, print rounded numbers.\n",
           "task": "### {criterion} ({points} points)\n\n- **Full** ({points}): {full}\n- **Partial**: {partial}\n"
                   "- **None** (0): {none}"},
    "zh": {"brief": """# 项目：在课程的 GPT 上做一个实验

从下面选一个小实验（也可以自己提出，在第 3 周获得批准）：

- 加入 top-p 采样或重复惩罚，衡量它给生成的样本带来什么变化；
- 把层归一化换成 RMSNorm，或把 GELU 换成 SwiGLU，在参数量相同的条件下比较验证损失；
- 用 BPE 词元（第 13 课）训练第 09 课的模型，比较每字符比特数；
- 测量键值缓存在不同上下文长度下的加速比；
- 用一个新实验复现第 11 课的某个论断。

提交这个笔记本。它必须能在全新的内核里从上到下运行，在 2 个 CPU 核上最多用 5 分钟，并在下面的单元格里附半页总结。\
在总结和“如何评分”之间，需要多少单元格就加多少；每个单元格之前先说明它展示什么。汇报时间为 5 分钟。

`gpt_lesson` 里有各课构建的全部内容：`from gpt_lesson.model import GPT, GPTConfig`、
`from gpt_lesson.training import train`、`from gpt_lesson.data import load_tiny_shakespeare, get_batch`。""",
           "grading": "## 如何评分（{points} 分）\n\n人工评分，下面每条评分项一个单元格：每项分为完全达到、部分达到和未达到。",
           "summary": "## 总结\n\n（半页：你的问题、基线、你改了什么、数值，以及这些数值说明了什么、没有说明什么。）",
           "code": "# 你的实验：固定所有随机种子，打印保留几位小数的数值。\n",
           "task": "### {criterion}（{points} 分）\n\n- **完全达到**（{points} 分）：{full}\n- **部分达到**：{partial}\n"
                   "- **未达到**（0 分）：{none}"},
}


def project_notebook(criteria: list[dict], *, kernelspec: dict | None = None,
                     lang: str = "en") -> tuple[nbformat.NotebookNode, list[GradedCell]]:
    """The project assignment: the brief, a summary cell and a code cell the student fills (plain cells: the
    student adds more), then one task cell per criterion of the rubric (``assessment.rubrics()["project"]``),
    graded by hand in the formgrader with the criterion's points. Task cells are locked and the same in
    every version, so the rubric is also what the student reads. ``lang``: the course's language (``"en"``,
    ``"zh"``), with the rubric of that edition's guide."""
    if lang not in PROJECT_TEXTS:
        raise ValueError(f"lang must be one of {sorted(PROJECT_TEXTS)}, got {lang!r}")
    if not criteria:
        raise ValueError("the project needs a rubric: docs/teaching.md section 1's table "
                         "'| Criterion | Points | Full | Partial | None |' lists no criterion")
    words = PROJECT_TEXTS[lang]
    total = sum(c["points"] for c in criteria)
    cells = [_nbgrader(new_markdown_cell(words["brief"]), grade_id="brief", locked=True),
             new_markdown_cell(words["summary"]), new_code_cell(words["code"]),
             _nbgrader(new_markdown_cell(words["grading"].format(points=total)), grade_id="grading", locked=True)]
    graded = []
    for i, c in enumerate(criteria, 1):
        slug = re.sub(r"[^a-z0-9]+", "-", c["criterion"].lower()).strip("-")
        gid = f"rubric-{i}-{slug}" if slug and lang == "en" else f"rubric-{i}"
        # nbgrader's task cell: locked, not a grade cell of its own ("grade": False), with points
        cell = _nbgrader(new_markdown_cell(words["task"].format(**c)), grade_id=gid, locked=True, points=c["points"])
        cell.metadata["nbgrader"]["task"] = True
        cells.append(cell)
        graded.append(GradedCell(gid, c["points"], "free text"))
    for cell in cells:
        cell["id"] = cell.metadata.get("nbgrader", {}).get("grade_id") or f"work-{cells.index(cell)}"
    out = nbformat.v4.new_notebook(cells=cells)
    out.metadata["kernelspec"] = kernelspec or {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.validate(out)
    return out, graded


def lesson_name(path: Path) -> str:
    """The assignment name of the notebook at ``path`` (its stem), refused unless it is a plain lesson name."""
    name = Path(path).name
    stem = name[:-len(".ipynb")] if name.endswith(".ipynb") else Path(path).stem
    if not _LESSON_NAME_RE.fullmatch(stem):
        raise ValueError(f"{name!r} is not a plain lesson name: an assignment is named after its notebook, whose "
                         "name must be letters, digits, '_' or '-' (starting with a letter or digit), like "
                         "02_attention.ipynb")
    return stem


def _owned_folder(root: Path, name: str) -> Path:
    """``root/name``, refused unless its resolved path lies strictly inside the resolved ``root``."""
    folder = root / name
    inside, resolved = root.resolve(), folder.resolve()
    if resolved == inside or inside not in resolved.parents:
        raise ValueError(f"{folder} resolves to {resolved}, outside {inside}: the tool only replaces folders "
                         "inside the course's source/ folder, so it leaves this one alone")
    return folder


def _write_config(out: Path, text: str, *, overwrite: bool, notes: list[str]) -> None:
    """Write ``nbgrader_config.py``; an existing one that differs is kept (the new one goes beside it, as
    ``nbgrader_config.py.new``) unless ``overwrite``, which keeps the old one as ``nbgrader_config.py.bak``."""
    config = out / "nbgrader_config.py"
    if config.is_file() and config.read_text(encoding="utf-8") != text:
        if not overwrite:
            (out / "nbgrader_config.py.new").write_text(text, encoding="utf-8")
            notes.append(f"kept your {config} (it differs from the builder's); the builder's is in "
                         f"{config}.new: compare them, or build again with --overwrite-config")
            return
        shutil.copy2(config, out / "nbgrader_config.py.bak")
        notes.append(f"replaced {config}; the old one is {config}.bak")
    config.write_text(text, encoding="utf-8")


def bundle_mathjax(out: Path, source: Path | None = None, timeout: float = 300.0) -> Path:
    """Put MathJax 2 (TeX input, CommonHTML output) into ``out/mathjax``: from ``source`` (a folder with
    MathJax.js, e.g. a deck's vendor/mathjax) or from the pinned npm package, its sha512 checked."""
    import tempfile

    from tools import slides

    dest = out / "mathjax"
    if (dest / "MathJax.js").is_file():
        return dest
    if source is not None:
        if not (Path(source) / "MathJax.js").is_file():
            raise ValueError(f"{source} has no MathJax.js: give a MathJax 2 folder (a deck's vendor/mathjax)")
        shutil.copytree(source, dest)
        return dest
    version, integrity = slides.VENDOR_PACKAGES["mathjax"]
    with tempfile.TemporaryDirectory(prefix="gpt_lesson_mathjax_") as tmp:
        slides._npm_pack([f"mathjax@{version}"], Path(tmp), timeout)
        tarball = Path(tmp) / f"mathjax-{version}.tgz"
        got = slides._integrity(tarball)
        if got != integrity:
            raise slides.VendorError(f"{tarball.name} has integrity {got}, expected the pinned {integrity}")
        slides._copy_from_tarball(tarball, slides._VENDOR_FILES["mathjax"], dest)
    return dest


def add_roster(out: Path, students: list[dict]) -> int:
    """Add (or update) the roster's students in the course's gradebook, as ``nbgrader db student import`` does."""
    from nbgrader.api import Gradebook

    assessment.gradebook_path_ready()
    out.mkdir(parents=True, exist_ok=True)
    with Gradebook(f"sqlite:///{(out / 'gradebook.db').resolve()}") as gb:
        for student in students:
            gb.update_or_create_student(student["id"], **{k: v for k, v in student.items() if k != "id"})
    return len(students)


def build_course(notebooks: list[Path], out_dir: str | Path, *, course_id: str = "gpt-lesson",
                 points_per_check: int = 2, points_per_question: int = 4, secret: bytes | None = None,
                 overwrite_config: bool = False, questions: int = 4, project: bool = False,
                 teaching: Path | None = None, notes: list[str] | None = None) -> list[AssignmentSummary]:
    """Write ``out_dir/nbgrader_config.py`` and ``out_dir/source/<lesson>/<lesson>.ipynb`` for each lesson
    that has exercises, ``out_dir/grading/cases.json`` (the grader's own cases) and ``grading/rubric.md`` (the
    rubrics of the work graded by hand, from ``teaching``: by default the teacher's guide of the course's language,
    docs/teaching.md or docs/teaching.zh-CN.md). With the teacher's ``secret``: the variants
    (``grading/variants.json``, for the teacher) and the question bank (``question_bank/``). With ``project``:
    the project assignment (``source/project/``, its rubric as task cells graded by hand). Returns what each
    assignment grades; ``notes`` gets what the teacher should know."""
    out = Path(out_dir)
    notes = notes if notes is not None else []
    if not re.fullmatch(r"[\w.-]+", course_id):
        raise ValueError(f"course_id must be letters, digits, '_', '-' or '.', got {course_id!r}")
    names = {path: lesson_name(path) for path in notebooks}  # every name is checked before anything is written
    if project and PROJECT in names.values():
        raise ValueError(f"a lesson named {PROJECT!r} would replace the project assignment: rename it")
    read = {path: nbformat.read(path, as_version=4) for path in notebooks}
    langs = {path: _lesson_language(nb) for path, nb in read.items() if find_exercises(nb)}
    if len(set(langs.values())) > 1:
        by_lang = {lang: sorted(p.name for p, lg in langs.items() if lg == lang) for lang in set(langs.values())}
        raise ValueError(f"a course is in one language, but these lessons are in several: {by_lang}; build the "
                         "English course from notebooks/ and the Chinese one from notebooks/zh, into two folders")
    lang = next(iter(langs.values()), "en")
    teaching = Path(teaching) if teaching is not None else assessment.TEACHING[lang]
    rubric = assessment.rubrics(teaching)
    summaries = []

    def fresh_folder(name: str) -> Path:
        (out / "source").mkdir(parents=True, exist_ok=True)
        folder = _owned_folder(out / "source", name)
        if folder.is_symlink():
            raise ValueError(f"{folder} is a symbolic link (to {folder.resolve()}): the tool replaces only folders "
                             "it made, so it leaves this one alone")
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir()
        return folder

    kernelspec = None
    for path in notebooks:
        nb = read[path]
        kernelspec = kernelspec or nb.metadata.get("kernelspec")
        if not find_exercises(nb):
            continue
        name = names[path]
        source, graded = assignment_notebook(nb, name, points_per_check=points_per_check,
                                             points_per_question=points_per_question, secret=secret, rubric=rubric)
        for g in graded:
            if g.kind == "free text" and g.points != points_per_question:
                notes.append(f"{name} {g.grade_id}: {g.points} points, from the rubric in {teaching.name} "
                             f"(not --points-per-question {points_per_question})")
        folder = fresh_folder(name)
        figures = sorted({m.group(1) for c in source.cells if c.cell_type == "markdown"
                          for m in re.finditer(r"\bfigures/([\w.-]+)", c.source)})
        for fig in figures:
            src = path.parent.parent / "figures" / fig
            if not src.is_file():
                raise FileNotFoundError(f"{path.name} shows ../figures/{fig}, which does not exist")
            (folder / "figures").mkdir(exist_ok=True)
            shutil.copy2(src, folder / "figures" / fig)
        dest = folder / f"{name}.ipynb"
        nbformat.write(source, dest)
        summaries.append(AssignmentSummary(name, dest, graded, figures))
    if not summaries:
        raise ValueError("none of the notebooks has an exercise (a '### Your turn N: ...' section)")
    if project:
        source, graded = project_notebook(rubric.get(PROJECT, []), kernelspec=kernelspec, lang=lang)
        dest = fresh_folder(PROJECT) / f"{PROJECT}.ipynb"
        nbformat.write(source, dest)
        summaries.append(AssignmentSummary(PROJECT, dest, graded, []))
    grading = out / "grading"
    grading.mkdir(parents=True, exist_ok=True)
    cases_file = grading / "cases.json"
    cases = json.loads(cases_file.read_text(encoding="utf-8")) if cases_file.is_file() else {}
    for summary in summaries:
        cases[summary.name] = {k: v for g in summary.graded for k, v in g.cases.items()}
    cases_file.write_text(json.dumps(cases, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (grading / "rubric.md").write_text(assessment.rubric_markdown(rubric, lang), encoding="utf-8")
    if secret is not None:
        table = {s.name: {g.grade_id: [None if v is None else {"check": v.check, **v.kwargs, **v.rules,
                                                                  "grading": v.grading}
                                       for v in g.variants] for g in s.graded if any(g.variants)}
                 for s in summaries}
        (grading / "variants.json").write_text(json.dumps(table, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        if questions:
            assessment.write_question_bank(assessment.question_bank(secret, questions), out / "question_bank")
    (out / "templates" / "feedback").mkdir(parents=True, exist_ok=True)
    (out / "templates" / "feedback" / "mathjax.html.j2").write_text(MATHJAX_MACRO, encoding="utf-8")
    _write_config(out, NBGRADER_CONFIG.format(course_id=course_id, text_stub=_TEXT_STUB),
                  overwrite=overwrite_config, notes=notes)
    return summaries


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.nbgrader_course", description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", type=Path, default=REPO_ROOT / "notebooks",
                        help="folder of the lesson notebooks (default: the repository's notebooks/; "
                             "notebooks/zh for the Chinese course)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "course",
                        help="the nbgrader course folder to write (default: course/)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these lessons (file names or stems)")
    parser.add_argument("--course-id", default="gpt-lesson", help="nbgrader's course id (default: gpt-lesson)")
    parser.add_argument("--points-per-check", type=int, default=2, help="points of each exercise (default: 2)")
    parser.add_argument("--points-per-question", type=int, default=4,
                        help="points of each interview question graded by hand (default: 4)")
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument("--secret-seed", metavar="SECRET",
                        help="the teacher's secret (8+ characters): assignment variants and the question bank are "
                             "drawn from it (same secret, same variants). Keep it out of shell history: prefer "
                             "--secret-seed-file")
    secret.add_argument("--secret-seed-file", type=Path, metavar="FILE", help="a file whose first line is the secret")
    parser.add_argument("--questions", type=int, default=4, metavar="N",
                        help="variants of each question kind in question_bank/ (with a secret; default 4, 0: none)")
    parser.add_argument("--roster", type=Path, metavar="CSV",
                        help="students to add to gradebook.db: a CSV with columns id[,first_name,last_name,email]")
    parser.add_argument("--overwrite-config", action="store_true",
                        help="replace an nbgrader_config.py that differs from the builder's (kept as .bak)")
    parser.add_argument("--mathjax", type=Path, metavar="DIR",
                        help="a MathJax 2 folder to bundle for the feedback pages (default: the pinned npm package)")
    parser.add_argument("--no-mathjax", action="store_true", help="do not bundle MathJax (formulas stay as TeX)")
    parser.add_argument("--project", action="store_true",
                        help="also write the project assignment (source/project/): the brief and one task cell per "
                             "criterion of the project rubric (docs/teaching.md; docs/teaching.zh-CN.md for a course "
                             "built from notebooks/zh), graded by hand")
    parser.add_argument("--export-grades", type=Path, metavar="CSV",
                        help="only write the grades of --out's gradebook, weighted by docs/teaching.md section 2, "
                             "one row per student (for an LMS import), then stop")
    parser.add_argument("--plan", choices=assessment.PLANS, default=assessment.PLANS[0],
                        help="the plan whose weights --export-grades applies (docs/teaching.md section 2; "
                             "default: exam)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.export_grades is not None:
        db = args.out / "gradebook.db"
        if not db.is_file():
            print(f"error: {db} does not exist: autograde first (nbgrader autograde NAME in {args.out})", file=sys.stderr)
            return 2
        try:
            plan = assessment.plan_weights(plan=args.plan)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        rows = assessment.write_weighted_grades(f"sqlite:///{db.resolve()}", args.export_grades, plan)
        print(f"{rows} students in {args.export_grades}, weighted by the {args.plan} plan")
        return 0
    notebooks = select_notebooks(parser, find_notebooks(args.notebooks), args.only)
    for label in ("points_per_check", "points_per_question"):
        if getattr(args, label) < 1:
            parser.error(f"--{label.replace('_', '-')} must be at least 1")
    notes: list[str] = []
    try:
        secret = (assessment.read_secret(args.secret_seed, args.secret_seed_file)
                  if args.secret_seed is not None or args.secret_seed_file is not None else None)
        students = assessment.read_roster(args.roster) if args.roster is not None else None
        summaries = build_course(notebooks, args.out, course_id=args.course_id,
                                 points_per_check=args.points_per_check, points_per_question=args.points_per_question,
                                 secret=secret, overwrite_config=args.overwrite_config, questions=args.questions,
                                 project=args.project, notes=notes)
        if students is not None:
            notes.append(f"{add_roster(args.out, students)} students in {args.out / 'gradebook.db'}")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.no_mathjax:
        try:
            notes.append(f"MathJax for the feedback pages in {bundle_mathjax(args.out, args.mathjax)}")
        except Exception as e:  # the course works without it: formulas then show as TeX
            notes.append(f"MathJax was not bundled ({e}); feedback pages show formulas as TeX until it is")
    width = max(len(s.name) for s in summaries)
    print(f"{'assignment':<{width}}  autograded  by hand  points  variants")
    for s in summaries:
        manual = sum(1 for g in s.graded if g.kind == "free text")
        varied = sum(1 for g in s.graded for v in g.variants if v is not None)
        print(f"{s.name:<{width}}  {len(s.graded) - manual:10d}  {manual:7d}  {s.points:6d}  {varied:8d}")
    for note in notes:
        print(note)
    print(f"{len(summaries)} assignments in {args.out / 'source'}; nbgrader_config.py in {args.out}. "
          f"Next, in {args.out}: nbgrader generate_assignment NAME")
    return 0


if __name__ == "__main__":
    sys.exit(main())
