"""The experiments behind the course's claims give the numbers the prose states."""
import math

import pytest
import torch

from gpt_lesson import GPT
from gpt_lesson import experiments as E


@pytest.mark.parametrize("d_k", [4, 64, 1024])
def test_qk_variance_grows_with_dk_and_scaling_brings_it_to_one(d_k):
    assert abs(E.qk_variance(d_k) / d_k - 1) < 0.1
    assert abs(E.qk_variance(d_k, scale=d_k ** -0.5) - 1) < 0.1


def test_variance_table_rows():
    rows = E.variance_table((4, 256))
    assert [r["d_k"] for r in rows] == [4, 256]
    assert rows[1]["unscaled"] > 50 * rows[0]["unscaled"] / 4 and abs(rows[1]["scaled"] - 1) < 0.1


def test_unscaled_softmax_saturates_and_its_gradient_vanishes():
    raw = E.softmax_stats(512, T=16, scale=1.0)
    scaled = E.softmax_stats(512, T=16, scale=512 ** -0.5)
    assert raw["max_weight"] > 0.98 and raw["entropy"] < 0.1
    assert scaled["max_weight"] < 0.6 and scaled["entropy"] > 1.0
    assert raw["grad_norm"] < 0.1 * scaled["grad_norm"]
    assert math.isclose(float(scaled["weights"].sum()), 1.0, rel_tol=1e-6)


def test_scale_factor_choices_and_errors():
    assert E.scale_factor(64, "none") == 1.0
    assert E.scale_factor(64, "sqrt") == 0.125
    assert E.scale_factor(64, "temperature", 2.0) == 0.0625
    with pytest.raises(ValueError, match="scaling='cube' is not one of"):
        E.scale_factor(64, "cube")
    with pytest.raises(ValueError, match="temperature=0 must be > 0"):
        E.scale_factor(64, "temperature", 0)


def test_leak_test_zero_with_mask_positive_without():
    torch.manual_seed(0)
    causal = GPT(20, 16, 2, 1, 12)
    open_ = GPT(20, 16, 2, 1, 12, causal=False)
    idx = torch.randint(0, 20, (2, 12))
    assert E.leak_test(causal, idx, 5) == 0.0
    assert E.leak_test(open_, idx, 5) > 1e-4
    with pytest.raises(ValueError, match=r"t=11 must be a position in \[0, T-1=11\)"):
        E.leak_test(causal, idx, 11)


def test_cross_attention_attends_every_real_source_position():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    out, w = E.cross_attention(q, k, v, key_lengths=[5, 3])
    assert out.shape == (2, 3, 8)
    assert torch.all(w[0] > 0)  # no causal mask: every source position gets weight
    assert torch.all(w[1, :, :3] > 0) and torch.all(w[1, :, 3:] == 0)  # only padding is hidden


def test_kv_cache_bytes_formula_and_gqa():
    assert E.kv_cache_bytes(3, 128, 64) == 2 * 3 * 128 * 64 * 4
    gpt2 = E.kv_cache_bytes(12, 1024, 768, bytes_per_number=2)
    assert gpt2 == 37_748_736  # 36 MiB per sequence in fp16
    assert E.kv_cache_bytes(12, 1024, 768, n_head=12, n_kv_head=3) * 4 == E.kv_cache_bytes(12, 1024, 768)
    enc_dec = E.encoder_decoder_cache_bytes(6, T_src=100, T_out=50, n_embd=64)
    assert enc_dec["total"] == E.kv_cache_bytes(6, 150, 64)
    with pytest.raises(ValueError, match="give both n_head and n_kv_head"):
        E.kv_cache_bytes(1, 1, 8, n_head=2)


def test_train_small_without_mask_reads_the_answer(shakespeare_text):
    small = dict(n_embd=32, n_head=2, n_layer=1, block_size=16, steps=150, batch_size=16,
                 learning_rate=1e-2, eval_interval=150, max_chars=50_000)
    _, _, masked = E.train_small(shakespeare_text, causal=True, **small)
    _, _, leaky = E.train_small(shakespeare_text, causal=False, **small)
    assert leaky.train[-1] < masked.train[-1] - 0.5


