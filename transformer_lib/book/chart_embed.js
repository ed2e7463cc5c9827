// The script every chart carries: it replaces the chart's static SVG with the interactive chart.
// transformer_lib/book/charts.py leaves out these comment lines and fills in the four arguments of the
// last line (the chart's id, its Vega-Lite spec, vega-embed's options, the CDN addresses) with JSON.
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
    console.error("transformer_lib.book.charts: chart " + id + " could not be drawn:", err);
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
