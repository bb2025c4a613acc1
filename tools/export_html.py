"""Export a notebook to an HTML page whose explorers keep working offline, with no kernel.

    python -m tools.export_html notebooks/explorers.ipynb [--out build/html] [--no-execute]

The page is nbconvert's HTML with the notebook's widget state: each explorer's state holds its
browser module and the data of its current text, so its controls, hovers and clicks work in the
page (only editing the text needs Python). The notebooks in the repository are stored without
widget state (nbstripout drops it), so by default the notebook is first run in a fresh kernel
(nbclient keeps the state). The scripts the page needs, the Jupyter widget manager
(``@jupyter-widgets/html-manager``), require.js and anywidget's front end, come from the npm
registry at build time (``npm pack`` of pinned versions whose sha512 is checked) into
``<out>/vendor/``, as ``tools.slides`` does for reveal.js; nothing is loaded from a CDN. MathJax
and mermaid, which nbconvert's template loads from CDNs, are left out: formulas show as TeX.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat

from tools.slides import (
    _BADGE_RE,
    NotOfflineError,
    VendorError,
    _copy_from_tarball,
    _integrity,
    _npm_pack,
    remote_references,
)

__all__ = ["WIDGET_PACKAGES", "fetch_widget_vendor", "execute_with_widget_state", "export_html", "main"]

# npm packages the page loads: name -> (version, integrity as the registry states it).
# html-manager 1.0.x is the widget manager of ipywidgets 8; anywidget's front end must match the
# Python package (anywidget==0.11.0), since both speak the same widget protocol.
WIDGET_PACKAGES: dict[str, tuple[str, str]] = {
    "@jupyter-widgets/html-manager": (
        "1.0.15", "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA=="),
    "anywidget": (
        "0.11.0", "sha512-LHZgW2j5UjyerZSZcO+BtZPXGMSORQV2bUT480hOR5x/BXS8sOradi/71amJfMueSEnKX0dqPwTfsOGHTsyZpQ=="),
    "requirejs": (
        "2.3.7", "sha512-DouTG8T1WanGok6Qjg2SXuCMzszOo0eHeH9hDZ5Y4x8Je+9JB38HdTLT4/VA8OaUhBa0JPVHJ0pyBkM1z+pDsw=="),
}
_FONTS = [f"dist/{name}" for name in (
    "1551f4f60c37af51121f.woff2", "2285773e6b4b172f07d9.woff", "23f19bb08961f37aaf69.eot", "2f517e09eb2ca6650ff5.svg",
    "4689f52cc96215721344.svg", "491974d108fe4002b2aa.ttf", "527940b104eb2ea366c8.ttf", "77206a6bb316fa0aded5.eot",
    "7a3337626410ca2f4071.woff2", "7a8b4f130182d19a2d7c.svg", "9bbb245e67a133f6e486.eot", "bb58e57c48a3e911f15f.woff",
    "be9ee23c0c6390141475.ttf", "d878b0a6a1144760244f.woff2", "eeccf4f66002c6f2ba24.woff")]
_VENDOR_FILES: dict[str, list[str]] = {
    # embed-amd.js loads the widget fonts (Font Awesome) from its own folder
    "@jupyter-widgets/html-manager": ["package.json", "dist/embed-amd.js", *_FONTS],  # its licence: package.json
    "anywidget": ["LICENSE", "dist/index.js"],  # an AMD module: define(["@jupyter-widgets/base"], ...)
    "requirejs": ["require.js"],
}
_STAMP = "VERSIONS.json"

# Relative to the page.
_REQUIRE_URL = "vendor/requirejs/require.js"
_RENDERER_URL = "vendor/@jupyter-widgets/html-manager/dist/embed-amd.js"
_ANYWIDGET_PATH = "vendor/anywidget/dist/index"  # require.js adds .js

_TEMPLATE_NAME = "gpt_lesson_widgets"
_TEMPLATE_CONF = {"base_template": "lab", "mimetypes": {"text/html": True}}
# The lab template, with require.js told where anywidget's front end is (the widget manager asks
# require.js first and would fall back to a CDN), and without the CDN scripts (MathJax, mermaid).
_TEMPLATE_INDEX = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}
<script src="{{ resources.require_js_url }}"></script>
<script>requirejs.config({ paths: { "anywidget": "__ANYWIDGET__" } });</script>
{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
""".replace("__ANYWIDGET__", _ANYWIDGET_PATH)


