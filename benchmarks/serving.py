"""Serving: batched vs one-at-a-time decoding, paged vs contiguous KV memory, continuous vs static batching.

Three measurements, in one run, on models of lesson 09's shape (4 layers x 128 dims, 4 heads, 65
characters) with random (seeded) weights: speed does not depend on what was learned.

1. **Batched decoding.** 8 requests, greedy: one after another with the course's
   ``generate(..., use_cache=True)``, then all together through ``gpt_lesson.serving`` (one forward per
   step for every running sequence). Tokens must be identical; the ratio of tokens/s is the result.
   Lesson 09's own context (block_size 32, each request filling it) is the target row; a longer context
   (block_size 256, 128 new tokens each) shows what attention costs once each sequence has many keys of
   its own to read: the weights are read once per step for everyone, the keys and values of every
   sequence are not shared.
2. **Memory.** 32 requests of varied lengths, each at its longest, in a contiguous cache that reserves
   block_size positions per sequence (lesson 10's ``KVCache``) and in the paged pool: reserved, held and
   used bytes; lesson 09's context with blocks of 4 and 16 positions, and a context of 256.
3. **Continuous vs static batching.** 32 requests with varied lengths, at most 8 running at once: the
   mean time per request (steps from arrival to the last token, and seconds) and tokens/s.

The server (its pool) is built before the clock starts, as a server starts once and then serves;
``generate`` allocates its own cache inside each call, as it does for every request.

    python benchmarks/serving.py                          # full run, wall clock
    python benchmarks/serving.py --threads 1 --clock cpu  # process time, for a busy machine
    python benchmarks/serving.py --quick                  # CI-sized
"""
from __future__ import annotations

import random
import statistics

import _common
import torch
from _common import best_seconds, machine, markdown_table, parser, save, setup

from gpt_lesson.model import GPT, GPTConfig
from gpt_lesson.sampling import generate
from gpt_lesson.serving import Request, Scheduler, blocks_for, bytes_per_position, positions_needed

SHAPE = dict(vocab_size=65, n_embd=128, n_head=4, n_layer=4, dropout=0.0)
TOKENS_PER_BLOCK = 16
N_REQUESTS = 8
BATCH_TARGET = 4.0  # batched tokens/s over one-at-a-time, lesson 09's context
# (block_size, longest prompt, new tokens per request): lesson 09's context filled (prompts of 2-9 tokens and
# 24 new ones: up to 32 positions), and a longer one
DECODING = ((32, 9, 24), (256, 48, 128))
MEMORY_COLUMNS = [("context", "block_size", "d"), ("tokens_per_block", "positions per block", "d"),
                  ("used_bytes", "used (B)", ",d"), ("paged_bytes", "paged, held (B)", ",d"),
                  ("contiguous_bytes", "contiguous, reserved (B)", ",d"),
                  ("paged_waste_max", "paged waste per sequence, max (positions)", "d"),
                  ("contiguous_waste_mean", "contiguous waste per sequence, mean (positions)", ".1f"),
                  ("contiguous_over_paged", "contiguous / paged", ".2f")]
COLUMNS = [("context", "block_size", "d"), ("new_tokens", "new tokens (all requests)", "d"),
           ("tokens_per_s_sequential", "one at a time (tokens/s)", ".0f"),
           ("tokens_per_s_batched", "batched (tokens/s)", ".0f"), ("speedup", "ratio", ".2f"),
           ("identical", "identical tokens", "")]


def model_with_context(block_size: int) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(block_size=block_size, **SHAPE)).eval()


def decoding_requests(rng: random.Random, longest_prompt: int, new_tokens: int) -> list[Request]:
    """8 requests with prompts of 2..longest_prompt tokens (each sequence at its own position), each asking for
    the same number of new tokens (the batch stays full: uneven lengths are part 3's subject)."""
    return [Request(i, [rng.randrange(SHAPE["vocab_size"]) for _ in range(rng.randint(2, longest_prompt))],
                    new_tokens) for i in range(N_REQUESTS)]


def one_at_a_time(model: GPT, requests: list[Request]) -> list[list[int]]:
    return [generate(model, torch.tensor([r.prompt]), r.max_new_tokens, temperature=0, use_cache=True)
            [0, len(r.prompt):].tolist() for r in requests]


def pool_for(requests: list[Request]) -> int:
    """Blocks for every request at once, at its longest."""
    return sum(blocks_for(positions_needed(len(r.prompt), r.max_new_tokens), TOKENS_PER_BLOCK) for r in requests)


def once(fn) -> float:
    """Seconds of one call of ``fn`` on the benchmark's clock."""
    return best_seconds(fn, 1, warmup=0)


