"""Checks for lesson 11's whiteboard set: multi-head causal self-attention with a KV cache, and the
KV-cache memory of a real model from its published config.

The attention check builds the learner's class, copies known weights into its ``c_attn`` and ``c_proj``
(the course's convention, lesson 05) and runs one sequence three ways: whole, one token at a time
through the learner's own cache, and in chunks of several tokens (a prompt that arrives in pieces).
Every output must equal :class:`gpt_lesson.model.CausalSelfAttention`'s, run the same way with its
:class:`~gpt_lesson.model.LayerKVCache`. Its variants are a reference module with up to two classic
mistakes (the scale, the mask and its rows once a cache holds earlier positions, the cache itself,
splitting and merging the heads, the order of q, k and v, the output projection, the softmax's
dimension), run through the same calls.

The memory check's variants are the usual slips of the arithmetic ``2 * n_layer * n_kv_heads *
head_dim * bytes * tokens * batch``: K and V counted once, layers or the batch forgotten, the query
heads counted instead of the key/value heads, bits for bytes, 4 bytes for a 16-bit dtype, GB for GiB.
"""
from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Callable, Iterator
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import attention as attention_lib
from .. import experiments, model, reference
from .. import kv_cache as kv_lib
from .attention import MASK_WITH_ZERO, NO_MASK, NO_SCALING, SCALED_BY_HEAD_SIZE, SCALED_BY_N_EMBD, SOFTMAX_WRONG_DIM
from .attention import TEXTS as ATTENTION_TEXTS
from .distributed import BITS_NOT_BYTES
from .generation import DECODE_APPENDED_TWICE
from .gpt import NO_OUTPUT_PROJECTION
from .heads import MERGE_WITHOUT_TRANSPOSE, MISSING_TRANSPOSE
from .heads import TEXTS as HEAD_TEXTS
from .runner import Forbidden, call, close, kind_of, learner_check, randn, require_callable, run_cases, screen, seeded
from .verdicts import N_, WRONG_TYPE, WRONG_VALUE, Bug, Case, CheckResult, Variant, Verdict, combinations, say

# Labels: stable identifiers in CheckResult.diagnosis.
WRONG_INTERFACE = N_("not the interface the check uses")
MASK_NOT_OFFSET = N_("mask misaligned with the cache offset")
MASK_ONLY_WITHOUT_CACHE = N_("mask left out once a cache is given")
CACHE_NOT_APPENDED = N_("cache not appended")
CACHE_NOT_READ = N_("cache not read")
CACHE_WRONG_ORDER = N_("new keys put before the cached ones")
QK_SWAPPED = N_("q and k swapped")
KV_SWAPPED = N_("k and v swapped")
VALUE_PATH_WRONG = N_("wrong output at position 0")
ATTENTION_PATTERN_WRONG = N_("wrong attention over earlier positions")
CACHED_CALLS_DIFFER = N_("calls with a cache differ")
KV_NOT_DOUBLED = N_("keys and values not both counted")
LAYERS_FORGOTTEN = N_("layers not counted")
HEADS_NOT_KV_HEADS = N_("query heads counted instead of key/value heads")
HIDDEN_NOT_HEAD_DIM = N_("hidden_size used for each head")
DTYPE_BYTES = N_("wrong bytes per number for the dtype")
TOKENS_FORGOTTEN = N_("tokens not counted")
BATCH_FORGOTTEN = N_("batch size not counted")
GB_NOT_GIB = N_("GB (10^9 bytes) instead of GiB (2^30 bytes)")
WRONG_UNIT = N_("not in GiB")
ROUNDED = N_("result rounded")
INTEGER_RESULT = N_("whole number instead of a float")
FACTOR_OFF = N_("a factor of the product is off")
MEMORY_NOT_A_NUMBER = N_("not a number")

