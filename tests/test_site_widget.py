"""The page that translates (issue 49), in the real browser: the shipped model run by ONNX Runtime Web.

Each test runs on two sites: a small one these tests assemble (``tools/site_widget.py`` writes the
widget's files into ``_static/widget`` of a temporary folder, beside a page that holds the widget as
``_ext/book_site.py`` writes it), so that the widget is checked without building the book; and the
built book in ``_build/html`` (``SITE_DIR``), on the introduction, when it has been built (``make
book``; skipped otherwise). Checked, with headless Chromium as in ``tests/test_site.py``:

- before the reader's first use, a page loads the widget's script and style only (no runtime, no
  model): its weight is the page's without the widget plus those two files;
- sentences typed into the widget at a phone's width in dark mode are translated as PyTorch's
  ``pretrained.load()`` translates them greedily, token by token, with their pieces, a cross-attention
  heatmap whose layer and head can be chosen and whose squares say their weight on hover, and the time
  per token; nothing is wider than the phone's column;
- the first 200 sentences of Multi30k test 2016: the same source pieces as Python for every one, the
  same greedy translation for at least 99% of them, every row of every layer's and head's
  cross-attention summing to one; beam search with the model's chosen beam and length penalty gives
  Python's beam translations (these two, about a minute each, on the built book when there is one,
  else on the assembled site);
- no request leaves the site; no console errors;
- opened from ``file://``, and in a browser without WebAssembly, the widget says so in one line.

Without Chromium the tests are skipped, unless ``REQUIRE_BROWSER=1`` (CI), where they fail.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from transformer_lib import pretrained
from transformer_lib.translator import read_multi30k_split

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_site import CHROMIUM_FLAGS, SITE, _find_chromium, _no_browser, serve  # noqa: E402

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
UNIT_ROUNDOFF = 2.0**-24  # float32
WIDGET_PAGE = "book/intro.html"  # the built site's page with the widget
LAZY = re.compile(r"(ort[.-][^/]*|\.onnx|tokenizer\.json|model\.json|tokenizer\.js|decoding\.js)$")


def _module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


site_widget = _module(ROOT / "tools" / "site_widget.py")
book_site = _module(ROOT / "_ext" / "book_site.py")


def _page_html(examples: list[str], decoding: dict) -> str:
    """A page with the widget, its two files in its head as _ext/book_site.py adds them."""
    head = '<link rel="stylesheet" href="_static/widget/widget.css"><script defer src="_static/widget/widget.js"></script>'
    return (f'<!doctype html><html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">'
            f'<link rel="icon" href="data:,">{head}</head>'
            f"<body style='margin: 8px'><h1>Try it</h1>{book_site.widget_html(examples, decoding)}</body></html>")


@pytest.fixture(scope="module")
def assembled(tmp_path_factory) -> Path:
    """A small site: the widget's files as the build writes them, and a page with the widget."""
    folder = tmp_path_factory.mktemp("site")
    site_widget.write_widget(folder / "_static" / "widget")
    info = pretrained.info()
    examples = [example["source"] for example in info.run["examples"]]
    (folder / "widget.html").write_text(_page_html(examples, dict(info.decoding)), encoding="utf-8")
    return folder


@pytest.fixture(scope="module", params=["assembled", "built"])
def where(request, assembled) -> Iterator[tuple[str, str]]:
    """(base URL, the page with the widget) of the assembled site, then of the built book."""
    if request.param == "assembled":
        with serve(assembled) as base:
            yield base, "widget.html"
        return
    page = SITE / WIDGET_PAGE
    if not page.is_file():
        pytest.skip(f"no built site in {SITE} (`make book`): the assembled site was checked")
    assert book_site.WIDGET_MARKER in page.read_text(encoding="utf-8"), f"{WIDGET_PAGE} has no translation widget"
    with serve(SITE) as base:
        yield base, WIDGET_PAGE


@pytest.fixture(scope="module")
def one_site(assembled) -> Iterator[tuple[str, str]]:
    """The long checks' one site (about a minute each): the built book when there is one, else the
    assembled site (the same files)."""
    page = SITE / WIDGET_PAGE
    if page.is_file():
        with serve(SITE) as base:
            yield base, WIDGET_PAGE
    else:
        with serve(assembled) as base:
            yield base, "widget.html"


@pytest.fixture(scope="module")
def shipped():
    return pretrained.load()


