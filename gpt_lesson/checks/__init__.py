"""Self-checks for the lessons' exercises ("Your turn").

Each check runs the learner's function on small seeded inputs, compares the result
with the library's reference (:mod:`gpt_lesson.attention`, :mod:`gpt_lesson.model`),
prints a verdict and returns a :class:`CheckResult` (truthy when passed).

When the answer is wrong, the check computes the classic mistakes itself (the
*buggy variants* listed in each check) and, if the learner's output equals one of
them, names the bug in plain words: what was expected, what came, and what to fix.
A stub that still raises ``NotImplementedError`` or returns ``None`` is reported as
"not attempted yet", so a notebook with untouched exercises still runs top to bottom.
Exceptions raised by the learner's code are reported, never re-raised; only wrong
arguments to the checks themselves raise (``TypeError``/``ValueError``).

The checks never change the notebook's random state: inputs come from a forked,
seeded generator.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..attention import attention_scores, causal_mask, merge_heads, naive_attention, split_heads
from ..model import CausalSelfAttention, FeedForward

__all__ = [
    "CheckResult",
    "check_attention_scores",
    "check_softmax_weights",
    "check_causal_attention",
    "check_split_heads",
    "check_merge_heads",
    "check_feed_forward",
    "check_block",
    "check_embeddings",
    "check_tokenizer",
    # Lesson 12's checks live next to the arithmetic they check, in gpt_lesson.distributed.
    "check_effective_batch",
    "check_grad_accum_steps",
    "check_allreduce_bytes",
]

# Diagnoses: the short labels a failed check puts in ``CheckResult.diagnosis``.
NOT_ATTEMPTED = "not attempted yet"
RAISED = "raised an exception"
WRONG_TYPE = "wrong type"
WRONG_SHAPE = "wrong shape"
NON_FINITE = "NaN or inf in the output"
WRONG_VALUES = "wrong values"
SCALED_BY_N_EMBD = "scaled by n_embd (d_model) instead of head size"
SCALED_BY_HEAD_SIZE = "scaled by head size instead of its square root"
NO_SCALING = "no scaling"
WRONG_SCALING = "wrong scaling"
MISSING_TRANSPOSE = "missing transpose"
SOFTMAX_WRONG_DIM = "softmax over the wrong dimension"
MASK_AFTER_SOFTMAX = "masking after the softmax"
MASK_WITH_ZERO = "masking with 0 instead of -inf"
NO_MASK = "no mask"
MASK_WRONG_TRIANGLE = "mask hides the past instead of the future"
SPLIT_WRONG_ORDER = "channels split in the wrong order"
MERGE_WITHOUT_TRANSPOSE = "heads merged without transposing back"
MERGE_WRONG_ORDER = "channels merged in the wrong order"
NO_EXPANSION = "no 4x expansion"
NO_NONLINEARITY = "no non-linearity"
NOT_POSITION_WISE = "mixes positions"
POST_LN = "post-LN where pre-LN was asked"
MISSING_RESIDUAL = "missing residual"
LAYER_NORMS_SWAPPED = "layer norms swapped"
NO_LAYER_NORM = "no layer norm"
MISSING_POSITION_EMBEDDING = "missing position embedding"
MISSING_TOKEN_EMBEDDING = "missing token embedding"
POSITIONS_FROM_TOKEN_IDS = "position embedding looked up with token ids"
EMBEDDINGS_NOT_ADDED = "embeddings not added"
DECODE_NOT_STR = "decode did not return a string"
ENCODE_NOT_IDS = "encode did not return integer ids"
ROUND_TRIP_CHANGED = "round trip changed the text"

# n_embd values a notebook is likely to use; a learner who scales by sqrt(n_embd) uses one of them.
_COMMON_N_EMBD = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
_ATOL, _RTOL = 1e-5, 1e-4
_TRANSPOSE_HINTS = [("cannot be multiplied", "a missing transpose: the scores are q @ k.transpose(-2, -1).")]
_MASK_SIZE_HINTS = [("must match the size", "the mask must be (T, T) for this input: build it from the input, "
                     "tril = torch.tril(torch.ones(T, T)) with T = q.size(1), or slice a bigger one: tril[:T, :T].")]


@dataclass
class CheckResult:
    """The verdict of a check: truthy when ``passed``.

    ``attempted`` is False for an untouched stub; ``diagnosis`` is a short label of the
    likely bug (several joined by "; "), None when passed; ``message`` is what was printed.
    """

    passed: bool
    attempted: bool
    diagnosis: str | None
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:  # short: the full message has already been printed
        return f"CheckResult(passed={self.passed}, attempted={self.attempted}, diagnosis={self.diagnosis!r})"


@dataclass(frozen=True)
class _Variant:
    """A classic mistake, computed by the check: if the learner's output equals it, we name the bug."""

    diagnosis: str
    compute: Callable[..., Any]
    hint: str


