"""The numbers of the attention explorer: one run of the model on a text, computed once, here.

:class:`AttentionData` runs the model once per text (:func:`capture_qkv`) and computes, with
:mod:`gpt_lesson.attention`, every number the explorer shows: the four stages of every layer and
head (raw scores ``QK^T``, scaled by ``1/sqrt(d_k)``, masked, softmax weights), the weighted sums
of V, and the statistics its read-outs print (row sums, entropies, largest weights, the spread of the
scores before and after the scaling, the softmax's denominator). :func:`attention_payload` packs
them for the browser, which only looks them up, formats and draws (``js/src/attention.mjs``); the
static picture and ``explorer.view`` read the same arrays. The one piece of arithmetic left to the
browser is the step-through's channel-by-channel products ``q[d]·k[d]`` and ``w·v[key]`` of the cell
the learner picks (there are T x T cells; sending every product would cost T times the data).
"""
from __future__ import annotations

import math

import torch

from ..attention import apply_mask, attention_scores, attention_weights, causal_mask, weighted_sum
from ..capture import attention_records
from ..model import GPT
from ..validation import check_choice, check_int
from ..viz import token_labels
from ._common import one_thread, pack_tensor, row_entropy
from .labels import label

__all__ = ["STAGES", "DEFAULT_TEXT", "DATA_BUDGET", "AttentionData", "capture_qkv", "check_model_and_tokenizer",
           "check_head", "check_position", "encode_text", "attention_view_data", "attention_payload", "notice_text"]

STAGES = ("raw", "scaled", "masked", "weights")
DEFAULT_TEXT = "First Citizen:\nBefore we proceed any further, hear me speak."
# Base64 bytes of the arrays one explorer may embed in a saved notebook: float32 (exact) when they
# fit, else int16 with a scale per channel (values within ~1e-4 of the model's; v and the outputs,
# which only draw bars, as int8), else int8 throughout.
DATA_BUDGET = 240_000
ROW_STATS = ("entropy", "row_sum", "max_weight", "argmax", "sum_exp", "raw_std", "scaled_std")
HEAD_STATS = ("mean_entropy", "max_weight", "max_sum_error", "raw_std", "scaled_std", "limit")


