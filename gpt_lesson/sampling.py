"""Text generation: greedy, temperature, top-k and top-p sampling, with or without a KV cache.

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
from torch import nn

from .kv_cache import CompiledDecodeStep, KVCache, decode_step
from .validation import (
    check_bool,
    check_finite_logits,
    check_generator,
    check_int,
    check_language_model,
    check_memory,
    check_model_call,
    check_number,
    check_tensor,
    check_token_ids,
)

__all__ = ["next_token_probs", "sample_next", "generate"]

# Below this temperature, logits / temperature can overflow to inf (and 1e-300 is 0 in float32):
# the logits are then shifted so their largest is 0 and divided in float64, which gives the same
# softmax in real numbers and never a NaN. Above it, the plain division keeps the usual rounding.
_TINY_TEMPERATURE = 1e-3


def _check_sampling(temperature: object, top_k: object, vocab_size: int, top_p: object = None) -> None:
    check_number("temperature", temperature, minimum=0, rule=">= 0; 0 means greedy decoding")
    if top_k is not None:
        check_int("top_k", top_k, minimum=1, maximum=vocab_size, rule=f"between 1 and vocab_size={vocab_size}")
    check_number("top_p", top_p, minimum=0, min_open=True, maximum=1, allow_none=True,
                 rule="in (0, 1]: the probability the kept tokens must reach; 1 keeps every token")


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """``logits`` with -inf outside the nucleus: the most likely tokens until their probability reaches ``top_p``.

    The token whose probability crosses ``top_p`` is kept (so is the most likely token, always), and so
    is every token exactly as likely as the least likely one kept: like top-k, ties are kept together.
    """
    probs = F.softmax(logits, dim=-1)
    ascending = torch.sort(probs, dim=-1).values
    # Dropped: the least likely tokens while their total stays <= 1 - top_p (so the rest reaches top_p).
    # Summed from the smallest up, which keeps tiny tails exact where a sum from the top would round them away.
    dropped = (ascending.cumsum(dim=-1) <= 1 - top_p).sum(dim=-1, keepdim=True)
    smallest_kept = ascending.gather(-1, dropped.clamp(max=probs.size(-1) - 1))
    return logits.masked_fill(probs < smallest_kept, float("-inf"))


def next_token_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None) -> torch.Tensor:
    """The distribution sampling draws from: ``softmax(logits / temperature)`` over the top k, then the top p.

    ``top_p`` (nucleus sampling, Holtzman et al. 2020) keeps the smallest set of the most likely
    tokens whose probability reaches ``top_p``, measured after the temperature and the top-k cut
    (the order Hugging Face's ``generate`` uses). ``temperature=0`` gives the one-hot distribution
    of greedy decoding; a tiny temperature gives (nearly) the same, never NaN.
    """
    check_tensor("logits", logits, min_dim=1)
    _check_sampling(temperature, top_k, logits.size(-1), top_p)
    check_finite_logits("logits", logits)
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
    if top_p is not None and top_p < 1:
        logits = _top_p_filter(logits, top_p)
    return F.softmax(logits, dim=-1)


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """One token id per row of ``logits`` (B, vocab) -> (B, 1)."""
    check_generator("generator", generator)
    if temperature == 0:  # the same checks as next_token_probs, without its one-hot tensor
        check_tensor("logits", logits, min_dim=1)
        _check_sampling(temperature, top_k, logits.size(-1), top_p)
        return check_finite_logits("logits", logits).argmax(dim=-1, keepdim=True)
    probs = next_token_probs(logits, temperature, top_k, top_p)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def _last_logits(output: object, B: int, vocab_size: int) -> torch.Tensor:
    """The last position's logits of a course model's ``(logits, loss)``; a module that answers otherwise is named."""
    logits = output[0] if isinstance(output, tuple) and output else None
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or logits.shape[::2] != (B, vocab_size):
        got = (f"a tuple whose first item is {type(logits).__name__} of shape {tuple(logits.shape)}"
               if isinstance(logits, torch.Tensor) else f"{type(output).__name__}")
        raise TypeError(f"model must be a language model of the course: model(idx) must return (logits, loss) with "
                        f"logits of shape (B={B}, T, vocab_size={vocab_size}), got {got}")
    return logits[:, -1, :]


def generate(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    use_cache: bool = False,
    generator: torch.Generator | None = None,
    compile: bool = False,
    top_p: float | None = None,
) -> torch.Tensor:
    """Append ``max_new_tokens`` tokens to ``idx`` (B, T) and return (B, T + max_new_tokens).

    ``temperature=0`` is greedy decoding; ``top_k`` and ``top_p`` cut the distribution as in
    :func:`next_token_probs` (top-k first). Contexts longer than ``block_size`` are
    cropped to their last ``block_size`` tokens. The model is put in eval mode for
    the call and its previous mode restored; nothing else is changed (for one-token steps
    of a small model, :func:`gpt_lesson.runtime.decode_settings` is faster: the caller's choice).

    ``use_cache=True`` keeps every layer's keys and values (:class:`~gpt_lesson.kv_cache.KVCache`),
    so a step runs the newest token only. ``compile=True`` (with the cache) also compiles that
    one-token step with ``torch.compile`` (:class:`~gpt_lesson.kv_cache.CompiledDecodeStep`): the
    first call compiles (tens of seconds; a C++ compiler is needed), later calls reuse it. Where
    compiling fails, a warning says why and the step runs eagerly. Every mode gives the same tokens.
    """
    check_language_model("model", model)
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    vocab_size, block_size = model.config.vocab_size, model.config.block_size
    check_model_call(model, idx)
    check_token_ids(idx, vocab_size)
    check_generator("generator", generator)
    check_bool("use_cache", use_cache)
    check_bool("compile", compile)
    if use_cache and not getattr(model.config, "causal", True):
        raise ValueError(
            "use_cache=True needs a causal model: with causal=False every position sees the later ones, so keys "
            "and values computed earlier change as tokens are added and a cache would give other tokens; "
            "use use_cache=False"
        )
    if compile and not use_cache:
        raise ValueError("compile=True compiles the cached one-token step; it needs use_cache=True")
    _check_sampling(temperature, top_k, vocab_size, top_p)
    step = CompiledDecodeStep() if compile else decode_step
    B, T = idx.shape
    check_memory("max_new_tokens", max_new_tokens, B * (T + max_new_tokens) * idx.element_size(),
                 f"{B} x {T + max_new_tokens} token ids")
    out = torch.empty(B, T + max_new_tokens, dtype=idx.dtype, device=idx.device)  # written in place
    out[:, :T] = idx
    was_training = model.training
    model.eval()
    cache: KVCache | None = None
    next_id = idx[:, -1:]  # the newest token; with the cache, the first step runs the whole prompt instead
    try:
        # inference_mode rather than no_grad: it also skips autograd's version and view tracking.
        with torch.inference_mode():
            for t in range(T, T + max_new_tokens):
                context = out[:, max(0, t - block_size):t]  # the last block_size tokens
                if not use_cache:
                    logits = _last_logits(model(context), B, vocab_size)
                elif cache is None or cache.length >= block_size:
                    # Start, or the window is full and slides: every position changes, so rebuild.
                    if cache is None:
                        cache = KVCache.for_model(model, batch_size=B)
                    cache.reset()
                    logits = _last_logits(model(context, kv_cache=cache), B, vocab_size)
                else:
                    logits = step(model, next_id, cache)  # only the newest token goes in
                next_id = sample_next(logits, temperature, top_k, generator, top_p)  # (B, 1)
                out[:, t:t + 1] = next_id
    finally:
        model.train(was_training)
    return out
