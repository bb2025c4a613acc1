"""One forward step for several sequences at once, each at its own position, reading its keys through its block table.

Lesson 10's cached step runs one sequence: one new token, every weight matrix read for one row. A
server runs the newest token of *every* running sequence, and the prompts of the newly admitted
ones, in **one** forward: the rows of all of them are stacked into one (N, n_embd) matrix with no
padding, so each weight matrix is read once per step and multiplied by N rows (Orca's *selective
batching*, Yu et al., 2022: everything but attention is batched over the flattened tokens). Only
attention is per sequence: each new token attends to the keys of its own sequence, at positions
0..its own, found through that sequence's block table in the paged pool.

:func:`paged_attention` does that for all the new tokens together without padding: it lists every
(query, key) pair, one entry per key a query may see, and takes a softmax over each query's own
entries. A key of another sequence, an empty slot or a future position is never read.
"""
from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .. import validation
from ..runtime import decode_settings
from .paged_cache import PagedKVCache, PoolFullError, blocks_for

__all__ = ["StepBatch", "make_batch", "paged_attention", "paged_forward", "check_servable", "inference_settings"]


@dataclass
class StepBatch:
    """What one step computes, with the cache slots it writes and reads.

    ``N`` rows: the new tokens of every sequence, one sequence after another. ``P`` (query, key)
    pairs: for each row in turn, the keys of its sequence at positions 0..its own.
    """

    seq_ids: list[Hashable]
    tokens: torch.Tensor       # (N,) the new tokens, sequence after sequence, no padding
    positions: torch.Tensor    # (N,) each token's position in its own sequence
    write_slots: torch.Tensor  # (N,) the slot each new token's key and value are written to
    key_slots: torch.Tensor    # (P,) the slot of every key each row attends to, row after row
    key_rows: torch.Tensor     # (P,) the row each entry of key_slots belongs to
    last_rows: torch.Tensor    # (S,) each sequence's last row: its logits give that sequence's next token


def make_batch(cache: PagedKVCache, new_tokens: Mapping[Hashable, Sequence[int]]) -> StepBatch:
    """Grow each sequence's block table for its new tokens and list, through the tables, every slot the step uses.

    ``new_tokens`` maps a sequence already in ``cache`` to the tokens it adds this step (a whole prompt
    when it starts, then one token per step). Raises :class:`PoolFullError`, changing nothing, when the
    pool cannot hold them all.
    """
    if not new_tokens:
        raise ValueError("new_tokens is empty: a step needs at least one sequence with at least one new token")
    tpb = cache.tokens_per_block
    needed = 0
    for seq_id, toks in new_tokens.items():
        if len(toks) == 0:
            raise ValueError(f"sequence {seq_id!r} has no new tokens in this step; leave it out of new_tokens")
        needed += blocks_for(cache.length(seq_id) + len(toks), tpb) - len(cache.tables[seq_id])
    if needed > cache.num_free_blocks:
        raise PoolFullError(f"this step needs {needed} more block(s) but the pool has {cache.num_free_blocks} free")
    tokens: list[int] = []
    positions: list[int] = []
    write_slots: list[int] = []
    key_slots: list[int] = []
    key_rows: list[int] = []
    last_rows: list[int] = []
    for seq_id, toks in new_tokens.items():
        start, n = cache.length(seq_id), len(toks)
        write_slots += cache.append(seq_id, n)
        slots = cache.slots(seq_id)  # every position of the sequence, new ones included, through its block table
        for i in range(n):
            row, seen = len(tokens) + i, start + i + 1  # the token at position start + i sees positions 0..start + i
            key_slots += slots[:seen]
            key_rows += [row] * seen
        tokens += [int(t) for t in toks]
        positions += range(start, start + n)
        last_rows.append(len(tokens) - 1)
    # One tensor for everything, cut into the fields (views): one conversion from Python per step, through an
    # array of int64 (torch.tensor inspects every element of a list one by one, about 8x slower here).
    flat = torch.frombuffer(array("q", tokens + positions + write_slots + last_rows + key_slots + key_rows),
                            dtype=torch.int64).to(cache.kv.device)
    N, S, P = len(tokens), len(last_rows), len(key_slots)
    cuts = flat.split([N, N, N, S, P, P])
    return StepBatch(list(new_tokens), *cuts[:3], key_slots=cuts[4], key_rows=cuts[5], last_rows=cuts[3])