TEXTS = {
    # --- the attention module
    "case_full": N_("x of shape {shape}, n_head={nh}: the whole sequence in one call, without a cache"),
    "case_tokens": N_("x of shape {shape}, n_head={nh}, fed one token at a time, each call given the cache the call "
                      "before returned"),
    "case_chunks": N_("x of shape {shape}, n_head={nh}, fed in chunks of {chunks} tokens through the cache"),
    "attention_passed": N_("Your module equals gpt_lesson.model.CausalSelfAttention on {count} runs: whole "
                           "sequences, one token at a time and in chunks through your cache."),
    "no_layer": N_("   Your module has no {name} (or it has no weight): the check copies its weights into "
                   "c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False) (queries, keys, values side by side) and "
                   "c_proj = nn.Linear(n_embd, n_embd, bias=False)."),
    "layer_shape": N_("   Your {name}.weight has shape {got}; the convention is {expected}: {name} = nn.Linear({fan_in}, "
                      "{fan_out}, bias=False), whose weight is (out_features, in_features)."),
    "extra_parameters": N_("   Your module has parameters besides c_attn and c_proj ({names}); the check sets only "
                           "those two, so the others would keep random values. Compute q, k and v with c_attn alone."),
    "not_a_pair": N_("   Your forward returned {kind}; it must return a pair (y, kv_cache): y of shape (B, T, n_embd) "
                     "and the cache to pass to the next call."),
    "y_not_tensor": N_("   The y your forward returned is {kind}; return a tensor of shape (B, T, n_embd)."),
    "y_shape": N_("   For x of shape {x_shape} your forward returned y of shape {got}; expected {expected}, "
                  "(B, T, n_embd): merge the heads back and apply c_proj (lesson 05)."),
    "y_shape_cached": N_("   For the next {T} token(s) (x of shape {x_shape}) given the cache, your forward returned y of "
                         "shape {got}; expected {expected}: only the new positions' outputs."),
    "top_left": N_("your mask takes the top-left corner of tril, as is_causal=True does: once `past` positions are "
                   "cached, the T new queries sit at positions past..past+T-1 and need rows past..past+T-1 of tril "
                   "over all past+T keys (torch.nn.attention.bias.causal_lower_right(T, past + T) for SDPA)."),
    "top_left_several": N_("for several new queries you used is_causal=True (or tril[:T, :past + T]), which aligns the "
                           "mask with the top-left corner: with `past` cached positions the new queries need rows "
                           "past..past+T-1 of tril (torch.nn.attention.bias.causal_lower_right(T, past + T) for SDPA)."),
    "first_call_only": N_("you applied the causal mask only when there was no cache yet; a later call with several new "
                          "tokens still needs it: rows past..past+T-1 of tril, over all past+T keys."),
    "not_appended": N_("the cache you return holds only the new keys and values, so the next call forgets every earlier "
                       "position: return all the keys and values so far (the cached ones, then the new ones)."),
    "not_read": N_("the new queries only see the new keys: put the cached keys and values in front of the new ones "
                   "before the scores."),
    "twice": N_("the cache you return holds the new keys and values twice: append them once (the cached ones, then "
                "the new ones, along the positions' dimension)."),
    "wrong_order": N_("you put the new keys and values before the cached ones; positions must stay in order: the "
                      "cached ones first, then the new ones."),
    "qk_swapped": N_("you took q and k from each other's third of c_attn(x); the convention is q, k, v = "
                     "c_attn(x).split(n_embd, dim=2), in that order."),
    "kv_swapped": N_("you took k and v from each other's third of c_attn(x); the convention is q, k, v = "
                     "c_attn(x).split(n_embd, dim=2), in that order."),
    "no_projection": N_("you returned the merged heads without the output projection: y = c_proj(merged heads)."),
    "value_path": N_("your output at position 0 is already wrong. Position 0 sees only itself, so its output is "
                     "c_proj of its own value, whatever the scores: look at how q, k, v are taken from c_attn, split "
                     "into heads, merged back and projected."),
    "pattern": N_("position 0 is right, position {position} is not: the values and projections are fine, the weights "
                  "over earlier positions are not. Look at the scores, their scale, the mask and the softmax."),
    "cached": N_("the call that added positions {start}..{end} to a cache of {start} positions is the first that "
                 "differs (the calls before it were right): look at what the cache holds and at the mask's rows."),
    "mask_shape": N_("with a cache the scores have shape (B, n_head, T, past + T): the mask must too, rows "
                     "past..past+T-1 and the first past+T columns of tril."),
    "cat_shape": N_("the cached and the new keys must agree in every dimension except the positions: concatenate "
                    "along dim=2 of (B, n_head, T, head_size)."),
    "signature": N_("the check builds your class as YourClass(n_embd, n_head, block_size) and calls it as "
                    "module(x, kv_cache), kv_cache=None on the first call."),
    "none_cache": N_("the first call passes kv_cache=None: start the cache from the new keys and values then."),
    # --- the KV-cache memory
    "case_memory": N_("{model} ({layers} layers, {heads} query heads, {kv_heads} key/value heads, hidden_size "
                      "{hidden}, {dtype}), {tokens:,} tokens, batch {batch}"),
    "memory_mismatch": N_("   For {case}: expected {expected:.6g} GiB, got {got:.6g}."),
    "memory_passed": N_("Your function gives the KV cache of all {count} configs, in GiB."),
    "memory_kind": N_("   For {case} your function returned {kind}; return the size in GiB as a Python float."),
    "memory_nan": N_("   For {case} your function returned {got}; return a finite size in GiB."),
    "not_doubled": N_("you counted the keys or the values, not both: each layer caches a key and a value vector per "
                      "key/value head and token, so multiply by 2."),
    "layers": N_("that is one layer's cache: every one of the num_hidden_layers layers keeps its own keys and values."),
    "heads": N_("you counted num_attention_heads; with grouped-query attention only num_key_value_heads heads of keys "
                "and values are cached (Llama-3-8B: 8 of its 32)."),
    "hidden": N_("you used hidden_size for each key/value head; a head has head_dim = hidden_size // "
                 "num_attention_heads numbers."),
    "bytes": N_("{used} bytes per number is wrong for {dtype}: float16 and bfloat16 take 2 bytes, float32 takes 4."),
    "bits": N_("you multiplied by the bits of {dtype} ({bits}); a number of {dtype} takes {bytes} bytes."),
    "tokens": N_("you left out the number of tokens: every token of the sequence has its own keys and values."),
    "batch": N_("you left out the batch: each of the batch_size sequences has its own cache."),
    "gb": N_("you divided by 10**9 (GB); a GiB is 2**30 = 1,073,741,824 bytes."),
    "unit": N_("your number is in {unit}; return GiB: bytes / 2**30."),
    "rounded": N_("you rounded the result; return the float itself (round only when you print it)."),
    "integer": N_("you returned a whole number: integer division (//) dropped the fraction. Divide with /."),
    "ratio": N_("your number is {ratio:.4g} times the right one: compare each factor of your product with the "
                "config (how many layers, which heads, how many numbers per head, bytes per number, tokens, batch) "
                "and the unit."),
}

