"""Feedback in two languages: every learner-facing message of the package (checks, explorers, warnings)
has a Chinese translation in gpt_lesson/locale/zh/LC_MESSAGES/gpt_lesson.po, with the same {fields};
set_language switches what the checks print."""
from __future__ import annotations

import subprocess
import sys

import pytest

import gpt_lesson
from gpt_lesson import checks
from gpt_lesson.i18n import (
    LANG_ENV,
    _,
    _language_from_environment,
    get_language,
    normalize_language,
    set_language,
    translations,
)
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


LOCALE_FORMS = [("zh", "zh"), ("ZH", "zh"), ("zh_CN", "zh"), ("zh-CN", "zh"), ("zh_CN.UTF-8", "zh"),
                ("zh_CN.utf8", "zh"), ("zh_Hans", "zh"), ("zh-Hans-CN", "zh"), ("zh_TW", "zh"), ("zh_CN@pinyin", "zh"),
                (" zh_CN ", "zh"), ("en", "en"), ("EN", "en"), ("en_US", "en"), ("en-GB", "en"),
                ("en_US.UTF-8", "en"), ("En_us", "en")]
NOT_LANGUAGES = ["fr", "fr_FR.UTF-8", "", "  ", "C", "POSIX", "chinese", "z", "zh__CN", "zh CN", "zh_CN.", "zh/CN",
                 "en_US.UTF-8.x", "../zh"]


@pytest.mark.parametrize("form, code", LOCALE_FORMS)
def test_locale_forms_name_the_language(form, code):
    assert normalize_language(form) == code
    set_language(form)
    assert get_language() == code
    assert _language_from_environment({LANG_ENV: form}) == code


@pytest.mark.parametrize("value", NOT_LANGUAGES)
def test_an_unknown_language_is_refused_naming_the_value_and_the_forms(value):
    with pytest.raises(ValueError, match=rf"language={value!r} is not one of \('en', 'zh'\): give a language code "
                                         r"or a locale name of one \(zh, zh_CN, zh-CN, zh_CN.UTF-8"):
        set_language(value)
    assert get_language() == "en"
    with pytest.raises(TypeError, match="language"):
        normalize_language(None)


@pytest.mark.parametrize("value", [v for v in NOT_LANGUAGES if v.strip()])
def test_an_unknown_gpt_lesson_lang_warns_and_gives_english(value):
    with pytest.warns(UserWarning, match=rf"GPT_LESSON_LANG={value!r} names no language of the course, which "
                                         r"speaks \('en', 'zh'\): set it to .*zh_CN.UTF-8.* Printing in English"):
        assert _language_from_environment({LANG_ENV: value}) == "en"


def test_an_unset_or_empty_gpt_lesson_lang_is_english(recwarn):
    assert _language_from_environment({}) == "en"
    assert _language_from_environment({LANG_ENV: " "}) == "en"
    assert not recwarn.list


def test_gpt_lesson_lang_is_read_at_import():
    code = "import gpt_lesson; print(gpt_lesson.get_language())"
    env = {"PATH": "/usr/bin:/bin", LANG_ENV: "zh_CN.UTF-8"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "zh", run.stderr
    env[LANG_ENV] = "de_DE"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "en", run.stderr
    assert "GPT_LESSON_LANG='de_DE' names no language of the course" in run.stderr


def test_fields_of_a_template():
    assert fields("expected {expected}, got {got:.3f} ({name!r})") == {"expected", "got", "name"}
    assert fields("a literal {{brace}}") == set()


def test_extraction_finds_the_checks_messages():
    ids = {m.id for m in extract() if m.id}
    assert checks.NOT_ATTEMPTED in ids and checks.NO_SCALING in ids
    assert len(ids) > 100


@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_train_ddp_reports_in_the_language_of_gpt_lesson_lang(tmp_path, lang):
    """A notebook launches train_ddp as a subprocess: GPT_LESSON_LANG in its environment picks the language."""
    import os

    text = tmp_path / "text.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 40, encoding="utf-8")
    args = ["--data", str(text), "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
            "--batch-size", "8", "--micro-batch-size", "4", "--max-steps", "4", "--eval-interval", "2",
            "--eval-iters", "1", "--no-progress", "--checkpoint", str(tmp_path / "c.pt")]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update({LANG_ENV: lang, "OMP_NUM_THREADS": "1"})
    run = subprocess.run([sys.executable, "-m", "gpt_lesson.train_ddp", *args], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    if lang == "zh":
        assert "world_size=1 backend=无（单进程） device=cpu" in run.stdout
        assert "全局批次 8 行 = 1 个进程 × 2 个微批次 × 4 行；" in run.stdout
        assert "第 4 步：训练损失 " in run.stdout and "；每步耗时中位数 " in run.stdout
        assert f"检查点已写入 {tmp_path / 'c.pt'}" in run.stdout
        assert not any(w in run.stdout for w in ("global batch", "train loss", "median step", "checkpoint written"))
    else:
        assert "world_size=1 backend=none (one process) device=cpu" in run.stdout
        assert "global batch 8 rows = 1 rank(s) x 2 micro-batch(es) x 4 rows;" in run.stdout
        assert "step 4: train loss " in run.stdout and f"checkpoint written to {tmp_path / 'c.pt'}" in run.stdout


@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
def test_train_ddp_injected_failure_speaks_the_language_of_gpt_lesson_lang(tmp_path):
    """Lesson 12 prints the crashed rank's message: in the Chinese edition it is Chinese (the class name stays)."""
    import os

    text = tmp_path / "text.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 40, encoding="utf-8")
    args = ["--data", str(text), "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
            "--batch-size", "8", "--max-steps", "4", "--eval-interval", "2", "--eval-iters", "1", "--no-progress",
            "--fail-at-step", "2", "--fail-rank", "0"]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update({LANG_ENV: "zh", "OMP_NUM_THREADS": "1"})
    run = subprocess.run([sys.executable, "-m", "gpt_lesson.train_ddp", *args], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode != 0
    assert "InjectedFailure: 进程 0：第 2 步之后按 --fail-at-step 注入的故障" in run.stderr, run.stderr[-2000:]
    assert "injected failure after step 2" not in run.stderr  # (the traceback quotes the source line)


def test_display_width_and_ljust_count_a_chinese_character_as_two_columns():
    from gpt_lesson.i18n import display_width, ljust

    assert display_width("GPT-2 small") == 11 and display_width("本课的模型") == 10 and display_width("（8 块）") == 8
    assert ljust("本课的模型", 12) == "本课的模型  " and ljust("our model", 12) == "our model   "
    assert ljust("our model", 12) == f"{'our model':12s}"  # the English table prints as before
    assert ljust("GPT-2 small and more", 12) == "GPT-2 small and more"  # too long: left as it is
    with pytest.raises(ValueError, match=r"width=-1 must be >= 0"):
        ljust("x", -1)
    with pytest.raises(TypeError, match=r"width=True must be an integer"):
        ljust("x", True)
    with pytest.raises(TypeError, match=r"text must be a str, got int"):
        display_width(3)
