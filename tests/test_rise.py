"""Live slides: a lesson presented with RISE (jupyterlab_rise) inside JupyterLab, in headless Chromium.

The teacher's way in: open the lesson in JupyterLab, run the cells above the explorer, select a code
cell and start the slideshow ("Render as Reveal Slideshow", the command ``RISE:preview``, Alt+R). The
slideshow opens next to the notebook as its own small Jupyter app in an iframe, on the same kernel.
There the tests run a cell on its slide with Shift+Enter and read the fresh output, then run the
explorer's cell and use the explorer on its slide: it paints, and a control changes what it shows
(the read-out is compared with Python's numbers). The slideshow app of jupyterlab_rise 0.43.1 has
no widget manager (it cannot load the ipywidgets one: "Shared module @jupyterlab/console doesn't
exist in shared scope default", upstream jupyterlab-contrib/rise issues 119 and 126), so it shows
the explorer's self-contained HTML view (``gpt_lesson.widgets.html_view``), whose controls work in
the page; should a later RISE render the widget itself, the test drives that instead.

Server and browser from tools/jupyter_browser.py (the recipe of shared/docs/jupyter-notes.md); the
RISE theme is set to "white" (the default theme loads two Google fonts, which fail offline).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from test_browser import CANVAS_DIGEST  # a digest of a canvas's pixels (shared)

from gpt_lesson.widgets.html_view import MARKER
from tools.exercises import cell_text, setup_cells
from tools.jupyter_browser import CHROMIUM, chromium, jupyterlab, open_notebook

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "03_causal_mask.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "rise"
EXPLORER_CALL = re.compile(r"\b\w*Explorer\(")
EXPLORER_SELECTOR = "[class*='gpt-lesson-'][class*='-explorer']"
BADGE_HOSTS = {"colab.research.google.com", "mybinder.org"}

pytestmark = pytest.mark.browser

# Cell i has run and the kernel is idle.
RAN = """(i) => {
  const nb = window.jupyterapp.shell.currentWidget;
  const k = nb.sessionContext.session && nb.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && nb.content.widgets[i].model.executionCount !== null;
}"""


def _slide_type(cell) -> str:
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "-")


def lesson_cells(nb) -> tuple[list[int], int, int]:
    """(the setup cells, a plain code cell shown on a slide, the explorer's cell): cell indices of ``nb``.

    The setup cells are the code cells between "What you will learn" and the first section (imports,
    data); the plain cell is the first code cell after them that is on a slide and shows text, the
    explorer's cell the one that calls ``SomethingExplorer(...)``. Both need only the setup cells.
    """
    setup = setup_cells(nb)
    explorer = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and EXPLORER_CALL.search(cell_text(c))
                    and _slide_type(c) != "skip")
    plain = next(i for i, c in enumerate(nb.cells) if i > max(setup, default=-1) and c.cell_type == "code"
                 and _slide_type(c) not in ("skip", "notes") and _text_output(c).strip()
                 and not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in c.outputs))
    return setup, plain, explorer


def _text_output(cell) -> str:
    """What a cell printed and returned, as text."""
    return "".join(o.get("text", "") if o.get("output_type") == "stream" else o.get("data", {}).get("text/plain", "")
                   for o in cell.outputs if o.get("name") != "stderr")


@pytest.fixture(scope="module")
def rise(tmp_path_factory, shakespeare_path):
    """JupyterLab with the lesson's cells above the explorer run and the RISE slideshow open on the plain cell."""
    if not CHROMIUM.exists():
        if os.environ.get("GPT_LESSON_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
        pytest.skip(f"{CHROMIUM} is missing (set GPT_LESSON_REQUIRE_BROWSER=1 to make this a failure)")
    tmp = tmp_path_factory.mktemp("rise")
    root = tmp / "root"
    (root / "notebooks").mkdir(parents=True)
    # A copy without outputs (the repository's notebook is never modified): what the slideshow then
    # shows under a cell can only come from running it.
    nb = nbformat.read(LESSON, as_version=4)
    blank = nbformat.read(LESSON, as_version=4)
    for cell in blank.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    blank.metadata.pop("widgets", None)
    nbformat.write(blank, root / "notebooks" / LESSON.name)
    if (ROOT / "figures").is_dir():
        shutil.copytree(ROOT / "figures", root / "figures")
    settings = tmp / "jupyter-config" / "lab" / "user-settings" / "jupyterlab-rise"
    settings.mkdir(parents=True)
    (settings / "plugin.jupyterlab-settings").write_text(json.dumps({"theme": "white"}))
    setup, plain, explorer = lesson_cells(nb)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    hosts: set[str] = set()
    console: list[str] = []
    started = time.monotonic()
    with jupyterlab(root, tmp, env={"GPT_LESSON_DATA": str(shakespeare_path)}) as lab, \
            chromium(tmp / "profile", (1600, 1000)) as context:
        page = context.new_page()
        page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)  # iframes' too
        page.on("request", lambda r: hosts.add(re.sub(r"^\w+://([^/:]+).*$", r"\1", r.url))
                if r.url.startswith(("http:", "https:", "ws:", "wss:")) else None)
        open_notebook(page, lab, f"notebooks/{LESSON.name}")
        # Run the setup cells (imports, data) in JupyterLab: they are "skip" cells, not on the slides.
        for i in setup:
            page.evaluate("(i) => { const nb = window.jupyterapp.shell.currentWidget; nb.content.activeCellIndex = i;"
                          " return window.jupyterapp.commands.execute('notebook:run-cell'); }", i)
            page.wait_for_function(RAN, arg=i, timeout=300_000, polling=300)
        # Select the plain cell and start the slideshow there, as Alt+R does.
        page.evaluate("(i) => { const nb = window.jupyterapp.shell.currentWidget; nb.content.activeCellIndex = i;"
                      " return window.jupyterapp.commands.execute('RISE:preview'); }", plain)
        deadline = time.monotonic() + 120
        frame = None
        while frame is None and time.monotonic() < deadline:
            frame = next((f for f in page.frames if "/rise/" in f.url), None)
            page.wait_for_timeout(250)  # (the sync API sees new frames only while it waits)
        assert frame is not None, "RISE:preview opened no slideshow frame"
        frame.wait_for_selector(".reveal .slides section.present", timeout=120_000)
        frame.wait_for_function("() => document.querySelectorAll('.jp-Notebook .jp-Cell').length > 0", timeout=60_000)
        yield {"page": page, "frame": frame, "nb": nb, "plain": plain, "explorer": explorer,
               "hosts": hosts, "console": console, "started": started}


CELL_STATE = """(i) => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[i];
  if (!cell) return null;
  const prompt = cell.querySelector('.jp-InputPrompt');
  const outputs = [...cell.querySelectorAll('.jp-OutputArea-output')];
  const rect = cell.getBoundingClientRect();
  return {prompt: prompt ? prompt.textContent.trim() : '', active: cell.classList.contains('jp-mod-active'),
          onSlide: !!cell.closest('section.present'),
          visible: rect.width > 0 && rect.height > 0 && getComputedStyle(cell).visibility !== 'hidden'
                   && !cell.closest('.fragment:not(.visible)'),
          text: outputs.map(o => o.innerText).join('\\n'),
          mimes: outputs.map(o => o.getAttribute('data-mime-type'))};
}"""


def _run_in_slideshow(rise, index: int, timeout: float = 180.0) -> dict:
    """Step through the slideshow (Space: the next fragment, subslide or slide) until cell ``index`` is on
    screen and selected (RISE selects the first code cell of what a step reveals), press Shift+Enter and
    wait for its prompt and output."""
    page, frame = rise["page"], rise["frame"]
    for _ in range(300):
        state = frame.evaluate(CELL_STATE, index)
        if state["onSlide"] and state["visible"]:
            break  # stop here: one more Space (RISE selecting the cell late, on a loaded machine) would pass it
        frame.locator(".jp-Notebook").first.focus()
        page.keyboard.press("Space")
        page.wait_for_timeout(200)
    else:
        raise AssertionError(f"cell {index} never came on screen in the slideshow: {state}")
    deadline = time.monotonic() + 3
    while not state["active"] and time.monotonic() < deadline:
        page.wait_for_timeout(200)
        state = frame.evaluate(CELL_STATE, index)
    if not state["active"]:  # select it as a presenter would: a click on its prompt
        frame.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-InputPrompt").click()
        state = frame.evaluate(CELL_STATE, index)
    assert state["active"] and state["onSlide"], f"cell {index} is on screen but not selected: {state}"
    assert state["text"] == "", f"cell {index} shows an output before it ran: {state['text'][:100]!r}"
    before = state["prompt"]
    page.keyboard.press("Shift+Enter")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = frame.evaluate(CELL_STATE, index)
        # A number in the prompt: the kernel has replied. (The JupyterLab page's current widget is the
        # slideshow panel now, so its kernel status is not at hand; wait for the output to settle.)
        if re.fullmatch(r"\[\d+\]:", state["prompt"]) and state["prompt"] != before:
            page.wait_for_timeout(1500)
            settled = frame.evaluate(CELL_STATE, index)
            if settled["text"] == state["text"]:
                return settled | {"before": before}
        page.wait_for_timeout(300)
    raise AssertionError(f"cell {index} did not run within {timeout:.0f} s in the slideshow (prompt {before!r})")


def test_lesson_cells_are_found():
    nb = nbformat.read(LESSON, as_version=4)
    setup, plain, explorer = lesson_cells(nb)
    assert setup and max(setup) < plain < explorer
    assert EXPLORER_CALL.search(cell_text(nb.cells[explorer]))
    assert _text_output(nb.cells[plain]).strip()


def test_a_cell_runs_on_its_slide_in_the_slideshow(rise):
    frame, plain, nb = rise["frame"], rise["plain"], rise["nb"]
    # The slideshow starts on the selected cell's slide.
    assert frame.evaluate(CELL_STATE, plain)["onSlide"]
    state = _run_in_slideshow(rise, plain)
    assert state["prompt"] != state["before"] and state["text"].strip()
    # The fresh output is the one stored in the lesson (its cells are deterministic; masks ~numbers).
    expected = re.sub(r"~[\d.]+", "~", _text_output(nb.cells[plain])).strip()
    assert re.sub(r"~[\d.]+", "~", state["text"]).strip() == expected
    rise["page"].screenshot(path=str(ARTIFACTS / "rise_cell_ran.png"))


PAINTS = "() => Number((document.querySelector('[data-explorer]') || {dataset: {}}).dataset.paints || 0)"


def _explorer_document(rise, timeout: float = 60.0):
    """The frame whose document holds the explorer of the explorer's cell: the HTML view's own frame,
    or the slideshow's when a widget manager drew the widget."""
    cell = rise["frame"].locator(".jp-Notebook .jp-Cell").nth(rise["explorer"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = cell.locator(f"iframe[{MARKER}]")
        if view.count():
            inner = view.first.element_handle().content_frame()
            if inner is not None and inner.evaluate(PAINTS) > 0:
                return inner, view.first
        widget = cell.locator(f"{EXPLORER_SELECTOR}:not(iframe)")
        if widget.count() and rise["frame"].evaluate(
                "(i) => !!document.querySelectorAll('.jp-Notebook .jp-Cell')[i].querySelector('[data-explorer][data-paints]')",
                rise["explorer"]):
            return rise["frame"], widget.first
        rise["page"].wait_for_timeout(250)
    raise AssertionError("the explorer's cell shows no painted explorer")


def _change_a_control(doc) -> tuple[list[str], list[str]]:
    """Use one control of the explorer in ``doc``; return (its read-out lines, Python's lines for the same setting)."""
    kind = doc.evaluate("() => document.querySelector('[data-explorer]').dataset.explorer")
    root = f"[data-explorer={kind}]"
    if kind == "mask":
        from explorer_readouts import mask_lines

        from gpt_lesson.widgets.mask_explorer import mask_view_data

        doc.locator(f"{root} [data-control=mask] [data-value=none]").click()
        T, n_real = (int(doc.locator(f"{root} input[data-control={n}]").input_value()) for n in ("T", "n_real"))
        want = mask_lines(mask_view_data(T, "none", n_real))
    elif kind == "scaling":
        from explorer_readouts import scaling_line

        from gpt_lesson.widgets.scaling_explorer import ScalingData

        doc.locator(f"{root} [data-control=scaling] [data-value=none]").click()
        d_k = int(doc.evaluate(f"() => document.querySelector('{root} [data-control=d_k]').closest('label')"
                               ".querySelector('.gl-readout').textContent"))
        want = [scaling_line(ScalingData().view(d_k, "none"))]
    else:
        raise AssertionError(f"the lesson's explorer is a {kind} explorer: teach this test its control")
    readout = doc.locator(f"{root} [data-part=readout]")
    lines = readout.locator(":scope > div").all_inner_texts() or [readout.inner_text()]  # (scaling: one line)
    return lines[:len(want)], want


def test_the_explorer_works_in_the_slideshow(rise):
    state = _run_in_slideshow(rise, rise["explorer"])
    doc, view = _explorer_document(rise)
    rise["page"].screenshot(path=str(ARTIFACTS / "rise_explorer_ran.png"))
    if doc is not rise["frame"]:  # the HTML view, not the text repr of the widget
        assert state["mimes"] == ["text/html"], state["mimes"]
    box = view.bounding_box()
    assert box and box["width"] > 300 and box["height"] > 200, box
    canvas = "[data-explorer] canvas"
    before_paints, before_pixels = doc.evaluate(PAINTS), doc.evaluate(CANVAS_DIGEST, canvas)
    lines, want = _change_a_control(doc)
    assert lines == want
    assert doc.evaluate(PAINTS) > before_paints and doc.evaluate(CANVAS_DIGEST, canvas) != before_pixels
    rise["page"].screenshot(path=str(ARTIFACTS / "rise_explorer_changed.png"))


def test_nothing_left_the_machine(rise):
    assert rise["hosts"] - {"127.0.0.1"} <= BADGE_HOSTS, f"requests left the machine: {sorted(rise['hosts'])}"
    print(f"RISE tests took {time.monotonic() - rise['started']:.1f} s")
