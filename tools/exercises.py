"""Find the exercises ("Your turn") of a lesson notebook: their stub, check, hint and solution cells.

A lesson's exercises follow one layout (see ``docs/notebook-conventions.md``)::

    ### Your turn N: title          markdown: the task
    def my_fn(...): raise NotImplementedError     code: the stub the learner edits (one or more cells)
    result = check_x(my_fn)         code: the check call (its stored output says "not attempted yet")
    <details><summary>Hint</summary> ...          markdown, optional
    <details><summary>Solution</summary> ```python ...``` </details>   markdown

An exercise runs on its own, given the lesson's setup cells (the code cells between "What you will
learn" and the first section): the tests run each solution that way, and the nbgrader course is built
from the same structure.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

import nbformat

__all__ = ["Exercise", "cell_text", "find_exercises", "setup_cells", "solution_code", "check_calls",
           "without_magics", "summary_kind", "summary_text", "answer_words", "defined_names", "YOUR_TURN_RE"]


# "### Your turn 1: title" in English, "### 动手练习 1：title" in the Chinese edition.
YOUR_TURN_RE = re.compile(r"^###\s+(?:Your turn|动手练习)\s*(\d+)\s*[:：]\s*(\S.*)$", re.M)
LEARN_RE = re.compile(r"^## (?:What you will learn|学习目标)\s*$", re.M)
SECTION_RE = re.compile(r"^#{1,3} ", re.M)
DETAILS_RE = re.compile(r"<details\b[^>]*>\s*<summary\b[^>]*>\s*(.*?)\s*</summary>", re.S | re.I)
# What a <details> summary says the block is, whatever decorates it ("💡 Solution", "<b>Hint</b>",
# "Worked solution", "参考答案（中文）"). Hints and teaching notes are named at the start; an answer may be
# named anywhere in a summary that is not itself a question ("Why is the answer NaN?" is prose).
_HINT_RE = re.compile(r"^(?:hints?|small hint|提示)\b", re.I)
_TEACHING_RE = re.compile(r"^(?:teaching notes?|note for (?:the )?(?:teacher|lecturer)s?|教学提示)", re.I)
_ANSWER_RE = re.compile(r"\b(?:model answers?|sample answers?|solutions?|answers?)\b|参考答案|答案|解答|解法|题解",
                        re.I)
_CODE_BLOCK_RE = re.compile(r"```(?:python|py|ipython3?)?[ \t]*\n(.*?)```", re.S)


def cell_text(cell) -> str:
    return cell.source if isinstance(cell.source, str) else "".join(cell.source)


def check_calls(source: str) -> list[str]:
    """The calls to ``check_*(...)`` among a cell's top-level statements, as source text."""
    calls = []
    try:
        body = ast.parse(without_magics(source)).body
    except SyntaxError:
        return calls
    for stmt in body:
        value = getattr(stmt, "value", None)
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id.startswith("check_"):
            calls.append(ast.unparse(value))
    return calls


def solution_code(markdown: str) -> str:
    """The ```python blocks of a markdown cell, joined."""
    return "\n\n".join(_CODE_BLOCK_RE.findall(markdown))


def without_magics(source: str) -> str:
    """Cell source with IPython magics (``%matplotlib inline``, ``!pip``) commented out."""
    return "\n".join("# " + line if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))


def summary_text(summary_html: str) -> str:
    """A <summary>'s text without tags and without the emoji, marks and punctuation in front of its words."""
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", summary_html)).strip()
    return re.sub(r"^[\W_]+", "", text)


def summary_kind(summary_html: str) -> str | None:
    """"hint", "teaching_note" or "answer" for what a <details> summary calls its block (any language), else None.

    The words are found whatever decorates them: "💡 Solution", "Worked solution", "Show the answer",
    "<b>参考答案</b>" are answers; "Hint: ..." is a hint; a summary that asks a question is neither.
    """
    text = summary_text(summary_html)
    if _HINT_RE.match(text):
        return "hint"
    if _TEACHING_RE.match(text):
        return "teaching_note"
    if text.endswith(("?", "？")) or not _ANSWER_RE.search(text):
        return None
    return "answer"


