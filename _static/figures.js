// Matplotlib figures (PNG outputs) keep readable text on a narrow screen. A figure is drawn at
// 100 dpi; its smallest text, tick labels and legends, is 9 pt (12.5 px; transformer_lib.book.style).
// Shown at under 72% of the width it was drawn at, that text is under 9 px. So on a phone a figure is
// shown no smaller than 72% of its drawn width; what does not fit in the column scrolls sideways
// inside the cell's output box (site.css), and pinch-zoom still
// works. On a laptop every figure fits already (the browser test checks it); in print the rule is off
// (site.css) and figures shrink to the page. SVG drawings (transformer_lib.book.style.show_svg) are
// left out: a vector drawing shrinks to the column and the reader zooms in without blur.
(function () {
  "use strict";
  const MIN_SCALE = 0.72;
  const FIGURES = '.bd-content div.cell_output img:not(.tt-altair-static):not([src$=".svg"])';

  function keepReadable(img) {
    if (img.naturalWidth > 0) img.style.minWidth = Math.ceil(MIN_SCALE * img.naturalWidth) + "px";
  }

  function start() {
    document.querySelectorAll(FIGURES).forEach(function (img) {
      if (img.complete) keepReadable(img);
      else img.addEventListener("load", function () { keepReadable(img); }, { once: true });
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
