#!/usr/bin/env bash
# The test read of the studies from the 80-demonstration clone: each named policy greedily on the
# first 200 test goals with its study's evaluation settings (the study's config with iterations=0,
# tuning=false, eval.split=test; model.adapter lists the adapters that make the policy, in order),
# into experiments/<study>/runs/test200/<name>. Overrides after `--` reach every policy's run (a
# study's search rows: eval.zero_shot=false eval.search=true ...). A killed evaluation resumes
# from its run directory. Each study's evaluate_test.sh names its policies' adapters and calls this.
#
#   bash experiments/evaluate_test200.sh <study> <name>=<adapter list> ... [-- <override> ...]   # from the repo root
set -euo pipefail

study=$1
shift
policies=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do policies+=("$1"); shift; done
[ $# -gt 0 ] && shift  # the `--`
for policy in "${policies[@]}"; do
  name=${policy%%=*}
  run_dir=experiments/$study/runs/test200/$name
  resume=()
  [ -e "$run_dir/config.yaml" ] && resume=("resume=$run_dir")
  python run.py +experiment=webshop_base "+study=$study" iterations=0 tuning=false \
    eval.base=true eval.split=test eval.num_tasks=200 "model.adapter=${policy#*=}" \
    paths.run_dir="$run_dir" logger=csv "$@" "${resume[@]}"
done
