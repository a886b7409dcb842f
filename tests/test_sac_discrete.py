"""SAC for discrete actions: the three losses on hand-computed cases, masks (1,024 actions, states without a valid
action), target updates, save/load, determinism, CNN encoders and frame replay, export, and learning CartPole."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from docs_examples import run_examples

import rapidrl as rr
from rapidrl.algos.sac_discrete import (
    SACDiscrete,
    discrete_soft_actor_loss,
    discrete_soft_target,
    discrete_temperature_loss,
    masked_policy,
)
from rapidrl.train.callbacks import EvalCallback
from rapidrl.train.config import ConfigError

TINY = dict(hidden=(32, 32), learning_starts=64, batch_size=32, buffer_size=2_000, train_freq=1,
            target_update_interval=1, tau=0.005, log_every_steps=5)


# -- the losses --------------------------------------------------------------------------------------------------------
def test_losses_on_a_hand_computed_case():
    """Two actions, pi = (1/4, 3/4), two critics, alpha = 1/2; every number below worked out by hand.

    target: min_i Q'_i(s', .) = min((1, 3), (2, 0)) = (1, 0); V(s') = sum_a pi (minQ - alpha log pi)
    = 1/4 * 1 + 3/4 * 0 + alpha * H, H = -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.562335; V = 0.25 + 0.281168 = 0.531168;
    r + 0.99 V = 1 + 0.525856 = 1.525856; a terminal transition (discount 0) is r = -1.
    actor: min_i Q_i(s, .) = min((2, 1), (1, 4)) = (1, 1); sum_a pi (alpha log pi - 1) = -alpha H - 1 = -1.281168;
    its gradient with respect to logit j is pi_j (f_j - L), f = alpha log pi - minQ = (-1.693147, -1.143841):
    (0.25 * -0.411980, 0.75 * 0.137326) = (-0.102995, 0.102995).
    temperature: target entropy 0.89 ln 2 = 0.616906; sum_a pi (log pi + target) = -H + 0.616906 = 0.054571;
    loss = -ln(1/2) * 0.054571 = 0.037826, gradient wrt log alpha -0.054571 (alpha rises: entropy below target).
    """
    logits = torch.log(torch.tensor([[0.25, 0.75], [0.25, 0.75]])).requires_grad_(True)  # [B=2, A=2]
    probs, log_probs = masked_policy(logits, None)
    torch.testing.assert_close(probs.detach(), torch.tensor([[0.25, 0.75]] * 2))
    alpha = torch.tensor([0.5])
    next_q = torch.tensor([[[1.0, 3.0]] * 2, [[2.0, 0.0]] * 2])  # [n=2, B, A]
    target = discrete_soft_target(torch.tensor([1.0, -1.0]), torch.tensor([0.99, 0.0]), next_q, probs.detach(),
                                  log_probs.detach(), alpha)
    torch.testing.assert_close(target, torch.tensor([1.525856, -1.0]))

    q = torch.tensor([[[2.0, 1.0]] * 2, [[1.0, 4.0]] * 2], requires_grad=True)
    loss_pi = discrete_soft_actor_loss(q, probs, log_probs, alpha)
    torch.testing.assert_close(loss_pi, torch.tensor(-1.281168))
    loss_pi.backward()
    torch.testing.assert_close(logits.grad, torch.tensor([[-0.102995, 0.102995]] * 2) / 2)  # mean over B = 2
    assert q.grad is None  # the actor loss holds the critics constant

    log_alpha = torch.log(torch.tensor([0.5])).requires_grad_(True)
    loss_alpha = discrete_temperature_loss(log_alpha, probs, log_probs, 0.89 * math.log(2))
    torch.testing.assert_close(loss_alpha, torch.tensor(0.037826))
    loss_alpha.backward()
    torch.testing.assert_close(log_alpha.grad, torch.tensor([-0.054571]))


def test_masked_losses_equal_the_losses_without_the_invalid_actions():
    """A third action that is invalid (a huge logit and huge Q values) changes nothing: the losses equal those of the
    two valid actions; a state without a valid action is worth 0 (its target is r) and adds nothing to the actor and
    temperature losses; its gradients are 0, not NaN."""
    logits2 = torch.log(torch.tensor([[0.25, 0.75]]))
    logits3 = torch.tensor([[math.log(0.25), 100.0, math.log(0.75)], [3.0, -2.0, 50.0]], requires_grad=True)
    mask = torch.tensor([[True, False, True], [False, False, False]])
    probs, log_probs = masked_policy(logits3, mask)
    torch.testing.assert_close(probs.detach(), torch.tensor([[0.25, 0.0, 0.75], [0.0, 0.0, 0.0]]))
    assert (log_probs[1] == 0).all() and log_probs[0, 1] == 0
    p2, lp2 = masked_policy(logits2, None)
    alpha = torch.tensor([0.5])
    q2 = torch.tensor([[[1.0, 3.0]], [[2.0, 0.0]]])
    q3 = torch.tensor([[[1.0, 1e6, 3.0]] * 2, [[2.0, -1e6, 0.0]] * 2])
    target = discrete_soft_target(torch.tensor([1.0, 2.0]), torch.tensor([0.99, 0.99]), q3, probs.detach(),
                                  log_probs.detach(), alpha)
    expect = discrete_soft_target(torch.tensor([1.0]), torch.tensor([0.99]), q2, p2, lp2, alpha)
    torch.testing.assert_close(target, torch.cat([expect, torch.tensor([2.0])]))
    loss_pi = discrete_soft_actor_loss(q3, probs, log_probs, alpha)
    torch.testing.assert_close(loss_pi, discrete_soft_actor_loss(q2, p2, lp2, alpha) / 2)  # row 2 adds 0 of B = 2
    loss_pi.backward()
    assert torch.isfinite(logits3.grad).all() and (logits3.grad[:, 1] == 0).all() and (logits3.grad[1] == 0).all()
    model = SACDiscrete("InvalidActionDiscrete-v0", env_kwargs={"dim": 3, "n_invalid_actions": 1}, **TINY)
    targets = model._target_entropies(mask)  # "auto" per state: 0.89 log V, 0 without a valid action
    torch.testing.assert_close(targets, torch.tensor([0.89 * math.log(2), 0.0]))
    loss_alpha = discrete_temperature_loss(torch.zeros(1), probs, log_probs, targets)
    torch.testing.assert_close(loss_alpha, discrete_temperature_loss(torch.zeros(1), p2, lp2, 0.89 * math.log(2)) / 2)
    fixed = SACDiscrete("InvalidActionDiscrete-v0", env_kwargs={"dim": 3, "n_invalid_actions": 1}, target_entropy=0.4,
                        **TINY)
    torch.testing.assert_close(fixed._target_entropies(mask), torch.tensor([0.4, 0.0]))


def test_finished_games_without_a_valid_action_train_finite():
    """Tic-Tac-Toe's final states have no valid action: they reach the update as next states (worth 0 there)."""
    model = SACDiscrete("TicTacToe-v3", **{**TINY, "hidden": (32,)}, seed=0)
    model.learn(600, progress_bar=False)
    _, next_masks = model._split_rows(torch.from_numpy(model.buffer.arrays()["next_obs"][:len(model.buffer)]))
    assert (~next_masks.any(1)).sum() > 20
    assert all(math.isfinite(model.metrics[f"losses/{k}"]) for k in SACDiscrete.stat_names)
    assert all(torch.isfinite(p).all() for p in [*model.actor.parameters(), *model.critic.parameters()])
    assert math.isfinite(model.evaluate(4, deterministic=False)[0])


def test_1024_actions_with_masks_stay_finite():
    """1,024 actions, extreme logits and Q values, masks from 0 to 1,024 valid actions: the policy, the three losses
    and their gradients are finite; then the algorithm trains on a 1,024-action masked env with finite parameters
    and acts on valid actions only."""
    gen = torch.Generator().manual_seed(0)
    b, a = 64, 1024
    logits = (torch.randn(b, a, generator=gen) * 1e4).requires_grad_(True)
    mask = torch.rand(b, a, generator=gen) < torch.rand(b, 1, generator=gen) ** 4
    mask[0] = False
    mask[1] = True
    mask[2] = False
    mask[2, 7] = True
    q = (torch.randn(2, b, a, generator=gen) * 1e3).requires_grad_(True)
    log_alpha = torch.zeros(1, requires_grad=True)
    probs, log_probs = masked_policy(logits, mask)
    assert torch.isfinite(probs).all() and torch.isfinite(log_probs).all() and (probs[~mask] == 0).all()
    torch.testing.assert_close(probs.sum(1), mask.any(1).float())
    target = discrete_soft_target(torch.ones(b), torch.full((b,), 0.99), q.detach(), probs.detach(),
                                  log_probs.detach(), log_alpha.detach().exp())
    targets = 0.89 * mask.sum(1).clamp(min=1).float().log()
    loss = ((q[0, :, 0] - target) ** 2).mean() + discrete_soft_actor_loss(q, probs, log_probs, log_alpha.exp()) \
        + discrete_temperature_loss(log_alpha, probs, log_probs, targets)
    loss.backward()
    for t in (target, loss, logits.grad, q.grad, log_alpha.grad):
        assert torch.isfinite(t).all()

    model = SACDiscrete("InvalidActionDiscrete-v0", env_kwargs={"dim": 1024, "n_invalid_actions": 1000},
                        **{**TINY, "hidden": (16,)}, seed=0)
    model.learn(256, progress_bar=False)
    assert all(torch.isfinite(p).all() for p in [*model.actor.parameters(), *model.critic.parameters()])
    assert math.isfinite(model.metrics["losses/critic_loss"]) and math.isfinite(model.metrics["losses/entropy"])
    env = rr.make_vec("InvalidActionDiscrete-v0", 8, seed=1, dim=1024, n_invalid_actions=1000)
    obs, info = env.reset(seed=1)
    for deterministic in (True, False):
        actions = model.predict(obs, deterministic=deterministic, action_masks=info["action_mask"])
        assert info["action_mask"][np.arange(8), actions].all()


# -- the algorithm -----------------------------------------------------------------------------------------------------
def test_smoke_learn_logs_its_losses_and_evaluates():
    model = SACDiscrete("CartPole-v1", num_envs=2, gradient_steps=2, **TINY)
    model.learn(300, progress_bar=False)
    # 2 envs: iterations start at steps 0, 2, ..., 298; updates from the one that reaches 64 (at step 62)
    assert model.num_gradient_steps == 2 * len(range(62, 300, 2))
    assert {f"losses/{name}" for name in SACDiscrete.stat_names} <= set(model.metrics)
    assert 0 < model.metrics["losses/entropy"] <= math.log(2) + 1e-6
    assert model.gradient_backend == "torch" and model.paths["acting"].value == "torch"
    for deterministic in (True, False):
        assert math.isfinite(model.evaluate(2, deterministic=deterministic)[0])


def test_defaults_are_cleanrl_sac_atari():
    c = rr.SACDiscreteConfig()
    assert (c.learning_rate, c.buffer_size, c.learning_starts, c.batch_size, c.gamma, c.tau, c.train_freq,
            c.gradient_steps, c.target_update_interval, c.target_entropy_scale, c.adam_eps, c.ent_coef,
            c.ent_coef_init) == (3e-4, 1_000_000, 20_000, 64, 0.99, 1.0, 4, 1, 8_000, 0.89, 1e-4, "auto", 1.0)
    model = SACDiscrete("CartPole-v1", **TINY)
    assert model.optimizer.param_groups[0]["eps"] == 1e-4
    assert model.target_entropy == pytest.approx(0.89 * math.log(2))
    assert SACDiscrete("CartPole-v1", target_entropy=0.3, **TINY).target_entropy == 0.3


def test_hard_target_updates_every_target_update_interval():
    """tau = 1: the target critics are a copy of the critics taken every ``target_update_interval`` env steps once
    learning has started (at 100, 200, ... here, as CleanRL's ``global_step % 8000 == 0``), unchanged in between."""
    model = SACDiscrete("CartPole-v1", **{**TINY, "tau": 1.0, "target_update_interval": 100, "train_freq": 4})
    start = [p.clone() for p in model.critic_target.parameters()]
    model.learn(96, progress_bar=False)  # updates from step 64 on, no copy yet
    assert model.num_gradient_steps == 9 and model._last_target_update == 0
    assert all(torch.equal(a, b) for a, b in zip(start, model.critic_target.parameters()))
    model.learn(104, progress_bar=False)  # to step 200: a gradient step, then the copy
    assert model._last_target_update == 200
    assert all(torch.equal(a, b) for a, b in zip(model.critic.parameters(), model.critic_target.parameters()))
    model.learn(40, progress_bar=False)
    assert not all(torch.equal(a, b) for a, b in zip(model.critic.parameters(), model.critic_target.parameters()))


def test_actions_greedy_and_sampled_follow_the_policy():
    model = SACDiscrete("CartPole-v1", **TINY)
    with torch.no_grad():
        model.actor.net[-1].bias.copy_(torch.tensor([0.0, math.log(3.0)]))  # pi about (1/4, 3/4)
        model.actor.net[-1].weight.zero_()
    obs = np.zeros((4000, 4), np.float32)
    assert (model.predict(obs, deterministic=True) == 1).all()
    assert abs(model.predict(obs).mean() - 0.75) < 0.03


def test_save_load_identical_predictions_and_buffer(tmp_path):
    model = SACDiscrete("CartPole-v1", **TINY)
    model.learn(200, progress_bar=False)
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    path = model.save(tmp_path / "m.pt", include_buffer=True)
    loaded = SACDiscrete.load(path, include_buffer=True)
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True), model.predict(obs, deterministic=True))
    assert len(loaded.buffer) == len(model.buffer) == 200
    for a, b in zip(loaded.critic_target.parameters(), model.critic_target.parameters()):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(loaded.log_alpha, model.log_alpha)


