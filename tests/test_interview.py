"""Tests of the experiment options lesson 11 (interview questions) relies on."""
from __future__ import annotations

import pytest
import torch

from gpt_lesson.experiments import train_small

TEXT = "the quick brown fox jumps over the lazy dog. " * 200
SMALL = dict(n_embd=32, n_head=1, n_layer=1, block_size=16, steps=1, batch_size=4,
             learning_rate=1e-6, eval_interval=1)


def _q_variance(model, tokenizer) -> float:
    idx = torch.tensor([tokenizer.encode(TEXT[:16])])
    return float(model.attention_records(idx)[0]["q"].var())


def test_qkv_init_std_sets_the_spread_of_the_attention_projections():
    model, tok, _ = train_small(TEXT, qkv_init_std=32 ** -0.5, **SMALL)
    w = model.blocks[0].sa.c_attn.weight.detach()
    assert abs(float(w.std()) - 32 ** -0.5) < 0.01
    # Layer-normed inputs times weights of std 1/sqrt(n_embd): q entries of variance about 1.
    assert 0.5 < _q_variance(model, tok) < 2.0


def test_default_init_keeps_small_scores():
    model, tok, _ = train_small(TEXT, **SMALL)
    assert abs(float(model.blocks[0].sa.c_attn.weight.detach().std()) - 0.02) < 0.005
    assert _q_variance(model, tok) < 0.05


def test_qkv_init_std_changes_only_c_attn():
    a, _, _ = train_small(TEXT, **SMALL)
    b, _, _ = train_small(TEXT, qkv_init_std=0.5, **SMALL)
    assert not torch.equal(a.blocks[0].sa.c_attn.weight, b.blocks[0].sa.c_attn.weight)
    # One step of lr 1e-6 moves a weight by about 1e-6: the other weights start equal.
    assert torch.allclose(a.token_embedding_table.weight, b.token_embedding_table.weight, atol=1e-5)
    assert torch.allclose(a.blocks[0].ffwd.net[0].weight, b.blocks[0].ffwd.net[0].weight, atol=1e-5)


@pytest.mark.parametrize("bad, error", [("0.1", TypeError), (True, TypeError), (0.0, ValueError), (-1.0, ValueError)])
def test_qkv_init_std_rejects_bad_values(bad, error):
    with pytest.raises(error, match="qkv_init_std"):
        train_small(TEXT, qkv_init_std=bad, **SMALL)
