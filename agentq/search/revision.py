"""Agent-R revision trajectories (Yuan et al. 2025, arXiv 2501.11425; docs/method.md §6).

Phase 1 of Agent-R turns one MCTS tree into SFT data that teaches the agent to
notice its own mistake and repair it:

1. **Paths.** Every MCTS simulation records one root-to-leaf path (the tree
   path plus its rollout) with its value R (:class:`~agentq.search.mcts.MCTS`):
   these are ``result.trajectories``, each command sequence counted once. A
   *good* path has value >= ``alpha`` (Agent-R's α); a *bad* path is one whose
   value is more than ``beta`` (Agent-R's β) below a good path's. All paths of
   a tree share the root; the divergence index d is the length of their common
   command prefix. Each bad path is paired once, with the good path that shares
   the longest prefix (Agent-R's "adjacent correct path, which shares the same
   parent node"; ties: higher value, then earlier simulation), bad paths in
   simulation order, at most ``max_revisions_per_task`` per tree.
2. **Revision point.** The actor model judges the bad path's steps from d on
   (:mod:`agentq.critic.judge`); the first step judged Bad is the revision
   point t' (``info["revision_point"] = "judged"``). When no step is judged
   Bad, t' = d, the step where the paths part (``"fallback"``).
3. **Splice.** Bad steps 0..t' are kept as context (no loss), then a revision
   turn, then the good path from d on (with loss).
4. The good paths themselves are also imitated (``include_good``, at most
   ``max_good_per_task`` per tree, best first): Agent-R's phase 2 trains on
   revision and good trajectories.

**The splice in our per-step prompt form.** Our policy sees h_t = (a_1..a_{t-1},
o_t) (docs/method.md §2), so a trajectory is a list of segments, one per generated turn,
each with its own prompt. Take a bad path with commands b0 b1 b2 (observations
ob0 ob1 ob2 after them) and a good path g0 g1 g2 (og0 og1 og2), with b0 = g0 so
d = 1, and the judge saying b1 Uncertain, b2 Bad, so t' = 2. With R the
revision text, "prev" the earlier actions the prompt lists and "obs" its
current observation, the revision example is::

    segment  prompt (prev | obs)           completion  train
    0        ()                | o_root    b0          no    exact prompt the policy saw
    1        (b0)              | ob0       b1          no    exact
    2        (b0 b1)           | ob1       b2          no    exact
    3        (b0 b1 b2)        | ob2       R           yes   the bad state after t'
    4        (b0 b1 b2 R)      | og0       g1          yes   re-rendered
    5        (b0 b1 b2 R g1)   | og1       g2          yes   re-rendered

The observation after the revision turn is the good path's state before step d
(og0 here): the agent "goes back" to where the paths parted and continues as
the good path did, as in Agent-R's splicing (the revision trajectory continues
with the good trajectory's actions *and observations*). The env is never
stepped for the revision turn.

The revision turn is **thought only**, ``"THOUGHT: <revision thought>"`` with no
COMMAND: Agent-R's revision signal is a thought, no environment action
corresponds to it, and a COMMAND in it would teach the model to emit an action
that was never executed. At inference such a turn parses with no command; the
env answers with what was wrong and the state is unchanged (commands never
crash a run, docs/method.md §2), so the agent's next turn continues from its own state.
The thought is drawn from ``revision_thoughts`` by a hash of (task id, good
index, bad index): deterministic, and varied across pairs (Agent-R also varies
its revision phrasing).

Prompts: segments 0..t' and the revision turn use the exact prompts the policy
saw (``steps[i].prompt``; the revision turn's is the bad path's next prompt, or
rendered when the bad path ended at t'). The good steps' prompts list other
earlier actions than the policy saw, so they are re-rendered with the policy's
:class:`~agentq.agent.prompt.PromptBuilder`. Steps do not record the env's
valid-action list, so the re-rendered prompt keeps the exact prompt's text
after the observation (the "Valid commands" listing) verbatim; a prompt that
the builder did not render raises. Completion token ids are those generated
(they do not depend on the prompt); the logged log-probs of re-rendered and
new segments are 0.0 (unknown: the policy never saw those prompts; SFT does
not use them).

Departures from Agent-R: the judge reads a restricted next-token distribution
instead of free text (see :mod:`agentq.critic.judge`); when no step is judged
Bad we splice at the divergence point instead of dropping the pair; α, β and
the caps are ours (config keys), as are the revision phrasings.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from agentq.agent.prompt import PromptBuilder
from agentq.critic.judge import LABELS, ActorStepJudge, StepJudge
from agentq.records.examples import SFT, Segment, SFTExample, segments_of
from agentq.records.history import History, Messages
from agentq.records.trajectory import Trajectory, commands, distinct
from agentq.records.tree import SearchResult

DEFAULT_REVISION_THOUGHTS = (
    "I realize my previous actions were wrong; I will go back and try another way.",
    "Looking back, my last steps are not getting me closer to the goal. I should return to an earlier point and take a different route.",
    "That was a mistake: this path does not lead to the goal. Let me go back and choose a better action.",
    "My recent actions moved me away from the task. I will reconsider and try another approach from before the error.",
)

_EPS = 1e-9  # value comparisons: 0.8 - 0.6 > 0.2 in floating point


@dataclass(frozen=True)
class RevisionPair:
    """A good and a bad path of one tree (indices into ``result.trajectories``) and
    d, the length of their common command prefix."""

    good: int
    bad: int
    divergence: int


@dataclass(frozen=True)
class RevisionBuilder:
    """Agent-R phase-1 data. Arguments are the keys of ``conf/pairs/revision.yaml``.

    Args:
        alpha: α, the value a good path must reach.
        beta: β, a bad path's value is more than this below its good path's.
        max_revisions_per_task: at most this many revision trajectories per tree (None: all).
        include_revisions: build revision trajectories (False: the good-only ablation,
            RFT-style SFT on the good paths of the same trees, no judge calls).
        include_good: also imitate the good paths.
        max_good_per_task: at most this many good paths per tree, best first (None: all).
        revision_thoughts: the phrasings of the revision turn.
        judge: a factory ``(model, tokenizer) -> StepJudge`` (a ``_partial_`` config
            node); None: :class:`~agentq.critic.judge.ActorStepJudge` with its defaults.
    """

    kind: ClassVar[str] = SFT

    alpha: float = 0.5
    beta: float = 0.2
    max_revisions_per_task: int | None = 4
    include_revisions: bool = True
    include_good: bool = True
    max_good_per_task: int | None = 2
    revision_thoughts: Sequence[str] = DEFAULT_REVISION_THOUGHTS
    judge: Callable[[Any, Any], StepJudge] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "revision_thoughts", tuple(self.revision_thoughts))
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"pairs.alpha must be in [0, 1], got {self.alpha}")
        if not 0.0 <= self.beta < 1.0:
            raise ValueError(f"pairs.beta must be in [0, 1), got {self.beta}")
        if self.max_revisions_per_task is not None and self.max_revisions_per_task < 1:
            raise ValueError(
                f"pairs.max_revisions_per_task must be >= 1 or null, got {self.max_revisions_per_task}"
            )
        if not (self.include_revisions or self.include_good):
            raise ValueError("pairs.include_revisions and pairs.include_good are both false: nothing to train on")
        if self.max_good_per_task is not None and self.max_good_per_task < 0:
            raise ValueError(
                f"pairs.max_good_per_task must be >= 0 or null, got {self.max_good_per_task}"
            )
        if not self.revision_thoughts or not all(
            isinstance(t, str) and t.strip() for t in self.revision_thoughts
        ):
            raise ValueError(
                "pairs.revision_thoughts must be a non-empty list of non-empty strings"
            )

    # -- the builder protocol ----------------------------------------------------
    def from_search(self, result: SearchResult, policy) -> list[SFTExample]:
        """Revision (and good) examples of one tree; the judge is the policy's own model."""
        judge = None
        if self.include_revisions and self.pairs(result.trajectories):  # no judge for trees without a pair
            judge = (self.judge or ActorStepJudge)(policy.model, policy.tokenizer)
        return self.build(result, policy.prompt, judge)

    def build(
        self, result: SearchResult, prompt: PromptBuilder, judge: StepJudge | None
    ) -> list[SFTExample]:
        trajectories = result.trajectories
        task = result.tree.root.history.observation if result.tree.nodes else ""
        examples = []
        for pair in self.pairs(trajectories) if self.include_revisions else ():
            if judge is None:
                raise ValueError(
                    "RevisionBuilder.build: a judge is needed when the tree has revision pairs"
                )
            good, bad = trajectories[pair.good], trajectories[pair.bad]
            revision_step, how, labels = self.revision_point(task, bad, pair.divergence, judge)
            thought = zlib.crc32(f"{good.task_id}/{pair.good}/{pair.bad}".encode()) % len(
                self.revision_thoughts
            )
            segments = splice(
                good,
                bad,
                pair.divergence,
                revision_step,
                self.revision_thoughts[thought],
                prompt,
                task,
            )
            info = {
                "revision_point": how,
                "divergence": pair.divergence,
                "revision_step": revision_step,
                "judgements": labels,
                "good_trajectory": pair.good,
                "bad_trajectory": pair.bad,
                "good_value": good.reward,
                "bad_value": bad.reward,
                "thought": thought,
            }
            examples.append(
                SFTExample(task_id=good.task_id, segments=segments, source="revision", info=info)
            )
        if self.include_good:
            goods = sorted(
                self._good(trajectories), key=lambda it: -it[1].reward
            )  # stable: ties in order
            for i, t in goods[: self.max_good_per_task]:
                examples.append(
                    SFTExample(
                        t.task_id,
                        segments_of(t),
                        source="good",
                        info={"trajectory": i, "reward": t.reward, "success": t.success},
                    )
                )
        return examples

    # -- phase 1 -------------------------------------------------------------------
    def _good(self, trajectories: Sequence[Trajectory]) -> list[tuple[int, Trajectory]]:
        return [
            (i, t) for i, t in distinct(trajectories) if t.steps and t.reward >= self.alpha - _EPS
        ]

    def pairs(self, trajectories: Sequence[Trajectory]) -> list[RevisionPair]:
        """Each bad path with the good path that shares its longest prefix."""
        good = self._good(trajectories)
        pairs = []
        for bi, b in distinct(trajectories):
            best: tuple[tuple, RevisionPair] | None = None
            for gi, g in good:
                if not g.reward - b.reward > self.beta + _EPS:
                    continue
                d = common_prefix(commands(g), commands(b))
                if d >= len(b.steps) or d >= len(g.steps):
                    continue  # one is a prefix of the other: nothing to revise or to continue with
                key = (d, g.reward, -gi)
                if best is None or key > best[0]:
                    best = (key, RevisionPair(good=gi, bad=bi, divergence=d))
            if best is not None:
                pairs.append(best[1])
                if (
                    self.max_revisions_per_task is not None
                    and len(pairs) >= self.max_revisions_per_task
                ):
                    break
        return pairs

    @staticmethod
    def revision_point(
        task: str, bad: Trajectory, divergence: int, judge: StepJudge
    ) -> tuple[int, str, list[str]]:
        """(t', "judged" | "fallback", the labels given to steps d..t')."""
        labels = []
        for t in range(divergence, len(bad.steps)):
            label = judge(task, bad.steps[:t], bad.steps[t])
            if label not in LABELS:
                raise ValueError(f"judge returned {label!r}, expected one of {LABELS}")
            labels.append(label)
            if label == "bad":
                return t, "judged", labels
        return divergence, "fallback", labels


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    d = 0
    while d < len(a) and d < len(b) and a[d] == b[d]:
        d += 1
    return d


