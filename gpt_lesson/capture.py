"""What each attention layer computed, captured with PyTorch's forward hooks: q, k, v, the scores, the weights.

The model keeps nothing for the explorers and the lessons that look inside it: no flag in its
config, nothing in its checkpoints. :func:`capture_attention` hooks every layer's ``c_attn`` (its
output holds q, k and v) and the dropout after its softmax (its input is the attention weights), for
the length of a ``with`` block:

    with capture_attention(model) as records:
        model(idx)
    records[0]["weights"]  # layer 0's weights, (B, n_head, T, T)

and :func:`attention_records` runs one such forward pass in eval mode. PyTorch's fused kernel
(``attn_impl="sdpa"``) never forms the weights, so inside the block every layer takes the explicit
steps (the same numbers, to float rounding); the scores are those of step 3,
:func:`~gpt_lesson.attention.attention_scores` of the captured q and k with the layer's scale.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import torch
from torch import nn

from .attention import attention_scores, split_heads
from .validation import check_instance, check_token_ids

__all__ = ["capture_attention", "attention_records"]


def _layers(model: nn.Module) -> list[nn.Module]:
    """The attention module of every block of ``model`` (a course GPT: ``model.blocks[i].sa``)."""
    check_instance("model", model, nn.Module)
    blocks = getattr(model, "blocks", None)
    layers = [getattr(b, "sa", None) for b in blocks] if isinstance(blocks, nn.Module) else []
    if not layers or not all(hasattr(sa, "c_attn") and hasattr(sa, "fused") for sa in layers):
        raise TypeError(f"model must be a course GPT (blocks[i].sa with c_attn and dropout), got {type(model).__name__}")
    return layers


@contextmanager
def _explicit_steps(sa: nn.Module) -> Iterator[None]:
    """The layer computes its weights step by step inside the block (they are what is captured)."""
    fused, sa.fused = sa.fused, False
    try:
        yield
    finally:
        sa.fused = fused


@contextmanager
def capture_attention(model: nn.Module) -> Iterator[list[dict[str, torch.Tensor]]]:
    """Record every layer's q, k, v (B, nh, T, hs), scaled ``scores`` and ``weights`` (B, nh, T, T) in the block.

    ``records[i]`` is layer i's dict, filled by each forward pass inside the block (the last one
    wins). The hooks are removed and every layer's attention path restored on leaving.
    """
    layers = _layers(model)
    records: list[dict[str, torch.Tensor]] = [{} for _ in layers]
    with ExitStack() as stack:
        for sa, record in zip(layers, records):
            stack.enter_context(_explicit_steps(sa))

            def keep_qkv(module, args, out, sa=sa, record=record) -> None:  # noqa: ANN001
                q, k, v = (split_heads(t, sa.n_head).detach() for t in out.split(out.size(-1) // 3, dim=-1))
                record.update(q=q, k=k, v=v, scores=attention_scores(q, k, sa.scale))

            def keep_weights(module, args, record=record) -> None:  # noqa: ANN001
                record["weights"] = args[0].detach()  # the softmax's output, before dropout

            stack.callback(sa.c_attn.register_forward_hook(keep_qkv).remove)
            stack.callback(sa.dropout.register_forward_pre_hook(keep_weights).remove)
        yield records


@torch.no_grad()
def attention_records(model: nn.Module, idx: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """Run ``idx`` (B, T) once and return, per layer, q, k, v, the scaled scores and the weights.

    Each record holds tensors of shape (B, nh, T, hs) for q, k, v and (B, nh, T, T) for
    ``scores`` (scaled, before the mask) and ``weights`` (after the softmax). Runs in eval mode
    and restores the previous mode.
    """
    layers = _layers(model)
    check_token_ids(idx, model.config.vocab_size, model.config.block_size)
    was_training = model.training
    try:
        model.eval()
        with capture_attention(model) as records:
            model(idx)
    finally:
        model.train(was_training)
    if not all(records) or len(records) != len(layers):
        raise RuntimeError("no attention was captured: the model's forward did not run its attention layers")
    return records
