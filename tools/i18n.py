"""Keep the message catalogues in step with the code (Babel's extraction, gettext's .po format).

    python -m tools.i18n extract     # write gpt_lesson/locale/gpt_lesson.pot from every _("...") in the package
    python -m tools.i18n update      # merge the template into each language's .po (new messages untranslated)
    python -m tools.i18n check       # exit 1 if a message has no translation, a stale one, or other {fields}

``tests/test_i18n.py`` runs the check in CI, so a diagnosis added in English without its Chinese
translation fails the tests.
"""
from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po, write_po

from gpt_lesson.i18n import DOMAIN, LANGUAGES, LOCALE_DIR, catalogue_path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpt_lesson"
TEMPLATE = LOCALE_DIR / f"{DOMAIN}.pot"
FIXED_DATE = datetime(2026, 1, 1, tzinfo=timezone.utc)  # no date churn in the files on every run
FIELD_RE = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)(?:[!:][^{}]*)?\}(?!\})")

__all__ = ["extract", "update", "problems", "fields"]


def extract() -> Catalog:
    """Every ``_("...")`` message in the package's Python files, with where it comes from."""
    catalog = Catalog(project="gpt-lesson", domain=DOMAIN, charset="utf-8", fuzzy=False, version=None,
                      copyright_holder="the gpt-lesson contributors", creation_date=FIXED_DATE,
                      revision_date=FIXED_DATE)
    for filename, lineno, message, comments, context in extract_from_dir(
            str(PACKAGE), method_map=[("**.py", "python")], keywords={"_": None, "N_": None, "C_": ((1, "c"), 2)}, comment_tags=("TRANSLATORS:",)):
        catalog.add(message, locations=[(f"gpt_lesson/{filename}", lineno)], auto_comments=comments, context=context)
    return catalog


def _write(catalog: Catalog, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        write_po(f, catalog, width=100, sort_output=False, omit_header=False, include_previous=False)


def _read(path: Path, language: str | None = None) -> Catalog:
    with open(path, "rb") as f:
        return read_po(f, locale=language)


def update() -> None:
    template = extract()
    _write(template, TEMPLATE)
    for language in LANGUAGES:
        if language == "en":
            continue
        path = catalogue_path(language)
        catalog = _read(path, language) if path.is_file() else Catalog(locale=language, domain=DOMAIN)
        catalog.update(template, no_fuzzy_matching=True)
        _write(catalog, path)


def fields(message: str) -> set[str]:
    """The named ``{fields}`` of a format template."""
    return set(FIELD_RE.findall(message))


def problems(language: str) -> list[str]:
    """What is wrong with ``language``'s catalogue against the code's messages."""
    out = []
    path = catalogue_path(language)
    if not path.is_file():
        return [f"no catalogue at {path.relative_to(ROOT)}: run python -m tools.i18n update"]
    catalog = _read(path, language)
    # a message is its text and its context (msgctxt): C_("mask", "none") and C_("scaling", "none") are two
    wanted = {(m.id, m.context or "") for m in extract() if m.id}
    have = {(m.id, m.context or ""): m for m in catalog if m.id}
    for key in sorted(wanted - set(have)):
        out.append(f"missing from {language}: {_name(key)} (run python -m tools.i18n update, then translate)")
    for key in sorted(wanted & set(have)):
        message, msgid = have[key], key[0]
        if not message.string:
            out.append(f"untranslated in {language}: {_name(key)}")
        elif message.fuzzy:
            out.append(f"fuzzy (unchecked) in {language}: {_name(key)}")
        elif fields(message.string) != fields(msgid):
            out.append(f"{language} translation of {_name(key)} has fields {sorted(fields(message.string))}, "
                       f"the English has {sorted(fields(msgid))}")
    for key in sorted(set(have) - wanted):
        out.append(f"stale in {language} (no longer in the code): {_name(key)}")
    return out


def _name(key: tuple[str, str]) -> str:
    msgid, context = key
    return f"{msgid!r} (msgctxt {context!r})" if context else repr(msgid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("extract", "update", "check"))
    args = parser.parse_args(argv)
    if args.command == "extract":
        _write(extract(), TEMPLATE)
        print(f"wrote {TEMPLATE.relative_to(ROOT)}")
        return 0
    if args.command == "update":
        update()
        print("updated", ", ".join(str(catalogue_path(lang).relative_to(ROOT)) for lang in LANGUAGES if lang != "en"))
        return 0
    found = [p for lang in LANGUAGES if lang != "en" for p in problems(lang)]
    for p in found:
        print(p)
    print(f"{len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
