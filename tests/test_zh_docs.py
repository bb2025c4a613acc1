"""The Chinese READMEs and teacher's guide say what the English ones say: what a machine can check of a translation.

README.zh-CN.md is the Chinese README.md, docs/teaching.zh-CN.md the Chinese docs/teaching.md. For each pair:
the same `##`/`###` headings in the same order (with the same numbers and code in them), every fenced code block
of the English verbatim in the Chinese, the same tables (rows, columns, and the numbers and code of each row),
the same numbers in each section's prose, and every anchor of a link in the Chinese files pointing at a heading
that exists. That every linked *file* exists is tests/test_docs_links.py's check (both Chinese files are in its
list: tested below). Each checker returns its problems as strings; the last tests show each one finding the
fault in a deliberately broken copy.
"""
from __future__ import annotations

import re
import textwrap
import unicodedata
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [("README.md", "README.zh-CN.md"), ("docs/teaching.md", "docs/teaching.zh-CN.md")]
# Sections that only the Chinese file has (how to report a mistranslation: docs/glossary.md points at it).
ZH_ONLY_SECTIONS = {"README.zh-CN.md": {"发现翻译问题？"}}

FENCE = re.compile(r"^[ \t]*```")
HEADING = re.compile(r"^(#{2,3}) (.+?)\s*$")
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
CODE_SPAN = re.compile(r"`([^`]+)`")  # a code span may run over a line break
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def split_fences(text: str) -> tuple[list[str], list[str]]:
    """(lines outside fenced code blocks, each fenced block's content dedented)."""
    prose, blocks, block = [], [], None
    for line in text.splitlines():
        if FENCE.match(line):
            if block is None:
                block = []
            else:
                blocks.append(textwrap.dedent("\n".join(block)).strip("\n"))
                block = None
        elif block is None:
            prose.append(line)
        else:
            block.append(line)
    if block is not None:
        raise ValueError("a fenced code block is never closed")
    return prose, blocks


def sections(text: str) -> list[tuple[str, str, list[str]]]:
    """[(level, title, prose lines)] with the text before the first heading as ("", "", lines)."""
    found = [("", "", [])]
    for line in split_fences(text)[0]:
        m = HEADING.match(line)
        if m:
            found.append((m.group(1), m.group(2), []))
        else:
            found[-1][2].append(line)
    return found


def tables(lines: list[str]) -> list[list[list[str]]]:
    """Markdown tables in ``lines``: each a list of rows, each row its cells (the --- row left out)."""
    found, current = [], None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|"):
            cells = [c.strip() for c in stripped[1:-1].split("|")]
            if current is None:
                current = []
                found.append(current)
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        else:
            current = None
    return found


def numbers(text: str) -> Counter:
    return Counter(NUMBER.findall(text))


def code_spans(text: str) -> Counter:
    return Counter(" ".join(span.split()) for span in CODE_SPAN.findall(text))


def paired_sections(en: str, zh: str, zh_only: set[str] = frozenset()):
    return sections(en), [s for s in sections(zh) if s[1] not in zh_only]


def heading_problems(en: str, zh: str, zh_only: set[str] = frozenset()) -> list[str]:
    """Same count and order of ##/### headings; each pair has the same numbers and code spans."""
    en_s, zh_s = paired_sections(en, zh, zh_only)
    en_h = [(lvl, title) for lvl, title, _ in en_s[1:]]
    zh_h = [(lvl, title) for lvl, title, _ in zh_s[1:]]
    if [lvl for lvl, _ in en_h] != [lvl for lvl, _ in zh_h]:
        return [f"headings differ: English {[f'{lvl} {t}' for lvl, t in en_h]}, "
                f"Chinese {[f'{lvl} {t}' for lvl, t in zh_h]}"]
    problems = []
    for (_, e), (_, z) in zip(en_h, zh_h):
        if NUMBER.findall(e) != NUMBER.findall(z) or code_spans(e) != code_spans(z):
            problems.append(f"heading {e!r} is paired with {z!r}: numbers or code differ")
    return problems


def code_block_problems(en: str, zh: str) -> list[str]:
    zh_blocks = set(split_fences(zh)[1])
    return [f"code block missing or changed in the Chinese:\n{b}" for b in split_fences(en)[1] if b not in zh_blocks]


