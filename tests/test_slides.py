"""The offline slide decks: slide counting, solution stripping, the build, and the decks in Chromium.

The build fixture builds a deck for every notebook in notebooks/ plus a small notebook written
here (it has every slide type, a formula, a local figure, speaker notes and a solution), so the
browser tests have a known deck even before the lessons exist. The browser tests open decks
from file:// with the network off and record every request that is not a local file.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tools import slides
from tools.slides import (
    VendorError, build_decks, count_slides, fetch_vendor, find_notebooks, remote_references,
    strip_solutions, write_student_copies,
)

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")


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
        _cell(new_markdown_cell(
            "## Your turn 1: add\n\n<details><summary>Solution</summary>\n\n"
            "```python\nanswer = 41 + 1\n```\n</details>\n\n"
            "<details><summary>Hint</summary>\n\nUse +.\n</details>"), "slide"),
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


def test_strip_solutions_removes_solution_blocks_only(tmp_path):
    nb = nbformat.read(_tiny_notebook(tmp_path), as_version=4)
    stripped, removed = strip_solutions(nb)
    assert removed == 1
    text = stripped.cells[-1].source
    assert "answer = 41 + 1" not in text and "teacher's version" in text
    assert "<summary>Hint</summary>" in text  # hints stay
    assert "answer = 41 + 1" in nb.cells[-1].source  # the original is untouched
    assert count_slides(stripped) == count_slides(nb)


def test_write_student_copies(tmp_path):
    src = _tiny_notebook(tmp_path / "teacher")
    written = write_student_copies([src], tmp_path / "student")
    assert written == [(tmp_path / "student" / "99_tiny.ipynb", 1)]
    copy = nbformat.read(written[0][0], as_version=4)
    assert all("answer = 41" not in c.source for c in copy.cells)
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
    assert "99_tiny.ipynb (1 solution block removed)" in capsys.readouterr().out
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


def test_a_remote_image_in_a_lesson_stops_the_build(built, tmp_path, capsys):
    nb = _notebook(["slide"])
    nb.cells[0].source = "# 97 · Remote\n\n![diagram](https://example.org/diagram.png)"
    (tmp_path / "nbs").mkdir()
    nbformat.write(nbformat.from_dict(nb), tmp_path / "nbs" / "97_remote.ipynb")
    shutil.copytree(built["out"] / "vendor", tmp_path / "out" / "vendor")
    assert slides.main(["--notebooks", str(tmp_path / "nbs"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "97_remote.ipynb would load from the network: ['https://example.org/diagram.png']" in err
    assert not (tmp_path / "out" / "97_remote.html").exists()


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
    assert "answer" not in page
    assert "Solution removed from this copy" in page
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert '<a href="98_other.html">' in index and '<a href="99_tiny.html">' in index  # both still listed


# --------------------------------------------------------------------------------------------
# The decks in a browser with the network off


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory):
    if not CHROMIUM.exists():
        if os.environ.get("GPT_LESSON_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
        pytest.skip(f"{CHROMIUM} is missing (set GPT_LESSON_REQUIRE_BROWSER=1 to make this a failure)")
    from playwright.sync_api import sync_playwright

    offline_hits: list[str] = []
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM),
            args=CHROMIUM_FLAGS, headless=True, offline=True,
        )

        def route(r):
            if r.request.url.startswith(LOCAL_SCHEMES):
                r.continue_()
            else:
                offline_hits.append(r.request.url)
                r.abort()

        ctx.route("**/*", route)
        ctx.on("request", lambda r: None if r.url.startswith(LOCAL_SCHEMES) else offline_hits.append(r.url))
        yield ctx, offline_hits
        ctx.close()


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


LESSON_NAMES = [p.stem for p in find_notebooks(REPO / "notebooks")]


@pytest.mark.parametrize("name", LESSON_NAMES)
def test_student_copy_of_each_lesson_has_no_solution(name):
    """Each exercise's solution block is found and removed, so the hand-outs do not leak answers."""
    nb = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
    exercises = sum(len(re.findall(r"^### Your turn", c.source, re.M)) for c in nb.cells if c.cell_type == "markdown")
    stripped, removed = strip_solutions(nb)
    assert removed >= exercises
    left = [c.source for c in stripped.cells if c.cell_type == "markdown"
            and re.search(r"<summary>[^<]*solution", c.source, re.I)]
    assert left == [], f"{name}: a solution block the student copy does not remove"


@pytest.mark.browser
@pytest.mark.parametrize("name", LESSON_NAMES)
def test_lesson_deck_offline(built, browser_context, name):
    deck = built["decks"][name]
    log = PageLog(browser_context, deck.html)
    page = log.page
    page.wait_for_function(GET_REVEAL, timeout=30_000)
    assert page.evaluate("() => Reveal.getTotalSlides()") == deck.total
    assert page.evaluate("() => Reveal.getHorizontalSlides().length") == deck.horizontal
    if deck.horizontal > 1:
        # ArrowRight first reveals the fragments of the first slide, then moves to the second.
        fragments = page.evaluate("() => Reveal.getCurrentSlide().querySelectorAll('.fragment').length")
        for _ in range(fragments + 1):
            page.keyboard.press("ArrowRight")
        assert _indices(page)[:2] == (1, 0)
        page.keyboard.press("ArrowLeft")
        assert _indices(page)[0] == 0
    page.wait_for_timeout(500)
    assert log.problems() == {}
    page.close()


def test_commands_in_the_teachers_guide_parse():
    """Every `python -m tools.slides/figures ...` written in docs/teaching.md is a valid command line."""
    import shlex

    from tools import figures

    guide = (REPO / "docs" / "teaching.md").read_text(encoding="utf-8")
    commands = re.findall(r"`python -m gpt_lesson\.(slides|figures)([^`]*)`", guide)
    assert {m for m, _ in commands} == {"slides", "figures"}
    for module, args in commands:
        parser = (slides if module == "slides" else figures).build_parser()
        parser.parse_args(shlex.split(args))  # exits (fails the test) on an unknown option
