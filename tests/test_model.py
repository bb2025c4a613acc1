"""The GPT reproduces the source model: sizes, names, shapes, loss, causality, equivalent paths."""
import dataclasses
import math

import pytest
import torch
import torch.nn as nn

from gpt_lesson import GPT, GPTConfig
from gpt_lesson.model import Block, CausalSelfAttention, FeedForward, count_parameters_by_part

SEED_CONFIG = dict(vocab_size=1000, n_embd=64, n_head=4, n_layer=3, block_size=128)


@pytest.fixture
def seed_model():
    torch.manual_seed(1337)
    return GPT(**SEED_CONFIG)


def test_parameter_count_matches_source(seed_model):
    assert sum(p.numel() for p in seed_model.parameters()) == 286_504
    assert seed_model.num_parameters() == 286_504


def test_parameter_breakdown_adds_up(seed_model):
    parts = count_parameters_by_part(seed_model)
    assert sum(parts.values()) == 286_504
    assert parts["token embedding"] == 1000 * 64
    assert parts["position embedding"] == 128 * 64
    assert parts["attention"] == 3 * (64 * 192 + 64 * 64)
    assert parts["feed-forward"] == 3 * (64 * 256 + 256 + 256 * 64 + 64)
    assert parts["lm_head"] == 64 * 1000 + 1000


def test_source_demo_runs_unchanged():
    # The source's demo: build the seed config, count parameters, run a (2, 32) batch.
    model = GPT(1000, 64, 4, 3, 128)
    n = sum(p.numel() for p in model.parameters())
    idx = torch.randint(0, 1000, (2, 32))
    logits, loss = model(idx, idx)
    assert n == 286_504
    assert logits.shape == (2, 32, 1000)
    assert loss.shape == ()


def test_logits_shape_with_and_without_targets(seed_model):
    idx = torch.randint(0, 1000, (2, 32))
    logits, loss = seed_model(idx)
    assert logits.shape == (2, 32, 1000) and loss is None
    logits, loss = seed_model(idx, idx)
    assert logits.shape == (2, 32, 1000)  # never flattened to (B*T, vocab)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_initial_loss_near_ln_vocab(seed):
    torch.manual_seed(seed)
    model = GPT(**SEED_CONFIG)
    idx = torch.randint(0, 1000, (2, 32))
    targets = torch.randint(0, 1000, (2, 32))
    _, loss = model(idx, targets)
    assert abs(loss.item() - math.log(1000)) < 0.15


def test_state_dict_keys_and_shapes_follow_source(seed_model):
    sd = seed_model.state_dict()
    expected = {
        "token_embedding_table.weight": (1000, 64),
        "position_embedding_table.weight": (128, 64),
        "blocks.0.ln1.weight": (64,),
        "blocks.0.sa.c_attn.weight": (192, 64),
        "blocks.0.sa.c_proj.weight": (64, 64),
        "blocks.0.sa.tril": (128, 128),
        "blocks.0.ln2.bias": (64,),
        "blocks.0.ffwd.net.0.weight": (256, 64),
        "blocks.0.ffwd.net.0.bias": (256,),
        "blocks.0.ffwd.net.2.weight": (64, 256),
        "blocks.2.ffwd.net.2.bias": (64,),
        "ln_f.weight": (64,),
        "lm_head.weight": (1000, 64),
        "lm_head.bias": (1000,),
    }
    for key, shape in expected.items():
        assert tuple(sd[key].shape) == shape, key
    assert "blocks.0.sa.c_attn.bias" not in sd and "blocks.0.sa.c_proj.bias" not in sd
    # 2 embeddings + 3 blocks x (ln1 w,b; tril; c_attn; c_proj; ln2 w,b; 2 x ffwd w,b) + ln_f w,b + lm_head w,b
    assert len(sd) == 2 + 3 * 11 + 2 + 2
    assert torch.equal(sd["blocks.1.sa.tril"], torch.tril(torch.ones(128, 128)))


def test_gptconfig_is_accepted_and_equals_positional():
    torch.manual_seed(0)
    a = GPT(GPTConfig(vocab_size=50, n_embd=32, n_head=2, n_layer=2, block_size=16))
    torch.manual_seed(0)
    b = GPT(50, 32, 2, 2, 16)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)


