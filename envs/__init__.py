"""Environments, one package each, registered with Gymnasium on import.

What agentq needs from an env (task splits, the ``reset`` options, the
``info`` keys, ``forkable``, optional snapshots) is declared once in
:mod:`envs.contract` (:class:`~envs.contract.AgentEnv`, checked by
:func:`~envs.contract.check_contract`).

Each package also has a scripted oracle, ``envs.<name>.oracle.play(env,
task_id, max_steps) -> OracleResult``: it plays one task in a Gymnasium env
made from the config, within ``max_steps`` steps, using what the agent sees
(plus the task's own statement of the goal). :mod:`agentq.oracle` turns it
into the oracle row of every evaluation.
"""

import gymnasium

from envs.contract import AgentEnv, OracleResult, check_contract, choose_task, task_index


def register(env_id: str, entry_point: str) -> None:
    """Register ``env_id`` once; importing twice (a notebook reload) must not
    re-register, since gymnasium warns on overriding an id. The envs count their
    own steps (part of their snapshots), so no TimeLimit wrapper is added."""
    if env_id not in gymnasium.registry:
        gymnasium.register(id=env_id, entry_point=entry_point, max_episode_steps=None)


__all__ = ["AgentEnv", "OracleResult", "check_contract", "choose_task", "register", "task_index"]
