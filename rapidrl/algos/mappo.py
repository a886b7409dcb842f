"""Multi-agent PPO: MAPPO (centralized critic on the global state) and IPPO (independent critics), on PPO.

Both run PPO unchanged (``rapidrl.algos.ppo``: the same loss, GAE, update loop, gradient backends and
collectors) on a multi-agent vector env (``rapidrl.envs.multiagent``: agents of E copies as rows ``[local obs |
agent one-hot | global state]``). What differs is only which columns each network reads
(``MultiAgentActorCritic.input_columns``, which the compiled update gathers too). Rows of agents that left
mid-episode are kept out of the loss by the rollout's loss masks (``RolloutBuffer.active``, from the env's
``info["active"]``), as for PPO and A2C on the same envs:

- parameter sharing: one actor for all agents, reading ``[local obs | agent one-hot]``;
- IPPO: the critic reads the same columns as the actor (each agent's own observation and id);
- MAPPO: the critic reads ``[agent one-hot | global state]``.

Action masks (docs/masks.md): a PettingZoo env whose observations carry ``action_mask`` (the classic envs) gives
each row's valid actions; collection, the update and ``evaluate`` act on them as PPO does.

``num_envs`` counts rows (E copies x N agents; it must be a multiple of N). Logged per update: PPO's metrics
(``charts/episodic_return`` is then the mean per-agent return), plus ``charts/team_return`` (sum of the agents'
returns in a copy) and ``charts/agent_<i>_return``.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from rapidrl.algos.ppo import PPO, PPOConfig
from rapidrl.algos.registry import register
from rapidrl.envs.core.base import current_action_masks
from rapidrl.envs.multiagent import MultiAgentVecEnvBase
from rapidrl.nn.policies import ActorCritic, mlp
from rapidrl.train.config import require, with_defaults
from rapidrl.train.evaluation import check_n_episodes


class MultiAgentActorCritic(ActorCritic):
    """``ActorCritic`` whose actor reads columns ``[0, actor_dim)`` of the row and critic ``[critic_start, end)``.

    Args (besides ActorCritic's): observation_space: the row space Box([W]); actor_dim: O + N; critic_start:
    0 with critic_dim = actor_dim (IPPO) or O (MAPPO: one-hot + global state, to the row's end).
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, hidden=(64, 64), *, actor_dim: int,
                 critic_start: int, critic_dim: int, shared: bool = False, activation: str = "tanh",
                 log_std_init: float = 0.0, squash: str = "clip", encoder: str = "auto"):
        if shared or encoder not in ("auto", "mlp"):
            raise ValueError("multi-agent PPO uses separate MLP actor and critic (shared=False, encoder='mlp')")
        width = int(observation_space.shape[0])
        if not (0 < actor_dim <= width and 0 <= critic_start and critic_start + critic_dim <= width):
            raise ValueError(f"column ranges actor [0, {actor_dim}) / critic [{critic_start}, "
                             f"{critic_start + critic_dim}) do not fit rows of width {width}")
        super().__init__(gym.spaces.Box(-np.inf, np.inf, (actor_dim,), np.float32), action_space, hidden,
                         activation=activation, log_std_init=log_std_init, squash=squash, encoder="mlp")
        self.critic = mlp(critic_dim, hidden, 1, activation, out_gain=1.0)
        self.obs_dim, self.actor_dim = width, int(actor_dim)
        self.critic_start, self.critic_dim = int(critic_start), int(critic_dim)

    def input_columns(self) -> tuple[tuple[int, int], tuple[int, int]]:
        return (0, self.actor_dim), (self.critic_start, self.critic_start + self.critic_dim)

    def critic_input(self, obs: torch.Tensor) -> torch.Tensor:
        """The columns the critic reads: obs [B, W] -> [B, critic_dim]."""
        return obs[:, self.critic_start:self.critic_start + self.critic_dim]

    def _heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor(obs[:, :self.actor_dim]).float(), self.critic(self.critic_input(obs)).squeeze(-1).float()

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.critic_input(obs)).squeeze(-1).float()


@dataclass
@with_defaults(num_steps=25, minibatch_size=600, update_epochs=5, learning_rate=7e-4, ent_coef=0.01)
class MAPPOConfig(PPOConfig):
    num_envs: int = 96
    """Agent rows: env copies x agents (a multiple of the env's agent count)."""
    centralized_critic: bool = True
    """The critic reads the global state + agent one-hot (MAPPO); False: the agent's own observation (IPPO)."""

    def validate(self) -> None:
        super().validate()
        require(not self.async_collect and not self.vtrace_advantages and not self.shared,
                "multi-agent PPO supports neither async_collect, vtrace_advantages nor shared=True")


