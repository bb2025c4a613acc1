"""Small, seeded experiments that back the course's claims with numbers.

Lessons 03, 04, 07, 08 and 11 and the explorers call these, so a claim such as "the
variance of q.k grows with d_k" or "without the mask the model reads the answer"
is computed the same way everywhere.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from .attention import apply_mask, attention_scores, attention_weights, padding_mask, weighted_sum
from .data import CharTokenizer
from .model import GPT, FeedForward, GPTConfig
from .runtime import one_thread
from .training import History, TrainConfig, train
from .validation import (
    check_bool,
    check_choice,
    check_instance,
    check_int,
    check_number,
    check_positive_int,
    check_token_ids,
)

__all__ = [
    "scale_factor",
    "qk_variance",
    "variance_table",
    "softmax_stats",
    "leak_test",
    "cross_attention",
    "kv_cache_bytes",
    "encoder_decoder_cache_bytes",
    "train_small",
    "gelu_second_moment",
    "ffn_stack_gradients",
    "scale_residual_projections",
    "residual_stream_variance",
    "layernorm_placement_gradients",
    "default_dtype",
    "score_gradients",
]

SCALINGS = ("none", "sqrt", "temperature")
_ADAM_EPS = 1e-8  # torch.optim.Adam's default eps
_DRAWS_PER_PASS = 20  # score_gradients: draws computed in one pass (memory stays below ~30 MB at d_k = 1024)


def scale_factor(d_k: int, scaling: str = "sqrt", temperature: float = 1.0) -> float:
    """The multiplier applied to q.k: 1 (``"none"``), 1/sqrt(d_k) (``"sqrt"``) or 1/(sqrt(d_k)*temperature)."""
    check_positive_int("d_k", d_k)
    check_choice("scaling", scaling, SCALINGS)
    check_number("temperature", temperature, minimum=0, min_open=True)
    if scaling == "none":
        return 1.0
    if scaling == "sqrt":
        return d_k ** -0.5
    return d_k ** -0.5 / temperature


def qk_variance(d_k: int, n_samples: int = 10_000, scale: float = 1.0, seed: int = 0) -> float:
    """Measured variance of ``scale * q.k`` for q, k with independent unit-variance entries.

    Theory: Var(q.k) = d_k, so the unscaled variance grows with d_k and
    ``scale = 1/sqrt(d_k)`` brings it back to 1.
    """
    check_positive_int("d_k", d_k)
    check_positive_int("n_samples", n_samples)
    check_number("scale", scale)
    check_int("seed", seed, minimum=0)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n_samples, d_k, generator=g)
    k = torch.randn(n_samples, d_k, generator=g)
    return float(((q * k).sum(-1) * scale).var())


def variance_table(d_ks=(4, 16, 64, 256, 1024), n_samples: int = 10_000, seed: int = 0) -> list[dict]:
    """One row per d_k: measured variance of q.k unscaled and scaled by 1/sqrt(d_k)."""
    return [{"d_k": d, "unscaled": qk_variance(d, n_samples, 1.0, seed),
             "scaled": qk_variance(d, n_samples, d ** -0.5, seed)} for d in d_ks]


def softmax_stats(d_k: int, T: int = 16, scale: float = 1.0, seed: int = 0) -> dict:
    """Softmax of one query's scores over ``T`` random keys: how peaked it is and how much gradient flows.

    Returns ``weights`` (T,), ``max_weight``, ``entropy`` (nats; ln T is uniform, 0 is
    one-hot) and ``grad_norm``, the Frobenius norm of the softmax Jacobian
    ``diag(p) - p p^T``: it goes to 0 as the softmax saturates to one-hot, so almost
    no gradient reaches the scores.
    """
    check_positive_int("d_k", d_k)
    check_positive_int("T", T)
    check_number("scale", scale)
    check_int("seed", seed, minimum=0)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, d_k, generator=g)
    k = torch.randn(T, d_k, generator=g)
    p = attention_weights(attention_scores(q, k, scale=scale))[0]  # (T,)
    jac = torch.diag(p) - torch.outer(p, p)
    entropy = float(-(p * torch.log(p.clamp_min(1e-30))).sum())
    return {"weights": p, "max_weight": float(p.max()), "entropy": entropy,
            "grad_norm": float(torch.linalg.matrix_norm(jac)), "uniform_entropy": math.log(T)}


@torch.no_grad()
def leak_test(model: GPT, idx: torch.Tensor, t: int, seed: int = 0) -> float:
    """Replace every token after position ``t`` with random ones; return the largest change
    of the logits at positions ``0..t``. A causal model gives 0 (up to float rounding)."""
    check_instance("model", model, GPT)
    check_token_ids(idx, model.config.vocab_size, model.config.block_size)
    T = idx.size(1)
    check_int("t", t, minimum=0, maximum=T - 2, rule=f"a position in [0, T-1={T - 1}) so that some tokens follow it")
    check_int("seed", seed, minimum=0)
    g = torch.Generator().manual_seed(seed)
    changed = idx.clone()
    changed[:, t + 1:] = torch.randint(model.config.vocab_size, (idx.size(0), T - t - 1), generator=g)
    was_training = model.training
    model.eval()
    a, _ = model(idx)
    b, _ = model(changed)
    model.train(was_training)
    return float((a[:, :t + 1] - b[:, :t + 1]).abs().max())


def cross_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_lengths: list[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoder queries (B, T_dec, d) over encoder keys/values (B, T_src, d).

    No causal mask: the source sequence is fully known. Only padding keys (beyond
    ``key_lengths``) are hidden. Returns ``(output, weights)``.
    """
    scores = attention_scores(q, k)  # (B, T_dec, T_src)
    if key_lengths is not None:
        scores = apply_mask(scores, padding_mask(key_lengths, k.size(-2)))
    weights = attention_weights(scores)
    return weighted_sum(weights, v), weights


