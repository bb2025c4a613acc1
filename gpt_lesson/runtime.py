"""PyTorch's process-wide settings, changed only inside a ``with`` block the caller writes.

PyTorch's thread count and its oneDNN switch hold for the whole process: a library function that
changed them would change every later computation of its caller too. The library never does; where
a small computation runs faster with other settings (lesson 10 measures it), the caller asks for them:

    with one_thread():        # tiny operators: waking a second thread costs more than it saves
        ...
    with decode_settings():   # one thread and PyTorch's own GELU: one-token steps of a small model
        generate(model, idx, 200, use_cache=True)

Each puts the caller's settings back on leaving, also after an error. This module imports only
gpt_lesson.validation, so every module can use it without an import cycle.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from .validation import check_bool, check_positive_int

__all__ = ["num_threads", "one_thread", "onednn", "decode_settings"]


@contextmanager
def num_threads(n: int) -> Iterator[None]:
    """Run PyTorch's operators on ``n`` threads inside the block (``torch.set_num_threads``), then restore."""
    check_positive_int("n", n)
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def one_thread():  # noqa: ANN201 (a context manager)
    """``with one_thread():`` runs the block on one thread, for tensors far too small to share between threads.

    On a busy 2-core machine two threads made lesson 08's residual experiments 8x slower than one
    (13.6 s against 1.6 s); the explorers and the checks run one short sequence at a time.
    """
    return num_threads(1)


@contextmanager
def onednn(enabled: bool) -> Iterator[None]:
    """Switch PyTorch's use of the oneDNN library (``torch.backends.mkldnn.enabled``) inside the block."""
    check_bool("enabled", enabled)
    before = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = enabled
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = before


@contextmanager
def decode_settings() -> Iterator[None]:
    """One thread and PyTorch's own kernels instead of oneDNN's, for one-token decode steps of a small model.

    Lesson 10 measures both for its model: one token's operators are too small to share between
    threads (the attention kernel splits even one query over them, and on a busy machine waiting for
    the second thread costs milliseconds), and oneDNN's GELU costs about 10 us of set-up per call, more
    than the GELU of one token itself (no other operator of the course's GPT uses oneDNN). A large
    model's operators are not small: leave the settings alone there.
    """
    with num_threads(1), onednn(False):
        yield