def table_problems(en: str, zh: str) -> list[str]:
    """Same tables, same rows and columns; each row has the same numbers and code spans (in any order:
    Chinese puts the words of a cell in another order)."""
    en_t, zh_t = tables(split_fences(en)[0]), tables(split_fences(zh)[0])
    if len(en_t) != len(zh_t):
        return [f"{len(en_t)} tables in the English, {len(zh_t)} in the Chinese"]
    problems = []
    for n, (et, zt) in enumerate(zip(en_t, zh_t), 1):
        if len(et) != len(zt):
            problems.append(f"table {n} ({et[0][0]!r}): {len(et)} rows in the English, {len(zt)} in the Chinese")
            continue
        for er, zr in zip(et, zt):
            if len(er) != len(zr):
                problems.append(f"table {n}, row {er[0]!r}: {len(er)} columns in the English, {len(zr)} in the Chinese")
            joined_e, joined_z = " | ".join(er), " | ".join(zr)
            if numbers(joined_e) != numbers(joined_z):
                missing, added = numbers(joined_e) - numbers(joined_z), numbers(joined_z) - numbers(joined_e)
                problems.append(f"table {n}, row {er[0]!r}: numbers missing in the Chinese "
                                f"{sorted(missing.elements())}, added {sorted(added.elements())}")
            if code_spans(joined_e) != code_spans(joined_z):
                problems.append(f"table {n}, row {er[0]!r}: code {sorted(code_spans(joined_e))} in the English, "
                                f"{sorted(code_spans(joined_z))} in the Chinese")
    return problems


def without_spans(text: str, spans: Counter) -> str:
    """``text`` with as many occurrences of each code span as ``spans`` counts taken out."""
    left = Counter(spans)

    def drop(m: re.Match) -> str:
        span = " ".join(m.group(1).split())
        if left[span] > 0:
            left[span] -= 1
            return ""
        return m.group(0)

    return CODE_SPAN.sub(drop, text)


def section_number_problems(en: str, zh: str, zh_only: set[str] = frozenset()) -> list[str]:
    """Each section's prose (tables included, code blocks not) has the same numbers as its English section.
    Code spans the English section does not have (the Chinese edition's own paths) do not count; every code
    span of the English section must be in the Chinese one."""
    en_s, zh_s = paired_sections(en, zh, zh_only)
    if len(en_s) != len(zh_s):
        return ["the sections do not pair (see the heading check)"]
    problems = []
    for (_, title, e_lines), (_, _, z_lines) in zip(en_s, zh_s):
        e, z = "\n".join(e_lines), "\n".join(z_lines)
        e_code, z_code = code_spans(e), code_spans(z)
        z_counted = without_spans(z, z_code - e_code)
        where = title or "(before the first heading)"
        if numbers(e) != numbers(z_counted):
            missing, added = numbers(e) - numbers(z_counted), numbers(z_counted) - numbers(e)
            problems.append(f"section {where!r}: numbers missing in the Chinese {sorted(missing.elements())}, "
                            f"added {sorted(added.elements())}")
        if e_code - z_code:
            problems.append(f"section {where!r}: code missing in the Chinese: {sorted((e_code - z_code).elements())}")
    return problems