def kv_cache_bytes(n_layer: int, T: int, n_embd: int, bytes_per_number: int = 4, batch_size: int = 1,
                   n_head: int | None = None, n_kv_head: int | None = None) -> int:
    """Size of a decoder's KV cache: ``2 x n_layer x T x n_embd x bytes`` per sequence.

    With grouped-query attention (``n_kv_head < n_head``) only ``n_kv_head`` heads of
    keys and values are stored, so the size shrinks by ``n_kv_head / n_head``.
    """
    for name, value in [("n_layer", n_layer), ("T", T), ("n_embd", n_embd),
                        ("bytes_per_number", bytes_per_number), ("batch_size", batch_size)]:
        check_positive_int(name, value)
    kv_width = n_embd
    if n_kv_head is not None or n_head is not None:
        if n_head is None or n_kv_head is None:
            raise ValueError("give both n_head and n_kv_head for grouped-query attention")
        check_positive_int("n_head", n_head)
        check_positive_int("n_kv_head", n_kv_head)
        if n_head % n_kv_head or n_embd % n_head:
            raise ValueError(f"n_head={n_head} must be a multiple of n_kv_head={n_kv_head} and divide n_embd={n_embd}")
        kv_width = n_embd // n_head * n_kv_head
    return 2 * n_layer * T * kv_width * bytes_per_number * batch_size


def encoder_decoder_cache_bytes(n_dec_layer: int, T_src: int, T_out: int, n_embd: int,
                                bytes_per_number: int = 4) -> dict:
    """What an encoder-decoder keeps while it generates ``T_out`` tokens for a ``T_src`` source.

    Each decoder layer caches its self-attention keys/values (grows with T_out) and
    the cross-attention keys/values of the whole source (fixed, T_src positions).
    """
    self_attn = kv_cache_bytes(n_dec_layer, T_out, n_embd, bytes_per_number)
    cross = kv_cache_bytes(n_dec_layer, T_src, n_embd, bytes_per_number)
    return {"self_attention": self_attn, "cross_attention": cross, "total": self_attn + cross}


@contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Create tensors (and draw initial weights) in ``dtype`` inside the block.

    Building a model in float32 and converting it afterwards is not enough for results that hold on
    every CPU: float32 ``randn``/``normal_`` runs a vectorised kernel on CPUs with AVX2 and a scalar
    one elsewhere, and they differ in the last bits, a difference training then amplifies. The
    float64 draws are the same everywhere.
    """
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def train_small(
    text: str,
    *,
    causal: bool = True,
    attn_scale: float | None = None,
    n_embd: int = 64,
    n_head: int = 4,
    n_layer: int = 2,
    block_size: int = 32,
    steps: int = 300,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    eval_interval: int = 100,
    seed: int = 1337,
    max_chars: int = 200_000,
    qkv_init_std: float | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[GPT, CharTokenizer, History]:
    """Train a tiny character GPT on the first ``max_chars`` of ``text`` for a few seconds.

    ``causal=False`` removes the mask (the model can read the next character, the
    answer) and ``attn_scale=1.0`` removes the 1/sqrt(d_k) scaling; everything else,
    including the seed and the batches, is the same, so runs can be compared.

    ``qkv_init_std`` re-initialises every ``c_attn`` (the q, k, v projections) with
    that standard deviation. ``1 / sqrt(n_embd)`` gives q and k entries of variance
    about 1 at the start (the inputs are layer-normed), the assumption behind
    Var(q.k) = d_k; the default GPT-2 init (std 0.02) starts with tiny scores.

    ``dtype=torch.float64`` trains in double precision: slower, but a rounding difference
    between two CPUs (another summation order in a matmul kernel) then stays far below what
    a printed loss shows, where in float32 it grows over a few hundred steps into the third
    decimal (or, for an unstable run, the first).
    """
    check_number("qkv_init_std", qkv_init_std, minimum=0, min_open=True, allow_none=True)
    check_instance("text", text, str)
    check_positive_int("max_chars", max_chars)
    text = text[:max_chars]
    tokenizer = CharTokenizer(text)
    data = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    n = int(0.9 * len(data))
    torch.manual_seed(seed)
    with default_dtype(dtype):  # the initial weights are drawn in ``dtype`` too (see default_dtype)
        model = GPT(GPTConfig(tokenizer.vocab_size, n_embd, n_head, n_layer, block_size, dropout=0.0,
                              causal=causal, attn_scale=attn_scale))
        if qkv_init_std is not None:
            for block in model.blocks:
                torch.nn.init.normal_(block.sa.c_attn.weight, mean=0.0, std=qkv_init_std)
    cfg = TrainConfig(max_steps=steps, batch_size=batch_size, learning_rate=learning_rate,
                      eval_interval=eval_interval, eval_iters=10, seed=seed, progress=False)
    hist = train(model, data[:n], data[n:], cfg)
    return model, tokenizer, hist


# --- Lessons 07 and 08: residual stacks at initialisation -------------------------------------------

FFN_STACK_INITS = ("default", "preserving")


def _check_seeds(seeds: object) -> tuple[int, ...]:
    check_instance("seeds", seeds, (tuple, list))
    if not seeds:
        raise ValueError(f"seeds={seeds!r} must hold at least one seed")
    for i, seed in enumerate(seeds):  # type: ignore[arg-type]
        check_int(f"seeds[{i}]", seed, minimum=0)
    return tuple(seeds)  # type: ignore[arg-type]


def gelu_second_moment() -> float:
    """``E[GELU(z)^2]`` for ``z ~ N(0, 1)``: 0.4252..., by the trapezoid rule on [-12, 12] in float64.

    A Linear with weights ``N(0, 1/fan_in)`` keeps a unit variance; the GELU after it keeps only this
    fraction of the second moment (ReLU keeps 1/2, the reason for He et al.'s gain sqrt(2)), so the next
    Linear makes up for it with weights ``N(0, 1/(c * fan_in))``.
    """
    z = torch.linspace(-12.0, 12.0, 240_001, dtype=torch.float64)
    density = torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return float(torch.trapezoid(torch.nn.functional.gelu(z) ** 2 * density, z))


def ffn_stack_gradients(
    residual: bool,
    init: str = "preserving",
    *,
    n_layer: int = 24,
    n_embd: int = 64,
    seeds: tuple[int, ...] = (0, 1, 2),
) -> dict[str, list[float]]:
    """A stack of ``n_layer`` :class:`~gpt_lesson.model.FeedForward` sublayers without LayerNorm, at initialisation.

    Wired ``x = f(x)`` (``residual=False``) or ``x = x + f(x)`` (``residual=True``), with the same
    weights, input (8 x 32 positions of unit variance) and random targets either way. Returns
    ``"grad"``, the norm of each layer's first weight's gradient after one backward pass of an MSE loss,
    and ``"variance"``, the variance of ``x`` after each layer; means over ``seeds``, in float64 (weights
    drawn in float64 too, so the numbers are the same on every CPU).

    ``init="default"`` keeps PyTorch's ``nn.Linear`` init, ``U(+-1/sqrt(fan_in))``: weights of variance
    ``1/(3 fan_in)``, so each Linear divides the variance of its input by about 3. ``"preserving"`` draws
    the first Linear from ``N(0, 1/fan_in)`` and the second from ``N(0, 1/(c fan_in))`` with
    ``c = gelu_second_moment()``, biases 0: one sublayer then keeps a unit-variance input at about 1.
    """
    check_bool("residual", residual)
    check_choice("init", init, FFN_STACK_INITS)
    check_positive_int("n_layer", n_layer)
    check_positive_int("n_embd", n_embd)
    seeds = _check_seeds(seeds)
    c = gelu_second_moment()
    grads, variances = [0.0] * n_layer, [0.0] * n_layer
    with one_thread():
        for seed in seeds:
            _ffn_stack_run(residual, init, n_layer, n_embd, seed, c, grads, variances)
    return {"grad": [v / len(seeds) for v in grads], "variance": [v / len(seeds) for v in variances]}


def _ffn_stack_run(residual: bool, init: str, n_layer: int, n_embd: int, seed: int, c: float,
                   grads: list[float], variances: list[float]) -> None:
    """One seed of :func:`ffn_stack_gradients`, added into ``grads`` and ``variances``."""
    torch.manual_seed(seed)
    with default_dtype(torch.float64):
        layers = torch.nn.ModuleList(FeedForward(n_embd, dropout=0.0) for _ in range(n_layer))
        if init == "preserving":
            for f in layers:
                first, second = f.net[0], f.net[2]
                torch.nn.init.normal_(first.weight, std=first.in_features ** -0.5)
                torch.nn.init.normal_(second.weight, std=(c * second.in_features) ** -0.5)
                torch.nn.init.zeros_(first.bias)
                torch.nn.init.zeros_(second.bias)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(8, 32, n_embd, generator=g, dtype=torch.float64)
    target = torch.randn(8, 32, n_embd, generator=g, dtype=torch.float64)
    for i, f in enumerate(layers):
        x = x + f(x) if residual else f(x)
        variances[i] += float(x.detach().var())
    torch.nn.functional.mse_loss(x, target).backward()
    for i, f in enumerate(layers):
        grads[i] += float(f.net[0].weight.grad.norm())


def scale_residual_projections(model: GPT) -> GPT:
    """GPT-2's init rule for the weights that write into the residual stream, applied to ``model`` in place.

    Every block adds to the stream twice, through attention's output projection ``sa.c_proj`` and the
    FFN's second Linear ``ffwd.net[2]``; their weights are multiplied by ``1/sqrt(2 * n_layer)`` (Radford et
    al., 2019, section 2.3: "scale the weights of residual layers at initialization by a factor of
    1/sqrt(N) where N is the number of residual layers"; nanoGPT draws them from N(0, 0.02/sqrt(2 n_layer))).
    The library's own init leaves them at N(0, 0.02). Returns ``model``.
    """
    check_instance("model", model, GPT)
    factor = (2 * len(model.blocks)) ** -0.5
    with torch.no_grad():
        for block in model.blocks:
            block.sa.c_proj.weight.mul_(factor)
            block.ffwd.net[2].weight.mul_(factor)
    return model


def _stream_record(model: GPT, idx: torch.Tensor) -> list[float]:
    """Variances in the order the forward pass makes them: the stream entering block 1, then per block
    what attention adds, what the FFN adds, and the stream after the block."""
    seen: list[float] = []
    hooks = [model.blocks[0].ln1.register_forward_pre_hook(lambda _m, args: seen.append(float(args[0].var())))]
    for block in model.blocks:
        for part in (block.sa, block.ffwd, block):
            hooks.append(part.register_forward_hook(lambda _m, _args, out: seen.append(float(out.var()))))
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def residual_stream_variance(
    n_layer: int,
    *,
    scale_residual: bool = False,
    n_embd: int = 64,
    n_head: int = 4,
    vocab_size: int = 65,
    T: int = 32,
    batch_size: int = 8,
    seeds: tuple[int, ...] = (0, 1, 2),
) -> dict[str, list[float]]:
    """How the residual stream of a freshly initialised :class:`~gpt_lesson.GPT` grows with depth.

    Returns ``"stream"``, the variance of the stream after the embeddings and after each block
    (``n_layer + 1`` values), and ``"branches"``, the variance of what each sublayer adds to it
    (attention, then FFN, of block 1, then of block 2, ...: ``2 * n_layer`` values); means over ``seeds``
    of one forward pass on random tokens, in float64. The model has the library's init (weights
    N(0, 0.02), biases 0); ``scale_residual=True`` applies :func:`scale_residual_projections` first.
    Lessons 07 and 08 both call this.
    """
    check_positive_int("n_layer", n_layer)
    check_bool("scale_residual", scale_residual)
    check_positive_int("batch_size", batch_size)
    seeds = _check_seeds(seeds)
    stream, branches = [0.0] * (n_layer + 1), [0.0] * (2 * n_layer)
    with one_thread():
        for seed in seeds:
            torch.manual_seed(seed)
            with default_dtype(torch.float64):
                model = GPT(GPTConfig(vocab_size, n_embd, n_head, n_layer, T, dropout=0.0)).eval()
            if scale_residual:
                scale_residual_projections(model)
            seen = _stream_record(model, torch.randint(vocab_size, (batch_size, T),
                                                       generator=torch.Generator().manual_seed(seed + 1000)))
            stream[0] += seen[0]
            for i in range(n_layer):
                attention, ffn, after = seen[1 + 3 * i: 4 + 3 * i]
                branches[2 * i] += attention
                branches[2 * i + 1] += ffn
                stream[i + 1] += after
    return {"stream": [v / len(seeds) for v in stream], "branches": [v / len(seeds) for v in branches]}


def layernorm_placement_gradients(
    order: str,
    n_layer: int,
    *,
    n_embd: int = 64,
    n_head: int = 4,
    vocab_size: int = 65,
    T: int = 16,
    batch_size: int = 4,
    seeds: tuple[int, ...] = (0, 1, 2),
) -> list[float]:
    """Gradient norm of each block's last FFN weight (``ffwd.net[2]``) at initialisation, averaged over seeds.

    The blocks are the course's :class:`~gpt_lesson.model.Block`, wired pre-LN (``order="pre"``:
    ``x = x + sa(ln1(x))``, then ``ln_f`` before the head, as in GPT) or post-LN (``"post"``:
    ``x = ln1(x + sa(x))``, as in the 2017 Transformer), with Xavier-initialised linear layers as in
    Xiong et al. (2020), a linear head and the cross-entropy of random targets. One backward pass per
    seed, in float64 so the numbers are the same on every CPU. Lessons 07 and 11 both call this.
    """
    from .model import Block

    check_choice("order", order, ("pre", "post"))
    check_positive_int("n_layer", n_layer)
    totals = [0.0] * n_layer
    for seed in seeds:
        torch.manual_seed(seed)
        with default_dtype(torch.float64):
            blocks = torch.nn.ModuleList(Block(n_embd, n_head, T, dropout=0.0) for _ in range(n_layer))
            ln_f, head = torch.nn.LayerNorm(n_embd), torch.nn.Linear(n_embd, vocab_size)
            for m in [*blocks.modules(), head]:
                if isinstance(m, torch.nn.Linear):
                    torch.nn.init.xavier_uniform_(m.weight)
                    if m.bias is not None:
                        torch.nn.init.zeros_(m.bias)
        g = torch.Generator().manual_seed(seed + 1000)
        x = torch.randn(batch_size, T, n_embd, generator=g, dtype=torch.float64)
        targets = torch.randint(0, vocab_size, (batch_size, T), generator=g)
        for b in blocks:
            if order == "pre":
                x = x + b.sa(b.ln1(x))
                x = x + b.ffwd(b.ln2(x))
            else:
                x = b.ln1(x + b.sa(x))
                x = b.ln2(x + b.ffwd(x))
        if order == "pre":
            x = ln_f(x)
        torch.nn.functional.cross_entropy(head(x).flatten(0, 1), targets.flatten()).backward()
        for i, b in enumerate(blocks):
            totals[i] += b.ffwd.net[2].weight.grad.norm().item()
    return [t / len(seeds) for t in totals]


def score_gradients(d_k: int, scale: float, *, T: int = 32, n_draws: int = 200, lr: float = 1e-3,
                    seed: int = 0) -> dict:
    """What one causal head's backward pass sends to the scores and to the queries, with and without 1/sqrt(d_k).

    Each draw takes queries, keys and values with independent unit-variance entries, shape (T, d_k),
    scores ``s = scale * q @ k^T`` with the causal mask, ``out = softmax(s) @ v``, and a random
    unit-variance upstream gradient ``dL/d(out)``; one backward pass, in float64 (the same numbers on
    every CPU). Means over ``n_draws`` draws (seeds ``seed, seed + 1, ...``):

    * ``grad_scores``: ``||dL/ds||`` (Frobenius norm over all T x T scores): what the softmax lets through;
    * ``grad_q`` and ``grad_k``: ``||dL/dq||`` and ``||dL/dk||``. Since ``s = scale * q.k``, ``dL/dq =
      scale * dL/ds @ k`` and ``dL/dk = scale * dL/ds^T @ q``: the scale multiplies the backward pass too.
      ``dL/dW_q = x^T dL/dq`` (and so for W_k), so these are what reach ``W_q`` and ``W_k``;
    * ``top_share`` and ``top2_share``: the share of each row's squared score gradient that lands on its
      most-weighted key, and on its two most-weighted keys, averaged over the last ``T // 2`` queries
      (each sees more than ``T // 2`` keys);
    * ``max_weight``: the mean largest weight of those rows;
    * ``score_step``: ``||Δs||``, how far the (visible) scores move after one Adam step of learning rate
      ``lr`` on q. Adam's first step moves each entry of q by about ``lr`` whatever the gradient's size,
      so the same step moves scores that are not divided by sqrt(d_k) about sqrt(d_k) times as far.
    """
    check_positive_int("d_k", d_k)
    check_number("scale", scale, minimum=0, min_open=True)
    check_int("T", T, minimum=2)
    check_positive_int("n_draws", n_draws)
    check_number("lr", lr, minimum=0, min_open=True)
    check_int("seed", seed, minimum=0)
    hidden = torch.ones(T, T).tril() == 0
    rows = slice(T // 2, T)
    totals = dict.fromkeys(("grad_scores", "grad_q", "grad_k", "top_share", "top2_share", "max_weight", "score_step"),
                           0.0)
    for first in range(0, n_draws, _DRAWS_PER_PASS):  # a few draws at once, each from its own seed
        draws = range(first, min(first + _DRAWS_PER_PASS, n_draws))
        gens = [torch.Generator().manual_seed(seed + d) for d in draws]
        q, k, v, upstream = (torch.stack([torch.randn(T, d_k, generator=g, dtype=torch.float64) for g in gens])
                             for _ in range(4))  # each (draws, T, d_k)
        q.requires_grad_(True)
        k.requires_grad_(True)
        scores = scale * q @ k.mT
        scores.retain_grad()
        weights = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
        (weights @ v).backward(upstream)  # the draws are independent: one pass gives each its own gradient
        squared, p = scores.grad[:, rows] ** 2, weights.detach()[:, rows]
        top2 = p.topk(2, dim=-1).indices  # (draws, rows, 2): the two most-weighted keys of each row
        picked = squared.gather(-1, top2) / squared.sum(-1, keepdim=True)
        with torch.no_grad():  # Adam's first step, lr * m / (sqrt(v) + eps) with m = g and v = g**2 after bias correction
            step = -lr * q.grad / (q.grad.abs() + _ADAM_EPS)
            moved = (scale * step @ k.detach().mT).masked_fill(hidden, 0.0)  # the scores' change: linear in q
        for key, value in (("grad_scores", scores.grad.flatten(1).norm(dim=1)),
                           ("grad_q", q.grad.flatten(1).norm(dim=1)), ("grad_k", k.grad.flatten(1).norm(dim=1)),
                           ("top_share", picked[..., 0].mean(-1)),
                           ("top2_share", picked.sum(-1).mean(-1)), ("max_weight", p.max(-1).values.mean(-1)),
                           ("score_step", moved.flatten(1).norm(dim=1))):
            totals[key] += float(value.sum()) / n_draws
    return totals
