"""Offline RL: BC, TD3+BC, IQL, CQL and discrete CQL on the offline core (rapidrl.algos.offline).

Each loss against a case computed by hand; each algorithm learning from a small dataset made here (a scripted
Pendulum controller, a scripted CartPole one); save/load/resume (bitwise) and export with the dataset's
normalisation folded in; offline-to-online fine-tuning (IQL) with one step count across the switch; the errors of a
model without data or with data that does not fit its env.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from checkpoint_checks import same

import rapidrl as rr
from rapidrl.algos.bc import BC, bc_discrete_loss, bc_loss
from rapidrl.algos.cql import (
    CQL,
    DiscreteCQL,
    conservative_penalty,
    cql_critic_loss,
    discrete_conservative_penalty,
)
from rapidrl.algos.iql import IQL, advantage_weighted_loss, cosine_lr, expectile_loss, iql_q_target
from rapidrl.algos.offline import OfflineAlgorithm
from rapidrl.algos.offpolicy_losses import soft_actor_loss
from rapidrl.algos.registry import algorithms
from rapidrl.algos.td3_bc import TD3BC, td3_bc_actor_loss
from rapidrl.buffers.dataset import DatasetError, collect_episodes, load_dataset, write_dataset
from rapidrl.train.precision import native_bf16

SMALL = dict(hidden=(64, 64), torch_threads=1, seed=0)
# Every learning test runs in float32 and in bfloat16 autocast: the bf16 runs, at the same budgets, thresholds and
# seeds, are what licenses precision="auto" to pick bf16 for these algorithms (Algorithm.bf16_learning_tested).
# They need native bf16 (AVX512-BF16, AMX): PyTorch emulates it elsewhere at ~11x float32's time.
PRECISIONS = ["fp32", pytest.param("bf16", marks=pytest.mark.skipif(
    native_bf16(torch.device("cpu")) is not None, reason="this CPU has no native bfloat16 (emulated: ~11x slower)"))]


# -- the losses, by hand ---------------------------------------------------------------------------------------------
def test_bc_losses():
    # mean over B x A of the squared differences: (0.5^2 + 1^2 + 0 + 2^2) / 4
    assert bc_loss(torch.tensor([[0.5, 1.0], [0.0, -1.0]]), torch.tensor([[0.0, 0.0], [0.0, 1.0]])).item() == 1.3125
    # -mean log softmax at the taken actions: logits [0, ln 3] -> p = (1/4, 3/4); actions 1 and 0
    loss = bc_discrete_loss(torch.tensor([[0.0, math.log(3.0)], [0.0, math.log(3.0)]]), torch.tensor([1, 0]))
    assert loss.item() == pytest.approx(-(math.log(0.75) + math.log(0.25)) / 2)


def test_td3_bc_actor_loss():
    q = torch.tensor([2.0, -4.0], requires_grad=True)  # mean |Q| = 3 -> lambda = 2.5 / 3; mean Q = -1
    predicted = torch.tensor([[0.5], [0.0]], requires_grad=True)
    loss = td3_bc_actor_loss(q, predicted, torch.tensor([[0.0], [1.0]]), q_weight=2.5)
    assert loss.item() == pytest.approx(2.5 / 3 + (0.25 + 1.0) / 2)
    loss.backward()  # lambda is held constant: dL/dQ = -lambda / B
    torch.testing.assert_close(q.grad, torch.full((2,), -2.5 / 3 / 2))
    torch.testing.assert_close(predicted.grad, torch.tensor([[0.5], [-1.0]]))  # 2 (p - a) / (B A)


def test_iql_losses():
    # diff 2 weighs 0.7, diff -1 weighs 0.3: (0.7 * 4 + 0.3 * 1) / 2
    assert expectile_loss(torch.tensor([2.0, -1.0]), 0.7).item() == pytest.approx(1.55)
    assert expectile_loss(torch.tensor([2.0, -1.0]), 0.5).item() == pytest.approx(0.5 * 2.5)  # half the MSE
    torch.testing.assert_close(iql_q_target(torch.tensor([1.0, 1.0]), torch.tensor([0.9, 0.0]),
                                            torch.tensor([10.0, 10.0])), torch.tensor([10.0, 1.0]))
    # weights exp(3 * 0) = 1, exp(3 * 1) = 20.09, exp(3 * 2) = 403 -> clipped to 100
    loss = advantage_weighted_loss(torch.tensor([0.0, 1.0, 2.0]), torch.tensor([1.0, 2.0, 0.5]), 3.0, 100.0)
    assert loss.item() == pytest.approx((1.0 + 2.0 * math.exp(3.0) + 0.5 * 100.0) / 3)
    assert cosine_lr(3e-4, 0, 100) == 3e-4 and cosine_lr(3e-4, 50, 100) == pytest.approx(1.5e-4)
    assert cosine_lr(3e-4, 100, 100) == pytest.approx(0.0) and cosine_lr(3e-4, 150, 100) == pytest.approx(1.5e-4)


def test_cql_losses():
    # one critic, one state, proposals Q = (1, 2) with log densities (0, ln 2), data Q = 0.5:
    # logsumexp(1 - 0, 2 - ln 2) = log(e + e^2 / 2)
    q_prop, log_density, q_data = torch.tensor([[[1.0, 2.0]]]), torch.tensor([[0.0, math.log(2.0)]]), \
        torch.tensor([[0.5]])
    penalty = conservative_penalty(q_prop, log_density, q_data, temperature=1.0)
    assert penalty.shape == (1,) and penalty.item() == pytest.approx(math.log(math.e + math.e ** 2 / 2) - 0.5)
    # temperature 2: 2 logsumexp((1, 2 - ln 2) / 2)
    hot = conservative_penalty(q_prop, log_density, q_data, temperature=2.0).item()
    assert hot == pytest.approx(2 * math.log(math.exp(0.5) + math.exp((2 - math.log(2)) / 2)) - 0.5)
    # two critics: TD errors (1, 0) and (0, 2): MSE 0.5 + 2, plus 10 * (0.1 + 0.2)
    loss = cql_critic_loss(torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.tensor([0.0, 0.0]),
                           torch.tensor([0.1, 0.2]), conservative_weight=10.0)
    assert loss.item() == pytest.approx(2.5 + 3.0)
    # alpha log pi - min_i Q_i: (0.5 * -1 - 1, 0.5 * 2 - (-3)) -> mean (-1.5 + 4) / 2
    assert soft_actor_loss(torch.tensor([[1.0, 5.0], [2.0, -3.0]]), torch.tensor([-1.0, 2.0]),
                           torch.tensor([0.5])).item() == pytest.approx(1.25)
    # discrete: logsumexp(0, ln 3) = ln 4; data Q 0 and ln 3
    q_all = torch.tensor([[0.0, math.log(3.0)], [0.0, math.log(3.0)]])
    assert discrete_conservative_penalty(q_all, torch.tensor([0, 1])).item() == pytest.approx(
        (math.log(4.0) + math.log(4.0) - math.log(3.0)) / 2)


@pytest.mark.parametrize("algo, env, old, new, said", [
    ("cql", "Pendulum-v1", {"cql_alpha": 3.0}, {"conservative_weight": 3.0},
     "cql_alpha replaced by conservative_weight=3.0"),
    ("discrete_cql", "Acrobot-v1", {"cql_alpha": 2.0}, {"conservative_weight": 2.0},
     "cql_alpha replaced by conservative_weight=2.0"),
    ("discrete_cql", "Acrobot-v1", {"target_update_interval": 7}, {"target_update_gradient_steps": 7},
     "target_update_interval replaced by target_update_gradient_steps=7"),
    ("discrete_cql", "Acrobot-v1", {"exploration_eps": 0.2}, {"exploration_final_eps": 0.2},
     "exploration_eps replaced by exploration_final_eps=0.2"),
])
def test_cql_renamed_settings_warn_and_land_in_the_new_fields(algo, env, old, new, said):
    """Issue 56's one meaning per name: the conservative weight is not SAC's temperature alpha, DiscreteCQL's target
    interval counts gradient steps (DQN's: env steps), its constant epsilon is DQN's final one. The old names still
    work, with a DeprecationWarning, from a dict (a checkpoint) and a config file (rapidrl train --config)."""
    from rapidrl.algos.registry import get_algorithm
    from rapidrl.runs.config import resolve
    from rapidrl.train.config import config_from_dict

    cls = get_algorithm(algo)
    with pytest.warns(DeprecationWarning, match=said):
        config = config_from_dict(cls.config_class, dict(old))
    assert {k: getattr(config, k) for k in new} == new
    assert not any(hasattr(config, k) for k in old)
    with pytest.warns(DeprecationWarning, match=said):
        run = resolve([("test.toml", {"run": {"algo": algo, "env": env}, "algo": dict(old)})])
    assert {k: getattr(run.algo_config, k) for k in new} == new


def test_cql_renamed_settings_upgrade_as_constructor_keywords(datasets):
    with pytest.warns(DeprecationWarning, match="cql_alpha replaced by conservative_weight=4.0"):
        model = CQL(dataset="test/pendulum/noisy-v0", hidden=(8,), cql_alpha=4.0)
    assert model.config.conservative_weight == 4.0
    with pytest.warns(DeprecationWarning, match="target_update_gradient_steps=9"):
        model = DiscreteCQL(dataset="test/cartpole/noisy-v0", hidden=(8,), target_update_interval=9,
                            exploration_eps=0.3)
    assert (model.config.target_update_gradient_steps, model.config.exploration_final_eps) == (9, 0.3)


# -- datasets made here -----------------------------------------------------------------------------------------------
def pendulum_controller(obs: np.ndarray) -> np.ndarray:
    """Energy pumping, then a PD controller near the top: about -180 on Pendulum-v1 (random: about -1200)."""
    c, s, w = obs[:, 0], obs[:, 1], obs[:, 2]
    pump = 2.0 * np.sign(w + 1e-6) * (0.5 * w ** 2 + 15.0 * c < 15.0)
    u = np.where(c > 0.9, -(10.0 * np.arctan2(s, c) + 2.0 * w), pump)
    return np.clip(u, -2.0, 2.0)[:, None].astype(np.float32)


def cartpole_controller(obs: np.ndarray) -> np.ndarray:
    """Push towards where the pole falls: 500 on CartPole-v1."""
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """test/pendulum/expert-v0 (the controller), test/pendulum/noisy-v0 (its actions + N(0, 1) noise, clipped) and
    test/cartpole/noisy-v0 (the CartPole controller, epsilon-greedy 0.3), in a datasets directory of their own."""
    root = tmp_path_factory.mktemp("datasets")
    mp = pytest.MonkeyPatch()
    mp.setenv("MINARI_DATASETS_PATH", str(root))
    rng = np.random.default_rng(0)
    env = rr.make_vec("Pendulum-v1", 4, seed=0)
    obs_space, act_space = env.single_observation_space, env.single_action_space
    write_dataset("test/pendulum/expert-v0", collect_episodes(env, pendulum_controller, 4000, seed=0), obs_space,
                  act_space, env_id="Pendulum-v1", ref_min_score=-1200.0, ref_max_score=-180.0)
    noisy = lambda o: np.clip(pendulum_controller(o) + rng.normal(0, 1.0, (len(o), 1)), -2, 2).astype(np.float32)  # noqa: E731
    write_dataset("test/pendulum/noisy-v0", collect_episodes(env, noisy, 8000, seed=1), obs_space, act_space,
                  env_id="Pendulum-v1", ref_min_score=-1200.0, ref_max_score=-180.0)
    cart = rr.make_vec("CartPole-v1", 4, seed=0)
    eps = lambda o: np.where(rng.random(len(o)) < 0.3, rng.integers(2, size=len(o)), cartpole_controller(o))  # noqa: E731
    write_dataset("test/cartpole/noisy-v0", collect_episodes(cart, eps, 6000, seed=2), cart.single_observation_space,
                  cart.single_action_space, env_id="CartPole-v1", ref_min_score=20.0, ref_max_score=500.0)
    yield root
    mp.undo()


# -- learning -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", PRECISIONS)
def test_bc_clones_the_controller(datasets, precision):
    model = BC(dataset="test/pendulum/expert-v0", precision=precision, **SMALL)
    assert model.env_id == "Pendulum-v1" and model.paths["collection"].value == "dataset"
    assert model.precision == precision
    model.learn(1000, progress_bar=False)
    assert model.num_timesteps == 1000 and model.num_gradient_steps == 1000
    mean, _ = model.evaluate(10)
    assert mean > -300, mean  # the controller: about -180; random: about -1200


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("make, steps, threshold", [
    (lambda p: TD3BC(dataset="test/pendulum/noisy-v0", precision=p, **SMALL), 2000, -400),
    (lambda p: IQL(dataset="test/pendulum/noisy-v0", precision=p, **SMALL), 1000, -400),
    (lambda p: CQL(dataset="test/pendulum/noisy-v0", precision=p, **{**SMALL, "hidden": (32, 32)}, cql_n_actions=4,
                   conservative_weight=5.0, actor_learning_rate=3e-3), 900, -600),
], ids=["td3_bc", "iql", "cql"])
def test_offline_rl_learns_from_noisy_data(datasets, make, steps, threshold, precision):
    model = make(precision)
    assert model.precision == precision
    model.learn(steps, progress_bar=False)
    mean, _ = model.evaluate(10)
    assert mean > threshold, mean
    score = model.normalized_score(mean)
    assert score == pytest.approx(100 * (mean + 1200) / 1020)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_discrete_cql_learns_cartpole_from_epsilon_greedy_data(datasets, precision):
    model = DiscreteCQL(dataset="test/cartpole/noisy-v0", hidden=(64, 64), seed=0, learning_rate=1e-3,
                        batch_size=64, target_update_gradient_steps=100, precision=precision)
    model.learn(3000, progress_bar=False)
    mean, _ = model.evaluate(10)
    assert mean > 300, mean  # the controller: 500; random: about 20


@pytest.mark.parametrize("precision", PRECISIONS)
def test_discrete_bc_clones_cartpole(datasets, precision):
    model = BC(dataset="test/cartpole/noisy-v0", precision=precision, **SMALL)
    model.learn(500, progress_bar=False)
    assert model.evaluate(10)[0] > 300


# the algorithms the learning tests above train, each at every precision in PRECISIONS
LEARNING_TESTED = {BC, TD3BC, IQL, CQL, DiscreteCQL}


def test_every_offline_algorithm_has_a_learning_test_in_bf16():
    """OfflineAlgorithm.bf16_learning_tested is True for every subclass: it holds only while each has a test above."""
    offline = {cls for cls in algorithms().values() if issubclass(cls, OfflineAlgorithm)}
    assert offline == LEARNING_TESTED
    assert all(cls.bf16_learning_tested for cls in offline)


def test_iql_auto_keeps_float32_and_explicit_bf16_computes_its_value_heads_in_float32(datasets, monkeypatch):
    """Issue 61 item 3: IQL's advantage weights exp(beta (Q - V)) amplify bf16's rounding of its value outputs, so
    precision="auto" keeps float32 for IQL where it takes bf16 for the other offline learners at the same sizes;
    an explicit "bf16" runs, with the value's and critics' output layers in float32."""
    from rapidrl.train import precision as precision_mod

    monkeypatch.setattr(precision_mod, "cpu_native_bf16", lambda: True)
    sizes = dict(dataset="test/pendulum/noisy-v0", hidden=(256, 256), batch_size=256, torch_threads=1, seed=0)
    assert CQL(precision="auto", cql_n_actions=2, **sizes).precision == "bf16"  # what "auto" takes at these sizes
    auto = IQL(precision="auto", **sizes)
    assert auto.precision == "fp32" and "advantage weights" in auto.paths["precision"].reason
    explicit = IQL(precision="bf16", **sizes)
    assert explicit.precision == "bf16" and explicit.critic.float32_output
    batch = explicit._sample_batch()
    with explicit._autocast():
        hidden = explicit.value[:-1](batch.obs)
        assert hidden.dtype == torch.bfloat16 and explicit.value(batch.obs).dtype == torch.float32


# -- save, load, resume, export -------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls, kwargs", [(BC, {}), (TD3BC, {}), (IQL, {}), (CQL, {"cql_n_actions": 2}),
                                         (IQL, {"deterministic_actor": True, "normalize_reward": True})],
                         ids=["bc", "td3_bc", "iql", "cql", "iql_deterministic"])
def test_resume_is_bitwise_and_a_loaded_model_needs_no_dataset(datasets, tmp_path, cls, kwargs):
    def make():
        return cls(dataset="test/pendulum/noisy-v0", hidden=(16, 16), batch_size=32, torch_threads=1, seed=3,
                   log_every_steps=10, **kwargs)

    whole = make().learn(60, progress_bar=False)
    first = make()
    first.learn(60, progress_bar=False, callback=lambda m: m.num_timesteps < 25)  # stops after step 25
    assert first.num_timesteps == 25
    first.save(tmp_path / "ckpt.pt", training_state=True)
    resumed = cls.load(tmp_path / "ckpt.pt")
    assert resumed.dataset is None  # not read until it trains
    resumed.learn(60, progress_bar=False, resume=True)
    assert resumed.dataset is not None and resumed.num_timesteps == 60
    assert same(whole._state(), resumed._state())  # networks, optimizers, normalisation: bitwise
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_array_equal(whole.predict(obs, deterministic=True), resumed.predict(obs, deterministic=True))


def test_a_loaded_model_scores_without_its_dataset(datasets, tmp_path, monkeypatch):
    """The reference scores travel in the checkpoint: a loaded model gives D4RL's score on a machine without the
    data; a checkpoint written before they were saved reads them from the dataset's header."""
    model = IQL(dataset="test/pendulum/noisy-v0", **SMALL).learn(20, progress_bar=False)
    model.save(tmp_path / "m.pt")
    state = torch.load(tmp_path / "m.pt", weights_only=False)
    assert state["state"]["ref_scores"] == [-1200.0, -180.0]
    state["state"].pop("ref_scores")
    torch.save(state, tmp_path / "old.pt")
    assert IQL.load(tmp_path / "old.pt").normalized_score(-690.0) == pytest.approx(50.0)  # from the header
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "elsewhere"))  # no dataset on this "machine"
    loaded = IQL.load(tmp_path / "m.pt")
    assert loaded.dataset is None
    assert loaded.normalized_score(-690.0) == pytest.approx(50.0)  # 100 (-690 + 1200) / 1020
    with pytest.raises(DatasetError, match="no dataset 'test/pendulum/noisy-v0'"):
        IQL.load(tmp_path / "old.pt").normalized_score(-690.0)


