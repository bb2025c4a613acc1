"""The GPT of the course: the source model, line for line, with the later lessons' options on top.

Read it next to the source (:mod:`gpt_lesson.reference`): the classes, their names and the
order of the steps are the source's, so every line of the source is here and a checkpoint of
the source model loads with ``strict=True`` (same keys: ``token_embedding_table``,
``blocks.0.sa.c_attn``, ``blocks.0.sa.tril``, ``blocks.0.ffwd.net.0``, ``ln_f``, ``lm_head``...).

What the library adds, all off by default so ``GPT(1000, 64, 4, 3, 128)`` computes what the
source computes:

* nanoGPT's small weight init, ``N(0, 0.02)``: the first loss is close to ``ln(vocab_size)``
  (the source keeps PyTorch's defaults and starts higher);
* logits are always (B, T, vocab_size) (the source flattens them when targets are given);
* options in one :class:`GPTConfig`: ``attn_impl="sdpa"`` (PyTorch's fused attention),
  ``capture_attention`` (keep each layer's q, k, v, scores and weights), ``dropout``, and for
  the experiments only, ``causal=False`` (no mask) and ``attn_scale`` (1.0 = unscaled);
* a KV cache for generation (:class:`KVCache`, one :class:`LayerKVCache` per layer).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import validation
from .attention import one_query_attention

__all__ = [
    "GPTConfig", "LayerKVCache", "KVCache", "CausalSelfAttention", "FeedForward", "Block", "GPT",
    "count_parameters_by_part", "IGNORE_INDEX",
]

ATTN_IMPLS = ("naive", "sdpa")
IGNORE_INDEX = -100  # a target with this id is skipped by the loss (PyTorch's cross_entropy default)


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
        for name in ("vocab_size", "n_embd", "n_head", "n_layer", "block_size"):
            validation.check_positive_int(name, getattr(self, name))
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}: "
                "each head gets n_embd // n_head channels, so n_embd must be a multiple of n_head"
            )
        self.dropout = validation.check_probability("dropout", self.dropout)
        validation.check_choice("attn_impl", self.attn_impl, ATTN_IMPLS)
        validation.check_bool("capture_attention", self.capture_attention)
        validation.check_bool("causal", self.causal)
        self.attn_scale = validation.check_scale("attn_scale", self.attn_scale)

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)


def _layer_config(n_embd: int | GPTConfig, n_head: int | None, block_size: int | None, dropout: float,
                  layer: str) -> GPTConfig:
    """The config of a sub-layer built either from the source's sizes or from a :class:`GPTConfig`."""
    if isinstance(n_embd, GPTConfig):
        if n_head is not None or block_size is not None:
            raise TypeError(f"{layer}() takes either a GPTConfig or the sizes (n_embd, n_head, block_size), not both")
        return n_embd
    if n_head is None or block_size is None:
        raise TypeError(f"{layer}() needs n_embd, n_head and block_size (or a GPTConfig)")
    return GPTConfig(n_embd=n_embd, n_head=n_head, block_size=block_size, dropout=dropout)


