"""The language of what the course prints: exercise feedback, explorer labels and read-outs.

Every learner-facing message goes through :func:`_` (gettext's usual name), written as a
template with named fields and formatted *after* translation::

    print(_("expected shape {expected}, got {got}").format(expected=..., got=...))

never as an f-string inside ``_()`` (the catalogue would not find it). English is the source
language. The translations are gettext catalogues kept as text in the repository,
``gpt_lesson/locale/<lang>/LC_MESSAGES/gpt_lesson.po``; on first use of a language its catalogue
is compiled in memory with Babel (the tool that extracts the messages too, see
``tools/i18n.py``) and served through Python's standard :mod:`gettext`.

Choose the language per notebook with :func:`set_language` (``set_language("zh")``) or for a
whole session with the environment variable ``GPT_LESSON_LANG=zh``. Both take a language code or a
locale name of one, in any case: ``zh``, ``zh_CN``, ``zh-CN``, ``zh_CN.UTF-8``, ``zh_Hans``, ``ZH``,
``en_US.UTF-8`` (only the language part decides, as gettext falls back from ``zh_TW`` to ``zh``).
A value of ``GPT_LESSON_LANG`` that names no language of the course gives a warning that names the
variable, the value and the accepted forms, and the course speaks English.

Figures follow the language too. matplotlib's default font, DejaVu Sans, has no Chinese glyphs, so
the package ships a subset of Noto Sans SC (``fonts/``, SIL Open Font License, built by
``tools/cjk_font.py``). Choosing Chinese registers it with matplotlib and appends its family to
``rcParams["font.family"]``: DejaVu Sans still draws every Latin letter, digit and formula, and
matplotlib's per-glyph fallback takes each Chinese character from the bundled font, whatever fonts
the machine has. Choosing English again restores ``font.family``, so English figures are drawn as
they always were.
"""
from __future__ import annotations

import gettext
import io
import os
import re
import unicodedata
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .validation import check_instance, check_int

__all__ = ["LANGUAGES", "LANG_ENV", "DOMAIN", "LOCALE_DIR", "CJK_FONT", "CJK_FAMILY", "set_language", "get_language",
           "language", "normalize_language", "catalogue_path", "translations", "use_figure_fonts", "_", "N_", "C_",
           "display_width", "ljust"]

LANGUAGES = ("en", "zh")
LANG_ENV = "GPT_LESSON_LANG"
DOMAIN = "gpt_lesson"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
CJK_FONT = Path(__file__).resolve().parent / "fonts" / "NotoSansSC-Subset.ttf"
CJK_FAMILY = "Noto Sans SC Subset"  # the family name inside CJK_FONT (tools/cjk_font.py: FAMILY)

_state: dict[str, object] = {"language": "en"}
_cache: dict[str, gettext.NullTranslations] = {}
# What use_figure_fonts changed: the font.family it replaced and the one it set (None: nothing to undo).
_fonts: dict[str, object] = {"registered": False, "replaced": None, "set": None}
# language[_Script][_REGION][.encoding][@modifier], "-" or "_" between the parts (BCP 47 or POSIX)
_LOCALE_RE = re.compile(r"([A-Za-z]{2,3})(?:[-_][A-Za-z0-9]{1,8})*(?:\.[A-Za-z0-9_-]+)?(?:@[A-Za-z0-9_-]+)?")
_ACCEPTED = "a language code or a locale name of one (zh, zh_CN, zh-CN, zh_CN.UTF-8, zh_Hans, en_US, EN)"


def normalize_language(language: str) -> str:
    """The course's code for ``language``: "zh" for zh, zh_CN, zh-CN, zh_CN.UTF-8, zh_Hans or ZH, "en" for
    en, en_US, en-GB, en_US.UTF-8 or EN; a ``ValueError`` names any other value and the accepted ones."""
    check_instance("language", language, str)
    m = _LOCALE_RE.fullmatch(language.strip())
    if m is None or m.group(1).lower() not in LANGUAGES:
        raise ValueError(f"language={language!r} is not one of {LANGUAGES}: give {_ACCEPTED}")
    return m.group(1).lower()


def catalogue_path(language: str) -> Path:
    """The ``.po`` file that holds ``language``'s translations."""
    return LOCALE_DIR / language / "LC_MESSAGES" / f"{DOMAIN}.po"


