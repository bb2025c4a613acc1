"""GPT-2 in the course's code: the source model with four changes, and a loader for OpenAI's weights.

GPT-2 (Radford et al., 2019, "Language Models are Unsupervised Multitask Learners") has the source
model's architecture: token and learned position embeddings, pre-LayerNorm blocks of fused-``c_attn``
attention and a 4x GELU feed-forward network, a final LayerNorm and a linear head. It differs in four
places, each a field of :class:`GPT2Config` (all on by default; all off gives the source model back):

1. ``attn_bias``: the attention's projections ``c_attn`` and ``c_proj`` have biases;
2. ``tie_weights``: the output layer ``lm_head`` *is* the token embedding (the same matrix, no bias);
3. ``gelu="tanh"``: GELU's tanh approximation instead of the exact ``nn.GELU()``;
4. the sizes: 50,257 tokens, 1,024 positions, 12 layers of 768 channels (12 heads of 64).

:class:`GPT2` is the course's :class:`~gpt_lesson.GPT` with those edits made to its modules, so its
forward pass, KV cache, ``generate`` and ``train`` are the course's own. GPT-2's initialisation scales
the residual projections by ``1 / sqrt(2 n_layer)`` (:func:`init_gpt2_weights`).

:func:`load_gpt2` copies published weights in: the 124M model from the Hugging Face hub (a safetensors
file pinned to a revision and checked by sha256, downloaded once through ``huggingface_hub`` only when
asked), any local copy of such a file, or a ``transformers`` ``GPT2LMHeadModel`` (the tests and lesson 14
build small random ones, no download). Nothing here imports ``huggingface_hub`` or ``safetensors``
before it is needed.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn as nn

from . import validation
from .data import sha256_of
from .model import GPT

__all__ = [
    "GPT2Config", "GPT2", "init_gpt2_weights", "load_gpt2", "gpt2_weights_path", "convert_gpt2_state_dict",
    "GPT2_REPO", "GPT2_REVISION", "GPT2_FILE", "GPT2_SHA256", "GPT2_BYTES", "GPT2_URL", "HF_NAMES",
    "HF_BLOCK_NAMES", "HF_TRANSPOSED",
]

GELU_FORMS = ("tanh", "exact")

# The published 124M model: one file of openai-community/gpt2, pinned to a commit of the hub repository.
GPT2_REPO = "openai-community/gpt2"
GPT2_REVISION = "607a30d783dfa663caf39e06633721c8d4cfcd7e"
GPT2_FILE = "model.safetensors"
GPT2_SHA256 = "248dfc3911869ec493c76e65bf2fcf7f615828b0254c12b473182f0f81d3a707"
GPT2_BYTES = 548_105_171
GPT2_URL = f"https://huggingface.co/{GPT2_REPO}/resolve/{GPT2_REVISION}/{GPT2_FILE}"


@dataclass
class GPT2Config:
    """GPT-2's sizes (the 124M model's by default) and its four differences from the source model."""

    vocab_size: int = 50257
    block_size: int = 1024
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.1
    attn_bias: bool = True  # 1. biases in c_attn and c_proj (the source has none)
    tie_weights: bool = True  # 2. lm_head is the token embedding (the source has its own, with a bias)
    gelu: str = "tanh"  # 3. "tanh": GPT-2's approximation; "exact": nn.GELU(), the source's
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            validation.check_positive_int(name, getattr(self, name))
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}: "
                             "each head gets n_embd // n_head channels")
        self.dropout = validation.check_probability("dropout", self.dropout)
        validation.check_bool("attn_bias", self.attn_bias)
        validation.check_bool("tie_weights", self.tie_weights)
        validation.check_choice("gelu", self.gelu, GELU_FORMS)
        self.layer_norm_eps = validation.check_number("layer_norm_eps", self.layer_norm_eps, minimum=0, min_open=True)

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)


class GPT2(GPT):
    """GPT-2: the course's :class:`~gpt_lesson.GPT` with the changes its :class:`GPT2Config` switches on.

    ``model.config`` is the underlying :class:`~gpt_lesson.GPTConfig` (the sizes; what ``forward``,
    ``generate`` and ``train`` read), ``model.gpt2_config`` the whole :class:`GPT2Config`.
    """

    def __init__(self, config: GPT2Config | None = None) -> None:
        config = GPT2Config() if config is None else validation.check_instance("config", config, GPT2Config)
        C, V = config.n_embd, config.vocab_size
        super().__init__(V, C, config.n_head, config.n_layer, config.block_size, dropout=config.dropout)
        for block in self.blocks:
            if config.attn_bias:  # 1. biases in the attention's two projections
                block.sa.c_attn = nn.Linear(C, 3 * C, bias=True)
                block.sa.c_proj = nn.Linear(C, C, bias=True)
            if config.gelu == "tanh":  # 3. GELU's tanh approximation
                block.ffwd.net[1] = nn.GELU(approximate="tanh")
        if config.tie_weights:  # 2. the output layer reads the token embedding's matrix
            self.lm_head = nn.Linear(C, V, bias=False)
            self.lm_head.weight = self.token_embedding_table.weight
        for module in self.modules():
            if isinstance(module, nn.LayerNorm):
                module.eps = config.layer_norm_eps
        self.gpt2_config = config
        init_gpt2_weights(self)


def init_gpt2_weights(model: GPT, scale_residual: bool = True) -> None:
    """GPT-2's initialisation: ``N(0, 0.02)`` weights, zero biases, and the residual projections scaled.

    Each block adds two outputs to the residual stream, ``sa.c_proj``'s and ``ffwd.net[2]``'s, so a
    model of ``n_layer`` blocks adds ``2 n_layer`` of them; GPT-2 draws those two matrices with a standard
    deviation ``1 / sqrt(2 n_layer)`` times smaller, so the stream's variance stays about the same
    however deep the model is (Radford et al., 2019). ``scale_residual=False`` leaves them at 0.02.
    """
    validation.check_instance("model", model, GPT)
    validation.check_bool("scale_residual", scale_residual)
    std = 0.02
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    if scale_residual:
        residual_std = std / math.sqrt(2 * len(model.blocks))
        for block in model.blocks:
            nn.init.normal_(block.sa.c_proj.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.ffwd.net[2].weight, mean=0.0, std=residual_std)


# ----------------------------------------------------------------------------------------------
# The published weights, by the names Hugging Face's GPT2LMHeadModel gives them (its state dict
# adds "transformer." in front; OpenAI's own TensorFlow checkpoint used the same short names).

HF_NAMES = {  # outside the blocks
    "wte.weight": "token_embedding_table.weight",
    "wpe.weight": "position_embedding_table.weight",
    "ln_f.weight": "ln_f.weight",
    "ln_f.bias": "ln_f.bias",
}
HF_BLOCK_NAMES = {  # inside block i: "h.{i}." -> "blocks.{i}."
    "ln_1.weight": "ln1.weight",
    "ln_1.bias": "ln1.bias",
    "attn.c_attn.weight": "sa.c_attn.weight",
    "attn.c_attn.bias": "sa.c_attn.bias",
    "attn.c_proj.weight": "sa.c_proj.weight",
    "attn.c_proj.bias": "sa.c_proj.bias",
    "ln_2.weight": "ln2.weight",
    "ln_2.bias": "ln2.bias",
    "mlp.c_fc.weight": "ffwd.net.0.weight",
    "mlp.c_fc.bias": "ffwd.net.0.bias",
    "mlp.c_proj.weight": "ffwd.net.2.weight",
    "mlp.c_proj.bias": "ffwd.net.2.bias",
}
# GPT-2's code multiplies x @ W with W stored as (in, out) (its "Conv1D"); nn.Linear stores (out, in).
HF_TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# Older files also hold each block's causal mask ("attn.bias", "attn.masked_bias"): not weights, skipped.
HF_SKIPPED = ("attn.bias", "attn.masked_bias")
_BLOCK_KEY = re.compile(r"h\.(\d+)\.(.+)")


def _few(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def convert_gpt2_state_dict(hf_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """GPT-2's tensors under the course's names (:data:`HF_NAMES`, :data:`HF_BLOCK_NAMES`), matrices transposed.

    Takes the short names of the published file or a ``GPT2LMHeadModel``'s ``transformer.``-prefixed
    ones. A separate ``lm_head.weight`` must equal ``wte.weight`` (GPT-2 ties them). Unknown or missing
    names raise a ``ValueError`` that lists them.
    """
    validation.check_instance("hf_state", hf_state, Mapping)
    state: dict[str, torch.Tensor] = {}
    unknown: list[str] = []
    head = None
    for key, tensor in hf_state.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"hf_state[{key!r}] must be a torch.Tensor, got {type(tensor).__name__}")
        name = key.removeprefix("transformer.")
        block = _BLOCK_KEY.fullmatch(name)
        if name == "lm_head.weight":
            head = tensor
        elif name in HF_NAMES:
            state[HF_NAMES[name]] = tensor
        elif block and block.group(2) in HF_SKIPPED:
            continue
        elif block and block.group(2) in HF_BLOCK_NAMES:
            part = block.group(2)
            state[f"blocks.{block.group(1)}.{HF_BLOCK_NAMES[part]}"] = tensor.t() if part in HF_TRANSPOSED else tensor
        else:
            unknown.append(key)
    if unknown:
        raise ValueError(f"these tensors are not GPT-2's: {_few(unknown)} (expected the names of "
                         f"{GPT2_REPO}'s {GPT2_FILE} or of a transformers GPT2LMHeadModel)")
    n_layer = len({k.split(".")[1] for k in state if k.startswith("blocks.")})
    expected = list(HF_NAMES.values()) + [f"blocks.{i}.{v}" for i in range(n_layer) for v in HF_BLOCK_NAMES.values()]
    missing = [k for k in expected if k not in state]
    if missing:
        raise ValueError(f"GPT-2's weights are incomplete: {_few(missing)} missing (course names)")
    wte = state["token_embedding_table.weight"]
    if head is not None and not (head.shape == wte.shape and torch.equal(head, wte)):
        raise ValueError("lm_head.weight differs from wte.weight: GPT-2's output layer is its token embedding "
                         "(tied weights); these weights come from another model")
    return state


def _config_from_state(state: dict[str, torch.Tensor], n_head: int | None, **options) -> GPT2Config:
    """The sizes of the converted ``state``; ``n_head`` is not stored (GPT-2's heads have 64 channels)."""
    V, C = state["token_embedding_table.weight"].shape
    T = state["position_embedding_table.weight"].size(0)
    n_layer = len({k.split(".")[1] for k in state if k.startswith("blocks.")})
    if n_head is None:
        if C % 64:
            raise ValueError(f"these weights have n_embd={C}, not a multiple of GPT-2's head size 64: "
                             "pass n_head= to say how many heads they have")
        n_head = C // 64
    return GPT2Config(vocab_size=V, block_size=T, n_layer=n_layer, n_head=n_head, n_embd=C, **options)


def _hf_model_options(hf_config: object) -> dict:
    """n_head, GELU form and LayerNorm eps of a transformers GPT2Config; refuses variants GPT2 cannot run."""
    def get(name: str, default: object = None) -> object:
        return getattr(hf_config, name, default)

    forms = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "exact"}
    activation = get("activation_function", "gelu_new")
    if activation not in forms:
        raise ValueError(f"activation_function={activation!r} is not one of GPT-2's GELUs {tuple(forms)}")
    C = get("n_embd")
    if get("n_inner") not in (None, 4 * C):
        raise ValueError(f"n_inner={get('n_inner')}: this GPT-2 has a 4 * n_embd = {4 * C} feed-forward layer")
    for flag, wanted in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False)):
        if get(flag, wanted) != wanted:
            raise ValueError(f"{flag}={get(flag)}: the course's GPT-2 runs the standard {flag}={wanted}")
    return {"n_head": get("n_head"), "gelu": forms[activation], "layer_norm_eps": get("layer_norm_epsilon", 1e-5)}


