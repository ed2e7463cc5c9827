/*
 * The shipped model's BPE tokenizer in JavaScript, for the page that translates in the browser
 * (issue 49): text to pieces and ids, and pieces back to text, exactly as transformer_lib.subword
 * does in Python (Hugging Face `tokenizers` with the pipeline of subword._pipeline):
 *
 *   1. the special tokens (<pad> <unk> <bos> <eos>) written in the text are kept whole, and the text
 *      between them is tokenized on its own (as `tokenizers` treats added special tokens);
 *   2. normalisation: NFKC, every run of white space one space, no space at either end;
 *   3. splitting: spaces become "\u2581" (WORD_START), one is put before the text, and a piece starts at
 *      every "\u2581" (Metaspace, prepend_scheme "always"); each punctuation character is a piece of
 *      its own (Punctuation, "isolated");
 *   4. BPE: each piece starts as its characters (a character outside the vocabulary is <unk>), and the
 *      adjacent pair whose merge was learned first is merged, leftmost first, until none is left;
 *   5. back to text: the pieces joined, "\u2581" read as a space, none kept from the first piece
 *      (the Metaspace decoder).
 *
 * The vocabulary and merges come from the tokenizer.json that `python -m transformer_lib.cli.onnx_export`
 * writes (the library's SubwordTokenizer.to_dict(): {kind: "bpe", tokens, merges, lowercase}).
 * tests/test_web_tokenizer.py runs this file under Node.js against the Python tokenizer.
 *
 * Usage (a browser <script>, or require() in Node.js):
 *   const tokenizer = TransformerTokenizer.fromJSON(await (await fetch("tokenizer.json")).json());
 *   tokenizer.tokenize("Ein Hund rennt.")   // ["\u2581Ein", "\u2581Hund", "\u2581rennt", "."]
 *   tokenizer.encode("Ein Hund rennt.")     // their ids
 *   tokenizer.detokenize(["\u2581A", "\u2581dog", "\u2581runs", "."])   // "A dog runs."
 */
(function (root, factory) {
  "use strict";
  const api = factory();
  if (typeof module === "object" && module.exports) {
    module.exports = api;
  } else {
    root.TransformerTokenizer = api;
  }
})(typeof self !== "undefined" ? self : this, function () {
  "use strict";

  const WORD_START = "\u2581";
  const SPECIALS = ["<pad>", "<unk>", "<bos>", "<eos>"];  // ids 0-3 of every vocabulary (transformer_lib.vocab)
  const UNK = "<unk>";
  // Unicode's White_Space characters: what the Rust regex \s of the normaliser and Rust's
  // char::is_whitespace of its Strip match (JavaScript's \s differs: it has U+FEFF, not U+0085).
  const SPACE_RUN = /[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/g;
  const SPACE_AT_ENDS = /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/g;
  // `tokenizers`' punctuation: ASCII punctuation (symbols such as $ + < = > ^ ` | ~ included) or a
  // character of a Unicode punctuation category (Pc Pd Ps Pe Pi Pf Po).
  const PUNCTUATION = /^[!-/:-@[-`{-~\p{P}]$/u;

  function normalize(text) {
    return text.normalize("NFKC").replace(SPACE_RUN, " ").replace(SPACE_AT_ENDS, "");
  }

  // Normalised text to the pieces BPE works on, each a string of whole characters.
  function split(text) {
    let marked = text.split(" ").join(WORD_START);
    if (!marked.startsWith(WORD_START)) {
      marked = WORD_START + marked;
    }
    const pieces = [];
    for (const word of marked.split(new RegExp("(?=" + WORD_START + ")", "u"))) {
      let run = "";
      for (const character of word) {  // by code point, not UTF-16 unit
        if (PUNCTUATION.test(character)) {
          if (run) pieces.push(run);
          pieces.push(character);
          run = "";
        } else {
          run += character;
        }
      }
      if (run) pieces.push(run);
    }
    return pieces;
  }

  class Tokenizer {
    constructor(tokens, merges, lowercase) {
      if (tokens.slice(0, SPECIALS.length).join(" ") !== SPECIALS.join(" ")) {
        throw new Error("the vocabulary must start with the specials " + SPECIALS.join(" "));
      }
      this.tokens = tokens;
      this.lowercase = Boolean(lowercase);
      this.ids = new Map(tokens.map((token, id) => [token, id]));
      this.ranks = new Map(merges.map(([first, second], rank) => [first + " " + second, rank]));
      this.cache = new Map();
      this.specialSplit = new RegExp("(" + SPECIALS.map((s) => s.replace(/[|\\{}()[\]^$+*?.]/g, "\\$&")).join("|") + ")");
    }

    static fromJSON(data) {
      if (data.kind !== "bpe") {
        throw new Error("a BPE tokenizer is needed, this one is " + JSON.stringify(data.kind));
      }
      return new Tokenizer(data.tokens, data.merges, data.lowercase);
    }

    // One piece to its BPE sub-pieces: the earliest-learned merge first, leftmost first.
    bpe(piece) {
      const known = this.cache.get(piece);
      if (known) return known;
      let symbols = Array.from(piece, (character) => (this.ids.has(character) ? character : UNK));
      for (;;) {
        let best = -1;
        let bestRank = Infinity;
        for (let i = 0; i + 1 < symbols.length; i++) {
          const rank = this.ranks.get(symbols[i] + " " + symbols[i + 1]);
          if (rank !== undefined && rank < bestRank) {
            best = i;
            bestRank = rank;
          }
        }
        if (best < 0) break;
        symbols = [...symbols.slice(0, best), symbols[best] + symbols[best + 1], ...symbols.slice(best + 2)];
      }
      this.cache.set(piece, symbols);
      return symbols;
    }

    tokenize(text) {
      const pieces = [];
      const source = this.lowercase ? text.toLowerCase() : text;
      for (const part of source.split(this.specialSplit)) {
        if (SPECIALS.includes(part)) {
          pieces.push(part);
          continue;
        }
        const normalized = normalize(part);
        if (!normalized) continue;
        for (const piece of split(normalized)) {
          pieces.push(...this.bpe(piece));
        }
      }
      return pieces;
    }

    encode(text) {
      return this.toIds(this.tokenize(text));
    }

    // Pieces to their ids (<unk> for a piece outside the vocabulary).
    toIds(pieces) {
      const unk = this.ids.get(UNK);
      return pieces.map((piece) => (this.ids.has(piece) ? this.ids.get(piece) : unk));
    }

    idToToken(id) {
      if (!(id >= 0 && id < this.tokens.length)) {
        throw new Error("id " + id + " is outside the vocabulary [0, " + (this.tokens.length - 1) + "]");
      }
      return this.tokens[id];
    }

    detokenize(pieces) {
      return pieces.map((piece, i) => (i === 0 ? piece.split(WORD_START).join("") : piece.split(WORD_START).join(" "))).join("");
    }
  }

  return { WORD_START, SPECIALS, Tokenizer, fromJSON: Tokenizer.fromJSON, normalize, split };
});
