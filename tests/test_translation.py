"""The Chinese edition (notebooks/zh/) pairs with the English one cell by cell (tools/translation.py):
same cells in the same order, the same code once comments and strings are removed, the same checks
called, and every translated markdown cell made from the English text as it is now (else: stale)."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tools.translation import EN_DIR, code_signature, pair_problems, source_hash, stamp, zh_path

ROOT = Path(__file__).resolve().parents[1]

ENGLISH = sorted(EN_DIR.glob("*.ipynb"))


@pytest.mark.parametrize("en", ENGLISH, ids=[p.name for p in ENGLISH])
def test_chinese_edition_pairs_with_the_english(en):
    if not zh_path(en).exists():
        # Reported, not failed: the edition grows lesson by lesson (README.zh-CN.md lists what exists).
        pytest.skip(f"zh/{en.name} is not translated yet")
    problems = pair_problems(en, zh_path(en))
    assert not problems, f"{en.name} vs zh/{en.name}:\n  " + "\n  ".join(map(str, problems[:30]))


def test_code_signature_ignores_comments_strings_and_layout():
    en = 'x = f(1)  # one\nprint(f"value {x:.2f}", "units")\nset_language("en")\n'
    zh = 'x = f(1)  # 一\nprint(f"数值 {x:.3f}",\n      "单位")\nset_language("zh")\n'
    assert code_signature(en) == code_signature(zh)
    assert code_signature("x = f(1)") != code_signature("x = f(2)")
    assert code_signature("check_block(my_block)") != code_signature("check_block(my_block, hidden=True)")
    assert code_signature("%matplotlib inline\nx = 1") != code_signature("x = 1")


def _pair(tmp_path: Path, en_cells, zh_cells) -> tuple[Path, Path]:
    (tmp_path / "zh").mkdir(parents=True)
    en, zh = tmp_path / "01_x.ipynb", tmp_path / "zh" / "01_x.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=en_cells), en)
    nbformat.write(nbformat.v4.new_notebook(cells=zh_cells), zh)
    return en, zh


def test_pair_problems_finds_drift_and_stale_translations(tmp_path, monkeypatch):
    import tools.translation as T

    md_en = nbformat.v4.new_markdown_cell("## Summary\n\nAttention mixes values.")
    md_zh = nbformat.v4.new_markdown_cell("## 小结\n\n注意力把值加权混合。",
                                          metadata={"translation": {"en_sha256": source_hash(md_en.source)}})
    code_en = nbformat.v4.new_code_cell('print("rows sum to 1:", ok)')
    code_zh = nbformat.v4.new_code_cell('print("每行之和为 1：", ok)')
    en, zh = _pair(tmp_path, [md_en, code_en], [md_zh, code_zh])
    assert pair_problems(en, zh) == []

    # code that computes something else is a drift
    en, zh = _pair(tmp_path / "b", [md_en, code_en], [md_zh, nbformat.v4.new_code_cell('print("x", not ok)')])
    assert [p.kind for p in pair_problems(en, zh)] == ["code"]

    # the English prose changed after translation: stale
    md_en2 = nbformat.v4.new_markdown_cell("## Summary\n\nAttention mixes values with learned weights.")
    en, zh = _pair(tmp_path / "c", [md_en2, code_en], [md_zh, code_zh])
    assert [p.kind for p in pair_problems(en, zh)] == ["stale"]
    monkeypatch.setattr(T, "EN_DIR", en.parent)
    assert stamp(zh) == 1 and pair_problems(en, zh) == []

    # a missing cell is a structure problem; a missing file is reported as missing
    en, zh = _pair(tmp_path / "d", [md_en, code_en], [md_zh])
    assert "structure" in [p.kind for p in pair_problems(en, zh)]
    assert [p.kind for p in pair_problems(en, tmp_path / "nowhere.ipynb")] == ["missing"]


def test_code_signature_compares_fstring_expressions_on_every_python():
    # On Python 3.11 an f-string is one token: comparing tokens would miss swapped expressions.
    assert code_signature('print(f"{a} then {b}")') != code_signature('print(f"{b} then {a}")')
    assert code_signature('print(f"{a:.2f} 和 {b!r}")') == code_signature('print(f"{a:>8.3f} and {b!r}")')
    assert code_signature('print(f"{a!r}")') != code_signature('print(f"{a!s}")')
    assert code_signature('x = "a" "b"') == code_signature('x = "一二"')


def _answer_body(cell) -> str:
    """The text of a <details> answer block, without its summary line."""
    text = "".join(cell.source)
    return text.split("</summary>", 1)[1].rsplit("</details>", 1)[0].strip()


def test_interview_answers_have_one_source_per_language():
    """Lesson 11 gives each model answer in both languages, in both editions: the English notebook's Chinese
    answer is the Chinese edition's answer, and the Chinese notebook's English answer is the English one."""
    en = nbformat.read(ROOT / "notebooks" / "11_interview_questions.ipynb", as_version=4).cells
    zh = nbformat.read(ROOT / "notebooks" / "zh" / "11_interview_questions.ipynb", as_version=4).cells
    questions = [i for i, cell in enumerate(en) if cell.cell_type == "markdown" and cell.source.startswith("## Q")]
    assert len(questions) == 3, questions
    for q in questions:
        first = next(i for i in range(q, len(en)) if "<summary>" in en[i].source and "</details>" in en[i].source)
        assert _answer_body(en[first + 1]) == _answer_body(zh[first]), f"Q at cell {q}: the two Chinese answers differ"
        assert _answer_body(zh[first + 1]) == _answer_body(en[first]), f"Q at cell {q}: the two English answers differ"
