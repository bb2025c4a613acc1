"""Naive attention vs ``F.scaled_dot_product_attention`` (SDPA), forward and forward+backward.

Both run causal attention on the same random q, k, v (shape B x n_head x T x head_size, the
lesson-09 model's heads: 4 heads of 32 channels) in the same process, for T = 64 .. 1024.
The naive path is the course's ``naive_attention`` (scores -> mask -> softmax -> weighted sum,
materialising the T x T matrices); SDPA is PyTorch's fused kernel with ``is_causal=True``.

    python benchmarks/attention.py            # full run
    python benchmarks/attention.py --quick    # CI-sized
"""
from __future__ import annotations

import torch
from _common import best_seconds, machine, markdown_table, parser, save, setup

from gpt_lesson.attention import causal_mask, naive_attention, sdpa_attention

N_HEAD, HEAD_SIZE = 4, 32
COLUMNS = [("T", "T", "d"), ("fwd_naive_ms", "fwd naive (ms)", ".2f"), ("fwd_sdpa_ms", "fwd SDPA (ms)", ".2f"),
           ("fwd_speedup", "fwd speed-up", ".2f"), ("fwdbwd_naive_ms", "fwd+bwd naive (ms)", ".2f"),
           ("fwdbwd_sdpa_ms", "fwd+bwd SDPA (ms)", ".2f"), ("fwdbwd_speedup", "fwd+bwd speed-up", ".2f"),
           ("max_abs_diff_fwd", "max abs diff (out)", ".1e"), ("max_abs_diff_grad", "max abs diff (grad q)", ".1e")]


def measure(T: int, batch_size: int, repeat: int) -> dict:
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(batch_size, N_HEAD, T, HEAD_SIZE, generator=g) for _ in range(3))
    mask = causal_mask(T)

    def naive(q, k, v):
        return naive_attention(q, k, v, mask)[0]

    def sdpa(q, k, v):
        return sdpa_attention(q, k, v, is_causal=True)

    # Same inputs, same answer: the two paths compute the same function.
    leaves = [[t.clone().requires_grad_() for t in (q, k, v)] for _ in range(2)]
    out_n, out_s = naive(*leaves[0]), sdpa(*leaves[1])
    out_n.sum().backward()
    out_s.sum().backward()
    diff_out = (out_n - out_s).abs().max().item()
    diff_grad = (leaves[0][0].grad - leaves[1][0].grad).abs().max().item()

    row = {"T": T}
    for name, fn in (("naive", naive), ("sdpa", sdpa)):
        with torch.no_grad():
            row[f"fwd_{name}_ms"] = 1e3 * best_seconds(lambda fn=fn: fn(q, k, v), repeat)
        leaves_ = [t.clone().requires_grad_() for t in (q, k, v)]

        def fwd_bwd(fn=fn, leaves_=leaves_):
            fn(*leaves_).sum().backward()
            for t in leaves_:
                t.grad = None

        row[f"fwdbwd_{name}_ms"] = 1e3 * best_seconds(fwd_bwd, repeat)
    row["fwd_speedup"] = row["fwd_naive_ms"] / row["fwd_sdpa_ms"]
    row["fwdbwd_speedup"] = row["fwdbwd_naive_ms"] / row["fwdbwd_sdpa_ms"]
    row["max_abs_diff_fwd"] = diff_out
    row["max_abs_diff_grad"] = diff_grad
    return row


def plot(results: dict):
    """Time per call (log scale) and the speed-up, over T."""
    import matplotlib.pyplot as plt

    rows = results["rows"]
    Ts = [r["T"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for key, label, style in (("fwd_naive", "forward, naive", "o--"), ("fwd_sdpa", "forward, SDPA", "o-"),
                              ("fwdbwd_naive", "fwd+bwd, naive", "s--"), ("fwdbwd_sdpa", "fwd+bwd, SDPA", "s-")):
        ax1.plot(Ts, [r[f"{key}_ms"] for r in rows], style, markersize=4, label=label)
    ax1.set(xscale="log", yscale="log", xlabel="sequence length T (tokens)", ylabel="best time per call (ms)",
            title="Causal attention on CPU")
    ax1.set_xticks(Ts, [str(t) for t in Ts])
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3, which="both")
    ax2.plot(Ts, [r["fwd_speedup"] for r in rows], "o-", label="forward")
    ax2.plot(Ts, [r["fwdbwd_speedup"] for r in rows], "s-", label="forward + backward")
    ax2.axhline(1.0, color="0.5", linewidth=0.8)
    ax2.set(xscale="log", xlabel="sequence length T (tokens)", ylabel="naive time / SDPA time",
            title="Speed-up of SDPA over naive")
    ax2.set_xticks(Ts, [str(t) for t in Ts])
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3)
    m = results["machine"]
    fig.suptitle(f"B={results['batch_size']}, {N_HEAD} heads x {HEAD_SIZE}; torch {m['torch']}, "
                 f"{m['threads']} thread(s), {m['clock']} clock (shared machine, load {m['load_average_1min']})", fontsize=9)
    fig.tight_layout()
    return fig


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    setup(args)
    Ts = [64, 256, 1024] if args.quick else [64, 128, 256, 512, 1024]
    batch_size = 4 if args.quick else 8
    repeat = 3 if args.quick else 10
    results = {"batch_size": batch_size, "n_head": N_HEAD, "head_size": HEAD_SIZE, "repeat": repeat,
               "quick": args.quick, "machine": machine(), "rows": []}
    for T in Ts:
        row = measure(T, batch_size, repeat)
        results["rows"].append(row)
        print(f"T={T}: forward {row['fwd_speedup']:.2f}x, forward+backward {row['fwdbwd_speedup']:.2f}x", flush=True)
    results["machine_after"] = machine()
    print()
    print(markdown_table(results["rows"], COLUMNS))
    if not args.no_save:
        save("attention", results, plot(results))


if __name__ == "__main__":
    main()
