#!/usr/bin/env bash
# The test rows fixed in NOTES.md, read only once iteration 3 is done, on the first 200 test goals
# (experiments/evaluate_test200.sh). The clone's greedy test episodes are committed in
# experiments/webshop_clone80_base/report/episodes.csv, under the same settings.
#   - pi_3, rft, traj_dpo: greedy.
#   - clone_mcts, pi_3_mcts: the policy with the study's search at every step (committed: 2
#     simulations of depth 2 valued by the judge, no env reward), and the verifier's best of
#     2 rollouts by the env's reward beside it (an upper bound); no greedy episode again.
#
#   bash experiments/webshop_agentq_table/evaluate_test.sh pi_3 rft traj_dpo clone_mcts pi_3_mcts   # from the repo root
set -euo pipefail

runs=experiments/webshop_agentq_table/runs
clone=experiments/webshop_bc_scale/runs/n80/iter_001/adapter
pi_3="[$clone,$runs/agentq/iter_001/adapter,$runs/agentq/iter_002/adapter,$runs/agentq/iter_003/adapter]"
declare -A adapters=(
  [pi_3]=$pi_3
  [rft]="[$clone,$runs/rft/iter_001/adapter]"
  [traj_dpo]="[$clone,$runs/traj_dpo/iter_001/adapter]"
  [clone_mcts]="[$clone]"
  [pi_3_mcts]=$pi_3
)
search=(eval.zero_shot=false eval.search=true eval.num_simulations=2)

for name in "$@"; do
  extra=()
  [[ $name == *_mcts ]] && extra=(-- "${search[@]}")
  bash experiments/evaluate_test200.sh webshop_agentq_table "$name=${adapters[$name]}" "${extra[@]}"
done
