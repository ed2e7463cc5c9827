#!/usr/bin/env bash
# Error bars for chapter 5's recipe comparison (issue 29): the recipes that the chapter's claims rest
# on, each trained with three seeds (the seed sets the weights, the data order and dropout), all at once
# on one GPU. Each run is the full profile (16 epochs, average of the last 5 checkpoints chosen on
# validation BLEU) with one recipe's options. Then each run's chosen weights translate validation and
# test greedily, so that benchmarks/seed_report.py can put sacreBLEU's paired bootstrap on every
# "A beats B" (both systems translate the same sentences).
#
#   bash benchmarks/seeds.sh OUT DATA          # DATA/bpe5k, bpe8k, bpe10k hold data.pt (--prepare-only)
#   RUN_TIMEOUT=480 bash benchmarks/seeds.sh ...   # stop each training run after 480 s
#   SEEDS="0 1" RECIPES="bpe8k-pre-noam-lr3e-3" EXTRA="--max-steps 20 --device cpu" bash benchmarks/seeds.sh ...
#
# MULTI30K_DIR must hold the Multi30k files (the hypotheses are of its val and test_2016_flickr).
set -uo pipefail
out=${1:?usage: seeds.sh OUT DATA}; data=${2:?usage: seeds.sh OUT DATA}
: "${MULTI30K_DIR:?set MULTI30K_DIR to the Multi30k folder}"
SEEDS=${SEEDS:-"0 1 2"}
declare -A recipes=(
  # the shipped model's recipe (the full profile's defaults) and the best on validation in chapter 5's grid
  [bpe8k-pre-noam-lr3e-3]="--data $data/bpe8k/data.pt --norm-first --schedule noam --lr 3e-3"
  [bpe8k-pre-cosine-lr3e-3]="--data $data/bpe8k/data.pt --norm-first --schedule cosine --lr 3e-3"
  # the vocabulary sizes, at the recipe chapter 5 compared them with
  [bpe5k-post-noam-lr1e-3]="--data $data/bpe5k/data.pt --no-norm-first --schedule noam --lr 1e-3"
  [bpe8k-post-noam-lr1e-3]="--data $data/bpe8k/data.pt --no-norm-first --schedule noam --lr 1e-3"
  [bpe10k-post-noam-lr1e-3]="--data $data/bpe10k/data.pt --no-norm-first --schedule noam --lr 1e-3"
)
names=(${RECIPES:-${!recipes[@]}})
mkdir -p "$out"
for name in "${names[@]}"; do
  for seed in $SEEDS; do
    run="$out/$name-seed$seed"
    # shellcheck disable=SC2086
    ${RUN_TIMEOUT:+timeout "$RUN_TIMEOUT"} python -m transformer_lib.cli.train --task multi30k --profile full --no-progress --seed "$seed" \
      ${recipes[$name]} ${EXTRA:-} --out "$run" > "$run.log" 2>&1 &
  done
done
wait
for name in "${names[@]}"; do
  for seed in $SEEDS; do
    run="$out/$name-seed$seed"
    weights="$run/model.pt"; [ -e "$weights" ] || weights="$run/checkpoint.pt"  # model.pt: the chosen average
    for split in val:val.de.gz test:test_2016_flickr.de.gz; do
      python -m transformer_lib.cli.translate --checkpoint "$weights" --input "$MULTI30K_DIR/${split#*:}" \
        --output "$run/${split%%:*}.greedy.en" --batch-size 500 ${TRANSLATE_EXTRA:-} >> "$run.log" 2>&1 &
    done
  done
done
wait
for name in "${names[@]}"; do for seed in $SEEDS; do echo "== $name seed $seed"; tail -n 3 "$out/$name-seed$seed.log"; done; done
