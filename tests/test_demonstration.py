"""Behaviour cloning's data and base: the scripted oracle's episodes recorded as search
results (agentq.search.demonstration), and a saved adapter as a run's base (model.adapter)."""

from __future__ import annotations

import json

import gymnasium
import pytest
import torch
from peft import LoraConfig, get_peft_model

from agentq.agent.prompt import PromptBuilder
from agentq.components import IncompatibleConfig, build
from agentq.data.successes import SuccessfulTrajectories
from agentq.models.loading import TinyRandomModel
from agentq.records.tree import SearchResult
from agentq.search.demonstration import SOURCE, ScriptedDemonstration
from envs.demonstrations import oracle_commands, oracle_of

WEBSHOP = "envs.webshop:agentq/WebShop-v0"
TEXTCRAFT = "envs.textcraft:agentq/TextCraft-v0"


class PromptOnly:
    """What the demonstration reads of a policy: its prompt builder (it never samples)."""

    def __init__(self) -> None:
        self.prompt = PromptBuilder(env_instructions="Buy the product.")


@pytest.fixture(params=[WEBSHOP, TEXTCRAFT])
def env(request):
    made = gymnasium.make(request.param, max_steps=40)
    yield made
    made.close()


def test_recorded_commands_are_the_oracles_episode(env):
    task = env.unwrapped.task_ids("train")[0]
    result, commands = oracle_commands(env, task, 40)
    assert result.success and result.steps == len(commands) >= 2
    assert oracle_of(env)(env, task, 40) == result  # the recorder changed nothing
    env.reset(options={"task_id": task})  # and the commands replay to the same outcome
    for command in commands:
        *_, info = env.step(command)
    assert info["success"]


class CountingSteps(gymnasium.Wrapper):
    def __init__(self, env) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, action):
        self.steps += 1
        return self.env.step(action)


def test_a_backtracking_oracle_records_only_the_plan_it_ended_with():
    # TextCraft's oracle backtracks out of dead ends by restoring snapshots. Before the
    # recorder dropped what a restore undid, task 92's demonstration held 33 commands
    # for a 12-step plan and did not replay.
    env = CountingSteps(gymnasium.make(TEXTCRAFT, max_steps=40))
    backtracked = 0
    for task in env.unwrapped.task_ids("train")[:120]:
        env.steps = 0
        result, commands = oracle_commands(env, task, 40)
        if not result.success:
            continue
        assert len(commands) == result.steps
        backtracked += env.steps > len(commands)
        env.reset(options={"task_id": task})
        for command in commands:
            *_, info = env.step(command)
        assert info["success"], task
    assert backtracked >= 1  # the case this test is about occurred
    env.close()


def test_demonstration_is_the_oracles_path_with_the_policys_prompts(env):
    task = env.unwrapped.task_ids("train")[1]
    policy = PromptOnly()
    result = ScriptedDemonstration(max_depth=40, template="COMMAND: {command}\nSTATUS: {status}")(
        env, policy, task_id=task
    )
    _, commands = oracle_commands(env, task, 40)
    (trajectory,) = result.trajectories
    assert result.best is trajectory and trajectory.success and trajectory.source == SOURCE
    assert [s.command for s in trajectory.steps] == commands
    statuses = [s.action.rsplit("STATUS: ", 1)[1] for s in trajectory.steps]
    assert statuses == ["CONTINUE"] * (len(commands) - 1) + ["SUCCESS"]
    assert all(s.action.startswith(f"COMMAND: {s.command}\n") for s in trajectory.steps)
    # h_t as the policy renders it: the history of the node each step left
    path = result.tree.path(result.tree.nodes[-1])
    assert [s.prompt for s in trajectory.steps] == [policy.prompt(n.history) for n in path[:-1]]
    assert trajectory.steps[0].observation in trajectory.steps[1].prompt[-1]["content"]
    assert result.stats.policy_calls == 0 and result.stats.env_steps == len(commands)
    # RFT's builder turns it into one SFT example whose completions are the templates
    (example,) = SuccessfulTrajectories().from_search(result)
    assert [s.completion for s in example.segments] == [s.action for s in trajectory.steps]
    assert all(s.train and not s.completion_ids for s in example.segments)  # tokenized from text


def test_an_episode_the_oracle_cannot_finish_is_a_failure_not_an_example():
    # Out of steps, TextCraft's oracle undoes every recipe it tried for the goal, so the
    # plan it ends with, the demonstration, is empty.
    env = gymnasium.make(TEXTCRAFT, max_steps=40)
    task = next(t for t in env.unwrapped.task_ids("train") if oracle_commands(env, t, 40)[0].steps >= 3)
    result = ScriptedDemonstration(max_depth=2, template="{status}\nCOMMAND: {command}")(env, PromptOnly(), task_id=task)
    (trajectory,) = result.trajectories
    assert not trajectory.success and trajectory.steps == []
    assert SuccessfulTrajectories().from_search(result) == []
    env.close()


