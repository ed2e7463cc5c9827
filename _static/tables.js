// Tables show their point on a phone (issue 44). Every table of a cell's output holds its first column
// (the row labels) at the left while it scrolls (site.css); this script
// - gives the box that scrolls the held column's width (--tt-held), so that the scroll cue fades the
//   edge beside the labels rather than the labels;
// - lets the headers of a table wider than its box wrap (tt-wrap-heads: a number column's header
//   stays on one line otherwise), which fits most tables on a laptop;
// - sets a table that is still wider than its box once condensed as stacked rows (tt-stacked): each
//   row its label, then a line per column, "column name ... value" (each cell gets its column's name,
//   data-tt-column). A table with a header over several columns (colspan) is left to scroll.
// Tables are fitted again when the window's width changes and when a toggle opens.
(function () {
  "use strict";
  const TABLES = ".bd-content div.cell_output table";

  function scroller(table) {
    for (let e = table.parentElement; e && !e.classList.contains("cell_output"); e = e.parentElement) {
      const x = getComputedStyle(e).overflowX;
      if (x === "auto" || x === "scroll") return e;
    }
    return null;
  }

  function columnNames(table) {
    const head = table.tHead;
    if (!head || !head.rows.length) return null;
    if (Array.from(head.querySelectorAll("th, td")).some(c => c.colSpan > 1 || c.rowSpan > 1)) return null;
    const names = Array.from(head.rows[head.rows.length - 1].cells).map(c => c.textContent.trim());
    if (names.length < 3) return null;  // a label and one value: nothing to stack
    const fits = Array.from(table.tBodies).every(b => Array.from(b.rows).every(r => r.cells.length === names.length));
    return fits ? names : null;
  }

  function fit(table) {
    if (!table.getClientRects().length) return;  // in a closed toggle: fitted when it opens
    const box = scroller(table);
    table.classList.remove("tt-stacked", "tt-wrap-heads");
    const room = box ? box.clientWidth : table.parentElement.clientWidth;
    const over = () => table.scrollWidth > room + 1;
    // Too wide: first the headers wrap (a number column's header is otherwise kept on one line); only
    // a table still wider than its box is stacked. A table that fits keeps its headers on one line.
    if (over()) table.classList.add("tt-wrap-heads");
    const wide = over();
    const names = wide ? columnNames(table) : null;
    if (names) {
      Array.from(table.tBodies).forEach(b => Array.from(b.rows).forEach(r =>
        Array.from(r.cells).forEach((c, j) => c.setAttribute("data-tt-column", names[j]))));
      table.classList.add("tt-stacked");
    }
    if (box) {
      const first = table.querySelector("tr > :first-child");
      box.style.setProperty("--tt-held", first && !names ? Math.ceil(first.getBoundingClientRect().width) + "px" : "0px");
    }
  }

  function fitAll() {
    document.querySelectorAll(TABLES).forEach(fit);
    if (window.ttScrollCues) window.ttScrollCues.update();
  }

  let pending = null, width = 0;
  function soon() {
    if (pending) return;
    pending = requestAnimationFrame(function () { pending = null; fitAll(); });
  }

  window.ttTables = {fit: fitAll};
  function start() {
    width = innerWidth;
    fitAll();
    window.addEventListener("resize", function () { if (innerWidth !== width) { width = innerWidth; soon(); } });
    window.addEventListener("load", soon);
    if (document.fonts) document.fonts.ready.then(soon);
    document.addEventListener("toggle", soon, true);  // a <details> opened: its tables have a width now
    if (window.matchMedia) window.matchMedia("print").addEventListener("change", soon);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