class LayerKVCache:
    """One attention layer's keys and values, kept as generation goes so each is computed once.

    ``k`` and ``v`` are preallocated for ``max_len`` positions, shape (B, n_head, max_len,
    head_size); :meth:`update` writes the new positions in place and moves ``length`` on.
    """

    def __init__(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k, self.v = k, v
        self.length = 0

    @property
    def max_len(self) -> int:
        return self.k.size(2)

    def update(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k_new``/``v_new`` (B, nh, T_new, hs) after the filled part; return every key and value so far."""
        if k_new.shape[:2] != self.k.shape[:2] or k_new.size(3) != self.k.size(3):
            raise ValueError(
                f"keys of shape {tuple(k_new.shape)} do not fit this cache (batch, n_head, max_len, head_size)="
                f"{tuple(self.k.shape)}: was the cache made for another batch size or another model? "
                "Make one with KVCache.for_model(model, batch_size=idx.size(0))"
            )
        start, end = self.length, self.length + k_new.size(2)
        if end > self.max_len:
            raise ValueError(f"the KV cache holds max_len={self.max_len} positions; {end} were asked for")
        self.k[:, :, start:end] = k_new
        self.v[:, :, start:end] = v_new
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def reset(self) -> None:
        self.length = 0


class KVCache:
    """The KV caches of every layer of a model: ``layers[i]`` is layer i's :class:`LayerKVCache`.

    The buffers are allocated once: ``k`` and ``v`` have shape (n_layer, B, n_head, max_len,
    head_size) and ``layers[i].k`` is ``k[i]``. ``length`` counts the positions filled. Its
    size is ``2 * n_layer * B * max_len * n_embd * bytes_per_number``.
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
            validation.check_positive_int(name, value)
        shape = (n_layer, batch_size, n_head, max_len, head_size)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.layers = [LayerKVCache(self.k[i], self.v[i]) for i in range(n_layer)]

    @classmethod
    def for_model(cls, model: GPT, batch_size: int = 1, max_len: int | None = None) -> KVCache:
        """An empty cache sized for ``model`` (``max_len`` defaults to its block_size)."""
        cfg = model.config
        max_len = cfg.block_size if max_len is None else validation.check_positive_int("max_len", max_len)
        if max_len > cfg.block_size:
            raise ValueError(f"max_len={max_len} is longer than the model's block_size={cfg.block_size}")
        p = next(model.parameters())
        return cls(cfg.n_layer, batch_size, cfg.n_head, cfg.head_size, max_len, p.dtype, p.device)

    @property
    def length(self) -> int:
        return self.layers[-1].length

    @property
    def max_len(self) -> int:
        return self.k.size(3)

    @property
    def batch_size(self) -> int:
        return self.k.size(1)

    def reset(self) -> None:
        for layer in self.layers:
            layer.reset()

    @property
    def nbytes(self) -> int:
        """Memory of the allocated buffers, in bytes."""
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with one fused ``c_attn`` projection for q, k, v.

    ``CausalSelfAttention(n_embd, n_head, block_size, dropout=0.1)`` as in the source, or
    ``CausalSelfAttention(config)`` with a :class:`GPTConfig` carrying the options.
    """

    def __init__(self, n_embd: int | GPTConfig, n_head: int | None = None, block_size: int | None = None,
                 dropout: float = 0.1) -> None:
        super().__init__()
        config = _layer_config(n_embd, n_head, block_size, dropout, "CausalSelfAttention")
        self.config = config
        self.n_embd, self.n_head, self.head_size = config.n_embd, config.n_head, config.head_size
        self.scale = config.head_size ** -0.5 if config.attn_scale is None else config.attn_scale
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)  # q, k, v in one matrix
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.dropout = nn.Dropout(config.dropout)
        self.register_buffer("tril", torch.tril(torch.ones(config.block_size, config.block_size)))
        self.capture = config.capture_attention
        self.captured: dict[str, torch.Tensor] | None = None

    def forward(self, x: torch.Tensor, kv_cache: LayerKVCache | None = None) -> torch.Tensor:
        validation.check_tensor("x", x, dims=3)
        B, T, C = x.shape
        if C != self.n_embd:
            raise ValueError(f"x has {C} channels but this layer was built for n_embd={self.n_embd}")
        nh, hs = self.n_head, self.head_size

        # 1. Queries, keys and values from one matrix, split into heads: 3 x (B, nh, T, hs).
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)

        # (KV cache) keys and values of the earlier positions come from the cache: (B, nh, past + T, hs).
        past = 0
        if kv_cache is not None:
            past = kv_cache.length
            k, v = kv_cache.update(k, v)
        if past + T > self.tril.size(0):
            raise ValueError(f"sequence length {past + T} is longer than block_size={self.tril.size(0)}")
        # Query i sits at position past + i and sees keys 0..past + i: rows past..past+T-1 of tril (none for T=1).
        mask = self.tril[past:past + T, :past + T] if self.config.causal and T > 1 else None

        if T == 1 and not self.training and torch.compiler.is_compiling():
            # Steps 2-5 for one new token in a compiled decode step, as two sums that Inductor fuses with the rest.
            out = one_query_attention(q, k, v, self.scale)
        elif self.config.attn_impl == "naive" or self.capture:
            # 2. Scores: every query against every key, scaled by 1/sqrt(hs): (B, nh, T, past + T).
            wei = q @ k.transpose(-2, -1) * self.scale
            scores = wei
            # 3. The causal mask: the future gets -inf.
            if mask is not None:
                wei = wei.masked_fill(mask == 0, float("-inf"))
            # 4. Softmax over the keys; dropout on the weights.
            wei = F.softmax(wei, dim=-1)
            if self.capture:
                self.captured = {"q": q.detach(), "k": k.detach(), "v": v.detach(),
                                 "scores": scores.detach(), "weights": wei.detach()}
            wei = self.dropout(wei)
            # 5. Weighted sum of the values: (B, nh, T, hs).
            out = wei @ v
        else:
            # Steps 2-5 in one fused kernel. A bool mask hides where it is False; with no cache
            # is_causal builds the same mask (it aligns it top-left, so a cache needs the explicit one).
            p = self.dropout.p if self.training else 0.0
            causal_no_cache = self.config.causal and T > 1 and past == 0
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=None if causal_no_cache or mask is None else mask.bool(),
                dropout_p=p, is_causal=causal_no_cache, scale=self.scale)

        # 6. Heads side by side again, then the output projection: (B, T, C).
        out = out.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(out)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # The mask is a saved buffer; a checkpoint whose tril was changed would let the model read the future.
        key = prefix + "tril"
        tril = state_dict.get(key)
        if isinstance(tril, torch.Tensor) and tril.shape == self.tril.shape and not torch.equal(
                tril.to(self.tril.dtype), torch.tril(torch.ones_like(self.tril))):
            raise ValueError(
                f"{key} in the checkpoint is not the lower-triangular matrix of ones torch.tril(torch.ones(T, T)): "
                "loading it would let positions see the future. The checkpoint is damaged or was edited"
            )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class FeedForward(nn.Module):
    """Position-wise MLP: expand 4x, GELU, project back, dropout."""

    def __init__(self, n_embd: int, dropout: float = 0.1) -> None:
        super().__init__()
        validation.check_positive_int("n_embd", n_embd)
        validation.check_probability("dropout", dropout)
        self.net = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd),
            nn.GELU(),
            nn.Linear(4 * n_embd, n_embd),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Block(nn.Module):
    """A transformer block, pre-LayerNorm: ``x + sa(ln1(x))`` then ``x + ffwd(ln2(x))``.

    ``Block(n_embd, n_head, block_size, dropout=0.1)`` or ``Block(config)``.
    """

    def __init__(self, n_embd: int | GPTConfig, n_head: int | None = None, block_size: int | None = None,
                 dropout: float = 0.1) -> None:
        super().__init__()
        config = _layer_config(n_embd, n_head, block_size, dropout, "Block")
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.sa = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.ffwd = FeedForward(config.n_embd, config.dropout)

    def forward(self, x: torch.Tensor, kv_cache: LayerKVCache | None = None) -> torch.Tensor:
        validation.check_tensor("x", x, dims=3)
        x = x + self.sa(self.ln1(x), kv_cache)
        x = x + self.ffwd(self.ln2(x))
        return x


class GPT(nn.Module):
    """A decoder-only transformer language model.

    ``GPT(vocab_size, n_embd, n_head, n_layer, block_size)`` as in the source, with keyword
    options (``dropout``, ``attn_impl``, ``capture_attention``, ``causal``, ``attn_scale``);
    or ``GPT(config)`` with a :class:`GPTConfig`.

    ``forward(idx, targets=None)`` returns ``(logits, loss)`` with logits of shape
    (B, T, vocab_size) and ``loss`` the mean cross-entropy (``None`` without targets);
    targets equal to :data:`IGNORE_INDEX` (-100) are left out of the loss.
    """

    def __init__(
        self,
        vocab_size: int | GPTConfig,
        n_embd: int | None = None,
        n_head: int | None = None,
        n_layer: int | None = None,
        block_size: int | None = None,
        **options,
    ) -> None:
        super().__init__()
        if isinstance(vocab_size, GPTConfig):
            if any(a is not None for a in (n_embd, n_head, n_layer, block_size)) or options:
                raise TypeError("pass either a GPTConfig or the sizes and options, not both")
            config = vocab_size
        else:
            missing = [n for n, a in zip(("n_embd", "n_head", "n_layer", "block_size"),
                                         (n_embd, n_head, n_layer, block_size)) if a is None]
            if missing:
                raise TypeError(f"GPT() is missing sizes {missing}; pass all five sizes or a GPTConfig")
            config = GPTConfig(vocab_size, n_embd, n_head, n_layer, block_size, **options)  # type: ignore[arg-type]
        self.config = c = config
        self.token_embedding_table = nn.Embedding(c.vocab_size, c.n_embd)
        self.position_embedding_table = nn.Embedding(c.block_size, c.n_embd)
        self.blocks = nn.Sequential(*[Block(c) for _ in range(c.n_layer)])
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # Not in the source: small normal weights (std 0.02, as GPT-2 and nanoGPT) make the
        # initial logits nearly equal, so the first loss is close to ln(vocab_size).
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
        if not torch.compiler.is_compiling():  # it reads the ids; a compiled decode step is fed the ids it sampled
            validation.check_token_ids(idx, c.vocab_size)
        B, T = idx.shape
        past = 0
        if kv_cache is not None:
            if not isinstance(kv_cache, KVCache):
                raise TypeError(f"kv_cache must be a KVCache, got {type(kv_cache).__name__}")
            if len(kv_cache.layers) != c.n_layer or kv_cache.batch_size != B:
                raise ValueError(
                    f"kv_cache has {len(kv_cache.layers)} layers for batch size {kv_cache.batch_size}, but this "
                    f"model has n_layer={c.n_layer} and idx has batch size {B}; "
                    "make one with KVCache.for_model(model, batch_size=idx.size(0))"
                )
            past = kv_cache.length
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
            for block, layer_cache in zip(self.blocks, kv_cache.layers):
                x = block(x, layer_cache)
        x = self.ln_f(x)
        logits = self.lm_head(x)  # (B, T, vocab_size)
        loss = None
        if targets is not None:
            validation.check_token_ids(targets, c.vocab_size, name="targets", ignore_index=IGNORE_INDEX)
            if targets.shape != idx.shape:
                raise ValueError(f"targets shape {tuple(targets.shape)} must equal idx shape {tuple(idx.shape)}")
            # reshape, not view: targets may be a non-contiguous slice
            loss = F.cross_entropy(logits.view(B * T, c.vocab_size), targets.reshape(B * T).long(),
                                   ignore_index=IGNORE_INDEX)
        return logits, loss

    @torch.no_grad()
    def attention_records(self, idx: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        """Run ``idx`` once and return, per layer, q, k, v, the scaled scores and the weights.

        Each record holds tensors of shape (B, nh, T, hs) for q, k, v and (B, nh, T, T) for
        ``scores`` (scaled, before the mask) and ``weights`` (after the softmax). Runs in eval
        mode and restores the previous mode and capture flags.
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
