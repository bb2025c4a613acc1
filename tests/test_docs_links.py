"""Every relative link and image in the READMEs and docs/ points at a file of the repository
(a renamed notebook or a lesson listed before it exists shows up here, not in a learner's browser)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "README.zh-CN.md", ROOT / "benchmarks" / "README.md",
        *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def relative_links(text: str) -> list[str]:
    links = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same page
        links.append(target.split("#", 1)[0])
    return links


def test_relative_links_skip_urls_and_anchors():
    text = "[a](notebooks/x.ipynb) ![b](figures/y.png) [c](https://example.org/z) [d](#section) [e](docs/t.md#part)"
    assert relative_links(text) == ["notebooks/x.ipynb", "figures/y.png", "docs/t.md"]


@pytest.mark.parametrize("doc", [d for d in DOCS if d.exists()], ids=lambda d: str(d.relative_to(ROOT)))
def test_every_relative_link_resolves(doc):
    missing = [t for t in relative_links(doc.read_text(encoding="utf-8")) if not (doc.parent / t).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} links to files that do not exist: {missing}"