def answer_words(summary_html: str) -> str:
    """The words of a summary that name an answer ("model answer" in "Reveal: model answer"), or ""."""
    m = _ANSWER_RE.search(summary_text(summary_html))
    return m.group(0) if m else ""


def defined_names(source: str) -> set[str]:
    """The functions and classes a piece of code defines at its top level."""
    try:
        body = ast.parse(without_magics(source)).body
    except SyntaxError:
        return set()
    return {s.name for s in body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _details_kind(markdown: str, *, after_check: bool = False) -> str | None:
    """"hint", "solution" or "teaching_note" for a cell whose first <details> block has that role.

    The summary's words decide first; after an exercise's check, a collapsed block that is neither a hint
    nor a teaching note and holds Python code is that exercise's solution, whatever its title says.
    """
    m = DETAILS_RE.search(markdown)
    if not m:
        return None
    kind = summary_kind(m.group(1))
    if kind == "answer" or (kind is None and after_check and _CODE_BLOCK_RE.search(markdown[m.end():])):
        return "solution"
    return kind


@dataclass
class Exercise:
    """One "Your turn" section of a lesson; every index is a cell index of the notebook."""

    number: int
    title: str
    start: int
    end: int
    stub_cells: list[int] = field(default_factory=list)
    check_cell: int | None = None
    hint_cells: list[int] = field(default_factory=list)
    solution_cells: list[int] = field(default_factory=list)
    other_cells: list[int] = field(default_factory=list)

    def checks(self, nb) -> list[str]:
        return check_calls(cell_text(nb.cells[self.check_cell])) if self.check_cell is not None else []

    def solution(self, nb) -> str:
        return "\n\n".join(solution_code(cell_text(nb.cells[i])) for i in self.solution_cells)


def find_exercises(nb: nbformat.NotebookNode) -> list[Exercise]:
    cells = nb.cells
    starts = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and YOUR_TURN_RE.search(cell_text(c))]
    exercises = []
    for start in starts:
        m = YOUR_TURN_RE.search(cell_text(cells[start]))
        end = next((j for j in range(start + 1, len(cells)) if cells[j].cell_type == "markdown"
                    and SECTION_RE.search(cell_text(cells[j]))), len(cells))
        ex = Exercise(int(m.group(1)), m.group(2).strip(), start, end)
        for j in range(start + 1, end):
            cell, text = cells[j], cell_text(cells[j])
            if cell.cell_type == "code":
                if ex.check_cell is None and check_calls(text):
                    ex.check_cell = j
                elif ex.check_cell is None:
                    ex.stub_cells.append(j)
                else:
                    ex.other_cells.append(j)
            elif cell.metadata.get("slideshow", {}).get("slide_type") == "notes":
                ex.other_cells.append(j)
            elif _details_kind(text, after_check=ex.check_cell is not None) == "solution":
                ex.solution_cells.append(j)
            elif _details_kind(text) == "hint":
                ex.hint_cells.append(j)
            else:
                ex.other_cells.append(j)
        exercises.append(ex)
    return exercises


def setup_cells(nb: nbformat.NotebookNode) -> list[int]:
    """The code cells between '## What you will learn' and the next '## ' section (imports, shared data)."""
    cells = nb.cells
    learn = next((i for i, c in enumerate(cells) if c.cell_type == "markdown" and LEARN_RE.search(cell_text(c))), None)
    if learn is None:
        return []
    end = next((j for j in range(learn + 1, len(cells)) if cells[j].cell_type == "markdown"
                and re.match(r"## ", cell_text(cells[j]))), len(cells))
    return [j for j in range(learn + 1, end) if cells[j].cell_type == "code"]
