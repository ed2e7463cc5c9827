"""Training throughput and model FLOPs utilisation: our Transformer beside ``torch.nn.Transformer``.

The two models are the same network: ``reference.TorchTransformer`` puts ``nn.Transformer``'s
encoder and decoder, with *our* weights copied in, between our embeddings and our output layer
(the benchmark checks that both compute the same function before timing them). For training it
gets what a careful user of ``nn.Transformer`` would add (:class:`TorchTransformerForTraining`):
the same dropout on the embeddings as ours, and ``tgt_is_causal=True``, without which
``nn.TransformerDecoder`` compares the mask with a causal one on every call (a GPU-to-CPU sync,
and a graph break under ``torch.compile``). Each is trained
on the same batches with the same update: bf16 autocast on CUDA (float32 on CPU), the
label-smoothed loss, backward, gradient clipping, AdamW. On CUDA both reach
``F.scaled_dot_product_attention``'s fused kernels (ours directly, ``nn.MultiheadAttention``
through ``F.multi_head_attention_forward``); ``--compile`` runs both through ``torch.compile``.

Reported, side by side in one run:

- **throughput**: non-padding target tokens per second of full training updates; the two models
  alternate round by round (a round = every batch once), so a change of load hits both alike;
- **FLOPs**: the matrix-multiply FLOPs of a training update (see :func:`forward_flops`; training
  is 3x the forward pass: the backward pass computes two products per forward product), checked
  against ``torch.utils.flop_counter.FlopCounterMode`` on the same batch;
- **MFU**: achieved FLOP/s divided by the device's dense peak for the dtype the matmuls run in
  (:data:`PEAK_TFLOPS`, by device name; unknown devices get FLOP/s only, or ``--peak-tflops``).

Usage:
    python benchmarks/bench_gpu_training.py                                  # CUDA if present, else CPU
    python benchmarks/bench_gpu_training.py --data runs/m30k-data/data.pt    # real Multi30k batches, no spaCy
    python benchmarks/bench_gpu_training.py --compile --json results.json
    python benchmarks/bench_gpu_training.py --device cpu --threads 2         # CPU: tiny preset, fp32
    python benchmarks/bench_gpu_training.py --quick                          # smoke run (numbers meaningless)
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

warnings.filterwarnings("ignore", message="enable_nested_tensor is True")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from common import sync, write_json  # noqa: E402
from transformer_lib.batching import Batch, collate, make_loader  # noqa: E402
from transformer_lib.prepared import PreparedTranslation  # noqa: E402
from transformer_lib.device import default_device  # noqa: E402
from transformer_lib.masking import causal_mask, padding_mask, to_torch_blocked  # noqa: E402
from transformer_lib.model import Transformer, count_parameters  # noqa: E402
from transformer_lib.config import TransformerConfig  # noqa: E402
from transformer_lib.reference import TorchTransformer  # noqa: E402
from transformer_lib.device import autocast_context  # noqa: E402
from transformer_lib.losses import label_smoothed_cross_entropy  # noqa: E402
from transformer_lib.schedules import make_optimizer  # noqa: E402

# Multi30k with spaCy tokens and min_freq=2: 8,014 German and 6,191 English tokens (specials included).
SRC_VOCAB, TGT_VOCAB = 8014, 6191

# Dense (no structured sparsity) tensor-core peaks in TFLOP/s per GPU, from NVIDIA's data sheets,
# by the dtype the matrix multiplies run in. First matching name wins (torch.cuda.get_device_name).
# "tf32" is float32 with torch.set_float32_matmul_precision("high"); "fp32" without tensor cores.
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H100 PCIe", {"bf16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    ("H100 NVL", {"bf16": 835.0, "tf32": 418.0, "fp32": 60.0}),
    ("H100", {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9}),  # SXM5 ("NVIDIA H100 80GB HBM3")
    ("H200", {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("GH200", {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("A100", {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L40S", {"bf16": 362.1, "tf32": 183.0, "fp32": 91.6}),
    ("L4", {"bf16": 121.0, "tf32": 60.0, "fp32": 30.3}),
)


def peak_tflops(device: torch.device, dtype: str) -> tuple[float | None, str]:
    """``(peak TFLOP/s, where it comes from)`` for ``device`` and matmul ``dtype``, or ``(None, why)``."""
    if device.type != "cuda":
        return None, f"no peak table for {device.type} (pass --peak-tflops for an MFU)"
    name = torch.cuda.get_device_name(device)
    for pattern, peaks in PEAK_TFLOPS:
        if pattern in name:
            if name.startswith("NVIDIA H100") and pattern == "H100" and "HBM3" not in name and "SXM" not in name:
                break  # an H100 variant this table does not know: do not guess the SXM number
            return peaks[dtype], f"{pattern} dense {dtype} peak {peaks[dtype]} TFLOP/s (NVIDIA data sheet)"
    return None, f"unknown device {name!r}: no peak in PEAK_TFLOPS (pass --peak-tflops for an MFU)"


# --- FLOPs -------------------------------------------------------------------------------------


def forward_flops(config: TransformerConfig, src_lengths: list[int], tgt_lengths: list[int]) -> int:
    """Matrix-multiply FLOPs of one forward pass (2 per multiply-add) over sentences of these lengths.

    Per source sentence of ``S`` tokens and target of ``T`` (``D`` = d_model, ``F`` = d_ff,
    ``V`` = target vocabulary; all heads together are ``D`` wide):

    - each encoder layer: ``S (8 D^2 + 4 D F)`` (query/key/value/output projections, feed-forward)
      ``+ 4 S^2 D`` (scores ``Q K^T`` and the weighted sum of values);
    - each decoder layer: ``T (8 D^2 + 4 D^2 + 4 D F)`` (self-attention projections, cross-attention
      query/output projections, feed-forward) ``+ 4 S D^2`` (cross-attention keys/values of the
      memory) ``+ 4 T^2 D + 4 T S D`` (self- and cross-attention);
    - the output layer: ``2 T D V``.

    The attention terms count the full ``T x T`` square, masked or not: that is what the kernels
    compute with a mask. Embedding look-ups, norms, softmax and biases are not matmuls and are
    left out (a few percent at this size). For padded batches pass the padded lengths.
    """
    D, F, V = config.d_model, config.d_ff, config.tgt_vocab_size
    Le, Ld = config.n_encoder_layers, config.n_decoder_layers
    total = 0
    for S, T in zip(src_lengths, tgt_lengths):
        encoder = Le * (S * (8 * D * D + 4 * D * F) + 4 * S * S * D)
        decoder = Ld * (T * (12 * D * D + 4 * D * F) + 4 * S * D * D + 4 * T * T * D + 4 * T * S * D)
        total += encoder + decoder + 2 * T * D * V
    return total


def training_flops(config: TransformerConfig, batch: Batch, padded: bool = True) -> int:
    """FLOPs of one training update: 3x the forward pass (the backward pass computes, for every
    product ``Y = X W``, both ``dX = dY W^T`` and ``dW = X^T dY``). The optimizer's element-wise work
    is not counted. ``padded``: the batch's padded shapes (what runs) or its real lengths (what is useful)."""
    if padded:
        B, S, T = batch.src.size(0), batch.src.size(1), batch.tgt_in.size(1)
        return 3 * forward_flops(config, [S] * B, [T] * B)
    src_lengths = (batch.src != config.pad_id).sum(1).tolist()
    tgt_lengths = (batch.tgt_out != config.pad_id).sum(1).tolist()
    return 3 * forward_flops(config, src_lengths, tgt_lengths)


