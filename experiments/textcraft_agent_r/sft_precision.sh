#!/bin/bash
# Masked SFT in bf16 autocast against fp32 (trainer.lightning.precision), back to back, on the same
# 9 good paths as the study's good-only arm (its trees, copied by collect.trees_from; nothing is
# searched or evaluated). Run alone: the two timings are compared with each other.
#
#     bash experiments/textcraft_agent_r/sft_precision.sh /tmp/sft_precision
#
# Each run's log (with /usr/bin/time -v) is <out>/<precision>.log; its train.json holds the loss.
set -euo pipefail
out=${1:?usage: sft_precision.sh OUT_DIR}
mkdir -p "$out"
for precision in bf16-mixed 32-true; do
    rm -rf "$out/$precision"
    /usr/bin/time -v python run.py +experiment=textcraft_agent_r +study=textcraft_clone45 \
        model.adapter=experiments/textcraft_bc/runs/bc45_craftable_repeats/iter_001/adapter pairs=good_only \
        collect.trees_from=experiments/textcraft_agent_r/runs/agent_r \
        eval.base=false eval.search=false eval.zero_shot=false eval.recovery=false \
        trainer.lightning.precision=$precision logger=csv paths.run_dir="$out/$precision" \
        > "$out/$precision.log" 2>&1
    grep -h "train (iter 1" "$out/$precision.log"
    cat "$out/$precision/iter_001/train.json"; echo
done
