"""The website, tested in a real browser: offline, interactive, readable in light and dark mode, on a
laptop and a phone, and pages a reader finishes.

``make book`` builds the site into ``_build/html``; these tests serve that folder on a loopback port
and drive headless Chromium (Debian's ``chromium``; Playwright cannot download a browser here) over
every page. Each page is visited once in all its forms (``test_page_in_dark_and_light_mode_on_a_phone_a_laptop_and_paper``):
opened at a phone's size (390x844) in dark mode, then turned to light mode at a laptop's size
(1280x900), then printed (A4); where it has charts, a second time with JavaScript off. What is checked:

- the limits of issue 25, on every page (``measure_default``, ``measure_opened``): at most ``MAX_SCREENS`` screens
  long (12 at 1280x900, 18 at 390x844, in the page's default state: collapsed cells stay collapsed);
  everything set as code on show (cell inputs, ``show_source`` listings, code in the prose, printed text
  outputs) at most ``MAX_CODE_SHARE``
  (20%) of the page at 1280x900; nothing cut at either size or on paper (``CLIPPED_JS``: every code
  block, output, equation, table, chart, image and figure fits its column, or, on screen only, sits in
  a box that scrolls sideways with a visible cue; charts always fit, their text included);
- what issue 44 asks, on every page at both sizes (``reading_problems``): no printed result wider than
  its box (sentences wrap; a printed table is reported: show it as a table), no table wider than its
  box (row labels held at the left; too wide, stacked rows), no figure, drawing or chart text under
  ``MIN_TEXT_PX`` (9 px) as shown (``FIGURE_TEXT_JS``), and the set-up one line before the section's
  first sentence (``READING_JS``); the measures go into each page's report;
- no request goes to any host but the local server, and every local request succeeds;
- no console errors and no uncaught exceptions;
- the theme follows the system's colour scheme, when the page opens and when the scheme changes;
- every math element is typeset by MathJax, without TeX errors;
- every icon of the theme is drawn from Font Awesome's web font, and no page but search.html loads the
  scripts ``_templates/layout.html`` leaves out (``fontawesome.js``, the search scripts and index);
- every altair chart (drawn through ``transformer_lib.book.charts``) is drawn live with marks in it; hovering any
  chart that has tooltips shows one; a bound input (a head picker, say) redraws its chart; chart text
  stands out from what is behind it, in light and in dark mode; with JavaScript off, the static SVG shows;
- every image loads;
- a notebook page's Colab button opens its own ``.ipynb`` in the repository, and its download button
  gives the committed notebook; every Colab link opens a notebook of the book; the introduction's
  Colab badges, when present, cover every chapter;
- the Colab set-up cell is labelled as what it is;
- the table of contents and "on this page" open with their buttons, their links on show and
  tappable, and close again, on a phone and a laptop, on a page of each kind (the book's first page,
  a chapter's landing page, a section): ``test_the_table_of_contents_and_on_this_page_open_and_close``;
- search finds every page by its title.

A full-page screenshot of every page (light, dark, phone) and its printed PDF go to
``_build/screenshots`` (with ``SITE_SCREENSHOTS=failures``, as in CI, only those of a page-mode with a
problem); ``python tests/test_site.py`` (run by ``make test``) prints what each page
showed, with the table of screens, code share and cut elements per page. ``SITE_DIR`` and
``SCREENSHOTS_DIR`` point the tests at another build (an older commit's site, for a before/after).

Without Chromium these tests are skipped with a loud reason; with ``REQUIRE_BROWSER=1`` (CI sets it)
a missing browser fails them.
"""

from __future__ import annotations

import functools
import html as html_lib
import http.server
import importlib.util
import json
import os
import re
import shutil
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

# The whole module needs the built site or the browser: `make test` runs it after `make book`.
pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
# Another built site can be checked (SITE_DIR), e.g. the site of an older commit for a before/after
# comparison; its screenshots and reports then go to SCREENSHOTS_DIR.
SITE = Path(os.environ.get("SITE_DIR") or ROOT / "_build" / "html")
SCREENSHOTS = Path(os.environ.get("SCREENSHOTS_DIR") or ROOT / "_build" / "screenshots")
# Every page's screenshots (light, dark, phone, the printed PDF), to look at: the default. With
# SITE_SCREENSHOTS=failures (CI, where nobody looks at them; about 3 s of the browser's time a page),
# only a page-mode that found a problem, listed ones included, gets its screenshot (the phone's and the
# print's then show the page with its toggles open, as it was measured for cut elements).
EVERY_SCREENSHOT = os.environ.get("SITE_SCREENSHOTS", "all") != "failures"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
REPO_URL = CONFIG["repository"]["url"].rstrip("/")
BRANCH = CONFIG["repository"].get("branch", "main")
COLAB = "https://colab.research.google.com/github/"

CHROMIUM_FLAGS = [
    "--no-sandbox",  # CI runs as root in a container
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--no-first-run",
    "--no-default-browser-check",
    # Nothing leaves the machine: every host name but the local server's fails to resolve. The visits
    # record each such request as a problem (``visit``). Blocking them with Playwright's request
    # routing would turn off the browser's HTTP cache, and every visit would fetch and compile the
    # site's 4 MB of scripts again (about a seventh of a visit's time).
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]
VIEWPORT = {"width": 1280, "height": 900}
# The layout test reads every page at a laptop's width and a phone's (an iPhone 12-15's CSS size).
# And printed: the print stylesheet at an A4 page's width (210 mm less margins, at 96 px an inch).
LAYOUT_VIEWPORTS = {"desktop": VIEWPORT, "phone": {"width": 390, "height": 844}, "print": {"width": 720, "height": 1000}}
CHART_TIMEOUT_MS = 20_000
MIN_CONTRAST = 4.5  # WCAG AA for normal-size text; axis labels are small


def colab_url(notebook: str) -> str:
    """Where a notebook's Colab link must point: ``notebook`` (``book/01_attention/02_heads.ipynb``,
    relative to the repository) in the repository, on the book's branch."""
    return f"{COLAB}{REPO_URL.removeprefix('https://github.com/')}/blob/{BRANCH}/{notebook}"


