"""Every bad input gets a ValueError/TypeError that names the value and the rule."""
import os
import subprocess
import sys

import pytest
import torch

from gpt_lesson import GPT, GPTConfig
from gpt_lesson import attention as A
from gpt_lesson.data import CharTokenizer, get_batch, train_val_split
from gpt_lesson.model import IGNORE_INDEX, CausalSelfAttention, FeedForward, KVCache
from gpt_lesson.sampling import generate, next_token_probs, sample_next


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    return GPT(10, 8, 2, 1, 6)


# --- sizes -----------------------------------------------------------------------------------
def test_n_embd_not_divisible_by_n_head():
    with pytest.raises(ValueError, match=r"n_embd=65 is not divisible by n_head=4"):
        GPT(1000, 65, 4, 3, 128)
    with pytest.raises(ValueError, match=r"n_embd=10 is not divisible by n_head=3"):
        CausalSelfAttention(10, 3, 8)


@pytest.mark.parametrize("field", ["vocab_size", "n_embd", "n_head", "n_layer", "block_size"])
@pytest.mark.parametrize("bad", [0, -3])
def test_non_positive_sizes(field, bad):
    kwargs = dict(vocab_size=10, n_embd=8, n_head=2, n_layer=1, block_size=6)
    kwargs[field] = bad
    with pytest.raises(ValueError, match=rf"{field}={bad} must be a positive integer"):
        GPT(**kwargs)


@pytest.mark.parametrize("bad", [8.0, "8", True, None])
def test_non_integer_sizes(bad):
    with pytest.raises(TypeError, match="n_embd=.* must be an integer"):
        GPTConfig(vocab_size=10, n_embd=bad, n_head=2, n_layer=1, block_size=6)


def test_bad_dropout_and_attn_impl():
    with pytest.raises(ValueError, match=r"dropout=1.5 must be in \[0, 1\)"):
        GPT(10, 8, 2, 1, 6, dropout=1.5)
    with pytest.raises(TypeError, match="dropout='0.1' must be a number"):
        FeedForward(8, dropout="0.1")
    with pytest.raises(ValueError, match=r"attn_impl='flash' is not one of \('naive', 'sdpa'\)"):
        GPT(10, 8, 2, 1, 6, attn_impl="flash")
    with pytest.raises(ValueError, match=r"attn_scale=-1.0 must be > 0"):
        GPT(10, 8, 2, 1, 6, attn_scale=-1.0)
    with pytest.raises(TypeError, match="attn_scale='none' must be a number or None"):
        GPTConfig(attn_scale="none")


def test_missing_sizes_or_both_config_and_sizes():
    with pytest.raises(TypeError, match=r"missing sizes \['n_layer', 'block_size'\]"):
        GPT(10, 8, 2)
    with pytest.raises(TypeError, match="either a GPTConfig or the sizes"):
        GPT(GPTConfig(), 8)


# --- forward inputs -------------------------------------------------------------------------
def test_sequence_longer_than_block_size(tiny):
    with pytest.raises(ValueError, match=r"T=7 is longer than block_size=6"):
        tiny(torch.zeros(1, 7, dtype=torch.long))


