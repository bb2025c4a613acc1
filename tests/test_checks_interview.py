"""Lesson 11's whiteboard checks: a multi-head causal self-attention module with a KV cache, and the KV-cache
memory of a named model. Correct answers in several styles pass; every classic mistake, written the way a learner
writes it (not with the check's own variants), fails with its diagnosis; stubs, crashes, library calls and answers
of the wrong kind are reported."""
from __future__ import annotations

import ast
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from gpt_lesson import checks
from gpt_lesson.checks import interview
from gpt_lesson.experiments import kv_cache_bytes
from gpt_lesson.model import CausalSelfAttention, LayerKVCache


# ================================================================ the attention module: correct styles
class Karpathy(nn.Module):
    """nanoGPT's CausalSelfAttention with a tuple (k, v) cache and a tril buffer."""

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)))

    def forward(self, x, kv_cache=None):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        past = 0
        if kv_cache is not None:
            past_k, past_v = kv_cache
            past = past_k.size(2)
            k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.tril[past:past + T, :past + T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y), (k, v)

    def heads(self, x, kv_cache, dim=2):
        """The test's shortcut for the one-off modules below: q, k, v in heads, the cache joined along ``dim``."""
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        if kv_cache is not None:
            k, v = torch.cat([kv_cache[0], k], dim), torch.cat([kv_cache[1], v], dim)
        return q, k, v


class SdpaLowerRight(nn.Module):
    """F.scaled_dot_product_attention with PyTorch's bottom-right causal bias; the cache is a dict."""

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.nh = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)

    def forward(self, x, kv_cache=None):
        B, T, C = x.shape
        q, k, v = (t.reshape(B, T, self.nh, -1).permute(0, 2, 1, 3) for t in self.c_attn(x).chunk(3, dim=-1))
        if kv_cache:
            k, v = torch.cat((kv_cache["k"], k), -2), torch.cat((kv_cache["v"], v), -2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T, k.size(-2)))
        return self.c_proj(y.permute(0, 2, 1, 3).reshape(B, T, C)), {"k": k, "v": v}


class EinsumBoolMask(nn.Module):
    """einsum, a bool mask built on the fly with device=, biases on both layers, dropout in eval mode, and a
    cache object of its own."""

    class Cache:
        def __init__(self, k, v):
            self.k, self.v = k, v

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.h = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.drop = nn.Dropout(0.2)

    def forward(self, x, kv_cache=None):
        B, T, C = x.shape
        d = C // self.h
        q, k, v = [t.view(B, T, self.h, d) for t in self.c_attn(x).split(C, dim=-1)]  # (B, T, h, d)
        if kv_cache is not None:
            k, v = torch.cat([kv_cache.k, k], 1), torch.cat([kv_cache.v, v], 1)
        L = k.size(1)
        s = torch.einsum("bthd,bshd->bhts", q, k) / d ** 0.5
        future = torch.ones(T, L, dtype=torch.bool, device=x.device).triu(diagonal=L - T + 1)
        w = self.drop(s.masked_fill(future, float("-inf")).softmax(-1))
        y = torch.einsum("bhts,bshd->bthd", w, v).reshape(B, T, C)
        return self.c_proj(y), self.Cache(k, v)


class Float64Inside(Karpathy):
    """The scores and softmax in float64, cast back; positions counted in the cache tuple."""

    def forward(self, x, kv_cache=None):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        past, old = (0, None) if kv_cache is None else kv_cache
        if old is not None:
            k, v = torch.cat([old[0], k], 2), torch.cat([old[1], v], 2)
        pos_q = torch.arange(past, past + T, device=x.device)
        pos_k = torch.arange(past + T, device=x.device)
        att = (q.double() @ k.double().mT) / math.sqrt(hs)
        att = att.masked_fill(pos_k[None, :] > pos_q[:, None], float("-inf"))
        y = (att.softmax(-1) @ v.double()).float()
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), (past + T, (k, v))


class IsCausalNoCache(Karpathy):
    """is_causal=True only when nothing is cached (as gpt_lesson.model does), the explicit mask otherwise."""

    def forward(self, x, kv_cache=None):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        if kv_cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            past = kv_cache[0].size(2)
            k, v = torch.cat([kv_cache[0], k], 2), torch.cat([kv_cache[1], v], 2)
            mask = self.tril[past:past + T, :past + T].bool()
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), (k, v)