class _Case:
    """One test input: the arguments, a description for messages, the reference output and the variants."""

    def __init__(self, args: tuple, description: str, expected: torch.Tensor, variants: list[_Variant]) -> None:
        self.args, self.description, self.expected, self.variants = args, description, expected, variants


_NOT_ATTEMPTED = object()


# ----------------------------------------------------------------------------------------------
# Reporting


def _report(name: str, passed: bool, attempted: bool, diagnosis: str | None, text: str) -> CheckResult:
    if passed:
        message = f"✅ {name}: passed. {text}"
    elif not attempted:
        message = f"⏳ {name}: not attempted yet. {text}"
    else:
        message = f"❌ {name}: not yet ({diagnosis}).\n{text}"
    print(message)
    return CheckResult(passed, attempted, diagnosis, message)


def _not_attempted(name: str) -> CheckResult:
    return _report(name, False, False, NOT_ATTEMPTED,
                   "Your function still raises NotImplementedError or returns None "
                   "(a missing `return`?): fill it in and run this cell again.")


def _fail(name: str, diagnosis: str, text: str) -> CheckResult:
    return _report(name, False, True, diagnosis, text)


def _fmt(t: torch.Tensor, row: int = 0) -> str:
    """A few rounded numbers of one row: enough to compare by eye."""
    if t.dim() == 0:
        return f"{t.item():.4f}"
    rows = t.reshape(-1, t.size(-1)) if t.numel() else t.reshape(1, -1)
    vals = ", ".join(f"{v:.4f}" for v in rows[min(row, len(rows) - 1)][:5].tolist())
    more = ", ..." if rows.size(1) > 5 else ""
    where = "".join(f"{i}, " for i in _unravel(row, tuple(t.shape[:-1])))
    return f"shape {tuple(t.shape)}, [{where}:] = [{vals}{more}]"


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return index[::-1]


def _expected_got(expected: torch.Tensor, got: torch.Tensor) -> str:
    """Expected and received values side by side, on the row where they differ most."""
    row = 0
    if expected.shape == got.shape and expected.numel() and expected.dim() > 0:
        diff = (expected.double() - got.double()).nan_to_num(nan=math.inf).abs()
        row = int(diff.reshape(-1, expected.size(-1)).amax(dim=1).argmax())
    return f"   expected: {_fmt(expected, row)}\n   got:      {_fmt(got, row)}"


def _exception_text(e: BaseException, hints: Sequence[tuple[str, str]]) -> str:
    text = f"   Your code raised {type(e).__name__}: {e}"
    for fragment, hint in hints:
        if fragment in str(e):
            text += f"\n   Likely cause: {hint}"
            break
    return text


# ----------------------------------------------------------------------------------------------
# Running the learner's code safely


def _require_callable(check: str, value: object, what: str = "your function") -> None:
    if not callable(value):
        raise TypeError(f"{check}() expects {what} (something callable), got {type(value).__name__} {value!r:.60}")


def _clone(args: tuple) -> tuple:
    # The learner may modify inputs in place (masked_fill_); give each run fresh copies.
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _call(fn: Callable, args: tuple) -> Any:
    """The learner's result, ``_NOT_ATTEMPTED`` for a stub, or the exception it raised."""
    try:
        with torch.no_grad():
            out = fn(*_clone(args))
    except NotImplementedError:
        return _NOT_ATTEMPTED
    except Exception as e:  # report the learner's error, never crash the notebook
        return e
    return _NOT_ATTEMPTED if out is None else out


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=_ATOL, rtol=_RTOL, equal_nan=True)


def _match_variant(out: torch.Tensor, case: _Case) -> _Variant | None:
    for variant in case.variants:
        try:
            with torch.no_grad():
                candidate = variant.compute(*_clone(case.args))
        except Exception:  # a variant that cannot run on this input cannot be the learner's bug
            continue
        if isinstance(candidate, torch.Tensor) and _close(out, candidate):
            return variant
    return None