# The model's forward checks only that the sequence fits block_size (issue 23): the ids are checked
# where they enter, in generate, train, estimate_loss and the data functions (check_token_ids).
@pytest.mark.parametrize("bad_id", [10, 99, -1])
def test_token_ids_out_of_range(tiny, bad_id):
    idx = torch.zeros(1, 4, dtype=torch.long)
    idx[0, 2] = bad_id
    with pytest.raises(ValueError, match=rf"idx holds token id {bad_id}, out of range: ids must be in \[0, vocab_size=10\)"):
        generate(tiny, idx, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_token_ids_not_integer(tiny, dtype):
    with pytest.raises(TypeError, match="idx must hold integer token ids"):
        generate(tiny, torch.zeros(1, 4, dtype=dtype), 1)


def test_idx_not_a_tensor(tiny):
    with pytest.raises(TypeError, match="idx must be a torch.Tensor of token ids, got list"):
        generate(tiny, [[1, 2, 3]], 1)


@pytest.mark.parametrize("shape", [(4,), (1, 2, 3)])
def test_idx_wrong_rank(tiny, shape):
    with pytest.raises(ValueError, match=r"idx must have shape \(B, T\)"):
        generate(tiny, torch.zeros(shape, dtype=torch.long), 1)


def test_empty_sequence(tiny):
    with pytest.raises(ValueError, match="T=0 tokens"):
        generate(tiny, torch.zeros(1, 0, dtype=torch.long), 1)


def test_bad_token_data_is_named_where_it_enters(tiny):
    from gpt_lesson.training import estimate_loss, evaluate_split

    data = torch.zeros(40, dtype=torch.long)
    with pytest.raises(ValueError, match=r"splits\['val'\] holds token id 10, out of range"):
        estimate_loss(tiny, {"train": data, "val": torch.full((40,), 10)}, 2, 1)
    with pytest.raises(TypeError, match="data must hold integer token ids"):
        evaluate_split(tiny, torch.zeros(40))


def test_kv_cache_overflow_and_bad_sizes(tiny):
    cache = KVCache.for_model(tiny)
    tiny(torch.zeros(1, 6, dtype=torch.long), kv_cache=cache)
    with pytest.raises(ValueError, match="T=7 is longer than block_size=6"):
        tiny(torch.zeros(1, 1, dtype=torch.long), kv_cache=cache)
    with pytest.raises(ValueError, match="max_len=7 is longer than the model's block_size=6"):
        KVCache.for_model(tiny, max_len=7)
    with pytest.raises(ValueError, match="n_layer=0 must be a positive integer"):
        KVCache(0, 1, 2, 4, 6)


# --- attention pieces -------------------------------------------------------------------------
def test_attention_function_errors():
    q = torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match="q has last dimension 4 but k has 3"):
        A.attention_scores(q, torch.randn(2, 5, 3))
    with pytest.raises(TypeError, match="q must be a torch.Tensor, got list"):
        A.attention_scores([[1.0]], q)
    with pytest.raises(ValueError, match="scale=0 must be > 0"):
        A.attention_scores(q, q, scale=0)
    with pytest.raises(TypeError, match="scale='sqrt' must be a number or None"):
        A.attention_scores(q, q, scale="sqrt")
    with pytest.raises(ValueError, match=r"mask of shape \(4, 4\) does not broadcast to scores of shape \(2, 5, 5\)"):
        A.apply_mask(torch.randn(2, 5, 5), torch.ones(4, 4))
    with pytest.raises(ValueError, match="weights have 5 key columns but v has 4 rows"):
        A.weighted_sum(torch.randn(2, 5, 5), torch.randn(2, 4, 3))
    with pytest.raises(ValueError, match="C=10 is not divisible by n_head=4"):
        A.split_heads(torch.randn(1, 3, 10), 4)
    with pytest.raises(ValueError, match=r"x must have 4 dimensions"):
        A.merge_heads(torch.randn(1, 3, 10))
    with pytest.raises(ValueError, match="T=0 must be a positive integer"):
        A.causal_mask(0)
    with pytest.raises(ValueError, match=r"lengths=\[3, 9\] must each be between 0 and T=5"):
        A.padding_mask([3, 9], 5)
    with pytest.raises(TypeError, match="lengths must be integers"):
        A.padding_mask([2.5], 5)


# --- data -----------------------------------------------------------------------------------
def test_unknown_characters_are_named():
    tok = CharTokenizer("hello world")
    with pytest.raises(ValueError, match=r"characters \['!', 'X'\] are not in the vocabulary"):
        tok.encode("hello X!")
    with pytest.raises(TypeError, match="text must be a str, got int"):
        tok.encode(5)
    with pytest.raises(ValueError, match=r"ids\[1\]=99 must be in \[0, vocab_size=8\)"):
        tok.decode([1, 99])
    with pytest.raises(TypeError, match=r"ids\[0\]=1.5 must be an integer"):
        tok.decode([1.5])
    with pytest.raises(ValueError, match=r"ids must have 1 dimensions, got shape \(1, 2\)"):
        tok.decode(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="cannot build a tokenizer from empty text"):
        CharTokenizer("")


