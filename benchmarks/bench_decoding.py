"""Decoding speed, measured side by side in one run.

1. Greedy decoding with the key/value cache vs recomputing the whole prefix every step, over a range
   of output lengths (the cache turns the decoder's O(T^2) work into O(T)).
2. The Multi30k test set (1,000 sentences, in length-sorted batches): greedy with and without the
   cache, and beam search (width 4) vs greedy. With a trained ``--checkpoint`` and the data, also
   the BLEU of greedy and beam.

Without ``--checkpoint`` the model is the ``multi30k`` preset with Multi30k-sized vocabularies and
random weights. A random model never stops by itself, so each batch is decoded for as many steps
as its longest *reference* translation has tokens (with ``<eos>``): the work a trained model that
writes reference-length output does. Source and reference lengths come from the test set when
``MULTI30K_DIR`` (or ``--data-dir``) is set, else from a synthetic sample with the same mean.

Usage:
    python benchmarks/bench_decoding.py                        # CPU, 1 thread
    python benchmarks/bench_decoding.py --checkpoint runs/multi30k/checkpoint.pt
    python benchmarks/bench_decoding.py --device cuda --threads 4
    python benchmarks/bench_decoding.py --quick                # a short smoke run

Timings are wall-clock medians; on a shared machine they are noisy, which is why each comparison
is made within one run, alternating the two methods, and reported as a ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from common import side_by_side, sync, timed  # noqa: E402
from transformer_lib.beam_search import beam_search  # noqa: E402
from transformer_lib.decoding import greedy_decode  # noqa: E402
from transformer_lib.model import Transformer  # noqa: E402
from transformer_lib.config import TransformerConfig  # noqa: E402

# Multi30k with spaCy tokens and min_freq=2: 8,014 German and 6,191 English tokens (specials included).
SRC_VOCAB, TGT_VOCAB = 8014, 6191
UNREACHABLE_EOS = None  # no end token: decoding runs exactly max_len steps (an out-of-vocabulary id is refused)
BOS, PAD = 2, 0


def test_set_lengths(data_dir: str | None, n: int) -> tuple[list[tuple[int, int]], str]:
    """(source length, reference length), both counting <eos>, for each test sentence."""
    folder = data_dir or os.environ.get("MULTI30K_DIR")
    if folder and (Path(folder) / "test_2016_flickr.de.gz").exists():
        import gzip

        from transformer_lib.tokenizers import word_splitter

        lines = {
            lang: gzip.open(Path(folder) / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8").read().splitlines()
            for lang in ("de", "en")
        }
        de, en = word_splitter("de"), word_splitter("en")
        pairs = [(len(de(s)) + 1, len(en(t)) + 1) for s, t in zip(lines["de"], lines["en"])]
        return pairs[:n], "Multi30k test_2016_flickr (spaCy tokens)"
    g = torch.Generator().manual_seed(0)
    src = (torch.randn(n, generator=g) * 3.5 + 13.1).round().clamp(6, 32).long().tolist()
    tgt = (torch.randn(n, generator=g) * 3.7 + 14.1).round().clamp(6, 34).long().tolist()
    return list(zip(src, tgt)), "synthetic lengths (no MULTI30K_DIR), Multi30k's means"


def random_sources(lengths: list[int], vocab_size: int, device: torch.device, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.full((len(lengths), max(lengths)), PAD, dtype=torch.long)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(4, vocab_size, (n,), generator=g)
    src = src.to(device)
    return src, (src != PAD)[:, None, None, :]


def length_table(model: Transformer, device: torch.device, batch_size: int, lengths: list[int], repeats: int) -> None:
    print(f"\n## Greedy decoding: cached vs uncached, by output length (batch {batch_size}, source length 13)\n")
    print("| output tokens | cached (s) | uncached (s) | cached ms/token | uncached ms/token | speed-up |")
    print("|---:|---:|---:|---:|---:|---:|")
    g = torch.Generator().manual_seed(0)
    src, src_mask = random_sources([13] * batch_size, model.config.src_vocab_size, device, g)
    for n in lengths:
        kwargs = dict(max_new_tokens=n, bos_id=BOS, eos_id=UNREACHABLE_EOS, pad_id=PAD)
        t = side_by_side(
            {
                "cached": lambda: greedy_decode(model, src, src_mask, **kwargs),
                "uncached": lambda: greedy_decode(model, src, src_mask, **kwargs, use_cache=False),
            },
            device,
            repeats,
        )
        print(
            f"| {n} | {t['cached']:.3f} | {t['uncached']:.3f} | {1000 * t['cached'] / n:.1f} | "
            f"{1000 * t['uncached'] / n:.1f} | {t['uncached'] / t['cached']:.2f}x |"
        )


def test_set_run(model: Transformer, device: torch.device, batch_size: int, pairs: list[tuple[int, int]], source: str, beam: int) -> None:
    order = sorted(range(len(pairs)), key=lambda i: pairs[i][0])
    g = torch.Generator().manual_seed(1)
    batches = []
    for start in range(0, len(order), batch_size):
        chunk = [pairs[i] for i in order[start : start + batch_size]]
        src, src_mask = random_sources([s for s, _ in chunk], model.config.src_vocab_size, device, g)
        batches.append((src, src_mask, max(t for _, t in chunk)))
    steps = sum(n for _, _, n in batches)
    mean_ref = statistics.mean(t for _, t in pairs)

    def decode(method: str, src: torch.Tensor, src_mask: torch.Tensor, n: int) -> None:
        kwargs = dict(max_new_tokens=n, bos_id=BOS, eos_id=UNREACHABLE_EOS, pad_id=PAD)
        if method == "cached":
            greedy_decode(model, src, src_mask, **kwargs)
        elif method == "uncached":
            greedy_decode(model, src, src_mask, **kwargs, use_cache=False)
        else:
            beam_search(model, src, src_mask, beam_size=beam, **kwargs)

    methods = ("cached", "uncached", "beam")
    for method in methods:  # warm-up on the first batch
        decode(method, *batches[0])
    t = dict.fromkeys(methods, 0.0)
    for batch in batches:  # batch by batch, the three methods one after another
        for method in methods:
            t[method] += timed(lambda: decode(method, *batch), device)
    print(f"\n## The test set: {len(pairs)} sentences, {len(batches)} batches of <= {batch_size}, {source}\n")
    print(f"Mean reference length {mean_ref:.1f} tokens with <eos>; each batch decodes as many steps as its "
          f"longest reference ({steps} steps in all).\n")
    print("| method | time (s) | sentences/s | vs greedy with cache |")
    print("|---|---:|---:|---:|")
    for name, key in (("greedy, KV cache", "cached"), ("greedy, no cache", "uncached"), (f"beam {beam}, KV cache", "beam")):
        print(f"| {name} | {t[key]:.2f} | {len(pairs) / t[key]:.0f} | {t[key] / t['cached']:.2f}x |")
    print(f"\nKV cache speed-up at the test set's lengths: {t['uncached'] / t['cached']:.2f}x (target >= 3x)")
    print(f"Beam {beam} / greedy time ratio: {t['beam'] / t['cached']:.2f}x (target <= 4.5x)")


def checkpoint_run(path: str, data_dir: str | None, device: torch.device, batch_size: int, beam: int, limit: int | None) -> None:
    from transformer_lib.translator import Translator, read_multi30k_split
    from transformer_lib.evaluation import bleu_scores

    translator = Translator.from_checkpoint(path, device=device)
    pairs = read_multi30k_split("test", data_dir, translator.data["src_lang"], translator.data["tgt_lang"])[:limit]
    sources = [s for s, _ in pairs]
    references = [r for _, r in pairs]
    results = {}
    for name, beam_size, use_cache in (("greedy, KV cache", 1, True), ("greedy, no cache", 1, False), (f"beam {beam}", beam, True)):
        rows = translator.source_ids(sources)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        out = [None] * len(rows)
        seconds = 0.0
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            src, src_mask = translator.encode([sources[i] for i in chunk])
            max_len = min(translator.model.config.max_len, src.size(1) + 50)
            kwargs = dict(max_new_tokens=max_len, bos_id=translator.tgt_vocab.bos_id, eos_id=translator.tgt_vocab.eos_id,
                          pad_id=translator.tgt_vocab.pad_id)
            if beam_size == 1:
                fn = lambda: greedy_decode(translator.model, src, src_mask, **kwargs, use_cache=use_cache)  # noqa: E731
            else:
                fn = lambda: beam_search(translator.model, src, src_mask, beam_size=beam_size, **kwargs).sequences  # noqa: E731
            sync(device)
            t0 = time.perf_counter()
            ids = fn()
            sync(device)
            seconds += time.perf_counter() - t0
            for i, row in zip(chunk, ids.tolist()):
                out[i] = translator.detokenize(translator.output_tokens(row))
        results[name] = (seconds, bleu_scores(out, references))
    greedy_time = results["greedy, KV cache"][0]
    print(f"\n## Trained checkpoint {path}: Multi30k test, {len(pairs)} sentences\n")
    print("| method | time (s) | vs greedy with cache | BLEU | lowercased BLEU |")
    print("|---|---:|---:|---:|---:|")
    for name, (seconds, scores) in results.items():
        print(f"| {name} | {seconds:.2f} | {seconds / greedy_time:.2f}x | {scores['cased'].score:.2f} | {scores['lowercased'].score:.2f} |")
    print(f"\nBLEU signature: {results['greedy, KV cache'][1]['cased'].signature}")
    print("(lowercased BLEU is for comparison with older Multi30k papers only)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", default=None, help="a trained checkpoint: real stopping and BLEU")
    parser.add_argument("--data-dir", default=None, help="Multi30k folder (default: $MULTI30K_DIR)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1: steadier ratios)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="fewer lengths and sentences (a smoke test)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    config = TransformerConfig.from_preset("multi30k", src_vocab_size=SRC_VOCAB, tgt_vocab_size=TGT_VOCAB)
    model = Transformer(config).to(device).eval()

    load = os.getloadavg()
    print("# Decoding benchmark\n")
    print(f"torch {torch.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else f", {args.threads} thread(s), "
             f"{os.cpu_count()} CPUs")
          + f", load average {load[0]:.2f} at start")
    print(f"model: 'multi30k' preset (d_model={config.d_model}, {config.n_encoder_layers}+{config.n_decoder_layers} layers, "
          f"vocab {SRC_VOCAB}/{TGT_VOCAB}), random weights")

    lengths = [4, 8, 14, 24] if args.quick else [4, 8, 14, 24, 32, 48, 64]
    table_batch = 16 if args.quick else args.batch_size
    length_table(model, device, table_batch, lengths, 1 if args.quick else args.repeats)
    pairs, source = test_set_lengths(args.data_dir, 128 if args.quick else 1000)
    test_set_run(model, device, args.batch_size, pairs, source, args.beam)
    if args.checkpoint:
        checkpoint_run(args.checkpoint, args.data_dir, device, args.batch_size, args.beam, 128 if args.quick else None)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