def counted_flops(forward: Callable[[Batch], Tensor], model: nn.Module, batch: Batch, device: torch.device) -> int:
    """FLOPs of forward + backward on ``batch`` as ``FlopCounterMode`` counts them.

    Attention runs on the math backend here, so its products are plain batched matmuls that the
    counter sees. (The fused kernels recompute the scores in their backward pass: the counter
    charges them 2.5x the forward products instead of 2x, hardware FLOPs rather than model FLOPs.)
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    batch = batch.to(device)
    counter = FlopCounterMode(display=False)
    with sdpa_kernel(SDPBackend.MATH), counter:
        logits = forward(batch)
        label_smoothed_cross_entropy(logits.float(), batch.tgt_out, 0.1, 0, "sum").backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


# --- data and models ---------------------------------------------------------------------------


def load_batches(n: int, batch_size: int, data: Path | None, seed: int = 0,
                 pad_multiple: int = 1) -> tuple[list[Batch], int, int, str]:
    """Multi30k training batches (prepared data, else ``MULTI30K_DIR``), else random ids with Multi30k-like
    lengths; padded to a multiple of ``pad_multiple`` (16 with ``--compile``, as the train command pads)."""
    folder = os.environ.get("MULTI30K_DIR")
    if data is not None or (folder and Path(folder, "train.de.gz").is_file()):
        if data is not None:
            prepared, source = PreparedTranslation.load(data), f"Multi30k training batches from {data}"
        else:
            from transformer_lib.prepared import prepare_multi30k  # tokenizes with spaCy

            prepared, source = prepare_multi30k(folder, splits=("train",)), "Multi30k training batches (MULTI30K_DIR)"
        loader = make_loader(prepared.splits["train"], batch_size, seed=seed, pad_multiple=pad_multiple)
        batches = []
        for batch in loader:
            if len(batches) == n:
                break
            batches.append(batch)
        return batches, len(prepared.src_vocab), len(prepared.tgt_vocab), source + ", length-bucketed"
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n * batch_size):  # Multi30k-like lengths: mean ~12-13 tokens
        s_len, t_len = (int(x) for x in torch.randint(5, 21, (2,), generator=g))
        pairs.append((torch.randint(4, SRC_VOCAB, (s_len,), generator=g).tolist(),
                      torch.randint(4, TGT_VOCAB, (t_len,), generator=g).tolist()))
    batches = [collate(pairs[i : i + batch_size], pad_multiple=pad_multiple) for i in range(0, len(pairs), batch_size)]
    return batches, SRC_VOCAB, TGT_VOCAB, "random ids with Multi30k-like lengths (no --data, MULTI30K_DIR not set)"


@torch.no_grad()
def check_same_function(ours: Transformer, theirs: TorchTransformer, batch: Batch, device: torch.device) -> float:
    """Largest logit difference of the two models in eval mode and float32 (they share weights)."""
    ours.eval(), theirs.eval()
    batch = batch.to(device)
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # its inference fast path zeroes padded positions
    try:
        a = ours(batch.src, batch.tgt_in, *ours.masks_for(batch.src, batch.tgt_in))
        b = theirs(batch.src, batch.tgt_in)
        keep = (batch.tgt_out != ours.config.pad_id)[..., None]  # compare real positions only
        difference = float(((a - b).abs() * keep).max())
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.mha.set_fastpath_enabled(fastpath)
        ours.train(), theirs.train()
    return difference


class Runner:
    """One model's training update: forward (optionally compiled), loss, backward, clipping, AdamW."""

    def __init__(self, name: str, model: nn.Module, forward: Callable[[nn.Module, Batch], Tensor],
                 device: torch.device, amp: str, compile_mode: str | None) -> None:
        self.name, self.model, self.device, self.amp = name, model.to(device), device, amp
        if compile_mode is None:
            self.module = model
        elif compile_mode.startswith("backend="):  # a CPU smoke test: e.g. backend=aot_eager, no code generated
            self.module = torch.compile(model, backend=compile_mode.removeprefix("backend="))
        else:
            self.module = torch.compile(model, mode=compile_mode)
        self._forward = forward
        self.optimizer = make_optimizer(model)
        for group in self.optimizer.param_groups:
            group["lr"] = 1e-4
        self.times: list[float] = []

    def forward(self, batch: Batch) -> Tensor:
        with autocast_context(self.device, self.amp):
            return self._forward(self.module, batch)  # (B, T, V)

    def step(self, batch: Batch) -> None:
        batch = batch.to(self.device, non_blocking=True)
        logits = self.forward(batch)
        loss = label_smoothed_cross_entropy(logits, batch.tgt_out, 0.1, 0, "sum") / batch.n_tokens
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0, foreach=True)
        self.optimizer.step()


