"""ATen operators per training update: our Transformer beside ``torch.nn.Transformer``.

At the ``multi30k`` size (7.6M parameters) a GPU training step is bound by kernel launches, not by
arithmetic, so the number of operators one update dispatches predicts the GPU ratio (2,149 ours
against 1,961 ``nn.Transformer``'s, 1.10x, went with 0.87x the throughput on an H100). This counts
them on the CPU, with a ``TorchDispatchMode`` that sees every operator the dispatcher runs: the
forward pass, the loss, the backward pass, gradient clipping and the AdamW step, one update after a
warm-up update (the optimizer's state exists then, as in every later update).

Both models are the same network with the same weights (``reference.TorchTransformer`` with our
embeddings and output layer, as in ``bench_gpu_training.py``, which checks they compute the same
function), trained on the same batch with the same update: the label-smoothed loss, clipping over
one list of parameters, :func:`transformer_lib.schedules.make_optimizer`'s AdamW. Ours is called as
the trainer calls it (``model(src, tgt_in)``: the model builds its masks).

Usage:
    python benchmarks/bench_ops.py                      # multi30k preset, batch 128 x 24/26 tokens
    python benchmarks/bench_ops.py --json benchmarks/results/ops_per_update.json
    python benchmarks/bench_ops.py --preset tiny --batch-size 8    # quick
"""

from __future__ import annotations

import argparse
import collections
import copy
import dataclasses
import platform
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

warnings.filterwarnings("ignore", message="enable_nested_tensor is True")

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from common import write_json  # noqa: E402
from bench_gpu_training import SRC_VOCAB, TGT_VOCAB, TorchTransformerForTraining, check_same_function  # noqa: E402
from transformer_lib.batching import Batch, collate  # noqa: E402
from transformer_lib.config import TransformerConfig  # noqa: E402
from transformer_lib.losses import label_smoothed_cross_entropy  # noqa: E402
from transformer_lib.model import Transformer  # noqa: E402
from transformer_lib.schedules import make_optimizer  # noqa: E402


class OperatorCounter(TorchDispatchMode):
    """Counts the ATen operators dispatched inside the block, by name (``aten.mm.default`` -> ``mm``)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def synthetic_batch(batch_size: int, src_len: int, tgt_len: int, seed: int = 0) -> Batch:
    """``batch_size`` random sentence pairs whose longest source is ``src_len`` tokens with ``<eos>``
    and longest target ``tgt_len`` with ``<bos>``: the shapes of a Multi30k batch, right-padded."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for i in range(batch_size):
        s = src_len - 1 if i == 0 else int(torch.randint(5, src_len, (), generator=g))
        t = tgt_len - 1 if i == 0 else int(torch.randint(5, tgt_len, (), generator=g))
        pairs.append((torch.randint(4, SRC_VOCAB, (s,), generator=g).tolist(),
                      torch.randint(4, TGT_VOCAB, (t,), generator=g).tolist()))
    return collate(pairs)


def update(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, parameters: list[Tensor]) -> None:
    """One training update as the trainer makes it (fp32 on the CPU, no gradient scaler)."""
    optimizer.zero_grad(set_to_none=True)
    logits = model(batch.src, batch.tgt_in)  # (B, T, V)
    loss = label_smoothed_cross_entropy(logits, batch.tgt_out, 0.1, 0, "sum") / batch.n_tokens
    loss.backward()
    nn.utils.clip_grad_norm_(parameters, 1.0, foreach=True)
    optimizer.step()


def count_update(model: nn.Module, batch: Batch) -> collections.Counter[str]:
    """Operators of one update after a warm-up update (AdamW's state is made in the first)."""
    model.train()
    optimizer = make_optimizer(model)
    for group in optimizer.param_groups:
        group["lr"] = 1e-4
    parameters = list(model.parameters())
    torch.manual_seed(0)
    update(model, optimizer, batch, parameters)
    with OperatorCounter() as counter:
        update(model, optimizer, batch, parameters)
    return counter.counts


def run(args: argparse.Namespace) -> dict[str, Any]:
    batch = synthetic_batch(args.batch_size, args.src_len, args.tgt_len)
    torch.manual_seed(0)
    config = TransformerConfig.from_preset(args.preset, src_vocab_size=SRC_VOCAB, tgt_vocab_size=TGT_VOCAB)
    if args.dropout is not None:
        config = dataclasses.replace(config, dropout=args.dropout, attn_dropout=args.dropout)
    ours = Transformer(config)
    theirs = TorchTransformerForTraining(copy.deepcopy(ours))
    difference = check_same_function(ours, theirs, batch, torch.device("cpu"))
    if difference > 1e-3:
        raise AssertionError(f"the two models disagree by {difference:.2e}: the comparison would not be fair")
    counts = {"ours": count_update(ours, batch), "nn.Transformer": count_update(theirs, batch)}
    totals = {name: sum(c.values()) for name, c in counts.items()}
    names = sorted(set().union(*counts.values()), key=lambda n: -max(c[n] for c in counts.values()))
    return {
        "what": "ATen operators dispatched by one training update (forward, loss, backward, clipping, AdamW), "
                "counted with a TorchDispatchMode on the CPU",
        "torch": torch.__version__,
        "machine": platform.machine(),
        "preset": args.preset,
        "dropout": {"dropout": config.dropout, "attn_dropout": config.attn_dropout},
        "batch": {"sentences": args.batch_size, "src_len": batch.src.size(1), "tgt_len": batch.tgt_in.size(1),
                  "target_tokens": batch.n_tokens},
        "logit_difference": difference,
        "optimizer": {name: _optimizer_path(m) for name, m in (("ours", ours), ("nn.Transformer", theirs))},
        "operators": totals,
        "ratio_ours_over_torch": totals["ours"] / totals["nn.Transformer"],
        "by_operator": {n: {name: c[n] for name, c in counts.items()} for n in names},
    }


def _optimizer_path(model: nn.Module) -> str:
    defaults = make_optimizer(model).defaults
    return "fused" if defaults.get("fused") else "foreach" if defaults.get("foreach") else "for-loop"


def report(result: dict[str, Any], top: int = 15) -> None:
    b = result["batch"]
    print(f"one training update, {result['preset']} preset, batch {b['sentences']} x {b['src_len']}/{b['tgt_len']} "
          f"tokens, torch {result['torch']} (logits agree to {result['logit_difference']:.1e})")
    print(f"\n| operator | ours | nn.Transformer |\n|---|---:|---:|")
    for name, row in list(result["by_operator"].items())[:top]:
        print(f"| {name} | {row['ours']:,} | {row['nn.Transformer']:,} |")
    ops = result["operators"]
    print(f"| **all** | **{ops['ours']:,}** | **{ops['nn.Transformer']:,}** |")
    print(f"\noperators, ours / nn.Transformer: {result['ratio_ours_over_torch']:.2f}x; "
          f"AdamW: {result['optimizer']['ours']}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="multi30k", help="model size (default: multi30k)")
    parser.add_argument("--batch-size", type=int, default=128, help="sentences in the batch (default: 128)")
    parser.add_argument("--src-len", type=int, default=24, help="longest source, <eos> included (default: 24)")
    parser.add_argument("--tgt-len", type=int, default=26, help="longest target, <bos> included (default: 26)")
    parser.add_argument("--dropout", type=float, default=None,
                        help="dropout and attention dropout instead of the preset's (0: attention takes the CPU's fused "
                             "kernel, as it does with dropout on a GPU, and no dropout masks are drawn)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (the count does not depend on it)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = run(args)
    report(result)
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
