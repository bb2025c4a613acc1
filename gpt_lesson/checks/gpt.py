"""Checks for lesson 08: assembling the whole GPT, counting its parameters, loading the source model's weights."""
from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import model, reference
from .feed_forward import NO_EXPANSION
from .runner import (
    Forbidden,
    Step,
    call,
    close,
    int_kind_problem,
    is_whole_number,
    kind_of,
    learner_check,
    match_variant,
    require_callable,
    run_cases,
    screen,
    whole,
)
from .tokens import EMBEDDINGS_NOT_ADDED, MISSING_POSITION_EMBEDDING, POSITIONS_FROM_TOKEN_IDS, POSITIONS_OFF_BY_ONE
from .tokens import TEXTS as TOKEN_TEXTS
from .verdicts import (
    MESSAGES,
    N_,
    NOT_DETERMINISTIC,
    WRONG_TYPE,
    WRONG_VALUE,
    WRONG_VALUES,
    Bug,
    Case,
    CheckResult,
    Verdict,
    say,
    variant,
)

# Bound at import: a later assignment to gpt_lesson.model or .reference changes neither the references
# nor what counts as calling them.
_GPT, _GPTConfig, _count_parameters_by_part = model.GPT, model.GPTConfig, model.count_parameters_by_part
_Block, _CausalSelfAttention, _FeedForward = model.Block, model.CausalSelfAttention, model.FeedForward
_SourceGPT, _SourceBlock = reference.GPT, reference.Block
_GPT_forward, _SourceGPT_forward = model.GPT.forward, reference.GPT.forward
_torch_load_code = torch.load.__code__

# Labels: stable identifiers in CheckResult.diagnosis.
MISSING_FINAL_LN = N_("final LayerNorm ln_f skipped")
LN_F_BEFORE_BLOCKS = N_("ln_f applied before the blocks")
BLOCKS_SKIPPED = N_("blocks skipped")
ONE_BLOCK_ONLY = N_("only one block applied")
LOGITS_FLATTENED = N_("logits flattened to (B*T, vocab_size)")
LAST_POSITION_ONLY = N_("only the last position's logits")
PROBABILITIES_NOT_LOGITS = N_("probabilities instead of logits")
WRONG_KEYS = N_("wrong part names")
ATTENTION_BIASES = N_("biases counted in attention")
NO_OUTPUT_PROJECTION = N_("attention output projection c_proj forgotten")
COUNTED_TRIL = N_("tril buffers counted")
FFN_BIASES_MISSING = N_("feed-forward biases forgotten")
LN_BIAS_MISSING = N_("LayerNorm biases forgotten")
LN_F_MISSING = N_("final LayerNorm ln_f forgotten")
ONE_LN_PER_BLOCK = N_("one LayerNorm per block")
LM_HEAD_BIAS_MISSING = N_("lm_head bias forgotten")
WEIGHT_TYING = N_("lm_head tied to the token embedding")
NOT_TIMES_N_LAYER = N_("n_layer not multiplied")
SOURCE_CLASS = N_("returned the source model's class")
NOT_GPT = N_("not a gpt_lesson.GPT")
WEIGHTS_NOT_LOADED = N_("weights not loaded")
CONFIG_CHANGED = N_("config differs from the given one")
BLOCKS_REVERSED = N_("blocks applied in reverse order")
LOG_PROBABILITIES = N_("log-probabilities instead of logits")
POSITIONS_SIZED_BY_VOCAB = N_("position embedding counted with vocab_size")
BIASES_NOT_TIMES_N_LAYER = N_("biases not multiplied by n_layer")
UNSAFE_LOAD = N_("torch.load with weights_only=False")
WEIGHTS_DTYPE = N_("weights in another dtype")

