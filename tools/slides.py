"""Offline reveal.js decks from the lesson notebooks, for a lecture hall, and student copies without answers.

Build every deck into ``slides/`` (one ``NN_name.html`` per notebook, an ``index.html``
listing them, and a ``vendor/`` folder with reveal.js, jQuery, require.js, MathJax and the fonts)::

    python -m tools.slides [--out slides/] [--notebooks notebooks/] [--strip-solutions]

The decks are what ``jupyter nbconvert --to slides`` makes from each cell's
``slideshow.slide_type`` (slide / subslide / fragment / skip / notes), with every script,
style sheet, font and image they need stored locally, so they open from a USB stick in a lecture
room with no network. The scripts and fonts come from the npm registry at build time (``npm pack``
of pinned versions whose sha512 is checked); once ``vendor/`` exists, rebuilding needs no network.
The explorers (``gpt_lesson.widgets``) show their self-contained HTML view, which works on the slide
without a kernel; any other widget, which needs one, is replaced by a short note.

In projector mode (key P, on in the lecture cut ``--lecture``) every explorer's frame is zoomed 2.3 times,
so its text is at least 24 px on the projector, the explorer takes its compact layout (class ``gl-compact``
in its frame), which fits one screen, and its canvas draws with the deck's fonts; a clicker's
"next" scrolls a slide taller than the screen before it moves on.

The slides are made for the back row: a 1280x720 slide with body text at 34 px and code at 26 px
(32.7 and 25 px on a 1280x720 projector, after reveal.js's margin), code that wraps instead of
running off the slide (continuation lines hang under the line they continue), the course's test
scaffolding (``assert`` statements and ``NBVAL_*`` markers) left out of the code shown, and
bundled Noto fonts for the Chinese terms, symbols and emoji, so no lab PC shows an empty box.
``python -m tools.slide_metrics slides/`` measures all of that in a browser.

Hand-outs for learners (the same notebooks without any answer: the ``<details>`` blocks whose
summary is a solution, an answer or a model answer; hints stay)::

    python -m tools.slides --student-copies student/
"""
from __future__ import annotations

import argparse
import ast
import base64
import copy
import fnmatch
import hashlib
import html
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import nbformat

from tools.exercises import (
    answer_words,
    defined_names,
    find_exercises,
    solution_code,
    summary_kind,
    summary_text,
    without_magics,
)

__all__ = [
    "VENDOR_PACKAGES",
    "FONT_FAMILIES",
    "SLIDE_WIDTH",
    "SLIDE_HEIGHT",
    "PROJECTOR_ZOOM",
    "strip_scaffolding",
    "VendorError",
    "NotOfflineError",
    "OutsideLessonError",
    "Deck",
    "count_slides",
    "strip_solutions",
    "exercise_names",
    "write_student_copies",
    "find_notebooks",
    "fetch_vendor",
    "build_deck",
    "build_decks",
    "lecture_cut",
    "lecture_minutes",
    "lecture_deck_slides",
    "LECTURE_BUDGET",
    "LECTURE_SECONDS_PER_SLIDE",
    "remote_references",
]

REPO_ROOT = Path(__file__).resolve().parents[1]

# npm packages copied next to the decks: name -> (version, integrity as the registry states it).
# nbconvert's template was written for reveal.js 4.0.2; 4.6.1 is the last 4.x and keeps the same
# UMD files (dist/reveal.js, plugin/notes/notes.js) that the template loads through require.js.
# The fonts (Fontsource's packages of Google's Noto fonts, SIL Open Font License) cover what the
# lessons show: Latin, Greek and math symbols (Noto Sans, Noto Sans Mono, Noto Sans Math), the
# Chinese terms (Noto Sans SC), arrows and technical symbols like U+23CE (Noto Sans Symbols 2), and
# the checks' emoji (Noto Emoji, monochrome). Each comes as unicode-range chunks: a browser loads
# only the chunks a deck uses.
VENDOR_PACKAGES: dict[str, tuple[str, str]] = {
    "reveal.js": ("4.6.1", "sha512-1CW0auaXNPmwmvQ7TwpszwVxMi2Xr5cTS3J3EBC/HHgbPF32Dn7aiu/LKWDOGjMbaDwKQiGmfqcoGQ74HUHCMw=="),
    "jquery": ("3.7.1", "sha512-m4avr8yL8kmFN8psrbFFFmB/If14iN5o9nw/NgnnM+kybDJpRsAynV2BsfpTYrTRysYUdADVD7CkUUizgkpLfg=="),
    "requirejs": ("2.3.7", "sha512-DouTG8T1WanGok6Qjg2SXuCMzszOo0eHeH9hDZ5Y4x8Je+9JB38HdTLT4/VA8OaUhBa0JPVHJ0pyBkM1z+pDsw=="),
    "mathjax": ("2.7.9", "sha512-NOGEDTIM9+MrsqnjPEjVGNx4q0GQxqm61yQwSK+/5S59i26wId5IC5gNu9/bu8+CCVl5p9G2IHcAl/wJa+5+BQ=="),
    "@fontsource/noto-sans": ("5.3.0", "sha512-fBCog2PY7DiVVTEEqtI/Qdinx/knobHYfoGpjFXdfBX5RoJaBp1Prw2G75p0OIsdlMZg3cLo0c+YbIUYOxnQJw=="),
    "@fontsource/noto-sans-mono": ("5.3.0", "sha512-DPZ+/Ng9HP5UKiALCKtoeGfA7zJzEjHFB/18OU/c3+4I9zZ3eMVAuFZb0SqzT89Yj7KNhJFYnYjyDaVKhdRuUg=="),
    "@fontsource/noto-sans-math": ("5.3.0", "sha512-CzodkZ4R2VC73rqbNbVpiI94fXZJLFEMNBTAM3DFadjAKrjLQ2Fr+s2yM2c5uS+frBZ2IM+LyMo6COhAzV7hCA=="),
    "@fontsource/noto-sans-symbols-2": ("5.3.0", "sha512-hFnEnIXOIgLLJ61SO9icRXKoS+LSWoq7ZqKJQ/NaQR7ptdC6+7yW4ci6EuXgsS1S9JmWpciX6w0AFZkU1DKn1A=="),
    "@fontsource/noto-sans-sc": ("5.3.0", "sha512-HeqIlGm0+ohOKxZLuHj1qW6r6avHH0OWdKERAcSDI0RQ+MXrteuLKA+M+5eOA8rYy0MFvOR5AT0fQo2rUkye0Q=="),
    "@fontsource/noto-emoji": ("5.3.2", "sha512-N9CSzXJB04AVWYvFbuBgL2Dq964Zo91th/uOu/QLSuWBYuL9FWXGcEo6ZNwc/IJ7vmpm8KHaIKD7jF8pYm4taw=="),
}

# Which files of each package the decks use (paths inside the tarball's package/ folder; a trailing
# "/" is a folder, "*" a wildcard). MathJax 2 is 73 MB unpacked; the decks need only TeX input and
# CommonHTML output (~6 MB). Of each font only the regular weight (and Noto Sans's bold) in WOFF2.
_VENDOR_FILES: dict[str, list[str]] = {
    "reveal.js": ["LICENSE", "dist/", "plugin/notes/"],
    "jquery": ["LICENSE.txt", "dist/jquery.min.js"],
    "requirejs": ["require.js"],
    "mathjax": [
        "LICENSE", "MathJax.js", "config/TeX-AMS_CHTML-full.js", "config/Safe.js", "extensions/",
        "jax/input/TeX/", "jax/output/CommonHTML/", "jax/output/PreviewHTML/", "jax/element/",
        "fonts/HTML-CSS/TeX/woff/", "fonts/HTML-CSS/TeX/otf/", "localization/en/",
    ],
    "@fontsource/noto-sans": ["LICENSE", "400.css", "700.css", "files/*-400-normal.woff2", "files/*-700-normal.woff2"],
    "@fontsource/noto-sans-mono": ["LICENSE", "400.css", "files/*-400-normal.woff2"],
    "@fontsource/noto-sans-math": ["LICENSE", "400.css", "files/*-400-normal.woff2"],
    "@fontsource/noto-sans-symbols-2": ["LICENSE", "400.css", "files/*-400-normal.woff2"],
    "@fontsource/noto-sans-sc": ["LICENSE", "400.css", "files/*-400-normal.woff2"],
    "@fontsource/noto-emoji": ["LICENSE", "400.css", "files/*-400-normal.woff2"],
}
# The @font-face rules of every font, rewritten to point at the WOFF2 files only, in one style sheet.
_FONTS_CSS = "fonts.css"
_FONT_CSS_FILES = {name: [f for f in files if f.endswith(".css")]
                   for name, files in _VENDOR_FILES.items() if name.startswith("@fontsource/")}
# Font stacks: each character comes from the first family that has it; the bundled families come
# before the generic ones, so what a deck shows does not depend on the fonts of the machine.
_FALLBACK_FAMILIES = '"Noto Sans Math", "Noto Sans Symbols 2", "Noto Emoji", "Noto Sans SC"'
FONT_FAMILIES = {
    "body": f'"Noto Sans", {_FALLBACK_FAMILIES}, sans-serif',
    "code": f'"Noto Sans Mono", {_FALLBACK_FAMILIES}, monospace',
}
# The slide, in CSS pixels: a 16:9 projector at 1280x720 shows it at reveal.js's scale (0.96, its
# default 4% margin), so 34 px body text is 32.7 px there and 26 px code is 25 px.
SLIDE_WIDTH, SLIDE_HEIGHT = 1280, 720
_BODY_PX, _CODE_PX = 34, 26
# Projector mode (key P; on in the lecture cut) zooms each explorer's frame so that the explorer's smallest
# text, 11 px, is 24.3 px on a 1280x720 screen (11 * 2.3 * reveal.js's 0.96).
PROJECTOR_ZOOM = 2.3

# Where the decks find them, relative to the deck's own folder.
_REVEAL_PREFIX = "vendor/reveal.js"
_JQUERY_URL = "vendor/jquery/dist/jquery.min.js"
_REQUIRE_URL = "vendor/requirejs/require.js"
_MATHJAX_URL = "vendor/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe"

# "white" loads its fonts from vendor/reveal.js/dist/theme/fonts; nbconvert's default "simple"
# (and most other themes) @import Google Fonts, which fails offline.
_REVEAL_THEME = "white"
_STAMP = "VERSIONS.json"
_SLIDE_TYPES = ("slide", "subslide", "fragment", "skip", "notes", "-")

