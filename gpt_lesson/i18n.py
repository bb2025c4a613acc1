"""The language of what the course prints: exercise feedback, explorer labels and read-outs.

Every learner-facing message goes through :func:`_` (gettext's usual name), written as a
template with named fields and formatted *after* translation::

    print(_("expected shape {expected}, got {got}").format(expected=..., got=...))

never as an f-string inside ``_()`` (the catalogue would not find it). English is the
source language; :func:`set_language` switches a notebook to another one.
"""
from __future__ import annotations

import os

__all__ = ["LANGUAGES", "LANG_ENV", "set_language", "get_language", "_"]

LANGUAGES = ("en", "zh")
LANG_ENV = "GPT_LESSON_LANG"

_state = {"language": "en"}


def set_language(language: str) -> None:
    """Print feedback in ``language`` ("en" or "zh") from now on."""
    if language not in LANGUAGES:
        raise ValueError(f"language={language!r} is not one of {LANGUAGES}")
    _state["language"] = language


def get_language() -> str:
    return _state["language"]


def _(message: str) -> str:
    """``message`` in the current language (English until the catalogues exist)."""
    return message


_env = os.environ.get(LANG_ENV)
if _env in LANGUAGES:
    _state["language"] = _env