def translations(language: str) -> gettext.NullTranslations:
    """The gettext translations of ``language`` (English: the messages as written)."""
    language = normalize_language(language)
    if language == "en":
        return gettext.NullTranslations()
    if language not in _cache:
        path = catalogue_path(language)
        if not path.is_file():
            raise FileNotFoundError(f"no message catalogue for language={language!r} at {path}")
        from babel.messages.mofile import write_mo
        from babel.messages.pofile import read_po

        with open(path, "rb") as f:
            catalog = read_po(f, locale=language)
        buffer = io.BytesIO()
        write_mo(buffer, catalog)  # fuzzy entries are left out, as msgfmt does
        buffer.seek(0)
        _cache[language] = gettext.GNUTranslations(buffer)
    return _cache[language]


def set_language(language: str) -> None:
    """Print feedback and label the explorers in ``language`` ("en" or "zh", or a locale name such as
    "zh_CN.UTF-8") from now on."""
    language = normalize_language(language)
    translations(language)  # fails early on a missing catalogue
    _state["language"] = language
    use_figure_fonts(language)


def use_figure_fonts(language: str) -> None:
    """Make matplotlib able to draw ``language``: for "zh", register the bundled Chinese font and append
    its family to ``rcParams["font.family"]`` (DejaVu Sans stays first, for Latin text and numbers);
    for "en", put back the ``font.family`` that "zh" replaced, if nobody changed it since.

    :func:`set_language` calls this; English never imports matplotlib for it.
    """
    language = normalize_language(language)
    if language == "en" and _fonts["set"] is None:
        return
    import matplotlib
    from matplotlib import font_manager

    rc = matplotlib.rcParams
    if language == "zh":
        if not _fonts["registered"]:
            if not CJK_FONT.is_file():
                raise FileNotFoundError(f"the Chinese figure font is missing at {CJK_FONT}: reinstall gpt_lesson "
                                        "or rebuild it with `python -m tools.cjk_font build`")
            font_manager.fontManager.addfont(str(CJK_FONT))
            _fonts["registered"] = True
        family = list(rc["font.family"])
        if CJK_FAMILY not in family:
            _fonts["replaced"], _fonts["set"] = family, [*family, CJK_FAMILY]
            rc["font.family"] = _fonts["set"]
    else:
        if list(rc["font.family"]) == _fonts["set"]:
            rc["font.family"] = _fonts["replaced"]
        _fonts["replaced"] = _fonts["set"] = None


def get_language() -> str:
    return str(_state["language"])


@contextmanager
def language(lang: str) -> Iterator[None]:
    """Use ``lang`` inside the block, then the previous language again."""
    previous = get_language()
    set_language(lang)
    try:
        yield
    finally:
        _state["language"] = previous
        use_figure_fonts(previous)


def N_(message: str) -> str:
    """Mark a template for the catalogue without translating it yet (gettext_noop): translate it with
    :func:`_` where it is shown, so a label table can be built once at import time."""
    return message


def _(message: str) -> str:
    """``message`` in the current language (the English text itself when no translation exists)."""
    language = _state["language"]
    if language == "en":
        return message
    return translations(str(language)).gettext(message)


def C_(context: str, message: str) -> str:
    """``message`` in the current language, translated in ``context`` (gettext's pgettext, the catalogue's
    msgctxt): for one English word that needs two translations, as the mask's "none" and the scaling's."""
    language = _state["language"]
    if language == "en":
        return message
    return translations(str(language)).pgettext(context, message)


def display_width(text: str) -> int:
    """How many terminal columns ``text`` takes: 2 for a wide or full-width character (汉字, "，"), 1 otherwise."""
    check_instance("text", text, str)
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def ljust(text: str, width: int) -> str:
    """``text`` padded with spaces on the right to ``width`` columns (as ``str.ljust``, counting a Chinese
    character as two columns), so a printed table lines up in both languages; longer text is left as it is."""
    check_instance("text", text, str)
    check_int("width", width, minimum=0)
    return text + " " * max(0, width - display_width(text))


def _language_from_environment(environ: dict[str, str] | os._Environ = os.environ) -> str:
    """The language ``GPT_LESSON_LANG`` asks for ("en" when it is unset or empty); an unknown value
    warns, naming the variable, the value and the accepted forms, and gives English."""
    value = environ.get(LANG_ENV, "")
    if not value.strip():
        return "en"
    try:
        return normalize_language(value)
    except ValueError:
        warnings.warn(f"{LANG_ENV}={value!r} names no language of the course, which speaks {LANGUAGES}: "
                      f"set it to {_ACCEPTED}. Printing in English.", UserWarning, stacklevel=2)
        return "en"


_state["language"] = _language_from_environment()
use_figure_fonts(str(_state["language"]))
