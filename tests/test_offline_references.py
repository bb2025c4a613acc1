"""The offline check of the slide decks and exported pages (tools.slides.remote_references, issue 28
item 7) and the rule that a deck inlines only images from the lesson's own folder.

The check parses the page: every attribute that makes a browser load something, the text of scripts
and style sheets, the HTML inside <iframe srcdoc>, and the JSON of data scripts (the widget state,
whose strings are escaped https:\\/\\/). Each row of LOADS is a kind of load that a search for
'src=/href= on a few tags, url(), import' missed; NOT_LOADS are links and names that load nothing.
"""
from __future__ import annotations

import json

import nbformat
import pytest
from nbformat.v4 import new_markdown_cell, new_notebook

from tools import slides
from tools.slides import OutsideLessonError, _embed_local_images, remote_references


def _widget_state(state: dict, escape: bool = True) -> str:
    """A page fragment holding a widget state as nbconvert writes it (json.dumps escapes nothing; the
    lab template's writer escapes / as \\/, which is what the escape=True rows show)."""
    text = json.dumps({"state": {"m1": {"model_name": "M", "model_module": "x", "state": state}},
                       "version_major": 2, "version_minor": 0})
    if escape:
        text = text.replace("/", "\\/")
    return f'<script type="application/vnd.jupyter.widget-state+json">{text}</script>'


# (what the row shows, page, the remote URLs it loads)
LOADS = [
    # the widget state (JSON), escaped and not
    ("widget state: a module URL, escaped", _widget_state({"_model_module": "https://cdn.example.org/w.js"}),
     ["https://cdn.example.org/w.js"]),
    ("widget state: an anywidget _esm URL, escaped", _widget_state({"_esm": "https://esm.example.org/mod.mjs"}),
     ["https://esm.example.org/mod.mjs"]),
    ("widget state: an import inside _esm, escaped",
     _widget_state({"_esm": 'import * as d3 from "https://esm.example.org/d3.mjs";\nexport default {}'}),
     ["https://esm.example.org/d3.mjs"]),
    ("widget state: fetch() inside _esm, unescaped",
     _widget_state({"_esm": "export default { render() { fetch('https://api.example.org/rows') } }"}, escape=False),
     ["https://api.example.org/rows"]),
    ("widget state: @import in _css, escaped",
     _widget_state({"_css": "@import url(https://fonts.example.org/f.css); .a { color: red }"}),
     ["https://fonts.example.org/f.css"]),
    ("widget state: an <img> in an HTML widget's value, unescaped",
     _widget_state({"value": '<b>hi</b><img src="https://img.example.org/p.png">'}, escape=False),
     ["https://img.example.org/p.png"]),
    ("widget state: \\u002f escapes",
     '<script type="application/vnd.jupyter.widget-state+json">'
     '{"state": {"m": {"state": {"src": "https:\\u002f\\u002fcdn.example.org\\u002fu.png"}}}}</script>',
     ["https://cdn.example.org/u.png"]),
    ("import map, escaped", '<script type="importmap">{"imports": {"d3": "https:\\/\\/esm.sh\\/d3"}}</script>',
     ["https://esm.sh/d3"]),
    # srcset and its cousins
    ("img srcset, double quotes", '<img src="a.png" srcset="a.png 1x, https://img.example.org/b.png 2x">',
     ["https://img.example.org/b.png"]),
    ("source srcset, single quotes, upper case",
     "<PICTURE><SOURCE SRCSET='https://img.example.org/c.webp' TYPE='image/webp'><IMG SRC=c.png></PICTURE>",
     ["https://img.example.org/c.webp"]),
    ("img srcset, unquoted", "<img srcset=https://img.example.org/d.png>", ["https://img.example.org/d.png"]),
    ("srcset with widths and a comma in a data: URL",
     '<img srcset="data:image/png;base64,AAA=,BBB 10w, //img.example.org/e.png 640w">', ["//img.example.org/e.png"]),
    ("link imagesrcset (preload)", '<link rel="preload" as="image" imagesrcset="https://img.example.org/f.png 2x">',
     ["https://img.example.org/f.png"]),
    # scripts' text
    ("inline fetch()", '<script>fetch("https://api.example.org/data.json").then(r => r.json())</script>',
     ["https://api.example.org/data.json"]),
    ("import() with a template literal", "<script type=module>await import(`https://esm.example.org/x.mjs`)</script>",
     ["https://esm.example.org/x.mjs"]),
    ("a protocol-relative fetch", "<SCRIPT>fetch('//api.example.org/d')</SCRIPT>", ["//api.example.org/d"]),
    ("a WebSocket", '<script>new WebSocket("wss://live.example.org/s")</script>', ["wss://live.example.org/s"]),
    ("a script URL with JSON escapes", '<script>el.src = "https:\\/\\/cdn.example.org\\/r.js"</script>',
     ["https://cdn.example.org/r.js"]),
    ("an event handler attribute", '<img src="a.png" onerror="fetch(\'https://beacon.example.org/x\')">',
     ["https://beacon.example.org/x"]),
    # SVG
    ("svg <image href>", '<svg><image href="https://img.example.org/i.png" width="10"/></svg>',
     ["https://img.example.org/i.png"]),
    ("svg <use xlink:href>, upper case", "<SVG><USE XLINK:HREF='https://img.example.org/s.svg#dot'/></SVG>",
     ["https://img.example.org/s.svg#dot"]),
    ("svg <feImage href>", "<svg><filter><feImage href=https://img.example.org/n.png /></filter></svg>",
     ["https://img.example.org/n.png"]),
    # other loading attributes
    ("video poster", '<video src="v.mp4" poster="https://img.example.org/poster.jpg"></video>',
     ["https://img.example.org/poster.jpg"]),
    ("video poster, upper case, unquoted", "<VIDEO POSTER=https://img.example.org/p2.jpg></VIDEO>",
     ["https://img.example.org/p2.jpg"]),
    ("object data", "<object data='https://docs.example.org/paper.pdf' type='application/pdf'></object>",
     ["https://docs.example.org/paper.pdf"]),
    ("object data, upper case", '<OBJECT DATA="https://docs.example.org/o.svg"></OBJECT>',
     ["https://docs.example.org/o.svg"]),
    ("meta refresh", '<meta http-equiv="refresh" content="0; url=https://elsewhere.example.org/">',
     ["https://elsewhere.example.org/"]),
    ("meta refresh, upper case, quoted URL", "<META HTTP-EQUIV=Refresh CONTENT=\"5;URL='https://x.example.org/p'\">",
     ["https://x.example.org/p"]),
    ("input type=image", '<input type="image" src="https://img.example.org/btn.png">',
     ["https://img.example.org/btn.png"]),
    ("track", "<video><track src='https://subs.example.org/en.vtt'></video>", ["https://subs.example.org/en.vtt"]),
    ("body background", "<body background=https://img.example.org/bg.png></body>", ["https://img.example.org/bg.png"]),
    ("base href (every relative URL then goes remote)", '<base href="https://cdn.example.org/">',
     ["https://cdn.example.org/"]),
    ("html manifest", '<html manifest="https://cdn.example.org/app.appcache"></html>',
     ["https://cdn.example.org/app.appcache"]),
    ("iframe srcdoc, entity-escaped", '<iframe srcdoc="&lt;img src=&quot;https://img.example.org/in.png&quot;&gt;">',
     ["https://img.example.org/in.png"]),
    # how browsers read a URL
    ("an entity in the URL", '<img src="https&#58;//img.example.org/e.png">', ["https://img.example.org/e.png"]),
    ("a tab inside the scheme (browsers drop tabs and newlines)", '<script src="ht\ttps://cdn.example.org/t.js"></script>',
     ["ht\ttps://cdn.example.org/t.js"]),
    ("backslashes for slashes", '<img src="https:\\\\img.example.org/b.png">', ["https:\\\\img.example.org/b.png"]),
    ("an upper-case scheme with one slash (read as two)", "<IFRAME SRC=HTTPS:/CDN.EXAMPLE.ORG/F.HTML></IFRAME>",
     ["HTTPS:/CDN.EXAMPLE.ORG/F.HTML"]),
]