@pytest.mark.parametrize("cfg", [
    dict(vocab_size=11, n_embd=8, n_head=1, n_layer=1, block_size=12),
    dict(vocab_size=30, n_embd=32, n_head=4, n_layer=2, block_size=20),
    dict(vocab_size=65, n_embd=48, n_head=6, n_layer=3, block_size=16),
    dict(vocab_size=7, n_embd=16, n_head=8, n_layer=2, block_size=9),
])
@pytest.mark.parametrize("attn_impl", ["naive", "sdpa"])
def test_causality_changing_the_future_never_changes_the_past(cfg, attn_impl):
    torch.manual_seed(sum(cfg.values()))
    model = GPT(**cfg, attn_impl=attn_impl).eval()
    T = cfg["block_size"]
    idx = torch.randint(0, cfg["vocab_size"], (3, T))
    base, _ = model(idx)
    for t in range(T - 1):
        changed = idx.clone()
        changed[:, t + 1:] = torch.randint(0, cfg["vocab_size"], (3, T - t - 1))
        out, _ = model(changed)
        assert torch.equal(out[:, :t + 1], base[:, :t + 1]), f"position <= {t} changed"


def test_without_the_mask_the_future_leaks():
    torch.manual_seed(0)
    model = GPT(30, 32, 4, 2, 16, causal=False).eval()
    idx = torch.randint(0, 30, (2, 16))
    changed = idx.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 30
    assert (model(idx)[0][:, :8] - model(changed)[0][:, :8]).abs().max() > 1e-3


@pytest.mark.parametrize("kw", [{}, {"causal": False}, {"attn_scale": 1.0}])
def test_naive_equals_sdpa(kw):
    torch.manual_seed(0)
    naive = GPT(100, 64, 4, 2, 32, dropout=0.0, **kw).eval()
    sdpa = GPT(100, 64, 4, 2, 32, dropout=0.0, attn_impl="sdpa", **kw).eval()
    sdpa.load_state_dict(naive.state_dict())
    idx = torch.randint(0, 100, (4, 32))
    assert (naive(idx)[0] - sdpa(idx)[0]).abs().max().item() < 1e-5


def test_naive_equals_sdpa_gradients():
    torch.manual_seed(0)
    naive = GPT(100, 64, 4, 2, 32, dropout=0.0)
    sdpa = GPT(100, 64, 4, 2, 32, dropout=0.0, attn_impl="sdpa")
    sdpa.load_state_dict(naive.state_dict())
    idx = torch.randint(0, 100, (4, 32))
    naive(idx, idx)[1].backward()
    sdpa(idx, idx)[1].backward()
    for (name, p), q in zip(naive.named_parameters(), sdpa.parameters()):
        assert (p.grad - q.grad).abs().max().item() < 1e-5, name


