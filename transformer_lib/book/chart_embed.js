// The script every chart carries: it replaces the chart's static SVG with the interactive chart.
// transformer_lib/book/charts.py leaves out these comment lines and fills in the four arguments of the
// last line (the chart's id, its Vega-Lite spec, vega-embed's options, the CDN addresses) with JSON.
(function (id, spec, embedOptions, cdn) {
  "use strict";
  var box = document.getElementById(id);
  if (!box) return;
  // Readable on a dark page: light text and guides, no white card. Marks keep their colours. Laid
  // over the chart's own config (the book's theme sets light-page colours there), so it wins.
  var GUIDE = {labelColor: "#d5d9de", titleColor: "#e8eaed"};
  var DARK = {
    background: "transparent",
    title: {color: "#e8eaed", subtitleColor: "#c4c8cd"},
    style: {"guide-label": {fill: "#d5d9de"}, "guide-title": {fill: "#e8eaed"}},
    axis: Object.assign({domainColor: "#9aa0a6", tickColor: "#9aa0a6", gridColor: "#3c4043"}, GUIDE),
    legend: GUIDE,
    header: GUIDE,
    text: {color: "#e8eaed"},
    view: {stroke: "#5f6368"}
  };
  function merged(base, over) {
    var out = Object.assign({}, base);
    Object.keys(over).forEach(function (k) {
      var a = out[k], b = over[k];
      out[k] = a && b && typeof a === "object" && typeof b === "object" && !Array.isArray(b) ? merged(a, b) : b;
    });
    return out;
  }
  function forTheme(s, dark) {
    return dark ? Object.assign({}, s, {config: merged(s.config || {}, DARK)}) : s;
  }
  function isDark() {
    var theme = document.documentElement.getAttribute("data-theme");  // the book's website
    if (theme === "auto") return !!window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
    if (theme) return theme === "dark";
    return !!document.body && document.body.getAttribute("data-jp-theme-light") === "false";  // JupyterLab
  }
  // A chart fits its column: on a narrow screen a single view is redrawn narrower (its title wrapped
  // onto lines, its legend below), a chart of panels side by side has them stacked (stacked()), and a
  // chart that still does not fit is scaled down to the column; text drawn past the plot's edge is
  // kept in the drawing (fit()).
  // "data-tt-room" records the width it was fitted to.
  var ACTIONS_PAD = 38;  // vega-embed's padding for its "..." menu
  function single(s) {
    var e = s.encoding || {};  // a chart faceted by its encoding (altair's column=/row=) is a facet
    return !(s.facet || s.concat || s.hconcat || s.vconcat || s.repeat || e.facet || e.column || e.row)
      && !!(s.mark || s.layer);
  }
  function titleFont(s, obj) {
    var t = (s.config && s.config.title) || {};
    return "bold " + ((obj && obj.fontSize) || t.fontSize || 13) + "px " + ((obj && obj.font) || t.font || "sans-serif");
  }
  function wrapTitle(s, room) {
    var obj = s.title && typeof s.title === "object" && !Array.isArray(s.title) ? s.title : null;
    var text = obj ? obj.text : s.title;
    if (typeof text !== "string" || !room) return s;
    var ctx = document.createElement("canvas").getContext("2d");
    ctx.font = titleFont(s, obj);
    if (ctx.measureText(text).width <= room) return s;
    var lines = [], line = "";
    text.split(" ").forEach(function (word) {
      var next = line ? line + " " + word : word;
      if (line && ctx.measureText(next).width > room) { lines.push(line); line = word; } else { line = next; }
    });
    lines.push(line);
    var copy = Object.assign({}, s);
    copy.title = obj ? Object.assign({}, obj, {text: lines}) : lines;
    return copy;
  }
  function narrowed(s, room) {
    var copy = Object.assign({}, s, {width: Math.max(room, 120), autosize: {type: "fit-x", contains: "padding"}});
    var config = Object.assign({}, s.config);
    config.legend = Object.assign({orient: "bottom"}, config.legend);
    copy.config = config;
    return oneColumnLegends(copy);
  }
  // The spec with every legend an encoding sets itself (alt.Legend(orient="right")) below the plot, one
  // entry a line: a legend beside the plot, or its entries abreast, can be the widest part of a chart.
  function oneColumnLegends(s) {
    if (Array.isArray(s)) return s.map(oneColumnLegends);
    if (!s || typeof s !== "object") return s;
    var copy = {};
    Object.keys(s).forEach(function (k) {
      if (k === "data" || k === "datasets") copy[k] = s[k];
      else if (k === "legend" && s[k] && typeof s[k] === "object") {
        copy[k] = Object.assign({}, s[k], {columns: 1});
        if (/left|right/.test(s[k].orient || "")) copy[k].orient = "bottom";
      }
      else copy[k] = oneColumnLegends(s[k]);
    });
    return copy;
  }
  // A chart of panels side by side (hconcat, concat, a facet by column) that is too wide: its panels
  // stacked, one under the other, each at its own size and text (issue 44: a phone scaled 72 heads'
  // panels to text 6 px high). null when it has no panels side by side.
  function stacked(s) {
    var copy = Object.assign({}, s), e = s.encoding || {};
    if (s.hconcat) { copy.vconcat = s.hconcat; delete copy.hconcat; }
    else if (s.concat && s.columns !== 1) copy.columns = 1;
    else if (s.facet && s.facet.column && !s.facet.row) {
      copy.facet = Object.assign({}, s.facet, {row: s.facet.column}); delete copy.facet.column;
    } else if ((s.facet || s.repeat || e.facet) && s.columns !== 1) copy.columns = 1;
    else if (e.column && !e.row) {
      copy.encoding = Object.assign({}, e, {row: e.column}); delete copy.encoding.column;
    } else return null;
    copy.config = Object.assign({}, s.config);
    copy.config.legend = Object.assign({orient: "bottom", columns: 1}, copy.config.legend);  // below, one entry a line
    return oneColumnLegends(copy);
  }
  // Panels one under the other still too wide: each panel of a vconcat, or the panel of a facet,
  // with a fixed width made narrower by `excess` px (not under 120), the legend below; null when no
  // panel has a width to take from.
  function narrowedPanels(s, excess) {
    var changed = false;
    function narrower(p) {
      if (typeof p.width !== "number") return p;
      changed = true;
      return Object.assign({}, p, {width: Math.max(120, p.width - excess)});
    }
    var copy = s.vconcat ? Object.assign({}, s, {vconcat: s.vconcat.map(function (p) { return single(p) ? narrower(p) : p; })})
      : s.spec ? Object.assign({}, s, {spec: narrower(s.spec)}) : narrower(s);
    if (!changed) return null;
    copy.config = Object.assign({}, s.config);
    copy.config.legend = Object.assign({orient: "bottom", columns: 1}, copy.config.legend);  // below, one entry a line
    return oneColumnLegends(copy);
  }
  var live = null, view = null, shown = null, fitted = null, shift = null;
  function tooWide() {
    return live.scrollWidth > box.clientWidth + 1;
  }
  function drawing() {
    return live && live.querySelector("svg.marks");
  }
  // Vega sizes its SVG to the view, its axes and legends, but not to text marks drawn past the plot
  // (a label at a line's end): those stick out of the SVG, which cuts them. How far, in CSS px:
  function overhang() {
    var svg = drawing(), o = {left: 0, right: 0};
    if (!svg) return o;
    var edge = svg.getBoundingClientRect();
    Array.prototype.forEach.call(svg.querySelectorAll("text"), function (t) {
      var b = t.getBoundingClientRect();
      if (!b.width) return;
      o.left = Math.max(o.left, Math.ceil(edge.left - b.left));
      o.right = Math.max(o.right, Math.ceil(b.right - edge.right));
    });
    return o;
  }
  // ... and the SVG widened (its viewBox with it) to show them; again after Vega resizes its view.
  function reveal(o) {
    var svg = drawing();
    shift = o;
    if (!svg || o.left + o.right < 1 || !svg.viewBox || !svg.viewBox.baseVal) return;
    var vb = svg.viewBox.baseVal, width = parseFloat(svg.getAttribute("width")) || vb.width;
    var unit = vb.width / (svg.getBoundingClientRect().width || vb.width);  // user units per px
    var left = o.left * unit, right = o.right * unit;
    svg.setAttribute("width", String(width + left + right));
    svg.setAttribute("viewBox", [vb.x - left, vb.y, vb.width + left + right, vb.height].join(" "));
  }
  function embed(s, opts) {
    if (view) view.finalize();
    shift = null;
    return window.vegaEmbed(live, s, opts).then(function (result) {
      view = result.view;
      box.ttView = view;  // for tests and the curious: the live Vega view
      view.addResizeListener(function () {
        if (shift) requestAnimationFrame(function () { reveal(shift); });
      });
    });
  }
  // Fit the chart just drawn to `room`: text that sticks out shown, then a single view redrawn
  // narrower (by what still sticks out, if anything), then whatever is still too wide scaled down.
  function fit(first, opts, room) {
    var o = overhang();
    reveal(o);
    if (!tooWide()) return Promise.resolve();
    if (!single(spec)) {
      var panels = stacked(first) || (first.vconcat ? first : null);
      if (!panels) {
        box.classList.add("tt-altair-scaled");  // site.css scales the drawing to the column
        return Promise.resolve();
      }
      return (panels === first ? Promise.resolve() : embed(panels, opts)).then(function () {
        reveal(overhang());
        if (!tooWide()) return null;
        var narrower = narrowedPanels(panels, live.scrollWidth - box.clientWidth + 4);
        return narrower ? embed(narrower, opts).then(function () { reveal(overhang()); }) : null;
      }).then(function () {
        if (tooWide()) box.classList.add("tt-altair-scaled");
      });
    }
    return embed(narrowed(first, room), opts).then(function () {
      var o = overhang();
      if (o.left + o.right < 1) return null;
      return embed(narrowed(first, room - o.left - o.right), opts).then(function () { reveal(overhang()); });
    }).then(function () {
      if (tooWide()) box.classList.add("tt-altair-scaled");
    });
  }
  function draw(force) {
    var dark = isDark(), width = box.clientWidth;
    if (dark === shown && (!force || width === fitted)) return null;
    var opts = Object.assign(
      {renderer: "svg", actions: {export: true, source: false, compiled: false, editor: false}},
      embedOptions,
      dark ? {tooltip: {theme: "dark"}} : {}
    );
    if (!live) {
      live = document.createElement("div");
      live.className = "tt-altair-live";
      box.appendChild(live);
    }
    var room = width ? width - (opts.actions === false ? 0 : ACTIONS_PAD) : 0;  // 0: not laid out (collapsed)
    var first = wrapTitle(forTheme(spec, dark), room);
    box.classList.remove("tt-altair-scaled");
    return embed(first, opts).then(function () {
      return room ? fit(first, opts, room) : null;
    }).then(function () {
      shown = dark;
      fitted = width;
      var still = box.querySelector(".tt-altair-static");
      if (still) still.remove();
      box.setAttribute("data-tt-room", String(width));
      box.setAttribute("data-tt-status", "rendered");
      box.setAttribute("data-tt-theme", dark ? "dark" : "light");
    });
  }
  function fail(err) {
    box.setAttribute("data-tt-status", "error");  // the static image stays
    console.error("transformer_lib.book.charts: chart " + id + " could not be drawn:", err);
  }
  function start() {
    // The chart's font (the book's web font) first, so Vega measures its labels in it.
    var fonts = document.fonts && spec.config && spec.config.font
      ? Promise.race([document.fonts.load("12px " + spec.config.font), new Promise(function (r) { setTimeout(r, 3000); })])
          .catch(function () {})
      : Promise.resolve();
    var queue = fonts.then(function () { return draw(false); }).catch(fail);
    function redraw(force) { queue = queue.then(function () { return draw(force); }).catch(fail); }
    if (window.MutationObserver) {
      new MutationObserver(function () { redraw(false); })
        .observe(document.documentElement, {attributes: true, attributeFilter: ["data-theme"]});
    }
    if (window.ResizeObserver) {  // a turned phone, a collapsed output opened
      var timer = null;
      new ResizeObserver(function () {
        if (box.clientWidth === fitted) return;
        clearTimeout(timer);
        timer = setTimeout(function () { redraw(true); }, 100);
      }).observe(box);
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
