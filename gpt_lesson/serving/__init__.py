"""Serving many requests at once: a paged KV cache, batched decoding and a continuous-batching scheduler.

Lesson 15 builds it on top of the course's :class:`~gpt_lesson.model.GPT`, without changing the model:

* :mod:`.paged_cache`: one pool of fixed-size blocks per layer, a block table per sequence, blocks
  taken as a sequence grows and given back when it finishes (vLLM's PagedAttention, Kwon et al., 2023);
* :mod:`.batched_forward`: one forward for the new tokens of many sequences, each at its own position,
  each attending to its own keys through its block table, no padding;
* :mod:`.scheduler`: requests arrive, join the running batch when the pool has room, leave when done
  (Orca's iteration-level scheduling, Yu et al., 2022), or static batching for comparison;
* :mod:`.timing`: prefill against decode, and a decode step against the batch size, timed;
* :mod:`.views`: the block tables and the pool drawn with matplotlib, and a run's timeline.
"""
from .batched_forward import StepBatch, inference_settings, make_batch, paged_attention, paged_forward
from .paged_cache import (
    CacheSnapshot,
    PagedKVCache,
    PoolFullError,
    blocks_for,
    bytes_per_position,
    free_sequence_blocks,
    grow_table,
    locate,
)
from .scheduler import POLICIES, Finished, Request, Scheduler, StepRecord, positions_needed, serve
from .timing import PrefillDecode, time_decode_step, time_prefill_and_decode
from .views import plot_block_tables, plot_timeline

__all__ = [
    "PagedKVCache", "CacheSnapshot", "PoolFullError", "blocks_for", "bytes_per_position", "locate", "grow_table",
    "free_sequence_blocks", "StepBatch", "make_batch", "paged_attention", "paged_forward", "inference_settings",
    "Request", "Finished", "StepRecord", "Scheduler", "POLICIES", "serve", "positions_needed",
    "PrefillDecode", "time_prefill_and_decode", "time_decode_step", "plot_block_tables", "plot_timeline",
]
