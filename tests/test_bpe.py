"""Byte-level BPE (gpt_lesson.bpe): the algorithm on hand-checked inputs, the incremental trainer against the
textbook one, GPT-2's tokenizer against two maintained references (Hugging Face ``tokenizers`` and ``tiktoken``,
both built from the same local files), round trips of any string, and every error."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest
import tiktoken
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_data import file_server  # noqa: F401  the local HTTP server fixture
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tokenizers import ByteLevelBPETokenizer
from tokenizers.pre_tokenizers import ByteLevel

from gpt_lesson import bpe
from gpt_lesson.bpe import (
    ENDOFTEXT,
    GPT2_FILES,
    GPT2_SPLIT_PATTERN,
    BPETokenizer,
    bytes_to_unicode,
    gpt2_files,
    gpt2_tokenizer,
    load_gpt2_files,
    merge,
    pair_counts,
    pre_split,
    train,
    train_by_recounting,
)

ROOT = Path(__file__).resolve().parents[1]
GPT2_DIR = ROOT.parent / "shared" / "data" / "gpt2"
needs_gpt2 = pytest.mark.skipif(not (GPT2_DIR / "vocab.bpe").is_file(),
                                reason="no local copy of GPT-2's tokenizer files (../shared/data/gpt2); tests never download")

SPACES_AND_DIGITS = ["a    b", "  leading", "trailing   ", "\n\n\n", "tab\t\tand\n  newline \n", "1234567890",
                     "3.14159 and 2,718,281", "year 2026, 12:00", " " * 17 + "x", "x\u3000\u3000y", "\r\n\r\n"]
SAMPLE = ("Byte pair encoding starts from the 256 byte values and learns merges: the most frequent pair of "
          "adjacent tokens becomes a new token, again and again, until the vocabulary is as large as asked. "
          "Frequent words end up as one token, rare words as a few pieces, and any text can still be written "
          "with the byte tokens. 字节对编码从 256 个字节出发，反复把最常见的相邻词元对合并成新的词元。")
EMOJI = ["🙂", "👍🏽 thumbs", "👨‍👩‍👧‍👦 family", "🇨🇳🇬🇧", "emoji🙂in🙂text", "✅ passed"]


def chinese_text() -> str:
    """The markdown of the course's Chinese edition (notebooks/zh/): real Chinese technical prose."""
    cells = [c.source for p in sorted((ROOT / "notebooks" / "zh").glob("*.ipynb"))
             for c in nbformat.read(p, as_version=4).cells if c.cell_type == "markdown"]
    return "\n\n".join(cells)


# ------------------------------------------------------------------------------------ the algorithm
def test_bytes_to_unicode_is_gpt2s_printable_table():
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256)) and len(set(table.values())) == 256
    assert table[ord("A")] == "A" and table[32] == "Ġ" and table[10] == "Ċ" and table[0] == "Ā"
    assert all(ch.isprintable() and not ch.isspace() for ch in table.values())


def test_pre_split_follows_gpt2s_rules():
    assert pre_split("Hello world") == ["Hello", " world"]
    assert pre_split("a   b") == ["a", "  ", " b"]  # the last space of a run stays with the next word
    assert pre_split("it's they'll") == ["it", "'s", " they", "'ll"]
    assert pre_split("abc123!!") == ["abc", "123", "!!"]
    assert pre_split("你好，世界") == ["你好", "，", "世界"]
    assert pre_split("no split", pattern=None) == ["no split"] and pre_split("", pattern=None) == []