# gpt_lesson's own attention code: what the module exercise compares with.
ATTENTION_FORBIDDEN = {
    model.CausalSelfAttention: "gpt_lesson.model.CausalSelfAttention",
    reference.CausalSelfAttention: "gpt_lesson.reference.CausalSelfAttention",
    model.Block: "gpt_lesson.model.Block",
    model.LayerKVCache: "gpt_lesson.model.LayerKVCache",
    model.KVCache: "gpt_lesson.model.KVCache",
    kv_lib.cached_attention: "gpt_lesson.kv_cache.cached_attention",
    kv_lib.cached_forward: "gpt_lesson.kv_cache.cached_forward",
    attention_lib.naive_attention: "gpt_lesson.attention.naive_attention",
    attention_lib.sdpa_attention: "gpt_lesson.attention.sdpa_attention",
    attention_lib.one_query_attention: "gpt_lesson.attention.one_query_attention",
}
ATTENTION_HINTS = [
    ("must match the size of tensor", TEXTS["mask_shape"]),
    ("Sizes of tensors must match except in dimension", TEXTS["cat_shape"]),
    ("view size is not compatible", HEAD_TEXTS["contiguous"]),
    ("positional argument", TEXTS["signature"]),
    ("unexpected keyword argument", TEXTS["signature"]),
    ("'NoneType' object is not subscriptable", TEXTS["none_cache"]),
]


def _bug(label: str, key: str, **fields: object) -> Bug:
    return Bug(label, TEXTS[key], fields)


# ----------------------------------------------------------------------------------------------
# Multi-head causal self-attention with a KV cache


