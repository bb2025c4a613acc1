"""JupyterLab in headless Chromium, for the browser tests and the explorer benchmark.

The recipe of shared/docs/jupyter-notes.md: a JupyterLab server on 127.0.0.1 (free port, token,
a temporary config with the news pop-up off, the same Python as the caller), Debian's Chromium
driven by Python Playwright with a fresh profile (never ``playwright install``).

    with jupyterlab(root, tmp) as lab, chromium(tmp / "profile", (1400, 900)) as context:
        page = context.new_page()
        open_notebook(page, lab, "explorers.ipynb")
        run_all(page)
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]

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


@dataclass
class Lab:
    url: str
    token: str
    process: subprocess.Popen
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def jupyterlab(root: Path, tmp: Path, env: dict | None = None, timeout: float = 120.0) -> Iterator[Lab]:
    """A JupyterLab server serving ``root``; stopped (with its kernels) on exit."""
    config = tmp / "jupyter-config"
    settings = config / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port, token = free_port(), os.urandom(16).hex()
    log_path = tmp / "jupyterlab.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         "--ServerApp.port_retries=0", "--allow-root", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
         "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        env={**os.environ, "JUPYTER_CONFIG_DIR": str(config), **(env or {})}, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"JupyterLab did not start; see {log_path}:\n" + log_path.read_text()[-3000:])
            time.sleep(0.5)
        yield Lab(url, token, proc, log_path)
    finally:
        stop(proc)
        log.close()


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def chromium(profile: Path, viewport: tuple[int, int] = (1400, 900), device_scale_factor: float = 1.0):
    """A Playwright browser context of Debian's Chromium with a fresh profile."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": viewport[0], "height": viewport[1]}, device_scale_factor=device_scale_factor)
        try:
            yield context
        finally:
            context.close()


def open_notebook(page, lab: Lab, name: str, timeout_ms: int = 120_000) -> None:
    page.goto(f"{lab.url}/lab/tree/{name}?token={lab.token}&reset", timeout=timeout_ms)
    page.wait_for_selector(".jp-Notebook", timeout=timeout_ms)
    page.wait_for_function(KERNEL_IDLE, timeout=timeout_ms)


def run_all(page, timeout_ms: int = 600_000) -> None:
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    page.locator(".lm-Menu-item", has_text="Run All Cells").first.click()
    page.wait_for_function(ALL_CELLS_RUN, timeout=timeout_ms, polling=500)


def kernel_output(page, code: str) -> str:
    """Run ``code`` in the open notebook's kernel (as a cell would, without a cell) and return what it printed."""
    return page.evaluate("""async (code) => {
      const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
      let out = "";
      const future = k.requestExecute({ code, silent: false, store_history: false });
      future.onIOPub = (msg) => {
        if (msg.header.msg_type === "stream") out += msg.content.text;
        if (msg.header.msg_type === "error") out += "ERROR " + msg.content.ename + ": " + msg.content.evalue;
      };
      await future.done;
      return out;
    }""", code)


# Latency probe, installed in a page once: it keeps the time of the last input event (its
# timeStamp: when the browser received it) and, for every picture an explorer paints, the time
# at which the frame showing it was produced (the next animation frame after the paint, plus one
# task). New explorers count their paints in data-paints (core.mjs: painted); the matplotlib
# explorers of the baseline paint a new <img> src, counted once the image is decoded.
PROBE = """() => {
  if (window.__probe) return;
  const probe = window.__probe = { event: null, paints: [] };
  for (const type of ["click", "keydown", "input", "mousemove", "mousedown"]) {
    document.addEventListener(type, (e) => { probe.event = { type, t: e.timeStamp }; }, true);
  }
  const frame = () => new Promise((r) => requestAnimationFrame(() => {
    const c = new MessageChannel(); c.port1.onmessage = r; c.port2.postMessage(0);
  }));
  const record = async (root, kind) => {
    const n = probe.paints.length;
    probe.paints.push(null);
    await frame();
    probe.paints[n] = { t: performance.now(), kind, root: root.dataset.explorer || root.className };
  };
  new MutationObserver((list) => {
    for (const m of list) {
      const el = m.target;
      if (m.attributeName === "data-paints") record(el, "new");
      else if (m.attributeName === "src" && el.tagName === "IMG") el.decode().then(() => record(el, "png"), () => {});
    }
  }).observe(document.body, { attributes: true, subtree: true, attributeFilter: ["data-paints", "src"] });
}"""

# How many paints the probe has seen (finished or not).
PAINT_COUNT = "() => window.__probe.paints.length"
# (latency ms from the last input event to the first finished paint after it, or null)
LATENCY_SINCE = """(n) => {
  const p = window.__probe, e = p.event;
  const done = p.paints.slice(n).filter((x) => x && x.t > e.t); // (a hover before a click paints too)
  if (!e || !done.length) return null;
  return done[0].t - e.t;
}"""
