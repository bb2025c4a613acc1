"""The GPT of the course: nanoGPT-style, small enough to read in one sitting.

The module and parameter names follow the course's source model exactly
(``token_embedding_table``, ``blocks.0.sa.c_attn``, ``blocks.0.sa.tril``,
``blocks.0.ffwd.net.0``, ``ln_f``, ``lm_head``...), so a checkpoint of the
source model loads here with ``strict=True``.

Options the later lessons need are all off by default, so ``GPT(1000, 64, 4, 3, 128)``
is the source model:

* ``attn_impl="naive"`` (the explicit computation) or ``"sdpa"``
  (``F.scaled_dot_product_attention``);
* attention capture (``capture_attention=True`` or :meth:`GPT.attention_records`);
* a KV cache for generation (:class:`KVCache`, ``forward(idx, kv_cache=cache)``);
* the dropout rate (``dropout=0.1`` as in the source);
* for experiments only: ``causal=False`` (no mask) and ``attn_scale`` (1.0 = unscaled).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import check_positive_int, check_probability, check_tensor, check_token_ids
from .attention import merge_heads, naive_attention, sdpa_attention, split_heads

__all__ = ["GPTConfig", "KVCache", "CausalSelfAttention", "FeedForward", "Block", "GPT", "count_parameters_by_part"]

ATTN_IMPLS = ("naive", "sdpa")


def _check_attn_impl(attn_impl: object) -> str:
    if attn_impl not in ATTN_IMPLS:
        raise ValueError(f"attn_impl={attn_impl!r} is not one of {ATTN_IMPLS}")
    return attn_impl  # type: ignore[return-value]


def _check_scale(scale: object) -> float | None:
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"attn_scale={scale!r} must be a number or None (None means 1/sqrt(head_size))")
    if not scale > 0:
        raise ValueError(f"attn_scale={scale} must be > 0")
    return float(scale)


def _check_sizes(n_embd: object, n_head: object, block_size: object) -> None:
    check_positive_int("n_embd", n_embd)
    check_positive_int("n_head", n_head)
    check_positive_int("block_size", block_size)
    if n_embd % n_head != 0:  # type: ignore[operator]
        raise ValueError(
            f"n_embd={n_embd} is not divisible by n_head={n_head}: "
            "each head gets n_embd // n_head channels, so n_embd must be a multiple of n_head"
        )


@dataclass
class GPTConfig:
    """All the sizes and options of a :class:`GPT`, in one place."""

    vocab_size: int = 1000
    n_embd: int = 64
    n_head: int = 4
    n_layer: int = 3
    block_size: int = 128
    dropout: float = 0.1
    attn_impl: str = "naive"
    capture_attention: bool = False
    causal: bool = True  # False removes the mask: for lessons that show what goes wrong
    attn_scale: float | None = None  # None is 1/sqrt(head_size); 1.0 means no scaling

    def __post_init__(self) -> None:
        check_positive_int("vocab_size", self.vocab_size)
        check_positive_int("n_layer", self.n_layer)
        _check_sizes(self.n_embd, self.n_head, self.block_size)
        check_probability("dropout", self.dropout)
        _check_attn_impl(self.attn_impl)
        _check_scale(self.attn_scale)

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)


class KVCache:
    """Keys and values of every layer, stored as generation goes so they are computed once.

    Buffers are allocated once for ``max_len`` positions: ``k`` and ``v`` have shape
    (n_layer, B, n_head, max_len, head_size). ``length`` counts the positions filled.
    Its size is ``2 * n_layer * B * max_len * n_embd * bytes_per_number``.
    """

    def __init__(
        self,
        n_layer: int,
        batch_size: int,
        n_head: int,
        head_size: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        for name, value in [("n_layer", n_layer), ("batch_size", batch_size), ("n_head", n_head),
                            ("head_size", head_size), ("max_len", max_len)]:
            check_positive_int(name, value)
        shape = (n_layer, batch_size, n_head, max_len, head_size)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_len = max_len
        self.length = 0

    @classmethod
    def for_model(cls, model: "GPT", batch_size: int = 1, max_len: int | None = None) -> "KVCache":
        """An empty cache sized for ``model`` (``max_len`` defaults to its block_size)."""
        cfg = model.config
        max_len = cfg.block_size if max_len is None else max_len
        if max_len > cfg.block_size:
            raise ValueError(f"max_len={max_len} is longer than the model's block_size={cfg.block_size}")
        p = next(model.parameters())
        return cls(cfg.n_layer, batch_size, cfg.n_head, cfg.head_size, max_len, p.dtype, p.device)

    def append(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k_new``/``v_new`` (B, nh, T_new, hs) after the filled part of ``layer``.

        Returns all keys and values of that layer so far. Call :meth:`advance` once
        every layer has appended.
        """
        end = self.length + k_new.size(2)
        if end > self.max_len:
            raise ValueError(f"the KV cache holds max_len={self.max_len} positions; {end} were asked for")
        self.k[layer, :, :, self.length:end] = k_new
        self.v[layer, :, :, self.length:end] = v_new
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def advance(self, n: int) -> None:
        self.length += n

    def reset(self) -> None:
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Memory of the allocated buffers, in bytes."""
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with one fused ``c_attn`` projection for q, k, v."""

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        block_size: int,
        dropout: float = 0.1,
        *,
        attn_impl: str = "naive",
        capture: bool = False,
        causal: bool = True,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        _check_sizes(n_embd, n_head, block_size)
        self.causal = causal
        self.scale = _check_scale(scale)  # None: the standard 1/sqrt(head_size)
        self.n_embd, self.n_head, self.head_size = n_embd, n_head, n_embd // n_head
        self.dropout_p = check_probability("dropout", dropout)
        self.attn_impl = _check_attn_impl(attn_impl)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.attn_dropout = nn.Dropout(dropout)
        self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)))
        self.capture = capture
        self.captured: dict[str, torch.Tensor] | None = None

    def forward(self, x: torch.Tensor, kv_cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        check_tensor("x", x, dims=3)
        B, T, C = x.shape
        if C != self.n_embd:
            raise ValueError(f"x has {C} channels but this layer was built for n_embd={self.n_embd}")
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # 3 x (B, T, C)
        q, k, v = (split_heads(t, self.n_head) for t in (q, k, v))  # 3 x (B, nh, T, hs)
        past = 0
        if kv_cache is not None:
            past = kv_cache.length
            k, v = kv_cache.append(layer, k, v)  # (B, nh, past + T, hs)
        if past + T > self.tril.size(0):
            raise ValueError(f"sequence length {past + T} is longer than block_size={self.tril.size(0)}")
        # Query i sits at position past + i and may see keys 0..past + i. A single new
        # token sees every cached key, so it needs no mask.
        mask = self.tril[past:past + T, :past + T] if T > 1 and self.causal else None

        if self.attn_impl == "naive" or self.capture:
            y, scores, weights = naive_attention(q, k, v, mask, scale=self.scale, dropout=self.attn_dropout)
            if self.capture:
                self.captured = {"q": q.detach(), "k": k.detach(), "v": v.detach(),
                                 "scores": scores.detach(), "weights": weights.detach()}
        if self.attn_impl == "sdpa":
            p = self.dropout_p if self.training else 0.0
            y = sdpa_attention(q, k, v, None if past == 0 else mask, dropout_p=p,
                               is_causal=past == 0 and mask is not None, scale=self.scale)
        return self.c_proj(merge_heads(y))  # (B, T, C)


class FeedForward(nn.Module):
    """Position-wise MLP: expand 4x, GELU, project back, dropout."""

    def __init__(self, n_embd: int, dropout: float = 0.1) -> None:
        super().__init__()
        check_positive_int("n_embd", n_embd)
        check_probability("dropout", dropout)
        self.net = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd),
            nn.GELU(),
            nn.Linear(4 * n_embd, n_embd),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Block(nn.Module):
    """A transformer block, pre-LayerNorm: ``x + sa(ln1(x))`` then ``x + ffwd(ln2(x))``."""

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        block_size: int,
        dropout: float = 0.1,
        *,
        attn_impl: str = "naive",
        capture: bool = False,
        causal: bool = True,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.sa = CausalSelfAttention(n_embd, n_head, block_size, dropout, attn_impl=attn_impl,
                                      capture=capture, causal=causal, scale=scale)
        self.ln2 = nn.LayerNorm(n_embd)
        self.ffwd = FeedForward(n_embd, dropout)

    def forward(self, x: torch.Tensor, kv_cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        x = x + self.sa(self.ln1(x), kv_cache, layer)
        x = x + self.ffwd(self.ln2(x))
        return x


class GPT(nn.Module):
    """A decoder-only transformer language model.

    ``GPT(vocab_size, n_embd, n_head, n_layer, block_size)`` as in the source, with
    keyword options ``dropout``, ``attn_impl`` and ``capture_attention``; or ``GPT(config)``
    with a :class:`GPTConfig`.

    ``forward(idx, targets=None)`` returns ``(logits, loss)`` with logits of shape
    (B, T, vocab_size) and ``loss`` the mean cross-entropy (``None`` without targets).
    """

    def __init__(
        self,
        vocab_size: int | GPTConfig,
        n_embd: int | None = None,
        n_head: int | None = None,
        n_layer: int | None = None,
        block_size: int | None = None,
        *,
        dropout: float = 0.1,
        attn_impl: str = "naive",
        capture_attention: bool = False,
        causal: bool = True,
        attn_scale: float | None = None,
    ) -> None:
        super().__init__()
        if isinstance(vocab_size, GPTConfig):
            if any(a is not None for a in (n_embd, n_head, n_layer, block_size)):
                raise TypeError("pass either a GPTConfig or the sizes, not both")
            config = vocab_size
        else:
            missing = [n for n, a in zip(("n_embd", "n_head", "n_layer", "block_size"),
                                         (n_embd, n_head, n_layer, block_size)) if a is None]
            if missing:
                raise TypeError(f"GPT() is missing sizes {missing}; pass all five sizes or a GPTConfig")
            config = GPTConfig(vocab_size, n_embd, n_head, n_layer, block_size,  # type: ignore[arg-type]
                               dropout, attn_impl, capture_attention, causal, attn_scale)
        self.config = config
        c = config
        self.token_embedding_table = nn.Embedding(c.vocab_size, c.n_embd)
        self.position_embedding_table = nn.Embedding(c.block_size, c.n_embd)
        self.blocks = nn.Sequential(*[
            Block(c.n_embd, c.n_head, c.block_size, c.dropout, attn_impl=c.attn_impl,
                  capture=c.capture_attention, causal=c.causal, scale=c.attn_scale)
            for _ in range(c.n_layer)
        ])
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # Small normal weights (std 0.02, as GPT-2 and nanoGPT) make the initial
        # logits nearly equal, so the first loss is close to ln(vocab_size).
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_parameters(self) -> int:
        """Number of trainable parameters (the ``tril`` buffers are not parameters)."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        kv_cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        c = self.config
        past = 0 if kv_cache is None else kv_cache.length
        check_token_ids(idx, c.vocab_size)
        B, T = idx.shape
        if past + T > c.block_size:
            raise ValueError(
                f"sequence length T={past + T} is longer than block_size={c.block_size}; "
                "crop the context to the last block_size tokens"
            )
        tok_emb = self.token_embedding_table(idx)  # (B, T, C)
        pos_emb = self.position_embedding_table(torch.arange(past, past + T, device=idx.device))  # (T, C)
        x = tok_emb + pos_emb  # (B, T, C)
        if kv_cache is None:
            x = self.blocks(x)
        else:
            for layer, block in enumerate(self.blocks):
                x = block(x, kv_cache, layer)
            kv_cache.advance(T)
        x = self.ln_f(x)
        logits = self.lm_head(x)  # (B, T, vocab_size)
        loss = None
        if targets is not None:
            check_token_ids(targets, c.vocab_size)
            if targets.shape != idx.shape:
                raise ValueError(f"targets shape {tuple(targets.shape)} must equal idx shape {tuple(idx.shape)}")
            loss = F.cross_entropy(logits.view(B * T, c.vocab_size), targets.reshape(B * T))  # reshape: targets may be a non-contiguous slice
        return logits, loss

    @torch.no_grad()
    def attention_records(self, idx: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        """Run ``idx`` once and return, per layer, q, k, v, the scaled scores and the weights.

        Each record holds tensors of shape (B, nh, T, hs) for q, k, v and (B, nh, T, T) for
        ``scores`` (scaled by 1/sqrt(head_size), before the mask) and ``weights`` (after
        the softmax). Runs in eval mode and restores the previous mode and capture flags.
        """
        was_training = self.training
        flags = [b.sa.capture for b in self.blocks]
        try:
            self.eval()
            for b in self.blocks:
                b.sa.capture = True
            self(idx)
            return [dict(b.sa.captured) for b in self.blocks]  # type: ignore[arg-type]
        finally:
            for b, f in zip(self.blocks, flags):
                b.sa.capture = f
            self.train(was_training)

    def generate(self, idx: torch.Tensor, max_new_tokens: int, **kwargs) -> torch.Tensor:
        """Append ``max_new_tokens`` sampled tokens to ``idx``; see :func:`gpt_lesson.generate.generate`."""
        from .generate import generate

        return generate(self, idx, max_new_tokens, **kwargs)


def count_parameters_by_part(model: GPT) -> dict[str, int]:
    """Parameters grouped as lessons discuss them: embeddings, attention, FFN, LayerNorms, head."""
    parts = {"token embedding": 0, "position embedding": 0, "attention": 0,
             "feed-forward": 0, "layer norms": 0, "lm_head": 0}
    for name, p in model.named_parameters():
        if name.startswith("token_embedding_table"):
            key = "token embedding"
        elif name.startswith("position_embedding_table"):
            key = "position embedding"
        elif ".sa." in name:
            key = "attention"
        elif ".ffwd." in name:
            key = "feed-forward"
        elif name.startswith("lm_head"):
            key = "lm_head"
        else:
            key = "layer norms"
        parts[key] += p.numel()
    return parts