# nbconvert's reveal template imports mermaid from a CDN as an ES module on every deck; the
# course has no mermaid diagrams, so this template drops that block. It also keeps the headings as
# written (the "white" theme upper-cases them), sets the sizes and fonts for a lecture hall, wraps
# code, hides the input of a code cell that only held test scaffolding, and lets a slide taller
# than the screen scroll (nbconvert's own handler only looks at subslides).
_TEMPLATE_NAME = "gpt_lesson_reveal"
_TEMPLATE_CONF = {"base_template": "reveal", "mimetypes": {"text/html": True}}
_HIDE_INPUT = "gpt_lesson_hide_input"  # cell metadata key set by the deck builder
# The theme's style sheet comes after this block in the page: "html body" outranks its rules.
_TEMPLATE_CSS = """
:root {
  --jp-content-font-size1: %(body)spx;
  --jp-ui-font-size1: %(body)spx;
  --jp-code-font-size: %(code)spx;
  --jp-content-font-family: %(body_font)s;
  --jp-ui-font-family: %(body_font)s;
  --jp-code-font-family: %(code_font)s;
}
html body .reveal { font-family: %(body_font)s; font-size: %(body)spx; }
html body .reveal .slides section h1, html body .reveal .slides section h2,
html body .reveal .slides section h3, html body .reveal .slides section h4 {
  font-family: %(body_font)s; text-transform: none; line-height: 1.2; margin: 0 0 0.4em 0; }
html body .reveal .slides section h1 { font-size: 1.6em; }
html body .reveal .slides section h2 { font-size: 1.35em; }
html body .reveal .slides section h3 { font-size: 1.15em; }
html body .reveal .slides section h4 { font-size: 1em; }
html body .reveal .jp-RenderedHTMLCommon, html body .reveal .jp-RenderedHTMLCommon p,
html body .reveal .jp-RenderedHTMLCommon li, html body .reveal .jp-RenderedHTMLCommon table,
html body .reveal .jp-RenderedHTMLCommon th, html body .reveal .jp-RenderedHTMLCommon td,
html body .reveal .jp-RenderedHTMLCommon summary, html body .reveal .jp-RenderedHTMLCommon blockquote,
html body .reveal table { font-size: %(body)spx; line-height: 1.3; }
html body .reveal .jp-RenderedHTMLCommon td, html body .reveal .jp-RenderedHTMLCommon th {
  padding: 0.15em 0.4em; }
html body .reveal .jp-RenderedHTMLCommon code { font-family: %(code_font)s; font-size: 0.8em; }
html body .reveal pre, html body .reveal .jp-RenderedHTMLCommon pre, html body .reveal div.highlight > pre,
html body .reveal div.jp-OutputArea-output > pre {
  font-family: %(code_font)s; font-size: %(code)spx; line-height: 1.3; width: 100%%; box-sizing: border-box;
  margin: 0; white-space: pre-wrap; overflow-wrap: break-word; word-break: normal; overflow-x: hidden; }
html body .reveal pre code, html body .reveal .jp-RenderedHTMLCommon pre code { font-size: inherit; }
/* One block per source line: a wrapped line's continuation hangs 4 characters under its start. */
html body .reveal pre .gl-line { display: block; min-height: 1.3em; }
html body .reveal pre .gl-nb { white-space: nowrap; }
html body .reveal .jp-InputPrompt, html body .reveal .jp-OutputPrompt { display: none; }
html body .reveal img { max-width: 100%%; }
"""
_TEMPLATE_INDEX = """{%%- extends 'reveal/index.html.j2' -%%}
{%%- block html_head_js_mermaidjs -%%}{%%- endblock html_head_js_mermaidjs -%%}
{%%- block html_head_css -%%}
<link rel="stylesheet" href="vendor/%(fonts_css)s">
<style type="text/css">%(css)s%(lecture_css)s</style>
{%%- endblock html_head_css -%%}
{%%- block input_group -%%}
{%%- if not cell.metadata.get('%(hide)s') -%%}{{ super() }}{%%- endif -%%}
{%%- endblock input_group -%%}
{%%- block footer_js -%%}
{{ super() }}
<script>
require(["%(reveal)s/dist/reveal.js"], function (Reveal) {
  // Right arrow, space and a clicker's Page Down visit every slide, the vertical subslides included.
  Reveal.configure({navigationMode: "linear"});
  // Projector mode (key P, on by default in the lecture cut): each explorer's frame is zoomed
  // PROJECTOR_ZOOM times, so its smallest text (11 px in the explorer) is 24 px on a 1280x720 screen;
  // the frame lays the explorer out in 1/PROJECTOR_ZOOM of the width and tells it the slide's height
  // in its own pixels. Chromium renders a zoomed frame at a higher pixel ratio: the canvas stays sharp.
  var PROJECTOR_ZOOM = %(projector_zoom)s;
  var projector = %(projector_on)s;
  // An explorer is a frame: a click in it takes the keyboard focus away from the deck. Its buttons,
  // sliders and canvas give the keys back (Page Up/Down, arrows, space, Esc, S, B, P); only its text box
  // keeps them (Esc leaves it). The frame also gets the deck's fonts, for its Chinese labels, and so does
  // the text it draws on its canvas.
  var KEYS = {PageDown: "next", PageUp: "prev", ArrowRight: "next", ArrowLeft: "prev", " ": "next",
              ArrowDown: "next", ArrowUp: "prev", Escape: "toggleOverview", b: "togglePause", ".": "togglePause"};
  var BODY_FONT = "%(body_font_js)s", CODE_FONT = "%(code_font_js)s";
  function typing(el) {
    return el && (el.tagName === "TEXTAREA" || el.tagName === "SELECT" || el.isContentEditable ||
                  (el.tagName === "INPUT" && !/^(range|button|radio|checkbox|submit)$/i.test(el.type)));
  }
  // A clicker has only "next" and "back": on a slide taller than the screen they scroll it first
  // (by 80 %% of the screen), and move on only at its end.
  var arrivedBack = false;
  function step(dir) {
    var slide = Reveal.getCurrentSlide();
    if (slide && !Reveal.isOverview() && slide.scrollHeight > slide.clientHeight + 1) {
      var room = slide.scrollHeight - slide.clientHeight, by = Math.round(slide.clientHeight * 0.8);
      if (dir > 0 && slide.scrollTop < room - 1) { slide.scrollTop = Math.min(room, slide.scrollTop + by); return; }
      if (dir < 0 && slide.scrollTop > 1) { slide.scrollTop = Math.max(0, slide.scrollTop - by); return; }
    }
    arrivedBack = dir < 0;
    if (dir > 0) { Reveal.next(); } else { Reveal.prev(); }
  }
  var STEP = {PageDown: 1, ArrowRight: 1, ArrowDown: 1, " ": 1, PageUp: -1, ArrowLeft: -1, ArrowUp: -1};
  function stepKey(event) {
    var dir = STEP[event.key];
    if (event.key === " " && event.shiftKey) { dir = -1; }
    else if (event.shiftKey) { return 0; }
    return (dir && !event.altKey && !event.ctrlKey && !event.metaKey && !typing(event.target)) ? dir : 0;
  }
  // Before reveal.js's own handler (on the document): the window's capture phase.
  window.addEventListener("keydown", function (event) {
    var dir = stepKey(event);
    if (!dir || Reveal.isOverview() || Reveal.isPaused()) { return; }
    event.preventDefault();
    event.stopImmediatePropagation();
    step(dir);
  }, true);
  // Canvas text in the deck's fonts: "11px system-ui, sans-serif" becomes "11px <the deck's stack>" (the
  // monospace stack for a monospace font), and the faces a text needs are loaded, then the explorer redraws.
  function deckFont(value) {
    var m = /^(.*?\\d*\\.?\\d+px(?:\\/\\S+)?\\s+)(.+)$/.exec(value || "");
    if (!m || m[2].indexOf("Noto Sans") >= 0) { return value; }
    return m[1] + (/monospace/.test(m[2]) ? CODE_FONT : BODY_FONT);
  }
  function canvasFonts(win) {
    var proto = win.CanvasRenderingContext2D && win.CanvasRenderingContext2D.prototype;
    if (!proto || proto.glDeckFonts) { return; }
    proto.glDeckFonts = true;
    var font = Object.getOwnPropertyDescriptor(proto, "font");
    Object.defineProperty(proto, "font", {configurable: true, enumerable: font.enumerable, get: font.get,
      set: function (value) { font.set.call(this, deckFont(value)); }});
    var seen = new Set(), loaded = new Set(), pending = 0;
    function redraw() { if (!pending) { pending = win.requestAnimationFrame(function () { pending = 0;
      win.dispatchEvent(new win.Event("resize")); }); } }
    win.glDeckRedraw = redraw;
    ["fillText", "strokeText"].forEach(function (name) {
      var draw = proto[name];
      proto[name] = function (text) {
        var key = this.font + "\\n" + text;
        if (!seen.has(key) && win.document.fonts) {
          seen.add(key);
          win.document.fonts.load(this.font, String(text)).then(function (faces) {
            var fresh = faces.filter(function (f) { return !loaded.has(f); });
            faces.forEach(function (f) { loaded.add(f); });
            if (fresh.length) { redraw(); }
          }, function () {});
        }
        return draw.apply(this, arguments);
      };
    });
  }
  function zoomOf(frame) { return parseFloat(frame.style.zoom) || 1; }
  // In projector mode the explorer inside the frame takes its compact layout (class gl-compact on the
  // frame's document: controls and read-outs packed around the pictures, so it fits one screen).
  function compactFrame(frame) {
    var doc;
    try { doc = frame.contentDocument; } catch (e) { return; }
    if (!doc || !doc.documentElement) { return; }
    doc.documentElement.classList.toggle("gl-compact", projector);
    if (doc.defaultView) { doc.defaultView.dispatchEvent(new doc.defaultView.Event("resize")); }
  }
  function hookFrame(frame) {
    var doc;
    try { doc = frame.contentDocument; } catch (e) { return; }
    // Only a loaded frame: its own script defines window.glViewHeight, replaced below.
    if (!doc || !doc.documentElement || doc.readyState !== "complete" || doc.documentElement.dataset.glDeckKeys) { return; }
    doc.documentElement.dataset.glDeckKeys = "1";
    var win = doc.defaultView;
    var fonts = doc.createElement("link");
    fonts.rel = "stylesheet";
    fonts.href = new URL("vendor/%(fonts_css)s", document.baseURI).href;
    var stack = doc.createElement("style");
    // The explorer adds its own style sheet when its script runs, which may be after this one: the
    // selectors are more specific than the explorer's, so the deck's fonts win in either order.
    stack.textContent = "html body .gl-explorer { font-family: %(body_font_js)s, system-ui, sans-serif; }" +
      " html body .gl-explorer .gl-strip, html body .gl-explorer textarea { font-family: %(code_font_js)s; }";
    canvasFonts(win);
    fonts.addEventListener("load", function () { if (win.glDeckRedraw) { win.glDeckRedraw(); } });
    (doc.head || doc.documentElement).append(fonts, stack);
    // The explorer sizes its pictures to the slide's height, in the frame's own (zoomed) pixels.
    win.glViewHeight = function () {
      var slides = frame.closest(".reveal .slides");
      return ((slides && slides.offsetHeight) || window.innerHeight) / zoomOf(frame);
    };
    doc.addEventListener("keydown", function (event) {
      var action = KEYS[event.key];
      if (event.key === "Escape" && typing(event.target)) { event.target.blur(); window.focus(); return; }
      if (event.key === "s" && !typing(event.target)) { action = null; window.focus();
        var notes = Reveal.getPlugin && Reveal.getPlugin("notes"); if (notes) { notes.open(); } }
      if ((event.key === "p" || event.key === "P") && !typing(event.target) && !event.ctrlKey && !event.metaKey) {
        event.preventDefault(); window.focus(); setProjector(!projector); return; }
      if (!action || typing(event.target) || event.altKey || event.ctrlKey || event.metaKey) { return; }
      if (event.target.type === "range" && /^Arrow/.test(event.key)) { return; }
      event.preventDefault();
      window.focus();
      if (action === "next" || action === "prev") { step(action === "next" ? 1 : -1); } else { Reveal[action](); }
    }, true);
    // After a click on a control the focus goes back to the deck (a slider keeps it while dragged).
    doc.addEventListener("pointerup", function (event) {
      if (!typing(event.target)) { setTimeout(function () { window.focus(); }, 0); }
    }, true);
    compactFrame(frame);
  }
  function explorerFrames() { return document.querySelectorAll(".reveal iframe.gpt-lesson-explorer-view"); }
  function setProjector(on) {
    projector = !!on;
    document.documentElement.dataset.glProjector = projector ? "on" : "off";
    explorerFrames().forEach(function (frame) { frame.style.zoom = projector ? String(PROJECTOR_ZOOM) : ""; compactFrame(frame); });
    // The frames lay the explorers out again (their width changed); then the slide may need to scroll.
    setTimeout(fit, 300);
    return projector;
  }
  // For the measurements (tools.slide_metrics --projector) and the tests.
  window.glDeck = {projector: function (on) { return on === undefined ? projector : setProjector(on); },
                   zoom: PROJECTOR_ZOOM};
  function hookFrames() {
    document.querySelectorAll(".reveal iframe").forEach(function (frame) {
      hookFrame(frame);
      frame.addEventListener("load", function () { hookFrame(frame); });
    });
  }
  setProjector(projector);
  hookFrames();
  Reveal.on("ready", hookFrames);
  Reveal.on("slidechanged", function () { if (document.activeElement && document.activeElement.tagName === "IFRAME") { document.activeElement.blur(); } window.focus(); });
  function fit() {
    var slide = Reveal.getCurrentSlide();
    var height = Reveal.getConfig().height;
    if (slide && slide.scrollHeight > height + 1) {
      slide.style.height = height + "px";
      slide.style.overflowY = "auto";
    }
  }
  // Methods other than configure and on exist once nbconvert's script has initialised the deck.
  function ready() {
    Reveal.addKeyBinding({keyCode: 80, key: "P", description: "Projector mode: explorers enlarged (on/off)"},
                         function () { setProjector(!projector); });
    fit();
  }
  if (typeof Reveal.isReady === "function" && Reveal.isReady()) { ready(); } else { Reveal.on("ready", ready); }
  Reveal.on("slidechanged", function () {
    fit();
    // Back from the next slide: this one shows its end, as it was left.
    var slide = Reveal.getCurrentSlide();
    if (slide) { slide.scrollTop = arrivedBack ? slide.scrollHeight : 0; }
    arrivedBack = false;
  });
});
</script>
{%%- endblock footer_js -%%}
"""

