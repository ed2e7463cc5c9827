// Paper does not scroll: printed, a display equation wider than the page is set smaller until it fits
// (MathJax's sizes are in em, so its font size scales it). On screen such an equation scrolls in its
// own box instead (site.css, scroll-cue.js). Runs when the page switches to print media (printing,
// "save as PDF", or the browser test's print emulation), and undoes itself afterwards.
(function () {
  "use strict";
  if (!window.matchMedia) return;
  const media = window.matchMedia("print");
  function fit() {
    document.querySelectorAll('.bd-content mjx-container[display="true"]').forEach(function (m) {
      m.style.removeProperty("font-size");
      if (!media.matches) return;
      const room = m.parentElement.clientWidth, width = m.scrollWidth;
      if (room > 0 && width > room) m.style.fontSize = Math.floor(85 * room / width) + "%";
    });
  }
  if (media.addEventListener) media.addEventListener("change", fit);
  else if (media.addListener) media.addListener(fit);
  window.addEventListener("beforeprint", fit);
  window.addEventListener("afterprint", fit);
})();
