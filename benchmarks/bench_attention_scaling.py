"""Attention cost as the sequence grows: time and peak memory, measured side by side in one run.

Compared, all causal, on one sequence of ``T`` tokens with ``H`` heads of width 64:

1. **softmax, explicit**: :func:`transformer_lib.attention.scaled_dot_product_attention` with
   ``causal_mask(T)``. Stores the ``T x T`` scores and weights per head: memory O(T^2).
2. **softmax, fused**: ``F.scaled_dot_product_attention(is_causal=True)``, what
   ``MultiHeadAttention`` runs when no weights are asked for. Same O(T^2) work, but computed in
   tiles without storing the ``T x T`` matrix: memory O(T).
3. **sliding window, fused**: the fused kernel with ``sliding_window_mask(T, window=W)``. A mask
   only decides which scores count; every score is still computed, and the ``T x T`` mask itself is
   stored. As a mask, local attention saves *nothing*; kernels that skip the blocked tiles
   (FlashAttention's sliding window, Mistral's rolling KV cache) are what make it O(T W).
4. **linear, causal**: :func:`transformer_lib.efficient_attention.linear_attention` (Katharopoulos et al. 2020),
   in chunks of 64 positions. O(T) time and memory.
5. **linear, non-causal**: the same without the causal running sums: two matrix products.

Timings are medians of repeated calls, the methods alternating so that load changes hit all alike,
and are reported with their ratio to the fused softmax. Peak memory is the extra memory one call
needs beyond its inputs: ``torch.cuda.max_memory_allocated`` on a GPU; on Linux CPUs the process's
peak resident memory (``VmHWM``, reset before each call through ``/proc/self/clear_refs``);
elsewhere it is not measured. Results go to a table and to a JSON file.

Usage:
    python benchmarks/bench_attention_scaling.py                 # CPU, 1 thread, T = 128 .. 8192
    python benchmarks/bench_attention_scaling.py --quick         # T = 128 .. 2048, a smoke run
    python benchmarks/bench_attention_scaling.py --device cuda --max-len 32768
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from common import memory_probe, side_by_side  # noqa: E402
from transformer_lib.attention import scaled_dot_product_attention  # noqa: E402
from transformer_lib.efficient_attention import linear_attention  # noqa: E402
from transformer_lib.masking import causal_mask, sliding_window_mask  # noqa: E402

Method = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def methods(T: int, window: int, device: torch.device) -> dict[str, Method]:
    """The five ways to attend, for length ``T`` (masks built outside the timed call)."""
    causal = causal_mask(T, device=device)  # (1, 1, T, T)
    local = sliding_window_mask(T, window=window, device=device)  # (1, 1, T, T)
    return {
        "softmax, explicit": lambda q, k, v: scaled_dot_product_attention(q, k, v, causal)[0],
        "softmax, fused": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        f"sliding window {window}, fused": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=local),
        "linear, causal": lambda q, k, v: linear_attention(q, k, v, causal=True),
        "linear, non-causal": lambda q, k, v: linear_attention(q, k, v),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1: steadier ratios)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--window", type=int, default=128, help="sliding-window size")
    parser.add_argument("--min-len", type=int, default=128)
    parser.add_argument("--max-len", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="T up to 2048 and 2 repeats (a smoke run)")
    parser.add_argument("--out", default="runs/bench_attention_scaling.json", help="where to write the JSON results")
    args = parser.parse_args()
    if args.quick:
        args.max_len, args.repeats = min(args.max_len, 2048), 2
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    probe = memory_probe(device)

    lengths = []
    T = args.min_len
    while T <= args.max_len:
        lengths.append(T)
        T *= 2
    print(f"# Attention scaling: B=1, H={args.heads}, head width {args.head_dim}, causal, {device}, "
          f"torch {torch.__version__}, {args.threads} thread(s)\n")
    print("| T | method | time (ms) | x fused softmax | peak extra memory (MiB) |")
    print("|---:|---|---:|---:|---:|")
    with torch.no_grad():  # first calls initialise kernels and pools: keep that out of the numbers
        warm = torch.randn(1, args.heads, lengths[0], args.head_dim, device=device)
        for fn in methods(lengths[0], args.window, device).values():
            fn(warm, warm, warm)
    results = []
    for T in lengths:
        q, k, v = (torch.randn(1, args.heads, T, args.head_dim, device=device) for _ in range(3))
        calls = {name: (lambda fn=fn: fn(q, k, v)) for name, fn in methods(T, args.window, device).items()}
        with torch.no_grad():
            memory = {name: probe(fn) if probe is not None else None for name, fn in calls.items()}
            times = side_by_side(calls, device, args.repeats)
        reference = times["softmax, fused"]
        for name in calls:
            mib = memory[name]
            results.append({"T": T, "method": name, "seconds": times[name], "peak_extra_mib": mib})
            mib_text = "n/a" if mib is None else f"{mib:,.1f}"
            print(f"| {T} | {name} | {1000 * times[name]:,.2f} | {times[name] / reference:.2f} | {mib_text} |", flush=True)
        del q, k, v, calls

    # How each method grows: the slope of log(time) against log(T) over the longest lengths.
    print("\nGrowth over the last doubling (time ratio; 4 = quadratic, 2 = linear):")
    if len(lengths) >= 2:
        last, previous = lengths[-1], lengths[-2]
        by_key = {(r["T"], r["method"]): r for r in results}
        for name in {r["method"]: None for r in results}:
            ratio = by_key[(last, name)]["seconds"] / by_key[(previous, name)]["seconds"]
            print(f"  {name:<28} T {previous} -> {last}: x{ratio:.2f}")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    out.write_text(json.dumps({"settings": settings, "torch": torch.__version__, "results": results}, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
