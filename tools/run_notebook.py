"""Re-execute notebooks top to bottom in a fresh kernel and store their outputs.

    python tools/run_notebook.py notebooks/02_attention.ipynb [more.ipynb ...]

Each notebook runs in its own folder (as nbval runs it), with ``GPT_LESSON_DATA`` (and ``GPT_LESSON_GPT2``) pointing at the
shared copy of Tiny Shakespeare when one is next to the project. The stored notebook keeps its cell
ids and drops the volatile per-run metadata (execution timestamps), so a re-run changes only the
outputs that really changed.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
SHARED_GPT2 = ROOT.parent / "shared" / "data" / "gpt2"  # GPT-2's tokenizer files (lesson 13)
VOLATILE_CELL_METADATA = ("execution", "collapsed", "scrolled")


def strip_volatile(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop per-run metadata that would make every re-run a large diff."""
    for cell in nb.cells:
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
    return nb


def run(path: Path, timeout: int = 900) -> float:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nbformat.write(strip_volatile(nb), path)
    normalise(path)
    return seconds


def normalise(path: Path) -> None:
    """The same normaliser as the pre-commit hook: nbstripout, keeping outputs, counts and cell ids."""
    nbstripout = Path(sys.executable).parent / "nbstripout"
    if nbstripout.exists():
        subprocess.run([str(nbstripout), "--keep-output", "--keep-count", "--keep-id", str(path)], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell (default 900)")
    args = parser.parse_args(argv)
    if "GPT_LESSON_DATA" not in os.environ and SHARED_DATA.is_file():
        os.environ["GPT_LESSON_DATA"] = str(SHARED_DATA)
    if "GPT_LESSON_GPT2" not in os.environ and (SHARED_GPT2 / "vocab.bpe").is_file():
        os.environ["GPT_LESSON_GPT2"] = str(SHARED_GPT2)
    os.environ.pop("MPLBACKEND", None)  # kernels must draw inline plots
    for path in args.notebooks:
        seconds = run(path.resolve(), args.timeout)
        print(f"{path}: executed and stored in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
