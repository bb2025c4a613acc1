"""Measure built slide decks in Chromium: text size, clipped code, missing glyphs, slide height.

Opens each deck from ``file://`` with the network off, in a 1280x720 window (a common projector), walks
every slide and subslide with all fragments shown, and reports:

- the smallest body text and the smallest code text, in pixels as the projector shows them
  (the computed font size times reveal.js's scale for the window);
- code blocks (inputs and text outputs, every ``<pre>``) that are cut off on the right: content wider
  than the block, or a block that sticks out of the slide;
- characters drawn as a missing-glyph box ("tofu"): each distinct character is drawn in a canvas with
  the font stack of the element that holds it and compared with a code point that no font has
  (U+10FFFD); the same pixels mean no font in the stack (web fonts first, then the machine's) has it;
- slides taller than the slide height (they scroll).

The tests (``tests/test_slides.py``) run this on every deck; a teacher who edits a lesson can run it on
the rebuilt decks::

    python -m tools.slide_metrics slides/            # every deck in the folder
    python -m tools.slide_metrics slides/08_full_gpt.html --screenshot densest.png

Needs Python Playwright and a Chromium (``/usr/bin/chromium`` by default; never ``playwright install``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BODY_MIN_PX", "CODE_MIN_PX", "EXPLORER_MIN_PX", "WINDOW", "DeckMetrics", "SlideMetrics", "open_browser",
           "measure_deck", "screenshot_slide", "CHROMIUM", "CHROMIUM_FLAGS", "bare_fontconfig", "build_parser", "main"]

CHROMIUM = Path(os.environ.get("GPT_LESSON_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")
WINDOW = {"width": 1280, "height": 720}
# Readable from the back row of a lecture hall, on a 1280x720 projector.
BODY_MIN_PX = 32.0
CODE_MIN_PX = 24.0
# An explorer's text in projector mode (--projector on): the rule for code, the smallest text on a slide.
EXPLORER_MIN_PX = 24.0

# Runs in the deck's page. Returns one record per slide (in Reveal's order) plus the characters seen,
# grouped by the font stack that draws them.
_MEASURE_JS = r"""
async () => {
  const R = window.Reveal;
  R.configure({transition: 'none', backgroundTransition: 'none'});
  const wait = ms => new Promise(r => setTimeout(r, ms));
  // Projector mode as asked (null: as the deck opens); a deck built before it existed has no switch.
  const projector = %(projector)s;
  if (projector !== null && (window.glDeck || projector)) {
    if (!window.glDeck) throw new Error('this deck has no projector mode (rebuild it with python -m tools.slides)');
    window.glDeck.projector(projector);
    await wait(400);
  }
  // Text an explorer draws on its canvas: every fillText/strokeText call, with its font and its size in
  // the canvas's pixels (the transform included), recorded from the frame's window.
  const canvasLog = (win) => {
    if (win.__glCanvasLog) return win.__glCanvasLog;
    const log = win.__glCanvasLog = [];
    const proto = win.CanvasRenderingContext2D.prototype;
    for (const name of ['fillText', 'strokeText']) {
      const draw = proto[name];
      proto[name] = function (text, ...rest) {
        const t = this.getTransform();
        const m = /([\d.]+)px/.exec(this.font);
        if (m) log.push({text: String(text), font: this.font, px: parseFloat(m[1]) * Math.hypot(t.a, t.b), canvas: this.canvas});
        return draw.call(this, text, ...rest);
      };
    }
    return log;
  };
  const frameCanvasChars = new Map();  // frame document -> {canvas font stack: Set of characters}
  const style = document.createElement('style');
  // Every fragment shown: a slide is measured as it looks after the last click.
  style.textContent = '.reveal .slides section .fragment { opacity: 1 !important; visibility: inherit !important; }';
  document.head.appendChild(style);
  const frame = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const SKIP = 'aside.notes, script, style, .MathJax_Preview, .MathJax, .MathJax_CHTML, .mjx-chtml, mjx-container, sup, sub, .MJX_Assistive_MathML';
  const slidesBox = document.querySelector('.reveal .slides');
  const height = R.getConfig().height;
  // Letters of scripts that break only between words (Chinese may break between any two characters).
  const WORD = /[\p{Script=Latin}\p{Script=Greek}\p{Script=Cyrillic}\p{Nd}_]/u;
  const charsByFont = {};
  const frameChars = new Map();  // frame document -> {font stack: Set of characters}
  const out = [];
  const hs = R.getHorizontalSlides();
  for (let h = 0; h < hs.length; h++) {
    const vs = hs[h].querySelectorAll(':scope > section');
    for (let v = 0; v < Math.max(vs.length, 1); v++) {
      R.slide(h, v);
      await frame();
      const slide = R.getCurrentSlide();
      const scale = R.getScale();
      const box = slidesBox.getBoundingClientRect();
      const rec = {h, v, scale, body_min: null, code_min: null, small: [], clipped: [], chars: 0,
                   height: slide.scrollHeight, title: '', splits: [], frames: 0, frame_min: null,
                   canvas_min: null, canvas_small: [], explorers: []};
      const heading = slide.querySelector('h1, h2, h3, h4');
      rec.title = heading ? heading.textContent.replace('¶', '').trim().slice(0, 80) : '';
      const walker = document.createTreeWalker(slide, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const text = node.textContent;
        if (!text.trim()) continue;
        const el = node.parentElement;
        if (!el || el.closest(SKIP)) continue;
        if (!el.checkVisibility({visibilityProperty: true}) || el.getClientRects().length === 0) continue;
        // Inside a nested (vertical) slide that is not the current one: not on screen.
        const owner = el.closest('section');
        if (owner !== slide) continue;
        const cs = getComputedStyle(el);
        const px = parseFloat(cs.fontSize) * scale * (el.currentCSSZoom || 1);  // CSS zoom (a shrunk output)
        const isCode = !!el.closest('pre, code, kbd, samp');
        const key = isCode ? 'code_min' : 'body_min';
        if (rec[key] === null || px < rec[key]) rec[key] = px;
        const limit = isCode ? %(code_min)s : %(body_min)s;
        if (px < limit - 0.05 && rec.small.length < 5)
          rec.small.push({px: Math.round(px * 10) / 10, code: isCode, tag: el.tagName.toLowerCase(),
                          text: text.trim().slice(0, 40)});
        rec.chars += text.trim().length;
        const fam = cs.fontFamily;
        const set = charsByFont[fam] || (charsByFont[fam] = new Set());
        for (const ch of text) set.add(ch);
      }
      for (const pre of slide.querySelectorAll('pre')) {
        if (pre.closest('aside.notes') || pre.closest('section') !== slide) continue;
        if (!pre.checkVisibility({visibilityProperty: true}) || pre.getClientRects().length === 0) continue;
        // Text hidden behind the block's own scroll bar, or drawn past the slide's right edge (spaces
        // that hang at the end of a wrapped line are not text: each character is checked).
        const inside = Math.max(0, pre.scrollWidth - pre.clientWidth) * scale;
        let right = -Infinity;
        const texts = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
        const range = document.createRange();
        for (let node = texts.nextNode(); node; node = texts.nextNode()) {
          range.selectNodeContents(node);
          const r = range.getBoundingClientRect();
          if (r.width === 0 || r.right <= box.right + 1) { right = Math.max(right, r.width ? r.right : right); continue; }
          const t = node.textContent;
          for (let i = 0; i < t.length; i++) {
            if (/\s/.test(t[i])) continue;
            range.setStart(node, i); range.setEnd(node, i + 1);
            right = Math.max(right, range.getBoundingClientRect().right);
          }
        }
        const outside = Math.max(0, right - box.right);
        if (inside > 1 || outside > 1)
          rec.clipped.push({px: Math.round(Math.max(inside, outside)),
                            text: pre.textContent.trim().split('\n')[0].slice(0, 60)});
        // Wrapping: a break inside a word ("NotImp|lementedError") or a continuation row that holds only
        // punctuation (a lone quote). Only source lines drawn on more than one row are looked at.
        const lines = pre.querySelectorAll('.gl-line').length ? pre.querySelectorAll('.gl-line') : [pre];
        for (const line of lines) {
          const lh = parseFloat(getComputedStyle(line).lineHeight) || 30;
          if (line.getBoundingClientRect().height < 1.5 * lh * scale) continue;
          const rows = [];
          let prev = null, prevTop = null;
          const tw = document.createTreeWalker(line, NodeFilter.SHOW_TEXT);
          for (let node = tw.nextNode(); node; node = tw.nextNode()) {
            const t = node.textContent;
            for (let i = 0; i < t.length; i++) {
              range.setStart(node, i); range.setEnd(node, i + 1);
              const rr = range.getClientRects();
              if (!rr.length) continue;
              const top = Math.round(rr[rr.length - 1].top);
              if (prevTop === null || top > prevTop + 2) {
                // (A token longer than a whole row has to break: its row holds no space.)
                const before = (rows[rows.length - 1] || '').trim();
                if (prevTop !== null && prev && WORD.test(prev) && WORD.test(t[i]) && /\s/.test(before))
                  rec.splits.push({kind: 'word', text: (rows[rows.length - 1] || '').slice(-20) + '|' + t.slice(i, i + 20)});
                rows.push('');
                prevTop = top;
              }
              rows[rows.length - 1] += t[i];
              prev = t[i];
            }
          }
          for (const row of rows.slice(1))
            if (row.trim() && /^[\s"'`)\]},;:]+$/.test(row))
              rec.splits.push({kind: 'lone', text: row.trim()});
        }
      }
      // Inside the explorers' frames (same origin): text size and the characters, per frame.
      for (const frame of slide.querySelectorAll('iframe')) {
        if (frame.closest('section') !== slide) continue;
        let doc = null;
        try { doc = frame.contentDocument; } catch (e) { doc = null; }
        if (!doc || !doc.body) continue;
        rec.explorers.push(frame.getAttribute('data-gpt-lesson-explorer-view') || '');
        for (let k = 0; k < 50 && doc.documentElement.dataset.ready !== 'true'; k++)
          await new Promise(r => setTimeout(r, 100));
        // Screen px per CSS px of the frame's document (reveal.js's scale and a zoomed frame included).
        const fscale = frame.getBoundingClientRect().width / (doc.documentElement.clientWidth || 1);
        const fw = doc.createTreeWalker(doc.body, NodeFilter.SHOW_TEXT);
        for (let node = fw.nextNode(); node; node = fw.nextNode()) {
          const text = node.textContent;
          if (!text.trim()) continue;
          const el = node.parentElement;
          if (!el || el.closest('script, style') || el.getClientRects().length === 0) continue;
          const cs = doc.defaultView.getComputedStyle(el);
          const px = parseFloat(cs.fontSize) * fscale * (el.currentCSSZoom || 1);
          if (rec.frame_min === null || px < rec.frame_min) rec.frame_min = px;
          const key = cs.fontFamily;
          const frameSet = frameChars.get(doc) || frameChars.set(doc, {}).get(doc);
          const set = frameSet[key] || (frameSet[key] = new Set());
          for (const ch of text) set.add(ch);
        }
        // The canvas text: let the explorer draw again (it redraws on a resize) and read what it drew.
        const log = canvasLog(doc.defaultView);
        log.length = 0;
        doc.defaultView.dispatchEvent(new doc.defaultView.Event('resize'));
        for (let k = 0; k < 3; k++) await new Promise(r => requestAnimationFrame(r));
        await wait(150);
        const canvasSet = frameCanvasChars.get(doc) || frameCanvasChars.set(doc, {}).get(doc);
        for (const d of log) {
          const c = d.canvas;
          if (!c || !c.isConnected || !c.width || c.getClientRects().length === 0 || !d.text.trim()) continue;
          const px = d.px * (c.getBoundingClientRect().width / c.width) * fscale;
          if (rec.canvas_min === null || px < rec.canvas_min) rec.canvas_min = px;
          if (px < %(explorer_min)s - 0.05 && rec.canvas_small.length < 5)
            rec.canvas_small.push({px: Math.round(px * 10) / 10, text: d.text.slice(0, 40)});
          const fam = d.font.replace(/^.*?[\d.]+px(?:\/\S+)?\s+/, '');
          const set = canvasSet[fam] || (canvasSet[fam] = new Set());
          for (const ch of d.text) set.add(ch);
        }
        rec.frames += 1;
      }
      out.push(rec);
    }
  }
  R.slide(0, 0);
  // Missing glyphs: draw each character with the stack that shows it, compare with U+10FFFD.
  const tofu = [];
  const fonts = {};
  const same = (a, b) => { for (let i = 3; i < a.length; i += 4) if (a[i] !== b[i]) return false; return true; };
  const check = async (doc, byFont, where) => {
  const canvas = doc.createElement('canvas');
  canvas.width = 64; canvas.height = 64;
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  const draw = (font, ch) => {
    ctx.clearRect(0, 0, 64, 64);
    ctx.font = font;
    ctx.fillStyle = '#000';
    ctx.textBaseline = 'middle';
    ctx.fillText(ch, 8, 32);
    return ctx.getImageData(0, 0, 64, 64).data;
  };
  for (const [fam, set] of Object.entries(byFont)) {
    const chars = [...set].filter(ch => !/^[\s\u200b-\u200f\u2028-\u202f\u2060\ufe0e\ufe0f\ufeff]$/u.test(ch));
    const font = '40px ' + fam;
    try { await doc.fonts.load(font, chars.join('')); } catch (e) {}
    await doc.fonts.ready;
    const missing = draw(font, '\u{10FFFD}');
    const bad = chars.filter(ch => same(draw(font, ch), missing));
    fonts[where + fam] = chars.length;
    for (const ch of bad)
      if (!tofu.some(x => x.ch === ch && x.font === where + fam))
        tofu.push({ch, code: 'U+' + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, '0'), font: where + fam});
  }
  };
  await check(document, charsByFont, '');
  for (const [doc, byFont] of frameChars) await check(doc, byFont, 'explorer frame: ');
  for (const [doc, byFont] of frameCanvasChars) await check(doc, byFont, 'explorer canvas: ');
  return {slides: out, tofu, fonts, width: R.getConfig().width, height,
          projector: window.glDeck ? window.glDeck.projector() : null};
}
"""


@dataclass
class SlideMetrics:
    """One slide (h, v) as the projector shows it."""

    h: int
    v: int
    title: str
    body_min: float | None  # smallest body text, px on the 1280x720 window (None: no body text)
    code_min: float | None
    small: list[dict]  # text below the limits: up to 5 samples
    clipped: list[dict]  # code blocks cut off on the right, with by how many px
    chars: int  # visible characters on the slide (with all fragments shown)
    height: int  # content height in slide pixels (the slide is ``DeckMetrics.height`` high)
    scale: float  # reveal.js's scale in the 1280x720 window: projector px = CSS px * scale
    splits: list[dict] = field(default_factory=list)  # code wrapped inside a word, or a row of lone punctuation
    frames: int = 0  # explorer frames (iframes) on the slide
    frame_min: float | None = None  # smallest text inside them, px on the window (None: no frame text)
    canvas_min: float | None = None  # smallest text the explorers draw on their canvas, px on the window
    canvas_small: list[dict] = field(default_factory=list)  # canvas text below EXPLORER_MIN_PX: up to 5
    explorers: list[str] = field(default_factory=list)  # the kind of each explorer frame ("attention", "mask", ...)


@dataclass
class DeckMetrics:
    deck: Path
    slides: list[SlideMetrics]
    tofu: list[dict]  # characters drawn as a missing-glyph box: {"ch", "code", "font"}
    width: int
    height: int
    problems: list[str] = field(default_factory=list)  # remote requests, failed loads, page errors
    projector: bool | None = None  # the deck's projector mode while measured (None: the deck has none)

    @property
    def body_min(self) -> float | None:
        values = [s.body_min for s in self.slides if s.body_min is not None]
        return min(values) if values else None

    @property
    def code_min(self) -> float | None:
        values = [s.code_min for s in self.slides if s.code_min is not None]
        return min(values) if values else None

    @property
    def clipped(self) -> list[tuple[SlideMetrics, dict]]:
        return [(s, c) for s in self.slides for c in s.clipped]

    @property
    def small(self) -> list[tuple[SlideMetrics, dict]]:
        return [(s, t) for s in self.slides for t in s.small]

    @property
    def splits(self) -> list[tuple[SlideMetrics, dict]]:
        return [(s, x) for s in self.slides for x in s.splits]

    @property
    def frame_min(self) -> float | None:
        values = [s.frame_min for s in self.slides if s.frame_min is not None]
        return min(values) if values else None

    @property
    def explorer_min(self) -> float | None:
        """The smallest text (HTML) inside the explorers' frames, px on the window."""
        return self.frame_min

    @property
    def canvas_min(self) -> float | None:
        values = [s.canvas_min for s in self.slides if s.canvas_min is not None]
        return min(values) if values else None

    @property
    def tallest(self) -> int:
        return max((s.height for s in self.slides), default=0)

    @property
    def tall(self) -> list[SlideMetrics]:
        return [s for s in self.slides if s.height > self.height + 1]

    def densest(self) -> SlideMetrics:
        """The slide with the most visible text."""
        return max(self.slides, key=lambda s: s.chars)

    def summary(self) -> str:
        worst = max((c["px"] for _, c in self.clipped), default=0)
        fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
        return (f"{self.deck.name}: {len(self.slides)} slides, body >= {fmt(self.body_min)} px, "
                f"code >= {fmt(self.code_min)} px, {len({(s.h, s.v) for s, _ in self.clipped})} slides "
                f"with clipped code (worst {worst} px), {len(self.tall)} taller than the slide (tallest "
                f"{self.tallest} px of {self.height}), {len(self.splits)} bad code wraps, {len(self.tofu)} missing "
                f"glyphs" + (f", explorer text >= {fmt(self.frame_min)} px" if self.frame_min is not None else "")
                + (f", canvas text >= {fmt(self.canvas_min)} px" if self.canvas_min is not None else "")
                + ("" if self.projector is None else f" (projector mode {'on' if self.projector else 'off'})"))


def bare_fontconfig(folder: Path) -> dict[str, str]:
    """Environment for a Chromium that sees only DejaVu (what a Linux lab PC without CJK or emoji fonts
    has), so a character the decks do not bring their own font for shows as a box, as it would there."""
    folder.mkdir(parents=True, exist_ok=True)
    dirs = [d for d in ("/usr/share/fonts/truetype/dejavu",) if Path(d).is_dir()]
    conf = folder / "fonts.conf"
    conf.write_text(
        '<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig>\n'
        + "".join(f"  <dir>{d}</dir>\n" for d in dirs)
        + f"  <cachedir>{folder / 'cache'}</cachedir>\n</fontconfig>\n")
    return {"FONTCONFIG_FILE": str(conf)}


@contextmanager
def open_browser(profile_dir: Path | None = None, *, bare_fonts: bool = True):
    """A headless Chromium context with the network off (only file:, data:, blob: load).

    Yields ``(context, remote)`` where ``remote`` collects every URL the pages tried to load from
    elsewhere. ``bare_fonts``: Chromium sees only the DejaVu fonts (see :func:`bare_fontconfig`).
    """
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="gpt_lesson_chromium_") as tmp:
        profile = profile_dir or Path(tmp) / "profile"
        env = {**os.environ, **(bare_fontconfig(Path(tmp) / "fonts") if bare_fonts else {})}
        remote: list[str] = []
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                str(profile), executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS, headless=True,
                offline=True, viewport=WINDOW, env=env)

            def route(r):
                if r.request.url.startswith(LOCAL_SCHEMES):
                    r.continue_()
                else:
                    remote.append(r.request.url)
                    r.abort()

            ctx.route("**/*", route)
            try:
                yield ctx, remote
            finally:
                ctx.close()


