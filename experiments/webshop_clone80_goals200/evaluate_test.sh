#!/usr/bin/env bash
# The test read fixed in NOTES.md (pi_1 won more dev goals than it lost against the clone): the
# clone and pi_1 greedily on the first 200 test goals (experiments/evaluate_test200.sh).
#
#   bash experiments/webshop_clone80_goals200/evaluate_test.sh clone pi_1   # from the repo root
set -euo pipefail

study=experiments/webshop_clone80_goals200
clone=experiments/webshop_bc_scale/runs/n80/iter_001/adapter
declare -A adapters=([clone]="[$clone]" [pi_1]="[$clone,$study/runs/goals200/iter_001/adapter]")

policies=()
for name in "$@"; do policies+=("$name=${adapters[$name]}"); done
bash experiments/evaluate_test200.sh webshop_clone80_goals200 "${policies[@]}"
