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
  the answer is wrong or untouched), then the same check with ``hidden=True`` (more inputs, of sizes the
  student has not seen) between ``### BEGIN HIDDEN TESTS`` / ``### END HIDDEN TESTS``. The cell calls the
  check through a fresh copy of ``gpt_lesson.checks`` (``runner.fresh_checks()``), not by the name the
  notebook holds, so an answer cell that rebinds ``check_x`` or replaces a library function the check
  compares with does not pass (the copy refuses to grade against a replaced library);
- the solution blocks and speaker notes are left out, hints stay, every other answer block (lesson 11's
  self-quiz answers) is replaced by a note; prose and demonstrations become locked, read-only cells;
- an interview question (a ``## Q1 · ...`` heading, lesson 11) gets a manually graded free-text answer
  cell worth ``--points-per-question`` points in place of its model answers (the teacher's version holds
  the English model answer, for the graders).

The lessons themselves stay as they are for self-study (solutions one click away).
"""
from __future__ import annotations

import argparse
import ast
import copy
import inspect
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell

from tools.exercises import Exercise, cell_text, find_exercises, without_magics
from tools.slides import _details_blocks, answer_kind, exercise_names, find_notebooks, select_notebooks, strip_solutions

__all__ = ["AssignmentSummary", "assignment_notebook", "build_course", "build_parser", "main", "check_source", "lesson_name",
           "NBGRADER_CONFIG", "QUESTION_RE"]

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
'''


@dataclass
class GradedCell:
    grade_id: str
    points: int
    kind: str  # "check" (autograded) or "free text" (graded by hand)
    checks: list[str] = field(default_factory=list)  # the check calls of an autograded cell


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
_FRESH = (f"from gpt_lesson.checks.runner import fresh_checks as _fresh_checks\n"
          f"{_CHECKS} = _fresh_checks()  # the course's checks, fresh: no name in this notebook reaches them\n")


def _test_source(number: int, calls: list[str], points: int) -> str:
    visible = "\n".join(check_source(c, hidden=False, module=_CHECKS) for c in calls)
    hidden = "\n".join(s for s in (check_source(c, hidden=True, module=_CHECKS) for c in calls) if s)
    text = (f"# Your turn {number}: graded, {points} point{'s' if points != 1 else ''}. This cell runs the check "
            "on your answer;\n# when the homework is graded it also runs it on inputs you have not seen.\n"
            + _FRESH + visible)
    if hidden:
        text += f"\n### BEGIN HIDDEN TESTS\n{hidden}\n### END HIDDEN TESTS"
    return text


def _solution_code(ex: Exercise, nb) -> str:
    """The exercise's solution code, without any check call it may show."""
    return "\n\n".join(_statements(ex.solution(nb))[0])


def _answer_source(stub: str, solution: str) -> str:
    stub = stub.rstrip("\n")
    solution = solution.strip("\n")
    return f"{stub}\n### BEGIN SOLUTION\n{solution}\n### END SOLUTION"


def _only_model_answers(markdown: str) -> tuple[bool, str | None]:
    """(the cell holds nothing but model answers, the English model answer's text)."""
    blocks = _details_blocks(markdown)
    if not blocks:
        return False, None
    rest = markdown
    english = None
    for start, end in reversed(blocks):
        kind = answer_kind(markdown[start:end])
        if kind not in _MODEL_ANSWER_KINDS:
            return False, None
        body = re.sub(r"^<details\b[^>]*>\s*<summary\b[^>]*>.*?</summary>", "", markdown[start:end], flags=re.S)
        body = re.sub(r"</details\s*>\s*$", "", body).strip()
        if kind != "参考答案":
            english = body
        rest = rest[:start] + rest[end:]
    return (not rest.strip()), english


def _slide_type(cell) -> str:
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "-")


