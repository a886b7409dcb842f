"""A run shorter than its algorithm's warm-up: said before training (the one definition of the check).

Off-policy algorithms take ``learning_starts`` env steps of random actions, and need ``batch_size`` transitions,
before their first update: a shorter run trains nothing. Algorithms that learn from rollouts (PPO, A2C, IMPALA, PQN)
always take a whole rollout of ``num_envs * num_steps`` steps: a shorter run takes the whole rollout anyway.
``rapidrl train`` refuses the first and warns of the second; ``learn`` of an off-policy algorithm warns of the first.
"""

from __future__ import annotations

__all__ = ["short_run"]


def short_run(algo, timesteps: int) -> tuple[str, bool] | None:
    """(message, trains_nothing) when ``timesteps`` env steps are shorter than ``algo``'s warm-up or one rollout,
    naming the setting to change; None when the run is long enough. Offline algorithms train from their first step
    (their ``learning_starts`` counts online steps after the switch): None."""
    c, name = algo.config, algo.name.upper()
    if hasattr(c, "offline_steps"):
        return None
    starts, batch = getattr(c, "learning_starts", None), getattr(c, "batch_size", None)
    if starts is not None and batch is not None:
        first = max(int(starts), int(batch))
        if timesteps < first:
            setting = "learning_starts" if starts >= batch else "batch_size"
            return (f"{timesteps:,} steps is shorter than {name}'s warm-up: its first update comes after "
                    f"algo.{setting} = {first:,} env steps, so nothing would be trained; train for more steps "
                    f"(--timesteps {first:,} or more) or lower it (--set algo.{setting}=...)", True)
        return None
    steps, envs = getattr(c, "num_steps", None), getattr(c, "num_envs", None)
    if steps and envs and timesteps < steps * envs:
        return (f"{timesteps:,} steps is shorter than one {name} rollout (algo.num_envs {envs} x algo.num_steps "
                f"{steps} = {steps * envs:,} steps): the run takes the whole rollout, {steps * envs:,} steps; lower "
                "algo.num_steps or algo.num_envs for a shorter run", False)
    return None
