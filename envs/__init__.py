"""Environments, one package each, registered with Gymnasium on import."""

import gymnasium


def register(env_id: str, entry_point: str) -> None:
    """Register ``env_id`` once; importing twice (a notebook reload) must not
    re-register, since gymnasium warns on overriding an id. The envs count their
    own steps (part of their snapshots), so no TimeLimit wrapper is added."""
    if env_id not in gymnasium.registry:
        gymnasium.register(id=env_id, entry_point=entry_point, max_episode_steps=None)