def _run_cases(
    name: str,
    fn: Callable,
    cases: list[_Case],
    *,
    exception_hints: Sequence[tuple[str, str]] = (),
    extra_diagnosis: Callable[[torch.Tensor, _Case], tuple[str, str] | None] | None = None,
    success: str = "",
) -> CheckResult:
    """Run ``fn`` on every case; the first case that fails decides the verdict."""
    for i, case in enumerate(cases):
        out = _call(fn, case.args)
        where = f"On {case.description}:\n" if i else ""
        if out is _NOT_ATTEMPTED:
            return _not_attempted(name)
        if isinstance(out, Exception):
            return _fail(name, RAISED, where + _exception_text(out, exception_hints))
        if not isinstance(out, torch.Tensor):
            return _fail(name, WRONG_TYPE, where + f"   Your function returned a {type(out).__name__}; "
                         f"return a torch.Tensor of shape {tuple(case.expected.shape)}.")
        out = out.detach()
        if _close(out, case.expected):
            continue
        variant = _match_variant(out, case)
        if variant is not None:
            return _fail(name, variant.diagnosis,
                         where + _expected_got(case.expected, out) + f"\n   Likely bug: {variant.hint}")
        if out.shape != case.expected.shape:
            return _fail(name, WRONG_SHAPE, where + f"   expected shape {tuple(case.expected.shape)}, "
                         f"got shape {tuple(out.shape)}.")
        if not torch.isfinite(out).all():
            return _fail(name, NON_FINITE, where + _expected_got(case.expected, out) +
                         "\n   Your output has NaN or inf. NaN appears when -inf reaches a sum or a product "
                         "(e.g. masking after the softmax) or when a whole row is masked.")
        extra = extra_diagnosis(out, case) if extra_diagnosis else None
        if extra is not None:
            return _fail(name, extra[0], where + _expected_got(case.expected, out) + f"\n   Likely bug: {extra[1]}")
        diff = (out.double() - case.expected.double()).abs().max().item()
        return _fail(name, WRONG_VALUES, where + _expected_got(case.expected, out) +
                     f"\n   The largest difference is {diff:.4g}. Compare your steps with the lesson's, one at a time.")
    return _report(name, True, True, None, success)


def _keeps_random_state(check: Callable) -> Callable:
    """Run a check in a forked RNG, so calling it never changes the notebook's random numbers."""
    @functools.wraps(check)
    def wrapper(*args: Any, **kwargs: Any) -> CheckResult:
        with torch.random.fork_rng(devices=[]):
            return check(*args, **kwargs)
    return wrapper


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


# ----------------------------------------------------------------------------------------------
# Attention: scores, softmax, one causal head


def _scores_cases() -> list[_Case]:
    cases = []
    # The first input has T == head_size so that a missing transpose still runs and can be named;
    # the second has T != head_size to catch code that reads d_k from the wrong dimension.
    for seed, (B, T, hs) in [(0, (2, 6, 6)), (1, (3, 5, 8))]:
        g = _seeded(seed)
        q, k = _randn(g, B, T, hs), _randn(g, B, T, hs)
        n_embd = 4 * hs
        variants = [
            _Variant(NO_SCALING, lambda q, k: q @ k.transpose(-2, -1),
                     f"your scores are sqrt(head_size) = {math.sqrt(hs):.2f}x too large: "
                     f"divide q @ k^T by sqrt(head_size) = sqrt({hs})."),
            _Variant(SCALED_BY_N_EMBD, lambda q, k, n=n_embd: q @ k.transpose(-2, -1) / math.sqrt(n),
                     f"your scores are {math.sqrt(n_embd / hs):.2f}x too small: did you divide by "
                     f"sqrt(n_embd) = sqrt({n_embd}) instead of sqrt(head_size) = sqrt({hs})?"),
            _Variant(MISSING_TRANSPOSE, lambda q, k: (q @ k) / math.sqrt(q.size(-1)),
                     "you multiplied q @ k; the scores are q @ k.transpose(-2, -1) "
                     "(each query dotted with each key)."),
            _Variant(MISSING_TRANSPOSE, lambda q, k: (q.transpose(-2, -1) @ k) / math.sqrt(q.size(-1)),
                     "you transposed q instead of k: the scores are q @ k.transpose(-2, -1), "
                     "shape (B, T, T)."),
        ]
        cases.append(_Case((q, k), f"q and k of shape {(B, T, hs)}", attention_scores(q, k), variants))
    return cases


def _diagnose_scale(out: torch.Tensor, case: _Case) -> tuple[str, str] | None:
    """If the learner's scores are the reference times a constant, say which divisor they used."""
    ref = case.expected.double()
    got = out.double()
    c = (got * ref).sum().item() / (ref * ref).sum().item()
    if c <= 0 or not _close(got, c * ref):
        return None
    hs = case.args[0].size(-1)
    d = hs / c**2  # the learner computed q @ k^T / sqrt(d)
    if math.isclose(d, hs**2, rel_tol=1e-3):
        return SCALED_BY_HEAD_SIZE, (f"you divided by head_size = {hs}; divide by its square root, "
                                     f"sqrt({hs}) = {math.sqrt(hs):.3f}.")
    if d > hs:
        return SCALED_BY_N_EMBD, (f"your scores are {1 / c:.2f}x too small: did you divide by "
                                  f"sqrt(n_embd) = sqrt({d:.4g}) instead of sqrt(head_size) = sqrt({hs})? "
                                  "Take the head size from q.size(-1).")
    if d < 1:
        return WRONG_SCALING, (f"your scores are {c:.2f}x too large: did you multiply by sqrt(head_size) "
                               "instead of dividing?")
    return WRONG_SCALING, (f"your scores are {c:.2f}x the expected ones: you divided by sqrt({d:.4g}); "
                           f"divide by sqrt(head_size) = sqrt({hs}), with head_size = q.size(-1).")


