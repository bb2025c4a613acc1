"""The explorers in a real browser: JupyterLab + headless Chromium (Debian's), driven by Playwright.

Recipe from shared/docs/jupyter-notes.md: a JupyterLab server on 127.0.0.1 (free port, token, temporary
config with the news pop-up off, the same Python as pytest), Chromium from /usr/bin/chromium with a fresh
profile. The test copies notebooks/explorers.ipynb into a temporary root, runs all cells, changes one
control of each explorer, checks that its picture's image data changes and that the console shows no
errors, saves screenshots into test-artifacts/browser/ and stops the server.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "explorers.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
EXPLORERS = {  # css class of the explorer -> the toggle button the test clicks
    "attention": ("gpt-lesson-attention-explorer", "QKᵀ raw"),
    "mask": ("gpt-lesson-mask-explorer", "none"),
    "scaling": ("gpt-lesson-scaling-explorer", "none"),
}

# The notebook's first cell shows the Colab and Binder badges, images from these hosts; offline they
# fail to load. Nothing else may be fetched from anywhere but the local server: no CDN.
BADGE_HOSTS = {"colab.research.google.com", "mybinder.org"}

pytestmark = pytest.mark.browser

# The kernel is idle and every code cell of the open notebook has run.
ALL_CELLS_RUN = """() => {
  const nb = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const kernel = nb && nb.sessionContext && nb.sessionContext.session && nb.sessionContext.session.kernel;
  if (!kernel || kernel.status !== 'idle') return false;
  const cells = nb.content.widgets.filter(c => c.model.type === 'code');
  return cells.length > 0 && cells.every(c => c.model.executionCount !== null);
}"""
KERNEL_IDLE = """() => {
  const nb = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = nb && nb.sessionContext && nb.sessionContext.session && nb.sessionContext.session.kernel;
  return !!k && k.status === 'idle';
}"""
# SHA-256 of the bytes behind an explorer's <img> (the PNG the kernel sent), or null before it exists.
IMAGE_DIGEST = """async (cls) => {
  const img = document.querySelector('.' + cls + ' img.widget-image');
  if (!img || !img.src) return null;
  const bytes = await (await fetch(img.src)).arrayBuffer();
  const hash = await crypto.subtle.digest('SHA-256', bytes);
  return Array.from(new Uint8Array(hash)).map(b => b.toString(16).padStart(2, '0')).join('');
}"""


def _console(message, errors: list[str]) -> None:
    """Keep console errors, except a badge image that cannot load offline."""
    if message.type != "error":
        return
    url = (message.location or {}).get("url", "")
    if message.text.startswith("Failed to load resource") and urlsplit(url).hostname in BADGE_HOSTS:
        return
    errors.append(f"console: {message.text} ({url})")


def _note_host(url: str, hosts: set[str]) -> None:
    parts = urlsplit(url)
    if parts.scheme in ("http", "https", "ws", "wss"):  # not blob: or data: URLs made in the page
        hosts.add(parts.hostname or "")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chromium_or_skip() -> None:
    if CHROMIUM.exists():
        return
    message = f"{CHROMIUM} not found: the browser test needs Debian's chromium (apt-get install chromium)"
    if os.environ.get("GPT_LESSON_REQUIRE_BROWSER") == "1":
        pytest.fail(message + "; GPT_LESSON_REQUIRE_BROWSER=1 makes it required")
    pytest.skip(message)


def _start_jupyterlab(root: Path, tmp: Path, data_path: Path) -> tuple[subprocess.Popen, str, str]:
    config = tmp / "jupyter-config"
    settings = config / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port, token = _free_port(), os.urandom(16).hex()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "GPT_LESSON_DATA": str(data_path)}
    log = open(tmp / "jupyterlab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         "--ServerApp.port_retries=0", "--allow-root", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
         "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                if r.status == 200:
                    return proc, url, token
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"JupyterLab did not start; see {tmp / 'jupyterlab.log'}:\n"
                               + (tmp / "jupyterlab.log").read_text()[-3000:])
        time.sleep(0.5)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _wait_for_new_picture(page, cls: str, old: str | None, timeout: float = 120.0) -> str:
    """Wait until the explorer's image differs from ``old`` and stays the same for about 1 s."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        digest = page.evaluate(IMAGE_DIGEST, cls)
        if digest != last:
            last, since = digest, time.monotonic()
        elif digest is not None and digest != old and time.monotonic() - since >= 1.0 \
                and page.evaluate(KERNEL_IDLE):
            return digest
        time.sleep(0.25)
    raise AssertionError(f"the picture of .{cls} did not change within {timeout:.0f} s (still {last})")


def test_explorers_in_jupyterlab(tmp_path, shakespeare_path):
    _chromium_or_skip()
    from playwright.sync_api import sync_playwright

    started = time.monotonic()
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)  # the repository's notebook is never modified
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    hosts: set[str] = set()
    proc, url, token = _start_jupyterlab(root, tmp_path, shakespeare_path)
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                str(tmp_path / "profile"), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS,
                viewport={"width": 1400, "height": 1000})
            try:
                page = context.new_page()
                page.on("console", lambda m: _console(m, errors))
                page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
                page.on("request", lambda r: _note_host(r.url, hosts))
                page.goto(f"{url}/lab/tree/{NOTEBOOK.name}?token={token}&reset", timeout=120_000)
                page.wait_for_selector(".jp-Notebook", timeout=120_000)
                page.wait_for_function(KERNEL_IDLE, timeout=120_000)

                page.locator(".lm-MenuBar-item", has_text="Run").first.click()
                page.locator(".lm-Menu-item", has_text="Run All Cells").first.click()
                page.wait_for_function(ALL_CELLS_RUN, timeout=600_000, polling=500)
                assert not page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
                                        ).count(), "a cell wrote to stderr"
                assert not page.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.error']"
                                        ).count(), "a cell raised an error"
                before = {}
                for name, (cls, _) in EXPLORERS.items():
                    before[name] = _wait_for_new_picture(page, cls, None)
                page.screenshot(path=str(ARTIFACTS / "explorers_after_run_all.png"))

                for name, (cls, button) in EXPLORERS.items():
                    explorer = page.locator(f".{cls}")
                    explorer.locator(".widget-toggle-button", has_text=button).first.click()
                    after = _wait_for_new_picture(page, cls, before[name])
                    assert after != before[name], name
                    explorer.screenshot(path=str(ARTIFACTS / f"{name}_explorer_changed.png"))

                # Typing in the attention explorer's text box recomputes the tokens live.
                cls = EXPLORERS["attention"][0]
                old = page.evaluate(IMAGE_DIGEST, cls)
                page.locator(f".{cls} input[type='text']").fill("To be, or not to be")
                _wait_for_new_picture(page, cls, old)
                page.locator(f".{cls}").screenshot(path=str(ARTIFACTS / "attention_explorer_typed.png"))
            finally:
                context.close()
    finally:
        _stop(proc)
    assert proc.returncode is not None
    assert not errors, "browser console errors:\n" + "\n".join(errors)
    assert hosts - {"127.0.0.1"} <= BADGE_HOSTS, f"requests left the machine: {sorted(hosts)}"
    print(f"browser test took {time.monotonic() - started:.1f} s")


def test_missing_chromium_skips_or_fails_when_required(monkeypatch, tmp_path):
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.delenv("GPT_LESSON_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        _chromium_or_skip()
    monkeypatch.setenv("GPT_LESSON_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        _chromium_or_skip()
