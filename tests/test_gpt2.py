"""GPT-2 in the course's code against transformers' GPT2LMHeadModel, and its weight loader.

The reference models are small random ones built from a config (no download): their weights go through
the course's loader, and the logits, the greedy tokens (with and without the KV cache) and the loaded
files must agree. The real 124M file is never downloaded: the hub is replaced by a local file, or asked
in offline mode with an empty cache.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

from gpt_lesson import GPT, generate
from gpt_lesson.data import sha256_of
from gpt_lesson.gpt2 import (
    GPT2,
    GPT2_BYTES,
    GPT2_SHA256,
    GPT2_URL,
    GPT2Config,
    convert_gpt2_state_dict,
    gpt2_weights_path,
    init_gpt2_weights,
    load_gpt2,
)
from gpt_lesson.training import TrainConfig, train

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may try the network, whatever a test does

# vocab_size, n_positions (block_size), n_embd, n_layer, n_head: odd sizes, one head, several layers
CONFIGS = [(101, 16, 24, 2, 3), (67, 9, 30, 3, 5), (50, 32, 64, 1, 1), (13, 7, 12, 4, 2)]


@pytest.fixture(scope="module")
def transformers():
    return pytest.importorskip("transformers")


def reference(transformers, V, T, C, L, H, seed=0, **extra):
    """A random transformers GPT-2 (weights spread wide enough that greedy tokens have clear winners)."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=H,
                                     bos_token_id=None, eos_token_id=None, initializer_range=0.2, **extra)
    return transformers.GPT2LMHeadModel(config).eval()


def _shapes(T):
    return [(1, 1), (3, T), (2, max(1, T // 2))]  # (B, T): one token, the full block, a batch of half blocks


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c)))
def test_logits_equal_transformers(transformers, config):
    ref = reference(transformers, *config)
    ours = load_gpt2(ref)
    V, T = config[:2]
    g = torch.Generator().manual_seed(1)
    for B, t in _shapes(T):
        idx = torch.randint(V, (B, t), generator=g)
        with torch.no_grad():
            diff = (ref(idx).logits - ours(idx)[0]).abs().max().item()
        assert diff < 1e-5, (config, B, t, diff)


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c)))
def test_greedy_tokens_equal_with_and_without_the_cache(transformers, config):
    ref = reference(transformers, *config)
    ours = load_gpt2(ref)
    V, T = config[:2]
    idx = torch.randint(V, (2, 2), generator=torch.Generator().manual_seed(2))
    n = T - 2
    with torch.no_grad():
        theirs = [ref.generate(idx, max_new_tokens=n, do_sample=False, use_cache=c) for c in (True, False)]
    mine = [generate(ours, idx, n, temperature=0, use_cache=c) for c in (True, False)]
    assert torch.equal(theirs[0], theirs[1])
    assert torch.equal(mine[0], theirs[0]) and torch.equal(mine[1], theirs[0])


def test_cached_forward_equals_the_uncached_one(transformers):
    from gpt_lesson import KVCache

    ours = load_gpt2(reference(transformers, *CONFIGS[0]))
    idx = torch.randint(101, (2, 16), generator=torch.Generator().manual_seed(3))
    cache = KVCache.for_model(ours, batch_size=2)
    with torch.no_grad():
        full = ours(idx)[0]
        steps = [ours(idx[:, :5], kv_cache=cache)[0]] + [ours(idx[:, t:t + 1], kv_cache=cache)[0] for t in range(5, 16)]
    assert (torch.cat(steps, dim=1) - full).abs().max() < 1e-5


def test_with_the_four_differences_off_it_is_the_source_model():
    torch.manual_seed(0)
    source = GPT(53, 24, 3, 2, 10, dropout=0.0)
    off = GPT2(GPT2Config(vocab_size=53, block_size=10, n_layer=2, n_head=3, n_embd=24, dropout=0.0,
                          attn_bias=False, tie_weights=False, gelu="exact"))
    assert set(off.state_dict()) == set(source.state_dict())
    off.load_state_dict(source.state_dict(), strict=True)
    idx = torch.randint(53, (2, 10))
    assert torch.equal(off(idx)[0], source(idx)[0])


