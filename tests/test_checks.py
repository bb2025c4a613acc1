"""The exercise checks: correct solutions in many styles pass, every known wrong one fails with a named
diagnosis, stubs and crashes are reported, answers of the wrong kind are refused, and nothing leaks out.

The solutions here are written the way learners (and well-known courses) write them, independently of
the variants inside gpt_lesson.checks, so a test passes only if a check really recognises the code.
Styles: Karpathy's lectures ("Let's build GPT"), Raschka's LLMs-from-scratch, nanoGPT's ``MLP``, einsum,
``F.scaled_dot_product_attention`` with a bool mask, in-place ``+=``, float64 inside.
"""
from __future__ import annotations

import ast
import cProfile
import itertools
import math
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from gpt_lesson import GPT, checks
from gpt_lesson import distributed as dist_lib
from gpt_lesson.attention import attention_scores, attention_weights, merge_heads, naive_attention, split_heads
from gpt_lesson.data import CharTokenizer
from gpt_lesson.model import Block, FeedForward, count_parameters_by_part
from tests.learner_solutions import l06_ffn, l07_layer_norm, l08_gpt

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak."
CHARS = sorted(set(TEXT))
STOI = {ch: i for i, ch in enumerate(CHARS)}
ITOS = {i: ch for i, ch in enumerate(CHARS)}
N_EMBD = 64  # a learner's notebook-level global


def causal_tril(T: int) -> torch.Tensor:
    return torch.tril(torch.ones(T, T))


# ================================================================ correct solutions, several styles each
# --- scores (lessons 02, 04, 11)
def scores_karpathy(q, k):
    return q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5


def scores_rasbt(q, k):
    attn_scores = q @ k.transpose(1, 2)
    return attn_scores / k.shape[-1] ** 0.5


def scores_einsum(q, k):
    return torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(q.size(-1))


def scores_scale_q_first_float64(q, k):
    return ((q.double() / math.sqrt(q.size(-1))) @ k.double().mT)


def scores_baddbmm(q, k):
    B, T, _ = q.shape
    return torch.baddbmm(torch.zeros(B, T, T), q, k.transpose(1, 2), beta=0.0, alpha=q.size(-1) ** -0.5)


# --- softmax (02, 04, 10, 11)
def softmax_stable_by_hand(scores):
    shifted = scores - scores.amax(dim=-1, keepdim=True)
    e = torch.exp(shifted)
    return e / e.sum(dim=-1, keepdim=True)


def softmax_shifted_by(scores, m):
    e = (scores - m).exp()
    return e / e.sum(dim=-1, keepdim=True)


def softmax_logsumexp(scores):
    return torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))


def softmax_method(scores):
    return scores.softmax(-1)


# --- one causal head (03, 08, 09, 11)
def causal_karpathy(q, k, v):
    B, T, C = q.shape
    tril = torch.tril(torch.ones(16, 16))  # a buffer bigger than T, sliced
    wei = q @ k.transpose(-2, -1) * C ** -0.5
    wei = wei.masked_fill(tril[:T, :T] == 0, float("-inf"))
    wei = F.softmax(wei, dim=-1)
    return wei @ v


def causal_rasbt(q, k, v):
    num_tokens = q.shape[1]
    mask = torch.triu(torch.ones(num_tokens, num_tokens), diagonal=1)
    attn_scores = q @ k.transpose(1, 2)
    attn_scores.masked_fill_(mask.bool(), -torch.inf)  # in place, as in LLMs-from-scratch
    attn_weights = torch.softmax(attn_scores / k.shape[-1] ** 0.5, dim=-1)
    return attn_weights @ v


def causal_einsum(q, k, v):
    T = q.shape[1]
    s = torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(q.shape[-1])
    s = torch.where(torch.ones(T, T, dtype=torch.bool).tril(), s, float("-inf"))
    return torch.einsum("bqk,bkd->bqd", s.softmax(-1), v)


def causal_sdpa_is_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def causal_sdpa_bool_mask(q, k, v):
    T = q.size(1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(T, T, dtype=torch.bool).tril())


def causal_sdpa_additive_inf(q, k, v):
    T = q.size(1)
    bias = torch.zeros(T, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


# --- heads (05, 10)
def split_view_transpose(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


def split_reshape_permute(x, n_head):
    B, T, C = x.shape
    return x.reshape(B, T, n_head, -1).permute(0, 2, 1, 3)


def split_stack(x, n_head):
    return torch.stack(x.split(x.size(-1) // n_head, dim=-1), dim=1)


def split_unflatten(x, n_head):
    return x.unflatten(-1, (n_head, -1)).transpose(1, 2)


def merge_contiguous_view(y):
    B, nh, T, hs = y.shape
    return y.transpose(1, 2).contiguous().view(B, T, nh * hs)


def merge_permute_reshape(y):
    return y.permute(0, 2, 1, 3).reshape(y.size(0), y.size(2), -1)


def merge_cat(y):
    return torch.cat(y.unbind(dim=1), dim=-1)


def merge_flatten(y):
    return y.transpose(1, 2).flatten(2)


# --- feed-forward (06)
def ffn_lesson(n_embd):
    return nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd), nn.Dropout(0.1))


class NanoGPTMLP(nn.Module):  # nanoGPT's MLP, with its bias option
    def __init__(self, n_embd, bias=True, dropout=0.1):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class RasbtGELU(nn.Module):  # LLMs-from-scratch, chapter 4
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(torch.sqrt(torch.tensor(2.0 / torch.pi)) * (x + 0.044715 * torch.pow(x, 3))))


class RasbtFeedForward(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(emb_dim, 4 * emb_dim), RasbtGELU(), nn.Linear(4 * emb_dim, emb_dim))

    def forward(self, x):
        return self.layers(x)


class EinsumFFN(nn.Module):  # raw parameters used as x @ W
    def __init__(self, n):
        super().__init__()
        self.W_in = nn.Parameter(torch.randn(n, 4 * n) / n ** 0.5)
        self.b_in = nn.Parameter(0.1 * torch.randn(4 * n))
        self.W_out = nn.Parameter(torch.randn(4 * n, n) / (4 * n) ** 0.5)
        self.b_out = nn.Parameter(0.1 * torch.randn(n))

    def forward(self, x):
        h = torch.einsum("btc,ch->bth", x, self.W_in) + self.b_in
        return torch.einsum("bth,hc->btc", F.gelu(h), self.W_out) + self.b_out


class Conv1DFFN(nn.Module):  # GPT-2's Conv1D layout: weight (in, out), addmm
    def __init__(self, n):
        super().__init__()
        self.w_fc, self.b_fc = nn.Parameter(torch.randn(n, 4 * n) * 0.2), nn.Parameter(torch.randn(4 * n) * 0.1)
        self.w_proj, self.b_proj = nn.Parameter(torch.randn(4 * n, n) * 0.1), nn.Parameter(torch.randn(n) * 0.1)

    def forward(self, x):
        B, T, C = x.shape
        h = torch.addmm(self.b_fc, x.reshape(-1, C), self.w_fc)
        return torch.addmm(self.b_proj, F.gelu(h, approximate="tanh"), self.w_proj).view(B, T, C)


class InPlaceTanhFFN(nn.Module):  # lesson 06 exercise 2, written with in-place ops
    def __init__(self, n_embd):
        super().__init__()
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        h = self.fc(x)
        gate = torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h.pow(3)))
        gate.add_(1).mul_(0.5)
        return self.proj(h * gate)


def tanh_ffn(formula):
    """Lesson 06 exercise 2's class with ``formula(h)`` as its activation."""
    class TanhFFN(nn.Module):
        def __init__(self, n_embd):
            super().__init__()
            self.fc = nn.Linear(n_embd, 4 * n_embd)
            self.proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.proj(formula(self.fc(x)))
    return TanhFFN


GELU_TANH = tanh_ffn(lambda h: 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3))))


# --- block (07)
def block_two_lines(x, ln1, sa, ln2, ffwd):
    x = x + sa(ln1(x))
    return x + ffwd(ln2(x))


def block_in_place(x, ln1, sa, ln2, ffwd):  # changes the caller's x: named since issue 22
    x += sa(ln1(x))
    x += ffwd(ln2(x))
    return x


def block_clone_then_in_place(x, ln1, sa, ln2, ffwd):
    x = x.clone()
    x += sa(ln1(x))
    x += ffwd(ln2(x))
    return x


def block_walrus(x, ln1, sa, ln2, ffwd):
    return (h := x + sa(ln1(x))) + ffwd(ln2(h))


def block_loop(x, ln1, sa, ln2, ffwd):
    for norm, sublayer in ((ln1, sa), (ln2, ffwd)):
        x = torch.add(x, sublayer(norm(x)))
    return x


# --- LayerNorm (07)
def ln_by_hand(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def ln_rsqrt(x, weight, bias, eps=1e-5):
    xc = x - x.mean(-1, keepdim=True)
    return xc * torch.rsqrt(x.var(-1, keepdim=True, correction=0) + eps) * weight + bias


def ln_mean_of_squares(x, weight, bias, eps=1e-5):
    xc = x - x.mean(-1, keepdim=True)
    return torch.addcmul(bias, xc / (xc.pow(2).mean(-1, keepdim=True) + eps).sqrt(), weight)


def ln_float64(x, weight, bias, eps=1e-5):
    xd = x.double()
    y = (xd - xd.mean(-1, keepdim=True)) / (xd.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
    return (y * weight.double() + bias.double()).float()


# --- embeddings (01, 08)
def emb_lesson(idx, tok_table, pos_table):
    B, T = idx.shape
    return tok_table(idx) + pos_table(torch.arange(T, device=idx.device))


def emb_one_hot(idx, tok_table, pos_table):
    B, T = idx.shape
    tok_emb = F.one_hot(idx, tok_table.num_embeddings).float() @ tok_table.weight
    return tok_emb + F.one_hot(torch.arange(T), pos_table.num_embeddings).float() @ pos_table.weight


def emb_weight_indexing(idx, tok_table, pos_table):
    return tok_table.weight[idx] + pos_table.weight[: idx.shape[1]]


def emb_functional_in_place(idx, tok_table, pos_table):
    x = F.embedding(idx, tok_table.weight)
    x += F.embedding(torch.arange(idx.size(1)), pos_table.weight)
    return x


# --- tokenizer (01, 09): (encode, decode)
class OwnTokenizer:
    def __init__(self, text):
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}

    def encode(self, s):
        return [self.stoi[c] for c in s]

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)


TOKENIZERS = {
    "dicts": (lambda s: [STOI[c] for c in s], lambda ids: "".join(ITOS[i] for i in ids)),
    "class": (OwnTokenizer(TEXT).encode, OwnTokenizer(TEXT).decode),
    "list.index": (lambda s: [CHARS.index(c) for c in s], lambda ids: "".join(CHARS[i] for i in ids)),
    "tensor ids": (lambda s: torch.tensor([STOI[c] for c in s]), lambda ids: "".join(ITOS[int(i)] for i in ids)),
    "numpy ids": (lambda s: np.array([STOI[c] for c in s]), lambda ids: "".join(ITOS[int(i)] for i in ids)),
}


# --- the forward pass (08)
def forward_karpathy(model, idx):
    B, T = idx.shape
    tok_emb = model.token_embedding_table(idx)
    pos_emb = model.position_embedding_table(torch.arange(T, device=idx.device))
    x = model.blocks(tok_emb + pos_emb)
    return model.lm_head(model.ln_f(x))


def forward_loop(model, idx):
    x = model.token_embedding_table(idx) + model.position_embedding_table(torch.arange(idx.size(1)))
    for block in model.blocks:
        x = block(x)
    return model.lm_head(model.ln_f(x))


def forward_functional(model, idx):
    x = F.embedding(idx, model.token_embedding_table.weight) + model.position_embedding_table.weight[: idx.size(1)]
    x = model.ln_f(model.blocks(x))
    return F.linear(x, model.lm_head.weight, model.lm_head.bias)


def forward_in_place(model, idx):
    x = model.token_embedding_table(idx)
    x += model.position_embedding_table(torch.arange(idx.size(1)))
    return model.lm_head(model.ln_f(model.blocks(x)))


# --- the parameter count (08)
count_formula, count_loop = l08_gpt.formula, l08_gpt.accumulated  # the corpus's own (tests/learner_solutions)


def count_total(V, C, L, block_size):
    return V * C + block_size * C + L * (12 * C * C + 9 * C) + 2 * C + C * V + V


def count_numpy(V, C, L, block_size):
    return {k: np.int64(v) for k, v in count_formula(V, C, L, block_size).items()}


