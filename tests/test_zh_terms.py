"""The Chinese edition uses one rendering per term: the glossary's "One rendering per term" table."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"


def avoided_renderings() -> dict[str, str]:
    """{rendering not to use: the one to use} from the glossary's table."""
    text = GLOSSARY.read_text(encoding="utf-8")
    table = text.split("## One rendering per term", 1)[1].split("\n## ", 1)[0]
    avoided = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("English", "") or set(cells[0]) <= set("-"):
            continue
        for word in re.split(r",\s*", cells[2]):
            if word and not word.startswith("—"):
                avoided[word] = cells[1]
    return avoided


def prose_of_chinese_edition() -> list[tuple[str, str]]:
    """(where, text) for every markdown cell of notebooks/zh and README.zh-CN.md."""
    found = [("README.zh-CN.md", (ROOT / "README.zh-CN.md").read_text(encoding="utf-8"))]
    for path in sorted((ROOT / "notebooks" / "zh").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] == "markdown":
                found.append((f"zh/{path.name}[{i}]", "".join(cell["source"])))
    return found


def test_the_table_lists_avoided_renderings():
    avoided = avoided_renderings()
    assert {"词嵌入", "融合实现", "代码格"} <= set(avoided), avoided


def uses(text: str, word: str) -> bool:
    """``word`` in ``text``, not as part of a longer rendering that is right (词元嵌入 contains 嵌入, not 词嵌入)."""
    return re.search(rf"(?<!元){re.escape(word)}", text) is not None if word == "词嵌入" else word in text


@pytest.mark.parametrize("word", sorted(avoided_renderings()))
def test_chinese_prose_uses_one_rendering(word):
    offenders = [where for where, text in prose_of_chinese_edition() if uses(text, word)]
    assert not offenders, f"{word!r} should be {avoided_renderings()[word]!r} (docs/glossary.md) in: {offenders}"


def catalogue_translations() -> list[tuple[str, str]]:
    """(msgid, msgstr) of every entry of the Chinese catalogue: what the widgets, checks and errors print."""
    from babel.messages.pofile import read_po

    with open(ROOT / "gpt_lesson" / "locale" / "zh" / "LC_MESSAGES" / "gpt_lesson.po", "rb") as f:
        catalog = read_po(f, locale="zh")
    return [(str(m.id), m.string if isinstance(m.string, str) else " ".join(m.string))
            for m in catalog if m.id and m.string]


@pytest.mark.parametrize("word", sorted(avoided_renderings()))
def test_the_catalogue_uses_one_rendering(word):
    offenders = [msgid[:60] for msgid, msgstr in catalogue_translations() if uses(msgstr, word)]
    assert not offenders, f"{word!r} should be {avoided_renderings()[word]!r} (docs/glossary.md) in the catalogue: {offenders}"


def test_the_check_can_fail():
    assert uses("只有词嵌入", "词嵌入") and not uses("词元嵌入", "词嵌入")
    assert uses("被屏蔽：softmax 前为 −∞", "屏蔽") and "屏蔽" in avoided_renderings()