def revision_turn(thought: str) -> str:
    return f"THOUGHT: {thought}"


def splice(
    good: Trajectory,
    bad: Trajectory,
    divergence: int,
    revision_step: int,
    thought: str,
    prompt: PromptBuilder,
    root_observation: str,
) -> list[Segment]:
    """Bad steps 0..t' (context), the revision turn, good steps d.. (see the module docstring)."""
    segments = [Segment.from_step(s, train=False) for s in bad.steps[: revision_step + 1]]
    previous = tuple(s.action for s in bad.steps[: revision_step + 1])
    if revision_step + 1 < len(bad.steps):
        at_error = bad.steps[revision_step + 1].prompt  # exactly the state after t'
    else:  # the bad path ended at t' (terminal or depth limit): no listing of valid actions
        at_error = prompt(History(bad.steps[revision_step].observation, previous))
    text = revision_turn(thought)
    segments.append(Segment(prompt=at_error, completion=text, train=True))
    previous = (*previous, text)
    for j in range(divergence, len(good.steps)):
        step = good.steps[j]
        observation = good.steps[j - 1].observation if j > 0 else root_observation
        seen = tuple(s.action for s in good.steps[:j])
        messages = rerender(prompt, step.prompt, observation, seen, previous)
        segments.append(Segment.from_step(step, prompt=messages))
        previous = (*previous, step.action)
    return segments


def rerender(
    prompt: PromptBuilder,
    exact: Messages,
    observation: str,
    seen_previous: tuple[str, ...],
    new_previous: tuple[str, ...],
) -> Messages:
    """``exact`` (rendered from ``seen_previous`` and ``observation``) with ``new_previous``
    as the earlier actions. What ``exact`` shows after the observation (the valid
    commands, which steps do not record) is kept verbatim."""
    plain = prompt(History(observation, seen_previous))[-1]["content"]
    shown = exact[-1]["content"] if exact else ""
    if not shown.startswith(plain):
        raise ValueError(
            "revision: a step's prompt was not rendered by the policy's prompt builder from its "
            "trajectory (was agent.prompt changed after collection?)"
        )
    messages = prompt(History(observation, new_previous))
    messages[-1] = {**messages[-1], "content": messages[-1]["content"] + shown[len(plain) :]}
    return messages
