"""Lesson 08, Your turns 1-3: ``gpt_forward(model, idx)``, ``parameter_count(...)``, ``load_source_checkpoint``."""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from gpt_lesson import GPT
from gpt_lesson import model as M
from gpt_lesson.model import Block
from gpt_lesson.reference import GPT as SourceGPT

from ._registry import Exercise

FORWARD = Exercise("08.1 the forward pass", "check_gpt_forward")
COUNT = Exercise("08.2 count the parameters by part", "check_parameter_count")
LOAD = Exercise("08.3 load the source model's checkpoint", "check_load_source_weights")


@FORWARD.right
def lesson(model, idx):
    B, T = idx.shape
    tok_emb = model.token_embedding_table(idx)
    pos_emb = model.position_embedding_table(torch.arange(T, device=idx.device))
    x = model.blocks(tok_emb + pos_emb)
    return model.lm_head(model.ln_f(x))


@FORWARD.right
def loop_over_blocks(model, idx):
    x = model.token_embedding_table(idx) + model.position_embedding_table(torch.arange(idx.size(1)))
    for block in model.blocks:
        x = block(x)
    return model.lm_head(model.ln_f(x))


@FORWARD.right
def functional_pieces(model, idx):
    x = F.embedding(idx, model.token_embedding_table.weight) + model.position_embedding_table.weight[: idx.size(1)]
    x = model.ln_f(model.blocks(x))
    return F.linear(x, model.lm_head.weight, model.lm_head.bias)


@FORWARD.right
def in_place_on_its_own_tensor(model, idx):
    x = model.token_embedding_table(idx)
    x += model.position_embedding_table(torch.arange(idx.size(1)))
    return model.lm_head(model.ln_f(model.blocks(x)))


@FORWARD.right
def positions_per_row(model, idx):
    B, T = idx.shape
    pos = torch.arange(T).expand(B, T)
    return model.lm_head(model.ln_f(model.blocks(model.token_embedding_table(idx)
                                                 + model.position_embedding_table(pos))))


@FORWARD.right
def children_by_name(model, idx):
    parts = dict(model.named_children())
    x = parts["token_embedding_table"](idx) + parts["position_embedding_table"](torch.arange(idx.shape[-1]))
    return parts["lm_head"](parts["ln_f"](parts["blocks"](x)))


@FORWARD.right
def float64_head(model, idx):
    x = model.ln_f(model.blocks(model.token_embedding_table(idx)
                                + model.position_embedding_table(torch.arange(idx.size(1)))))
    return (x.double() @ model.lm_head.weight.double().T + model.lm_head.bias.double()).float()


@FORWARD.right
def eval_mode_inside(model, idx):
    model.eval()  # already in eval mode: nothing changes
    x = model.token_embedding_table(idx) + model.position_embedding_table(torch.arange(idx.size(1)))
    return model.lm_head(model.ln_f(model.blocks(x)))


def forward_with(**bugs):
    def fn(model, idx):
        T = idx.size(1)
        pos = model.position_embedding_table(torch.arange(T))
        x = model.token_embedding_table(idx) + (0 if bugs.get("no_pos") else pos)
        if bugs.get("reversed"):
            for block in reversed(model.blocks):
                x = block(x)
        else:
            x = x if bugs.get("no_blocks") else (model.blocks[bugs["one"]](x) if "one" in bugs else model.blocks(x))
        x = x if bugs.get("no_ln_f") else model.ln_f(x)
        logits = model.lm_head(x)
        if bugs.get("flatten"):
            return logits.view(-1, logits.size(-1))
        if bugs.get("last"):
            return logits[:, -1, :]
        if bugs.get("log_softmax"):
            return F.log_softmax(logits, dim=-1)
        return F.softmax(logits, dim=-1) if bugs.get("softmax") else logits
    return fn


