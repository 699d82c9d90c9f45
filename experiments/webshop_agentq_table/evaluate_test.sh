#!/usr/bin/env bash
# The test rows fixed in NOTES.md, read only once iteration 3 is done: each learned policy greedily
# on the first 200 test goals (experiments/evaluate_test200.sh). The clone's test episodes are
# committed in experiments/webshop_clone80_base/report/episodes.csv, under the same settings.
#
#   bash experiments/webshop_agentq_table/evaluate_test.sh pi_3 rft traj_dpo   # from the repo root
set -euo pipefail

runs=experiments/webshop_agentq_table/runs
clone=experiments/webshop_bc_scale/runs/n80/iter_001/adapter
declare -A adapters=(
  [pi_3]="[$clone,$runs/agentq/iter_001/adapter,$runs/agentq/iter_002/adapter,$runs/agentq/iter_003/adapter]"
  [rft]="[$clone,$runs/rft/iter_001/adapter]"
  [traj_dpo]="[$clone,$runs/traj_dpo/iter_001/adapter]"
)

policies=()
for name in "$@"; do policies+=("$name=${adapters[$name]}"); done
bash experiments/evaluate_test200.sh webshop_agentq_table "${policies[@]}"