_READY_JS = ("() => window.require && require.defined('vendor/reveal.js/dist/reveal.js')"
             " && (window.Reveal = require('vendor/reveal.js/dist/reveal.js')).isReady()")


def _open(context, deck: Path, remote: list[str]):
    remote.clear()
    page = context.new_page()
    problems: list[str] = []
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url} ({r.failure})"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None)
    page.goto(Path(deck).resolve().as_uri())
    page.wait_for_function(_READY_JS, timeout=60_000)
    page.evaluate("() => document.fonts.ready")
    return page, problems


def measure_deck(context, deck: Path, remote: list[str] | None = None, *,
                 body_min: float = BODY_MIN_PX, code_min: float = CODE_MIN_PX,
                 projector: bool | None = None) -> DeckMetrics:
    """Open ``deck`` in ``context`` (from :func:`open_browser`) and measure every slide.

    ``projector``: switch the deck's projector mode on or off first (None: measure it as it opens; the
    lecture cut opens with it on)."""
    if projector not in (None, True, False):
        raise TypeError(f"projector must be None, True or False, not {projector!r}")
    remote = remote if remote is not None else []
    page, problems = _open(context, deck, remote)
    try:
        raw = page.evaluate(_MEASURE_JS % {"body_min": body_min, "code_min": code_min, "explorer_min": EXPLORER_MIN_PX,
                                           "projector": "null" if projector is None else str(projector).lower()})
    finally:
        page.close()
    problems += [f"remote: {u}" for u in sorted(set(remote))]
    slides = [SlideMetrics(s["h"], s["v"], s["title"], s["body_min"], s["code_min"], s["small"], s["clipped"],
                           s["chars"], s["height"], s["scale"], s["splits"], s["frames"], s["frame_min"],
                           s["canvas_min"], s["canvas_small"], s["explorers"])
              for s in raw["slides"]]
    return DeckMetrics(Path(deck), slides, raw["tofu"], raw["width"], raw["height"], problems, raw["projector"])


