/*
 * Greedy decoding and beam search in JavaScript, by the rules of the Python library (issue 49, item 4),
 * for the page that translates with the shipped model (web/widget.js):
 *
 *   greedy   transformer_lib.decoding.greedy_decode as Translator.translate_ids calls it: the most
 *            likely token at every step (the first of equal ones, as torch.argmax), at most
 *            maxNewTokens = min(max_len, S + 50) tokens, <eos> barred before minNewTokens (1), <bos>
 *            and <pad> never output; it stops at <eos>.
 *   beam     transformer_lib.beam_search.beam_search: K hypotheses; each step keeps the best 2K of each
 *            hypothesis' tokens, then the best 2K candidates; a candidate ending in <eos> among the
 *            best K is set aside as finished with score log P / ((5 + |Y|) / 6) ** alpha (GNMT, Wu et al.
 *            2016, eq. 14); the next beam is the best K that do not end; done at K finished (fairseq's
 *            rule); at maxNewTokens the open hypotheses are finished as they are. Scores are kept in
 *            float32, as torch computes them.
 *
 * The model is a function: step(rows) -> Promise of {logits: Float32Array (B*V), vocabSize: V, ...},
 * the scores of the token after each row (rows: B arrays of ids of one length, from <bos>). Whatever
 * else step returns (the cross-attention) is passed on to onStep.
 *
 * Usage (a browser <script>, or require() in Node.js):
 *   const settings = TransformerDecoding.settings(manifest, sourceLength);
 *   const result = await TransformerDecoding.greedy(step, settings, (info) => show(info));
 *   result.tokens   // the generated ids, <eos> included when it was reached
 */
(function (root, factory) {
  "use strict";
  const api = factory();
  if (typeof module === "object" && module.exports) {
    module.exports = api;
  } else {
    root.TransformerDecoding = api;
  }
})(typeof self !== "undefined" ? self : this, function () {
  "use strict";

  const f32 = Math.fround;

  // model.json's rules (transformer_lib.cli.onnx_export writes them) for a source of sourceLength ids.
  function settings(manifest, sourceLength) {
    const ids = manifest.special_ids;
    const output = manifest.output;
    return {
      bos: ids.bos, eos: ids.eos, pad: ids.pad,
      maxNewTokens: Math.min(output.max_tokens, sourceLength + output.extra_tokens),
      minNewTokens: output.min_tokens,
      never: output.never.slice(),
    };
  }

  // GNMT's length normalisation (transformer_lib.beam_search.gnmt_length_penalty).
  function lengthPenalty(length, alpha) {
    return Math.pow((5 + length) / 6, alpha);
  }

  // One row of scores (a copy), with <bos>/<pad> barred and <eos> barred before minNewTokens.
  function maskedRow(logits, row, vocabSize, step, rules) {
    const scores = logits.slice(row * vocabSize, (row + 1) * vocabSize);
    for (const id of rules.never) scores[id] = -Infinity;
    if (step < rules.minNewTokens) scores[rules.eos] = -Infinity;
    return scores;
  }

  function argmax(scores) {
    let best = 0;
    for (let i = 1; i < scores.length; i++) {
      if (scores[i] > scores[best]) best = i;
    }
    return best;
  }

  // The n largest of scores, largest first (the lower index first among equal ones): [values, indices].
  function topk(scores, n) {
    const order = Array.from(scores.keys());
    order.sort((a, b) => (scores[b] - scores[a]) || (a - b));
    const kept = order.slice(0, n);
    return [kept.map((i) => scores[i]), kept];
  }

  function logSumExp(scores) {
    let largest = -Infinity;
    for (const s of scores) if (s > largest) largest = s;
    if (largest === -Infinity) return -Infinity;
    let sum = 0;
    for (const s of scores) sum += Math.exp(s - largest);
    return f32(largest + Math.log(sum));
  }

  async function greedy(step, rules, onStep) {
    const tokens = [rules.bos];
    for (let t = 0; t < rules.maxNewTokens; t++) {
      const out = await step([tokens]);
      const next = argmax(maskedRow(out.logits, 0, out.vocabSize, t, rules));
      tokens.push(next);
      if (onStep) await onStep({ step: t, tokens: tokens.slice(1), output: out });
      if (next === rules.eos) break;
    }
    return { tokens: tokens.slice(1) };
  }

  async function beam(step, rules, beamSize, alpha, onStep) {
    const K = beamSize;
    let rows = Array.from({ length: K }, () => [rules.bos]);
    // Only the first hypothesis may grow at step 1, or the beam would hold K copies of each candidate.
    let beamScores = Array.from({ length: K }, (_, k) => (k === 0 ? 0 : -Infinity));
    const finished = [];
    let done = false;
    for (let t = 0; t < rules.maxNewTokens && !done; t++) {
      const out = await step(rows);
      const V = out.vocabSize;
      const n = Math.min(2 * K, V);
      const candidates = [];  // [score, origin, token], in the order of (hypothesis, rank)
      for (let k = 0; k < K; k++) {
        const scores = maskedRow(out.logits, k, V, t, rules);
        const [best, tokens] = topk(scores, n);
        const total = logSumExp(scores);
        for (let j = 0; j < n; j++) {
          candidates.push([f32(beamScores[k] + f32(best[j] - total)), k, tokens[j]]);
        }
      }
      const [topScores, topIndex] = topk(candidates.map((c) => c[0]), Math.min(2 * K, K * n));
      const top = topIndex.map((i, r) => ({ score: topScores[r], origin: candidates[i][1], token: candidates[i][2] }));
      for (const c of top.slice(0, K)) {  // ended candidates among the best K are finished
        if (c.token === rules.eos && Number.isFinite(c.score) && finished.length < K) {
          finished.push({ tokens: [...rows[c.origin].slice(1), rules.eos], logProb: c.score,
                          score: c.score / lengthPenalty(t + 1, alpha) });
        }
      }
      const open = top.map((c) => (c.token === rules.eos ? -Infinity : c.score));
      const [nextScores, keep] = topk(open, K);
      rows = keep.map((i) => [...rows[top[i].origin], top[i].token]);
      beamScores = nextScores;
      done = finished.length >= K;
      if (onStep) await onStep({ step: t, tokens: rows[0].slice(1), output: out, finished: finished.length });
    }
    if (!done) {  // maxNewTokens reached: the open hypotheses are finished as they are
      rows.forEach((row, k) => {
        if (beamScores[k] !== -Infinity) {
          const tokens = row.slice(1);
          finished.push({ tokens, logProb: beamScores[k], score: beamScores[k] / lengthPenalty(tokens.length, alpha) });
        }
      });
    }
    const ranked = finished.map((h, i) => [h, i]).sort((a, b) => (b[0].score - a[0].score) || (a[1] - b[1]));
    return { tokens: ranked[0][0].tokens, hypotheses: ranked.slice(0, K).map((r) => r[0]) };
  }

  // Generated ids to output ids as Python's vocabulary decodes them: up to <eos>, without <pad>/<bos>.
  function outputIds(tokens, rules) {
    const kept = [];
    for (const id of tokens) {
      if (id === rules.eos) break;
      if (id !== rules.pad && id !== rules.bos) kept.push(id);
    }
    return kept;
  }

  return { settings, lengthPenalty, greedy, beam, outputIds, topk };
});
