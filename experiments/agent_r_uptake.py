"""Did an Agent-R study's policies learn to start a revision turn? Teacher-forced, on saved adapters.

    python experiments/agent_r_uptake.py experiments/webshop_clone80_agent_r [RUN ...]

Agent-R's revision examples teach one turn no other example has: at the state after the first
wrong step, ``THOUGHT: <revision thought>`` with no command (agentq/search/revision.py). Every
other turn the clones were trained on begins ``COMMAND:``. A policy that never starts a turn with
``THOUGHT`` never revises, whatever it was trained on. This script measures, with no sampling:

- **at the revision points** each iteration trained on (the prompt of every revision turn in
  Agent-R's examples of iteration i), under pi_{i-1} and pi_i: did training fit the turn?
- **at the recovery states** (the state after each of the clone's failed prefixes, where the
  recovery read's policies took their first own step), under the clone, Agent-R's pi_i and
  good-only's pi_i (which never saw a revision turn: the baseline).

Per policy and set of states: the mean and largest probability that the turn starts with
``THOUGHT`` (the tokens of that header, as the revision turns are tokenized), the states where
greedy decoding would start it (every header token the argmax), and the revision turn's mean
log-prob per token (at recovery states with the config's first revision thought), and how many
of the turns the policy wrote in its own greedy and recovery episodes start ``THOUGHT``. Reads the runs
``agent_r_iterations.py`` reads, and any further RUN folders (a variant of an arm on the same
trees); writes uptake.md / .csv into the study folder.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch
from agent_r_iterations import arms, evaluated
from hydra.utils import instantiate
from omegaconf import OmegaConf

from agentq.compare import write_rows
from agentq.data.buffer import ReplayBuffer
from agentq.layout import RunLayout
from agentq.modes import RECOVERY, ZERO_SHOT
from agentq.records.examples import Segment
from agentq.search.revision import revision_turn
from agentq.training.data import Encoder

HEADER = revision_turn("").partition(":")[0]  # "THOUGHT": the field the revision turn is written in


def revision_points(run: Path, iteration: int) -> list[tuple[list, str]]:
    """(prompt, completion) of every revision turn Agent-R trained on at ``iteration``."""
    points = []
    for example in ReplayBuffer(RunLayout(run)).examples(iteration):
        if example.source == "revision":
            points += [(s.prompt, s.completion) for s in example.segments if s.completion.startswith(HEADER)]
    return points


def recovery_states(layout: RunLayout) -> list[list]:
    """The prompt of the first step the clone took after each of its failed prefixes (iteration 0's
    recovery read); every policy's recovery episode starts from the same state."""
    states = []
    for path in sorted(layout.episodes(0, RECOVERY).glob("*.json")):
        episode = json.loads(path.read_text())
        cut = episode["stats"]["prefix_steps"]
        steps = episode["trajectory"]["steps"]
        if cut < len(steps):  # a prefix that ended the episode leaves no state to act in
            states.append(steps[cut]["prompt"])
    return states


def own_turns(run: Path, iteration: int) -> tuple[int, int]:
    """(turns starting with the header, turns) the policy wrote in its own evaluation episodes:
    greedy, and recovery after the prefix it was handed."""
    layout, started, total = RunLayout(run), 0, 0
    for mode in (ZERO_SHOT, RECOVERY):
        for path in layout.episodes(iteration, mode).glob("*.json"):
            episode = json.loads(path.read_text())
            own = episode["trajectory"]["steps"][episode["stats"].get("prefix_steps", 0) :]
            started += sum(step["action"].lstrip().startswith(HEADER) for step in own)
            total += len(own)
    return started, total


class Scorer:
    """A policy's teacher-forced log-probs of a revision turn, token by token."""

    def __init__(self, model_config, adapters: list[Path], max_prompt_tokens: int) -> None:
        base = OmegaConf.to_container(model_config, resolve=True)
        chain = [base["adapter"]] if isinstance(base.get("adapter"), str) else list(base.get("adapter") or [])
        base["adapter"] = [*chain, *map(str, adapters)] or None
        self.model, tokenizer = instantiate(base).load()
        self.encoder = Encoder(tokenizer, max_prompt_tokens)
        header = tokenizer.encode(HEADER, add_special_tokens=False)
        self.header_tokens = len(header)

    @torch.inference_mode()
    def score(self, prompt: list, completion: str) -> tuple[float, bool, float]:
        """(P(the turn starts with the header), greedy would start it, mean log-prob per token of the turn)."""
        prompt_ids, completion_ids = self.encoder.segment(Segment(prompt, completion))
        if self.encoder.tokenizer.decode(completion_ids[: self.header_tokens]) != HEADER:
            raise ValueError(f"the revision turn does not start with the {HEADER!r} tokens: {completion!r}")
        ids = torch.tensor([prompt_ids + completion_ids])
        logits = self.model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()  # predicts the completion
        logps = torch.log_softmax(logits, dim=-1)
        targets = torch.tensor(completion_ids)
        chosen = logps.gather(1, targets[:, None]).squeeze(1)
        head = slice(0, self.header_tokens)
        greedy = bool((logps[head].argmax(-1) == targets[head]).all())
        return float(chosen[head].sum().exp()), greedy, float(chosen.mean())


def row(states: str, policy: str, scores: list[tuple[float, bool, float]], written: str = "") -> dict:
    starts, greedy, per_token = zip(*scores, strict=True)
    return {
        "states": states, "policy": policy, "n": len(scores),
        f"mean P(turn starts {HEADER})": f"{statistics.fmean(starts):.2e}",
        f"largest P(turn starts {HEADER})": f"{max(starts):.2e}",
        f"greedy starts {HEADER}": f"{sum(greedy)}/{len(greedy)}",
        "revision turn, mean log-prob per token": f"{statistics.fmean(per_token):.2f}",
        f"its own evaluation turns starting {HEADER}": written,
    }  # fmt: skip


def uptake_rows(study: Path, extra: list[Path] = ()) -> list[dict]:
    """Rows for the clone, each arm's pi_i and each ``extra`` run's pi_i (a variant of an arm
    trained on the same trees, named by its folder)."""
    runs = arms(study)
    agent_r = runs["Agent-R"]
    config = OmegaConf.load(RunLayout(agent_r).config)
    thought = revision_turn(config.pairs.revision_thoughts[0])
    states = recovery_states(RunLayout(agent_r))
    named = {**{run: arm for arm, run in runs.items()}, **{run: run.name for run in extra}}
    points = {run: {i: revision_points(run, i) for i in evaluated(run)} for run in named}

    rows = []
    policies = [("the clone", None, 0)] + [(f"{name} pi_{i}", run, i) for run, name in named.items() for i in evaluated(run)]
    for name, run, i in policies:
        adapters = RunLayout(run).adapters(i) if run else []
        policy = Scorer(config.model, adapters, config.agent.sampling.max_prompt_tokens)
        started, turns = own_turns(run or agent_r, i)
        rows.append(row("recovery states", name, [policy.score(s, thought) for s in states], f"{started}/{turns}"))
        # the revision points pi_i trained on, and those pi_{i+1} of its run will train on
        for j, when in ((i, "trained on"), (i + 1, "about to train on")):
            trained = points[run if run else agent_r].get(j)
            if trained:
                rows.append(row(f"revision points of iteration {j} ({when})", name,
                                [policy.score(p, c) for p, c in trained]))  # fmt: skip
        del policy
    return rows


def main(study: Path, extra: list[Path]) -> None:
    print(write_rows(study, "uptake", uptake_rows(study, extra)))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]])