for name, bugs, label in [
    ("no ln_f", {"no_ln_f": True}, "MISSING_FINAL_LN"),
    ("no position embedding", {"no_pos": True}, "MISSING_POSITION_EMBEDDING"),
    ("blocks skipped", {"no_blocks": True}, "BLOCKS_SKIPPED"),
    ("first block only", {"one": 0}, "ONE_BLOCK_ONLY"),
    ("last block only", {"one": -1}, "ONE_BLOCK_ONLY"),
    ("blocks in reverse", {"reversed": True}, "BLOCKS_REVERSED"),
    ("flattened logits", {"flatten": True}, "LOGITS_FLATTENED"),
    ("last position only", {"last": True}, "LAST_POSITION_ONLY"),
    ("probabilities", {"softmax": True}, "PROBABILITIES_NOT_LOGITS"),
    ("log-probabilities", {"log_softmax": True}, "LOG_PROBABILITIES"),
]:
    FORWARD.add((forward_with(**bugs),), name=name, right=False, labels=(label,))


@FORWARD.wrong("POSITIONS_FROM_TOKEN_IDS", "RAISED")
def positions_from_ids(model, idx):
    x = model.token_embedding_table(idx) + model.position_embedding_table(idx)
    return model.lm_head(model.ln_f(model.blocks(x)))


@FORWARD.wrong("POSITIONS_OFF_BY_ONE", "RAISED")
def positions_from_one(model, idx):
    T = idx.size(1)
    x = model.token_embedding_table(idx) + model.position_embedding_table(torch.arange(1, T + 1))
    return model.lm_head(model.ln_f(model.blocks(x)))


@FORWARD.wrong("EMBEDDINGS_NOT_ADDED")
def multiplied(model, idx):
    x = model.token_embedding_table(idx) * model.position_embedding_table(torch.arange(idx.size(1)))
    return model.lm_head(model.ln_f(model.blocks(x)))


@FORWARD.wrong("LN_F_BEFORE_BLOCKS")
def ln_f_first(model, idx):
    x = model.token_embedding_table(idx) + model.position_embedding_table(torch.arange(idx.size(1)))
    return model.lm_head(model.blocks(model.ln_f(x)))


@FORWARD.wrong("CALLED_LIBRARY")
def calls_the_model(model, idx):
    return model(idx)[0]


@FORWARD.wrong("CALLED_LIBRARY")
def calls_forward(model, idx):
    logits, _ = model.forward(idx)
    return logits


@FORWARD.wrong("RAISED", says="torch.arange(T)")
def fixed_positions(model, idx):
    x = model.token_embedding_table(idx) + model.position_embedding_table(torch.arange(8))
    return model.lm_head(model.ln_f(model.blocks(x)))


@FORWARD.wrong("RAISED", says="lm_head(ln_f(x))")
def head_before_norm(model, idx):
    x = model.token_embedding_table(idx) + model.position_embedding_table(torch.arange(idx.size(1)))
    return model.ln_f(model.lm_head(model.blocks(x)))


@FORWARD.wrong("INPUT_MODIFIED")
def switches_to_training(model, idx):
    model.train()
    x = model.token_embedding_table(idx) + model.position_embedding_table(torch.arange(idx.size(1)))
    return model.lm_head(model.ln_f(model.blocks(x)))


@FORWARD.wrong("WRONG_TYPE")
def returns_logits_and_loss(model, idx):
    x = model.token_embedding_table(idx) + model.position_embedding_table(torch.arange(idx.size(1)))
    return model.lm_head(model.ln_f(model.blocks(x))), None


# --- the parameter count
@COUNT.right
def formula(V, C, L, block_size):
    return {"token embedding": V * C, "position embedding": block_size * C, "attention": L * 4 * C**2,
            "feed-forward": L * (8 * C**2 + 5 * C), "layer norms": L * 4 * C + 2 * C, "lm_head": C * V + V}


@COUNT.right
def accumulated(V, C, L, block_size):
    parts = dict.fromkeys(["token embedding", "position embedding", "attention", "feed-forward", "layer norms",
                           "lm_head"], 0)
    parts["token embedding"] += V * C
    parts["position embedding"] += block_size * C
    for _ in range(L):
        parts["attention"] += C * 3 * C + C * C
        parts["feed-forward"] += (C * 4 * C + 4 * C) + (4 * C * C + C)
        parts["layer norms"] += 2 * (2 * C)
    parts["layer norms"] += 2 * C
    parts["lm_head"] += C * V + V
    return parts


@COUNT.right
def total_only(V, C, L, block_size):
    return V * C + block_size * C + L * (12 * C * C + 9 * C) + 2 * C + C * V + V


