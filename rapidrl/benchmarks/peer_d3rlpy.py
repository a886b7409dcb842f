"""d3rlpy's side of ``rapidrl bench offline``: one job, run in d3rlpy's own virtual environment.

d3rlpy 2.8 pins gymnasium 1.0, so it cannot share rapidrl's venv; this module imports only NumPy, Gymnasium, torch
and d3rlpy (``import rapidrl.benchmarks...`` is lazy and pulls nothing else), so ``rapidrl.benchmarks.isolated``
runs it with d3rlpy's interpreter (``run_isolated(..., python=D3RLPY_PYTHON, checkout=...)``).

The dataset arrives as the arrays rapidrl trained on (an ``.npz`` of D4RL's layout: observations, actions, rewards,
terminals, timeouts per transition, episodes contiguous); the settings are rapidrl's preset of the same algorithm
translated to d3rlpy's config (the table in ``bench_offline.SETTINGS``).
"""

from __future__ import annotations

import time


def _config(d3rlpy, algo: str, settings: dict):
    """The d3rlpy config of ``algo`` with rapidrl's settings (network sizes, batch, learning rates, the losses'
    constants, observation and reward scaling)."""
    hidden = list(settings["hidden"])
    enc = d3rlpy.models.VectorEncoderFactory(hidden_units=hidden)
    common = dict(batch_size=settings["batch_size"],
                  observation_scaler=d3rlpy.preprocessing.StandardObservationScaler())
    if settings.get("normalize_reward"):
        common["reward_scaler"] = d3rlpy.preprocessing.ReturnBasedRewardScaler(multiplier=1000.0)
    if algo == "bc":
        return d3rlpy.algos.BCConfig(learning_rate=settings["learning_rate"], encoder_factory=enc,
                                     policy_type="deterministic", **common)
    if algo == "td3_bc":
        return d3rlpy.algos.TD3PlusBCConfig(
            actor_learning_rate=settings["learning_rate"], critic_learning_rate=settings["learning_rate"],
            actor_encoder_factory=enc, critic_encoder_factory=enc, gamma=settings["gamma"], tau=settings["tau"],
            alpha=settings["q_weight"], target_smoothing_sigma=0.2, target_smoothing_clip=0.5, update_actor_interval=2,
            **common)
    if algo == "iql":
        schedule = {}
        if settings.get("actor_lr_schedule") == "cosine":  # CORL's CosineAnnealingLR over the run
            schedule["actor_optim_factory"] = d3rlpy.optimizers.AdamFactory(
                lr_scheduler_factory=d3rlpy.optimizers.CosineAnnealingLRFactory(T_max=settings["schedule_steps"]))
        return d3rlpy.algos.IQLConfig(
            **schedule, actor_learning_rate=settings["learning_rate"], critic_learning_rate=settings["learning_rate"],
            actor_encoder_factory=enc, critic_encoder_factory=enc, value_encoder_factory=enc, gamma=settings["gamma"],
            tau=settings["tau"], expectile=settings["expectile"], weight_temp=settings["beta"], max_weight=100.0,
            **common)
    if algo == "cql":  # alpha_learning_rate 0: a fixed conservative weight, as CORL's cql_lagrange=False
        return d3rlpy.algos.CQLConfig(
            actor_learning_rate=settings["actor_learning_rate"], critic_learning_rate=settings["learning_rate"],
            temp_learning_rate=settings["actor_learning_rate"], alpha_learning_rate=0.0, initial_alpha=1.0,
            conservative_weight=settings["conservative_weight"], n_action_samples=settings["cql_n_actions"],
            actor_encoder_factory=enc, critic_encoder_factory=enc, gamma=settings["gamma"], tau=settings["tau"],
            **common)
    raise ValueError(f"no d3rlpy counterpart for {algo!r}")


def _evaluate(algo, env_id: str, episodes: int, seed: int) -> list[float]:
    import numpy as np

    from rapidrl.benchmarks.episodes import gym_returns

    return gym_returns(lambda obs: algo.predict(np.asarray(obs, np.float32)[None])[0], env_id, episodes, seed)


def job_d3rlpy(algo: str, data: str, settings: dict, steps: int, seed: int, warmup: int = 0,
               eval_every: int = 0, eval_episodes: int = 10, env_id: str = "", eval_seed: int = 10_000) -> dict:
    """Train d3rlpy's ``algo`` for ``steps`` gradient steps on the arrays in ``data`` (``.npz``) and time it.

    warmup: gradient steps of a first, untimed ``fit`` (reported apart as ``warmup_s``). eval_every: evaluate the
    deterministic policy for ``eval_episodes`` episodes of ``env_id`` every this many steps (their time is not
    counted in ``sps``). Returns {"sps", "wall_s", "warmup_s", "curve": [(step, mean return)], "version"}.
    """
    import d3rlpy
    import numpy as np

    arrays = np.load(data)
    d3rlpy.seed(seed)
    dataset = d3rlpy.dataset.MDPDataset(arrays["observations"], arrays["actions"], arrays["rewards"],
                                        arrays["terminals"], arrays["timeouts"])
    model = _config(d3rlpy, algo, settings).create(device="cpu:0")
    fit = dict(logger_adapter=d3rlpy.logging.NoopAdapterFactory(), show_progress=False, save_interval=10 ** 9)
    warmup_s = 0.0
    if warmup:
        t0 = time.perf_counter()
        model.fit(dataset, n_steps=warmup, n_steps_per_epoch=warmup, **fit)
        warmup_s = time.perf_counter() - t0
    curve, eval_s = [], [0.0]

    def evaluate(algo_, epoch: int, total_step: int) -> None:
        t0 = time.perf_counter()
        curve.append((warmup + total_step, float(np.mean(_evaluate(algo_, env_id, eval_episodes, eval_seed)))))
        eval_s[0] += time.perf_counter() - t0

    per_epoch = eval_every if eval_every else steps
    t0 = time.perf_counter()
    model.fit(dataset, n_steps=steps, n_steps_per_epoch=per_epoch, epoch_callback=evaluate if eval_every else None,
              **fit)
    wall = time.perf_counter() - t0 - eval_s[0]
    return {"sps": steps / wall, "wall_s": wall, "warmup_s": warmup_s, "curve": curve,
            "version": d3rlpy.__version__}
