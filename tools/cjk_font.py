"""Build the Chinese font the figures use: a subset of Noto Sans SC as one TrueType file.

matplotlib's default font, DejaVu Sans, has no Chinese glyphs, and a figure must not show empty boxes
on a machine without a system CJK font. The package therefore ships one, ``gpt_lesson/fonts/``:
the characters of the Chinese edition (the message catalogue, the Chinese notebooks), GB 2312's
3,755 level-1 hanzi (the common ones, for a learner's own labels), CJK and fullwidth punctuation,
Latin-1 and general punctuation, drawn from Google's Noto Sans SC (SIL Open Font License 1.1) as
Fontsource packs it for npm, the same pinned package the slide decks use (``tools/slides.py``).

Fontsource ships the font as ~100 unicode-range chunks (WOFF, zlib); this script reads the chunks,
takes each wanted character's outline (composites decomposed, no hinting, no layout tables: matplotlib
does not shape Chinese text) and writes one TTF, with the licence text and a manifest (source package
and integrity, character count, sha256) beside it::

    python -m tools.cjk_font build            # npm pack (npm's cache first), check the pin, write the font
    python -m tools.cjk_font build --tarball fontsource-noto-sans-sc-5.3.0.tgz
    python -m tools.cjk_font check            # the shipped file covers every character the edition uses

Run ``build`` again when ``check`` (or tests/test_cjk_font.py) reports a character the catalogue or a
Chinese notebook now uses and the font lacks. The output is byte-for-byte reproducible.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FONT_DIR = ROOT / "gpt_lesson" / "fonts"
FONT_FILE = FONT_DIR / "NotoSansSC-Subset.ttf"
LICENSE_FILE = FONT_DIR / "OFL.txt"
MANIFEST_FILE = FONT_DIR / "MANIFEST.json"
CATALOGUE = ROOT / "gpt_lesson" / "locale" / "zh" / "LC_MESSAGES" / "gpt_lesson.po"
ZH_NOTEBOOKS = ROOT / "notebooks" / "zh"
PACKAGE = "@fontsource/noto-sans-sc"
FAMILY = "Noto Sans SC Subset"  # not "Noto Sans SC": an installed full font must not be taken for this one

# Always in the font, whatever the texts use: printable ASCII and Latin-1, general punctuation
# (dashes, quotes, ellipsis, per mille), arrows, CJK symbols and punctuation, fullwidth forms.
BASE_RANGES = ((0x20, 0x7E), (0xA0, 0xFF), (0x2010, 0x2027), (0x2030, 0x203A), (0x2190, 0x2199),
               (0x3000, 0x303F), (0xFF01, 0xFF5E), (0xFFE0, 0xFFE6))


def gb2312_level1() -> set[str]:
    """The 3,755 hanzi of GB 2312 level 1 (rows 16-55), the common characters of simplified Chinese."""
    chars = set()
    for hi in range(0xB0, 0xD8):
        for lo in range(0xA1, 0xFF):
            try:
                chars.add(bytes([hi, lo]).decode("gb2312"))
            except UnicodeDecodeError:
                pass  # row 55 ends at 0xD7F9
    return chars


def catalogue_texts(path: Path = CATALOGUE) -> list[str]:
    """Every translation of the Chinese catalogue (what labels, titles and messages show in Chinese)."""
    from babel.messages.pofile import read_po

    with open(path, "rb") as f:
        catalog = read_po(f, locale="zh")
    texts = []
    for message in catalog:
        if message.id:
            strings = message.string if isinstance(message.string, (list, tuple)) else [message.string]
            texts.extend(s for s in strings if s)
    return texts


def catalogue_characters(path: Path = CATALOGUE) -> set[str]:
    """Every character of the Chinese catalogue's translations."""
    return set("".join(catalogue_texts(path)))


