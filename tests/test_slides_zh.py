"""The Chinese edition's slide decks and hand-outs, built as the English ones are (tests/test_slides.py).

One build of every notebook in notebooks/zh as the lecture cut (what a teacher projects: ``python -m
tools.slides --notebooks notebooks/zh --lecture``): a deck per notebook, offline, with the counts the
lecture cut gives, Chinese text on the slides and no test scaffolding; and each Chinese lesson's hand-out
without any answer. The browser measurements of the Chinese decks (text size, missing glyphs) are in
tests/test_slides.py; this file only uses tools/slides.py's public functions.
"""
from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest

from tools.slides import answer_kind, build_decks, count_slides, find_notebooks, remote_references, strip_solutions

REPO = Path(__file__).resolve().parents[1]
ZH = REPO / "notebooks" / "zh"
ZH_NAMES = [p.stem for p in find_notebooks(ZH)]
_DETAILS_RE = re.compile(r"<details\b.*?</details\s*>", re.S)


def _cjk(text: str) -> int:
    return sum("\u4e00" <= ch <= "\u9fff" for ch in text)


@pytest.fixture(scope="module")
def zh_lecture(tmp_path_factory):
    if shutil.which("npm") is None:
        pytest.fail("npm is needed to build the slides: apt-get install -y npm")
    out = tmp_path_factory.mktemp("slides-zh")
    start = time.perf_counter()
    decks = build_decks(find_notebooks(ZH), out, lecture=True)
    print(f"\nbuilt {len(decks)} Chinese lecture decks in {time.perf_counter() - start:.1f} s")
    return {"out": out, "decks": {d.notebook.stem: d for d in decks}}


@pytest.mark.slow
def test_every_chinese_notebook_has_a_lecture_deck_with_local_scripts_only(zh_lecture):
    out, decks = zh_lecture["out"], zh_lecture["decks"]
    english = [p.stem for p in find_notebooks(REPO / "notebooks")]
    assert sorted(decks) == sorted(ZH_NAMES) == sorted(english)  # every English deck has its Chinese one
    index = (out / "index.html").read_text(encoding="utf-8")
    assert "the lecture cut" in index
    for name, deck in decks.items():
        page = deck.html.read_text(encoding="utf-8")
        assert remote_references(page) == [], name
        assert 'src="vendor/requirejs/require.js"' in page and "vendor/reveal.js/dist/reveal.js" in page
        assert "vendor/mathjax/MathJax.js" in page and "vendor/fonts.css" in page, name
        # The lecture cut's counts, as tools.slides computes them for the notebook.
        nb = nbformat.read(deck.notebook, as_version=4)
        body = page.split('<div class="slides">', 1)[1]
        assert body.count("<section") == deck.horizontal + deck.total, name
        assert deck.total >= count_slides(nb)[1], name  # the cut only splits slides
        assert f'<a href="{name}.html">' in index
        # The slides speak Chinese, and hold no test scaffolding.
        assert _cjk(body) > 300, (name, _cjk(body))
        assert "NBVAL_" not in body, name
    # The Chinese text is drawn from the bundled CJK font, not from whatever the classroom's PC has.
    assert "Noto Sans SC" in (out / "vendor" / "fonts.css").read_text(encoding="utf-8")
    assert any((out / "vendor" / "@fontsource" / "noto-sans-sc").rglob("*.woff2"))


@pytest.mark.parametrize("name", ZH_NAMES)
def test_chinese_hand_out_of_each_lesson_has_no_answer(name):
    """Every 参考答案 (solutions, model answers) and answer block is removed from the Chinese hand-outs; hints
    (提示) stay, as in the English ones."""
    nb = nbformat.read(ZH / f"{name}.ipynb", as_version=4)
    exercises = sum(len(re.findall(r"^### 动手练习", c.source, re.M)) for c in nb.cells if c.cell_type == "markdown")
    answers = lambda book: [b for c in book.cells if c.cell_type == "markdown"  # noqa: E731
                            for b in _DETAILS_RE.findall(c.source) if answer_kind(b)]
    stripped, removed = strip_solutions(nb)
    assert removed == len(answers(nb)) >= exercises
    assert answers(stripped) == []
    left = [c.source for c in stripped.cells if c.cell_type == "markdown" and re.search(r"<summary>(<[^>]+>)*\s*参考答案", c.source)]
    assert left == [], f"{name}: an answer block the hand-out does not remove"
    hints = lambda book: sum(c.source.count("<summary>提示</summary>") for c in book.cells)  # noqa: E731
    assert hints(stripped) == hints(nb)
