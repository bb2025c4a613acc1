"""The offline slide decks: slide counting, answer stripping, test scaffolding, the build, and the decks
in Chromium.

The build fixture builds a deck for every notebook in notebooks/ plus a small notebook written
here (it has every slide type, a formula, a local figure, speaker notes, a solution, model answers,
test scaffolding, a long code line and Chinese terms and emoji), so the browser tests have a known
deck whatever the lessons hold. The browser tests open decks from file:// with the network off, in
a Chromium that sees only the DejaVu fonts (a Linux lab PC without CJK or emoji fonts), and measure
every slide with tools/slide_metrics.py: text size on a 1280x720 projector, code cut off on the
right, characters drawn as missing-glyph boxes.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tools import slide_metrics, slides
from tools.exercises import find_exercises, without_magics
from tools.slide_metrics import BODY_MIN_PX, CHROMIUM, CODE_MIN_PX, measure_deck, open_browser, screenshot_slide
from tools.slides import (
    FONT_FAMILIES,
    VendorError,
    answer_kind,
    build_decks,
    count_slides,
    fetch_vendor,
    find_notebooks,
    remote_references,
    strip_scaffolding,
    strip_solutions,
    write_student_copies,
)

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts" / "slides"
LONG_LINE = ("weights = {\"查询 (query)\": 0.25, \"键 (key)\": 0.75}  # a comment long enough to run far past "
             "the right edge of a 1280 px slide at 26 px")


def _slide_type(cell) -> str:
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "-")


def _cell(cell, slide_type: str):
    cell.metadata["slideshow"] = {"slide_type": slide_type}
    return cell


def _notebook(types: list[str]) -> dict:
    return new_notebook(cells=[_cell(new_markdown_cell(f"cell {i}"), t) for i, t in enumerate(types)])


def _tiny_notebook(folder: Path) -> Path:
    """A two-minute lesson: 3 top-level slides, 4 with the subslide, a fragment, notes, a solution."""
    (folder / "figs").mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1, 2], [0, 1, 4])
    fig.savefig(folder / "figs" / "curve.png")
    plt.close(fig)
    nb = new_notebook(cells=[
        _cell(new_markdown_cell(
            "# 99 · Tiny lesson\n\n"
            "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            "(https://colab.research.google.com/github/gpt-lesson/gpt-lesson/blob/main/notebooks/99_tiny.ipynb)\n\n"
            "Next: [the other lesson](98_other.ipynb)"), "slide"),
        _cell(new_code_cell("import sys"), "skip"),
        _cell(new_markdown_cell("Say hello first."), "notes"),
        _cell(new_markdown_cell(
            "## Attention\n\n$$\\mathrm{softmax}\\left(\\frac{QK^T}{\\sqrt{d_k}}\\right)V$$"), "slide"),
        _cell(new_markdown_cell("A point revealed on click."), "fragment"),
        _cell(new_markdown_cell("### A subslide\n\n![curve](figs/curve.png)"), "subslide"),
        _cell(new_code_cell("1 + 1", execution_count=1, outputs=[
            new_output("execute_result", {"text/plain": "2"}, execution_count=1)]), "-"),
        _cell(new_markdown_cell("Mention why we divide by sqrt(d_k)."), "notes"),
        _cell(new_code_cell("explorer", execution_count=2, outputs=[new_output("display_data", {
            "application/vnd.jupyter.widget-view+json": {"model_id": "abc", "version_major": 2, "version_minor": 0},
            "text/plain": "ScalingExplorer(...)"})]), "-"),
        _cell(new_code_cell(
            f"# NBVAL_IGNORE_OUTPUT\n{LONG_LINE}\nprint(\"✅ passed: √d_k, Qᵀ, ⏎ 因果掩码\")\n"
            "# Check: the weights sum to one.\nassert abs(sum(weights.values()) - 1) < 1e-9",
            execution_count=3, outputs=[new_output("stream", name="stdout", text=(
                "✅ passed: √d_k, Qᵀ, ⏎ 因果掩码\n" + "0123456789" * 14 + "\n"))]), "-"),
        _cell(new_code_cell("# Check: scaffolding only.\nassert 1 + 1 == 2", execution_count=4), "-"),
        _cell(new_markdown_cell(
            "## Your turn 1: add\n\n<details><summary>Solution</summary>\n\n"
            "```python\nanswer = 41 + 1\n```\n</details>\n\n"
            "<details><summary>Hint</summary>\n\nUse +.\n</details>"), "slide"),
        _cell(new_markdown_cell(
            "Q1 · Why scale?\n\n<details><summary><b>Model answer (English, about one minute)</b></summary>\n\n"
            "MODEL-ANSWER-TEXT\n</details>\n\n<details><summary><b>参考答案（中文）</b></summary>\n\n参考答案正文\n"
            "</details>\n\n1. Quiz?\n   <details><summary>Answer</summary>QUIZ-ANSWER-TEXT</details>"), "fragment"),
    ])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2,
                                                                              "version_minor": 0}}
    path = folder / "99_tiny.ipynb"
    nbformat.write(nb, path)
    (folder / "98_other.ipynb").write_text(nbformat.writes(_notebook(["slide", "subslide"])))
    return path


# --------------------------------------------------------------------------------------------
# Counting and stripping (no build needed)


@pytest.mark.parametrize("types", [
    ["slide", "-", "fragment", "subslide", "notes", "slide"],
    ["skip", "notes", "-", "subslide", "fragment", "fragment", "skip", "slide", "subslide"],
    ["notes", "subslide", "slide", "slide", "-", "skip"],
    ["fragment"],
])
def test_count_slides_matches_nbconvert_grouping(types):
    from nbconvert.exporters.slides import _RevealMetadataPreprocessor

    nb = nbformat.from_dict(_notebook(types))
    marked, _ = _RevealMetadataPreprocessor().preprocess(nb, {})
    starts = [c.metadata.get("slide_start", False) for c in marked.cells]
    substarts = [c.metadata.get("subslide_start", False) for c in marked.cells]
    assert count_slides(nb) == (sum(starts), sum(substarts))


def test_count_slides_rejects_decks_without_slides_and_unknown_types():
    with pytest.raises(ValueError, match="no slide to show"):
        count_slides(_notebook(["skip", "notes"]))
    with pytest.raises(ValueError, match="slide_type='title'"):
        count_slides(_notebook(["slide", "title"]))


def test_strip_solutions_removes_every_answer_block_and_keeps_hints(tmp_path):
    nb = nbformat.read(_tiny_notebook(tmp_path), as_version=4)
    stripped, removed = strip_solutions(nb)
    assert removed == 4  # the solution, the two model answers, the quiz answer
    text = "\n".join(c.source for c in stripped.cells)
    for answer in ("answer = 41 + 1", "MODEL-ANSWER-TEXT", "参考答案正文", "QUIZ-ANSWER-TEXT"):
        assert answer not in text
        assert any(answer in c.source for c in nb.cells)  # the original is untouched
    for kind in ("Solution", "Model answer", "参考答案", "Answer"):
        assert f"*({kind} removed from this copy: it is in the teacher's version.)*" in text
    assert "<summary>Hint</summary>" in text and "Use +." in text  # hints stay
    assert count_slides(stripped) == count_slides(nb)


@pytest.mark.parametrize("block, kind", [
    ("<details><summary>Solution</summary>x</details>", "Solution"),
    ('<details class="x"><summary> solutions to all </summary>x</details>', "Solutions to all"),
    ("<details><summary><b>Model answer (English, about one minute)</b></summary>x</details>", "Model answer"),
    ("<details><summary><b>参考答案（中文，约一分钟）</b></summary>x</details>", "参考答案"),
    ("<details><summary>Answer</summary>x</details>", "Answer"),
    ("<details><summary>Hint</summary>x</details>", None),
    ("<details><summary>Teaching note</summary>the answer is 42</details>", None),
    ("<details><summary>Why is the answer NaN?</summary>x</details>", None),
    # Issue 28: answers under other titles are answers too.
    ("<details><summary>💡 Solution</summary>x</details>", "Solution"),
    ("<details><summary>Worked solution</summary>x</details>", "Worked solution"),
    ("<details><summary>✅ <i>Answer</i></summary>x</details>", "Answer"),
    ("<details><summary>Show the solution (try first!)</summary>x</details>", "Show the solution"),
    ("<details><summary>Reveal: model answer</summary>x</details>", "Model answer"),
    ("<details><summary>👉 参考答案</summary>x</details>", "参考答案"),
    ("<details><summary>解答</summary>x</details>", "解答"),
    ("<details open><summary>SOLUTIONS</summary>x</details>", "SOLUTIONS"),
    ("<details><summary>💡 Hint</summary>x</details>", None),
    ("<details><summary>Hint: the answer is one line</summary>x</details>", None),
    ("<details><summary>提示</summary>答案在下面</details>", None),
    ("<details><summary>🎓 Teaching note</summary>x</details>", None),
    ("<details><summary>Click to reveal</summary>x</details>", None),
])
def test_answer_kind(block, kind):
    assert answer_kind(block) == kind


def test_answer_kind_by_role_finds_code_that_defines_the_exercise_function():
    block = "<details><summary>Click to reveal</summary>\n\n```python\ndef my_scores(q, k):\n    return q\n```\n</details>"
    assert answer_kind(block) is None
    assert answer_kind(block, {"my_scores"}) == "Solution"
    assert answer_kind(block, {"other"}) is None
    hint = block.replace("Click to reveal", "Hint")
    assert answer_kind(hint, {"my_scores"}) is None  # a hint stays a hint


def _exercise_notebook(summary: str, where: str = "after") -> nbformat.NotebookNode:
    solution = (f"<details><summary>{summary}</summary>\n\n```python\ndef my_scores(q, k):\n"
                "    return q @ k.mT / q.size(-1) ** 0.5\n```\n</details>")
    cells = [new_markdown_cell("# 99 · Tiny"), new_markdown_cell("## What you will learn"), new_code_cell("import torch"),
             new_markdown_cell("## 1. Section"), new_markdown_cell("### Your turn 1: scores"),
             new_code_cell("def my_scores(q, k):\n    raise NotImplementedError"),
             new_code_cell("check_attention_scores(my_scores)"),
             new_markdown_cell("<details><summary>💡 Hint</summary>\n\nTranspose k.\n</details>")]
    cells.insert(4 if where == "above" else len(cells), new_markdown_cell(solution))
    return new_notebook(cells=cells)


@pytest.mark.parametrize("summary", ["Solution", "💡 Solution", "Worked solution", "<b>Our solution</b>",
                                     "Click to reveal", "Show me", "参考答案"])
def test_student_copies_drop_answers_under_any_title(summary):
    nb = _exercise_notebook(summary)
    stripped, removed = strip_solutions(nb)
    text = "\n".join(c.source for c in stripped.cells)
    assert removed == 1 and "return q @ k.mT" not in text and "removed from this copy" in text
    assert "Transpose k." in text  # the hint stays
    ex = find_exercises(nb)[0]  # and the exercise's solution cell is found by its role as well
    assert ex.solution_cells == [len(nb.cells) - 1] and "return q @ k.mT" in ex.solution(nb)
    assert ex.hint_cells == [len(nb.cells) - 2]


def test_an_answer_standing_above_its_exercise_is_dropped_too():
    stripped, removed = strip_solutions(_exercise_notebook("Click to reveal", where="above"))
    assert removed == 1 and "return q @ k.mT" not in "\n".join(c.source for c in stripped.cells)


def test_strip_solutions_keeps_nested_blocks_whole():
    nb = _notebook(["slide"])
    nb.cells[0].source = ("<details><summary>Solution</summary>\n<details><summary>Hint</summary>inner</details>\n"
                          "after the inner block\n</details>\ntail")
    stripped, removed = strip_solutions(nb)
    assert removed == 1
    assert stripped.cells[0].source == "*(Solution removed from this copy: it is in the teacher's version.)*\ntail"


@pytest.mark.parametrize("source, shown", [
    ("x = 1\nassert x == 1", "x = 1"),
    ("# NBVAL_IGNORE_OUTPUT\nprint(1)", "print(1)"),
    ("x = 1\n# Check: x is one,\n# and positive.\nassert x == 1 and \\\n    x > 0\nprint(x)", "x = 1\nprint(x)"),
    ("for i in range(3):\n    assert i < 3\ny = 2", "y = 2"),
    ("with ctx():\n    y = f()\n    assert y\nz = y", "with ctx():\n    y = f()\nz = y"),
    ("def g(x):\n    assert x > 0\n    return x", "def g(x):\n    assert x > 0\n    return x"),  # code, not scaffolding
    ("%timeit f()\nassert True", "%timeit f()"),
    ("x = (\nassert", "x = (\nassert"),  # does not parse: left as it is
    ("# Check: all.\nassert a\nassert b", ""),
    ("a = 1\n\n\nassert a\n\n\ndef f():\n    pass", "a = 1\n\n\ndef f():\n    pass"),
])
def test_strip_scaffolding(source, shown):
    assert strip_scaffolding(source) == shown


def _asserts_outside_definitions(node):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(child, ast.Assert):
            yield child
        yield from _asserts_outside_definitions(child)


@pytest.mark.parametrize("name", [p.stem for p in find_notebooks(REPO / "notebooks")])
def test_lesson_decks_show_no_test_scaffolding(name):
    """The code on the slides has no assert (outside definitions) and no NBVAL marker; the notebook keeps them."""
    nb = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
    shown = slides._deck_notebook(nb, True, REPO / "notebooks")
    for cell in shown["cells"]:
        if cell["cell_type"] != "code" or _slide_type(cell) == "skip":
            continue
        assert "NBVAL_" not in cell["source"]
        try:
            tree = ast.parse(without_magics(cell["source"]))
        except SyntaxError:
            continue
        left = list(_asserts_outside_definitions(tree))
        assert left == [], f"{name}: an assert is still on a slide:\n{cell['source']}"
    assert [c["cell_type"] for c in shown["cells"] if _slide_type(c) != "notes"] == [
        c.cell_type for c in nb.cells if _slide_type(c) != "notes"]  # no cell is lost


def test_write_student_copies(tmp_path):
    src = _tiny_notebook(tmp_path / "teacher")
    written = write_student_copies([src], tmp_path / "student")
    assert written == [(tmp_path / "student" / "99_tiny.ipynb", 4)]
    copy = nbformat.read(written[0][0], as_version=4)
    assert all("answer = 41" not in c.source and "MODEL-ANSWER-TEXT" not in c.source for c in copy.cells)
    assert any("assert abs(sum(weights.values()) - 1) < 1e-9" in c.source for c in copy.cells)  # code unchanged
    teacher = nbformat.read(src, as_version=4)
    notes = [c for c in teacher.cells if c.metadata.get("slideshow", {}).get("slide_type") == "notes"]
    assert notes, "the test notebook should have a speaker note"
    assert len(copy.cells) == len(teacher.cells) - len(notes)  # speaker notes are left out of hand-outs
    assert all(c.metadata.get("slideshow", {}).get("slide_type") != "notes" for c in copy.cells)
    with pytest.raises(ValueError, match="would overwrite"):
        write_student_copies([src], src.parent)


def test_student_copies_cli(tmp_path, capsys):
    _tiny_notebook(tmp_path / "nbs")
    assert slides.main(["--notebooks", str(tmp_path / "nbs"), "--student-copies", str(tmp_path / "out")]) == 0
    assert "99_tiny.ipynb (4 answer blocks removed)" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["98_other.ipynb", "99_tiny.ipynb"]


def test_remote_references_finds_loads_not_links():
    page = (
        '<a href="https://colab.research.google.com/x">Colab</a>'
        '<script src="https://cdn.example.org/a.js"></script><link rel="stylesheet" href="//cdn.example.org/b.css">'
        '<img alt="x" src="http://example.org/c.png"><script src="vendor/require.js"></script>'
        "<style>@import url(https://fonts.example.org/d.css);</style>"
        "<script type=\"module\">import m from 'https://cdn.example.org/e.mjs';</script>"
        "<script>var src = 'https://unpkg.com/@jupyter-widgets/html-manager@*/dist/embed-amd.js';</script>"
    )
    assert remote_references(page) == [
        "//cdn.example.org/b.css", "http://example.org/c.png", "https://cdn.example.org/a.js",
        "https://cdn.example.org/e.mjs", "https://fonts.example.org/d.css",
        "https://unpkg.com/@jupyter-widgets/html-manager@*/dist/embed-amd.js",
    ]


def test_build_fails_clearly_without_npm(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(VendorError, match="npm was not found on PATH.*apt-get install -y npm"):
        fetch_vendor(tmp_path / "vendor")
    nbs = tmp_path / "nbs"
    _tiny_notebook(nbs)
    assert slides.main(["--notebooks", str(nbs), "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out" / "99_tiny.html").exists()


@pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm to reach the (unreachable) registry")
def test_build_fails_clearly_when_the_registry_fails(tmp_path, monkeypatch):
    # An empty npm cache and a registry address where nothing listens.
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")
    monkeypatch.setenv("npm_config_cache", str(tmp_path / "npm-cache"))
    monkeypatch.setenv("npm_config_fetch_retries", "0")
    with pytest.raises(VendorError, match=r"npm pack .*failed .*http://127.0.0.1:9/"):
        fetch_vendor(tmp_path / "vendor", timeout=120)
    assert not (tmp_path / "vendor").exists()


# --------------------------------------------------------------------------------------------
# The build


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Decks for every lesson notebook plus the tiny one, all in one folder (as the CLI does)."""
    if shutil.which("npm") is None:
        pytest.fail("npm is needed to build the slides: apt-get install -y npm")
    root = tmp_path_factory.mktemp("slides")
    tiny = _tiny_notebook(root / "nbs")
    lessons = find_notebooks(REPO / "notebooks")
    start = time.perf_counter()
    decks = build_decks(lessons + [tiny, root / "nbs" / "98_other.ipynb"], root / "out")
    seconds = time.perf_counter() - start
    print(f"\nbuilt {len(decks)} decks in {seconds:.1f} s")
    return {"out": root / "out", "decks": {d.notebook.stem: d for d in decks}, "lessons": lessons}


