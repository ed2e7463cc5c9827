/*
 * The page that translates (issue 49): the shipped model, run in the reader's browser by ONNX Runtime
 * Web (WebAssembly), translates German into English token by token, and shows the source and target
 * pieces, the cross-attention of any decoder layer and head (a heatmap to hover) and the time per token.
 *
 * A page carries <div data-tt-translate data-examples='["...", ...]'></div> (the `translate-widget`
 * directive of _ext/book_site.py writes it) and loads this file and widget.css, nothing else: the
 * runtime (ort.wasm.min.js, its .mjs and .wasm), the tokenizer, the decoding rules and the model
 * (encoder.onnx, decoder.onnx, tokenizer.json, model.json) are fetched from this file's folder when the
 * reader first asks for a translation. tools/site_widget.py puts them all there; nothing is fetched
 * from anywhere else.
 *
 * window.TransformerWidget.load() gives the translator the widgets use (tests/test_site_widget.py
 * calls its translate() directly as well as typing into the widget).
 */
(function () {
  "use strict";

  const script = document.currentScript;
  const BASE = new URL(".", script ? script.src : document.baseURI).href;
  const LAZY_SCRIPTS = ["ort.wasm.min.js", "tokenizer.js", "decoding.js"];
  const SERVE_HINT = "Opened as a file, the page cannot load the model (browsers refuse WebAssembly from file://): " +
    "run `python -m http.server` in the site's folder and open http://localhost:8000/.";
  const NO_WASM = "This browser has no WebAssembly, which the model needs to run in the page.";

  // --- loading, on first use -------------------------------------------------------------------------

  function loadScript(name) {
    return new Promise((resolve, reject) => {
      const element = document.createElement("script");
      element.src = BASE + name;
      element.onload = resolve;
      element.onerror = () => reject(new Error("could not load " + name));
      document.head.appendChild(element);
    });
  }

  async function fetchFile(name, as) {
    const response = await fetch(BASE + name);
    if (!response.ok) throw new Error("could not load " + name + " (HTTP " + response.status + ")");
    return as === "json" ? response.json() : new Uint8Array(await response.arrayBuffer());
  }

  let loading = null;

  function load() {
    if (!loading) {
      loading = (async () => {
        const started = performance.now();
        const [manifest, tokenizerData, encoderBytes, decoderBytes] = await Promise.all([
          fetchFile("model.json", "json"), fetchFile("tokenizer.json", "json"),
          fetchFile("encoder.onnx"), fetchFile("decoder.onnx"),
          ...LAZY_SCRIPTS.map(loadScript)]);
        const ort = window.ort;
        ort.env.wasm.wasmPaths = BASE;  // the .mjs and .wasm from this folder, not a CDN
        ort.env.wasm.numThreads = 1;  // threads need cross-origin isolation, which a static host does not give
        ort.env.logLevel = "error";
        const options = { executionProviders: ["wasm"], graphOptimizationLevel: "all" };
        const encoder = await ort.InferenceSession.create(encoderBytes, options);
        const decoder = await ort.InferenceSession.create(decoderBytes, options);
        const bytes = encoderBytes.byteLength + decoderBytes.byteLength;
        return new Translator(manifest, TransformerTokenizer.fromJSON(tokenizerData), encoder, decoder,
                              (performance.now() - started) / 1000, bytes);
      })();
      loading.catch(() => { loading = null; });  // a failed load may be tried again
    }
    return loading;
  }

  // --- the translator --------------------------------------------------------------------------------

  function int64(values, dims) {
    return new window.ort.Tensor("int64", BigInt64Array.from(values, (v) => BigInt(v)), dims);
  }

  function repeated(tensor, times) {  // (1, ...) -> (times, ...)
    if (times === 1) return tensor;
    const data = new tensor.data.constructor(tensor.data.length * times);
    for (let i = 0; i < times; i++) data.set(tensor.data, i * tensor.data.length);
    return new window.ort.Tensor(tensor.type, data, [times, ...tensor.dims.slice(1)]);
  }

  class Translator {
    constructor(manifest, tokenizer, encoder, decoder, loadSeconds, modelBytes) {
      Object.assign(this, { manifest, tokenizer, encoder, decoder, loadSeconds, modelBytes });
    }

    // Python's Translator.source_ids: the pieces' ids with the source format's specials.
    source(text) {
      const pieces = this.tokenizer.tokenize(text);
      const format = this.manifest.source;
      const ids = [...(format.add_bos ? [this.manifest.special_ids.bos] : []), ...this.tokenizer.toIds(pieces),
                   ...(format.add_eos ? [this.manifest.special_ids.eos] : [])];
      return { pieces, ids, shown: ids.map((id) => this.tokenizer.idToToken(id)) };
    }

    // text -> {text, pieces (output pieces), tokens (generated ids), source, cross, stepMs, ...}
    async translate(text, options = {}) {
      const chosen = this.manifest.decoding;
      const beamSize = options.beamSize || 1;
      const alpha = options.lengthPenalty === undefined ? chosen.length_penalty : options.lengthPenalty;
      const source = this.source(text);
      if (!source.pieces.length) return { text: "", pieces: [], tokens: [], shown: [], source, stepMs: [], cross: null };
      const S = source.ids.length;
      if (S > this.manifest.source.max_tokens) {
        throw new Error("the sentence is " + S + " pieces long, more than the model's " + this.manifest.source.max_tokens);
      }
      const src = int64(source.ids, [1, S]);
      const started = performance.now();
      const memory = (await this.encoder.run({ src })).memory;
      const encodeMs = performance.now() - started;
      const stepMs = [];
      const step = async (rows) => {
        const B = rows.length;
        const tgt = int64(rows.flat(), [B, rows[0].length]);
        const begun = performance.now();
        const out = await this.decoder.run({ tgt, memory: repeated(memory, B), src: repeated(src, B) });
        stepMs.push(performance.now() - begun);
        return { logits: out.logits.data, vocabSize: out.logits.dims[1], cross: out.cross_attention };
      };
      const rules = TransformerDecoding.settings(this.manifest, S);
      const report = options.onStep && (async (info) => {
        const partial = this.output(info.tokens, rules);
        await options.onStep({ ...partial, source, cross: beamSize === 1 ? crossOf(info.output.cross, info.tokens.length) : null });
      });
      const result = beamSize === 1
        ? await TransformerDecoding.greedy(step, rules, report)
        : await TransformerDecoding.beam(step, rules, beamSize, alpha, report);
      const decodeMs = stepMs.reduce((a, b) => a + b, 0);
      // The cross-attention of the output: one pass over <bos> and its tokens but the last (each row
      // is the query that chose the next token), as the last greedy step already computed it.
      const last = await step([[rules.bos, ...result.tokens.slice(0, -1)]]);
      stepMs.pop();
      return { ...this.output(result.tokens, rules), source, cross: crossOf(last.cross, result.tokens.length),
               stepMs, encodeMs, decodeMs, beamSize, lengthPenalty: alpha, hypotheses: result.hypotheses };
    }

    output(tokens, rules) {
      const pieces = TransformerDecoding.outputIds(tokens, rules).map((id) => this.tokenizer.idToToken(id));
      return { tokens, shown: tokens.map((id) => this.tokenizer.idToToken(id)), pieces,
               text: this.tokenizer.detokenize(pieces) };
    }
  }

  // The cross-attention (N, 1, H, T, S) as {layers, heads, rows, cols, at(layer, head, row, col)}.
  function crossOf(tensor, rows) {
    const [N, , H, T, S] = tensor.dims;
    const data = tensor.data;
    return {
      layers: N, heads: H, rows: Math.min(rows, T), cols: S,
      at: (l, h, t, s) => data[((l * H + h) * T + t) * S + s],
      // head = -1: the mean of the heads
      weight(l, h, t, s) {
        if (h >= 0) return this.at(l, h, t, s);
        let sum = 0;
        for (let k = 0; k < H; k++) sum += this.at(l, k, t, s);
        return sum / H;
      },
    };
  }

  // --- the widget on the page ------------------------------------------------------------------------

  function element(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) if (child) node.appendChild(child);
    return node;
  }

  function obstacle() {
    if (location.protocol === "file:") return SERVE_HINT;
    if (typeof WebAssembly !== "object" || typeof WebAssembly.instantiate !== "function") return NO_WASM;
    return null;
  }

  function attribute(root, name, otherwise) {
    try {
      return JSON.parse(root.getAttribute(name)) || otherwise;
    } catch (error) {
      return otherwise;
    }
  }

  let count = 0;

  class Widget {
    constructor(root) {
      const id = "tt-translate-" + ++count;
      const examples = attribute(root, "data-examples", []);
      const chosen = attribute(root, "data-decoding", {});
      this.root = root;
      this.input = element("textarea", { id: id + "-text", rows: "2", spellcheck: "false", lang: "de",
                                         class: "tt-translate-text" });
      this.input.value = examples[0] || "Zwei Hunde spielen im Schnee.";
      this.examples = element("select", { class: "tt-translate-examples", "aria-label": "Example sentences" },
                              element("option", { value: "", text: "Examples…" }),
                              ...examples.map((s) => element("option", { value: s, text: s })));
      this.decoding = element("select", { class: "tt-translate-decoding", "aria-label": "Decoding" },
                              element("option", { value: "1", text: "greedy" }));
      if (chosen.beam_size > 1) {  // the model's chosen decoding (its length penalty comes with the model)
        this.decoding.appendChild(element("option", { value: String(chosen.beam_size),
          text: "beam " + chosen.beam_size + ", α " + chosen.length_penalty }));
      }
      this.button = element("button", { type: "submit", class: "tt-translate-button", text: "Translate" });
      this.status = element("p", { class: "tt-translate-status", role: "status" });
      this.output = element("p", { class: "tt-translate-output", lang: "en", "aria-live": "polite" });
      this.sourcePieces = element("div", { class: "tt-translate-pieces", "data-side": "source" });
      this.targetPieces = element("div", { class: "tt-translate-pieces", "data-side": "target" });
      this.layer = element("select", { class: "tt-translate-layer", "aria-label": "Decoder layer" });
      this.head = element("select", { class: "tt-translate-head", "aria-label": "Head" });
      this.heatmap = element("div", { class: "tt-translate-heatmap" });
      this.readout = element("p", { class: "tt-translate-readout", text: "Hover over a square to read its weight." });
      this.timing = element("p", { class: "tt-translate-timing" });
      const form = element("form", { class: "tt-translate-form" },
        element("label", { for: this.input.id, text: "German sentence" }), this.input,
        element("div", { class: "tt-translate-controls" }, this.examples, this.decoding, this.button));
      this.result = element("div", { class: "tt-translate-result", hidden: "" },
        this.output,
        element("p", { class: "tt-translate-label", text: "Source pieces (the encoder's input)" }), this.sourcePieces,
        element("p", { class: "tt-translate-label", text: "Target pieces, as the decoder writes them" }), this.targetPieces,
        element("div", { class: "tt-translate-controls" },
          element("span", { class: "tt-translate-label", text: "Cross-attention:" }), this.layer, this.head),
        this.heatmap, this.readout, this.timing);
      root.classList.add("tt-translate");
      root.replaceChildren(form, this.status, this.result);
      const problem = obstacle();
      if (problem) {
        this.say(problem, "problem");
        this.button.disabled = true;
        return;
      }
      this.say("The model (20 MB) loads when you first press Translate; it then runs in your browser.");
      form.addEventListener("submit", (event) => { event.preventDefault(); this.run(); });
      this.examples.addEventListener("change", () => {
        if (this.examples.value) { this.input.value = this.examples.value; this.examples.value = ""; this.run(); }
      });
      this.layer.addEventListener("change", () => this.draw());
      this.head.addEventListener("change", () => this.draw());
    }

    say(text, kind) {
      this.status.textContent = text;
      this.status.dataset.kind = kind || "info";
    }

    async run() {
      if (this.busy) return;
      this.busy = true;
      this.button.disabled = true;
      this.root.dataset.state = "running";
      try {
        if (!this.translator) {
          this.say("Loading the model and ONNX Runtime…");
          this.translator = await load();
          this.offerLayersAndHeads();
        }
        this.say("Translating…");
        const beamSize = Number(this.decoding.value);
        const result = await this.translator.translate(this.input.value, {
          beamSize,
          onStep: async (partial) => {
            this.show(partial, false);
            await new Promise((resolve) => setTimeout(resolve, 0));  // the page shows each token
          },
        });
        this.show(result, true);
        this.say(result.pieces.length || result.source.pieces.length ? "" : "Type a German sentence first.");
        this.root.dataset.state = "done";
      } catch (error) {
        this.say("The model could not run: " + (error && error.message ? error.message : error), "problem");
        this.root.dataset.state = "failed";
      } finally {
        this.busy = false;
        this.button.disabled = false;
      }
    }

    offerLayersAndHeads() {
      const model = this.translator.manifest.model;
      if (!this.layer.options.length) {
        for (let l = 0; l < model.n_decoder_layers; l++) {
          this.layer.appendChild(element("option", { value: String(l), text: "layer " + (l + 1) }));
        }
        this.layer.value = String(model.n_decoder_layers - 1);
        this.head.appendChild(element("option", { value: "-1", text: "mean of heads" }));
        for (let h = 0; h < model.n_heads; h++) {
          this.head.appendChild(element("option", { value: String(h), text: "head " + (h + 1) }));
        }
      }
    }

    show(result, final) {
      this.result.hidden = false;
      this.current = result;
      this.output.textContent = result.text || (final ? "(nothing to translate)" : "…");
      this.output.dataset.final = final ? "true" : "false";
      pieces(this.sourcePieces, result.source.shown);
      pieces(this.targetPieces, result.shown);
      if (result.cross) this.draw();
      if (final && !result.cross) {  // nothing was translated: no heatmap, no times
        this.heatmap.replaceChildren();
        this.timing.textContent = "";
      }
      if (final && result.stepMs.length) {
        const perToken = result.decodeMs / result.stepMs.length;
        this.timing.textContent = result.stepMs.length + " decoder steps" +
          (result.beamSize > 1 ? " (beam " + result.beamSize + ")" : "") + ", " + perToken.toFixed(1) +
          " ms a token in this browser; model loaded in " + this.translator.loadSeconds.toFixed(1) + " s.";
      }
    }

    // The heatmap: a row per output piece (the query that chose it), a column per source piece.
    draw() {
      const result = this.current;
      if (!result || !result.cross) return;
      const cross = result.cross;
      const l = Number(this.layer.value || cross.layers - 1);
      const h = Number(this.head.value || -1);
      const what = "Cross-attention of decoder layer " + (l + 1) + ", " + (h < 0 ? "mean of the heads" : "head " + (h + 1)) +
                   ": a row per target piece, a column per source piece";
      // The caption is a paragraph below the table, as wide as the box: a table's own caption is as wide
      // as the table, which scrolls sideways on a phone, and was cut there.
      const table = element("table", { class: "tt-translate-map", "aria-label": what });
      const caption = element("p", { class: "tt-translate-caption", text: what });
      const head = element("tr", {}, element("th", {}));
      result.source.shown.forEach((piece) => head.appendChild(element("th", { scope: "col", text: piece })));
      table.appendChild(element("thead", {}, head));
      const body = element("tbody");
      for (let t = 0; t < cross.rows; t++) {
        const row = element("tr", {}, element("th", { scope: "row", text: result.shown[t] }));
        for (let s = 0; s < cross.cols; s++) {
          const weight = cross.weight(l, h, t, s);
          const cell = element("td", { "data-weight": weight.toFixed(4),
            title: result.shown[t] + " ← " + result.source.shown[s] + ": " + weight.toFixed(2) });
          cell.style.setProperty("--w", weight.toFixed(3));
          row.appendChild(cell);
        }
        body.appendChild(row);
      }
      table.appendChild(body);
      table.addEventListener("mouseover", (event) => {
        const cell = event.target.closest("td");
        if (cell) this.readout.textContent = cell.title;
      });
      this.heatmap.replaceChildren(table, caption);
    }
  }

  function pieces(container, shown) {
    container.replaceChildren(...shown.map((piece) => element("span", { class: "tt-piece", text: piece })));
  }

  function start() {
    document.querySelectorAll("[data-tt-translate]").forEach((root) => {
      if (!root.ttWidget) root.ttWidget = new Widget(root);
    });
  }

  window.TransformerWidget = { load, start, SERVE_HINT, NO_WASM };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