CORRECT = [Karpathy, SdpaLowerRight, EinsumBoolMask, Float64Inside, IsCausalNoCache]


@pytest.mark.parametrize("cls", CORRECT, ids=lambda c: c.__name__)
def test_correct_modules_in_every_style_pass(cls, capsys):
    for hidden in (False, True):
        result = checks.check_cached_attention(cls, hidden=hidden)
        assert result.passed and result.attempted and result.diagnosis is None, result.message
    assert "passed" in capsys.readouterr().out


# ================================================================ the attention module: classic mistakes
class Learner(nn.Module):
    """One learner's module, with one or two mistakes switched on by name, written as a learner writes them."""

    bugs: tuple[str, ...] = ()

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)))

    def forward(self, x, kv_cache=None):
        bugs = self.bugs
        B, T, C = x.shape
        hs = C // self.n_head
        if "q, k swapped" in bugs:
            k, q, v = self.c_attn(x).split(C, dim=2)
        elif "k, v swapped" in bugs:
            q, v, k = self.c_attn(x).split(C, dim=2)
        else:
            q, k, v = self.c_attn(x).split(C, dim=2)
        if "split without transpose" in bugs:
            q, k, v = (t.reshape(B, self.n_head, T, hs) for t in (q, k, v))
        else:
            q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))
        new_k, new_v = k, v
        if kv_cache is not None and "cache ignored" not in bugs:
            if "prepended" in bugs:
                k, v = torch.cat([k, kv_cache[0]], dim=2), torch.cat([v, kv_cache[1]], dim=2)
            else:
                k, v = torch.cat([kv_cache[0], k], dim=2), torch.cat([kv_cache[1], v], dim=2)
        past = k.size(2) - T
        scale = {"no scale": 1.0, "divided by head_size": 1 / hs, "divided by sqrt(n_embd)": 1 / math.sqrt(C)}
        att = q @ k.transpose(-2, -1) * next((scale[b] for b in bugs if b in scale), 1 / math.sqrt(hs))
        if "top-left mask" in bugs:
            att = att.masked_fill(self.tril[:T, :past + T] == 0, float("-inf"))
        elif "mask only on the first call" in bugs:
            if kv_cache is None:
                att = att.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        elif "mask with 0" in bugs:
            att = att.masked_fill(self.tril[past:past + T, :past + T] == 0, 0.0)
        elif "no mask" not in bugs:
            att = att.masked_fill(self.tril[past:past + T, :past + T] == 0, float("-inf"))
        att = F.softmax(att, dim=-2 if "softmax over dim -2" in bugs else -1)
        y = att @ v
        if "merge without transpose" in bugs:
            y = y.contiguous().view(B, T, C)
        else:
            y = y.transpose(1, 2).contiguous().view(B, T, C)
        if "no c_proj" not in bugs:
            y = self.c_proj(y)
        if "cache not appended" in bugs:
            return y, (new_k, new_v)
        if "appended twice" in bugs:
            return y, (torch.cat([k, new_k], 2), torch.cat([v, new_v], 2))
        return y, (k, v)


def learner(*bugs: str) -> type:
    return type("Learner_" + "_".join(b.replace(" ", "") for b in bugs), (Learner,), {"bugs": bugs})


class IsCausalAlways(Karpathy):
    """The classic: is_causal=True with a cache, for one new token too."""

    def forward(self, x, kv_cache=None):
        B, T, C = x.shape
        q, k, v = self.heads(x, kv_cache)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), (k, v)


class IsCausalForSeveral(IsCausalAlways):
    """is_causal=True whenever several tokens come in, even with a cache."""

    def forward(self, x, kv_cache=None):
        B, T, C = x.shape
        q, k, v = self.heads(x, kv_cache)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), (k, v)


