"""``python -m tools.figures``: every registered figure is written as a valid, non-blank PNG.

Figures of the trained Shakespeare model: when its checkpoint is cached they are drawn from it;
otherwise this test STUBS the trained model with a tiny GPT trained for a few steps on a
short text (saved as a real checkpoint in a temporary cache, loaded through the same code path),
so the drawing code runs without the ~90 s training. ``--no-train`` without a checkpoint is
tested to skip exactly those figures.
"""
from __future__ import annotations

import json
import struct
import sys
import types
from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import pytest

from gpt_lesson.data import CharTokenizer, cache_dir
from gpt_lesson.shakespeare import CHECKPOINT_NAME
from tools import figures
from tools.figures import (
    FIGURES,
    Context,
    FigureSkipped,
    FigureSpec,
    plot_benchmark,
    write_figures,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TRAINING = [s.filename for s in FIGURES if s.needs_training]
STATIC = [s.filename for s in FIGURES if not s.needs_training]


def assert_valid_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk comes first
    assert data[12:16] == b"IHDR" and width > 100 and height > 100, (path.name, width, height)
    pixels = mpimg.imread(path)
    assert pixels.shape[:2] == (height, width)
    assert pixels[..., :3].std() > 0.01, f"{path.name} is blank"


def _stub_trained_model(cache: Path, monkeypatch) -> None:
    """A tiny GPT trained for 6 steps, saved as the cached checkpoint, served by a stub loader."""
    from gpt_lesson import GPT, GPTConfig, TrainConfig, train
    from gpt_lesson.training import load_checkpoint

    text = (figures.ATTENTION_TEXT + "\nROMEO:\nBut soft, what light through yonder window breaks?\n") * 20
    tok = CharTokenizer(text)
    data = __import__("torch").tensor(tok.encode(text))
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, n_embd=16, n_head=2, n_layer=2, block_size=64, dropout=0.0))
    train(model, data[:1200], data[1200:], TrainConfig(max_steps=6, batch_size=4, eval_interval=3, eval_iters=2,
                                                       progress=False, checkpoint_path=str(cache / CHECKPOINT_NAME)))
    _replace_loader(monkeypatch, lambda train_if_missing=True: (load_checkpoint(cache / CHECKPOINT_NAME)[0], tok))


def _replace_loader(monkeypatch, load_trained_model) -> None:
    """Stub gpt_lesson.shakespeare.load_trained_model (the rest of the module stays real when it exists)."""
    try:
        import gpt_lesson.shakespeare as module
    except ImportError:
        module = types.ModuleType("gpt_lesson.shakespeare")
        monkeypatch.setitem(sys.modules, "gpt_lesson.shakespeare", module)
    monkeypatch.setattr(module, "load_trained_model", load_trained_model, raising=False)


def _cached_model_loads() -> bool:
    """True when the real trained model is cached (and current), so no stub is needed."""
    if not (cache_dir() / CHECKPOINT_NAME).is_file():
        return False
    try:
        from gpt_lesson.shakespeare import load_trained_model

        load_trained_model(train_if_missing=False)
    except (ImportError, FileNotFoundError):  # no module yet, a stale checkpoint, or no Tiny Shakespeare
        return False
    return True


@pytest.fixture(scope="module")
def drawn(tmp_path_factory, shakespeare_path):
    """Run the command once into a temp folder, with the real checkpoint if cached, else the stub."""
    out = tmp_path_factory.mktemp("figures")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPT_LESSON_DATA", str(shakespeare_path))  # the explorer views' tokenizer; never download
        if not _cached_model_loads():
            cache = tmp_path_factory.mktemp("cache")
            mp.setenv("GPT_LESSON_CACHE", str(cache))
            _stub_trained_model(cache, mp)
        assert figures.main(["--out", str(out), "--no-train"]) == 0
    return out


def test_registry_names_are_unique_pngs():
    names = [s.filename for s in FIGURES]
    assert len(names) == len(set(names))
    assert all(n.endswith(".png") and "/" not in n for n in names)
    assert {"attention_steps.png", "explorer_mask.png", "scaling_sqrt.png", "training_curves.png"} <= set(names)


def test_every_figure_in_the_repository_is_regenerated_by_the_command():
    """A PNG in figures/ that no registry entry draws would go stale: register it in gpt_lesson/figures.py."""
    present = {p.name for p in (figures.REPO_ROOT / "figures").glob("*.png")}
    drawn_by_command = {s.filename for s in figures.all_figures(Context(train=False))}
    assert present - drawn_by_command == set()


def test_every_registered_figure_is_a_valid_png(drawn):
    for spec in FIGURES:
        assert_valid_png(drawn / spec.filename)