def test_each_difference_changes_what_it_says():
    sizes = dict(vocab_size=53, block_size=10, n_layer=2, n_head=3, n_embd=24)
    C, V, L = 24, 53, 2
    off = GPT2(GPT2Config(**sizes, attn_bias=False, tie_weights=False, gelu="exact"))
    biased = GPT2(GPT2Config(**sizes, attn_bias=True, tie_weights=False, gelu="exact"))
    tied = GPT2(GPT2Config(**sizes, attn_bias=False, tie_weights=True, gelu="exact"))
    tanh = GPT2(GPT2Config(**sizes, attn_bias=False, tie_weights=False, gelu="tanh"))
    assert biased.num_parameters() - off.num_parameters() == L * (3 * C + C)
    assert off.num_parameters() - tied.num_parameters() == V * C + V  # lm_head's matrix and its bias
    assert tied.lm_head.weight is tied.token_embedding_table.weight and tied.lm_head.bias is None
    assert tanh.num_parameters() == off.num_parameters()
    assert tanh.blocks[0].ffwd.net[1].approximate == "tanh" and off.blocks[0].ffwd.net[1].approximate == "none"


def test_gpt2_small_has_124_million_parameters():
    with torch.device("meta"):
        model = GPT2()
    assert model.num_parameters() == 124_439_808
    assert (model.config.vocab_size, model.config.block_size, model.config.n_layer, model.config.n_embd) == (
        50257, 1024, 12, 768)


def test_init_scales_the_residual_projections():
    torch.manual_seed(0)
    model = GPT2(GPT2Config(vocab_size=100, block_size=8, n_layer=8, n_head=4, n_embd=256))
    residual = torch.cat([p.flatten() for b in model.blocks for p in (b.sa.c_proj.weight, b.ffwd.net[2].weight)])
    others = torch.cat([b.sa.c_attn.weight.flatten() for b in model.blocks])
    assert abs(residual.std().item() - 0.02 / 4) < 2e-4  # 1 / sqrt(2 * 8) = 1/4
    assert abs(others.std().item() - 0.02) < 3e-4
    assert all(b.sa.c_attn.bias.abs().max() == 0 for b in model.blocks)
    init_gpt2_weights(model, scale_residual=False)
    residual = torch.cat([b.sa.c_proj.weight.flatten() for b in model.blocks])
    assert abs(residual.std().item() - 0.02) < 5e-4


@pytest.mark.slow
def test_gpt2_trains_and_generates_with_the_course_loop():
    torch.manual_seed(0)
    model = GPT2(GPT2Config(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0))
    data = torch.randint(20, (400,))
    hist = train(model, data[:300], data[300:], TrainConfig(max_steps=3, batch_size=4, eval_interval=3,
                                                            eval_iters=1, progress=False))
    assert len(hist.loss) == 3
    assert generate(model, data[None, :3], 4, temperature=0).shape == (1, 7)


# ---------------------------------------------------------------------------------------------- files


