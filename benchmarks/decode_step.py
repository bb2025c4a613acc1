"""One cached decode step, three ways: the library's modules, the same operators hand-written, compiled.

What can eager PyTorch reach for one token of lesson 09's model shape (block 1024) on this machine?
The hand-written step runs the operators a decode step needs and nothing else: no modules, no
argument checks, q, k and v split in one call, weights bound to local names. It is not code the
course would teach (it no longer reads like the source model); it is the ceiling of eager code
here, so it says whether a tokens/s target is a matter of the library's code or of eager PyTorch.
The compiled step is ``generate(..., compile=True)``'s (``gpt_lesson.kv_cache.CompiledDecodeStep``).
Each step's logits are checked against the library's eager step.

    python benchmarks/decode_step.py            # 1 thread, as generate() runs cached steps
    python benchmarks/decode_step.py --quick
"""
from __future__ import annotations

import _common
import torch
import torch.nn.functional as F
from _common import machine, parser, save, setup
from kv_cache import CONFIG

from gpt_lesson.kv_cache import CompiledDecodeStep, KVCache, decode_step
from gpt_lesson.model import GPT
from gpt_lesson.runtime import onednn

CONTEXT = 200  # cached positions when the timed steps start


def hand_written_step(model: GPT):
    """A decode step as plain function calls on the model's weights (one token, batch 1)."""
    c = model.config
    C, nh, hs = c.n_embd, c.n_head, c.head_size
    wte, wpe = model.token_embedding_table.weight, model.position_embedding_table.weight
    layers = [(b.ln1.weight, b.ln1.bias, b.sa.c_attn.weight, b.sa.c_proj.weight, b.ln2.weight, b.ln2.bias,
               b.ffwd.net[0].weight, b.ffwd.net[0].bias, b.ffwd.net[2].weight, b.ffwd.net[2].bias)
              for b in model.blocks]
    lnf_w, lnf_b, head_w, head_b = model.ln_f.weight, model.ln_f.bias, model.lm_head.weight, model.lm_head.bias
    scale = c.head_size ** -0.5

    def step(token: int, cache: KVCache) -> torch.Tensor:
        pos = cache.length
        x = (wte[token] + wpe[pos]).view(1, 1, C)
        for (w1, b1, wqkv, wproj, w2, b2, wfc, bfc, wout, bout), layer in zip(layers, cache.layers):
            q, k, v = F.linear(F.layer_norm(x, (C,), w1, b1), wqkv).view(1, 1, 3, nh, hs).permute(2, 0, 3, 1, 4)
            layer.k[:, :, pos:pos + 1] = k
            layer.v[:, :, pos:pos + 1] = v
            layer.length = pos + 1
            a = F.scaled_dot_product_attention(q, layer.k[:, :, :pos + 1], layer.v[:, :, :pos + 1], scale=scale)
            x = x + F.linear(a.transpose(1, 2).reshape(1, 1, C), wproj)
            x = x + F.linear(F.gelu(F.linear(F.layer_norm(x, (C,), w2, b2), wfc, bfc)), wout, bout)
        return F.linear(F.layer_norm(x, (C,), lnf_w, lnf_b), head_w, head_b)[:, -1, :]
    return step


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.set_defaults(threads=1)
    args = p.parse_args()
    setup(args)
    torch.manual_seed(0)
    model = GPT(CONFIG).eval()
    prompt = torch.randint(0, CONFIG.vocab_size, (1, CONTEXT), generator=torch.Generator().manual_seed(1))
    steps, repeat = (50, 3) if args.quick else (200, 6)
    hand = hand_written_step(model)
    compiled = CompiledDecodeStep()
    ways = {"library, eager": lambda cache: decode_step(model, torch.tensor([[7]]), cache),
            "hand-written, eager": lambda cache: hand(7, cache),
            "library, compiled": lambda cache: compiled(model, torch.tensor([[7]]), cache)}
    rows = []
    # PyTorch's own GELU, as runtime.decode_settings() chooses for one-token steps (setup() set the threads).
    with torch.inference_mode(), onednn(False):
        def fresh_cache() -> KVCache:
            cache = KVCache.for_model(model)
            model(prompt, kv_cache=cache)
            return cache

        def run(way) -> float:
            cache = fresh_cache()
            t0 = _common._clock()
            for _ in range(steps):
                way(cache)
            return _common._clock() - t0

        reference = decode_step(model, torch.tensor([[7]]), fresh_cache())
        differences = {}
        for name, way in ways.items():
            logits = way(fresh_cache())
            differences[name] = (logits - reference).abs().max().item()
            run(way)  # warm-up; the compiled step compiles in its first two calls
        # The ways take turns, so a busy moment of the machine slows all of them, not just one.
        best = {name: run(way) for name, way in ways.items()}
        for _ in range(repeat - 1):
            for name, way in ways.items():
                best[name] = min(best[name], run(way))
        for name, seconds in best.items():
            seconds /= steps
            rows.append({"way": name, "us_per_step": 1e6 * seconds, "steps_per_s": 1 / seconds,
                         "max_logit_difference": differences[name]})
            print(f"{name:20s} {1e6 * seconds:7.0f} us per step = {1 / seconds:6,.0f} steps/s "
                  f"(logits within {differences[name]:.1e} of the library's eager step)", flush=True)
    if compiled.failure:
        print(f"the compiled step fell back to eager: {compiled.failure}")
    results = {"config": CONFIG.to_dict(), "context": CONTEXT, "steps": steps, "machine": machine(),
               "compile_failure": compiled.failure, "rows": rows}
    if not args.no_save:
        save("decode_step", results, plot(results))


def plot(results: dict):
    """Microseconds per cached decode step, one bar per way."""
    import matplotlib.pyplot as plt

    rows = results["rows"]
    fig, ax = plt.subplots(figsize=(7, 3))
    bars = ax.barh([r["way"] for r in rows], [r["us_per_step"] for r in rows], color=["tab:blue", "tab:gray",
                                                                                        "tab:green"])
    ax.bar_label(bars, labels=[f"{r['us_per_step']:.0f} us ({r['steps_per_s']:,.0f}/s)" for r in rows], padding=3)
    ax.invert_yaxis()
    ax.set(xlabel="microseconds per one-token step (lower is faster)",
           title=f"One cached decode step at context {results['context']}, "
                 f"{results['machine']['threads']} thread(s)")
    ax.set_xlim(right=1.35 * max(r["us_per_step"] for r in rows))
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    main()
