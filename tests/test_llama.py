"""The blocks of Llama and Qwen2 against transformers, the assembled model, lesson 14's experiment and checks.

Each block is compared with transformers' own module on the same weights (RMSNorm, RoPE, SwiGLU, the
key/value head sharing, a whole decoder layer), then whole random LlamaForCausalLM and Qwen2ForCausalLM
models (odd sizes, GQA, MQA and MHA, a tied head, Qwen2's q/k/v biases): logits within 1e-5, greedy
tokens equal with and without the KV cache.
"""
from __future__ import annotations

import math
import os
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gpt_lesson import checks
from gpt_lesson.checks import llama as llama_checks
from gpt_lesson.llama import (
    Attention,
    Llama,
    LlamaConfig,
    RMSNorm,
    RotaryEmbedding,
    SwiGLU,
    apply_rope,
    causal_attention,
    greedy,
    llama_ffn_hidden,
    load_llama,
    repeat_kv,
    rope_frequencies,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# vocab, hidden, intermediate, layers, heads, kv heads, positions, extra
CONFIGS = {
    "gqa": (101, 24, 40, 2, 6, 2, 16, {}),
    "mha-theta500-eps1e-5": (67, 30, 37, 3, 3, 3, 9, {"rope_parameters": {"rope_type": "default", "rope_theta": 500.0},
                                                      "rms_norm_eps": 1e-5}),
    "mqa-head_dim6": (50, 32, 48, 1, 4, 1, 12, {"head_dim": 6}),
    "tied": (50, 32, 48, 2, 4, 2, 12, {"tie_word_embeddings": True}),
}


@pytest.fixture(scope="module")
def transformers():
    return pytest.importorskip("transformers")


def reference(transformers, kind, name, seed=0, **more):
    V, C, H, L, nh, nkv, T, extra = CONFIGS[name]
    torch.manual_seed(seed)
    cls, config = ((transformers.LlamaForCausalLM, transformers.LlamaConfig) if kind == "llama"
                   else (transformers.Qwen2ForCausalLM, transformers.Qwen2Config))
    hf = config(vocab_size=V, hidden_size=C, intermediate_size=H, num_hidden_layers=L, num_attention_heads=nh,
                num_key_value_heads=nkv, max_position_embeddings=T, bos_token_id=None, eos_token_id=None,
                pad_token_id=None, initializer_range=0.2, **{**extra, **more})
    return cls(hf).eval()


MODELS = [(kind, name) for kind in ("llama", "qwen2") for name in CONFIGS]


@pytest.mark.parametrize("kind, name", MODELS, ids=[f"{k}-{n}" for k, n in MODELS])
def test_logits_equal_transformers(transformers, kind, name):
    ref = reference(transformers, kind, name)
    ours = load_llama(ref)
    assert ours.config.qkv_bias == (kind == "qwen2")
    V, T = CONFIGS[name][0], CONFIGS[name][6]
    g = torch.Generator().manual_seed(1)
    for B, t in ((1, 1), (3, T), (2, T // 2)):
        idx = torch.randint(V, (B, t), generator=g)
        with torch.no_grad():
            diff = (ref(idx).logits - ours(idx)[0]).abs().max().item()
        assert diff < 1e-5, (kind, name, B, t, diff)


@pytest.mark.slow
@pytest.mark.parametrize("kind, name", MODELS, ids=[f"{k}-{n}" for k, n in MODELS])
def test_greedy_tokens_equal_with_and_without_the_cache(transformers, kind, name):
    ref = reference(transformers, kind, name)
    ours = load_llama(ref)
    V, T = CONFIGS[name][0], CONFIGS[name][6]
    idx = torch.randint(V, (2, 3), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        theirs = [ref.generate(idx, max_new_tokens=T - 3, do_sample=False, use_cache=c) for c in (True, False)]
    mine = [greedy(ours, idx, T - 3, use_cache=c) for c in (True, False)]
    assert torch.equal(theirs[0], theirs[1]) and torch.equal(mine[0], theirs[0]) and torch.equal(mine[1], theirs[0])


def test_the_cache_holds_n_kv_head_heads_and_gives_the_same_logits():
    torch.manual_seed(0)
    model = Llama(LlamaConfig(vocab_size=30, n_embd=32, n_head=8, n_kv_head=2, n_layer=2, block_size=12, ffn_hidden=40))
    idx = torch.randint(30, (2, 12))
    cache = model.new_kv_cache(batch_size=2)
    assert cache.k.shape == (2, 2, 2, 12, 4)  # (n_layer, B, n_kv_head, max_len, head_size)
    with torch.no_grad():
        full = model(idx)[0]
        steps = [model(idx[:, :4], kv_cache=cache)[0]] + [model(idx[:, t:t + 1], kv_cache=cache)[0]
                                                          for t in range(4, 12)]
    assert (torch.cat(steps, dim=1) - full).abs().max() < 1e-5
    mha = Llama(LlamaConfig(vocab_size=30, n_embd=32, n_head=8, n_kv_head=8, n_layer=2, block_size=12, ffn_hidden=40))
    assert mha.new_kv_cache(2).nbytes == 4 * cache.nbytes  # 8 key/value heads instead of 2


# ---------------------------------------------------------------------------------------------- block by block


def test_rms_norm_equals_transformers(transformers):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    theirs, ours = LlamaRMSNorm(10, eps=1e-5), RMSNorm(10, eps=1e-5)
    with torch.no_grad():
        theirs.weight.copy_(torch.randn(10))
        ours.weight.copy_(theirs.weight)
    x = torch.randn(3, 4, 10) * 3
    assert (theirs(x) - ours(x)).abs().max() < 1e-6
    assert sum(p.numel() for p in ours.parameters()) == 10  # a gain, no bias


def test_rms_norm_is_layer_norm_without_the_mean_and_the_bias():
    x = torch.randn(2, 3, 8)
    x = x - x.mean(-1, keepdim=True)  # zero-mean rows: the two norms agree
    assert torch.allclose(RMSNorm(8, eps=1e-5)(x), F.layer_norm(x, (8,), eps=1e-5), atol=1e-6)


def test_rope_equals_transformers_also_after_a_cache(transformers):
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = transformers.LlamaConfig(hidden_size=32, num_attention_heads=4, max_position_embeddings=20,
                                      rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
    theirs = LlamaRotaryEmbedding(config)
    ours = RotaryEmbedding(8, 20, theta=1000.0)
    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8)
    positions = torch.arange(7, 12)  # five new tokens after seven cached ones
    cos, sin = theirs(q, positions[None])
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)
    assert (ours(q, start=7) - q_hf).abs().max() < 1e-6 and (ours(k, start=7) - k_hf).abs().max() < 1e-6


def test_rope_scores_depend_only_on_the_distance():
    rope = RotaryEmbedding(16, 64)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(m, n):
        return (rope(q, start=m) * rope(k, start=n)).sum().item()

    assert abs(score(3, 1) - score(40, 38)) < 1e-4 and abs(score(3, 1) - score(1, 3)) > 1e-2
    assert abs(score(5, 5) - (q * k).sum().item()) < 1e-5  # distance 0: the plain dot product


def test_rope_frequencies_follow_the_formula():
    f = rope_frequencies(8, theta=100.0)
    assert torch.allclose(f, torch.tensor([100.0 ** (-2 * i / 8) for i in range(4)]))
    x = torch.randn(3, 8)
    rotated = apply_rope(x, torch.ones(3, 8), torch.zeros(3, 8))  # angle 0: nothing turns
    assert torch.equal(rotated, x)


def test_swiglu_equals_transformers_mlp(transformers):
    from transformers.models.llama.modeling_llama import LlamaMLP

    config = transformers.LlamaConfig(hidden_size=12, intermediate_size=20, num_attention_heads=2)
    theirs, ours = LlamaMLP(config), SwiGLU(12, 20)
    ours.load_state_dict({"w1.weight": theirs.gate_proj.weight, "w3.weight": theirs.up_proj.weight,
                          "w2.weight": theirs.down_proj.weight})
    x = torch.randn(2, 5, 12)
    assert (theirs(x) - ours(x)).abs().max() < 1e-6
    assert llama_ffn_hidden(4096) == 11008  # Llama 7B's published width


def test_repeat_kv_equals_transformers(transformers):
    from transformers.models.llama.modeling_llama import repeat_kv as hf_repeat_kv

    kv = torch.randn(2, 3, 5, 4)
    assert torch.equal(repeat_kv(kv, 4), hf_repeat_kv(kv, 4))
    assert torch.equal(repeat_kv(kv, 4)[:, 5], kv[:, 1])  # query head 5 reads key/value head 5 // 4 = 1
    assert repeat_kv(kv, 1) is kv


def test_decoder_layer_equals_transformers(transformers):
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    ref = reference(transformers, "llama", "gqa")
    ours = load_llama(ref)
    x = torch.randn(2, 16, 24)
    positions = torch.arange(16)[None]
    layer = ref.model.layers[0]
    assert isinstance(layer, LlamaDecoderLayer)
    with torch.no_grad():
        pe = LlamaRotaryEmbedding(ref.config)(x, positions)
        mask = torch.full((16, 16), float("-inf")).triu(1)[None, None]
        theirs = layer(x, attention_mask=mask, position_ids=positions, position_embeddings=pe)
        theirs = theirs[0] if isinstance(theirs, tuple) else theirs
        assert (theirs - ours.blocks[0](x)).abs().max() < 1e-5


def test_causal_attention_after_a_cache_sees_the_past_and_itself():
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 4)
    out = causal_attention(q, k, v)
    full_q = torch.cat([torch.randn(1, 2, 4, 4), q], dim=2)
    assert torch.allclose(out, causal_attention(full_q, k, v)[:, :, 4:], atol=1e-6)


def test_attention_has_fewer_key_value_weights_with_gqa():
    gqa = Attention(LlamaConfig(n_embd=64, n_head=8, n_kv_head=2))
    mha = Attention(LlamaConfig(n_embd=64, n_head=8, n_kv_head=8))
    assert gqa.c_attn.weight.shape == (64 + 2 * 16, 64) and mha.c_attn.weight.shape == (3 * 64, 64)


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("fields, error, message", [
    ({"n_head": 3}, ValueError, "n_embd=64 is not divisible by n_head=3; give head_size="),
    ({"n_head": 4, "n_kv_head": 3}, ValueError, "n_head=4 is not a multiple of n_kv_head=3"),
    ({"head_size": 5}, ValueError, "head_size=5 must be even: RoPE rotates channel pairs"),
    ({"n_layer": 0}, ValueError, "n_layer=0 must be a positive integer"),
    ({"ffn_hidden": 2.5}, TypeError, "ffn_hidden=2.5 must be an integer"),
    ({"rope_theta": 1.0}, ValueError, "rope_theta=1.0 must be > 1"),
    ({"norm_eps": -1.0}, ValueError, "norm_eps=-1.0 must be > 0"),
    ({"qkv_bias": "yes"}, TypeError, "qkv_bias='yes' must be True or False"),
    ({"tie_weights": 0}, TypeError, "tie_weights=0 must be True or False"),
])
def test_bad_config_values(fields, error, message):
    with pytest.raises(error, match=message):
        LlamaConfig(**fields)


def test_bad_inputs_to_the_model_and_its_blocks():
    model = Llama(LlamaConfig(vocab_size=20, n_embd=16, n_head=4, n_kv_head=2, n_layer=2, block_size=8, ffn_hidden=8))
    with pytest.raises(ValueError, match="sequence length 9 is longer than block_size=8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="holds token id 20, out of range"):
        model(torch.full((1, 2), 20))
    with pytest.raises(TypeError, match="kv_cache must be a KVCache, got dict"):
        model(torch.zeros(1, 2, dtype=torch.long), kv_cache={})
    from gpt_lesson import KVCache

    with pytest.raises(ValueError, match="this model needs 2 layers of n_kv_head=2 heads for batch size 1"):
        model(torch.zeros(1, 2, dtype=torch.long), kv_cache=KVCache(2, 1, 4, 4, 8))
    with pytest.raises(ValueError, match="max_len=9 must be in \\[1, block_size=8\\]"):
        model.new_kv_cache(1, max_len=9)
    with pytest.raises(ValueError, match="head_size=7 must be even"):
        rope_frequencies(7)
    with pytest.raises(ValueError, match="positions up to 8 asked for; this RoPE has 8 positions"):
        RotaryEmbedding(4, 8)(torch.randn(1, 1, 2, 4), start=7)
    with pytest.raises(ValueError, match="eps=0 must be > 0"):
        RMSNorm(4, eps=0)
    with pytest.raises(ValueError, match="x must have 4 dimensions"):
        repeat_kv(torch.randn(2, 3, 4), 2)
    with pytest.raises(ValueError, match="do not fit block_size=8"):
        greedy(model, torch.zeros(1, 5, dtype=torch.long), 4)
    with pytest.raises(TypeError, match="model must be a Llama, got Linear"):
        greedy(torch.nn.Linear(2, 2), torch.zeros(1, 5, dtype=torch.long), 1)
    with pytest.raises(TypeError, match="config must be a LlamaConfig, got dict"):
        Llama({})


@pytest.mark.parametrize("more, message", [
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8}},
     "rope_type='llama3': this Llama implements the original RoPE only"),
    ({"hidden_act": "gelu"}, "hidden_act='gelu': Llama's SwiGLU uses SiLU"),
    ({"mlp_bias": True}, "biases in its MLP or its output projection"),
])
def test_variants_the_model_does_not_implement_are_refused(transformers, more, message):
    with pytest.raises(ValueError, match=message):
        load_llama(reference(transformers, "llama", "gqa", **more))


