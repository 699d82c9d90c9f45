"""The evaluation modes: one name each, the folder it writes and the title tables give it.

- ``zero_shot``: the policy acts greedily, one action per step, no search.
- ``committed``: at every real step MCTS searches from the current state and the
  agent commits one action; the env's reward is never read (the headline row).
- ``verifier``: a full search from the root, the best rollout by the env's reward
  is the answer: an upper bound that needs a verifier at test time.
- ``recovery``: Agent-R's test, the policy continues from failed prefixes.
"""

from __future__ import annotations

ZERO_SHOT, COMMITTED, VERIFIER, RECOVERY = "zero_shot", "committed", "verifier", "recovery"
SEARCH_MODES = (COMMITTED, VERIFIER)
MODES = (ZERO_SHOT, *SEARCH_MODES, RECOVERY)  # the folders under iter_XXX/eval/, in evaluation order
PLOTTED = (ZERO_SHOT, *SEARCH_MODES)  # what the report plots across iterations

TITLES = {
    ZERO_SHOT: "zero-shot",
    COMMITTED: "search (committed)",
    VERIFIER: "search (verifier, upper bound)",
    RECOVERY: "recovery",
}
# How each "with search" row picked its answer, for table captions.
HOW_PICKED = {
    COMMITTED: "committed: one searched action per real step, no env reward",
    VERIFIER: "verifier: best rollout by the env's reward, an upper bound",
}
# Runs written before the committed mode existed called the verifier mode "search".
LEGACY_NAMES = {VERIFIER: "search"}


def seconds_per_success(seconds: float | None, metrics: dict) -> float | None:
    """A mode's evaluation wall seconds (``seconds.json``) over the tasks it solved
    (``metrics`` as agentq.evaluate.aggregate gives them); None when the time is
    unknown or nothing was solved."""
    solved = round(metrics.get("success_rate", 0) * metrics.get("num_tasks", 0))
    return seconds / solved if seconds is not None and solved else None
