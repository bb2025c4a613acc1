"""The course's source model, as the source writes it: the reference :class:`gpt_lesson.GPT` reproduces.

A small nanoGPT-style GPT: fused ``c_attn``, a ``tril`` buffer, pre-LayerNorm blocks,
learned position embeddings. ``gpt_lesson.GPT`` has the same parameter names, shapes and
forward pass, so a checkpoint of this model loads there with ``strict=True`` and gives the
same logits; ``tests/test_source_compat.py`` checks that, and lesson 08 shows it.

Two things differ from the library, on purpose, because the source does them this way:

* **no weight initialisation of its own**: PyTorch's defaults (uniform ``Linear`` weights,
  ``N(0, 1)`` embeddings). The library adds nanoGPT's ``N(0, 0.02)``, which makes the first
  loss close to ``ln(vocab_size)``; with the defaults it starts higher (7.06 on average over five
  seeds, 6.98-7.17, instead of 6.92 at the seed sizes; lesson 08 measures it);
* when targets are given, ``forward`` returns the logits flattened to (B*T, vocab_size),
  because the flattened view passed to the cross-entropy reuses the name ``logits``.

This module is kept as close to the source as possible: no options, no argument checks.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)  # q, k, v in one matrix
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        hs = C // self.n_head
        # 1. Queries, keys and values from one matrix.
        q, k, v = self.c_attn(x).split(C, dim=2)
        # 2. Split into heads.
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        # 3. Scores, scaled by hs**-0.5.
        wei = q @ k.transpose(-2, -1) * hs**-0.5  # (B, nh, T, T)
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


class FeedForward(nn.Module):
    def __init__(self, n_embd: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd),
            nn.GELU(),
            nn.Linear(4 * n_embd, n_embd),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.sa = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln2 = nn.LayerNorm(n_embd)
        self.ffwd = FeedForward(n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.sa(self.ln1(x))
        x = x + self.ffwd(self.ln2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size: int, n_embd: int, n_head: int, n_layer: int, block_size: int) -> None:
        super().__init__()
        self.token_embedding_table = nn.Embedding(vocab_size, n_embd)
        self.position_embedding_table = nn.Embedding(block_size, n_embd)
        self.blocks = nn.Sequential(*[Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.shape
        tok_emb = self.token_embedding_table(idx)  # (B, T, C)
        pos_emb = self.position_embedding_table(torch.arange(T, device=idx.device))  # (T, C)
        x = self.blocks(tok_emb + pos_emb)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab_size)
        if targets is None:
            loss = None
        else:
            B, T, C = logits.shape
            logits = logits.view(B * T, C)  # the quirk: the name now holds the flattened view
            targets = targets.view(B * T)
            loss = F.cross_entropy(logits, targets)
        return logits, loss
