#!/usr/bin/env bash
# Each policy of this study, and webshop_outcome_iter's pi_3, greedily on the first 200 test
# goals (the runs evaluated 50), with the runs' own evaluation settings: the study's config
# with iterations=0 and model.adapter naming the adapters that make the policy, in order.
#
# Goals 10-49 are copied from the 50-goal run's episodes of the same policy (the loop skips
# evaluated goals); goals 0-9 are evaluated again and compared with them (check_200.py), so
# each policy's reproduction is checked on this machine before its 150 new goals count.
#
#   bash experiments/webshop_objectives/evaluate_200.sh [policy ...]   # from the repo root
set -euo pipefail

study=experiments/webshop_objectives
clone=experiments/webshop_bc/runs/bc/iter_001/adapter
iter=experiments/webshop_outcome_iter/runs/agentq

declare -A adapters=(
  [base]="[$clone]"
  [agentq]="[$clone,$study/runs/agentq/iter_001/adapter]"
  [rft]="[$clone,$study/runs/rft/iter_001/adapter]"
  [traj_dpo]="[$clone,$study/runs/traj_dpo/iter_001/adapter]"
  [agentq_pi3]="[$clone,$iter/iter_001/adapter,$iter/iter_002/adapter,$iter/iter_003/adapter]"
)
declare -A episodes=(  # the 50-goal run's episodes of the same policy
  [base]=$study/runs/agentq/iter_000
  [agentq]=$study/runs/agentq/iter_001
  [rft]=$study/runs/rft/iter_001
  [traj_dpo]=$study/runs/traj_dpo/iter_001
  [agentq_pi3]=$iter/iter_003
)

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(base agentq rft traj_dpo agentq_pi3)
for name in "${names[@]}"; do
  run_dir=$study/runs/test200/$name
  target=$run_dir/iter_000/eval/zero_shot
  mkdir -p "$target"
  for goal in $(seq 10 49); do
    [ -e "$target/task_$goal.json" ] || cp "${episodes[$name]}/eval/zero_shot/task_$goal.json" "$target/"
  done
  resume=()
  [ -e "$run_dir/config.yaml" ] && resume=("resume=$run_dir")
  python run.py +experiment=webshop_mcts_dpo +study=webshop_clone_objectives iterations=0 \
    eval.recovery=false eval.num_tasks=200 "model.adapter=${adapters[$name]}" \
    paths.run_dir="$run_dir" logger=csv "${resume[@]}"
done