class _Interface(Exception):
    """The learner's module does not follow the check's interface: ``key`` names the message."""

    def __init__(self, key: str, **fields: object) -> None:
        super().__init__(key)
        self.key, self.fields = key, fields


def _load(module: object, w_attn: torch.Tensor, w_proj: torch.Tensor) -> None:
    """Copy the check's weights into ``module.c_attn`` and ``module.c_proj``; biases, if any, become 0."""
    C = w_proj.size(0)
    for name, weight, (fan_in, fan_out) in (("c_attn", w_attn, (C, 3 * C)), ("c_proj", w_proj, (C, C))):
        layer = getattr(module, name, None)
        target = getattr(layer, "weight", None)
        if not isinstance(target, torch.Tensor):
            raise _Interface("no_layer", name=name)
        if tuple(target.shape) != tuple(weight.shape):
            raise _Interface("layer_shape", name=name, got=tuple(target.shape), expected=tuple(weight.shape),
                             fan_in=fan_in, fan_out=fan_out)
        with torch.no_grad():
            target.copy_(weight)
            bias = getattr(layer, "bias", None)
            if isinstance(bias, torch.Tensor):
                bias.zero_()
    if isinstance(module, nn.Module):
        extra = [n for n, _ in module.named_parameters() if n.split(".")[0] not in ("c_attn", "c_proj")]
        if extra:
            raise _Interface("extra_parameters", names=", ".join(extra[:4]))


def _step(module: Callable, x: torch.Tensor, cache: object) -> tuple[torch.Tensor, object]:
    """One call ``module(x, cache)``, its answer checked to be ``(y, cache)`` with y of shape (B, T, n_embd)."""
    returned = module(x, cache)
    if not isinstance(returned, (tuple, list)) or len(returned) != 2:
        raise _Interface("not_a_pair", kind=kind_of(returned))
    y, cache = returned
    if not isinstance(y, torch.Tensor):
        raise _Interface("y_not_tensor", kind=kind_of(y))
    return y, cache


def _run(cls: Callable, x: torch.Tensor, w_attn: torch.Tensor, w_proj: torch.Tensor, n_head: int, block_size: int,
         chunks: tuple[int, ...]) -> torch.Tensor:
    """Build the learner's module, load the weights, feed ``x`` in ``chunks``; all outputs side by side."""
    B, T, C = x.shape
    module = cls(C, n_head, block_size)
    _load(module, w_attn, w_proj)
    if isinstance(module, nn.Module):
        module.eval()
    outputs, cache, start = [], None, 0
    for size in chunks:
        part = x[:, start:start + size]
        y, cache = _step(module, part, cache)
        if len(chunks) > 1 and tuple(y.shape) != tuple(part.shape):
            raise _Interface("y_shape_cached", T=size, x_shape=tuple(part.shape), got=tuple(y.shape),
                             expected=tuple(part.shape))
        outputs.append(y)
        start += size
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)


def _probe(cls: Callable) -> tuple[str, dict] | tuple[()]:
    """Whether ``cls`` follows the interface on a tiny input: ``()`` if it does, else a message key and fields."""
    g = seeded(90)
    C, nh, T = 8, 2, 3
    x, w_attn, w_proj = randn(g, 2, T + 1, C), randn(g, 3 * C, C), randn(g, C, C)
    try:
        module = cls(C, nh, 16)
        _load(module, w_attn, w_proj)
        if isinstance(module, nn.Module):
            module.eval()
        y, cache = _step(module, x[:, :T], None)
        if tuple(y.shape) != (2, T, C):
            return "y_shape", {"x_shape": (2, T, C), "got": tuple(y.shape), "expected": (2, T, C)}
        y, _ = _step(module, x[:, T:], cache)
        if tuple(y.shape) != (2, 1, C):
            return "y_shape_cached", {"T": 1, "x_shape": (2, 1, C), "got": tuple(y.shape), "expected": (2, 1, C)}
    except _Interface as problem:
        return problem.key, problem.fields
    return ()


