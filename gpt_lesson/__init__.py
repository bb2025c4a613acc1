"""gpt_lesson: the helper package of the course. Every notebook imports from here.

Modules, each named for what it holds:

* :mod:`gpt_lesson.attention`: the steps of attention, one function each;
* :mod:`gpt_lesson.model`: ``CausalSelfAttention``, ``FeedForward``, ``Block``, ``GPT``;
* :mod:`gpt_lesson.data`: character tokenizer, Tiny Shakespeare loader, batches;
* :mod:`gpt_lesson.train`: the training loop and checkpoints;
* :mod:`gpt_lesson.generate`: sampling, with or without a KV cache;
* :mod:`gpt_lesson.viz`: matplotlib helpers.
"""
from .data import CharTokenizer, get_batch, load_tiny_shakespeare, train_val_split
from .generate import generate
from .model import GPT, Block, CausalSelfAttention, FeedForward, GPTConfig, KVCache
from .train import TrainConfig, load_checkpoint, save_checkpoint, set_seed, train

__version__ = "0.1.0"

__all__ = [
    "GPT", "GPTConfig", "CausalSelfAttention", "FeedForward", "Block", "KVCache",
    "CharTokenizer", "load_tiny_shakespeare", "train_val_split", "get_batch",
    "generate", "TrainConfig", "train", "set_seed", "save_checkpoint", "load_checkpoint",
]
