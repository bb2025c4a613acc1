"""Timing and saving helpers shared by the benchmark scripts (not part of the package)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FIGURES = ROOT / "figures"


def parser(description: str) -> argparse.ArgumentParser:
    """The options every benchmark takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a CI-sized run: fewer sizes and repeats")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2, like CI)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall: time.perf_counter (default); cpu: the process's CPU time, for a shared machine "
                        "where other processes steal time slices (needs --threads 1, else threads waiting "
                        "for each other count too)")
    p.add_argument("--no-save", action="store_true", help="print the table only; write no JSON or PNG")
    return p


def setup(args: argparse.Namespace) -> None:
    """Apply --threads and --clock."""
    global _clock
    if args.clock == "cpu" and args.threads != 1:
        raise SystemExit(f"--clock cpu measures one thread's work; use it with --threads 1, not {args.threads}")
    torch.set_num_threads(args.threads)
    _clock = time.process_time if args.clock == "cpu" else time.perf_counter


_clock: Callable[[], float] = time.perf_counter


def best_seconds(fn: Callable[[], object], repeat: int, warmup: int = 1) -> float:
    """The shortest wall time of ``repeat`` calls after ``warmup`` calls.

    The minimum, not the mean or median: on a shared machine many calls are slowed by
    other processes, and the fastest call is the best estimate of what the code costs
    (the advice of Python's ``timeit`` documentation).
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = _clock()
        fn()
        times.append(_clock() - t0)
    return min(times)


def machine() -> dict:
    """What the numbers were measured on; the load average shows how shared the machine was."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "clock": "cpu (process time)" if _clock is time.process_time else "wall",
        "processor": platform.processor() or platform.machine(),
        "load_average_1min": round(load[0], 2),
        "measured_at_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }


def markdown_table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """Rows as a markdown table; ``columns`` are (key, header, format spec)."""
    lines = ["| " + " | ".join(h for _, h, _ in columns) + " |",
             "|" + "|".join("---:" for _ in columns) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(format(r[k], f) for k, _, f in columns) + " |")
    return "\n".join(lines)


def save(name: str, results: dict, figure) -> None:
    """Write ``benchmarks/results/NAME.json`` and ``figures/benchmark_NAME.png``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    FIGURES.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    figure.savefig(FIGURES / f"benchmark_{name}.png", dpi=110, bbox_inches="tight")
    print(f"saved benchmarks/results/{name}.json and figures/benchmark_{name}.png")