def _tarball_name(name: str, version: str) -> str:
    return f"{name.replace('@', '').replace('/', '-')}-{version}.tgz"


def fetch_widget_vendor(vendor_dir: str | os.PathLike, timeout: float = 300.0) -> Path:
    """Put the pinned widget manager, anywidget and require.js into ``vendor_dir`` (reused when current)."""
    vendor = Path(vendor_dir)
    stamp = vendor / _STAMP
    pins = {name: version for name, (version, _) in WIDGET_PACKAGES.items()}
    if stamp.is_file() and json.loads(stamp.read_text()) == pins:
        return vendor
    with tempfile.TemporaryDirectory(prefix="gpt_lesson_npm_") as tmp:
        tmp_dir = Path(tmp)
        _npm_pack([f"{name}@{version}" for name, version in pins.items()], tmp_dir, timeout)
        staging = tmp_dir / "vendor"
        for name, (version, integrity) in WIDGET_PACKAGES.items():
            tarball = tmp_dir / _tarball_name(name, version)
            if not tarball.is_file():
                raise VendorError(f"npm pack did not write {tarball.name}")
            got = _integrity(tarball)
            if got != integrity:
                raise VendorError(f"{tarball.name} has integrity {got}, expected the pinned {integrity}")
            _copy_from_tarball(tarball, _VENDOR_FILES[name], staging / name)
        (staging / _STAMP).write_text(json.dumps(pins, indent=2) + "\n")
        if vendor.exists():
            shutil.rmtree(vendor)
        vendor.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging, vendor)
    return vendor


def execute_with_widget_state(path: Path, timeout: int = 900) -> nbformat.NotebookNode:
    """Run the notebook top to bottom in a fresh kernel (in its own folder); the result keeps the widget state."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    return nb


def export_html(notebook: str | os.PathLike, out_dir: str | os.PathLike, *, execute: bool = True,
                timeout: float = 300.0) -> Path:
    """Write ``out_dir/<notebook stem>.html`` and the ``vendor/`` folder it loads; returns the page's path."""
    from nbconvert import HTMLExporter  # slow to import

    path = Path(notebook)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fetch_widget_vendor(out / "vendor", timeout=timeout)
    nb = execute_with_widget_state(path) if execute else nbformat.read(path, as_version=4)
    if "application/vnd.jupyter.widget-state+json" not in nb.metadata.get("widgets", {}):
        raise ValueError(f"{path.name} holds no widget state: export it with execute=True (drop --no-execute)")
    for cell in nb.cells:  # the Colab and Binder badges are images from those sites: keep them as text links
        if cell.cell_type == "markdown":
            cell.source = _BADGE_RE.sub(r"[\1](\2)", cell.source)
    with tempfile.TemporaryDirectory(prefix="gpt_lesson_tpl_") as tmp:
        (Path(tmp) / _TEMPLATE_NAME).mkdir()
        (Path(tmp) / _TEMPLATE_NAME / "conf.json").write_text(json.dumps(_TEMPLATE_CONF))
        (Path(tmp) / _TEMPLATE_NAME / "index.html.j2").write_text(_TEMPLATE_INDEX)
        exporter = HTMLExporter(extra_template_basedirs=[tmp], template_name=_TEMPLATE_NAME,
                                require_js_url=_REQUIRE_URL, widget_renderer_url=_RENDERER_URL)
        page, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": path.stem, "path": str(path.parent)}})
    remote = remote_references(page)
    if remote:
        raise NotOfflineError(f"the page for {path.name} would load from the network: {remote}")
    dest = out / f"{path.stem}.html"
    dest.write_text(page, encoding="utf-8")
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.export_html", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("build") / "html", help="output folder (default build/html)")
    parser.add_argument("--no-execute", action="store_true",
                        help="use the widget state stored in the notebook instead of running it first")
    args = parser.parse_args(argv)
    for nb in args.notebooks:
        try:
            page = export_html(nb, args.out, execute=not args.no_execute)
        except (VendorError, NotOfflineError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"{page} ({page.stat().st_size / 1e3:.0f} kB; scripts in {args.out / 'vendor'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
