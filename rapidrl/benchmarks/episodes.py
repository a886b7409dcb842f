"""Evaluation episodes on a Gymnasium env, shared by the benchmarks and by peers' jobs in their own virtual
environments (this module imports only Gymnasium, and that lazily)."""

from __future__ import annotations


def gym_returns(act, env_id: str, episodes: int, seed: int) -> list[float]:
    """The returns of ``episodes`` episodes of ``gym.make(env_id)`` acting with ``act(obs) -> action``; episode k
    starts from ``reset(seed=seed + k)``."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=seed + k)
            done, total = False, 0.0
            while not done:
                obs, reward, terminated, truncated, _ = env.step(act(obs))
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return returns
