"""What a machine can check of docs/zh-style.md in the Chinese edition (notebooks/zh, the zh catalogue)."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
ZH = sorted((ROOT / "notebooks" / "zh").glob("*.ipynb"))
CATALOGUE = ROOT / "gpt_lesson" / "locale" / "zh" / "LC_MESSAGES" / "gpt_lesson.po"
CJK = re.compile(r"[\u4e00-\u9fff]")
BAD_RATIO = re.compile(r"大了\s*[~\d{][^倍\n]{0,30}倍|(?<![缩减])小\s*[~\d{][^倍\n]{0,30}倍")
SPACED_QUOTE = re.compile(r"[\u4e00-\u9fff] [“”]|[“”] [\u4e00-\u9fff]")
# Two authors joined in English, or a half-width comma after the year of a 等人 citation: （Hendrycks and Gimpel, 2016）
ENGLISH_CITATION = re.compile(r"\b[A-Z][a-z]+ (?:and|&) [A-Z][a-z]+[,，] ?\d{4}|等人，\d{4}, ")
COMMONMARK = MarkdownIt("commonmark")


def chinese_prose(text: str) -> bool:
    """Mostly Chinese (lesson 11's English model answers and reference lists are not)."""
    return len(CJK.findall(text)) > 0.15 * max(1, len(re.findall(r"[A-Za-z]", text)))


def cells(path: Path, kind: str) -> list[tuple[int, str]]:
    return [(i, "".join(c["source"])) for i, c in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"])
            if c["cell_type"] == kind]


def spaced_label_prints(code: str) -> list[int]:
    """Lines of print("label：", value, ...) calls (print's separator puts a space after the full-width colon)
    and of print(f"label： {value}"), which prints the same; two or more spaces are padding that aligns columns."""
    try:
        tree = ast.parse(code)
    except SyntaxError:  # IPython magics
        tree = ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines()))
    def one_space_before_value(arg: ast.expr) -> bool:  # f"label： {value}"
        parts = arg.values if isinstance(arg, ast.JoinedStr) else []
        return any(isinstance(a, ast.Constant) and a.value.endswith("： ") and isinstance(b, ast.FormattedValue)
                   for a, b in zip(parts, parts[1:]))

    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
            and (len(node.args) > 1 and any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                            and a.value.rstrip(" ").endswith("：") for a in node.args[:-1])
                 or any(one_space_before_value(a) for a in node.args))]


def bold_problems(markdown: str) -> list[str]:
    """Every ``**`` (or ``__``) that CommonMark leaves as literal characters instead of bold, and every bold
    label with its colon inside.

    A closing ``**`` must be right-flanking: after full-width punctuation it only closes when a space or
    punctuation follows, so ``**讲课安排：**第 2 周`` shows its asterisks (Jupyter's renderer follows the spec);
    ``**时间：** 阅读`` renders but needs that space. Write the label as ``**时间**：阅读``.
    """
    found = []
    for token in COMMONMARK.parse(markdown):
        children = token.children or []
        for child, after in zip(children, children[1:] + [None]):
            m = re.search(r"\*\*|__", child.content) if child.type == "text" else None
            if m:
                found.append(f"shown as text, not bold: {child.content[max(0, m.start() - 12):m.start() + 20]!r}")
            if child.type == "text" and after is not None and after.type == "strong_close" \
                    and child.content.endswith(("：", ":")):
                found.append(f"colon inside the bold: {child.content[-12:]!r}: write **标签**：")
    return found


@pytest.mark.parametrize("path", ZH, ids=[p.stem for p in ZH])
def test_bold_renders(path):
    problems = [f"[{i}] {p}" for i, text in cells(path, "markdown") for p in bold_problems(text)]
    assert not problems, f"{path.name} (docs/zh-style.md):\n" + "\n".join(problems)


@pytest.mark.parametrize("path", ZH, ids=[p.stem for p in ZH])
def test_prose_ratios_quotes_and_citations(path):
    problems = []
    for i, text in cells(path, "markdown"):
        if not chinese_prose(text):
            continue
        prose = re.sub(r"```.*?```|`[^`\n]*`", "", text, flags=re.S)
        problems += [f"[{i}] ratio {m.group(0)!r}: write 是…的 N 倍 / 只有…的 1/N" for m in BAD_RATIO.finditer(prose)]
        problems += [f"[{i}] space around a quotation mark: {m.group(0)!r}" for m in SPACED_QUOTE.finditer(prose)]
        problems += [f"[{i}] 'et al.' in Chinese prose: write 等人" for _ in re.finditer(r"\bet al\.", prose)]
        problems += [f"[{i}] citation {m.group(0)!r}: write （甲 和 乙，2016） / （甲 等人，2017，“标题”）"
                     for m in ENGLISH_CITATION.finditer(prose)]
    assert not problems, f"{path.name} (docs/zh-style.md):\n" + "\n".join(problems)


@pytest.mark.parametrize("path", ZH, ids=[p.stem for p in ZH])
def test_printed_labels_and_ratios_in_code(path):
    problems = []
    for i, code in cells(path, "code"):
        problems += [f"[{i}] line {n}: print(\"…：\", value) prints '： value': use an f-string"
                     for n in spaced_label_prints(code)]
        problems += [f"[{i}] ratio {m.group(0)!r}" for m in BAD_RATIO.finditer(code)]
    assert not problems, f"{path.name} (docs/zh-style.md):\n" + "\n".join(problems)


def test_catalogue_ratios():
    bad = [m.group(0) for m in BAD_RATIO.finditer(CATALOGUE.read_text(encoding="utf-8"))]
    assert not bad, f"gpt_lesson.po: write 是…的 N 倍 / 只有…的 1/N: {bad}"


def test_the_checks_can_fail():
    assert spaced_label_prints('print("最大差异：", d)') == [1] and not spaced_label_prints('print(f"最大差异：{d}")')
    # an f-string with one space after the colon prints the same "： 0.001"; wider padding aligns columns
    assert spaced_label_prints('print(f"最大差异： {d:.3f}")') == [1]
    assert spaced_label_prints('print(f"形状：{s}"\n      f" | 差异： {d}")') == [1]
    assert not spaced_label_prints('print(f"第 0 行：   {a}")') and not spaced_label_prints('print(f"比例： 1/{n}")')
    assert BAD_RATIO.search("权重大了 3.6 倍") and BAD_RATIO.search("梯度小 {r:.0f} 倍")
    assert not BAD_RATIO.search("是后者的 3.6 倍") and not BAD_RATIO.search("缩小 4 倍")
    assert SPACED_QUOTE.search("选中了 “But” 中") and not SPACED_QUOTE.search("选中了“But”中")
    assert ENGLISH_CITATION.search("（Hendrycks and Gimpel, 2016）") and ENGLISH_CITATION.search("Hendrycks & Gimpel，2016")
    assert ENGLISH_CITATION.search('（Dao 等人，2022, "FlashAttention"）')
    assert not ENGLISH_CITATION.search("（Hendrycks 和 Gimpel，2016）") and not ENGLISH_CITATION.search("（Dao 等人，2022，“FlashAttention”）")
    assert bold_problems("**讲课安排：**第 2 周") == ["shown as text, not bold: '**讲课安排：**第 2 周'"]
    assert bold_problems("的**（padding）**词元") == ["shown as text, not bold: '的**（padding）**词元'"]
    assert bold_problems("**时间：** 阅读") == ["colon inside the bold: '时间：': write **标签**："]
    assert bold_problems("**讲课安排**：第 2 周，**很重要。** 是的；`a**b`，**静态**（static）：**吞吐量**") == []
