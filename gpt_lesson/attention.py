"""The pieces of scaled dot-product attention, one function per step.

Lessons show these one at a time, on tensors they make themselves. The model does not call them:
:class:`gpt_lesson.model.CausalSelfAttention` writes the same steps inline, as the source model
does, so it reads like the source; :mod:`gpt_lesson.kv_cache` runs the model's layers on new
positions (with :func:`one_query_attention` in the compiled step). Every path computes the same
numbers: ``tests/test_kv_cache.py`` and ``tests/test_attention.py`` compare them (the explicit steps,
PyTorch's fused kernel, ``nn.MultiheadAttention``, the cached and the compiled steps).

Shapes follow nanoGPT's convention: ``B`` batch, ``T`` sequence length, ``C``
embedding size (``n_embd``), ``nh`` number of heads, ``hs`` head size
(``C // nh``, also called ``d_k``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .validation import (
    check_attention_inputs,
    check_bool,
    check_device,
    check_positive_int,
    check_probability,
    check_scale,
    check_tensor,
)

__all__ = [
    "attention_scores",
    "causal_mask",
    "padding_mask",
    "apply_mask",
    "attention_weights",
    "weighted_sum",
    "split_heads",
    "merge_heads",
    "naive_attention",
    "sdpa_attention",
    "one_query_attention",
]


def attention_scores(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Scores ``q @ k^T * scale`` of shape (..., T_q, T_k).

    ``scale=None`` means the standard ``1 / sqrt(d_k)`` with ``d_k = q.size(-1)``;
    pass ``scale=1.0`` for unscaled scores.
    """
    check_attention_inputs(q, k)
    scale = check_scale("scale", scale)
    if scale is None:
        scale = q.size(-1) ** -0.5
    return (q @ k.transpose(-2, -1)) * scale  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)


def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The lower-triangular ``tril`` matrix of ones, shape (T, T).

    Row ``i`` (a query) has ones in columns ``0..i`` (the keys it may look at):
    position ``i`` sees itself and the past, never the future.
    """
    check_positive_int("T", T)
    return torch.tril(torch.ones(T, T, device=check_device("device", device, allow_none=True)))


def padding_mask(lengths: list[int] | torch.Tensor, T: int) -> torch.Tensor:
    """Key-padding mask of shape (B, 1, T): 1 for real tokens, 0 for padding.

    Sequence ``b`` has ``lengths[b]`` real tokens followed by padding. The mask
    broadcasts over query rows: every query may look at every real key.
    """
    check_positive_int("T", T)
    if not isinstance(lengths, torch.Tensor) and len(lengths) == 0:  # as_tensor([]) would be float32
        raise ValueError("lengths=[] is empty: give one length per sequence of the batch")
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be a 1-D list of sequence lengths, got shape {tuple(lengths.shape)}")
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be integers, got dtype {lengths.dtype}")
    if bool(((lengths < 0) | (lengths > T)).any()):
        raise ValueError(f"lengths={lengths.tolist()} must each be between 0 and T={T}")
    positions = torch.arange(T)
    return (positions[None, :] < lengths[:, None]).float()[:, None, :]


def apply_mask(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``scores.masked_fill(mask == 0, -inf)``: hidden positions get -inf.

    After the softmax, ``exp(-inf) = 0`` makes those weights exactly zero.
    The mask must broadcast to the scores' shape.
    """
    check_tensor("scores", scores, min_dim=2)
    check_tensor("mask", mask, min_dim=1)
    try:
        torch.broadcast_shapes(mask.shape, scores.shape)
    except RuntimeError:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to scores of shape {tuple(scores.shape)}"
        ) from None
    return scores.masked_fill(mask == 0, float("-inf"))


