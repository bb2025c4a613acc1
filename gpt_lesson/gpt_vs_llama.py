"""Lesson 14's experiment: the source's GPT against a Llama-style model of the same size, on Tiny Shakespeare.

Both models are trained character by character (lesson 09's data, :func:`gpt_lesson.shakespeare.load_data`)
from the same seed, on the same batches, with the same schedule and the same number of steps, so the
only difference is the architecture: LayerNorm, learned positions, a GELU FFN and full multi-head
attention against RMSNorm, RoPE, SwiGLU and grouped-query attention. The SwiGLU width is chosen so the
two have the same number of parameters (within 0.5%). Each run is timed; the results and both models'
weights are cached (:func:`gpt_lesson.data.cache_dir`), so lesson 14 trains once.

The loop is :func:`gpt_lesson.training.train`'s for one process (AdamW, warm-up and cosine decay,
clipping; :func:`~gpt_lesson.training.lr_at`, :func:`~gpt_lesson.data.get_batch`), written out here
because ``train`` accepts only a :class:`~gpt_lesson.GPT`; both models go through this one.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import asdict, replace

import torch

from . import validation
from .data import cache_dir, get_batch, write_atomically
from .llama import Llama, LlamaConfig
from .model import GPT, GPTConfig
from .runtime import one_thread
from .shakespeare import load_data
from .training import TrainConfig, estimate_loss, evaluate_split, lr_at, set_seed

__all__ = ["GPT_CONFIG", "TRAIN_CONFIG", "N_KV_HEAD", "CACHE_NAME", "llama_config_like", "train_one", "compare"]

GPT_CONFIG = GPTConfig(vocab_size=65, n_embd=96, n_head=4, n_layer=4, block_size=64, dropout=0.0, attn_impl="sdpa")
N_KV_HEAD = 2  # grouped-query attention: 4 query heads share 2 key/value heads
TRAIN_CONFIG = TrainConfig(max_steps=600, batch_size=16, learning_rate=5e-3, min_lr=5e-4, warmup_steps=50,
                           beta2=0.99, grad_clip=1.0, eval_interval=100, eval_iters=10, seed=1337, progress=False)
CACHE_NAME = "lesson14_gpt_vs_llama.pt"


def llama_config_like(config: GPTConfig, n_kv_head: int = N_KV_HEAD) -> LlamaConfig:
    """A :class:`LlamaConfig` with ``config``'s sizes and the SwiGLU width that gives the same parameter count."""
    validation.check_instance("config", config, GPTConfig)
    c = config
    base = LlamaConfig(vocab_size=c.vocab_size, n_embd=c.n_embd, n_head=c.n_head, n_kv_head=n_kv_head,
                       n_layer=c.n_layer, block_size=c.block_size, ffn_hidden=1)
    with torch.device("meta"):  # counted without allocating any weights
        target = GPT(c).num_parameters()
        others = Llama(base).num_parameters() - 3 * c.n_embd * c.n_layer  # all but the SwiGLUs: 3 * C * hidden each
    hidden = round((target - others) / (3 * c.n_embd * c.n_layer))
    return replace(base, ffn_hidden=hidden)