# A <details> block holds an answer when its summary names one (the solutions of the exercises, lesson
# 11's model answers and self-quiz answers, in any language and whatever decorates the title:
# tools.exercises.summary_kind), or when its role says so: it defines in code what an exercise asks the
# learner to write. Hints and teaching notes are not answers.
_DETAILS_TAG_RE = re.compile(r"<details\b[^>]*>|</details\s*>", re.IGNORECASE)
_SUMMARY_RE = re.compile(r"^<details\b[^>]*>\s*<summary\b[^>]*>(.*?)</summary>", re.IGNORECASE | re.DOTALL)
_ANSWER_NOTE = "*({kind} removed from this copy: it is in the teacher's version.)*"
_BADGE_RE = re.compile(r"\[!\[([^\]]*)\]\((?:https?:)?//[^)]*\)\]\(([^)]*)\)")
_WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
_WIDGET_NOTE = (
    '<p style="font-style: italic; color: #555;">[Live widget: open this notebook in JupyterLab '
    "and present it with RISE (Alt+R) to use it.]</p>"
)


class VendorError(RuntimeError):
    """npm is missing or the registry did not deliver the pinned packages."""


class NotOfflineError(RuntimeError):
    """A deck would load something from the network (a remote image in a lesson, a CDN script)."""


class OutsideLessonError(ValueError):
    """A lesson names an image outside its own folder (an absolute path, ``../../x.png``)."""


@dataclass
class Deck:
    """One built deck: where it came from, where it is, and how many slides it has."""

    notebook: Path
    html: Path
    title: str
    horizontal: int  # top-level slides (slide_type "slide"), Reveal.getHorizontalSlides().length
    total: int  # every slide and subslide, Reveal.getTotalSlides()


def _slide_type(cell: dict) -> str:
    slideshow = cell.get("metadata", {}).get("slideshow", {})
    return slideshow.get("slide_type", "-") if isinstance(slideshow, dict) else "-"


def count_slides(nb: dict) -> tuple[int, int]:
    """(top-level slides, all slides and subslides) that nbconvert makes from ``nb``.

    Same grouping as nbconvert's reveal preprocessor: the first cell that is neither
    "skip" nor "notes" opens the first slide; after it every "slide" cell opens a new
    top-level slide and every "slide" or "subslide" cell a new (vertical) subslide.
    """
    types = [_slide_type(c) for c in nb["cells"]]
    for bad in sorted({t for t in types if t not in _SLIDE_TYPES}):
        raise ValueError(f"slide_type={bad!r} is not one of {_SLIDE_TYPES}")
    first = next((i for i, t in enumerate(types) if t not in ("skip", "notes")), None)
    if first is None:
        raise ValueError("every cell is 'skip' or 'notes': the notebook has no slide to show")
    rest = types[first + 1:]
    return 1 + rest.count("slide"), 1 + rest.count("slide") + rest.count("subslide")


def _details_blocks(source: str) -> list[tuple[int, int]]:
    """(start, end) of each outermost ``<details>...</details>`` block in a markdown text."""
    blocks, depth, start = [], 0, 0
    for m in _DETAILS_TAG_RE.finditer(source):
        if not m.group(0).startswith("</"):
            if depth == 0:
                start = m.start()
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                blocks.append((start, m.end()))
    return blocks


def answer_kind(block: str, exercise_names: frozenset[str] | set[str] = frozenset()) -> str | None:
    """"Solution", "Model answer", "Answer", "参考答案"... when a ``<details>`` block holds an answer, else None.

    By its summary: any title that names an answer ("💡 Solution", "Worked solution", "Show the answer",
    "参考答案（中文）"), not a hint or a teaching note, not a question. By its role: a block (other than a hint
    or a teaching note) whose code defines one of ``exercise_names``, the functions and classes the
    notebook's exercises ask for, is a "Solution" whatever its title.
    """
    m = _SUMMARY_RE.match(block)
    if not m:
        return None
    kind = summary_kind(m.group(1))
    if kind == "answer":  # the title up to a bracket or colon, or else the words that name the answer
        text = re.split(r"\s*[(（:：]", summary_text(m.group(1)), maxsplit=1)[0].strip()
        if summary_kind(text) != "answer":
            text = answer_words(m.group(1))
        return text[:1].upper() + text[1:]
    if kind is None and exercise_names and defined_names(solution_code(block[m.end():])) & set(exercise_names):
        return "Solution"
    return None


def exercise_names(nb: dict) -> frozenset[str]:
    """What the notebook's exercises ask the learner to write: the names their stub cells define."""
    book = nbformat.from_dict(copy.deepcopy(nb)) if not isinstance(nb, nbformat.NotebookNode) else nb
    try:
        exercises = find_exercises(book)
    except (AttributeError, KeyError, TypeError):  # not a lesson-shaped notebook
        return frozenset()
    return frozenset(name for ex in exercises for i in ex.stub_cells
                     for name in defined_names(book.cells[i].source if isinstance(book.cells[i].source, str)
                                               else "".join(book.cells[i].source)))


