"""Training speed of our Transformer beside ``torch.nn.Transformer``, measured side by side in one run.

1. **Reverse task, time to 100%**: wall time until every one of 1,000 held-out sequences is
   reversed exactly (teacher-forced exact match, which equals greedy-decoding exact match), for our
   model and for ``nn.Transformer`` of the same size, with the same embeddings, positional
   encodings and tied output layer around it, the same data, initialisation scheme, optimizer,
   schedule, loss and evaluation (the same :class:`~transformer_lib.trainer.Trainer` updates).
   Only the encoder-decoder stack differs. The settings are the CLI's (``python -m
   transformer_lib.cli.train --task reverse``). The two runs are interleaved update by update, each
   on its own clock, so that load on a shared machine hits both alike. Target: ours at least as
   fast, and under a minute on a 2-core CPU.
2. **Training-step throughput** at the size of the book's headline run (``--task multi30k --profile
   full``: the ``multi30k`` preset, d_model 256, 3+3 layers, 8 heads, one joint BPE vocabulary of
   8,000 tokens with shared and tied embeddings, batches of 128 pairs): target tokens per second of
   one full update (forward, loss, backward, clipping, AdamW) on the same batches, alternating the
   two models step by step so that load changes hit both alike. Real Multi30k batches (BPE learned
   on the training split, as the run does) when ``MULTI30K_DIR`` is set, else random ids with
   Multi30k's lengths. Target: ratio (ours / nn.Transformer) >= 1.05. Here the two differ in their
   dropout too: ours is :class:`transformer_lib.dropout.Dropout`, the baseline PyTorch's own.
3. **One dropout**, forward and backward, ``nn.Dropout`` against ours on the headline run's shapes:
   the same distribution, the mask drawn differently.

Usage:
    python benchmarks/bench_training.py                       # both, CPU, 1 thread
    python benchmarks/bench_training.py --threads 2 --json results.json
    python benchmarks/bench_training.py --only throughput --device cuda
    python benchmarks/bench_training.py --only dropout --threads 2
    python benchmarks/bench_training.py --quick               # a short smoke run

Timings on a shared machine are noisy; the ratios, measured within one run, are what to compare.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

warnings.filterwarnings("ignore", message="enable_nested_tensor is True")  # nn.Transformer with norm_first

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from common import sync, write_json  # noqa: E402
from transformer_lib.batching import Batch, collate, make_loader  # noqa: E402
from transformer_lib.dropout import Dropout  # noqa: E402
from transformer_lib.toy_tasks import toy_task, toy_vocab  # noqa: E402
from transformer_lib.embeddings import SinusoidalPositionalEncoding, TokenEmbedding  # noqa: E402
from transformer_lib.masking import padding_mask, to_torch_blocked  # noqa: E402
from transformer_lib.model import Transformer, count_parameters, init_parameters  # noqa: E402
from transformer_lib.config import TransformerConfig  # noqa: E402
from transformer_lib.cli.options import RunConfig  # noqa: E402
from transformer_lib.cli.profiles import DEFAULTS  # noqa: E402
from transformer_lib.trainer import Trainer, TrainConfig  # noqa: E402
from transformer_lib.metrics import evaluate_teacher_forced  # noqa: E402

# The headline run's data and batch (transformer_lib.train, --task multi30k --profile full).
HEADLINE = DEFAULTS["multi30k"]["full"]


class TorchTransformerBaseline(nn.Module):
    """``torch.nn.Transformer`` inside the same embeddings, positions and tied output layer as ours.

    It offers our model's training interface (``masks_for`` and ``forward(src, tgt_in)``, masks built
    inside when not given), so the same :class:`Trainer` trains both. Masks are converted to PyTorch's
    polarity (``True`` = blocked) with :func:`transformer_lib.masking.to_torch_blocked`. Its
    dropout, in the layers and on the embeddings, is PyTorch's ``nn.Dropout``.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        if config.attn_dropout != config.dropout:
            raise ValueError(
                f"nn.Transformer uses one dropout for attention and residuals; got attn_dropout={config.attn_dropout} "
                f"!= dropout={config.dropout}"
            )
        self.config = c = config
        self.src_embed = TokenEmbedding(c.src_vocab_size, c.d_model)
        self.tgt_embed = self.src_embed if c.share_embeddings else TokenEmbedding(c.tgt_vocab_size, c.d_model)
        self.src_positions = SinusoidalPositionalEncoding(c.d_model, c.max_len)
        self.tgt_positions = SinusoidalPositionalEncoding(c.d_model, c.max_len)
        self.embed_dropout = nn.Dropout(c.dropout)
        self.transformer = nn.Transformer(
            d_model=c.d_model, nhead=c.n_heads, num_encoder_layers=c.n_encoder_layers,
            num_decoder_layers=c.n_decoder_layers, dim_feedforward=c.d_ff, dropout=c.dropout,
            activation=c.activation, layer_norm_eps=c.layer_norm_eps, batch_first=True, norm_first=c.norm_first,
        )
        self.output_layer = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        init_parameters(self)  # the same scheme as ours (nn.Transformer's packed in_proj stays Xavier)
        if c.tie_output:
            self.output_layer.weight = self.tgt_embed.weight

    def masks_for(self, src: Tensor, tgt: Tensor) -> tuple[Tensor, Tensor]:
        """Key padding masks ``(B, S)``, ``(B, T)`` in PyTorch's polarity."""
        pad = self.config.pad_id
        return to_torch_blocked(padding_mask(src, pad))[:, 0, 0, :], to_torch_blocked(padding_mask(tgt, pad))[:, 0, 0, :]

    def forward(self, src: Tensor, tgt: Tensor, src_key_padding: Tensor | None = None,
                tgt_key_padding: Tensor | None = None) -> Tensor:
        if src_key_padding is None or tgt_key_padding is None:
            src_key_padding, tgt_key_padding = self.masks_for(src, tgt)
        T = tgt.size(1)
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt.device).triu(1)  # True = blocked (the future)
        h = self.transformer(
            self.embed_dropout(self.src_positions(self.src_embed(src))),
            self.embed_dropout(self.tgt_positions(self.tgt_embed(tgt))),
            tgt_mask=causal, src_key_padding_mask=src_key_padding, tgt_key_padding_mask=tgt_key_padding,
            memory_key_padding_mask=src_key_padding, tgt_is_causal=True,
        )  # (B, T, D)
        return self.output_layer(h)  # (B, T, V)


