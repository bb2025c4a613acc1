"""Text generation: greedy, temperature and top-k sampling, with or without a KV cache.

Without a cache, every new token runs the model over the whole (cropped) context
again. With a cache, the keys and values of earlier positions are kept, so each new
token costs one position's worth of work. Both give the same tokens: while the
sequence fits in ``block_size`` the cache is used; once it is full, the context
window slides, every position moves, and the cache is rebuilt from the cropped
context (exactly what the uncached path computes).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .model import GPT, KVCache
from .validation import check_bool, check_int, check_number, check_tensor, check_token_ids

__all__ = ["next_token_probs", "sample_next", "generate"]

# Below this temperature, logits / temperature can overflow to inf (and 1e-300 is 0 in float32):
# the logits are then shifted so their largest is 0 and divided in float64, which gives the same
# softmax in real numbers and never a NaN. Above it, the plain division keeps the usual rounding.
_TINY_TEMPERATURE = 1e-3


def _check_sampling(temperature: object, top_k: object, vocab_size: int) -> None:
    check_number("temperature", temperature, minimum=0, rule=">= 0; 0 means greedy decoding")
    if top_k is not None:
        check_int("top_k", top_k, minimum=1, maximum=vocab_size, rule=f"between 1 and vocab_size={vocab_size}")


def next_token_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None) -> torch.Tensor:
    """The distribution sampling draws from: ``softmax(logits / temperature)`` over the top k.

    ``temperature=0`` gives the one-hot distribution of greedy decoding; a tiny temperature
    gives (nearly) the same, never NaN.
    """
    check_tensor("logits", logits, min_dim=1)
    _check_sampling(temperature, top_k, logits.size(-1))
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), logits.size(-1)).to(logits.dtype)
    if temperature < _TINY_TEMPERATURE:
        shifted = (logits - logits.amax(dim=-1, keepdim=True)).double() / temperature  # <= 0: -inf at worst
        logits = shifted.to(logits.dtype)
    else:
        logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return F.softmax(logits, dim=-1)


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token id per row of ``logits`` (B, vocab) -> (B, 1)."""
    if temperature == 0:
        check_tensor("logits", logits, min_dim=1)
        _check_sampling(temperature, top_k, logits.size(-1))
        return logits.argmax(dim=-1, keepdim=True)
    probs = next_token_probs(logits, temperature, top_k)
    try:
        return torch.multinomial(probs, num_samples=1, generator=generator)
    except RuntimeError:
        if not bool(torch.isfinite(logits).all()):  # checked only on failure: the loop stays as fast
            raise ValueError("logits hold NaN or infinite values, so there is no distribution to sample from; "
                             "the model's weights or input are broken (a diverged training run?)") from None
        raise


def generate(
    model: GPT,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    use_cache: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Append ``max_new_tokens`` tokens to ``idx`` (B, T) and return (B, T + max_new_tokens).

    ``temperature=0`` is greedy decoding. Contexts longer than ``block_size`` are
    cropped to their last ``block_size`` tokens. The model is put in eval mode for
    the call and its previous mode restored.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise TypeError(f"max_new_tokens={max_new_tokens!r} must be an integer")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 0")
    vocab_size, block_size = model.config.vocab_size, model.config.block_size
    check_token_ids(idx, vocab_size)
    check_bool("use_cache", use_cache)
    if use_cache and not model.config.causal:
        raise ValueError(
            "use_cache=True needs a causal model: with causal=False every position sees the later ones, so keys "
            "and values computed earlier change as tokens are added and a cache would give other tokens; "
            "use use_cache=False"
        )
    _check_sampling(temperature, top_k, vocab_size)
    was_training = model.training
    model.eval()
    cache: KVCache | None = None
    try:
        # inference_mode rather than no_grad: it also skips autograd's version and view tracking,
        # a large share of a cached step's cost (about 100 tiny kernels per token).
        with torch.inference_mode():
            for _ in range(max_new_tokens):
                if not use_cache:
                    logits, _ = model(idx[:, -block_size:])
                elif cache is None or cache.length >= block_size:
                    # Start, or the window is full and slides: every position changes, so rebuild.
                    if cache is None:
                        cache = KVCache.for_model(model, batch_size=idx.size(0))
                    cache.reset()
                    logits, _ = model(idx[:, -block_size:], kv_cache=cache)
                else:
                    logits, _ = model(idx[:, -1:], kv_cache=cache)  # only the newest token
                next_id = sample_next(logits[:, -1, :], temperature, top_k, generator)  # (B, 1)
                idx = torch.cat((idx, next_id), dim=1)
    finally:
        model.train(was_training)
    return idx.clone()  # a normal tensor again, usable in autograd (inference tensors are not)