# Links and names that load nothing: none of them may count.
NOT_LOADS = [
    '<a href="https://colab.research.google.com/x">Colab</a>',
    "<A HREF=https://example.org/page>page</A>",
    "<a href='https://example.org/'><img src='figures/local.png' srcset='figures/local@2x.png 2x'></a>",
    '<link rel="canonical" href="https://example.org/lesson">',
    '<form action="https://example.org/submit"><input type="submit"></form>',
    '<svg xmlns="http://www.w3.org/2000/svg"><a xlink:href="https://example.org/">x</a></svg>',
    "<p>Read https://example.org and url(https://example.org/x.png) in the text.</p>",
    '<pre>&lt;script src="https://cdn.example.org/a.js"&gt;&lt;/script&gt;</pre>',
    '<!-- <script src="https://cdn.example.org/old.js"></script> -->',
    "<script>/* see https://docs.example.org/api */ const ns = 'http://www.w3.org/2000/svg';</script>",
    "<style>/* from https://example.org/theme, url(https://example.org/x.png) */ .a { color: red }</style>",
    '<img src="data:image/png;base64,iVBORw0KGgo="><script src="vendor/require.js"></script>',
    '<meta http-equiv="refresh" content="30"><meta http-equiv="refresh" content="0; url=02_attention.html">',
    _widget_state({"description": "See https://example.org for more", "layout": "IPY_MODEL_abc",
                   "value": '<a href="https://example.org/">a link</a>', "_model_module": "@jupyter-widgets/base"}),
    '<script type="application/vnd.jupyter.widget-view+json">{"model_id": "m1", "version_major": 2}</script>',
]