def test_batch_and_split_errors():
    data = torch.arange(20)
    with pytest.raises(ValueError, match="data has 20 tokens; it needs more than block_size=20"):
        get_batch(data, 20, 4)
    with pytest.raises(ValueError, match="batch_size=0 must be a positive integer"):
        get_batch(data, 4, 0)
    with pytest.raises(ValueError, match=r"train_fraction=1.0 must be in \(0, 1\)"):
        train_val_split(data, 1.0)
    with pytest.raises(ValueError, match=r"data must have 1 dimensions, got shape \(4, 5\)"):
        train_val_split(data.view(4, 5))


# --- generation -------------------------------------------------------------------------------
def test_generation_errors(tiny):
    idx = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="temperature=-1 must be >= 0"):
        generate(tiny, idx, 3, temperature=-1)
    with pytest.raises(ValueError, match="top_k=11 must be between 1 and vocab_size=10"):
        generate(tiny, idx, 3, top_k=11)
    with pytest.raises(TypeError, match="top_k=2.0 must be an integer, got float"):
        next_token_probs(torch.zeros(1, 10), top_k=2.0)
    with pytest.raises(ValueError, match="max_new_tokens=-2 must be >= 0"):
        generate(tiny, idx, -2)
    with pytest.raises(TypeError, match="max_new_tokens='5' must be an integer"):
        generate(tiny, idx, "5")
    with pytest.raises(ValueError, match="idx holds token id 12, out of range"):
        generate(tiny, torch.tensor([[12]]), 3)


# --- sampling settings that used to reach torch.multinomial (issue 13) --------------------------
@pytest.mark.parametrize("bad, error, message", [
    (float("nan"), ValueError, r"temperature=nan must be a finite number \(>= 0; 0 means greedy decoding\)"),
    (float("inf"), ValueError, r"temperature=inf must be a finite number"),
    ("0.8", TypeError, r"temperature='0.8' must be a number, got str"),
    (True, TypeError, r"temperature=True must be a number, got bool"),
])
def test_bad_temperatures_are_named(tiny, bad, error, message):
    idx = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(error, match=message):
        generate(tiny, idx, 3, temperature=bad)
    with pytest.raises(error, match=message):
        sample_next(torch.zeros(1, 10), temperature=bad)


@pytest.mark.parametrize("temperature", [1e-45, 1e-300, 5e-324])
def test_a_tiny_temperature_is_greedy_not_nan(tiny, temperature):
    # logits / 1e-45 overflows float32 to inf and softmax then gives NaN; the limit is greedy decoding.
    idx = torch.tensor([[1, 2], [3, 4]])
    probs = next_token_probs(torch.tensor([[2.0, 1.0, 2.0, -3.0]]), temperature)
    assert torch.equal(probs, torch.tensor([[0.5, 0.0, 0.5, 0.0]]))  # ties share, as the limit does
    greedy = generate(tiny, idx, 6, temperature=0)
    for use_cache in (False, True):
        assert torch.equal(generate(tiny, idx, 6, temperature=temperature, use_cache=use_cache), greedy)


def test_nan_logits_are_named_when_sampling():
    with pytest.raises(ValueError, match="logits hold NaN or infinite values, so there is no distribution"):
        sample_next(torch.tensor([[float("nan"), 1.0, 0.0]]), temperature=1.0)
    with pytest.raises(TypeError, match="logits must be a torch.Tensor, got list"):
        next_token_probs([[1.0, 2.0]])


# --- the model-side items of issue 13 (done in model.py / sampling.py / validation.py) -----------
@pytest.mark.parametrize("attn_impl", ["naive", "sdpa"])
@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_attn_scale_non_finite_is_refused_when_the_model_is_built(attn_impl, bad):
    with pytest.raises(ValueError, match=rf"attn_scale={bad} must be a finite number \(> 0\)"):
        GPT(10, 8, 2, 1, 6, attn_impl=attn_impl, attn_scale=bad)
    with pytest.raises(ValueError, match=rf"scale={bad} must be a finite number"):
        A.attention_scores(torch.randn(1, 3, 4), torch.randn(1, 3, 4), scale=bad)  # the same rule, the same words


def test_cached_generation_of_a_non_causal_model_is_refused():
    torch.manual_seed(0)
    model = GPT(10, 8, 2, 1, 6, causal=False)
    with pytest.raises(ValueError, match="use_cache=True needs a causal model"):
        generate(model, torch.zeros(1, 2, dtype=torch.long), 3, use_cache=True)
    assert generate(model, torch.zeros(1, 2, dtype=torch.long), 3, temperature=0).shape == (1, 5)