def slug(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation and symbols dropped (but - and _), spaces to -."""
    kept = "".join(ch for ch in title.strip().lower()
                   if ch in "-_ " or not unicodedata.category(ch).startswith(("P", "S")))
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    found, seen = set(), Counter()
    for lvl_title in (HEADING.match(line) or re.match(r"^(#{1,6}) (.+?)\s*$", line)
                      for line in split_fences(text)[0]):
        if lvl_title:
            s = slug(lvl_title.group(2))
            found.add(s if not seen[s] else f"{s}-{seen[s]}")
            seen[s] += 1
    return found


def anchor_problems(doc: Path) -> list[str]:
    """Every link with an #anchor to this page or another .md file of the repository names a heading there."""
    problems = []
    for target in LINK.findall("\n".join(split_fences(doc.read_text(encoding="utf-8"))[0])):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or "#" not in target:
            continue
        path, anchor = target.split("#", 1)
        page = (doc.parent / path) if path else doc
        if page.suffix == ".md" and page.exists() and anchor not in anchors(page.read_text(encoding="utf-8")):
            problems.append(f"{target}: no heading with the anchor #{anchor} in {page.name}")
    return problems


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


IDS = [zh for _, zh in PAIRS]


@pytest.mark.parametrize("en, zh", PAIRS, ids=IDS)
def test_same_headings_in_the_same_order(en, zh):
    problems = heading_problems(read(en), read(zh), ZH_ONLY_SECTIONS.get(zh, set()))
    assert not problems, f"{zh} against {en}:\n" + "\n".join(problems)


@pytest.mark.parametrize("en, zh", PAIRS, ids=IDS)
def test_every_code_block_verbatim(en, zh):
    problems = code_block_problems(read(en), read(zh))
    assert not problems, f"{zh} against {en}:\n" + "\n".join(problems)


@pytest.mark.parametrize("en, zh", PAIRS, ids=IDS)
def test_tables_have_the_same_rows_numbers_and_code(en, zh):
    problems = table_problems(read(en), read(zh))
    assert not problems, f"{zh} against {en}:\n" + "\n".join(problems)


@pytest.mark.parametrize("en, zh", PAIRS, ids=IDS)
def test_each_section_has_the_same_numbers_and_code(en, zh):
    problems = section_number_problems(read(en), read(zh), ZH_ONLY_SECTIONS.get(zh, set()))
    assert not problems, f"{zh} against {en}:\n" + "\n".join(problems)


@pytest.mark.parametrize("zh", IDS)
def test_anchors_of_links_resolve(zh):
    problems = anchor_problems(ROOT / zh)
    assert not problems, f"{zh}:\n" + "\n".join(problems)


def test_link_check_covers_the_chinese_files():
    from tests.test_docs_links import DOCS

    assert {ROOT / zh for zh in IDS} <= set(DOCS), "tests/test_docs_links.py no longer checks the Chinese files"
    assert "docs/teaching.zh-CN.md" in LINK.findall(read("README.zh-CN.md")), "README.zh-CN.md should link the guide"


# The checkers find what they are for: a small bad example each, then a broken copy of the real files.

EN = """# Title

Intro with 3 numbers: 286,504 and `GPT(64)`.

## 1. Start `here`

| a | b |
|---|---|
| x | 1.5 s |

```bash
python -m tools.slides
```

## Links
"""


def test_checkers_pass_a_faithful_small_copy():
    zh = EN.replace("Intro with 3 numbers", "开头有 3 个数").replace("Start `here`", "从 `here` 开始")
    zh = zh.replace("| x | 1.5 s |", "| 某 | 1.5 秒 |").replace("## Links", "## 链接")
    assert not heading_problems(EN, zh) and not code_block_problems(EN, zh)
    assert not table_problems(EN, zh) and not section_number_problems(EN, zh)


@pytest.mark.parametrize("check, broken", [
    (heading_problems, EN.replace("## Links\n", "")),                          # a section left out
    (heading_problems, EN.replace("## Links", "### Links")),                  # a level changed
    (heading_problems, EN.replace("## 1. Start", "## 2. Start")),            # a section number changed
    (code_block_problems, EN.replace("tools.slides", "tools.slide")),         # a command mistyped
    (code_block_problems, EN.replace("```bash\npython -m tools.slides\n```", "")),  # a block left out
    (table_problems, EN.replace("| x | 1.5 s |", "| x | 1.6 s |")),           # a number changed
    (table_problems, EN.replace("| x | 1.5 s |\n", "")),                      # a row left out
    (table_problems, EN.replace("| x | 1.5 s |", "| x |")),                  # a column left out
    (section_number_problems, EN.replace("286,504", "286504")),               # a number reformatted
    (section_number_problems, EN.replace("`GPT(64)`", "GPT")),               # code left out
])
def test_each_checker_fails_on_a_small_bad_example(check, broken):
    assert check(EN, broken), f"{check.__name__} found nothing wrong"


def test_only_the_chinese_edition_s_own_code_is_left_out_of_the_count():
    assert without_spans("`a1` and `a1` and `b2`", Counter({"a1": 1})) == " and `a1` and `b2`"
    en = "## S\n\nRun `x 1`.\n"
    assert not section_number_problems(en, "## S\n\n运行 `x 1`，中文版用 `zh 2`。\n")
    assert section_number_problems(en, "## S\n\n运行 `x 1`，共 2 次。\n")  # a number in prose counts


def test_the_zh_only_section_is_the_only_exception():
    zh = EN + "\n## 发现翻译问题？\n\n提交 12 个 issue。\n"
    assert heading_problems(EN, zh) and not heading_problems(EN, zh, {"发现翻译问题？"})
    assert not section_number_problems(EN, zh, {"发现翻译问题？"})


@pytest.mark.parametrize("en, zh", PAIRS, ids=IDS)
def test_checkers_fail_on_a_broken_copy_of_the_real_files(en, zh, tmp_path):
    en_text, zh_text = read(en), read(zh)
    only = ZH_ONLY_SECTIONS.get(zh, set())
    last_heading = [line for line in zh_text.splitlines() if HEADING.match(line)][-1]
    assert heading_problems(en_text, zh_text.replace(last_heading + "\n", "", 1), only)
    block = split_fences(en_text)[1][0]
    assert code_block_problems(en_text, zh_text.replace(block, block.replace("-m", "-n", 1)))
    row = tables(split_fences(zh_text)[0])[0][1]
    row_line = next(line for line in zh_text.splitlines() if line.strip().startswith("| " + row[0] + " |"))
    assert table_problems(en_text, zh_text.replace(row_line + "\n", "", 1))
    number = next(n for n in NUMBER.findall("\n".join(sections(zh_text)[1][2])))
    title = sections(zh_text)[1][1]
    head, tail = zh_text.split("## " + title, 1)
    changed = head + "## " + title + re.sub(rf"(?<![\d.,]){re.escape(number)}(?![\d.,])", number + "9", tail, count=1)
    assert section_number_problems(en_text, changed, only)
    broken = tmp_path / Path(zh).name
    broken.write_text(zh_text + "\n[back](#no-such-heading)\n", encoding="utf-8")
    assert anchor_problems(broken) == ["#no-such-heading: no heading with the anchor #no-such-heading in "
                                       + broken.name]


def test_slugs_are_githubs():
    assert slug("The `gpt_lesson` package") == "the-gpt_lesson-package"
    assert slug("Exercise checks (`gpt_lesson.checks`) and graded homework (`tools/nbgrader_course`)") == \
        "exercise-checks-gpt_lessonchecks-and-graded-homework-toolsnbgrader_course"
    assert slug("8. 在 JupyterHub 上开课") == "8-在-jupyterhub-上开课"
    assert slug("从这里开始：两条命令") == "从这里开始两条命令"


def test_anchor_check_fails_on_a_missing_heading(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## 可复现性\n", encoding="utf-8")
    good = tmp_path / "good.md"
    good.write_text("## 可复现性\n\n[a](#可复现性) [b](other.md#可复现性) [c](https://x.org/#y)\n", encoding="utf-8")
    assert not anchor_problems(good)
    bad = tmp_path / "bad.md"
    bad.write_text("## 可复现性\n\n[a](#reproducibility) [b](other.md#benchmarks)\n", encoding="utf-8")
    assert len(anchor_problems(bad)) == 2


def second_code_cells_calling_set_language(notebooks: list[Path]) -> dict[str, bool]:
    """{notebook: whether its second code cell (the setup cell after Colab's install cell) sets Chinese}."""
    import json

    found = {}
    for path in notebooks:
        code = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
        found[path.name] = len(code) > 1 and 'gpt_lesson.set_language("zh")' in "".join(code[1]["source"])
    return found


def test_where_readme_zh_says_set_language_is_called():
    # README.zh-CN.md: every Chinese notebook but the welcome page calls it in its second code cell.
    assert "第二个代码单元格" in read("README.zh-CN.md")
    found = second_code_cells_calling_set_language(sorted((ROOT / "notebooks" / "zh").glob("*.ipynb")))
    assert found.pop("00_welcome.ipynb") is False and found and all(found.values()), found


def test_the_set_language_check_can_fail(tmp_path):
    import json

    cells = [{"cell_type": "code", "source": ['import gpt_lesson\n', 'gpt_lesson.set_language("zh")']}]
    (tmp_path / "first.ipynb").write_text(json.dumps({"cells": cells}), encoding="utf-8")
    assert second_code_cells_calling_set_language([tmp_path / "first.ipynb"]) == {"first.ipynb": False}


def unrendered_emphasis(text: str) -> list[str]:
    """Asterisks left in the page as CommonMark renders it: `**小结。**后文` does not close (a closing ** after
    full-width punctuation must be followed by a space or punctuation), so write `**小结**。后文`."""
    markdown_it = pytest.importorskip("markdown_it")
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(text)
    html = re.sub(r"<code>.*?</code>|<pre>.*?</pre>", "", html, flags=re.S)
    return [html[max(0, m.start() - 20):m.end() + 10].replace("\n", " ") for m in re.finditer(r"\*+", html)]


@pytest.mark.parametrize("zh", IDS)
def test_bold_and_italics_render(zh):
    problems = unrendered_emphasis(read(zh))
    assert not problems, f"{zh}: emphasis that does not render (move the punctuation out of it): {problems}"


def test_the_emphasis_check_can_fail():
    assert unrendered_emphasis("**分值。**后文") and not unrendered_emphasis("**分值**。后文 `a**b`")
