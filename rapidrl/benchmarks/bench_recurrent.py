"""Recurrent PPO end to end on CartPoleNoVel-v1: rapidrl against sb3-contrib's RecurrentPPO.

Both train the same network at the same settings, each run in its own fresh process at each torch thread count
(``rapidrl.benchmarks.isolated``), contenders and seeds interleaved:

- the network of ``configs/ppo_cartpolenovel.toml``, translated to sb3-contrib's policy: the encoder MLP
  (``hidden``; sb3-contrib: a features extractor of those layers, none when empty), the LSTM of
  ``recurrent_size`` units, the critic's own LSTM (``critic_recurrent``; ``enable_critic_lstm``, else one LSTM
  shared by both heads), the heads' MLPs (``head_hidden``; ``net_arch=dict(pi=..., vf=...)``), the activation and
  ``ortho_init``;
- observations and rewards normalized as the preset says (rapidrl's ``normalize_obs``/``normalize_reward``; SB3's
  VecNormalize), value clipping as ``clip_vloss`` (SB3's ``clip_range_vf``);
- the preset's hyperparameters (rl-zoo3's RecurrentPPO CartPoleNoVel-v1 setting: 8 envs x 32 steps, 20 epochs of
  one 256-step minibatch, gamma 0.98, lambda 0.8, lr 1e-3 and clip 0.2 both decaying linearly, no entropy bonus).

Each run reports training SPS (warm-up timed apart) and the mean return of 20 deterministic episodes on
Gymnasium's ``CartPoleNoVel-v1`` (registered by rapidrl) with the library's own ``predict``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from rapidrl.benchmarks.harness import Case, Context
from rapidrl.benchmarks.isolated import timed_learn, warm_then_run

ENV_ID = "CartPoleNoVel-v1"
EVAL_EPISODES = 20


def cases(ctx: Context) -> Iterator[Case]:
    return iter(())


def _preset() -> dict:
    from rapidrl.runs.config import preset_path, read_toml

    return read_toml(preset_path("ppo", ENV_ID))["algo"]


def _eval_gym(act) -> float:
    """Mean return of EVAL_EPISODES Gymnasium episodes; ``act(obs [2], state, start) -> (action, state)``."""
    import gymnasium as gym

    import rapidrl  # noqa: F401  (registers CartPoleNoVel-v1)

    env = gym.make(ENV_ID)
    returns = []
    for k in range(EVAL_EPISODES):
        obs, _ = env.reset(seed=10_000 + k)
        state, start, total, done = None, True, 0.0, False
        while not done:
            action, state = act(obs, state, start)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total, start, done = total + reward, False, terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def _rapidrl(steps: int, seed: int):
    import torch

    import rapidrl as rr

    model = rr.PPO(ENV_ID, seed=seed, torch_threads=torch.get_num_threads(), **_preset())
    wall, phases = timed_learn(model, steps)

    def act(obs, state, start):
        actions, state = model.predict(obs[None], state, np.array([start]), deterministic=True)
        return actions[0], state

    return wall, phases, act


def _sb3_contrib(steps: int, seed: int):
    import gymnasium as gym
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from stable_baselines3.common.vec_env import VecNormalize

    import rapidrl  # noqa: F401  (registers CartPoleNoVel-v1)
    from rapidrl.algos.ppo import PPOConfig

    p = PPOConfig(**_preset())  # the preset over PPO's defaults

    act = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[p.activation]

    class Encoder(BaseFeaturesExtractor):  # rapidrl's encoder MLP before the LSTM (``hidden``)
        def __init__(self, space: gym.spaces.Box):
            super().__init__(space, features_dim=p.hidden[-1])
            layers, d = [], space.shape[0]
            for h in p.hidden:
                layers += [torch.nn.Linear(d, h), act()]
                d = h
            self.net = torch.nn.Sequential(*layers)

        def forward(self, obs):
            return self.net(obs)

    lr, clip = p.learning_rate, p.clip_coef
    policy_kwargs = {"lstm_hidden_size": p.recurrent_size, "shared_lstm": not p.critic_recurrent,
                     "enable_critic_lstm": p.critic_recurrent, "activation_fn": act, "ortho_init": p.ortho_init,
                     "net_arch": dict(pi=list(p.head_hidden), vf=list(p.head_hidden))}
    if p.hidden:
        policy_kwargs["features_extractor_class"] = Encoder
    env = make_vec_env(lambda: gym.make(ENV_ID), n_envs=p.num_envs, seed=seed)
    env = VecNormalize(env, norm_obs=p.normalize_obs, norm_reward=p.normalize_reward, gamma=p.gamma)
    model = RecurrentPPO("MlpLstmPolicy", env, n_steps=p.num_steps, batch_size=p.minibatch_size,
                         n_epochs=p.update_epochs, gamma=p.gamma, gae_lambda=p.gae_lambda,
                         learning_rate=lambda f: lr * f, clip_range=lambda f: clip * f, ent_coef=p.ent_coef,
                         clip_range_vf=(lambda f: clip * f) if p.clip_vloss else None,
                         max_grad_norm=p.max_grad_norm, vf_coef=p.vf_coef, seed=seed, device="cpu", verbose=0,
                         policy_kwargs=policy_kwargs)
    t0 = time.perf_counter()
    model.learn(steps)
    wall = time.perf_counter() - t0
    env.close()

    def act(obs, state, start):
        action, state = model.predict(env.normalize_obs(obs), state=state, episode_start=np.array([start]),
                                      deterministic=True)
        return action, state

    return wall, {}, act


def job_recurrent_ppo(lib: str, steps: int, seed: int) -> dict:
    """One contender's run in its own process: a one-rollout warm-up (timed apart), ``steps`` env steps, eval."""
    run = {"rapidrl": _rapidrl, "sb3_contrib": _sb3_contrib}.get(lib)
    if run is None:
        raise ValueError(f"unknown contender {lib!r}")
    p = _preset()
    warmup, (wall, phases, act) = warm_then_run(run, p["num_envs"] * p["num_steps"], steps, seed)
    return {"sps": steps / wall, "wall_s": wall, "warmup_s": warmup, "phases": phases, "eval": _eval_gym(act)}


def extras(ctx: Context):
    """rapidrl's recurrent PPO vs sb3-contrib's RecurrentPPO, same network and preset, own processes."""
    from rapidrl.benchmarks.isolated import interleaved, run_isolated, sps_rows, thread_counts

    steps = 10_240 if ctx.quick else 100_000
    seeds = [0] if ctx.quick else [0, 1, 2]
    libs = ["rapidrl"]
    try:
        import sb3_contrib  # noqa: F401

        libs.append("sb3_contrib")
    except ImportError:
        print("sb3_contrib is not installed: pip install sb3-contrib (skipped)")
    target = f"{__name__}:job_recurrent_ppo"
    jobs = {lib: (lambda seed, t, lib=lib: run_isolated(target, {"lib": lib, "steps": steps, "seed": seed},
                                                         torch_threads=t)) for lib in libs}
    results = interleaved(jobs, seeds, thread_counts())
    case = f"recurrent PPO {ENV_ID} {steps} steps (LSTM 64, preset ppo_cartpolenovel), seeds {seeds}"
    evals = {f"eval ({EVAL_EPISODES} episodes) per seed": lambda runs: " / ".join(f"{r['eval']:.0f}" for r in runs)}
    return "Recurrent PPO end to end (each run in its own process; threads, seeds and contenders interleaved)", \
        sps_rows(case, results, evals)