def test_an_edited_causal_mask_is_refused_at_load(tiny):
    state = tiny.state_dict()
    state["blocks.0.sa.tril"] = torch.ones(6, 6)
    torch.manual_seed(1)
    fresh = GPT(10, 8, 2, 1, 6)
    before = fresh.state_dict()["lm_head.weight"].clone()
    with pytest.raises(ValueError, match="blocks.0.sa.tril in the checkpoint is not the lower-triangular matrix"):
        fresh.load_state_dict(state)
    assert torch.equal(fresh.state_dict()["lm_head.weight"], before)


def test_target_errors_blame_targets_and_ignore_index_is_supported(tiny):
    from gpt_lesson.validation import check_token_ids

    with pytest.raises(ValueError, match=r"targets must have shape \(B, T\), got shape \(8,\)"):
        check_token_ids(torch.zeros(8, dtype=torch.long), 10, name="targets", ignore_index=IGNORE_INDEX)
    with pytest.raises(TypeError, match="targets must hold integer token ids"):
        check_token_ids(torch.zeros(2, 4), 10, name="targets", ignore_index=IGNORE_INDEX)
    with pytest.raises(ValueError, match=r"targets holds token id -5, out of range: .*\(or ignore_index=-100\)"):
        check_token_ids(torch.full((2, 4), -5), 10, name="targets", ignore_index=IGNORE_INDEX)
    idx = torch.zeros(2, 4, dtype=torch.long)
    targets = torch.tensor([[1, 2, IGNORE_INDEX, 3], [IGNORE_INDEX, 4, 5, 6]])
    logits, loss = tiny(idx, targets)
    keep = targets != IGNORE_INDEX
    expected = torch.nn.functional.cross_entropy(logits[keep], targets[keep])
    assert torch.allclose(loss, expected)  # the -100 positions are left out of the mean


@pytest.mark.parametrize("flag", ["causal"])
def test_string_flags_are_not_taken_as_true(flag):
    with pytest.raises(TypeError, match=rf"{flag}='no' must be True or False, got str"):
        GPTConfig(**{flag: "no"})


def test_uint8_token_ids_are_named(tiny):
    with pytest.raises(TypeError, match=r"idx must hold integer token ids \(torch.long\), got dtype torch.uint8; "
                                        r"convert with idx.long\(\)"):
        generate(tiny, torch.zeros(1, 4, dtype=torch.uint8), 1)


def test_a_kv_cache_of_the_wrong_batch_or_model_is_named(tiny):
    idx = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"kv_cache has 1 layers for batch size 1, but this model has n_layer=1 "
                                         r"and idx has batch size 2"):
        tiny(idx, kv_cache=KVCache.for_model(tiny, batch_size=1))
    other = GPT(10, 12, 3, 1, 6)  # same number of layers, other heads
    with pytest.raises(ValueError, match="do not fit this cache .*another model"):
        tiny(idx, kv_cache=KVCache.for_model(other, batch_size=2))
    with pytest.raises(TypeError, match="kv_cache must be a KVCache, got dict"):
        tiny(idx, kv_cache={})


def test_no_package_attribute_hides_a_submodule():
    import importlib
    import inspect
    import pkgutil

    import gpt_lesson

    for info in pkgutil.iter_modules(gpt_lesson.__path__):
        module = importlib.import_module(f"gpt_lesson.{info.name}")
        assert getattr(gpt_lesson, info.name) is module, info.name
    import gpt_lesson.training as T
    assert inspect.ismodule(T) and callable(T.lr_at) and callable(gpt_lesson.train)


def test_importing_the_package_leaves_the_notebook_backend_alone():
    """Importing gpt_lesson (and the modules the lessons use) must not import pyplot or switch the backend."""
    code = (
        "import sys, matplotlib\n"
        "before = dict.__getitem__(matplotlib.rcParams, 'backend')\n"
        "import gpt_lesson, gpt_lesson.training, gpt_lesson.sampling, gpt_lesson.data, gpt_lesson.shakespeare, "
        "gpt_lesson.experiments, gpt_lesson.distributed, gpt_lesson.train_ddp, gpt_lesson.validation\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'\n"
        "assert dict.__getitem__(matplotlib.rcParams, 'backend') == before, 'the backend changed'\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
