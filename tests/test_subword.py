"""Lesson 13's course helpers (gpt_lesson.subword): the split, bits per character, the cached models (trained for
two steps here, into a temporary cache), the Chinese text and the token view."""
from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
import torch

from gpt_lesson import GPT, bpe, subword
from gpt_lesson.data import CharTokenizer
from gpt_lesson.training import evaluate_split


@pytest.fixture(scope="module")
def tok(shakespeare_text):
    return bpe.train(subword.split_text(shakespeare_text)[0], subword.BPE_VOCAB_SIZE)


@pytest.fixture
def quick(monkeypatch, tmp_path):
    """Two training steps instead of 300/410, into an empty cache."""
    monkeypatch.setenv("GPT_LESSON_CACHE", str(tmp_path))
    monkeypatch.setattr(subword, "TRAIN_CONFIG", replace(subword.TRAIN_CONFIG, max_steps=2, eval_interval=2, eval_iters=1,
                                                                    warmup_steps=1))
    monkeypatch.setattr(subword, "CHAR_TRAIN_CONFIG", replace(subword.TRAIN_CONFIG, max_steps=3, eval_interval=3,
                                                              eval_iters=1, warmup_steps=1))
    return tmp_path


def test_split_is_lesson_09s_split_as_text(shakespeare_text):
    train_text, val_text = subword.split_text(shakespeare_text)
    assert train_text + val_text == shakespeare_text and len(train_text) == int(0.9 * len(shakespeare_text))
    with pytest.raises(TypeError, match="text must be a str"):
        subword.split_text(b"bytes")


def test_the_models_have_the_source_sizes():
    assert GPT(subword.BPE_CONFIG).num_parameters() == 286_504
    assert subword.CHAR_CONFIG.vocab_size == 65 and subword.CHAR_CONFIG.n_layer == subword.BPE_CONFIG.n_layer == 3
    assert (subword.TRAIN_CONFIG.max_steps, subword.CHAR_TRAIN_CONFIG.max_steps) == (300, 410)
    assert replace(subword.CHAR_TRAIN_CONFIG, max_steps=300, eval_interval=300) == subword.TRAIN_CONFIG


def test_bits_per_character_is_the_total_loss_in_bits_over_the_characters():
    torch.manual_seed(0)
    text = "the cat sat on the mat. " * 40
    tokenizer = bpe.train(text, 266, special_tokens=[])
    ids = torch.tensor(tokenizer.encode(text))
    model = GPT(266, 16, 2, 1, 8, dropout=0.0)
    T, n = 8, (len(ids) - 1) // 8
    targets = ids[1:n * T + 1].tolist()
    expected = evaluate_split(model, ids) * n * T / math.log(2) / len(tokenizer.decode(targets))
    assert subword.bits_per_character(model, ids, tokenizer.decode) == pytest.approx(expected)
    chars = CharTokenizer(text)
    char_ids = torch.tensor(chars.encode(text))
    char_model = GPT(chars.vocab_size, 16, 2, 1, 8, dropout=0.0)
    # one character per token: bits per character is the mean loss in bits
    assert subword.bits_per_character(char_model, char_ids, chars.decode) == pytest.approx(
        evaluate_split(char_model, char_ids) / math.log(2))
    with pytest.raises(TypeError, match="decode must be a function"):
        subword.bits_per_character(model, ids, "decode")
    with pytest.raises(ValueError, match="ids must have 1 dimensions"):
        subword.bits_per_character(model, ids[None], tokenizer.decode)


@pytest.mark.slow
def test_the_bpe_model_is_trained_once_then_loaded_and_retrained_for_other_merges(quick, tok):
    model, extra = subword.load_bpe_model(tok)
    path = quick / subword.BPE_CHECKPOINT
    assert path.is_file() and extra["tokenizer"] == subword.fingerprint(tok) and len(extra["history"]["step"]) == 2
    stamp = path.stat().st_mtime_ns
    again, extra2 = subword.load_bpe_model(tok)
    assert path.stat().st_mtime_ns == stamp and extra2 == extra  # loaded, not trained
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    assert not again.training
    other = bpe.BPETokenizer(list(tok.merges)[:-1] + [(0, 1)])  # another last merge: another tokenizer
    assert subword.fingerprint(other) != subword.fingerprint(tok)
    with pytest.raises(FileNotFoundError, match="no BPE model made with the current settings and tokenizer"):
        subword.load_bpe_model(other, train_if_missing=False)
    subword.load_bpe_model(other)
    assert path.stat().st_mtime_ns != stamp


@pytest.mark.slow
def test_a_damaged_cached_bpe_model_is_trained_again(quick, tok):
    (quick / subword.BPE_CHECKPOINT).write_bytes(b"not a checkpoint")
    with pytest.warns(UserWarning, match="could not be used"):
        model, extra = subword.load_bpe_model(tok)
    assert model.num_parameters() == 286_504 and subword.load_bpe_model(tok)[1] == extra


def test_load_bpe_model_refuses_a_tokenizer_of_another_size(quick):
    with pytest.raises(ValueError, match="tokenizer.vocab_size=257 does not match the model's vocab_size=1000"):
        subword.load_bpe_model(bpe.BPETokenizer([]))
    with pytest.raises(TypeError, match="tokenizer must be a BPETokenizer"):
        subword.load_bpe_model("gpt2")
    with pytest.raises(TypeError, match="train_if_missing='yes' must be True or False"):
        subword.load_bpe_model(bpe.BPETokenizer([]), train_if_missing="yes")


@pytest.mark.slow
def test_the_character_model_goes_through_lesson_09s_cache(quick):
    model, chars, extra = subword.load_char_model()
    assert (quick / subword.CHAR_CHECKPOINT).is_file() and chars.vocab_size == 65
    assert extra["train_config"]["max_steps"] == 3 and model.config.block_size == 128
    assert subword.load_char_model(train_if_missing=False)[2] == extra


def test_the_chinese_text_is_the_shipped_extract():
    text = subword.course_chinese_text()
    assert len(text) == 73_856 and len(re.findall(r"[\u4e00-\u9fff]", text)) == 40_605
    assert text.startswith("# 01 · 词元与嵌入") and subword.CHINESE_TEXT.parent.name == "corpora"


def test_token_html_tints_each_token_with_its_id_and_bytes():
    tok = bpe.train("ROMEO: the rose by any other name would smell as sweet; the ROMEO of the play. " * 3, 280)
    html = subword.token_html(tok, "<b>ROMEO:</b>\nthe 中", title="a & b")
    ids = tok.encode("<b>ROMEO:</b>\nthe 中")
    assert html.count("<span ") == len(ids) and f"{len(ids)} tokens" in html
    assert "&lt;" in html and "&gt;" in html and "<b>" not in html and "a &amp; b" in html and "↵<br>" in html
    assert f'title="id {ids[0]}, 1 byte"' in html
    assert "\ufffd" in html  # 中 is three byte tokens here: pieces of a character show as U+FFFD
    with pytest.raises(TypeError, match="tokenizer must be a BPETokenizer"):
        subword.token_html(CharTokenizer("abc"), "abc")