def test_pair_counts_and_merge_by_hand():
    ids = [1, 2, 3, 1, 2]
    assert pair_counts(ids) == {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    assert pair_counts([1, 2], {(1, 2): 5}) == {(1, 2): 6}
    assert merge(ids, (1, 2), 9) == [9, 3, 9]
    assert merge([7, 7, 7], (7, 7), 8) == [8, 7]  # left to right, no overlap
    assert merge([7, 7, 7, 7], (7, 7), 8) == [8, 8]
    assert merge([], (1, 2), 3) == [] and merge([1], (1, 2), 3) == [1]


def test_train_on_the_wikipedia_example_and_its_tie_rule():
    tok = train("aaabdaaabac", 259, pattern=None, special_tokens=[])
    # aa occurs 4 times; then ab and Za (Z = aa) both twice: the tie goes to the smaller pair (97, 98);
    # then Z + ab (twice).
    assert list(tok.merges) == [(97, 97), (97, 98), (256, 257)]
    assert tok.encode("aaabdaaabac") == [258, 100, 258, 97, 99]
    assert tok.vocab[258] == b"aaab"


@pytest.mark.parametrize("text, vocab_size, pattern", [
    ("the cat sat on the mat, the cat ate the rat. " * 20 + "aaaa bbbb aaaa", 275, GPT2_SPLIT_PATTERN),
    ("mississippi " * 5 + "banana bandana", 270, None),
    ("字节对编码把常见的字节对合并成新的词元。" * 3 + "词元词元词元", 280, GPT2_SPLIT_PATTERN),
])
def test_incremental_training_gives_the_textbook_merges(text, vocab_size, pattern):
    fast = train(text, vocab_size, pattern=pattern)
    slow = train_by_recounting(text, vocab_size, pattern=pattern)
    assert list(fast.merges) == list(slow.merges) and len(fast.merges) == vocab_size - 257


def test_incremental_training_gives_the_textbook_merges_on_chinese_and_english():
    text = chinese_text()[:6000] + "\n" + (ROOT.parent / "shared" / "data" / "tinyshakespeare.txt").read_text()[:6000]
    assert list(train(text, 600).merges) == list(train_by_recounting(text, 600).merges)


@pytest.mark.slow
def test_train_to_1000_tokens_on_tiny_shakespeare(shakespeare_text):
    tok = train(shakespeare_text, 1000)
    assert tok.vocab_size == 1000 and len(tok.merges) == 743 and tok.special_tokens == {ENDOFTEXT: 999}
    ids = tok.encode(shakespeare_text)
    assert tok.decode(ids) == shakespeare_text
    assert 2.2 < len(shakespeare_text) / len(ids) < 2.7  # bytes per token (measured 2.41)
    assert not [v for v in tok.vocab.values() if re.search(rb"[A-Za-z] +[A-Za-z]", v)]  # no merge across words


def test_special_tokens_are_whole_tokens_and_never_merged():
    text = f"ab ab{ENDOFTEXT}ab ab{ENDOFTEXT}"
    tok = train(text * 5 + SAMPLE, 270)
    assert all(b"<|" not in tok.vocab[i] for i in tok.merges.values())
    eot = tok.special_tokens[ENDOFTEXT]
    assert eot == 269 and tok.encode(ENDOFTEXT) == [eot]
    assert tok.encode(ENDOFTEXT, allowed_special="none") != [eot]
    assert tok.encode(ENDOFTEXT, allowed_special={ENDOFTEXT}) == [eot]
    assert tok.decode(tok.encode(text)) == text == tok.decode(tok.encode(text, allowed_special="none"))


def test_decode_never_raises_on_a_cut_character():
    tok = train("中文 中文", 258, special_tokens=[])
    ids = tok.encode("中")  # three bytes, one byte token each, with no merge for them
    assert tok.decode(ids[:2]) == "\ufffd" and tok.decode_bytes(ids[:2]) == "中".encode()[:2]
    assert tok.decode(torch.tensor(ids)) == "中" and tok.decode([]) == ""


def test_save_and_load_give_the_same_tokenizer(tmp_path):
    tok = train(SAMPLE, 290)
    path = tok.save(tmp_path / "merges.bpe")
    back = BPETokenizer.load(path)
    assert list(back.merges) == list(tok.merges) and back.special_tokens == tok.special_tokens
    assert back.pattern == tok.pattern and back.encode("the mat") == tok.encode("the mat")
    lines = path.read_text().splitlines()
    assert lines[0] == "#gpt-lesson-bpe v1" and re.fullmatch(r"\d+ \d+", lines[-1])
    none = train("ababc", 257, pattern=None, special_tokens=[])
    assert BPETokenizer.load(none.save(tmp_path / "none.bpe")).pattern is None


# ------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("kwargs, error, message", [
    ({"text": "", "vocab_size": 300}, ValueError, "text='' is empty"),
    ({"text": b"abc", "vocab_size": 300}, TypeError, "text must be a str"),
    ({"text": "abc", "vocab_size": 255}, ValueError, "vocab_size=255 must be >= 256 + 1 special token(s) = 257"),
    ({"text": "abc", "vocab_size": 256, "special_tokens": []}, None, None),
    ({"text": "abc", "vocab_size": 300.0}, TypeError, "vocab_size=300.0 must be an integer"),
    ({"text": "abab", "vocab_size": 300}, ValueError, "vocab_size=300 is more than this text supports: after 2 merges"),
    ({"text": "abc", "vocab_size": 300, "special_tokens": ENDOFTEXT}, TypeError, "must be a list of strings"),
    ({"text": "abc", "vocab_size": 300, "special_tokens": [""]}, ValueError, "must be a non-empty string"),
    ({"text": "abc", "vocab_size": 300, "special_tokens": ["<a>", "<a>"]}, ValueError, "the same token twice"),
    ({"text": "abc", "vocab_size": 300, "pattern": "(unclosed"}, ValueError, "is not a regular expression"),
])
@pytest.mark.parametrize("trainer", [train, train_by_recounting])
def test_training_errors_name_the_argument_and_the_rule(trainer, kwargs, error, message):
    if error is None:
        assert trainer(**kwargs).vocab_size == 256
        return
    with pytest.raises(error) as e:
        trainer(**kwargs)
    assert message in str(e.value)


