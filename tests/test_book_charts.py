"""The book's altair renderer: enabled by a call, never by an import; its script ships with the package."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import altair as alt
import pytest

from transformer_lib.book import charts

ROOT = Path(__file__).resolve().parent.parent


def test_importing_the_book_changes_no_renderer() -> None:
    probe = (
        "import altair as alt, json\n"
        "import transformer_lib.book.charts, transformer_lib.book.figures, transformer_lib.book.results\n"
        "print(json.dumps([alt.renderers.active, 'tested_transformer' in alt.renderers.names()]))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == ["default", False]


@pytest.fixture
def restore_renderer():
    active = alt.renderers.active
    yield
    alt.renderers.enable(active)


def test_enable_charts_registers_and_enables_the_renderer(restore_renderer) -> None:
    charts.enable_charts()
    assert alt.renderers.active == charts.CHART_RENDERER == "tested_transformer"
    chart = alt.Chart(alt.Data(values=[{"x": 1, "y": 2}]), title="a </script> title").mark_point().encode(x="x:Q", y="y:Q")
    html = chart._repr_mimebundle_()["text/html"]
    assert f'class="{charts.CHART_CLASS}"' in html and "data:image/svg+xml;base64," in html
    assert html.count("</script>") == 1, "nothing in the spec may end the script early"
    assert "window.vegaEmbed" in html and "__SPEC__" not in html and "// The script" not in html


def test_the_script_is_package_data() -> None:
    script = resources.files("transformer_lib.book").joinpath("chart_embed.js").read_text(encoding="utf-8")
    assert "__ID__, __SPEC__, __OPTIONS__, __CDN__" in script
    from pyproject_file import read_pyproject

    pyproject = read_pyproject()
    # so `pip install` ships it (tests/test_install.py checks an installed copy has it)
    assert "chart_embed.js" in pyproject["tool"]["setuptools"]["package-data"]["transformer_lib.book"]
