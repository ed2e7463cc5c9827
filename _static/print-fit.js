// Paper does not scroll. Printed, what scrolls sideways on screen is set smaller until it fits the
// page: a display equation (MathJax's sizes are in em, so its font size scales it), a code block or
// a text output (an ASCII drawing stays a drawing), a table. A code block that would need to be smaller than
// MIN_CODE wraps instead (a library listing under its own indentation, site.css). Runs when the page
// switches to print media (printing, "save as PDF", the browser test's print emulation) and undoes
// itself afterwards.
(function () {
  "use strict";
  if (!window.matchMedia) return;
  const media = window.matchMedia("print");
  const MIN_CODE = 0.6;  // of the print size of code (site.css): smaller is hard to read on paper
  const MIN_TABLE = 0.6;  // of the print size of a table (site.css)

  function fitEquations() {
    document.querySelectorAll('.bd-content mjx-container[display="true"]').forEach(function (m) {
      m.style.removeProperty("font-size");
      if (!media.matches) return;
      const room = m.parentElement.clientWidth, width = m.scrollWidth;
      if (room > 0 && width > room) m.style.fontSize = Math.floor(85 * room / width) + "%";
    });
  }

  // Each block's (or table's) font size, set smaller until it fits its room. Only the text scales, not
  // the padding and borders around it, and glyph widths round: measured again, up to three times.
  // Every block is read, then every one written: a write between reads would lay the page out again.
  function shrink(elements, room, minimum, tooSmall) {
    const size = new Map(elements.map(function (e) { return [e, parseFloat(getComputedStyle(e).fontSize)]; }));
    let left = elements;
    for (let pass = 0; pass < 3 && left.length; pass++) {
      const sizes = left.map(function (e) {
        const style = getComputedStyle(e);
        const frame = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight)
          + parseFloat(style.borderLeftWidth) + parseFloat(style.borderRightWidth);
        return [e, room(e), e.scrollWidth, parseFloat(style.fontSize), frame];
      });
      left = [];
      sizes.forEach(function (s) {
        const e = s[0], space = s[1], width = s[2], font = s[3], frame = s[4];
        if (!(space > 0 && width > space + 1)) return;
        const scale = (space - frame - 2) / Math.max(width - frame, 1);
        if (font * scale >= minimum * size.get(e)) {
          e.style.fontSize = (font * scale).toFixed(2) + "px";
          left.push(e);
        } else tooSmall(e);
      });
    }
  }

  function fitCode() {
    const blocks = Array.from(document.querySelectorAll(".bd-content pre"));
    blocks.forEach(function (pre) {
      pre.style.removeProperty("font-size");
      pre.classList.remove("tt-print-wrap");
    });
    if (!media.matches) return;
    shrink(blocks, function (pre) { return pre.clientWidth; }, MIN_CODE,
           function (pre) { pre.style.removeProperty("font-size"); pre.classList.add("tt-print-wrap"); });
  }

  // A table wider than its column (site.css already lets its cells wrap) is set smaller too, down to
  // MIN_TABLE of its print size.
  function fitTables() {
    const tables = Array.from(document.querySelectorAll(".bd-content table"));
    tables.forEach(function (t) { t.style.removeProperty("font-size"); });
    if (!media.matches) return;
    const column = function (t) {
      const article = t.closest("article") || document.body;
      return Math.min(t.parentElement.clientWidth || Infinity, article.clientWidth);
    };
    const wide = tables.filter(function (t) { return t.getClientRects().length && t.scrollWidth > column(t) + 1; });
    shrink(wide, column, MIN_TABLE, function () {});
  }

  function fit() {
    fitEquations();
    fitCode();
    fitTables();
  }
  if (media.addEventListener) media.addEventListener("change", fit);
  else if (media.addListener) media.addListener(fit);
  window.addEventListener("beforeprint", fit);
  window.addEventListener("afterprint", fit);
  document.addEventListener("toggle", function () { if (media.matches) fit(); }, true);  // opened before printing
})();