@pytest.fixture(scope="module")
def small():
    return train(SAMPLE, 280)


@pytest.mark.parametrize("ids, error, message", [
    ([1, 280], ValueError, "ids[1]=280 must be in [0, vocab_size=280)"),
    ([-1], ValueError, "ids[0]=-1 must be in [0, vocab_size=280)"),
    ([1.0], TypeError, "ids[0]=1.0 must be an integer"),
    ([True], TypeError, "ids[0]=True must be an integer"),
    ("abc", TypeError, "must be a list of token ids"),
    (torch.tensor([1.0]), TypeError, "must hold integer token ids, got dtype torch.float32"),
    (torch.tensor([[1]]), ValueError, "ids must have 1 dimensions"),
])
def test_decode_errors(small, ids, error, message):
    with pytest.raises(error) as e:
        small.decode(ids)
    assert message in str(e.value)


def test_encode_and_token_errors(small):
    with pytest.raises(TypeError, match="text must be a str"):
        small.encode(b"bytes")
    with pytest.raises(ValueError, match=r"allowed_special names '<\|im_start\|>', not special tokens"):
        small.encode("x", allowed_special={"<|im_start|>"})
    with pytest.raises(TypeError, match="allowed_special='ALL' must be 'all', 'none' or a set"):
        small.encode("x", allowed_special="ALL")
    with pytest.raises(ValueError, match=r"token_id=999 must be in \[0, vocab_size=280\)"):
        small.token_bytes(999)
    assert small.token_bytes(ord("a")) == b"a"


@pytest.mark.parametrize("merges, byte_ids, message", [
    ([(1, 256)], None, r"merges\[0\]=\(1, 256\) must be a pair of token ids made before it \(each in \[0, 256\)\)"),
    ([(1, 2), (1, 2)], None, r"merges\[1\]=\(1, 2\) repeats an earlier merge"),
    ([[1, 2]], None, r"merges\[0\]=\[1, 2\] must be a pair"),
    ([], [0] * 256, "byte_ids must give each of the 256 byte values its own id"),
])
def test_tokenizer_refuses_bad_merges(merges, byte_ids, message):
    with pytest.raises(ValueError, match=message):
        BPETokenizer(merges, byte_ids=byte_ids)


@pytest.mark.parametrize("content, message", [
    ("merges\n1 2\n", "is not a merges file written by BPETokenizer.save: its first line is 'merges'"),
    ('#gpt-lesson-bpe v1\n#pattern: null\n1 2\n1 x\n', "line 4: expected a merge as two token ids 'a b', got '1 x'"),
    ('#gpt-lesson-bpe v1\n#pattern: null\n1 2 3\n', "line 3: expected a merge as two token ids"),
    ('#gpt-lesson-bpe v1\n#pattern: [unclosed\n', "line 2: cannot read the #pattern header"),
    ('#gpt-lesson-bpe v1\n#special: []\n1 300\n', "does not hold a valid tokenizer: merges[0]=(1, 300) must be a pair"),
])
def test_a_merges_file_that_does_not_parse_names_the_line(tmp_path, content, message):
    path = tmp_path / "bad.bpe"
    path.write_text(content)
    with pytest.raises(ValueError) as e:
        BPETokenizer.load(path)
    assert str(path) in str(e.value) and message in str(e.value)


def test_load_errors_for_missing_and_binary_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no merges file at"):
        BPETokenizer.load(tmp_path / "nope.bpe")
    (tmp_path / "binary.bpe").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match="it is not UTF-8 text"):
        BPETokenizer.load(tmp_path / "binary.bpe")
    with pytest.raises(TypeError, match="path=3 must be a file path"):
        BPETokenizer.load(3)