def test_load_llama_refuses_other_objects():
    with pytest.raises(TypeError, match="hf_model must be a transformers LlamaForCausalLM or Qwen2ForCausalLM, got dict"):
        load_llama({})


# ---------------------------------------------------------------------------------------------- the experiment


def test_llama_config_like_matches_the_parameter_count():
    from gpt_lesson import GPT, GPTConfig
    from gpt_lesson.gpt_vs_llama import GPT_CONFIG, llama_config_like

    for config in (GPT_CONFIG, GPTConfig(65, 48, 4, 2, 32, dropout=0.0)):
        lc = llama_config_like(config)
        gpt, llama = GPT(config).num_parameters(), Llama(lc).num_parameters()
        assert abs(llama - gpt) / gpt < 0.005, (gpt, llama)
        assert lc.n_kv_head == 2 and lc.n_embd == config.n_embd and lc.n_layer == config.n_layer


@pytest.mark.slow
def test_compare_trains_once_then_reads_the_cache(tmp_path, monkeypatch, shakespeare_text):
    from gpt_lesson import GPTConfig, gpt_vs_llama
    from gpt_lesson.data import CharTokenizer
    from gpt_lesson.gpt_vs_llama import CACHE_NAME, compare
    from gpt_lesson.training import TrainConfig

    monkeypatch.setenv("GPT_LESSON_CACHE", str(tmp_path))
    tokenizer = CharTokenizer(shakespeare_text)  # all 65 characters; the first 6,000 of the text to train on
    data = torch.tensor(tokenizer.encode(shakespeare_text[:6000]))
    monkeypatch.setattr(gpt_vs_llama, "load_data", lambda: (shakespeare_text, tokenizer, data[:5000], data[5000:]))
    small = GPTConfig(65, 16, 2, 1, 16, dropout=0.0)
    cfg = TrainConfig(max_steps=8, batch_size=4, eval_interval=4, eval_iters=2, progress=False)
    with pytest.raises(FileNotFoundError, match="no runs made with these settings"):
        compare(False, config=small, train_config=cfg)
    first, models = compare(config=small, train_config=cfg)
    assert first["cached"] is False and (tmp_path / CACHE_NAME).is_file()
    for name in ("gpt", "llama"):
        r = first[name]
        assert len(r["train_loss"]) == 8 and r["eval_steps"] == [4, 8] and math.isfinite(r["val_loss"])
        assert r["val_loss"] < math.log(65) + 0.3 and r["seconds"] > 0
    second, again = compare(False, config=small, train_config=cfg)
    assert second["cached"] is True and second["gpt"]["val_loss"] == first["gpt"]["val_loss"]
    for name in models:
        assert all(torch.equal(a, b) for a, b in zip(models[name].state_dict().values(),
                                                     again[name].state_dict().values()))
    other = TrainConfig(max_steps=9, batch_size=4, eval_interval=4, eval_iters=2, progress=False)
    assert compare(config=small, train_config=other)[0]["cached"] is False  # other settings: trained again
    (tmp_path / CACHE_NAME).write_bytes(b"damaged")
    with pytest.warns(UserWarning, match="could not be read"):
        assert compare(config=small, train_config=other)[0]["cached"] is False