def _matmul_dtype(device: torch.device, amp: str) -> str:
    if device.type == "cuda":
        if amp != "off" and torch.cuda.is_bf16_supported():
            return "bf16"
        return "tf32" if torch.get_float32_matmul_precision() != "highest" else "fp32"
    return "bf16" if amp == "bf16" else "fp32"


class TorchTransformerForTraining(TorchTransformer):
    """``reference.TorchTransformer`` with our embedding dropout and the causal-mask hint, for training."""

    def __init__(self, ours: Transformer) -> None:
        super().__init__(ours)
        self.embed_dropout = nn.Dropout(ours.config.dropout)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        src_blocked = to_torch_blocked(padding_mask(src, self.pad_id)[:, 0, 0])  # (B, S), True = pad
        tgt_blocked = to_torch_blocked(padding_mask(tgt, self.pad_id)[:, 0, 0])  # (B, T)
        future_blocked = to_torch_blocked(causal_mask(tgt.size(1), device=tgt.device)[0, 0])  # (T, T)
        hidden = self.transformer(
            self.embed_dropout(self.src_positions(self.src_embed(src))),
            self.embed_dropout(self.tgt_positions(self.tgt_embed(tgt))),
            tgt_mask=future_blocked, src_key_padding_mask=src_blocked, tgt_key_padding_mask=tgt_blocked,
            memory_key_padding_mask=src_blocked, tgt_is_causal=True,
        )  # (B, T, D)
        return self.output_layer(hidden)  # (B, T, V_tgt)