TEXTS = {
    "no_ln_f": N_("the final LayerNorm is missing: logits = lm_head(ln_f(blocks(x)))."),
    "ln_f_first": N_("ln_f comes after the blocks, right before lm_head: lm_head(ln_f(blocks(x)))."),
    "no_blocks": N_("the blocks were skipped: x = model.blocks(x) (an nn.Sequential runs all n_layer of them)."),
    "one_block": N_("only one block ran: model.blocks(x) runs all n_layer blocks in order (or loop over them)."),
    "flattened": N_("you returned the logits flattened to (B*T, vocab_size), the source's view for the loss; "
                    "return them as (B, T, vocab_size) and flatten only inside F.cross_entropy."),
    "last_only": N_("you returned only the last position's logits (what generation reads); return all of them: "
                    "(B, T, vocab_size)."),
    "probabilities": N_("you applied a softmax: the model returns logits, the raw scores; softmax comes later, in "
                        "the loss or when sampling."),
    "reversed": N_("you ran the blocks from the last to the first; model.blocks(x) runs them in order, first to last."),
    "log_probabilities": N_("you applied log_softmax: the model returns logits, the raw scores; the loss "
                            "(F.cross_entropy) takes the log-softmax itself."),
    "positions_vocab": N_("the position table has block_size rows, not vocab_size: block_size * C."),
    "biases_once": N_("you counted the biases once; every block has its own: n_layer * (8 * C**2 + 5 * C)."),
    "unsafe_load": N_("   torch.load(..., weights_only=False) unpickles whatever the file holds: a checkpoint from "
                      "elsewhere could run code while loading. Load tensors only: torch.load(path, weights_only=True) "
                      "(the default since PyTorch 2.6)."),
    "dtype": N_("   Your model's weights are {got}; the checkpoint holds {expected} weights. Load them as they are "
                "(no .double(), .half() or .to(dtype) afterwards)."),
    "step_tok": N_("the token embedding"),
    "step_pos": N_("the position embedding"),
    "step_sum": N_("tok_emb + pos_emb"),
    "step_blocks": N_("the output of the blocks"),
    "step_ln_f": N_("ln_f of it"),
    "positions_error": N_("an index is past the end of a table: the position table has block_size rows and the "
                          "token ids go up to vocab_size - 1, so positions looked up with the token ids fail as soon "
                          "as an id is >= block_size. Positions are torch.arange(T)."),
    "fixed_length": N_("the positions must fit this input: torch.arange(T) with T = idx.size(1), not a fixed "
                       "length (the check uses several)."),
    "norm_after_head": N_("ln_f normalises the n_embd channels of the stream, so it comes before lm_head: "
                          "lm_head(ln_f(x)), not ln_f(lm_head(x))."),
    "case_model": N_("GPT({V}, {C}, {nh}, {L}, {bs}) and idx of shape {shape}"),
    "case_sizes": N_("vocab_size={V}, n_embd={C}, n_layer={L}, block_size={bs}"),
    "forward_passed": N_("Your forward gives the same (B, T, vocab_size) logits as gpt_lesson.GPT on {count} models."),
    "count_not_dict": N_("   Your function returned {kind}; return a dict with the keys {keys} (or the total as an "
                         "int)."),
    "keys": N_("   Your dict has the keys {got}; use exactly {expected}, as count_parameters_by_part."),
    "part_value": N_("   For {config}, part '{part}': {detail}"),
    "part_mismatch": N_("   For {config}, part '{part}': expected {expected:,}, got {got:,}."),
    "total_mismatch": N_("   For {config}: expected {expected:,} parameters in all, got {got:,}."),
    "attention_biases": N_("c_attn and c_proj have no biases in this model (bias=False): attention is 4 * C**2 per "
                           "block (3 * C**2 for q, k, v and C**2 for c_proj)."),
    "no_c_proj": N_("3 * C**2 covers q, k and v; the output projection c_proj adds C**2 more: 4 * C**2 per block."),
    "tril": N_("the tril masks are buffers, saved in the state_dict but not trained: they are not parameters."),
    "ffn_biases": N_("the two Linear layers of the FFN have biases: 4 * C and C, so 8 * C**2 + 5 * C per block."),
    "ffn_expansion": N_("the FFN expands to 4 * C: C * 4C + 4C + 4C * C + C = 8 * C**2 + 5 * C per block."),
    "ln_bias": N_("a LayerNorm has a weight and a bias, 2 * C parameters: two per block and ln_f, "
                  "n_layer * 4 * C + 2 * C."),
    "ln_f": N_("ln_f, the final LayerNorm before lm_head, adds 2 * C: n_layer * 4 * C + 2 * C."),
    "one_ln": N_("each block has two LayerNorms (ln1 and ln2), each 2 * C: n_layer * 4 * C + 2 * C with ln_f."),
    "lm_head_bias": N_("lm_head is nn.Linear(C, vocab_size) with a bias: C * V + V."),
    "tying": N_("GPT-2 ties lm_head to the token embedding, but this model does not: lm_head has its own C * V "
                "weights and V biases."),
    "n_layer": N_("that is one block's worth: multiply the per-block parts by n_layer."),
    "count_passed": N_("Your counts equal count_parameters_by_part(GPT(...)) for {count} sizes."),
    "not_module": N_("   Your function returned {kind}; return the model, a gpt_lesson.GPT with the weights loaded."),
    "source_class": N_("   You returned a gpt_lesson.reference.GPT, the source model's class; build a gpt_lesson.GPT "
                       "from config and load the checkpoint into it."),
    "not_gpt": N_("   You returned {kind}; build gpt_lesson.GPT(config) and load the checkpoint into it."),
    "not_loaded": N_("   {count} of {total} tensors differ from the checkpoint's, e.g. {keys}: load them with "
                     "model.load_state_dict(torch.load(path, weights_only=True), strict=True)."),
    "config": N_("   Your model's config differs from the given one ({fields}): build it with GPT(config)."),
    "logits": N_("   The weights are loaded but the logits differ from the source model's (eval mode)."),
    "size_mismatch": N_("the model's sizes do not match the checkpoint: build it from the config you are given, "
                        "GPT(config)."),
    "missing_keys": N_("the checkpoint and the model have different keys: load a state_dict of the source model "
                       "into gpt_lesson.GPT (the names are the same)."),
    "load_passed": N_("Your function loads all {count} tensors of the source model's checkpoint into gpt_lesson.GPT; "
                      "the logits are equal."),
}
PARTS = ("token embedding", "position embedding", "attention", "feed-forward", "layer norms", "lm_head")


