"""The course's trained Shakespeare model: data, settings, cached checkpoint, retraining when stale.

Training here uses a tiny model and a few steps; the real run (about a minute) is lesson 09's job.
"""
from __future__ import annotations

import os
import re
from dataclasses import replace

import pytest
import torch

from gpt_lesson.data import TINY_SHAKESPEARE_SIZE
from gpt_lesson.model import GPT, GPTConfig
from gpt_lesson.shakespeare import (
    CHECKPOINT_NAME,
    SHAKESPEARE_CONFIG,
    TARGET_VAL_LOSS,
    TOKEN_BUDGET,
    TRAIN_CONFIG,
    checkpoint_path,
    load_data,
    load_trained,
    load_trained_model,
    train_model,
)
from gpt_lesson.training import CheckpointError, TrainConfig, evaluate_split, load_checkpoint

TINY = GPTConfig(vocab_size=65, n_embd=16, n_head=2, n_layer=1, block_size=16, dropout=0.0, attn_impl="sdpa")
# The settings key of the cached checkpoints keeps the retired field capture_attention (always False).
CACHE_KEY_CONFIG = {**TINY.to_dict(), "capture_attention": False}
TINY_TRAIN = TrainConfig(max_steps=4, batch_size=4, learning_rate=1e-2, min_lr=1e-3, warmup_steps=1,
                         eval_interval=2, eval_iters=1, progress=False)


@pytest.fixture(autouse=True)
def local_data_and_cache(shakespeare_path, tmp_path, monkeypatch):
    """Every test reads the local Tiny Shakespeare and writes into its own empty cache."""
    monkeypatch.setenv("GPT_LESSON_DATA", str(shakespeare_path))
    monkeypatch.setenv("GPT_LESSON_CACHE", str(tmp_path / "cache"))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_load_data_is_the_standard_90_10_character_split():
    text, tokenizer, train_data, val_data = load_data()
    assert len(text) == TINY_SHAKESPEARE_SIZE
    assert tokenizer.vocab_size == 65
    assert len(train_data) == int(0.9 * len(text)) == 1_003_854
    assert len(val_data) == len(text) - len(train_data) == 111_540
    assert tokenizer.decode(train_data[:14]) == text[:14] == "First Citizen:"
    assert tokenizer.decode(val_data[:20]) == text[len(train_data):len(train_data) + 20]


def test_settings_fit_the_token_budget_and_keep_the_source_layout():
    assert SHAKESPEARE_CONFIG.vocab_size == 65
    assert SHAKESPEARE_CONFIG.dropout == 0.0
    tokens = TRAIN_CONFIG.max_steps * TRAIN_CONFIG.batch_size * SHAKESPEARE_CONFIG.block_size
    assert tokens <= TOKEN_BUDGET
    assert TRAIN_CONFIG.min_lr is not None and TRAIN_CONFIG.min_lr < TRAIN_CONFIG.learning_rate
    assert 0 < TARGET_VAL_LOSS < 4.17  # below the loss of a uniform guess, ln 65
    # Separate lm_head and token embedding (no weight tying): the state dict keeps the source's keys.
    keys = set(GPT(SHAKESPEARE_CONFIG).state_dict())
    assert {"token_embedding_table.weight", "lm_head.weight", "blocks.0.sa.tril"} <= keys


def test_checkpoint_path_follows_the_cache_variable(tmp_path):
    assert checkpoint_path() == tmp_path / "cache" / CHECKPOINT_NAME


def test_train_model_is_seeded_and_saves_a_loadable_checkpoint(tmp_path):
    model_a, hist_a = train_model(progress=False, config=TINY, train_config=TINY_TRAIN, path=tmp_path / "a.pt")
    model_b, hist_b = train_model(progress=False, config=TINY, train_config=TINY_TRAIN, path=tmp_path / "b.pt")
    assert hist_a.loss == hist_b.loss and hist_a.tokens == 4 * 4 * 16
    for (name, pa), pb in zip(model_a.state_dict().items(), model_b.state_dict().values()):
        assert torch.equal(pa, pb), name
    loaded, ckpt = load_checkpoint(tmp_path / "a.pt")  # weights_only=True inside
    extra = ckpt["extra"]
    assert extra["history"]["loss"] == hist_a.loss
    assert extra["history"]["eval_step"] == [0, 2, 4]
    assert extra["config"] == CACHE_KEY_CONFIG
    _, _, _, val_data = load_data()
    assert extra["val_loss"] == pytest.approx(evaluate_split(loaded, val_data), abs=1e-6)
    assert extra["val_loss"] < 4.2  # it trained and did not blow up; ln 65 = 4.17


def test_cached_round_trip_through_the_default_path():
    assert not checkpoint_path().exists()
    model, tokenizer, extra = load_trained(config=TINY, train_config=TINY_TRAIN)  # trains: cache empty
    assert checkpoint_path().is_file()
    mtime = checkpoint_path().stat().st_mtime_ns
    again, tokenizer2, extra2 = load_trained(train_if_missing=False, config=TINY, train_config=TINY_TRAIN)
    assert checkpoint_path().stat().st_mtime_ns == mtime  # read, not retrained
    assert not again.training and tokenizer2.vocab_size == tokenizer.vocab_size == 65
    for (name, p), q in zip(model.state_dict().items(), again.state_dict().values()):
        assert torch.equal(p, q), name
    assert extra2["history"] == extra["history"]


def test_a_checkpoint_made_with_other_settings_is_not_used():
    load_trained(config=TINY, train_config=TINY_TRAIN)
    other = replace(TINY_TRAIN, learning_rate=5e-3)
    with pytest.raises(FileNotFoundError, match="current settings"):
        load_trained(train_if_missing=False, config=TINY, train_config=other)
    # With training allowed, the stale file is replaced by a run with the asked-for settings.
    _, _, extra = load_trained(config=TINY, train_config=other)
    assert extra["train_config"]["learning_rate"] == 5e-3


