"""Feedback in two languages: every learner-facing message of the package (checks, explorers, warnings)
has a Chinese translation in gpt_lesson/locale/zh/LC_MESSAGES/gpt_lesson.po, with the same {fields};
set_language switches what the checks print."""
from __future__ import annotations

import pytest

import gpt_lesson
from gpt_lesson import checks
from gpt_lesson.i18n import _, get_language, set_language, translations
from tools.i18n import extract, fields, problems


@pytest.fixture(autouse=True)
def english_afterwards():
    yield
    set_language("en")


def test_every_message_has_a_current_chinese_translation():
    found = problems("zh")
    assert not found, f"{len(found)} catalogue problem(s) (python -m tools.i18n update, then translate):\n  " + \
        "\n  ".join(found[:40])


def test_every_diagnosis_label_is_translated():
    zh = translations("zh")
    labels = [v for k, v in vars(checks).items() if k.isupper() and isinstance(v, str)]
    assert len(labels) > 30
    untranslated = [label for label in labels if zh.gettext(label) == label]
    assert not untranslated, f"labels without a Chinese translation: {untranslated}"


def test_set_language_switches_the_checks_feedback(capsys):
    def stub(q, k):
        raise NotImplementedError

    set_language("zh")
    assert get_language() == "zh"
    res = checks.check_attention_scores(stub)
    out = capsys.readouterr().out
    assert not res.attempted
    assert _(checks.NOT_ATTEMPTED) in out and _(checks.NOT_ATTEMPTED) != checks.NOT_ATTEMPTED
    assert any("\u4e00" <= ch <= "\u9fff" for ch in out)

    def no_scale(q, k):
        return q @ k.transpose(-2, -1)

    res = checks.check_attention_scores(no_scale)
    out = capsys.readouterr().out
    assert res.diagnosis == checks.NO_SCALING  # the label stays a stable English identifier
    assert translations("zh").gettext(checks.NO_SCALING) in out

    set_language("en")
    checks.check_attention_scores(no_scale)
    assert checks.NO_SCALING in capsys.readouterr().out


def test_language_is_validated_and_exported():
    with pytest.raises(ValueError, match="language='fr' is not one of"):
        set_language("fr")
    assert gpt_lesson.set_language is set_language


def test_fields_of_a_template():
    assert fields("expected {expected}, got {got:.3f} ({name!r})") == {"expected", "got", "name"}
    assert fields("a literal {{brace}}") == set()


def test_extraction_finds_the_checks_messages():
    ids = {m.id for m in extract() if m.id}
    assert checks.NOT_ATTEMPTED in ids and checks.NO_SCALING in ids
    assert len(ids) > 100
