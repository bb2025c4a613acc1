"""Byte-level BPE on Tiny Shakespeare: training to 1,000 tokens, and encoding with GPT-2's vocabulary.

Training (the lesson's tokenizer, GPT-2's pre-split, ``<|endoftext|>`` as its special token), one run each:

* ``gpt_lesson.bpe.train``: pair counts updated incrementally as merges happen (issue 24's target: <= 15 s);
* ``gpt_lesson.bpe.train_by_recounting``: every pair recounted after every merge (the same merges, checked);
* the reference library, Hugging Face ``tokenizers`` (Rust): ``ByteLevelBPETokenizer().train_from_iterator``.

Encoding the whole text with GPT-2's 50,257 tokens, in MB/s (the fastest of ``--repeat`` runs): the course's
encoder with an empty chunk cache (a new tokenizer each run) and with a warm one, ``tokenizers`` and
``tiktoken`` (both Rust, both built from the same two files); the ids of all four must be identical.
The target: the course's encoder within 20x of the Rust reference.

    python benchmarks/bpe.py              # full run (the recounting trainer takes minutes)
    python benchmarks/bpe.py --quick      # the recounting trainer stops after 50 merges, timed per merge

GPT-2's files come from ``$GPT_LESSON_GPT2`` (or ``../shared/data/gpt2`` beside the repository), Tiny
Shakespeare from ``$GPT_LESSON_DATA`` or the course cache.
"""
from __future__ import annotations

import os

import _common
import tiktoken
from _common import ROOT, machine, markdown_table, parser, save, setup
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tokenizers import ByteLevelBPETokenizer

from gpt_lesson import bpe
from gpt_lesson.data import load_tiny_shakespeare

VOCAB_SIZE = 1000
QUICK_MERGES = 50


def _seconds(fn):
    """(seconds, result) of one call, on the clock --clock chose (wall, or the process's CPU time)."""
    t0 = _common._clock()
    out = fn()
    return _common._clock() - t0, out


def training(text: str, quick: bool) -> list[dict]:
    n_merges = VOCAB_SIZE - 257
    t_inc, tok = _seconds(lambda: bpe.train(text, VOCAB_SIZE))
    rows = [{"trainer": "gpt_lesson.bpe.train (incremental)", "merges": n_merges, "seconds": t_inc}]
    if quick:  # the first merges cost the most (the most pairs): per merge, this overestimates the whole run
        t, slow = _seconds(lambda: bpe.train_by_recounting(text, 257 + QUICK_MERGES))
        assert list(slow.merges) == list(tok.merges)[:QUICK_MERGES], "the two trainers disagree"
        rows.append({"trainer": f"train_by_recounting ({QUICK_MERGES} merges, scaled)", "merges": QUICK_MERGES,
                     "seconds": t * n_merges / QUICK_MERGES})
    else:
        t, slow = _seconds(lambda: bpe.train_by_recounting(text, VOCAB_SIZE))
        assert list(slow.merges) == list(tok.merges), "the two trainers disagree"
        rows.append({"trainer": "gpt_lesson.bpe.train_by_recounting", "merges": n_merges, "seconds": t})
    ref = ByteLevelBPETokenizer()
    t, _ = _seconds(lambda: ref.train_from_iterator([text], vocab_size=VOCAB_SIZE, min_frequency=1,
                                                    special_tokens=[bpe.ENDOFTEXT], show_progress=False))
    rows.append({"trainer": "tokenizers (Rust) train_from_iterator", "merges": n_merges, "seconds": t})
    for r in rows:
        r["vs_incremental"] = r["seconds"] / t_inc
    return rows