@_keeps_random_state
def check_attention_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check ``fn(q, k)`` -> scaled scores ``q @ k^T / sqrt(head_size)`` of shape (B, T, T).

    ``q`` and ``k`` have shape (B, T, head_size).
    """
    name = "check_attention_scores"
    _require_callable(name, fn)
    cases = _scores_cases()
    return _run_cases(name, fn, cases, extra_diagnosis=_diagnose_scale,
                      exception_hints=_TRANSPOSE_HINTS,
                      success="Your scores equal gpt_lesson.attention.attention_scores on 2 inputs.")


@_keeps_random_state
def check_softmax_weights(fn: Callable[[torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check ``fn(scores)`` -> attention weights: softmax over the last dimension (the keys)."""
    name = "check_softmax_weights"
    _require_callable(name, fn)
    cases = []
    for seed, (B, T) in [(2, (2, 5)), (3, (3, 7))]:
        scores = _randn(_seeded(seed), B, T, T) * 2
        # Masked (causal) scores as in a real head: -inf must become an exact 0.
        scores = scores.masked_fill(causal_mask(T) == 0, float("-inf"))
        hint = ("each query's row must sum to 1, so the softmax runs over the keys: dim=-1. "
                "Your columns sum to 1 instead." )
        variants = [
            _Variant(SOFTMAX_WRONG_DIM, lambda s: F.softmax(s, dim=-2), hint),
            _Variant(SOFTMAX_WRONG_DIM, lambda s: F.softmax(s, dim=0),
                     "you took the softmax over the batch (dim=0; also what F.softmax does "
                     "without dim=); use dim=-1, the keys."),
        ]
        cases.append(_Case((scores,), f"scores of shape {(B, T, T)}", F.softmax(scores, dim=-1), variants))
    return _run_cases(name, fn, cases,
                      success="Your weights equal F.softmax(scores, dim=-1): each row sums to 1.")


def _one_head(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, d: float | None = None,
              mask: str = "before", softmax_dim: int = -1, transpose: bool = True) -> torch.Tensor:
    """One causal head with a chosen mistake: the buggy variants of :func:`check_causal_attention`."""
    T = q.size(-2)
    scores = (q @ k.transpose(-2, -1) if transpose else q @ k) / math.sqrt(q.size(-1) if d is None else d)
    tril = causal_mask(T)
    if mask == "before":
        scores = scores.masked_fill(tril == 0, float("-inf"))
    elif mask == "zero":
        scores = scores.masked_fill(tril == 0, 0.0)
    elif mask == "wrong triangle":
        scores = scores.masked_fill(tril.T == 0, float("-inf"))
    weights = F.softmax(scores, dim=softmax_dim)
    if mask == "after":
        weights = weights.masked_fill(tril == 0, 0.0)
    elif mask == "after -inf":
        weights = weights.masked_fill(tril == 0, float("-inf"))
    return weights @ v