@contextmanager
def opened(browser: Any, base: str, path: str, *, dark: bool = False, width: int = 1280,
           init_script: str | None = None) -> Iterator[tuple[Any, dict]]:
    """A page in a fresh context (an empty cache), with what it requested: ``local`` (URL -> bytes),
    ``outside`` (requests for anything but ``base``), ``errors`` (console errors, uncaught exceptions)."""
    context = browser.new_context(color_scheme="dark" if dark else "light", viewport={"width": width, "height": 844},
                                  service_workers="block")
    if init_script:
        context.add_init_script(init_script)
    page = context.new_page()
    page.set_default_timeout(120_000)
    record: dict = {"local": {}, "outside": [], "errors": [], "failed": []}

    def on_response(response: Any) -> None:
        if response.url.startswith(base):
            try:
                record["local"][response.url] = len(response.body())
            except Exception:  # noqa: BLE001 (a redirect has no body)
                record["local"][response.url] = 0
            if response.status >= 400:
                record["failed"].append(f"HTTP {response.status} {response.url}")

    page.on("request", lambda r: r.url.startswith((base, "data:", "blob:")) or record["outside"].append(r.url))
    page.on("response", on_response)
    page.on("requestfailed", lambda r: record["failed"].append(f"{r.failure} {r.url}"))
    page.on("console", lambda m: m.type == "error" and record["errors"].append(m.text))
    page.on("pageerror", lambda e: record["errors"].append(str(e)))
    page.goto(base + path, wait_until="load")
    page.wait_for_selector("[data-tt-translate] .tt-translate-form")
    try:
        yield page, record
    finally:
        context.close()


def _clean(record: dict) -> None:
    assert not record["outside"], f"requests left the site: {record['outside']}"
    assert not record["failed"], record["failed"]
    assert not record["errors"], record["errors"]


# Records each text the translation line shows while the model writes (one per step when greedy).
WATCH_OUTPUT_JS = """() => {
  window.ttShown = [];
  new MutationObserver((records) => records.forEach((r) => r.addedNodes.forEach((n) => window.ttShown.push(n.data))))
    .observe(document.querySelector('[data-tt-translate] .tt-translate-output'), {childList: true});
}"""


def _translate_in_widget(page: Any, sentence: str, beam: str = "1") -> dict:
    page.fill("[data-tt-translate] textarea", sentence)
    page.select_option("[data-tt-translate] .tt-translate-decoding", beam)
    page.evaluate(WATCH_OUTPUT_JS)
    page.click("[data-tt-translate] .tt-translate-button")
    page.wait_for_function("() => ['done', 'failed'].includes(document.querySelector('[data-tt-translate]').dataset.state)"
                           " && !document.querySelector('.tt-translate-button').disabled")
    return page.evaluate("""() => {
      const root = document.querySelector('[data-tt-translate]');
      const texts = (selector) => Array.from(root.querySelectorAll(selector), (e) => e.textContent);
      return {state: root.dataset.state, status: root.querySelector('.tt-translate-status').textContent,
              text: root.querySelector('.tt-translate-output').textContent,
              source: texts('[data-side=source] .tt-piece'), target: texts('[data-side=target] .tt-piece'),
              rows: root.querySelectorAll('.tt-translate-map tbody tr').length,
              cols: root.querySelectorAll('.tt-translate-map thead th').length - 1,
              weights: Array.from(root.querySelectorAll('.tt-translate-map td'), (e) => Number(e.dataset.weight)),
              timing: root.querySelector('.tt-translate-timing').textContent, shownOnTheWay: window.ttShown};
    }""")


def test_before_first_use_only_the_widgets_own_two_files_load(browser, where):
    base, path = where
    with opened(browser, base, path) as (page, record):
        page.wait_for_timeout(500)
        names = sorted(urlsplit(url).path.lstrip("/") for url in record["local"])  # without Sphinx's ?v=...
        widget_files = sorted(name.rsplit("/", 1)[-1] for name in names if "_static/widget/" in name)
        assert widget_files == ["widget.css", "widget.js"], widget_files
        assert not [name for name in names if LAZY.search(name)], names
        loaded = sum(record["local"].values())
        widget_bytes = sum(size for url, size in record["local"].items() if "/_static/widget/" in url)
        _clean(record)
    if path == "widget.html":  # the assembled page: itself and the widget's two files, nothing else
        assert names == ["_static/widget/widget.css", "_static/widget/widget.js", "widget.html"], names
    assert widget_bytes < 40_000, widget_bytes
    print(f"\n{path}: {loaded / 1e3:.1f} kB before first use, of which the widget's script and style "
          f"{widget_bytes / 1e3:.1f} kB; the runtime and the model are fetched on first use")