def _bug(label: str, key: str, **fields: object) -> Bug:
    return Bug(label, TEXTS[key], fields)


# ----------------------------------------------------------------------------------------------
# The forward pass


def _forward(m: model.GPT, idx: torch.Tensor, *, positions: str = "arange", combine: str = "add",
             blocks: str = "all", ln_f: str = "after") -> torch.Tensor:
    T = idx.size(1)
    pos_ids = {"arange": torch.arange(T), "from 1": torch.arange(1, T + 1), "ids": idx}.get(positions)
    tok = m.token_embedding_table(idx)
    pos = m.position_embedding_table(pos_ids) if pos_ids is not None else 0
    x = tok * pos if combine == "multiply" else tok + pos
    x = m.ln_f(x) if ln_f == "before" else x
    x = {"all": m.blocks, "none": lambda h: h, "first": m.blocks[0], "last": m.blocks[-1],
         "reversed": lambda h: functools.reduce(lambda a, b: b(a), list(m.blocks)[::-1], h)}[blocks](x)
    return m.lm_head(m.ln_f(x) if ln_f == "after" else x)


def _forward_variants() -> list:
    t = TOKEN_TEXTS
    return [
        variant(MISSING_POSITION_EMBEDDING, t["pos_missing"], lambda m, i: _forward(m, i, positions="none")),
        variant(POSITIONS_FROM_TOKEN_IDS, t["pos_from_ids"], lambda m, i: _forward(m, i, positions="ids")),
        variant(POSITIONS_OFF_BY_ONE, t["pos_off_by_one"], lambda m, i: _forward(m, i, positions="from 1")),
        variant(EMBEDDINGS_NOT_ADDED, t["multiplied"], lambda m, i: _forward(m, i, combine="multiply")),
        variant(LN_F_BEFORE_BLOCKS, TEXTS["ln_f_first"], lambda m, i: _forward(m, i, ln_f="before")),
        variant(BLOCKS_SKIPPED, TEXTS["no_blocks"], lambda m, i: _forward(m, i, blocks="none")),
        variant(ONE_BLOCK_ONLY, TEXTS["one_block"], lambda m, i: _forward(m, i, blocks="first")),
        variant(ONE_BLOCK_ONLY, TEXTS["one_block"], lambda m, i: _forward(m, i, blocks="last")),
        variant(BLOCKS_REVERSED, TEXTS["reversed"], lambda m, i: _forward(m, i, blocks="reversed")),
        variant(MISSING_FINAL_LN, TEXTS["no_ln_f"], lambda m, i: _forward(m, i, ln_f="none")),
        variant(LOGITS_FLATTENED, TEXTS["flattened"], lambda m, i: m(i)[0].reshape(-1, m.config.vocab_size)),
        variant(LAST_POSITION_ONLY, TEXTS["last_only"], lambda m, i: m(i)[0][:, -1, :]),
        variant(PROBABILITIES_NOT_LOGITS, TEXTS["probabilities"], lambda m, i: F.softmax(m(i)[0], dim=-1)),
        variant(LOG_PROBABILITIES, TEXTS["log_probabilities"], lambda m, i: F.log_softmax(m(i)[0], dim=-1)),
    ]


