"""Section 5.9's paired bootstrap, from the translations of ``benchmarks/seeds.sh``'s runs.

Each run folder holds ``val.greedy.en`` (its kept weights' greedy translations of Multi30k's
validation set). For each claim of the section, the second recipe is compared with the first seed by
seed (sacreBLEU's paired bootstrap, 1,000 draws, through ``transformer_lib.evaluation.paired_bootstrap``),
and once over the three seeds pooled. The results (scores, intervals, p-values; no translations) go
to ``transformer_lib/book/runs/bootstrap/seeds.json``, which the section reads.

    python benchmarks/seed_report.py RUNS_FOLDER      # MULTI30K_DIR: the references
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transformer_lib.evaluation import paired_bootstrap  # noqa: E402
from transformer_lib.multi30k import load_multi30k  # noqa: E402

CLAIMS = {
    "8,000 against 5,000 tokens": ("bpe5k-post-noam-lr1e-3", "bpe8k-post-noam-lr1e-3"),
    "8,000 against 10,000 tokens": ("bpe10k-post-noam-lr1e-3", "bpe8k-post-noam-lr1e-3"),
    "cosine against Noam (Pre-LN, 3e-3)": ("bpe8k-pre-noam-lr3e-3", "bpe8k-pre-cosine-lr3e-3"),
}
SEEDS = (0, 1, 2)


def _test(first: list[str], second: list[str], references: list[str]) -> dict:
    result = paired_bootstrap(first, second, references)
    return {"first": result.baseline.score, "second": result.system.score,
            "second_interval": list(result.system.interval), "p": result.p_value, "signature": result.signature}


def main(runs: Path) -> None:
    references = [english for _, english in load_multi30k("val")]
    read = lambda recipe, seed: (runs / f"{recipe}-seed{seed}" / "val.greedy.en").read_text(encoding="utf-8").splitlines()  # noqa: E731
    report = {}
    for claim, (first, second) in CLAIMS.items():
        by_seed = {str(seed): _test(read(first, seed), read(second, seed), references) for seed in SEEDS}
        pooled = _test(sum((read(first, s) for s in SEEDS), []), sum((read(second, s) for s in SEEDS), []), references * len(SEEDS))
        report[claim] = {"first": first, "second": second, "by_seed": by_seed, "pooled": pooled}
    out = ROOT / "transformer_lib" / "book" / "runs" / "bootstrap" / "seeds.json"
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