@pytest.mark.parametrize("call, error, message", [
    (lambda: E.scale_factor(64, "temperature", "hot"), TypeError, "temperature='hot' must be a number, got str"),
    (lambda: E.scale_factor(64, "temperature", float("nan")), ValueError, "temperature=nan must be a finite number"),
    (lambda: E.scale_factor(64, 2), ValueError, r"scaling=2 is not one of \('none', 'sqrt', 'temperature'\)"),
    (lambda: E.qk_variance(16, scale=float("inf")), ValueError, "scale=inf must be a finite number"),
    (lambda: E.qk_variance(16, seed=-1), ValueError, "seed=-1 must be >= 0"),
    (lambda: E.softmax_stats(16, scale="1"), TypeError, "scale='1' must be a number"),
    (lambda: E.leak_test("model", torch.zeros(1, 4, dtype=torch.long), 1), TypeError, "model must be a GPT, got str"),
    (lambda: E.leak_test(GPT(20, 16, 2, 1, 12), torch.zeros(1, 4, dtype=torch.long), 1.0), TypeError,
     "t=1.0 must be an integer, got float"),
    (lambda: E.train_small(b"bytes"), TypeError, "text must be a str, got bytes"),
    (lambda: E.train_small("abc" * 100, max_chars=0), ValueError, "max_chars=0 must be a positive integer"),
    (lambda: E.train_small("abc" * 100, qkv_init_std=0.0), ValueError, "qkv_init_std=0.0 must be > 0"),
    (lambda: E.train_small("abc" * 100, qkv_init_std="big"), TypeError, "qkv_init_std='big' must be a number or None"),
    (lambda: E.train_small("abc" * 100, learning_rate=float("inf")), ValueError,
     "learning_rate=inf must be a finite number"),
])
def test_experiment_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


# --- train_small's qkv_init_std (lesson 11's "where does Var(q.k) = d_k hold" experiment) ---------

QKV_TEXT = "the quick brown fox jumps over the lazy dog. " * 200
QKV_SMALL = dict(n_embd=32, n_head=1, n_layer=1, block_size=16, steps=1, batch_size=4,
             learning_rate=1e-6, eval_interval=1)


def _q_variance(model, tokenizer) -> float:
    idx = torch.tensor([tokenizer.encode(QKV_TEXT[:16])])
    return float(model.attention_records(idx)[0]["q"].var())


def test_qkv_init_std_sets_the_spread_of_the_attention_projections():
    model, tok, _ = E.train_small(QKV_TEXT, qkv_init_std=32 ** -0.5, **QKV_SMALL)
    w = model.blocks[0].sa.c_attn.weight.detach()
    assert abs(float(w.std()) - 32 ** -0.5) < 0.01
    # Layer-normed inputs times weights of std 1/sqrt(n_embd): q entries of variance about 1.
    assert 0.5 < _q_variance(model, tok) < 2.0


def test_default_init_keeps_small_scores():
    model, tok, _ = E.train_small(QKV_TEXT, **QKV_SMALL)
    assert abs(float(model.blocks[0].sa.c_attn.weight.detach().std()) - 0.02) < 0.005
    assert _q_variance(model, tok) < 0.05


def test_qkv_init_std_changes_only_c_attn():
    a, _, _ = E.train_small(QKV_TEXT, **QKV_SMALL)
    b, _, _ = E.train_small(QKV_TEXT, qkv_init_std=0.5, **QKV_SMALL)
    assert not torch.equal(a.blocks[0].sa.c_attn.weight, b.blocks[0].sa.c_attn.weight)
    # One step of lr 1e-6 moves a weight by about 1e-6: the other weights start equal.
    assert torch.allclose(a.token_embedding_table.weight, b.token_embedding_table.weight, atol=1e-5)
    assert torch.allclose(a.blocks[0].ffwd.net[0].weight, b.blocks[0].ffwd.net[0].weight, atol=1e-5)


@pytest.mark.parametrize("bad, error", [("0.1", TypeError), (True, TypeError), (0.0, ValueError), (-1.0, ValueError)])
def test_qkv_init_std_rejects_bad_values(bad, error):
    with pytest.raises(error, match="qkv_init_std"):
        E.train_small(QKV_TEXT, qkv_init_std=bad, **QKV_SMALL)


# --- Lessons 07 and 08: residual stacks at initialisation ------------------------------------------