@_keeps_random_state
def check_causal_attention(fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check ``fn(q, k, v)`` -> output (B, T, head_size) of one causal attention head.

    ``q``, ``k``, ``v`` have shape (B, T, head_size); scores are scaled by 1/sqrt(head_size).
    """
    name = "check_causal_attention"
    _require_callable(name, fn)
    cases = []
    for seed, (B, T, hs) in [(4, (2, 6, 6)), (5, (3, 5, 8))]:
        g = _seeded(seed)
        q, k, v = (_randn(g, B, T, hs) for _ in range(3))
        expected = naive_attention(q, k, v, causal_mask(T))[0]
        variants = [
            _Variant(MASK_AFTER_SOFTMAX, lambda q, k, v: _one_head(q, k, v, mask="after"),
                     "you masked the weights after the softmax, so the rows no longer sum to 1. "
                     "Mask the scores with -inf first, then take the softmax."),
            _Variant(MASK_AFTER_SOFTMAX, lambda q, k, v: _one_head(q, k, v, mask="after -inf"),
                     "you filled the weights with -inf after the softmax; mask the scores "
                     "(before the softmax), which turns -inf into exact zeros."),
            _Variant(MASK_WITH_ZERO, lambda q, k, v: _one_head(q, k, v, mask="zero"),
                     "you filled the future scores with 0; exp(0) = 1, so the future still gets weight. "
                     "Use masked_fill(tril == 0, float('-inf'))."),
            _Variant(NO_MASK, lambda q, k, v: _one_head(q, k, v, mask="none"),
                     "every position attends to the future: apply the causal mask (tril) "
                     "to the scores before the softmax."),
            _Variant(MASK_WRONG_TRIANGLE, lambda q, k, v: _one_head(q, k, v, mask="wrong triangle"),
                     "your mask keeps the future and hides the past: use torch.tril (lower triangle), "
                     "not triu."),
            _Variant(SOFTMAX_WRONG_DIM, lambda q, k, v: _one_head(q, k, v, softmax_dim=-2),
                     "the softmax must run over the keys (dim=-1) so each query's weights sum to 1."),
            _Variant(MISSING_TRANSPOSE, lambda q, k, v: _one_head(q, k, v, transpose=False),
                     "the scores are q @ k.transpose(-2, -1), not q @ k."),
            _Variant(NO_SCALING, lambda q, k, v: _one_head(q, k, v, d=1.0),
                     f"you did not scale the scores: divide them by sqrt(head_size) = sqrt({hs})."),
            _Variant(SCALED_BY_HEAD_SIZE, lambda q, k, v, hs=hs: _one_head(q, k, v, d=hs**2),
                     f"you divided the scores by head_size = {hs}; divide by sqrt({hs})."),
        ]
        for n_embd in _COMMON_N_EMBD:
            if n_embd != hs:
                variants.append(_Variant(
                    SCALED_BY_N_EMBD, lambda q, k, v, n=n_embd: _one_head(q, k, v, d=n),
                    f"did you divide the scores by sqrt(n_embd) = sqrt({n_embd}) instead of "
                    f"sqrt(head_size) = sqrt({hs})? Take the head size from q.size(-1)."))
        cases.append(_Case((q, k, v), f"q, k, v of shape {(B, T, hs)}", expected, variants))
    return _run_cases(name, fn, cases,
                      exception_hints=_TRANSPOSE_HINTS + _MASK_SIZE_HINTS,
                      success="Your head equals gpt_lesson.attention.naive_attention with a causal mask.")


# ----------------------------------------------------------------------------------------------
# Multi-head plumbing


@_keeps_random_state
def check_split_heads(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> CheckResult:
    """Check ``fn(x, n_head)``: (B, T, C) -> (B, n_head, T, head_size)."""
    name = "check_split_heads"
    _require_callable(name, fn)
    cases = []
    for seed, (B, T, C, nh) in [(6, (2, 5, 12, 3)), (7, (1, 3, 8, 2))]:
        x = _randn(_seeded(seed), B, T, C)
        hs = C // nh
        variants = [
            _Variant(MISSING_TRANSPOSE, lambda x, n: x.reshape(x.size(0), n, x.size(1), x.size(2) // n),
                     "x.view(B, n_head, T, head_size) mixes positions and channels. "
                     "Split the channels first, then swap: x.view(B, T, n_head, head_size).transpose(1, 2)."),
            _Variant(MISSING_TRANSPOSE, lambda x, n: x.reshape(x.size(0), x.size(1), n, x.size(2) // n),
                     "you returned (B, T, n_head, head_size); add .transpose(1, 2) to get "
                     "(B, n_head, T, head_size)."),
            _Variant(SPLIT_WRONG_ORDER,
                     lambda x, n: x.reshape(x.size(0), x.size(1), x.size(2) // n, n).permute(0, 3, 1, 2),
                     "view(B, T, head_size, n_head) gives each head every n_head-th channel; each head owns "
                     "a contiguous slice: view(B, T, n_head, head_size)."),
        ]
        cases.append(_Case((x, nh), f"x of shape {(B, T, C)} with n_head={nh} (head_size={hs})",
                           split_heads(x, nh), variants))
    return _run_cases(name, fn, cases, success="Your split equals gpt_lesson.attention.split_heads.")


@_keeps_random_state
def check_merge_heads(fn: Callable[[torch.Tensor], torch.Tensor]) -> CheckResult:
    """Check ``fn(y)``: (B, n_head, T, head_size) -> (B, T, C), heads side by side."""
    name = "check_merge_heads"
    _require_callable(name, fn)
    cases = []
    for seed, (B, nh, T, hs) in [(8, (2, 3, 5, 4)), (9, (1, 2, 3, 4))]:
        y = _randn(_seeded(seed), B, nh, T, hs)
        variants = [
            _Variant(MERGE_WITHOUT_TRANSPOSE, lambda y: y.reshape(y.size(0), y.size(2), -1),
                     "you reshaped (B, n_head, T, head_size) straight to (B, T, C), which mixes positions. "
                     "Transpose back first: y.transpose(1, 2).contiguous().view(B, T, C)."),
            _Variant(MERGE_WRONG_ORDER, lambda y: y.permute(0, 2, 3, 1).reshape(y.size(0), y.size(2), -1),
                     "your channels are ordered (head_size, n_head); put the heads side by side: "
                     "y.transpose(1, 2) gives (B, T, n_head, head_size), then view(B, T, C)."),
        ]
        cases.append(_Case((y,), f"y of shape {(B, nh, T, hs)}", merge_heads(y), variants))
    return _run_cases(name, fn, cases,
                      exception_hints=[("view size is not compatible",
                                        "after a transpose the tensor is not contiguous: call .contiguous() "
                                        "before .view(), or use .reshape().")],
                      success="Your merge equals gpt_lesson.attention.merge_heads.")


# ----------------------------------------------------------------------------------------------
# Feed-forward and block


def _first_linear_width(module: nn.Module) -> int | None:
    for m in module.modules():
        if isinstance(m, nn.Linear):
            return m.out_features
    return None


def _is_affine(module: nn.Module, x1: torch.Tensor, x2: torch.Tensor) -> bool:
    """True when module(x1 + x2) == module(x1) + module(x2) - module(0): no non-linearity."""
    with torch.no_grad():
        lhs = module(x1 + x2)
        rhs = module(x1) + module(x2) - module(torch.zeros_like(x1))
    return torch.allclose(lhs, rhs, atol=1e-4, rtol=1e-3)


@_keeps_random_state
def check_feed_forward(cls_or_fn: Callable[[int], nn.Module]) -> CheckResult:
    """Check a factory ``cls_or_fn(n_embd)`` -> ``nn.Module`` mapping (B, T, n_embd) to (B, T, n_embd).

    A correct feed-forward expands to 4 * n_embd hidden units, applies a non-linearity
    (GELU as in :class:`gpt_lesson.model.FeedForward`, or ReLU) and projects back;
    it treats every position on its own.
    """
    name = "check_feed_forward"
    _require_callable(name, cls_or_fn, "a class or function that takes n_embd and returns an nn.Module")
    hints = [("cannot be multiplied", "your layers do not fit n_embd: build them from the n_embd argument, "
              "not a global (nn.Linear(n_embd, 4 * n_embd), then nn.Linear(4 * n_embd, n_embd)).")]
    widths = []
    for seed, (B, T, C) in [(10, (2, 5, 8)), (11, (1, 4, 12))]:
        torch.manual_seed(seed)
        module = _call(cls_or_fn, (C,))
        where = f"On n_embd={C}:\n" if widths else ""
        if module is _NOT_ATTEMPTED:
            return _not_attempted(name)
        if isinstance(module, Exception):
            return _fail(name, RAISED, where + _exception_text(module, hints))
        if not isinstance(module, nn.Module):
            return _fail(name, WRONG_TYPE, where + f"   {name} needs an nn.Module, got a "
                         f"{type(module).__name__}.")
        module.eval()  # dropout off, so outputs are comparable
        g = _seeded(seed)
        x = _randn(g, B, T, C)
        out = _call(module, (x,))
        if out is _NOT_ATTEMPTED:
            return _not_attempted(name)
        if isinstance(out, Exception):
            return _fail(name, RAISED, where + _exception_text(out, hints))
        if not isinstance(out, torch.Tensor):
            return _fail(name, WRONG_TYPE, where + f"   forward returned a {type(out).__name__}; "
                         f"return a tensor of shape {(B, T, C)}.")
        if tuple(out.shape) != (B, T, C):
            return _fail(name, WRONG_SHAPE, where + f"   expected shape {(B, T, C)}, got shape "
                         f"{tuple(out.shape)}: the FFN must map n_embd back to n_embd.")
        if not torch.isfinite(out).all():
            return _fail(name, NON_FINITE, where + "   your output has NaN or inf.")
        problems = []
        width = _first_linear_width(module)
        n_params = sum(p.numel() for p in module.parameters())
        ref_params = sum(p.numel() for p in FeedForward(C).parameters())
        if width is not None and width != 4 * C:
            problems.append((NO_EXPANSION, f"your hidden layer has {width} units ({width / C:g} x n_embd); "
                             f"expand to 4 * n_embd = {4 * C}: nn.Linear(n_embd, 4 * n_embd)."))
        elif width is None and n_params < ref_params // 2:
            problems.append((NO_EXPANSION, f"your module has {n_params} parameters, the reference "
                             f"{ref_params}: expand to 4 * n_embd = {4 * C} hidden units."))
        if _is_affine(module, _randn(g, B, T, C), _randn(g, B, T, C)):
            problems.append((NO_NONLINEARITY, "your module is linear: two nn.Linear layers with nothing in "
                             "between collapse into one. Put nn.GELU() (or nn.ReLU()) between them."))
        x2 = x.clone()
        x2[:, 0] += 1.0
        out2 = _call(module, (x2,))
        if isinstance(out2, torch.Tensor) and not torch.allclose(out2[:, 1:], out[:, 1:], atol=1e-5):
            problems.append((NOT_POSITION_WISE, "changing position 0 changed other positions' outputs; "
                             "the FFN must act on each position on its own (only nn.Linear on the last dim)."))
        if problems:
            text = where + "\n".join(f"   Likely bug ({d}): {h}" for d, h in problems)
            return _fail(name, "; ".join(d for d, _ in problems), text)
        widths.append((C, width, n_params))
    C, width, n_params = widths[0]
    return _report(name, True, True, None,
                   f"Your FFN maps n_embd={C} -> {width if width else 4 * C} -> {C}, is non-linear and "
                   f"position-wise ({n_params} parameters; gpt_lesson.model.FeedForward has "
                   f"{sum(p.numel() for p in FeedForward(C).parameters())}).")


def _block_modules(C: int, nh: int, block_size: int) -> tuple[nn.Module, ...]:
    """LayerNorms with random affine parameters (so swapping them shows) and eval-mode sublayers."""
    ln1, ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
    for ln in (ln1, ln2):
        with torch.no_grad():
            ln.weight.copy_(1 + 0.5 * torch.randn(C))
            ln.bias.copy_(0.3 * torch.randn(C))
    sa = CausalSelfAttention(C, nh, block_size, dropout=0.0).eval()
    ffwd = FeedForward(C, dropout=0.0).eval()
    return ln1, sa, ln2, ffwd


def _block_variant(kind: str) -> Callable[..., torch.Tensor]:
    def run(x, ln1, sa, ln2, ffwd):
        if kind == "post-LN":
            x = ln1(x + sa(x))
            return ln2(x + ffwd(x))
        if kind == "no residual":
            return ffwd(ln2(sa(ln1(x))))
        if kind == "no attention residual":
            x = sa(ln1(x))
            return x + ffwd(ln2(x))
        if kind == "no ffwd residual":
            x = x + sa(ln1(x))
            return ffwd(ln2(x))
        if kind == "swapped":
            x = x + sa(ln2(x))
            return x + ffwd(ln1(x))
        if kind == "no LN":
            x = x + sa(x)
            return x + ffwd(x)
        raise ValueError(kind)
    return run


@_keeps_random_state
def check_block(fn: Callable[..., torch.Tensor]) -> CheckResult:
    """Check ``fn(x, ln1, sa, ln2, ffwd)`` -> a pre-LN block: ``x + sa(ln1(x))``, then ``x + ffwd(ln2(x))``.

    ``x`` is (B, T, C); the four modules are given (``sa`` a CausalSelfAttention, ``ffwd`` a FeedForward).
    """
    name = "check_block"
    _require_callable(name, fn)
    cases = []
    for seed, (B, T, C, nh) in [(12, (2, 5, 12, 3)), (13, (1, 3, 8, 2))]:
        torch.manual_seed(seed)
        mods = _block_modules(C, nh, block_size=8)
        x = torch.randn(B, T, C)
        ln1, sa, ln2, ffwd = mods
        with torch.no_grad():
            h = x + sa(ln1(x))
            expected = h + ffwd(ln2(h))
        variants = [
            _Variant(POST_LN, _block_variant("post-LN"),
                     "you normalised after adding (post-LN: ln(x + sa(x))). Pre-LN normalises the input "
                     "of each sublayer and leaves the residual stream alone: x = x + sa(ln1(x))."),
            _Variant(MISSING_RESIDUAL, _block_variant("no residual"),
                     "you dropped both residual connections: add the input back, x = x + sa(ln1(x)) "
                     "and x = x + ffwd(ln2(x))."),
            _Variant(MISSING_RESIDUAL, _block_variant("no attention residual"),
                     "the attention sublayer has no residual connection: x = x + sa(ln1(x))."),
            _Variant(MISSING_RESIDUAL, _block_variant("no ffwd residual"),
                     "the feed-forward sublayer has no residual connection: x = x + ffwd(ln2(x))."),
            _Variant(LAYER_NORMS_SWAPPED, _block_variant("swapped"),
                     "ln1 belongs before the attention (sa) and ln2 before the feed-forward (ffwd)."),
            _Variant(NO_LAYER_NORM, _block_variant("no LN"),
                     "you did not apply the layer norms: x = x + sa(ln1(x)), then x = x + ffwd(ln2(x))."),
        ]
        cases.append(_Case((x, *mods), f"x of shape {(B, T, C)}", expected, variants))
    return _run_cases(name, fn, cases, success="Your block equals gpt_lesson.model.Block's pre-LN forward.")


# ----------------------------------------------------------------------------------------------
# Tokens and embeddings


@_keeps_random_state
def check_embeddings(fn: Callable[[torch.Tensor, nn.Embedding, nn.Embedding], torch.Tensor]) -> CheckResult:
    """Check ``fn(idx, tok_table, pos_table)`` -> ``tok_emb + pos_emb`` of shape (B, T, n_embd).

    ``idx`` is (B, T) token ids; ``tok_table`` (vocab_size rows) and ``pos_table``
    (block_size rows) are ``nn.Embedding`` modules, as ``GPT.token_embedding_table``
    and ``GPT.position_embedding_table``.
    """
    name = "check_embeddings"
    _require_callable(name, fn)
    vocab_size, block_size, C = 7, 8, 6
    cases = []
    for seed, (B, T) in [(14, (2, 5)), (15, (3, 8))]:
        torch.manual_seed(seed)
        tok, pos = nn.Embedding(vocab_size, C), nn.Embedding(block_size, C)
        idx = torch.randint(vocab_size, (B, T))
        with torch.no_grad():
            expected = tok(idx) + pos(torch.arange(T))
        variants = [
            _Variant(MISSING_POSITION_EMBEDDING, lambda i, t, p: t(i),
                     "you returned only the token embedding; add the position embedding "
                     "pos_table(torch.arange(T)), or the model cannot tell positions apart."),
            _Variant(MISSING_TOKEN_EMBEDDING, lambda i, t, p: p(torch.arange(i.size(1))).expand(
                i.size(0), -1, -1), "you returned only the position embedding; add tok_table(idx)."),
            _Variant(POSITIONS_FROM_TOKEN_IDS, lambda i, t, p: t(i) + p(i),
                     "you looked up the position table with the token ids; positions are "
                     "0, 1, ..., T-1: pos_table(torch.arange(T))."),
            _Variant(EMBEDDINGS_NOT_ADDED, lambda i, t, p: t(i) * p(torch.arange(i.size(1))),
                     "you multiplied the embeddings; GPT adds them: tok_emb + pos_emb."),
            _Variant(EMBEDDINGS_NOT_ADDED, lambda i, t, p: torch.cat(
                [t(i), p(torch.arange(i.size(1))).expand(i.size(0), -1, -1)], dim=-1),
                     "you concatenated the embeddings (2 * n_embd channels); GPT adds them: tok_emb + pos_emb."),
        ]
        cases.append(_Case((idx, tok, pos), f"idx of shape {(B, T)}", expected, variants))
    return _run_cases(name, fn, cases,
                      exception_hints=[("must match the size", "look up one position per token: "
                                        "pos_table(torch.arange(T)) with T = idx.shape[1], not the whole table.")],
                      success="Your embeddings equal tok_table(idx) + pos_table(torch.arange(T)).")


@_keeps_random_state
def check_tokenizer(encode: Callable[[str], Sequence[int]], decode: Callable[[Sequence[int]], str],
                    text: str) -> CheckResult:
    """Check that ``decode(encode(text)) == text`` and that ``encode`` gives integer ids."""
    name = "check_tokenizer"
    _require_callable(name, encode, "your encode function")
    _require_callable(name, decode, "your decode function")
    if not isinstance(text, str):
        raise TypeError(f"{name}() expects the text as a str, got {type(text).__name__}")
    if not text:
        raise ValueError(f"{name}() needs a non-empty text to round-trip")

    ids = _call(encode, (text,))
    if ids is _NOT_ATTEMPTED:
        return _not_attempted(name)
    if isinstance(ids, Exception):
        return _fail(name, RAISED, "In encode:\n" + _exception_text(ids, [("", "encode(text) should look up "
                     "each character in stoi: [stoi[ch] for ch in text].")]))
    as_list = ids.tolist() if isinstance(ids, torch.Tensor) and ids.dim() == 1 else ids
    if isinstance(ids, str) or not isinstance(as_list, (list, tuple)) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in as_list):
        return _fail(name, ENCODE_NOT_IDS, f"   encode returned {type(ids).__name__} {str(ids)[:40]!r}; "
                     "it should return a list of integers, one id per character: [stoi[ch] for ch in text].")
    back = _call(decode, (ids,))
    if back is _NOT_ATTEMPTED:
        return _not_attempted(name)
    if isinstance(back, Exception):
        hints = [("", "decode(ids) should look up each id in itos (id -> character) and join: "
                  "''.join(itos[i] for i in ids). Using stoi here is a common slip.")]
        return _fail(name, RAISED, "In decode:\n" + _exception_text(back, hints))
    if not isinstance(back, str):
        return _fail(name, DECODE_NOT_STR, f"   decode returned a {type(back).__name__}; join the characters "
                     "into one string: ''.join(itos[i] for i in ids).")
    if back != text:
        first = next((i for i, (a, b) in enumerate(zip(text, back)) if a != b), min(len(text), len(back)))
        return _fail(name, ROUND_TRIP_CHANGED,
                     f"   expected: {text[first:first + 30]!r} (from character {first})\n"
                     f"   got:      {back[first:first + 30]!r}"
                     + (f" ({len(back)} characters instead of {len(text)})" if len(back) != len(text) else "")
                     + "\n"
                     "   Likely bug: encode and decode must be inverse lookups: stoi = {ch: i}, itos = {i: ch}.")
    return _report(name, True, True, None,
                   f"decode(encode(text)) gives back all {len(text):,} characters ({len(as_list):,} ids).")


# Lesson 12's checks (imported last: they use CheckResult from above).
from .distributed import check_allreduce_bytes, check_effective_batch, check_grad_accum_steps  # noqa: E402