# ------------------------------------------------------------------------------------ GPT-2, against the references
@pytest.fixture(scope="module")
def gpt2():
    if not (GPT2_DIR / "vocab.bpe").is_file():
        pytest.skip("no local copy of GPT-2's tokenizer files")
    return gpt2_tokenizer(GPT2_DIR)


@pytest.fixture(scope="module")
def hf():
    tok = ByteLevelBPETokenizer(str(GPT2_DIR / "encoder.json"), str(GPT2_DIR / "vocab.bpe"))
    tok.add_special_tokens([ENDOFTEXT])
    return tok


@pytest.fixture(scope="module")
def tk():
    ranks = data_gym_to_mergeable_bpe_ranks(str(GPT2_DIR / "vocab.bpe"), str(GPT2_DIR / "encoder.json"),
                                            vocab_bpe_hash=GPT2_FILES["vocab.bpe"][1],
                                            encoder_json_hash=GPT2_FILES["encoder.json"][1])
    return tiktoken.Encoding("gpt2-local", pat_str=GPT2_SPLIT_PATTERN, mergeable_ranks=ranks,
                             special_tokens={ENDOFTEXT: 50256})


def _same_as_references(gpt2, hf, tk, text: str) -> list[int]:
    ids = gpt2.encode(text)
    assert ids == tk.encode(text, allowed_special="all"), f"tiktoken differs on {text[:40]!r}"
    assert ids == hf.encode(text).ids, f"tokenizers differs on {text[:40]!r}"
    assert gpt2.decode(ids) == text
    return ids


@needs_gpt2
def test_gpt2_has_50257_tokens_and_known_ids(gpt2):
    assert gpt2.vocab_size == 50257 and len(gpt2.merges) == 50000 and gpt2.special_tokens == {ENDOFTEXT: 50256}
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.encode(f"Hello world{ENDOFTEXT}") == [15496, 995, 50256]
    assert gpt2.token_bytes(220) == b" " and gpt2.token_bytes(0) == b"!"


@needs_gpt2
@pytest.mark.slow
def test_gpt2_ids_equal_both_references_on_tiny_shakespeare(gpt2, hf, tk, shakespeare_text):
    ids = _same_as_references(gpt2, hf, tk, shakespeare_text)
    assert len(ids) == 338_025


@needs_gpt2
def test_gpt2_ids_equal_both_references_on_chinese_text(gpt2, hf, tk):
    text = chinese_text()
    assert len(text) > 100_000
    _same_as_references(gpt2, hf, tk, text)
    for paragraph in text.split("\n\n")[:300]:
        _same_as_references(gpt2, hf, tk, paragraph)


@needs_gpt2
@pytest.mark.parametrize("text", SPACES_AND_DIGITS + EMOJI + ["", ENDOFTEXT * 3, f"a{ENDOFTEXT}b", "<|endoftext",
                                                              "\x00\x01\x7f", "naïve café Zürich", "Ελληνικά русский"])
def test_gpt2_ids_equal_both_references_on_spaces_digits_and_emoji(gpt2, hf, tk, text):
    _same_as_references(gpt2, hf, tk, text)


@needs_gpt2
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=60))
def test_gpt2_ids_equal_the_references_and_round_trip_on_random_unicode(gpt2, hf, tk, text):
    _same_as_references(gpt2, hf, tk, text)


@needs_gpt2
@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(" \t\n\r0123456789'sdtlmvre.,!?-中文🙂éxyz"), max_size=40))
def test_gpt2_pre_split_equals_tokenizers_byte_level_pre_tokenizer(text):
    to_char = bytes_to_unicode()
    expected = [piece for piece, _ in ByteLevel(add_prefix_space=False).pre_tokenize_str(text)]
    assert ["".join(to_char[b] for b in chunk.encode()) for chunk in pre_split(text)] == expected
    assert "".join(pre_split(text)) == text


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40), st.integers(min_value=257, max_value=300))
def test_any_string_round_trips_through_a_trained_tokenizer(text, vocab_size):
    tok = train("the course trains a byte-level BPE 训练一个字节级 BPE 🙂 " * 4, 300)
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode(text, allowed_special="none")) == text