def encoding(text: str, folder: str, repeat: int) -> list[dict]:
    files = bpe.gpt2_files(folder)
    ours = bpe.gpt2_tokenizer(folder)
    hf = ByteLevelBPETokenizer(str(files["encoder.json"]), str(files["vocab.bpe"]))
    hf.add_special_tokens([bpe.ENDOFTEXT])
    ranks = data_gym_to_mergeable_bpe_ranks(str(files["vocab.bpe"]), str(files["encoder.json"]))
    tk = tiktoken.Encoding("gpt2-local", pat_str=bpe.GPT2_SPLIT_PATTERN, mergeable_ranks=ranks,
                           special_tokens={bpe.ENDOFTEXT: 50256})

    def cold():
        fresh = bpe.load_gpt2_files(files["encoder.json"], files["vocab.bpe"])
        return _seconds(lambda: fresh.encode(text))

    coders = {
        "gpt_lesson.bpe, empty chunk cache": cold,
        "gpt_lesson.bpe, warm chunk cache": lambda: _seconds(lambda: ours.encode(text)),
        "tokenizers (Rust)": lambda: _seconds(lambda: hf.encode(text).ids),
        "tiktoken (Rust)": lambda: _seconds(lambda: tk.encode(text, allowed_special="all")),
    }
    ours.encode(text)  # warm the cache the "warm" row uses
    megabytes = len(text.encode("utf-8")) / 1e6
    rows, reference = [], None
    for name, run in coders.items():
        runs = [run() for _ in range(repeat)]
        ids = runs[0][1]
        reference = reference or ids
        seconds = min(s for s, _ in runs)
        rows.append({"encoder": name, "seconds": seconds, "mb_per_s": megabytes / seconds, "tokens": len(ids),
                     "same_ids": ids == reference})
    rust = next(r["mb_per_s"] for r in rows if r["encoder"] == "tokenizers (Rust)")
    fastest = max(r["mb_per_s"] for r in rows)
    for r in rows:
        r["x_slower_than_tokenizers"] = rust / r["mb_per_s"]
        r["x_slower_than_fastest"] = fastest / r["mb_per_s"]
    return rows


def plot(results: dict):
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
    train_rows, enc_rows = results["training"], results["encoding"]
    a.barh([r["trainer"] for r in train_rows], [r["seconds"] for r in train_rows], color="#4c72b0")
    a.set_xscale("log")
    a.set_xlabel("seconds (log scale)")
    a.set_title(f"train BPE to {VOCAB_SIZE} tokens on Tiny Shakespeare")
    b.barh([r["encoder"] for r in enc_rows], [r["mb_per_s"] for r in enc_rows], color="#55a868")
    b.set_xlabel("MB/s")
    b.set_title("encode Tiny Shakespeare with GPT-2's 50,257 tokens")
    fig.tight_layout()
    return fig


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3, help="encoding runs per encoder (the fastest counts)")
    args = p.parse_args()
    setup(args)
    folder = os.environ.get(bpe.GPT2_ENV) or str(ROOT.parent / "shared" / "data" / "gpt2")
    text = load_tiny_shakespeare()
    info = machine()
    results = {"machine": info, "training": training(text, args.quick),
               "encoding": encoding(text, folder, 1 if args.quick else args.repeat)}
    results["machine"]["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    print(f"{info['measured_at_utc']} UTC, load average {info['load_average_1min']} at the start, "
          f"{results['machine']['load_average_1min_end']} at the end, {info['cpu_count']} cores\n")
    print(markdown_table(results["training"], [("trainer", "trainer", "s"), ("merges", "merges", "d"),
                                               ("seconds", "seconds", ".2f"), ("vs_incremental", "x incremental", ".1f")]))
    print()
    print(markdown_table(results["encoding"], [("encoder", "encoder", "s"), ("mb_per_s", "MB/s", ".2f"),
                                               ("tokens", "tokens", ",d"), ("same_ids", "same ids", ""),
                                               ("x_slower_than_tokenizers", "x slower than tokenizers", ".2f"),
                                               ("x_slower_than_fastest", "x slower than the fastest", ".2f")]))
    assert all(r["same_ids"] for r in results["encoding"]), "the encoders disagree"
    if not args.no_save:
        save("bpe", results, plot(results))


if __name__ == "__main__":
    main()