NAMED = [
    (learner("no scale"), checks.NO_SCALING),
    (learner("divided by head_size"), checks.SCALED_BY_HEAD_SIZE),
    (learner("divided by sqrt(n_embd)"), checks.SCALED_BY_N_EMBD),
    (learner("no mask"), checks.NO_MASK),
    (learner("mask with 0"), checks.MASK_WITH_ZERO),
    (learner("softmax over dim -2"), checks.SOFTMAX_WRONG_DIM),
    (learner("top-left mask"), checks.MASK_NOT_OFFSET),
    (IsCausalAlways, checks.MASK_NOT_OFFSET),
    (IsCausalForSeveral, checks.MASK_NOT_OFFSET),
    (learner("mask only on the first call"), checks.MASK_ONLY_WITHOUT_CACHE),
    (learner("cache not appended"), checks.CACHE_NOT_APPENDED),
    (learner("cache ignored"), checks.CACHE_NOT_READ),
    (learner("appended twice"), checks.DECODE_APPENDED_TWICE),
    (learner("prepended"), checks.CACHE_WRONG_ORDER),
    (learner("split without transpose"), checks.MISSING_TRANSPOSE),
    (learner("merge without transpose"), checks.MERGE_WITHOUT_TRANSPOSE),
    (learner("q, k swapped"), checks.QK_SWAPPED),
    (learner("k, v swapped"), checks.KV_SWAPPED),
    (learner("no c_proj"), checks.NO_OUTPUT_PROJECTION),
    (learner("no scale", "top-left mask"), checks.NO_SCALING),
    (learner("cache not appended", "merge without transpose"), checks.MERGE_WITHOUT_TRANSPOSE),
]


@pytest.mark.parametrize("cls, label", NAMED, ids=[c.__name__ for c, _ in NAMED])
def test_each_classic_mistake_is_named(cls, label):
    result = checks.check_cached_attention(cls)
    assert not result.passed and result.attempted and result.diagnosis == label, result.message
    assert "Likely bug" in result.message


def test_two_mistakes_are_both_named():
    result = checks.check_cached_attention(learner("divided by head_size", "no c_proj"))
    assert result.diagnosis == checks.SCALED_BY_HEAD_SIZE
    assert "Then also: you returned the merged heads without the output projection" in result.message
    cached = checks.check_cached_attention(learner("top-left mask", "cache not appended"))
    assert cached.diagnosis == checks.MASK_NOT_OFFSET and "Then also: the cache you return holds only" in cached.message


def test_the_first_case_that_fails_is_described():
    result = checks.check_cached_attention(learner("cache not appended"))
    assert "fed one token at a time" in result.message
    offset = checks.check_cached_attention(IsCausalForSeveral)
    assert "fed in chunks of 3, 1, 2, 1 tokens through the cache" in offset.message
    assert "causal_lower_right" in offset.message


class OffByHalfAtTheEnd(Karpathy):
    """A mistake no variant knows: the last position of every call is halved."""

    def forward(self, x, kv_cache=None):
        y, cache = super().forward(x, kv_cache)
        return torch.cat([y[:, :-1], y[:, -1:] * 0.5], dim=1), cache


class WrongValueVectors(Karpathy):
    def forward(self, x, kv_cache=None):
        y, cache = super().forward(x, kv_cache)
        return y + 0.1, cache


class ForgetsTheOldestKey(Karpathy):
    """Keeps a sliding cache one position too short."""

    def forward(self, x, kv_cache=None):
        y, (k, v) = super().forward(x, kv_cache)
        return y, (k[:, :, 1:], v[:, :, 1:]) if k.size(2) > 2 else (k, v)


@pytest.mark.parametrize("cls, label, text", [
    (OffByHalfAtTheEnd, checks.ATTENTION_PATTERN_WRONG, "position 0 is right, position 5 is not"),
    (WrongValueVectors, checks.VALUE_PATH_WRONG, "Position 0 sees only itself"),
    (ForgetsTheOldestKey, checks.CACHED_CALLS_DIFFER, "added positions 3..3 to a cache of 3 positions"),
])
def test_an_unknown_mistake_still_gets_a_pointer_to_where_it_differs(cls, label, text):
    result = checks.check_cached_attention(cls)
    assert result.diagnosis == label and text in result.message, result.message