def strip_solutions(nb: dict, note: str = _ANSWER_NOTE,
                    names: frozenset[str] | set[str] | None = None) -> tuple[dict, int]:
    """A copy of ``nb`` in which every answer block is replaced by ``note``.

    Answer blocks are the ``<details>`` blocks :func:`answer_kind` finds: by their summary (Solution,
    Answer, Model answer, 参考答案/答案, however decorated) or by their role (code that defines what an
    exercise asks for); ``{kind}`` in ``note`` is replaced by that word. Other ``<details>`` blocks
    (hints, teaching notes) stay. ``names`` (default: what ``nb``'s own exercises define, :func:`exercise_names`) are
    the names whose definition marks a block as an answer. Returns ``(copy, blocks removed)``.
    """
    out = copy.deepcopy(nb)
    names = exercise_names(out) if names is None else frozenset(names)
    removed = 0
    for cell in out["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        for start, end in reversed(_details_blocks(source)):
            kind = answer_kind(source[start:end], names)
            if kind is not None:
                source = source[:start] + note.replace("{kind}", kind) + source[end:]
                removed += 1
        cell["source"] = source
    return out, removed


_NBVAL_LINE_RE = re.compile(r"^\s*#\s*NBVAL_[A-Z_]+\s*$")
_COMMENT_LINE_RE = re.compile(r"^\s*#")


def _assert_only(stmts: list[ast.stmt]) -> bool:
    return all(isinstance(s, ast.Assert) or (_bodies(s) and all(_assert_only(b) for b in _bodies(s)))
               for s in stmts)


def _bodies(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists inside a compound statement (not inside function or class definitions)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    lists = [getattr(stmt, name) for name in ("body", "orelse", "finalbody") if getattr(stmt, name, None)]
    lists += [h.body for h in getattr(stmt, "handlers", [])]
    return lists


def _scaffolding_lines(stmts: list[ast.stmt]) -> list[tuple[int, int]]:
    """1-based (first, last) lines of the assert statements among ``stmts`` and their compound statements,
    a compound statement as a whole when it holds only asserts."""
    spans = []
    for s in stmts:
        if isinstance(s, ast.Assert) or (_bodies(s) and _assert_only([s])):
            spans.append((s.lineno, s.end_lineno or s.lineno))
        else:
            for body in _bodies(s):
                spans += _scaffolding_lines(body)
    return spans


def strip_scaffolding(source: str) -> str:
    """Code as a slide shows it: without ``# NBVAL_*`` marker lines and without the ``assert`` statements
    that guard the course (and the comment lines right above them).

    Asserts inside function and class definitions are part of the code and stay; a loop or ``with``
    block that holds only asserts goes as a whole. Code that does not parse keeps its asserts.
    """
    lines = source.split("\n")
    drop = {i for i, line in enumerate(lines) if _NBVAL_LINE_RE.match(line)}
    try:
        tree = ast.parse(without_magics(source))
    except SyntaxError:
        tree = None
    if tree is not None:
        for first, last in _scaffolding_lines(tree.body):
            drop.update(range(first - 1, last))
            above = first - 2
            while above >= 0 and _COMMENT_LINE_RE.match(lines[above]):
                drop.add(above)
                above -= 1
    kept = [line for i, line in enumerate(lines) if i not in drop]
    text = re.sub(r"\n{4,}", "\n\n\n", "\n".join(kept))  # at most two blank lines in a row, as PEP 8
    return text.strip("\n")


def find_notebooks(notebooks_dir: str | os.PathLike) -> list[Path]:
    """The lesson notebooks in ``notebooks_dir`` (``*.ipynb``, sorted, checkpoints excluded)."""
    folder = Path(notebooks_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"notebooks folder {folder} does not exist")
    return sorted(p for p in folder.glob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def select_notebooks(parser: argparse.ArgumentParser, notebooks: list[Path], only: list[str] | None) -> list[Path]:
    """The notebooks a command's ``--only NAME ...`` names (file names or stems); all when it is not given.
    A name that is not among ``notebooks`` is a usage error of ``parser``."""
    if not only:
        return notebooks
    wanted = {Path(n).stem for n in only}
    missing = wanted - {p.stem for p in notebooks}
    if missing:
        folder = notebooks[0].parent if notebooks else "the notebooks folder"
        parser.error(f"--only names notebooks that are not in {folder}: {sorted(missing)}")
    return [p for p in notebooks if p.stem in wanted]


def write_student_copies(notebooks: list[Path], out_dir: str | os.PathLike) -> list[tuple[Path, int]]:
    """Write each notebook without its answer blocks and speaker notes to ``out_dir``.

    The code stays as it is (with its asserts): a hand-out is a notebook to run. Returns
    (path, answer blocks removed) per notebook.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in notebooks:
        stripped, n = strip_solutions(nbformat.read(path, as_version=4))
        # Speaker notes often give away the answers too: hand-outs leave them out.
        stripped["cells"] = [c for c in stripped["cells"] if _slide_type(c) != "notes"]
        dest = out / path.name
        if dest.resolve() == path.resolve():
            raise ValueError(f"student copy {dest} would overwrite the teacher's notebook {path}")
        nbformat.write(nbformat.from_dict(stripped), dest)
        written.append((dest, n))
    return written


# ---------------------------------------------------------------------------------------------
# Vendor files from npm


def _integrity(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def _npm_pack(specs: list[str], dest: Path, timeout: float) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise VendorError(
            "npm was not found on PATH. The offline decks copy reveal.js, jQuery, require.js, "
            "MathJax and their fonts from the npm registry at build time: install Node.js and npm "
            "(Debian/Ubuntu: apt-get install -y npm) and run the build again with network access once."
        )
    cmd = [npm, "pack", "--prefer-offline", "--pack-destination", str(dest), *specs]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=dest)
    except subprocess.TimeoutExpired:
        raise VendorError(
            f"`{' '.join(cmd)}` did not finish within {timeout:.0f} s: is the npm registry reachable?"
        ) from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-12:])
        raise VendorError(
            f"`npm pack {' '.join(specs)}` failed (exit code {proc.returncode}), so the decks cannot "
            "get reveal.js and the other scripts they need offline. Check that the npm registry "
            f"({os.environ.get('npm_config_registry', 'https://registry.npmjs.org/')}) is reachable. "
            f"npm said:\n{tail}"
        )


def _wanted(rel: str, wanted: list[str]) -> bool:
    return any(rel == w or (w.endswith("/") and rel.startswith(w)) or ("*" in w and fnmatch.fnmatchcase(rel, w))
               for w in wanted)


def _copy_from_tarball(tarball: Path, wanted: list[str], dest: Path) -> int:
    """Extract the ``wanted`` files, folders (trailing "/") and patterns ("*") of an npm tarball into ``dest``."""
    copied = 0
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            rel = member.name.split("/", 1)[1] if "/" in member.name else member.name
            if not _wanted(rel, wanted):
                continue
            target = (dest / rel).resolve()
            if dest.resolve() not in target.parents:
                raise VendorError(f"{tarball.name} holds a path outside its package: {member.name}")
            target.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(member) as src, open(target, "wb") as out:  # type: ignore[union-attr]
                shutil.copyfileobj(src, out)
            copied += 1
    for w in wanted:
        found = any(dest.glob(w)) if "*" in w else (dest / w).exists()
        if not found:
            raise VendorError(f"{tarball.name} has no {w!r}; the pinned version may have changed layout")
    return copied


_FONT_FACE_RE = re.compile(r"@font-face\s*\{[^}]*\}", re.S)
_FONT_SRC_RE = re.compile(r"src:\s*url\(\./(files/[^)]+\.woff2)\)\s*format\('woff2'\)[^;]*;")


def _write_fonts_css(vendor: Path) -> int:
    """Gather the @font-face rules of the font packages in ``vendor/fonts.css``, each pointing at its
    WOFF2 file only (the packages also list WOFF files, which the decks do not ship)."""
    rules = []
    for name, sheets in _FONT_CSS_FILES.items():
        for sheet in sheets:
            for rule in _FONT_FACE_RE.findall((vendor / name / sheet).read_text(encoding="utf-8")):
                m = _FONT_SRC_RE.search(rule)
                if m is None or not (vendor / name / m.group(1)).is_file():
                    raise VendorError(f"{name}/{sheet}: a @font-face rule without its WOFF2 file: {rule[:200]}")
                rules.append(_FONT_SRC_RE.sub(f"src: url({name}/{m.group(1)}) format('woff2');", rule))
    (vendor / _FONTS_CSS).write_text(
        "/* Made by tools/slides.py from the @fontsource packages' style sheets (SIL Open Font License). */\n"
        + "\n".join(rules) + "\n", encoding="utf-8")
    return len(rules)


def fetch_vendor(vendor_dir: str | os.PathLike, timeout: float = 300.0) -> Path:
    """Put the pinned reveal.js, jQuery, require.js, MathJax and fonts into ``vendor_dir``.

    Reuses ``vendor_dir`` when its ``VERSIONS.json`` matches :data:`VENDOR_PACKAGES` (no
    network needed then). Otherwise runs ``npm pack`` (npm's cache first, then the registry),
    checks each tarball's sha512 against the pin, copies the files the decks load and writes
    ``fonts.css``.
    Raises :class:`VendorError` with the reason when npm is missing or the registry fails.
    """
    vendor = Path(vendor_dir)
    stamp = vendor / _STAMP
    pins = {name: version for name, (version, _) in VENDOR_PACKAGES.items()}
    if stamp.is_file() and json.loads(stamp.read_text()) == pins:
        return vendor
    with tempfile.TemporaryDirectory(prefix="gpt_lesson_npm_") as tmp:
        tmp_dir = Path(tmp)
        _npm_pack([f"{name}@{version}" for name, version in pins.items()], tmp_dir, timeout)
        staging = tmp_dir / "vendor"
        for name, (version, integrity) in VENDOR_PACKAGES.items():
            tarball = tmp_dir / f"{name.replace('@', '').replace('/', '-')}-{version}.tgz"
            if not tarball.is_file():
                raise VendorError(f"npm pack did not write {tarball.name}")
            got = _integrity(tarball)
            if got != integrity:
                raise VendorError(f"{tarball.name} has integrity {got}, expected the pinned {integrity}")
            _copy_from_tarball(tarball, _VENDOR_FILES[name], staging / name)
        _write_fonts_css(staging)
        (staging / _STAMP).write_text(json.dumps(pins, indent=2) + "\n")
        if vendor.exists():
            shutil.rmtree(vendor)
        vendor.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging, vendor)
    return vendor



# ---------------------------------------------------------------------------------------------
# Decks


_MD_IMAGE_RE = re.compile(r"(!\[[^\]]*\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
_HTML_IMAGE_RE = re.compile(r"(<img\b[^>]*?\bsrc\s*=\s*[\"'])([^\"']+)([\"'])", re.I)
_IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
                ".svg": "image/svg+xml", ".webp": "image/webp"}


def _embed_local_images(source: str, base_dir: Path) -> str:
    """Replace references to image files next to the notebook by ``data:`` URLs.

    Only files inside ``base_dir`` (the notebook's folder) are inlined: an image named by an
    absolute path, a ``file:`` URL or a relative path that leads out of the folder (``../../x.png``,
    or a link to a file elsewhere) raises :class:`OutsideLessonError`, since the deck would carry a
    file from wherever the build runs. (nbconvert's own ``embed_images`` option also re-nests
    ``<details>`` blocks and shows the solutions open, so the decks do this themselves.)
    """
    folder = base_dir.resolve()

    def repl(m: re.Match) -> str:
        src = m.group(2)
        if src.lower().startswith("file:") or (
                "://" not in src and not src.startswith(("data:", "attachment:"))
                and not (folder / src).resolve().is_relative_to(folder)):
            raise OutsideLessonError(
                f"the image {src!r} is outside the lesson folder {folder}: a deck inlines only images inside "
                "the notebook's folder, linked relatively (e.g. figures/x.png); copy the file there")
        path = base_dir / src
        kind = _IMAGE_TYPES.get(path.suffix.lower())
        if "://" in src or src.startswith(("data:", "attachment:")) or kind is None or not path.is_file():
            return m.group(0)
        data = base64.b64encode(path.read_bytes()).decode()
        return f"{m.group(1)}data:{kind};base64,{data}{m.group(3)}"

    return _HTML_IMAGE_RE.sub(repl, _MD_IMAGE_RE.sub(repl, source))


def _deck_notebook(nb: dict, solutions: bool, base_dir: Path) -> dict:
    """The notebook as the deck shows it: local images inlined, badges as text links, widgets as
    their own HTML view when they have one (the explorers: it works in the deck, offline, with no
    kernel) and else as a short note, code without the course's test scaffolding (a cell left with
    no code shows only its output), and optionally no answers and no speaker notes (student decks)."""
    nb, _ = (copy.deepcopy(nb), 0) if solutions else strip_solutions(nb)
    if not solutions:
        # Speaker notes often give the answers away (the speaker view shows them): not in student decks.
        nb["cells"] = [c for c in nb["cells"] if _slide_type(c) != "notes"]
    nb["metadata"].pop("widgets", None)  # saved widget state would load the renderer from a CDN
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            # Badge images come from colab.research.google.com / mybinder.org: offline they would
            # show as broken images on the title slide, so the deck keeps the links as text.
            cell["source"] = _embed_local_images(_BADGE_RE.sub(r"[\1](\2)", cell["source"]), base_dir)
        elif cell["cell_type"] == "code":
            cell["source"] = strip_scaffolding(cell["source"])
            if not cell["source"].strip():
                cell["metadata"][_HIDE_INPUT] = True
            for i, out in enumerate(cell.get("outputs", [])):
                data = out.get("data", {})
                if _WIDGET_MIME not in data:
                    continue
                if "text/html" in data:  # the widget's self-contained HTML view: only the widget part goes
                    out["data"] = {mime: value for mime, value in data.items() if mime != _WIDGET_MIME}
                else:  # a widget that needs a kernel and a widget manager
                    cell["outputs"][i] = nbformat.v4.new_output(
                        "display_data", data={"text/html": _WIDGET_NOTE, "text/plain": "[live widget]"}
                    )
    return nb


_PRE_RE = re.compile(r"(<pre\b[^>]*>)(.*?)(</pre>)", re.S)
# Spaces right before a closing quote (a string that ends in a space: "loss: ", ...) are no place to
# wrap: the quote would stand alone on the next row.
_NOWRAP_QUOTE_RE = re.compile(r"( +)(&quot;|&#34;|&#39;|&#x27;|\"|')(?=[)\],}:;]|&quot;|&#39;|$|\s)")
_TAG_RE = re.compile(r"(<[^>]+>)")
_TAG_NAME_RE = re.compile(r"<(\w+)")


def _line_blocks(inner: str) -> str:
    """The inside of a ``<pre>`` with each source line in its own ``<span class="gl-line">``, whose
    wrapped continuation hangs 4 characters deeper than the line's own indentation (of at most 24).

    Highlighting spans that cross a line end (a multi-line string) are closed at the end of the line
    and opened again on the next, so the HTML stays well nested.
    """
    lines: list[list[str]] = [[]]
    open_tags: list[str] = []
    for part in _TAG_RE.split(inner):
        if not part:
            continue
        if part.startswith("<"):
            if part.startswith("</"):
                if open_tags:
                    open_tags.pop()
            elif not part.endswith("/>"):
                open_tags.append(part)
            lines[-1].append(part)
            continue
        for j, piece in enumerate(part.split("\n")):
            if j:
                lines[-1] += ["</" + _TAG_NAME_RE.match(t).group(1) + ">" for t in reversed(open_tags)]
                lines.append(list(open_tags))
            if piece:
                lines[-1].append(_NOWRAP_QUOTE_RE.sub(r'<span class="gl-nb">\1\2</span>', piece))
    if lines and not re.sub(r"<[^>]+>", "", "".join(lines[-1])):
        lines.pop()  # the newline before </pre>
    out = []
    for line in lines:
        text = html.unescape(re.sub(r"<[^>]+>", "", "".join(line)))
        hang = min(len(text) - len(text.lstrip(" ")), 24) + 4  # a deep indent still leaves 40+ characters a row
        out.append(f'<span class="gl-line" style="padding-left:{hang}ch;text-indent:-{hang}ch">{"".join(line)}</span>')
    return "".join(out)


def _wrap_code_lines(page: str) -> str:
    return _PRE_RE.sub(lambda m: m.group(1) + _line_blocks(m.group(2)) + m.group(3), page)


def _deck_title(nb: dict, fallback: str) -> str:
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            m = re.search(r"^#\s+(.+)$", cell["source"], re.MULTILINE)
            if m:
                return m.group(1).strip()
    return fallback


def _make_exporter(template_dir: Path, lecture: bool = False):
    from nbconvert import SlidesExporter  # imported here: nbconvert is slow to import

    (template_dir / _TEMPLATE_NAME).mkdir(parents=True, exist_ok=True)
    (template_dir / _TEMPLATE_NAME / "conf.json").write_text(json.dumps(_TEMPLATE_CONF))
    css = _TEMPLATE_CSS % {"body": _BODY_PX, "code": _CODE_PX, "body_font": FONT_FAMILIES["body"],
                           "code_font": FONT_FAMILIES["code"]}
    (template_dir / _TEMPLATE_NAME / "index.html.j2").write_text(_TEMPLATE_INDEX % {
        "fonts_css": _FONTS_CSS, "css": css, "hide": _HIDE_INPUT, "reveal": _REVEAL_PREFIX,
        "lecture_css": _LECTURE_CSS if lecture else "", "body_font_js": FONT_FAMILIES["body"].replace('"', "'"),
        "projector_zoom": PROJECTOR_ZOOM, "projector_on": "true" if lecture else "false",
        "code_font_js": FONT_FAMILIES["code"].replace('"', "'")})
    exporter = SlidesExporter(
        extra_template_basedirs=[str(template_dir)],
        template_name=_TEMPLATE_NAME,
        reveal_url_prefix=_REVEAL_PREFIX,
        reveal_theme=_REVEAL_THEME,
        reveal_number="c/t",
        reveal_scroll=False,  # the template's own handler makes a tall slide scroll
        reveal_width=str(SLIDE_WIDTH),
        reveal_height=str(SLIDE_HEIGHT),
        jquery_url=_JQUERY_URL,
        require_js_url=_REQUIRE_URL,
        mathjax_url=_MATHJAX_URL,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
    )
    return exporter


# ---------------------------------------------------------------------------------------------
# The lecture cut: the same notebooks as slides a clicker can drive (no slide taller than the screen)

# How tall the pieces of a slide are, estimated in slide pixels from the deck's own sizes (34 px body
# text at line-height 1.3, 26 px code, 1280 px wide). The estimate is deliberately generous; the
# browser measurement (tools.slide_metrics) is the judge, and the tests hold every lecture deck to it.
LECTURE_SECONDS_PER_SLIDE = 30  # presenting one slide of the lecture cut (see lecture_minutes)
LECTURE_BUDGET = 560  # estimated px of content per slide, of SLIDE_HEIGHT (720): room for the estimate's error
_LECTURE_CODE_ROWS = 14  # rows of code (input or text output) on one slide at most
_LECTURE_IMG_PX = 520  # images are shown at most this high (CSS) in the lecture cut
_BODY_LINE = _BODY_PX * 1.3
_CODE_LINE = _CODE_PX * 1.3
_BODY_CHARS = 62  # characters of body text per line (Noto Sans at 34 px, ~1200 px of text width)
_CODE_CHARS = 72  # characters of code per line (Noto Sans Mono at 26 px, less the hanging indent)
_LECTURE_CSS = f"""
html body .reveal .jp-OutputArea-output img, html body .reveal .jp-RenderedHTMLCommon img {{
  max-height: {_LECTURE_IMG_PX}px; width: auto; max-width: 100%; object-fit: contain; }}
"""
_PNG_SIZE_RE = re.compile(rb"\x89PNG\r\n\x1a\n....IHDR(....)(....)", re.S)
_FENCE_RE = re.compile(r"^\s*(```|~~~)")
_HEADING_RE = re.compile(r"^(#{1,6})\s")
_LIST_ITEM_RE = re.compile(r"^(?:[-*+]|\d+\.)\s")


def _rows(text: str, width: int) -> int:
    """Screen lines of ``text`` wrapped at ``width`` characters (a CJK character counts as two)."""
    rows = 0
    for line in text.split("\n"):
        n = sum(2 if "\u2e80" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef" else 1 for ch in line)
        rows += max(1, -(-n // width))
    return rows


def _png_height(data: str, max_width: float = SLIDE_WIDTH - 40) -> float:
    """The height a base64 PNG is shown at on a lecture slide (natural size, at most the slide's width
    and :data:`_LECTURE_IMG_PX`)."""
    try:
        head = base64.b64decode(data[:64] + "=" * (-len(data[:64]) % 4))
    except ValueError:
        return _LECTURE_IMG_PX
    m = _PNG_SIZE_RE.match(head)
    if not m:
        return _LECTURE_IMG_PX
    w, h = int.from_bytes(m.group(1), "big"), int.from_bytes(m.group(2), "big")
    if w <= 0 or h <= 0:
        return _LECTURE_IMG_PX
    return min(h * min(1.0, max_width / w), _LECTURE_IMG_PX) + 10


def _markdown_height(block: str) -> float:
    """Estimated height of one markdown block (a paragraph, a heading, a list, a table, a formula)."""
    text = block.strip()
    if not text:
        return 0.0
    height = 0.0
    images = len(re.findall(r"!\[[^\]]*\]\(|<img\b", text, re.I))
    if images:
        height += images * (_LECTURE_IMG_PX + 10)
        text = re.sub(r"!\[[^\]]*\]\([^)]*\)|<img\b[^>]*>", "", text, flags=re.I)
    if re.match(r"<details\b", text, re.I):  # collapsed: only its summary shows
        m = _SUMMARY_RE.match(text)
        summary = re.sub(r"<[^>]+>", "", m.group(1)) if m else "details"
        return height + _rows(summary, _BODY_CHARS) * _BODY_LINE + 16
    m = _HEADING_RE.match(text)
    if m:
        scale = {1: 1.6, 2: 1.35, 3: 1.15}.get(len(m.group(1)), 1.0)
        title = text[m.end():]
        return height + _rows(title, int(_BODY_CHARS / scale)) * _BODY_PX * scale * 1.2 + _BODY_PX * scale * 0.4
    if _FENCE_RE.match(text):
        code = "\n".join(text.split("\n")[1:-1])
        return height + _rows(code, _CODE_CHARS) * _CODE_LINE + 30
    if "$$" in text or text.startswith("\\begin"):
        return height + 60 * max(1, text.count("\\\\") + 1) + 30
    if text.startswith("|"):
        rows = [r for r in text.split("\n") if r.strip().startswith("|") and not re.match(r"^\s*\|[\s:|-]+\|\s*$", r)]
        cells = [r.strip().strip("|").split("|") for r in rows]
        width = max((len(c) for c in cells), default=1)
        per = max(8, _BODY_CHARS // max(width, 1))
        return height + sum(max(_rows(x.strip(), per) for x in c) * _BODY_LINE + 8 for c in cells) + 20
    plain = re.sub(r"<[^>]+>|\*\*|`|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", text)
    plain = re.sub(r"\$[^$]*\$", "xxxxx", plain)
    items = len(re.findall(r"^\s*(?:[-*+]|\d+\.)\s", text, re.M))
    return height + _rows(plain, _BODY_CHARS - 2) * _BODY_LINE + 22 + items * 8


def _markdown_blocks(source: str) -> list[str]:
    """A markdown text cut at its blank lines, never inside a fenced code block, a ``<details>`` block,
    an HTML block, a display formula or a table."""
    blocks, current = [], []
    fence = details = False
    math = 0
    for line in source.split("\n"):
        if _FENCE_RE.match(line):
            fence = not fence
        if not fence:
            details += len(re.findall(r"<details\b", line, re.I)) - len(re.findall(r"</details\s*>", line, re.I))
            math = (math + line.count("$$")) % 2
        if not line.strip() and not fence and details <= 0 and not math and current:
            blocks.append("\n".join(current))
            current = []
            continue
        current.append(line)
    if current:
        blocks.append("\n".join(current))
    return [b for b in blocks if b.strip()]


def _sentence_pieces(block: str) -> list[str]:
    """A paragraph too tall for one slide cut between sentences into pieces that fit."""
    sentences = [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z*`(\[])|(?<=[。！？])", block) if s.strip()]
    pieces: list[str] = []
    for s in sentences:
        joined = (pieces[-1] + (" " if not pieces[-1].endswith(("。", "！", "？")) else "") + s) if pieces else s
        if pieces and _markdown_height(joined) <= LECTURE_BUDGET:
            pieces[-1] = joined
        else:
            pieces.append(s)
    return pieces


def _list_items(block: str) -> list[str]:
    """A list (items without blank lines between them) cut before each top-level item."""
    items: list[list[str]] = []
    for line in block.split("\n"):
        if _LIST_ITEM_RE.match(line) or not items:
            items.append([])
        items[-1].append(line)
    return ["\n".join(item) for item in items]


def _table_pieces(block: str) -> list[str]:
    """A markdown table too tall for one slide as several tables, each with the header row."""
    lines = block.split("\n")
    if len(lines) < 3 or not re.match(r"^\s*\|[\s:|-]+\|\s*$", lines[1]):
        return [block]
    head, body, pieces, chunk = lines[:2], lines[2:], [], []
    for row in body:
        if chunk and _markdown_height("\n".join(head + chunk + [row])) > LECTURE_BUDGET:
            pieces.append("\n".join(head + chunk))
            chunk = []
        chunk.append(row)
    if chunk:
        pieces.append("\n".join(head + chunk))
    return pieces


def _markdown_pieces(cell: dict) -> list[tuple[dict, float]]:
    """A markdown cell as pieces that each fit a slide, cut at paragraph boundaries; a heading stays with
    the paragraph after it."""
    blocks: list[tuple[str, str]] = []  # (text, what joins it to the block before it in the same piece)
    for b in _markdown_blocks(cell["source"]):
        if b.lstrip().startswith("|"):
            blocks += [(x, "\n\n") for x in _table_pieces(b)]
        elif _LIST_ITEM_RE.match(b) and _markdown_height(b) > LECTURE_BUDGET:
            blocks += [(x, "\n\n" if i == 0 else "\n") for i, x in enumerate(_list_items(b))]  # a tight list stays tight
        elif _markdown_height(b) > LECTURE_BUDGET and not re.match(r"\s*(<|\$\$|```|~~~|#|>)", b):
            blocks += [(x, "\n\n") for x in _sentence_pieces(b)]
        else:
            blocks.append((b, "\n\n"))
    pieces: list[tuple[str, float, bool]] = []  # (text, height, only headings so far)
    for b, sep in blocks:
        h = _markdown_height(b)
        heading = bool(_HEADING_RE.match(b.strip()))
        if pieces and (pieces[-1][1] + h <= LECTURE_BUDGET or pieces[-1][2]):
            text, used, headings = pieces[-1]
            pieces[-1] = (text + sep + b, used + h, headings and heading)
        else:
            pieces.append((b, h, heading))
    out = []
    for text, h, _ in pieces or [(cell["source"], 0.0, False)]:
        piece = copy.deepcopy(cell)
        piece["source"] = text
        out.append((piece, h))
    for k, (piece, _) in enumerate(out[1:], 1):
        if "id" in piece:
            piece["id"] = f"{piece['id']}-{k}"
    return out


def _output_height(out: dict) -> float:
    kind = out.get("output_type")
    if kind == "stream":
        text = out.get("text", "")
        return _rows(text.rstrip("\n"), _CODE_CHARS) * _CODE_LINE + 16
    if kind == "error":
        return _rows("\n".join(out.get("traceback", [])), _CODE_CHARS) * _CODE_LINE + 16
    data = out.get("data", {})
    if "image/png" in data:
        return _png_height(data["image/png"])
    if any(k.startswith("image/") for k in data):
        return _LECTURE_IMG_PX + 10
    if "text/html" in data:
        page = data["text/html"] if isinstance(data["text/html"], str) else "".join(data["text/html"])
        m = re.search(r"height:(\d+)px", page)
        if "<iframe" in page:
            return float(m.group(1)) if m else 640.0
        rows = page.count("<tr")
        if rows:
            return rows * (_BODY_LINE + 8) + 20
        # Other HTML (token strips, styled text): its breaks and blocks plus its wrapped text, at a
        # generous 50 px a row (such outputs often set a large line height).
        plain = html.unescape(re.sub(r"<[^>]+>", "", page))
        breaks = len(re.findall(r"<br\b|<div\b|<p\b|<li\b|<h\d", page, re.I))
        return (breaks + _rows(plain, _BODY_CHARS)) * 50.0 + 20
    if "text/latex" in data:
        return 90.0
    text = data.get("text/plain", "")
    return _rows(text if isinstance(text, str) else "".join(text), _CODE_CHARS) * _CODE_LINE + 16


def _code_chunks(source: str) -> list[str]:
    """Code cut into chunks of at most :data:`_LECTURE_CODE_ROWS` screen rows, at the start of a top-level
    statement (or a blank line) where it can, else between lines."""
    lines = source.split("\n")
    try:
        starts = {s.lineno - 1 for s in ast.parse(without_magics(source)).body}
        for s in ast.parse(without_magics(source)).body:  # comments right above a statement go with it
            i = s.lineno - 2
            while i >= 0 and _COMMENT_LINE_RE.match(lines[i]):
                starts.add(i)
                starts.discard(i + 1)
                i -= 1
    except SyntaxError:
        starts = set()
    starts |= {i + 1 for i, line in enumerate(lines) if not line.strip()}
    chunks, current, rows = [], [], 0
    for i, line in enumerate(lines):
        r = _rows(line, _CODE_CHARS)
        if current and rows + r > _LECTURE_CODE_ROWS:
            cut = max((j for j in range(1, len(current)) if (i - len(current) + j) in starts), default=None)
            if cut is None or cut < len(current) // 3:
                cut = len(current)
            chunks.append(current[:cut])
            current = current[cut:]
            rows = sum(_rows(x, _CODE_CHARS) for x in current)
        current.append(line)
        rows += r
    if current:
        chunks.append(current)
    return ["\n".join(c).strip("\n") for c in chunks if "\n".join(c).strip()]


def _stream_chunks(out: dict) -> list[dict]:
    """A long text output as several outputs of at most :data:`_LECTURE_CODE_ROWS` screen rows."""
    lines = out.get("text", "").rstrip("\n").split("\n")
    chunks, current, rows = [], [], 0
    for line in lines:
        r = _rows(line, _CODE_CHARS)
        if current and rows + r > _LECTURE_CODE_ROWS:
            chunks.append(current)
            current, rows = [], 0
        current.append(line)
        rows += r
    if current:
        chunks.append(current)
    return [{**copy.deepcopy(out), "text": "\n".join(c) + "\n"} for c in chunks]


def _code_pieces(cell: dict) -> list[tuple[dict, float]]:
    """A code cell as pieces that each fit a slide: its input cut into chunks, then its outputs (a long
    text output cut into chunks too); a piece that only continues an output shows no input."""
    hidden = bool(cell["metadata"].get(_HIDE_INPUT))
    chunks = [] if hidden else _code_chunks(cell["source"])
    pieces: list[tuple[dict, float]] = []

    def new(source: str, outputs: list[dict], h: float) -> None:
        piece = copy.deepcopy({**cell, "outputs": []})
        piece["source"], piece["outputs"] = source, outputs
        if not source.strip():
            piece["metadata"][_HIDE_INPUT] = True
        if pieces and "id" in piece:
            piece["id"] = f"{piece['id']}-{len(pieces)}"
        pieces.append((piece, h))

    for chunk in chunks:
        new(chunk, [], _rows(chunk, _CODE_CHARS) * _CODE_LINE + 30)
    outputs = []
    for out in cell.get("outputs", []):
        outputs += _stream_chunks(out) if out.get("output_type") == "stream" else [out]
    for out in outputs:
        h = _output_height(out)
        data = out.get("data", {})
        page = data.get("text/html")
        if h > SLIDE_HEIGHT - 60 and isinstance(page, str) and "<iframe" not in page:
            # One HTML output taller than the screen (a long token strip) cannot be cut: it is shown smaller.
            zoom = max(0.6, round((SLIDE_HEIGHT - 80) / h, 2))
            out = copy.deepcopy(out)
            out["data"]["text/html"] = f'<div class="gl-fit" style="zoom:{zoom}">{page}</div>'
            h *= zoom
        if pieces and pieces[-1][1] + h <= LECTURE_BUDGET:
            piece, used = pieces[-1]
            piece["outputs"].append(out)
            pieces[-1] = (piece, used + h)
        else:
            new("", [out], h)
    if not pieces:
        new(cell["source"] if not hidden else "", [], 0.0)
    return pieces


def lecture_deck_slides(notebook: str | os.PathLike) -> int:
    """Slides and subslides of a notebook's lecture deck (teacher's version), without building it."""
    path = Path(notebook)
    nb = nbformat.read(path, as_version=4)
    return count_slides(lecture_cut(_deck_notebook(nb, True, path.parent)))[1]


def lecture_minutes(slides: int, seconds_per_slide: float = LECTURE_SECONDS_PER_SLIDE) -> int:
    """Minutes to present a lecture deck of ``slides`` slides and subslides, rounded up to 5 minutes.

    The rule of docs/teaching.md §1: 30 s per slide of the lecture cut (a piece of at most 560 px:
    one idea, one code chunk or one output). On the three decks of lecture 1 (00, 01, 02: 138 slides)
    it gives 69 minutes, inside the 40-70 minutes a reviewer measured presenting them (issue 29)."""
    if not isinstance(slides, int) or slides < 1:
        raise ValueError(f"slides={slides!r} must be a positive number of slides")
    if seconds_per_slide <= 0:
        raise ValueError(f"seconds_per_slide={seconds_per_slide!r} must be positive")
    return 5 * math.ceil(slides * seconds_per_slide / 60 / 5)


def lecture_cut(nb: dict, budget: float = LECTURE_BUDGET) -> dict:
    """The lecture cut of a deck's notebook: every slide that would be taller than the screen split into
    vertical subslides at cell and paragraph boundaries (long code and long outputs cut into chunks, a
    long table into tables with the same header), so that a clicker reaches everything and nothing
    scrolls. Speaker notes stay with the piece they follow; skipped cells stay skipped."""
    if budget <= 0:
        raise ValueError(f"budget={budget!r} must be a positive height in pixels")
    out = copy.deepcopy(nb)
    cells, used, started = [], 0.0, False
    for cell in out["cells"]:
        kind = _slide_type(cell)
        if kind in ("skip", "notes"):
            cells.append(cell)
            continue
        if cell["cell_type"] == "markdown":
            pieces = _markdown_pieces(cell)
        elif cell["cell_type"] == "code":
            pieces = _code_pieces(cell)
        else:
            pieces = [(cell, _markdown_height(cell.get("source", "")))]
        for k, (piece, h) in enumerate(pieces):
            piece_kind = kind if k == 0 else "-"
            if piece_kind in ("slide", "subslide") or not started:
                used = 0.0
            elif used > 0 and used + h > budget:
                piece_kind, used = "subslide", 0.0
            started = True
            piece.setdefault("metadata", {})["slideshow"] = {"slide_type": piece_kind}
            used += h
            cells.append(piece)
    out["cells"] = cells
    return out


# The offline check. A page is parsed (html.parser), not searched: every attribute that makes a
# browser load something, the text of each script and style sheet, the HTML inside ``<iframe
# srcdoc>``, and the JSON of each data script (the widget state, whose strings are escaped
# ``https:\/\/``) parsed and walked. Plain links (``<a href>``) are not loads.
_REMOTE_SCHEMES = frozenset({"http", "https", "ws", "wss", "ftp"})
_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_URL_STRIP = "".join(chr(i) for i in range(0x21))  # browsers strip C0 controls and spaces at both ends
_TAB_NEWLINE_RE = re.compile(r"[\t\n\r]")  # ... and remove tabs and newlines anywhere in a URL
# Attributes whose value is one URL the browser loads: on any element, or on the elements named.
_URL_ATTRS_ANY = frozenset({"src", "poster", "background", "lowsrc", "dynsrc"})
_URL_ATTRS_ON = {
    "href": frozenset({"link", "image", "use", "script", "feimage", "base"}),
    "xlink:href": frozenset({"image", "use", "script", "feimage"}),
    "data": frozenset({"object"}),
    "codebase": frozenset({"object", "applet"}),
    "manifest": frozenset({"html"}),
}
_SRCSET_ATTRS = frozenset({"srcset", "imagesrcset"})
# <link rel=...> values that only name a related page (nothing is fetched); any other rel loads.
_LINK_NO_LOAD = frozenset({"alternate", "author", "bookmark", "canonical", "external", "help", "license",
                           "me", "next", "nofollow", "noopener", "noreferrer", "prev", "search", "tag"})
_JS_TYPES = frozenset({"", "module", "text/javascript", "application/javascript", "text/ecmascript",
                       "application/ecmascript", "application/x-javascript", "text/jsx", "text/babel"})
# \/, \u002f, \x2f (and the same for ':') as JavaScript and JSON write them inside strings
_JS_ESCAPE_RE = re.compile(r"\\(?:(/)|u00(2[fF])|x(2[fF])|u00(3[aA])|x(3[aA]))")
# A string (in '', "" or ``) that starts with a remote URL: import/import()/fetch()/src = '...' all pass one.
_JS_STRING_URL_RE = re.compile(
    r"""(["'`])[ \t]*((?:(?:https?|wss?|ftp):[/\\]*[^\s"'`\\<>]+|//[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+[^\s"'`\\<>]*))""",
    re.I)
# Names that scripts pass around but no browser fetches: XML namespaces (createElementNS) and DTDs.
_XML_NAME_RE = re.compile(r"https?://www\.w3\.org/(?:2000/svg|1999/xhtml|1999/xlink|1998/Math/MathML|"
                          r"XML/1998/namespace|2000/xmlns/?|[\w./-]+\.dtd)", re.I)
_CSS_COMMENT_RE = re.compile(r"/\*.*?\*/", re.S)
_CSS_URL_RE = re.compile(r"""url\(\s*(?:"([^"]*)"|'([^']*)'|([^"')\s]*))\s*\)""", re.I)
_CSS_IMPORT_RE = re.compile(r"""@import\s+(?:"([^"]*)"|'([^']*)')""", re.I)
_CSS_IMAGE_SET_RE = re.compile(r"""image-set\(([^)]*)\)""", re.I)
_CSS_STRING_RE = re.compile(r""""([^"]*)"|'([^']*)'""")
_REFRESH_URL_RE = re.compile(r"""^\s*[\d.]*\s*[;,]?\s*(?:url\s*=\s*)?["']?([^"']*)""", re.I)


def _is_remote(url: str) -> bool:
    """Whether a browser resolves ``url`` (as written in an attribute) to another host."""
    u = _TAB_NEWLINE_RE.sub("", url).strip(_URL_STRIP)
    if len(u) >= 2 and u[0] in "/\\" and u[1] in "/\\":  # //host/x (browsers read \ as / in URLs)
        return True
    m = _SCHEME_RE.match(u)
    return m is not None and m.group(1).lower() in _REMOTE_SCHEMES


def _srcset_urls(value: str) -> list[str]:
    """The URLs of a ``srcset`` ("a.png 1x, https://x/b.png 2x"), as the HTML standard splits it."""
    urls, i, n = [], 0, len(value)
    while i < n:
        while i < n and (value[i].isspace() or value[i] == ","):
            i += 1
        start = i
        while i < n and not value[i].isspace():
            i += 1
        url = value[start:i]
        if url.endswith(","):
            url = url.rstrip(",")
        else:  # skip the descriptors up to the next comma outside parentheses
            depth = 0
            while i < n and (value[i] != "," or depth):
                depth += {"(": 1, ")": -1}.get(value[i], 0)
                i += 1
        if url:
            urls.append(url)
    return urls


def _script_refs(text: str) -> list[str]:
    """Remote URLs a script names in a string (``import ... from``, ``import()``, ``fetch()``, ``src = ``)."""
    text = _JS_ESCAPE_RE.sub(lambda m: "/" if (m.group(1) or m.group(2) or m.group(3)) else ":", text)
    return [m.group(2) for m in _JS_STRING_URL_RE.finditer(text) if not _XML_NAME_RE.fullmatch(m.group(2))]


def _css_refs(text: str) -> list[str]:
    """Remote URLs a style sheet loads (``url()``, ``@import``, ``image-set()``); comments are not loads."""
    text = _CSS_COMMENT_RE.sub("", text)
    urls = ["".join(m.groups(default="")) for m in _CSS_URL_RE.finditer(text)]
    urls += ["".join(m.groups(default="")) for m in _CSS_IMPORT_RE.finditer(text)]
    for m in _CSS_IMAGE_SET_RE.finditer(text):
        urls += ["".join(s.groups(default="")) for s in _CSS_STRING_RE.finditer(m.group(1))]
    return [u.strip() for u in urls if _is_remote(u)]


def _json_refs(value: object, key: str = "") -> list[str]:
    """Remote URLs in parsed JSON (a widget state): strings that are URLs, and the scripts (``_esm``),
    style sheets (``_css``) and HTML held in strings."""
    if isinstance(value, dict):
        return [u for k, v in value.items() for u in _json_refs(v, str(k))]
    if isinstance(value, list):
        return [u for v in value for u in _json_refs(v, key)]
    if not isinstance(value, str):
        return []
    url = value.strip(_URL_STRIP)
    found = [url] if _is_remote(url) and not any(c.isspace() for c in url) and not _XML_NAME_RE.fullmatch(url) else []
    if key.endswith("esm") or key.endswith("_js"):
        found += _script_refs(value)
    elif key.endswith("css"):
        found += _css_refs(value)
    elif "<" in value:
        found += _html_refs(value)
    elif "url(" in value.lower() or "@import" in value.lower():
        found += _css_refs(value)
    return found


class _LoadFinder(HTMLParser):
    """Collects what an HTML page loads (see :func:`remote_references`)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._raw: tuple[str, str] | None = None  # ("script", its type) or ("style", "") while inside one
        self._text: list[str] = []

    def _url(self, value: str) -> None:
        if _is_remote(value):
            self.found.append(value.strip(_URL_STRIP))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value for name, value in attrs if value is not None}
        for name, value in values.items():
            if name in _URL_ATTRS_ANY or tag in _URL_ATTRS_ON.get(name, ()):
                rel = set(values.get("rel", "").lower().split())
                if tag == "link" and name == "href" and rel and rel <= _LINK_NO_LOAD:
                    continue
                self._url(value)
            elif name in _SRCSET_ATTRS:
                for url in _srcset_urls(value):
                    self._url(url)
            elif name == "style":
                self.found += _css_refs(value)
            elif name.startswith("on"):  # onload="fetch('https://...')"
                self.found += _script_refs(value)
            elif name == "srcdoc" and tag == "iframe":
                self.found += _html_refs(value)
        if tag == "meta" and values.get("http-equiv", "").strip().lower() == "refresh":
            m = _REFRESH_URL_RE.match(values.get("content", ""))
            if m:
                self._url(m.group(1))
        if tag in ("script", "style"):
            self._raw = (tag, values.get("type", "").split(";")[0].strip().lower())
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._raw is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._raw is None or tag != self._raw[0]:
            return
        (kind, type_), text = self._raw, "".join(self._text)
        self._raw, self._text = None, []
        if kind == "style":
            self.found += _css_refs(text)
        elif type_ in _JS_TYPES:
            self.found += _script_refs(text)
        elif type_ == "importmap" or type_.endswith("json"):  # the widget state, widget views, import maps
            try:
                self.found += _json_refs(json.loads(text))
            except ValueError:  # not JSON after all: look at it as a script
                self.found += _script_refs(text)
        elif "html" in type_ or "template" in type_:
            self.found += _html_refs(text)
        else:  # a type the page's own code may run (text/x-mathjax-config, speculationrules, ...)
            self.found += _script_refs(text)

    def close(self) -> None:
        if self._raw is not None:  # a <script> or <style> left open runs to the end of the page
            self._text.append(self.rawdata)  # (html.parser would drop that text)
            self.rawdata = ""
        super().close()
        if self._raw is not None:
            self.handle_endtag(self._raw[0])


def _html_refs(page: str) -> list[str]:
    finder = _LoadFinder()
    finder.feed(page)
    finder.close()
    return finder.found


def remote_references(page: str, kind: str = "html") -> list[str]:
    """URLs on other hosts that the page would load by itself (scripts, styles, images, fonts, frames,
    media, a refresh, URLs in the widget state), sorted and without repeats.

    ``kind`` is what ``page`` holds: "html" (a whole page or a fragment), "css" (a style sheet) or
    "js" (a script). Plain links (``<a href="https://...">``) are not loads and are not listed.
    """
    finders = {"html": _html_refs, "css": _css_refs, "js": _script_refs}
    if kind not in finders:
        raise ValueError(f"kind={kind!r} is not one of {sorted(finders)}")
    return sorted(set(finders[kind](page)))


def _link_decks(page: str, deck_names: set[str]) -> str:
    """Point links to sibling notebooks (``02_x.ipynb``) at their decks (``02_x.html``)."""
    def repl(m: re.Match) -> str:
        stem, anchor = m.group(2), m.group(3) or ""
        return f'href="{stem}.html{anchor}"' if stem in deck_names else m.group(0)

    return re.sub(r'href="(\./)?([\w.-]+)\.ipynb(#[^"]*)?"', repl, page)


def build_deck(notebook: str | os.PathLike, out_dir: str | os.PathLike, exporter=None, *,
               solutions: bool = True, deck_names: set[str] | None = None, lecture: bool = False) -> Deck:
    """Build one deck ``out_dir/<notebook stem>.html``; the vendor files must be in ``out_dir/vendor``.

    ``lecture``: the lecture cut (:func:`lecture_cut`); an ``exporter`` passed in must have been made
    for the same mode."""
    nb_path = Path(notebook)
    out = Path(out_dir)
    nb = nbformat.read(nb_path, as_version=4)
    count_slides(nb)  # checks the slide types
    try:
        deck_nb = _deck_notebook(nb, solutions, nb_path.parent)
    except OutsideLessonError as e:
        raise OutsideLessonError(f"{nb_path.name}: {e}") from None
    if lecture:
        deck_nb = lecture_cut(deck_nb)
    horizontal, total = count_slides(deck_nb)
    shown = nbformat.from_dict(deck_nb)
    own_exporter = exporter is None
    tmp = tempfile.TemporaryDirectory(prefix="gpt_lesson_tpl_") if own_exporter else None
    try:
        if own_exporter:
            exporter = _make_exporter(Path(tmp.name), lecture)  # type: ignore[union-attr]
        title = _deck_title(nb, nb_path.stem)
        resources = {"metadata": {"name": title, "path": str(nb_path.parent)}}
        body, _ = exporter.from_notebook_node(shown, resources=resources)
    finally:
        if tmp is not None:
            tmp.cleanup()
    body = _link_decks(body, deck_names if deck_names is not None else {nb_path.stem})
    body = _wrap_code_lines(body)
    remote = remote_references(body)
    if remote:
        raise NotOfflineError(
            f"the deck for {nb_path.name} would load from the network: {remote}. Decks must work "
            "offline: put the file next to the notebook (e.g. in figures/) and link it relatively"
        )
    dest = out / f"{nb_path.stem}.html"
    dest.write_text(body, encoding="utf-8")
    return Deck(nb_path, dest, title, horizontal, total)


_INDEX = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>gpt-lesson: slides</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 52em; margin: 2em auto; padding: 0 1em; color: #222; }}
table {{ border-collapse: collapse; width: 100%; }}
td, th {{ text-align: left; padding: .35em .6em; border-bottom: 1px solid #ddd; }}
td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
kbd {{ border: 1px solid #bbb; border-radius: 3px; padding: 0 .3em; background: #f6f6f6; }}
</style>
</head>
<body>
<h1>gpt-lesson: slides</h1>
<p>Every deck works offline: the scripts it needs are in <code>vendor/</code> next to it.
Keys: <kbd>&rarr;</kbd>/<kbd>Space</kbd> next, <kbd>&larr;</kbd> back, <kbd>&darr;</kbd>/<kbd>&uarr;</kbd> through
subslides, <kbd>Esc</kbd> overview, <kbd>S</kbd> speaker view with notes, <kbd>F</kbd> full screen,
<kbd>P</kbd> projector mode (explorers enlarged; on in the lecture cut). On a slide taller than the screen
<kbd>Page Down</kbd> scrolls it first.</p>
<table>
<tr><th>Deck</th><th>Slides</th><th>With subslides</th><th>Notebook</th></tr>
{rows}
</table>
<p>{solutions}</p>
</body>
</html>
"""


def build_decks(notebooks: list[Path], out_dir: str | os.PathLike, *, solutions: bool = True,
                timeout: float = 300.0, index_notebooks: list[Path] | None = None,
                lecture: bool = False) -> list[Deck]:
    """Build a deck per notebook, the shared ``vendor/`` folder and ``index.html`` in ``out_dir``.

    ``index_notebooks`` (default: ``notebooks``) are the lessons the index lists when their deck
    exists in ``out_dir``, so rebuilding one deck keeps the others listed and linked.
    """
    if not notebooks:
        raise ValueError("no notebooks to build: the notebooks folder holds no *.ipynb file")
    listed = index_notebooks if index_notebooks is not None else notebooks
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vendor = fetch_vendor(out / "vendor", timeout=timeout)
    for sheet in (vendor / "reveal.js" / "dist" / "theme" / f"{_REVEAL_THEME}.css", vendor / _FONTS_CSS):
        remote = remote_references(sheet.read_text(encoding="utf-8"), kind="css")
        if remote:
            raise NotOfflineError(f"the style sheet {sheet.name} would load from the network: {remote}")
    names = {p.stem for p in [*listed, *notebooks]}
    decks = []
    with tempfile.TemporaryDirectory(prefix="gpt_lesson_tpl_") as tmp:
        exporter = _make_exporter(Path(tmp), lecture)
        for path in notebooks:
            decks.append(build_deck(path, out, exporter, solutions=solutions, deck_names=names, lecture=lecture))
    built = {d.notebook.stem: d for d in decks}
    for path in listed:
        if path.stem not in built and (out / f"{path.stem}.html").is_file():
            nb = nbformat.read(path, as_version=4)
            shown = lecture_cut(_deck_notebook(nb, solutions, path.parent)) if lecture else nb
            built[path.stem] = Deck(path, out / f"{path.stem}.html", _deck_title(nb, path.stem), *count_slides(shown))
    rows = "\n".join(
        f'<tr><td><a href="{html.escape(d.html.name)}">{html.escape(d.title)}</a></td>'
        f'<td class="n">{d.horizontal}</td><td class="n">{d.total}</td>'
        f"<td><code>{html.escape(d.notebook.name)}</code></td></tr>"
        for d in sorted(built.values(), key=lambda d: d.notebook.name)
    )
    note = "shown (teacher's version)" if solutions else "removed (student version)"
    cut = "the lecture cut (no slide taller than the screen)" if lecture else "the notebook pages"
    (out / "index.html").write_text(_INDEX.format(rows=rows, solutions=f"Last build: {cut}, solutions {note}."),
                                    encoding="utf-8")
    return decks


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.slides``."""
    parser = argparse.ArgumentParser(prog="python -m tools.slides", description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", type=Path, default=REPO_ROOT / "notebooks",
                        help="folder of the lesson notebooks (default: the repository's notebooks/)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "slides",
                        help="output folder for the decks (default: the repository's slides/)")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="build only these notebooks (file names or stems, e.g. 03_attention)")
    parser.add_argument("--strip-solutions", action="store_true",
                        help="student decks: leave the answers (<details> solution, answer and model answer blocks) "
                             "and the speaker notes out")
    parser.add_argument("--lecture", action="store_true",
                        help="the lecture cut: every slide taller than the 1280x720 screen split into subslides "
                             "(long code, outputs and tables in chunks), for a clicker")
    parser.add_argument("--student-copies", type=Path, metavar="DIR",
                        help="instead of decks, write the notebooks without answers and speaker notes to DIR")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    all_notebooks = find_notebooks(args.notebooks)
    notebooks = select_notebooks(parser, all_notebooks, args.only)
    if args.student_copies:
        for path, n in write_student_copies(notebooks, args.student_copies):
            print(f"wrote {path} ({n} answer block{'s' if n != 1 else ''} removed)")
        return 0
    start = time.perf_counter()
    try:
        decks = build_decks(notebooks, args.out, solutions=not args.strip_solutions, index_notebooks=all_notebooks,
                            lecture=args.lecture)
    except (VendorError, NotOfflineError, OutsideLessonError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for d in decks:
        minutes = f", {lecture_minutes(d.total)} min at {LECTURE_SECONDS_PER_SLIDE} s a slide" if args.lecture else ""
        print(f"{d.html}  {d.horizontal:3d} slides, {d.total:3d} with subslides{minutes}  ({d.title})")
    print(f"{len(decks)} decks and {args.out / 'index.html'} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
