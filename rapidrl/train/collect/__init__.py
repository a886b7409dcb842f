"""Rollout collection of the on-policy algorithms: one module per collector, and the one place that picks among them.

The ``collection`` setting names the collector (``choose_collection``: "auto" takes the first that applies, in this
order; ``model.paths["collection"]`` says which runs and why); ``make_collector`` builds it:

- ``fused`` (``rapidrl.train.collect.fused``): one compiled call collects the whole T x N rollout, the MLP policy's
  forward and the env's step inside the loop (an env written as Numba functions, separate MLP actor and critic,
  CPU);
- ``step`` (``rapidrl.train.collect.step``): the PyTorch policy and any rapidrl vector env, one batched step at a
  time; a recurrent policy collects here with ``rapidrl.train.collect.recurrent``, which carries its state;
- ``device`` (``rapidrl.train.collect.device``): a ``TorchVecEnv``, the policy and the storage on the env's device,
  GAE there too.

``async_collect`` runs a fused or step collector in a thread with a behaviour copy of the policy while the learner
trains (``rapidrl.train.collect.threaded``; recorded as ``model.paths["async_collect"]``).

The host collectors (fused, step, recurrent) share one interface, which the threaded collector drives too:

- ``collect(buffer, obs, raw_obs, obs_normalizer, seed) -> (episode_returns, episode_lengths)``: fill ``buffer`` (a
  ``RolloutBuffer`` [T, N]) from the raw observations ``obs`` [N, *obs_shape] (advanced in place to those after the
  last step), writing the raw observations of every step into ``raw_obs`` [T, N, *obs_shape] and storing them
  normalized by ``obs_normalizer`` (an ``ObsNormalizer`` or None) with its statistics frozen for the rollout;
  returns the returns and lengths of the episodes that ended. ``seed``: a seed for the rollout's random draws when
  the collector's ``seeded`` is True (the learner draws one per rollout), else None;
- ``value(obs) -> values [N]`` of the observations after the rollout (its GAE bootstrap; the recurrent collector
  values them with the state it carries).

PQN's epsilon-greedy collectors (``rapidrl.train.collect.fused_q``, and ``StepCollector`` with an epsilon-greedy
actor) live here too; PQN picks between them itself (``rapidrl.algos.pqn``).
"""

from __future__ import annotations

import torch

from rapidrl.train.config import ConfigError
from rapidrl.train.paths import PathChoice, choose

__all__ = ["COLLECTIONS", "choose_collection", "make_collector"]

COLLECTIONS = ("auto", "device", "fused", "step")


def choose_collection(requested: str, env, policy, device: torch.device, *, env_device: str = "cpu",
                      device_unsupported: tuple[str, ...] = ()) -> PathChoice:
    """``paths["collection"]`` for ``requested`` ("auto", "fused", "step" or "device"; ``rapidrl.train.paths.choose``)
    with ``policy`` on ``device`` and ``env``.

    env_device: the config's (anything but "cpu" means a ``TorchVecEnv``). device_unsupported: the settings in use
    that the device path cannot run (it normalises nothing and runs no thread or V-trace), named in its reason."""
    from rapidrl.envs import TorchVecEnv
    from rapidrl.train.collect.fused import fused_unavailable

    on_device = isinstance(env, TorchVecEnv) or env_device != "cpu"

    def device_path() -> str | None:
        if not on_device:
            return "needs a TorchVecEnv (env_device='cuda', or make_vec(..., vectorization='torch'))"
        if device_unsupported:
            return f"supports none of {', '.join(device_unsupported)}"
        if policy.recurrent:
            return "recurrent policies collect on the host (recurrent='none')"
        return None

    def step() -> str | None:
        return "a TorchVecEnv returns device tensors (collection='device')" if on_device else None

    return choose("collection", requested, {"fused": lambda: fused_unavailable(env, policy, device), "step": step,
                                            "device": device_path})  # a TorchVecEnv fits only the last


def make_collector(collection: str, env, policy, num_steps: int, device: torch.device, timer=None, *,
                   cuda_graph: bool = False, generator: torch.Generator | None = None, threads: int = 1):
    """The collector of the resolved ``collection`` for ``policy`` on ``env``: a ``FusedCollector``, a
    ``StepCollector`` (a ``RecurrentStepCollector`` for a recurrent policy) or a ``DeviceCollector``; ``timer``: the
    model's ``PhaseTimer`` (its collection phases). cuda_graph: the device path's CUDA graph replay. generator: the
    torch generator the step and device collectors sample from (the model's ``torch_rng``; None: one of the
    collector's own, reseeded per rollout; the fused collector draws from Numba's generator, seeded per rollout).
    threads: the fused collector's threads (``FusedCollector``; the other collectors take 1)."""
    from rapidrl.train.collect.device import DeviceCollector
    from rapidrl.train.collect.fused import FusedCollector
    from rapidrl.train.collect.recurrent import RecurrentStepCollector
    from rapidrl.train.collect.step import StepCollector

    if cuda_graph and collection != "device":
        raise ConfigError("cuda_graph=True applies to the device path (collection='device')")
    if threads != 1 and collection != "fused":
        raise ConfigError(f"threads={threads} applies to the fused collector (collection='fused')")
    if collection == "device":
        return DeviceCollector(env, policy, num_steps, cuda_graph=cuda_graph, generator=generator)
    if collection == "fused":
        return FusedCollector(env, policy, num_steps, timer, threads)
    cls = RecurrentStepCollector if policy.recurrent else StepCollector
    return cls(env, policy, num_steps, device, timer, generator)
