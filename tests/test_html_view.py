"""The explorers' self-contained HTML view (``text/html`` next to the widget view).

Python side: what the view holds (the module, the controls, the payload's bytes once, the labels),
that it follows the controls, that it is escaped safely, and its size. Browser side
(``test_nbconvert_page_works_offline``): notebooks/explorers.ipynb, its explorer cells' outputs made
by running their code here (formatted by IPython as a kernel formats them), exported by nbconvert's HTML
exporter as ``jupyter nbconvert --to html`` does (no widget state, so no widget manager in the page),
opened from disk in Chromium with every network request blocked; one control of each explorer is used
in its frame and the read-outs are compared with Python's numbers. No kernel is started: the file
runs in well under a minute.
"""
from __future__ import annotations

import ast
import base64
import contextlib
import fnmatch
import html
import io
import json
import re
import time
import zlib
from pathlib import Path
from urllib.parse import urlsplit

import nbformat
import pytest
import torch
from test_browser import CANVAS_DIGEST, SET_RANGE, _chromium_or_skip  # shared with the widget's browser test

from gpt_lesson import GPT, CharTokenizer
from gpt_lesson.widgets import AttentionExplorer, MaskExplorer, ScalingExplorer
from gpt_lesson.widgets._common import CSS, esm_data, esm_source
from gpt_lesson.widgets.html_view import FRAME_HEIGHTS, MARKER, html_view, read_html_view
from gpt_lesson.widgets.labels import labels_for
from tools.jupyter_browser import chromium

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "explorers.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "html_view"
TEXT = "to be, or not to be: that is the question."
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def tok() -> CharTokenizer:
    return CharTokenizer(TEXT + "TBO\n")


@pytest.fixture(scope="module")
def model(tok) -> GPT:
    torch.manual_seed(0)
    return GPT(tok.vocab_size, 32, 4, 2, 16, dropout=0.0)


def _bundle(widget) -> dict:
    data, metadata = widget._repr_mimebundle_()
    assert metadata == {}
    return data


# -- what the view holds ---------------------------------------------------------------------------
def test_every_explorer_shows_its_widget_and_its_html_view(model, tok):
    for ex in (AttentionExplorer(model, tok, "to be", query=2), MaskExplorer(T=5), ScalingExplorer(d_k=16)):
        data = _bundle(ex)
        assert set(data) == {"text/plain", WIDGET_VIEW, "text/html"}
        assert data[WIDGET_VIEW]["model_id"] == ex.model_id and data["text/plain"] == repr(ex)
        view = read_html_view(data["text/html"])
        assert view["kind"] == ex.kind and view["css"] == CSS
        # the module is the widget's own (the same deflated data), not a second copy in another form
        assert view["code"] == esm_source(ex.kind) and esm_data(ex.kind) in ex._esm
        assert view["state"]["labels"] == ex.labels == labels_for(ex.kind)
        for name in ex._controls:
            assert view["state"][name] == getattr(ex, name), name
        assert view["state"]["payload"] == ex.payload  # bytes included, restored exactly
        assert data["text/html"].startswith(f'<iframe class="gpt-lesson-explorer-view gpt-lesson-{ex.kind}-explorer" '
                                            f'{MARKER}="{ex.kind}"')


def test_the_html_view_follows_the_controls(model, tok):
    ex = AttentionExplorer(model, tok, "to be")
    ex.stage, ex.head, ex.query = "raw", "all", None
    assert {k: read_html_view(ex.html_view())["state"][k] for k in ("stage", "head", "query")} == {
        "stage": "raw", "head": "all", "query": None}
    ex.text = "not to be"
    state = read_html_view(ex.html_view())["state"]
    assert state["text"] == "not to be" and state["payload"]["T"] == 9 and state["payload"] == ex.payload
    ex.text = "zzz?"  # a character the tokenizer does not know: the view shows the message, as the widget does
    state = read_html_view(ex.html_view())["state"]
    assert state["payload"] == {"text": "zzz?", "error": ex.error} and ex.error
    m = MaskExplorer()
    m.T, m.mask = 12, "padding"
    assert read_html_view(m.html_view())["state"] | {"payload": None, "labels": None} == {
        "T": 12, "mask": "padding", "n_real": 6, "payload": None, "labels": None}