@COUNT.right
def numpy_values(V, C, L, block_size):
    return {k: np.int64(v) for k, v in formula(V, C, L, block_size).items()}


@COUNT.right
def ordered(V, C, L, block_size):
    return OrderedDict(formula(V, C, L, block_size))


@COUNT.right
def torch_layers(V, C, L, block_size):
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    return {"token embedding": n(nn.Embedding(V, C)), "position embedding": n(nn.Embedding(block_size, C)),
            "attention": L * (n(nn.Linear(C, 3 * C, bias=False)) + n(nn.Linear(C, C, bias=False))),
            "feed-forward": L * (n(nn.Linear(C, 4 * C)) + n(nn.Linear(4 * C, C))),
            "layer norms": (2 * L + 1) * n(nn.LayerNorm(C)), "lm_head": n(nn.Linear(C, V))}


@COUNT.right
def math_prod(V, C, L, block_size):
    return {"token embedding": math.prod((V, C)), "position embedding": math.prod((block_size, C)),
            "attention": L * (3 * C * C + C * C), "feed-forward": L * (4 * C * C + 4 * C + 4 * C * C + C),
            "layer norms": (2 * L + 1) * 2 * C, "lm_head": (C + 1) * V}


def count_with(**changes):
    def fn(V, C, L, block_size):
        parts = formula(V, C, L, block_size)
        keys = {"feed_forward": "feed-forward", "layer_norms": "layer norms", "position_embedding": "position embedding"}
        parts.update({keys.get(k, k): f(V, C, L, block_size) for k, f in changes.items()})
        return parts
    return fn


for name, changes, label in [
    ("attention biases", {"attention": lambda V, C, L, bs: L * (4 * C * C + 4 * C)}, "ATTENTION_BIASES"),
    ("no c_proj", {"attention": lambda V, C, L, bs: L * 3 * C * C}, "NO_OUTPUT_PROJECTION"),
    ("tril counted", {"attention": lambda V, C, L, bs: L * (4 * C * C + bs * bs)}, "COUNTED_TRIL"),
    ("ffn biases missing", {"feed_forward": lambda V, C, L, bs: L * 8 * C * C}, "FFN_BIASES_MISSING"),
    ("no 4x", {"feed_forward": lambda V, C, L, bs: L * (2 * C * C + 2 * C)}, "NO_EXPANSION"),
    ("ln biases missing", {"layer_norms": lambda V, C, L, bs: L * 2 * C + C}, "LN_BIAS_MISSING"),
    ("ln_f missing", {"layer_norms": lambda V, C, L, bs: L * 4 * C}, "LN_F_MISSING"),
    ("one ln per block", {"layer_norms": lambda V, C, L, bs: L * 2 * C + 2 * C}, "ONE_LN_PER_BLOCK"),
    ("lm_head bias missing", {"lm_head": lambda V, C, L, bs: C * V}, "LM_HEAD_BIAS_MISSING"),
    ("tied lm_head", {"lm_head": lambda V, C, L, bs: V}, "WEIGHT_TYING"),
    ("attention for one layer", {"attention": lambda V, C, L, bs: 4 * C * C}, "NOT_TIMES_N_LAYER"),
    ("position table of vocab size", {"position_embedding": lambda V, C, L, bs: V * C}, "POSITIONS_SIZED_BY_VOCAB"),
    ("ffn biases not times n_layer", {"feed_forward": lambda V, C, L, bs: L * 8 * C * C + 5 * C},
     "BIASES_NOT_TIMES_N_LAYER"),
]:
    COUNT.add((count_with(**changes),), name=name, right=False, labels=(label,))


@COUNT.wrong("LM_HEAD_BIAS_MISSING")
def total_without_head_bias(V, C, L, block_size):
    return total_only(V, C, L, block_size) - V


@COUNT.wrong("WRONG_KEYS")
def other_key_names(V, C, L, block_size):
    parts = formula(V, C, L, block_size)
    parts["ffn"] = parts.pop("feed-forward")
    return parts


@COUNT.wrong("FLOAT_NOT_INT")
def float_values(V, C, L, block_size):
    return {k: float(v) for k, v in formula(V, C, L, block_size).items()}


@COUNT.wrong("CALLED_LIBRARY")
def library_count(V, C, L, block_size):
    return M.count_parameters_by_part(GPT(V, C, 1, L, block_size))