MODELS = {"ours": Transformer, "nn.Transformer": TorchTransformerBaseline}


def _batch_stream(loader: torch.utils.data.DataLoader) -> Iterator[Batch]:
    """The loader's batches epoch after epoch, as ``Trainer.fit`` draws them."""
    epoch = 0
    while True:
        loader.batch_sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def reverse_to_100(quick: bool, device: torch.device, seed: int = 0) -> list[dict[str, Any]]:
    """Benchmark 1: each model trained on the reverse task until 100% held-out exact match.

    The two runs are interleaved, one update of each in turn (who goes first alternates), and each
    run's clock counts only its own updates and evaluations: a load change on the machine hits
    both alike. Each run does what ``Trainer.fit`` does with the CLI's settings: the same batches,
    an evaluation on the held-out set every ``eval_every`` updates, a stop at 100%. ``seed`` sets
    both models' initialisation and the batch order (the data stay the same).
    """
    s = dict(DEFAULTS["toy"]["fast"])
    if quick:
        s.update(max_steps=60)
    train, heldout = toy_task("reverse", s["n_train"], s["n_heldout"], n_symbols=s["n_symbols"],
                              shortest=s["shortest"], longest=s["longest"], seed=0)
    vocab = toy_vocab(s["n_symbols"])
    heldout_loader = make_loader(heldout, 1000, shuffle=False)
    runs: dict[str, dict[str, Any]] = {}
    for name, cls in MODELS.items():
        torch.manual_seed(seed)
        config = TransformerConfig.from_preset(s["preset"], src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), dropout=s["dropout"])
        model = cls(config)
        loader = make_loader(train, s["batch_size"], seed=seed)
        trainer = Trainer(
            model, loader,
            TrainConfig(epochs=s["epochs"], max_steps=s["max_steps"], schedule=s["schedule"], lr=s["lr"],
                        warmup_steps=s["warmup_steps"], label_smoothing=s["label_smoothing"], clip_norm=s["clip_norm"],
                        progress=False),
            device=device,
        )
        runs[name] = {"trainer": trainer, "batches": _batch_stream(loader), "clock": 0.0, "done": False, "exact_match": 0.0}
    order = list(runs)
    while not all(run["done"] for run in runs.values()):
        for name in order:
            run = runs[name]
            if run["done"]:
                continue
            trainer = run["trainer"]
            start = time.perf_counter()
            trainer.train_step(next(run["batches"]))
            if trainer.step % s["eval_every"] == 0 or trainer.step == trainer.total_steps:
                run["exact_match"] = evaluate_teacher_forced(trainer.model, heldout_loader, device=device)["exact_match"]
                run["done"] = run["exact_match"] == 1.0 or trainer.step >= trainer.total_steps
            sync(device)
            run["clock"] += time.perf_counter() - start
        order.reverse()
    results = []
    for name, run in runs.items():
        trainer, wall = run["trainer"], run["clock"]
        results.append({
            "model": name, "seed": seed, "parameters": count_parameters(trainer.model), "steps": trainer.step, "wall_s": wall,
            "ms_per_step": 1000 * wall / max(trainer.step, 1), "heldout_exact_match": run["exact_match"],
            "reached_100": run["exact_match"] == 1.0,
        })
        print(f"  seed {seed}  {name:<15} {trainer.step:>5} steps  {wall:6.1f} s  exact match {run['exact_match']:.1%}", flush=True)
    return results


