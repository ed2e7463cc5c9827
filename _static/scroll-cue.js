// Boxes that scroll sideways say so. A code listing, an equation, a table or an output wider than
// the column scrolls inside its own box (site.css); a phone shows no scroll bar, so such a box gets a
// cue: data-tt-scroll="start" | "middle" | "end" (which edges hide more), and site.css fades the
// hidden edge(s) and shows a thin bar. Boxes are re-checked when the page is laid out again (fonts,
// MathJax, charts, a turned phone, an opened toggle). tests/test_site.py calls
// window.ttScrollCues.update() and fails on a box that is wider than its room without the cue.
(function () {
  "use strict";
  const AREA = "article.bd-article, main";

  function scrollsSideways(el) {
    const x = getComputedStyle(el).overflowX;
    return x === "auto" || x === "scroll";
  }

  // Where a box scrolls to: null (it does not scroll), or which edges hide more.
  function state(el) {
    const hidden = el.scrollWidth - el.clientWidth;
    if (hidden <= 1 || !scrollsSideways(el)) return null;
    const left = el.scrollLeft > 1, right = el.scrollLeft < hidden - 1;
    return left && right ? "middle" : left ? "end" : "start";
  }

  function apply(el, value) {
    if (value === null) {
      el.removeAttribute("data-tt-scroll");
      return;
    }
    if (el.getAttribute("data-tt-scroll") !== value) el.setAttribute("data-tt-scroll", value);
    if (!el.ttScrollCue) {
      el.ttScrollCue = true;
      el.addEventListener("scroll", function () { apply(el, state(el)); }, {passive: true});
      if (!el.hasAttribute("tabindex")) el.setAttribute("tabindex", "0");  // scrollable by keyboard
    }
  }

  // Every element of the area but what is inside a drawing (an SVG, a typeset equation): a chart or an
  // equation holds thousands of elements, none of which scrolls, and update() runs several times while
  // a page loads.
  function boxes(area) {
    const found = [];
    const walker = document.createTreeWalker(area, NodeFilter.SHOW_ELEMENT, {
      acceptNode: function (el) {
        if (el.localName === "svg") return NodeFilter.FILTER_REJECT;
        if (el.localName === "mjx-container") {
          found.push(el);  // the equation's own box may scroll, not its parts
          return NodeFilter.FILTER_REJECT;
        }
        return NodeFilter.FILTER_ACCEPT;
      },
    });
    while (walker.nextNode()) found.push(walker.currentNode);
    return found;
  }

  function update() {
    const area = document.querySelector(AREA);
    if (!area) return 0;
    // Read every box first, then write: a write between reads would lay the page out again.
    const changes = [];
    for (const el of boxes(area)) {
      if (el.scrollWidth > el.clientWidth + 1 || el.hasAttribute("data-tt-scroll")) changes.push([el, state(el)]);
    }
    changes.forEach(function (c) { apply(c[0], c[1]); });
    return changes.filter(function (c) { return c[1] !== null; }).length;
  }

  let pending = null;
  function soon() {
    if (pending) return;
    pending = requestAnimationFrame(function () { pending = null; update(); });
  }

  window.ttScrollCues = {update: update};
  function start() {
    update();
    window.addEventListener("resize", soon);
    window.addEventListener("load", soon);
    if (document.fonts) document.fonts.ready.then(soon);
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) MathJax.startup.promise.then(soon);
    document.addEventListener("toggle", soon, true);  // a <details> opened or closed
    if (window.ResizeObserver) {
      const area = document.querySelector(AREA);
      if (area) new ResizeObserver(soon).observe(area);
    }
    if (window.MutationObserver) {  // charts drawn, MathJax typeset
      const area = document.querySelector(AREA);
      if (area) new MutationObserver(soon).observe(area, {childList: true, subtree: true});
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
