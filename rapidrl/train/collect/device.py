"""GPU-resident rollouts: a ``TorchVecEnv``, the policy and the ``RolloutBuffer`` all on one device.

Every step is a fixed sequence of tensor ops on the device: policy ``act``, env ``step`` (auto-reset by
``torch.where``), the value of every final observation (used where an episode was truncated; computing it
for all envs avoids a data-dependent branch), writes into the buffer's tensors at step ``t``, and running
sums of finished episodes (count, return, length). Nothing comes back to the host: the learner computes GAE
with ``gae_torch`` on the same tensors and reads the episode sums (three scalars) at each report
(``log_every_steps``) with ``pop_episode_stats``.

On CUDA, ``cuda_graph=True`` records the whole T-step rollout once as a CUDA graph and replays it (one
launch instead of thousands of small kernels). It requires an env built with ``validate_actions=False``
(the action check reads a value back, which a graph cannot capture) and the "same_step" auto-reset mode.
The graph reads the policy's parameters in place, so optimizer steps are seen without re-capture.
(Written against the CUDA graph API; not run on a GPU here.)
"""

from __future__ import annotations

import gymnasium as gym
import torch

from rapidrl.train.config import ConfigError

__all__ = ["DeviceCollector"]


class DeviceCollector:
    """Collects rollouts of ``policy`` on a ``TorchVecEnv`` into a RolloutBuffer on the env's device.

    Args:
        env: a ``rapidrl.envs.TorchVecEnv`` in "same_step" auto-reset mode.
        policy: an ``ActorCritic`` on ``env.device``.
        num_steps: T, steps per env per rollout.
        cuda_graph: replay the rollout as a captured CUDA graph (CUDA devices only).
        generator: the torch generator on the env's device that the policy samples from (the model's
            ``torch_rng``; a captured graph registers it, so every replay advances it); None: torch's default one.
    After ``reset`` and ``collect``: ``obs`` [N, O] holds the current observations and ``last_values`` [N]
    their values (the GAE bootstrap), both on the device.
    """

    def __init__(self, env, policy, num_steps: int, *, cuda_graph: bool = False,
                 generator: torch.Generator | None = None):
        from rapidrl.envs import TorchVecEnv

        if not isinstance(env, TorchVecEnv):
            raise ConfigError(f"the device path needs a TorchVecEnv, got {type(env).__name__} "
                              "(make it with rapidrl.make_vec(..., device=..., vectorization='torch'))")
        if env.autoreset_mode != gym.vector.AutoresetMode.SAME_STEP:
            raise ConfigError("the device path needs a TorchVecEnv with autoreset_mode='same_step'")
        device = next(policy.parameters()).device
        if device != env.device:
            raise ConfigError(f"the policy is on {device} and the env on {env.device}: set device to the env's device")
        if cuda_graph and device.type != "cuda":
            raise ConfigError(f"cuda_graph=True needs a CUDA device, got {device}")
        if cuda_graph and env.validate_actions:
            raise ConfigError("cuda_graph=True needs an env made with rr.make_vec(..., validate_actions=False)")
        self.env, self.policy, self.num_steps, self.device = env, policy, num_steps, device
        self.generator = generator
        n = env.num_envs
        self.obs = torch.zeros((n, *env.single_observation_space.shape), dtype=torch.float32, device=device)
        self.last_values = torch.zeros(n, dtype=torch.float32, device=device)
        self.episode_sums = torch.zeros(3, dtype=torch.float64, device=device)  # count, sum return, sum length
        self.cuda_graph = cuda_graph
        self._graph: torch.cuda.CUDAGraph | None = None
        self._graph_buffer = None
        self._rollouts = 0

    def reset(self, seed: int | None) -> None:
        obs, _ = self.env.reset(seed=seed)
        self.obs.copy_(obs)

    def collect(self, buffer) -> None:
        """Fill ``buffer`` (on the env's device) with one rollout; advantages are left to the caller."""
        if buffer.device != self.device:
            raise ValueError(f"the buffer is on {buffer.device}, the env on {self.device}")
        if self.cuda_graph and self._rollouts > 0:  # the first rollout runs eagerly: it warms up the kernels
            if self._graph is None or self._graph_buffer is not buffer:
                self._capture(buffer)
            self._graph.replay()
        else:
            self._rollout(buffer)
        buffer.mark_full()
        self._rollouts += 1

    @torch.no_grad()
    def _rollout(self, buffer) -> None:
        b, policy, sums = buffer.tensors, self.policy, self.episode_sums
        for t in range(self.num_steps):
            raw, logp, values = policy.act(self.obs, generator=self.generator)
            next_obs, rewards, terminated, truncated, info = self.env.step(policy.to_env_action(raw))
            final_values = policy.value(info["final_obs"]).masked_fill_(~(truncated & ~terminated), 0.0)  # [N]
            b.obs[t].copy_(self.obs)
            b.actions[t].copy_(raw)
            b.log_probs[t].copy_(logp)
            b.values[t].copy_(values)
            b.rewards[t].copy_(rewards)
            b.terminated[t].copy_(terminated)
            b.truncated[t].copy_(truncated)
            b.final_values[t].copy_(final_values)
            done = info["_episode"]
            sums.add_(torch.stack([done.sum().double(), info["episode"]["r"].sum().double(),
                                   info["episode"]["l"].sum().double()]))
            self.obs.copy_(next_obs)
        self.last_values.copy_(policy.value(self.obs))

    def _capture(self, buffer) -> None:
        """Record ``_rollout`` into a CUDA graph (kernels are recorded, not run, during capture)."""
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(self.env.generator)  # the env's reset generator advances on every replay
        if self.generator is not None:  # and so does the policy's sampling generator
            graph.register_generator_state(self.generator)
        with torch.cuda.graph(graph):  # captures on its own side stream
            self._rollout(buffer)
        self._graph, self._graph_buffer = graph, buffer

    def pop_episode_stats(self) -> tuple[int, float, float]:
        """(episodes finished, their mean return, mean length) since the last call; one host read."""
        count, ret, length = self.episode_sums.tolist()
        self.episode_sums.zero_()
        if count == 0:
            return 0, 0.0, 0.0
        return int(count), ret / count, length / count
