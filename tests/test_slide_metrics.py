"""The lecture cut (tools.slides --lecture) and what tools/slide_metrics.py measures in it.

Without a browser: how the cut splits a slide (cell, paragraph, list item, sentence, code chunk, output
chunk, table rows), that speaker notes stay with their piece, the rule for lecture minutes, and the
code-wrapping markup. In Chromium (``browser``): the lecture decks of a representative subset of the
lessons (02 and 05 with explorers, 10 the longest Part II lesson, 13 with its token strips, zh/03 for
the Chinese edition) have no slide taller than the 1280x720 screen and no code wrapped inside a word;
the right arrow visits every slide; and a click in an explorer leaves the keys to the deck. Projector
mode (on in the lecture cut, key P) enlarges the explorers to >= 24 px text, their canvas text included and
drawn with the deck's fonts, in their compact layout, so that each explorer of each kind (attention, causal mask,
scaling: 02, 05, zh/03 and the explorers page) fits one 720 px slide; a clicker scrolls a slide taller than the
screen before it moves on.
"""
from __future__ import annotations

import html
import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tools import slides
from tools.slide_metrics import CHROMIUM, EXPLORER_MIN_PX, measure_deck, open_browser
from tools.slides import _line_blocks, count_slides, lecture_cut, lecture_minutes

REPO = Path(__file__).resolve().parents[1]


def _cell(cell, kind: str):
    cell.metadata["slideshow"] = {"slide_type": kind}
    return cell


def _types(nb) -> list[str]:
    return [c["metadata"]["slideshow"]["slide_type"] for c in nb["cells"]]


def test_a_short_slide_is_left_as_it_is():
    nb = new_notebook(cells=[_cell(new_markdown_cell("# Title\n\nOne line."), "slide"),
                             _cell(new_code_cell("x = 1", outputs=[new_output("stream", text="1\n")]), "-")])
    cut = lecture_cut(nb)
    assert _types(cut) == ["slide", "-"] and count_slides(cut) == (1, 1)
    assert cut["cells"][0]["source"] == "# Title\n\nOne line."


def test_a_tall_slide_becomes_subslides_at_paragraphs_with_the_notes_kept_in_place():
    paragraphs = [f"Paragraph {i}: " + "word " * 60 for i in range(6)]
    nb = new_notebook(cells=[
        _cell(new_markdown_cell("## A long section\n\n" + "\n\n".join(paragraphs)), "slide"),
        _cell(new_markdown_cell("Say this about the last paragraph."), "notes"),
        _cell(new_markdown_cell("Next section"), "slide"),
    ])
    cut = lecture_cut(nb)
    kinds = _types(cut)
    assert kinds[0] == "slide" and kinds.count("subslide") >= 2 and kinds[-1] == "slide"
    pieces = [c["source"] for c in cut["cells"] if c["metadata"]["slideshow"]["slide_type"] in ("slide", "subslide", "-")][:-1]
    assert "\n\n".join(pieces) == nb.cells[0].source  # nothing lost, nothing reordered, cut between paragraphs
    assert pieces[0].startswith("## A long section\n\nParagraph 0")  # the heading stays with its paragraph
    assert kinds[-2] == "notes" and "Paragraph 5" in cut["cells"][-3]["source"]
    assert len({c["id"] for c in cut["cells"]}) == len(cut["cells"])  # each piece has its own cell id


def test_long_code_and_long_output_are_cut_into_chunks():
    code = "\n".join(f"value_{i} = {i} * 2" for i in range(40))
    text = "".join(f"line {i}\n" for i in range(40))
    nb = new_notebook(cells=[_cell(new_code_cell(code, outputs=[new_output("stream", text=text)]), "slide")])
    cut = lecture_cut(nb)
    shown = [c["source"] for c in cut["cells"] if not c["metadata"].get(slides._HIDE_INPUT)]
    assert "\n".join(shown) == code and all(len(s.split("\n")) <= slides._LECTURE_CODE_ROWS for s in shown)
    out = "".join(o["text"] for c in cut["cells"] for o in c["outputs"])
    assert out == text
    assert all(len(o["text"].splitlines()) <= slides._LECTURE_CODE_ROWS for c in cut["cells"] for o in c["outputs"])
    assert _types(cut)[0] == "slide" and set(_types(cut)[1:]) == {"subslide"}


def test_code_is_cut_between_statements_not_inside_one():
    body = "\n".join(f"    total += {i}" for i in range(10))
    code = f"def first():\n    total = 0\n{body}\n    return total\n\n\ndef second():\n{body}\n    return 1"
    cut = lecture_cut(new_notebook(cells=[_cell(new_code_cell(code), "slide")]))
    chunks = [c["source"] for c in cut["cells"]]
    assert len(chunks) == 2 and chunks[1].startswith("def second():")