def test_same_seed_same_losses():
    def run():
        model = SACDiscrete("CartPole-v1", seed=5, **TINY)
        model.learn(250, progress_bar=False)
        return [{k: v for k, v in h.items() if k.startswith("losses/")} for h in model.history]

    first, second = run(), run()
    assert any(first) and first == second


def test_fixed_temperature_and_config_errors():
    model = SACDiscrete("CartPole-v1", ent_coef=0.05, **TINY)
    model.learn(100, progress_bar=False)
    assert not model.tune_alpha and model.metrics["losses/ent_coef"] == pytest.approx(0.05)
    assert model.metrics["losses/ent_coef_loss"] == 0
    for bad, match in [(dict(target_entropy_scale=1.5), "target_entropy_scale"), (dict(adam_eps=0), "adam_eps"),
                       (dict(encoder="resnet"), "encoder must be one of"),
                       (dict(target_update_interval=0), "target_update_interval")]:
        with pytest.raises(ConfigError, match=match):
            SACDiscrete("CartPole-v1", **{**TINY, **bad})
    with pytest.raises(TypeError, match="SACDiscrete needs a Discrete action space"):
        SACDiscrete("Pendulum-v1", **TINY)


def test_minatar_cnns_one_encoder_per_network_and_export(tmp_path):
    """MinAtar frames: the actor and each critic have their own MinAtar CNN (CleanRL's design); uint8 storage; the
    exported policy (flat float observations) acts as ``predict``."""
    import onnxruntime as ort

    from rapidrl.export import export_policy

    model = SACDiscrete("MinAtar/Breakout-v1", seed=0, learning_starts=32, batch_size=16, buffer_size=500,
                        train_freq=4)
    encoders = [model.actor.net[0], *(q.net[0] for q in model.critic.members)]
    assert [type(e).__name__ for e in encoders] == ["MinAtarCNN"] * 3 and model.buffer.obs_dtype == np.uint8
    assert len({id(e.convs[0].weight) for e in encoders}) == 3
    model.learn(96, progress_bar=False)
    assert model.num_gradient_steps > 0
    obs = (np.random.default_rng(0).random((32, *model.observation_space.shape)) < 0.2).astype(np.float32)
    expect = model.predict(obs, deterministic=True)
    got = ort.InferenceSession(str(export_policy(model, tmp_path / "p.onnx"))).run(None, {"obs": obs})[0]
    np.testing.assert_array_equal(got, expect)