def test_gelu_second_moment_matches_a_sample():
    c = E.gelu_second_moment()
    z = torch.randn(2_000_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert abs(c - float((torch.nn.functional.gelu(z) ** 2).mean())) < 2e-3
    assert 0.25 < c < 0.5  # between (z/2)^2 near 0 and ReLU's 1/2


def test_default_init_makes_the_plain_stack_vanish_not_the_residual_one():
    plain = E.ffn_stack_gradients(False, "default", seeds=(0,))
    residual = E.ffn_stack_gradients(True, "default", seeds=(0,))
    assert plain["variance"][0] < 0.1  # one default sublayer: variance 1 -> about 0.04
    assert plain["grad"][0] < 1e-15 * plain["grad"][-1]
    assert residual["grad"][0] > 0.5 * residual["grad"][-1]  # the identity path carries it


def test_variance_preserving_init_keeps_the_plain_stack_alive():
    plain = E.ffn_stack_gradients(False, "preserving")
    assert all(0.5 < v < 2.0 for v in plain["variance"])
    assert 0.5 < plain["grad"][0] / plain["grad"][-1] < 5  # no vanishing gradient at layer 1
    one = E.ffn_stack_gradients(False, "preserving", n_layer=1, seeds=(0, 1, 2, 3, 4))
    assert abs(one["variance"][0] - 1) < 0.1  # one sublayer keeps a unit variance


def test_residual_stack_of_preserving_sublayers_doubles_its_variance_per_layer():
    residual = E.ffn_stack_gradients(True, "preserving", n_layer=12, seeds=(0,))
    v = residual["variance"]
    growth = (v[-1] / v[0]) ** (1 / 11)
    assert 1.8 < growth < 2.5 and v[-1] > 1e3
    assert len(residual["grad"]) == 12 and all(g > 0 for g in residual["grad"])


def test_the_stack_is_the_same_for_the_same_seed_and_wiring_is_all_that_differs():
    a = E.ffn_stack_gradients(False, "preserving", n_layer=3, seeds=(5,))
    b = E.ffn_stack_gradients(False, "preserving", n_layer=3, seeds=(5,))
    c = E.ffn_stack_gradients(True, "preserving", n_layer=3, seeds=(5,))
    assert a == b and a["variance"][0] != c["variance"][0]
    # the first layer reads the same input either way: only its output differs by x itself
    assert abs(c["variance"][0] - (a["variance"][0] + 1)) < 0.2


def test_scale_residual_projections_scales_exactly_the_two_projections():
    torch.manual_seed(0)
    model = GPT(20, 16, 2, 3, 8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert E.scale_residual_projections(model) is model
    for key, value in model.state_dict().items():
        scaled = key.endswith(("sa.c_proj.weight", "ffwd.net.2.weight"))
        expected = before[key] * 6 ** -0.5 if scaled else before[key]
        assert torch.allclose(value, expected, rtol=0, atol=1e-7), key
    assert sum(k.endswith(("sa.c_proj.weight", "ffwd.net.2.weight")) for k in before) == 6


def test_residual_stream_variance_grows_with_depth_and_gpt2_scaling_keeps_it_flat():
    ratios = {}
    for n_layer in (2, 8):
        for scale in (False, True):
            run = E.residual_stream_variance(n_layer, scale_residual=scale, seeds=(0, 1))
            stream, branches = run["stream"], run["branches"]
            assert len(stream) == n_layer + 1 and len(branches) == 2 * n_layer
            # the stream is the embeddings plus what the 2 * n_layer branches added, nearly uncorrelated
            assert abs(stream[0] + sum(branches) - stream[-1]) < 0.1 * stream[-1]
            ratios[n_layer, scale] = stream[-1] / stream[0]
    assert 3 < ratios[8, False] / ratios[2, False] < 4.5  # 4 times the depth: about 4 times the growth
    assert abs(ratios[8, True] / ratios[2, True] - 1) < 0.1  # GPT-2's factor: the same at both depths
    assert ratios[8, True] < ratios[8, False] / 5


def test_residual_stream_variance_matches_the_model_output_without_hooks_left():
    torch.manual_seed(0)
    run = E.residual_stream_variance(2, seeds=(0,))
    torch.manual_seed(0)
    with E.default_dtype(torch.float64):
        model = GPT(65, 64, 4, 2, 32, dropout=0.0).eval()
    idx = torch.randint(65, (8, 32), generator=torch.Generator().manual_seed(1000))
    with torch.no_grad():
        x = model.token_embedding_table(idx) + model.position_embedding_table(torch.arange(32))
        assert math.isclose(float(x.var()), run["stream"][0], rel_tol=1e-12)
        x = model.blocks(x)
        assert math.isclose(float(x.var()), run["stream"][-1], rel_tol=1e-12)
    assert all(not b._forward_hooks and not b._forward_pre_hooks for b in model.modules())


@pytest.mark.parametrize("call, error, message", [
    (lambda: E.ffn_stack_gradients(1), TypeError, "residual=1 must be True or False, got int"),
    (lambda: E.ffn_stack_gradients(True, "kaiming"), ValueError, r"init='kaiming' is not one of \('default', 'preserving'\)"),
    (lambda: E.ffn_stack_gradients(True, n_layer=0), ValueError, "n_layer=0 must be a positive integer"),
    (lambda: E.ffn_stack_gradients(True, seeds=()), ValueError, r"seeds=\(\) must hold at least one seed"),
    (lambda: E.ffn_stack_gradients(True, seeds=3), TypeError, "seeds must be a tuple or list, got int"),
    (lambda: E.ffn_stack_gradients(True, seeds=[0, -1]), ValueError, r"seeds\[1\]=-1 must be >= 0"),
    (lambda: E.residual_stream_variance(0), ValueError, "n_layer=0 must be a positive integer"),
    (lambda: E.residual_stream_variance(2, scale_residual="yes"), TypeError,
     "scale_residual='yes' must be True or False, got str"),
    (lambda: E.residual_stream_variance(2, batch_size=0), ValueError, "batch_size=0 must be a positive integer"),
    (lambda: E.residual_stream_variance(2, seeds=(0.5,)), TypeError, r"seeds\[0\]=0.5 must be an integer"),
    (lambda: E.scale_residual_projections("model"), TypeError, "model must be a GPT, got str"),
])
def test_residual_experiment_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_residual_experiments_run_on_one_thread_and_restore_the_setting(monkeypatch):
    threads = torch.get_num_threads()
    seen = []
    for name in ("_stream_record", "_ffn_stack_run"):
        original = getattr(E, name)

        def spy(*args, _original=original):
            seen.append(torch.get_num_threads())
            return _original(*args)

        monkeypatch.setattr(E, name, spy)
    try:
        torch.set_num_threads(2)
        E.residual_stream_variance(1, seeds=(0,))
        E.ffn_stack_gradients(True, n_layer=2, seeds=(0, 1))
        assert seen == [1, 1, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
# --- score_gradients (lessons 04 and 11, Q1: what reaches W_q and W_k) ----------------------------------


def _one_draw(d_k: int, scale: float, seed: int, T: int = 8, lr: float = 1e-3) -> dict:
    """One draw of score_gradients written out plainly: autograd on a leaf q, torch.optim.Adam's real step."""
    g = torch.Generator().manual_seed(seed)
    q, k, v, upstream = (torch.randn(T, d_k, generator=g, dtype=torch.float64) for _ in range(4))
    q, k = torch.nn.Parameter(q), k.requires_grad_(True)
    future = torch.ones(T, T).tril() == 0
    scores = scale * q @ k.T
    scores.retain_grad()
    (torch.softmax(scores.masked_fill(future, float("-inf")), -1) @ v).backward(upstream)
    before = scores.detach().clone()
    torch.optim.Adam([q], lr=lr).step()
    moved = (scale * q.detach() @ k.detach().T - before).masked_fill(future, 0.0)
    return {"grad_scores": float(scores.grad.norm()), "grad_q": float(q.grad.norm()), "grad_k": float(k.grad.norm()),
            "score_step": float(moved.norm())}


@pytest.mark.parametrize("scale", [1.0, 16 ** -0.5])
def test_score_gradients_is_the_mean_of_plain_autograd_draws(scale):
    got = E.score_gradients(16, scale, T=8, n_draws=3, seed=5)
    draws = [_one_draw(16, scale, seed) for seed in (5, 6, 7)]
    for key in ("grad_scores", "grad_q", "grad_k", "score_step"):
        assert math.isclose(got[key], sum(d[key] for d in draws) / 3, rel_tol=1e-6), key
    assert 0 < got["top_share"] <= got["top2_share"] <= 1 and 1 / 8 < got["max_weight"] <= 1


def test_more_gradient_reaches_the_queries_without_the_scaling_and_it_piles_onto_two_keys():
    scaled, unscaled = E.score_gradients(64, 64 ** -0.5, n_draws=50), E.score_gradients(64, 1.0, n_draws=50)
    assert unscaled["grad_scores"] < scaled["grad_scores"]  # the softmax passes less back to the scores ...
    assert unscaled["grad_q"] > 4 * scaled["grad_q"]  # ... yet sqrt(d_k) = 8 times the factor reaches q
    assert unscaled["grad_k"] > 4 * scaled["grad_k"]  # ... and k
    assert unscaled["top2_share"] > 0.8 > 0.5 > scaled["top2_share"]
    assert 6 < unscaled["score_step"] / scaled["score_step"] < 10  # one Adam step: about sqrt(64) = 8 times as far
    assert unscaled["max_weight"] > 0.7 > 0.3 > scaled["max_weight"]


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(d_k=0, scale=1.0), ValueError, "d_k=0 must be a positive integer"),
    (dict(d_k=8, scale=0.0), ValueError, "scale=0.0 must be > 0"),
    (dict(d_k=8, scale=1.0, T=1), ValueError, "T=1 must be"),
    (dict(d_k=8, scale=1.0, n_draws=0), ValueError, "n_draws=0 must be a positive integer"),
    (dict(d_k=8, scale=1.0, lr=-1.0), ValueError, "lr=-1.0 must be > 0"),
    (dict(d_k=8, scale="1"), TypeError, "scale='1' must be a number"),
])
def test_score_gradients_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        E.score_gradients(**kwargs)