def test_a_long_list_and_a_long_table_are_cut_by_items_and_rows():
    items = "\n".join(f"- item {i}: " + "text " * 15 for i in range(12))
    rows = "\n".join(f"| {i} | " + "cell " * 5 + "|" for i in range(30))
    nb = new_notebook(cells=[_cell(new_markdown_cell(items), "slide"),
                             _cell(new_markdown_cell("| n | what |\n|---|---|\n" + rows), "slide")])
    cut = lecture_cut(nb)
    lists = [c["source"] for c in cut["cells"] if c["source"].startswith("- ")]
    tables = [c["source"] for c in cut["cells"] if c["source"].startswith("|")]
    assert len(lists) > 1 and "\n".join(lists) == items
    assert len(tables) > 1 and all(t.startswith("| n | what |\n|---|---|\n") for t in tables)
    assert [int(r) for t in tables for r in re.findall(r"^\| (\d+) \|", t, re.M)] == list(range(30))


def test_lecture_cut_and_minutes_reject_bad_values():
    with pytest.raises(ValueError, match=r"budget=0 must be a positive height"):
        lecture_cut(new_notebook(cells=[]), budget=0)
    with pytest.raises(ValueError, match=r"slides=0 must be a positive number of slides"):
        lecture_minutes(0)
    with pytest.raises(ValueError, match=r"seconds_per_slide=-1 must be positive"):
        lecture_minutes(10, seconds_per_slide=-1)
    assert [lecture_minutes(n) for n in (1, 10, 11, 48, 167)] == [5, 5, 10, 25, 85]


def test_no_wrap_before_a_closing_quote():
    line = 'print(f"loss {x:.2f}, "'
    out = _line_blocks(line.replace('"', "&quot;"))
    assert '<span class="gl-nb"> &quot;</span>' in out  # the space before the closing quote does not break
    assert out.count("gl-nb") == 1  # the opening quote (followed by text) keeps its break opportunity


# --------------------------------------------------------------------------------------------
# In Chromium

SUBSET = [("en", "02_attention"), ("en", "05_multi_head_attention"), ("en", "10_generation_and_kv_cache"),
          ("en", "13_subword_tokens"), ("zh", "03_causal_mask")]
# Built for the projector tests only: the explorers page holds one explorer of each kind (the attention one
# with a query picked, its step-through shown).
EXPLORER_DECKS = [("en", "explorers")]