def count_with_torch_layers(V, C, L, block_size):
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    return {"token embedding": n(nn.Embedding(V, C)), "position embedding": n(nn.Embedding(block_size, C)),
            "attention": L * (n(nn.Linear(C, 3 * C, bias=False)) + n(nn.Linear(C, C, bias=False))),
            "feed-forward": L * (n(nn.Linear(C, 4 * C)) + n(nn.Linear(4 * C, C))),
            "layer norms": (2 * L + 1) * n(nn.LayerNorm(C)), "lm_head": n(nn.Linear(C, V))}


# --- loading the source model's weights (08)
load_strict, load_sizes_eval, load_copy_each, load_mmap = l08_gpt.strict, l08_gpt.sizes_then_eval, l08_gpt.copy_each, \
    l08_gpt.mmap


CORRECT = {  # check -> solutions, several styles each
    checks.check_attention_scores: [scores_karpathy, scores_rasbt, scores_einsum, scores_scale_q_first_float64,
                                    scores_baddbmm],
    checks.check_softmax_weights: [lambda s: F.softmax(s, dim=-1), softmax_stable_by_hand, softmax_logsumexp,
                                   softmax_method, nn.Softmax(dim=-1)],
    checks.check_causal_attention: [causal_karpathy, causal_rasbt, causal_einsum, causal_sdpa_is_causal,
                                    causal_sdpa_bool_mask, causal_sdpa_additive_inf],
    checks.check_split_heads: [split_view_transpose, split_reshape_permute, split_stack, split_unflatten],
    checks.check_merge_heads: [merge_contiguous_view, merge_permute_reshape, merge_cat, merge_flatten],
    checks.check_feed_forward: [ffn_lesson, NanoGPTMLP, lambda n: NanoGPTMLP(n, bias=False), RasbtFeedForward,
                                EinsumFFN, Conv1DFFN, InPlaceTanhFFN, GELU_TANH],
    checks.check_block: [block_two_lines, block_clone_then_in_place, block_walrus, block_loop],
    checks.check_layer_norm: [ln_by_hand, ln_rsqrt, ln_mean_of_squares, ln_float64],
    checks.check_embeddings: [emb_lesson, emb_one_hot, emb_weight_indexing, emb_functional_in_place],
    checks.check_gpt_forward: [forward_karpathy, forward_loop, forward_functional, forward_in_place],
    checks.check_parameter_count: [count_formula, count_loop, count_total, count_numpy, count_with_torch_layers],
    checks.check_load_source_weights: [load_strict, load_sizes_eval, load_copy_each, load_mmap],
    checks.check_effective_batch: [lambda m, a, w: m * a * w, lambda m, a, w: math.prod((m, a, w)),
                                   lambda m, a, w: np.int64(m) * a * w, lambda m, a, w: int(m * a) * w],
    checks.check_grad_accum_steps: [lambda b, m, w: b // (m * w), lambda b, m, w: int(b / (m * w)),
                                    lambda b, m, w: divmod(b, m * w)[0], lambda b, m, w: b // m // w],
    checks.check_allreduce_bytes: [lambda model: 4 * sum(p.numel() for p in model.parameters()),
                                   lambda model: sum(p.numel() * p.element_size() for p in model.parameters()),
                                   lambda model: model.num_parameters() * 4,
                                   lambda model: sum(4 * p.numel() for _, p in model.named_parameters())],
}
ALL_CHECKS = list(CORRECT) + [checks.check_tokenizer]
STYLES = [(check, i, solution) for check, solutions in CORRECT.items() for i, solution in enumerate(solutions)]


def _name(value) -> str:
    return getattr(value, "__name__", type(value).__name__)


@pytest.mark.parametrize("check, i, solution", STYLES, ids=[f"{c.__name__}-{i}-{_name(s)}" for c, i, s in STYLES])
def test_correct_solutions_in_every_style_pass(check, i, solution, capsys):
    result = check(solution)
    assert result.passed and result.attempted and bool(result) and result.diagnosis is None, result.message
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("check", list(CORRECT), ids=[c.__name__ for c in CORRECT])
def test_at_least_four_styles_per_check(check):
    assert len(CORRECT[check]) >= 4


@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_tokenizers_in_every_style_pass(name):
    encode, decode = TOKENIZERS[name]
    assert checks.check_tokenizer(encode, decode, TEXT).passed
    assert checks.check_tokenizer(encode, decode, TEXT, chars=CHARS).passed
    assert checks.check_tokenizer(encode, decode, TEXT, hidden=True).passed


def test_tokenizer_with_a_vocabulary_bigger_than_the_text():
    vocab = sorted(set(TEXT + "XYZ0123"))
    stoi = {c: i for i, c in enumerate(vocab)}
    encode, decode = (lambda s: [stoi[c] for c in s]), (lambda ids: "".join(vocab[i] for i in ids))
    assert checks.check_tokenizer(encode, decode, TEXT).passed
    assert checks.check_tokenizer(encode, decode, TEXT, chars="".join(vocab)).passed


@pytest.mark.parametrize("check, i, solution", STYLES, ids=[f"{c.__name__}-{i}-{_name(s)}" for c, i, s in STYLES])
def test_correct_solutions_pass_the_hidden_cases(check, i, solution):
    assert check(solution, hidden=True).passed


# ================================================================ issue 12: the false accepts, now refused
def ffn_gelu_after_projection(n):
    return nn.Sequential(nn.Linear(n, 4 * n), nn.Linear(4 * n, n), nn.GELU())


def ffn_gelu_before_first_linear(n):
    return nn.Sequential(nn.GELU(), nn.Linear(n, 4 * n), nn.Linear(4 * n, n))


class FFNSoftmax(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc, self.proj = nn.Linear(n, 4 * n), nn.Linear(4 * n, n)

    def forward(self, x):
        return self.proj(F.softmax(self.fc(x), dim=-1))


ffn_extra_hidden_layer, FFNWithResidual = l06_ffn.three_layers, l06_ffn.WithResidual


SQRT_2_PI = math.sqrt(2 / math.pi)


def encode_unsorted_set():
    """ids from list(set(text)), as a learner might write (made unsorted if the set happened to be sorted)."""
    chars = list(set(TEXT))
    if chars == sorted(chars):
        chars.reverse()
    stoi, itos = {c: i for i, c in enumerate(chars)}, dict(enumerate(chars))
    return (lambda s: [stoi[c] for c in s]), (lambda ids: "".join(itos[i] for i in ids))


FALSE_ACCEPTS = [  # (check, arguments, diagnosis): each was accepted before issue 12
    (checks.check_feed_forward, (ffn_gelu_after_projection,), checks.ACTIVATION_AFTER_PROJECTION),
    (checks.check_feed_forward, (ffn_gelu_before_first_linear,), checks.ACTIVATION_BEFORE_FIRST_LINEAR),
    (checks.check_feed_forward, (FFNSoftmax,), checks.SOFTMAX_ACTIVATION),
    (checks.check_feed_forward, (ffn_extra_hidden_layer,), checks.EXTRA_LAYER),
    (checks.check_feed_forward, (FFNWithResidual,), checks.RESIDUAL_INSIDE_FFN),
    (checks.check_feed_forward,
     (tanh_ffn(lambda h: 0.5 * h * (1 + torch.tanh(SQRT_2_PI * (h + 0.44715 * h ** 3)))),), checks.GELU_COEFFICIENT),
    (checks.check_feed_forward,
     (tanh_ffn(lambda h: 0.5 * h * (1 + torch.tanh(math.sqrt(math.pi / 2) * (h + 0.044715 * h ** 3)))),),
     checks.GELU_SQRT_CONSTANT),
    (checks.check_feed_forward, (tanh_ffn(lambda h: h * (1 + torch.tanh(SQRT_2_PI * (h + 0.044715 * h ** 3)))),),
     checks.GELU_MISSING_HALF),
    (checks.check_feed_forward, (tanh_ffn(lambda h: 1 + torch.tanh(SQRT_2_PI * (h + 0.044715 * h ** 3))),),
     checks.GELU_MISSING_H),  # "a missing 0.5 * h"
    (checks.check_feed_forward, (tanh_ffn(lambda h: 0.5 * (1 + torch.tanh(SQRT_2_PI * (h + 0.044715 * h ** 3)))),),
     checks.GELU_MISSING_H),
    (checks.check_feed_forward, (tanh_ffn(torch.tanh),), checks.PLAIN_TANH),
    (checks.check_tokenizer, (lambda s: [ord(c) for c in s], lambda ids: "".join(map(chr, ids)), TEXT), checks.ORD_IDS),
    (checks.check_tokenizer, (lambda s: [STOI[c] + 1 for c in s], lambda ids: "".join(ITOS[i - 1] for i in ids), TEXT),
     checks.ONE_BASED),
    (checks.check_tokenizer, (*encode_unsorted_set(), TEXT), checks.UNSORTED_VOCAB),
    (checks.check_softmax_weights, (lambda s: torch.exp(s) / torch.exp(s).sum(dim=-1, keepdim=True),),
     checks.SOFTMAX_OVERFLOW),
    (checks.check_softmax_weights, (lambda s: torch.exp(s.double()) / torch.exp(s.double()).sum(-1, keepdim=True),),
     checks.SOFTMAX_OVERFLOW),
    (checks.check_attention_scores, (lambda q, k: attention_scores(q, k),), checks.CALLED_LIBRARY),
    (checks.check_attention_scores, (lambda q, k: torch.complex(scores_karpathy(q, k), torch.ones(1)),),
     checks.COMPLEX_OUTPUT),
    (checks.check_causal_attention, (lambda q, k, v: causal_karpathy(q, k, v).to(torch.cfloat),),
     checks.COMPLEX_OUTPUT),
    (checks.check_softmax_weights, (lambda s: F.softmax(s, -1) + 0j,), checks.COMPLEX_OUTPUT),
    (checks.check_split_heads, (lambda x, n: split_view_transpose(x, n).long(),), checks.INTEGER_OUTPUT),
    (checks.check_causal_attention, (lambda q, k, v: causal_karpathy(q, k, v) > 0,), checks.BOOL_OUTPUT),
]


@pytest.mark.parametrize("check, args, diagnosis", FALSE_ACCEPTS,
                         ids=[f"{c.__name__}-{i}-{d}" for i, (c, _, d) in enumerate(FALSE_ACCEPTS)])
def test_former_false_accepts_fail_with_a_named_diagnosis(check, args, diagnosis, capsys):
    result = check(*args)
    assert not result.passed and result.attempted
    assert result.diagnosis == diagnosis, result.message
    assert result.message in capsys.readouterr().out


def test_tokenizer_with_chars_names_the_same_false_accepts():
    ords = checks.check_tokenizer(lambda s: [ord(c) for c in s], lambda ids: "".join(map(chr, ids)), TEXT, chars=CHARS)
    assert ords.diagnosis == checks.ORD_IDS
    one_based = checks.check_tokenizer(lambda s: [STOI[c] + 1 for c in s],
                                       lambda ids: "".join(ITOS[i - 1] for i in ids), TEXT, chars=CHARS)
    assert one_based.diagnosis == checks.ONE_BASED
    assert checks.check_tokenizer(*encode_unsorted_set(), TEXT, chars=CHARS).diagnosis == checks.UNSORTED_VOCAB


def test_one_based_ids_with_a_dict_are_named():
    stoi = {c: i for i, c in enumerate(CHARS, start=1)}
    itos = {i: c for c, i in stoi.items()}
    result = checks.check_tokenizer(lambda s: [stoi[c] for c in s], lambda ids: "".join(itos[i] for i in ids), TEXT)
    assert result.diagnosis == checks.ONE_BASED and "enumerate(chars)" in result.message


def test_relu_gets_a_named_failure_that_says_why():
    result = checks.check_feed_forward(lambda n: nn.Sequential(nn.Linear(n, 4 * n), nn.ReLU(), nn.Linear(4 * n, n)))
    assert result.diagnosis == checks.RELU_NOT_GELU
    assert "2017 Transformer" in result.message and "GELU" in result.message


def test_gelu_mode_tanh_and_exact():
    assert checks.check_feed_forward(GELU_TANH, gelu="tanh").passed
    assert checks.check_feed_forward(ffn_lesson, gelu="exact").passed
    assert checks.check_feed_forward(ffn_lesson, gelu="tanh").diagnosis == checks.EXACT_NOT_TANH
    assert checks.check_feed_forward(GELU_TANH, gelu="exact").diagnosis == checks.TANH_NOT_EXACT
    with pytest.raises(ValueError, match="gelu='fast' must be one of"):
        checks.check_feed_forward(ffn_lesson, gelu="fast")


# ================================================================ issue 12: named diagnoses for caught bugs
def head_with_mask(mask_of_T, fill=float("-inf")):
    def head(q, k, v):
        T = q.size(1)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        return F.softmax(s.masked_fill(mask_of_T(T) == 0, fill), dim=-1) @ v
    return head


def block_half_fixed(x, ln1, sa, ln2, ffwd):
    x = x + sa(ln1(x))
    return ln2(x + ffwd(x))


def block_ln_on_stream(x, ln1, sa, ln2, ffwd):
    x = ln1(x)
    x = x + sa(x)
    x = ln2(x)
    return x + ffwd(x)


def block_ffn_reads_old_x(x, ln1, sa, ln2, ffwd):
    h = x + sa(ln1(x))
    return h + ffwd(ln2(x))


def emb_positions_from_one(idx, tok_table, pos_table):
    T = idx.shape[1]
    return tok_table(idx) + pos_table(torch.arange(1, T + 1))


def emb_one_hot_without_num_classes(idx, tok_table, pos_table):
    tok_emb = F.one_hot(idx).float() @ tok_table.weight
    return tok_emb + F.one_hot(torch.arange(idx.shape[1])).float() @ pos_table.weight


NAMED = [  # (check, solution, diagnosis): caught before, but only with the generic message
    (checks.check_causal_attention, head_with_mask(lambda T: torch.tril(torch.ones(T, T), diagonal=1)),
     checks.MASK_ONE_OFF),
    (checks.check_causal_attention, head_with_mask(lambda T: torch.tril(torch.ones(T, T), diagonal=-1)),
     checks.MASK_ONE_OFF),
    (checks.check_causal_attention,
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tril(torch.ones(q.size(1), q.size(1)))),
     checks.FLOAT_MASK_ADDED),
    (checks.check_causal_attention,
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=causal_tril(q.size(1)) == 0),
     checks.BOOL_MASK_INVERTED),
    (checks.check_block, block_half_fixed, checks.HALF_PRE_LN),
    (checks.check_block, block_ln_on_stream, checks.LN_ON_STREAM),
    (checks.check_block, block_ffn_reads_old_x, checks.FFN_READS_OLD_X),
    (checks.check_attention_scores, lambda q, k: k @ q.transpose(-2, -1) / math.sqrt(q.size(-1)), checks.KQ_TRANSPOSED),
    (checks.check_causal_attention,
     lambda q, k, v: F.softmax((k @ q.mT / math.sqrt(q.size(-1))).masked_fill(causal_tril(q.size(1)) == 0,
                                                                              float("-inf")), -1) @ v,
     checks.KQ_TRANSPOSED),
    (checks.check_embeddings, emb_positions_from_one, checks.POSITIONS_OFF_BY_ONE),
    (checks.check_embeddings, emb_one_hot_without_num_classes, checks.ONE_HOT_NO_NUM_CLASSES),
]


