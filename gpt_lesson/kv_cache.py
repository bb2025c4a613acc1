"""Generation's KV cache: the model's own modules run on the new positions only, earlier keys and values kept.

Lesson 10 builds it. A causal position's key and value depend only on the tokens up to it, so while
a sequence grows they can be computed once, kept, and read again at every later step:

* :class:`KVCache` holds them for every layer, one preallocated :class:`LayerKVCache` each;
* :func:`cached_forward` is the GPT's forward pass on the new positions with a cache: the same
  embeddings, blocks, LayerNorms and head (the model's modules, so every checkpoint serves both), with
  attention reading the cached keys and values. ``model(idx, kv_cache=cache)`` calls it;
* :func:`decode_step` is one token of generation; :class:`CompiledDecodeStep` is the same step
  compiled with ``torch.compile`` (``generate(..., compile=True)``), with the eager step as fallback.

As rasbt's *LLMs from scratch* keeps its KV-cache model in a module of its own, the model's file
(:mod:`gpt_lesson.model`) stays the source model. This module imports nothing of the model, so the
model can hand its cached calls to it.
"""
from __future__ import annotations

import os
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from .attention import summed_attention
from .validation import check_device, check_instance, check_memory, check_positive_int

__all__ = ["LayerKVCache", "KVCache", "cached_attention", "cached_forward", "decode_step", "CompiledDecodeStep"]


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
            check_positive_int(name, value)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype={dtype!r} must be a floating-point torch.dtype (the model's, e.g. torch.float32)")
        check_device("device", device, allow_none=True)
        shape = (n_layer, batch_size, n_head, max_len, head_size)
        nbytes = 2 * n_layer * batch_size * n_head * max_len * head_size * dtype.itemsize
        check_memory("batch_size", batch_size, nbytes, f"a KV cache of {n_layer} layers x {max_len} positions")
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.layers = [LayerKVCache(self.k[i], self.v[i]) for i in range(n_layer)]

    @classmethod
    def for_model(cls, model: nn.Module, batch_size: int = 1, max_len: int | None = None) -> KVCache:
        """An empty cache sized for ``model`` (``max_len`` defaults to its block_size).

        Any model whose ``config`` has the course's sizes fits: a model with grouped-query attention
        (``config.n_kv_head``, lesson 14's Llama) gets a cache of its key-value heads.
        """
        cfg = model.config
        max_len = cfg.block_size if max_len is None else check_positive_int("max_len", max_len)
        if max_len > cfg.block_size:
            raise ValueError(f"max_len={max_len} is longer than the model's block_size={cfg.block_size}")
        n_kv_head = getattr(cfg, "n_kv_head", cfg.n_head)
        p = next(model.parameters())
        return cls(cfg.n_layer, batch_size, n_kv_head, cfg.n_embd // cfg.n_head, max_len, p.dtype, p.device)

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


def cached_attention(sa: nn.Module, x: torch.Tensor, layer: LayerKVCache, summed: bool = False) -> torch.Tensor:
    """A :class:`~gpt_lesson.model.CausalSelfAttention`'s steps for new positions ``x`` (B, T, C), past keys from ``layer``.

    The same seven steps; only the keys and values (step 2) come from ``layer`` for the earlier
    positions, and steps 3-6 run in PyTorch's fused kernel. ``summed=True`` (one new token, in a
    compiled step) writes them as two sums instead (:func:`~gpt_lesson.attention.one_query_attention`),
    which Inductor fuses with the rest of the step.
    """
    B, T, C = x.shape
    nh = sa.n_head
    # 1-2. Queries, keys and values of the new positions, split into heads: 3 x (B, nh, T, hs).
    q, k, v = (t.view(B, T, nh, C // nh).transpose(1, 2) for t in sa.c_attn(x).split(C, dim=2))
    past = layer.length
    k, v = layer.update(k, v)  # every key and value so far: (B, nh, past + T, hs)
    if summed:
        out = summed_attention(q, k, v, sa.scale)  # one_query_attention, unchecked (traced)
    else:
        # 3-6. New query i sits at position past + i and sees keys 0..past + i: rows past.. of tril. One new
        # query sees every key (no mask); a first chunk, the usual causal mask (which is_causal builds).
        first = past == 0 and T > 1
        mask = None if T == 1 or first else sa.tril[past:past + T, :past + T].bool()
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=first, scale=sa.scale)
    # 7. Heads side by side again, then the output projection: (B, T, C).
    return sa.c_proj(out.transpose(1, 2).contiguous().view(B, T, C))


def cached_forward(model: nn.Module, idx: torch.Tensor, cache: KVCache, targets: None = None,
                   summed: bool = False) -> torch.Tensor:
    """The GPT's forward pass for new tokens ``idx`` (B, T) after the ``cache.length`` positions in ``cache``.

    Returns the logits (B, T, vocab_size), the same numbers (to float rounding) as the full forward
    pass over every position at the last T; the cache then holds ``cache.length + T`` positions.
    There is no loss: ``targets`` is refused (a cache is for generation).
    """
    check_instance("kv_cache", cache, KVCache)
    if targets is not None:
        raise ValueError("targets were given with a kv_cache: the cache is for generation and computes no loss; "
                         "call model(idx, targets) without kv_cache")
    c = model.config
    B, T = idx.shape
    p = None if summed else next(model.parameters())  # (the compiled step's cache was made for its model)
    kept = getattr(cache, "k", None)  # a cache of another kind (lesson 10's torch.cat one) may keep no buffer
    kept = (kept.dtype, kept.device) if isinstance(kept, torch.Tensor) else None if p is None else (p.dtype, p.device)
    if p is not None and (kept != (p.dtype, p.device) or idx.device != p.device):
        raise ValueError(f"kv_cache holds {kept[0]} on {kept[1]} and idx is on {idx.device}, but the "
                         f"model is {p.dtype} on {p.device}: they must match; make the cache with "
                         "KVCache.for_model(model, batch_size=B)")
    if not getattr(c, "causal", True):
        raise ValueError("a KV cache needs a causal model: with causal=False every position sees the later ones, so "
                         "keys and values computed earlier change as tokens are added")
    if len(cache.layers) != c.n_layer or cache.batch_size != B:
        raise ValueError(
            f"kv_cache has {len(cache.layers)} layers for batch size {cache.batch_size}, but this model has "
            f"n_layer={c.n_layer} and idx has batch size {B}; make one with KVCache.for_model(model, batch_size=B)"
        )
    past = cache.length
    if past + T > c.block_size:
        raise ValueError(f"sequence length T={past + T} is longer than block_size={c.block_size}; "
                         "crop the context to the last block_size tokens")
    pos = torch.arange(past, past + T, device=idx.device)  # the new tokens' positions
    x = model.token_embedding_table(idx) + model.position_embedding_table(pos)  # (B, T, C)
    for block, layer in zip(model.blocks, cache.layers):
        x = x + cached_attention(block.sa, block.ln1(x), layer, summed)
        x = x + block.ffwd(block.ln2(x))
    return model.lm_head(model.ln_f(x))  # (B, T, vocab_size)


def decode_step(model: nn.Module, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """One cached step: the newest token ``idx`` (B, 1) in, the next token's logits (B, vocab) out."""
    return model(idx, kv_cache=cache)[0][:, -1, :]


def _summed_step(model: nn.Module, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """:func:`decode_step` of a course GPT with the one-query attention as two sums: what is compiled."""
    return cached_forward(model, idx, cache, summed=True)[:, -1, :]


def compile_options() -> dict:
    """The ``torch.compile`` options of the decode step, for this CPU and environment.

    Inductor's ``decompose_mm_pass`` (off unless asked for) writes each one-row matrix product (one
    token times a weight matrix) as a multiply-and-sum loop it fuses with the LayerNorms, GELUs and
    additions around it, instead of a call into BLAS per matrix. It is asked for only where PyTorch
    runs vector (SIMD) kernels (``torch.backends.cpu.get_cpu_capability()`` is not ``DEFAULT``): in
    plain C++ the loops are slower than BLAS (with ``ATEN_CPU_CAPABILITY=default``: as fast as eager
    with the pass, 1.65x without). No on-disk graph cache when ``ATEN_CPU_CAPABILITY`` is set: that
    cache does not record the variable (PyTorch 2.13), so a graph built for this CPU's vector
    instructions would be reused and fail to build as the plain C++ the variable asks for.
    """
    options: dict = {}
    if torch.backends.cpu.get_cpu_capability() != "DEFAULT":
        options["post_grad_fusion_options"] = {"decompose_mm_pass": {}}
    if os.environ.get("ATEN_CPU_CAPABILITY"):
        options["fx_graph_cache"] = False
    return options


class CompiledDecodeStep:
    """:func:`decode_step` compiled by ``torch.compile``, or the eager step with one warning where that fails.

    Each instance serves one generation; what Inductor compiled is kept by PyTorch (for the code of
    the step), so the next instance reuses it without compiling again. ``dynamic`` is left to
    PyTorch: the first call compiles for its cache length; the next sees the length change and
    compiles once more with the length as a symbol, which serves every later length. The batch size
    stays a constant (``dynamic=True`` would make it a symbol too, and the one-row products would
    not be fused). ``fullgraph=True``: a graph break would quietly leave parts eager; it fails
    instead, and the fallback says so. A failure (no C++ compiler, an unsupported platform) is
    remembered by the instance: it does not try again, and ``failure`` says why.
    """

    def __init__(self) -> None:
        self.compiled = torch.compile(_summed_step, fullgraph=True, options=compile_options())
        self.failure: str | None = None
        self.checked = 0  # calls that ran compiled; the first two may compile

    def __call__(self, model: nn.Module, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
        # The step that fills the buffer's last position reads all of it, a contiguous tensor: another
        # memory layout, which would be a second compilation. That one step per window runs eagerly.
        if self.failure is None and cache.length + 1 < cache.max_len:
            if self.checked >= 2:
                return self.compiled(model, idx, cache)
            length = cache.length
            try:
                logits = self.compiled(model, idx, cache)  # the first two calls may compile (seconds each)
                self.checked += 1
                return logits
            except Exception as err:  # no C++ compiler, an unsupported platform, ...
                for layer in cache.layers:
                    layer.length = length  # the failed call may have moved the cache on
                lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [""]
                # Inductor's first line is often only "backend='inductor' raised:"; the cause is on the next.
                reason = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
                self.failure = f"{type(err).__name__}: {reason[:200]}"
                warnings.warn(f"compile=True: torch.compile cannot compile the decode step here ({self.failure}); "
                              "decoding without compiling (the same tokens, slower)", RuntimeWarning, stacklevel=3)
        return decode_step(model, idx, cache)