# --- the run -----------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device) if args.device else default_device()
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")  # as the training command line does
    preset = args.preset or ("multi30k" if device.type == "cuda" else "tiny")
    batch_size = args.batch_size or (128 if device.type == "cuda" else 64)
    n_batches = 3 if args.quick else (args.batches or (30 if device.type == "cuda" else 6))
    rounds = 1 if args.quick else args.rounds
    # Compiled: batches padded to multiples of 16 tokens, as the train command pads them with --compile
    # (a few shapes, so a few graphs; 6 an epoch of Multi30k at batch 128).
    batches, src_v, tgt_v, source = load_batches(n_batches, batch_size, args.data, pad_multiple=16 if args.compile else 1)
    if len(batches) < n_batches:
        raise ValueError(f"the data gave {len(batches)} batches of {batch_size}, fewer than the {n_batches} asked for")

    torch.manual_seed(0)
    config = TransformerConfig.from_preset(preset, src_vocab_size=src_v, tgt_vocab_size=tgt_v)
    ours = Transformer(config).to(device)
    theirs = TorchTransformerForTraining(copy.deepcopy(ours)).to(device)  # nn.Transformer with our weights, its own copy
    difference = check_same_function(ours, theirs, batches[0], device)
    print(f"same function: largest logit difference {difference:.2e} (eval mode, float32)", flush=True)
    if difference > 1e-3:
        raise AssertionError(f"the two models disagree by {difference:.2e}: the comparison would not be fair")

    def ours_forward(module: nn.Module, batch: Batch) -> Tensor:
        return module(batch.src, batch.tgt_in)  # as the trainer calls it: the model makes its masks (CAUSAL)

    def theirs_forward(module: nn.Module, batch: Batch) -> Tensor:
        return module(batch.src, batch.tgt_in)

    compile_mode = (args.compile_mode or "default") if args.compile else None
    runners = [Runner("ours", ours, ours_forward, device, args.amp, compile_mode),
               Runner("nn.Transformer", theirs, theirs_forward, device, args.amp, compile_mode)]

    # FLOPs: the formula on the padded batch, and FlopCounterMode on the same batch (plain modules).
    formula = training_flops(config, batches[0])
    counted = {r.name: counted_flops(lambda b, r=r: r._forward(r.model, b), r.model, batches[0], device) for r in runners}
    for name, flops in counted.items():
        print(f"FLOPs of one update on batch 0: formula {formula / 1e9:.3f} G, FlopCounterMode ({name}) "
              f"{flops / 1e9:.3f} G, ratio {flops / formula:.4f}", flush=True)
        if abs(flops / formula - 1) > 0.01:
            print(f"WARNING: the formula and FlopCounterMode disagree for {name}: the MFU below is suspect", flush=True)

    start = time.perf_counter()
    for runner in runners:  # warm-up: every batch shape once (compilation, allocator, kernel choice)
        for batch in batches:
            runner.step(batch)
    sync(device)
    warmup_s = time.perf_counter() - start
    print(f"warm-up (one pass over {len(batches)} batches each{', compiling' if compile_mode else ''}): "
          f"{warmup_s:.1f} s", flush=True)

    for round_ in range(rounds):  # alternate which model goes first
        for runner in runners if round_ % 2 == 0 else runners[::-1]:
            sync(device)
            start = time.perf_counter()
            for batch in batches:
                runner.step(batch)
            sync(device)
            runner.times.append(time.perf_counter() - start)

    tokens = sum(b.n_tokens for b in batches)
    flops_padded = sum(training_flops(config, b) for b in batches)
    flops_useful = sum(training_flops(config, b, padded=False) for b in batches)
    matmul_dtype = _matmul_dtype(device, args.amp)
    peak, peak_source = (args.peak_tflops, "--peak-tflops") if args.peak_tflops else peak_tflops(device, matmul_dtype)
    models: dict[str, Any] = {}
    for runner in runners:
        seconds = sum(runner.times) / len(runner.times)  # one round
        achieved = flops_padded / seconds
        models[runner.name] = {
            "parameters": count_parameters(runner.model),
            "tokens_per_s": tokens / seconds,
            "ms_per_update": 1000 * seconds / len(batches),
            "round_seconds": runner.times,
            "achieved_tflops": achieved / 1e12,
            "mfu": achieved / (peak * 1e12) if peak else None,
            "mfu_useful": flops_useful / seconds / (peak * 1e12) if peak else None,
        }
    result = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "preset": preset,
        "model_config": config.to_dict(),
        "batch_size": batch_size,
        "batches": len(batches),
        "rounds": rounds,
        "data": source,
        "amp": args.amp,
        "matmul_dtype": matmul_dtype,
        "compile": compile_mode,
        "batch_shapes": len({(*b.src.shape, b.tgt_in.size(1)) for b in batches}),
        "warmup_s": warmup_s,
        "logit_difference": difference,
        "target_tokens_per_round": tokens,
        "padding_share_of_flops": 1 - flops_useful / flops_padded,
        "flops_formula_batch0": formula,
        "flops_counted_batch0": counted,
        "peak_tflops": peak,
        "peak_source": peak_source,
        "models": models,
        "ratio_ours_over_torch": models["ours"]["tokens_per_s"] / models["nn.Transformer"]["tokens_per_s"],
        "quick": args.quick,
    }
    if args.trace:
        result["trace"] = {r.name: _trace(r, batches[:3], device) for r in runners}
    return result