@pytest.mark.parametrize("check, solution, diagnosis", NAMED,
                         ids=[f"{c.__name__}-{i}-{d}" for i, (c, _, d) in enumerate(NAMED)])
def test_each_issue_12_bug_has_its_own_label_and_a_hint(check, solution, diagnosis):
    result = check(solution)
    assert result.diagnosis == diagnosis, result.message
    assert "Likely bug:" in result.message


def test_one_hot_hint_names_num_classes():
    result = checks.check_embeddings(emb_one_hot_without_num_classes)
    assert "num_classes" in result.message and "tok_table.num_embeddings" in result.message


def test_sdpa_float_mask_message_says_added_not_hidden():
    result = checks.check_causal_attention(NAMED[2][1])
    assert "adds a float attn_mask" in result.message and "tril.bool()" in result.message


# --- two bugs at once: the first one in the code is named, the other one too
TWO_BUGS = [
    (checks.check_attention_scores, lambda q, k: k @ q.transpose(-2, -1), checks.KQ_TRANSPOSED, "did not scale"),
    (checks.check_causal_attention,
     lambda q, k, v: F.softmax((k @ q.mT / math.sqrt(q.size(-1))).masked_fill(causal_tril(q.size(1)) == 0, 0.0),
                               -1) @ v,
     checks.KQ_TRANSPOSED, "filled the future scores with 0"),
    (checks.check_causal_attention,
     lambda q, k, v: F.softmax((q @ k.mT / math.sqrt(N_EMBD)).masked_fill(causal_tril(q.size(1)) == 0,
                                                                          float("-inf")), dim=-2) @ v,
     checks.SCALED_BY_N_EMBD, "dim=-1"),
    (checks.check_causal_attention,
     lambda q, k, v: F.softmax(q @ k.mT, -1).masked_fill(causal_tril(q.size(1)) == 0, 0.0) @ v,
     checks.NO_SCALING, "masked the weights after the softmax"),
    (checks.check_block, lambda x, ln1, sa, ln2, ffwd: (lambda h: h + ffwd(ln1(h)))(ln2(x + sa(x))),
     checks.HALF_PRE_LN, "ln1 belongs before the attention"),
    (checks.check_block, lambda x, ln1, sa, ln2, ffwd: sa(ln1(x)) + ffwd(ln2(x)), checks.MISSING_RESIDUAL,
     "feed-forward reads the block's input"),
    (checks.check_layer_norm, lambda x, w, b, eps=1e-5: (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps)
     * w + b, checks.UNBIASED_VARIANCE, "eps is outside the square root"),
]


@pytest.mark.parametrize("check, solution, first, second_hint", TWO_BUGS,
                         ids=[f"{c.__name__}-{i}" for i, (c, _, _, _) in enumerate(TWO_BUGS)])
def test_two_bugs_name_the_first_and_mention_the_second(check, solution, first, second_hint):
    result = check(solution)
    assert result.diagnosis == first, result.message
    assert "Then also:" in result.message and second_hint in result.message


# ================================================================ every other named bug
def causal(q, k, v, *, d=None, mask="before", dim=-1, transpose=True):
    """A learner's head with one knob per classic mistake."""
    scores = (q @ k.transpose(-2, -1)) if transpose else (q @ k)
    scores = scores / math.sqrt(q.size(-1) if d is None else d)
    tril = causal_tril(q.size(1))
    if mask == "before":
        scores = scores.masked_fill(tril == 0, float("-inf"))
    elif mask == "zero":
        scores = scores.masked_fill(tril == 0, 0)
    elif mask == "triu":
        scores = scores.masked_fill(torch.triu(torch.ones_like(tril)) == 0, float("-inf"))
    weights = torch.softmax(scores, dim=dim)
    if mask == "after":
        weights = weights * tril
    return weights @ v


def block_post_ln(x, ln1, sa, ln2, ffwd):
    x = ln1(x + sa(x))
    return ln2(x + ffwd(x))


ln_variant = l07_layer_norm.ln  # a learner's LayerNorm with one knob per classic mistake


def forward_with(**bugs):
    def fn(model, idx):
        T = idx.size(1)
        pos = model.position_embedding_table(torch.arange(T))
        x = model.token_embedding_table(idx) + (0 if bugs.get("no_pos") else pos)
        x = x if bugs.get("no_blocks") else (model.blocks[0](x) if bugs.get("one_block") else model.blocks(x))
        x = x if bugs.get("no_ln_f") else model.ln_f(x)
        logits = model.lm_head(x)
        if bugs.get("flatten"):
            return logits.view(-1, logits.size(-1))
        if bugs.get("last"):
            return logits[:, -1, :]
        return F.softmax(logits, dim=-1) if bugs.get("softmax") else logits
    return fn


def count_with(**changes):
    def fn(V, C, L, block_size):
        parts = count_formula(V, C, L, block_size)
        parts.update({k: v(V, C, L, block_size) for k, v in changes.items()})
        return parts
    return fn


