"""Text generation: greedy, temperature, top-k and top-p sampling, with or without a KV cache.

Without a cache, every new token runs the model over the whole (cropped) context
again. With a cache, the keys and values of earlier positions are kept, so each new
token costs one position's worth of work. Both give the same tokens: while the
sequence fits in ``block_size`` the cache is used; once it is full, the context
window slides, every position moves, and the cache is rebuilt from the cropped
context (exactly what the uncached path computes).
"""
from __future__ import annotations

import os
import warnings

import torch
import torch.nn.functional as F

from .model import GPT, KVCache
from .validation import check_bool, check_int, check_number, check_tensor, check_token_ids

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
    if temperature == 0:
        check_tensor("logits", logits, min_dim=1)
        _check_sampling(temperature, top_k, logits.size(-1), top_p)
        return logits.argmax(dim=-1, keepdim=True)
    probs = next_token_probs(logits, temperature, top_k, top_p)
    try:
        return torch.multinomial(probs, num_samples=1, generator=generator)
    except RuntimeError:
        if not bool(torch.isfinite(logits).all()):  # checked only on failure: the loop stays as fast
            raise ValueError("logits hold NaN or infinite values, so there is no distribution to sample from; "
                             "the model's weights or input are broken (a diverged training run?)") from None
        raise