def assignment_notebook(nb, name: str, *, points_per_check: int = 2, points_per_question: int = 4):
    """The nbgrader source notebook for lesson ``nb`` and what is graded in it: ``(notebook, graded cells)``."""
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
    cells, graded = [], []
    question: str | None = None
    pending_answer: str | None = None  # the English model answer of the current question

    def flush_question(at_end: bool = False) -> None:
        nonlocal question, pending_answer
        if question is None:
            return
        gid = f"{question.lower()}-answer"
        text = pending_answer or "(The model answer is in the teacher's copy of the lesson.)"
        cell = new_markdown_cell(
            f"**{question}: your answer** (graded by hand, {points_per_question} points). Answer in a few "
            f"sentences, with a number where the question asks for one.\n\n### BEGIN SOLUTION\n{text}\n### END SOLUTION")
        cells.append(_nbgrader(cell, grade_id=gid, solution=True, grade=True, points=points_per_question))
        graded.append(GradedCell(gid, points_per_question, "free text"))
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
            answer = _new_code(_answer_source(stub, _solution_code(ex, nb)), like=cell)
            cells.append(_nbgrader(answer, grade_id=f"your-turn-{ex.number}-answer", solution=True))
            continue
        if kind == "check":
            code, calls = _statements(text)
            if not ex.stub_cells and any(c.strip() for c in code):
                # The older layout: the stub and the check call share one cell.
                answer = _new_code(_answer_source("\n\n".join(code), _solution_code(ex, nb)), like=cell)
                cells.append(_nbgrader(answer, grade_id=f"your-turn-{ex.number}-answer", solution=True))
            gid = f"your-turn-{ex.number}-check"
            test = _new_code(_test_source(ex.number, calls, points_per_check), like=cell)
            cells.append(_nbgrader(test, grade_id=gid, grade=True, locked=True, points=points_per_check))
            graded.append(GradedCell(gid, points_per_check, "check", calls))
            continue
        if cell.cell_type == "markdown":
            only_answers, english = _only_model_answers(text)
            if question is not None and only_answers:
                pending_answer = pending_answer or english
                continue
            flush_question()
            m = QUESTION_RE.search(text)
            if m:
                question = m.group(1)
            shown, _ = strip_solutions(nbformat.v4.new_notebook(cells=[new_markdown_cell(text)]), names=names)
            new = new_markdown_cell(_FIGURE_RE.sub(r"figures/\1", shown.cells[0].source))
            new.metadata = copy.deepcopy(cell.metadata)
            cells.append(_nbgrader(new, grade_id=f"cell-{i}", locked=True))
            continue
        flush_question()
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


def build_course(notebooks: list[Path], out_dir: str | Path, *, course_id: str = "gpt-lesson",
                 points_per_check: int = 2, points_per_question: int = 4) -> list[AssignmentSummary]:
    """Write ``out_dir/nbgrader_config.py`` and ``out_dir/source/<lesson>/<lesson>.ipynb`` for each lesson
    that has exercises. Returns what each assignment grades."""
    out = Path(out_dir)
    if not re.fullmatch(r"[\w.-]+", course_id):
        raise ValueError(f"course_id must be letters, digits, '_', '-' or '.', got {course_id!r}")
    names = {path: lesson_name(path) for path in notebooks}  # every name is checked before anything is written
    summaries = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        if not find_exercises(nb):
            continue
        name = names[path]
        source, graded = assignment_notebook(nb, name, points_per_check=points_per_check,
                                             points_per_question=points_per_question)
        (out / "source").mkdir(parents=True, exist_ok=True)
        folder = _owned_folder(out / "source", name)
        if folder.is_symlink():
            raise ValueError(f"{folder} is a symbolic link (to {folder.resolve()}): the tool replaces only folders "
                             "it made, so it leaves this one alone")
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir()
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
    (out / "nbgrader_config.py").write_text(NBGRADER_CONFIG.format(course_id=course_id, text_stub=_TEXT_STUB))
    return summaries


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.nbgrader_course", description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", type=Path, default=REPO_ROOT / "notebooks",
                        help="folder of the lesson notebooks (default: the repository's notebooks/)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "course",
                        help="the nbgrader course folder to write (default: course/)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these lessons (file names or stems)")
    parser.add_argument("--course-id", default="gpt-lesson", help="nbgrader's course id (default: gpt-lesson)")
    parser.add_argument("--points-per-check", type=int, default=2, help="points of each exercise (default: 2)")
    parser.add_argument("--points-per-question", type=int, default=4,
                        help="points of each interview question graded by hand (default: 4)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    notebooks = select_notebooks(parser, find_notebooks(args.notebooks), args.only)
    for label in ("points_per_check", "points_per_question"):
        if getattr(args, label) < 1:
            parser.error(f"--{label.replace('_', '-')} must be at least 1")
    try:
        summaries = build_course(notebooks, args.out, course_id=args.course_id,
                                 points_per_check=args.points_per_check, points_per_question=args.points_per_question)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    width = max(len(s.name) for s in summaries)
    print(f"{'assignment':<{width}}  autograded  by hand  points")
    for s in summaries:
        manual = sum(1 for g in s.graded if g.kind == "free text")
        print(f"{s.name:<{width}}  {len(s.graded) - manual:10d}  {manual:7d}  {s.points:6d}")
    print(f"{len(summaries)} assignments in {args.out / 'source'}; nbgrader_config.py in {args.out}. "
          f"Next, in {args.out}: nbgrader generate_assignment NAME")
    return 0


if __name__ == "__main__":
    sys.exit(main())