def _trace(runner: Runner, batches: list[Batch], device: torch.device) -> str:
    """The most expensive kernels (CUDA) or operators (CPU) of three updates, as a table."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for batch in batches:
            runner.step(batch)
        sync(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=15)
    print(f"\n{runner.name}: top kernels of {len(batches)} updates\n{table}", flush=True)
    return table


def report(result: dict[str, Any]) -> None:
    print(f"\n| training update, {result['preset']} preset, batch {result['batch_size']}, {result['matmul_dtype']}"
          f"{', compiled' if result['compile'] else ''} | parameters | target tokens/s | ms/update | TFLOP/s | MFU |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, m in result["models"].items():
        mfu = f"{m['mfu']:.1%}" if m["mfu"] is not None else "n/a"
        print(f"| {name} | {m['parameters']:,} | {m['tokens_per_s']:,.0f} | {m['ms_per_update']:.1f} | "
              f"{m['achieved_tflops']:.3g} | {mfu} |")
    print(f"\nthroughput ratio, ours / nn.Transformer: {result['ratio_ours_over_torch']:.2f}")
    print(f"data: {result['data']}; padding is {result['padding_share_of_flops']:.0%} of the FLOPs")
    print(f"MFU: matmul FLOPs of the padded batches (formula, 3x forward) / time / peak; peak: {result['peak_source']}")
    print(f"device: {result['device_name']} ({result['device']}), torch {result['torch']}, {result['threads']} CPU threads, "
          f"load average {result['load_average']}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cuda, cuda:1, cpu (default: cuda if available)")
    parser.add_argument("--preset", default=None, help="model size (default: multi30k on CUDA, tiny on CPU)")
    parser.add_argument("--batch-size", type=int, default=None, help="sentences per batch (default: 128 on CUDA, 64 on CPU)")
    parser.add_argument("--batches", type=int, default=None, help="batches per round (default: 30 on CUDA, 6 on CPU)")
    parser.add_argument("--rounds", type=int, default=4, help="timed rounds per model (each: every batch once)")
    parser.add_argument("--data", type=Path, default=None, help="prepared data (train --prepare-only): real batches without spaCy")
    parser.add_argument("--amp", choices=("auto", "bf16", "off"), default="auto", help="bf16 autocast (auto: on CUDA only)")
    parser.add_argument("--compile", action="store_true", help="torch.compile both models")
    parser.add_argument("--compile-mode", default=None, help="torch.compile mode (default, reduce-overhead, max-autotune), "
                        "or backend=NAME (backend=aot_eager: a CPU smoke test without a compiler)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="the device's peak for the MFU, if not in the table")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--trace", action="store_true", help="also print each model's most expensive kernels (torch profiler)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--quick", action="store_true", help="a short smoke run (numbers meaningless)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    result = run(args)
    report(result)
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