def attention_weights(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension (the keys): each query row sums to 1."""
    check_tensor("scores", scores, min_dim=1)
    return F.softmax(scores, dim=-1)


def weighted_sum(weights: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``weights @ v``: each output row is a weighted average of the value rows."""
    check_tensor("weights", weights, min_dim=2)
    check_tensor("v", v, min_dim=2)
    if weights.size(-1) != v.size(-2):
        raise ValueError(
            f"weights have {weights.size(-1)} key columns but v has {v.size(-2)} rows; they must match"
        )
    try:
        torch.broadcast_shapes(weights.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(f"weights of shape {tuple(weights.shape)} and v of shape {tuple(v.shape)} have batch "
                         "dimensions (all but the last two) that do not match; they must be equal (or 1)") from None
    return weights @ v  # (..., T_q, T_k) @ (..., T_k, hs) -> (..., T_q, hs)


def split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """(B, T, C) -> (B, nh, T, hs): give each head its own slice of the channels."""
    check_tensor("x", x, dims=3)
    check_positive_int("n_head", n_head)
    B, T, C = x.shape
    if C % n_head != 0:
        raise ValueError(f"the last dimension C={C} is not divisible by n_head={n_head}")
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)  # (B, T, nh, hs) -> (B, nh, T, hs)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, nh, T, hs) -> (B, T, C): transpose back, then lay the heads side by side."""
    check_tensor("x", x, dims=4)
    B, nh, T, hs = x.shape
    return x.transpose(1, 2).contiguous().view(B, T, nh * hs)  # (B, T, nh, hs) -> (B, T, C)


def naive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    dropout: torch.nn.Module | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The explicit computation: scores -> mask -> softmax -> (dropout) -> weighted sum.

    Returns ``(output, scores, weights)`` where ``scores`` are the scaled scores
    before masking and ``weights`` the post-softmax weights (before dropout).
    """
    check_attention_inputs(q, k, v)
    scores = attention_scores(q, k, scale)
    masked = apply_mask(scores, mask) if mask is not None else scores
    weights = attention_weights(masked)
    used = dropout(weights) if dropout is not None else weights
    return weighted_sum(used, v), scores, weights


def sdpa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """PyTorch's fused ``F.scaled_dot_product_attention`` with the same conventions.

    ``mask`` uses the course's convention (1 = visible, 0 = hidden). With ``is_causal=True`` the
    causal mask is applied too: a mask given with it (padding, say) is combined with ``tril``, so a
    position sees what both allow (PyTorch's kernel refuses the pair; the course never drops one).
    """
    check_attention_inputs(q, k, v)
    check_probability("dropout_p", dropout_p)
    check_bool("is_causal", is_causal)
    scale = check_scale("scale", scale)
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal, scale=scale)
    check_tensor("mask", mask, min_dim=1)
    scores_shape = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.size(-2), k.size(-2))
    try:
        torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
                         f"{scores_shape}") from None
    attn_mask = mask != 0  # the course's convention, as apply_mask reads it
    if is_causal:  # the same lower triangle PyTorch's is_causal builds (aligned at the top left)
        attn_mask = attn_mask & torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)


def one_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Attention of one new query (B, nh, 1, hs) over every key so far (B, nh, L, hs), as two sums.

    The same numbers as ``softmax(q @ k^T * scale) @ v`` with no mask (one newest token may see
    every earlier one). Written as element-wise products and sums, ``torch.compile`` fuses it with
    the rest of a decode step into one loop nest; in eager PyTorch the fused SDPA kernel is faster.
    """
    check_tensor("q", q, dims=4)
    if q.size(-2) != 1:
        raise ValueError(f"one_query_attention takes one query per head, got q of shape {tuple(q.shape)}")
    check_attention_inputs(q, k, v)
    check_scale("scale", scale)
    return summed_attention(q, k, v, scale)


def summed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """:func:`one_query_attention` without its argument checks: what the compiled decode step traces."""
    weights = F.softmax((q * k).sum(-1) * scale, dim=-1)  # (B, nh, L): one score per key
    return (weights.unsqueeze(-1) * v).sum(-2, keepdim=True)  # (B, nh, 1, hs)