def published_like_file(transformers, tmp_path, old_masks=True):
    """A safetensors file laid out like the published one: short names, no lm_head, (old files) the masks."""
    from safetensors.torch import save_file

    ref = reference(transformers, *CONFIGS[0])
    state = {k.removeprefix("transformer."): v.contiguous() for k, v in ref.state_dict().items()
             if k != "lm_head.weight"}
    if old_masks:
        for i in range(CONFIGS[0][3]):
            state[f"h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, 16, 16))
    path = tmp_path / "model.safetensors"
    save_file(state, str(path))
    return ref, path


def test_a_local_file_loads_with_its_checksum(transformers, tmp_path):
    ref, path = published_like_file(transformers, tmp_path)
    ours = load_gpt2(path, n_head=3, sha256=sha256_of(path))
    idx = torch.randint(101, (2, 16))
    with torch.no_grad():
        assert (ref(idx).logits - ours(idx)[0]).abs().max() < 1e-5
    assert load_gpt2(str(path), n_head=3, sha256=None).gpt2_config.n_head == 3


def test_a_file_with_another_checksum_is_refused(transformers, tmp_path):
    _, path = published_like_file(transformers, tmp_path)
    with pytest.raises(ValueError, match=f"sha256 .* not the expected {GPT2_SHA256}.*sha256=None"):
        load_gpt2(path, n_head=3)


def test_missing_and_unreadable_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no weights file at .*nothing.safetensors"):
        load_gpt2(tmp_path / "nothing.safetensors", sha256=None)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="bad.safetensors is not a readable safetensors file"):
        load_gpt2(bad, sha256=None)


def test_n_head_is_needed_when_the_width_is_not_64_per_head(transformers, tmp_path):
    _, path = published_like_file(transformers, tmp_path)
    with pytest.raises(ValueError, match="n_embd=24, not a multiple of GPT-2's head size 64: pass n_head="):
        load_gpt2(path, sha256=None)


def test_the_hub_file_is_checked_too(transformers, tmp_path, monkeypatch):
    import huggingface_hub

    _, path = published_like_file(transformers, tmp_path, old_masks=False)
    asked = {}

    def fake_download(repo, filename, revision=None, local_files_only=False, **kwargs):
        asked.update(repo=repo, filename=filename, revision=revision, local_files_only=local_files_only)
        return str(path)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    assert load_gpt2(download=True, n_head=3, sha256=sha256_of(path)).config.vocab_size == 101
    assert asked == {"repo": "openai-community/gpt2", "filename": "model.safetensors",
                     "revision": "607a30d783dfa663caf39e06633721c8d4cfcd7e", "local_files_only": False}
    with pytest.raises(ValueError, match="not the expected"):  # the pinned checksum by default
        load_gpt2(download=True, n_head=3)
    load_gpt2(n_head=3, sha256=None)
    assert asked["local_files_only"] is True  # download=False only looks in the cache


def test_offline_without_the_file_says_what_to_download(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for download in (False, True):
        with pytest.raises(FileNotFoundError) as err:
            gpt2_weights_path(download=download)
        text = str(err.value)
        assert f"{GPT2_BYTES:,} bytes, about 550 MB" in text and GPT2_URL in text and GPT2_SHA256 in text
        assert "load_gpt2(download=True)" in text and "load_gpt2('path/to/model.safetensors')" in text
    assert "could not be downloaded" in text  # download=True says the download failed, and why


def test_a_failed_download_is_reported(monkeypatch):
    import huggingface_hub

    def no_network(*args, **kwargs):
        raise ConnectionError("Temporary failure in name resolution")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_network)
    with pytest.raises(FileNotFoundError, match="could not be downloaded .*ConnectionError: Temporary failure"):
        load_gpt2(download=True)


