"""The explorers in a real browser: input event -> painted frame, new (anywidget) vs today's (matplotlib PNG).

Runs JupyterLab and headless Chromium (tools/jupyter_browser.py), opens two notebooks with the
three explorers at the issue's setting (an untrained model with n_embd=64, n_head=4, n_layer=2,
64 tokens; the mask explorer at T=8; the scaling explorer at d_k=64): one with the explorers of
this package, one with the matplotlib explorers of commit BASELINE (loaded from git as
``gpt_lesson.baseline_widgets``). For each control it sends real input through Playwright (clicks,
key presses on a focused slider, mouse moves, typing) and measures, in the page, the time from the
input event to the frame that shows the new picture (tools/jupyter_browser.py: PROBE). Dragging is
a slider stepped by key presses every ~16 ms for about 1.5 s: pictures per second during the drag,
and how long the last picture trails the last key press.

    python benchmarks/explorers.py [--rounds 5] [--json benchmarks/results/explorers.json]

Prints medians and maxima per control, old and new, and their ratio (old / new). The machine is
shared: the load average is printed at the start and the end.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402

from tools.jupyter_browser import LATENCY_SINCE, PAINT_COUNT, PROBE, chromium, jupyterlab, open_notebook, run_all  # noqa: E402

BASELINE = "9fc250f"  # the last commit with the matplotlib (PNG) explorers
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll: Speak, speak. You are"[:64]
SETUP = """import torch
from gpt_lesson import GPT, CharTokenizer
from gpt_lesson.data import load_tiny_shakespeare
tokenizer = CharTokenizer(load_tiny_shakespeare())
torch.manual_seed(0)
model = GPT(tokenizer.vocab_size, n_embd=64, n_head=4, n_layer=2, block_size=64)
TEXT = {text!r}
assert len(tokenizer.encode(TEXT)) == 64
"""
BASELINE_IMPORT = """import importlib.util, sys
spec = importlib.util.spec_from_file_location("gpt_lesson.baseline_widgets", {init!r},
                                              submodule_search_locations=[{folder!r}])
widgets = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = widgets
spec.loader.exec_module(widgets)
"""
EXPLORERS = """attention = widgets.AttentionExplorer(model, tokenizer, TEXT)
mask = widgets.MaskExplorer(T=8)
scaling = widgets.ScalingExplorer(d_k=64)
"""
# The new side shows its attention explorer behind a model switch, with a second model (other weights),
# as notebooks/explorers.ipynb does with the trained and untrained models.
SWITCH = """torch.manual_seed(1)
other = widgets.AttentionExplorer(GPT(model.config), tokenizer, TEXT)
switch = widgets.ModelSwitch({"model": attention, "other weights": other})
"""
# The attention explorer on screen (the switch keeps the other one in the page, hidden).
SHOWN = "[data-explorer=attention]:not([data-shown=false] *)"


def notebook(path: Path, cells: list[str]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, path)


def baseline_package(dest: Path) -> Path:
    """Today's widgets package, as of commit BASELINE, written to ``dest``."""
    dest.mkdir(parents=True)
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{BASELINE}:gpt_lesson/widgets"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in names:
        if name.endswith(".py"):
            source = subprocess.run(["git", "show", f"{BASELINE}:gpt_lesson/widgets/{name}"], cwd=ROOT,
                                    capture_output=True, text=True, check=True).stdout
            (dest / name).write_text(source)
    return dest


def measure(page, action, timeout: float = 60.0) -> float:
    n = page.evaluate(PAINT_COUNT)
    action()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ms = page.evaluate(LATENCY_SINCE, n)
        if ms is not None:
            return ms
        time.sleep(0.005)
    raise RuntimeError("nothing was painted")


def settle(page, seconds: float = 1.0) -> None:
    """Wait until no picture has been painted for ``seconds`` (stragglers of the last change)."""
    last, since = page.evaluate(PAINT_COUNT), time.monotonic()
    while time.monotonic() - since < seconds:
        time.sleep(0.05)
        now = page.evaluate(PAINT_COUNT)
        if now != last:
            last, since = now, time.monotonic()


# One step of a new explorer's slider as the browser reports a drag: the value changes and an input event
# fires. (In JupyterLab under Playwright, arrow keys did not reach a focused range input of an output.)
STEP_RANGE = """([selector, delta]) => {
  const input = document.querySelector(selector);
  const v = Math.min(Number(input.max), Math.max(Number(input.min), Number(input.value) + delta));
  input.value = v;
  input.dispatchEvent(new Event("input", { bubbles: true }));
}"""