def test_no_train_without_checkpoint_skips_only_the_training_figures(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPT_LESSON_CACHE", str(tmp_path / "empty-cache"))
    specs = [s for s in FIGURES if s.needs_training] + [s for s in FIGURES if s.filename == "explorer_mask.png"]
    done = write_figures(tmp_path / "out", specs, Context(train=False))
    printed = capsys.readouterr().out
    for name in TRAINING:
        assert isinstance(done[name], str) and not (tmp_path / "out" / name).exists()
        assert f"skipped {name}: " in printed
    assert done["explorer_mask.png"] == tmp_path / "out" / "explorer_mask.png"
    assert f"wrote {tmp_path / 'out' / 'explorer_mask.png'}" in printed


def _benchmarks(tmp_path: Path, name: str, results: object, script: str | None = None) -> Path:
    (tmp_path / "results").mkdir(parents=True, exist_ok=True)
    (tmp_path / "results" / f"{name}.json").write_text(json.dumps(results))
    if script is not None:
        (tmp_path / f"{name}.py").write_text(script)
    return tmp_path


def test_benchmark_results_are_replotted(tmp_path):
    rows = [{"impl": impl, "T": T, "ms": T * f / 100, "tokens_per_s": 1e5 / (T * f)}
            for impl, f in [("naive", 2.0), ("sdpa", 1.0)] for T in (64, 128, 256, 512)]
    bench = _benchmarks(tmp_path / "benchmarks", "attention", {"device": "cpu", "rows": rows})
    ctx = Context(train=False, benchmarks_dir=bench)
    specs = figures.benchmark_figures(bench)
    assert [s.filename for s in specs] == ["benchmark_attention.png"]
    done = write_figures(tmp_path / "out", specs, ctx, log=lambda _: None)
    assert_valid_png(done["benchmark_attention.png"])


def test_benchmark_own_plot_function_is_used(tmp_path):
    script = (
        "import matplotlib.pyplot as plt\n"
        "from _helpers import TITLE\n"  # a sibling module, as benchmarks/_common.py is imported
        "def plot(results):\n"
        "    fig, ax = plt.subplots()\n"
        "    ax.bar(['no cache', 'cache'], [results['without'], results['with']])\n"
        "    fig.suptitle(TITLE)\n"
        "    return fig\n"
    )
    bench = _benchmarks(tmp_path / "benchmarks", "kv_cache", {"without": 300.0, "with": 1500.0}, script)
    (bench / "_helpers.py").write_text("TITLE = 'own plot'\n")
    (spec,) = figures.benchmark_figures(bench)
    fig = spec.draw(Context(benchmarks_dir=bench))
    assert fig._suptitle.get_text() == "own plot"
    plt.close(fig)


def test_benchmark_without_a_table_is_skipped_with_the_reason():
    with pytest.raises(FigureSkipped, match="holds no table of numbers"):
        plot_benchmark("odd", {"note": "nothing measured"})
    with pytest.raises(FigureSkipped, match="need two numeric columns"):
        plot_benchmark("odd", [{"name": "a", "ms": 1.0}])


def test_stale_checkpoint_with_no_train_is_skipped(tmp_path, monkeypatch):
    def stale(train_if_missing=True):
        raise FileNotFoundError("no checkpoint made with the current settings at X")

    monkeypatch.setenv("GPT_LESSON_CACHE", str(tmp_path))
    (tmp_path / CHECKPOINT_NAME).write_bytes(b"old")
    _replace_loader(monkeypatch, stale)
    done = write_figures(tmp_path / "out", [s for s in FIGURES if s.needs_training], Context(train=False),
                         log=lambda _: None)
    assert done == {name: "no checkpoint made with the current settings at X" for name in TRAINING}


def test_the_repository_benchmark_results_replot(tmp_path):
    """Every benchmarks/results/NAME.json in the repository re-plots (its script's plot() or the generic one)."""
    bench = figures.REPO_ROOT / "benchmarks"
    specs = figures.benchmark_figures(bench)
    if not specs:
        pytest.skip("no benchmark has written benchmarks/results/NAME.json yet")
    done = write_figures(tmp_path, specs, Context(train=False, benchmarks_dir=bench), log=lambda _: None)
    for name, result in done.items():
        assert isinstance(result, Path), f"{name} was skipped: {result}"
        assert_valid_png(result)


def test_a_drawing_function_must_return_a_figure(tmp_path):
    bad = FigureSpec("bad.png", lambda ctx: "not a figure")
    with pytest.raises(TypeError, match="bad.png returned str, not a matplotlib Figure"):
        write_figures(tmp_path, [bad], Context(), log=lambda _: None)


def test_cli_rejects_unknown_names_and_lists(capsys):
    with pytest.raises(SystemExit):
        figures.main(["--only", "no_such_figure.png"])
    assert "unknown figure(s) ['no_such_figure.png']" in capsys.readouterr().err
    assert figures.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(s.filename in listed for s in FIGURES)
