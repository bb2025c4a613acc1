"""Shared fixtures. Tests never download: the loader is pointed at a local copy of Tiny Shakespeare."""
from __future__ import annotations

import os
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"


def local_shakespeare() -> Path | None:
    """$GPT_LESSON_DATA if set, else the shared copy next to the project, else None."""
    env = os.environ.get("GPT_LESSON_DATA")
    if env:
        return Path(env)
    return SHARED_DATA if SHARED_DATA.is_file() else None


@pytest.fixture(scope="session")
def shakespeare_path() -> Path:
    path = local_shakespeare()
    if path is not None and path.is_file():
        return path
    # A learner's machine without the shared copy: fetch it once into the cache (checked by sha256).
    from gpt_lesson.data import TINY_SHAKESPEARE_FILE, cache_dir, load_tiny_shakespeare

    try:
        load_tiny_shakespeare()
    except FileNotFoundError as e:
        pytest.skip(f"no Tiny Shakespeare available: {e}")
    return cache_dir() / TINY_SHAKESPEARE_FILE


@pytest.fixture(scope="session")
def shakespeare_text(shakespeare_path: Path) -> str:
    from gpt_lesson.data import load_tiny_shakespeare

    return load_tiny_shakespeare(shakespeare_path)