# ================================================================ the interface, crashes, stubs, the library
class NoCAttn(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.q = nn.Linear(n_embd, n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)

    def forward(self, x, kv_cache=None):
        return self.c_proj(self.q(x)), None


class TransposedCAttn(NoCAttn):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__(n_embd, n_head, block_size)
        self.c_attn = nn.Linear(3 * n_embd, n_embd, bias=False)


class ExtraProjections(Karpathy):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__(n_embd, n_head, block_size)
        self.q_proj = nn.Linear(n_embd, n_embd)


class ReturnsOnlyY(Karpathy):
    def forward(self, x, kv_cache=None):
        return super().forward(x, kv_cache)[0]


class HeadsNotMerged(Karpathy):
    def forward(self, x, kv_cache=None):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True), (k, v)


class AllPositionsReturned(Karpathy):
    """Returns the outputs of every position so far, not only the new ones."""

    def forward(self, x, kv_cache=None):
        k_v, old = (None, None) if kv_cache is None else kv_cache
        y, k_v = super().forward(x, k_v)
        y_all = y if old is None else torch.cat([old, y], dim=1)
        return y_all, (k_v, y_all)


@pytest.mark.parametrize("cls, text", [
    (NoCAttn, "Your module has no c_attn"),
    (TransposedCAttn, "Your c_attn.weight has shape (8, 24); the convention is (24, 8)"),
    (ExtraProjections, "parameters besides c_attn and c_proj (q_proj.weight, q_proj.bias)"),
    (ReturnsOnlyY, "Your forward returned a Tensor; it must return a pair (y, kv_cache)"),
    (HeadsNotMerged, "returned y of shape (2, 2, 3, 4); expected (2, 3, 8)"),
    (AllPositionsReturned, "given the cache, your forward returned y of shape (2, 4, 8); expected (2, 1, 8)"),
])
def test_an_answer_off_the_interface_is_told_the_convention(cls, text):
    result = checks.check_cached_attention(cls)
    assert result.diagnosis == checks.WRONG_INTERFACE and text in result.message, result.message


class SquareMask(Karpathy):
    def forward(self, x, kv_cache=None):
        B, T, C = x.shape
        q, k, v = self.heads(x, kv_cache)
        att = (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        return self.c_proj((att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)), (k, v)


class CatOverHeads(Karpathy):
    def forward(self, x, kv_cache=None):
        B, T, C = x.shape
        q, k, v = self.heads(x, kv_cache, dim=1)
        return self.c_proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, T, C)), (k, v)


class IndexesTheFirstCache(Karpathy):
    def forward(self, x, kv_cache=None):
        past = kv_cache[0].size(2)  # fails on the first call, where kv_cache is None
        return super().forward(x, kv_cache if past else None)


class OldSignature(Karpathy):
    def __init__(self, config):
        super().__init__(config.n_embd, config.n_head, config.block_size)