def test_compare_checks_its_arguments():
    from gpt_lesson.gpt_vs_llama import compare, llama_config_like, train_one

    with pytest.raises(TypeError, match="train_if_missing='no' must be True or False"):
        compare("no")
    with pytest.raises(TypeError, match="config must be a GPTConfig, got LlamaConfig"):
        compare(config=LlamaConfig())
    with pytest.raises(TypeError, match="config must be a GPTConfig"):
        llama_config_like(None)
    with pytest.raises(TypeError, match="cfg must be a TrainConfig, got dict"):
        train_one(Llama(), torch.zeros(10, dtype=torch.long), torch.zeros(10, dtype=torch.long), {})


# ---------------------------------------------------------------------------------------------- the checks


def rms_rsqrt(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rms_divide_sqrt(x, weight, eps=1e-6):
    return weight * x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps)


def rms_norm_of_vector(x, weight, eps=1e-6):
    rms = torch.linalg.vector_norm(x, dim=-1, keepdim=True) / math.sqrt(x.size(-1))
    return x / torch.sqrt(rms**2 + eps) * weight


def rms_float64(x, weight, eps=1e-6):
    x64 = x.double()
    return (x64 / (x64.square().mean(-1, keepdim=True) + eps).sqrt() * weight.double()).float()


