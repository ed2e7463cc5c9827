"""Displaying altair charts in the book: offline-capable and interactive, enabled by a call.

altair's own HTML output loads vega, vega-lite and vega-embed from a CDN, so a chart would need
the internet and the website could not work offline. :func:`enable_charts` (each chapter calls it in
its set-up) registers and enables the renderer below instead; importing this module changes nothing.
Each chart's output carries:

- ``text/html``: the chart as a static SVG image (what a reader sees where JavaScript does not run:
  GitHub's notebook preview, a page with JavaScript off) and a small script
  (``chart_embed.js``, shipped with the package) that replaces it with the interactive chart
  (tooltips, selections, dropdowns). The script uses ``window.vegaEmbed`` when the page has it (the
  website serves vega-embed itself, see ``_ext/book_site.py``) and otherwise loads it from the CDN
  as altair does (Jupyter, Colab, VS Code).
- the Vega-Lite JSON under the Vega-Lite mimetype, for front ends that draw that natively.

The interactive chart follows the website's light/dark switch (and JupyterLab's dark theme), and
fits its column: on a narrow screen a single view is redrawn narrower (title wrapped, legend below),
and a composite chart is scaled down to the column.

:func:`enable_charts` also applies the book's one look (:func:`transformer_lib.book.style.apply`: the
palette and font of altair and matplotlib figures alike).
"""

from __future__ import annotations

import json
import re
import uuid
from base64 import b64encode
from functools import lru_cache
from html import escape
from importlib import resources
from typing import Any

import altair as alt
from altair.utils.mimebundle import spec_to_mimebundle

__all__ = ["CHART_RENDERER", "CHART_CLASS", "chart_mimebundle", "enable_charts"]

CHART_RENDERER = "tested_transformer"
"""Name of the altair renderer :func:`enable_charts` registers and enables."""

CHART_CLASS = "tt-altair"
"""CSS class of every chart's outer ``<div>`` (the website's build and browser test look for it)."""

# The Jupyter convention (JupyterLab's renderer, nbformat's rule that a JSON output's mimetype ends
# in "+json"). altair 6's own mimetype renderer says "application/vnd.vegalite.v6.json", which
# nbformat rejects as a notebook output.
_VEGALITE_MIMETYPE = f"application/vnd.vegalite.v{alt.VEGALITE_VERSION.split('.')[0]}+json"
_CDN = {
    "vega": f"https://cdn.jsdelivr.net/npm/vega@{alt.VEGA_VERSION}?noext",
    "vegaLite": f"https://cdn.jsdelivr.net/npm/vega-lite@{alt.VEGALITE_VERSION}?noext",
    "vegaEmbed": f"https://cdn.jsdelivr.net/npm/vega-embed@{alt.VEGAEMBED_VERSION}?noext",
}


@lru_cache(maxsize=None)
def _embed_script() -> str:
    """``chart_embed.js`` without its leading comment; placeholders ``__ID__``, ``__SPEC__``,
    ``__OPTIONS__``, ``__CDN__``."""
    text = resources.files(__package__).joinpath("chart_embed.js").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("//"):
        lines.pop(0)
    return "".join(lines)


def _script_json(value: Any) -> str:
    """JSON that can sit inside a ``<script>`` element (no ``</script>`` or ``<!--`` in strings)."""
    text = json.dumps(value, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _chart_label(spec: dict) -> str:
    """A text alternative for the chart: its description, else its title."""
    if spec.get("description"):
        return str(spec["description"])
    title = spec.get("title")
    if isinstance(title, dict):
        title = title.get("text")
    if isinstance(title, list):
        title = " ".join(map(str, title))
    return f"Chart: {title}" if title else "Chart"


def chart_mimebundle(spec: dict, **metadata: Any) -> dict[str, Any]:
    """The book's altair renderer: an offline-capable, interactive chart with a static SVG.

    Args:
        spec: the Vega-Lite specification altair passes to a renderer.
        **metadata: renderer options; ``embed_options`` (a dict) is passed to vega-embed, as with
            altair's own renderers (``alt.renderers.enable(CHART_RENDERER, embed_options={...})``).

    Returns:
        A Jupyter mimebundle with ``text/html`` (static SVG plus the script that makes it interactive),
        the Vega-Lite JSON, and ``text/plain``.
    """
    # Random, not counted: after a kernel restart a counter would repeat ids still on the page.
    chart_id = f"{CHART_CLASS}-{uuid.uuid4().hex[:16]}"
    svg = spec_to_mimebundle(
        spec,
        format="svg",
        mode="vega-lite",
        vega_version=alt.VEGA_VERSION,
        vegaembed_version=alt.VEGAEMBED_VERSION,
        vegalite_version=alt.VEGALITE_VERSION,
    )["image/svg+xml"]
    label = _chart_label(spec)
    values = {"ID": chart_id, "SPEC": spec, "OPTIONS": metadata.get("embed_options") or {}, "CDN": _CDN}
    # One pass, so a placeholder-like string inside the spec is never replaced in turn.
    script = re.sub(r"__(ID|SPEC|OPTIONS|CDN)__", lambda m: _script_json(values[m.group(1)]), _embed_script())
    image = b64encode(svg.encode("utf-8")).decode("ascii")
    html = (
        f'<div class="{CHART_CLASS}" id="{chart_id}" data-tt-status="static">'
        f'<img class="tt-altair-static" alt="{escape(label)}" src="data:image/svg+xml;base64,{image}">'
        f"</div>\n<script>\n{script}</script>\n"
    )
    return {"text/html": html, _VEGALITE_MIMETYPE: spec, "text/plain": f"<{label} (altair)>"}


def enable_charts(**embed_options: Any) -> None:
    """Register the book's renderer with altair and make it the active one, and apply the book's look.

    Each chapter calls this once in its set-up; calling it again is harmless. Besides the renderer it
    applies :func:`transformer_lib.book.style.apply` (one palette and font for altair and matplotlib,
    pandas never truncating a table).

    Args:
        **embed_options: passed to vega-embed for every chart (e.g. ``actions=False``).
    """
    from . import style

    style.apply()
    alt.renderers.register(CHART_RENDERER, chart_mimebundle)
    if embed_options:
        alt.renderers.enable(CHART_RENDERER, embed_options=embed_options)
    else:
        alt.renderers.enable(CHART_RENDERER)
