"""Keep the Chinese edition (``notebooks/zh/``) in step with the English notebooks.

A Chinese notebook is its English twin with the prose translated: the same cells in the same order,
code that is equal once comments and string literals are removed (so it prints Chinese text but
computes the same thing and calls the same checks), and, in each translated cell's metadata, the
sha256 of the English source it was translated from::

    "metadata": {"translation": {"en_sha256": "<first 16 hex digits>"}}

When an English cell changes, its hash no longer matches and the translation is reported as stale.

    python -m tools.translation status            # every pair: missing, drifted or stale cells
    python -m tools.translation stamp zh/NN.ipynb  # after translating: record the English hashes

``tests/test_translation.py`` runs the same comparison in CI.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
EN_DIR = ROOT / "notebooks"
ZH_DIR = EN_DIR / "zh"
HASH_LEN = 16

# The fixed words of a lesson, per language (headings, exercise and <details> summaries, navigation).
# The time label keeps its markup: Chinese puts the full-width colon after the bold (``**时间**：``), because
# CommonMark does not close ``**时间：**`` when a letter follows it (``**时间：**阅读`` shows the asterisks).
WORDS = {
    "en": {"learn": "What you will learn", "time": "**Time:**", "summary": "Summary", "your_turn": "Your turn",
           "hint": "Hint", "solution": "Solution", "teaching_note": "Teaching note", "answer": "Answer",
           "model_answer": "Model answer", "previous": "Previous:", "next": "Next:"},
    "zh": {"learn": "学习目标", "time": "**时间**：", "summary": "小结", "your_turn": "动手练习",
           "hint": "提示", "solution": "参考答案", "teaching_note": "教学提示", "answer": "答案",
           "model_answer": "参考答案（面试回答）", "previous": "上一课：", "next": "下一课："},
}

__all__ = ["WORDS", "code_signature", "source_hash", "Problem", "pair_problems", "zh_path", "en_path", "stamp"]


def _text(cell) -> str:
    return cell.source if isinstance(cell.source, str) else "".join(cell.source)


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_LEN]


class _BlankStrings(ast.NodeTransformer):
    """Empty every string literal; of an f-string keep only the expressions and their conversions."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, str):
            return ast.copy_location(ast.Constant(value=""), node)
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        parts = [ast.FormattedValue(value=self.visit(v.value), conversion=v.conversion, format_spec=None)
                 for v in node.values if isinstance(v, ast.FormattedValue)]
        return ast.copy_location(ast.JoinedStr(values=parts), node)


def code_signature(source: str) -> str:
    """A code cell's syntax tree without comments, string literals and layout (IPython magics kept as text).

    Two cells with the same signature compute the same thing; one may print Chinese and the other
    English. The expressions inside f-strings are compared, their text and format specs are not.
    Built on :mod:`ast`, so the result is the same on every Python version.
    """
    lines, magics = [], []
    for line in source.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")):
            magics.append("magic:" + stripped.strip())
            line = ""
        lines.append(line)
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError as e:
        return f"<syntax error: {e.msg}>"
    tree = _BlankStrings().visit(tree)
    return "\n".join(magics + [ast.dump(tree, annotate_fields=False, include_attributes=False)])


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, re.S)


@dataclass
class Problem:
    cell: int | None
    kind: str  # "missing", "structure", "code", "stale", "unstamped"
    text: str

    def __str__(self) -> str:
        where = f"cell {self.cell}: " if self.cell is not None else ""
        return f"[{self.kind}] {where}{self.text}"


def zh_path(en: Path) -> Path:
    return ZH_DIR / en.name


def en_path(zh: Path) -> Path:
    return EN_DIR / zh.name


def pair_problems(en: Path, zh: Path) -> list[Problem]:
    """Everything in which ``zh`` is not a faithful, current translation of ``en``."""
    if not zh.is_file():
        return [Problem(None, "missing", f"no Chinese edition of {en.name} at {zh}")]
    a = nbformat.read(en, as_version=4).cells
    b = nbformat.read(zh, as_version=4).cells
    problems = []
    if len(a) != len(b):
        problems.append(Problem(None, "structure", f"{len(a)} cells in English, {len(b)} in Chinese"))
    for i, (ce, cz) in enumerate(zip(a, b)):
        if ce.cell_type != cz.cell_type:
            problems.append(Problem(i, "structure", f"{ce.cell_type} in English, {cz.cell_type} in Chinese"))
            continue
        slide_e = ce.metadata.get("slideshow", {}).get("slide_type")
        slide_z = cz.metadata.get("slideshow", {}).get("slide_type")
        if slide_e != slide_z:
            problems.append(Problem(i, "structure", f"slide_type {slide_e!r} in English, {slide_z!r} in Chinese"))
        te, tz = _text(ce), _text(cz)
        if ce.cell_type == "code":
            if code_signature(te) != code_signature(tz):
                problems.append(Problem(i, "code", "the code differs from the English cell (beyond comments and "
                                        "strings): the two editions must compute the same thing"))
            continue
        blocks_e, blocks_z = python_blocks(te), python_blocks(tz)
        if [code_signature(x) for x in blocks_e] != [code_signature(x) for x in blocks_z]:
            problems.append(Problem(i, "code", "the ```python blocks (solutions) differ from the English cell"))
        recorded = cz.metadata.get("translation", {}).get("en_sha256")
        if recorded is None:
            problems.append(Problem(i, "unstamped", "no metadata.translation.en_sha256: translate it, then run "
                                    f"python -m tools.translation stamp {zh.name}"))
        elif recorded != source_hash(te):
            problems.append(Problem(i, "stale", "the English cell changed since it was translated: update the "
                                    "translation, then stamp it"))
    return problems


def stamp(zh: Path, cells: list[int] | None = None) -> int:
    """Record the English hashes in ``zh``'s markdown cells (all, or ``cells``); returns how many were stamped."""
    en = en_path(zh)
    a = nbformat.read(en, as_version=4).cells
    nb = nbformat.read(zh, as_version=4)
    if len(a) != len(nb.cells):
        raise ValueError(f"{zh.name}: {len(nb.cells)} cells, the English edition has {len(a)}; align them first")
    count = 0
    for i, (ce, cz) in enumerate(zip(a, nb.cells)):
        if cz.cell_type != "markdown" or (cells is not None and i not in cells):
            continue
        cz.metadata.setdefault("translation", {})["en_sha256"] = source_hash(_text(ce))
        count += 1
    nbformat.write(nb, zh)
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="list the problems of every pair")
    p_stamp = sub.add_parser("stamp", help="record the English hashes in a Chinese notebook")
    p_stamp.add_argument("notebook", type=Path, help="notebooks/zh/NN_name.ipynb (or zh/NN_name.ipynb)")
    p_stamp.add_argument("--cells", type=int, nargs="*", help="only these cell indices")
    args = parser.parse_args(argv)
    if args.command == "stamp":
        path = args.notebook if args.notebook.is_file() else EN_DIR / args.notebook
        print(f"{path}: stamped {stamp(path, args.cells)} markdown cells")
        return 0
    total = 0
    for en in sorted(EN_DIR.glob("*.ipynb")):
        found = pair_problems(en, zh_path(en))
        total += len(found)
        print(f"{en.name}: {'ok' if not found else f'{len(found)} problem(s)'}")
        for p in found[:20]:
            print("   ", p)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