def notebook_characters(folder: Path = ZH_NOTEBOOKS, cell_type: str = "code") -> set[str]:
    """Every character of the Chinese notebooks' cells of ``cell_type`` (code: the figures' strings)."""
    chars: set[str] = set()
    for path in sorted(folder.glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == cell_type:
                chars.update("".join(cell["source"]))
    return chars


# Printed by the checks and never drawn in a figure: emoji that neither DejaVu Sans nor Noto Sans SC has
# (a notebook's output shows them in the browser's emoji font).
PRINTED_ONLY = frozenset("✅❌⏳🙂")


def required_characters() -> set[str]:
    """What a Chinese figure may draw: the catalogue's translations and the Chinese notebooks' code
    (every string a figure is labelled with), without control characters and :data:`PRINTED_ONLY`."""
    return {c for c in catalogue_characters() | notebook_characters() if c.isprintable()} - PRINTED_ONLY


def wanted_characters() -> set[str]:
    """The font's characters: the base ranges, GB 2312 level 1, what the edition uses, and the hanzi of
    the Chinese notebooks' prose (so a label copied from the text is covered too)."""
    chars = {chr(c) for lo, hi in BASE_RANGES for c in range(lo, hi + 1)}
    chars |= gb2312_level1() | required_characters()
    chars |= {c for c in notebook_characters(cell_type="markdown") if "\u4e00" <= c <= "\u9fff"}
    return chars


def _pin() -> tuple[str, str]:
    from tools.slides import VENDOR_PACKAGES

    return VENDOR_PACKAGES[PACKAGE]


def fetch_tarball(dest: Path, timeout: float = 600.0) -> Path:
    """``npm pack`` the pinned Fontsource package into ``dest`` and check its sha512 against the pin."""
    from tools.slides import _npm_pack

    version, _integrity = _pin()
    _npm_pack([f"{PACKAGE}@{version}"], dest, timeout)
    tarball = dest / f"fontsource-noto-sans-sc-{version}.tgz"
    return check_tarball(tarball)


def check_tarball(tarball: Path) -> Path:
    from tools.slides import _integrity

    version, integrity = _pin()
    if not tarball.is_file():
        raise FileNotFoundError(f"no {tarball}: expected npm's tarball of {PACKAGE}@{version}")
    if _integrity(tarball) != integrity:
        raise ValueError(f"{tarball.name} does not match the pinned integrity of {PACKAGE}@{version} "
                         f"(tools/slides.py VENDOR_PACKAGES): got {_integrity(tarball)[:30]}...")
    return tarball


def _chunks(tarball: Path):
    """(name, TTFont) of every regular-weight WOFF chunk in the tarball, and the licence text."""
    from fontTools.ttLib import TTFont

    fonts, license_text = [], None
    with tarfile.open(tarball, "r:gz") as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            name = member.name.split("/", 1)[-1]
            if name == "LICENSE":
                license_text = tar.extractfile(member).read().decode("utf-8")
            elif name.startswith("files/") and name.endswith("-400-normal.woff"):
                fonts.append((name, TTFont(io.BytesIO(tar.extractfile(member).read()))))
    if not fonts or license_text is None:
        raise ValueError(f"{tarball.name} has no files/*-400-normal.woff or no LICENSE: has the layout changed?")
    return fonts, license_text


def build_font(tarball: Path, chars: set[str]) -> tuple[bytes, str, list[str]]:
    """The subset font as TTF bytes, the licence text, and the wanted characters Noto Sans SC lacks."""
    from fontTools.fontBuilder import FontBuilder
    from fontTools.pens.recordingPen import DecomposingRecordingPen
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    fonts, license_text = _chunks(tarball)
    source: dict[int, tuple[object, str]] = {}  # code point -> (font, glyph name), first chunk wins
    for _, font in fonts:
        for cp, glyph in font.getBestCmap().items():
            source.setdefault(cp, (font, glyph))
    first = fonts[0][1]
    order, cmap, glyphs, metrics = [".notdef"], {}, {}, {}
    notdef = TTGlyphPen(None)
    glyphs[".notdef"], metrics[".notdef"] = notdef.glyph(), (first["hmtx"][".notdef"][0], 0)
    missing = []
    for cp in sorted(ord(c) for c in chars):
        if cp not in source:
            missing.append(chr(cp))
            continue
        font, name = source[cp]
        gname = f"uni{cp:04X}" if cp <= 0xFFFF else f"u{cp:05X}"
        rec = DecomposingRecordingPen(font.getGlyphSet())
        font.getGlyphSet()[name].draw(rec)
        pen = TTGlyphPen(None)
        rec.replay(pen)
        glyph = pen.glyph()
        glyph.recalcBounds(None)
        order.append(gname)
        cmap[cp] = gname
        glyphs[gname] = glyph
        metrics[gname] = (font["hmtx"][name][0], getattr(glyph, "xMin", 0))
    fb = FontBuilder(first["head"].unitsPerEm, isTTF=True)
    fb.font.recalcTimestamp = False
    fb.setupGlyphOrder(order)
    fb.setupCharacterMap(cmap)
    fb.setupGlyf(glyphs)
    fb.setupHorizontalMetrics(metrics)
    hhea = first["hhea"]
    fb.setupHorizontalHeader(ascent=hhea.ascent, descent=hhea.descent)
    version = _pin()[0]
    fb.setupNameTable({
        "copyright": first["name"].getDebugName(0) or "Copyright Google Inc.",
        "familyName": FAMILY, "styleName": "Regular",
        "uniqueFontIdentifier": f"{FAMILY} Regular; {PACKAGE} {version}; gpt-lesson tools/cjk_font.py",
        "fullName": f"{FAMILY} Regular", "psName": FAMILY.replace(" ", "") + "-Regular",
        "version": f"Version {version}",
        "licenseDescription": "This Font Software is licensed under the SIL Open Font License, Version 1.1.",
        "licenseInfoURL": "https://openfontlicense.org",
        "description": f"A subset of Noto Sans SC ({len(cmap)} characters) for gpt-lesson's Chinese figures.",
    })
    os2 = first["OS/2"]
    fb.setupOS2(sTypoAscender=os2.sTypoAscender, sTypoDescender=os2.sTypoDescender,
                sTypoLineGap=os2.sTypoLineGap, usWinAscent=os2.usWinAscent, usWinDescent=os2.usWinDescent,
                usWeightClass=400, achVendID=os2.achVendID, fsType=0)
    fb.setupPost(keepGlyphNames=False)
    fb.font["head"].created = fb.font["head"].modified = first["head"].created
    buf = io.BytesIO()
    fb.save(buf)
    return buf.getvalue(), license_text, missing


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(tarball: Path | None = None) -> dict:
    """Write the font, its licence and its manifest into ``gpt_lesson/fonts``; returns the manifest."""
    with tempfile.TemporaryDirectory() as tmp:
        tarball = check_tarball(tarball) if tarball else fetch_tarball(Path(tmp))
        chars = wanted_characters()
        data, license_text, missing = build_font(tarball, chars)
    FONT_DIR.mkdir(parents=True, exist_ok=True)
    FONT_FILE.write_bytes(data)
    LICENSE_FILE.write_text(license_text, encoding="utf-8")
    version, integrity = _pin()
    manifest = {
        "file": FONT_FILE.name, "family": FAMILY, "source": f"{PACKAGE}@{version}", "integrity": integrity,
        "license": "SIL Open Font License 1.1 (OFL.txt)", "characters": len(chars) - len(missing),
        "not_in_noto_sans_sc": "".join(missing), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
        "built_by": "python -m tools.cjk_font build",
    }
    MANIFEST_FILE.write_text(json.dumps(manifest, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return manifest


def uncovered(chars: set[str]) -> list[str]:
    """The characters of ``chars`` that neither DejaVu Sans (matplotlib's default) nor the shipped font has."""
    from fontTools.ttLib import TTFont
    from matplotlib import font_manager

    dejavu = TTFont(font_manager.findfont("DejaVu Sans", fallback_to_default=False)).getBestCmap()
    ours = TTFont(FONT_FILE).getBestCmap()
    return sorted(c for c in chars if ord(c) not in dejavu and ord(c) not in ours)


def check() -> list[str]:
    """Problems with the shipped font: a changed file (sha256) or a character the edition uses that it lacks."""
    problems = []
    manifest = json.loads(MANIFEST_FILE.read_text(encoding="utf-8"))
    if sha256(FONT_FILE) != manifest["sha256"]:
        problems.append(f"{FONT_FILE.name}: sha256 {sha256(FONT_FILE)} is not the manifest's {manifest['sha256']}")
    gaps = uncovered(required_characters())
    if gaps:
        problems.append(f"{len(gaps)} characters of the catalogue or the Chinese notebooks are in no font: "
                        f"{''.join(gaps)!r} ({', '.join(f'U+{ord(c):04X}' for c in gaps[:20])}); "
                        "run `python -m tools.cjk_font build`")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.cjk_font", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write gpt_lesson/fonts/ from the pinned Fontsource package")
    b.add_argument("--tarball", type=Path, help="npm's tarball of the package (else npm pack fetches it)")
    sub.add_parser("check", help="the shipped font is intact and covers the edition's characters")
    args = parser.parse_args(argv)
    if args.command == "build":
        m = build(args.tarball)
        print(f"{FONT_FILE.relative_to(ROOT)}: {m['characters']} characters, {m['bytes']:,} bytes, "
              f"sha256 {m['sha256'][:16]}...; not in Noto Sans SC: {m['not_in_noto_sans_sc']!r}")
        return 0
    problems = check()
    for p in problems:
        print(p)
    print(f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
