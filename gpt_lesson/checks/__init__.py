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
:mod:`.tokens`                ``check_tokenizer``, ``check_embeddings``                    01, 08, 09
:mod:`.attention`             ``check_attention_scores``, ``check_softmax_weights``,       02-04, 08-11
                              ``check_causal_attention``
:mod:`.heads`                 ``check_split_heads``, ``check_merge_heads``                 05, 10
:mod:`.feed_forward`          ``check_feed_forward``                                       06
:mod:`.block`                 ``check_layer_norm``, ``check_block``                        07
:mod:`.gpt`                   ``check_gpt_forward``, ``check_parameter_count``,            08
                              ``check_load_source_weights``
:mod:`.interview`             ``check_cached_attention``, ``check_kv_cache_memory``        11
:mod:`.distributed`           ``check_effective_batch``, ``check_grad_accum_steps``,       12
                              ``check_allreduce_bytes``
:mod:`.generation`            ``check_top_p``                                              10, 11
:mod:`.runner`                the one runner: calls the learner's code, judges, reports
:mod:`.verdicts`              ``CheckResult``, the labels and messages every check shares
============================  ==========================================================  =========

Each module keeps its diagnosis labels (stable English identifiers, ``CheckResult.diagnosis``)
and the templates of its messages at the top, for the message catalogue.
"""
from __future__ import annotations

from . import attention, block, distributed, feed_forward, gpt, heads, interview, tokens, verdicts
from .attention import check_attention_scores, check_causal_attention, check_softmax_weights
from .block import check_block, check_layer_norm
from .distributed import check_allreduce_bytes, check_effective_batch, check_grad_accum_steps
from .feed_forward import check_feed_forward
from .generation import check_top_p
from .gpt import check_gpt_forward, check_load_source_weights, check_parameter_count
from .heads import check_merge_heads, check_split_heads
from .interview import check_cached_attention, check_kv_cache_memory
from .tokens import check_embeddings, check_tokenizer
from .verdicts import CheckResult

# Every diagnosis label, by constant name (``checks.NO_MASK == "no mask"``), from every module.
LABELS: dict[str, str] = {
    name: value
    for module in (verdicts, tokens, attention, heads, feed_forward, block, gpt, interview, distributed)
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
    "check_cached_attention", "check_kv_cache_memory",
    "check_effective_batch", "check_grad_accum_steps", "check_allreduce_bytes",
    "check_top_p",
]
