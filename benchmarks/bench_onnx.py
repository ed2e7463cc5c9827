"""The shipped model as ONNX (``transformer_lib.cli.onnx_export``): file sizes, load time, and greedy
translation speed of onnxruntime beside PyTorch, one sentence at a time (as a page translates).

1. Sizes of the exported files (weights stored in float16, computed in float32).
2. Load time: creating the two onnxruntime sessions, beside ``pretrained.load()`` (checksum, weights,
   tokenizer), each the median of ``--repeats``.
3. Greedy translation, one sentence at a time: onnxruntime's uncached decoder (the whole prefix every
   step) beside PyTorch's greedy decoding with its key/value cache, both on 1 thread, alternating;
   seconds per sentence and per output token. Sentences: the first ``--sentences`` of Multi30k test
   2016 when ``MULTI30K_DIR`` is set, else the five the shipped file's record carries.

Usage:
    python benchmarks/bench_onnx.py                  # exports into a temporary folder first (~1.5 min)
    python benchmarks/bench_onnx.py --dir site-model # files written by python -m transformer_lib.cli.onnx_export
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from transformer_lib import pretrained  # noqa: E402
from transformer_lib.cli.onnx_export import OnnxTranslator, export_onnx  # noqa: E402
from transformer_lib.translator import read_multi30k_split  # noqa: E402


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _sentences(count: int) -> list[str]:
    folder = os.environ.get("MULTI30K_DIR")
    if folder:
        return [source for source, _ in read_multi30k_split("test", folder, "de", "en")[:count]]
    return [example["source"] for example in pretrained.info().run["examples"]]


def report(folder: Path, repeats: int, count: int) -> None:
    runtime = OnnxTranslator(folder)
    for name, file in runtime.manifest["files"].items():
        print(f"{name:15s} {file['bytes'] / 1e6:6.2f} MB")
    onnx_mb = sum(f["bytes"] for n, f in runtime.manifest["files"].items() if n.endswith(".onnx")) / 1e6
    shipped_mb = pretrained.shipped_path().stat().st_size / 1e6
    print(f"both graphs     {onnx_mb:6.2f} MB (the shipped safetensors file: {shipped_mb:.2f} MB)")
    onnx_load = _median_seconds(lambda: OnnxTranslator(folder), repeats)
    torch_load = _median_seconds(pretrained.load, repeats)
    print(f"load: onnxruntime sessions {onnx_load:.2f} s, pretrained.load() {torch_load:.2f} s (medians of {repeats})")

    translator = pretrained.load()
    sentences = _sentences(count)
    tokens = sum(len(t) + 1 for t in translator.translate_tokens(sentences, beam_size=1))  # with <eos>
    times = {"onnxruntime": [], "pytorch": []}
    for sentence in sentences:  # alternating, so that load changes hit both alike
        times["onnxruntime"].append(_median_seconds(lambda: runtime.translate([sentence]), 1))
        times["pytorch"].append(_median_seconds(lambda: translator.translate([sentence], beam_size=1), 1))
    for name, seconds in times.items():
        print(f"greedy, {name:11s}: {sum(seconds) / len(sentences) * 1e3:6.1f} ms per sentence, "
              f"{sum(seconds) / tokens * 1e3:5.2f} ms per output token ({len(sentences)} sentences, {tokens} tokens)")
    print(f"onnxruntime / pytorch time: {sum(times['onnxruntime']) / sum(times['pytorch']):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="an exported folder (default: export into a temporary one)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread")
    if args.dir is not None:
        report(args.dir, args.repeats, args.sentences)
        return
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        export_onnx(pretrained.load(), folder)
        print(f"exported in {time.perf_counter() - started:.0f} s")
        report(Path(folder), args.repeats, args.sentences)


if __name__ == "__main__":
    main()
