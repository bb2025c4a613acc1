"""The KV cache (gpt_lesson.kv_cache): the model's own modules on the new positions, the same numbers as the full pass.

The equivalence chain of attention: the explicit steps = PyTorch's fused kernel = nn.MultiheadAttention
= the cached steps (a prefill, a chunk, one token at a time) = the one-query sums the compiled step uses.
"""
import pytest
import torch
import torch.nn as nn

from gpt_lesson import GPT, GPTConfig
from gpt_lesson import model as M
from gpt_lesson.attention import one_query_attention
from gpt_lesson.checkpoints import load_checkpoint, save_checkpoint
from gpt_lesson.kv_cache import CompiledDecodeStep, KVCache, LayerKVCache, cached_attention, cached_forward, decode_step
from gpt_lesson.model import CausalSelfAttention


def _mha_like(sa: CausalSelfAttention) -> nn.MultiheadAttention:
    C = sa.c_attn.in_features
    mha = nn.MultiheadAttention(C, sa.n_head, bias=False, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(sa.c_attn.weight)  # rows: q, k, v, in the same order as c_attn's split
        mha.out_proj.weight.copy_(sa.c_proj.weight)
    return mha


@pytest.mark.parametrize("n_embd,n_head,T", [(64, 4, 24), (48, 6, 17), (16, 1, 9)])
def test_attention_five_ways_gives_the_same_numbers(n_embd, n_head, T):
    torch.manual_seed(n_embd + T)
    naive = CausalSelfAttention(n_embd, n_head, block_size=32, dropout=0.0).eval()
    fused = CausalSelfAttention(n_embd, n_head, block_size=32, dropout=0.0, attn_impl="sdpa").eval()
    fused.load_state_dict(naive.state_dict())
    x = torch.randn(3, T, n_embd)
    with torch.no_grad():
        expected = naive(x)
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = not allowed
        ways = {"sdpa": fused(x), "nn.MultiheadAttention": _mha_like(naive)(x, x, x, attn_mask=future,
                                                                          need_weights=False)[0]}
        hs = n_embd // n_head
        cache = KVCache(1, 3, n_head, hs, 32)
        cut = T // 2  # a prefill, a chunk of 2 after it, then one position at a time
        parts = [cached_attention(naive, x[:, :cut], cache.layers[0]),
                 cached_attention(naive, x[:, cut:cut + 2], cache.layers[0])]
        parts += [cached_attention(naive, x[:, t:t + 1], cache.layers[0]) for t in range(cut + 2, T)]
        ways["cached"] = torch.cat(parts, dim=1)
        cache.reset()
        steps = [cached_attention(naive, x[:, t:t + 1], cache.layers[0], summed=True) for t in range(T)]
        ways["one-query sums"] = torch.cat(steps, dim=1)
    for name, out in ways.items():
        assert (out - expected).abs().max().item() < 1e-5, name


@pytest.mark.parametrize("attn_impl", ["naive", "sdpa"])
def test_kv_cache_forward_equals_full_forward(attn_impl):
    torch.manual_seed(0)
    model = GPT(40, 32, 4, 2, 24, attn_impl=attn_impl).eval()
    idx = torch.randint(0, 40, (2, 20))
    full, _ = model(idx)
    cache = KVCache.for_model(model, batch_size=2)
    parts = [model(idx[:, :7], kv_cache=cache)[0]]  # prefill 7 tokens
    parts.append(model(idx[:, 7:10], kv_cache=cache)[0])  # a chunk of 3 after a cache
    for t in range(10, 20):
        parts.append(model(idx[:, t:t + 1], kv_cache=cache)[0])  # one token at a time
    assert cache.length == 20
    assert (torch.cat(parts, dim=1) - full).abs().max().item() < 1e-5


@pytest.mark.parametrize("attn_impl", ["naive", "sdpa"])
def test_kv_cache_one_token_steps_past_and_up_to_the_full_buffer(attn_impl):
    """Every cached step, including the one that fills the last position of the buffer, equals the full pass."""
    torch.manual_seed(1)
    model = GPT(40, 32, 4, 2, 12, attn_impl=attn_impl).eval()
    idx = torch.randint(0, 40, (3, 12))
    full, _ = model(idx)
    cache = KVCache.for_model(model, batch_size=3)
    steps = [model(idx[:, :1], kv_cache=cache)[0]] + [model(idx[:, t:t + 1], kv_cache=cache)[0] for t in range(1, 12)]
    assert cache.length == cache.max_len == 12
    assert all(layer.length == 12 for layer in cache.layers)
    assert (torch.cat(steps, dim=1) - full).abs().max().item() < 1e-5
    with pytest.raises(ValueError, match="T=13 is longer than block_size=12"):
        model(idx[:, :1], kv_cache=cache)


def test_the_cache_uses_the_models_own_modules(tmp_path):
    """No weights of its own: a checkpoint loads strictly and serves the cached forward as it is."""
    torch.manual_seed(2)
    model = GPT(30, 32, 2, 2, 16, attn_scale=0.3)
    loaded, _ = load_checkpoint(save_checkpoint(tmp_path / "m.pt", model))
    loaded.eval()
    idx = torch.randint(0, 30, (1, 9))
    with torch.no_grad():
        cached = cached_forward(loaded, idx, KVCache.for_model(loaded))
        full, _ = loaded(idx)
    assert (cached - full).abs().max() < 1e-5  # attn_scale=0.3 is the layer's scale in both


def test_kv_cache_size_formula():
    model = GPT(1000, 64, 4, 3, 128)
    cache = KVCache.for_model(model, batch_size=1)
    assert cache.k.shape == (3, 1, 4, 128, 16)
    assert cache.nbytes == 2 * 3 * 128 * 64 * 4


def test_for_model_fits_a_model_with_fewer_key_value_heads():
    """Grouped-query attention (lesson 14's Llama): config.n_kv_head heads of keys and values."""

    class GQA(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = type("Config", (), dict(n_layer=2, n_head=8, n_kv_head=2, n_embd=64, block_size=20))()
            self.w = nn.Linear(1, 1, dtype=torch.float64)

    cache = KVCache.for_model(GQA(), batch_size=3, max_len=10)
    assert cache.k.shape == (2, 3, 2, 10, 8) and cache.k.dtype == torch.float64


def test_a_cache_of_its_own_kind_serves_the_model():
    """Lesson 10's first idea, a cache that grows with torch.cat: the model needs only update() and length."""

    class ConcatLayerCache(LayerKVCache):
        def __init__(self):
            self.k = self.v = None
            self.length = 0

        def update(self, k_new, v_new):
            self.k = k_new if self.k is None else torch.cat([self.k, k_new], dim=2)
            self.v = v_new if self.v is None else torch.cat([self.v, v_new], dim=2)
            self.length = self.k.size(2)
            return self.k, self.v

    class ConcatKVCache(KVCache):
        batch_size = 1

        def __init__(self, n_layer):
            self.layers = [ConcatLayerCache() for _ in range(n_layer)]

    torch.manual_seed(4)
    model = GPT(30, 32, 4, 2, 16, attn_impl="sdpa").eval()
    idx = torch.randint(0, 30, (1, 10))
    full, _ = model(idx)
    cache = ConcatKVCache(2)
    with torch.no_grad():
        steps = [model(idx[:, :4], kv_cache=cache)[0]] + [decode_step(model, idx[:, t:t + 1], cache)[:, None]
                                                          for t in range(4, 10)]
    assert (torch.cat(steps, dim=1) - full).abs().max() < 1e-5


def test_cache_errors_are_named():
    torch.manual_seed(0)
    tiny = GPT(10, 8, 2, 1, 6)
    with pytest.raises(ValueError, match=r"kv_cache has 1 layers for batch size 1, but this model has n_layer=1 "
                                         r"and idx has batch size 2"):
        tiny(torch.zeros(2, 3, dtype=torch.long), kv_cache=KVCache.for_model(tiny, batch_size=1))
    with pytest.raises(ValueError, match="do not fit this cache .*another model"):
        tiny(torch.zeros(2, 3, dtype=torch.long), kv_cache=KVCache.for_model(GPT(10, 12, 3, 1, 6), batch_size=2))
    with pytest.raises(TypeError, match="kv_cache must be a KVCache, got dict"):
        tiny(torch.zeros(2, 3, dtype=torch.long), kv_cache={})
    with pytest.raises(ValueError, match="targets were given with a kv_cache: the cache is for generation"):
        tiny(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long), kv_cache=KVCache.for_model(tiny))
    with pytest.raises(ValueError, match="a KV cache needs a causal model"):
        GPT(10, 8, 2, 1, 6, causal=False)(torch.zeros(1, 2, dtype=torch.long),
                                          kv_cache=KVCache.for_model(tiny))
    # overflow and bad sizes: tests/test_errors.py::test_kv_cache_overflow_and_bad_sizes


def test_the_one_query_sums_need_one_query():
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"one_query_attention takes one query per head, got q of shape \(1, 2, 3, 4\)"):
        one_query_attention(q, q, q, 0.5)


def test_lesson_10_imports_the_cache_from_the_model_module():
    """``from gpt_lesson.model import KVCache, LayerKVCache`` (lesson 10, the checks) is the same class."""
    import gpt_lesson.kv_cache as K

    assert M.KVCache is K.KVCache and M.LayerKVCache is K.LayerKVCache


@pytest.mark.slow
def test_the_compiled_step_gives_the_cached_steps_numbers():
    """The last link of the chain: torch.compile of the one-token step (needs a C++ compiler)."""
    torch.manual_seed(5)
    model = GPT(GPTConfig(40, 32, 4, 2, 16, dropout=0.0, attn_impl="sdpa")).eval()
    idx = torch.randint(0, 40, (2, 12))
    full, _ = model(idx)
    step = CompiledDecodeStep()
    cache = KVCache.for_model(model, batch_size=2)
    with torch.inference_mode():
        model(idx[:, :3], kv_cache=cache)
        got = torch.stack([step(model, idx[:, t:t + 1], cache) for t in range(3, 12)], dim=1)
    assert step.failure is None, step.failure
    assert (got - full[:, 3:]).abs().max() < 1e-5
