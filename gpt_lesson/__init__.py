"""gpt_lesson: the helper package of the course. Every notebook imports from here.

The library, in the order the lessons build it:

* :mod:`gpt_lesson.attention`: the steps of attention, one function each;
* :mod:`gpt_lesson.model`: ``CausalSelfAttention``, ``FeedForward``, ``Block``, ``GPT`` (the source
  model with the course's options layered on);
* :mod:`gpt_lesson.reference`: the source model exactly as written, to compare against;
* :mod:`gpt_lesson.data`: character tokenizer, Tiny Shakespeare loader, batches;
* :mod:`gpt_lesson.training`: the training loop; :mod:`gpt_lesson.checkpoints`: saving and loading;
* :mod:`gpt_lesson.sampling`: generation, with or without a KV cache;
* :mod:`gpt_lesson.distributed` and ``python -m gpt_lesson.train_ddp``: data-parallel training.

Course helpers: :mod:`gpt_lesson.shakespeare` (lesson 09's trained model),
:mod:`gpt_lesson.experiments` (the small experiments behind the lessons' claims),
:mod:`gpt_lesson.checks` (the exercises' self-checks), :mod:`gpt_lesson.widgets` (the explorers),
:mod:`gpt_lesson.viz` (plots) and :mod:`gpt_lesson.validation` (argument checking).
See ``docs/architecture.md``.
"""
from importlib.metadata import PackageNotFoundError, version

from .data import CharTokenizer, get_batch, load_tiny_shakespeare, train_val_split
from .i18n import get_language, set_language
from .model import GPT, Block, CausalSelfAttention, FeedForward, GPTConfig, KVCache
from .sampling import generate
from .training import TrainConfig, load_checkpoint, save_checkpoint, set_seed, train

try:
    __version__ = version("gpt-lesson")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "GPT", "GPTConfig", "CausalSelfAttention", "FeedForward", "Block", "KVCache",
    "CharTokenizer", "load_tiny_shakespeare", "train_val_split", "get_batch",
    "generate", "TrainConfig", "train", "set_seed", "save_checkpoint", "load_checkpoint",
    "set_language", "get_language",
]
