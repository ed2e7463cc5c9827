#!/usr/bin/env bash
# The recipe grid of chapters 4-5 and issue 15: the same model and budget, one choice changed at a time.
# Every run trains the multi30k preset (d_model 256, 3+3 layers) for EPOCHS epochs on prepared data
# (make it with `python -m transformer_lib.cli.train --task multi30k --prepare-only --tokenizer bpe
# --vocab-size 8000 --out runs/data-bpe8k`, and likewise data-word, data-bpe5k, data-bpe10k),
# picks the final weights by validation BLEU (last vs average of the last 5 epochs), and decodes
# val and test at the end. The test score never picks anything: compare runs on validation.
#
#   bash benchmarks/recipe_grid.sh OUT [NAME ...]     # all runs at once on one GPU, or the named ones
#
# Runs go in parallel (one small model each: a GPU has room for a dozen). On a CPU run one at a time.
set -uo pipefail
out=${1:?usage: recipe_grid.sh OUT [NAME ...]}; shift
EPOCHS=${EPOCHS:-16}
# The full profile as it was when the grid ran (warm-up + cosine peaking at 5e-4; today's full profile
# is Noam at 3e-3), so that each run makes the committed one; a run's own options override these.
common=(--task multi30k --profile full --schedule cosine --lr 5e-4 --epochs "$EPOCHS" --bleu epoch --keep-weights 5 --no-progress)
declare -A runs=(
  # round 1: which choices matter (tokenizer, LayerNorm placement, schedule, dropout, vocabulary size)
  [word-pre-cosine]="--data runs/data-word/data.pt"
  [bpe8k-pre-cosine]="--data runs/data-bpe8k/data.pt"
  [bpe8k-post-noam]="--data runs/data-bpe8k/data.pt --no-norm-first --schedule noam"
  [bpe8k-post-noam-lr1e-3]="--data runs/data-bpe8k/data.pt --no-norm-first --schedule noam --lr 1e-3"
  [bpe8k-post-cosine]="--data runs/data-bpe8k/data.pt --no-norm-first"
  [bpe8k-pre-noam]="--data runs/data-bpe8k/data.pt --schedule noam"
  [bpe8k-pre-cosine-d0.2]="--data runs/data-bpe8k/data.pt --dropout 0.2"
  [bpe8k-pre-cosine-d0.3]="--data runs/data-bpe8k/data.pt --dropout 0.3"
  [bpe8k-pre-cosine-d0.3-lr1e-3]="--data runs/data-bpe8k/data.pt --dropout 0.3 --lr 1e-3"
  [bpe5k-pre-cosine-d0.3]="--data runs/data-bpe5k/data.pt --dropout 0.3"
  [bpe10k-pre-cosine-d0.3]="--data runs/data-bpe10k/data.pt --dropout 0.3"
  [bpe8k-post-noam-d0.3]="--data runs/data-bpe8k/data.pt --no-norm-first --schedule noam --dropout 0.3"
  # round 2: the budget is short, so the learning rate matters most; 2.2e-3 is the paper's
  # 1/sqrt(d_model * warmup) for d_model 256 and 800 warm-up steps
  [bpe8k-post-noam-lr2.2e-3]="--data runs/data-bpe8k/data.pt --no-norm-first --schedule noam --lr 2.2e-3"
  [bpe8k-post-noam-lr1.5e-3]="--data runs/data-bpe8k/data.pt --no-norm-first --schedule noam --lr 1.5e-3"
  [bpe8k-pre-noam-lr1e-3]="--data runs/data-bpe8k/data.pt --schedule noam --lr 1e-3"
  [bpe8k-pre-noam-lr2e-3]="--data runs/data-bpe8k/data.pt --schedule noam --lr 2e-3"
  [bpe8k-pre-cosine-lr1e-3]="--data runs/data-bpe8k/data.pt --lr 1e-3"
  [bpe8k-pre-cosine-lr2e-3]="--data runs/data-bpe8k/data.pt --lr 2e-3"
  [bpe8k-post-noam-lr1e-3-wu400]="--data runs/data-bpe8k/data.pt --no-norm-first --schedule noam --lr 1e-3 --warmup-steps 400"
  [bpe8k-post-noam-lr1e-3-b64]="--data runs/data-bpe8k/data.pt --no-norm-first --schedule noam --lr 1e-3 --batch-size 64"
  [bpe5k-post-noam-lr1e-3]="--data runs/data-bpe5k/data.pt --no-norm-first --schedule noam --lr 1e-3"
  [bpe10k-post-noam-lr1e-3]="--data runs/data-bpe10k/data.pt --no-norm-first --schedule noam --lr 1e-3"
  [bpe8k-post-noam-lr1e-3-d0.2]="--data runs/data-bpe8k/data.pt --no-norm-first --schedule noam --lr 1e-3 --dropout 0.2"
  [bpe8k-post-cosine-lr1e-3]="--data runs/data-bpe8k/data.pt --no-norm-first --lr 1e-3"
)
names=("$@"); [ ${#names[@]} -eq 0 ] && names=("${!runs[@]}")
mkdir -p "$out"
for name in "${names[@]}"; do
  # shellcheck disable=SC2086
  python -m transformer_lib.cli.train "${common[@]}" ${runs[$name]} --out "$out/$name" > "$out/$name.log" 2>&1 &
done
wait
for name in "${names[@]}"; do echo "== $name"; tail -n 4 "$out/$name.log"; done
