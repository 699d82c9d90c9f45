#!/usr/bin/env bash
# The test read fixed in NOTES.md: the last iteration's policy, if it won more dev goals than it
# lost against the clone, greedily on the first 200 test goals (experiments/evaluate_test200.sh).
# The clone's test episodes are the goals200 study's, read on this machine.
#
#   bash experiments/webshop_clone80_goals200_iter3/evaluate_test.sh pi_3   # from the repo root
set -euo pipefail

run=experiments/webshop_clone80_goals200_iter3/runs/iter3
clone=experiments/webshop_bc_scale/runs/n80/iter_001/adapter
declare -A adapters=(
  [pi_2]="[$clone,$run/iter_001/adapter,$run/iter_002/adapter]"
  [pi_3]="[$clone,$run/iter_001/adapter,$run/iter_002/adapter,$run/iter_003/adapter]"
)

policies=()
for name in "$@"; do policies+=("$name=${adapters[$name]}"); done
bash experiments/evaluate_test200.sh webshop_clone80_goals200_iter3 "${policies[@]}"
