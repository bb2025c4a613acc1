"""Lesson 01, Your turn 3: the same embeddings as a matrix product, without calling the tables."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._registry import Exercise

EX = Exercise("01.3 the lookup as a matrix product", "check_embeddings", rules={"without": "tables"})


@EX.right
def lesson(idx, tok_table, pos_table):
    B, T = idx.shape
    tok_emb = F.one_hot(idx, tok_table.num_embeddings).float() @ tok_table.weight
    positions = F.one_hot(torch.arange(T), pos_table.num_embeddings).float()
    return tok_emb + positions @ pos_table.weight


@EX.right
def identity_rows(idx, tok_table, pos_table):
    V, P = tok_table.weight.shape[0], pos_table.weight.shape[0]
    T = idx.shape[1]
    return torch.eye(V)[idx] @ tok_table.weight + torch.eye(P)[:T] @ pos_table.weight


@EX.right
def comparison_one_hot(idx, tok_table, pos_table):
    V, P = tok_table.num_embeddings, pos_table.num_embeddings
    one_hot = (idx[..., None] == torch.arange(V)).float()
    pos = (torch.arange(idx.shape[1])[:, None] == torch.arange(P)).float()
    return one_hot @ tok_table.weight + pos @ pos_table.weight


@EX.right
def einsum(idx, tok_table, pos_table):
    oh = F.one_hot(idx, tok_table.weight.shape[0]).to(tok_table.weight.dtype)
    pos = F.one_hot(torch.arange(idx.shape[1]), pos_table.weight.shape[0]).to(pos_table.weight.dtype)
    return torch.einsum("btv,vc->btc", oh, tok_table.weight) + torch.einsum("tp,pc->tc", pos, pos_table.weight)


@EX.right
def linear_layer(idx, tok_table, pos_table):
    oh = F.one_hot(idx, tok_table.num_embeddings).float()
    pos = F.one_hot(torch.arange(idx.size(1)), pos_table.num_embeddings).float()
    return F.linear(oh, tok_table.weight.T) + F.linear(pos, pos_table.weight.T)


@EX.right
def scatter_built(idx, tok_table, pos_table):
    B, T = idx.shape
    oh = torch.zeros(B, T, tok_table.num_embeddings).scatter_(-1, idx.unsqueeze(-1), 1.0)
    pos = torch.zeros(T, pos_table.num_embeddings)
    pos[torch.arange(T), torch.arange(T)] = 1.0
    return torch.matmul(oh, tok_table.weight) + torch.matmul(pos, pos_table.weight)


@EX.right
def float64_product(idx, tok_table, pos_table):
    oh = F.one_hot(idx, tok_table.num_embeddings).double()
    pos = F.one_hot(torch.arange(idx.shape[1]), pos_table.num_embeddings).double()
    return (oh @ tok_table.weight.double() + pos @ pos_table.weight.double()).float()


@EX.right
def bmm_per_batch(idx, tok_table, pos_table):
    oh = F.one_hot(idx, tok_table.num_embeddings).float()
    W = tok_table.weight.unsqueeze(0).expand(idx.shape[0], -1, -1)
    pos = F.one_hot(torch.arange(idx.shape[1]), pos_table.num_embeddings).float() @ pos_table.weight
    return torch.bmm(oh, W) + pos


# --- wrong answers
@EX.wrong("RULE_BROKEN", "CALLED_LIBRARY")
def calls_the_tables(idx, tok_table, pos_table):
    return tok_table(idx) + pos_table(torch.arange(idx.shape[1]))


@EX.wrong("RULE_BROKEN", "CALLED_LIBRARY")
def f_embedding(idx, tok_table, pos_table):
    return F.embedding(idx, tok_table.weight) + F.embedding(torch.arange(idx.shape[1]), pos_table.weight)


@EX.wrong("RULE_BROKEN", "CALLED_LIBRARY")
def indexes_the_weight(idx, tok_table, pos_table):
    return tok_table.weight[idx] + pos_table.weight[: idx.shape[1]]


@EX.wrong("RULE_BROKEN", "CALLED_LIBRARY")
def one_hot_tokens_table_positions(idx, tok_table, pos_table):
    tok = F.one_hot(idx, tok_table.num_embeddings).float() @ tok_table.weight
    return tok + pos_table(torch.arange(idx.shape[1]))


@EX.wrong("ONE_HOT_NO_NUM_CLASSES")
def one_hot_without_num_classes(idx, tok_table, pos_table):
    tok_emb = F.one_hot(idx).float() @ tok_table.weight
    return tok_emb + F.one_hot(torch.arange(idx.shape[1])).float() @ pos_table.weight


@EX.wrong("RAISED", says=".float()")
def one_hot_left_as_integers(idx, tok_table, pos_table):
    tok = F.one_hot(idx, tok_table.num_embeddings) @ tok_table.weight
    return tok + F.one_hot(torch.arange(idx.shape[1]), pos_table.num_embeddings) @ pos_table.weight


@EX.wrong("RAISED", says="num_embeddings")
def positions_one_hot_with_vocab_size(idx, tok_table, pos_table):
    V = tok_table.num_embeddings
    tok = F.one_hot(idx, V).float() @ tok_table.weight
    return tok + F.one_hot(torch.arange(idx.shape[1]), V).float() @ pos_table.weight


@EX.wrong("RAISED", says="num_embeddings")
def fixed_vocabulary_size(idx, tok_table, pos_table):
    tok = F.one_hot(idx, 7).float() @ tok_table.weight  # the first input's vocabulary, hard-coded
    return tok + F.one_hot(torch.arange(idx.shape[1]), pos_table.num_embeddings).float() @ pos_table.weight


@EX.wrong("MISSING_POSITION_EMBEDDING")
def tokens_only(idx, tok_table, pos_table):
    return F.one_hot(idx, tok_table.num_embeddings).float() @ tok_table.weight


@EX.wrong("POSITIONS_FROM_TOKEN_IDS", "RAISED")
def positions_one_hot_from_ids(idx, tok_table, pos_table):
    tok = F.one_hot(idx, tok_table.num_embeddings).float() @ tok_table.weight
    return tok + F.one_hot(idx, pos_table.num_embeddings).float() @ pos_table.weight


@EX.wrong("WEIGHT_TRANSPOSED", "RAISED")
def weight_transposed(idx, tok_table, pos_table):
    tok = F.one_hot(idx, tok_table.num_embeddings).float() @ tok_table.weight.T.T.T
    return tok + F.one_hot(torch.arange(idx.shape[1]), pos_table.num_embeddings).float() @ pos_table.weight


@EX.wrong("EMBEDDINGS_NOT_ADDED")
def multiplied(idx, tok_table, pos_table):
    tok = F.one_hot(idx, tok_table.num_embeddings).float() @ tok_table.weight
    return tok * (F.one_hot(torch.arange(idx.shape[1]), pos_table.num_embeddings).float() @ pos_table.weight)
