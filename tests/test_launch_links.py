"""Every notebook (lessons, welcome, explorers) opens in Colab and Binder from its own badges,
and its guarded install cell installs the course package in Colab and does nothing elsewhere.

Also checks what Binder builds from: ``binder/`` (requirements pointing at the pinned root
requirements, a postBuild that installs ``gpt_lesson``, the Python version).
"""
from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path
from urllib.parse import unquote

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("**/*.ipynb"))
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# The one setting every link is built from: owner/name on GitHub.
REPO = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+)", PROJECT["urls"]["Repository"])[1]
BADGE_RE = re.compile(r"\[!\[(?P<alt>[^\]]*)\]\((?P<img>[^)]+)\)\]\((?P<url>[^)]+)\)")
COLAB_RE = re.compile(r"https://colab\.research\.google\.com/github/(?P<repo>[\w.-]+/[\w.-]+)/blob/main/(?P<path>\S+)")
BINDER_RE = re.compile(r"https://mybinder\.org/v2/gh/(?P<repo>[\w.-]+/[\w.-]+)/main\?labpath=(?P<path>\S+)")
INSTALL_RE = re.compile(r'"(?P<name>[\w-]+) @ git\+https://github\.com/(?P<repo>[\w.-]+/[\w.-]+)"')


def _badges(nb) -> dict[str, dict]:
    found = {}
    for m in BADGE_RE.finditer(nb.cells[0].source):
        if "colab-badge.svg" in m["img"]:
            found["colab"] = m.groupdict()
        elif "mybinder.org/badge" in m["img"]:
            found["binder"] = m.groupdict()
    return found


def _install_cell(nb):
    cell = nb.cells[1] if len(nb.cells) > 1 else None
    assert cell is not None and cell.cell_type == "code" and "google.colab" in cell.source, \
        "the second cell must be the guarded Colab install cell"
    return cell


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_badges_open_this_notebook(path):
    nb = nbformat.read(path, as_version=4)
    badges = _badges(nb)
    assert set(badges) == {"colab", "binder"}, f"{path.name}: the first cell needs a Colab and a Binder badge"
    colab = COLAB_RE.fullmatch(badges["colab"]["url"])
    binder = BINDER_RE.fullmatch(badges["binder"]["url"])
    rel = path.relative_to(ROOT).as_posix()
    assert colab and colab["path"] == rel, badges["colab"]["url"]
    assert binder and unquote(binder["path"]) == rel, badges["binder"]["url"]
    install = INSTALL_RE.search(_install_cell(nb).source)
    assert install, f"{path.name}: the install cell must pip install 'NAME @ git+https://github.com/ORG/REPO'"
    # Colab, Binder and the install line all name the repository of pyproject's [project.urls].
    assert colab["repo"] == binder["repo"] == install["repo"] == REPO


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_install_cell_runs_only_in_colab(path, monkeypatch):
    cell = _install_cell(nbformat.read(path, as_version=4))
    assert cell.metadata.get("slideshow", {}).get("slide_type") == "skip", "keep the install cell out of the slides"
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append((a, k)))
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(compile(cell.source, f"{path.name}[1]", "exec"), {})
    assert calls == [], f"{path.name}: the install cell must do nothing outside Colab"
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    exec(compile(cell.source, f"{path.name}[1]", "exec"), {})
    assert len(calls) == 1, f"{path.name}: in Colab the install cell must run pip once"
    (args,), kwargs = calls[0]
    name = PROJECT["name"]
    assert args[:5] == [sys.executable, "-m", "pip", "install", "-q"] and kwargs == {"check": True}
    assert INSTALL_RE.fullmatch(f'"{args[5]}"')["name"] == name, "the install line must name this project"


def test_binder_builds_the_pinned_environment_and_installs_the_package():
    binder = ROOT / "binder"
    lines = [ln.strip() for ln in (binder / "requirements.txt").read_text().splitlines()]
    assert "-r ../requirements.txt" in lines  # the same pins as everywhere else
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines  # CPU torch, not CUDA
    pins = [ln for ln in (ROOT / "requirements.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert pins and all(re.fullmatch(r"[\w.-]+==[\w.+-]+", p) for p in pins), "pin every requirement exactly"
    post = binder / "postBuild"
    assert post.stat().st_mode & 0o111, "binder/postBuild must be executable"
    assert "pip install --no-cache-dir --no-deps -e ." in post.read_text()
    runtime = (binder / "runtime.txt").read_text().strip()
    version = re.fullmatch(r"python-3\.(\d+)", runtime)
    minimum = PROJECT["requires-python"]
    assert version and int(version[1]) >= int(re.search(r"3\.(\d+)", minimum)[1])