# ------------------------------------------------------------------------------------ GPT-2's files
@needs_gpt2
def test_the_environment_variable_and_the_cache_are_used(monkeypatch, tmp_path):
    monkeypatch.setenv(bpe.GPT2_ENV, str(GPT2_DIR))
    assert gpt2_files()["vocab.bpe"] == GPT2_DIR / "vocab.bpe"
    monkeypatch.delenv(bpe.GPT2_ENV)
    monkeypatch.setenv("GPT_LESSON_CACHE", str(tmp_path))
    shutil.copytree(GPT2_DIR, tmp_path / "gpt2")
    assert gpt2_files(download_if_missing=False)["encoder.json"] == tmp_path / "gpt2" / "encoder.json"


@needs_gpt2
def test_missing_files_are_downloaded_into_the_cache_and_checked(file_server, monkeypatch, tmp_path):  # noqa: F811
    root, base = file_server
    for name in GPT2_FILES:
        shutil.copy(GPT2_DIR / name, root / name)
    monkeypatch.setattr(bpe, "GPT2_FILES", {name: (f"{base}/{name}", sha) for name, (_, sha) in GPT2_FILES.items()})
    monkeypatch.delenv(bpe.GPT2_ENV, raising=False)
    monkeypatch.setenv("GPT_LESSON_CACHE", str(tmp_path / "cache"))
    assert gpt2_tokenizer().encode("Hello world") == [15496, 995]
    assert sorted(p.name for p in (tmp_path / "cache" / "gpt2").iterdir()) == ["encoder.json", "vocab.bpe"]
    (root / "vocab.bpe").write_text("#version: 0.2\nnot the file\n")
    (tmp_path / "cache" / "gpt2" / "vocab.bpe").unlink()
    with pytest.raises(ValueError, match="the file downloaded from .*vocab.bpe has other content than expected"):
        gpt2_tokenizer()
    assert not (tmp_path / "cache" / "gpt2" / "vocab.bpe").exists()


def test_without_a_network_the_error_says_how_to_provide_the_files(monkeypatch, tmp_path):
    monkeypatch.delenv(bpe.GPT2_ENV, raising=False)
    monkeypatch.setenv("GPT_LESSON_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError) as e:
        gpt2_tokenizer()
    assert "could not download" in str(e.value) and bpe.GPT2_ENV in str(e.value)
    with pytest.raises(FileNotFoundError, match=r"no encoder.json in .* \(the course cache\)"):
        gpt2_files(download_if_missing=False)


@needs_gpt2
def test_local_copies_are_checked_against_their_sha256(tmp_path):
    shutil.copytree(GPT2_DIR, tmp_path / "gpt2")
    (tmp_path / "gpt2" / "vocab.bpe").chmod(0o644)
    with open(tmp_path / "gpt2" / "vocab.bpe", "a") as f:
        f.write("x y\n")
    with pytest.raises(ValueError) as e:
        gpt2_tokenizer(tmp_path / "gpt2")
    assert "vocab.bpe has other content than expected" in str(e.value) and GPT2_FILES["vocab.bpe"][0] in str(e.value)
    with pytest.raises(FileNotFoundError, match="no encoder.json in .*nowhere \\(folder\\)"):
        gpt2_tokenizer(tmp_path / "nowhere")
    with pytest.raises(TypeError, match="download_if_missing='no' must be True or False"):
        gpt2_files(download_if_missing="no")


@needs_gpt2
@pytest.mark.parametrize("damage, message", [
    (lambda e, v: e.write_text("{not json"), "does not parse as JSON"),
    (lambda e, v: e.write_text("[1, 2]"), "expected an object of token -> id"),
    (lambda e, v: e.write_text(json.dumps({"a": 0})), "has no token for byte value(s) [0, 1, 2, 3, 4]"),
    (lambda e, v: v.write_text("merges\n"), "its first line is 'merges', expected '#version: 0.2'"),
    (lambda e, v: v.write_text("#version: 0.2\nĠ t\nĠ a b\n"), "line 3: 'Ġ a b' is not a merge of two tokens"),
    (lambda e, v: v.write_text("#version: 0.2\nĠ a\n"), "line 2: the merge 'Ġ a' makes id 257 in encoder.json, expected 256"),
])
def test_gpt2_files_that_do_not_parse_are_named(tmp_path, damage, message):
    enc, voc = tmp_path / "encoder.json", tmp_path / "vocab.bpe"
    shutil.copy(GPT2_DIR / "encoder.json", enc)
    shutil.copy(GPT2_DIR / "vocab.bpe", voc)
    enc.chmod(0o644)
    voc.chmod(0o644)
    damage(enc, voc)
    with pytest.raises(ValueError) as e:
        load_gpt2_files(enc, voc)
    assert message in str(e.value)