def _batches(n: int, batch_size: int, seed: int = 0) -> tuple[list[Batch], int, str]:
    """Multi30k training batches (length-bucketed, the headline run's joint BPE vocabulary) if the
    data is there, else random ids with its lengths. Returns the batches, the vocabulary size and
    where they came from."""
    vocab_size = HEADLINE["vocab_size"]
    folder = os.environ.get("MULTI30K_DIR")
    if folder and Path(folder, "train.de.gz").is_file():
        from transformer_lib.prepared import prepare_multi30k

        prepared = prepare_multi30k(folder, splits=("train",), tokenizer=HEADLINE["tokenizer"],
                                    vocab_size=vocab_size, min_freq=HEADLINE["min_freq"])  # about 6 s
        loader = make_loader(prepared.splits["train"], batch_size, seed=seed)
        vocab_size = len(prepared.src_vocab)
        batches, source = list(loader)[:n], f"Multi30k training batches (bucketed, joint BPE of {vocab_size:,})"
    else:
        g = torch.Generator().manual_seed(seed)
        pairs = []
        for _ in range(n * batch_size):  # Multi30k-like lengths in BPE tokens: 6..26, mean 16
            s_len, t_len = (int(x) for x in torch.randint(6, 27, (2,), generator=g))
            pairs.append((torch.randint(4, vocab_size, (s_len,), generator=g).tolist(),
                          torch.randint(4, vocab_size, (t_len,), generator=g).tolist()))
        pairs.sort(key=lambda pair: len(pair[0]))  # bucketed by length, as the loader does
        batches = [collate(pairs[i : i + batch_size]) for i in range(0, len(pairs), batch_size)]
        source = "random ids with Multi30k-like lengths (MULTI30K_DIR not set)"
    return batches, vocab_size, source


def where_time_goes(trainers: dict[str, Trainer], batches: list[Batch], top: int = 8) -> dict[str, dict[str, float]]:
    """Each model's share of update time by PyTorch operator (``torch.profiler``, self time), over
    the same batches: which kernels the time is in, and whether the two models differ there."""
    from torch.profiler import ProfilerActivity, profile

    shares: dict[str, dict[str, float]] = {}
    for name, trainer in trainers.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for batch in batches:
                trainer.train_step(batch)
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events)
        ranked = sorted(events, key=lambda e: -e.self_cpu_time_total)
        shares[name] = {e.key: e.self_cpu_time_total / total for e in ranked[:top]}
        shares[name]["total_ms_per_update"] = total / 1000 / len(batches)
    return shares