def _decode_step(model: GPT, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """One cached step: the newest token ``idx`` (B, 1) in, the next token's logits (B, vocab) out."""
    logits, _ = model(idx, kv_cache=cache)
    return logits[:, -1, :]


# Inductor's pass that writes a matrix-vector product (one token: one row times a weight matrix) as a
# multiply-and-sum loop it can fuse with the LayerNorms, GELUs and additions around it, instead of calling
# the BLAS library once per matrix. PyTorch applies it on CPU only to products with one row and sizes
# up to 2048; it is off unless asked for.
_DECOMPOSE_MATVEC = {"post_grad_fusion_options": {"decompose_mm_pass": {}}}


def _inductor_vectorises() -> bool:
    """Whether Inductor writes vector (SIMD) C++ here; ``ATEN_CPU_CAPABILITY=default`` and old CPUs get plain C++."""
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa  # PyTorch's own check (a private module)
    except ImportError:  # moved in another version: assume the usual case, a CPU with vector instructions
        return True
    try:
        return bool(pick_vec_isa())  # it test-builds a small C++ program
    except Exception:  # no working C++ compiler: no vector C++ either (compiling will fail and fall back)
        return False


def _compile_options() -> dict:
    """The ``torch.compile`` options of the decode step.

    The one-row pass above only where Inductor vectorises: its plain-C++ loops are slower than BLAS
    (measured with ``ATEN_CPU_CAPABILITY=default``: as fast as eager with the pass, 1.65x without).
    No on-disk graph cache when ``ATEN_CPU_CAPABILITY`` is set: that cache does not record the
    variable (PyTorch 2.13), so a graph generated for this CPU's vector instructions would be reused
    and fail to build as the plain C++ the variable asks for.
    """
    options = dict(_DECOMPOSE_MATVEC) if _inductor_vectorises() else {}
    if os.environ.get("ATEN_CPU_CAPABILITY"):
        options["fx_graph_cache"] = False
    return options


class _CompiledStep:
    """:func:`_decode_step` compiled by ``torch.compile``, or the eager step with a warning where that fails.

    ``dynamic`` is left to PyTorch: the first call compiles for its cache length; the next sees the
    length change and compiles once more with the length as a symbol, so later steps reuse that one
    graph. The batch size stays a constant (``dynamic=True`` would make it a symbol too, and the
    one-row products above would not be fused). ``fullgraph=True``: a graph break would quietly leave
    parts eager; it fails instead, and the fallback says so.
    """

    compiled = None  # torch.compile's wrapper, shared by every generate() call (it keeps what it compiled)
    failure: str | None = None  # why compiling failed in this process; it is not tried again

    def __init__(self) -> None:
        self.checked = 0  # calls that ran compiled in this generate(); the first two may compile
        self.warned = False

    def __call__(self, model: GPT, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
        cls = _CompiledStep
        # The step that fills the buffer's last position reads all of it, a contiguous tensor: another
        # memory layout, which would be a second compilation. That one step per window runs eagerly.
        if cls.failure is None and cache.length + 1 < cache.max_len:
            if cls.compiled is None:
                cls.compiled = torch.compile(_decode_step, fullgraph=True, options=_compile_options())
            if self.checked >= 2:
                return cls.compiled(model, idx, cache)
            length = cache.length
            try:
                logits = cls.compiled(model, idx, cache)  # the first two calls compile (seconds each)
                self.checked += 1
                return logits
            except Exception as err:  # no C++ compiler, an unsupported platform, ...
                for layer in cache.layers:
                    layer.length = length  # the failed call may have moved the cache on
                lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [""]
                # Inductor's first line is often only "backend='inductor' raised:"; the cause is on the next.
                reason = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
                cls.failure = f"{type(err).__name__}: {reason[:200]}"
        if cls.failure is not None and not self.warned:
            self.warned = True
            warnings.warn(f"compile=True: torch.compile cannot compile the decode step here ({cls.failure}); "
                          "decoding without compiling (the same tokens, slower)", RuntimeWarning, stacklevel=3)
        return _decode_step(model, idx, cache)


def generate(
    model: GPT,
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
    the call and its previous mode restored.

    ``use_cache=True`` keeps every layer's keys and values (:class:`KVCache`), so a step
    runs the newest token only. ``compile=True`` (with the cache) also compiles that
    one-token step with ``torch.compile``: the first call compiles (tens of seconds; a C++
    compiler is needed), later calls reuse it. Where compiling fails, a warning says why and
    the step runs eagerly. Every mode gives the same tokens.
    """
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    vocab_size, block_size = model.config.vocab_size, model.config.block_size
    check_token_ids(idx, vocab_size)
    check_bool("use_cache", use_cache)
    check_bool("compile", compile)
    if use_cache and not model.config.causal:
        raise ValueError(
            "use_cache=True needs a causal model: with causal=False every position sees the later ones, so keys "
            "and values computed earlier change as tokens are added and a cache would give other tokens; "
            "use use_cache=False"
        )
    if compile and not use_cache:
        raise ValueError("compile=True compiles the cached one-token step; it needs use_cache=True")
    _check_sampling(temperature, top_k, vocab_size, top_p)
    step = _CompiledStep() if compile else _decode_step
    B, T = idx.shape
    out = torch.empty(B, T + max_new_tokens, dtype=idx.dtype, device=idx.device)  # written in place
    out[:, :T] = idx
    was_training, onednn, threads = model.training, torch.backends.mkldnn.enabled, torch.get_num_threads()
    model.eval()
    # oneDNN's GELU costs about 10 us of set-up per call, more than the GELU of one token itself;
    # PyTorch's own kernel has none. (No other operator of this model uses oneDNN.)
    torch.backends.mkldnn.enabled = False
    if use_cache:
        # One token's operators are too small to share between threads: waking a second thread costs more
        # than it saves (the attention kernel splits even one query over threads), and on a busy machine
        # waiting for it costs far more. The uncached path keeps every thread for its larger matrices.
        torch.set_num_threads(1)
    cache: KVCache | None = None
    next_id = idx[:, -1:]  # the newest token; with the cache, the first step runs the whole prompt instead
    try:
        # inference_mode rather than no_grad: it also skips autograd's version and view tracking.
        with torch.inference_mode():
            for t in range(T, T + max_new_tokens):
                if not use_cache:
                    logits = model(out[:, max(0, t - block_size):t])[0][:, -1, :]
                elif cache is None or cache.length >= block_size:
                    # Start, or the window is full and slides: every position changes, so rebuild.
                    if cache is None:
                        cache = KVCache.for_model(model, batch_size=B)
                    cache.reset()
                    logits = model(out[:, max(0, t - block_size):t], kv_cache=cache)[0][:, -1, :]
                else:
                    logits = step(model, next_id, cache)  # only the newest token goes in
                next_id = sample_next(logits, temperature, top_k, generator, top_p)  # (B, 1)
                out[:, t:t + 1] = next_id
    finally:
        model.train(was_training)
        torch.backends.mkldnn.enabled = onednn
        torch.set_num_threads(threads)
    return out