def step(page, selector: str, new: bool, forward: bool) -> None:
    if new:
        page.evaluate(STEP_RANGE, [selector, 1 if forward else -1])
    else:
        page.keyboard.press("ArrowRight" if forward else "ArrowLeft")


def drag(page, selector: str, stops: int, new: bool, seconds: float = 1.5) -> tuple[float, float]:
    """Step a slider back and forth every ~16 ms; (pictures per second, ms the last one trails)."""
    page.locator(selector).first.focus()
    for _ in range(stops):
        step(page, selector, new, False)
    settle(page)
    n0 = page.evaluate(PAINT_COUNT)
    keys, t0 = 0, time.monotonic()
    forward = True
    while time.monotonic() - t0 < seconds:
        step(page, selector, new, forward)
        keys += 1
        if keys % (stops - 1) == 0:
            forward = not forward
        time.sleep(0.016)
    t_release = page.evaluate("() => window.__probe.event.t")
    t_end = time.monotonic()
    settle(page, 2.0)
    paints = [p for p in page.evaluate("(n) => window.__probe.paints.slice(n)", n0) if p]
    during = [p for p in paints if p["t"] <= t_release + 1]
    fps = len(during) / (t_end - t0)
    trail = max(0.0, max(p["t"] for p in paints) - t_release) if paints else float("nan")
    return fps, trail


