"""A corpus of learner solutions to the exercises of lessons 01-08 (issue 22 part 3).

Right answers in unusual styles and typical wrong ones, per exercise; ``tests/test_learner_solutions.py``
runs them all through the checks, and ``python tests/learner_solutions/report.py`` prints the counts.
"""
from __future__ import annotations

import importlib

MODULES = ["l01_tokenizer", "l01_embed", "l01_embed_one_hot", "l02_scores", "l02_softmax", "l03_causal_head",
           "l03_fused_head", "l04_head_scores", "l04_stable_softmax", "l05_heads", "l06_ffn", "l07_layer_norm",
           "l07_block", "l08_gpt"]


def exercises():
    """Every exercise of the corpus, in lesson order."""
    found = []
    for name in MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        found += [v for v in vars(module).values() if type(v).__name__ == "Exercise" and v not in found]
    return found
