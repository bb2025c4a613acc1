"""Generation speed: no cache, KV cache (eager), KV cache with the compiled step, 50 .. 500 new tokens.

The model has the lesson-09 shape (4 layers x 128 dims, 4 heads, 65 characters) with
block_size 1024, so the prompt plus 500 new tokens fit in the window and the cache is
never rebuilt. Weights are random (seeded): speed does not depend on what was learned.
Greedy decoding must give identical tokens in every mode; the script checks it.

Besides tokens/s and the speed-ups over the uncached path, it prints how close the cached
step comes to its arithmetic limit: the FLOPs of one token (every weight matrix once, and
attention over the cached positions) divided by the measured float32 matmul peak.

The cached modes run inside ``gpt_lesson.runtime.decode_settings()`` (one thread whatever
``--threads`` says, and PyTorch's own GELU: one token's operators are too small to share), as
lesson 10 asks for them; ``--threads`` sets the threads of the uncached path and of the matmul peak.

    python benchmarks/kv_cache.py                          # full run, 2 threads, wall clock
    python benchmarks/kv_cache.py --threads 1 --clock cpu  # process time, for a busy machine
    python benchmarks/kv_cache.py --quick                  # CI-sized
"""
from __future__ import annotations

import time
import warnings

import torch
from _common import best_seconds, machine, markdown_table, parser, save, setup
from train_step import matmul_peak

from gpt_lesson.model import GPT, GPTConfig
from gpt_lesson.runtime import decode_settings
from gpt_lesson.sampling import generate

CONFIG = GPTConfig(vocab_size=65, n_embd=128, n_head=4, n_layer=4, block_size=1024, dropout=0.0, attn_impl="sdpa")
PROMPT_LEN = 16
MODES = {"no_cache": dict(use_cache=False), "cache": dict(use_cache=True),
         "compiled": dict(use_cache=True, compile=True)}
COLUMNS = [("new_tokens", "new tokens", "d"), ("tokens_per_s_no_cache", "no cache (tokens/s)", ".0f"),
           ("tokens_per_s_cache", "KV cache, eager (tokens/s)", ".0f"),
           ("tokens_per_s_compiled", "KV cache, compiled (tokens/s)", ".0f"),
           ("speedup_cache", "speed-up eager", ".2f"), ("speedup_compiled", "speed-up compiled", ".2f"),
           ("limit_fraction_cache", "eager: share of arithmetic limit", ".1%"),
           ("limit_fraction_compiled", "compiled: share of arithmetic limit", ".1%"),
           ("identical", "identical tokens", "")]
SPEEDUP_TARGETS = {200: 5.0, 500: 8.0}  # cached eager over uncached
RATE_TARGETS = {"cache": 3000.0, "compiled": 6000.0}  # tokens/s, 2 threads, wall clock


def flops_per_token(context: float) -> float:
    """FLOPs of one new token: every weight matrix once (a matrix-vector product), attention over ``context`` keys."""
    c = CONFIG
    weights = 2 * (c.n_layer * 12 * c.n_embd**2 + c.n_embd * c.vocab_size)  # q,k,v 3C^2, proj C^2, FFN 8C^2; lm_head
    attention = 2 * c.n_layer * 2 * c.n_embd * context  # q.k and weights.v per cached position, every layer
    return weights + attention


def _generate(model: GPT, prompt: torch.Tensor, n: int, **options) -> torch.Tensor:
    """Greedy ``generate``; the cached modes under :func:`~gpt_lesson.runtime.decode_settings`."""
    if not options.get("use_cache"):
        return generate(model, prompt, n, temperature=0, **options)
    with decode_settings():
        return generate(model, prompt, n, temperature=0, **options)