def rope_half(q, k, v, positions, theta=10000.0):
    d = q.size(-1)
    inv = 1.0 / theta ** (torch.arange(0, d, 2).float() / d)
    angle = torch.cat([positions[:, None] * inv] * 2, dim=-1)

    def rot(x):
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return x * angle.cos() + torch.cat([-x2, x1], dim=-1) * angle.sin()

    return rot(q), rot(k), v


def rope_complex_halves(q, k, v, positions, theta=10000.0):
    d = q.size(-1)
    freqs = theta ** (-torch.arange(d // 2, dtype=torch.float64) * 2 / d)
    turn = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64), positions[:, None] * freqs)

    def rot(x):
        z = torch.complex(x[..., : d // 2].double(), x[..., d // 2:].double()) * turn
        return torch.cat([z.real, z.imag], dim=-1).float()

    return rot(q), rot(k), v


def rope_pairs_by_hand(q, k, v, positions, theta=10000.0):
    d = q.size(-1)
    outs = []
    for x in (q, k):
        y = x.clone()
        for i in range(d // 2):
            a = positions.float() * theta ** (-2 * i / d)
            c, s = torch.cos(a)[:, None], torch.sin(a)[:, None]
            x1, x2 = x[..., i:i + 1], x[..., i + d // 2:i + d // 2 + 1]
            y[..., i:i + 1], y[..., i + d // 2:i + d // 2 + 1] = x1 * c - x2 * s, x2 * c + x1 * s
        outs.append(y)
    return outs[0], outs[1], v


def rope_list(q, k, v, positions, theta=10000.0):
    return list(rope_half(q, k, v, positions, theta))


def kv_interleave(kv, n_head):
    return kv.repeat_interleave(n_head // kv.size(1), dim=1)


def kv_expand(kv, n_head):
    B, n_kv, T, hs = kv.shape
    return kv[:, :, None].expand(B, n_kv, n_head // n_kv, T, hs).reshape(B, n_head, T, hs)


def kv_index(kv, n_head):
    return kv[:, torch.arange(n_head) // (n_head // kv.size(1))]


def kv_stack(kv, n_head):
    return torch.stack([kv[:, h // (n_head // kv.size(1))] for h in range(n_head)], dim=1)


CORRECT = {
    checks.check_rms_norm: [rms_rsqrt, rms_divide_sqrt, rms_norm_of_vector, rms_float64],
    checks.check_rope: [rope_half, rope_complex_halves, rope_pairs_by_hand, rope_list],
    checks.check_repeat_kv: [kv_interleave, kv_expand, kv_index, kv_stack],
}
STYLES = [(c, s) for c, solutions in CORRECT.items() for s in solutions]


@pytest.mark.parametrize("check, solution", STYLES, ids=[f"{c.__name__}-{s.__name__}" for c, s in STYLES])
def test_correct_solutions_pass_also_the_hidden_cases(check, solution):
    for hidden in (False, True):
        result = check(solution, hidden=hidden)
        assert result.passed and result.diagnosis is None, result.message


def _rope_with(**change):
    """rope_half with one mistake: pairs, frequencies, direction, what is rotated, positions."""
    def fn(q, k, v, positions, theta=10000.0):
        d = q.size(-1)
        i = torch.arange(0, d, 2).float()
        base = 10000.0 if change.get("theta_ignored") else theta
        inv = {"ok": 1.0 / base ** (i / d), "i": 1.0 / base ** (i / 2 / d), "up": base ** (i / d),
               "none": torch.ones(d // 2)}[change.get("freqs", "ok")]
        pos = {"ok": positions, "zero": torch.arange(len(positions)), "plus": positions + 1}[change.get("pos", "ok")]
        angle = pos[:, None].float() * inv
        cos, sin = angle.cos(), angle.sin()
        if change.get("swap"):
            cos, sin = sin, cos
        sign = -1 if change.get("backwards") else 1

        def rot(x):
            if change.get("interleaved"):
                x1, x2 = x[..., 0::2], x[..., 1::2]
                return torch.stack([x1 * cos - sign * x2 * sin, x2 * cos + sign * x1 * sin], -1).flatten(-2)
            x1, x2 = x.chunk(2, -1)
            return torch.cat([x1 * cos - sign * x2 * sin, x2 * cos + sign * x1 * sin], -1)

        which = change.get("which", "qk")
        return tuple(rot(t) if n in which else t for n, t in zip("qkv", (q, k, v)))
    return fn


def _rms_with(center=False, stat="ms", root=True, eps_where="in", dim=-1, weight="times"):
    def fn(x, w, eps=1e-6):
        if eps_where == "ignored":
            eps = 1e-6
        h = x - x.mean(dim, keepdim=True) if center else x
        s = {"ms": (h**2).mean(dim, keepdim=True), "mean": h.mean(dim, keepdim=True),
             "sum": (h**2).sum(dim, keepdim=True), "var": h.var(dim, keepdim=True),
             "abs": h.abs().mean(dim, keepdim=True) ** 2}[stat]
        e = 0.0 if eps_where == "none" else eps
        denom = (s.sqrt() + e) if eps_where == "out" else ((s + e).sqrt() if root else s + e)
        y = h / denom
        return {"times": y * w, "none": y, "plus": y + w}[weight]
    return fn


BUGS = [
    (checks.check_rms_norm, _rms_with(center=True), llama_checks.MEAN_SUBTRACTED),
    (checks.check_rms_norm, _rms_with(stat="mean"), llama_checks.NOT_MEAN_OF_SQUARES),
    (checks.check_rms_norm, _rms_with(stat="abs"), llama_checks.MEAN_OF_ABS),
    (checks.check_rms_norm, _rms_with(stat="sum"), llama_checks.SUM_OF_SQUARES),
    (checks.check_rms_norm, _rms_with(stat="var"), llama_checks.STD_NOT_RMS),
    (checks.check_rms_norm, _rms_with(root=False), llama_checks.NO_SQUARE_ROOT),
    (checks.check_rms_norm, _rms_with(eps_where="out"), checks.EPS_OUTSIDE_SQRT),
    (checks.check_rms_norm, _rms_with(eps_where="none"), checks.EPS_MISSING),
    (checks.check_rms_norm, _rms_with(eps_where="ignored"), checks.EPS_IGNORED),
    (checks.check_rms_norm, _rms_with(dim=1), checks.LN_WRONG_DIM),
    (checks.check_rms_norm, _rms_with(weight="none"), llama_checks.NO_RMS_WEIGHT),
    (checks.check_rms_norm, _rms_with(weight="plus"), llama_checks.WEIGHT_ADDED),
    (checks.check_rms_norm, _rms_with(eps_where="out", dim=1),
     checks.EPS_OUTSIDE_SQRT),
    (checks.check_rope, _rope_with(interleaved=True), llama_checks.INTERLEAVED_PAIRS),
    (checks.check_rope, _rope_with(freqs="i"), llama_checks.FREQ_EXPONENT),
    (checks.check_rope, _rope_with(freqs="up"), llama_checks.FREQ_INVERTED),
    (checks.check_rope, _rope_with(freqs="none"), llama_checks.NO_FREQUENCIES),
    (checks.check_rope, _rope_with(theta_ignored=True), llama_checks.THETA_IGNORED),
    (checks.check_rope, _rope_with(backwards=True), llama_checks.ROTATED_BACKWARDS),
    (checks.check_rope, _rope_with(swap=True), llama_checks.COS_SIN_SWAPPED),
    (checks.check_rope, _rope_with(which="qkv"), llama_checks.V_ROTATED),
    (checks.check_rope, _rope_with(which="k"), llama_checks.Q_NOT_ROTATED),
    (checks.check_rope, _rope_with(which="q"), llama_checks.K_NOT_ROTATED),
    (checks.check_rope, _rope_with(pos="zero"), llama_checks.POSITIONS_FROM_ZERO),
    (checks.check_rope, _rope_with(pos="plus"), llama_checks.POSITIONS_SHIFTED),
    (checks.check_rope, _rope_with(which="qkv", freqs="i"), llama_checks.FREQ_EXPONENT),
    (checks.check_repeat_kv, lambda kv, h: kv.repeat(1, h // kv.size(1), 1, 1), llama_checks.HEADS_TILED),
    (checks.check_repeat_kv, lambda kv, h: torch.cat([kv] * (h // kv.size(1)), dim=1), llama_checks.HEADS_TILED),
    (checks.check_repeat_kv, lambda kv, h: kv.repeat_interleave(h, dim=1), llama_checks.REPEATED_N_HEAD_TIMES),
    (checks.check_repeat_kv, lambda kv, h: kv.repeat_interleave(h // kv.size(1), dim=2),
     llama_checks.REPEATED_WRONG_DIM),
    (checks.check_repeat_kv, lambda kv, h: kv.repeat_interleave(h // kv.size(1), dim=-1),
     llama_checks.REPEATED_WRONG_DIM),
    (checks.check_repeat_kv, lambda kv, h: kv, llama_checks.NOT_REPEATED),
]


@pytest.mark.parametrize("check, buggy, diagnosis", BUGS, ids=[f"{i}-{d}" for i, (_, _, d) in enumerate(BUGS)])
def test_each_bug_is_named(check, buggy, diagnosis, capsys):
    result = check(buggy)
    assert not result.passed and result.attempted and result.diagnosis == diagnosis, result.message
    out = capsys.readouterr().out
    assert "Likely bug" in out and "expected" in out


def test_every_label_has_a_test_and_labels_are_unique():
    mine = {v for k, v in vars(llama_checks).items() if k.isupper() and isinstance(v, str) and not k.startswith("_")}
    tested = {d for _, _, d in BUGS} | {checks.WRONG_TYPE, checks.WRONG_SHAPE}
    assert mine - tested == set()
    names = {}
    for module in (*{m for m in vars(checks).values() if type(m) is type(llama_checks)},):
        for k, v in vars(module).items():
            if k.isupper() and isinstance(v, str) and not k.startswith("_"):
                names.setdefault(v, set()).add(k)
    assert all(len(n) == 1 for n in names.values()), [n for n in names.values() if len(n) > 1]


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("check", list(CORRECT), ids=lambda c: c.__name__)
def test_stubs_errors_strict_and_random_state(check, capsys):
    result = check(stub)
    assert not result.attempted and "not attempted yet" in capsys.readouterr().out
    with pytest.raises(AssertionError):
        check(stub, strict=True)
    assert check(lambda *a: 1 / 0).diagnosis == checks.RAISED
    with pytest.raises(TypeError, match="strict=1 must be True or False"):
        check(stub, strict=1)
    with pytest.raises(TypeError, match="hidden='x' must be True or False"):
        check(stub, hidden="x")
    with pytest.raises(TypeError, match="expects your function"):
        check(42)
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    before = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    check(CORRECT[check][0], strict=True)
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]
    assert (np.random.get_state()[1] == before[2]).all()


@pytest.mark.parametrize("check, solution, name", [
    (checks.check_rms_norm, lambda x, w, eps=1e-6: RMSNorm(x.size(-1), eps)(x) * w, "gpt_lesson.llama.RMSNorm"),
    (checks.check_rms_norm, lambda x, w, eps=1e-6: F.rms_norm(x, (x.size(-1),), w, eps), "rms_norm"),
    (checks.check_rope, lambda q, k, v, p, theta=10000.0: (RotaryEmbedding(q.size(-1), 64, theta)(q, int(p[0])),
                                                          RotaryEmbedding(k.size(-1), 64, theta)(k, int(p[0])), v),
     "gpt_lesson.llama.RotaryEmbedding"),
    (checks.check_repeat_kv, lambda kv, h: repeat_kv(kv, h // kv.size(1)), "gpt_lesson.llama.repeat_kv"),
])
def test_calling_the_library_is_refused(check, solution, name):
    result = check(solution)
    assert result.diagnosis == checks.CALLED_LIBRARY and name in result.message


def test_rope_answers_of_the_wrong_kind_are_named():
    assert checks.check_rope(lambda q, k, v, p, theta=1e4: (q, k)).diagnosis == checks.WRONG_TYPE
    assert checks.check_rope(lambda q, k, v, p, theta=1e4: (q, k, v[..., :2])).diagnosis == checks.WRONG_SHAPE
    assert checks.check_rope(lambda q, k, v, p, theta=1e4: (q.long(), k, v)).diagnosis == checks.INTEGER_OUTPUT