def test_export_folds_in_the_datasets_normalisation(datasets, tmp_path):
    from rapidrl.export import export_policy

    model = IQL(dataset="test/pendulum/noisy-v0", **SMALL).learn(50, progress_bar=False)
    assert model.obs_normalizer.rms.mean.any()
    path = export_policy(model, tmp_path / "policy.pt")
    obs = np.random.default_rng(1).normal(size=(7, 3)).astype(np.float32)
    exported = torch.jit.load(str(path))(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(exported, model.predict(obs, deterministic=True), rtol=1e-5, atol=1e-6)


# -- offline to online ------------------------------------------------------------------------------------------------
def test_iql_fine_tunes_online_with_the_dataset_mixed_in(datasets):
    model = IQL(dataset="test/pendulum/noisy-v0", offline_steps=300, buffer_size=2000, dataset_fraction=0.5,
                log_every_steps=50, **SMALL)
    assert model.paths["collection"].value == "dataset+step" and model.buffer.capacity == 2000
    model.learn(800, progress_bar=False)
    # 300 gradient steps on the dataset, then 500 env steps with one update each: one step count throughout
    assert (model.num_timesteps, model.num_gradient_steps, len(model.buffer)) == (800, 800, 500)
    steps = [h["global_step"] for h in model.history]
    assert steps == sorted(steps) and steps[-1] == 800
    online = [h for h in model.history if "charts/online_env_steps" in h]
    assert online and online[0]["global_step"] > 300 and online[-1]["charts/online_env_steps"] == 500
    assert model.recent_returns()  # the online episodes were recorded
    batch = model._mixed_batch()  # 128 rows from the dataset, 128 from the online buffer (raw, then normalised)
    assert batch.obs.shape == (256, 3)
    dataset_rows = model.dataset.buffer.arrays()["obs"]
    online_rows = model.buffer.arrays()["obs"][:500]
    raw = batch.obs.numpy()
    assert all((np.abs(dataset_rows - r).sum(1) == 0).any() for r in raw[:128])
    assert all((np.abs(online_rows - r).sum(1) == 0).any() for r in raw[128:])


# -- errors ---------------------------------------------------------------------------------------------------------
def test_data_that_does_not_fit_is_refused(datasets):
    with pytest.raises(ValueError, match="BC needs an env or a dataset"):
        BC()
    with pytest.raises(DatasetError, match=r"test/pendulum/noisy-v0: its observation space .* does not match "
                                           r"MountainCarContinuous-v0's"):
        IQL("MountainCarContinuous-v0", dataset="test/pendulum/noisy-v0")
    with pytest.raises(TypeError, match="IQL needs a 1-D Box action space"):
        IQL(dataset="test/cartpole/noisy-v0")
    with pytest.raises(DatasetError, match="holds 4000 transitions, fewer than batch_size=5000"):
        BC(dataset="test/pendulum/expert-v0", batch_size=5000, buffer_size=10_000)
    model = BC("Pendulum-v1", **SMALL)
    with pytest.raises(ValueError, match="BC has no dataset to train on"):
        model.learn(10)
    model.learn(10, dataset=load_dataset("test/pendulum/expert-v0"), progress_bar=False)
    assert model.config.dataset == "test/pendulum/expert-v0" and model.num_timesteps == 10


# -- the docs page --------------------------------------------------------------------------------------------------
def test_docs_offline_examples_run(tmp_path, monkeypatch):
    import contextlib
    import io
    import re
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    src = (Path(__file__).resolve().parents[1] / "docs" / "offline.md").read_text()
    blocks = re.findall(r"(?<!-->\n)```python\n(.*?)```", src, re.S)  # not the code shown (tests/test_docs_code.py)
    assert len(blocks) == 4
    scope: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks:  # one session, as a reader runs them in order
            exec(compile(block, "docs/offline.md", "exec"), scope)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith(" 50.0") and lines[1].startswith("300 return ")
    assert lines[2] == "None (1,)" and lines[3] == "400 200 dataset+step"
    assert scope["again"].num_timesteps == 400 and scope["again"].dataset is not None


def test_rapidrl_train_reports_the_normalised_score(datasets, tmp_path, capsys):
    from rapidrl import cli
    from rapidrl.runs.layout import read_summary

    run = tmp_path / "run"
    assert cli.main(["train", "bc", "Pendulum-v1", "--timesteps", "20", "--headless", "--eval-episodes", "2",
                     "--run-dir", str(run), "--set", "algo.dataset=test/pendulum/expert-v0",
                     "--set", "algo.hidden=[16, 16]", "--set", "algo.torch_threads=1"]) == 0
    summary = read_summary(run)
    assert summary["eval_score"] == pytest.approx(100 * (summary["eval_mean"] + 1200) / 1020)
    assert f"normalised score: {summary['eval_score']:.1f} (0: -1200.0, random; 100: -180.0, expert; " \
           "test/pendulum/expert-v0)" in capsys.readouterr().out
