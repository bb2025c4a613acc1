"""The blocks of Llama and Qwen, and a Llama-style model built from them.

Llama (Touvron et al., 2023) keeps GPT-2's decoder-only layout (embedding, pre-norm blocks of attention
and a feed-forward network, a final norm, a linear head) and changes the parts, one at a time:

* :class:`RMSNorm` instead of LayerNorm: divide by the root mean square, no mean, no bias
  (Zhang & Sennrich, 2019);
* rotary position embeddings instead of a learned position table (:class:`RotaryEmbedding`,
  Su et al., 2021): each pair of a query's or key's channels is rotated by an angle proportional to
  its position, so ``q . k`` depends on how far apart the two positions are;
* :class:`SwiGLU` instead of the GELU FFN (Shazeer, 2020; lesson 06);
* grouped-query attention (Ainslie et al., 2023): fewer key/value heads than query heads, each shared
  by a group of query heads (:func:`repeat_kv`); one key/value head is multi-query attention
  (Shazeer, 2019);
* no biases. Qwen2 (Yang et al., 2024) is the same model with biases on q, k and v only
  (``LlamaConfig(qkv_bias=True)``).

The names follow the course's GPT where a part plays the same role (``token_embedding_table``,
``blocks.i.ln1``, ``sa.c_attn`` for q, k and v in one matrix, ``sa.c_proj``, ``ffwd``, ``ln_f``,
``lm_head``); :func:`load_llama` maps the names of ``transformers``' ``LlamaForCausalLM`` and
``Qwen2ForCausalLM`` onto them (:data:`HF_NAMES`, :data:`HF_BLOCK_NAMES`).
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import validation
from .attention import merge_heads, sdpa_attention
from .model import KVCache

__all__ = [
    "RMSNorm", "rope_frequencies", "rotate_half", "apply_rope", "RotaryEmbedding", "SwiGLU", "llama_ffn_hidden",
    "repeat_kv", "causal_attention", "LlamaConfig", "Attention", "Block", "Llama", "greedy",
    "load_llama", "HF_NAMES", "HF_BLOCK_NAMES",
]


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last dimension: LayerNorm without the mean and the bias."""

    def __init__(self, n_embd: int, eps: float = 1e-6) -> None:
        super().__init__()
        validation.check_positive_int("n_embd", n_embd)
        self.eps = validation.check_number("eps", eps, minimum=0, min_open=True)
        self.weight = nn.Parameter(torch.ones(n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (B, T, 1): one number per position
        return x / rms * self.weight


# ----------------------------------------------------------------------------------------------
# Rotary position embeddings


def rope_frequencies(head_size: int, theta: float = 10000.0) -> torch.Tensor:
    """The angle per position of each channel pair i = 0 .. head_size/2 - 1: ``theta ** (-2i / head_size)``.

    Pair 0 turns by 1 radian per position, the last pair by about ``1 / theta``: fast pairs tell near
    positions apart, slow ones far positions. Computed in float32, as Llama's own code does.
    """
    validation.check_positive_int("head_size", head_size)
    if head_size % 2:
        raise ValueError(f"head_size={head_size} must be even: RoPE rotates the channels in pairs")
    validation.check_number("theta", theta, minimum=1, min_open=True)
    return 1.0 / theta ** (torch.arange(0, head_size, 2, dtype=torch.float32) / head_size)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) with x1, x2 the two halves of the last dimension: channel i pairs with i + d/2."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate every channel pair (i, i + d/2) of ``x`` (..., T, d) by its angle: ``cos``, ``sin`` are (T, d)."""
    return x * cos + rotate_half(x) * sin


class RotaryEmbedding(nn.Module):
    """RoPE with the cos and sin of every position up to ``max_len`` computed once (buffers, not saved).

    ``rope(x, start)`` rotates ``x`` (B, nh, T, head_size) as positions ``start .. start + T - 1``:
    with a KV cache, the new token's query and key are rotated at its real position, and the cached keys
    keep the rotation they got when they were computed.
    """

    def __init__(self, head_size: int, max_len: int, theta: float = 10000.0) -> None:
        super().__init__()
        validation.check_positive_int("max_len", max_len)
        freqs = rope_frequencies(head_size, theta)  # (head_size/2,)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float32), freqs)  # (max_len, head_size/2)
        angles = torch.cat((angles, angles), dim=-1)  # channel i and i + d/2 turn by the same angle
        dtype = torch.get_default_dtype()
        self.register_buffer("cos", angles.cos().to(dtype), persistent=False)
        self.register_buffer("sin", angles.sin().to(dtype), persistent=False)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        T = x.size(-2)
        if start + T > self.cos.size(0):
            raise ValueError(f"positions up to {start + T - 1} asked for; this RoPE has {self.cos.size(0)} positions")
        return apply_rope(x, self.cos[start:start + T].to(x.dtype), self.sin[start:start + T].to(x.dtype))


# ----------------------------------------------------------------------------------------------
# SwiGLU and grouped-query attention


class SwiGLU(nn.Module):
    """Llama's feed-forward network: ``w2(silu(w1(x)) * w3(x))``, three Linears without biases (lesson 06)."""

    def __init__(self, n_embd: int, hidden: int) -> None:
        super().__init__()
        validation.check_positive_int("n_embd", n_embd)
        validation.check_positive_int("hidden", hidden)
        self.w1 = nn.Linear(n_embd, hidden, bias=False)  # the gate, through SiLU
        self.w3 = nn.Linear(n_embd, hidden, bias=False)  # the value it multiplies
        self.w2 = nn.Linear(hidden, n_embd, bias=False)  # back to n_embd

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def llama_ffn_hidden(n_embd: int, multiple_of: int = 256) -> int:
    """Llama's SwiGLU width: 2/3 of a 4x FFN (the same parameters), rounded up to a multiple (11008 for 4096)."""
    validation.check_positive_int("n_embd", n_embd)
    validation.check_positive_int("multiple_of", multiple_of)
    return multiple_of * math.ceil(int(2 * 4 * n_embd / 3) / multiple_of)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, n_kv_head, T, hs) -> (B, n_kv_head * n_rep, T, hs): key/value head j serves query heads j*n_rep ..
    (j+1)*n_rep - 1, as grouped-query attention pairs them (``repeat_interleave`` along the head dimension)."""
    validation.check_tensor("x", x, dims=4)
    validation.check_positive_int("n_rep", n_rep)
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
    """Causal attention of T queries, the last T of the L >= T positions whose keys and values are given.

    Without a cache T == L and this is the usual mask; with one, query i sits at position L - T + i and
    sees keys 0 .. L - T + i (one new token sees them all).
    """
    T, L = q.size(-2), k.size(-2)
    if T == L:
        return sdpa_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    mask = torch.ones(T, L, device=q.device).tril(diagonal=L - T)
    return sdpa_attention(q, k, v, mask=mask, dropout_p=dropout_p)


# ----------------------------------------------------------------------------------------------
# The model


@dataclass
class LlamaConfig:
    """The sizes of a :class:`Llama` and the two switches that make it Qwen2 (``qkv_bias``) or tie its head."""

    vocab_size: int = 65
    n_embd: int = 64
    n_head: int = 4
    n_kv_head: int = 2
    n_layer: int = 2
    block_size: int = 64
    ffn_hidden: int = 172
    head_size: int | None = None  # None: n_embd // n_head
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    qkv_bias: bool = False  # Qwen2: True (biases on q, k and v; none on the output projection)
    tie_weights: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_embd", "n_head", "n_kv_head", "n_layer", "block_size", "ffn_hidden"):
            validation.check_positive_int(name, getattr(self, name))
        if self.head_size is None:
            if self.n_embd % self.n_head:
                raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}; "
                                 "give head_size= explicitly")
            self.head_size = self.n_embd // self.n_head
        validation.check_positive_int("head_size", self.head_size)
        if self.head_size % 2:
            raise ValueError(f"head_size={self.head_size} must be even: RoPE rotates channel pairs")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head={self.n_head} is not a multiple of n_kv_head={self.n_kv_head}: each key/value "
                             "head serves the same number of query heads")
        self.rope_theta = validation.check_number("rope_theta", self.rope_theta, minimum=1, min_open=True)
        self.norm_eps = validation.check_number("norm_eps", self.norm_eps, minimum=0, min_open=True)
        validation.check_bool("qkv_bias", self.qkv_bias)
        validation.check_bool("tie_weights", self.tie_weights)

    def to_dict(self) -> dict:
        return asdict(self)


class Attention(nn.Module):
    """Grouped-query causal self-attention with RoPE: n_head query heads, n_kv_head key/value heads."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        c = config
        self.n_head, self.n_kv_head, self.head_size = c.n_head, c.n_kv_head, c.head_size
        self.sizes = [c.n_head * c.head_size, c.n_kv_head * c.head_size, c.n_kv_head * c.head_size]
        self.c_attn = nn.Linear(c.n_embd, sum(self.sizes), bias=c.qkv_bias)  # q, k, v in one matrix
        self.c_proj = nn.Linear(c.n_head * c.head_size, c.n_embd, bias=False)
        self.rope = RotaryEmbedding(c.head_size, c.block_size, c.rope_theta)

    def forward(self, x: torch.Tensor, kv_cache=None) -> torch.Tensor:
        B, T, _ = x.shape
        hs = self.head_size
        # 1. Queries (n_head heads), keys and values (n_kv_head heads each) from one matrix: (B, heads, T, hs).
        q, k, v = self.c_attn(x).split(self.sizes, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_kv_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_kv_head, hs).transpose(1, 2)
        # 2. Positions: rotate q and k (never v) as positions past .. past + T - 1.
        past = 0 if kv_cache is None else kv_cache.length
        q, k = self.rope(q, past), self.rope(k, past)
        # (KV cache) the cache keeps the n_kv_head rotated keys and values of earlier positions.
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)
        # 3. Each key/value head serves n_head // n_kv_head query heads; then causal attention.
        n_rep = self.n_head // self.n_kv_head
        out = causal_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep))  # (B, n_head, T, hs)
        # 4. Heads side by side again, then the output projection: (B, T, C).
        return self.c_proj(merge_heads(out))