def throughput(quick: bool, device: torch.device, batch_size: int, breakdown: bool = False) -> dict[str, Any]:
    """Benchmark 2: target tokens/s of full training steps at the headline run's size."""
    n_batches = 4 if quick else 12
    batches, vocab_size, source = _batches(n_batches, batch_size)
    trainers = {}
    for name, cls in MODELS.items():
        torch.manual_seed(0)
        run = RunConfig.from_dict({**HEADLINE, "task": "multi30k", "profile": "full"})
        config = run.model_config(vocab_size, vocab_size, pad_id=0)  # as the run builds it: shared, tied
        trainers[name] = Trainer(cls(config), batches, TrainConfig(epochs=1000, warmup_steps=100, progress=False), device=device)
    for trainer in trainers.values():  # warm-up: allocator, kernels
        for batch in batches[:2]:
            trainer.train_step(batch)
    times: dict[str, list[float]] = {name: [] for name in trainers}
    rounds = 1 if quick else 3
    for _ in range(rounds):
        for batch in batches:
            for name, trainer in trainers.items():  # alternate: ours, theirs, ours, theirs, ...
                sync(device)
                start = time.perf_counter()
                trainer.train_step(batch)
                sync(device)
                times[name].append(time.perf_counter() - start)
    tokens = sum(b.n_tokens for b in batches) * rounds
    result: dict[str, Any] = {"batch_size": batch_size, "batches": n_batches * rounds, "data": source, "models": {}}
    for name, t in times.items():
        result["models"][name] = {
            "parameters": count_parameters(trainers[name].model),
            "tokens_per_s": tokens / sum(t),
            "median_step_ms": 1000 * statistics.median(t),
        }
    result["ratio_ours_over_torch"] = result["models"]["ours"]["tokens_per_s"] / result["models"]["nn.Transformer"]["tokens_per_s"]
    if breakdown:
        result["operator_shares"] = where_time_goes(trainers, batches[: 2 if quick else 4])
    return result