@dataclass
class IPPOConfig(MAPPOConfig):
    centralized_critic: bool = False


@register
class MAPPO(PPO):
    """MAPPO: ``MAPPO("MPE/simple_spread-v3", **hyperparameters)`` or ``MAPPO(multi_agent_vec_env, ...)``."""

    name = "mappo"
    config_class = MAPPOConfig
    supports_distributed = False
    supports_recurrent = False

    def __init__(self, env, config=None, *, env_kwargs: dict | None = None, **hyperparameters):
        if isinstance(env, str):
            env = self._make_multi_agent_env(env, config, env_kwargs or {}, hyperparameters)
        if not isinstance(env, MultiAgentVecEnvBase):
            raise TypeError(f"{type(self).__name__} needs a multi-agent env: a built-in id such as "
                            f"'MPE/simple_spread-v3' or a rapidrl.envs.multiagent vector env "
                            f"(e.g. PettingZooVecEnv), got {type(env).__name__}")
        if hyperparameters.get("num_envs") is None and config is None:
            hyperparameters["num_envs"] = env.num_envs
        super().__init__(env, config, env_kwargs=env_kwargs, **hyperparameters)

    def _make_multi_agent_env(self, env_id: str, config, env_kwargs: dict, hyperparameters: dict):
        from rapidrl.envs import make_vec

        c = config if config is not None else self.config_class(**{k: v for k, v in hyperparameters.items()
                                                                      if k in ("num_envs", "seed")})
        n = int(env_kwargs.get("N", 3))
        if c.num_envs % n:
            raise ValueError(f"num_envs={c.num_envs} counts agent rows and must be a multiple of the {n} agents")
        return make_vec(env_id, c.num_envs // n, seed=c.seed, **env_kwargs)

    def _policy_class(self):
        env = self.env
        if self.config.centralized_critic:
            start, dim = env.local_obs_dim, env.num_agents + env.state_dim
        else:
            start, dim = 0, env.policy_input_dim

        def build(*args, **kwargs):
            return MultiAgentActorCritic(*args, actor_dim=env.policy_input_dim, critic_start=start, critic_dim=dim,
                                         **kwargs)

        return build

    def evaluate(self, n_episodes: int = 10, deterministic: bool = True, progress: bool = False
                 ) -> tuple[float, float]:
        """Mean and std of the team return (sum of the agents' returns) of ``n_episodes`` episodes, one per env
        copy of a separate eval env (each copy's first episode only). ``progress`` is accepted for the common
        signature and shows nothing (multi-agent episodes are short)."""
        check_n_episodes(n_episodes)
        env = self._eval_env
        if env is None or getattr(env, "num_copies", None) != n_episodes:
            if self.env_id is None:
                raise ValueError("evaluate() needs eval_env=... (a multi-agent env with n_episodes copies) when the "
                                 "model was built from an env without an id")
            from rapidrl.envs import make_vec

            env = self._eval_env = make_vec(self.env_id, n_episodes, **self.env_kwargs)
        obs, seed = self._reset_for_evaluation(env)
        returns = np.zeros(n_episodes)
        finished = np.zeros(n_episodes, dtype=bool)
        with self._process_settings(), self._evaluation_rngs(seed, deterministic):
            while not finished.all():
                masks = current_action_masks(env)  # PettingZoo's observation masks: act on the valid actions
                obs, _, _, _, info = env.step(self._policy_actions(np.asarray(obs), deterministic, masks))
                returns += np.where(finished, 0.0, info["team_reward"])
                finished |= info["_team_episode"]
        return float(returns.mean()), float(returns.std())

    def _collect(self) -> None:
        """PPO's collection (the env's ``info["active"]`` loss masks go into the rollout), then team statistics."""
        super()._collect()
        team, agents = self.env.pop_finished()
        if len(team):
            record = {"charts/team_return": float(team.mean())}
            with np.errstate(all="ignore"):
                means = np.nanmean(agents, axis=0) if np.isfinite(agents).any() else agents[0]
            for i, name in enumerate(self.env.agent_names):
                if np.isfinite(means[i]):
                    record[f"charts/{name}_return"] = float(means[i])
            self.record(record)


@register
class IPPO(MAPPO):
    """IPPO: each agent's critic sees its own observation and id (parameters shared across agents)."""

    name = "ippo"
    config_class = IPPOConfig