def test_the_payload_bytes_are_stored_once_deflated(model, tok):
    ex = AttentionExplorer(model, tok, TEXT)
    document = read_html_view(ex.html_view())["document"]
    data = re.search(r'data: "([A-Za-z0-9+/=]*)"', document).group(1)
    names = ("raw", "scaled", "weights", "q", "k", "v", "output", "rows", "heads", "layers")
    arrays = [ex.payload[x][part] for x in names for part in ("data", "scales") if part in ex.payload[x]]
    assert zlib.decompress(base64.b64decode(data)) == b"".join(arrays)
    meta = re.search(r'meta: "([A-Za-z0-9+/=]*)"', document).group(1)
    meta_json = zlib.decompress(base64.b64decode(meta)).decode()
    assert '{"$buffer":0}' in meta_json and len(meta_json) < 12_000  # the arrays are not in it
    # the arrays cost their base64 size and no more: the rest of the view is the module, labels, style, script
    rest = len(ex.html_view()) - len(data)
    assert rest < len(esm_data("attention")) + 10_000


def test_the_view_is_escaped_for_its_attribute_and_cannot_end_its_script(model, tok):
    ex = AttentionExplorer(model, tok, 'to be, "or" not </script> & to be')
    ex.labels = {**ex.labels, "no_kernel": 'No "kernel" </script> & <b>here</b>'}
    view = ex.html_view()
    srcdoc = re.search(r'srcdoc="([^"]*)"', view).group(1)  # no raw quote inside the attribute
    assert "<" not in srcdoc and ">" not in srcdoc
    document = html.unescape(srcdoc)
    assert document.count("</script>") == 1 and document.endswith("</script></body></html>")
    state = read_html_view(view)["state"]
    assert state["text"] == ex.text and state["labels"]["no_kernel"] == ex.labels["no_kernel"]


def test_html_view_checks_its_kind():
    with pytest.raises(ValueError, match="kind='heatmap' is not one of"):
        html_view("heatmap", {}, code="", css="", title="x")
    with pytest.raises(ValueError, match="not an explorer's HTML view"):
        read_html_view("<p>hello</p>")
    assert set(FRAME_HEIGHTS) == {"attention", "mask", "scaling"}


def test_size_of_the_html_view_at_64_tokens_4_layers_4_heads(tok):
    """The view of the attention explorer at 64 tokens, 4 layers x 4 heads (head size 16), and of the
    other two, in bytes as a notebook stores them (printed with -s)."""
    torch.manual_seed(0)
    big = GPT(tok.vocab_size, 64, 4, 4, 64, dropout=0.0)
    sizes = {}
    for ex in (AttentionExplorer(big, tok, (TEXT * 2)[:64]), MaskExplorer(), ScalingExplorer()):
        view = _bundle(ex)["text/html"]
        assert ex.html_view_bytes() == len(view.encode())
        sizes[ex.kind] = {"html_view": ex.html_view_bytes(), "in_ipynb": len(json.dumps(view)),
                          "widget_state": ex.embedded_state_bytes()}
    print("\nbytes per explorer:", json.dumps(sizes))
    att = sizes["attention"]
    # every stage of the 4 x 4 heads is in it (int8 at this size), deflated, and nothing twice
    assert 150_000 < att["html_view"] < 300_000
    assert att["html_view"] <= att["widget_state"] + 2_000  # no bigger than what the widget itself sends
    assert sizes["mask"]["html_view"] < 60_000 and sizes["scaling"]["html_view"] < 80_000


def test_slide_decks_keep_the_html_view_and_drop_only_the_widget_view(tmp_path):
    """tools/slides.py: an explorer's output keeps its HTML view on the slide (minus the widget view, which
    needs a widget manager); a widget with no HTML view is replaced by the short note."""
    from tools.slides import _WIDGET_NOTE, _deck_notebook

    ex = MaskExplorer(T=5)
    explorer_data = _bundle(ex)
    other = {WIDGET_VIEW: {"model_id": "abc", "version_major": 2, "version_minor": 0}, "text/plain": "IntSlider()"}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("explorer", execution_count=1, outputs=[
        nbformat.v4.new_output("display_data", data=explorer_data),
        nbformat.v4.new_output("display_data", data=other)])])
    cell = _deck_notebook(nb, True, tmp_path)["cells"][0]
    kept, note = cell["outputs"]
    assert kept["data"] == {"text/html": explorer_data["text/html"], "text/plain": repr(ex)}
    assert read_html_view(kept["data"]["text/html"])["state"]["T"] == 5
    assert note["data"]["text/html"] == _WIDGET_NOTE