def test_missing_checkpoint_without_training_raises_a_clear_error():
    with pytest.raises(FileNotFoundError, match="train_if_missing=True"):
        load_trained_model(train_if_missing=False)


def test_a_config_whose_vocabulary_does_not_match_the_data_is_refused(tmp_path):
    with pytest.raises(ValueError, match="vocab_size=64"):
        train_model(progress=False, config=replace(TINY, vocab_size=64), train_config=TINY_TRAIN,
                    path=tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()


def test_generated_ids_are_normal_tensors_usable_for_training():
    # generate() runs under torch.inference_mode for speed; what it returns must still feed autograd.
    from gpt_lesson.sampling import generate

    torch.manual_seed(0)
    model = GPT(TINY)
    out = generate(model, torch.zeros(2, 1, dtype=torch.long), 12, use_cache=True)
    assert not out.is_inference()
    _, loss = model(out[:, :-1].contiguous(), out[:, 1:].contiguous())
    loss.backward()  # would raise "Inference tensors cannot be saved for backward" otherwise
    assert model.token_embedding_table.weight.grad is not None


# --- an unreadable cached checkpoint is retrained, not a dead end (issue 13) -----------------------

def damaged_checkpoint(kind: str, path, tmp_path):
    """Write a cached checkpoint damaged as ``kind`` at ``path``."""
    from gpt_lesson.training import save_checkpoint

    torch.manual_seed(0)
    save_checkpoint(path, GPT(TINY))
    raw = path.read_bytes()
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(raw[: len(raw) // 3])
    elif kind == "malicious":
        class Evil:
            def __reduce__(self):
                return (os.system, (f"touch {tmp_path / 'pwned'}",))
        torch.save({"model": Evil(), "config": {}}, path)
    return path.read_bytes()


@pytest.mark.parametrize("kind, problem", [
    ("empty", "the file is empty"),
    ("truncated", "the file is not a readable PyTorch checkpoint"),
    ("malicious", "it is not a plain checkpoint"),
])
def test_an_unreadable_cached_checkpoint_is_retrained_and_replaced(kind, problem, tmp_path):
    path = checkpoint_path()
    damaged_checkpoint(kind, path, tmp_path)
    with pytest.warns(UserWarning, match=f"the cached model {re.escape(str(path))} could not be used "
                                         rf"\({problem}.*training it again and replacing the file"):
        model, tokenizer, extra = load_trained(config=TINY, train_config=TINY_TRAIN)
    assert extra["config"] == CACHE_KEY_CONFIG and not model.training
    reloaded, _ = load_checkpoint(path)  # the file is a good checkpoint again
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reloaded.state_dict().values()))
    # no temp file left; beside the model, the trainer's digest and the lock that lets one process train
    assert sorted(p.name for p in path.parent.iterdir()) == [CHECKPOINT_NAME, CHECKPOINT_NAME + ".lock",
                                                             CHECKPOINT_NAME + ".sha256"]
    assert not (tmp_path / "pwned").exists()


def test_an_unreadable_cached_checkpoint_without_training_says_what_to_do(tmp_path):
    path = checkpoint_path()
    before = damaged_checkpoint("truncated", path, tmp_path)
    with pytest.raises(CheckpointError) as e:
        load_trained(train_if_missing=False, config=TINY, train_config=TINY_TRAIN)
    msg = str(e.value)
    assert msg.startswith(f"cannot load the checkpoint {path}: the file is not a readable PyTorch checkpoint")
    assert "load_trained_model(train_if_missing=True)" in msg
    assert path.read_bytes() == before  # left for the learner to look at


@pytest.mark.parametrize("call, error, message", [
    (lambda: load_trained(config={"vocab_size": 65}), TypeError, "config must be a GPTConfig, got dict"),
    (lambda: load_trained(train_config="fast"), TypeError, "train_config must be a TrainConfig, got str"),
    (lambda: load_trained(train_if_missing="yes"), TypeError, "train_if_missing='yes' must be True or False"),
    (lambda: load_trained(progress=1), TypeError, "progress=1 must be True or False"),
    (lambda: load_trained(path=3), TypeError, r"path=3 must be a file path"),
    (lambda: train_model(progress="no"), TypeError, "progress='no' must be True or False"),
    (lambda: train_model(path=""), ValueError, "path='' must be a file path, got an empty name"),
])
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()
    assert not checkpoint_path().parent.exists()  # nothing trained or written


def test_read_only_shared_cache_falls_back_to_the_learners_own(tmp_path, monkeypatch):
    """A JupyterHub's shared, read-only cache without a matching model: train into ~/.cache, say so."""
    from gpt_lesson import shakespeare

    shared = tmp_path / "cache"  # GPT_LESSON_CACHE (the autouse fixture), treated as read-only
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(shakespeare, "_writable", lambda folder: folder != shared)
    with pytest.warns(UserWarning, match="cannot be written"):
        model, _, extra = shakespeare.load_trained(config=TINY, train_config=TINY_TRAIN)
    mine = tmp_path / "home" / ".cache" / "gpt_lesson" / CHECKPOINT_NAME
    assert mine.is_file() and not (shared / CHECKPOINT_NAME).exists()
    assert extra["config"] == CACHE_KEY_CONFIG
    # the next call finds the learner's copy and does not train again
    monkeypatch.setattr(shakespeare, "train_model", lambda *a, **k: pytest.fail("trained again"))
    with pytest.warns(UserWarning, match="cannot be written"):
        again, _, _ = shakespeare.load_trained(config=TINY, train_config=TINY_TRAIN)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
