"""Shared fixtures. Tests never download: the loader is pointed at a local copy of Tiny Shakespeare."""
from __future__ import annotations

import os
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
if not os.environ.get("GPT_LESSON_DATA") and SHARED_DATA.is_file():
    # Lessons and tests (and the notebook kernels nbval starts, which inherit this) read the shared copy.
    os.environ["GPT_LESSON_DATA"] = str(SHARED_DATA)
SHARED_GPT2 = ROOT.parent / "shared" / "data" / "gpt2"
if not os.environ.get("GPT_LESSON_GPT2") and (SHARED_GPT2 / "vocab.bpe").is_file():
    os.environ["GPT_LESSON_GPT2"] = str(SHARED_GPT2)  # GPT-2's tokenizer files, for lesson 13 and its tests


@pytest.fixture(autouse=True)
def _no_downloads(monkeypatch):
    """Tests never download: any URL that is not on this machine fails like a machine with no network."""
    import urllib.error
    import urllib.request
    from urllib.parse import urlparse

    real_urlopen = urllib.request.urlopen

    def local_only(url, *args, **kwargs):
        target = url.full_url if isinstance(url, urllib.request.Request) else str(url)
        parts = urlparse(target)
        if parts.scheme in ("http", "https", "ftp") and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise urllib.error.URLError(f"tests never download ({target} is not on this machine)")
        return real_urlopen(url, *args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", local_only)


def local_shakespeare() -> Path | None:
    """$GPT_LESSON_DATA if set, else the shared copy next to the project, else None."""
    env = os.environ.get("GPT_LESSON_DATA")
    if env:
        return Path(env)
    return SHARED_DATA if SHARED_DATA.is_file() else None


@pytest.fixture(scope="session")
def shakespeare_path() -> Path:
    path = local_shakespeare()
    if path is None or not path.is_file():
        pytest.skip("no local copy of Tiny Shakespeare: set GPT_LESSON_DATA=/path/to/tinyshakespeare.txt "
                    "(the tests never download)")
    return path


@pytest.fixture(scope="session")
def shakespeare_text(shakespeare_path: Path) -> str:
    from gpt_lesson.data import load_tiny_shakespeare

    return load_tiny_shakespeare(shakespeare_path)