def test_every_static_file_is_package_data():
    """The wheel ships what the views read at display time (html_view.mjs is read only then: a file left
    out of the wheel would break every explorer's display, not the import)."""
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    static = ROOT / "gpt_lesson" / "widgets" / "static"
    files = sorted(p.relative_to(static.parent).as_posix() for p in static.iterdir() if p.is_file())
    assert "static/html_view.mjs" in files
    missing = [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs["gpt_lesson.widgets"])]
    assert not missing, f"not in pyproject's package-data for gpt_lesson.widgets: {missing}"


# -- the page nbconvert writes, in a browser with no network ------------------------------------------
FRAME_READY = """() => document.documentElement.dataset.ready === "true"
  && Number((document.querySelector('[data-explorer]') || {dataset: {}}).dataset.paints || 0) > 0"""
def _lines(doc, kind: str) -> list[str]:
    """The read-out lines under an explorer (one <div> each; the scaling explorer's single line is the text)."""
    readout = doc.locator(f"[data-explorer={kind}] [data-part=readout]")
    lines = readout.locator(":scope > div")
    return lines.all_inner_texts() if lines.count() else [readout.inner_text()]


def _run_cell(source: str, namespace: dict):
    """Run a notebook cell's code in ``namespace``; return its last expression's value, as a kernel shows it."""
    tree = ast.parse(source)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<cell>", "exec"), namespace)
    return eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace) if last else None