def site_pages() -> list[str]:
    """Every page of the built site, relative to its root (not assets, sources or the redirect)."""
    if not SITE.is_dir():
        return []
    pages = (p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html"))
    return sorted(p for p in pages if not p.startswith(("_", ".")) and p != "index.html")


def notebook_of(page: str) -> str | None:
    """The notebook a page was built from, relative to the repository (``book/01_attention/02_heads.html``
    -> ``book/01_attention/02_heads.ipynb``); ``None`` for a Markdown page (the introduction, a
    chapter's landing page) and Sphinx's own pages."""
    notebook = Path(page).with_suffix(".ipynb")
    return notebook.as_posix() if page.startswith("book/") and (ROOT / notebook).is_file() else None


def chapter_of(page_or_notebook: str) -> str | None:
    """The chapter a book page belongs to: the first part of its path under ``book/``
    (``book/01_attention/02_heads.html`` and ``book/01_attention.html`` -> ``01_attention``)."""
    parts = Path(page_or_notebook).parts
    if len(parts) < 2 or parts[0] != "book" or Path(page_or_notebook).stem == Path(TOC["root"]).name:
        return None
    return Path(parts[1]).stem


def has_charts(page: str) -> bool:
    try:  # collected while `make test` may still be building the site (the module is deselected then)
        return 'class="tt-altair"' in (SITE / page).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False


PAGES = site_pages()
CHART_PAGES = [p for p in PAGES if has_charts(p)]
ROOT_PAGE = f"{TOC['root']}.html"


def slug(page: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", page.removesuffix(".html"))


def screenshot_path(page: str, mode: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS / f"{slug(page)}.{mode}.png"


def shown_path(path: Path) -> str:
    """``path`` relative to the repository when it is inside it (reports name screenshots that way)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def write_report(page: str, mode: str, report: dict) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS / f"{slug(page)}.{mode}.json").write_text(json.dumps({"page": page, "mode": mode, **report}, indent=1))


KNOWN_PROBLEMS = ROOT / "tests" / "site_known_problems.yml"


def known_problems(page: str, mode: str) -> list[str]:
    """The kinds of problem ``tests/site_known_problems.yml`` lists as not fixed yet for this page and mode."""
    import yaml

    listed = yaml.safe_load(KNOWN_PROBLEMS.read_text()) if KNOWN_PROBLEMS.is_file() else {}
    return list((listed or {}).get(f"{page} ({mode})", []))


def _screenshot(page: Any, shot: Path, problems: list[str]) -> Path | None:
    """The page's full-length screenshot at ``shot``, if every page's is wanted or this one has problems."""
    if not (EVERY_SCREENSHOT or problems):
        return None
    full_page_screenshot(page, shot)
    return shot


def full_page_screenshot(page: Any, shot: Path) -> None:
    """From the top of the page, nothing focused: scrolled (a chart hovered), the header and sidebar
    that stick to the window are drawn across the middle of the full-length image."""
    page.evaluate("() => { if (document.activeElement) document.activeElement.blur(); window.scrollTo(0, 0); }")
    page.screenshot(path=shot, full_page=True, animations="disabled")


def assert_no_problems_in(page: str, found: dict[str, tuple[list[str], Path | None]]) -> None:
    """``assert_no_problems`` over several checks of one visit (``{mode: (problems, screenshot)}``): every
    new problem of every mode is reported before the test fails."""
    new = []
    for mode, (problems, shot) in found.items():
        kinds = known_problems(page, mode)
        fresh = [p for p in problems if not any(p.startswith(kind) for kind in kinds)]
        new += [f"({mode}) {p}" for p in fresh] + ([f"({mode}) screenshot: {shot}"] if fresh and shot else [])
    assert not new, f"{page}: {len(new)} problem(s):\n- " + "\n- ".join(new)
    listed = {mode: problems for mode, (problems, _) in found.items() if problems}
    if listed:  # only listed ones: not a pass
        pytest.xfail(f"{page}, listed in {KNOWN_PROBLEMS.name}: {listed}")


def assert_no_problems(page: str, mode: str, problems: list[str], shot: Path | None) -> None:
    assert_no_problems_in(page, {mode: (problems, shot)})


# --- the browser, the server, a visit ------------------------------------------------------------


def _find_chromium() -> str | None:
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _no_browser(reason: str) -> None:
    banner = "!" * 78
    message = (
        f"\n{banner}\n!! BROWSER TEST NOT RUN: {reason}.\n!! The website was NOT checked in a browser. "
        f"Install Debian's chromium (see .ci/run).\n{banner}"
    )
    if os.environ.get("REQUIRE_BROWSER") == "1":
        pytest.fail(f"REQUIRE_BROWSER=1, but {reason}.{message}", pytrace=False)
    print(message, file=sys.stderr)
    pytest.skip(f"BROWSER TEST NOT RUN: {reason}")


# The browser fixture is in tests/conftest.py: one Playwright per process, shared with the widget's test
# (two sync Playwrights in one process refuse to start).


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on a free loopback port; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def site() -> Iterator[str]:
    if not (SITE / "index.html").is_file():
        pytest.fail(f"no built site in {SITE}: run `make book` first", pytrace=False)
    with serve(SITE) as base:
        yield base


@dataclass
class Visit:
    """What happened on the wire and in the console while a page was open."""

    base: str
    blocked: list[str] = field(default_factory=list)  # requests to anything but the local server
    failed: list[str] = field(default_factory=list)  # local requests that failed
    errors: list[str] = field(default_factory=list)  # console errors, uncaught exceptions

    def problems(self) -> list[str]:
        return (
            [f"request leaves the site (blocked): {url}" for url in self.blocked]
            + [f"local request failed: {what}" for what in self.failed]
            + self.errors
        )


# One browser context per kind of visit (light or dark, JavaScript on or off), kept for the session:
# each visit is a new page in it, so the pages share the HTTP cache as a reader's tabs do, and the
# scripts every page loads (MathJax, Vega, the theme) are not fetched and compiled again each time
# (a new context per visit cost about a fifth of the browser test's time).
_CONTEXTS: dict[tuple[int, bool, bool], Any] = {}


def _context(browser: Any, dark: bool, javascript: bool) -> Any:
    key = (id(browser), dark, javascript)
    if key not in _CONTEXTS or _CONTEXTS[key].browser is not browser:  # a new browser may reuse an id
        _CONTEXTS[key] = browser.new_context(
            color_scheme="dark" if dark else "light", java_script_enabled=javascript, viewport=VIEWPORT,
            service_workers="block")
    return _CONTEXTS[key]


@contextmanager
def visit(
    browser: Any, base: str, *, dark: bool = False, javascript: bool = True, viewport: dict | None = None
) -> Iterator[tuple[Any, Visit]]:
    """A new page (in the context of its kind, see ``_context``); every request for anything but
    ``base`` is recorded (and fails: no host name resolves, see ``CHROMIUM_FLAGS``)."""
    page = _context(browser, dark, javascript).new_page()
    if viewport and viewport != VIEWPORT:
        page.set_viewport_size(viewport)
    record = Visit(base)

    def on_request(request: Any) -> None:
        # data: and blob: URLs never leave the page; anything else not on the local server does.
        if not request.url.startswith((base, "data:", "blob:")):
            record.blocked.append(request.url)

    page.on("request", on_request)
    page.set_default_timeout(30_000)

    def on_console(message: Any) -> None:
        if message.type == "error":
            where = message.location.get("url", "")
            record.errors.append(f"console error: {message.text} ({where})")

    page.on("console", on_console)
    page.on("pageerror", lambda err: record.errors.append(f"uncaught exception: {err}"))
    page.on("response", lambda r: r.status >= 400 and record.failed.append(f"HTTP {r.status} {r.url}"))

    def on_failed(request: Any) -> None:
        # With JavaScript off, Chromium refuses the theme's <link rel="preload" as="script"> ("csp").
        refused_script = not javascript and request.failure == "csp" and request.url.split("?")[0].endswith(".js")
        if request.url.startswith(base) and not refused_script:
            record.failed.append(f"{request.failure} {request.url}")

    page.on("requestfailed", on_failed)
    try:
        yield page, record
    finally:
        page.close()


def open_page(page: Any, record: Visit, path: str) -> list[str]:
    response = page.goto(record.base + path, wait_until="load")
    if response is None or response.status != 200:
        return [f"loading {path} gave {response and response.status}"]
    page.evaluate("() => document.fonts.ready.then(() => true)")
    return []


# --- what is checked on a page (JavaScript run in the page) --------------------------------------

MATH_JS = """async () => {
  const maths = Array.from(document.querySelectorAll(".math"));
  if (!maths.length) return {count: 0, loaded: !!window.MathJax, bad: []};
  if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) return {count: maths.length, loaded: false, bad: []};
  await MathJax.startup.promise;
  const bad = maths.filter(m => !m.querySelector("mjx-container") || m.querySelector("mjx-merror"));
  return {count: maths.length, loaded: true, bad: bad.map(m => m.textContent.trim().slice(0, 80))};
}"""

# The theme's icons, drawn by its CSS from Font Awesome's web font, and the scripts
# _templates/layout.html leaves out (fontawesome.js, which would redraw the icons as SVG; the search
# scripts, which only search.html uses): which of them the page loads, how many icons it shows, and
# those drawn blank (no glyph of that font before them, or no width) or over the text of a box beside them.
ICONS_JS = """async () => {
  await document.fonts.ready;
  const scripts = Array.from(document.scripts).map(s => s.getAttribute("src") || "")
    .filter(src => /(^|\\/)(fontawesome|searchtools|language_data|searchindex)\\.js/.test(src));
  const icons = Array.from(document.querySelectorAll("i[class*='fa-'], span[class*='fa-']"))
    .filter(e => e.getClientRects().length > 0);
  const blank = icons.filter(e => {
    const glyph = getComputedStyle(e, "::before");
    return !/^"./.test(glyph.content) || !/Font Awesome/.test(glyph.fontFamily) || e.getBoundingClientRect().width === 0;
  }).map(e => e.className);
  const loaded = Array.from(document.fonts).filter(f => /Font Awesome/.test(f.family) && f.status === "loaded").length;
  // An icon beside a text box (the search form's magnifying glass) must not lie over where its text goes.
  const over = icons.filter(e => Array.from(e.parentElement.querySelectorAll(":scope > input")).some(input => {
    const box = input.getBoundingClientRect(), icon = e.getBoundingClientRect();
    const textLeft = box.left + parseFloat(getComputedStyle(input).paddingLeft);
    return box.width > 0 && icon.right > textLeft && icon.left < box.right && icon.bottom > box.top && icon.top < box.bottom;
  })).map(e => e.className);
  return {scripts, icons: icons.length, blank, loaded, over};
}"""

IMAGES_JS = """async () => {
  const images = Array.from(document.images).filter(i => i.getAttribute("src"));
  images.forEach(i => { i.loading = "eager"; });
  await Promise.all(images.map(i => i.complete ? null : new Promise(done => {
    i.addEventListener("load", done); i.addEventListener("error", done); setTimeout(done, 10000);
  })));
  return {count: images.length, broken: images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.currentSrc || i.src)};
}"""

CHARTS_PENDING_JS = """() => Array.from(document.querySelectorAll(".tt-altair")).every(b => b.dataset.ttStatus !== "static")"""

# Per chart: how it was drawn, how many data marks it has, whether any mark carries a tooltip.
CHARTS_JS = """() => Array.from(document.querySelectorAll(".tt-altair")).map(box => {
  const view = box.ttView, live = box.querySelector(".tt-altair-live");
  const svg = live && live.querySelector("svg.marks, svg"), canvas = live && live.querySelector("canvas");
  let items = 0, tooltips = 0;
  (function walk(node) {
    if (!node) return;
    if (node.marktype !== undefined && node.role === "mark") items += (node.items || []).length;
    if (node.tooltip != null) tooltips += 1;
    (node.items || []).forEach(walk);
  })(view && view.scenegraph().root);
  const drawn = svg ? svg.querySelectorAll("g.role-mark > *").length
                    : (canvas && canvas.width > 0 && canvas.height > 0 ? items : 0);
  return {id: box.id, status: box.dataset.ttStatus, theme: box.dataset.ttTheme || null,
          renderer: svg ? "svg" : (canvas ? "canvas" : null), drawn: drawn, items: items, tooltips: tooltips,
          inputs: box.querySelectorAll(".vega-bindings select, .vega-bindings input").length,
          label: (box.querySelector("svg") && box.querySelector("svg").getAttribute("aria-label")) || ""};
})"""

# Points (viewport coordinates) over marks that carry a tooltip, to hover one after another: the
# middle and outline of areas (rects, symbols, bars) first, then points along lines and rules.
TOOLTIP_POINTS_JS = """(id) => {
  const box = document.getElementById(id), view = box.ttView, areas = [], strokes = [], seen = new Set();
  box.scrollIntoView({block: "center"});
  function add(list, x, y) {
    if (x >= 0 && y >= 0 && x < innerWidth && y < innerHeight && box.contains(document.elementFromPoint(x, y))) list.push([x, y]);
  }
  (function walk(node) {
    if (!node || areas.length + strokes.length > 40) return;
    const el = node._svg || (node.mark && node.mark.items && node.mark.items[0] && node.mark.items[0]._svg);
    if (node.tooltip != null && el && !seen.has(el)) {
      seen.add(el);
      const list = ["line", "trail", "rule"].includes(node.mark && node.mark.marktype) ? strokes : areas;
      const r = el.getBoundingClientRect();
      if (list === areas) add(list, r.left + r.width / 2, r.top + r.height / 2);
      if (el.getTotalLength && el.getScreenCTM) {
        const length = el.getTotalLength(), m = el.getScreenCTM();
        for (const f of [0.5, 0.25, 0.75]) {
          const p = el.getPointAtLength(f * length);
          add(list, m.a * p.x + m.c * p.y + m.e, m.b * p.x + m.d * p.y + m.f);
        }
      }
    }
    (node.items || []).forEach(walk);
  })(view.scenegraph().root);
  return areas.concat(strokes).slice(0, 30);
}"""

TOOLTIP_SHOWN_JS = """() => {
  const t = document.getElementById("vg-tooltip-element");
  return t && t.classList.contains("visible") && t.textContent.trim() ? t.textContent.trim() : null;
}"""

DRAWING_JS = """(id) => {
  const live = document.getElementById(id).querySelector(".tt-altair-live");
  const svg = live.querySelector("svg"), canvas = live.querySelector("canvas");
  return svg ? svg.innerHTML : (canvas ? canvas.toDataURL() : "");
}"""

# The lowest contrast between chart text and what is behind it (WCAG relative luminance).
CONTRAST_JS = """(id) => {
  function rgba(s) {
    const m = (s || "").match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const v = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
  }
  function luminance(c) {
    const [r, g, b] = c.slice(0, 3).map(x => { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  }
  function backdrop(el) {
    for (let e = el; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0.5) return c;
    }
    return [255, 255, 255, 1];
  }
  const box = document.getElementById(id), svg = box.querySelector(".tt-altair-live svg");
  if (!svg) return null;
  let back = backdrop(box);
  const rect = svg.querySelector("rect.background, path.background");
  const fill = rect && rgba(getComputedStyle(rect).fill);
  if (fill && fill[3] > 0.5) back = fill;
  let worst = null;
  for (const t of svg.querySelectorAll("text")) {
    const c = rgba(getComputedStyle(t).fill);
    if (!c || c[3] < 0.5 || !t.textContent.trim()) continue;
    const [a, b] = [luminance(c), luminance(back)];
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (!worst || ratio < worst.ratio) worst = {ratio: ratio, text: t.textContent.trim().slice(0, 40), fill: c.join(","), back: back.join(",")};
  }
  return worst;
}"""

BODY_CONTRAST_JS = """() => {
  function rgba(s) { const m = s.match(/rgba?\\(([^)]+)\\)/); const v = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number); return v; }
  function luminance(c) {
    const [r, g, b] = c.slice(0, 3).map(x => { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  }
  const text = document.querySelector("article p, main p, article, main") || document.body;
  const a = luminance(rgba(getComputedStyle(text).color)), b = luminance(rgba(getComputedStyle(document.body).backgroundColor));
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""

SETUP_CELLS_JS = """() => Array.from(document.querySelectorAll("div.cell")).filter(c => {
  const code = c.querySelector(".cell_input pre");
  return code && code.textContent.includes("%pip install") && code.textContent.includes("tested-transformer[book] @ git+");
}).map(c => !!c.querySelector(".tt-colab-setup-note"))"""

# How much of a page is code a reader has to scroll past, in its default state (collapsed cells stay
# collapsed): everything set as code that is on show, i.e. code cells' visible input, the library
# listings shown by `show_source` (a highlighted block in an HTML output), code blocks in the prose,
# and the text outputs printed in code boxes (stdout, stderr, plain-text values: what the issue
# measured as 24-32% of the chapters). For comparison, figures and tables. Heights in CSS pixels; the
# page is the article (the column of text, without the site's header and footer); `screens` is the
# whole document's height over the window's.
CODE_SHARE_JS = """() => {
  const article = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
  // Chromium keeps boxes for what a closed <details> hides (for find-in-page): a collapsed cell is
  // not on the page, whatever its box says.
  const shown = e => e.getClientRects().length > 0 && !e.closest("details:not([open])");
  const outermost = list => list.filter(shown).filter((e, _, all) => !all.some(o => o !== e && o.contains(e)));
  const height = list => outermost(list).reduce((sum, e) => sum + e.getBoundingClientRect().height, 0);
  const all = selector => Array.from(article.querySelectorAll(selector));
  const input = all(".cell .cell_input");
  const source = all(".cell_output .text_html div.highlight");
  const text = all(".cell_output .output.stream, .cell_output .output.text_plain, .cell_output .output.traceback, .cell_output .output.stderr");
  const prose = all("div.highlight").filter(e => !e.closest(".cell"));
  return {page: article.getBoundingClientRect().height,
          document: document.documentElement.scrollHeight, window: innerHeight,
          input: height(input), source: height(source), text: height(text), prose: height(prose),
          code: height(input.concat(source, text, prose)),
          figures: height(all(".cell_output img, .cell_output .tt-altair, .cell_output table, article img"))};
}"""

# Charts are redrawn to their column's width when it changes (chart_embed.js, after a collapsed output
# is opened): wait until every chart on show has been fitted to the width it has now.
CHARTS_FITTED_JS = """() => Array.from(document.querySelectorAll(".tt-altair"))
  .filter(b => b.getClientRects().length > 0 && b.clientWidth > 0)
  .every(b => b.dataset.ttStatus === "error" || b.dataset.ttRoom === String(b.clientWidth))"""

# Every element a reader could find cut off, with what is wrong with it. Collapsed cells are opened
# first (machinery a reader opens must fit too). An element is "over" when it is wider than its own
# box (its content overflows) or sticks out of the column. It is fine only:
# - on screen, inside a box that scrolls sideways (overflow-x auto/scroll), sits in the column and
#   shows the scroll cue (data-tt-scroll from _static/scroll-cue.js, and a mask that fades the hidden
#   edge): a box that scrolls with no sign of it hides its content from a phone reader;
# - never for a chart (`charts`: they are redrawn or scaled to fit their column), nor on paper
#   (`paper`: nothing scrolls there): there, over is cut.
# A chart also must not cut its own text (titles, labels): every text of its drawing lies in its box.
# The page itself must not scroll sideways.
CLIPPED_JS = """({paper}) => {
  const article = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
  const box = article.getBoundingClientRect(), pad = getComputedStyle(article);
  const col = {left: box.left + parseFloat(pad.paddingLeft), right: box.right - parseFloat(pad.paddingRight)};
  col.width = col.right - col.left;
  const shown = e => e.getClientRects().length > 0;
  const text = e => (e.getAttribute("aria-label") || e.getAttribute("alt")
    || (e.querySelector("img[alt]") && e.querySelector("img[alt]").alt)
    || (e.querySelector("svg[aria-label]") && e.querySelector("svg[aria-label]").getAttribute("aria-label"))
    || e.innerText || e.textContent || e.getAttribute("src") || "").trim().replace(/\\s+/g, " ").slice(0, 70);
  const sticksOut = r => r.right > col.right + 1 || r.left < col.left - 1;
  const scrolls = e => ["auto", "scroll"].includes(getComputedStyle(e).overflowX);
  const overflows = e => e.scrollWidth > e.clientWidth + 1;
  const masked = e => [getComputedStyle(e).maskImage, getComputedStyle(e).webkitMaskImage].some(m => m && m !== "none");
  const cued = e => e.hasAttribute("data-tt-scroll") && masked(e);
  function scroller(e) {
    for (let a = e; a && a !== article.parentElement; a = a.parentElement) if (scrolls(a)) return a;
    return null;
  }
  const found = [], seen = new Set(), uncued = new Set();
  function add(e, kind, how) {
    seen.add(e);
    const r = e.getBoundingClientRect();
    found.push({kind: kind, how: how, width: Math.round(Math.max(e.scrollWidth, r.width)),
                room: Math.round(Math.min(e.clientWidth || r.width, col.width)), text: text(e)});
  }
  const kinds = [["chart", ".tt-altair"], ["code", "pre"], ["table", "table"],
                 ["math", "mjx-container[display='true'], div.math"], ["figure", "figure"], ["image", "img"],
                 ["output", ".cell_output > .output, .cell_output > div"],
                 ["inline code", "code:not(pre code)"], ["inline math", "mjx-container:not([display='true'])"]];
  for (const [kind, selector] of kinds) {
    for (const e of article.querySelectorAll(selector)) {
      if (!shown(e) || seen.has(e) || (kind !== "chart" && e.closest(".tt-altair"))) continue;
      const r = e.getBoundingClientRect();
      const inline = kind.startsWith("inline") || getComputedStyle(e).display.startsWith("inline");
      const over = sticksOut(r) || (!inline && overflows(e));
      if (kind === "chart") {
        const inside = e.getBoundingClientRect();
        const cut = Array.from(e.querySelectorAll(".tt-altair-live svg text")).filter(t => {
          const b = t.getBoundingClientRect();
          return b.width > 0 && (b.left < inside.left - 1 || b.right > inside.right + 1);
        });
        if (over) add(e, kind, "wider than its column (charts are redrawn or scaled to fit)");
        else if (cut.length) add(e, kind, `text cut at the chart's edge: ${cut.map(t => t.textContent).join(" | ").slice(0, 60)}`);
        continue;
      }
      if (!over) continue;
      if (paper) { add(e, kind, "wider than the page (paper does not scroll)"); continue; }
      // the box that scrolls: the element itself when its content is what overflows, else an ancestor
      const s = scrolls(e) && overflows(e) && !sticksOut(r) ? e : scroller(e.parentElement);
      if (!s || sticksOut(s.getBoundingClientRect())) add(e, kind, "wider than the column, in no box that scrolls");
      else if (!cued(s) && !uncued.has(s)) {  // one report per box (a table, its output, the maths in it)
        uncued.add(s);
        add(e, kind, "in a box that scrolls sideways with no visible cue");
      }
    }
  }
  const page = document.documentElement;
  if (page.scrollWidth > innerWidth + 1) {
    found.push({kind: "page", how: "the page scrolls sideways", width: page.scrollWidth, room: innerWidth, text: ""});
  }
  return found;
}"""

# Opens every toggle of the page (not a chart's own "..." menu, which drops down over the page).
OPEN_COLLAPSED_JS = """() => {
  const article = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
  article.querySelectorAll("details").forEach(d => { if (!d.closest(".tt-altair")) d.open = true; });
  return new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => {
    if (window.ttTables) window.ttTables.fit();
    if (window.ttScrollCues) window.ttScrollCues.update();
    done(true);
  })));
}"""

# Figure text a reader can read: no text of a figure, a drawing or a chart smaller than MIN_TEXT_PX CSS
# pixels as shown (issue 44), measured per figure as its smallest text:
# - a matplotlib PNG: its smallest text is 9 pt (tick labels, legends: transformer_lib.book.style) at
#   its 100 dpi, 12.5 px as drawn, times the scale it is shown at (its shown over its drawn width). On
#   a phone _static/figures.js keeps every figure at least that large (what does not fit scrolls
#   inside its output box); at a laptop's width each fits as drawn;
# - an SVG drawing (drawn-figure, show_svg): the SVG read back, each text's size (matplotlib sets text
#   as paths, "scale(s -s)" of glyphs 100 units high, or as <text> with a font size), in its units,
#   times the drawing's scale on the page (shown width over its viewBox's);
# - a live chart: each <text>'s font size times the chart's scale.
MIN_TEXT_PX = 9
PNG_SMALLEST_TEXT_PX = 9 * 100 / 72
MIN_FIGURE_SCALE = MIN_TEXT_PX / PNG_SMALLEST_TEXT_PX  # 0.72; _static/figures.js uses the same
FIGURE_TEXT_JS = """async (pngText) => {
  const article = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
  const shown = e => e.getClientRects().length > 0 && e.getBoundingClientRect().width > 0;
  const name = i => (i.alt || i.src.split("/").pop()).slice(0, 70);
  const found = [];
  for (const img of article.querySelectorAll("img:not(.tt-altair-static)")) {
    if (!shown(img) || !img.naturalWidth) continue;
    const width = img.getBoundingClientRect().width;
    if (!img.src.split("?")[0].endsWith(".svg")) {
      if (!img.closest(".cell_output")) continue;  // a picture of the prose, not a figure of the book
      found.push({kind: "figure", text: name(img), smallest_px: pngText * width / img.naturalWidth,
                  shown: Math.round(width), drawn: img.naturalWidth});
      continue;
    }
    let svg;
    try { svg = new DOMParser().parseFromString(await (await fetch(img.src)).text(), "image/svg+xml").documentElement; }
    catch (e) { continue; }
    const box = (svg.getAttribute("viewBox") || "").split(/[\\s,]+/).map(Number);
    const units = box.length === 4 && box[2] > 0 ? box[2] : parseFloat(svg.getAttribute("width"));
    if (!units) continue;
    const sizes = [];
    for (const g of svg.querySelectorAll("g[transform*='scale(']")) {
      const m = /scale\\(([\\d.eE+-]+)[ ,]+-([\\d.eE+-]+)\\)/.exec(g.getAttribute("transform"));
      if (m) sizes.push(parseFloat(m[1]) * 100);  // matplotlib's text as paths: glyphs 100 units high
    }
    for (const text of svg.querySelectorAll("text")) {
      const style = text.getAttribute("style") || "";
      const m = /font-size:\\s*([\\d.]+)/.exec(style) || /font:[^;]*?([\\d.]+)px/.exec(style)
        || /^([\\d.]+)/.exec(text.getAttribute("font-size") || "");
      if (m) sizes.push(parseFloat(m[1]));
    }
    if (sizes.length) found.push({kind: "drawing", text: name(img), smallest_px: Math.min(...sizes) * width / units,
                                  shown: Math.round(width), drawn: units});
  }
  for (const svg of article.querySelectorAll(".tt-altair-live svg")) {
    if (!shown(svg) || !svg.width.baseVal.value) continue;
    const scale = svg.getBoundingClientRect().width / svg.width.baseVal.value;
    const sizes = Array.from(svg.querySelectorAll("text")).filter(t => t.textContent.trim())
      .map(t => parseFloat(getComputedStyle(t).fontSize)).filter(s => s > 0);
    const box = svg.closest(".tt-altair");
    if (sizes.length) found.push({kind: "chart", text: (box.getAttribute("aria-label") || box.id || "chart").slice(0, 70),
                                  smallest_px: Math.min(...sizes) * scale, shown: Math.round(svg.getBoundingClientRect().width),
                                  drawn: svg.width.baseVal.value});
  }
  return found.map(f => ({...f, smallest_px: Math.round(f.smallest_px * 10) / 10}));
}"""

# Printed results (what a cell prints: checks, summaries, the profile line) wrap at their box
# (site.css); a printed table keeps its lines (printed-results.js marks it) and is reported when it is
# wider than its box: print it as a table. Tables: one wider than its box hides columns, with its row
# labels held at the left (sticky) or not; tables.js wraps such a table's headers, then sets one still
# too wide as stacked rows, so none is.
# The set-up (the Colab cell and the section's own set-up cell) is one line on the page: at most
# MAX_SETUP_LINES of the bar's own line height, in the page's default state.
MAX_SETUP_LINES = 1
READING_JS = """() => {
  const article = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
  const shown = e => e.getClientRects().length > 0 && !e.closest("details:not([open])");
  const line = e => (e.innerText || e.textContent || "").trim().replace(/\\s+/g, " ").slice(0, 70);
  const printed = Array.from(article.querySelectorAll(".cell_output .output.stream pre, .cell_output .output.stderr pre"))
    .filter(shown).map(e => ({text: line(e), width: e.scrollWidth, room: e.clientWidth,
                              table: e.classList.contains("tt-printed-table")}));
  const scroller = t => {
    for (let e = t.parentElement; e && e !== article; e = e.parentElement)
      if (["auto", "scroll"].includes(getComputedStyle(e).overflowX)) return e;
    return t.parentElement;
  };
  const tables = Array.from(article.querySelectorAll(".cell_output table")).filter(shown).map(t => {
    const box = scroller(t), first = t.querySelector("tr > :first-child");
    return {text: line(t.caption || t.tHead || t), width: Math.round(t.getBoundingClientRect().width), room: box.clientWidth,
            held: !!first && getComputedStyle(first).position === "sticky", stacked: t.classList.contains("tt-stacked")};
  });
  const setup = Array.from(article.querySelectorAll(".tt-colab-setup")).filter(shown).map(c => {
    const bar = c.querySelector("summary") || c;
    const lineHeight = parseFloat(getComputedStyle(bar.querySelector(".admonition-title") || bar).lineHeight) || 24;
    const r = c.getBoundingClientRect(), s = bar.getBoundingClientRect();
    return {height: Math.round(r.height), bar_height: Math.round(s.height), line_height: lineHeight,
            lines: Math.round((s.height - parseFloat(getComputedStyle(bar).paddingTop) - parseFloat(getComputedStyle(bar).paddingBottom)) / lineHeight * 10) / 10,
            above_first_sentence: Math.round(r.height), text: line(bar)};
  });
  return {printed: printed, tables: tables, setup: setup};
}"""

# Code a reader must scroll past, as a share of a page's height at a laptop's width (the input of cells
# left open, the library listings, the code blocks of the prose and text printed in code boxes): the
# book is prose, figures and checks first. Machinery and check-only cells are collapsed (`hide-input`). Issue 25.
MAX_CODE_SHARE = 0.20
# The longest a page may be, in screens (the document's height over the window's), in its default state:
# a section a reader finishes in one sitting. Issue 25: 12 screens at 1280x900, 18 at 390x844.
MAX_SCREENS = {"desktop": 12, "phone": 18}
# Pages looked up, not read in one sitting, have no length limit (everything else still holds: nothing cut
# or scrolling sideways, code share, figures): the library's reference, each module folded under its name.
REFERENCE_PAGES = {"book/api.html"}
# Matplotlib figures are drawn for a white page; in dark mode the site inverts them (_static/site.css)
# instead of showing them as white cards. The figures that are not inverted:
WHITE_FIGURES_JS = """() => Array.from(document.querySelectorAll(".cell_output img:not(.tt-altair-static)"))
  .filter(i => i.getClientRects().length && !getComputedStyle(i).filter.includes("invert"))
  .map(i => (i.alt || i.src.split("/").pop()).slice(0, 70))"""

RAW_CHART_TEXT = re.compile(r"alt\.\w*Chart\(\.\.\.\)|<VegaLite \d+ object>")


def check_math(page: Any) -> tuple[dict, list[str]]:
    math = page.evaluate(MATH_JS)
    problems = []
    if math["count"] and not math["loaded"]:
        problems.append(f"{math['count']} math elements but MathJax did not load")
    problems += [f"math not rendered by MathJax: {text!r}" for text in math["bad"]]
    return math, problems


def check_icons(page: Any, path: str) -> list[str]:
    """The icons drawn from the web font, and none of the scripts _templates/layout.html leaves out
    (search.html loads the search scripts itself)."""
    icons = page.evaluate(ICONS_JS)
    scripts = [s for s in icons["scripts"] if path != "search.html" or "fontawesome" in s]
    problems = [f"the page loads {s}, which _templates/layout.html leaves out" for s in scripts]
    if icons["icons"] and not icons["loaded"]:
        problems.append(f"{icons['icons']} icons shown, but no Font Awesome web font loaded")
    problems += [f"icon drawn blank: {name}" for name in icons["blank"]]
    problems += [f"icon lies over the text of the box beside it: {name}" for name in icons["over"]]
    return problems


def check_images(page: Any) -> tuple[dict, list[str]]:
    images = page.evaluate(IMAGES_JS)
    return images, [f"image did not load: {src}" for src in images["broken"]]


def wait_for_charts(page: Any) -> list[str]:
    try:
        page.wait_for_function(CHARTS_PENDING_JS, timeout=CHART_TIMEOUT_MS)
    except Exception:  # Playwright's TimeoutError; the state is reported below
        return [f"charts still not drawn after {CHART_TIMEOUT_MS / 1000:.0f} s"]
    return []


def check_chart_drawn(chart: dict, theme: str) -> list[str]:
    problems = []
    if chart["status"] != "rendered":
        problems.append(f"chart {chart['id']} was not drawn (status {chart['status']!r}; see console errors)")
    elif chart["drawn"] == 0:
        problems.append(f"chart {chart['id']} was drawn without marks ({chart['renderer']})")
    elif chart["theme"] != theme:
        problems.append(f"chart {chart['id']} drawn for the {chart['theme']} theme on a {theme} page")
    return problems


def check_contrast(page: Any, chart: dict) -> tuple[float | None, list[str]]:
    worst = page.evaluate(CONTRAST_JS, chart["id"])
    if worst is None:
        return None, []  # a canvas chart: no text to read back
    if worst["ratio"] < MIN_CONTRAST:
        return worst["ratio"], [
            f"chart {chart['id']}: text {worst['text']!r} (rgb {worst['fill']}) on rgb {worst['back']} "
            f"has contrast {worst['ratio']:.1f} < {MIN_CONTRAST}"
        ]
    return worst["ratio"], []


def hover_for_tooltip(page: Any, chart_id: str) -> str | None:
    """Hover the chart's tooltip-carrying marks until a tooltip shows; returns its text."""
    points = page.evaluate(TOOLTIP_POINTS_JS, chart_id)
    if not points:  # e.g. a canvas chart: sweep a grid over it
        box = page.locator(f"#{chart_id} .tt-altair-live").bounding_box()
        if box:
            points = [
                (box["x"] + box["width"] * fx / 8, box["y"] + box["height"] * fy / 8)
                for fy in range(1, 8)
                for fx in range(1, 8)
            ]
    for x, y in points:
        page.mouse.move(x, y)
        try:
            handle = page.wait_for_function(TOOLTIP_SHOWN_JS, timeout=1000)
        except Exception:  # not here: try the next point
            continue
        text = handle.json_value()
        page.mouse.move(1, 1)
        return text
    return None


def exercise_inputs(page: Any, chart_id: str) -> tuple[int, list[str]]:
    """Change each bound input of a chart (a head or layer picker); each must redraw the chart."""
    inputs = page.locator(f"#{chart_id} .vega-bindings select, #{chart_id} .vega-bindings input")
    problems, changed = [], 0
    for i in range(inputs.count()):
        control = inputs.nth(i)
        before = page.evaluate(DRAWING_JS, chart_id)
        kind = control.evaluate("e => e.tagName === 'SELECT' ? 'select' : e.type")
        if kind == "select":
            values = control.evaluate("e => Array.from(e.options).map(o => o.value)")
            current = control.input_value()
            others = [v for v in values if v != current]
            if not others:
                continue
            control.select_option(others[-1])
        elif kind == "checkbox" or (kind == "radio" and not control.is_checked()):
            control.click()
        elif kind == "range":
            control.evaluate(
                "e => { e.value = (Number(e.value) === Number(e.max) ? e.min : e.max);"
                " e.dispatchEvent(new Event('input', {bubbles: true})); }"
            )
        else:
            continue
        try:
            page.wait_for_function(f"(b) => ({DRAWING_JS})({json.dumps(chart_id)}) !== b", arg=before, timeout=3000)
            changed += 1
        except Exception:
            problems.append(f"chart {chart_id}: changing its {kind} input did not redraw it")
    return changed, problems


# --- the site, page by page ------------------------------------------------------------------------


def test_site_is_built() -> None:
    assert PAGES, f"no pages in {SITE}: run `make book` before the browser test"
    assert ROOT_PAGE in PAGES, f"the book's first page {ROOT_PAGE} is missing from {SITE}"


def test_index_redirects_to_the_first_page(browser: Any, site: str) -> None:
    with visit(browser, site) as (page, record):
        page.goto(site)
        page.wait_for_url(f"**/{ROOT_PAGE}")
        assert not record.problems(), record.problems()


def light_mode_checks(page: Any, record: Visit, path: str) -> tuple[list[str], Path | None]:
    """Turns the open page ``path`` (seen in dark mode on a phone) to light mode at a laptop's size
    (``switch``) and checks it (see the module's docstring); writes its "light" report and returns
    ``(problems, screenshot)``."""
    shot = screenshot_path(path, "light")
    before = set(record.problems())  # what the dark-mode checks of this visit reported already
    problems = switch(page, "desktop", dark=False)
    math, found = check_math(page)
    problems += found
    problems += wait_for_charts(page)
    charts = page.evaluate(CHARTS_JS)
    tooltips_shown, inputs_changed, contrasts = 0, 0, []
    for chart in charts:
        problems += check_chart_drawn(chart, "light")
        if chart["status"] != "rendered":
            continue
        ratio, found = check_contrast(page, chart)
        problems += found
        contrasts.append(ratio)
        if chart["tooltips"]:
            if hover_for_tooltip(page, chart["id"]) is None:
                problems.append(f"chart {chart['id']} has {chart['tooltips']} tooltips, but hovering showed none")
            else:
                tooltips_shown += 1
        changed, found = exercise_inputs(page, chart["id"])
        inputs_changed += changed
        problems += found
    images, found = check_images(page)
    problems += found

    outputs = " ".join(page.locator(".cell_output").all_inner_texts())
    if RAW_CHART_TEXT.search(outputs):
        problems.append(
            "a chart shows as text (altair's default renderer): call transformer_lib.book.charts.enable_charts() before displaying charts"
        )
    setup_cells = page.evaluate(SETUP_CELLS_JS)
    if not all(setup_cells):
        problems.append("a Colab set-up cell has no note saying what it is (_ext/book_site.py)")

    links = page.eval_on_selector_all(f'a[href^="{COLAB}"]', "as => as.map(a => a.href)")
    notebook = notebook_of(path)
    download, pending = None, []
    # Every Colab link on any page (a notebook's own button, the introduction's badges, a landing
    # page's list of sections) opens a notebook of the book's repository. A badge for a notebook
    # not written yet is listed in the report, not failed (sections land one by one).
    pattern = re.compile(re.escape(colab_url("@")).replace("@", r"(book/[\w/.-]+\.ipynb)") + "$")
    for href in links:
        match = pattern.match(href)
        if not match:
            problems.append(f"Colab link {href} does not open a notebook of the book in {REPO_URL}@{BRANCH}")
        elif not (ROOT / match.group(1)).is_file():
            pending.append(match.group(1))
    if notebook:
        if len(setup_cells) != 1:
            problems.append(f"notebook page has {len(setup_cells)} Colab set-up cells, expected 1")
        if colab_url(notebook) not in links:
            problems.append(f"no Open-in-Colab link to this page's own notebook ({colab_url(notebook)})")
        download = page.eval_on_selector_all(
            "a.btn-download-source-button[href$='.ipynb']", "as => as.map(a => a.href)"
        )
        if len(download) != 1 or not download[0].endswith(f"/_sources/{notebook}"):
            problems.append(f"expected one .ipynb download button for {notebook}, found {download}")
        else:
            served = page.request.get(download[0])
            committed = json.loads((ROOT / notebook).read_text(encoding="utf-8"))
            if not served.ok or served.json() != committed:
                problems.append(f"the download button does not give the committed {notebook}")
    elif path == ROOT_PAGE and links:
        # The introduction's badges: every chapter has at least one (to one of its notebooks).
        badged = {chapter_of(m.group(1)) for m in map(pattern.match, links) if m}
        chapters = sorted({chapter_of(n) for n in map(notebook_of, PAGES) if n})
        problems += [f"no Colab badge for chapter {c}" for c in chapters if c not in badged]

    problems += [p for p in record.problems() if p not in before]
    shot = _screenshot(page, shot, problems)
    write_report(
        path,
        "light",
        {
            "math": math["count"],
            "charts": len(charts),
            "tooltips_shown": tooltips_shown,
            "inputs_changed": inputs_changed,
            "min_chart_contrast": min(filter(None, contrasts), default=None),
            "images": images["count"],
            "colab_links": links,
            "download": download,
            "badges_for_chapters_not_written_yet": pending,
            "blocked": record.blocked,
            "problems": problems,
            "screenshot": shot and shown_path(shot),
        },
    )
    return problems, shot


def dark_mode_checks(page: Any, record: Visit, path: str) -> tuple[list[str], Path | None]:
    """Opens ``path`` in ``page`` (of a dark-mode context, at a phone's size) and checks it in dark
    mode: the theme follows the system, its icons are drawn (``check_icons``), text and chart text stand
    out, no figure stays white; writes its "dark" report and returns ``(problems, screenshot)``."""
    shot = screenshot_path(path, "dark")
    problems = open_page(page, record, path)
    theme = page.evaluate("() => document.documentElement.dataset.theme")
    if theme != "dark":
        problems.append(f"the page did not follow the system's dark mode (data-theme={theme!r})")
    body = page.evaluate(BODY_CONTRAST_JS)
    if body < MIN_CONTRAST:
        problems.append(f"body text contrast {body:.1f} < {MIN_CONTRAST}")
    problems += check_icons(page, path)
    math, found = check_math(page)
    problems += found
    problems += wait_for_charts(page)
    charts = page.evaluate(CHARTS_JS)
    contrasts = []
    for chart in charts:
        problems += check_chart_drawn(chart, "dark")
        if chart["status"] == "rendered":
            ratio, found = check_contrast(page, chart)
            contrasts.append(ratio)
            problems += found
    images, found = check_images(page)
    problems += found
    problems += [f"a matplotlib figure stays white in dark mode: {f}" for f in page.evaluate(WHITE_FIGURES_JS)]
    problems += record.problems()
    shot = _screenshot(page, shot, problems)
    write_report(
        path,
        "dark",
        {
            "viewport": page.viewport_size,
            "math": math["count"],
            "charts": len(charts),
            "min_chart_contrast": min(filter(None, contrasts), default=None),
            "body_contrast": round(body, 1),
            "images": images["count"],
            "blocked": record.blocked,
            "problems": problems,
            "screenshot": shot and shown_path(shot),
        },
    )
    return problems, shot


# The page after the system's colour scheme changed: the theme shows it, and every chart drawn is
# redrawn for it (chart_embed.js watches the theme).
THEME_SHOWN_JS = """(theme) => document.documentElement.dataset.theme === theme
  && Array.from(document.querySelectorAll(".tt-altair")).every(b => b.dataset.ttStatus !== "rendered" || b.dataset.ttTheme === theme)"""


# After the window is resized: the theme's CSS transitions run to their end (at a laptop's width the
# primary sidebar slides in over 0.25 s; a chart fitted meanwhile fits a column that is still moving).
SETTLED_JS = """() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"""
TRANSITIONS_ENDED_JS = """() => !document.getAnimations().some(a => a instanceof CSSTransition && a.playState === "running")"""


def charts_fitted(page: Any, after: str) -> list[str]:
    """Waits until every chart on show is drawn for its column's width (``CHARTS_FITTED_JS``), once the
    page's transitions have ended (``TRANSITIONS_ENDED_JS``)."""
    page.evaluate(SETTLED_JS)  # the new size's styles applied: its transitions have started
    try:
        page.wait_for_function(TRANSITIONS_ENDED_JS, timeout=CHART_TIMEOUT_MS)
        page.wait_for_function(CHARTS_FITTED_JS, timeout=CHART_TIMEOUT_MS)
    except Exception:  # Playwright's TimeoutError: the charts are measured as they are
        return [f"charts were not redrawn for their column's width within {CHART_TIMEOUT_MS / 1000:.0f} s of {after}"]
    return []


def switch(page: Any, viewport: str, *, dark: bool) -> list[str]:
    """The open page at another size (``LAYOUT_VIEWPORTS``) in the other colour scheme, as when a reader
    turns the system's dark mode off on a wider screen: the theme follows the system (the site's
    "auto" mode listens to it), and every chart is redrawn for the theme and its column's new width."""
    theme = "dark" if dark else "light"
    page.emulate_media(color_scheme=theme)
    page.set_viewport_size(LAYOUT_VIEWPORTS[viewport])
    try:
        page.wait_for_function(THEME_SHOWN_JS, arg=theme, timeout=CHART_TIMEOUT_MS)
    except Exception:  # Playwright's TimeoutError
        shown = page.evaluate("() => document.documentElement.dataset.theme")
        return [f"the page did not follow the system's switch to {theme} mode (data-theme={shown!r}), "
                "or its charts were not redrawn for it"]
    return charts_fitted(page, f"the window became {viewport}-sized")


@dataclass
class Layout:
    """What the layout check found at one viewport (``LAYOUT_VIEWPORTS``) of one visit."""

    viewport: str
    problems: list[str] = field(default_factory=list)
    share: dict = field(default_factory=dict)  # heights in the default state (``CODE_SHARE_JS``); not on paper
    clipped: list[dict] = field(default_factory=list)  # what is cut with every toggle open (``CLIPPED_JS``)
    shrunk: list[dict] = field(default_factory=list)  # figures whose smallest text is under MIN_TEXT_PX (``FIGURE_TEXT_JS``)
    figures: list[dict] = field(default_factory=list)  # every figure's smallest text (``FIGURE_TEXT_JS``)
    reading: dict = field(default_factory=dict)  # printed results, tables (opened) and the set-up (default) (``READING_JS``)
    shot: Path | None = None

    def resize(self, page: Any) -> None:
        if page.viewport_size != LAYOUT_VIEWPORTS[self.viewport]:
            page.set_viewport_size(LAYOUT_VIEWPORTS[self.viewport])
            self.problems += charts_fitted(page, f"the window became {self.viewport}-sized")

    def snapshot(self, page: Any, path: str) -> None:
        """The phone's full-page screenshot (``<page>.phone.png``), the printed page (``<page>.print.pdf``)."""
        if self.viewport == "phone":
            self.shot = screenshot_path(path, "phone")
            full_page_screenshot(page, self.shot)
        elif self.viewport == "print":
            self.shot = screenshot_path(path, "print").with_suffix(".pdf")
            page.pdf(path=self.shot, format="A4")


def measure_default(page: Any, record: Visit, path: str, layout: Layout) -> None:
    """The open page at ``layout``'s viewport in its default state (collapsed cells collapsed, as a
    reader first sees it): its heights (``CODE_SHARE_JS``). Every page's phone screenshot is taken
    here (``EVERY_SCREENSHOT``)."""
    before = set(record.problems())
    layout.resize(page)
    layout.problems += check_math(page)[1]  # waits for MathJax: typeset equations have their real width
    layout.problems += wait_for_charts(page)
    layout.problems += check_images(page)[1]  # every image loaded (eagerly): the page has its real height
    share = page.evaluate(CODE_SHARE_JS)
    share["screens"] = share["document"] / share["window"]
    share["code_share"] = share["code"] / max(share["page"], 1)
    layout.share = share
    layout.reading["setup"] = page.evaluate(READING_JS)["setup"]
    if EVERY_SCREENSHOT:
        layout.snapshot(page, path)
    layout.problems += [p for p in record.problems() if p not in before]


def measure_opened(page: Any, record: Visit, path: str, layout: Layout) -> None:
    """The open page at ``layout``'s viewport (in print media for "print") with every toggle open
    (machinery a reader opens must fit too): what is cut (``CLIPPED_JS``) and, on screen, the figures
    shown so small that their text is unreadable; then the problems of issue 25's limits. A page-size
    with a problem gets its screenshot (phone) or PDF (print) now, as it was measured."""
    before = set(record.problems())
    layout.resize(page)
    if layout.viewport == "print":
        page.emulate_media(media="print")
    page.evaluate(OPEN_COLLAPSED_JS)
    layout.problems += charts_fitted(page, "opening the collapsed cells")
    page.evaluate(OPEN_COLLAPSED_JS)  # again: redrawn charts may have changed what scrolls
    layout.clipped = page.evaluate(CLIPPED_JS, {"paper": layout.viewport == "print"})
    layout.figures = page.evaluate(FIGURE_TEXT_JS, PNG_SMALLEST_TEXT_PX)
    layout.shrunk = [f for f in layout.figures if f["smallest_px"] < MIN_TEXT_PX]
    opened = page.evaluate(READING_JS)
    layout.reading.update(printed=opened["printed"], tables=opened["tables"])
    layout.problems += layout_problems(layout.viewport, layout.share, layout.clipped, path)
    layout.problems += reading_problems(layout)
    layout.problems += [p for p in record.problems() if p not in before]
    if (layout.problems and not EVERY_SCREENSHOT) or (EVERY_SCREENSHOT and layout.viewport == "print"):
        layout.snapshot(page, path)  # every page's phone screenshot is taken in its default state


def reading_problems(layout: Layout) -> list[str]:
    """What issue 44 asks of a page at a size, from ``layout``'s measures: on screen, no figure text
    under ``MIN_TEXT_PX`` (paper does not scroll: figures shrink to the page there), no printed result
    and no table wider than its box, and the set-up one line."""
    problems = []
    if layout.viewport == "print":
        return problems
    problems += [
        f"figure text under {MIN_TEXT_PX} px: {f['smallest_px']} px, a {f['kind']} shown {f['shown']} px wide ({f['text']})"
        for f in layout.shrunk
    ]
    for r in layout.reading.get("printed", []):
        if r["width"] > r["room"] + 1:
            what = "a printed table (show it as a table)" if r["table"] else "a printed result that does not wrap"
            problems.append(f"printed result wider than its box: {what}, {r['width']} px, room for {r['room']} px: {r['text']!r}")
    for r in layout.reading.get("tables", []):
        if r["width"] > r["room"] + 1:
            held = "its row labels held" if r["held"] else "its row labels scroll away"
            problems.append(f"table wider than its box ({held}): {r['width']} px, room for {r['room']} px: {r['text']!r}")
    for r in layout.reading.get("setup", []):
        if r["lines"] > MAX_SETUP_LINES or r["height"] > r["bar_height"] + 1:
            problems.append(f"the set-up takes {r['height']} px ({r['lines']} lines of its bar) before the section's "
                            f"first sentence, more than {MAX_SETUP_LINES} line: {r['text']!r}")
    return problems


def layout_problems(viewport: str, share: dict, clipped: list[dict], path: str = "") -> list[str]:
    """What the limits of issue 25 say about a page's measurements (see ``MAX_SCREENS``,
    ``MAX_CODE_SHARE`` and ``CLIPPED_JS``); ``share`` is empty on paper. ``REFERENCE_PAGES`` have no
    length limit."""
    problems = []
    limit = None if path in REFERENCE_PAGES else MAX_SCREENS.get(viewport)
    if limit is not None and share["screens"] > limit:
        problems.append(f"the page is {share['screens']:.1f} screens long at {viewport} size, more than {limit}")
    if viewport == "desktop" and share["code_share"] > MAX_CODE_SHARE:
        problems.append(f"visible code is {share['code_share']:.0%} of the page, more than {MAX_CODE_SHARE:.0%}")
    problems += [
        f"cut {c['kind']}: {c['how']} ({c['width']} px, room for {c['room']} px): {c['text']!r}" for c in clipped
    ]
    return problems


def report_layout(path: str, layout: Layout) -> tuple[list[str], Path | None]:
    """Writes the viewport's report; returns ``(problems, screenshot)``. On paper only what is cut
    counts: the page is measured there with its collapsed cells open, and its heights would not be the
    page a reader first sees."""
    share = layout.share
    heights = {} if layout.viewport == "print" else {
        "screens": round(share["screens"], 2),
        "document_px": round(share["document"]),
        "page_px": round(share["page"]),
        "code_px": round(share["code"]),
        "code_input_px": round(share["input"]),
        "library_source_px": round(share["source"]),
        "prose_code_px": round(share["prose"]),
        "text_output_px": round(share["text"]),
        "figures_px": round(share["figures"]),
        "code_share": round(share["code_share"], 3),
    }
    write_report(
        path,
        layout.viewport,
        {
            "viewport": LAYOUT_VIEWPORTS[layout.viewport],
            **heights,
            "clipped": layout.clipped,
            "shrunk_figures": layout.shrunk,
            "figure_text_px": layout.figures,
            **layout.reading,
            "problems": layout.problems,
            "screenshot": shown_path(layout.shot) if layout.shot else None,
        },
    )
    return layout.problems, layout.shot


@pytest.mark.parametrize("path", PAGES)
def test_page_in_dark_and_light_mode_on_a_phone_a_laptop_and_paper(browser: Any, site: str, path: str) -> None:
    """One visit a page, as a reader whose system turns from dark to light on a wider screen:

    1. opened at a phone's size (390x844) in dark mode: the dark-mode checks (``dark_mode_checks``), and
       the phone's heights as a reader first sees the page (``measure_default``);
    2. the system switched to light mode and the window to a laptop's size (1280x900): the light-mode
       checks (``light_mode_checks``), and the laptop's heights;
    3. every toggle opened: what is cut at the laptop's size, the phone's and on paper (A4, print media;
       ``measure_opened``).

    Colours do not change the layout, nor widths the colours; a resized page lays out as one loaded at
    that size (its charts are redrawn for their column's width, the scroll cues updated). A visit per
    size and scheme (three until 2026-11-27, then two) cost a page load each: about 1.3 s of a page's
    3.6 s in the browser test."""
    with visit(browser, site, dark=True, viewport=LAYOUT_VIEWPORTS["phone"]) as (page, record):
        found = {"dark mode": dark_mode_checks(page, record, path)}
        phone, desktop, paper = Layout("phone"), Layout("desktop"), Layout("print")
        measure_default(page, record, path, phone)
        found["light mode"] = light_mode_checks(page, record, path)
        measure_default(page, record, path, desktop)
        for layout in (desktop, phone, paper):
            measure_opened(page, record, path, layout)
            found[f"{layout.viewport} layout"] = report_layout(path, layout)
    assert_no_problems_in(path, found)


@pytest.mark.parametrize("path", CHART_PAGES)
def test_charts_have_a_static_image_without_javascript(browser: Any, site: str, path: str) -> None:
    with visit(browser, site, javascript=False) as (page, record):
        problems = open_page(page, record, path)
        fallbacks = page.eval_on_selector_all(
            ".tt-altair",
            "boxes => boxes.map(b => { const i = b.querySelector('img.tt-altair-static');"
            " return {id: b.id, ok: !!i && i.complete && i.naturalWidth > 0 && i.getBoundingClientRect().height > 0}; })",
        )
        assert fallbacks, "the page has charts in its HTML, but none were found with JavaScript off"
        problems += [f"chart {f['id']}: no static image without JavaScript" for f in fallbacks if not f["ok"]]
        problems += record.problems()
        write_report(path, "nojs", {"charts": len(fallbacks), "blocked": record.blocked, "problems": problems})
    assert_no_problems(path, "JavaScript off", problems, None)


def test_a_chart_with_tooltips_is_on_the_site() -> None:
    """The issue asks that hovering shows a tooltip on at least one chart; the page tests hover every
    chart that has tooltips, so here: there is one (once chapters exist)."""
    if not any(notebook_of(p) for p in PAGES):
        pytest.skip("no chapter pages built yet: no chart to hover (the renderer tests below still hover one)")
    pages = [(SITE / p).read_text(encoding="utf-8") for p in CHART_PAGES]
    assert any('"tooltip"' in html for html in pages), "no chart on the site has a tooltip to hover"


def _page_title(path: str) -> str:
    """The page's own title, from ``<title>2. Masking &#8212; Book</title>``, without its number."""
    match = re.search(r"<title>(.*?)</title>", (SITE / path).read_text(encoding="utf-8"), re.S)
    assert match, f"{path} has no <title>"
    title = html_lib.unescape(match.group(1)).rsplit(" \u2014 ", 1)[0]
    return re.sub(r"^\d+(\.\d+)*\.?\s+", "", title).strip()


def test_search_finds_every_page_by_its_title(browser: Any, site: str) -> None:
    toc_pages = [p for p in PAGES if p.startswith("book/")]
    assert ROOT_PAGE in toc_pages
    with visit(browser, site) as (page, record):
        for i, path in enumerate(toc_pages):
            title = _page_title(path)
            if i == 0:  # as a reader searches: the search page reads its query from the address
                page.goto(f"{site}search.html?q={quote(title)}")
            else:  # then the same search code on the loaded page, without loading it again for each title,
                # and without the snippets: for those Sphinx fetches every page found (most pages, for
                # most titles), which the first search has shown to work
                page.evaluate("(q) => { DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = false;"
                              " document.getElementById('search-results').replaceChildren();"
                              " Search.performSearch(q); }", title)
            page.wait_for_function(
                "() => (document.querySelector('#search-results .search-summary') || {}).textContent",
                timeout=15_000,
            )
            found = page.eval_on_selector_all("#search-results ul.search li a", "as => as.map(a => a.href)")
            assert any(href.split("#")[0].endswith(path) for href in found), (
                f"searching for {title!r} did not find {path} (found {found})"
            )
            if i > 0:
                continue
            # Sphinx fetches each page result for its snippet (p.context) after the summary line is
            # written: every result shows one (a request aborted by the next search would fail the test).
            page.wait_for_function(
                "() => Array.from(document.querySelectorAll('#search-results ul.search li'))"
                ".every(li => li.querySelector(':scope > span, p.context'))",
                timeout=15_000,
            )
        assert not record.problems(), record.problems()


# --- navigation: the table of contents and "on this page", on a phone and a laptop ----------------

# The two panels a reader navigates with, each opened and closed by a button of the article's header
# (sphinx-book-theme): the table of contents (the theme's primary sidebar; on a narrow screen it opens
# as a dialog over the page, on a wide one it is on show and the button folds it away) and "on this
# page" (the secondary sidebar: the page's sections; a dialog below 1200 px, on show beside the text
# from there). Where the theme has put a panel's links: its sidebar, or the dialog it opens.
NAV_PANELS = {
    "table of contents": {"toggle": "button.primary-toggle", "boxes": ["#pst-primary-sidebar", "#pst-primary-sidebar-modal"]},
    "on this page": {"toggle": "button.secondary-toggle", "boxes": ["#pst-secondary-sidebar", "#pst-secondary-sidebar-modal"]},
}
# How long a panel may take to open or close (the theme slides it over 0.25 s).
NAV_TIMEOUT_MS = 5_000

# A panel's links as a reader finds them: of every link the panel shows (not those of a folded
# chapter), whether it is on show and can be tapped: scrolled into view within the panel (`scroll`;
# a long table of contents scrolls), inside the window, and the element under its middle is the link
# (nothing lies over it; a hidden panel's links are never hit). Returns the links laid out, how many
# of them can be tapped, and the first few that cannot, with why.
NAV_LINKS_JS = """({boxes, scroll}) => {
  // Chromium keeps boxes for what a closed <details> hides (a folded chapter's sections)
  const links = boxes.flatMap(s => Array.from(document.querySelectorAll(`${s} a[href]`)))
    .filter(a => a.getClientRects().length > 0 && !a.closest("details:not([open]) > :not(summary)"));
  const bad = [];
  let reachable = 0;
  for (const a of links) {
    if (scroll) a.scrollIntoView({block: "nearest", inline: "nearest"});
    const r = a.getClientRects()[0], x = r.left + r.width / 2, y = r.top + r.height / 2;
    const text = (a.textContent || a.getAttribute("href")).trim().replace(/\\s+/g, " ").slice(0, 40);
    let why = null;
    if (r.width < 1 || r.height < 1) why = "has no size";
    else if (x < 0 || y < 0 || x >= innerWidth || y >= innerHeight) why = `lies outside the window (${Math.round(x)}, ${Math.round(y)})`;
    else {
      const hit = document.elementFromPoint(x, y);
      if (!hit || !(hit === a || a.contains(hit))) {
        why = hit ? `is covered by <${hit.tagName.toLowerCase()} class="${hit.className}">` : "is not hit";
      }
    }
    if (why === null) reachable += 1;
    else if (bad.length < 5) bad.push(`${text}: ${why}`);
  }
  return {links: links.length, reachable: reachable, bad: bad};
}"""

# Every open link reachable and at least `least` of them; closed: none.
NAV_OPEN_JS = f"""(args) => {{ const s = ({NAV_LINKS_JS})(args); return s.links >= args.least && s.reachable === s.links; }}"""
NAV_CLOSED_JS = f"""(args) => ({NAV_LINKS_JS})(args).reachable === 0"""

# A dialog the theme opened for a panel (on a narrow screen), with its box: a reader closes it by
# tapping beside it.
NAV_DIALOG_JS = """(boxes) => {
  const dialog = boxes.map(s => document.querySelector(s)).find(e => e && e.tagName === "DIALOG" && e.open);
  if (!dialog) return null;
  const r = dialog.getBoundingClientRect();
  return {left: r.left, right: r.right};
}"""


def _nav_pages() -> list[str]:
    """Pages of each kind whose navigation is checked: the book's first page, a chapter's landing
    page and the first section (a notebook). All of them have both panels (the theme shows "on this
    page" wherever a page has sections; every page of the book has)."""
    if not PAGES:
        return []
    landing = next((f"{c['file']}.html" for c in TOC.get("chapters", []) if f"{c['file']}.html" in PAGES), None)
    section = next((p for p in PAGES if notebook_of(p)), None)
    return [p for p in dict.fromkeys([ROOT_PAGE, landing, section]) if p in PAGES]


NAV_PAGES = _nav_pages()


def _nav_wait(page: Any, condition: str, args: dict) -> bool:
    try:
        page.wait_for_function(condition, arg=args, timeout=NAV_TIMEOUT_MS)
    except Exception:  # Playwright's TimeoutError: the caller says what a reader would find
        return False
    return True


def _nav_panel_open(page: Any, panel: str, least: int, what: str) -> None:
    """Waits until the panel is open with every link it lays out on show and tappable (and at least
    ``least``); fails with what a reader would find otherwise."""
    args = {"boxes": NAV_PANELS[panel]["boxes"], "scroll": True, "least": least}
    if not _nav_wait(page, NAV_OPEN_JS, args):
        state = page.evaluate(NAV_LINKS_JS, args)
        pytest.fail(f"{what}: {panel!r} is not open with its links on show ({state['reachable']} of "
                    f"{state['links']} links can be tapped, at least {least} wanted): {state['bad']}", pytrace=False)


def _nav_panel_closed(page: Any, panel: str, what: str) -> None:
    args = {"boxes": NAV_PANELS[panel]["boxes"], "scroll": False}
    if not _nav_wait(page, NAV_CLOSED_JS, args):
        state = page.evaluate(NAV_LINKS_JS, args)
        pytest.fail(f"{what}: {panel!r} did not close ({state['reachable']} of its links still on show)", pytrace=False)


def _nav_screenshot(page: Any, shot: Path) -> None:
    """The window with a panel open (every page's screenshots are wanted: ``EVERY_SCREENSHOT``)."""
    if EVERY_SCREENSHOT:
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=shot)


def _nav_toggle(page: Any, panel: str) -> Any | None:
    """The panel's button as the reader sees it (the theme also has one it hides), or ``None``."""
    shown = page.locator(f"{NAV_PANELS[panel]['toggle']}:visible")
    return shown.first if shown.count() else None


@pytest.mark.parametrize("viewport", ["phone", "desktop"])
@pytest.mark.parametrize("path", NAV_PAGES)
def test_the_table_of_contents_and_on_this_page_open_and_close(browser: Any, site: str, path: str, viewport: str) -> None:
    """On a phone (390x844) and a laptop (1280x900), a reader opens each navigation panel with its
    button and finds its links on show (``NAV_LINKS_JS``: in the window, nothing over them, tappable),
    and closes it again: a dialog by tapping beside it or with Escape, a sidebar with its button. A
    panel without a button on show must be on show itself ("on this page" beside the text of a laptop).
    The table of contents lists at least every chapter. A screenshot with each panel open goes to
    ``<page>.nav-<panel>-<viewport>.png``."""
    chapters = len(TOC.get("chapters", []))
    size = LAYOUT_VIEWPORTS[viewport]
    with visit(browser, site, viewport=size) as (page, record):
        assert not open_page(page, record, path)
        for panel, least in (("table of contents", chapters), ("on this page", 1)):
            boxes = NAV_PANELS[panel]["boxes"]
            where = f"{path} at {size['width']}x{size['height']}"
            shot = SCREENSHOTS / f"{slug(path)}.nav-{panel.replace(' ', '-')}-{viewport}.png"
            toggle = _nav_toggle(page, panel)
            if toggle is None:  # no button: the panel is on show for good
                _nav_panel_open(page, panel, least, f"{where}, with no button to open it")
                _nav_screenshot(page, shot)
                continue
            opened = page.evaluate(NAV_LINKS_JS, {"boxes": boxes, "scroll": False})["reachable"] > 0
            if opened:  # on show from the start (a laptop's table of contents): folded away, then back
                toggle.click()
                _nav_panel_closed(page, panel, f"{where}, its button clicked")
                toggle.click()
                _nav_panel_open(page, panel, least, f"{where}, its button clicked again")
                _nav_screenshot(page, shot)
                continue
            for close in ("tap beside it", "Escape"):
                toggle.click()
                _nav_panel_open(page, panel, least, f"{where}, its button clicked")
                if close == "tap beside it":
                    _nav_screenshot(page, shot)
                    dialog = page.evaluate(NAV_DIALOG_JS, boxes)
                    assert dialog, f"{where}: {panel!r} is open, but not as a dialog to close by tapping beside it"
                    left, right = dialog["left"], size["width"] - dialog["right"]
                    assert max(left, right) >= 20, f"{where}: {panel!r} leaves no room beside it to tap: {dialog}"
                    page.mouse.click(left / 2 if left > right else dialog["right"] + right / 2, size["height"] / 2)
                else:
                    page.keyboard.press("Escape")
                _nav_panel_closed(page, panel, f"{where}, after {close}")
        assert not record.problems(), record.problems()


def test_a_reader_on_a_phone_goes_to_a_chapter_from_the_table_of_contents(browser: Any, site: str) -> None:
    """The table of contents, opened on a phone, takes the reader where its link says: from the
    book's first page to the first chapter."""
    if len(NAV_PAGES) < 2:
        pytest.skip("no chapter pages built yet")
    start, target = NAV_PAGES[0], NAV_PAGES[1]
    with visit(browser, site, viewport=LAYOUT_VIEWPORTS["phone"]) as (page, record):
        assert not open_page(page, record, start)
        toggle = _nav_toggle(page, "table of contents")
        assert toggle is not None, f"{start}: no table-of-contents button on show on a phone"
        toggle.click()
        _nav_panel_open(page, "table of contents", 1, f"{start} on a phone, its button clicked")
        href = os.path.relpath(target, os.path.dirname(start))  # as Sphinx writes its links
        page.locator(f'#pst-primary-sidebar-modal a[href="{href}"]').first.click()
        page.wait_for_url(f"**/{target}", timeout=NAV_TIMEOUT_MS)
        assert not record.problems(), record.problems()


# --- the chart renderer on its own (runs whatever pages exist) ------------------------------------


def _book_site_extension() -> Any:
    spec = importlib.util.spec_from_file_location("book_site", ROOT / "_ext" / "book_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _demo_chart() -> Any:
    import altair as alt

    from transformer_lib.book.charts import enable_charts

    enable_charts()  # what each chapter's set-up does

    rows = [
        {"head": h, "query": q, "key": k, "weight": round(((h + 1) * (i + 2) * (j + 3)) % 7 / 7, 3)}
        for h in range(2)
        for i, q in enumerate("abc")
        for j, k in enumerate("abc")
    ]
    head = alt.param(name="head", value=0, bind=alt.binding_select(options=[0, 1], name="head "))
    return (
        alt.Chart(alt.Data(values=rows), title="renderer test: </script> __CDN__ & <!--")
        .mark_rect()
        .encode(x="key:N", y="query:N", color="weight:Q", tooltip=["query:N", "key:N", "weight:Q"])
        .add_params(head)
        .transform_filter("datum.head == head")
    )


def test_charts_display_through_the_book_renderer_as_valid_notebook_outputs() -> None:
    import altair as alt
    import nbformat

    from transformer_lib.book import charts

    chart = _demo_chart()
    assert alt.renderers.active == charts.CHART_RENDERER
    bundle = _demo_chart()._repr_mimebundle_()
    html = bundle["text/html"]
    assert 'class="tt-altair"' in html and "data:image/svg+xml;base64," in html
    assert html.count("</script>") == 1, "nothing in the spec may end the script early"
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("chart", outputs=[nbformat.v4.new_output("display_data", data=bundle)])]
    )
    nbformat.validate(notebook)  # altair 6's own mimetype ("...v6.json") fails this


@pytest.fixture(scope="session")
def vega_bundle() -> Path:
    return _book_site_extension().write_vega_bundle(ROOT / "_build" / ".site_assets")


# The test pages' own icon (an empty one, inline): without one, the browser asks for /favicon.ico, whose
# 404 would be a console error (the book's pages have theirs, _config.yml).
ICON = '<link rel="icon" href="data:,">'


def _chart_page(folder: Path, *, with_bundle: bool) -> None:
    bundle = _demo_chart()._repr_mimebundle_()
    script = '<script defer src="vega-embed.js"></script>' if with_bundle else ""
    (folder / "chart.html").write_text(
        f'<!doctype html><html data-theme="light"><head><meta charset="utf-8">{ICON}{script}</head>'
        f"<body>{bundle['text/html']}</body></html>",
        encoding="utf-8",
    )


def test_renderer_draws_an_interactive_chart_offline(browser: Any, vega_bundle: Path, tmp_path: Path) -> None:
    shutil.copy(vega_bundle, tmp_path / "vega-embed.js")
    _chart_page(tmp_path, with_bundle=True)
    with serve(tmp_path) as base, visit(browser, base) as (page, record):
        page.goto(base + "chart.html")
        assert not wait_for_charts(page)
        (chart,) = page.evaluate(CHARTS_JS)
        assert not check_chart_drawn(chart, "light"), chart
        assert chart["drawn"] == 9 and chart["tooltips"] == 9, chart  # 3x3 cells of head 0
        assert "weight" in (hover_for_tooltip(page, chart["id"]) or ""), "hovering a cell shows its values"
        changed, problems = exercise_inputs(page, chart["id"])
        assert changed == 1 and not problems, problems
        # The reader switches the site to dark mode: the chart redraws in dark colours.
        page.evaluate("() => document.documentElement.setAttribute('data-theme', 'dark')")
        page.wait_for_function("() => document.querySelector('.tt-altair').dataset.ttTheme === 'dark'")
        page.evaluate("() => { document.body.style.background = '#121212'; }")
        ratio, problems = check_contrast(page, chart)
        assert not problems, problems
        assert not record.problems(), record.problems()


def _wide_charts() -> list[Any]:
    """A single view wider than a phone, with a title longer than a phone's column, and a
    concatenation of two views side by side (stacked on a phone, then narrowed)."""
    import altair as alt

    from transformer_lib.book.charts import enable_charts

    enable_charts()
    rows = [{"x": i, "y": i * i % 7, "run": f"run {i % 3}"} for i in range(30)]
    view = alt.Chart(alt.Data(values=rows)).mark_line().encode(x="x:Q", y="y:Q", color="run:N", tooltip=["x:Q"])
    single = view.properties(width=600, height=160,
                             title="A chart whose title is far longer than the column of a phone is wide")
    return [single, view.properties(width=300, height=120) | view.properties(width=300, height=120)]


CHART_FIT_JS = """() => Array.from(document.querySelectorAll(".tt-altair")).map(box => {
  const svg = box.querySelector(".tt-altair-live svg"), r = box.getBoundingClientRect();
  const texts = Array.from(svg.querySelectorAll("text"));
  const scale = svg.getBoundingClientRect().width / svg.width.baseVal.value;
  return {smallest_px: Math.min(...texts.filter(t => t.textContent.trim()).map(t => parseFloat(getComputedStyle(t).fontSize))) * scale,
          height: Math.round(svg.getBoundingClientRect().height), box: Math.round(r.width), drawn: Math.round(svg.getBoundingClientRect().width), scrolls: box.scrollWidth > box.clientWidth + 1,
          scaled: box.classList.contains("tt-altair-scaled"), room: box.dataset.ttRoom,
          titleLines: svg.querySelectorAll(".role-title-text text, .role-title-text tspan").length,
          cut: texts.filter(t => { const b = t.getBoundingClientRect(); return b.width && (b.left < r.left - 1 || b.right > r.right + 1); })
                    .map(t => t.textContent)};
})"""


def test_renderer_fits_charts_to_a_phone_column(browser: Any, vega_bundle: Path, tmp_path: Path) -> None:
    """On a phone a chart is never wider than its column: a single view is redrawn narrower with its
    title on several lines; a concatenation has its panels stacked (issue 44: scaled down, its text was
    6 px high); no text is cut at the chart's edge, and none is under MIN_TEXT_PX."""
    shutil.copy(vega_bundle, tmp_path / "vega-embed.js")
    shutil.copy(ROOT / "_static" / "site.css", tmp_path / "site.css")
    charts = "".join(chart._repr_mimebundle_()["text/html"] for chart in _wide_charts())
    (tmp_path / "charts.html").write_text(
        f'<!doctype html><html data-theme="light"><head><meta charset="utf-8">{ICON}<link rel="stylesheet" href="site.css">'
        f'<script defer src="vega-embed.js"></script></head><body style="margin: 16px">{charts}</body></html>',
        encoding="utf-8",
    )
    with serve(tmp_path) as base, visit(browser, base, viewport=LAYOUT_VIEWPORTS["phone"]) as (page, record):
        page.goto(base + "charts.html")
        assert not wait_for_charts(page)
        page.wait_for_function(CHARTS_FITTED_JS, timeout=CHART_TIMEOUT_MS)
        single, concat = page.evaluate(CHART_FIT_JS)
        for chart in (single, concat):
            assert chart["drawn"] <= chart["box"] and not chart["scrolls"] and not chart["cut"], chart
            assert chart["smallest_px"] >= MIN_TEXT_PX, chart
        assert not single["scaled"] and single["titleLines"] >= 2, single  # redrawn, not shrunk
        assert concat["height"] > 2 * 120, concat  # the two panels one under the other
        # a wider window: the chart is redrawn at its own size again
        page.set_viewport_size(VIEWPORT)
        page.wait_for_function(CHARTS_FITTED_JS, timeout=CHART_TIMEOUT_MS)
        single, concat = page.evaluate(CHART_FIT_JS)
        assert single["titleLines"] == 1 and not concat["scaled"] and concat["height"] < 2 * 120, (single, concat)
        assert not record.problems(), record.problems()


def test_renderer_keeps_the_static_image_where_the_chart_library_cannot_load(browser: Any, tmp_path: Path) -> None:
    # No vega-embed on the page (like Jupyter offline): the script tries the CDN, which is blocked here.
    _chart_page(tmp_path, with_bundle=False)
    with serve(tmp_path) as base, visit(browser, base) as (page, record):
        page.goto(base + "chart.html")
        page.wait_for_function("() => document.querySelector('.tt-altair').dataset.ttStatus === 'error'")
        assert record.blocked and all(url.startswith("https://cdn.jsdelivr.net/") for url in record.blocked)
        assert page.evaluate(
            "() => { const i = document.querySelector('img.tt-altair-static'); return i.complete && i.naturalWidth > 0; }"
        )
    with serve(tmp_path) as base, visit(browser, base, javascript=False) as (page, record):
        page.goto(base + "chart.html")
        assert page.evaluate("() => document.querySelector('img.tt-altair-static').naturalWidth > 0")
        assert not record.problems(), record.problems()


# --- the site's own scripts on their own (run whatever pages exist) ---------------------------------


def _static_page(folder: Path, body: str) -> None:
    for name in ("site.css", "scroll-cue.js", "print-fit.js", "tables.js"):
        shutil.copy(ROOT / "_static" / name, folder / name)
    (folder / "page.html").write_text(
        f'<!doctype html><html data-theme="light"><head><meta charset="utf-8">{ICON}<link rel="stylesheet" href="site.css">'
        '<script src="scroll-cue.js"></script><script src="print-fit.js"></script><script src="tables.js"></script></head>'
        f'<body style="margin: 16px"><div class="bd-content"><article class="bd-article">{body}</article></div></body></html>',
        encoding="utf-8",
    )


SCROLL_STATE_JS = """() => Array.from(document.querySelectorAll("[id]")).map(e => ({id: e.id,
  scroll: e.getAttribute("data-tt-scroll"), mask: getComputedStyle(e).maskImage || getComputedStyle(e).webkitMaskImage,
  size: parseFloat(getComputedStyle(e).fontSize), wraps: e.classList.contains("tt-print-wrap"),
  over: e.scrollWidth > e.clientWidth + 1}))"""


def test_a_box_that_scrolls_sideways_shows_a_cue_and_print_fits_it_to_the_page(browser: Any, tmp_path: Path) -> None:
    line = "x = 1  # " + "a long line " * 12
    diagram = "source --> tokens --> ids --> batches --> model --> loss --> optimizer --> checkpoint"
    _static_page(tmp_path, f'<div class="highlight"><pre id="long">{line}</pre></div>'
                           f'<div class="highlight"><pre id="short">y = 2</pre></div>'
                           f'<div class="highlight"><pre id="diagram">{diagram}</pre></div>'
                           f'<div class="highlight"><pre id="huge">{"z" * 400}</pre></div>')
    with serve(tmp_path) as base, visit(browser, base, viewport=LAYOUT_VIEWPORTS["phone"]) as (page, record):
        page.goto(base + "page.html")
        page.wait_for_function("() => document.getElementById('long').hasAttribute('data-tt-scroll')")
        state = {e["id"]: e for e in page.evaluate(SCROLL_STATE_JS)}
        assert state["long"]["scroll"] == "start" and state["long"]["mask"] != "none", state["long"]
        assert state["short"]["scroll"] is None and state["short"]["mask"] == "none"
        # scrolled to its end, the cue moves to the other edge
        page.evaluate("() => { const e = document.getElementById('long'); e.scrollLeft = e.scrollWidth; }")
        page.wait_for_function("() => document.getElementById('long').getAttribute('data-tt-scroll') === 'end'")
        # printed: no cue; a line a little too long is set smaller, a very long one wraps; nothing is wider
        page.emulate_media(media="print")
        page.wait_for_function("() => document.getElementById('huge').classList.contains('tt-print-wrap')")
        printed = {e["id"]: e for e in page.evaluate(SCROLL_STATE_JS)}
        assert printed["diagram"]["size"] < state["diagram"]["size"] and not printed["diagram"]["wraps"], printed
        assert not [e for e in printed.values() if e["over"]], printed
        page.emulate_media(media="screen")
        page.wait_for_function("() => !document.getElementById('huge').classList.contains('tt-print-wrap')")
        assert not record.problems(), record.problems()


TABLE_STATE_JS = """() => Object.fromEntries(Array.from(document.querySelectorAll("table")).map(t => [t.id, {
  stacked: t.classList.contains("tt-stacked"), wrapped: t.classList.contains("tt-wrap-heads"),
  width: Math.round(t.getBoundingClientRect().width), room: t.parentElement.clientWidth}]))"""


def _table(name: str, headers: list[str], row: list[str]) -> str:
    head = "".join(f'<th class="tt-num">{h}</th>' for h in headers)
    body = "".join(f'<td class="tt-num">{v}</td>' for v in row)
    return (f'<div class="cell_output"><div class="output text_html"><div class="tt-table-wrap"><table class="tt-table" id="{name}">'
            f"<thead><tr><th>run</th>{head}</tr></thead><tbody><tr><td>a run</td>{body}</tr></tbody></table></div></div></div>")


def test_a_table_is_stacked_only_where_it_does_not_fit_with_its_headers_wrapped(browser: Any, tmp_path: Path) -> None:
    """tables.js: a table whose long headers make it wider than its column wraps them and stays a table
    on a laptop (7.6's accuracy table was stacked at 1280 px); one still too wide with its headers
    wrapped (on a phone) is stacked; one that fits keeps its headers on one line; back on a laptop, the
    stacked table is a table again."""
    long_heads = [f"accuracy on the {w} words of the validation captions" for w in ("hidden", "random", "kept", "picked")]
    _static_page(tmp_path, _table("long", long_heads, ["123,456.789"] * 4) + _table("short", ["a", "b"], ["1", "2"]))
    with serve(tmp_path) as base, visit(browser, base, viewport=LAYOUT_VIEWPORTS["desktop"]) as (page, record):
        page.goto(base + "page.html")
        page.wait_for_function("() => document.getElementById('long').classList.contains('tt-wrap-heads')")
        laptop = page.evaluate(TABLE_STATE_JS)
        assert not laptop["long"]["stacked"] and laptop["long"]["width"] <= laptop["long"]["room"], laptop
        assert not laptop["short"]["wrapped"] and not laptop["short"]["stacked"], laptop
        page.set_viewport_size(LAYOUT_VIEWPORTS["phone"])
        page.wait_for_function("() => document.getElementById('long').classList.contains('tt-stacked')")
        phone = page.evaluate(TABLE_STATE_JS)
        assert phone["long"]["width"] <= phone["long"]["room"] and not phone["short"]["stacked"], phone
        page.set_viewport_size(LAYOUT_VIEWPORTS["desktop"])
        page.wait_for_function("() => !document.getElementById('long').classList.contains('tt-stacked')")
        assert page.evaluate(TABLE_STATE_JS)["long"]["wrapped"]
        assert not record.problems(), record.problems()


# --- `python tests/test_site.py`: what the last run saw, page by page -----------------------------


def layout_table(reports: list[dict]) -> list[str]:
    """The per-page table of issue 25's limits: screens at both sizes, code share, cut elements."""
    pages: dict[str, dict[str, dict]] = {}
    for r in reports:
        if r["mode"] in LAYOUT_VIEWPORTS:
            pages.setdefault(r["page"], {})[r["mode"]] = r
    if not pages:
        return []

    def cell(r: dict | None, key: str, fmt: str, limit: float | None) -> str:
        if r is None or key not in r:
            return "-"
        text = format(r[key], fmt)
        return f"**{text}**" if limit is not None and r[key] > limit else text

    def cut(r: dict | None) -> str:
        if r is None:
            return "-"
        kinds = Counter(c["kind"] for c in r["clipped"])
        return f"{len(r['clipped'])}" + (f" ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})" if kinds else "")

    lines = [
        f"Layout (limits: {MAX_SCREENS['desktop']} screens at 1280x900, {MAX_SCREENS['phone']} at 390x844, "
        f"code {MAX_CODE_SHARE:.0%} at desktop width, nothing cut; over a limit in **bold**):",
        "",
        "| page | screens 1280x900 | screens 390x844 | code share | cut at 1280 | cut at 390 | cut in print |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    for page, modes in sorted(pages.items()):
        desktop, phone, paper = modes.get("desktop"), modes.get("phone"), modes.get("print")
        lines.append(
            f"| {page} | {cell(desktop, 'screens', '.1f', MAX_SCREENS['desktop'])} "
            f"| {cell(phone, 'screens', '.1f', MAX_SCREENS['phone'])} "
            f"| {cell(desktop, 'code_share', '.0%', MAX_CODE_SHARE)} | {cut(desktop)} | {cut(phone)} | {cut(paper)} |"
        )
    return lines + [""]


def summarize() -> str:
    reports = [json.loads(r.read_text()) for r in sorted(SCREENSHOTS.glob("*.json"))]
    if not reports:
        return f"No browser-test reports in {SCREENSHOTS} (the browser test did not run)."
    lines = [f"Browser test: {len({r['page'] for r in reports})} pages; screenshots and reports in {SCREENSHOTS}/", ""]
    lines += layout_table(reports)
    for r in reports:
        if r["mode"] in LAYOUT_VIEWPORTS:
            if r["shrunk_figures"]:
                lines.append(f"  {r['page']:<32} {r['mode']:7} figures with text under {MIN_TEXT_PX} px: {len(r['shrunk_figures'])}")
            continue
        parts = [f"{r['mode']:5}", f"math {r.get('math', '-')}", f"charts {r.get('charts', 0)}"]
        if r["mode"] == "light":
            parts += [f"tooltips {r['tooltips_shown']}", f"inputs {r['inputs_changed']}", f"images {r['images']}"]
            parts += [f"colab links {len(r['colab_links'])}", f"download {'ok' if r['download'] else '-'}"]
            if r["badges_for_chapters_not_written_yet"]:
                parts.append(f"badges for notebooks not written yet: {r['badges_for_chapters_not_written_yet']}")
        if r.get("min_chart_contrast"):
            parts.append(f"chart contrast >= {r['min_chart_contrast']:.1f}")
        parts += [f"blocked {len(r['blocked'])}", f"problems {len(r['problems'])}"]
        lines.append(f"  {r['page']:<32} " + ", ".join(parts))
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarize())