def run_side(page, lab, name: str, new: bool, rounds: int) -> dict:
    open_notebook(page, lab, name)
    run_all(page)
    page.wait_for_timeout(3000)
    page.evaluate(PROBE)
    settle(page, 1.5)
    res: dict[str, list[float]] = {}

    def timed(control, action):
        try:
            res.setdefault(control, []).append(measure(page, action, 15.0 if new else 30.0))
        except RuntimeError:  # no new picture (counted as missed in the table)
            res.setdefault(control, []).append(float("nan"))
        settle(page, 0.3 if new else 1.0)

    if new:
        att, mk, sc = SHOWN, "[data-explorer=mask]", "[data-explorer=scaling]"
        btn = lambda root, ctl, v: page.locator(f"{root} [data-control={ctl}] [data-value='{v}']").first  # noqa: E731
    else:
        att, mk, sc = ".gpt-lesson-attention-explorer", ".gpt-lesson-mask-explorer", ".gpt-lesson-scaling-explorer"
        btn = lambda root, ctl, v: page.locator(f"{root} .widget-toggle-button", has_text=v).first  # noqa: E731
    page.locator(att).first.scroll_into_view_if_needed()
    old_labels = {"raw": "QKᵀ raw", "scaled": "÷ √d_k", "masked": "masked", "weights": "softmax"}
    for _ in range(rounds):
        for stage in ("raw", "scaled", "masked", "weights"):
            timed("attention: stage (click)", lambda s=stage: btn(att, "stage", s if new else old_labels[s]).click())
        for head in (1, 2, 3, 0):
            if new:
                timed("attention: head (click)", lambda h=head: btn(att, "head", h).click())
            else:
                timed("attention: head (dropdown)", lambda h=head: page.locator(f"{att} select").nth(1).select_option(
                    label=f"head {h}"))
        for layer in (1, 0):
            if new:
                timed("attention: layer (click)", lambda v=layer: btn(att, "layer", v).click())
            else:
                timed("attention: layer (dropdown)", lambda v=layer: page.locator(f"{att} select").nth(0).select_option(
                    label=f"layer {v}"))
        for q in (10, 30, 50, 63):
            if new:
                box = page.locator(f"{att} canvas[data-part=heatmap]").bounding_box()
                S = box["height"] - 38  # HEAT_MARGIN of attention.mjs: left 34, top 4, bottom 34
                x, y = box["x"] + 34 + (q // 2 + 0.5) * S / 64, box["y"] + 4 + (q + 0.5) * S / 64
                timed("attention: query (click a cell)", lambda x=x, y=y: page.mouse.click(x, y))
                for k in range(3):
                    timed("attention: hover a cell", lambda x=x, y=y, k=k: page.mouse.move(x + 7 * (k + 1), y - 7 * k))
                # the text strip above the heatmap: hovering a character previews its row. The mouse moves onto
                # the character as onto a cell above (its box is read first): Playwright's hover() first waits
                # for two animation frames (its "stable" check), so its move arrived ~3 ms into a frame and
                # waited 10-16 ms for the next one before Chromium dispatched it (mousemove is frame-aligned);
                # the same handler measured 19.6 ms median that way and 10.8 ms this way, in one run.
                for p in (q // 3, q // 2, q):
                    c = page.locator(f"{att} [data-part=strip] [data-pos='{p}']").bounding_box()
                    timed("attention: text strip hover", lambda c=c: page.mouse.move(c["x"] + c["width"] / 2,
                                                                                   c["y"] + c["height"] / 2))
            else:
                timed("attention: query (dropdown)", lambda q=q: page.locator(f"{att} select").nth(2).select_option(
                    value=None, index=q + 1))
    if new:  # the all-heads grid: hovering a row of a head previews that query in every head
        btn(att, "head", "all").click()
        settle(page, 0.5)
        box = page.locator(f"{att} canvas[data-part=heatmap]").bounding_box()
        S = box["height"] - 38
        m = (S - 2 * 14 - 10) / 2  # attention.mjs: boxes (2 x 2, gap 10, a 14 px title above each)
        for n, q in enumerate((5, 20, 33, 47, 60, 12)):
            hd = n % 4
            x = box["x"] + 34 + (hd % 2) * (m + 10) + m * 0.4
            y = box["y"] + 4 + (hd // 2) * (m + 24) + 14 + (q + 0.5) * m / 64
            timed("attention: all-heads hover (row preview)", lambda x=x, y=y: page.mouse.move(x, y))
        page.mouse.move(5, 5)
        btn(att, "head", 0).click()
        settle(page, 0.5)
        for index in (1, 0):  # the model switch: the other model's explorer, built once, shown
            ms = page.evaluate("""async ([selector, index]) => {
              document.querySelector(`[data-explorer=switch] [data-value='${index}']`).click();
              const t = window.__probe.event.t, pane = document.querySelector(`.gl-model-pane-${index}`);
              const root = pane.querySelector('[data-explorer=attention]');
              while (!(Number(root.dataset.paintedAt) > t) || !root.getClientRects().length)
                await new Promise((r) => requestAnimationFrame(r));
              await new Promise((r) => requestAnimationFrame(() => { const c = new MessageChannel(); c.port1.onmessage = r; c.port2.postMessage(0); }));
              return performance.now() - t;
            }""", [att, index])
            res.setdefault("attention: model switch (click)", []).append(ms)
            settle(page, 0.5)
    # typing: a new last character each time (the model runs for the new text)
    for c in "abcdefgh"[:max(3, rounds)]:
        text = TEXT[:63] + c
        if new:
            box = page.locator(f"{att} textarea")
            before = page.evaluate(f"() => Number(document.querySelector('{att}').dataset.texts)")
            box.fill(text)
            ms = page.evaluate(f"""async (before) => {{
              const root = document.querySelector('{att}');
              while (Number(root.dataset.texts) === before) await new Promise((r) => setTimeout(r, 1));
              await new Promise((r) => requestAnimationFrame(() => {{ const c = new MessageChannel(); c.port1.onmessage = r; c.port2.postMessage(0); }}));
              return performance.now() - window.__probe.event.t;
            }}""", before)
            res.setdefault("attention: text edit (model runs)", []).append(ms)
            settle(page, 0.5)
        else:
            timed("attention: text edit (model runs)", lambda t=text: page.locator(f"{att} input[type=text]").fill(t))
    page.locator(mk).first.scroll_into_view_if_needed()
    for _ in range(rounds):
        for m in ("none", "padding", "causal+padding", "causal"):
            timed("mask: mask type (click)", lambda m=m: btn(mk, "mask", m).click())
    slider_new = {"T": f"{mk} input[data-control=T]", "d_k": f"{sc} input[data-control=d_k]"}
    slider_old = {"T": f"{mk} .noUi-handle", "d_k": f"{sc} .noUi-handle"}
    sliders = slider_new if new else slider_old
    for _ in range(rounds):
        for forward in (True, False):
            page.locator(sliders["T"]).first.focus()
            timed("mask: T (slider step)", lambda f=forward: step(page, sliders["T"], new, f))
    res["mask: T drag"] = list(drag(page, sliders["T"], 16, new))
    page.locator(sc).first.scroll_into_view_if_needed()
    for _ in range(rounds):
        for s in ("none", "temperature", "sqrt"):
            label = s if new else {"none": "none", "sqrt": "1/√d_k", "temperature": "1/(√d_k·τ)"}[s]
            timed("scaling: scaling (click)", lambda v=label: btn(sc, "scaling", v).click())
        for forward in (True, False):
            page.locator(sliders["d_k"]).first.focus()
            timed("scaling: d_k (slider step)", lambda f=forward: step(page, sliders["d_k"], new, f))
    res["scaling: d_k drag"] = list(drag(page, sliders["d_k"], 11, new))
    return res


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="passes over each control's values")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "explorers.json"))
    args = parser.parse_args()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="explorers_bench_") as tmp_name:
        tmp = Path(tmp_name)
        root = tmp / "root"
        root.mkdir()
        folder = baseline_package(tmp / "baseline_widgets")
        notebook(root / "new.ipynb", [SETUP.format(text=TEXT), "from gpt_lesson import widgets", EXPLORERS + SWITCH,
                                      "switch", "mask", "scaling"])
        notebook(root / "old.ipynb", [SETUP.format(text=TEXT), BASELINE_IMPORT.format(init=str(folder / "__init__.py"),
                                                                                     folder=str(folder)),
                                      EXPLORERS, "attention", "mask", "scaling"])
        env = {"GPT_LESSON_DATA": os.environ.get("GPT_LESSON_DATA", str(ROOT.parent / "shared" / "data" /
                                                                     "tinyshakespeare.txt"))}
        results = {}
        with jupyterlab(root, tmp, env=env) as lab, chromium(tmp / "profile", (1400, 900)) as context:
            for side, new in (("old", False), ("new", True)):
                page = context.new_page()
                results[side] = run_side(page, lab, f"{side}.ipynb", new, args.rounds)
                page.close()
    load1 = os.getloadavg()[0]
    print(f"Explorers: input event -> painted frame (ms), JupyterLab in headless Chromium, {args.rounds} rounds; "
          f"load average {load0:.1f} at the start, {load1:.1f} at the end ({os.cpu_count()} cores).")
    print(f"{'control (old / new)':<52} {'old median':>10} {'old max':>8} {'new median':>10} {'new max':>8} {'ratio':>6}")
    pairs = [("attention: stage (click)", "attention: stage (click)"),
             ("attention: head (dropdown)", "attention: head (click)"),
             ("attention: layer (dropdown)", "attention: layer (click)"),
             ("attention: query (dropdown)", "attention: query (click a cell)"),
             (None, "attention: hover a cell"),
             (None, "attention: text strip hover"),
             (None, "attention: all-heads hover (row preview)"),
             (None, "attention: model switch (click)"),
             ("attention: text edit (model runs)", "attention: text edit (model runs)"),
             ("mask: mask type (click)", "mask: mask type (click)"),
             ("mask: T (slider step)", "mask: T (slider step)"),
             ("scaling: scaling (click)", "scaling: scaling (click)"),
             ("scaling: d_k (slider step)", "scaling: d_k (slider step)")]
    rows = []
    for old_key, new_key in pairs:
        o = results["old"].get(old_key) if old_key else None
        n = results["new"][new_key]
        missed = {"old": sum(x != x for x in o or []), "new": sum(x != x for x in n)}  # NaN: nothing painted
        o = [x for x in o or [] if x == x] or None
        n = [x for x in n if x == x]
        if not n:
            print(f"{new_key:<52} no picture painted: {missed}")
            continue
        row = {"control": new_key, "old_control": old_key, "new_median_ms": round(statistics.median(n), 1),
               "new_max_ms": round(max(n), 1), "n": len(n), "missed": missed}
        if o:
            row.update(old_median_ms=round(statistics.median(o), 1), old_max_ms=round(max(o), 1),
                       ratio=round(statistics.median(o) / statistics.median(n), 1))
        rows.append(row)
        om = f"{row['old_median_ms']:>10.1f} {row['old_max_ms']:>8.1f}" if o else f"{'-':>10} {'-':>8}"
        ratio = f"{row['ratio']:>5.1f}x" if o else f"{'-':>6}"
        miss = f"  (no picture within 30 s: old {missed['old']}, new {missed['new']})" if any(missed.values()) else ""
        print(f"{new_key:<52} {om} {row['new_median_ms']:>10.1f} {row['new_max_ms']:>8.1f} {ratio}{miss}")
    drags = []
    for key in ("mask: T drag", "scaling: d_k drag"):
        (ofps, otrail), (nfps, ntrail) = results["old"][key], results["new"][key]
        drags.append({"control": key, "old_fps": round(ofps, 1), "new_fps": round(nfps, 1),
                      "old_trail_ms": round(otrail), "new_trail_ms": round(ntrail)})
        print(f"{key:<52} pictures/s while dragging: old {ofps:5.1f}, new {nfps:5.1f}; "
              f"last picture after release: old {otrail:6.0f} ms, new {ntrail:4.0f} ms")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"baseline_commit": BASELINE, "rounds": args.rounds, "tokens": 64,
                                               "load_average_start": load0, "load_average_end": load1,
                                               "cores": os.cpu_count(), "latency": rows, "drag": drags,
                                               "raw": results}, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    if shutil.which("git") is None:
        raise SystemExit("git is needed to load the baseline explorers of commit " + BASELINE)
    main()
