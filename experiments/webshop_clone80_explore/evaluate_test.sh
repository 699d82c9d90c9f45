#!/usr/bin/env bash
# The test read fixed in NOTES.md: the clone and each arm that won more dev goals than it lost
# against it, greedily on the first 200 test goals (experiments/evaluate_test200.sh).
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

policies=()
for name in "$@"; do policies+=("$name=${adapters[$name]}"); done
bash experiments/evaluate_test200.sh webshop_clone80_explore "${policies[@]}"
