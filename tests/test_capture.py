"""Attention capture with forward hooks (gpt_lesson.capture): what each layer computed, nothing kept by the model."""
import math

import pytest
import torch
import torch.nn.functional as F

from gpt_lesson import GPT, GPTConfig
from gpt_lesson import attention as A
from gpt_lesson.capture import attention_records, capture_attention
from gpt_lesson.checkpoints import load_checkpoint, save_checkpoint


@pytest.fixture
def seed_model():
    torch.manual_seed(1337)
    return GPT(1000, 64, 4, 3, 128)


def test_attention_records_capture_scores_and_weights(seed_model):
    idx = torch.randint(0, 1000, (2, 10))
    records = attention_records(seed_model, idx)
    assert len(records) == 3
    r = records[1]
    assert r["q"].shape == (2, 4, 10, 16) and r["weights"].shape == (2, 4, 10, 10)
    expected_scores = r["q"] @ r["k"].transpose(-2, -1) / math.sqrt(16)
    assert torch.allclose(r["scores"], expected_scores, atol=1e-6)
    w = r["weights"]
    assert torch.allclose(w.sum(-1), torch.ones(2, 4, 10), atol=1e-6)
    assert torch.all(w.triu(diagonal=1) == 0)  # the future gets exactly zero weight
    assert seed_model.training  # the mode is restored
    assert all(not b.sa.c_attn._forward_hooks and not b.sa.dropout._forward_pre_hooks for b in seed_model.blocks)


def test_the_records_are_what_the_layer_computed(seed_model):
    """q, k, v are c_attn's output in heads; the weights are the ones the layer multiplied v by."""
    seed_model.eval()
    idx = torch.randint(0, 1000, (1, 12), generator=torch.Generator().manual_seed(0))
    x = seed_model.token_embedding_table(idx) + seed_model.position_embedding_table(torch.arange(12))
    sa = seed_model.blocks[0].sa
    h = seed_model.blocks[0].ln1(x)
    q, k, v = (A.split_heads(t, 4) for t in sa.c_attn(h).split(64, dim=2))
    r = attention_records(seed_model, idx)[0]
    assert torch.equal(r["q"], q) and torch.equal(r["k"], k) and torch.equal(r["v"], v)
    wei = F.softmax((q @ k.transpose(-2, -1) * 16 ** -0.5).masked_fill(sa.tril[:12, :12] == 0, float("-inf")), -1)
    assert torch.equal(r["weights"], wei)
    assert torch.equal(A.merge_heads(r["weights"] @ r["v"]), A.merge_heads(wei @ v))


@pytest.mark.parametrize("options", [dict(), dict(attn_impl="sdpa"), dict(attn_scale=1.0), dict(causal=False)])
def test_capture_leaves_the_output_alone_and_restores_the_kernel(options):
    torch.manual_seed(0)
    model = GPT(20, 16, 2, 2, 8, dropout=0.0, **options).eval()
    idx = torch.randint(0, 20, (2, 8))
    plain, _ = model(idx)
    with capture_attention(model) as records:
        logits, _ = model(idx)
        assert not any(b.sa.fused for b in model.blocks)  # the explicit steps: the fused kernel forms no weights
    assert (logits - plain).abs().max() < 1e-5
    assert [b.sa.fused for b in model.blocks] == [options.get("attn_impl") == "sdpa"] * 2
    assert all(r["weights"].shape == (2, 2, 8, 8) for r in records)
    scale = options.get("attn_scale", 8 ** -0.5)
    assert torch.allclose(records[1]["scores"], records[1]["q"] @ records[1]["k"].transpose(-2, -1) * scale)
    if options.get("causal", True):
        assert torch.all(records[0]["weights"].triu(diagonal=1) == 0)
    else:
        assert torch.all(records[0]["weights"] > 0)  # nothing hidden


@pytest.mark.parametrize("attn_impl", ["naive", "sdpa"])
def test_capture_computes_attention_once(attn_impl, monkeypatch):
    """With capture on, each layer computes its attention once (the explicit steps), never a second time fused."""
    torch.manual_seed(0)
    model = GPT(20, 16, 2, 2, 8, attn_impl=attn_impl).eval()
    idx = torch.randint(0, 20, (1, 8))
    plain, _ = model(idx)
    calls = {"sdpa": 0, "softmax": 0}
    real_sdpa, real_softmax = F.scaled_dot_product_attention, F.softmax

    def counting(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting("sdpa", real_sdpa))
    monkeypatch.setattr(F, "softmax", counting("softmax", real_softmax))
    records = attention_records(model, idx)
    assert calls == {"sdpa": 0, "softmax": 2}  # one softmax per layer, no fused kernel on top
    assert len(records) == 2 and records[0]["weights"].shape == (1, 2, 8, 8)
    calls.update(sdpa=0, softmax=0)
    again, _ = model(idx)  # capture off again: the configured path
    assert calls == ({"sdpa": 2, "softmax": 0} if attn_impl == "sdpa" else {"sdpa": 0, "softmax": 2})
    assert torch.equal(again, plain)


def test_capture_is_undone_after_an_error(seed_model):
    with pytest.raises(RuntimeError, match="boom"):
        with capture_attention(seed_model):
            raise RuntimeError("boom")
    assert all(not b.sa.c_attn._forward_hooks and not b.sa.dropout._forward_pre_hooks for b in seed_model.blocks)
    seed_model.eval()
    with capture_attention(seed_model) as records:
        pass
    assert records == [{}, {}, {}]  # filled only by a forward pass inside the block


def test_nothing_of_capture_is_in_the_config_or_the_checkpoint(seed_model, tmp_path):
    assert "capture" not in str(GPTConfig.__dataclass_fields__)
    attention_records(seed_model, torch.zeros(1, 4, dtype=torch.long))
    path = save_checkpoint(tmp_path / "m.pt", seed_model)
    ckpt = torch.load(path, weights_only=True)
    assert "capture_attention" not in ckpt["config"]
    assert list(ckpt["model"]) == list(seed_model.state_dict())
    loaded, _ = load_checkpoint(path)
    assert len(attention_records(loaded, torch.zeros(1, 4, dtype=torch.long))) == 3


def test_the_models_method_is_the_capture_modules_function(seed_model):
    """model.attention_records(idx), which the lessons call, is gpt_lesson.capture.attention_records."""
    idx = torch.randint(0, 1000, (1, 6), generator=torch.Generator().manual_seed(1))
    a, b = seed_model.attention_records(idx), attention_records(seed_model, idx)
    assert all(torch.equal(x[key], y[key]) for x, y in zip(a, b) for key in x)


def test_capture_names_what_it_needs(seed_model):
    with pytest.raises(TypeError, match="model must be a course GPT .*got Linear"):
        attention_records(torch.nn.Linear(2, 2), torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="model must be a nn.Module|model must be a Module, got str"):
        attention_records("model", torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="idx holds token id 1000, out of range"):
        attention_records(seed_model, torch.full((1, 3), 1000))
    with pytest.raises(ValueError, match="T=129, longer than block_size=128"):
        attention_records(seed_model, torch.zeros(1, 129, dtype=torch.long))
