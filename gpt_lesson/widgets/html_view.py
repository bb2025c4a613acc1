"""The explorers' self-contained HTML view, for pages that have no widget manager and no kernel.

An explorer displays as a widget (``application/vnd.jupyter.widget-view+json``) and, next to it, as
``text/html``: an ``<iframe srcdoc=...>`` that holds its style sheet, its ES module (the same
deflated data the widget sends), its current controls, label table and payload, and a small script
(``static/html_view.mjs``) with a stand-in for the anywidget model that keeps every change in the
page. JupyterLab, Notebook 7 and VS Code show the live widget (they rank the widget view first);
where no widget manager runs - nbconvert's HTML, the reveal.js decks of ``tools/slides.py``, a live
RISE slideshow - the page shows the HTML view, whose controls, hovers and clicks all work (only a
new text needs the kernel, and the text box says so). The frame is isolated from the page (its own
document, styles and scripts) and sets its own height from the explorer's.

The payload's binary arrays are stored once, deflated (the zeros above the diagonal of causal weights
and the high bytes of int16 numbers shrink), in base64; the rest (traits, labels, style sheet) is
deflated JSON.
"""
from __future__ import annotations

import base64
import html
import json
import re
import zlib
from functools import cache
from pathlib import Path

from ..validation import check_choice

__all__ = ["FRAME_HEIGHTS", "MARKER", "html_view", "read_html_view"]

STATIC = Path(__file__).with_name("static")
MARKER = "data-gpt-lesson-explorer-view"  # the attribute that names the explorer in the <iframe> tag
# The frame's height before its script has measured the explorer (px); then it follows the explorer.
FRAME_HEIGHTS = {"attention": 640, "mask": 600, "scaling": 620}
_DOCUMENT = ('<!DOCTYPE html><html><head><meta charset="utf-8"><style>html,body{{margin:0;padding:0;'
             'overflow:hidden;background:#fff}}</style></head><body><div id="gl-view"></div>'
             '<script type="module">const GL = {{ code: "{code}", meta: "{meta}", data: "{data}" }};\n{boot}'
             '</script></body></html>')
_FRAME = ('<iframe class="gpt-lesson-explorer-view gpt-lesson-{kind}-explorer" {marker}="{kind}" title="{title}" '
          'style="display:block;width:100%;height:{height}px;border:0;margin:0;padding:0;background:#fff" '
          'srcdoc="{srcdoc}"></iframe>')


@cache
def _boot() -> str:
    """The frame's script: ``static/html_view.mjs`` as esbuild bundled it (``js/build.mjs``)."""
    return (STATIC / "html_view.mjs").read_text(encoding="utf-8")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _split_buffers(value: object, buffers: list[bytes]) -> object:
    """``value`` with every bytes value replaced by ``{"$buffer": n}`` and appended to ``buffers``."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        buffers.append(bytes(value))
        return {"$buffer": len(buffers) - 1}
    if isinstance(value, dict):
        return {k: _split_buffers(v, buffers) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_split_buffers(v, buffers) for v in value]
    return value


def html_view(kind: str, state: dict, *, code: str, css: str, title: str) -> str:
    """The ``<iframe>`` of one explorer: ``state`` maps trait names to values (bytes allowed, nested),
    ``code`` is the base64 of the deflated ES module, ``css`` the style sheet, ``title`` the frame's name."""
    check_choice("kind", kind, tuple(FRAME_HEIGHTS))
    buffers: list[bytes] = []
    plain = _split_buffers(state, buffers)
    spans, offset = [], 0
    for b in buffers:
        spans.append([offset, len(b)])
        offset += len(b)
    meta = json.dumps({"kind": kind, "state": plain, "css": css, "buffers": spans}, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False)
    document = _DOCUMENT.format(code=code, meta=_b64(zlib.compress(meta.encode("utf-8"), 9)),
                                data=_b64(zlib.compress(b"".join(buffers), 9)), boot=_boot())
    return _FRAME.format(kind=kind, marker=MARKER, title=html.escape(title), height=FRAME_HEIGHTS[kind],
                         srcdoc=html.escape(document, quote=True))


_SRCDOC = re.compile(r'\bsrcdoc="([^"]*)"')
_FIELD = re.compile(r'\b(code|meta|data): "([A-Za-z0-9+/=]*)"')


def read_html_view(view: str) -> dict:
    """What an HTML view holds: ``kind``, ``state`` (bytes values restored), ``css``, ``code`` (the ES
    module's source) and ``document`` (the frame's document). For tests and tools; raises a ValueError
    for text that is not an explorer's HTML view."""
    kind = re.search(MARKER + r'="(\w+)"', view)
    src = _SRCDOC.search(view)
    if not kind or not src:
        raise ValueError("not an explorer's HTML view: no <iframe " + MARKER + "=... srcdoc=...>")
    document = html.unescape(src.group(1))
    fields = dict(_FIELD.findall(document))
    if set(fields) != {"code", "meta", "data"}:
        raise ValueError(f"the view's document lacks {sorted({'code', 'meta', 'data'} - set(fields))}")
    meta = json.loads(zlib.decompress(base64.b64decode(fields["meta"])))
    data = zlib.decompress(base64.b64decode(fields["data"]))

    def restore(x):
        if isinstance(x, dict):
            if set(x) == {"$buffer"}:
                start, length = meta["buffers"][x["$buffer"]]
                return data[start:start + length]
            return {k: restore(v) for k, v in x.items()}
        if isinstance(x, list):
            return [restore(v) for v in x]
        return x

    return {"kind": kind.group(1), "state": restore(meta["state"]), "css": meta["css"],
            "code": zlib.decompress(base64.b64decode(fields["code"])).decode("utf-8"), "document": document}
