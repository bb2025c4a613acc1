"""Self-checks for the lessons' exercises ("Your turn").

Each check runs the learner's function on small seeded inputs, compares the result with the
library's reference, prints a verdict and returns a :class:`CheckResult` (truthy when passed).
When the answer is wrong it names the bug in plain words (what was expected, what came, what to
fix) if the answer equals one of the classic mistakes the check computes itself. A stub that
still raises ``NotImplementedError`` or returns ``None`` is "not attempted yet", so a notebook
with untouched exercises still runs top to bottom. The checks never change the notebook's
random state.

Every check also takes ``strict=True`` (raise ``AssertionError`` on failure: nbgrader test cells)
and ``hidden=True`` (more cases, with sizes the learner has not seen).

One module per lesson group, one runner for all:

============================  ==========================================================  =========
module                        checks                                                       lessons
============================  ==========================================================  =========
:mod:`.tokens`                ``check_tokenizer``, ``check_embeddings``                    01, 08
:mod:`.attention`             ``check_attention_scores``, ``check_softmax_weights``,       02-04, 08, 10, 11
                              ``check_causal_attention``
:mod:`.heads`                 ``check_split_heads``, ``check_merge_heads``                 05, 10
:mod:`.feed_forward`          ``check_feed_forward``                                       06
:mod:`.block`                 ``check_layer_norm``, ``check_block``                        07
:mod:`.gpt`                   ``check_gpt_forward``, ``check_parameter_count``,            08
                              ``check_load_source_weights``
:mod:`.training`              ``check_lr_schedule``, ``check_train_step``,                 09
                              ``check_estimate_loss``, ``check_grad_accumulation``
:mod:`.interview`             ``check_cached_attention``, ``check_kv_cache_memory``        11
:mod:`.distributed`           ``check_effective_batch``, ``check_grad_accum_steps``,       12
                              ``check_allreduce_bytes``, ``check_allreduce_average``
:mod:`.generation`            ``check_temperature_top_k``, ``check_top_p``,                10, 11
                              ``check_decode_step``
:mod:`.bpe`                   ``check_bpe_merge``, ``check_bpe_encode``,                   13
                              ``check_gpt2_pre_split``
:mod:`.llama`                 ``check_rms_norm``, ``check_rope``, ``check_repeat_kv``      14
:mod:`.serving`               ``check_locate``, ``check_grow_table``,                      15
                              ``check_free_sequence_blocks``
:mod:`.runner`                the one runner: calls the learner's code, judges, reports
:mod:`.verdicts`              ``CheckResult``, the labels and messages every check shares
============================  ==========================================================  =========

Each module keeps its diagnosis labels (stable English identifiers, ``CheckResult.diagnosis``)
and the templates of its messages at the top, for the message catalogue.
"""
from __future__ import annotations

from . import (
    attention,
    block,
    bpe,
    distributed,
    feed_forward,
    generation,
    gpt,
    heads,
    interview,
    llama,
    serving,
    tokens,
    training,
    verdicts,
)
from .attention import check_attention_scores, check_causal_attention, check_softmax_weights
from .block import check_block, check_layer_norm
from .bpe import check_bpe_encode, check_bpe_merge, check_gpt2_pre_split
from .distributed import check_allreduce_average, check_allreduce_bytes, check_effective_batch, check_grad_accum_steps
from .feed_forward import check_feed_forward
from .generation import check_decode_step, check_temperature_top_k, check_top_p
from .gpt import check_gpt_forward, check_load_source_weights, check_parameter_count
from .heads import check_merge_heads, check_split_heads
from .interview import check_cached_attention, check_kv_cache_memory
from .llama import check_repeat_kv, check_rms_norm, check_rope
from .serving import check_free_sequence_blocks, check_grow_table, check_locate
from .tokens import check_embeddings, check_tokenizer
from .training import check_estimate_loss, check_grad_accumulation, check_lr_schedule, check_train_step
from .verdicts import CheckResult

# Every diagnosis label, by constant name (``checks.NO_MASK == "no mask"``), from every module.
LABELS: dict[str, str] = {
    name: value
    for module in (verdicts, tokens, attention, heads, feed_forward, block, gpt, training, distributed, generation, interview, bpe, llama, serving)
    for name, value in vars(module).items()
    if name.isupper() and not name.startswith("_") and isinstance(value, str)
}
globals().update(LABELS)

__all__ = [
    "CheckResult", "LABELS",
    "check_tokenizer", "check_embeddings",
    "check_attention_scores", "check_softmax_weights", "check_causal_attention",
    "check_split_heads", "check_merge_heads",
    "check_feed_forward",
    "check_layer_norm", "check_block",
    "check_gpt_forward", "check_parameter_count", "check_load_source_weights",
    "check_lr_schedule", "check_train_step", "check_estimate_loss", "check_grad_accumulation",
    "check_effective_batch", "check_grad_accum_steps", "check_allreduce_bytes", "check_allreduce_average",
    "check_temperature_top_k", "check_top_p", "check_decode_step",
    "check_cached_attention", "check_kv_cache_memory",
    "check_bpe_merge", "check_bpe_encode", "check_gpt2_pre_split",
    "check_rms_norm", "check_rope", "check_repeat_kv",
    "check_locate", "check_grow_table", "check_free_sequence_blocks",
]