def _forward_steps(m: model.GPT, idx: torch.Tensor) -> list[Step]:
    with torch.no_grad():
        tok = m.token_embedding_table(idx)
        pos = m.position_embedding_table(torch.arange(idx.size(1)))
        x = m.blocks(tok + pos)
        return [Step(TEXTS["step_tok"], tok), Step(TEXTS["step_pos"], pos), Step(TEXTS["step_sum"], tok + pos),
                Step(TEXTS["step_blocks"], x), Step(TEXTS["step_ln_f"], m.ln_f(x))]


def _logits(m: model.GPT, idx: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return m(idx)[0]


def _random_model(seed: int, V: int, C: int, nh: int, L: int, bs: int) -> model.GPT:
    """A GPT in eval mode with weights large enough that every skipped step changes the logits."""
    torch.manual_seed(seed)
    m = _GPT(V, C, nh, L, bs, dropout=0.0).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            is_gain = ("ln" in name) and name.endswith("weight")
            p.copy_(1 + 0.3 * torch.randn_like(p) if is_gain else 0.3 * torch.randn_like(p))
    return m


@learner_check
def check_gpt_forward(fn: Callable[[nn.Module, torch.Tensor], torch.Tensor], *, strict: bool = False,
                      hidden: bool = False) -> CheckResult:
    """Check ``fn(model, idx)`` -> logits (B, T, vocab_size), assembled from the model's parts.

    ``model`` is a :class:`gpt_lesson.GPT` in eval mode; ``fn`` uses ``model.token_embedding_table``,
    ``position_embedding_table``, ``blocks``, ``ln_f`` and ``lm_head`` (calling ``model(idx)`` is refused).
    """
    name = "check_gpt_forward"
    require_callable(name, fn)
    configs = [(50, (11, 16, 2, 2, 8), (2, 5)), (51, (7, 12, 3, 3, 6), (3, 6))]
    configs += [(52, (23, 8, 1, 1, 4), (1, 4)), (53, (5, 20, 4, 2, 10), (2, 3))] if hidden else []
    cases = []
    for seed, sizes, (B, T) in configs:
        m = _random_model(seed, *sizes)
        idx = torch.randint(sizes[0], (B, T), generator=torch.Generator().manual_seed(seed))
        V, C, nh, L, bs = sizes
        description = say(TEXTS["case_model"], V=V, C=C, nh=nh, L=L, bs=bs, shape=(B, T))
        cases.append(Case((m, idx), description, functools.partial(_logits, m, idx), _forward_variants(),
                          functools.partial(_forward_steps, m, idx)))
    forbidden = Forbidden({_GPT_forward: "gpt_lesson.GPT.forward", _SourceGPT_forward: "gpt_lesson.reference.GPT.forward"})

    def on_error(error: Exception, case: Case) -> list[Bug] | None:
        """An index past a table: run again on ids below block_size, where the bug shows as a variant."""
        if "index out of range" not in str(error):
            return None
        m, idx = case.args
        bs = m.config.block_size
        gentle = idx[:, : bs - 1] % min(m.config.vocab_size, bs - 1)
        again = call(fn, (m, gentle), forbidden)
        if not isinstance(again.value, torch.Tensor) or not again.value.is_floating_point():
            return None
        found = match_variant(again.value, Case((m, gentle), "", None, _forward_variants()))
        return list(found.bugs) if found is not None else None

    hints = [("index out of range", TEXTS["positions_error"]), ("must match the size", TEXTS["fixed_length"]),
             ("expected input with shape", TEXTS["norm_after_head"])]
    return run_cases(Verdict(name), fn, cases, forbidden=forbidden, hints=hints, on_error=on_error,
                     success=say(TEXTS["forward_passed"], count=len(cases)))


# ----------------------------------------------------------------------------------------------
# The parameter count


def _part_variants(V: int, C: int, L: int, bs: int) -> dict[str, list[tuple[Bug, int]]]:
    return {
        "attention": [(_bug(ATTENTION_BIASES, "attention_biases"), L * (4 * C * C + 4 * C)),
                      (_bug(ATTENTION_BIASES, "attention_biases"), L * (4 * C * C + 2 * C)),
                      (_bug(NO_OUTPUT_PROJECTION, "no_c_proj"), L * 3 * C * C),
                      (_bug(COUNTED_TRIL, "tril"), L * (4 * C * C + bs * bs)),
                      (_bug(NOT_TIMES_N_LAYER, "n_layer"), 4 * C * C)],
        "feed-forward": [(_bug(FFN_BIASES_MISSING, "ffn_biases"), L * 8 * C * C),
                         (_bug(FFN_BIASES_MISSING, "ffn_biases"), L * (8 * C * C + 4 * C)),
                         (_bug(FFN_BIASES_MISSING, "ffn_biases"), L * (8 * C * C + C)),
                         (Bug(NO_EXPANSION, TEXTS["ffn_expansion"]), L * (2 * C * C + 2 * C)),
                         (_bug(NOT_TIMES_N_LAYER, "n_layer"), 8 * C * C + 5 * C),
                         (_bug(BIASES_NOT_TIMES_N_LAYER, "biases_once"), L * 8 * C * C + 5 * C)],
        "position embedding": [(_bug(POSITIONS_SIZED_BY_VOCAB, "positions_vocab"), V * C)],
        "layer norms": [(_bug(LN_BIAS_MISSING, "ln_bias"), L * 2 * C + C),
                        (_bug(LN_F_MISSING, "ln_f"), L * 4 * C),
                        (_bug(ONE_LN_PER_BLOCK, "one_ln"), L * 2 * C + 2 * C),
                        (_bug(NOT_TIMES_N_LAYER, "n_layer"), 6 * C)],
        "lm_head": [(_bug(LM_HEAD_BIAS_MISSING, "lm_head_bias"), C * V),
                    (_bug(WEIGHT_TYING, "tying"), V), (_bug(WEIGHT_TYING, "tying"), 0)],
    }


def _total_variants(expected: dict[str, int], V: int, C: int, L: int, bs: int) -> list[tuple[Bug, int]]:
    total = sum(expected.values())
    found = [(bug, total - expected[part] + value)
             for part, options in _part_variants(V, C, L, bs).items() for bug, value in options]
    per_block = expected["attention"] + expected["feed-forward"] + expected["layer norms"] - 2 * C
    return found + [(_bug(NOT_TIMES_N_LAYER, "n_layer"), total - per_block + per_block // L),
                    (_bug(COUNTED_TRIL, "tril"), total + L * bs * bs)]


@learner_check
def check_parameter_count(fn: Callable[[int, int, int, int], dict | int], *, strict: bool = False,
                          hidden: bool = False) -> CheckResult:
    """Check ``fn(vocab_size, n_embd, n_layer, block_size)`` -> the parameter count of a GPT by part.

    The answer is a dict with the keys of :func:`gpt_lesson.model.count_parameters_by_part` (or the
    total as an int), compared on several sizes, so no single number can be hard-coded.
    """
    name = "check_parameter_count"
    require_callable(name, fn)
    verdict = Verdict(name)
    forbidden = Forbidden({_count_parameters_by_part: "gpt_lesson.model.count_parameters_by_part",
                           _GPT: "gpt_lesson.GPT", _SourceGPT: "gpt_lesson.reference.GPT",
                           _Block: "gpt_lesson.model.Block", _SourceBlock: "gpt_lesson.reference.Block",
                           _CausalSelfAttention: "gpt_lesson.model.CausalSelfAttention",
                           _FeedForward: "gpt_lesson.model.FeedForward"})
    sizes = [(1000, 64, 4, 3, 128), (65, 32, 4, 2, 16), (50, 48, 3, 4, 24)]
    sizes += [(17, 8, 2, 1, 5), (300, 96, 6, 6, 64)] if hidden else []
    for V, C, nh, L, bs in sizes:
        config = say(TEXTS["case_sizes"], V=V, C=C, L=L, bs=bs)
        outcome = call(fn, (V, C, L, bs), forbidden)
        early = screen(verdict, outcome, pure=True)
        if early is not None:
            return early
        again = call(fn, (V, C, L, bs), forbidden)
        early = screen(verdict, again, pure=True)
        if early is not None:
            return early
        got = outcome.value
        if _count_answer(got) != _count_answer(again.value):
            return verdict.failed(NOT_DETERMINISTIC, say(MESSAGES["not_deterministic"]))
        expected = _count_parameters_by_part(_GPT(V, C, nh, L, bs))  # computed after the learner's call
        if not isinstance(got, dict):
            problem = int_kind_problem(got, config)
            if problem is not None:
                text = say(TEXTS["count_not_dict"], kind=kind_of(got), keys=list(PARTS))
                return verdict.failed(problem[0], text if problem[0] == WRONG_TYPE else problem[1])
            total = sum(expected.values())
            if whole(got) != total:
                text = say(TEXTS["total_mismatch"], config=config, expected=total, got=whole(got))
                bug = next((b for b, value in _total_variants(expected, V, C, L, bs) if value == whole(got)), None)
                return verdict.failed_with([bug], text) if bug else verdict.failed(WRONG_VALUE, text)
            continue
        items = dict(dict.items(got))  # read with dict's own methods: a subclass's overrides are not called
        if any(type(k) is not str for k in items) or set(items) != set(PARTS):
            shown = sorted(str.__str__(k) if isinstance(k, str) else repr(k) for k in items)
            return verdict.failed(WRONG_KEYS, say(TEXTS["keys"], got=shown, expected=list(PARTS)))
        for part in PARTS:
            problem = int_kind_problem(items[part], config)
            if problem is not None:
                return verdict.failed(problem[0], say(TEXTS["part_value"], config=config, part=part,
                                                      detail=problem[1].strip()))
            if whole(items[part]) != expected[part]:
                text = say(TEXTS["part_mismatch"], config=config, part=part, expected=expected[part],
                           got=whole(items[part]))
                options = _part_variants(V, C, L, bs).get(part, [])
                bug = next((b for b, value in options if value == whole(items[part])), None)
                return verdict.failed_with([bug], text) if bug else verdict.failed(WRONG_VALUE, text)
    return verdict.passed(say(TEXTS["count_passed"], count=len(sizes)))


def _count_answer(value: object) -> object:
    """A parameter-count answer in a form two calls can be compared by (None when it is neither kind)."""
    if isinstance(value, dict):
        return sorted((repr(k), whole(v) if is_whole_number(v) else repr(v)) for k, v in dict.items(value))
    return whole(value) if is_whole_number(value) else repr(type(value))


# ----------------------------------------------------------------------------------------------
# Loading the source model's weights


@learner_check
def check_load_source_weights(fn: Callable[[Path, model.GPTConfig], nn.Module], *, strict: bool = False,
                              hidden: bool = False) -> CheckResult:
    """Check ``fn(path, config)`` -> a :class:`gpt_lesson.GPT` holding the weights saved at ``path``.

    ``path`` is a file written by ``torch.save(source.state_dict(), path)`` for a
    :class:`gpt_lesson.reference.GPT` (the source model, its own random weights); ``config`` its
    sizes as a :class:`gpt_lesson.GPTConfig`. Checked: the class, every tensor, equal logits in eval mode.
    """
    name = "check_load_source_weights"
    require_callable(name, fn)
    verdict = Verdict(name)
    hints = [("size mismatch", TEXTS["size_mismatch"]), ("Missing key", TEXTS["missing_keys"]),
             ("Unexpected key", TEXTS["missing_keys"])]
    sizes = [(60, (13, 16, 2, 2, 8)), (61, (9, 12, 3, 1, 6))] + ([(62, (21, 8, 2, 3, 4))] if hidden else [])
    for seed, (V, C, nh, L, bs) in sizes:
        torch.manual_seed(seed)
        source = _SourceGPT(V, C, nh, L, bs).eval()
        config = _GPTConfig(V, C, nh, L, bs)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "source_model.pt"
            torch.save(source.state_dict(), path)
            outcome = call(fn, (path, _GPTConfig(**config.to_dict())), observe=_unsafe_load)
        early = screen(verdict, outcome, hints=hints)
        if early is not None:
            return early
        if outcome.observed is not None:
            return verdict.failed(UNSAFE_LOAD, say(TEXTS["unsafe_load"]))
        got = outcome.value
        if _is_class(got, _SourceGPT):
            return verdict.failed(SOURCE_CLASS, say(TEXTS["source_class"]))
        if not _is_class(got, _GPT):
            key = "not_gpt" if isinstance(got, nn.Module) else "not_module"
            return verdict.failed(NOT_GPT if key == "not_gpt" else WRONG_TYPE, say(TEXTS[key], kind=kind_of(got)))
        changed = [f for f, v in config.to_dict().items() if got.config.to_dict().get(f) != v]
        if changed:
            return verdict.failed(CONFIG_CHANGED, say(TEXTS["config"], fields=", ".join(changed)))
        ours, theirs = got.state_dict(), source.state_dict()
        dtypes = sorted({str(t.dtype).replace("torch.", "") for t in ours.values() if t.is_floating_point()}
                        - {"float32"})
        if dtypes:
            return verdict.failed(WEIGHTS_DTYPE, say(TEXTS["dtype"], got=", ".join(dtypes), expected="float32"))
        differ = [k for k, t in theirs.items()
                  if k not in ours or ours[k].shape != t.shape or not torch.equal(ours[k], t)]
        if differ:
            return verdict.failed(WEIGHTS_NOT_LOADED, say(TEXTS["not_loaded"], count=len(differ), total=len(theirs),
                                                          keys=", ".join(differ[:3])))
        idx = torch.randint(V, (2, bs), generator=torch.Generator().manual_seed(seed))
        was_training = got.training
        try:
            with torch.no_grad():
                same = close(got.eval()(idx)[0], source(idx)[0])
        finally:
            got.train(was_training)
        if not same:
            return verdict.failed(WRONG_VALUES, say(TEXTS["logits"]))
    return verdict.passed(say(TEXTS["load_passed"], count=len(source.state_dict())))


def _unsafe_load(frame) -> str | None:  # noqa: ANN001 - a frame of the learner's call
    """Seen on entering torch.load: "weights_only=False" when the learner turned the safeguard off."""
    if frame.f_code is _torch_load_code and frame.f_locals.get("weights_only") is False:
        return "weights_only=False"
    return None


def _is_class(obj: object, cls: type) -> bool:
    """``obj`` is a ``cls``, or an object of the same class from a fresh copy of the package (the graded checks')."""
    if isinstance(obj, cls):
        return True
    kind = type(obj)
    return (kind.__qualname__ == cls.__qualname__ and kind.__module__.rsplit(".", 1)[-1] == cls.__module__.rsplit(
        ".", 1)[-1] and getattr(getattr(kind, "forward", None), "__code__", None) == cls.forward.__code__)