def measure(model: GPT, prompt: torch.Tensor, n: int, repeat: int, peak_flops: float) -> dict:
    row: dict = {"new_tokens": n}
    tokens = {}
    for mode, options in MODES.items():
        tokens[mode] = _generate(model, prompt, n, **options)  # also the warm-up
        reps = max(2, repeat // 2) if mode == "no_cache" and n >= 300 else repeat  # the slow path: fewer repeats
        seconds = best_seconds(lambda options=options: _generate(model, prompt, n, **options), reps,
                               warmup=0)
        row[f"tokens_per_s_{mode}"] = n / seconds
    # The arithmetic limit of one step at the mean context of the run, at the matmul peak.
    limit_s = flops_per_token(PROMPT_LEN + n / 2) / peak_flops
    for mode in ("cache", "compiled"):
        row[f"speedup_{mode}"] = row[f"tokens_per_s_{mode}"] / row["tokens_per_s_no_cache"]
        row[f"limit_fraction_{mode}"] = limit_s * row[f"tokens_per_s_{mode}"]
    row["identical"] = all(torch.equal(t, tokens["no_cache"]) for t in tokens.values())
    return row


def plot(results: dict):
    """Tokens per second in the three modes, and their speed-ups over no cache, against generated length."""
    import matplotlib.pyplot as plt

    rows = results["rows"]
    ns = [r["new_tokens"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for key, style, label in [("no_cache", "o--", "no cache (recompute all)"), ("cache", "o-", "KV cache, eager"),
                              ("compiled", "s-", "KV cache, compiled step")]:
        ax1.plot(ns, [r[f"tokens_per_s_{key}"] for r in rows], style, label=label)
    ax1.set(xlabel="new tokens generated", ylabel="tokens per second", yscale="log",
            title="Greedy generation speed")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3, which="both")
    ax2.plot(ns, [r["speedup_cache"] for r in rows], "o-", color="tab:orange", label="eager / no cache")
    ax2.plot(ns, [r["speedup_compiled"] for r in rows], "s-", color="tab:green", label="compiled / no cache")
    for n, target in results["speedup_targets"].items():
        ax2.plot([int(n)], [target], "k_", markersize=14, label="target (eager)" if int(n) == 200 else None)
    ax2.set(xlabel="new tokens generated", ylabel="speed-up over no cache", title="Speed-up from the KV cache")
    ax2.set_ylim(bottom=0)
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3)
    m = results["machine"]
    fig.suptitle(f"{CONFIG.n_layer} layers x {CONFIG.n_embd} dims, prompt {results['prompt_len']} tokens; "
                 f"torch {m['torch']}, {m['threads']} thread(s) (cached steps: 1), {m['clock']} clock "
                 f"(load {m['load_average_1min']})", fontsize=9)
    fig.tight_layout()
    return fig


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    setup(args)
    lengths = [50, 200, 500] if args.quick else [50, 100, 200, 300, 500]
    repeat = 2 if args.quick else 4
    torch.manual_seed(0)
    model = GPT(CONFIG).eval()
    prompt = torch.randint(0, CONFIG.vocab_size, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(1))
    peak = max(matmul_peak(n, 3 if args.quick else 5) for n in (512, 1024)) * 1e9
    print(f"float32 matmul peak: {peak / 1e9:.1f} GFLOP/s ({torch.get_num_threads()} thread(s)); one token's "
          f"arithmetic at a 200-token context: {flops_per_token(200) / 1e6:.2f} MFLOP = "
          f"{1e6 * flops_per_token(200) / peak:.1f} us", flush=True)
    results = {"config": CONFIG.to_dict(), "prompt_len": PROMPT_LEN, "repeat": repeat, "quick": args.quick,
               "speedup_targets": {str(k): v for k, v in SPEEDUP_TARGETS.items()}, "rate_targets": RATE_TARGETS,
               "peak_gflops": peak / 1e9, "machine": machine(), "rows": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        t0 = time.perf_counter()
        _generate(model, prompt, 8, **MODES["compiled"])  # the first call compiles
        results["compile_seconds"] = time.perf_counter() - t0
    fallback = [str(w.message) for w in caught if "torch.compile" in str(w.message)]
    results["compile_fallback"] = fallback[0] if fallback else None
    print(f"compiling the decode step: {results['compile_seconds']:.1f} s"
          + (f"; FELL BACK TO EAGER: {fallback[0]}" if fallback else ""), flush=True)
    for n in lengths:
        row = measure(model, prompt, n, repeat, peak)
        results["rows"].append(row)
        print(f"{n} new tokens: no cache {row['tokens_per_s_no_cache']:.0f}, eager {row['tokens_per_s_cache']:.0f}, "
              f"compiled {row['tokens_per_s_compiled']:.0f} tokens/s; {row['speedup_cache']:.2f}x / "
              f"{row['speedup_compiled']:.2f}x, identical={row['identical']}", flush=True)
    results["machine_after"] = machine()
    print()
    print(markdown_table(results["rows"], COLUMNS))
    print(f"\n{results['machine']['threads']} thread(s) for the uncached path, 1 for the cached steps; "
          f"{results['machine']['clock']} clock; load average {results['machine']['load_average_1min']} at the start, "
          f"{results['machine_after']['load_average_1min']} at the end on {results['machine']['cpu_count']} cores")
    rows = {r["new_tokens"]: r for r in results["rows"]}
    for n, target in SPEEDUP_TARGETS.items():
        if n in rows:
            r = rows[n]
            print(f"target >= {target:.0f}x at {n} new tokens (eager cache): "
                  f"{'met' if r['speedup_cache'] >= target else 'NOT met'} ({r['speedup_cache']:.2f}x; "
                  f"compiled {r['speedup_compiled']:.2f}x)")
    for mode, target in RATE_TARGETS.items():
        best = max(r[f"tokens_per_s_{mode}"] for r in results["rows"])
        print(f"target >= {target:,.0f} tokens/s ({'eager' if mode == 'cache' else 'compiled'} cache, best length): "
              f"{'met' if best >= target else 'NOT met'} ({best:,.0f})")
    if not all(r["identical"] for r in results["rows"]):
        raise SystemExit("the modes' greedy tokens differ: the cache or the compiled step is wrong")
    if not args.no_save:
        save("kv_cache", results, plot(results))


if __name__ == "__main__":
    main()