def test_sentences_typed_on_a_phone_in_dark_mode(browser, where, shipped):
    base, path = where
    sentences = [e["source"] for e in pretrained.info().run["examples"]][:2] + ["Ein kleiner Junge spielt im Garten."]
    expected = shipped.translate(sentences, beam_size=1, batch_size=1)
    with opened(browser, base, path, dark=True, width=390) as (page, record):
        for sentence, translation in zip(sentences, expected):
            shown = _translate_in_widget(page, sentence)
            assert shown["state"] == "done", shown["status"]
            assert shown["text"] == translation
            assert shown["source"][:-1] == shipped.src_tokenizer.tokenize(sentence)  # and <eos>, the source format's
            assert shown["target"][-1] == "<eos>" and shown["target"][:-1] == shipped.translate_tokens([sentence], beam_size=1)[0]
            assert (shown["rows"], shown["cols"]) == (len(shown["target"]), len(shown["source"]))
            # token by token: the line grew with every step, each time a beginning of the translation
            on_the_way = [text for text in shown["shownOnTheWay"] if text not in ("…", translation)]
            assert len(set(on_the_way)) >= len(shown["target"]) - 3, shown["shownOnTheWay"]
            assert all(translation.startswith(text) for text in on_the_way), shown["shownOnTheWay"]
            assert re.search(r"\d+ decoder steps, [\d.]+ ms a token", shown["timing"]), shown["timing"]
        # nothing wider than the phone's column, the heatmap scrolling inside its own box
        widths = page.evaluate("""() => ({page: document.documentElement.scrollWidth,
          widget: document.querySelector('[data-tt-translate]').getBoundingClientRect().right})""")
        assert widths["page"] <= 390 and widths["widget"] <= 390, widths
        # the squares are drawn in a colour that stands out from the dark background
        colours = page.evaluate("""() => {
          const weights = Array.from(document.querySelectorAll('.tt-translate-map td'));
          const darkest = weights.reduce((a, b) => (Number(b.dataset.weight) > Number(a.dataset.weight) ? b : a));
          return {cell: getComputedStyle(darkest).backgroundColor, text: getComputedStyle(document.querySelector('.tt-translate-output')).color};
        }""")
        assert colours["cell"] not in ("rgba(0, 0, 0, 0)", "transparent"), colours
        # hovering a square reads its weight; another layer and head redraw the heatmap
        page.hover(".tt-translate-map tbody tr:nth-child(1) td:nth-child(2)")
        readout = page.text_content(".tt-translate-readout")
        assert re.search(r"← .*: [01]\.\d\d$", readout), readout
        before = page.evaluate("() => Array.from(document.querySelectorAll('.tt-translate-map td'), e => e.dataset.weight)")
        page.select_option(".tt-translate-layer", "0")
        page.select_option(".tt-translate-head", "2")
        after = page.evaluate("() => Array.from(document.querySelectorAll('.tt-translate-map td'), e => e.dataset.weight)")
        assert len(after) == len(before) and after != before
        # a blank sentence: nothing translated, no heatmap left from the sentence before
        blank = _translate_in_widget(page, "  ")
        assert (blank["state"], blank["text"], blank["rows"], blank["target"]) == ("done", "(nothing to translate)", 0, [])
        requested = [url.rsplit("/", 1)[-1] for url in record["local"]]
        assert {"encoder.onnx", "decoder.onnx", "ort-wasm-simd-threaded.wasm", "tokenizer.json"} <= set(requested)
        _clean(record)


# The whole batch in the page, by the widget's own translator (what the button calls): for each
# sentence its source pieces, output pieces and text, the largest |row sum - 1| of the cross-attention
# over every layer, head and row, and the decoder's step times.
BATCH_JS = """async ({sentences, beamSize}) => {
  const translator = await window.TransformerWidget.load();
  const out = [];
  for (const sentence of sentences) {
    const r = await translator.translate(sentence, {beamSize});
    let worst = 0;
    for (let l = 0; l < r.cross.layers; l++) for (let h = 0; h < r.cross.heads; h++) for (let t = 0; t < r.cross.rows; t++) {
      let sum = 0;
      for (let s = 0; s < r.cross.cols; s++) sum += r.cross.at(l, h, t, s);
      worst = Math.max(worst, Math.abs(sum - 1));
    }
    out.push({source: r.source.pieces, pieces: r.pieces, text: r.text, rowSumError: worst, cols: r.cross.cols,
              stepMs: r.stepMs});
  }
  return {results: out, loadSeconds: translator.loadSeconds, modelBytes: translator.modelBytes};
}"""