def measure_decoding(block_size: int, longest_prompt: int, new_tokens: int, repeat: int) -> dict:
    model = model_with_context(block_size)
    requests = decoding_requests(random.Random(block_size), longest_prompt, new_tokens)
    expected = one_at_a_time(model, requests)  # also the warm-up
    num_blocks = pool_for(requests)
    sequential, batched, identical = [], [], True
    for k in range(repeat + 1):  # the two ways in turn, so the machine's load falls on both alike
        scheduler = Scheduler(model, num_blocks, TOKENS_PER_BLOCK)  # the server starts before the clock
        seconds = once(lambda s=scheduler: (s.submit(requests), s.run()))
        identical &= [scheduler.finished[r.request_id].tokens for r in requests] == expected
        if k:  # the first batched run is a warm-up
            batched.append(seconds)
            sequential.append(once(lambda: one_at_a_time(model, requests)))
    n = sum(r.max_new_tokens for r in requests)
    seq, bat = min(sequential), min(batched)
    return {"context": block_size, "new_tokens": n, "prompt_lengths": [len(r.prompt) for r in requests],
            "tokens_per_s_sequential": n / seq, "tokens_per_s_batched": n / bat, "speedup": seq / bat,
            "identical": identical}


def workload(rng: random.Random, n: int, block_size: int) -> list[Request]:
    """Requests with prompts of 4-16 tokens and 2-20 new tokens (all fit lesson 09's context of 32)."""
    out = []
    for i in range(n):
        prompt = [rng.randrange(SHAPE["vocab_size"]) for _ in range(rng.randint(4, 16))]
        out.append(Request(i, prompt, min(rng.randint(2, 20), block_size - len(prompt) + 1)))
    return out


def memory(requests: list[Request], block_size: int, tokens_per_block: int) -> dict:
    """Each request at its longest: positions used, held by the paged pool, reserved by a contiguous cache."""
    per = bytes_per_position(SHAPE["n_layer"], SHAPE["n_embd"])
    used = [positions_needed(len(r.prompt), r.max_new_tokens) for r in requests]
    held = [tokens_per_block * blocks_for(u, tokens_per_block) for u in used]
    return {"context": block_size, "tokens_per_block": tokens_per_block, "sequences": len(requests),
            "bytes_per_position": per, "used_bytes": per * sum(used), "paged_bytes": per * sum(held),
            "contiguous_bytes": per * block_size * len(requests),
            "paged_waste_max": max(h - u for h, u in zip(held, used)),
            "contiguous_waste_mean": block_size - statistics.mean(used),
            "contiguous_over_paged": block_size * len(requests) / sum(held)}


def long_workload(rng: random.Random, n: int) -> list[Request]:
    """Requests for a context of 256: prompts of 8-64 tokens, 8-192 new tokens."""
    return [Request(i, [rng.randrange(SHAPE["vocab_size"]) for _ in range(rng.randint(8, 64))], rng.randint(8, 192))
            for i in range(n)]


def measure_batching(requests: list[Request], repeat: int) -> dict:
    model = model_with_context(32)
    out: dict = {}
    for policy in ("static", "continuous"):
        best = None
        for k in range(repeat + 1):  # the first is a warm-up
            scheduler = Scheduler(model, pool_for(requests), TOKENS_PER_BLOCK, max_batch_size=8, policy=policy,
                                  clock=_common._clock)  # the requests' seconds on the benchmark's clock
            seconds = once(lambda s=scheduler: (s.submit(requests), s.run()))
            if k and (best is None or seconds < best[0]):
                best = (seconds, scheduler)
        seconds, scheduler = best
        done = list(scheduler.finished.values())
        out[policy] = {"steps": scheduler.history[-1].step + 1, "seconds": seconds,
                       "mean_steps_per_request": statistics.mean(f.steps for f in done),
                       "mean_seconds_per_request": statistics.mean(f.seconds for f in done),
                       "tokens_per_s": sum(len(f.tokens) for f in done) / seconds,
                       "timeline": [[f.request.arrival, f.admitted_step, f.finished_step] for f in done]}
    s, c = out["static"], out["continuous"]
    out["mean_steps_ratio"] = s["mean_steps_per_request"] / c["mean_steps_per_request"]
    out["mean_seconds_ratio"] = s["mean_seconds_per_request"] / c["mean_seconds_per_request"]
    out["tokens_per_s_ratio"] = c["tokens_per_s"] / s["tokens_per_s"]
    return out


