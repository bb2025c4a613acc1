"""Timing the paged step (lesson 15): a prompt as one prefill against the same tokens decoded one by one, and
one decode step against the number of sequences in it.

Every time is the fastest of ``repeat`` runs (``time.perf_counter``), each on a fresh cache built before the
clock starts, under the same settings as the scheduler (:func:`~gpt_lesson.serving.batched_forward.inference_settings`).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .. import validation
from .batched_forward import check_servable, inference_settings, make_batch, paged_forward
from .paged_cache import PagedKVCache, blocks_for

__all__ = ["PrefillDecode", "time_prefill_and_decode", "time_decode_step"]

_TOKENS_PER_BLOCK = 16


@dataclass(frozen=True)
class PrefillDecode:
    """Seconds for ``tokens`` positions of one sequence: in one forward (prefill) or one forward each (decode)."""

    tokens: int
    prefill_seconds: float
    decode_seconds: float

    @property
    def ratio(self) -> float:
        """How many times longer decoding the tokens one by one takes than prefilling them at once."""
        return self.decode_seconds / self.prefill_seconds


def _fastest(run: Callable[[PagedKVCache], None], fresh: Callable[[], PagedKVCache], repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        cache = fresh()  # built before the clock starts
        start = time.perf_counter()
        run(cache)
        best = min(best, time.perf_counter() - start)
    return best


def _check_tokens(model: torch.nn.Module, prompt: Sequence[int], extra: int = 0) -> list[int]:
    tokens = [validation.check_int("prompt token", t, minimum=0, maximum=model.config.vocab_size - 1,
                                   rule=f"a token id in [0, vocab_size={model.config.vocab_size})") for t in prompt]
    if not tokens or len(tokens) + extra > model.config.block_size:
        raise ValueError(f"the prompt has {len(tokens)} tokens; it needs 1 to block_size={model.config.block_size}"
                         + (f" - {extra}" if extra else ""))
    return tokens


def time_prefill_and_decode(model: torch.nn.Module, prompt: Sequence[int], repeat: int = 5) -> PrefillDecode:
    """The prompt's tokens through the paged step all at once (one forward), then one at a time (one forward each)."""
    check_servable(model)
    validation.check_positive_int("repeat", repeat)
    tokens = _check_tokens(model, prompt)

    def fresh() -> PagedKVCache:
        cache = PagedKVCache.for_model(model, blocks_for(len(tokens), _TOKENS_PER_BLOCK), _TOKENS_PER_BLOCK)
        cache.add_sequence(0)
        return cache

    def prefill(cache: PagedKVCache) -> None:
        paged_forward(model, cache, make_batch(cache, {0: tokens}))

    def decode(cache: PagedKVCache) -> None:
        for t in tokens:
            paged_forward(model, cache, make_batch(cache, {0: [t]}))

    with inference_settings(model):
        prefill_s, decode_s = _fastest(prefill, fresh, repeat), _fastest(decode, fresh, repeat)
    return PrefillDecode(len(tokens), prefill_s, decode_s)


def time_decode_step(model: torch.nn.Module, batch_size: int, context: int, steps: int = 4, repeat: int = 3,
                     seed: int = 0) -> float:
    """Seconds of one greedy decode step of ``batch_size`` sequences, each holding ``context`` positions before it.

    Each run prefills the sequences (not timed), then times ``steps`` decode steps; the result is the fastest
    run's mean step.
    """
    check_servable(model)
    for name, value in (("batch_size", batch_size), ("context", context), ("steps", steps), ("repeat", repeat)):
        validation.check_positive_int(name, value)
    if context + steps > model.config.block_size:
        raise ValueError(f"context={context} + steps={steps} positions do not fit block_size={model.config.block_size}")
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, model.config.vocab_size, (batch_size, context), generator=g).tolist()
    per_sequence = blocks_for(context + steps, _TOKENS_PER_BLOCK)
    state: dict = {}

    def fresh() -> PagedKVCache:
        cache = PagedKVCache.for_model(model, batch_size * per_sequence, _TOKENS_PER_BLOCK)
        for i in range(batch_size):
            cache.add_sequence(i)
        state["next"] = paged_forward(model, cache, make_batch(cache, dict(enumerate(prompts)))).argmax(-1).tolist()
        return cache

    def decode(cache: PagedKVCache) -> None:
        next_ids = state["next"]
        for _ in range(steps):
            batch = make_batch(cache, {i: [t] for i, t in enumerate(next_ids)})
            next_ids = paged_forward(model, cache, batch).argmax(-1).tolist()

    with inference_settings(model):
        return _fastest(decode, fresh, repeat) / steps
