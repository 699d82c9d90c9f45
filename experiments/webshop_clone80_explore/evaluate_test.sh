#!/usr/bin/env bash
# The test read fixed in NOTES.md: the clone and each arm that won more dev goals than it lost
# against it, greedily on the first 200 test goals with the study's evaluation settings (its
# config with iterations=0, tuning=false, eval.split=test; model.adapter names the adapters that
# make the policy, in order). A killed evaluation resumes from its run directory.
#
#   bash experiments/webshop_clone80_explore/evaluate_test.sh clone product10   # from the repo root
set -euo pipefail

study=experiments/webshop_clone80_explore
clone=experiments/webshop_bc_scale/runs/n80/iter_001/adapter
declare -A adapters=(
  [clone]="[$clone]"
  [product10]="[$clone,$study/runs/product10/iter_001/adapter]"
  [distinct]="[$clone,$study/runs/distinct/iter_001/adapter]"
  [distinct_product]="[$clone,$study/runs/distinct_product/iter_001/adapter]"
)

for name in "$@"; do
  run_dir=$study/runs/test200/$name
  resume=()
  [ -e "$run_dir/config.yaml" ] && resume=("resume=$run_dir")
  python run.py +experiment=webshop_base +study=webshop_clone80_explore iterations=0 tuning=false \
    eval.base=true eval.split=test eval.num_tasks=200 "model.adapter=${adapters[$name]}" \
    paths.run_dir="$run_dir" logger=csv "${resume[@]}"
done