def paged_attention(q: torch.Tensor, kv_cache: torch.Tensor, key_slots: torch.Tensor, key_rows: torch.Tensor,
                    scale: float) -> torch.Tensor:
    """Causal attention of N new tokens of several sequences, each over its own keys in the paged pool.

    ``q`` is (N, n_head, head_size); ``kv_cache`` is one layer's pool, (slots, 2, n_head, head_size), keys
    and values; ``key_slots``/``key_rows`` list the (query, key) pairs (see :class:`StepBatch`).
    Returns (N, n_head, head_size).
    """
    N, nh, hs = q.shape
    kv = kv_cache.index_select(0, key_slots)  # (P, 2, nh, hs): every key and value a query may see, via the tables
    k, v = kv[:, 0], kv[:, 1]
    scores = torch.linalg.vecdot((q * scale).index_select(0, key_rows), k)  # (P, nh): a score per (query, key) pair
    # Softmax over each query's own keys: subtract its largest score (as F.softmax does), exponentiate, normalise.
    rows = key_rows[:, None].expand(-1, nh)
    top = scores.new_empty((N, nh)).scatter_reduce_(0, rows, scores, "amax", include_self=False)  # every row has keys
    e = scores.sub_(top.index_select(0, key_rows)).exp_()  # in place: the scores are not needed again
    total = scores.new_zeros(N, nh).index_add_(0, key_rows, e)  # (N, nh)
    out = q.new_zeros(N, nh, hs).index_add_(0, key_rows, e.unsqueeze(-1) * v)  # weighted sum of each query's values
    return out.div_(total.unsqueeze(-1))


def check_servable(model: torch.nn.Module) -> None:
    """Raise unless ``model`` is a causal GPT of the course (its submodules are what a paged step reads)."""
    validation.check_instance("model", model, torch.nn.Module)
    cfg = getattr(model, "config", None)
    parts = ("token_embedding_table", "position_embedding_table", "blocks", "ln_f", "lm_head")
    if cfg is None or not all(hasattr(model, p) for p in parts):
        raise TypeError(f"model must be the course's GPT (with a config and {', '.join(parts)}), "
                        f"got {type(model).__name__}")
    if not getattr(cfg, "causal", True):
        raise ValueError("the model has causal=False: every position sees the later ones, so keys and values "
                         "computed earlier would change as tokens are added and no cache can hold them")


def _scale(model: torch.nn.Module, head_size: int) -> float:
    scale = getattr(model.config, "attn_scale", None)  # None: the standard 1/sqrt(head_size)
    return head_size ** -0.5 if scale is None else float(scale)


@contextmanager
def inference_settings(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode, inference mode and :func:`~gpt_lesson.runtime.decode_settings` (one thread, PyTorch's own kernels), restored after.

    A step's operators are small: a second thread costs more to wake than it saves, and oneDNN's set-up per
    call (about 10 us for a GELU) is more than the work of a few rows.
    """
    was_training = model.training
    model.eval()
    try:
        with decode_settings(), torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def paged_forward(model: torch.nn.Module, cache: PagedKVCache, batch: StepBatch) -> torch.Tensor:
    """Run one step: write the new tokens' keys and values into the pool, return each sequence's next-token logits.

    The steps of the model's forward, on the N rows of ``batch`` (B=1, T=N, with positions of their own).
    Returns (S, vocab_size) logits, one row per sequence of the batch (its last new token's). Run it in
    eval mode and under ``torch.inference_mode()`` (:func:`inference_settings`), as the scheduler does.
    """
    N = batch.tokens.numel()
    C = model.config.n_embd
    x = model.token_embedding_table(batch.tokens) + model.position_embedding_table(batch.positions)  # (N, C)
    for layer, block in enumerate(model.blocks):
        nh = block.sa.n_head
        hs = C // nh
        # 1. Queries, keys and values of the new tokens, split into heads: (N, 3, nh, hs), q then k then v.
        qkv = block.sa.c_attn(block.ln1(x)).view(N, 3, nh, hs)
        # 2. The new keys and values go to their slots in the pool, through the block tables.
        kv_cache = cache.kv[layer]  # (slots, 2, nh, hs)
        kv_cache.index_copy_(0, batch.write_slots, qkv[:, 1:])
        # 3. Each new token attends to its own sequence's keys; then the output projection, as in the model.
        att = paged_attention(qkv[:, 0], kv_cache, batch.key_slots, batch.key_rows, _scale(model, hs))
        x = x + block.sa.c_proj(att.reshape(N, C))
        x = x + block.ffwd(block.ln2(x))
    x = model.ln_f(x.index_select(0, batch.last_rows))  # only the last row of each sequence predicts a token
    return model.lm_head(x)  # (S, vocab_size)