def gpt2_weights_path(download: bool = False, revision: str = GPT2_REVISION) -> Path:
    """The pinned ``model.safetensors`` in the Hugging Face cache, downloaded first when ``download=True``.

    Without the file (offline, or ``download=False`` and nothing cached), a ``FileNotFoundError`` says
    what to download and where to put it.
    """
    validation.check_bool("download", download)
    validation.check_instance("revision", revision, str)
    advice = (f"GPT-2's weights ({GPT2_REPO}, {GPT2_FILE} at revision {revision[:7]}, {GPT2_BYTES:,} bytes, "
              f"about 550 MB) are not on this machine")
    todo = (f"Online, load_gpt2(download=True) downloads them once into the Hugging Face cache. Offline, "
            f"download {GPT2_URL} where there is a network, copy it here and call "
            f"load_gpt2('path/to/{GPT2_FILE}'); its sha256 must be {GPT2_SHA256}")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise ModuleNotFoundError(f"{advice}, and huggingface_hub is not installed to fetch them: "
                                  f"pip install huggingface_hub safetensors. {todo}") from None
    try:
        return Path(hf_hub_download(GPT2_REPO, GPT2_FILE, revision=revision, local_files_only=not download))
    except Exception as e:  # no network, offline mode, not in the cache, an HTTP error: say what to do
        reason = "" if not download else f" and could not be downloaded ({type(e).__name__}: {str(e)[:160]})"
        raise FileNotFoundError(f"{advice}{reason}. {todo}") from None