def test_every_notebook_has_a_deck_with_local_scripts_only(built):
    out = built["out"]
    names = [p.stem for p in built["lessons"]] + ["99_tiny", "98_other"]
    assert sorted(built["decks"]) == sorted(names)
    for name in names:
        page = (out / f"{name}.html").read_text(encoding="utf-8")
        assert remote_references(page) == [], name
        assert 'src="vendor/requirejs/require.js"' in page and "vendor/reveal.js/dist/reveal.js" in page
        assert "vendor/mathjax/MathJax.js" in page and "vendor/jquery/dist/jquery.min.js" in page
        assert "mermaid" not in page.split("<body", 1)[0]  # the CDN module import is gone
    for rel in ["reveal.js/dist/reveal.js", "reveal.js/plugin/notes/notes.js", "requirejs/require.js",
                "jquery/dist/jquery.min.js", "mathjax/MathJax.js", "mathjax/config/TeX-AMS_CHTML-full.js",
                "reveal.js/dist/theme/white.css"]:
        assert (out / "vendor" / rel).stat().st_size > 1000, rel


def test_deck_counts_match_the_notebook_metadata(built):
    index = (built["out"] / "index.html").read_text(encoding="utf-8")
    for name, deck in built["decks"].items():
        nb = nbformat.read(deck.notebook, as_version=4)
        assert (deck.horizontal, deck.total) == count_slides(nb)
        page = deck.html.read_text(encoding="utf-8")
        body = page.split('<div class="slides">', 1)[1]
        assert body.count("<section") == deck.horizontal + deck.total, name
        row = f'<a href="{name}.html">{deck.title}</a></td><td class="n">{deck.horizontal}</td><td class="n">{deck.total}</td>'
        assert row in index


