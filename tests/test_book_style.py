"""The book's one visual system (transformer_lib.book.style): one palette and font, set by one call."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import altair as alt
import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from transformer_lib.book import style  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_importing_changes_nothing_and_enable_charts_applies_the_style() -> None:
    probe = (
        "import json, altair as alt, matplotlib as mpl\n"
        "import transformer_lib.book.style, transformer_lib.book.charts, transformer_lib.book.tables\n"
        "before = [alt.theme.active, mpl.rcParams['font.sans-serif'][0], mpl.rcParams['image.cmap']]\n"
        "from transformer_lib.book.charts import enable_charts\n"
        "enable_charts()\n"
        "after = [alt.theme.active, mpl.rcParams['font.sans-serif'][0], mpl.rcParams['image.cmap']]\n"
        "print(json.dumps([before, after]))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    before, after = json.loads(result.stdout.strip().splitlines()[-1])
    assert before == ["default", "DejaVu Sans", "viridis"]
    assert after == [style.THEME, style.FONT, style.SEQUENTIAL_CMAP]


@pytest.fixture
def restore_style():
    theme, rc = alt.theme.active, dict(matplotlib.rcParams)
    yield
    alt.theme.enable(theme)
    matplotlib.rcParams.update(rc)


def test_altair_and_matplotlib_share_one_palette_and_one_font(restore_style) -> None:
    style.apply()
    chart = alt.Chart(alt.Data(values=[{"x": 1, "c": "a"}])).mark_point().encode(x="x:Q", color="c:N")
    config = chart.to_dict()["config"]
    assert config["range"]["category"] == style.CATEGORY
    assert style.FONT in config["font"] and style.FONT in config["axis"]["labelFont"]
    assert config["range"]["heatmap"] == {"scheme": style.SEQUENTIAL}
    cycle = [c["color"] for c in matplotlib.rcParams["axes.prop_cycle"]]
    assert cycle == style.CATEGORY
    assert matplotlib.rcParams["font.sans-serif"][0] == style.FONT
    # the font is one matplotlib has (it ships it): figures are drawn in it on any machine
    from matplotlib import font_manager

    assert Path(font_manager.findfont(style.FONT, fallback_to_default=False)).name == "DejaVuSans.ttf"
    # the scheme names are the same scheme in both libraries: blues goes from light to dark blue
    blues = plt.get_cmap(style.SEQUENTIAL_CMAP)
    assert blues(0.0)[2] > blues(0.0)[0] and sum(blues(1.0)[:3]) < sum(blues(0.0)[:3])
    assert style.color(0) == style.CATEGORY[0] and style.color(len(style.CATEGORY)) == style.CATEGORY[0]


def test_pandas_never_truncates_after_apply(restore_style) -> None:
    import pandas as pd

    style.apply()
    long = "a very long cell " * 10
    assert long.strip() in pd.DataFrame({"text": [long]}).to_html()
    assert "..." not in repr(pd.DataFrame({f"c{i}": [i] for i in range(40)}))


def test_show_svg_displays_a_scalable_drawing_and_closes_the_figure() -> None:
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    ax.set_title("a title")
    shown = style.show_svg(ax)
    assert shown.data.lstrip().startswith("<svg") and 'viewBox="' in shown.data
    assert shown._repr_svg_() == shown.data  # the notebook stores it as image/svg+xml
    assert not plt.fignum_exists(fig.number), "the figure is closed, so plt.show() does not draw it again"
    with pytest.raises(TypeError, match="list"):
        style.show_svg([1, 2])


# --- the figure code uses the one palette -------------------------------------------------------------

ALLOWED_SCHEMES = {style.SEQUENTIAL, style.DIVERGING, style.SEQUENTIAL_CMAP, style.DIVERGING_CMAP,
                   f"{style.SEQUENTIAL_CMAP}_r", f"{style.DIVERGING_CMAP}_r"}


def _colour_choices(path: Path) -> list[str]:
    """Colour schemes and named palette colours a module picks itself: string literals given as
    ``scheme=``/``cmap=``/``colormap=``, to ``get_cmap(...)``, or matplotlib's ``"tab:..."`` colours."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.keyword) and node.arg in ("scheme", "cmap", "colormap") \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            if node.value.value not in ALLOWED_SCHEMES:
                found.append(f"line {node.value.lineno}: {node.arg}={node.value.value!r}")
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "get_cmap" \
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value not in ALLOWED_SCHEMES:
            found.append(f"line {node.lineno}: get_cmap({node.args[0].value!r})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("tab:"):
            found.append(f"line {node.lineno}: {node.value!r}")
    return found


FIGURE_MODULES = sorted(p for p in (ROOT / "transformer_lib" / "book").glob("*.py") if p.name != "style.py")


@pytest.mark.parametrize("path", FIGURE_MODULES, ids=lambda p: p.name)
def test_figure_code_takes_its_colours_from_the_one_palette(path: Path) -> None:
    """One visual system (issue 25): a figure's colours come from transformer_lib.book.style (CATEGORY,
    SEQUENTIAL/SEQUENTIAL_CMAP, DIVERGING/DIVERGING_CMAP), not a scheme of its own."""
    found = _colour_choices(path)
    assert not found, (f"{path.name} picks its own colours: {'; '.join(found)}. Use transformer_lib.book.style "
                       f"(schemes {sorted(ALLOWED_SCHEMES)}, style.CATEGORY / style.color(i))")


def test_the_palette_check_finds_a_scheme_of_its_own(tmp_path: Path) -> None:
    module = tmp_path / "figure.py"
    module.write_text('alt.Scale(scheme="viridis")\nax.imshow(x, cmap="Blues")\nax.plot(x, color="tab:red")\n'
                      'plt.get_cmap("magma")\n', encoding="utf-8")
    assert sorted(f.split(":")[0] for f in _colour_choices(module)) == ["line 1", "line 3", "line 4"]