def test_attention_equals_torch_multihead_attention():
    torch.manual_seed(0)
    n_embd, n_head, T = 64, 4, 24
    ours = CausalSelfAttention(n_embd, n_head, block_size=32, dropout=0.0).eval()
    mha = nn.MultiheadAttention(n_embd, n_head, bias=False, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(ours.c_attn.weight)  # rows: q, k, v, in the same order as c_attn's split
        mha.out_proj.weight.copy_(ours.c_proj.weight)
    x = torch.randn(3, T, n_embd)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = not allowed
    expected, _ = mha(x, x, x, attn_mask=future, need_weights=False)
    assert (ours(x) - expected).abs().max().item() < 1e-5


def test_dropout_option_and_default():
    assert GPT(**SEED_CONFIG).blocks[0].sa.dropout.p == 0.1  # the source's rate
    m = GPT(**SEED_CONFIG, dropout=0.0)
    assert m.blocks[0].ffwd.net[3].p == 0.0 and m.blocks[0].sa.dropout.p == 0.0
    torch.manual_seed(0)
    m = GPT(50, 32, 2, 1, 16, dropout=0.5)
    idx = torch.randint(0, 50, (2, 16))
    assert not torch.equal(m(idx)[0], m(idx)[0])  # train mode: dropout is random
    m.eval()
    assert torch.equal(m(idx)[0], m(idx)[0])


def test_blocks_are_pre_layernorm_with_residuals():
    torch.manual_seed(0)
    block = Block(16, 2, 8, dropout=0.0)
    x = torch.randn(2, 8, 16)
    h = x + block.sa(block.ln1(x))
    expected = h + block.ffwd(block.ln2(h))
    assert torch.allclose(block(x), expected)


def test_feed_forward_structure():
    ff = FeedForward(16)
    kinds = [type(m) for m in ff.net]
    assert kinds == [nn.Linear, nn.GELU, nn.Linear, nn.Dropout]
    assert ff.net[0].out_features == 64 and ff.net[2].out_features == 16


def test_loss_accepts_non_contiguous_targets(seed_model):
    seed_model.eval()
    data = torch.randint(0, 1000, (33, 2))
    idx, targets = data[:32].T, data[1:].T  # transposed slices: not contiguous
    assert not targets.is_contiguous()
    _, loss = seed_model(idx, targets)
    _, expected = seed_model(idx, targets.contiguous())
    assert torch.equal(loss, expected)


def test_the_config_is_checked_once_and_frozen():
    cfg = GPTConfig(vocab_size=50, n_embd=32, n_head=2, n_layer=2, block_size=16, dropout=0)
    assert cfg.dropout == 0.0 and isinstance(cfg.dropout, float)  # stored as checked
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_head = 3  # would have split 32 channels into heads of 10.67 at the first forward
    model = GPT(cfg)
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.config.causal = False  # a model's options never change behind its buffers' back
    assert dataclasses.replace(cfg, n_head=4).head_size == 8  # a new config is checked again
    with pytest.raises(ValueError, match="n_embd=32 is not divisible by n_head=3"):
        dataclasses.replace(cfg, n_head=3)


def test_layers_take_the_sources_sizes_or_a_config():
    torch.manual_seed(0)
    a = Block(16, 2, 8, dropout=0.0, attn_impl="sdpa", attn_scale=0.5)
    torch.manual_seed(0)
    b = Block(GPTConfig(n_embd=16, n_head=2, block_size=8, dropout=0.0, attn_impl="sdpa", attn_scale=0.5))
    assert a.sa.fused and a.sa.scale == 0.5 and b.sa.fused and b.sa.scale == 0.5
    x = torch.randn(2, 8, 16)
    assert torch.equal(a(x), b(x))
    with pytest.raises(TypeError, match="either a GPTConfig or the sizes"):
        CausalSelfAttention(GPTConfig(), 4)
    with pytest.raises(TypeError, match="either a GPTConfig or the sizes"):
        Block(GPTConfig(), causal=False)


def test_forward_checks_only_the_length_and_leaves_the_ids_to_the_entry_points(seed_model):
    """forward reads no token id (no min/max, no device sync per call): generate, train, estimate_loss and the
    data functions check the ids, once; a bad id reaching the model directly is PyTorch's IndexError."""
    with pytest.raises(ValueError, match=r"sequence length T=129 is longer than block_size=128; crop the context"):
        seed_model(torch.zeros(1, 129, dtype=torch.long))
    with pytest.raises(IndexError, match="index out of range"):
        seed_model(torch.full((1, 4), 1000))
    import gpt_lesson.validation as V

    calls = []
    real = V.check_token_ids
    try:
        V.check_token_ids = lambda *a, **k: calls.append(a) or real(*a, **k)
        seed_model(torch.zeros(2, 8, dtype=torch.long), torch.zeros(2, 8, dtype=torch.long))
    finally:
        V.check_token_ids = real
    assert calls == []


def test_causal_false_is_a_mask_of_ones_and_its_checkpoint_says_so():
    torch.manual_seed(0)
    open_ = GPT(30, 16, 2, 1, 8, causal=False)
    assert torch.equal(open_.blocks[0].sa.tril, torch.ones(8, 8))
    causal = GPT(30, 16, 2, 1, 8)
    with pytest.raises(ValueError, match=r"blocks.0.sa.tril in the checkpoint is not the lower-triangular matrix .*"
                                         r"comes from a model with causal=False"):
        causal.load_state_dict(open_.state_dict())  # a flipped causal flag is caught by the mask it saved
    # Lesson 11: a causal model's weights loaded on purpose into causal=False; its mask stays a matrix of ones.
    open_.load_state_dict(causal.state_dict())
    assert torch.equal(open_.blocks[0].sa.tril, torch.ones(8, 8))
    idx = torch.randint(0, 30, (1, 8))
    with torch.no_grad():
        early = open_(idx)[0][0, 0]
        later = idx.clone()
        later[0, -1] = (later[0, -1] + 1) % 30
        assert not torch.allclose(early, open_(later)[0][0, 0])  # position 0 sees the last token: no mask
    damaged = causal.state_dict()
    damaged["blocks.0.sa.tril"] = torch.eye(8)
    with pytest.raises(ValueError, match="neither a causal mask nor a matrix of ones"):
        open_.load_state_dict(damaged)


def test_count_parameters_by_part_needs_a_gpt():
    with pytest.raises(TypeError, match="model must be a GPT, got Linear"):
        count_parameters_by_part(nn.Linear(2, 2))
