"""webshop_agentq_table's dev tables: the clone and pi_1..pi_N on the 100 dev goals, each against
the clone and against the policy before it, baselines.py's RFT and trajectory DPO against the
clone once evaluated, the oracle on the same goals and step budget, and where each iteration's
pairs came from.

    python experiments/webshop_agentq_table/table.py

The clone is not evaluated in this run (eval.base=false): its dev episodes, under the same
evaluation settings, are webshop_clone80_base's committed episodes.csv, paired goal by goal.
Writes beside this file table.md / .csv, and for the iterations done behaviour.md / .csv (the
policies only), pairs.md / .csv and directions.md / .csv. Once evaluate_test.sh has read a policy,
test.md / .csv: each row read so far on the first 200 test goals, paired with the clone's
committed test episodes, the rows of the issue's chain paired with the row before them too
(``CHAIN``), and the oracle on those goals.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from agentq import compare
from agentq.agent.action import parse_composite
from agentq.data.buffer import ReplayBuffer
from agentq.layout import RunLayout
from agentq.modes import HOW_PICKED, SEARCH_MODES, ZERO_SHOT
from envs.webshop.episodes import behaviour_row, directions_row, pairs_row

STUDY = Path(__file__).parent
RUN = STUDY / "runs" / "agentq"
TEST = STUDY / "runs" / "test200"  # evaluate_test.sh's run folders, one a policy
CLONE_EPISODES = STUDY.parent / "webshop_clone80_base" / "report" / "episodes.csv"
CLONE = "clone on 80 demonstrations, greedy (webshop_clone80_base's episodes)"
# The clone's cost cells: its episodes.csv keeps no model calls, tokens or times.
NO_COSTS = dict.fromkeys(("model calls / goal", "per success: tokens / env steps / wall s"), compare.NOT_EVALUATED)


def policy(i: int) -> str:
    return f"Agent Q pi_{i}, greedy" if i else CLONE


# baselines.py's runs (runs/<name>, one iteration on iteration 1's trees, evaluated on dev) and their labels.
BASELINES = {
    "rft": "RFT (one best success per goal of iteration 1's trees), greedy",
    "traj_dpo": "trajectory DPO (one pair per goal of iteration 1's trees), greedy",
}

# The pre-registered test rows in the table's order (NOTES.md): evaluate_test.sh's run folder, the
# evaluation mode, the row's label.
TEST_ROWS = [
    *((name, ZERO_SHOT, label) for name, label in BASELINES.items()),
    ("pi_3", ZERO_SHOT, policy(3)),
    *((folder, mode, f"{who} + MCTS ({HOW_PICKED[mode]})") for mode in SEARCH_MODES
      for folder, who in (("clone_mcts", "clone"), ("pi_3_mcts", "Agent Q pi_3"))),
]

# The goal is a chain, base < trajectory DPO <= Agent Q zero-shot < Agent Q + MCTS: each
# row beside the one before it in the chain (the base's pairing is every row's own).
CHAIN = {"pi_3": "traj_dpo", "pi_3_mcts": "pi_3"}


def command(text: str) -> str:
    return parse_composite(text).command


def main() -> None:
    layout = RunLayout(RUN)
    iterations = compare.iteration_index(RUN, "last")
    done = [i for i in range(1, iterations + 1) if layout.eval_metrics(i, ZERO_SHOT).exists()]
    episodes = {0: compare.recorded_by_goal(CLONE_EPISODES, "dev", 0)} | {i: compare.by_goal(RUN, i, ZERO_SHOT) for i in done}
    for i in done:  # paired rows count only the goals both played: they must be the same 100
        if episodes[i].keys() != episodes[0].keys():
            raise ValueError(f"pi_{i}'s dev goals are not the clone's: {sorted(episodes[i].keys() ^ episodes[0].keys())}")
    baselines = {name: STUDY / "runs" / name for name in BASELINES}
    baselines = {name: run for name, run in baselines.items() if RunLayout(run).eval_metrics(1, ZERO_SHOT).exists()}
    for name, run in baselines.items():
        if compare.by_goal(run, 1, ZERO_SHOT).keys() != episodes[0].keys():
            raise ValueError(f"{name}'s dev goals are not the clone's")
    max_steps = int(OmegaConf.load(layout.config).eval.max_steps)
    rows = [compare.study_row(CLONE, episodes[0], max_steps) | NO_COSTS]
    rows += [compare.evaluated_row(policy(i), RUN, i, ZERO_SHOT, episodes[0]) for i in done]
    rows += [compare.evaluated_row(f"{policy(i)}, against pi_{i - 1}", RUN, i, ZERO_SHOT, episodes[i - 1])
             for i in done if i >= 2]  # fmt: skip
    rows += [compare.evaluated_row(BASELINES[name], run, 1, ZERO_SHOT, episodes[0]) for name, run in baselines.items()]
    rows.append(compare.oracle_study_row(RUN))
    data = compare.diagnostics_markdown(RUN)
    # Every file is written before anything is printed: a closed pipe (`| head`) must not cut the writing short.
    written = [compare.write_rows(STUDY, "table", rows, appendix=f"\nWhere the data came from:\n\n{data}" if data else "")]
    if done:  # the clone's episodes.csv keeps commands, not the pages behaviour_row reads
        written.append(compare.write_rows(STUDY, "behaviour", [behaviour_row(f"{policy(i)} (dev)", episodes[i]) for i in done]))
    buffer = ReplayBuffer(layout)
    pairs = {f"iteration {i}": buffer.examples(i) for i in range(1, iterations + 1) if buffer.has_examples(i)}
    if pairs:
        written.append(compare.write_rows(STUDY, "pairs", [pairs_row(k, v) for k, v in pairs.items()]))
        written.append(compare.write_rows(STUDY, "directions", [directions_row(k, v, command) for k, v in pairs.items()]))
    written.append(test_rows())
    print("\n".join(written))


def test_rows() -> str:
    """test.md / .csv: the test rows read so far, each paired goal by goal with the clone's
    committed greedy test episodes (the same 200 goals, or it raises), and the oracle on them."""
    read = [(name, mode, label) for name, mode, label in TEST_ROWS if RunLayout(TEST / name).eval_metrics(0, mode).exists()]
    if not read:
        return f"{TEST} holds no test evaluation yet: no test rows"
    clone = compare.recorded_by_goal(CLONE_EPISODES, "test200", 0)
    first = TEST / read[0][0]
    rows = [compare.study_row(f"{CLONE} (test)", clone, int(OmegaConf.load(RunLayout(first).config).eval.max_steps)) | NO_COSTS]
    for name, mode, label in read:
        if compare.by_goal(TEST / name, 0, mode).keys() != clone.keys():
            raise ValueError(f"{name}'s {mode} test goals are not the clone's")
        rows.append(compare.evaluated_row(f"{label} (test)", TEST / name, 0, mode, clone))
    # Each step of the chain also against the row before it, once both are read.
    greedy = {name for name, mode, _ in read if mode == ZERO_SHOT}
    for name, mode, label in read:
        before = CHAIN.get(name)
        if before in greedy:
            episodes = compare.by_goal(TEST / before, 0, ZERO_SHOT)
            rows.append(compare.evaluated_row(f"{label}, against {before} greedy (test)", TEST / name, 0, mode, episodes))
    rows.append(compare.oracle_study_row(first))
    return compare.write_rows(STUDY, "test", rows)


if __name__ == "__main__":
    main()
