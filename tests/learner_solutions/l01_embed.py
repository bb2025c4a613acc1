"""Lesson 01, Your turn 2: ``embed(idx, tok_table, pos_table)`` -> tok_emb + pos_emb of shape (B, T, n_embd)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._registry import Exercise

EX = Exercise("01.2 tok_emb + pos_emb", "check_embeddings")
block_size = 8  # the lesson's global


@EX.right
def lesson(idx, tok_table, pos_table):
    B, T = idx.shape
    return tok_table(idx) + pos_table(torch.arange(T, device=idx.device))


@EX.right
def weight_rows(idx, tok_table, pos_table):
    return tok_table.weight[idx] + pos_table.weight[: idx.shape[1]]


@EX.right
def functional(idx, tok_table, pos_table):
    return F.embedding(idx, tok_table.weight) + F.embedding(torch.arange(idx.size(1)), pos_table.weight)


@EX.right
def positions_per_row(idx, tok_table, pos_table):
    B, T = idx.shape
    pos = torch.arange(T).unsqueeze(0).expand(B, T)  # (B, T) positions
    return tok_table(idx) + pos_table(pos)


@EX.right
def loop_over_the_batch(idx, tok_table, pos_table):
    rows = [tok_table(row) + pos_table(torch.arange(len(row))) for row in idx]
    return torch.stack(rows)


@EX.right
def in_place_on_its_own_tensor(idx, tok_table, pos_table):
    x = tok_table(idx)
    x += pos_table(torch.arange(idx.size(-1)))
    return x


@EX.right
def new_tensor_positions(idx, tok_table, pos_table):
    return tok_table(idx) + pos_table(idx.new_tensor(list(range(idx.shape[1]))))


@EX.right
def float64_then_back(idx, tok_table, pos_table):
    x = tok_table(idx).double() + pos_table(torch.arange(idx.shape[1])).double()
    return x.float()


@EX.right
def index_select(idx, tok_table, pos_table):
    B, T = idx.shape
    tok = tok_table.weight.index_select(0, idx.reshape(-1)).view(B, T, -1)
    return tok + pos_table.weight.narrow(0, 0, T)


@EX.right
def explicit_broadcast(idx, tok_table, pos_table):
    T = idx.shape[1]
    return torch.add(tok_table(idx), pos_table(torch.arange(T))[None, :, :])


# --- wrong answers
@EX.wrong("MISSING_POSITION_EMBEDDING")
def tokens_only(idx, tok_table, pos_table):
    return tok_table(idx)


@EX.wrong("MISSING_TOKEN_EMBEDDING")
def positions_only(idx, tok_table, pos_table):
    return pos_table(torch.arange(idx.shape[1])).repeat(idx.shape[0], 1, 1)


@EX.wrong("POSITIONS_FROM_TOKEN_IDS")
def positions_from_ids(idx, tok_table, pos_table):
    return tok_table(idx) + pos_table(idx)


@EX.wrong("POSITIONS_OFF_BY_ONE")
def positions_from_one(idx, tok_table, pos_table):
    T = idx.shape[1]
    return tok_table(idx) + pos_table(torch.arange(1, T + 1))


@EX.wrong("EMBEDDINGS_NOT_ADDED")
def multiplied(idx, tok_table, pos_table):
    return tok_table(idx) * pos_table(torch.arange(idx.shape[1]))


@EX.wrong("EMBEDDINGS_NOT_ADDED")
def concatenated(idx, tok_table, pos_table):
    B, T = idx.shape
    return torch.cat([tok_table(idx), pos_table(torch.arange(T)).expand(B, -1, -1)], dim=-1)


@EX.wrong("RAISED", says="torch.arange(T)")
def whole_position_table(idx, tok_table, pos_table):
    return tok_table(idx) + pos_table.weight


@EX.wrong("RAISED", "POSITIONS_FROM_BATCH")
def batch_size_as_length(idx, tok_table, pos_table):
    T = idx.shape[0]  # the batch size, not the length
    return tok_table(idx) + pos_table(torch.arange(T))


@EX.wrong("RAISED", says="torch.arange(T)")
def fixed_block_size(idx, tok_table, pos_table):
    return tok_table(idx) + pos_table(torch.arange(block_size))


@EX.wrong("NOT_DETERMINISTIC")
def dropout_left_on(idx, tok_table, pos_table):
    return F.dropout(tok_table(idx) + pos_table(torch.arange(idx.shape[1])), p=0.1)


@EX.wrong("INPUT_MODIFIED")
def adds_into_the_table(idx, tok_table, pos_table):
    tok_emb = tok_table(idx)
    with torch.no_grad():
        tok_table.weight.mul_(1.0)  # harmless-looking, but it writes into the learner's table ...
        tok_table.weight[0] += 1.0  # ... and this changes it
    return tok_emb + pos_table(torch.arange(idx.shape[1]))


@EX.wrong("EMBEDDINGS_NOT_ADDED")
def averaged(idx, tok_table, pos_table):
    return (tok_table(idx) + pos_table(torch.arange(idx.shape[1]))) / 2


@EX.wrong("POSITIONS_REVERSED")
def positions_backwards(idx, tok_table, pos_table):
    T = idx.shape[1]
    return tok_table(idx) + pos_table(torch.arange(T - 1, -1, -1))


@EX.wrong("WRONG_TYPE")
def returns_both(idx, tok_table, pos_table):
    return tok_table(idx), pos_table(torch.arange(idx.shape[1]))
