"""The Chinese edition's figures are drawn in Chinese with the font the package ships (issue 27, item 1).

matplotlib warns "Glyph ... missing from font(s) ..." and draws an empty box for every character no
font of the figure has. The figures of a Chinese notebook take Latin text from DejaVu Sans and Chinese
from the bundled subset of Noto Sans SC (``gpt_lesson/fonts``, built by ``tools/cjk_font.py``), so
these tests hold on a machine with no system CJK font, as this one is, and on one with: the font stack
names only those two files.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch
from fontTools.ttLib import TTFont
from matplotlib import font_manager
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

import tools.cjk_font as cjk
from gpt_lesson import GPT, CharTokenizer
from gpt_lesson.i18n import CJK_FAMILY, CJK_FONT, get_language, language, set_language
from gpt_lesson.serving import PagedKVCache, plot_block_tables
from gpt_lesson.viz import plot_attention, plot_loss_curves
from gpt_lesson.widgets import draw_attention_view, draw_mask_view, draw_scaling_view
from gpt_lesson.widgets.mask_explorer import MASKS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def english_afterwards():
    yield
    set_language("en")
    plt.close("all")


def missing_glyphs(fig) -> list[str]:
    """The missing-glyph warnings matplotlib gives while it renders ``fig`` (Agg, as the notebooks' PNGs)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.canvas.draw()
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]


def text_figure(texts: list[str]) -> Figure:
    fig = Figure(figsize=(8, 0.25 * len(texts) + 1))
    FigureCanvasAgg(fig)
    for n, t in enumerate(texts):
        fig.text(0.01, 1 - (n + 1) / (len(texts) + 1), t.replace("$", r"\$"), fontsize=6)
    return fig


def test_the_shipped_font_is_the_manifests_small_licensed_and_covers_the_edition():
    manifest = json.loads(cjk.MANIFEST_FILE.read_text(encoding="utf-8"))
    assert CJK_FONT == cjk.FONT_FILE and CJK_FAMILY == cjk.FAMILY == manifest["family"]
    assert CJK_FONT.stat().st_size == manifest["bytes"] < 3_000_000
    assert "SIL OPEN FONT LICENSE Version 1.1" in cjk.LICENSE_FILE.read_text(encoding="utf-8")
    font = TTFont(CJK_FONT)
    assert font["name"].getDebugName(1) == CJK_FAMILY and "glyf" in font  # TrueType outlines: PDF and PS embed them
    cmap = font.getBestCmap()
    assert cjk.gb2312_level1() <= {chr(c) for c in cmap}  # the common hanzi, for a learner's own labels
    assert cjk.check() == []  # sha256 as recorded, and every character of the catalogue and the notebooks


def test_the_coverage_check_finds_a_character_no_font_has():
    assert cjk.uncovered({"注", "a", "\U0001F642", "\u4DB5"}) == ["\u4DB5", "\U0001F642"]  # an Extension A hanzi, an emoji
    assert set("训练损失（奈特）") <= cjk.required_characters()


def test_chinese_puts_the_bundled_font_after_dejavu_and_english_puts_the_old_stack_back():
    set_language("en")
    before = list(matplotlib.rcParams["font.family"])
    set_language("zh")
    assert matplotlib.rcParams["font.family"] == [*before, CJK_FAMILY]
    used = [Path(p).name for p in font_manager.fontManager._find_fonts_by_props(font_manager.FontProperties())]
    assert used == ["DejaVuSans.ttf", CJK_FONT.name]  # no system font takes part, CJK or not
    set_language("zh")  # twice: added once
    assert matplotlib.rcParams["font.family"] == [*before, CJK_FAMILY]
    set_language("en")
    assert matplotlib.rcParams["font.family"] == before
    with language("zh"):
        assert matplotlib.rcParams["font.family"][-1] == CJK_FAMILY
    assert get_language() == "en" and matplotlib.rcParams["font.family"] == before