def plot(results: dict):
    """Tokens/s one at a time vs batched; memory reserved, held and used; static vs continuous timelines."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(15, 3.8), gridspec_kw={"width_ratios": [1, 1, 1.3, 1.3]})
    rows = results["decoding"]
    x = range(len(rows))
    axes[0].bar([i - 0.2 for i in x], [r["tokens_per_s_sequential"] for r in rows], 0.4, label="one at a time")
    axes[0].bar([i + 0.2 for i in x], [r["tokens_per_s_batched"] for r in rows], 0.4, label="8 batched")
    axes[0].set_xticks(list(x), [f"context {r['context']}\n{r['speedup']:.2f}x" for r in rows])
    axes[0].set(ylabel="tokens per second", title="Greedy decoding of 8 requests")
    axes[0].legend(fontsize=8)
    mem = results["memory"]
    for i, m in enumerate(mem):
        for j, (key, colour, label) in enumerate((("contiguous_bytes", "#D55E00", "contiguous (reserved)"),
                                                  ("paged_bytes", "#0072B2", "paged (held)"),
                                                  ("used_bytes", "#009E73", "used"))):
            axes[1].bar(i + (j - 1) * 0.27, m[key] / m["contiguous_bytes"], 0.27, color=colour,
                        label=label if i == 0 else None)
    axes[1].set_xticks(range(len(mem)), [f"context {m['context']}\nblocks of {m['tokens_per_block']}" for m in mem])
    axes[1].set(ylabel="share of the contiguous reservation", title="Keys and values of 32 requests", ylim=(0, 1.3))
    axes[1].legend(fontsize=7, loc="upper center", ncol=3, handlelength=1, columnspacing=0.8)
    for ax, policy in zip(axes[2:], ("static", "continuous")):
        b = results["batching"][policy]
        for row, (arrival, admitted, finished) in enumerate(sorted(b["timeline"])):
            ax.barh(row, admitted - arrival, left=arrival, color="#56B4E9", alpha=0.35, height=0.8)
            ax.barh(row, finished - admitted + 1, left=admitted, color="#0072B2", height=0.8)
        ax.set(xlabel="step", ylabel="request", title=f"{policy}: mean {b['mean_steps_per_request']:.1f} steps "
                                                          "per request")
    ma = results["machine"]
    fig.suptitle(f"lesson 09's shape, random weights; torch {ma['torch']}, {ma['clock']} clock "
                 f"(load {ma['load_average_1min']})", fontsize=9)
    fig.tight_layout()
    return fig


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    setup(args)
    repeat = 2 if args.quick else 5
    results: dict = {"shape": SHAPE, "tokens_per_block": TOKENS_PER_BLOCK, "repeat": repeat, "quick": args.quick,
                     "batch_target": BATCH_TARGET, "machine": machine(), "decoding": []}
    for block_size, longest_prompt, new_tokens in DECODING:
        row = measure_decoding(block_size, longest_prompt, new_tokens, repeat)
        results["decoding"].append(row)
        print(f"context {block_size}: one at a time {row['tokens_per_s_sequential']:.0f} tokens/s, batched "
              f"{row['tokens_per_s_batched']:.0f} tokens/s ({row['speedup']:.2f}x), identical={row['identical']}",
              flush=True)
    requests = workload(random.Random(0), 32, 32)
    long = long_workload(random.Random(1), 32)
    results["memory"] = [memory(requests, 32, 4), memory(requests, 32, TOKENS_PER_BLOCK),
                         memory(long, 256, TOKENS_PER_BLOCK)]
    results["batching"] = b = measure_batching(requests, repeat)
    results["machine_after"] = machine()

    print()
    print(markdown_table(results["decoding"], COLUMNS))
    print("\nKeys and values of 32 requests, each at its longest (4,096 bytes per position):\n")
    print(markdown_table(results["memory"], MEMORY_COLUMNS))
    s, c = b["static"], b["continuous"]
    print(f"\n32 requests, at most 8 at once: static {s['steps']} steps, mean {s['mean_steps_per_request']:.2f} steps "
          f"and {1000 * s['mean_seconds_per_request']:.1f} ms per request, {s['tokens_per_s']:.0f} tokens/s; "
          f"continuous {c['steps']} steps, mean {c['mean_steps_per_request']:.2f} steps and "
          f"{1000 * c['mean_seconds_per_request']:.1f} ms per request, {c['tokens_per_s']:.0f} tokens/s")
    print(f"static / continuous mean time per request: {b['mean_steps_ratio']:.2f}x in steps, "
          f"{b['mean_seconds_ratio']:.2f}x in seconds; continuous / static tokens/s: {b['tokens_per_s_ratio']:.2f}x")
    ma, mb = results["machine"], results["machine_after"]
    print(f"\n{ma['clock']} clock; load average {ma['load_average_1min']} at the start, {mb['load_average_1min']} at "
          f"the end on {ma['cpu_count']} cores")
    target_row = results["decoding"][0]
    print(f"target batched >= {BATCH_TARGET:.0f}x one at a time (context 32): "
          f"{'met' if target_row['speedup'] >= BATCH_TARGET else 'NOT met'} ({target_row['speedup']:.2f}x)")
    waste_ok = all(m["paged_waste_max"] < m["tokens_per_block"] for m in results["memory"])
    print(f"target paged waste <= one block per sequence: {'met' if waste_ok else 'NOT met'} (at most "
          + ", ".join(f"{m['paged_waste_max']} of {m['tokens_per_block']}" for m in results["memory"])
          + " positions)")
    print(f"target continuous batching: lower mean time per request than static: "
          f"{'met' if b['mean_seconds_ratio'] > 1 else 'NOT met'} ({b['mean_seconds_ratio']:.2f}x in seconds)")
    if not all(r["identical"] for r in results["decoding"]):
        raise SystemExit("batched greedy tokens differ from generate's: the paged step is wrong")
    if not args.no_save:
        save("serving", results, plot(results))


if __name__ == "__main__":
    main()
