"""Sampling and the KV cache: cached and uncached decoding give the same tokens."""
import pytest
import torch

from gpt_lesson import GPT
from gpt_lesson.sampling import generate, next_token_probs, sample_next


@pytest.fixture
def model():
    torch.manual_seed(3)
    return GPT(30, 32, 4, 2, 16)


@pytest.mark.parametrize("attn_impl", ["naive", "sdpa"])
@pytest.mark.parametrize("prompt_len,new", [(1, 10), (5, 11), (12, 30), (16, 5), (40, 8)])
def test_greedy_with_and_without_cache_identical(attn_impl, prompt_len, new):
    # (12, 30) and (40, 8) run past block_size=16: the window slides and both paths crop.
    torch.manual_seed(7)
    m = GPT(30, 32, 4, 2, 16, attn_impl=attn_impl)
    idx = torch.randint(0, 30, (2, prompt_len))
    a = generate(m, idx, new, temperature=0)
    b = generate(m, idx, new, temperature=0, use_cache=True)
    assert a.shape == (2, prompt_len + new)
    assert torch.equal(a, b)
    assert torch.equal(a[:, :prompt_len], idx)


def test_sampling_with_and_without_cache_identical_given_a_seed(model):
    idx = torch.randint(0, 30, (1, 3))
    a = generate(model, idx, 12, temperature=0.8, top_k=5, generator=torch.Generator().manual_seed(1))
    b = generate(model, idx, 12, temperature=0.8, top_k=5, use_cache=True,
                 generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)


def test_generate_restores_training_mode(model):
    model.train()
    generate(model, torch.zeros(1, 1, dtype=torch.long), 2)
    assert model.training
    model.eval()
    generate(model, torch.zeros(1, 1, dtype=torch.long), 2)
    assert not model.training


def test_greedy_is_argmax():
    logits = torch.tensor([[0.1, 2.0, -1.0, 1.9]])
    assert sample_next(logits, temperature=0).item() == 1
    assert torch.equal(next_token_probs(logits, temperature=0), torch.tensor([[0.0, 1.0, 0.0, 0.0]]))


def test_top_k_keeps_only_k_tokens():
    logits = torch.tensor([[3.0, 1.0, 2.0, 0.0, -1.0]])
    p = next_token_probs(logits, top_k=2)
    assert torch.equal(p[0] > 0, torch.tensor([True, False, True, False, False]))
    assert torch.isclose(p.sum(), torch.tensor(1.0))
    g = torch.Generator().manual_seed(0)
    draws = {sample_next(logits, top_k=2, generator=g).item() for _ in range(200)}
    assert draws == {0, 2}


def test_temperature_sharpens_and_flattens():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    cold, warm, hot = (next_token_probs(logits, t)[0, 0].item() for t in (0.5, 1.0, 2.0))
    assert cold > warm > hot > 1 / 3