BUGS = [  # (check, buggy solution, expected diagnosis)
    (checks.check_attention_scores, lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(N_EMBD), checks.SCALED_BY_N_EMBD),
    (checks.check_attention_scores, lambda q, k: q @ k.transpose(-2, -1), checks.NO_SCALING),
    (checks.check_attention_scores, lambda q, k: q @ k / math.sqrt(q.size(-1)), checks.MISSING_TRANSPOSE),
    (checks.check_attention_scores, lambda q, k: q @ k.transpose(-2, -1) / q.size(-1), checks.SCALED_BY_HEAD_SIZE),
    (checks.check_attention_scores, lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.size(1)), checks.WRONG_SCALING),
    (checks.check_attention_scores, lambda q, k: q.transpose(-2, -1) @ k / math.sqrt(q.size(-1)),
     checks.MISSING_TRANSPOSE),
    (checks.check_attention_scores, lambda q, k: q @ k.transpose(-2, -1) * math.sqrt(q.size(-1)), checks.WRONG_SCALING),
    (checks.check_softmax_weights, lambda s: F.softmax(s, dim=-2), checks.SOFTMAX_WRONG_DIM),
    (checks.check_softmax_weights, lambda s: torch.softmax(s, dim=0), checks.SOFTMAX_WRONG_DIM),
    (checks.check_softmax_weights, lambda s: softmax_shifted_by(s, s.max()), checks.GLOBAL_MAX),
    (checks.check_softmax_weights, lambda s: softmax_shifted_by(s, s.amax(dim=-2, keepdim=True)),
     checks.MAX_WRONG_DIM),
    (checks.check_softmax_weights, lambda s: F.log_softmax(s, dim=-1), checks.LOG_SOFTMAX),
    (checks.check_softmax_weights, lambda s: torch.exp(s - s.amax(-1, keepdim=True)), checks.NOT_NORMALISED),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, mask="after"), checks.MASK_AFTER_SOFTMAX),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, mask="zero"), checks.MASK_WITH_ZERO),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, mask="none"), checks.NO_MASK),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, d=N_EMBD), checks.SCALED_BY_N_EMBD),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, d=128), checks.SCALED_BY_N_EMBD),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, d=1), checks.NO_SCALING),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, dim=-2), checks.SOFTMAX_WRONG_DIM),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, transpose=False), checks.MISSING_TRANSPOSE),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, d=q.size(-1) ** 2), checks.SCALED_BY_HEAD_SIZE),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, mask="triu"), checks.MASK_WRONG_TRIANGLE),
    (checks.check_causal_attention, lambda q, k, v: F.softmax(
        (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(causal_tril(q.size(1)) == 0, float("-inf")), -1) @ k,
     checks.WEIGHTS_NOT_ON_V),
    (checks.check_causal_attention, lambda q, k, v: causal(q, k, v, d=q.size(1)), checks.WRONG_SCALING),
    (checks.check_split_heads, lambda x, n: x.view(x.size(0), n, x.size(1), -1), checks.MISSING_TRANSPOSE),
    (checks.check_split_heads, lambda x, n: x.view(x.size(0), x.size(1), n, -1), checks.MISSING_TRANSPOSE),
    (checks.check_split_heads, lambda x, n: x.view(x.size(0), x.size(1), -1, n).permute(0, 3, 1, 2),
     checks.SPLIT_WRONG_ORDER),
    (checks.check_merge_heads, lambda y: y.reshape(y.size(0), y.size(2), -1), checks.MERGE_WITHOUT_TRANSPOSE),
    (checks.check_merge_heads, lambda y: y.permute(0, 2, 3, 1).reshape(y.size(0), y.size(2), -1),
     checks.MERGE_WRONG_ORDER),
    (checks.check_feed_forward, lambda n: nn.Sequential(nn.Linear(n, n), nn.GELU(), nn.Linear(n, n)),
     checks.NO_EXPANSION),
    (checks.check_feed_forward, lambda n: nn.Sequential(nn.Linear(n, 4 * n), nn.Linear(4 * n, n)),
     checks.NO_NONLINEARITY),
    (checks.check_feed_forward, lambda n: nn.Sequential(nn.Linear(n, n), nn.Linear(n, n)),
     f"{checks.NO_EXPANSION}; {checks.NO_NONLINEARITY}"),
    (checks.check_feed_forward, lambda n: nn.Sequential(nn.Linear(n, 4 * n), nn.SiLU(), nn.Linear(4 * n, n)),
     checks.OTHER_ACTIVATION),
    (checks.check_feed_forward, tanh_ffn(lambda h: 0.5 * h * (1 + torch.tanh(SQRT_2_PI * h))),
     checks.GELU_MISSING_CUBIC),
    (checks.check_feed_forward, lambda n: nn.Sequential(nn.Linear(n, 4 * n), nn.GELU()), checks.WRONG_SHAPE),
    (checks.check_block, block_post_ln, checks.POST_LN),
    (checks.check_block, lambda x, ln1, sa, ln2, ffwd: ffwd(ln2(sa(ln1(x)))), checks.MISSING_RESIDUAL),
    (checks.check_block, lambda x, ln1, sa, ln2, ffwd: ffwd(ln2(x + sa(ln1(x)))), checks.MISSING_RESIDUAL),
    (checks.check_block, lambda x, ln1, sa, ln2, ffwd: (lambda h: h + ffwd(ln2(h)))(sa(ln1(x))),
     checks.MISSING_RESIDUAL),
    (checks.check_block, lambda x, ln1, sa, ln2, ffwd: (lambda h: h + ffwd(ln1(h)))(x + sa(ln2(x))),
     checks.LAYER_NORMS_SWAPPED),
    (checks.check_block, lambda x, ln1, sa, ln2, ffwd: (lambda h: h + ffwd(h))(x + sa(x)), checks.NO_LAYER_NORM),
    (checks.check_layer_norm, ln_variant(unbiased=True), checks.UNBIASED_VARIANCE),
    (checks.check_layer_norm, ln_variant(eps_outside=True), checks.EPS_OUTSIDE_SQRT),
    (checks.check_layer_norm, ln_variant(no_eps=True), checks.EPS_MISSING),
    (checks.check_layer_norm, ln_variant(fixed_eps=True), checks.EPS_IGNORED),
    (checks.check_layer_norm, ln_variant(dim=1), checks.LN_WRONG_DIM),
    (checks.check_layer_norm, ln_variant(no_mean=True), checks.NO_MEAN_SUBTRACTION),
    (checks.check_layer_norm, ln_variant(no_gain=True), checks.NO_GAIN),
    (checks.check_layer_norm, ln_variant(no_bias=True), checks.NO_BIAS),
    (checks.check_layer_norm, ln_variant(swap=True), checks.GAIN_BIAS_SWAPPED),
    (checks.check_layer_norm, lambda x, w, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], w, b, eps),
     checks.CALLED_LIBRARY),
    (checks.check_layer_norm, lambda x, w, b, eps=1e-5: torch.layer_norm(x, x.shape[-1:], w, b, eps),
     checks.CALLED_LIBRARY),
    (checks.check_embeddings, lambda i, t, p: p(torch.arange(i.shape[1])).repeat(i.shape[0], 1, 1),
     checks.MISSING_TOKEN_EMBEDDING),
    (checks.check_embeddings, lambda i, t, p: t(i) * p(torch.arange(i.shape[1])), checks.EMBEDDINGS_NOT_ADDED),
    (checks.check_embeddings, lambda i, t, p: t(i), checks.MISSING_POSITION_EMBEDDING),
    (checks.check_embeddings, lambda i, t, p: t(i) + p(i), checks.POSITIONS_FROM_TOKEN_IDS),
    (checks.check_embeddings,
     lambda i, t, p: torch.cat([t(i), p(torch.arange(i.shape[1])).expand(i.shape[0], -1, -1)], dim=-1),
     checks.EMBEDDINGS_NOT_ADDED),
    (checks.check_gpt_forward, forward_with(no_ln_f=True), checks.MISSING_FINAL_LN),
    (checks.check_gpt_forward, forward_with(no_pos=True), checks.MISSING_POSITION_EMBEDDING),
    (checks.check_gpt_forward, forward_with(no_blocks=True), checks.BLOCKS_SKIPPED),
    (checks.check_gpt_forward, forward_with(one_block=True), checks.ONE_BLOCK_ONLY),
    (checks.check_gpt_forward, forward_with(flatten=True), checks.LOGITS_FLATTENED),
    (checks.check_gpt_forward, forward_with(last=True), checks.LAST_POSITION_ONLY),
    (checks.check_gpt_forward, forward_with(softmax=True), checks.PROBABILITIES_NOT_LOGITS),
    (checks.check_gpt_forward, lambda m, idx: m.lm_head(m.blocks(m.ln_f(
        m.token_embedding_table(idx) + m.position_embedding_table(torch.arange(idx.size(1)))))),
     checks.LN_F_BEFORE_BLOCKS),
    (checks.check_gpt_forward, lambda m, idx: m(idx)[0], checks.CALLED_LIBRARY),
    (checks.check_gpt_forward, lambda m, idx: m(idx), checks.CALLED_LIBRARY),
    (checks.check_parameter_count, count_with(attention=lambda V, C, L, bs: L * (4 * C * C + 4 * C)),
     checks.ATTENTION_BIASES),
    (checks.check_parameter_count, count_with(attention=lambda V, C, L, bs: L * 3 * C * C),
     checks.NO_OUTPUT_PROJECTION),
    (checks.check_parameter_count, count_with(attention=lambda V, C, L, bs: L * (4 * C * C + bs * bs)),
     checks.COUNTED_TRIL),
    (checks.check_parameter_count, count_with(**{"feed-forward": lambda V, C, L, bs: L * 8 * C * C}),
     checks.FFN_BIASES_MISSING),
    (checks.check_parameter_count, count_with(**{"layer norms": lambda V, C, L, bs: L * 2 * C + C}),
     checks.LN_BIAS_MISSING),
    (checks.check_parameter_count, count_with(**{"layer norms": lambda V, C, L, bs: L * 4 * C}), checks.LN_F_MISSING),
    (checks.check_parameter_count, count_with(**{"layer norms": lambda V, C, L, bs: L * 2 * C + 2 * C}),
     checks.ONE_LN_PER_BLOCK),
    (checks.check_parameter_count, count_with(lm_head=lambda V, C, L, bs: C * V), checks.LM_HEAD_BIAS_MISSING),
    (checks.check_parameter_count, count_with(lm_head=lambda V, C, L, bs: V), checks.WEIGHT_TYING),
    (checks.check_parameter_count, count_with(attention=lambda V, C, L, bs: 4 * C * C), checks.NOT_TIMES_N_LAYER),
    (checks.check_parameter_count, count_with(**{"feed-forward": lambda V, C, L, bs: L * (2 * C * C + 2 * C)}),
     checks.NO_EXPANSION),
    (checks.check_parameter_count, lambda V, C, L, bs: count_total(V, C, L, bs) - V, checks.LM_HEAD_BIAS_MISSING),
    (checks.check_parameter_count, lambda V, C, L, bs: count_total(V, C, L, bs) + L * bs * bs, checks.COUNTED_TRIL),
    (checks.check_parameter_count, lambda V, C, L, bs: {**count_formula(V, C, L, bs), "ffn": 0}, checks.WRONG_KEYS),
    (checks.check_parameter_count, lambda V, C, L, bs: float(count_total(V, C, L, bs)), checks.FLOAT_NOT_INT),
    (checks.check_parameter_count, lambda V, C, L, bs: count_parameters_by_part(GPT(V, C, 1, L, bs)),
     checks.CALLED_LIBRARY),
    (checks.check_parameter_count, lambda V, C, L, bs: GPT(V, C, 1, L, bs).num_parameters(), checks.CALLED_LIBRARY),
]


def _bug_id(check, i, diagnosis):
    return f"{check.__name__}-{i}-{diagnosis}"


@pytest.mark.parametrize("check, buggy, diagnosis", BUGS, ids=[_bug_id(c, i, d) for i, (c, _, d) in enumerate(BUGS)])
def test_names_each_bug(check, buggy, diagnosis, capsys):
    result = check(buggy)
    assert not result.passed and not bool(result) and result.attempted
    assert result.diagnosis == diagnosis, result.message
    out = capsys.readouterr().out
    assert result.message in out  # what it returns is what it printed


def _load_then(fn):
    def load(path, config):
        model = GPT(config)
        model.load_state_dict(torch.load(path, weights_only=True))
        return fn(model)
    return load


LOAD_BUGS = [
    (lambda path, config: GPT(config), checks.WEIGHTS_NOT_LOADED),
    (lambda path, config: GPT(config).load_state_dict(torch.load(path, weights_only=True)), checks.WRONG_TYPE),
    (_load_then(lambda m: (m, "loaded")), checks.WRONG_TYPE),
    (_load_then(lambda m: nn.Sequential(m)), checks.NOT_GPT),
    (_load_then(lambda m: m.token_embedding_table.weight.data.zero_() is None or m), checks.WEIGHTS_NOT_LOADED),
    (lambda path, config: GPT(1000, 64, 4, 3, 128), checks.CONFIG_CHANGED),
    (lambda path, config: GPT(config.vocab_size, config.n_embd, config.n_head, config.n_layer, config.block_size,
                              causal=False), checks.CONFIG_CHANGED),
]


@pytest.mark.parametrize("buggy, diagnosis", LOAD_BUGS, ids=[f"{i}-{d}" for i, (_, d) in enumerate(LOAD_BUGS)])
def test_load_source_weights_names_each_bug(buggy, diagnosis):
    assert checks.check_load_source_weights(buggy).diagnosis == diagnosis


def test_load_source_weights_refuses_the_source_class():
    from gpt_lesson import reference

    def load_into_source(path, config):
        model = reference.GPT(config.vocab_size, config.n_embd, config.n_head, config.n_layer, config.block_size)
        model.load_state_dict(torch.load(path, weights_only=True))
        return model

    assert checks.check_load_source_weights(load_into_source).diagnosis == checks.SOURCE_CLASS


def test_load_source_weights_with_the_wrong_sizes_gets_a_hint():
    def load_fixed_size(path, config):
        model = GPT(50, 16, 2, 2, 8)
        model.load_state_dict(torch.load(path, weights_only=True))
        return model

    result = checks.check_load_source_weights(load_fixed_size)
    assert result.diagnosis == checks.RAISED and "GPT(config)" in result.message


def test_load_source_weights_leaves_the_models_mode_alone():
    kept = []

    def load(path, config):
        kept.append(load_strict(path, config).train())
        return kept[-1]

    assert checks.check_load_source_weights(load).passed
    assert all(m.training for m in kept)


# ================================================================ messages
def test_message_says_expected_and_received_and_the_numbers():
    result = checks.check_attention_scores(lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(N_EMBD))
    assert "expected:" in result.message and "got:" in result.message
    assert "sqrt(64)" in result.message and "sqrt(6)" in result.message  # the learner's n_embd and the head size


def test_wrong_shape_names_both_shapes():
    result = checks.check_attention_scores(lambda q, k: (q @ k.transpose(-2, -1))[:, :, :2])
    assert result.diagnosis == checks.WRONG_SHAPE
    assert "(2, 6, 6)" in result.message and "(2, 6, 2)" in result.message


def test_nan_output_is_reported():
    assert checks.check_softmax_weights(lambda s: torch.full_like(s, float("nan"))).diagnosis == checks.NON_FINITE


def test_masking_after_softmax_with_inf_gives_nan_and_is_named():
    def after_inf(q, k, v):
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
        return w.masked_fill(causal_tril(q.size(1)) == 0, float("-inf")) @ v

    assert checks.check_causal_attention(after_inf).diagnosis == checks.MASK_AFTER_SOFTMAX


def test_shape_dependent_bug_is_caught_on_the_second_input():
    result = checks.check_attention_scores(lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.size(1)))
    assert "On q and k of shape (3, 5, 8)" in result.message


def test_non_tensor_output_is_reported():
    result = checks.check_split_heads(lambda x, n: x.numpy())
    assert result.diagnosis == checks.WRONG_TYPE and "ndarray" in result.message


def test_view_after_transpose_gets_the_contiguous_hint():
    result = checks.check_merge_heads(lambda y: y.transpose(1, 2).view(y.size(0), y.size(2), -1))
    assert result.diagnosis == checks.RAISED and ".contiguous()" in result.message


def test_causal_head_with_a_fixed_size_mask_gets_a_hint():
    tril = torch.tril(torch.ones(8, 8))  # a learner's global mask for T=8

    def fixed_mask(q, k, v):
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(tril == 0, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    result = checks.check_causal_attention(fixed_mask)
    assert result.diagnosis == checks.RAISED and "tril[:T, :T]" in result.message


def test_sdpa_with_both_a_mask_and_is_causal_gets_a_hint():
    result = checks.check_causal_attention(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=causal_tril(q.size(1)).bool(), is_causal=True))
    assert result.diagnosis == checks.RAISED and "not both" in result.message


def test_unknown_bug_gets_wrong_values_with_the_largest_difference():
    result = checks.check_split_heads(lambda x, n: split_view_transpose(x, n) + 0.01)
    assert result.diagnosis == checks.WRONG_VALUES and "largest difference is 0.01" in result.message


def test_a_right_result_changed_afterwards_is_pointed_at():
    result = checks.check_softmax_weights(lambda s: F.softmax(s, dim=-1) + 0.01)
    assert result.diagnosis == checks.STEP_DIFFERS and "largest difference is 0.01" in result.message
    assert "At one point your function had the right result" in result.message


def test_embeddings_with_the_whole_position_table_gets_a_hint():
    result = checks.check_embeddings(lambda idx, tok, pos: tok(idx) + pos.weight)
    assert result.diagnosis == checks.RAISED and "torch.arange(T)" in result.message