def _reference_step(x: torch.Tensor, state: tuple | None, w_attn: torch.Tensor, w_proj: torch.Tensor, nh: int,
                    tril: torch.Tensor, order: str, split: str, scale: str, mask: str, dim: int, cache: str,
                    merge: str, proj: bool) -> tuple[torch.Tensor, tuple]:
    """One call of an attention module with chosen mistakes: the variants of :func:`check_cached_attention`."""
    B, T, C = x.shape
    hs = C // nh
    q, k, v = (x @ w_attn.T).split(C, dim=2)
    q, k, v = {"qkv": (q, k, v), "kqv": (k, q, v), "qvk": (q, v, k)}[order]

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(B, nh, T, hs) if split == "no transpose" else t.view(B, T, nh, hs).transpose(1, 2)

    q, k, v = heads(q), heads(k), heads(v)
    if state is None or cache == "not read":
        keys, values = k, v
    elif cache == "prepended":
        keys, values = torch.cat([k, state[0]], dim=2), torch.cat([v, state[1]], dim=2)
    else:
        keys, values = torch.cat([state[0], k], dim=2), torch.cat([state[1], v], dim=2)
    L = keys.size(2)
    c = {"head": hs ** -0.5, "none": 1.0, "head_size": 1 / hs, "n_embd": C ** -0.5}[scale]
    scores = q @ keys.transpose(-2, -1) * c
    rows = {"offset": tril[L - T:L, :L], "zero": tril[L - T:L, :L], "top-left": tril[:T, :L],
            "top-left for several": tril[:T, :L] if T > 1 else None,
            "first call only": tril[L - T:L, :L] if state is None else None, "none": None}[mask]
    if rows is not None:
        scores = scores.masked_fill(rows == 0, 0.0 if mask == "zero" else float("-inf"))
    y = F.softmax(scores, dim=dim) @ values
    y = y.reshape(B, T, C) if merge == "no transpose" else y.transpose(1, 2).reshape(B, T, C)
    y = y @ w_proj.T if proj else y
    returned = {"not appended": (k, v), "twice": (torch.cat([keys, k], dim=2), torch.cat([values, v], dim=2))}
    return y, returned.get(cache, (keys, values))


def _reference_run(x: torch.Tensor, w_attn: torch.Tensor, w_proj: torch.Tensor, n_head: int, block_size: int,
                   chunks: tuple[int, ...], *knobs: object) -> torch.Tensor:
    tril = torch.tril(torch.ones(4 * x.size(1), 4 * x.size(1)))  # room for a cache that grows too fast
    outputs, state, start = [], None, 0
    for size in chunks:
        y, state = _reference_step(x[:, start:start + size], state, w_attn, w_proj, n_head, tril, *knobs)
        outputs.append(y)
        start += size
    return torch.cat(outputs, dim=1)


def _attention_variants(C: int, nh: int) -> Iterator[Variant]:
    hs = C // nh
    a = ATTENTION_TEXTS
    knobs = [
        [("qkv", None), ("kqv", _bug(QK_SWAPPED, "qk_swapped")), ("qvk", _bug(KV_SWAPPED, "kv_swapped"))],
        [("heads", None), ("no transpose", Bug(MISSING_TRANSPOSE, HEAD_TEXTS["split_view"]))],
        [("head", None), ("none", Bug(NO_SCALING, a["no_scaling"], {"hs": hs})),
         ("head_size", Bug(SCALED_BY_HEAD_SIZE, a["by_head_size"], {"hs": hs, "root": math.sqrt(hs)})),
         ("n_embd", Bug(SCALED_BY_N_EMBD, a["by_n_embd"], {"d": C, "hs": hs}))],
        [("offset", None), ("top-left", _bug(MASK_NOT_OFFSET, "top_left")),
         ("top-left for several", _bug(MASK_NOT_OFFSET, "top_left_several")),
         ("first call only", _bug(MASK_ONLY_WITHOUT_CACHE, "first_call_only")),
         ("none", Bug(NO_MASK, a["none"])), ("zero", Bug(MASK_WITH_ZERO, a["zero"]))],
        [(-1, None), (-2, Bug(SOFTMAX_WRONG_DIM, a["dim_head"]))],
        [("appended", None), ("not appended", _bug(CACHE_NOT_APPENDED, "not_appended")),
         ("not read", _bug(CACHE_NOT_READ, "not_read")), ("twice", _bug(DECODE_APPENDED_TWICE, "twice")),
         ("prepended", _bug(CACHE_WRONG_ORDER, "wrong_order"))],
        [("transpose", None), ("no transpose", Bug(MERGE_WITHOUT_TRANSPOSE, HEAD_TEXTS["merge_no_swap"]))],
        [(True, None), (False, _bug(NO_OUTPUT_PROJECTION, "no_projection"))],
    ]
    return combinations(knobs, _reference_run, max_bugs=2)


