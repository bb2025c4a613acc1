"""Generation speed with and without the KV cache, over 50 .. 500 new tokens.

The model has the lesson-09 shape (4 layers x 128 dims, 4 heads, 65 characters) with
block_size 1024, so the prompt plus 500 new tokens fit in the window and the cache is
never rebuilt. Weights are random (seeded): speed does not depend on what was learned.
Greedy decoding with and without the cache must give identical tokens; the script checks it.

    python benchmarks/kv_cache.py            # full run
    python benchmarks/kv_cache.py --quick    # CI-sized
"""
from __future__ import annotations

import torch

from _common import best_seconds, machine, markdown_table, parser, save, setup

from gpt_lesson.sampling import generate
from gpt_lesson.model import GPT, GPTConfig

CONFIG = GPTConfig(vocab_size=65, n_embd=128, n_head=4, n_layer=4, block_size=1024, dropout=0.0, attn_impl="sdpa")
PROMPT_LEN = 16
COLUMNS = [("new_tokens", "new tokens", "d"), ("tokens_per_s_no_cache", "no cache (tokens/s)", ".0f"),
           ("tokens_per_s_cache", "KV cache (tokens/s)", ".0f"), ("speedup", "speed-up", ".2f"),
           ("identical", "identical tokens", "")]
TARGETS = {200: 5.0, 500: 8.0}


def measure(model: GPT, prompt: torch.Tensor, n: int, repeat: int) -> dict:
    out = {}
    tokens = {}
    for use_cache in (False, True):
        tokens[use_cache] = generate(model, prompt, n, temperature=0, use_cache=use_cache)
        seconds = best_seconds(lambda: generate(model, prompt, n, temperature=0, use_cache=use_cache), repeat,
                               warmup=0)
        out["tokens_per_s_cache" if use_cache else "tokens_per_s_no_cache"] = n / seconds
    return {"new_tokens": n, **out, "speedup": out["tokens_per_s_cache"] / out["tokens_per_s_no_cache"],
            "identical": bool(torch.equal(tokens[False], tokens[True]))}


def plot(results: dict):
    """Tokens per second with and without the cache, and their ratio, over generated length."""
    import matplotlib.pyplot as plt

    rows = results["rows"]
    ns = [r["new_tokens"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax1.plot(ns, [r["tokens_per_s_no_cache"] for r in rows], "o--", label="no cache (recompute all)")
    ax1.plot(ns, [r["tokens_per_s_cache"] for r in rows], "o-", label="KV cache")
    ax1.set(xlabel="new tokens generated", ylabel="tokens per second", yscale="log",
            title="Greedy generation speed")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3, which="both")
    ax2.plot(ns, [r["speedup"] for r in rows], "o-", color="tab:green", label="measured")
    for n, target in TARGETS.items():
        ax2.plot([n], [target], "k_", markersize=14, label="target" if n == 200 else None)
    ax2.set(xlabel="new tokens generated", ylabel="cache / no cache", title="Speed-up from the KV cache")
    ax2.set_ylim(bottom=0)
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3)
    m = results["machine"]
    fig.suptitle(f"{CONFIG.n_layer} layers x {CONFIG.n_embd} dims, prompt {results['prompt_len']} tokens; "
                 f"torch {m['torch']}, {m['threads']} thread(s), {m['clock']} clock (shared machine, load {m['load_average_1min']})",
                 fontsize=9)
    fig.tight_layout()
    return fig


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    setup(args)
    lengths = [50, 200, 500] if args.quick else [50, 100, 200, 300, 400, 500]
    repeat = 2 if args.quick else 5
    torch.manual_seed(0)
    model = GPT(CONFIG).eval()
    prompt = torch.randint(0, CONFIG.vocab_size, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(1))
    results = {"config": CONFIG.to_dict(), "prompt_len": PROMPT_LEN, "repeat": repeat, "quick": args.quick,
               "targets": {str(k): v for k, v in TARGETS.items()}, "machine": machine(), "rows": []}
    for n in lengths:
        row = measure(model, prompt, n, repeat)
        results["rows"].append(row)
        print(f"{n} new tokens: {row['tokens_per_s_no_cache']:.0f} -> {row['tokens_per_s_cache']:.0f} tokens/s, "
              f"{row['speedup']:.2f}x, identical={row['identical']}", flush=True)
    results["machine_after"] = machine()
    print()
    print(markdown_table(results["rows"], COLUMNS))
    for n, target in TARGETS.items():
        row = next((r for r in results["rows"] if r["new_tokens"] == n), None)
        if row is not None:
            verdict = "met" if row["speedup"] >= target else "NOT met"
            print(f"target >= {target:.0f}x at {n} new tokens: {verdict} ({row['speedup']:.2f}x)")
    if not all(r["identical"] for r in results["rows"]):
        raise SystemExit("cached and uncached greedy decoding differ: the cache is wrong")
    if not args.no_save:
        save("kv_cache", results, plot(results))


if __name__ == "__main__":
    main()