def screenshot_slide(context, deck: Path, h: int, v: int, path: Path) -> Path:
    """A 1280x720 screenshot of slide (h, v) with all its fragments shown."""
    page, _ = _open(context, deck, [])
    try:
        page.evaluate("""([h, v]) => {
          Reveal.configure({transition: 'none', controls: false});
          const s = document.createElement('style');
          s.textContent = '.reveal .slides section .fragment { opacity: 1 !important; visibility: inherit !important; }';
          document.head.appendChild(s);
          Reveal.slide(h, v);
        }""", [h, v])
        page.wait_for_timeout(500)
        page.screenshot(path=str(path))
    finally:
        page.close()
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.slide_metrics", description=__doc__.split("\n\n")[0])
    parser.add_argument("decks", nargs="+", type=Path, help="deck files or folders of decks")
    parser.add_argument("--json", type=Path, help="write every slide's numbers to this file")
    parser.add_argument("--screenshot", type=Path, help="screenshot of the densest slide (one deck only)")
    parser.add_argument("--max-height", action="store_true",
                        help="fail (exit 1) when a slide is taller than the slide height: the lecture cut's rule")
    parser.add_argument("--projector", choices=("on", "off"),
                        help="switch the decks' projector mode (explorers enlarged, key P) on or off before measuring "
                             "(default: as each deck opens; the lecture cut opens with it on); with 'on', fail when "
                             f"an explorer's text is under {EXPLORER_MIN_PX:g} px")
    parser.add_argument("--system-fonts", action="store_true",
                        help="let Chromium use every font of this machine (default: DejaVu only)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    decks = []
    for d in args.decks:
        decks += sorted(p for p in d.glob("*.html") if p.name != "index.html") if d.is_dir() else [d]
    if args.screenshot and len(decks) != 1:
        parser.error("--screenshot needs exactly one deck")
    results = []
    failed = False
    with open_browser(bare_fonts=not args.system_fonts) as (ctx, remote):
        for deck in decks:
            m = measure_deck(ctx, deck, remote, projector=None if args.projector is None else args.projector == "on")
            results.append(m)
            print(m.summary())
            for s, c in m.clipped[:3]:
                print(f"   clipped by {c['px']} px on slide {s.h}/{s.v}: {c['text']!r}")
            for s, t in m.small[:3]:
                print(f"   {t['px']} px {'code' if t['code'] else 'text'} on slide {s.h}/{s.v}: {t['text']!r}")
            for s in m.tall[:3]:
                print(f"   slide {s.h}/{s.v} ({s.title!r}) is {s.height} px high")
            for s, x in m.splits[:3]:
                print(f"   code wrapped {'inside a word' if x['kind'] == 'word' else 'to a lone row'} on slide "
                      f"{s.h}/{s.v}: {x['text']!r}")
            if m.tofu:
                print("   missing glyphs: " + " ".join(f"{t['ch']} ({t['code']})" for t in m.tofu[:20]))
            canvas_small = [(s, t) for s in m.slides for t in s.canvas_small]
            for s, t in canvas_small[:3]:
                print(f"   {t['px']} px canvas text in an explorer on slide {s.h}/{s.v}: {t['text']!r}")
            small_explorer = args.projector == "on" and m.explorer_min is not None and m.explorer_min < EXPLORER_MIN_PX - 0.05
            if small_explorer:
                print(f"   explorer text {m.explorer_min:.1f} px in projector mode, under {EXPLORER_MIN_PX:g} px")
            failed |= bool(m.clipped or m.small or m.tofu or m.problems or m.splits or (args.max_height and m.tall)
                           or small_explorer)
            if args.screenshot:
                s = m.densest()
                screenshot_slide(ctx, deck, s.h, s.v, args.screenshot)
                print(f"densest slide {s.h}/{s.v} ({s.title!r}, {s.chars} characters) -> {args.screenshot}")
    if args.json:
        args.json.write_text(json.dumps([
            {"deck": str(m.deck), "tofu": m.tofu, "problems": m.problems,
             "slides": [s.__dict__ for s in m.slides]} for m in results], indent=1, ensure_ascii=False))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
