"""Milliseconds per training step of the lesson-09 model, naive vs SDPA attention, and the share of
the machine's float32 matmul peak that a step achieves.

A step is what ``gpt_lesson.training.train`` does per step: draw a batch, forward, backward, clip the
gradient norm, AdamW update. FLOPs per step follow nanoGPT's estimate (``estimate_mfu``):
``6 x N x tokens`` for the weight matmuls (forward 2, backward 4 per weight and token), with N the
parameters excluding the two embedding tables (look-ups, not matmuls), plus ``12 x n_layer x n_embd
x T`` per token for the attention matmuls q.k and weights.v (forward and backward). The peak is
measured here: the best float32 ``A @ B`` rate on square matrices, with the same threads.

    python benchmarks/train_step.py            # full run
    python benchmarks/train_step.py --quick    # CI-sized
"""
from __future__ import annotations

from dataclasses import replace

import torch
from _common import best_seconds, machine, markdown_table, parser, save, setup

from gpt_lesson.data import get_batch
from gpt_lesson.model import GPT
from gpt_lesson.shakespeare import SHAKESPEARE_CONFIG, TRAIN_CONFIG

COLUMNS = [("attn_impl", "attention", "s"), ("ms_per_step", "ms / step", ".1f"),
           ("tokens_per_s", "tokens / s", ".0f"), ("gflops", "GFLOP/s", ".1f"),
           ("fraction_of_peak", "fraction of matmul peak", ".0%"), ("speedup_vs_naive", "speed-up vs naive", ".2f")]
TARGET_SPEEDUP, TARGET_FRACTION = 1.1, 0.45


def matmul_peak(n: int, repeat: int) -> float:
    """Best float32 GFLOP/s of an n x n by n x n matmul (2 n^3 FLOPs)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    return 2 * n**3 / best_seconds(lambda: a @ b, repeat, warmup=2) / 1e9


def flops_per_step(model: GPT, batch_size: int) -> float:
    c = model.config
    n = model.num_parameters() - model.token_embedding_table.weight.numel() - model.position_embedding_table.weight.numel()
    per_token = 6 * n + 12 * c.n_layer * c.n_embd * c.block_size
    return per_token * batch_size * c.block_size


def step_function(attn_impl: str):
    """A closure doing one training step of the 09 configuration with the given attention."""
    cfg, tc = replace(SHAKESPEARE_CONFIG, attn_impl=attn_impl), TRAIN_CONFIG
    torch.manual_seed(tc.seed)
    model = GPT(cfg).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=tc.learning_rate, betas=(0.9, tc.beta2),
                                  weight_decay=tc.weight_decay)
    data = torch.randint(0, cfg.vocab_size, (100_000,), generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(1)

    def step() -> None:
        x, y = get_batch(data, cfg.block_size, tc.batch_size, gen)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return model, step


def plot(results: dict):
    """ms per step of both paths, and the achieved share of the matmul peak."""
    import matplotlib.pyplot as plt

    rows = results["rows"]
    names = [r["attn_impl"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    ax1.bar(names, [r["ms_per_step"] for r in rows], color=["tab:gray", "tab:blue"])
    for i, r in enumerate(rows):
        ax1.text(i, r["ms_per_step"], f"{r['ms_per_step']:.1f} ms", ha="center", va="bottom", fontsize=9)
    ax1.set(ylabel="best time per training step (ms)", title="One training step (batch 32 x 32 tokens)")
    ax2.bar(names, [100 * r["fraction_of_peak"] for r in rows], color=["tab:gray", "tab:blue"])
    ax2.axhline(100 * TARGET_FRACTION, color="k", linestyle="--", linewidth=1, label=f"target {TARGET_FRACTION:.0%}")
    ax2.set(ylabel="% of measured matmul peak", title=f"Achieved / peak ({results['peak_gflops']:.0f} GFLOP/s)")
    ax2.set_ylim(0, 100)
    ax2.legend(fontsize=8)
    m = results["machine"]
    fig.suptitle(f"lesson-09 model, torch {m['torch']}, {m['threads']} thread(s), {m['clock']} clock "
                 f"(shared machine, load {m['load_average_1min']})", fontsize=9)
    fig.tight_layout()
    return fig


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    setup(args)
    repeat = 10 if args.quick else 40
    rounds = 2 if args.quick else 4
    peak = max(matmul_peak(n, 3 if args.quick else 10) for n in ((512, 1024) if args.quick else (512, 1024, 2048)))
    print(f"float32 matmul peak: {peak:.1f} GFLOP/s", flush=True)
    steps = {impl: step_function(impl) for impl in ("naive", "sdpa")}
    flops = flops_per_step(steps["sdpa"][0], TRAIN_CONFIG.batch_size)
    best = {impl: float("inf") for impl in steps}
    for _ in range(rounds):  # alternate the two paths so both see the same machine load
        for impl, (_, step) in steps.items():
            best[impl] = min(best[impl], best_seconds(step, repeat, warmup=2))
    tokens = TRAIN_CONFIG.batch_size * SHAKESPEARE_CONFIG.block_size
    rows = []
    for impl in steps:
        s = best[impl]
        rows.append({"attn_impl": impl, "ms_per_step": 1e3 * s, "tokens_per_s": tokens / s, "gflops": flops / s / 1e9,
                     "fraction_of_peak": flops / s / 1e9 / peak, "speedup_vs_naive": best["naive"] / s})
    results = {"config": SHAKESPEARE_CONFIG.to_dict(), "batch_size": TRAIN_CONFIG.batch_size,
               "flops_per_step": flops, "peak_gflops": peak, "quick": args.quick,
               "max_steps": TRAIN_CONFIG.max_steps,
               "estimated_training_seconds": TRAIN_CONFIG.max_steps * best["sdpa"],
               "machine": machine(), "rows": rows}
    results["machine_after"] = machine()
    print()
    print(markdown_table(rows, COLUMNS))
    sdpa = rows[1]
    print(f"\ntarget SDPA >= {TARGET_SPEEDUP}x faster than naive: "
          f"{'met' if sdpa['speedup_vs_naive'] >= TARGET_SPEEDUP else 'NOT met'} ({sdpa['speedup_vs_naive']:.2f}x)")
    print(f"target >= {TARGET_FRACTION:.0%} of the matmul peak: "
          f"{'met' if sdpa['fraction_of_peak'] >= TARGET_FRACTION else 'NOT met'} ({sdpa['fraction_of_peak']:.0%})")
    print(f"{TRAIN_CONFIG.max_steps} steps at the SDPA rate: {results['estimated_training_seconds']:.0f} s "
          "(the training loop's estimates add a few percent)")
    if not args.no_save:
        save("train_step", results, plot(results))


if __name__ == "__main__":
    main()