def dropout_masks(quick: bool, device: torch.device) -> dict[str, Any]:
    """Benchmark 3: one dropout, forward and backward, ``nn.Dropout`` against ours
    (:class:`transformer_lib.dropout.Dropout`, the same distribution with its mask drawn from 32-bit
    integers), on the headline run's two shapes: after the feed-forward activation ``(B, T, d_ff)``
    and on a sublayer output ``(B, T, D)``, with B = 128 and T = 17 (its mean batch length)."""
    shapes = {"(128, 17, 1024), feed-forward": (128, 17, 1024), "(128, 17, 256), residual": (128, 17, 256)}
    modules = {"nn.Dropout": nn.Dropout(0.1), "ours": Dropout(0.1)}
    repeats = 5 if quick else 50
    result: dict[str, Any] = {}
    for label, shape in shapes.items():
        x = torch.randn(shape, device=device, requires_grad=True)
        grad = torch.ones(shape, device=device)
        times: dict[str, list[float]] = {name: [] for name in modules}
        for i in range(repeats + 2):
            for name, module in modules.items():  # alternate, as above
                sync(device)
                start = time.perf_counter()
                module(x).backward(grad)
                sync(device)
                if i >= 2:  # the first two are warm-up
                    times[name].append(time.perf_counter() - start)
        ms = {name: 1000 * statistics.median(t) for name, t in times.items()}
        result[label] = {"median_ms": ms, "speedup_ours": ms["nn.Dropout"] / ms["ours"]}
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("reverse", "throughput", "dropout"), default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--batch-size", type=int, default=HEADLINE["batch_size"],
                        help="sentences per batch for the throughput benchmark (default: the headline run's)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--quick", action="store_true", help="a short smoke run (numbers meaningless)")
    parser.add_argument("--breakdown", action="store_true",
                        help="throughput: also profile a few updates of each model and print time by operator")
    parser.add_argument("--seeds", type=int, default=3,
                        help="reverse task: repeat with seeds 0..N-1 (steps to 100%% vary with the initialisation)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    results: dict[str, Any] = {
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
                    "threads": torch.get_num_threads(), "device": str(device),
                    "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None},
        "quick": args.quick,
    }
    if args.only in (None, "reverse"):
        print("1. reverse task: train until 100% exact match on 1,000 held-out sequences", flush=True)
        rows = [row for seed in range(args.seeds) for row in reverse_to_100(args.quick, device, seed)]
        totals = {name: {key: sum(r[key] for r in rows if r["model"] == name) for key in ("wall_s", "steps")} for name in MODELS}
        ours, theirs = (totals[name] for name in MODELS)
        results["reverse"] = {
            "runs": rows, "seeds": args.seeds, "totals": totals,
            # time to 100%, summed over seeds; and the time of one update (evaluations included)
            "speedup_ours_over_torch": theirs["wall_s"] / ours["wall_s"],
            "per_step_speedup_ours_over_torch": (theirs["wall_s"] / theirs["steps"]) / (ours["wall_s"] / ours["steps"]),
        }
    if args.only in (None, "throughput"):
        print(f"2. training-step throughput, the headline run's size, batch {args.batch_size}", flush=True)
        results["throughput"] = throughput(args.quick, device, args.batch_size, args.breakdown)
    if args.only in (None, "dropout"):
        print("3. one dropout, forward and backward: nn.Dropout and ours", flush=True)
        results["dropout"] = dropout_masks(args.quick, device)
    results["machine"]["load_average_after"] = os.getloadavg() if hasattr(os, "getloadavg") else None

    print()
    if "reverse" in results:
        print("| reverse task to 100% held-out | seed | parameters | steps | wall time (s) | ms/step | exact match |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in results["reverse"]["runs"]:
            print(f"| {r['model']} | {r['seed']} | {r['parameters']:,} | {r['steps']} | {r['wall_s']:.1f} | {r['ms_per_step']:.1f} "
                  f"| {r['heldout_exact_match']:.1%} |")
        rev = results["reverse"]
        for name, total in rev["totals"].items():
            print(f"\n{name}: {total['steps']} steps, {total['wall_s']:.1f} s over {rev['seeds']} seed(s)", end="")
        print(f"\n\nspeed-up, ours over nn.Transformer: time to 100% {rev['speedup_ours_over_torch']:.2f}x, "
              f"per update {rev['per_step_speedup_ours_over_torch']:.2f}x\n")
    if "throughput" in results:
        t = results["throughput"]
        print(f"| training step, headline size, batch {t['batch_size']} | parameters | target tokens/s | median step (ms) |")
        print("|---|---:|---:|---:|")
        for name, r in t["models"].items():
            print(f"| {name} | {r['parameters']:,} | {r['tokens_per_s']:,.0f} | {r['median_step_ms']:.1f} |")
        print(f"\nthroughput ratio, ours / nn.Transformer: {t['ratio_ours_over_torch']:.2f} ({t['data']})")
        for name, shares in t.get("operator_shares", {}).items():
            print(f"\n{name}, share of update time by operator ({shares['total_ms_per_update']:.0f} ms an update under the profiler):")
            print("  " + ", ".join(f"{op} {share:.1%}" for op, share in shares.items() if op != "total_ms_per_update"))
    if "dropout" in results:
        print("\n| dropout p = 0.1, forward + backward | nn.Dropout (ms) | ours (ms) | speed-up |")
        print("|---|---:|---:|---:|")
        for label, r in results["dropout"].items():
            print(f"| {label} | {r['median_ms']['nn.Dropout']:.2f} | {r['median_ms']['ours']:.2f} | {r['speedup_ours']:.1f}x |")
    print(f"\nmachine: {results['machine']['cpu_count']} CPUs, {results['machine']['threads']} torch threads, "
          f"load average {results['machine']['load_average']} -> {results['machine']['load_average_after']}")
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