@pytest.mark.slow
def test_importing_the_module_imports_no_hub_code():
    code = ("import sys, gpt_lesson.gpt2, gpt_lesson.llama, gpt_lesson.checks; "
            "print(sorted(m for m in ('huggingface_hub', 'safetensors', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------------------------------- bad input


def test_state_dict_problems_are_named(transformers):
    state = reference(transformers, *CONFIGS[0]).state_dict()
    with pytest.raises(ValueError, match="not GPT-2's: transformer.h.0.attn.extra"):
        convert_gpt2_state_dict({**state, "transformer.h.0.attn.extra": torch.zeros(1)})
    with pytest.raises(ValueError, match="incomplete: blocks.1.ffwd.net.2.bias missing"):
        convert_gpt2_state_dict({k: v for k, v in state.items() if k != "transformer.h.1.mlp.c_proj.bias"})
    with pytest.raises(ValueError, match="lm_head.weight differs from wte.weight"):
        convert_gpt2_state_dict({**state, "lm_head.weight": torch.zeros_like(state["lm_head.weight"])})
    with pytest.raises(TypeError, match=r"hf_state\['wte.weight'\] must be a torch.Tensor, got list"):
        convert_gpt2_state_dict({"wte.weight": [1, 2]})
    with pytest.raises(TypeError, match="hf_state must be a Mapping"):
        convert_gpt2_state_dict([("wte.weight", torch.zeros(1))])
    bad = dict(state)
    bad["transformer.h.0.attn.c_attn.weight"] = torch.zeros(24, 71)
    with pytest.raises(ValueError, match="do not fit together: .*c_attn"):
        load_gpt2(bad, n_head=3)


@pytest.mark.parametrize("extra, message", [
    ({"activation_function": "relu"}, "activation_function='relu' is not one of GPT-2's GELUs"),
    ({"n_inner": 50}, "n_inner=50: this GPT-2 has a 4 \\* n_embd = 96"),
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=True"),
])
def test_variants_the_model_cannot_run_are_refused(transformers, extra, message):
    with pytest.raises(ValueError, match=message):
        load_gpt2(reference(transformers, *CONFIGS[0], **extra))


def test_an_exact_gelu_model_loads_with_the_exact_gelu(transformers):
    ref = reference(transformers, *CONFIGS[0], activation_function="gelu")
    ours = load_gpt2(ref)
    assert ours.gpt2_config.gelu == "exact"
    idx = torch.randint(101, (1, 16))
    with torch.no_grad():
        assert (ref(idx).logits - ours(idx)[0]).abs().max() < 1e-5


@pytest.mark.parametrize("source, error, message", [
    (42, TypeError, "source must be None, a file path, a GPT2LMHeadModel or a state dict, got int"),
    (nn.Linear(2, 2), TypeError, "source=Linear is not a transformers GPT2LMHeadModel"),
    ("", ValueError, "source='' must be a file path, got an empty name"),
])
def test_bad_sources(source, error, message):
    with pytest.raises(error, match=message):
        load_gpt2(source, sha256=None)


def test_bad_loader_arguments():
    with pytest.raises(ValueError, match="n_head=0 must be a positive integer"):
        load_gpt2({}, n_head=0)
    with pytest.raises(TypeError, match="sha256 must be a str, got int"):
        load_gpt2({}, sha256=5)
    with pytest.raises(TypeError, match="download='yes' must be True or False"):
        load_gpt2(download="yes")
    with pytest.raises(TypeError, match="revision must be a str"):
        gpt2_weights_path(revision=3)
    with pytest.raises(TypeError, match="config must be a GPT2Config, got dict"):
        GPT2({"n_layer": 2})
    with pytest.raises(TypeError, match="model must be a GPT, got Linear"):
        init_gpt2_weights(nn.Linear(2, 2))


@pytest.mark.parametrize("field, value, error, message", [
    ("n_embd", 65, ValueError, "n_embd=65 is not divisible by n_head=12"),
    ("vocab_size", 0, ValueError, "vocab_size=0 must be a positive integer"),
    ("block_size", 2.0, TypeError, "block_size=2.0 must be an integer"),
    ("dropout", 1.0, ValueError, "dropout=1.0 must be in \\[0, 1\\)"),
    ("attn_bias", 1, TypeError, "attn_bias=1 must be True or False"),
    ("tie_weights", "no", TypeError, "tie_weights='no' must be True or False"),
    ("gelu", "relu", ValueError, "gelu='relu' is not one of \\('tanh', 'exact'\\)"),
    ("layer_norm_eps", 0, ValueError, "layer_norm_eps=0 must be > 0"),
])
def test_bad_config_values(field, value, error, message):
    with pytest.raises(error, match=message):
        GPT2Config(**{field: value})