def capture_qkv(model: GPT, idx: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """q, k and v of every layer for the token ids ``idx`` (1, T): the explorer's one call into the model.

    Each dict holds (n_head, T, head_size) tensors on the CPU.
    """
    with one_thread():
        records = attention_records(model, idx)
    return [{name: rec[name][0].detach().cpu() for name in ("q", "k", "v")} for rec in records]


def check_model_and_tokenizer(model: object, tokenizer: object) -> None:
    """Raise unless ``model`` is a :class:`GPT` and ``tokenizer`` can encode/decode for its vocabulary."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a gpt_lesson GPT, got {type(model).__name__}")
    if not (callable(getattr(tokenizer, "encode", None)) and callable(getattr(tokenizer, "decode", None))):
        raise TypeError(f"tokenizer must have encode() and decode() (a CharTokenizer), got {type(tokenizer).__name__}")
    vocab = getattr(tokenizer, "vocab_size", None)
    if isinstance(vocab, int) and vocab > model.config.vocab_size:
        raise ValueError(
            f"the tokenizer has vocab_size={vocab} but the model only vocab_size={model.config.vocab_size}; "
            "use the tokenizer the model was built for"
        )


def _unknown_characters(tokenizer, text: str) -> list[str]:
    known = getattr(tokenizer, "stoi", None)
    if isinstance(known, dict):
        return sorted({ch for ch in text if ch not in known})
    unknown = set()
    for ch in set(text):
        try:
            tokenizer.encode(ch)
        except ValueError:
            unknown.add(ch)
    return sorted(unknown)


def encode_text(tokenizer, text: str, block_size: int) -> tuple[list[int], list[str], str]:
    """Token ids, one label per token, and a notice when the text was cut to ``block_size`` tokens.

    Raises a ValueError a learner can act on for empty text and for characters the tokenizer does
    not know (which characters, and what to do).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text:
        raise ValueError(label("attention", "error_empty"))
    unknown = _unknown_characters(tokenizer, text)
    if unknown:
        shown = " ".join(repr(ch) for ch in unknown[:12]) + (" …" if len(unknown) > 12 else "")
        vocab = getattr(tokenizer, "vocab_size", "its")
        raise ValueError(label("attention", "error_unknown", chars=shown, n=len(unknown), vocab=vocab))
    ids = tokenizer.encode(text)
    notice = ""
    if len(ids) > block_size:
        notice = label("attention", "notice_truncated", n=len(ids), block=block_size)
        ids = ids[:block_size]
    return ids, [tokenizer.decode([i]) for i in ids], notice


def check_head(head: object, n_head: int) -> int | str:
    if head == "all" and isinstance(head, str):
        return head
    if isinstance(head, str):
        raise ValueError(f"head={head!r} must be a head number or 'all'")
    return check_position("head", head, n_head, "the layer's head list")


def check_position(name: str, value: object, size: int, what: str) -> int:
    """An int in [0, size): ``what`` names the list it indexes."""
    return check_int(name, value, minimum=0, maximum=size - 1, rule=f"in 0..{size - 1}: {what} has {size}")


class AttentionData:
    """One run of ``model`` over ``text`` and every number the explorer shows, computed once.

    ``stages[name]`` is (n_layer, n_head, T, T) for each of :data:`STAGES`; ``q``, ``k``, ``v`` and
    ``output`` (the weighted sums of V) are (n_layer, n_head, T, head_size); ``row_stats`` is
    (n_layer, n_head, T, len(ROW_STATS)), ``head_stats`` (n_layer, n_head, len(HEAD_STATS)) and
    ``layer_stats`` (n_layer, len(HEAD_STATS)), the statistics of all the heads of a layer together.
    """

    def __init__(self, model: GPT, tokenizer, text: str) -> None:
        check_model_and_tokenizer(model, tokenizer)
        cfg = model.config
        self.text = text
        self.ids, self.tokens, self.notice = encode_text(tokenizer, text, cfg.block_size)
        self.n_text_tokens, self.block_size = len(tokenizer.encode(text)), cfg.block_size
        self.T = T = len(self.ids)
        self.n_layer, self.n_head, self.head_size = cfg.n_layer, cfg.n_head, cfg.head_size
        device = next(model.parameters()).device
        records = capture_qkv(model, torch.tensor([self.ids], dtype=torch.long, device=device))
        self.scale = cfg.head_size ** -0.5 if cfg.attn_scale is None else cfg.attn_scale
        self.mask = causal_mask(T) if getattr(cfg, "causal", True) else None
        with one_thread():
            self.q, self.k, self.v = (torch.stack([r[name] for r in records]) for name in ("q", "k", "v"))
            self._compute(cfg.attn_scale)
        self._payload: dict | None = None

    def _compute(self, scale_arg: float | None) -> None:
        raw = attention_scores(self.q, self.k, scale=1.0)  # (L, nh, T, T)
        scaled = attention_scores(self.q, self.k, scale=scale_arg)  # None: 1/sqrt(d_k), as the model does
        masked = apply_mask(scaled, self.mask) if self.mask is not None else scaled
        weights = attention_weights(masked)
        self.stages = {"raw": raw, "scaled": scaled, "masked": masked, "weights": weights}
        self.output = weighted_sum(weights, self.v)  # (L, nh, T, hs)
        max_w, argmax = weights.max(-1)
        # the spread of each query's scores over all T keys, before and after the scaling (population std)
        rows = {"entropy": row_entropy(weights), "row_sum": weights.sum(-1), "max_weight": max_w,
                "argmax": argmax.to(weights.dtype), "sum_exp": torch.logsumexp(masked.double(), -1).exp().float(),
                "raw_std": raw.std(-1, correction=0), "scaled_std": scaled.std(-1, correction=0)}
        self.row_stats = torch.stack([rows[name] for name in ROW_STATS], -1)
        self.head_stats = self._summary(rows, weights, raw, dims=(-1,))
        self.layer_stats = self._summary(rows, weights, raw, dims=(-2, -1))

    @staticmethod
    def _summary(rows: dict, weights: torch.Tensor, raw: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
        """HEAD_STATS over the rows of each head (dims=(-1,)) or of every head of a layer (dims=(-2, -1))."""
        wdims = tuple(d - 1 for d in dims) + (-1,)
        stats = {"mean_entropy": rows["entropy"].mean(dims), "max_weight": weights.amax(wdims),
                 "max_sum_error": (rows["row_sum"] - 1).abs().amax(dims),
                 "raw_std": rows["raw_std"].mean(dims), "scaled_std": rows["scaled_std"].mean(dims),
                 "limit": raw.abs().amax(wdims)}
        return torch.stack([stats[name] for name in HEAD_STATS], -1)

    def row(self, layer: int, head: int, query: int) -> dict[str, float]:
        """The statistics of one query row (see ROW_STATS)."""
        values = self.row_stats[layer, head, query].tolist()
        out = dict(zip(ROW_STATS, values))
        out["argmax"] = int(out["argmax"])
        return out


def _b64_size(nbytes: int) -> int:
    return 4 * math.ceil(nbytes / 3)


def attention_payload(data: AttentionData, budget: int = DATA_BUDGET) -> dict:
    """What the browser needs for one text: tokens, sizes, and every number of every layer and head.

    float32 throughout when it fits ``budget`` base64 bytes; else int16 with v and the outputs as int8,
    else int8; as integers, the scaled scores are the raw scores' integers with their scales times
    1/sqrt(d_k) (``{"like": "raw", "scales": ...}``).
    """
    if data._payload is not None:
        return data._payload
    n = data.n_layer * data.n_head
    squares, vectors = n * data.T * data.T, n * data.T * data.head_size
    if _b64_size(4 * (3 * squares + 4 * vectors)) <= budget:
        dtypes = ("float32", "float32", "float32")
    elif _b64_size(2 * 2 * squares + 2 * 2 * vectors + 2 * vectors) <= budget:
        dtypes = ("int16", "int16", "int8")
    else:
        dtypes = ("int8", "int8", "int8")
    stage_dt, qk_dt, v_dt = dtypes
    st = data.stages
    raw = pack_tensor(st["raw"], stage_dt)
    if stage_dt == "float32":
        scaled = pack_tensor(st["scaled"], stage_dt)
    else:  # the same integers: scaled = raw * scale, so only the per-channel scales differ
        scales = torch.frombuffer(bytearray(raw["scales"]), dtype=torch.float32) * data.scale
        scaled = {"like": "raw", "scales": scales.numpy().tobytes()}
    data._payload = {
        "text": data.text, "tokens": token_labels(data.tokens), "T": data.T, "n_layer": data.n_layer,
        "n_head": data.n_head, "head_size": data.head_size, "scale": data.scale, "causal": data.mask is not None,
        "notice": data.notice, "row_stats": list(ROW_STATS), "head_stats": list(HEAD_STATS),
        "raw": raw, "scaled": scaled, "weights": pack_tensor(st["weights"], stage_dt),
        "q": pack_tensor(data.q, qk_dt), "k": pack_tensor(data.k, qk_dt),
        "v": pack_tensor(data.v, v_dt), "output": pack_tensor(data.output, v_dt),
        "rows": pack_tensor(data.row_stats, "float32"), "heads": pack_tensor(data.head_stats, "float32"),
        "layers": pack_tensor(data.layer_stats, "float32"),
    }
    return data._payload


def attention_view_data(
    data: AttentionData,
    layer: int = 0,
    head: int | str = 0,
    stage: str = "weights",
    query: int | None = None,
    key: int | None = None,
) -> dict:
    """Everything the attention view shows for these settings (the explorer's ``view``), from ``data``.

    ``matrix`` is the chosen stage, (T, T) for one head or (n_head, T, T) for ``head="all"``;
    ``weights`` the softmax weights of the same head(s); ``readouts`` the row sums, row entropies
    (nats), largest weight and the spread of the scores; with a ``query`` (one head only), ``cell``
    holds the step-through of the (query, key) cell (``key=None``: the key with the largest weight).
    """
    check_position("layer", layer, data.n_layer, "the model's layer list")
    head = check_head(head, data.n_head)
    check_choice("stage", stage, STAGES)
    if query is not None:
        if head == "all":
            raise ValueError("query needs one head: choose a head number instead of head='all'")
        check_position("query", query, data.T, "the text's token list")
    if key is not None:
        if query is None:
            raise ValueError("key needs a query: give query= as well")
        check_position("key", key, data.T, "the text's token list")
    pick = slice(None) if head == "all" else head
    weights = data.stages["weights"][layer, pick]
    summary = data.layer_stats[layer] if head == "all" else data.head_stats[layer, head]
    rows = data.row_stats[layer, pick]
    stats = dict(zip(HEAD_STATS, summary.tolist()))
    view = {
        "tokens": data.tokens, "T": data.T, "layer": layer, "head": head, "stage": stage,
        "notice": data.notice, "n_text_tokens": data.n_text_tokens, "block_size": data.block_size,
        "scale": data.scale, "head_size": data.head_size, "mask": data.mask,
        "matrix": data.stages[stage][layer, pick], "weights": weights,
        "readouts": {"row_sums": rows[..., ROW_STATS.index("row_sum")],
                     "entropy": rows[..., ROW_STATS.index("entropy")], **stats},
        "cell": None,
    }
    if query is not None:
        r = data.row(layer, head, query)
        key = r["argmax"] if key is None else key
        q, k, v = data.q[layer, head, query], data.k[layer, head, key], data.v[layer, head]
        w = weights[query, key]
        view["cell"] = {
            "query": query, "key": key, "products": q * k,
            "dot": float(data.stages["raw"][layer, head, query, key]),
            "raw": float(data.stages["raw"][layer, head, query, key]),
            "scaled": float(data.stages["scaled"][layer, head, query, key]),
            "visible": data.mask is None or bool(data.mask[query, key] != 0),
            "weight": float(w), "row": weights[query], "sum_exp": r["sum_exp"],
            "n_visible": query + 1 if data.mask is not None else data.T,
            "contribution": w * v[key], "output": data.output[layer, head, query],
        }
    return view


def notice_text(view: dict) -> str:
    """The truncation notice of ``view`` in the current language ("" when the whole text fits)."""
    n, block = view.get("n_text_tokens", 0), view.get("block_size", 0)
    return label("attention", "notice_truncated", n=n, block=block) if n > block else ""
