"""Repository hygiene, as the pre-commit hooks (.pre-commit-config.yaml) enforce it: ruff finds no
error, and no committed notebook carries volatile metadata (execution timestamps and the like)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(ROOT.glob("notebooks/**/*.ipynb"))
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed (it is in requirements.txt)")
    return found


def test_ruff_finds_no_errors():
    out = subprocess.run([_tool("ruff"), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]


def test_notebooks_have_no_volatile_metadata():
    stamped = [f"{p.relative_to(ROOT)} cell {i}" for p in NOTEBOOKS
               for i, c in enumerate(json.loads(p.read_text(encoding="utf-8"))["cells"])
               if "execution" in c.get("metadata", {})]
    out = subprocess.run([_tool("nbstripout"), "--verify", "--keep-output", "--keep-count", "--keep-id",
                          *map(str, NOTEBOOKS)], cwd=ROOT, capture_output=True, text=True)
    fix = "run `nbstripout --keep-output --keep-count --keep-id notebooks/*.ipynb` (or `pre-commit run --all-files`)"
    assert not stamped, "execution timestamps in " + ", ".join(stamped[:5]) + f": {fix}"
    assert out.returncode == 0, f"nbstripout would change notebooks (volatile metadata): {fix}\n{out.stdout}"
