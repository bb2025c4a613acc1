"""Redraw time of the explorers, per control: the target is a median of at most 100 ms.

The attention explorer runs on 64 tokens with 4 heads (the issue's setting: a model with
n_embd=64, n_head=4, n_layer=2, block_size=64). Each control is moved through its values
for a few rounds; a redraw is everything a change costs: recomputing the view, updating
the figure and encoding the PNG that goes to the browser.

Prints, per control, the median wall-clock time, the median CPU time of this process
(less inflated than wall time when other jobs share the cores) and both as a ratio of
the 100 ms budget. Run:  python benchmarks/widgets_redraw.py [--rounds 3] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import matplotlib

matplotlib.use("Agg")

import torch  # noqa: E402

from gpt_lesson import GPT, CharTokenizer  # noqa: E402
from gpt_lesson.widgets import AttentionExplorer, MaskExplorer, ScalingExplorer  # noqa: E402

BUDGET_MS = 100.0
TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\nAll: Speak, speak. You are all resolved")
CHARS = sorted(set(TEXT + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,:;!?'\n-"))


def time_changes(widget, values, rounds: int) -> tuple[list[float], list[float]]:
    """Set ``widget.value`` to each value in turn, ``rounds`` times; wall and CPU seconds per change."""
    wall, cpu = [], []
    for _ in range(rounds):
        for v in values:
            w0, c0 = time.perf_counter(), time.process_time()
            widget.value = v
            wall.append(time.perf_counter() - w0)
            cpu.append(time.process_time() - c0)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="passes over each control's values")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args()

    torch.manual_seed(0)
    tok = CharTokenizer(CHARS)
    model = GPT(tok.vocab_size, 64, 4, 2, 64, dropout=0.0)
    text = TEXT[:64]
    att = AttentionExplorer(model, tok, text)
    assert att.view["T"] == 64 and att.view["matrix"].shape == (64, 64)

    cases = []  # (explorer, control, note, widget, values)
    cases.append(("attention", "head", "heads 0-3", att.head, [1, 2, 3, 0]))
    cases.append(("attention", "stage", "", att.stage, ["raw", "scaled", "masked", "weights"]))
    cases.append(("attention", "layer", "", att.layer, [1, 0]))
    cases.append(("attention", "head", "one head <-> all heads (two layouts, each built once)", att.head, ["all", 0]))
    cases.append(("attention", "query", "row + step-through", att.query, [10, 30, 50, 63]))
    cases.append(("attention", "key", "", att.key, [0, 5, 9, -1]))
    # Typing: every keystroke is new text (one forward pass, new token labels); the last
    # 64 characters stay in view, as when a learner edits the end of the text.
    edits = [text[:63] + c for c in "abcdefgh"]
    cases.append(("attention", "text", "a new character (model runs, new labels)", att.text, edits))
    mask = MaskExplorer(T=8)
    cases.append(("mask", "mask", "", mask.mask, ["none", "padding", "causal+padding", "causal"]))
    cases.append(("mask", "real tokens", "", mask.n_real, [3, 5, 6]))
    cases.append(("mask", "T", "a layout per T, built on first use", mask.T, [12, 16, 8]))
    scaling = ScalingExplorer(d_k=64)
    cases.append(("scaling", "d_k", "first pass samples new d_k", scaling.d_k, [128, 256, 512, 1024, 16, 64]))
    cases.append(("scaling", "scaling", "", scaling.scaling, ["none", "temperature", "sqrt"]))
    scaling.scaling.value = "temperature"
    cases.append(("scaling", "temperature", "", scaling.temperature, [0.5, 2.0, 5.0, 1.0]))

    load = os.getloadavg()[0]
    print(f"Explorer redraw per control change: median of {args.rounds} passes; budget {BUDGET_MS:.0f} ms.")
    print(f"Machine: {os.cpu_count()} cores, load average {load:.1f} at start "
          "(shared: wall times are inflated when the load exceeds the cores).")
    print(f"{'explorer':<10} {'control':<12} {'n':>3} {'wall ms':>8} {'ratio':>6} {'cpu ms':>7} {'ratio':>6}  note")
    results = []
    for explorer, control, note, widget, values in cases:
        wall, cpu = time_changes(widget, values, args.rounds)
        w, c = 1000 * statistics.median(wall), 1000 * statistics.median(cpu)
        results.append({"explorer": explorer, "control": control, "note": note, "n": len(wall),
                        "median_wall_ms": round(w, 1), "median_cpu_ms": round(c, 1),
                        "wall_ratio_to_budget": round(w / BUDGET_MS, 2), "cpu_ratio_to_budget": round(c / BUDGET_MS, 2)})
        print(f"{explorer:<10} {control:<12} {len(wall):>3} {w:>8.1f} {w / BUDGET_MS:>6.2f} {c:>7.1f} "
              f"{c / BUDGET_MS:>6.2f}  {note}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"budget_ms": BUDGET_MS, "tokens": 64, "n_head": 4, "load_average_start": load,
                       "cores": os.cpu_count(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
