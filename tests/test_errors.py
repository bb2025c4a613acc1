"""Every bad input gets a ValueError/TypeError that names the value and the rule."""
import pytest
import torch

from gpt_lesson import GPT, GPTConfig
from gpt_lesson import attention as A
from gpt_lesson.data import CharTokenizer, get_batch, train_val_split
from gpt_lesson.sampling import generate, next_token_probs
from gpt_lesson.model import Block, CausalSelfAttention, FeedForward, KVCache


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


@pytest.mark.parametrize("bad_id", [10, 99, -1])
def test_token_ids_out_of_range(tiny, bad_id):
    idx = torch.zeros(1, 4, dtype=torch.long)
    idx[0, 2] = bad_id
    with pytest.raises(ValueError, match=rf"idx holds token id {bad_id}, out of range: ids must be in \[0, vocab_size=10\)"):
        tiny(idx)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_token_ids_not_integer(tiny, dtype):
    with pytest.raises(TypeError, match="idx must hold integer token ids"):
        tiny(torch.zeros(1, 4, dtype=dtype))


def test_idx_not_a_tensor(tiny):
    with pytest.raises(TypeError, match="idx must be a torch.Tensor of token ids, got list"):
        tiny([[1, 2, 3]])


@pytest.mark.parametrize("shape", [(4,), (1, 2, 3)])
def test_idx_wrong_rank(tiny, shape):
    with pytest.raises(ValueError, match=r"idx must have shape \(B, T\)"):
        tiny(torch.zeros(shape, dtype=torch.long))


def test_empty_sequence(tiny):
    with pytest.raises(ValueError, match="T=0 tokens"):
        tiny(torch.zeros(1, 0, dtype=torch.long))


def test_targets_wrong_shape_or_range(tiny):
    idx = torch.zeros(2, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"targets shape \(2, 3\) must equal idx shape \(2, 4\)"):
        tiny(idx, torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="targets holds token id 10, out of range"):
        tiny(idx, torch.full((2, 4), 10))


def test_attention_module_wrong_input():
    sa = CausalSelfAttention(8, 2, 6)
    with pytest.raises(ValueError, match=r"x must have 3 dimensions, got shape \(6, 8\)"):
        sa(torch.zeros(6, 8))
    with pytest.raises(ValueError, match="x has 4 channels but this layer was built for n_embd=8"):
        sa(torch.zeros(1, 6, 4))
    with pytest.raises(ValueError, match="sequence length 7 is longer than block_size=6"):
        Block(8, 2, 6)(torch.zeros(1, 7, 8))


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
    with pytest.raises(TypeError, match="encode\\(\\) takes a str, got int"):
        tok.encode(5)
    with pytest.raises(ValueError, match="token id 99 is out of range"):
        tok.decode([1, 99])
    with pytest.raises(TypeError, match="token id 1.5 must be an integer"):
        tok.decode([1.5])
    with pytest.raises(ValueError, match="cannot build a tokenizer from empty text"):
        CharTokenizer("")


def test_batch_and_split_errors():
    data = torch.arange(20)
    with pytest.raises(ValueError, match="data has 20 tokens; it needs more than block_size=20"):
        get_batch(data, 20, 4)
    with pytest.raises(ValueError, match="batch_size=0 must be a positive integer"):
        get_batch(data, 4, 0)
    with pytest.raises(ValueError, match="train_fraction=1.0 must be strictly between 0 and 1"):
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
    with pytest.raises(TypeError, match="top_k=2.0 must be an integer or None"):
        next_token_probs(torch.zeros(1, 10), top_k=2.0)
    with pytest.raises(ValueError, match="max_new_tokens=-2 must be >= 0"):
        generate(tiny, idx, -2)
    with pytest.raises(TypeError, match="max_new_tokens='5' must be an integer"):
        generate(tiny, idx, "5")
    with pytest.raises(ValueError, match="idx holds token id 12, out of range"):
        generate(tiny, torch.tensor([[12]]), 3)
