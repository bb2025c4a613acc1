"""The numbers of the attention explorer: one run of the model on a text, its stages, and what is sent.

The stages are those of :mod:`gpt_lesson.attention`, computed from the q and k that
:meth:`gpt_lesson.model.GPT.attention_records` captured: raw scores ``QK^T``, scaled by
``1/sqrt(d_k)``, masked (the future set to -inf) and the softmax weights. The browser
(``static/attention.mjs``) computes the same stages from the q, k and v that
:func:`attention_payload` packs.
"""
from __future__ import annotations

import math

import torch

from ..attention import apply_mask, attention_scores, attention_weights, causal_mask, weighted_sum
from ..capture import attention_records
from ..model import GPT
from ..viz import token_labels
from ._common import check_choice, check_index, one_thread, pack_tensor, row_entropy
from .labels import label

__all__ = ["STAGES", "DEFAULT_TEXT", "DATA_BUDGET", "AttentionData", "check_model_and_tokenizer", "check_head",
           "encode_text", "attention_view_data", "attention_payload", "readout_lines", "notice_text"]

STAGES = ("raw", "scaled", "masked", "weights")
DEFAULT_TEXT = "First Citizen:\nBefore we proceed any further, hear me speak."
# Base64 bytes of q, k, v that one explorer may embed in a saved notebook. Within it q and k are
# sent exactly (float32); a longer text or a bigger model sends them as int16 with a scale per
# channel (scores within ~1e-4 of the model's), and v, which only draws bars, as int8.
DATA_BUDGET = 100_000


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