def test_atari_uses_frame_replay_save_load_predict(tmp_path):
    pytest.importorskip("ale_py")
    env = "ALE/Breakout-v5"
    model = SACDiscrete(env, num_envs=2, seed=0, buffer_size=2000, learning_starts=200, train_freq=4, batch_size=8)
    assert isinstance(model.buffer, rr.buffers.FrameReplayBuffer) and model.actor.has_encoder
    assert type(model.actor.net[0]).__name__ == "NatureCNN"
    model.learn(400, progress_bar=False)
    assert model.num_gradient_steps > 0 and len(model.buffer) == 400
    obs, _ = rr.make_vec(env, 2, seed=5, training=False).reset()
    loaded = SACDiscrete.load(model.save(tmp_path / "m.pt"))
    np.testing.assert_array_equal(model.predict(obs, deterministic=True), loaded.predict(obs, deterministic=True))


def test_bf16_autocast_update_is_finite():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a CPU without native bf16 emulates it (and says so)
        model = SACDiscrete("CartPole-v1", precision="bf16", **TINY)
        assert model.precision == "bf16"
        model.learn(128, progress_bar=False)
    assert all(math.isfinite(model.metrics[f"losses/{k}"]) for k in SACDiscrete.stat_names)


def test_docs_examples_run(tmp_path, monkeypatch):
    """Every python block of docs/sac-discrete.md runs, in order, in one namespace (in a scratch directory)."""
    monkeypatch.chdir(tmp_path)
    run_examples("sac-discrete.md", 2)