def test_planted_mistakes_are_valid_corrected_and_never_trained(env):
    tasks = env.unwrapped.task_ids("train")[:4]
    search = ScriptedDemonstration(max_depth=40, mistake_rate=0.5)
    planted = 0
    for task in tasks:
        result = search(env, PromptOnly(), task_id=task, generator=torch.Generator().manual_seed(3))
        (trajectory,) = result.trajectories
        _, oracle = oracle_commands(env, task, 40)
        assert trajectory.success
        # the oracle's commands, in order, with the mistakes between them
        assert [s.command for s in trajectory.steps if s.imitate] == oracle
        nodes = result.tree.path(result.tree.nodes[-1])
        for i, step in enumerate(trajectory.steps):
            if step.imitate:
                continue
            planted += 1
            assert step.command in nodes[i].history.valid_actions  # an action the agent could take
            assert step.command != trajectory.steps[i + 1].command  # not the correction itself
            assert step.observation in trajectory.steps[i + 1].prompt[-1]["content"]  # seen before the correction
        (example,) = SuccessfulTrajectories().from_search(result)
        assert [seg.train for seg in example.segments] == [s.imitate for s in trajectory.steps]
        saved = SearchResult.from_dict(json.loads(json.dumps(result.to_dict())))  # a resumed run's tree
        assert SuccessfulTrajectories().from_search(saved) == [example]
        again = search(env, PromptOnly(), task_id=task, generator=torch.Generator().manual_seed(3))
        assert [s.command for s in again.trajectories[0].steps] == [s.command for s in trajectory.steps]
    if env.spec.id.endswith("TextCraft-v0"):  # a failed craft leaves the state as it was
        assert planted >= 2


@pytest.mark.parametrize("rate", [-0.1, 1.0])
def test_a_mistake_rate_outside_0_1_is_refused_naming_the_key(rate):
    with pytest.raises(ValueError, match="search.mistake_rate"):
        ScriptedDemonstration(mistake_rate=rate)


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_repeat_share_outside_0_1_is_refused_naming_the_key(share):
    with pytest.raises(ValueError, match="search.mistake_repeat"):
        ScriptedDemonstration(mistake_rate=0.3, mistake_repeat=share)


def test_repeat_mistakes_repeat_the_command_before_them(env):
    search = ScriptedDemonstration(max_depth=40, mistake_rate=0.5, mistake_repeat=1.0)
    repeats = 0
    for task in env.unwrapped.task_ids("train")[:4]:
        result = search(env, PromptOnly(), task_id=task, generator=torch.Generator().manual_seed(3))
        (trajectory,) = result.trajectories
        _, oracle = oracle_commands(env, task, 40)
        assert trajectory.success and [s.command for s in trajectory.steps if s.imitate] == oracle
        steps, nodes = trajectory.steps, result.tree.path(result.tree.nodes[-1])
        for i, step in enumerate(steps):
            if step.imitate:
                continue
            # A repeat wherever one is possible: after a command that is valid again and not the correction.
            before = steps[i - 1].command if i else None
            repeatable = before in nodes[i].history.valid_actions and before != steps[i + 1].command
            assert (step.command == steps[i - 1].command) == repeatable, (task, i)
            repeats += repeatable
    if env.spec.id.endswith("TextCraft-v0"):
        assert repeats >= 2


@pytest.mark.parametrize(
    "template, message",
    [("{command}", "COMMAND: {command}"), ("COMMAND: {command} {why}", "format string"), ("COMMAND: {}", "format")],
)
def test_bad_templates_are_refused_naming_the_key(template, message):
    with pytest.raises(ValueError, match="search.template") as info:
        ScriptedDemonstration(template=template)
    assert message in str(info.value)


def test_the_oracle_is_never_evaluated_as_a_search(make_cfg):
    with pytest.raises(IncompatibleConfig, match="eval.search=false"):
        build(make_cfg("+experiment=webshop_bc", "eval.search=true"))
    build(make_cfg("+experiment=webshop_bc")).env.close()


