// Paper does not scroll. Printed, what scrolls sideways on screen is set smaller until it fits the
// page: a display equation (MathJax's sizes are in em, so its font size scales it), a code block or
// a text output (an ASCII drawing stays a drawing). A code block that would need to be smaller than
// MIN_CODE wraps instead (a library listing under its own indentation, site.css). Runs when the page
// switches to print media (printing, "save as PDF", the browser test's print emulation) and undoes
// itself afterwards.
(function () {
  "use strict";
  if (!window.matchMedia) return;
  const media = window.matchMedia("print");
  const MIN_CODE = 0.6;  // of the print size of code (site.css): smaller is hard to read on paper

  function fitEquations() {
    document.querySelectorAll('.bd-content mjx-container[display="true"]').forEach(function (m) {
      m.style.removeProperty("font-size");
      if (!media.matches) return;
      const room = m.parentElement.clientWidth, width = m.scrollWidth;
      if (room > 0 && width > room) m.style.fontSize = Math.floor(85 * room / width) + "%";
    });
  }

  function fitCode() {
    const blocks = Array.from(document.querySelectorAll(".bd-content pre"));
    blocks.forEach(function (pre) {
      pre.style.removeProperty("font-size");
      pre.classList.remove("tt-print-wrap");
    });
    if (!media.matches) return;
    // Read every block, then write: a write between reads would lay the page out again.
    const sizes = blocks.map(function (pre) {
      return [pre, pre.clientWidth, pre.scrollWidth, parseFloat(getComputedStyle(pre).fontSize)];
    });
    sizes.forEach(function (s) {
      const pre = s[0], room = s[1], width = s[2], size = s[3];
      if (!(room > 0 && width > room + 1)) return;
      const scale = (room - 2) / width;
      if (scale >= MIN_CODE) pre.style.fontSize = (size * scale).toFixed(2) + "px";
      else pre.classList.add("tt-print-wrap");
    });
  }

  function fit() {
    fitEquations();
    fitCode();
  }
  if (media.addEventListener) media.addEventListener("change", fit);
  else if (media.addListener) media.addListener(fit);
  window.addEventListener("beforeprint", fit);
  window.addEventListener("afterprint", fit);
  document.addEventListener("toggle", function () { if (media.matches) fit(); }, true);  // opened before printing
})();