@pytest.mark.browser
def test_nbconvert_page_works_offline(tmp_path, shakespeare_path, monkeypatch):
    """notebooks/explorers.ipynb with its explorer cells' outputs made now (their code run here, each value
    formatted by IPython's DisplayFormatter as a kernel does, no widget state), exported by nbconvert's
    HTML exporter (the ``--to html`` default), opened from disk in Chromium with the network blocked."""
    _chromium_or_skip()
    from explorer_readouts import attention_lines, mask_lines, scaling_line
    from IPython.core.formatters import DisplayFormatter
    from nbconvert import HTMLExporter

    from gpt_lesson.widgets.mask_explorer import mask_view_data
    from gpt_lesson.widgets.scaling_explorer import ScalingData

    started = time.monotonic()
    monkeypatch.setenv("GPT_LESSON_DATA", str(shakespeare_path))
    nb = nbformat.read(NOTEBOOK, as_version=4)  # the repository's notebook is never modified
    namespace: dict = {}
    formatter = DisplayFormatter()
    explorers = {}
    for cell in nb.cells:
        if cell.cell_type != "code" or "google.colab" in cell.source:
            continue
        if "plt.show()" in cell.source:  # the static figures: not what this test is about
            cell.outputs = []
            continue
        with contextlib.redirect_stdout(io.StringIO()):  # the cells' own prints
            value = _run_cell(cell.source, namespace)
        shown = getattr(value, "shown", value)  # a ModelSwitch: its HTML view is the shown explorer's
        if value is not None and hasattr(shown, "html_view"):
            data, metadata = formatter.format(value)
            assert WIDGET_VIEW in data and "text/html" in data
            cell.outputs = [nbformat.v4.new_output("display_data", data=data, metadata=metadata)]
            explorers[shown.kind] = shown
    assert list(explorers) == ["attention", "mask", "scaling"]
    page_html, _ = HTMLExporter().from_notebook_node(nb)  # no widget state: the widget views are left out
    assert "html-manager" not in page_html and "widget-state+json" not in page_html
    assert page_html.count(f"{MARKER}=") == 3
    page_path = tmp_path / "explorers.html"
    page_path.write_text(page_html, encoding="utf-8")
    prepared = time.monotonic() - started

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    blocked: list[tuple[str, str]] = []  # (the frame that asked, the address)
    frame_errors: list[str] = []
    with chromium(tmp_path / "profile", (1400, 900)) as context:
        def route(r):
            if urlsplit(r.request.url).scheme in ("file", "blob", "data", "about"):
                r.continue_()
            else:
                try:
                    asker = r.request.frame.url
                except Exception:  # a request of no frame (a worker)
                    asker = "?"
                blocked.append((asker, r.request.url))
                r.abort()

        context.route("**/*", route)
        page = context.new_page()
        # the page's own CDN scripts and badges fail offline; nothing in an explorer's frame may fail
        page.on("console", lambda m: frame_errors.append(m.text)
                if m.type == "error" and m.location.get("url", "").startswith("about:srcdoc") else None)
        page.on("pageerror", lambda e: frame_errors.append(f"page error: {e}"))
        page.goto(page_path.as_uri())
        frames = {}
        deadline = time.monotonic() + 30
        while len(frames) < 3 and time.monotonic() < deadline:
            for f in page.frames:
                if f.url == "about:srcdoc" and f.evaluate(FRAME_READY):
                    frames[f.evaluate("() => document.querySelector('[data-explorer]').dataset.explorer")] = f
            page.wait_for_timeout(100)
        assert set(frames) == {"attention", "mask", "scaling"}, f"painted: {sorted(frames)}; errors {frame_errors}"
        # each frame is as tall as its explorer (no inner scrolling) and as wide as the output area
        for kind, f in frames.items():
            frame_el = f.frame_element()
            box = frame_el.bounding_box()
            inner = f.evaluate("() => document.getElementById('gl-view').getBoundingClientRect().height")
            assert abs(box["height"] - inner) <= 1 and box["height"] > 250 and box["width"] > 800, (kind, box, inner)
            assert frame_el.get_attribute(MARKER) == kind

        # attention: no kernel, so the text is fixed and says so; a stage and a head change in the page
        att, mirror = frames["attention"], explorers["attention"]
        att.wait_for_function("() => document.querySelector('textarea').readOnly")
        assert att.locator(".gl-message").inner_text().startswith("No kernel")
        assert att.locator("textarea").input_value() == mirror.text and "\n" in mirror.text  # the newline is kept
        heat = "canvas[data-part=heatmap]"
        before = att.evaluate(CANVAS_DIGEST, heat)
        att.locator("[data-control=stage] [data-value=masked]").click()
        assert att.locator(heat).get_attribute("data-stage") == "masked"
        assert att.evaluate(CANVAS_DIGEST, heat) != before
        att.locator("[data-control=head] [data-value='2']").click()
        mirror.stage, mirror.head = "masked", 2
        assert _lines(att, "attention") == attention_lines(mirror.view)
        att.frame_element().screenshot(path=str(ARTIFACTS / "attention_view.png"))

        # mask: no mask at T = 12, read-outs as Python writes them
        mk = frames["mask"]
        before = mk.evaluate(CANVAS_DIGEST, "[data-explorer] canvas")
        mk.evaluate(SET_RANGE, ["input[data-control=T]", 12])
        mk.locator("[data-control=mask] [data-value=none]").click()
        n_real = int(mk.locator("input[data-control=n_real]").input_value())
        assert _lines(mk, "mask")[:2] == mask_lines(mask_view_data(12, "none", n_real))
        assert "the model can read the future" in _lines(mk, "mask")[0]
        assert mk.evaluate(CANVAS_DIGEST, "[data-explorer] canvas") != before
        mk.frame_element().screenshot(path=str(ARTIFACTS / "mask_view.png"))

        # scaling: d_k = 1024 without scaling
        sc = frames["scaling"]
        sc.evaluate(SET_RANGE, ["input[data-control=d_k]", 10])
        sc.locator("[data-control=scaling] [data-value=none]").click()
        assert _lines(sc, "scaling") == [scaling_line(ScalingData().view(1024, "none"))]
        sc.frame_element().screenshot(path=str(ARTIFACTS / "scaling_view.png"))
        page.screenshot(path=str(ARTIFACTS / "nbconvert_page.png"))
    from_frames = [url for asker, url in blocked if asker.startswith("about:srcdoc")]
    assert not from_frames, f"an explorer's frame asked the network for {from_frames}"
    assert not frame_errors, frame_errors
    print(f"\nnbconvert page test: page made in {prepared:.1f} s, all {time.monotonic() - started:.1f} s "
          f"({len(blocked)} requests of nbconvert's template and the badges blocked)")
