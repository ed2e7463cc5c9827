// What a cell prints is read as sentences: site.css wraps it at the column. This script
// - marks each printed line (tt-printed-line, with its indentation in --tt-indent), so that a wrapped
//   line goes on under its own indentation plus two, not at the left edge;
// - finds the printed tables (tt-printed-table): lines whose columns are aligned with runs of spaces,
//   or drawn with box characters. Wrapped, their columns would break apart; they keep their lines and
//   scroll (with the cue), and the browser test (tests/test_site.py) reports each one wider than its
//   box: such a result is a table, to be shown as one (transformer_lib.book.tables.show_table).
(function () {
  "use strict";
  const PRINTED = ".bd-content div.cell_output .output.stream pre, .bd-content div.cell_output .output.stderr pre";
  const ALIGNED = /\S {2,}\S/;  // a gap of two spaces or more between words: a column
  const DRAWN = /[\u2500-\u257f]|^\s*-{3,}(\s+-{3,})+\s*$/;  // box drawing, or a "---  ---" rule

  function isTable(lines) {
    const full = lines.filter(l => l.trim());
    if (full.some(l => DRAWN.test(l))) return true;
    const aligned = full.filter(l => ALIGNED.test(l.trim()));
    return aligned.length >= 2 && aligned.length * 2 >= full.length;
  }

  function markLines(pre, lines) {
    // only plain text (myst-nb leaves an empty <span> first); coloured output keeps its markup
    if (Array.from(pre.children).some(e => e.textContent)) return;
    const text = lines[lines.length - 1] === "" ? lines.slice(0, -1) : lines;
    pre.textContent = "";
    for (const line of text) {
      const span = document.createElement("span");
      span.className = "tt-printed-line";
      // under its indentation (at most 6: a line that lines up far right wraps at the left instead)
      span.style.setProperty("--tt-indent", String(Math.min(6, line.length - line.trimStart().length)));
      span.textContent = line === "" ? "\u200b" : line;  // an empty line keeps its height
      pre.appendChild(span);
    }
  }

  function start() {
    document.querySelectorAll(PRINTED).forEach(function (pre) {
      const lines = pre.textContent.split("\n");
      if (isTable(lines)) pre.classList.add("tt-printed-table");
      else markLines(pre, lines);
    });
    if (window.ttScrollCues) window.ttScrollCues.update();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