@COUNT.wrong("CALLED_LIBRARY")
def builds_the_model(V, C, L, block_size):
    return sum(p.numel() for p in GPT(V, C, 1, L, block_size).parameters())


@COUNT.wrong("CALLED_LIBRARY")
def counts_a_library_block(V, C, L, block_size):
    block = sum(p.numel() for p in Block(C, 1, block_size).parameters())
    return V * C + block_size * C + L * block + 2 * C + C * V + V


@COUNT.wrong("WRONG_TYPE")
def tensor_values(V, C, L, block_size):
    return {k: torch.tensor(v) for k, v in formula(V, C, L, block_size).items()}


@COUNT.wrong("WRONG_TYPE")
def a_list(V, C, L, block_size):
    return list(formula(V, C, L, block_size).values())


# --- loading the source model's checkpoint
@LOAD.right
def strict(path, config):
    model = GPT(config)
    model.load_state_dict(torch.load(path, weights_only=True), strict=True)
    return model


@LOAD.right
def sizes_then_eval(path, config):
    model = GPT(config.vocab_size, config.n_embd, config.n_head, config.n_layer, config.block_size)
    model.load_state_dict(torch.load(str(path), map_location="cpu", weights_only=True))
    return model.eval()


@LOAD.right
def copy_each(path, config):
    model = GPT(config)
    state = torch.load(path, weights_only=True)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            tensor.copy_(state[name])
    return model


@LOAD.right
def mmap(path, config):
    model = GPT(config)
    model.load_state_dict(torch.load(path, weights_only=True, mmap=True))
    return model


@LOAD.right
def assign(path, config):
    model = GPT(config)
    model.load_state_dict(torch.load(path, weights_only=True), assign=True)
    return model


@LOAD.right
def default_weights_only(path, config):
    model = GPT(config)
    model.load_state_dict(torch.load(path))  # weights_only=True is torch's default since 2.6
    return model


@LOAD.right
def open_file(path, config):
    with open(path, "rb") as f:
        state = torch.load(f, weights_only=True)
    model = GPT(config)
    model.load_state_dict(state)
    return model


@LOAD.wrong("WEIGHTS_NOT_LOADED")
def not_loaded(path, config):
    return GPT(config)


@LOAD.wrong("WRONG_TYPE")
def returns_the_report(path, config):
    return GPT(config).load_state_dict(torch.load(path, weights_only=True))


@LOAD.wrong("NOT_GPT")
def wrapped(path, config):
    model = GPT(config)
    model.load_state_dict(torch.load(path, weights_only=True))
    return nn.Sequential(model)


@LOAD.wrong("SOURCE_CLASS")
def source_class(path, config):
    model = SourceGPT(config.vocab_size, config.n_embd, config.n_head, config.n_layer, config.block_size)
    model.load_state_dict(torch.load(path, weights_only=True))
    return model


@LOAD.wrong("RAISED", "CONFIG_CHANGED", says="GPT(config)")
def fixed_sizes(path, config):
    model = GPT(1000, 64, 4, 3, 128)
    model.load_state_dict(torch.load(path, weights_only=True))
    return model


@LOAD.wrong("CONFIG_CHANGED")
def not_causal(path, config):
    model = GPT(config.vocab_size, config.n_embd, config.n_head, config.n_layer, config.block_size, causal=False)
    model.load_state_dict(torch.load(path, weights_only=True))
    return model


@LOAD.wrong("UNSAFE_LOAD")
def weights_only_off(path, config):
    model = GPT(config)
    model.load_state_dict(torch.load(path, weights_only=False))
    return model


@LOAD.wrong("WEIGHTS_DTYPE")
def converted_to_float64(path, config):
    model = GPT(config)
    model.load_state_dict(torch.load(path, weights_only=True))
    return model.double()


@LOAD.wrong("WEIGHTS_NOT_LOADED")
def one_tensor_changed(path, config):
    model = GPT(config)
    model.load_state_dict(torch.load(path, weights_only=True))
    with torch.no_grad():
        model.lm_head.bias.zero_()
    return model


@LOAD.wrong("NOT_ATTEMPTED")
def forgot_return(path, config):
    model = GPT(config)
    model.load_state_dict(torch.load(path, weights_only=True))