def encode_text(tokenizer, text: str, block_size: int) -> tuple[list[int], list[str], str]:
    """Token ids, one label per token, and a notice when the text was cut to ``block_size`` tokens.

    Raises a ValueError for empty text and for characters the tokenizer does not know.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text:
        raise ValueError("the text is empty: type at least one character")
    ids = tokenizer.encode(text)  # a CharTokenizer names the unknown characters in its ValueError
    notice = ""
    if len(ids) > block_size:
        notice = label("attention", "notice_truncated", n=len(ids), block=block_size)
        ids = ids[:block_size]
    return ids, [tokenizer.decode([i]) for i in ids], notice


class AttentionData:
    """One run of ``model`` over ``text``: the per-layer records and, per layer, the four stages.

    ``stages(layer)`` returns tensors of shape (n_head, T, T), computed once per layer
    with :mod:`gpt_lesson.attention` from the captured q and k, with the model's own
    scale and mask.
    """

    def __init__(self, model: GPT, tokenizer, text: str) -> None:
        check_model_and_tokenizer(model, tokenizer)
        cfg = model.config
        self.text = text
        self.ids, self.tokens, self.notice = encode_text(tokenizer, text, cfg.block_size)
        self.n_text_tokens, self.block_size = len(tokenizer.encode(text)), cfg.block_size
        self.T = len(self.ids)
        self.n_layer, self.n_head, self.head_size = cfg.n_layer, cfg.n_head, cfg.head_size
        device = next(model.parameters()).device
        idx = torch.tensor([self.ids], dtype=torch.long, device=device)
        with one_thread():
            records = attention_records(model, idx)
        self.records = [{name: t.cpu() for name, t in rec.items()} for rec in records]
        self.scale_arg = cfg.attn_scale  # None: attention_scores uses 1/sqrt(d_k), as the model does
        self.scale = cfg.head_size ** -0.5 if cfg.attn_scale is None else cfg.attn_scale
        self.mask = causal_mask(self.T) if getattr(cfg, "causal", True) else None
        self._stages: dict[int, dict[str, torch.Tensor]] = {}
        self._payload: dict | None = None

    def stages(self, layer: int) -> dict[str, torch.Tensor]:
        """Raw, scaled and masked scores and the weights of every head of ``layer``, each (n_head, T, T)."""
        check_index("layer", layer, self.n_layer, "the model's layer list")
        if layer not in self._stages:
            with one_thread():
                self._stages[layer] = self._compute_stages(layer)
        return self._stages[layer]

    def _compute_stages(self, layer: int) -> dict[str, torch.Tensor]:
        rec = self.records[layer]
        raw = attention_scores(rec["q"], rec["k"], scale=1.0)  # (1, nh, T, T)
        scaled = attention_scores(rec["q"], rec["k"], scale=self.scale_arg)
        masked = apply_mask(scaled, self.mask) if self.mask is not None else scaled
        weights = attention_weights(masked)
        return {"raw": raw[0], "scaled": scaled[0], "masked": masked[0], "weights": weights[0]}

    def stacked(self, name: str) -> torch.Tensor:
        """q, k or v of every layer: (n_layer, n_head, T, head_size)."""
        return torch.stack([rec[name][0] for rec in self.records])


def attention_payload(data: AttentionData, budget: int = DATA_BUDGET) -> dict:
    """What the browser needs for one text: tokens, sizes and q, k, v of every layer and head.

    q and k are float32 (exact) when the three arrays fit ``budget`` base64 bytes that way, else
    int16 with a scale per channel; v is float32 when everything fits, else int8 (it draws bars only).
    """
    if data._payload is None:
        values = data.n_layer * data.n_head * data.T * data.head_size
        b64 = lambda nbytes: 4 * math.ceil(nbytes / 3)  # noqa: E731 - base64 grows 3 bytes into 4
        if b64(12 * values) <= budget:
            qk, v = "float32", "float32"
        elif b64(9 * values) <= budget:
            qk, v = "float32", "int8"
        else:
            qk, v = "int16", "int8"
        data._payload = {
            "text": data.text, "tokens": token_labels(data.tokens), "T": data.T, "n_layer": data.n_layer,
            "n_head": data.n_head, "head_size": data.head_size, "scale": data.scale, "causal": data.mask is not None,
            "notice": data.notice,
            "q": pack_tensor(data.stacked("q"), qk), "k": pack_tensor(data.stacked("k"), qk),
            "v": pack_tensor(data.stacked("v"), v),
        }
    return data._payload


def check_head(head: object, n_head: int) -> int | str:
    if head == "all" and isinstance(head, str):
        return head
    if isinstance(head, str):
        raise ValueError(f"head={head!r} must be a head number or 'all'")
    return check_index("head", head, n_head, "the layer's head list")


def attention_view_data(
    data: AttentionData,
    layer: int = 0,
    head: int | str = 0,
    stage: str = "weights",
    query: int | None = None,
    key: int | None = None,
) -> dict:
    """Everything the attention view shows for these settings (the explorer's ``view``).

    ``matrix`` is the chosen stage, (T, T) for one head or (n_head, T, T) for ``head="all"``;
    ``weights`` the softmax weights of the same head(s); ``readouts`` the row sums,
    row entropies (nats) and largest weight; with a ``query`` (one head only), ``cell``
    holds the step-through of the (query, key) cell (``key=None``: the key with the
    largest weight).
    """
    stages = data.stages(layer)
    head = check_head(head, data.n_head)
    check_choice("stage", stage, STAGES)
    if query is not None:
        if head == "all":
            raise ValueError("query needs one head: choose a head number instead of head='all'")
        check_index("query", query, data.T, "the text's token list")
    if key is not None:
        if query is None:
            raise ValueError("key needs a query: give query= as well")
        check_index("key", key, data.T, "the text's token list")
    pick = slice(None) if head == "all" else head
    weights = stages["weights"][pick]
    view = {
        "tokens": data.tokens, "T": data.T, "layer": layer, "head": head, "stage": stage,
        "notice": data.notice, "n_text_tokens": data.n_text_tokens, "block_size": data.block_size,
        "scale": data.scale, "head_size": data.head_size, "mask": data.mask,
        "matrix": stages[stage][pick], "weights": weights,
        "readouts": {"row_sums": weights.sum(-1), "entropy": row_entropy(weights),
                     "max_weight": float(weights.max())},
        "cell": None,
    }
    if query is not None:
        rec = data.records[layer]
        if key is None:
            key = int(weights[query].argmax())
        q, k, v = rec["q"][0, head, query], rec["k"][0, head, key], rec["v"][0, head]  # (hs,), (hs,), (T, hs)
        w = stages["weights"][head, query, key]
        view["cell"] = {
            "query": query, "key": key, "products": q * k, "dot": float((q * k).sum()),
            "raw": float(stages["raw"][head, query, key]), "scaled": float(stages["scaled"][head, query, key]),
            "visible": data.mask is None or bool(data.mask[query, key] != 0),
            "weight": float(w), "row": weights[query],
            "contribution": w * v[key], "output": weighted_sum(weights[query:query + 1], v)[0],
        }
    return view


def notice_text(view: dict) -> str:
    """The truncation notice of ``view`` in the current language ("" when the whole text fits)."""
    n, block = view.get("n_text_tokens", 0), view.get("block_size", 0)
    return label("attention", "notice_truncated", n=n, block=block) if n > block else ""


def readout_lines(view: dict) -> list[str]:
    """The read-out lines under the explorer, from Python's numbers (the browser writes the same)."""
    def L(key: str, **fields) -> str:
        return label("attention", key, **fields)

    r = view["readouts"]
    err = float((r["row_sums"] - 1).abs().max())
    first = L("rows_sum_to_one", tol=1e-5) if err < 1e-5 else L("rows_do_not_sum_to_one", err=err)
    lines = [" · ".join([first, L("mean_entropy", h=float(r["entropy"].mean())),
                         L("largest_weight", w=r["max_weight"])])]
    cell = view["cell"]
    if cell is not None:
        i, row = cell["query"], cell["row"]
        j = int(row.argmax())
        labels = token_labels(view["tokens"])
        lines.append(L("query_readout", i=i, tok=labels[i], sum=float(row.sum()), h=float(r["entropy"][i]),
                       w=float(row[j]), j=j, ktok=labels[j]))
    return lines