class ViewAfterTranspose(Karpathy):
    def forward(self, x, kv_cache=None):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        att = (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        y = att.softmax(-1) @ v
        return self.c_proj(y.transpose(1, 2).view(B, T, C)), (k, v)


@pytest.mark.parametrize("cls, hint", [
    (SquareMask, "with a cache the scores have shape (B, n_head, T, past + T)"),
    (CatOverHeads, "concatenate along dim=2"),
    (IndexesTheFirstCache, "the first call passes kv_cache=None"),
    (OldSignature, "the check builds your class as YourClass(n_embd, n_head, block_size)"),
    (ViewAfterTranspose, "call .contiguous() before .view()"),
])
def test_a_crash_is_reported_with_its_likely_cause(cls, hint):
    result = checks.check_cached_attention(cls)
    assert result.diagnosis == checks.RAISED and "Your code raised" in result.message, result.message
    assert hint in result.message, result.message


class Stub(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        # Your code here
        raise NotImplementedError

    def forward(self, x, kv_cache=None):
        raise NotImplementedError


class StubForward(Karpathy):
    def forward(self, x, kv_cache=None):
        raise NotImplementedError


class ReturnsNothing(Karpathy):
    def forward(self, x, kv_cache=None):
        pass


class SubclassesTheLibrary(CausalSelfAttention):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__(n_embd, n_head, block_size, dropout=0.0)

    def forward(self, x, kv_cache=None):
        return super().forward(x), None


class UsesTheLibraryCache(Karpathy):
    def forward(self, x, kv_cache=None):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        if kv_cache is None:
            kv_cache = LayerKVCache(torch.zeros(B, self.n_head, 16, C // self.n_head),
                                    torch.zeros(B, self.n_head, 16, C // self.n_head))
        past = kv_cache.length
        k, v = kv_cache.update(k, v)
        mask = self.tril[past:past + T, :past + T].bool()
        return self.c_proj(F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(B, T, C)), kv_cache


def test_stubs_are_not_attempted():
    for cls in (Stub, StubForward):
        result = checks.check_cached_attention(cls)
        assert not result.passed and not result.attempted and result.diagnosis == checks.NOT_ATTEMPTED
    assert checks.check_cached_attention(ReturnsNothing).diagnosis == checks.WRONG_INTERFACE


@pytest.mark.parametrize("cls, name", [(SubclassesTheLibrary, "gpt_lesson.model.CausalSelfAttention"),
                                       (UsesTheLibraryCache, "gpt_lesson.model.LayerKVCache")])
def test_the_library_s_attention_is_refused(cls, name):
    result = checks.check_cached_attention(cls)
    assert result.diagnosis == checks.CALLED_LIBRARY and name in result.message, result.message


def test_check_arguments_strict_and_hidden():
    with pytest.raises(TypeError, match="your class"):
        checks.check_cached_attention(42)
    with pytest.raises(TypeError, match="strict='yes' must be True or False"):
        checks.check_cached_attention(Karpathy, strict="yes")
    assert checks.check_cached_attention(Karpathy, strict=True).passed
    with pytest.raises(AssertionError, match="cache not appended"):
        checks.check_cached_attention(learner("cache not appended"), strict=True)
    with pytest.raises(AssertionError, match="not attempted yet"):
        checks.check_cached_attention(Stub, strict=True)


class FittedToTheShownSizes(Karpathy):
    def forward(self, x, kv_cache=None):
        y, cache = super().forward(x, kv_cache)
        return (y if x.size(-1) in (12, 16, 24) else y * 0), cache


def test_hidden_cases_catch_a_module_fitted_to_the_shown_sizes():
    assert checks.check_cached_attention(FittedToTheShownSizes).passed
    assert not checks.check_cached_attention(FittedToTheShownSizes, hidden=True).passed


def test_the_reference_with_no_mistake_is_the_library():
    """The variants' reference module, all knobs right, computes what gpt_lesson.model's does, on every case."""
    right = ("qkv", "heads", "head", "offset", -1, "appended", "transpose", True)
    for case in interview._attention_cases(hidden=True):
        got = interview._reference_run(*case.args, *right)
        assert torch.allclose(got, case.expected, atol=1e-6), case.description


def test_the_cached_library_run_equals_the_full_pass():
    for case in interview._attention_cases(hidden=True):
        x, w_attn, w_proj, nh, bs, _ = case.args
        assert torch.allclose(case.expected, interview._library_run(x, w_attn, w_proj, nh, bs, (x.size(1),)),
                              atol=1e-6)


def test_the_check_leaves_the_random_state_and_threads_alone():
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    before = torch.random.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    threads = torch.get_num_threads()
    checks.check_cached_attention(Karpathy)
    checks.check_cached_attention(learner("no scale"))
    checks.check_kv_cache_memory(memory_formula)
    assert torch.equal(before[0], torch.random.get_rng_state()) and before[1] == random.getstate()
    assert (before[2] == np.random.get_state()[1]).all() and threads == torch.get_num_threads()


# ================================================================ the KV-cache memory
BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def memory_formula(config, n_tokens, batch_size=1):
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    per_token = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim
    return per_token * BYTES[config["torch_dtype"]] * n_tokens * batch_size / 2**30


def memory_torch_dtype(config, n_tokens, batch_size=1):
    dtype = getattr(torch, config["torch_dtype"])
    head_dim = config["hidden_size"] / config["num_attention_heads"]  # a float: still exact here
    k_and_v = 2
    return (k_and_v * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * dtype.itemsize
            * n_tokens * batch_size) / 1024 ** 3


def memory_numpy(config, n_tokens, batch_size=1):
    bits = {"float32": 32, "float16": 16, "bfloat16": 16}[config["torch_dtype"]]
    per_layer = np.float64(2) * config["num_key_value_heads"] * config["hidden_size"] / config["num_attention_heads"]
    return per_layer * config["num_hidden_layers"] * bits / 8 * n_tokens * batch_size / 2.0 ** 30


def memory_in_steps(config, n_tokens, batch_size=1):
    """Bytes per token first, then MiB, then GiB, the way one works it out on a whiteboard."""
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    bytes_per_token = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * BYTES[config["torch_dtype"]]
    mib = bytes_per_token * n_tokens * batch_size / 2**20
    return mib / 1024


@pytest.mark.parametrize("fn", [memory_formula, memory_torch_dtype, memory_numpy, memory_in_steps],
                         ids=lambda f: f.__name__)
def test_correct_memory_answers_pass(fn):
    for hidden in (False, True):
        result = checks.check_kv_cache_memory(fn, hidden=hidden)
        assert result.passed and result.diagnosis is None, result.message


def test_the_configs_give_the_published_sizes():
    cfg = interview.CONFIGS
    assert interview._memory(cfg["meta-llama/Llama-2-7b-hf"], 4096, 1) == 2.0  # 0.5 MiB per token
    assert interview._memory(cfg["meta-llama/Meta-Llama-3-8B"], 8192, 1) == 1.0  # 128 KiB per token (GQA, 8 of 32)
    assert interview._memory(cfg["meta-llama/Llama-2-70b-hf"], 4096, 1) == 1.25  # lesson 11's GQA table
    llama70 = cfg["meta-llama/Llama-2-70b-hf"]
    assert kv_cache_bytes(80, 4096, 8192, 2, n_head=64, n_kv_head=8) == interview._memory(llama70, 4096, 1) * 2**30


def slip(**changes):
    def fn(config, n_tokens, batch_size=1):
        head_dim = config["hidden_size"] // config["num_attention_heads"]
        heads = config["num_attention_heads"] if changes.get("query_heads") else config["num_key_value_heads"]
        width = config["hidden_size"] if changes.get("hidden") else head_dim
        nbytes = changes.get("bytes", BYTES[config["torch_dtype"]])
        nbytes = 8 * nbytes if changes.get("bits") else nbytes
        total = (changes.get("kv", 2) * (1 if changes.get("no_layers") else config["num_hidden_layers"]) * heads
                 * width * nbytes * (1 if changes.get("no_tokens") else n_tokens)
                 * (1 if changes.get("no_batch") else batch_size))
        return total / changes.get("unit", 2**30)
    return fn


MEMORY_SLIPS = [
    (slip(kv=1), checks.KV_NOT_DOUBLED, "multiply by 2"),
    (slip(no_layers=True), checks.LAYERS_FORGOTTEN, "one layer's cache"),
    (slip(query_heads=True), checks.HEADS_NOT_KV_HEADS, "Llama-3-8B: 8 of its 32"),
    (slip(hidden=True), checks.HIDDEN_NOT_HEAD_DIM, "head_dim = hidden_size // num_attention_heads"),
    (slip(bytes=4), checks.DTYPE_BYTES, "4 bytes per number is wrong for float16"),
    (slip(bits=True), checks.BITS_NOT_BYTES, "the bits of float16 (16)"),
    (slip(no_tokens=True), checks.TOKENS_FORGOTTEN, "every token"),
    (slip(no_batch=True), checks.BATCH_FORGOTTEN, "batch_size sequences"),
    (slip(unit=1e9), checks.GB_NOT_GIB, "a GiB is 2**30"),
    (slip(unit=2**20), checks.WRONG_UNIT, "in MiB"),
    (slip(unit=1), checks.WRONG_UNIT, "in bytes"),
    (slip(kv=1, unit=1e9), checks.KV_NOT_DOUBLED, "Then also: you divided by 10**9 (GB)"),
    (slip(kv=1, bits=True), checks.KV_NOT_DOUBLED, "Then also: you multiplied by the bits of float16"),
    (lambda c, n, b=1: round(memory_formula(c, n, b), 2), checks.ROUNDED, "round only when you print it"),
    (lambda c, n, b=1: int(memory_formula(c, n, b) * 2**30) // 2**30, checks.INTEGER_RESULT, "Divide with /"),
    (lambda c, n, b=1: 3 * memory_formula(c, n, b), checks.FACTOR_OFF, "your number is 3 times the right one"),
]


@pytest.mark.parametrize("fn, label, text", MEMORY_SLIPS, ids=[label for _, label, _ in MEMORY_SLIPS])
def test_each_memory_slip_is_named(fn, label, text):
    result = checks.check_kv_cache_memory(fn)
    assert not result.passed and result.diagnosis == label and text in result.message, result.message


def test_the_4_byte_slip_shows_on_16_bit_dtypes_and_the_2_byte_one_on_float32():
    assert "4 bytes per number is wrong for float16" in checks.check_kv_cache_memory(slip(bytes=4)).message
    two = checks.check_kv_cache_memory(lambda c, n, b=1: memory_formula(c, n, b) / BYTES[c["torch_dtype"]] * 2)
    assert two.diagnosis == checks.DTYPE_BYTES and "2 bytes per number is wrong for float32" in two.message


@pytest.mark.parametrize("value, label, text", [
    (torch.tensor(2.0), checks.WRONG_TYPE, "returned a Tensor; return the size in GiB as a Python float"),
    ("2 GiB", checks.WRONG_TYPE, "returned a str"),
    (True, checks.WRONG_TYPE, "returned a bool"),
    (float("nan"), checks.MEMORY_NOT_A_NUMBER, "returned nan"),
    (-2.0, checks.WRONG_VALUE, "expected 2 GiB, got -2"),
])
def test_answers_of_the_wrong_kind_are_named(value, label, text):
    result = checks.check_kv_cache_memory(lambda c, n, b=1: value)
    assert result.diagnosis == label and text in result.message, result.message


def test_memory_stub_crash_library_and_strict():
    def stub(config, n_tokens, batch_size=1):
        raise NotImplementedError

    def crash(config, n_tokens, batch_size=1):
        return config["n_layer"]

    def library(config, n_tokens, batch_size=1):
        return kv_cache_bytes(config["num_hidden_layers"], n_tokens, config["hidden_size"],
                              BYTES[config["torch_dtype"]], batch_size, config["num_attention_heads"],
                              config["num_key_value_heads"]) / 2**30

    assert checks.check_kv_cache_memory(stub).diagnosis == checks.NOT_ATTEMPTED
    crashed = checks.check_kv_cache_memory(crash)
    assert crashed.diagnosis == checks.RAISED and "KeyError" in crashed.message
    refused = checks.check_kv_cache_memory(library)
    assert refused.diagnosis == checks.CALLED_LIBRARY and "gpt_lesson.experiments.kv_cache_bytes" in refused.message
    with pytest.raises(AssertionError, match="layers not counted"):
        checks.check_kv_cache_memory(slip(no_layers=True), strict=True)
    with pytest.raises(TypeError, match="callable"):
        checks.check_kv_cache_memory(2.0)


def test_the_learner_s_config_is_a_copy():
    def mutates(config, n_tokens, batch_size=1):
        config["num_hidden_layers"] = 1
        return 0.0

    checks.check_kv_cache_memory(mutates)
    assert interview.CONFIGS["meta-llama/Llama-2-7b-hf"]["num_hidden_layers"] == 32


def test_hidden_memory_cases_catch_an_answer_fitted_to_the_shown_models():
    def fitted(config, n_tokens, batch_size=1):
        return memory_formula(config, n_tokens, batch_size) if config["num_hidden_layers"] != 80 else 1.0

    assert checks.check_kv_cache_memory(fitted).passed
    assert not checks.check_kv_cache_memory(fitted, hidden=True).passed


# ================================================================ every label of the module has a test here
def _labels_used_in_this_file() -> set[str]:
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and getattr(n.value, "id", "") == "checks"}
    return {checks.LABELS[n] for n in names if n in checks.LABELS}


def test_every_label_of_the_interview_checks_is_tested_here():
    own = {value for name, value in vars(interview).items()
           if name.isupper() and isinstance(value, str) and name in checks.LABELS}
    assert own - _labels_used_in_this_file() == set()