@pytest.fixture(scope="module")
def lecture_decks(tmp_path_factory):
    if shutil.which("npm") is None:
        pytest.fail("npm is needed to build the slides: apt-get install -y npm")
    out = tmp_path_factory.mktemp("lecture")
    decks = {}
    for lang in ("en", "zh"):
        folder = REPO / "notebooks" / ("zh" if lang == "zh" else "")
        names = [name for edition, name in SUBSET + EXPLORER_DECKS if edition == lang]
        for d in slides.build_decks([folder / f"{n}.ipynb" for n in names], out / lang, lecture=True):
            decks[(lang, d.notebook.stem)] = d
    return decks


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        if os.environ.get("GPT_LESSON_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
        pytest.skip(f"{CHROMIUM} is missing")
    with open_browser() as (ctx, remote):
        yield ctx, remote


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("lang,name", SUBSET)
def test_lecture_deck_fits_the_screen(lecture_decks, browser, lang, name):
    """No slide of the lecture cut is taller than the 720 px slide; no code is cut off, wrapped inside a
    word or down to a lone quote; no missing glyph (explorer frames and the text they draw on their canvas included); text stays at least 24 px
    (the token strip that had to be shrunk) and code 24 px."""
    ctx, remote = browser
    deck = lecture_decks[(lang, name)]
    # The heights with the explorers at their notebook size (projector mode off): see the projector tests.
    m = measure_deck(ctx, deck.html, remote, projector=False)
    print("\n" + m.summary())
    assert len(m.slides) == deck.total and m.height == 720
    assert [(s.h, s.v, s.height) for s in m.tall] == []
    assert m.tallest <= 720
    assert [(s.h, s.v, x) for s, x in m.splits] == [] and m.clipped == [] and m.tofu == [] and m.problems == []
    assert m.body_min >= 24 and m.code_min >= 24


def _click_explorer_button(page, k: int) -> None:
    """A mouse click on the k-th button of the first explorer, where the screen shows it. (Playwright's own
    click misses inside a zoomed frame, as projector mode zooms them: it ignores the frame's zoom.)"""
    x, y = page.evaluate("""(k) => {
        const f = document.querySelector('iframe.gpt-lesson-explorer-view'), doc = f.contentDocument;
        const b = doc.querySelectorAll('.gl-btn')[k];
        window.__glClicked = null;
        b.addEventListener('click', () => { window.__glClicked = k; }, {once: true});
        const box = f.getBoundingClientRect(), z = box.width / doc.documentElement.clientWidth, r = b.getBoundingClientRect();
        return [box.left + (r.left + r.width / 2) * z, box.top + (r.top + r.height / 2) * z]; }""", k)
    page.mouse.click(x, y)
    page.wait_for_timeout(100)
    assert page.evaluate("() => window.__glClicked") == k, "the click did not reach the explorer's button"


@pytest.mark.browser
@pytest.mark.slow
def test_right_arrow_visits_every_slide_and_explorers_give_the_keys_back(lecture_decks, browser):
    ctx, remote = browser
    deck = lecture_decks[("en", "02_attention")]
    page = ctx.new_page()
    try:
        page.goto(deck.html.as_uri())
        page.wait_for_function("() => window.require && require.defined('vendor/reveal.js/dist/reveal.js')"
                               " && (window.Reveal = require('vendor/reveal.js/dist/reveal.js')).isReady()",
                               timeout=60_000)
        page.evaluate("() => Reveal.configure({transition: 'none'})")
        seen = set()
        for _ in range(deck.total * 3):
            i = page.evaluate("() => Reveal.getIndices()")
            seen.add((i["h"], i["v"]))
            if page.evaluate("() => Reveal.isLastSlide() && !Reveal.availableFragments().next"):
                break
            page.keyboard.press("ArrowRight")
        assert len(seen) == deck.total  # the vertical subslides too (deck 02 used to show 7 of 19)
        # The explorer: go to its slide, click a button inside its frame, then the keys move the deck.
        where = page.evaluate("""() => { const f = document.querySelector('iframe.gpt-lesson-explorer-view');
            const i = Reveal.getIndices(f.closest('section')); Reveal.slide(i.h, i.v); return [i.h, i.v]; }""")
        frame = page.frame_locator("iframe.gpt-lesson-explorer-view").first
        _click_explorer_button(page, 1)
        assert page.evaluate("() => document.activeElement.tagName") == "BODY"  # the deck has the keys again
        # (Should the explorer's slide be taller than the screen, the first presses scroll it.)
        for _ in range(6):
            page.keyboard.press("ArrowRight")
            if page.evaluate(_AT) != where:
                break
        assert page.evaluate(_AT) != where
        # Even with the focus left inside the frame (keyboard use), Page Down moves the deck.
        page.evaluate("([h, v]) => Reveal.slide(h, v)", where)
        frame.locator(".gl-btn").first.focus()
        page.evaluate("() => { Reveal.getCurrentSlide().scrollTop = 1e6; }")  # at the slide's end
        frame.locator(".gl-btn").first.press("PageDown")
        page.wait_for_timeout(200)
        assert page.evaluate(_AT) != where
    finally:
        page.close()


PROJECTOR_SUBSET = [("en", "02_attention"), ("en", "05_multi_head_attention"), ("zh", "03_causal_mask"),
                    ("en", "explorers")]
# The explorers each deck shows, by kind (02: one head, nothing picked; 05: every head of a layer; the
# explorers page: a query picked, so the attention explorer shows its step-through).
PROJECTOR_KINDS = {"02_attention": ["attention"], "05_multi_head_attention": ["attention"], "03_causal_mask": ["mask"],
                   "explorers": ["attention", "mask", "scaling"]}


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("lang,name", PROJECTOR_SUBSET)
def test_projector_mode_enlarges_the_explorers(lecture_decks, browser, lang, name):
    """A lecture deck opens in projector mode: the explorers' text, the text on their canvas too, is at least
    24 px on the 1280x720 screen and no character is a box (the canvas draws with the deck's fonts, so the
    Chinese labels show on a PC without Chinese fonts), and each explorer, in its compact layout, fits the
    slide: no slide is taller than the 720 px screen (main's layout: 1119-1312 px). Switched off, the
    explorers are at notebook size."""
    ctx, remote = browser
    deck = lecture_decks[(lang, name)]
    on = measure_deck(ctx, deck.html, remote)
    print("\n" + on.summary())
    assert on.projector is True
    assert sorted({k for s in on.slides for k in s.explorers}) == PROJECTOR_KINDS[name]
    assert on.explorer_min is not None and on.explorer_min >= EXPLORER_MIN_PX
    assert on.canvas_min is not None and on.canvas_min >= EXPLORER_MIN_PX
    assert [(s.h, s.v, s.explorers, s.height) for s in on.tall] == [] and on.tallest <= on.height == 720
    assert on.tofu == [] and on.problems == [] and on.clipped == [] and on.splits == []
    off = measure_deck(ctx, deck.html, remote, projector=False)
    assert off.projector is False and off.explorer_min < 12 and off.canvas_min < 12


def _open_deck(ctx, deck: Path):
    page = ctx.new_page()
    page.goto(deck.as_uri())
    page.wait_for_function("() => window.require && require.defined('vendor/reveal.js/dist/reveal.js')"
                           " && (window.Reveal = require('vendor/reveal.js/dist/reveal.js')).isReady()", timeout=60_000)
    page.evaluate("() => Reveal.configure({transition: 'none'})")
    return page


_AT = "() => [Reveal.getIndices().h, Reveal.getIndices().v]"
_SCROLL = "() => { const s = Reveal.getCurrentSlide(); return [s.scrollTop, s.clientHeight, s.scrollHeight]; }"


@pytest.mark.browser
@pytest.mark.slow
def test_p_toggles_projector_mode(lecture_decks, browser):
    ctx, _ = browser
    page = _open_deck(ctx, lecture_decks[("en", "02_attention")].html)
    try:
        # (the zoom on the frame, and the compact layout inside it)
        state = ("() => [document.documentElement.dataset.glProjector,"
                 " document.querySelector('iframe.gpt-lesson-explorer-view').style.zoom, Reveal.getIndices().h,"
                 " document.querySelector('iframe.gpt-lesson-explorer-view').contentDocument.documentElement"
                 ".classList.contains('gl-compact')]")
        page.wait_for_function("() => document.querySelector('iframe.gpt-lesson-explorer-view').contentDocument"
                               ".documentElement.dataset.ready === 'true'", timeout=30_000)
        assert page.evaluate(state) == ["on", "2.3", 0, True]  # the lecture cut opens in projector mode
        page.keyboard.press("p")  # (reveal.js's own P goes back a slide)
        assert page.evaluate(state) == ["off", "", 0, False]
        page.keyboard.press("p")
        assert page.evaluate(state) == ["on", "2.3", 0, True]
        frame = page.frame_locator("iframe.gpt-lesson-explorer-view").first
        page.evaluate("() => { const i = Reveal.getIndices(document.querySelector('iframe.gpt-lesson-explorer-view')"
                      ".closest('section')); Reveal.slide(i.h, i.v); }")
        frame.locator(".gl-btn").first.focus()
        frame.locator(".gl-btn").first.press("p")  # the key works with the focus in the explorer too
        assert page.evaluate(state)[:2] == ["off", ""]
    finally:
        page.close()


@pytest.mark.browser
@pytest.mark.slow
def test_the_clicker_scrolls_a_tall_slide_before_moving_on(lecture_decks, browser):
    """Page Down on a slide taller than the screen scrolls it to its end, then moves on; Page Up comes back
    to its end and scrolls it up; the same keys pressed inside an explorer's frame do the same."""
    ctx, _ = browser
    page = _open_deck(ctx, lecture_decks[("en", "02_attention")].html)
    try:
        # The explorer's slide, made taller than two screens whatever the explorer's size.
        where = page.evaluate("""() => { const s = document.querySelector('iframe.gpt-lesson-explorer-view').closest('section');
            const pad = document.createElement('div'); pad.style.height = '1600px'; s.append(pad);
            const i = Reveal.getIndices(s); Reveal.slide(i.h, i.v); return [i.h, i.v]; }""")
        page.wait_for_function("() => Reveal.getCurrentSlide().scrollHeight > 1600")
        tops = []
        for _ in range(10):
            tops.append(page.evaluate(_SCROLL)[0])
            page.keyboard.press("PageDown")
            if page.evaluate(_AT) != where:
                break
        assert page.evaluate(_AT) != where, "Page Down never left the tall slide"
        assert len(tops) >= 3 and tops == sorted(tops) and tops[0] == 0 and tops[-1] > 0, tops
        page.keyboard.press("PageUp")
        assert page.evaluate(_AT) == where
        top, client, height = page.evaluate(_SCROLL)
        assert client <= 720 and top + client >= height - 2  # back at the end it was left at
        page.keyboard.press("ArrowLeft")
        assert page.evaluate(_AT) == where and page.evaluate(_SCROLL)[0] < top
        frame = page.frame_locator("iframe.gpt-lesson-explorer-view").first
        frame.locator(".gl-btn").first.focus()  # (which scrolls the button into view)
        before = page.evaluate(_SCROLL)[0]
        frame.locator(".gl-btn").first.press("PageDown")
        assert page.evaluate(_AT) == where and page.evaluate(_SCROLL)[0] > before
    finally:
        page.close()


# A stand-in for an explorer: 11 px HTML text and canvas text drawn with a plain "sans-serif", a 9 px canvas
# label, and a Tangut character that no font of the deck or the machine has.
_FAKE_EXPLORER = """<!DOCTYPE html><html><head><meta charset="utf-8"><style>body{margin:0}</style></head><body>
<div class="gl-explorer" style="font-size:11px">key 键</div>
<canvas width="300" height="40" style="display:block;width:300px;height:40px"></canvas>
<script>
function draw() {
  const c = document.querySelector('canvas'), x = c.getContext('2d');
  x.clearRect(0, 0, 300, 40);
  x.font = '11px sans-serif'; x.fillText('掩码 mask', 4, 20);
  x.font = '9px sans-serif'; x.fillText('\\u{17000}', 150, 20);
}
draw(); addEventListener('resize', draw); document.documentElement.dataset.ready = 'true';
</script></body></html>"""


@pytest.fixture(scope="module")
def fake_explorer_deck(lecture_decks):
    out = lecture_decks[("en", "02_attention")].html.parent  # its vendor folder is reused
    nb = new_notebook()
    frame = ('<iframe class="gpt-lesson-explorer-view" style="display:block;width:100%;height:80px;border:0" '
             f'srcdoc="{html.escape(_FAKE_EXPLORER, quote=True)}"></iframe>')
    cell = new_code_cell("explorer", outputs=[new_output("display_data", data={"text/html": frame, "text/plain": "x"})])
    nb.cells = [_cell(new_markdown_cell("# A fake explorer"), "slide"), _cell(cell, "-")]
    path = out.parent / "nbs" / "97_fake_explorer.ipynb"
    path.parent.mkdir(exist_ok=True)
    nbformat.write(nb, path)
    (deck,) = slides.build_decks([path], out, lecture=True, index_notebooks=[path])
    return deck


@pytest.mark.browser
@pytest.mark.slow
def test_the_measurement_sees_canvas_text_and_the_canvas_draws_with_the_decks_fonts(fake_explorer_deck, browser):
    """slide_metrics reads the size of the text an explorer draws on its canvas and checks its characters in
    the canvas's font: the deck gives the canvas its Noto fonts (掩码 shows), so only the Tangut character,
    which no font has, is a box."""
    ctx, remote = browser
    m = measure_deck(ctx, fake_explorer_deck.html, remote, projector=False)
    assert m.explorer_min == pytest.approx(11 * 0.96, abs=0.05)
    assert m.canvas_min == pytest.approx(9 * 0.96, abs=0.05)
    assert [(t["ch"], t["code"], t["font"].split(":")[0]) for t in m.tofu] == [("\U00017000", "U+17000", "explorer canvas")]
    assert "Noto Sans SC" in m.tofu[0]["font"]  # drawn in the deck's fonts, not the frame's own sans-serif


@pytest.mark.browser
@pytest.mark.slow
def test_projector_mode_zooms_an_explorer_frame(fake_explorer_deck, browser):
    ctx, remote = browser
    on = measure_deck(ctx, fake_explorer_deck.html, remote, projector=True)
    assert on.projector is True
    assert on.explorer_min == pytest.approx(11 * 2.3 * 0.96, abs=0.05)
    assert on.canvas_min == pytest.approx(9 * 2.3 * 0.96, abs=0.05)
    assert [t["text"] for s in on.slides for t in s.canvas_small] == ["\U00017000"]
    with pytest.raises(TypeError, match="projector must be None, True or False"):
        measure_deck(ctx, fake_explorer_deck.html, remote, projector="on")


def test_the_projector_option_of_slide_metrics():
    from tools.slide_metrics import build_parser

    assert build_parser().parse_args(["--projector", "on", "lecture/"]).projector == "on"
    assert build_parser().parse_args(["lecture/"]).projector is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--projector", "big", "lecture/"])


def test_the_lecture_option_is_in_the_cli_and_the_guide():
    args = slides.build_parser().parse_args(["--lecture", "--out", "lecture/"])
    assert args.lecture and args.out == Path("lecture/")
    guide = (REPO / "docs" / "teaching.md").read_text(encoding="utf-8")
    assert re.search(r"`python -m tools\.slides --lecture[^`]*`", guide)
    assert nbformat  # the notebooks above are nbformat's