@pytest.mark.parametrize("page, loads", [pytest.param(p, u, id=name) for name, p, u in LOADS])
def test_every_kind_of_remote_load_is_found(page, loads):
    assert remote_references(page) == loads


@pytest.mark.parametrize("page", NOT_LOADS)
def test_links_and_names_are_not_loads(page):
    assert remote_references(page) == []


def test_all_rows_in_one_page_are_all_found_and_links_stay_out():
    page = "<html><head><title>t</title></head><body>" + "\n".join(p for _, p, _ in LOADS) + \
        "\n".join(NOT_LOADS) + "</body></html>"
    assert remote_references(page) == sorted({u for _, _, urls in LOADS for u in urls})


def test_style_sheets_and_scripts_by_kind():
    css = "/* https://example.org */ @import 'https://fonts.example.org/a.css';\n" \
          "@font-face { src: url(files/a.woff2) format('woff2'), url(\"//fonts.example.org/b.woff2\"); }\n" \
          ".x { background: image-set('https://img.example.org/1.png' 1x, 'local.png' 2x) }"
    assert remote_references(css, kind="css") == ["//fonts.example.org/b.woff2", "https://fonts.example.org/a.css",
                                                  "https://img.example.org/1.png"]
    assert remote_references("import('https://esm.example.org/a.mjs'); // https://example.org", kind="js") == \
        ["https://esm.example.org/a.mjs"]
    with pytest.raises(ValueError, match=r"kind='svg' is not one of \['css', 'html', 'js'\]"):
        remote_references("<svg/>", kind="svg")


def test_an_unclosed_script_is_still_read():
    assert remote_references("<script>fetch('https://api.example.org/late')") == ["https://api.example.org/late"]


def test_broken_json_in_a_data_script_is_read_as_text():
    page = '<script type="application/vnd.jupyter.widget-state+json">{"state": "https:\\/\\/cdn.example.org\\/x.js",</script>'
    assert remote_references(page) == ["https://cdn.example.org/x.js"]


# --------------------------------------------------------------------------------------------
# Images a deck inlines come from the lesson's folder only


@pytest.fixture()
def lesson(tmp_path):
    folder = tmp_path / "course" / "notebooks"
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "ok.png").write_bytes(b"\x89PNG\r\n\x1a\nINSIDE")
    (tmp_path / "course" / "secret.png").write_bytes(b"\x89PNG\r\n\x1a\nOUTSIDE")
    (tmp_path / "elsewhere.png").write_bytes(b"\x89PNG\r\n\x1a\nOUTSIDE")
    (folder / "figures" / "link.png").symlink_to(tmp_path / "elsewhere.png")
    return folder


@pytest.mark.parametrize("ref", [
    "![x]({outside})",                       # an absolute path
    "![x](../secret.png)",                   # up out of the folder
    "![x](figures/../../secret.png)",        # down, then further up
    "![x](figures/link.png)",                # a link inside that points outside
    "![x](file://{outside})",                # a file: URL
    '<img alt="x" src="{outside}">',         # HTML, double quotes
    "<IMG SRC='../secret.png'>",             # HTML, upper case, single quotes
])
def test_images_outside_the_lesson_folder_are_refused(lesson, ref):
    outside = lesson.parent.parent / "elsewhere.png"
    source = "Figure:\n\n" + ref.format(outside=outside)
    with pytest.raises(OutsideLessonError, match=r"the image '.*' is outside the lesson folder .*notebooks: a deck "
                                                 r"inlines only images inside the notebook's folder"):
        _embed_local_images(source, lesson)


def test_images_inside_the_lesson_folder_are_inlined(lesson):
    out = _embed_local_images("![a](figures/ok.png) ![b](figures/../figures/ok.png) "
                              "![c](https://example.org/r.png) ![d](missing.png)", lesson)
    assert out.count("data:image/png;base64,") == 2
    assert "](https://example.org/r.png)" in out and "](missing.png)" in out  # left for the offline check / as is


def test_the_build_refuses_an_outside_image_naming_the_notebook(tmp_path, capsys):
    # The refusal comes before nbconvert runs, so this needs no vendor folder and no npm.
    (tmp_path / "secret.png").write_bytes(b"\x89PNG\r\n\x1a\nOUTSIDE")
    nb = new_notebook(cells=[new_markdown_cell("# 96 · Outside\n\n![s](../secret.png)")])
    nb.cells[0].metadata["slideshow"] = {"slide_type": "slide"}
    (tmp_path / "nbs").mkdir()
    nbformat.write(nb, tmp_path / "nbs" / "96_outside.ipynb")
    with pytest.raises(OutsideLessonError, match=r"^96_outside.ipynb: the image '../secret.png' is outside"):
        slides.build_deck(tmp_path / "nbs" / "96_outside.ipynb", tmp_path / "out", exporter=object())
    assert not (tmp_path / "out").exists()