def test_every_translation_of_the_catalogue_draws_without_a_missing_glyph():
    set_language("zh")
    # the checks' emoji (cjk.PRINTED_ONLY) are printed, never drawn
    texts = sorted({"".join(c for c in t if c not in cjk.PRINTED_ONLY) for t in cjk.catalogue_texts() if t.strip()})
    assert len(texts) > 400
    assert missing_glyphs(text_figure(texts)) == []


def test_without_the_bundled_font_chinese_text_has_missing_glyphs():
    # What every Chinese figure showed before: DejaVu Sans alone has no hanzi (the test above can fail).
    fig = text_figure(["训练损失与验证损失"])
    with matplotlib.rc_context({"font.family": ["sans-serif"]}):
        assert missing_glyphs(fig)


@pytest.fixture(scope="module")
def tiny():
    tok = CharTokenizer("to be, or not to be: that is the question.\n")
    torch.manual_seed(0)
    return GPT(tok.vocab_size, 32, 4, 2, 16, dropout=0.0), tok


def static_views(tiny):
    model, tok = tiny
    text = "to be or not"
    for stage in ("raw", "scaled", "masked", "weights"):
        yield f"attention {stage}", draw_attention_view(model, tok, text, stage=stage, query=3)
    yield "attention all heads", draw_attention_view(model, tok, text, head="all")
    yield "attention no query", draw_attention_view(model, tok, text)
    for mask in MASKS:
        yield f"mask {mask}", draw_mask_view(T=6, mask=mask)
    for scaling in ("none", "sqrt", "temperature"):
        yield f"scaling {scaling}", draw_scaling_view(d_k=64, scaling=scaling)


def test_the_static_views_are_chinese_and_miss_no_glyph(tiny):
    set_language("zh")
    for name, fig in static_views(tiny):
        texts = "".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))
        assert any("\u4e00" <= c <= "\u9fff" for c in texts), f"{name}: no Chinese in the static view"
        assert missing_glyphs(fig) == [], name


def test_the_library_plots_are_chinese_and_miss_no_glyph():
    set_language("zh")
    history = {"step": [1, 2, 3], "loss": [4.0, 3.0, 2.5], "eval_step": [1, 3], "train": [4.0, 2.5], "val": [4.1, 2.7]}
    ax = plot_loss_curves(history)
    assert ax.get_title() == "训练损失与验证损失" and ax.get_xlabel() == "优化器步数"
    assert missing_glyphs(ax.figure) == []
    ax = plot_attention(torch.tril(torch.ones(4, 4)) / 4, list("abcd"), mask=torch.tril(torch.ones(4, 4)))
    assert ax.get_xlabel() == "键（被关注的位置）" and ax.get_legend().get_texts()[0].get_text() == "被遮住（未来）"
    assert missing_glyphs(ax.figure) == []
    pool = PagedKVCache(1, 1, 2, num_blocks=4, tokens_per_block=2)
    pool.add_sequence("A")
    pool.append("A", 3)
    axes = plot_block_tables(pool)
    assert axes[1].get_xlabel() == "缓存池的物理块"
    assert missing_glyphs(axes[0].figure) == []


def test_chinese_titles_wrap_by_display_width_and_english_ones_as_before():
    import textwrap

    from gpt_lesson.widgets._common import wrap_label

    english = "spread of a row's scores (std): q·k 1.23 → × 0.354 → 0.44; then the mask (−∞)"
    assert wrap_label(english, 30) == textwrap.wrap(english, 30)
    lines = wrap_label("饱和（200 个查询的平均）：接近 one-hot 的 softmax 几乎传不回梯度", 50)
    assert lines == ["饱和（200 个查询的平均）：接近 one-hot 的 softmax", "几乎传不回梯度"]  # 48 columns, then the rest
    assert all(sum(2 if "\u4e00" <= c <= "\u9fff" or c in "（）：" else 1 for c in line) <= 50 for line in lines)


def test_english_figures_keep_their_english_labels_and_font():
    set_language("zh")
    set_language("en")
    fig = draw_mask_view(T=6, mask="causal")
    assert fig._suptitle.get_text().startswith("Mask: causal")
    assert [Path(p).name for p in font_manager.fontManager._find_fonts_by_props(font_manager.FontProperties())] \
        == ["DejaVuSans.ttf"]