def _first_test_sentences(folder: Path, count: int = 200) -> list[str]:
    return [source for source, _ in read_multi30k_split("test", folder, "de", "en")[:count]]


@pytest.mark.multi30k
def test_the_first_200_test_sentences_as_python_translates_them(browser, one_site, shipped, real_multi30k):
    base, path = one_site
    sentences = _first_test_sentences(real_multi30k)
    expected = shipped.translate_tokens(sentences, beam_size=1)
    with opened(browser, base, path) as (page, record):
        batch = page.evaluate(BATCH_JS, {"sentences": sentences, "beamSize": 1})
        _clean(record)
    results = batch["results"]
    assert [r["source"] for r in results] == [shipped.src_tokenizer.tokenize(s) for s in sentences]
    same = sum(r["pieces"] == e for r, e in zip(results, expected))
    assert same >= 0.99 * len(sentences), [(s, r["pieces"], e) for s, r, e in zip(sentences, results, expected) if r["pieces"] != e]
    assert all(r["text"] == shipped.detokenize(r["pieces"]) for r in results)
    # a row of softmax weights sums to one up to float32 rounding of its S terms
    for r in results:
        assert r["rowSumError"] <= r["cols"] * UNIT_ROUNDOFF * 4, r
    steps = [ms for r in results for ms in r["stepMs"]]
    print(f"\n{path}: {same} of {len(sentences)} greedy translations identical to PyTorch's, every source's pieces "
          f"identical; model loaded in {batch['loadSeconds']:.2f} s ({batch['modelBytes'] / 1e6:.1f} MB of ONNX); "
          f"{sum(steps) / len(steps):.1f} ms a decoder step (a token) over {len(steps)} steps; largest "
          f"|row sum - 1| {max(r['rowSumError'] for r in results):.1e}")


@pytest.mark.multi30k
def test_beam_search_with_the_chosen_length_penalty(browser, one_site, shipped, real_multi30k):
    base, path = one_site
    beam_size, alpha = shipped.decoding_settings()
    assert beam_size > 1
    sentences = _first_test_sentences(real_multi30k, 20)
    expected = shipped.translate_tokens(sentences, beam_size=beam_size, length_penalty=alpha, batch_size=1)
    with opened(browser, base, path) as (page, record):
        batch = page.evaluate(BATCH_JS, {"sentences": sentences, "beamSize": beam_size})
        shown = _translate_in_widget(page, sentences[0], beam=str(beam_size))
        _clean(record)
    same = sum(r["pieces"] == e for r, e in zip(batch["results"], expected))
    assert same >= 19, [(r["pieces"], e) for r, e in zip(batch["results"], expected) if r["pieces"] != e]
    assert shown["text"] == shipped.detokenize(expected[0])
    print(f"\n{path}: beam {beam_size}, length penalty {alpha}: {same} of {len(sentences)} as PyTorch's")


def test_opened_from_a_file_it_says_how_to_serve_the_site(browser, assembled):
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((assembled / "widget.html").as_uri())
    page.wait_for_selector("[data-tt-translate] .tt-translate-form")
    status = page.text_content(".tt-translate-status")
    assert "python -m http.server" in status and "\n" not in status, status
    assert page.is_disabled(".tt-translate-button")
    assert not errors, errors
    context.close()


def test_without_webassembly_it_says_so(browser, assembled):
    with serve(assembled) as base, opened(browser, base, "widget.html", init_script="delete window.WebAssembly;") as (page, record):
        status = page.text_content(".tt-translate-status")
        assert status == page.evaluate("() => window.TransformerWidget.NO_WASM")
        assert page.is_disabled(".tt-translate-button")
        _clean(record)


def test_the_vendored_runtime_is_the_locked_one(assembled):
    manifest = json.loads((assembled / "_static" / "widget" / site_widget.MANIFEST).read_text(encoding="utf-8"))
    lock = json.loads((ROOT / "package-lock.json").read_text(encoding="utf-8"))["packages"]["node_modules/onnxruntime-web"]
    assert manifest["runtime"]["version"] == lock["version"] and manifest["runtime"]["integrity"] == lock["integrity"]
    vendored = sorted(p.name for p in (assembled / "_static" / "widget").iterdir())
    assert vendored == sorted([*site_widget.WEB_FILES, *site_widget.RUNTIME_FILES, *site_widget.MODEL_FILES, site_widget.MANIFEST])
    header = (assembled / "_static" / "widget" / "ort.wasm.min.js").read_text(encoding="utf-8")[:200]
    assert f"ONNX Runtime Web v{lock['version']}" in header and "MIT License" in header
