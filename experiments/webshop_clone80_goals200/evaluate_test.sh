#!/usr/bin/env bash
# The test read fixed in NOTES.md (pi_1 won more dev goals than it lost against the clone): the
# clone and pi_1 greedily on the first 200 test goals with the study's evaluation settings (its
# config with iterations=0, tuning=false, eval.split=test; model.adapter names the adapters that
# make the policy, in order). A killed evaluation resumes from its run directory.
#
#   bash experiments/webshop_clone80_goals200/evaluate_test.sh clone pi_1   # from the repo root
set -euo pipefail

study=experiments/webshop_clone80_goals200
clone=experiments/webshop_bc_scale/runs/n80/iter_001/adapter
declare -A adapters=([clone]="[$clone]" [pi_1]="[$clone,$study/runs/goals200/iter_001/adapter]")

for name in "$@"; do
  run_dir=$study/runs/test200/$name
  resume=()
  [ -e "$run_dir/config.yaml" ] && resume=("resume=$run_dir")
  python run.py +experiment=webshop_base +study=webshop_clone80_goals200 iterations=0 tuning=false \
    eval.base=true eval.split=test eval.num_tasks=200 "model.adapter=${adapters[$name]}" \
    paths.run_dir="$run_dir" logger=csv "${resume[@]}"
done