def test_learner_input_mutation_does_not_affect_the_check():
    def in_place(q, k, v):
        q.mul_(0)  # destroys the caller's q if the check did not copy it
        return causal_karpathy(q, k, v)

    assert not checks.check_causal_attention(in_place).passed
    assert checks.check_causal_attention(causal_karpathy).passed


# ================================================================ the FFN's structure and robustness (issue 13)
def test_ffn_mixing_positions_is_rejected():
    class Mixer(nn.Module):
        def __init__(self, n_embd):
            super().__init__()
            self.net = ffn_lesson(n_embd)

        def forward(self, x):
            return self.net(x.cumsum(dim=1))

    assert checks.check_feed_forward(Mixer).diagnosis == checks.NOT_POSITION_WISE


def test_ffn_with_a_layer_norm_inside_names_the_extra_parameters():
    class WithNorm(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.ln = nn.LayerNorm(n)
            self.net = nn.Sequential(nn.Linear(n, 4 * n), nn.GELU(), nn.Linear(4 * n, n))

        def forward(self, x):
            return self.net(self.ln(x))

    result = checks.check_feed_forward(WithNorm)
    assert result.diagnosis == checks.UNEXPECTED_PARAMETERS and "LayerNorm belongs to the block" in result.message


def test_ffn_with_only_one_linear_layer():
    class OneLayer(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.fc = nn.Linear(n, 4 * n)

        def forward(self, x):
            return F.gelu(self.fc(x))[..., : x.size(-1)]

    assert checks.check_feed_forward(OneLayer).diagnosis.startswith(checks.MISSING_LAYER)


def test_ffn_with_dropout_always_on_is_named():
    class AlwaysDrops(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.fc, self.proj = nn.Linear(n, 4 * n), nn.Linear(4 * n, n)

        def forward(self, x):
            return F.dropout(self.proj(F.gelu(self.fc(x))), 0.5)  # training=True by default

    assert checks.check_feed_forward(AlwaysDrops).diagnosis == checks.NOT_DETERMINISTIC


def test_ffn_module_that_raises_on_its_second_call_is_reported_not_raised():
    class SecondCallFails(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.net, self.calls = ffn_lesson(n), 0

        def forward(self, x):
            self.calls += 1
            if self.calls == 2:
                raise RuntimeError("second call")
            return self.net(x)

    result = checks.check_feed_forward(SecondCallFails)
    assert result.diagnosis == checks.RAISED and "second call" in result.message


def test_ffn_module_that_raises_in_the_linearity_probe_is_reported_not_raised():
    class FailsLater(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.net, self.calls = nn.Sequential(nn.Linear(n, n), nn.Linear(n, n)), 0

        def forward(self, x):
            self.calls += 1
            if self.calls > 2:
                raise RuntimeError("later call")
            return self.net(x)

    result = checks.check_feed_forward(FailsLater)
    assert result.diagnosis == checks.NO_EXPANSION


def test_ffn_instance_instead_of_class_is_named():
    result = checks.check_feed_forward(GELU_TANH(8))
    assert result.diagnosis == checks.INSTANCE_NOT_FACTORY and "check_feed_forward(TanhFFN)" in result.message


def test_ffn_factory_must_return_a_module():
    assert checks.check_feed_forward(lambda n: torch.zeros(n)).diagnosis == checks.WRONG_TYPE


def test_ffn_with_a_global_size_gets_a_hint():
    result = checks.check_feed_forward(lambda n: ffn_lesson(16))
    assert result.diagnosis == checks.RAISED and "n_embd argument" in result.message


def test_ffn_stub_class_is_not_attempted():
    class Stub(nn.Module):
        def __init__(self, n_embd):
            super().__init__()
            raise NotImplementedError

    class StubForward(nn.Module):
        def forward(self, x):
            raise NotImplementedError

    for stub in (Stub, lambda n: StubForward()):
        result = checks.check_feed_forward(stub)
        assert not result.attempted and result.diagnosis == checks.NOT_ATTEMPTED


def test_ffn_exact_and_tanh_gelu_are_told_apart_on_every_case():
    # The two GELUs differ by ~1e-4 after the projection: more than the checks' tolerance.
    assert checks.check_feed_forward(ffn_lesson, gelu="tanh", hidden=True).diagnosis == checks.EXACT_NOT_TANH
    assert checks.check_feed_forward(GELU_TANH, gelu="exact", hidden=True).diagnosis == checks.TANH_NOT_EXACT


# ================================================================ calling the library's own function
LIBRARY_CALLS = [
    (checks.check_attention_scores, lambda q, k: attention_scores(q, k)),
    (checks.check_attention_scores, attention_scores),
    (checks.check_attention_scores, lambda q, k: naive_attention(q, k, k)[1]),
    (checks.check_softmax_weights, attention_weights),
    (checks.check_causal_attention, lambda q, k, v: naive_attention(q, k, v, causal_tril(q.size(1)))[0]),
    (checks.check_split_heads, split_heads),
    (checks.check_merge_heads, lambda y: merge_heads(y)),
    (checks.check_feed_forward, FeedForward),
    (checks.check_feed_forward, lambda n: FeedForward(n, dropout=0.0)),
    (checks.check_block,
     lambda x, ln1, sa, ln2, ffwd: Block.forward(SimpleNamespace(ln1=ln1, sa=sa, ln2=ln2, ffwd=ffwd), x)),
    (checks.check_effective_batch, dist_lib.effective_batch),
    (checks.check_grad_accum_steps, dist_lib.grad_accum_steps_for),
    (checks.check_allreduce_bytes, lambda model: dist_lib.allreduce_bytes(model)),
]


@pytest.mark.parametrize("check, solution", LIBRARY_CALLS,
                         ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(LIBRARY_CALLS)])
def test_calling_the_library_function_is_refused(check, solution):
    result = check(solution)
    assert result.diagnosis == checks.CALLED_LIBRARY, result.message
    assert "gpt_lesson's own function" in result.message and "write the steps yourself" in result.message


def test_calling_char_tokenizer_is_refused():
    tok = CharTokenizer(TEXT)
    result = checks.check_tokenizer(tok.encode, tok.decode, TEXT)
    assert result.diagnosis == checks.CALLED_LIBRARY


def test_composing_the_lessons_building_blocks_is_allowed():
    from gpt_lesson.attention import apply_mask

    def composed(q, k, v):  # lesson 02's steps used inside lesson 03's head
        return attention_weights(apply_mask(attention_scores(q, k), causal_tril(q.size(1)))) @ v

    assert checks.check_causal_attention(composed).passed


def test_the_watch_leaves_no_profiler_behind_and_tolerates_one():
    import sys

    checks.check_attention_scores(scores_karpathy)
    assert sys.getprofile() is None
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        result = checks.check_attention_scores(scores_karpathy)
    finally:
        profiler.disable()
    assert result.passed  # a running profiler is left alone (and the check still works)


def test_a_python_profiler_already_running_is_chained_and_restored():
    import sys

    events = []

    def outer(frame, event, arg):
        events.append(event)

    sys.setprofile(outer)
    try:
        refused = checks.check_attention_scores(lambda q, k: attention_scores(q, k))
        assert sys.getprofile() is outer
    finally:
        sys.setprofile(None)
    assert refused.diagnosis == checks.CALLED_LIBRARY
    assert "call" in events and "c_call" in events  # it kept seeing the learner's calls


# ================================================================ stubs, crashes, bad arguments
def stub_raises(*args):
    raise NotImplementedError


def stub_returns_none(*args):
    return None


def crashes(*args):
    raise ZeroDivisionError("oops in the learner's code")


@pytest.mark.parametrize("stub", [stub_raises, stub_returns_none])
@pytest.mark.parametrize("check", list(CORRECT), ids=[c.__name__ for c in CORRECT])
def test_untouched_stub_is_not_attempted(check, stub, capsys):
    result = check(stub)
    assert not result.attempted and not result.passed
    assert result.diagnosis == checks.NOT_ATTEMPTED
    out = capsys.readouterr().out
    assert out == (f"⏳ {check.__name__}: not attempted yet. Your function still raises NotImplementedError or "
                   "returns None (a missing `return`?): fill it in and run this cell again.\n")


@pytest.mark.parametrize("check", list(CORRECT), ids=[c.__name__ for c in CORRECT])
def test_learner_exception_is_reported_not_raised(check):
    result = check(crashes)
    assert result.attempted and not result.passed
    assert result.diagnosis == checks.RAISED
    assert "ZeroDivisionError" in result.message and "oops in the learner's code" in result.message


@pytest.mark.parametrize("check", list(CORRECT), ids=[c.__name__ for c in CORRECT])
@pytest.mark.parametrize("bad", [42, "fn", None])
def test_non_callable_raises_type_error(check, bad):
    with pytest.raises(TypeError, match="callable"):
        check(bad)


@pytest.mark.parametrize("check", ALL_CHECKS, ids=[c.__name__ for c in ALL_CHECKS])
@pytest.mark.parametrize("flag", ["strict", "hidden"])
def test_strict_and_hidden_must_be_bools(check, flag):
    args = (TOKENIZERS["dicts"][0], TOKENIZERS["dicts"][1], TEXT) if check is checks.check_tokenizer else (stub_raises,)
    with pytest.raises(TypeError, match=f"{flag}='yes' must be True or False"):
        check(*args, **{flag: "yes"})


# ================================================================ strict (nbgrader) and hidden cases
@pytest.mark.parametrize("check", list(CORRECT), ids=[c.__name__ for c in CORRECT])
def test_strict_raises_on_failure_and_on_a_stub_and_returns_on_success(check, capsys):
    ok = check(CORRECT[check][0], strict=True)
    assert ok.passed
    with pytest.raises(AssertionError) as failure:
        check(crashes, strict=True)
    assert "ZeroDivisionError" in str(failure.value)
    with pytest.raises(AssertionError, match="not attempted yet"):
        check(stub_raises, strict=True)
    assert "not attempted yet" in capsys.readouterr().out  # the verdict is printed as well


def test_strict_tokenizer():
    encode, decode = TOKENIZERS["dicts"]
    assert checks.check_tokenizer(encode, decode, TEXT, strict=True).passed
    with pytest.raises(AssertionError, match=checks.ORD_IDS):
        checks.check_tokenizer(lambda s: [ord(c) for c in s], lambda ids: "".join(map(chr, ids)), TEXT, strict=True)


SHOWN_ONLY = [  # solutions that are right on the shown inputs only
    (checks.check_attention_scores, lambda q, k: q @ k.mT / math.sqrt(6 if q.size(-1) == 6 else 8)),
    (checks.check_causal_attention, lambda q, k, v: causal_karpathy(q, k, v) if q.size(1) in (5, 6) else v),
    (checks.check_softmax_weights, lambda s: F.softmax(s, -1) if s.size(-1) in (4, 5, 7) else s),
    (checks.check_split_heads,
     lambda x, n: split_view_transpose(x, n) if n in (2, 3) else x.view(x.size(0), n, x.size(1), -1)),
    (checks.check_merge_heads, lambda y: merge_cat(y) if y.size(1) in (2, 3) else y.reshape(y.size(0), y.size(2), -1)),
    (checks.check_feed_forward,
     lambda n: ffn_lesson(n) if n in (8, 12) else nn.Sequential(nn.Linear(n, 4 * n), nn.ReLU(), nn.Linear(4 * n, n))),
    (checks.check_block, lambda x, ln1, sa, ln2, ffwd: block_two_lines(x, ln1, sa, ln2, ffwd) if x.size(-1) in (8, 12)
     else block_post_ln(x, ln1, sa, ln2, ffwd)),
    (checks.check_layer_norm, lambda x, w, b, eps=1e-5: ln_by_hand(x, w, b, eps) if x.size(-1) in (6, 8, 10) else x),
    (checks.check_embeddings, lambda i, t, p: emb_lesson(i, t, p) if i.size(1) in (5, 9) else t(i)),
    (checks.check_gpt_forward, lambda m, idx: forward_karpathy(m, idx) if idx.size(1) in (5, 6) else forward_with(
        no_ln_f=True)(m, idx)),
    (checks.check_parameter_count, lambda V, C, L, bs: count_formula(V, C, L, bs) if C in (32, 48, 64) else {}),
    (checks.check_load_source_weights, lambda p, c: load_strict(p, c) if c.n_layer < 3 else GPT(c)),
    (checks.check_effective_batch, lambda m, a, w: m * a * w if m in (2, 4, 8, 16) else 0),
    (checks.check_grad_accum_steps, lambda b, m, w: b // (m * w) if b in (12, 32, 64) else 0),
    (checks.check_allreduce_bytes, lambda model: 4 * model.num_parameters() if model.config.n_layer < 3 else 0),
]


@pytest.mark.parametrize("check, solution", SHOWN_ONLY, ids=[c.__name__ for c, _ in SHOWN_ONLY])
def test_hidden_cases_catch_a_solution_fitted_to_the_shown_inputs(check, solution):
    assert check(solution).passed
    hidden = check(solution, hidden=True)
    assert not hidden.passed and hidden.attempted


# ================================================================ wrong kinds of answer (issue 13)
def test_complex_scores_are_not_converted():
    result = checks.check_attention_scores(lambda q, k: scores_karpathy(q, k).to(torch.complex64))
    assert result.diagnosis == checks.COMPLEX_OUTPUT and "imaginary" in result.message


@pytest.mark.parametrize("answer, fragment", [
    (None, "not attempted"), ("24", "the string '24'"), (24.0, "a float"), (True, "a bool"),
    (np.array([24, 24]), "of shape (2,)"), (torch.tensor([24, 24]), "of shape (2,)"), (torch.tensor(24), ".item()"),
    ([24], "a list"),
])
def test_lesson_12_answers_of_the_wrong_kind_are_named(answer, fragment):
    result = checks.check_effective_batch(lambda m, a, w: answer)
    assert not result.passed and fragment in result.message
    assert "expected 8, got 8" not in result.message


def test_lesson_12_string_answer_is_not_shown_as_equal():
    result = checks.check_effective_batch(lambda m, a, w: str(m * a * w))
    assert result.diagnosis == checks.WRONG_TYPE and "'8'" in result.message


def test_lesson_12_none_as_the_function_raises_a_clear_type_error():
    with pytest.raises(TypeError,
                       match=r"check_effective_batch\(\) expects your function \(something callable\), got NoneType"):
        checks.check_effective_batch(None)


DDP_BUGS = [
    (checks.check_effective_batch, lambda m, a, w: m * a, checks.ONE_RANK_ONLY),
    (checks.check_effective_batch, lambda m, a, w: m * w, checks.NO_GRAD_ACCUM),
    (checks.check_effective_batch, lambda m, a, w: m, checks.ONE_MICRO_BATCH),
    (checks.check_grad_accum_steps, lambda b, m, w: b // m, checks.OTHER_RANKS_IGNORED),
    (checks.check_grad_accum_steps, lambda b, m, w: b // w, checks.ROWS_PER_RANK),
    (checks.check_grad_accum_steps, lambda b, m, w: b / (m * w), checks.FLOAT_NOT_INT),
    (checks.check_allreduce_bytes, lambda model: sum(p.numel() for p in model.parameters()), checks.VALUES_NOT_BYTES),
    (checks.check_allreduce_bytes, lambda model: 4 * sum(t.numel() for t in model.state_dict().values()),
     checks.COUNTED_BUFFERS),
    (checks.check_allreduce_bytes, lambda model: 8 * sum(p.numel() for p in model.parameters()), checks.FLOAT64_BYTES),
    (checks.check_allreduce_bytes, lambda model: 32 * sum(p.numel() for p in model.parameters()),
     checks.BITS_NOT_BYTES),
    (checks.check_effective_batch, lambda m, a, w: 7, checks.WRONG_VALUE),
]


@pytest.mark.parametrize("check, buggy, diagnosis", DDP_BUGS, ids=[f"{c.__name__}-{d}" for c, _, d in DDP_BUGS])
def test_lesson_12_bugs_are_named(check, buggy, diagnosis):
    result = check(buggy)
    assert not result.passed and result.attempted and result.diagnosis == diagnosis, result.message


def test_lesson_12_message_shows_the_arguments_and_both_numbers():
    result = checks.check_effective_batch(lambda m, a, w: m * a)
    assert "For (4, 3, 2) expected 24, got 12." in result.message and "Likely bug:" in result.message


# ================================================================ tokenizer details
def test_tokenizer_decode_returning_a_list():
    result = checks.check_tokenizer(TOKENIZERS["dicts"][0], lambda ids: [ITOS[i] for i in ids], TEXT)
    assert result.diagnosis == checks.DECODE_NOT_STR


@pytest.mark.parametrize("encode", [lambda s: s, lambda s: torch.tensor([float(STOI[c]) for c in s]),
                                    lambda s: [True] * len(s), lambda s: torch.tensor([[STOI[c] for c in s]])])
def test_tokenizer_encode_returning_something_else_than_ids(encode):
    assert checks.check_tokenizer(encode, TOKENIZERS["dicts"][1], TEXT).diagnosis == checks.ENCODE_NOT_IDS


def test_tokenizer_encode_with_a_wrong_number_of_ids():
    result = checks.check_tokenizer(lambda s: [STOI[c] for c in s[:-1]], TOKENIZERS["dicts"][1], TEXT)
    assert result.diagnosis == checks.WRONG_LENGTH


def test_tokenizer_round_trip_changed():
    result = checks.check_tokenizer(lambda s: [STOI[c] for c in s], lambda ids: "".join(ITOS[i] for i in ids).upper(),
                                    TEXT)
    assert result.diagnosis == checks.ROUND_TRIP_CHANGED and repr(TEXT[1:31]) in result.message


def test_tokenizer_same_character_with_two_ids():
    def encode(s):  # the first character gets an id of its own (a bug); decode still turns it back
        return [len(CHARS) if i == 0 else STOI[c] for i, c in enumerate(s)]

    def decode(ids):
        return "".join(TEXT[0] if i == len(CHARS) else ITOS[i] for i in ids)

    text = TEXT + TEXT[0]  # the first character appears again, with its usual id
    assert checks.check_tokenizer(encode, decode, text).diagnosis == checks.INCONSISTENT_IDS


def test_tokenizer_ids_with_gaps():
    result = checks.check_tokenizer(lambda s: [2 * STOI[c] for c in s], lambda ids: "".join(ITOS[i // 2] for i in ids),
                                    TEXT)
    assert result.diagnosis == checks.IDS_NOT_0_TO_V
    result = checks.check_tokenizer(lambda s: [2 * STOI[c] for c in s], lambda ids: "".join(ITOS[i // 2] for i in ids),
                                    TEXT, chars=CHARS)
    assert result.diagnosis == checks.IDS_NOT_0_TO_V


def test_tokenizer_decode_with_stoi_is_reported():
    result = checks.check_tokenizer(TOKENIZERS["dicts"][0], lambda ids: "".join(STOI[i] for i in ids), TEXT)
    assert result.diagnosis == checks.RAISED and "KeyError" in result.message and "itos" in result.message


@pytest.mark.parametrize("which", ["encode", "decode"])
@pytest.mark.parametrize("stub", [stub_raises, stub_returns_none])
def test_tokenizer_stub_is_not_attempted(which, stub):
    encode, decode = TOKENIZERS["dicts"]
    encode, decode = (stub, decode) if which == "encode" else (encode, stub)
    result = checks.check_tokenizer(encode, decode, TEXT)
    assert not result.attempted and not result.passed


def test_tokenizer_crash_is_reported():
    result = checks.check_tokenizer(crashes, crashes, TEXT)
    assert result.diagnosis == checks.RAISED and "ZeroDivisionError" in result.message


def test_tokenizer_bad_arguments():
    encode, decode = TOKENIZERS["dicts"]
    with pytest.raises(TypeError, match="encode"):
        checks.check_tokenizer("encode", decode, TEXT)
    with pytest.raises(TypeError, match="decode"):
        checks.check_tokenizer(encode, 3, TEXT)
    with pytest.raises(TypeError, match="str"):
        checks.check_tokenizer(encode, decode, [1, 2])
    with pytest.raises(ValueError, match="non-empty"):
        checks.check_tokenizer(encode, decode, "")
    with pytest.raises(TypeError, match="single characters"):
        checks.check_tokenizer(encode, decode, TEXT, chars=["ab", "c"])
    with pytest.raises(ValueError, match="not in chars"):
        checks.check_tokenizer(encode, decode, TEXT, chars="abc")


# ================================================================ the caller's state is left alone
def _all_random_states():
    return torch.random.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()


def _same_states(a, b) -> bool:
    return torch.equal(a[0], b[0]) and a[1] == b[1] and np.array_equal(a[2], b[2])


def reseeds_everything(*args):
    torch.manual_seed(123)
    random.seed(123)
    np.random.seed(123)
    torch.randn(100)
    raise ValueError("after drawing random numbers")


@pytest.mark.parametrize("check", list(CORRECT), ids=[c.__name__ for c in CORRECT])
def test_checks_leave_the_random_state_and_thread_count_alone(check):
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    before, threads = _all_random_states(), torch.get_num_threads()
    for solution in (CORRECT[check][0], reseeds_everything, stub_raises, crashes):
        check(solution)
        check(solution, hidden=True)
        assert _same_states(before, _all_random_states())
        assert torch.get_num_threads() == threads
    with pytest.raises(AssertionError):
        check(reseeds_everything, strict=True)
    assert _same_states(before, _all_random_states())


def test_tokenizer_leaves_the_random_state_alone():
    torch.manual_seed(0)
    before = _all_random_states()
    checks.check_tokenizer(lambda s: reseeds_everything(), TOKENIZERS["dicts"][1], TEXT)
    assert _same_states(before, _all_random_states())


def test_checks_give_the_same_verdict_every_time():
    first = checks.check_block(block_half_fixed).message
    torch.manual_seed(99)
    assert checks.check_block(block_half_fixed).message == first


# ================================================================ results, labels and translation
def test_result_repr_is_short_and_truthiness_follows_passed():
    r = checks.CheckResult(passed=False, attempted=True, diagnosis="no mask", message="long text " * 50)
    assert not r and "long text" not in repr(r) and "no mask" in repr(r)
    assert checks.CheckResult(True, True, None, "ok")


def test_labels_are_unique_identifiers_shared_only_on_purpose():
    by_value: dict[str, set[str]] = {}
    for name, value in checks.LABELS.items():
        by_value.setdefault(value, set()).add(name)
        assert value == value.strip() and "\n" not in value and len(value) <= 60
    assert all(len(names) == 1 for names in by_value.values())


def test_every_check_name_still_imports():
    from gpt_lesson.checks import (  # noqa: F401
        check_allreduce_bytes,
        check_attention_scores,
        check_block,
        check_causal_attention,
        check_effective_batch,
        check_embeddings,
        check_feed_forward,
        check_grad_accum_steps,
        check_merge_heads,
        check_softmax_weights,
        check_split_heads,
        check_tokenizer,
    )
    assert set(checks.__all__) >= {c.__name__ for c in ALL_CHECKS}


TESTED_ELSEWHERE = {  # labels tested one by one above, outside the tables
    checks.NOT_ATTEMPTED, checks.RAISED, checks.WRONG_TYPE, checks.NON_FINITE, checks.NOT_POSITION_WISE,
    checks.DECODE_NOT_STR, checks.ENCODE_NOT_IDS, checks.ROUND_TRIP_CHANGED, checks.WRONG_LENGTH,
    checks.INCONSISTENT_IDS, checks.IDS_NOT_0_TO_V, checks.WRONG_VALUES, checks.RELU_NOT_GELU, checks.EXACT_NOT_TANH,
    checks.TANH_NOT_EXACT, checks.NOT_DETERMINISTIC, checks.INSTANCE_NOT_FACTORY, checks.UNEXPECTED_PARAMETERS,
    checks.MISSING_LAYER, checks.SOURCE_CLASS,
}


def test_every_label_has_a_test():
    tables = [d for _, _, d in FALSE_ACCEPTS + NAMED + BUGS + DDP_BUGS] + [d for _, d in LOAD_BUGS]
    tables += [d for _, _, d, _ in NEW_BUGS] + [checks.TIMED_OUT, checks.TAMPERED]  # TAMPERED: tests/test_nbgrader.py
    tables += [first for _, _, first, _ in TWO_BUGS]
    tested = {label for diagnosis in tables for label in diagnosis.split("; ")} | TESTED_ELSEWHERE
    # the modules of lessons 01-08 and 12; each newer check module's own test file checks its labels
    from gpt_lesson.checks import attention, block, distributed, feed_forward, gpt, heads, tokens, verdicts
    covered = (verdicts, tokens, attention, heads, feed_forward, block, gpt, distributed)
    labels = {value for module in covered for name, value in vars(module).items()
              if name.isupper() and not name.startswith("_") and isinstance(value, str)}
    # lesson 12's all_reduce check forks processes: its labels are tested in tests/test_ddp.py
    tested |= {checks.NEVER_REDUCED, checks.SUMMED_NOT_AVERAGED, checks.DIVIDED_TWICE_BY_WORLD, checks.REDUCED_WEIGHTS,
               checks.REDUCED_A_COPY, checks.SOME_PARAMETERS, checks.RANKS_HUNG, checks.NO_PROCESSES}
    assert labels - tested == set()


def test_messages_go_through_the_translation_function(monkeypatch):
    from gpt_lesson.checks import verdicts

    monkeypatch.setattr(verdicts, "_", lambda text: "«" + text + "»")
    result = checks.check_causal_attention(lambda q, k, v: causal(q, k, v, mask="zero"))
    assert result.message.startswith("«❌ check_causal_attention: not yet (")
    assert "«masking with 0 instead of -inf»" in result.message  # the label is shown translated ...
    assert result.diagnosis == checks.MASK_WITH_ZERO  # ... and kept as the stable identifier
    assert "«you filled the future scores with 0" in result.message
    stub = checks.check_attention_scores(stub_raises)
    assert "«Your function still raises NotImplementedError" in stub.message


CHECKS_DIR = Path(checks.__file__).parent


def _calls(tree, name):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == name]


@pytest.mark.parametrize("path", sorted(CHECKS_DIR.glob("*.py")), ids=lambda p: p.name)
def test_learner_text_is_written_as_templates(path):
    """No f-string inside _() or say(); templates are N_()-marked constants in one dict per module."""
    tree = ast.parse(path.read_text())
    for call in _calls(tree, "_") + _calls(tree, "say"):
        assert call.args and not isinstance(call.args[0], ast.JoinedStr), f"{path.name}:{call.lineno}"
        assert not isinstance(call.args[0], ast.Constant), f"{path.name}:{call.lineno}: put the template in TEXTS"
    for call in _calls(tree, "N_"):
        template = call.args[0]
        assert isinstance(template, ast.Constant) and isinstance(template.value, str), f"{path.name}:{call.lineno}"



# ================================================================ issue 22 part 3: checks that cannot be fooled
SQRT2PI = math.sqrt(2 / math.pi)


def shifted_exp(scores):
    return (scores - scores.amax(-1, keepdim=True)).exp()


def head_filled_with(value):
    def head(q, k, v):
        T = q.size(1)
        s = (q @ k.mT / math.sqrt(q.size(-1))).masked_fill(causal_tril(T) == 0, value)
        return F.softmax(s, -1) @ v
    return head


class RowBiasFFN(nn.Module):  # biases stored as (1, n) rows
    def __init__(self, n):
        super().__init__()
        self.W1, self.b1 = nn.Parameter(torch.randn(n, 4 * n) * 0.3), nn.Parameter(torch.randn(1, 4 * n) * 0.1)
        self.W2, self.b2 = nn.Parameter(torch.randn(4 * n, n) * 0.2), nn.Parameter(torch.randn(1, n) * 0.1)

    def forward(self, x):
        return F.gelu(x @ self.W1 + self.b1) @ self.W2 + self.b2


NEW_BUGS = [  # (check, solution, diagnosis, keyword arguments of the check)
    # an exercise's own rules
    (checks.check_softmax_weights, lambda s: F.softmax(s, dim=-1), checks.RULE_BROKEN, {"without": "softmax"}),
    (checks.check_softmax_weights, lambda s: nn.Softmax(-1)(s), checks.RULE_BROKEN, {"without": ["softmax"]}),
    (checks.check_softmax_weights, lambda s: F.log_softmax(s, -1).exp(), checks.RULE_BROKEN, {"without": "softmax"}),
    (checks.check_causal_attention, causal_sdpa_is_causal, checks.RULE_BROKEN, {"without": "sdpa"}),
    (checks.check_causal_attention, causal_karpathy, checks.RULE_NOT_USED, {"using": "sdpa"}),
    (checks.check_embeddings, emb_lesson, checks.RULE_BROKEN, {"without": "tables"}),
    (checks.check_embeddings, emb_weight_indexing, checks.RULE_BROKEN, {"without": "tables"}),
    (checks.check_feed_forward, tanh_ffn(lambda h: F.gelu(h, approximate="tanh")), checks.RULE_BROKEN,
     {"gelu": "tanh"}),
    (checks.check_feed_forward, tanh_ffn(nn.GELU(approximate="tanh")), checks.RULE_BROKEN, {"gelu": "tanh"}),
    # in-place changes, randomness, dimensions, steps
    (checks.check_block, block_in_place, checks.INPUT_MODIFIED, {}),
    (checks.check_attention_scores, lambda q, k: q.div_(math.sqrt(q.size(-1))) @ k.mT, checks.INPUT_MODIFIED, {}),
    (checks.check_gpt_forward, lambda m, idx: forward_karpathy(m.train(), idx), checks.INPUT_MODIFIED, {}),
    (checks.check_attention_scores, lambda q, k: F.dropout(scores_karpathy(q, k), 0.2), checks.NOT_DETERMINISTIC, {}),
    (checks.check_effective_batch, (lambda calls: lambda m, a, w: m * a * w + next(calls))(itertools.count()),
     checks.NOT_DETERMINISTIC, {}),
    (checks.check_split_heads, lambda x, n: split_view_transpose(x, n).transpose(0, 2), checks.DIMS_PERMUTED, {}),
    (checks.check_causal_attention, head_filled_with(-1.0), checks.STEP_DIFFERS, {}),
    # named mistakes that had only "wrong values"
    (checks.check_attention_scores, lambda q, k: F.softmax(scores_karpathy(q, k), -1), checks.SOFTMAX_IN_SCORES, {}),
    (checks.check_attention_scores, lambda q, k: scores_karpathy(q, k).masked_fill(
        causal_tril(q.size(1)) == 0, float("-inf")), checks.SCORES_MASKED, {}),
    (checks.check_attention_scores, lambda q, k: (q @ k.mT) // math.sqrt(q.size(-1)), checks.FLOOR_DIVISION, {}),
    (checks.check_attention_scores, lambda q, k: q @ k.mT / q.size(-1) ** 1 / 2, checks.PRECEDENCE, {}),
    (checks.check_softmax_weights, lambda s: shifted_exp(s) / shifted_exp(s).sum(-2, keepdim=True),
     checks.SUM_WRONG_DIM, {}),
    (checks.check_softmax_weights, lambda s: shifted_exp(s) / shifted_exp(s).sum(), checks.SUM_OF_WHOLE, {}),
    (checks.check_softmax_weights, torch.sigmoid, checks.SIGMOID_NOT_SOFTMAX, {}),
    (checks.check_softmax_weights, lambda s: F.softmax(s.nan_to_num(neginf=0.0), -1), checks.NEG_INF_AS_ZERO, {}),
    (checks.check_softmax_weights, lambda s: softmax_shifted_by(s, s.masked_fill(s.isinf(), float("inf"))
                                                                .amin(-1, keepdim=True)), checks.MIN_NOT_MAX, {}),
    (checks.check_softmax_weights, lambda s: F.softmax(s / 2, -1), checks.TEMPERATURE, {}),
    (checks.check_causal_attention, lambda q, k, v: (causal_tril(q.size(1)) / causal_tril(q.size(1)).sum(-1, True)) @ v,
     checks.UNIFORM_WEIGHTS, {}),
    (checks.check_causal_attention, lambda q, k, v: F.scaled_dot_product_attention(q, v, k, is_causal=True),
     checks.SDPA_ARGS_ORDER, {}),
    (checks.check_embeddings, lambda i, t, p: t(i) + p(torch.arange(i.size(1)).flip(0)), checks.POSITIONS_REVERSED, {}),
    (checks.check_embeddings, lambda i, t, p: t(i) + p(torch.arange(i.size(0))), checks.POSITIONS_FROM_BATCH, {}),
    (checks.check_merge_heads, lambda y: y.sum(1), checks.HEADS_SUMMED, {}),
    (checks.check_merge_heads, lambda y: torch.cat(y.unbind(1), dim=1), checks.HEADS_CAT_POSITIONS, {}),
    (checks.check_merge_heads, lambda y: y[:, -1], checks.HEADS_LAST_ONLY, {}),
    (checks.check_feed_forward, lambda n: nn.Sequential(nn.Linear(n, 4 * n), nn.GELU(), nn.GELU(), nn.Linear(4 * n, n)),
     checks.ACTIVATION_TWICE, {}),
    (checks.check_feed_forward, tanh_ffn(lambda h: h * torch.sigmoid(1.702 * h)), checks.GELU_SIGMOID_APPROXIMATION,
     {"gelu": "tanh"}),
    (checks.check_feed_forward, tanh_ffn(lambda h: 0.5 * h * (1 + torch.tanh(SQRT2PI * (h + 0.044715 * h**2)))),
     checks.GELU_CUBIC_TERM, {"gelu": "tanh"}),
    (checks.check_feed_forward, tanh_ffn(lambda h: 0.5 * h * (1 - torch.tanh(SQRT2PI * (h + 0.044715 * h**3)))),
     checks.GELU_SIGN, {"gelu": "tanh"}),
    (checks.check_layer_norm, lambda x, w, b, eps=1e-5: (x - x.mean(-1, keepdim=True))
     / torch.sqrt(x.std(-1, keepdim=True, unbiased=False) + eps) * w + b, checks.STD_NOT_VAR, {}),
    (checks.check_layer_norm, lambda x, w, b, eps=1e-5: x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w + b,
     checks.RMS_NOT_LAYER_NORM, {}),
    (checks.check_block, lambda x, ln1, sa, ln2, ffwd: (lambda h: h + ffwd(ln1(h)))(x + sa(ln1(x))), checks.LN_REUSED,
     {}),
    (checks.check_block, lambda x, ln1, sa, ln2, ffwd: (lambda h: h + sa(ln1(h)))(x + ffwd(ln2(x))),
     checks.SUBLAYERS_SWAPPED, {}),
    (checks.check_block, lambda x, ln1, sa, ln2, ffwd: (lambda h: h + ffwd(ln2(h)))(x + x + sa(ln1(x))),
     checks.RESIDUAL_DOUBLED, {}),
    (checks.check_gpt_forward, lambda m, i: m.lm_head(m.ln_f(m.blocks[::-1](
        m.token_embedding_table(i) + m.position_embedding_table(torch.arange(i.size(1)))))), checks.BLOCKS_REVERSED, {}),
    (checks.check_gpt_forward, lambda m, i: F.log_softmax(forward_karpathy(m, i), -1), checks.LOG_PROBABILITIES, {}),
    (checks.check_parameter_count, count_with(**{"position embedding": lambda V, C, L, bs: V * C}),
     checks.POSITIONS_SIZED_BY_VOCAB, {}),
    (checks.check_parameter_count, count_with(**{"feed-forward": lambda V, C, L, bs: L * 8 * C * C + 5 * C}),
     checks.BIASES_NOT_TIMES_N_LAYER, {}),
    (checks.check_load_source_weights, lambda path, config: _load_with(path, config, weights_only=False),
     checks.UNSAFE_LOAD, {}),
    (checks.check_load_source_weights, lambda path, config: load_strict(path, config).double(), checks.WEIGHTS_DTYPE,
     {}),
]


def _load_with(path, config, **load_args):
    model = GPT(config)
    model.load_state_dict(torch.load(path, **load_args))
    return model


@pytest.mark.parametrize("check, solution, diagnosis, kwargs", NEW_BUGS,
                         ids=[f"{c.__name__}-{i}-{d}" for i, (c, _, d, _) in enumerate(NEW_BUGS)])
def test_issue_22_diagnoses(check, solution, diagnosis, kwargs):
    result = check(solution, **kwargs)
    assert not result.passed and result.attempted and result.diagnosis == diagnosis, result.message


def test_the_rules_name_the_function_called_and_leave_right_solutions_alone():
    result = checks.check_softmax_weights(softmax_method, without="softmax")
    assert "without F.softmax or torch.softmax" in result.message and "Tensor.softmax" in result.message
    for solution in (softmax_stable_by_hand, softmax_logsumexp):
        assert checks.check_softmax_weights(solution, without="softmax").passed
    assert checks.check_embeddings(emb_one_hot, without="tables").passed
    eye = lambda i, t, p: torch.eye(t.num_embeddings)[i] @ t.weight + torch.eye(p.num_embeddings)[  # noqa: E731
        : i.size(1)] @ p.weight
    assert checks.check_embeddings(eye, without="tables").passed  # indexing a constant one-hot is not the lookup
    for solution in (causal_sdpa_is_causal, causal_sdpa_bool_mask, causal_sdpa_additive_inf):
        assert checks.check_causal_attention(solution, using="sdpa").passed
    for solution in (causal_karpathy, causal_rasbt, causal_einsum):
        assert checks.check_causal_attention(solution, without="sdpa").passed
    assert checks.check_feed_forward(GELU_TANH, gelu="tanh").passed
    assert checks.check_feed_forward(ffn_lesson, gelu="tanh").diagnosis == checks.EXACT_NOT_TANH  # its own name
    printing = tanh_ffn(lambda h: (repr(nn.GELU()), GELU_TANH.forward)[0] and
                        0.5 * h * (1 + torch.tanh(SQRT2PI * (h + 0.044715 * h ** 3))))
    assert checks.check_feed_forward(printing, gelu="tanh").passed  # building or printing nn.GELU is not using it


def test_rule_arguments_are_checked():
    with pytest.raises(ValueError, match=r"without='soft_max' names no rule: each must be one of \['gelu', "):
        checks.check_softmax_weights(softmax_method, without="soft_max")
    with pytest.raises(TypeError, match="using= takes a rule name or a list of them"):
        checks.check_causal_attention(causal_karpathy, using=3)
    from gpt_lesson.checks.runner import exercise_rules

    with exercise_rules(without="softmax"):
        assert checks.check_softmax_weights(softmax_method).diagnosis == checks.RULE_BROKEN
    assert checks.check_softmax_weights(softmax_method).passed


# --- not attempted, and what is not a stub
def test_a_stub_with_a_message_or_in_a_helper_is_not_attempted():
    def with_message(q, k):
        raise NotImplementedError("TODO: the scores")

    def helper(q, k):
        raise NotImplementedError

    def uses_helper(q, k):
        return helper(q, k) / 2

    for stub in (with_message, uses_helper):
        assert checks.check_attention_scores(stub).diagnosis == checks.NOT_ATTEMPTED


def test_a_not_implemented_error_raised_inside_torch_is_an_error():
    def on_meta(q, k):  # an operator with no meta kernel raises NotImplementedError inside torch
        return (q.to("meta") @ k.to("meta").mT).nonzero().float()

    result = checks.check_attention_scores(on_meta)
    assert result.attempted and result.diagnosis == checks.RAISED and "NotImplementedError" in result.message

    class NoForward(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.fc = nn.Linear(n, 4 * n)

    result = checks.check_feed_forward(NoForward)
    assert result.diagnosis == checks.RAISED and "forward(self, x)" in result.message


def test_meta_tensors_returned_are_a_wrong_type_not_a_crash():
    result = checks.check_attention_scores(lambda q, k: scores_karpathy(q, k).to("meta"))
    assert result.diagnosis == checks.WRONG_TYPE and "meta" in result.message


# --- dtypes and shapes the checks must take
@pytest.mark.parametrize("make", [
    lambda n: ffn_lesson(n).double(),
    lambda n: ffn_lesson(n).to(torch.bfloat16),
    lambda n: ffn_lesson(n).half(),
    RowBiasFFN,
], ids=["float64", "bfloat16", "float16", "row biases"])
def test_ffn_in_other_dtypes_and_with_row_biases_passes(make):
    result = checks.check_feed_forward(make, hidden=True)
    assert result.passed, result.message


def test_numpy_integer_ids_are_ids():
    encode = lambda s: list(np.array([STOI[c] for c in s]))  # noqa: E731 - a list of np.int64
    decode = lambda ids: "".join(ITOS[int(i)] for i in ids)  # noqa: E731
    assert checks.check_tokenizer(encode, decode, TEXT, chars=CHARS, hidden=True).passed
    assert checks.check_tokenizer(lambda s: np.array([STOI[c] for c in s], dtype=np.int32), decode, TEXT).passed


# --- likely causes of runtime errors
@pytest.mark.parametrize("check, solution, fragment", [
    (checks.check_attention_scores, lambda q, k: q @ k.T, "`.T` on a 3-D tensor reverses all its dimensions"),
    (checks.check_causal_attention, lambda q, k, v: causal_karpathy(q, k.T.T.T, v), "`.T` on a 3-D tensor"),
    (checks.check_softmax_weights, lambda s: (s - s.amax(-1)).exp(), "a reduction without keepdim=True: amax(dim=-1)"),
    (checks.check_layer_norm, lambda x, w, b, eps=1e-5: (x - x.mean(-1)) * w + b, "keepdim=True"),
    (checks.check_causal_attention, lambda q, k, v: softmax_shifted_by(
        scores_karpathy(q, k).masked_fill(causal_tril(q.size(1)) == 0, float("-inf")),
        scores_karpathy(q, k).amax(-1)) @ v, "keepdim=True"),
    (checks.check_softmax_weights, lambda s: (s - s.max(-1, keepdim=True)).exp(), ".values"),
    (checks.check_split_heads, lambda x, n: x.view(x.size(0), x.size(1), n, x.size(2) / n), "use //"),
    (checks.check_split_heads, lambda x, n: x.view(x.size(0), x.size(1), n, 4).transpose(1, 2),
     "take every size from the input"),
    (checks.check_embeddings, lambda i, t, p: t(i) + p(torch.arange(8)), "torch.arange(T)"),
    (checks.check_gpt_forward, lambda m, i: m.ln_f(m.lm_head(m.blocks(m.token_embedding_table(i)))),
     "lm_head(ln_f(x))"),
    (checks.check_attention_scores, lambda q, k: undefined_name @ k, "run the cell that defines it"),  # noqa: F821
], ids=["3d-T", "3d-T-head", "keepdim", "keepdim-ln", "keepdim-head", "max-pair", "float-size", "fixed-size",
        "fixed-length", "ln_f-after-head", "name"])
@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_runtime_errors_get_a_likely_cause(check, solution, fragment):
    result = check(solution)
    assert result.diagnosis == checks.RAISED and "Likely cause" in result.message, result.message
    assert fragment in result.message, result.message


def test_positions_looked_up_with_token_ids_are_named_although_they_raise():
    # Token ids reach past block_size in the check's models: pos_table(idx) raises; the bug is named anyway.
    result = checks.check_gpt_forward(lambda m, i: m.lm_head(m.ln_f(m.blocks(
        m.token_embedding_table(i) + m.position_embedding_table(i)))))
    assert result.diagnosis == checks.POSITIONS_FROM_TOKEN_IDS and "IndexError" in result.message
    hidden = checks.check_embeddings(lambda i, t, p: t(i) + p(i), hidden=True)
    assert hidden.diagnosis == checks.POSITIONS_FROM_TOKEN_IDS


def test_forgotten_super_init_gets_its_hint():
    class NoSuper(nn.Module):
        def __init__(self, n):
            self.fc = nn.Linear(n, 4 * n)

    assert "super().__init__()" in checks.check_feed_forward(NoSuper).message


# --- sizes the learner could hard-code
def _visible_sizes(check, solution_of_shapes):
    shapes = []

    def spy(*args):
        shapes.append(tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args))
        return solution_of_shapes(*args)
    check(spy)
    return shapes


@pytest.mark.parametrize("check, solution, last_dims", [
    (checks.check_attention_scores, scores_karpathy, lambda shapes: {s[0][-1] for s in shapes}),
    (checks.check_causal_attention, causal_karpathy, lambda shapes: {s[0][-1] for s in shapes}),
    (checks.check_split_heads, split_view_transpose, lambda shapes: {s[0][-1] // s[1] for s in shapes}),
    (checks.check_merge_heads, merge_cat, lambda shapes: {s[0][-1] for s in shapes}),
], ids=["scores", "head", "split", "merge"])
def test_visible_cases_vary_the_head_size(check, solution, last_dims):
    assert len(last_dims(_visible_sizes(check, solution))) >= 2


def test_visible_embedding_cases_vary_every_size():
    seen = []

    def spy(idx, tok, pos):
        seen.append((tok.num_embeddings, pos.num_embeddings, tok.embedding_dim, *idx.shape))
        return emb_lesson(idx, tok, pos)
    assert checks.check_embeddings(spy).passed
    assert all(len({s[i] for s in seen}) >= 2 for i in range(5)), seen  # V, block_size, n_embd, B, T


# --- a solution that hangs is stopped
def test_a_solution_that_hangs_is_stopped_with_a_message(monkeypatch):
    import time

    monkeypatch.setenv("GPT_LESSON_CHECK_TIMEOUT", "0.5")

    def endless(q, k):
        while True:
            pass

    started = time.perf_counter()
    result = checks.check_attention_scores(endless)
    assert result.diagnosis == checks.TIMED_OUT and "did not return within 0.5 s" in result.message
    assert time.perf_counter() - started < 10
    assert checks.check_attention_scores(scores_karpathy).passed  # and the next check runs as usual
    with pytest.raises(AssertionError, match="did not return within"):
        checks.check_attention_scores(endless, strict=True)


@pytest.mark.parametrize("value", ["", "abc", "-1", "inf", "0"])
def test_a_bad_timeout_setting_falls_back_to_the_default(monkeypatch, value):
    from gpt_lesson.checks.runner import CALL_TIMEOUT, call_timeout

    monkeypatch.setenv("GPT_LESSON_CHECK_TIMEOUT", value)
    assert call_timeout() == CALL_TIMEOUT


# --- answers that try to fool the comparison
class AgreeableTensor(torch.Tensor):
    """A tensor whose __torch_function__ says yes to every comparison."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal, torch.Tensor.__eq__, torch.isclose):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_tensor_subclass_cannot_answer_the_comparison():
    result = checks.check_attention_scores(lambda q, k: torch.zeros(q.size(0), q.size(1), q.size(1))
                                           .as_subclass(AgreeableTensor))
    assert not result.passed and result.diagnosis != checks.RAISED, result.message


def test_patching_torch_allclose_changes_no_verdict(monkeypatch):
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    monkeypatch.setattr(torch, "equal", lambda *a, **k: True)
    assert checks.check_attention_scores(lambda q, k: q @ k.mT).diagnosis == checks.NO_SCALING
    assert checks.check_attention_scores(scores_karpathy).passed


def test_replacing_the_library_reference_does_not_change_it(monkeypatch):
    import gpt_lesson.attention as lib

    wrong = lambda q, k: q @ k.mT  # noqa: E731 - no scaling
    monkeypatch.setattr(lib, "attention_scores", wrong)
    assert checks.check_attention_scores(wrong).diagnosis == checks.NO_SCALING
    assert checks.check_attention_scores(scores_karpathy).passed


def test_the_learner_cannot_read_the_expected_value_from_the_stack():
    import sys

    def walker(q, k):  # every tensor of the right shape in every frame it can reach, the check's included
        frames = [sys._getframe()] + list(sys._current_frames().values())
        found = []
        for frame in frames:
            while frame is not None:
                found += [v for v in frame.f_locals.values() if isinstance(v, torch.Tensor)]
                for v in frame.f_locals.values():
                    expected = getattr(v, "expected", None)
                    if isinstance(expected, torch.Tensor):
                        found.append(expected)
                frame = frame.f_back
        target = (q.size(0), q.size(1), q.size(1))
        return next((t for t in found if tuple(t.shape) == target), torch.zeros(target))

    assert not checks.check_attention_scores(walker).passed


def test_whole_numbers_of_a_hostile_type_are_refused():
    class AlwaysEqual(int):
        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

        __hash__ = int.__hash__

    result = checks.check_effective_batch(lambda m, a, w: AlwaysEqual(0))
    assert not result.passed and result.diagnosis == checks.WRONG_TYPE
    result = checks.check_parameter_count(lambda V, C, L, bs: {k: AlwaysEqual(0) for k in count_formula(V, C, L, bs)})
    assert not result.passed and result.diagnosis == checks.WRONG_TYPE


@pytest.mark.slow
def test_in_a_jupyter_kernel_a_hanging_solution_is_stopped_and_prints_reach_the_cell():
    """The time limit and the learner's own prints work where learners run the checks: in an IPython kernel."""
    import nbformat
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[
        new_code_cell("import os\nos.environ['GPT_LESSON_CHECK_TIMEOUT'] = '1'\n"
                      "from gpt_lesson.checks import check_attention_scores"),
        new_code_cell("def endless(q, k):\n    while True:\n        pass\n\n\n"
                      "result = check_attention_scores(endless)\nprint('diagnosis:', result.diagnosis)"),
        new_code_cell("def talks(q, k):\n    print('inside the learner function')\n"
                      "    return q @ k.transpose(-2, -1) / q.size(-1) ** 0.5\n\n\n"
                      "print('passed:', check_attention_scores(talks).passed)"),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    text = ["".join(o.get("text", "") for o in c.outputs if o.output_type == "stream") for c in nb.cells]
    assert "did not return within 1 s" in text[1] and f"diagnosis: {checks.TIMED_OUT}" in text[1]
    assert "inside the learner function" in text[2] and "passed: True" in text[2]
    nbformat.validate(nb)


def test_a_generator_argument_gives_the_same_draws_on_both_calls():
    from gpt_lesson.checks.runner import call

    g = torch.Generator().manual_seed(3)
    first = call(lambda gen: torch.rand(3, generator=gen), (g,)).value
    second = call(lambda gen: torch.rand(3, generator=gen), (g,)).value
    assert torch.equal(first, second) and torch.equal(first, torch.rand(3, generator=torch.Generator().manual_seed(3)))