class Block(nn.Module):
    """A Llama block: ``x + sa(ln1(x))`` then ``x + ffwd(ln2(x))``, with RMSNorm, GQA + RoPE and SwiGLU."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.ln1 = RMSNorm(config.n_embd, config.norm_eps)
        self.sa = Attention(config)
        self.ln2 = RMSNorm(config.n_embd, config.norm_eps)
        self.ffwd = SwiGLU(config.n_embd, config.ffn_hidden)

    def forward(self, x: torch.Tensor, kv_cache=None) -> torch.Tensor:
        x = x + self.sa(self.ln1(x), kv_cache)
        x = x + self.ffwd(self.ln2(x))
        return x


class Llama(nn.Module):
    """A Llama-style decoder-only language model (Qwen2-style with ``LlamaConfig(qkv_bias=True)``).

    ``forward(idx, targets=None, kv_cache=None)`` returns ``(logits, loss)`` like the course's GPT:
    logits (B, T, vocab_size), the mean cross-entropy when targets are given. No position table:
    positions enter through RoPE inside each attention layer.
    """

    def __init__(self, config: LlamaConfig | None = None) -> None:
        super().__init__()
        self.config = c = LlamaConfig() if config is None else validation.check_instance("config", config, LlamaConfig)
        self.token_embedding_table = nn.Embedding(c.vocab_size, c.n_embd)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.n_layer)])
        self.ln_f = RMSNorm(c.n_embd, c.norm_eps)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        if c.tie_weights:
            self.lm_head.weight = self.token_embedding_table.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # The course's GPT's init (N(0, 0.02), zero biases), so the two train from the same start.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def new_kv_cache(self, batch_size: int = 1, max_len: int | None = None) -> KVCache:
        """An empty KV cache with n_kv_head heads per layer: what grouped-query attention stores."""
        c = self.config
        max_len = c.block_size if max_len is None else validation.check_int(
            "max_len", max_len, minimum=1, maximum=c.block_size, rule=f"in [1, block_size={c.block_size}]")
        p = self.lm_head.weight
        return KVCache(c.n_layer, batch_size, c.n_kv_head, c.head_size, max_len, p.dtype, p.device)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                kv_cache: KVCache | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        c = self.config
        validation.check_token_ids(idx, c.vocab_size)
        B, T = idx.shape
        past = 0
        if kv_cache is not None:
            validation.check_instance("kv_cache", kv_cache, KVCache)
            if len(kv_cache.layers) != c.n_layer or kv_cache.batch_size != B or kv_cache.k.size(2) != c.n_kv_head:
                raise ValueError(f"kv_cache has {len(kv_cache.layers)} layers of {kv_cache.k.size(2)} heads for batch "
                                 f"size {kv_cache.batch_size}; this model needs {c.n_layer} layers of n_kv_head="
                                 f"{c.n_kv_head} heads for batch size {B}: use model.new_kv_cache(idx.size(0))")
            past = kv_cache.length
        if past + T > c.block_size:
            raise ValueError(f"sequence length {past + T} is longer than block_size={c.block_size}")
        x = self.token_embedding_table(idx)  # (B, T, C): no position embedding, RoPE adds positions
        for i, block in enumerate(self.blocks):
            x = block(x, None if kv_cache is None else kv_cache.layers[i])
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab_size)
        loss = None
        if targets is not None:
            validation.check_token_ids(targets, c.vocab_size, name="targets")
            loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))
        return logits, loss


@torch.inference_mode()
def greedy(model: nn.Module, idx: torch.Tensor, max_new_tokens: int, use_cache: bool = True) -> torch.Tensor:
    """Greedy decoding (the most likely token each step) of a :class:`Llama`, with or without its KV cache."""
    validation.check_instance("model", model, Llama)
    validation.check_int("max_new_tokens", max_new_tokens, minimum=0)
    validation.check_bool("use_cache", use_cache)
    validation.check_token_ids(idx, model.config.vocab_size)
    if idx.size(1) + max_new_tokens > model.config.block_size:
        raise ValueError(f"{idx.size(1)} + {max_new_tokens} tokens do not fit block_size={model.config.block_size}")
    was_training = model.training
    model.eval()
    cache = model.new_kv_cache(idx.size(0)) if use_cache else None
    out, new = idx, idx
    for _ in range(max_new_tokens):
        logits = model(new if use_cache else out, kv_cache=cache)[0]
        new = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1); with the cache only it goes in next
        out = torch.cat([out, new], dim=1)
    model.train(was_training)
    return out


# ----------------------------------------------------------------------------------------------
# transformers' LlamaForCausalLM / Qwen2ForCausalLM -> Llama

HF_NAMES = {
    "model.embed_tokens.weight": "token_embedding_table.weight",
    "model.norm.weight": "ln_f.weight",
    "lm_head.weight": "lm_head.weight",
}
HF_BLOCK_NAMES = {  # "model.layers.{i}." -> "blocks.{i}."; q, k and v are stacked into c_attn (rows: q, k, v)
    "input_layernorm.weight": "ln1.weight",
    "self_attn.q_proj": "sa.c_attn (rows of q)",
    "self_attn.k_proj": "sa.c_attn (rows of k)",
    "self_attn.v_proj": "sa.c_attn (rows of v)",
    "self_attn.o_proj.weight": "sa.c_proj.weight",
    "post_attention_layernorm.weight": "ln2.weight",
    "mlp.gate_proj.weight": "ffwd.w1.weight",
    "mlp.up_proj.weight": "ffwd.w3.weight",
    "mlp.down_proj.weight": "ffwd.w2.weight",
}
_HF_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)")


def _llama_config_from_hf(hf_config: object, state: Mapping[str, torch.Tensor]) -> LlamaConfig:
    def get(name: str, default: object = None) -> object:
        return getattr(hf_config, name, default)

    rope = get("rope_parameters") or {"rope_type": get("rope_scaling") and get("rope_scaling").get("rope_type"),
                                      "rope_theta": get("rope_theta", 10000.0)}
    if (rope.get("rope_type") or "default") != "default":
        raise ValueError(f"rope_type={rope.get('rope_type')!r}: this Llama implements the original RoPE only")
    if get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act={get('hidden_act')!r}: Llama's SwiGLU uses SiLU")
    if get("mlp_bias", False) or "model.layers.0.self_attn.o_proj.bias" in state:
        raise ValueError("this model has biases in its MLP or its output projection: not a Llama or Qwen2 layout")
    if get("use_sliding_window", False):
        raise ValueError("use_sliding_window=True: this Llama attends to every earlier position")
    return LlamaConfig(
        vocab_size=get("vocab_size"), n_embd=get("hidden_size"), n_head=get("num_attention_heads"),
        n_kv_head=get("num_key_value_heads") or get("num_attention_heads"), n_layer=get("num_hidden_layers"),
        block_size=get("max_position_embeddings"), ffn_hidden=get("intermediate_size"),
        head_size=get("head_dim") or get("hidden_size") // get("num_attention_heads"),
        rope_theta=float(rope.get("rope_theta", 10000.0)), norm_eps=get("rms_norm_eps", 1e-6),
        qkv_bias="model.layers.0.self_attn.q_proj.bias" in state, tie_weights=bool(get("tie_word_embeddings", False)))


def _convert_llama_state(hf_state: Mapping[str, torch.Tensor], n_layer: int) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    unknown = []
    for key, tensor in hf_state.items():
        layer = _HF_LAYER.fullmatch(key)
        if key in HF_NAMES:
            state[HF_NAMES[key]] = tensor
        elif layer and layer.group(2) in HF_BLOCK_NAMES:
            state[f"blocks.{layer.group(1)}.{HF_BLOCK_NAMES[layer.group(2)]}"] = tensor
        elif layer and re.fullmatch(r"self_attn\.[qkv]_proj\.(weight|bias)", layer.group(2)):
            proj, kind = layer.group(2).split(".")[1:]
            qkv.setdefault((int(layer.group(1)), kind), {})[proj[0]] = tensor
        else:
            unknown.append(key)
    if unknown:
        raise ValueError(f"these tensors are not a Llama's or Qwen2's: {', '.join(unknown[:4])}")
    for (i, kind), parts in qkv.items():
        if set(parts) != {"q", "k", "v"}:
            raise ValueError(f"layer {i} has {kind}s for {sorted(parts)} of q_proj, k_proj, v_proj, not all three")
        state[f"blocks.{i}.sa.c_attn.{kind}"] = torch.cat([parts["q"], parts["k"], parts["v"]], dim=0)
    return state


def load_llama(hf_model: nn.Module) -> Llama:
    """A :class:`Llama` holding the weights of a ``transformers`` ``LlamaForCausalLM`` or ``Qwen2ForCausalLM``.

    The config is read from the model (heads, key/value heads, head size, RoPE theta, eps, Qwen2's q/k/v
    biases, tied head); variants this model does not implement (scaled RoPE, sliding windows, MLP
    biases) are refused with a ``ValueError``. Returned in eval mode.
    """
    if not isinstance(hf_model, nn.Module) or not hasattr(hf_model, "config"):
        raise TypeError(f"hf_model must be a transformers LlamaForCausalLM or Qwen2ForCausalLM, "
                        f"got {type(hf_model).__name__}")
    hf_state = hf_model.state_dict()
    config = _llama_config_from_hf(hf_model.config, hf_state)
    state = _convert_llama_state(hf_state, config.n_layer)
    if config.tie_weights:
        state["lm_head.weight"] = state["token_embedding_table.weight"]
    model = Llama(config)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise ValueError(f"the weights do not fit a Llama of {config}: {' '.join(str(e).split())[:400]}") from None
    return model.eval()