def test_a_saved_adapter_is_the_runs_base(tmp_path, make_cfg):
    base, _ = TinyRandomModel().load()
    peft_model = get_peft_model(TinyRandomModel().load()[0], LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:  # B starts at zero: perturb so the adapter changes the weights
                param.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    peft_model.save_pretrained(tmp_path / "adapter")
    merged = peft_model.merge_and_unload().state_dict()

    loaded, _ = TinyRandomModel(adapter=str(tmp_path / "adapter")).load()
    state = loaded.state_dict()
    assert set(state) == set(base.state_dict())  # a plain model again, no LoRA modules
    assert all(torch.equal(state[k], merged[k]) for k in state)
    changed = [k for k in state if not torch.equal(state[k], base.state_dict()[k])]
    assert changed and all("q_proj" in k or "v_proj" in k for k in changed)

    with pytest.raises(ValueError, match="model.adapter"):  # refused before any weights load
        build(make_cfg("+experiment=smoke", f"model.adapter={tmp_path / 'nothing'}"))

    # A list merges in order: a trained run's pi_i, evaluated by itself (the second adapter
    # was made on the first's merge, as iteration 2 trains on pi_1).
    second = get_peft_model(TinyRandomModel(adapter=str(tmp_path / "adapter")).load()[0],
                            LoraConfig(r=2, target_modules=["v_proj", "o_proj"]))  # fmt: skip
    with torch.no_grad():
        for name, param in second.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(7 * len(name)))
    second.save_pretrained(tmp_path / "second")
    both = second.merge_and_unload().state_dict()
    chain = [str(tmp_path / "adapter"), str(tmp_path / "second")]
    state = TinyRandomModel(adapter=chain).load()[0].state_dict()
    assert all(torch.equal(state[k], both[k]) for k in state)
    assert any(not torch.equal(state[k], merged[k]) for k in state if "o_proj" in k)  # the second one counted
    cfg = make_cfg("+experiment=smoke", f"model.adapter=[{chain[0]},{chain[1]}]")
    from_cli = TinyRandomModel(adapter=cfg.model.adapter).load()[0].state_dict()  # a ListConfig
    assert all(torch.equal(from_cli[k], both[k]) for k in both)
    build(cfg).env.close()
    with pytest.raises(ValueError, match="model.adapter=.*nothing"):  # each one checked, before any weights load
        build(make_cfg("+experiment=smoke", f"model.adapter=[{chain[0]},{tmp_path / 'nothing'}]"))


def test_the_clone_study_needs_the_clones_adapter_and_keeps_its_prompt(make_cfg, tmp_path):
    with pytest.raises(Exception, match="model.adapter"):
        build(make_cfg("+experiment=webshop_mcts_dpo", "+study=webshop_clone"))
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    for experiment in ("webshop_bc", "webshop_mcts_dpo", "webshop_rft", "webshop_traj_dpo"):
        overrides = () if experiment == "webshop_bc" else ("+study=webshop_clone", f"model.adapter={tmp_path / 'adapter'}")
        cfg = make_cfg(f"+experiment={experiment}", *overrides)
        assert list(cfg.agent.prompt.examples) == []  # the clone's prompt everywhere: no few-shot turns
        build(cfg).env.close()
    # Agent-R's study from the clone: its prompt, and actions that stop at the one COMMAND line it learned.
    cfg = make_cfg("+experiment=webshop_agent_r", "+study=webshop_clone_agent_r", f"model.adapter={tmp_path / 'adapter'}")
    assert list(cfg.agent.prompt.examples) == [] and cfg.agent.sampling.max_tail_tokens == 0
    build(cfg).env.close()
    # Agent Q with search at inference from the clone: the same prompt and tail, and the search rows on.
    cfg = make_cfg("+experiment=webshop_mcts_dpo", "+study=webshop_clone_search", f"model.adapter={tmp_path / 'adapter'}")
    assert list(cfg.agent.prompt.examples) == [] and cfg.agent.sampling.max_tail_tokens == 0 and cfg.eval.search
    build(cfg).env.close()
    with pytest.raises(Exception, match="model.adapter"):
        build(make_cfg("+experiment=webshop_mcts_dpo", "+study=webshop_clone_search"))
    # Three iterations from the clone: the same prompt and tail, concurrent searches on the shared-step engine.
    cfg = make_cfg("+experiment=webshop_mcts_dpo", "+study=webshop_clone_iter", f"model.adapter={tmp_path / 'adapter'}")
    assert list(cfg.agent.prompt.examples) == [] and cfg.agent.sampling.max_tail_tokens == 0
    assert cfg.iterations == 3 and cfg.engine._target_.endswith("BatchedHFEngine") and cfg.collect.concurrency > 1
    assert cfg.objective._target_.endswith("IPOLoss") and cfg.pairs.min_visits == 1  # what dev chose (NOTES.md)
    build(cfg).env.close()
    with pytest.raises(Exception, match="model.adapter"):
        build(make_cfg("+experiment=webshop_mcts_dpo", "+study=webshop_clone_iter"))