def test_tiny_deck_content(built):
    page = built["decks"]["99_tiny"].html.read_text(encoding="utf-8")
    assert page.count('<aside class="notes">') == 2
    assert 'href="98_other.html"' in page  # lesson links point at the sibling deck
    assert "colab-badge.svg" not in page and ">Open In Colab</a>" in page  # badge kept as a text link
    assert "data:image/png;base64," in page  # the local figure is inside the deck
    assert "import sys" not in page  # skipped cell
    # Saved widget views cannot run without a kernel: a note replaces them, and no renderer is loaded.
    assert "Live widget: open this notebook in JupyterLab" in page
    assert "widget-view+json" not in page and "html-manager" not in page
    assert "<details><summary>Solution</summary>" in page and "answer" in page.split("<summary>Solution</summary>")[1].split("</details>")[0]
    assert "MODEL-ANSWER-TEXT" in page  # the teacher's deck keeps the answers (collapsed)
    # Test scaffolding is not on the slides; the cell that held only scaffolding shows no input.
    assert "NBVAL" not in page and "assert" not in page and "Check: the weights" not in page
    assert "scaffolding only" not in page and page.count("<div class=\"jp-CodeMirrorEditor") == 3  # of 4 shown code cells
    # Each code line is a block whose wrapped part hangs under the line's start; the fonts are local.
    assert '<span class="gl-line" style="padding-left:4ch;text-indent:-4ch"><span></span><span class="n">weights</span>' in page
    assert '<link href="vendor/fonts.css" rel="stylesheet"/>' in page
    assert "width: 1280" in page and "height: 720" in page