def train_one(model: torch.nn.Module, train_data: torch.Tensor, val_data: torch.Tensor, cfg: TrainConfig) -> dict:
    """Train ``model`` in place on one process; return its losses, the exact validation loss and the seconds.

    ``val`` holds estimates on ``cfg.eval_iters`` fixed validation batches every ``cfg.eval_interval`` steps
    (at ``eval_steps``), as :func:`~gpt_lesson.training.train` makes them. The loop runs on one thread
    (restored afterwards): at this size a second thread saves little, and on a busy machine waiting for
    it cost 4x (a GPT step of lesson 14's size: 1,663 ms with 2 threads, 404 ms with 1, at load 7).
    """
    validation.check_instance("cfg", cfg, TrainConfig)
    block_size = model.config.block_size
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, betas=(0.9, cfg.beta2),
                                  weight_decay=cfg.weight_decay)
    batches = torch.Generator().manual_seed(cfg.seed)  # the same batches for every model
    losses, eval_steps, val = [], [], []
    model.train()
    with one_thread():
        start = time.perf_counter()
        for step in range(cfg.max_steps):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, cfg)
            x, y = get_batch(train_data, block_size, cfg.batch_size, batches)
            _, loss = model(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            if not torch.isfinite(loss):
                raise FloatingPointError(f"training stopped at step {step + 1}: the loss is {loss.item()}")
            if (step + 1) % cfg.eval_interval == 0 or step + 1 == cfg.max_steps:
                estimate = estimate_loss(model, {"val": val_data}, cfg.batch_size, cfg.eval_iters, seed=cfg.seed + 1)
                eval_steps.append(step + 1)
                val.append(estimate["val"])
        seconds = time.perf_counter() - start  # the estimates included
        val_loss = evaluate_split(model, val_data)  # every validation window, exact
    model.eval()
    return {"train_loss": losses, "eval_steps": eval_steps, "val": val, "val_loss": val_loss, "seconds": seconds,
            "parameters": sum(p.numel() for p in model.parameters())}


def _settings(config: GPTConfig, n_kv_head: int, cfg: TrainConfig) -> dict:
    tc = {k: v for k, v in asdict(cfg).items() if k not in ("progress", "checkpoint_path", "device")}
    return {"gpt": config.to_dict(), "llama": llama_config_like(config, n_kv_head).to_dict(), "train": tc}


def compare(train_if_missing: bool = True, *, config: GPTConfig = GPT_CONFIG, n_kv_head: int = N_KV_HEAD,
            train_config: TrainConfig = TRAIN_CONFIG) -> tuple[dict, dict[str, torch.nn.Module]]:
    """``(results, models)``: both runs from the cache, trained first when it is missing or made with other settings.

    ``results["gpt"]`` and ``results["llama"]`` hold ``val_loss`` (exact, whole validation split),
    ``train_loss`` (every step), ``seconds`` (the training loop's wall-clock time when it ran) and
    ``parameters``; ``results["cached"]`` says whether they came from the cache.
    """
    validation.check_bool("train_if_missing", train_if_missing)
    validation.check_instance("config", config, GPTConfig)
    validation.check_instance("train_config", train_config, TrainConfig)
    llama_config = llama_config_like(config, n_kv_head)
    settings = _settings(config, n_kv_head, train_config)
    path = cache_dir() / CACHE_NAME
    saved = None
    if path.is_file():
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # a damaged file: trained again and replaced below
            warnings.warn(f"the cached runs {path} could not be read ({type(e).__name__}); training again", stacklevel=2)
        if not isinstance(saved, dict) or saved.get("settings") != settings:
            saved = None
    models: dict[str, torch.nn.Module] = {}
    if saved is not None:
        models = {"gpt": GPT(config), "llama": Llama(llama_config)}
        for name, model in models.items():
            model.load_state_dict(saved["weights"][name], strict=True)
            model.eval()
        return {**saved["results"], "cached": True}, models
    if not train_if_missing:
        raise FileNotFoundError(f"no runs made with these settings at {path}; call compare(train_if_missing=True)")
    _, _, train_data, val_data = load_data()
    results = {}
    for name, build in (("gpt", lambda: GPT(config)), ("llama", lambda: Llama(llama_config))):
        set_seed(train_config.seed)  # the same seed for both initialisations
        models[name] = build()
        results[name] = train_one(models[name], train_data, val_data, train_config)
    payload = {"settings": settings, "results": results,
               "weights": {name: m.state_dict() for name, m in models.items()}}
    try:
        write_atomically(path, lambda f: torch.save(payload, f), what="lesson 14's cached runs")
    except OSError as e:  # a read-only cache: the results are still returned
        warnings.warn(f"could not cache lesson 14's runs at {path} ({e}); they will be trained again next time",
                      stacklevel=2)
    return {**results, "cached": False}, models