def _read_safetensors(path: Path, sha256: str | None) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise FileNotFoundError(f"no weights file at {path}")
    if sha256 is not None:
        digest = sha256_of(path)
        if digest != sha256:
            raise ValueError(f"{path} has sha256 {digest}, not the expected {sha256} ({path.stat().st_size:,} bytes; "
                             f"GPT-2 124M's file has {GPT2_BYTES:,}): a damaged or different file. Delete it and "
                             "download it again, or pass sha256=None for a file you made yourself")
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise ModuleNotFoundError("reading a .safetensors file needs the safetensors package: "
                                  "pip install safetensors") from None
    try:
        return load_file(str(path))  # tensors only: a safetensors file cannot hold code
    except Exception as e:
        raise ValueError(f"{path} is not a readable safetensors file ({type(e).__name__}: {str(e)[:160]})") from None


def load_gpt2(
    source: str | os.PathLike | Mapping[str, torch.Tensor] | nn.Module | None = None,
    *,
    n_head: int | None = None,
    download: bool = False,
    sha256: str | None = GPT2_SHA256,
    revision: str = GPT2_REVISION,
) -> GPT2:
    """A :class:`GPT2` holding published GPT-2 weights, in eval mode.

    ``source`` is one of

    * ``None``: the 124M model's pinned file from the Hugging Face cache (``download=True`` fetches it
      once, about 550 MB); checked against ``sha256``;
    * a path: a local copy of a GPT-2 safetensors file, checked against ``sha256`` (pass ``sha256=None``
      for a file of your own);
    * a ``transformers`` ``GPT2LMHeadModel`` (its weights and its config's heads, GELU and eps);
    * a state dict with GPT-2's names.

    ``n_head`` is needed only where the weights do not say it (a file or state dict whose n_embd is
    not 64 channels per head).
    """
    if n_head is not None:
        validation.check_positive_int("n_head", n_head)
    if sha256 is not None:
        validation.check_instance("sha256", sha256, str)
    options: dict = {}
    if source is None or isinstance(source, (str, os.PathLike)):
        path = gpt2_weights_path(download, revision) if source is None else validation.check_path("source", source)
        hf_state = _read_safetensors(path, sha256)  # type: ignore[arg-type]
    elif isinstance(source, nn.Module):
        if not (hasattr(source, "config") and hasattr(source.config, "n_embd")):
            raise TypeError(f"source={type(source).__name__} is not a transformers GPT2LMHeadModel (no GPT-2 config)")
        options = _hf_model_options(source.config)
        hf_heads = options.pop("n_head")
        n_head = hf_heads if n_head is None else n_head
        hf_state = source.state_dict()
    elif isinstance(source, Mapping):
        hf_state = source
    else:
        raise TypeError(f"source must be None, a file path, a GPT2LMHeadModel or a state dict, "
                        f"got {type(source).__name__}")
    state = convert_gpt2_state_dict(hf_state)
    config = _config_from_state(state, n_head, **options)
    model = GPT2(config)
    state["lm_head.weight"] = state["token_embedding_table.weight"]  # tied: the same matrix
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # shapes that do not fit one another
        raise ValueError(f"GPT-2's weights do not fit together: {' '.join(str(e).split())[:400]}") from None
    missing = [k for k in missing if k not in dict(model.named_buffers())]  # the masks are the model's own
    if missing or unexpected:
        raise ValueError(f"GPT-2's weights do not fit the model: missing {_few(missing)}; "
                         f"unexpected {_few(unexpected)}")
    return model.eval()
