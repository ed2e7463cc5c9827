"""Figures for the book: altair charts where interaction helps, matplotlib for static plots.

Library code returns charts (``alt.Chart``) or axes (``matplotlib.axes.Axes``); it never calls
``plt.show()``. Conventions: queries on rows, keys on columns, axes labelled with tokens.
It imports nothing from the model: functions take tensors/arrays and labels.

Importing this module also configures how altair charts are displayed (section 1), so that the
built website needs no CDN and charts stay interactive.
"""

from __future__ import annotations

import inspect
from typing import Any

# --- 0. Showing library source in a chapter -----------------------------------------------------


def show_source(obj: Any) -> Any:
    """Display the source of a ``transformer_lib`` function or class, syntax-highlighted.

    Chapters use this instead of copying code, so the page always shows the code that runs.
    Returns an ``IPython.display.Code`` object (the notebook displays it as a cell's value).
    """
    from IPython.display import Code

    module = inspect.getmodule(obj)
    if module is None or not module.__name__.startswith("transformer_lib"):
        raise ValueError(f"show_source is for transformer_lib code, got {obj!r}")
    return Code(inspect.getsource(obj), language="python")


# --- 1. Displaying charts (offline-capable renderer) -------------------------------------------
#
# altair's own HTML output loads vega, vega-lite and vega-embed from a CDN, so a chart would need
# the internet and the website could not work offline. Importing this module registers and enables
# the renderer below instead. Each chart's output carries:
#   - ``text/html``: the chart as a static SVG image (what a reader sees where JavaScript does not run:
#     GitHub's notebook preview, a page with JavaScript off) and a small script that replaces it with
#     the interactive chart (tooltips, selections, dropdowns). The script uses ``window.vegaEmbed``
#     when the page has it (the website serves vega-embed itself, see ``_ext/book_site.py``) and
#     otherwise loads it from the CDN as altair does (Jupyter, Colab, VS Code).
#   - the Vega-Lite JSON under the Vega-Lite mimetype, for front ends that draw that natively.
# The interactive chart follows the website's light/dark switch (and JupyterLab's dark theme).

import json  # noqa: E402  (section-local imports keep this section self-contained)
import re  # noqa: E402
import uuid  # noqa: E402
from base64 import b64encode  # noqa: E402
from html import escape  # noqa: E402

import altair as alt  # noqa: E402
from altair.utils.mimebundle import spec_to_mimebundle  # noqa: E402

CHART_RENDERER = "tested_transformer"
"""Name of the altair renderer this module registers and enables on import."""

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

# Placeholders: __ID__, __SPEC__, __OPTIONS__, __CDN__ (JSON, made safe to sit inside <script>).
_EMBED_SCRIPT = """\
(function (id, spec, embedOptions, cdn) {
  "use strict";
  var box = document.getElementById(id);
  if (!box) return;
  // Readable on a dark page: light text and guides, no white card. Marks keep their colours.
  var DARK = {
    background: "transparent",
    title: {color: "#e8eaed", subtitleColor: "#c4c8cd"},
    style: {"guide-label": {fill: "#d5d9de"}, "guide-title": {fill: "#e8eaed"}},
    axis: {domainColor: "#9aa0a6", tickColor: "#9aa0a6", gridColor: "#3c4043"},
    header: {labelColor: "#d5d9de", titleColor: "#e8eaed"},
    text: {color: "#e8eaed"},
    view: {stroke: "#5f6368"}
  };
  function isDark() {
    var theme = document.documentElement.getAttribute("data-theme");  // the book's website
    if (theme === "auto") return !!window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
    if (theme) return theme === "dark";
    return !!document.body && document.body.getAttribute("data-jp-theme-light") === "false";  // JupyterLab
  }
  var live = null, view = null, shown = null;
  function draw() {
    var dark = isDark();
    if (dark === shown) return null;
    var opts = Object.assign(
      {renderer: "svg", actions: {export: true, source: false, compiled: false, editor: false}},
      embedOptions,
      dark ? {config: DARK, tooltip: {theme: "dark"}} : {}
    );
    if (!live) {
      live = document.createElement("div");
      live.className = "tt-altair-live";
      box.appendChild(live);
    }
    if (view) view.finalize();
    return window.vegaEmbed(live, spec, opts).then(function (result) {
      view = result.view;
      shown = dark;
      box.ttView = view;  // for tests and the curious: the live Vega view
      var still = box.querySelector(".tt-altair-static");
      if (still) still.remove();
      box.setAttribute("data-tt-status", "rendered");
      box.setAttribute("data-tt-theme", dark ? "dark" : "light");
    });
  }
  function fail(err) {
    box.setAttribute("data-tt-status", "error");  // the static image stays
    console.error("transformer_lib.viz: chart " + id + " could not be drawn:", err);
  }
  function start() {
    var queue = Promise.resolve().then(draw).catch(fail);
    if (window.MutationObserver) {
      new MutationObserver(function () { queue = queue.then(draw).catch(fail); })
        .observe(document.documentElement, {attributes: true, attributeFilter: ["data-theme"]});
    }
  }
  function loadScript(src) {
    return new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = src;
      s.onload = resolve;
      s.onerror = function () { reject(new Error("could not load " + src)); };
      document.head.appendChild(s);
    });
  }
  function loadFromCdn() {
    if (typeof window.define === "function" && window.define.amd) {  // classic Notebook: RequireJS
      window.requirejs.config({paths: {"vega": cdn.vega, "vega-lite": cdn.vegaLite, "vega-embed": cdn.vegaEmbed}});
      return new Promise(function (resolve, reject) {
        window.require(["vega-embed"], function (vegaEmbed) { window.vegaEmbed = vegaEmbed; resolve(); }, reject);
      });
    }
    window.ttVegaLoading = window.ttVegaLoading || loadScript(cdn.vega)
      .then(function () { return loadScript(cdn.vegaLite); })
      .then(function () { return loadScript(cdn.vegaEmbed); });
    return window.ttVegaLoading;
  }
  function begin() {
    if (typeof window.vegaEmbed === "function") start();
    else loadFromCdn().then(start, fail);
  }
  // On the website vega-embed comes in a deferred script: it is defined once the page is parsed.
  if (typeof window.vegaEmbed !== "function" && document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", begin);
  } else {
    begin();
  }
})(__ID__, __SPEC__, __OPTIONS__, __CDN__);
"""


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
    """The altair renderer enabled on import: an offline-capable, interactive chart with a static SVG.

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
    script = re.sub(r"__(ID|SPEC|OPTIONS|CDN)__", lambda m: _script_json(values[m.group(1)]), _EMBED_SCRIPT)
    image = b64encode(svg.encode("utf-8")).decode("ascii")
    html = (
        f'<div class="{CHART_CLASS}" id="{chart_id}" data-tt-status="static">'
        f'<img class="tt-altair-static" alt="{escape(label)}" src="data:image/svg+xml;base64,{image}">'
        f"</div>\n<script>\n{script}</script>\n"
    )
    return {"text/html": html, _VEGALITE_MIMETYPE: spec, "text/plain": f"<{label} (altair)>"}


alt.renderers.register(CHART_RENDERER, chart_mimebundle)
alt.renderers.enable(CHART_RENDERER)


# --- 2. Attention and mask figures (chapters 1, 2, 6) -------------------------------------------

# --- 3. Embedding and block figures (chapters 3, 4) ---------------------------------------------

# --- 4. Training figures (chapter 5) -------------------------------------------------------------