def _library_run(x: torch.Tensor, w_attn: torch.Tensor, w_proj: torch.Tensor, n_head: int, block_size: int,
                 chunks: tuple[int, ...]) -> torch.Tensor:
    """gpt_lesson.model.CausalSelfAttention with these weights, fed ``chunks`` through a LayerKVCache (kv_cache.cached_attention)."""
    B, T, C = x.shape
    ref = model.CausalSelfAttention(C, n_head, block_size, dropout=0.0).eval()
    with torch.no_grad():
        ref.c_attn.weight.copy_(w_attn)
        ref.c_proj.weight.copy_(w_proj)
        if len(chunks) == 1:
            return ref(x)
        shape = (B, n_head, block_size, C // n_head)
        cache = model.LayerKVCache(torch.zeros(shape), torch.zeros(shape))
        starts = [sum(chunks[:i]) for i in range(len(chunks))]
        return torch.cat([kv_lib.cached_attention(ref, x[:, s:s + n], cache) for s, n in zip(starts, chunks)], dim=1)


def _pointer(out: torch.Tensor, case: Case) -> list[Bug] | None:
    """Where the first wrong output is, for an answer no variant explains."""
    chunks = case.args[-1]
    wrong = [t for t in range(out.size(1)) if not close(out[:, t], case.expected[:, t])]
    if not wrong:
        return None
    first = wrong[0]
    start = 0
    for size in chunks:
        if first < start + size:
            break
        start += size
    if start > 0:
        return [_bug(CACHED_CALLS_DIFFER, "cached", start=start, end=start + size - 1)]
    if first == 0:
        return [_bug(VALUE_PATH_WRONG, "value_path")]
    return [_bug(ATTENTION_PATTERN_WRONG, "pattern", position=first)]


def _attention_cases(hidden: bool) -> list[Case]:
    # (seed, (B, T, C, n_head, block_size), chunks): head sizes 4, 8 and 6 (5, 8 and 5 hidden), several batch sizes;
    # block_size leaves room beyond T, as in a real model (a cache that grows too fast still runs).
    runs = [(60, (2, 6, 12, 3, 16), None), (60, (2, 6, 12, 3, 16), (1,) * 6), (61, (1, 7, 16, 2, 16), (3, 1, 2, 1)),
            (62, (3, 5, 24, 4, 12), (2, 2, 1))]
    if hidden:
        runs += [(63, (2, 9, 20, 4, 24), (4, 1, 1, 3)), (64, (1, 4, 8, 1, 10), (1, 1, 1, 1)),
                 (65, (2, 6, 10, 2, 16), (6,))]
    cases = []
    for seed, (B, T, C, nh, bs), chunks in runs:
        g = seeded(seed)
        x, w_attn, w_proj = randn(g, B, T, C), randn(g, 3 * C, C) / math.sqrt(C), randn(g, C, C) / math.sqrt(C)
        chunks = chunks or (T,)
        if chunks == (T,):
            text = say(TEXTS["case_full"], shape=(B, T, C), nh=nh)
        elif set(chunks) == {1}:
            text = say(TEXTS["case_tokens"], shape=(B, T, C), nh=nh)
        else:
            text = say(TEXTS["case_chunks"], shape=(B, T, C), nh=nh, chunks=", ".join(map(str, chunks)))
        args = (x, w_attn, w_proj, nh, bs, chunks)
        cases.append(Case(args, text, _library_run(*args), _attention_variants(C, nh)))
    return cases


@learner_check
def check_cached_attention(cls: Callable[[int, int, int], nn.Module], *, strict: bool = False,
                           hidden: bool = False) -> CheckResult:
    """Check the class ``cls(n_embd, n_head, block_size)``: multi-head causal self-attention with a KV cache.

    The module has ``c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)`` (queries, keys and values side by side,
    each head a run of ``head_size`` channels) and ``c_proj = nn.Linear(n_embd, n_embd, bias=False)``; the check
    copies its weights into them. ``module(x, kv_cache)`` takes ``x`` (B, T, n_embd), the next T positions, and the
    cache the previous call returned (None on the first call), and returns ``(y, kv_cache)`` with ``y`` the T
    positions' outputs, (B, T, n_embd). The cache may be anything the module reads back (e.g. a tuple (k, v)).
    """
    name = "check_cached_attention"
    require_callable(name, cls, "your class")
    verdict = Verdict(name)
    forbidden = Forbidden(ATTENTION_FORBIDDEN)
    probe = call(_probe, (cls,), forbidden)
    early = screen(verdict, probe, hints=ATTENTION_HINTS)
    if early is not None:
        return early
    if probe.value:
        key, fields = probe.value
        return verdict.failed(WRONG_INTERFACE, say(TEXTS[key], **fields))
    cases = _attention_cases(hidden)
    return run_cases(verdict, partial(_run, cls), cases, forbidden=forbidden, hints=ATTENTION_HINTS,
                     diagnose=_pointer, success=say(TEXTS["attention_passed"], count=len(cases)))


# ----------------------------------------------------------------------------------------------
# The KV-cache memory of a real model


# The fields of each model's config.json on the Hugging Face Hub that the cache depends on.
CONFIGS = {
    "meta-llama/Llama-2-7b-hf": {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                                 "hidden_size": 4096, "torch_dtype": "float16"},
    "meta-llama/Meta-Llama-3-8B": {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                                   "hidden_size": 4096, "torch_dtype": "bfloat16"},
    "meta-llama/Llama-2-70b-hf": {"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
                                  "hidden_size": 8192, "torch_dtype": "float16"},
    "mistralai/Mistral-7B-v0.1": {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                                  "hidden_size": 4096, "torch_dtype": "bfloat16"},
    "lesson 09's model": {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
                          "hidden_size": 128, "torch_dtype": "float32"},
}
DTYPE_BYTES_OF = {"float32": 4, "float16": 2, "bfloat16": 2}
GIB = 2 ** 30


def _memory(config: dict, tokens: int, batch: int, kv: int = 2, layers: bool = True, heads: str = "kv",
            head_dim: str = "head", nbytes: str = "bytes", count_tokens: bool = True, count_batch: bool = True,
            unit: float = GIB) -> float:
    """The KV cache in ``unit``s, with chosen slips (the defaults are right)."""
    n_heads, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    width = config["hidden_size"] if head_dim == "hidden" else config["hidden_size"] // n_heads
    size = DTYPE_BYTES_OF[config["torch_dtype"]]
    per_number = {"bytes": size, "other": 6 - size, "bits": 8 * size}[nbytes]
    total = (kv * (config["num_hidden_layers"] if layers else 1) * (n_kv if heads == "kv" else n_heads) * width
             * per_number * (tokens if count_tokens else 1) * (batch if count_batch else 1))
    return total / unit


def _memory_knobs(config: dict) -> list[list[tuple[dict, Bug | None]]]:
    dtype = config["torch_dtype"]
    size = DTYPE_BYTES_OF[dtype]
    return [
        [({}, None), ({"kv": 1}, _bug(KV_NOT_DOUBLED, "not_doubled"))],
        [({}, None), ({"layers": False}, _bug(LAYERS_FORGOTTEN, "layers"))],
        [({}, None), ({"heads": "query"}, _bug(HEADS_NOT_KV_HEADS, "heads"))],
        [({}, None), ({"head_dim": "hidden"}, _bug(HIDDEN_NOT_HEAD_DIM, "hidden"))],
        [({}, None), ({"nbytes": "other"}, _bug(DTYPE_BYTES, "bytes", used=6 - size, dtype=dtype)),
         ({"nbytes": "bits"}, _bug(BITS_NOT_BYTES, "bits", dtype=dtype, bits=8 * size, bytes=size))],
        [({}, None), ({"count_tokens": False}, _bug(TOKENS_FORGOTTEN, "tokens"))],
        [({}, None), ({"count_batch": False}, _bug(BATCH_FORGOTTEN, "batch"))],
        [({}, None), ({"unit": 1e9}, _bug(GB_NOT_GIB, "gb")), ({"unit": 2 ** 20}, _bug(WRONG_UNIT, "unit", unit="MiB")),
         ({"unit": 1e6}, _bug(WRONG_UNIT, "unit", unit="MB")), ({"unit": 1}, _bug(WRONG_UNIT, "unit", unit="bytes"))],
    ]


def _memory_slip(config: dict, tokens: int, batch: int, got: float) -> list[Bug] | None:
    """The slips (up to two) that give ``got``, in the order of the formula; None if none does."""
    expected = _memory(config, tokens, batch)
    for n in (1, 2):
        for choice in itertools.product(*_memory_knobs(config)):
            bugs = [b for _, b in choice if b is not None]
            if len(bugs) != n:
                continue
            options = {k: v for o, _ in choice for k, v in o.items()}
            value = _memory(config, tokens, batch, **options)
            if not math.isclose(value, expected, rel_tol=1e-9) and math.isclose(got, value, rel_tol=1e-4):
                return bugs
    if isinstance(got, numbers.Integral) and got == math.floor(expected):
        return [_bug(INTEGER_RESULT, "integer")]
    if any(got == round(expected, digits) for digits in range(4)):
        return [_bug(ROUNDED, "rounded")]
    if got > 0:
        return [_bug(FACTOR_OFF, "ratio", ratio=got / expected)]
    return None


@learner_check
def check_kv_cache_memory(fn: Callable[[dict, int, int], float], *, strict: bool = False,
                          hidden: bool = False) -> CheckResult:
    """Check ``fn(config, n_tokens, batch_size)`` -> the KV cache of a model in GiB (a float).

    ``config`` holds the fields of a Hugging Face config.json the cache depends on: ``num_hidden_layers``,
    ``num_attention_heads``, ``num_key_value_heads``, ``hidden_size`` and ``torch_dtype`` (the cache is kept in
    that dtype). The answer is ``2 * layers * kv_heads * head_dim * bytes * tokens * batch / 2**30``.
    """
    name = "check_kv_cache_memory"
    require_callable(name, fn)
    verdict = Verdict(name)
    cases = [("meta-llama/Llama-2-7b-hf", 4096, 1), ("meta-llama/Meta-Llama-3-8B", 8192, 1),
             ("lesson 09's model", 32, 64), ("meta-llama/Meta-Llama-3-8B", 1000, 4)]
    cases += [("meta-llama/Llama-2-70b-hf", 4096, 1), ("mistralai/Mistral-7B-v0.1", 32768, 2),
              ("meta-llama/Llama-2-7b-hf", 3000, 7)] if hidden else []
    forbidden = Forbidden({experiments.kv_cache_bytes: "gpt_lesson.experiments.kv_cache_bytes",
                           experiments.encoder_decoder_cache_bytes: "gpt_lesson.experiments.encoder_decoder_cache_bytes"})
    for model_name, tokens, batch in cases:
        config = CONFIGS[model_name]
        text = say(TEXTS["case_memory"], model=model_name, layers=config["num_hidden_layers"],
                   heads=config["num_attention_heads"], kv_heads=config["num_key_value_heads"],
                   hidden=config["hidden_size"], dtype=config["torch_dtype"], tokens=tokens, batch=batch)
        outcome = call(fn, (dict(config), tokens, batch), forbidden)
        early = screen(verdict, outcome)
        if early is not None:
            return early
        got = outcome.value
        if isinstance(got, bool) or not isinstance(got, numbers.Real):
            return verdict.failed(WRONG_TYPE, say(TEXTS["memory_kind"], case=text, kind=kind_of(got)))
        if not math.isfinite(got):
            return verdict.failed(MEMORY_NOT_A_NUMBER, say(TEXTS["memory_nan"], case=text, got=got))
        expected = _memory(config, tokens, batch)
        if not math.isclose(float(got), expected, rel_tol=1e-6):
            message = say(TEXTS["memory_mismatch"], case=text, expected=expected, got=float(got))
            bugs = _memory_slip(config, tokens, batch, got)
            return verdict.failed_with(bugs, message) if bugs else verdict.failed(WRONG_VALUE, message)
    return verdict.passed(say(TEXTS["memory_passed"], count=len(cases)))