def test_fonts_are_local_and_complete(built):
    vendor = built["out"] / "vendor"
    css = (vendor / "fonts.css").read_text(encoding="utf-8")
    assert remote_references(css, kind="css") == []
    urls = re.findall(r"url\(([^)]+)\)", css)
    families = set(re.findall(r"font-family: '([^']+)'", css))
    assert families == {"Noto Sans", "Noto Sans Mono", "Noto Sans Math", "Noto Sans Symbols 2", "Noto Sans SC",
                        "Noto Emoji"}
    assert len(urls) > 100 and all(u.endswith(".woff2") and (vendor / u).stat().st_size > 1000 for u in urls)
    assert len(re.findall(r"noto-sans-sc-\d+-400-normal\.woff2", css)) > 90  # every CJK chunk
    for name in slides.VENDOR_PACKAGES:
        if name.startswith("@fontsource/"):
            assert "SIL Open Font License" in (vendor / name / "LICENSE").read_text(encoding="utf-8")


def _build_one_slide(built, tmp_path, capsys, stem: str, markdown: str) -> str:
    """Build a one-slide lesson ``stem`` with the CLI (reusing the built vendor folder); expect exit code 2,
    no deck, and return what it printed on stderr."""
    nb = _notebook(["slide"])
    nb.cells[0].source = markdown
    (tmp_path / "nbs").mkdir()
    nbformat.write(nbformat.from_dict(nb), tmp_path / "nbs" / f"{stem}.ipynb")
    shutil.copytree(built["out"] / "vendor", tmp_path / "out" / "vendor")
    assert slides.main(["--notebooks", str(tmp_path / "nbs"), "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out" / f"{stem}.html").exists()
    return capsys.readouterr().err


def test_a_remote_image_in_a_lesson_stops_the_build(built, tmp_path, capsys):
    err = _build_one_slide(built, tmp_path, capsys, "97_remote", "# 97 · Remote\n\n![diagram](https://example.org/diagram.png)")
    assert "97_remote.ipynb would load from the network: ['https://example.org/diagram.png']" in err


def test_an_image_outside_the_lesson_folder_stops_the_build(built, tmp_path, capsys):
    (tmp_path / "secret.png").write_bytes(b"\x89PNG\r\n\x1a\nOUTSIDE")
    err = _build_one_slide(built, tmp_path, capsys, "96_outside",
                           f"# 96 · Outside\n\n![a](../secret.png) ![b]({tmp_path / 'secret.png'})")
    assert "error: 96_outside.ipynb: the image '../secret.png' is outside the lesson folder" in err
    assert "a deck inlines only images inside the notebook's folder" in err


def test_rebuild_reuses_vendor_without_npm(built, tmp_path, monkeypatch):
    before = (built["out"] / "vendor" / "VERSIONS.json").stat().st_mtime_ns
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm: the pinned vendor folder is reused
    decks = build_decks([built["decks"]["98_other"].notebook], built["out"])
    assert [d.total for d in decks] == [2]
    assert (built["out"] / "vendor" / "VERSIONS.json").stat().st_mtime_ns == before


def test_strip_solutions_option_and_rebuilding_one_deck(built, tmp_path):
    shutil.copytree(built["out"] / "vendor", tmp_path / "vendor")
    nbs = str(built["decks"]["99_tiny"].notebook.parent)
    assert slides.main(["--notebooks", nbs, "--out", str(tmp_path)]) == 0
    assert slides.main(["--notebooks", nbs, "--only", "99_tiny", "--out", str(tmp_path), "--strip-solutions"]) == 0
    page = (tmp_path / "99_tiny.html").read_text(encoding="utf-8")
    for answer in ("answer = 41", "MODEL-ANSWER-TEXT", "参考答案正文", "QUIZ-ANSWER-TEXT"):
        assert answer not in page
    assert "Solution removed from this copy" in page and "Model answer removed from this copy" in page
    assert "Use +." in page  # the hint stays
    assert '<aside class="notes">' not in page  # no speaker notes in a student deck
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert '<a href="98_other.html">' in index and '<a href="99_tiny.html">' in index  # both still listed


# --------------------------------------------------------------------------------------------
# The decks in a browser with the network off


@pytest.fixture(scope="module")
def browser_context():
    """Chromium with the network off that sees only the DejaVu fonts (a lab PC without CJK or emoji fonts)."""
    if not CHROMIUM.exists():
        if os.environ.get("GPT_LESSON_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
        pytest.skip(f"{CHROMIUM} is missing (set GPT_LESSON_REQUIRE_BROWSER=1 to make this a failure)")
    with open_browser() as (ctx, remote):
        yield ctx, remote


class PageLog:
    """Open a file in the browser and record what went wrong: remote requests, failed loads, errors."""

    def __init__(self, browser_context, path: Path):
        ctx, self.remote = browser_context
        self.remote.clear()
        self.failed: list[str] = []
        self.errors: list[str] = []
        self.page = ctx.new_page()
        self.page.on("requestfailed", lambda r: self.failed.append(f"{r.url} ({r.failure})"))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.goto(path.as_uri())

    def problems(self) -> dict:
        return {k: v for k, v in {"remote": sorted(set(self.remote)), "failed": self.failed,
                                  "errors": self.errors}.items() if v}


GET_REVEAL = ("() => window.require && require.defined('vendor/reveal.js/dist/reveal.js')"
              " && (window.Reveal = require('vendor/reveal.js/dist/reveal.js')).isReady()")


def _indices(page) -> tuple[int, int, int]:
    i = page.evaluate("() => Reveal.getIndices()")
    return i["h"], i["v"], i.get("f") if i.get("f") is not None else -1


@pytest.mark.browser
def test_the_recorder_sees_remote_and_missing_loads(browser_context, tmp_path):
    """The offline checks below can fail: a page that needs the network or a missing file is caught."""
    page = tmp_path / "bad.html"
    page.write_text('<html><body><img src="https://example.org/x.png"><script src="missing.js"></script></body></html>')
    log = PageLog(browser_context, page)
    log.page.wait_for_timeout(500)
    problems = log.problems()
    assert "https://example.org/x.png" in problems["remote"]
    assert any("missing.js" in f for f in problems["failed"])
    log.page.close()


@pytest.mark.browser
def test_tiny_deck_offline(built, browser_context):
    deck = built["decks"]["99_tiny"]
    log = PageLog(browser_context, deck.html)
    page = log.page
    page.wait_for_function(GET_REVEAL, timeout=30_000)
    assert page.evaluate("() => [Reveal.getTotalSlides(), Reveal.getHorizontalSlides().length]") == [4, 3]
    assert _indices(page) == (0, 0, -1)
    page.keyboard.press("ArrowRight")
    assert _indices(page) == (1, 0, -1)
    page.keyboard.press("ArrowRight")  # the fragment appears, the slide stays
    assert _indices(page) == (1, 0, 0)
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    assert _indices(page) == (0, 0, -1)
    # MathJax (local copy) typesets the formula.
    page.wait_for_function("() => document.querySelectorAll('.mjx-chtml').length > 0", timeout=20_000)
    # Speaker view ('s') opens in a new window and shows the current slide's notes.
    page.evaluate("() => Reveal.slide(1, 1)")
    with page.context.expect_page(timeout=10_000) as popup:
        page.keyboard.press("s")
    speaker = popup.value
    speaker.wait_for_function(
        "() => (document.querySelector('.speaker-controls-notes .value') || {}).textContent"
        " && document.querySelector('.speaker-controls-notes .value').textContent.includes('sqrt(d_k)')",
        timeout=10_000)
    speaker.close()
    page.wait_for_timeout(300)
    assert log.problems() == {}
    page.close()


def _readability_problems(m) -> list[str]:
    problems = [f"slide {s.h}/{s.v} ({s.title!r}): code cut off by {c['px']} px: {c['text']!r}" for s, c in m.clipped]
    problems += [f"slide {s.h}/{s.v} ({s.title!r}): {t['px']} px {'code' if t['code'] else 'text'} {t['text']!r}"
                 for s, t in m.small]
    problems += [f"missing glyph {t['ch']} ({t['code']}) in {t['font']}" for t in m.tofu]
    return problems + m.problems


@pytest.mark.browser
def test_tiny_deck_is_readable_from_the_back_row(built, browser_context):
    ctx, remote = browser_context
    m = measure_deck(ctx, built["decks"]["99_tiny"].html, remote)
    assert len(m.slides) == 4
    assert _readability_problems(m) == []
    assert m.body_min >= BODY_MIN_PX and m.code_min >= CODE_MIN_PX
    print("\n" + m.summary())


@pytest.mark.browser
def test_the_measurement_sees_clipped_code_small_text_and_missing_glyphs(built, browser_context, tmp_path):
    """The readability test can fail: the same deck with unwrapped code, a small caption and a character
    that no font has is caught on each count."""
    ctx, remote = browser_context
    good = built["decks"]["99_tiny"].html
    bad = good.with_name("99_tiny_bad.html")
    page = good.read_text(encoding="utf-8")
    page = page.replace("</head>", "<style>html body .reveal pre { white-space: pre !important; }</style></head>", 1)
    # U+17000 (a Tangut character): in no font of the deck, nor of the machine.
    page = page.replace("<h2", '<p style="font-size: 14px">a small caption</p><p>\U00017000</p><h2', 1)
    bad.write_text(page, encoding="utf-8")
    try:
        m = measure_deck(ctx, bad, remote)
    finally:
        bad.unlink()
    assert [c["text"][:7] for _, c in m.clipped] == ["weights", "✅ passe"]
    assert all(c["px"] > 100 for _, c in m.clipped)
    assert [(t["text"], t["code"]) for _, t in m.small] == [("a small caption", False)]
    assert round(m.small[0][1]["px"]) == round(14 * m.slides[0].scale)
    assert [t["code"] for t in m.tofu] == ["U+17000"]


LESSON_NAMES = [p.stem for p in find_notebooks(REPO / "notebooks")]


def _answer_blocks(nb) -> list[str]:
    return [src[a:b] for c in nb.cells if c.cell_type == "markdown" for src in [c.source]
            for a, b in slides._details_blocks(src) if answer_kind(src[a:b])]


@pytest.mark.parametrize("name", LESSON_NAMES)
def test_student_copy_of_each_lesson_has_no_answer(name):
    """Every solution, model answer and self-test answer is removed from the hand-outs; hints stay."""
    nb = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
    exercises = sum(len(re.findall(r"^### Your turn", c.source, re.M)) for c in nb.cells if c.cell_type == "markdown")
    stripped, removed = strip_solutions(nb)
    assert removed == len(_answer_blocks(nb)) >= exercises
    assert _answer_blocks(stripped) == []
    left = [c.source for c in stripped.cells if c.cell_type == "markdown"
            and re.search(r"<summary>(<[^>]+>)*\s*(solution|model answer|answer|参考答案)", c.source, re.I)]
    assert left == [], f"{name}: an answer block the student copy does not remove"
    hints = lambda book: sum(c.source.count("<summary>Hint</summary>") for c in book.cells)  # noqa: E731
    assert hints(stripped) == hints(nb)


@pytest.mark.browser
@pytest.mark.parametrize("name", LESSON_NAMES)
def test_lesson_deck_offline(built, browser_context, name):
    deck = built["decks"][name]
    log = PageLog(browser_context, deck.html)
    page = log.page
    page.wait_for_function(GET_REVEAL, timeout=30_000)
    assert page.evaluate("() => Reveal.getTotalSlides()") == deck.total
    assert page.evaluate("() => Reveal.getHorizontalSlides().length") == deck.horizontal
    if deck.total > 1:
        # ArrowRight first reveals the fragments of the first slide, then moves to the next slide in
        # linear order: the first slide's own subslide when it has one (navigationMode "linear").
        fragments = page.evaluate("() => Reveal.getCurrentSlide().querySelectorAll('.fragment').length")
        below = page.evaluate("() => Reveal.getHorizontalSlides()[0].querySelectorAll(':scope > section').length")
        for _ in range(fragments + 1):
            page.keyboard.press("ArrowRight")
        assert _indices(page)[:2] == ((0, 1) if below > 1 else (1, 0))
        page.keyboard.press("ArrowLeft")
        assert _indices(page)[:2] == (0, 0)
    page.wait_for_timeout(500)
    assert log.problems() == {}
    page.close()


@pytest.mark.browser
@pytest.mark.parametrize("name", LESSON_NAMES)
def test_lesson_deck_is_readable_from_the_back_row(built, browser_context, name):
    """Every slide on a 1280x720 projector: body text >= 32 px, code >= 24 px, no code cut off on the right,
    no missing-glyph box for the Chinese terms, symbols and emoji (the machine has no CJK or emoji font)."""
    ctx, remote = browser_context
    m = measure_deck(ctx, built["decks"][name].html, remote)
    assert len(m.slides) == built["decks"][name].total
    assert _readability_problems(m) == []
    print("\n" + m.summary())
    if name.startswith("08_"):
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        s = m.densest()
        shot = screenshot_slide(ctx, built["decks"][name].html, s.h, s.v, ARTIFACTS / f"{name}_densest.png")
        assert shot.stat().st_size > 10_000


def test_commands_in_the_teachers_guide_parse():
    """Every `python -m tools.X ...` written in docs/teaching.md is a valid command line."""
    import shlex

    from tools import figures, hub_load, nbgrader_course

    parsers = {"slides": slides.build_parser, "figures": figures.build_parser, "hub_load": hub_load.build_parser,
               "slide_metrics": slide_metrics.build_parser, "nbgrader_course": nbgrader_course.build_parser}
    guide = (REPO / "docs" / "teaching.md").read_text(encoding="utf-8")
    commands = re.findall(r"`python -m tools\.(\w+)([^`]*)`", guide)
    assert {m for m, _ in commands} >= {"slides", "figures", "nbgrader_course", "slide_metrics", "hub_load"}
    assert "gpt_lesson.slides" not in guide and "gpt_lesson.figures" not in guide  # the old module paths
    for module, args in commands:
        assert module in parsers, f"docs/teaching.md names python -m tools.{module}, which is not a tool"
        parsers[module]().parse_args(shlex.split(args))  # exits (fails the test) on an unknown option


@pytest.mark.browser
@pytest.mark.parametrize("name", ["02_attention", "11_interview_questions"])
def test_chinese_deck_is_readable_from_the_back_row(browser_context, tmp_path, name):
    """The Chinese edition builds decks too (the lessons with the most Chinese text): the same size limits,
    no clipped code, and every Chinese character drawn from the bundled font on a machine without CJK fonts."""
    notebook = REPO / "notebooks" / "zh" / f"{name}.ipynb"
    if not notebook.exists():
        pytest.skip(f"zh/{name} is not translated yet")
    if shutil.which("npm") is None:
        pytest.fail("npm is needed to build the slides: apt-get install -y npm")
    (deck,) = build_decks([notebook], tmp_path / "out")
    ctx, remote = browser_context
    m = measure_deck(ctx, deck.html, remote)
    assert len(m.slides) == deck.total
    assert _readability_problems(m) == []
    assert m.projector is False  # the notebook-page decks open with projector mode off (the lecture cut: on)
    html = deck.html.read_text(encoding="utf-8")
    assert sum("\u4e00" <= ch <= "\u9fff" for ch in html) > 500  # the Chinese text is on the slides
    if name == "02_attention":
        fonts = _frame_fonts_after_late_explorer_css(ctx, deck.html)
        assert fonts, "no explorer frame in the deck"
        for body, code in fonts:
            assert body.startswith(FONT_FAMILIES["body"]), body
            assert code is None or code == FONT_FAMILIES["code"], code


# The explorer's script adds its style sheet to the frame when it runs, which on a slow machine is after
# the deck gave the frame its fonts (CI failed so, with 107 characters drawn as boxes). Add the explorer's
# sheet again, last, and read the font of each explorer and of its token strip or text box.
_LATE_CSS_JS = """(css) => [...document.querySelectorAll('.reveal iframe')].flatMap(frame => {
  const doc = frame.contentDocument, root = doc && doc.querySelector('.gl-explorer');
  if (!root) return [];
  const late = doc.createElement('style');
  late.textContent = css;
  doc.head.append(late);
  const code = root.querySelector('.gl-strip, textarea');
  return [[getComputedStyle(root).fontFamily, code ? getComputedStyle(code).fontFamily : null]];
})"""


def _frame_fonts_after_late_explorer_css(ctx, deck: Path) -> list[tuple[str, str | None]]:
    """(explorer font, code font or None) of every explorer frame, with the quotes as FONT_FAMILIES writes them."""
    from gpt_lesson.widgets._common import CSS

    page, _ = slide_metrics._open(ctx, deck, [])
    try:
        got = page.evaluate(_LATE_CSS_JS, CSS)
    finally:
        page.close()
    return [tuple(f.replace("'", '"') if f else f for f in pair) for pair in got]


# --------------------------------------------------------------------------------------------
# The module plan (docs/teaching.md section 1) and every lesson's speaker notes agree

PLAN_ROW_RE = re.compile(r"^\| (\d+|\(bonus\))[^|]*\|[^|]*\| ([^|]*) \|", re.M)
PLAN_LESSON_RE = re.compile(r"\b(\d\d) [^(·|]+\((\d+)\)")
# The plan line that opens each lesson's lecture-plan note, in each edition.
NOTE_PLAN_RE = {
    "en": re.compile(r"\*\*Lecture plan:\*\* (?:week (\d+)(?: \([^)]*\))?|bonus \(self-study\)), (\d+) minutes"),
    "zh": re.compile(r"\*\*讲课安排\*\*：(?:第 (\d+) 周(?:（[^）]*）)?|附加（自学）)，(?:如在课上讲，需要 |讲 |如果每张幻灯片都讲，需要 )?(\d+) 分钟"),
}
# Anything else a note says about the schedule: the lecture or week it names, the lesson it pairs with,
# the lesson's minutes.
NOTE_WEEK_RE = {"en": re.compile(r"\b(?:[Ll]ecture|[Ww]eek) (\d+)\b"), "zh": re.compile(r"第 (\d+) [讲周]")}
NOTE_PAIR_RE = {"en": re.compile(r"pairs this lesson with lesson (\d\d)|same lecture as lesson (\d\d)"),
                "zh": re.compile(r"把本课和第 (\d\d) 课放在一起讲|与第 (\d\d) 课在同一讲")}
NOTE_MINUTES_RE = {
    "en": re.compile(r"of the lesson's (\d+) minutes|(\d+) minutes in lecture|the lesson takes (\d+) minutes"),
    "zh": re.compile(r"全课 (\d+) 分钟|讲中约 (\d+) 分钟|本课需要 (\d+) 分钟"),
}


def module_plan(guide: str) -> dict[str, tuple[int | None, int]]:
    """Lesson number -> (week, lecture minutes) from the table of docs/teaching.md section 1 (week None: bonus)."""
    section = guide[guide.index("## 1. "):guide.index("## 2. ")]
    plan = {}
    for m in PLAN_ROW_RE.finditer(section):
        week = None if m.group(1).startswith("(") else int(m.group(1))
        for lesson, minutes in PLAN_LESSON_RE.findall(m.group(2)):
            if lesson in plan:
                raise ValueError(f"lesson {lesson} is in the plan twice")
            plan[lesson] = (week, int(minutes))
    return plan


def notes_problems(lesson: str, lang: str, notes: list[str], plan: dict[str, tuple[int | None, int]]) -> list[str]:
    """Where a lesson's speaker notes (the texts of its notes cells) disagree with the plan."""
    if lesson not in plan:
        return [f"{lesson}: not in the module plan"]
    week, minutes = plan[lesson]
    problems = []
    stated = [m for text in notes for m in NOTE_PLAN_RE[lang].finditer(text)]
    if len(stated) != 1:
        problems.append(f"{lesson} ({lang}): {len(stated)} lecture-plan lines in the notes, expected 1")
    for m in stated:
        got = (int(m.group(1)) if m.group(1) else None, int(m.group(2)))
        if got != (week, minutes):
            problems.append(f"{lesson} ({lang}): the notes say week {got[0]}, {got[1]} minutes; the plan says "
                            f"week {week}, {minutes} minutes")
    for text in notes:
        for m in NOTE_WEEK_RE[lang].finditer(text):
            if int(m.group(1)) != week:
                problems.append(f"{lesson} ({lang}): the notes name {m.group(0)!r}, the plan puts it in week {week}")
        for m in NOTE_PAIR_RE[lang].finditer(text):
            other = m.group(1) or m.group(2)
            if plan.get(other, (None,))[0] != week:
                problems.append(f"{lesson} ({lang}): the notes pair it with lesson {other}, which the plan puts "
                                f"in week {plan.get(other, ('none',))[0]}, not {week}")
        for m in NOTE_MINUTES_RE[lang].finditer(text):
            said = int(next(g for g in m.groups() if g))
            if said != minutes:
                problems.append(f"{lesson} ({lang}): the notes say {m.group(0)!r}, the plan gives it {minutes} minutes")
    return problems


def _notes(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells
            if c.cell_type == "markdown" and _slide_type(c) == "notes"]


def test_every_lessons_speaker_notes_match_the_module_plan():
    """Each lesson (both editions) has one lecture-plan note whose week and minutes are the plan's, and no
    note names another lecture, pairs it with a lesson of another week, or gives it other minutes."""
    plan = module_plan((REPO / "docs" / "teaching.md").read_text(encoding="utf-8"))
    lessons = [p for p in find_notebooks(REPO / "notebooks") if p.stem[:2].isdigit()]
    assert sorted(plan) == [p.stem[:2] for p in lessons]  # every lesson, Part III included, is in the plan
    problems = []
    for path in lessons:
        problems += notes_problems(path.stem[:2], "en", _notes(path), plan)
        problems += notes_problems(path.stem[:2], "zh", _notes(REPO / "notebooks" / "zh" / path.name), plan)
    assert problems == []


def test_the_notes_check_names_the_contradictions_issue_29_found():
    """The notes as they were before the plan was measured: 02's "45 minutes", 07's "lecture 3" in week 4,
    08 paired with 09 of another week, a lesson without a plan line (00, 09, 10)."""
    plan = {"02": (2, 25), "07": (4, 35), "08": (4, 30), "09": (5, 50)}
    line = "**Lecture plan:** week {w}, {m} minutes of lecture."
    assert notes_problems("02", "en", [line.format(w=2, m=25), "Plan about 10 of the lesson's 45 minutes for this."],
                          plan) == ["02 (en): the notes say \"of the lesson's 45 minutes\", the plan gives it 25 minutes"]
    assert notes_problems("07", "en", [line.format(w=4, m=35), "Your turn 2 is the in-class exercise of lecture 3."],
                          plan) == ["07 (en): the notes name 'lecture 3', the plan puts it in week 4"]
    assert notes_problems("08", "en", [line.format(w=4, m=30), "Lecture 4 pairs this lesson with lesson 09;"],
                          plan) == ["08 (en): the notes pair it with lesson 09, which the plan puts in week 5, not 4"]
    assert notes_problems("09", "en", ["No plan here."], plan) == ["09 (en): 0 lecture-plan lines in the notes, expected 1"]
    assert notes_problems("02", "zh", ["**讲课安排**：第 2 周，讲 30 分钟。", "这一节大约占全课 45 分钟中的 10 分钟。"], plan) == [
        "02 (zh): the notes say week 2, 30 minutes; the plan says week 2, 25 minutes",
        "02 (zh): the notes say '全课 45 分钟', the plan gives it 25 minutes"]
    assert notes_problems("11", "en", [], plan) == ["11: not in the module plan"]


def test_the_plans_minutes_are_the_lecture_cuts():
    """The plan's lecture minutes are the rule of section 1 (30 s a slide of the lecture cut, rounded up to
    5 minutes) applied to each lesson's lecture deck; within 5 minutes, as re-executed outputs can move a
    deck by a slide or two."""
    plan = module_plan((REPO / "docs" / "teaching.md").read_text(encoding="utf-8"))
    measured = {p.stem[:2]: slides.lecture_minutes(slides.lecture_deck_slides(p))
                for p in find_notebooks(REPO / "notebooks") if p.stem[:2].isdigit()}
    off = {k: (plan[k][1], measured[k]) for k in measured if abs(plan[k][1] - measured[k]) > 5}
    assert off == {}, f"lesson: (plan's minutes, the lecture cut's) {off}"
    guide = (REPO / "docs" / "teaching.md").read_text(encoding="utf-8")
    section = guide[guide.index("## 1. "):guide.index("## 2. ")]
    # Each lecture's planned material fits 80 minutes and its slack is what is left of 90.
    for row in re.findall(r"^\| (\d+)[^|]*\|[^|]*\| ([^|]*) \| ([^|]*) \| (\d+) \|", section, re.M):
        lessons = sum(int(m) for _, m in PLAN_LESSON_RE.findall(row[1]))
        planned = [int(x) for x in re.findall(r"\d+", row[2])]
        assert planned[0] == lessons and sum(planned) <= 85 and sum(planned) + int(row[3]) == 90, row