# -- learning ----------------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_solves_cartpole_with_the_preset(seed):
    """configs/sac_discrete_cartpole.toml's settings reach an evaluation of 475 within its budget, for each of
    seeds 0, 1, 2 (one test per seed, so they can run on separate workers)."""
    model, history = cartpole_preset_history(seed)
    assert max(mean for _, mean, _, _ in history) >= 475, (seed, model.num_timesteps, history)


def cartpole_preset_history(seed: int, **overrides) -> tuple[SACDiscrete, list]:
    """configs/sac_discrete_cartpole.toml's settings (plus ``overrides``) over its budget, evaluated every 1,250 steps
    (10 episodes) and stopping at 475: (the model, its evaluation history). test_learning_bf16.py runs it in bf16."""
    from rapidrl.runs.config import PRESETS_DIR, read_toml

    preset = read_toml(PRESETS_DIR / "sac_discrete_cartpole.toml")
    model = SACDiscrete("CartPole-v1", seed=seed, **{**preset["algo"], **overrides})
    # every 1,250 steps: the calibration's evaluations (every 2,500, the same evaluation seeds) and one between each
    ev = EvalCallback(eval_freq=1_250, n_episodes=10, reward_threshold=475)
    model.learn(preset["run"]["timesteps"], callback=ev, progress_bar=False)
    return model, ev.history
