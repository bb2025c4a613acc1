"""The GPT of the course: the source model (:mod:`gpt_lesson.reference`), line for line, and its options.

Read it next to the source: the classes, their arguments, their submodules (so a checkpoint of
the source loads here with ``strict=True``) and the seven steps of attention are the source's.
What the library adds is small and off by default, so ``GPT(1000, 64, 4, 3, 128)`` computes what
the source computes:

* nanoGPT's weight init, ``N(0, 0.02)``: the first loss is close to ``ln(vocab_size)`` (the source
  keeps PyTorch's defaults and starts higher);
* logits are always (B, T, vocab_size) (the source flattens them when targets are given);
* the later lessons' options, in one :class:`GPTConfig`: ``attn_impl="sdpa"`` (PyTorch's fused
  attention, the one ``if`` of the forward pass), ``dropout``, and for experiments ``causal=False``
  (a mask of ones: nothing hidden) and ``attn_scale`` (1.0 = unscaled).

Generation's KV cache is :mod:`gpt_lesson.kv_cache` (``model(idx, kv_cache=cache)`` hands over to
it); the explorers read the attention weights with forward hooks (:mod:`gpt_lesson.capture`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import validation
from .kv_cache import KVCache, LayerKVCache, cached_forward  # KVCache: imported from here by lesson 10

__all__ = ["GPTConfig", "CausalSelfAttention", "FeedForward", "Block", "GPT", "count_parameters_by_part",
           "IGNORE_INDEX", "KVCache", "LayerKVCache"]

IGNORE_INDEX = -100  # a target with this id is skipped by the loss (PyTorch's cross_entropy default)


@dataclass(frozen=True)
class GPTConfig:
    """All the sizes and options of a :class:`GPT`, checked once when it is made (and never changed after)."""

    vocab_size: int = 1000
    n_embd: int = 64
    n_head: int = 4
    n_layer: int = 3
    block_size: int = 128
    dropout: float = 0.1
    attn_impl: str = "naive"  # "sdpa": PyTorch's fused kernel for attention's steps 3-6
    causal: bool = True  # False: a mask of ones, every position sees every other (lessons 03 and 11)
    attn_scale: float | None = None  # None is the source's 1/sqrt(head_size); 1.0 means no scaling

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_embd", "n_head", "n_layer", "block_size"):
            validation.check_positive_int(name, getattr(self, name))
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}: each head gets "
                             "n_embd // n_head channels, so n_embd must be a multiple of n_head")
        object.__setattr__(self, "dropout", validation.check_probability("dropout", self.dropout))
        validation.check_choice("attn_impl", self.attn_impl, ("naive", "sdpa"))
        validation.check_bool("causal", self.causal)
        object.__setattr__(self, "attn_scale", validation.check_scale("attn_scale", self.attn_scale))

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)


def _layer_config(n_embd: int | GPTConfig, n_head: int | None, block_size: int | None, dropout: float,
                 **options) -> GPTConfig:
    """A layer's :class:`GPTConfig`: the one given (``Block(config)``) or one made of the source's sizes."""
    if not isinstance(n_embd, GPTConfig):
        return GPTConfig(n_embd=n_embd, n_head=n_head, block_size=block_size, dropout=dropout, **options)
    if n_head is not None or block_size is not None or options:
        raise TypeError("a layer takes either a GPTConfig or the sizes (n_embd, n_head, block_size), not both")
    return n_embd


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: ``CausalSelfAttention(n_embd, n_head, block_size, dropout=0.1)``.

    Or ``CausalSelfAttention(config)``; the options ``attn_impl``, ``causal`` and ``attn_scale``
    are keywords of the first form too.
    """

    def __init__(self, n_embd: int | GPTConfig, n_head: int | None = None, block_size: int | None = None,
                 dropout: float = 0.1, **options) -> None:
        super().__init__()
        c = _layer_config(n_embd, n_head, block_size, dropout, **options)
        self.n_head = c.n_head
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=False)  # q, k, v in one matrix
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=False)
        self.dropout = nn.Dropout(c.dropout)
        mask = torch.ones(c.block_size, c.block_size)
        self.register_buffer("tril", torch.tril(mask) if c.causal else mask)
        self.scale = c.head_size ** -0.5 if c.attn_scale is None else c.attn_scale  # the source's hs**-0.5
        self.causal, self.fused = c.causal, c.attn_impl == "sdpa"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        hs = C // self.n_head
        # 1. Queries, keys and values from one matrix.
        q, k, v = self.c_attn(x).split(C, dim=2)
        # 2. Split into heads.
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        if self.fused:  # steps 3-6 in one PyTorch kernel (attn_impl="sdpa"): the same numbers, faster
            p = self.dropout.p if self.training else 0.0
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal, scale=self.scale)
        else:
            # 3. Scores, scaled by hs**-0.5.
            wei = q @ k.transpose(-2, -1) * self.scale  # (B, nh, T, T)
            # 4. Mask.
            wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
            # 5. Softmax, then dropout.
            wei = F.softmax(wei, dim=-1)
            wei = self.dropout(wei)
            # 6. Weighted sum of the values.
            out = wei @ v  # (B, nh, T, hs)
        # 7. Heads merged, then the output projection.
        out = out.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(out)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # The mask is a saved buffer: a checkpoint whose tril was edited would let the model read the future.
        key, tril = prefix + "tril", state_dict.get(prefix + "tril")
        if isinstance(tril, torch.Tensor) and tril.dim() == 2 and tril.size(0) == tril.size(1):
            ones = torch.ones(tril.shape, dtype=tril.dtype, device=tril.device)
            if self.causal and not torch.equal(tril, ones.tril()):
                raise ValueError(f"{key} in the checkpoint is not the lower-triangular matrix of ones "
                                 "torch.tril(torch.ones(T, T)): loading it would let positions see the future. The "
                                 "checkpoint is damaged or was edited, or comes from a model with causal=False")
            if not self.causal:  # a causal model's weights, loaded on purpose (lesson 11): this model keeps no mask
                if not (torch.equal(tril, ones) or torch.equal(tril, ones.tril())):
                    raise ValueError(f"{key} in the checkpoint is neither a causal mask nor a matrix of ones: "
                                     "the checkpoint is damaged or was edited")
                state_dict[key] = ones
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
    """A pre-LayerNorm transformer block, ``x + sa(ln1(x))`` then ``x + ffwd(ln2(x))``.

    ``Block(n_embd, n_head, block_size, dropout=0.1)`` (options as keywords) or ``Block(config)``.
    """

    def __init__(self, n_embd: int | GPTConfig, n_head: int | None = None, block_size: int | None = None,
                 dropout: float = 0.1, **options) -> None:
        super().__init__()
        c = _layer_config(n_embd, n_head, block_size, dropout, **options)
        self.ln1 = nn.LayerNorm(c.n_embd)
        self.sa = CausalSelfAttention(c)
        self.ln2 = nn.LayerNorm(c.n_embd)
        self.ffwd = FeedForward(c.n_embd, c.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.sa(self.ln1(x))
        x = x + self.ffwd(self.ln2(x))
        return x


class GPT(nn.Module):
    """A decoder-only transformer language model: ``GPT(vocab_size, n_embd, n_head, n_layer, block_size)``.

    Options as keywords (``dropout``, ``attn_impl``, ``causal``, ``attn_scale``), or ``GPT(config)``.
    ``forward(idx, targets=None)`` returns ``(logits, loss)``: logits of shape (B, T, vocab_size) and
    the mean cross-entropy (``None`` without targets), leaving out targets equal to
    :data:`IGNORE_INDEX`. With ``kv_cache=`` (a :class:`~gpt_lesson.kv_cache.KVCache`) ``idx`` holds
    only the new tokens, after those the cache holds (generation; no loss).
    """

    def __init__(self, vocab_size: int | GPTConfig, n_embd: int | None = None, n_head: int | None = None,
                 n_layer: int | None = None, block_size: int | None = None, **options) -> None:
        super().__init__()
        if isinstance(vocab_size, GPTConfig):
            if any(a is not None for a in (n_embd, n_head, n_layer, block_size)) or options:
                raise TypeError("pass either a GPTConfig or the sizes and options, not both")
            c = vocab_size
        else:
            sizes = dict(n_embd=n_embd, n_head=n_head, n_layer=n_layer, block_size=block_size)
            missing = [name for name, size in sizes.items() if size is None]
            if missing:
                raise TypeError(f"GPT() is missing sizes {missing}; pass all five sizes or a GPTConfig")
            c = GPTConfig(vocab_size, **sizes, **options)  # type: ignore[arg-type]
        validation.check_model_memory(c)
        self.config = c
        self.token_embedding_table = nn.Embedding(c.vocab_size, c.n_embd)
        self.position_embedding_table = nn.Embedding(c.block_size, c.n_embd)
        self.blocks = nn.Sequential(*[Block(c) for _ in range(c.n_layer)])
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # nanoGPT's init, not the source's: small normal weights (std 0.02, as GPT-2's) make the
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

    def __call__(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                 kv_cache: KVCache | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        # The entry point checks the arguments (gpt_lesson.validation), so forward stays the source's.
        validation.check_model_call(self, idx, targets, IGNORE_INDEX)
        return super().__call__(idx, targets, kv_cache)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                kv_cache: KVCache | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        if kv_cache is not None:  # generation: these modules on the new tokens only (gpt_lesson.kv_cache)
            return cached_forward(self, idx, kv_cache, targets), None
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length T={T} is longer than block_size={self.config.block_size}; "
                             "crop the context to the last block_size tokens")
        tok_emb = self.token_embedding_table(idx)  # (B, T, C)
        pos_emb = self.position_embedding_table(torch.arange(T, device=idx.device))  # (T, C)
        x = self.blocks(tok_emb + pos_emb)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab_size)
        if targets is None:
            loss = None
        else:  # reshape, not view: targets may be a non-contiguous slice
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T).long(), ignore_index=IGNORE_INDEX)
        return logits, loss

    def attention_records(self, idx: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        """Each layer's q, k, v, scores and weights for ``idx``: :func:`gpt_lesson.capture.attention_records`."""
        from .capture import attention_records

        return attention_records(self, idx)


def count_parameters_by_part(model: GPT) -> dict[str, int]:
    """Parameters grouped as lessons discuss them: embeddings, attention, FFN, LayerNorms, head."""
    validation.check_instance("model", model, GPT)
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
