"""Paths are explicit (``rapidrl.train.paths``): every combination of path settings either runs, reporting what
ran and why, or is refused at construction with an error naming what to change; never a silent fallback.
Settings renamed since older versions are upgraded (checkpoints and config.toml files keep loading)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl.train.config import ConfigError, config_from_dict
from rapidrl.train.paths import choose, describe

SMALL_ON = dict(num_envs=4, num_steps=16, minibatch_size=32, update_epochs=1, hidden=(16, 16), seed=0)
SMALL_OFF = dict(learning_starts=32, batch_size=16, buffer_size=500, hidden=(16, 16), seed=0)
LOGGED_OFF = dict(SMALL_OFF, log_every_steps=4)  # statistics read every 4 env steps: 64 env steps log some
LOGGED_OFFLINE = dict(batch_size=16, hidden=(16, 16), seed=0, log_every_steps=4)
_DATASETS: dict = {}


def _offline_data(env_id: str):
    """A dataset of 500 uniform-random steps in ``env_id`` (an ``OfflineDataset``, made once per session)."""
    if env_id not in _DATASETS:
        import tempfile

        from rapidrl.buffers.dataset import collect_episodes, load_dataset, write_dataset

        env = rr.make_vec(env_id, 2, seed=0)
        space = env.single_action_space
        space.seed(0)
        path = write_dataset(f"paths/{env_id.lower()}/random-v0", collect_episodes(
            env, lambda o: [space.sample() for _ in o], 500), env.single_observation_space, space,
            env_id=env_id, root=tempfile.mkdtemp())
        _DATASETS[env_id] = load_dataset(path)
    return _DATASETS[env_id]


def test_choose_resolves_and_explains():
    ok, no = (lambda: None), (lambda: "needs device='cpu'")
    c = choose("gradient_backend", "auto", {"handwritten": no, "torch": ok})
    assert (c.value, c.reason) == ("torch", "auto: not handwritten (needs device='cpu')")
    assert choose("gradient_backend", "auto", {"handwritten": ok, "torch": ok}).reason == "auto: the first that applies"
    assert choose("gradient_backend", "torch", {"handwritten": ok, "torch": ok}).reason == "gradient_backend='torch'"
    assert choose("gradient_backend", "auto", {"torch": ok}).reason == "the only one"
    with pytest.raises(ConfigError, match=r"gradient_backend='handwritten' cannot run here: needs device='cpu'"):
        choose("gradient_backend", "handwritten", {"handwritten": no, "torch": ok})
    with pytest.raises(ConfigError, match=r"must be one of 'auto', 'handwritten', 'torch', got 'numba'"):
        choose("gradient_backend", "numba", {"handwritten": ok, "torch": ok})
    with pytest.raises(ConfigError, match="no collection can run here"):
        choose("collection", "auto", {"fused": no})
    paths = {"collection": choose("collection", "auto", {"fused": no, "step": ok}), "gradient_backend": c}
    assert describe(paths) == ("collection=step (auto: not fused (needs device='cpu')); "
                               "gradient_backend=torch (auto: not handwritten (needs device='cpu'))")


def _env(kind: str):
    if kind == "builtin":
        return "CartPole-v1"
    if kind == "torch":
        return rr.make_vec("CartPole-v1", 4, seed=0, vectorization="torch", validate_actions=False)
    return rr.make_vec("CartPole-v1", 4, seed=0, vectorization="sync")  # a Gymnasium env: NumPy, step by step


# (env kind, collection, gradient_backend) -> the paths that run, or the error's text. Every value each setting
# accepts appears, on each kind of env PPO collects from.
PPO_CASES = {
    ("builtin", "auto", "auto"): ("fused", "handwritten"),
    ("builtin", "fused", "handwritten"): ("fused", "handwritten"),
    ("builtin", "fused", "torch"): ("fused", "torch"),
    ("builtin", "step", "handwritten"): ("step", "handwritten"),
    ("builtin", "step", "torch"): ("step", "torch"),
    ("builtin", "device", "auto"): "collection='device' cannot run here: needs a TorchVecEnv",
    ("torch", "auto", "auto"): ("device", "torch"),
    ("torch", "device", "torch"): ("device", "torch"),
    ("torch", "device", "handwritten"): "gradient_backend='handwritten' cannot run here: the device path",
    ("torch", "fused", "auto"): "collection='fused' cannot run here: needs an env written as Numba functions",
    ("torch", "step", "auto"): "collection='step' cannot run here: a TorchVecEnv returns device tensors",
    ("sync", "auto", "auto"): ("step", "handwritten"),
    ("sync", "fused", "auto"): "collection='fused' cannot run here: needs an env written as Numba functions",
    ("sync", "step", "torch"): ("step", "torch"),
}


@pytest.mark.parametrize("case", list(PPO_CASES), ids=lambda c: "-".join(c))
def test_every_ppo_path_combination_runs_or_is_refused(case):
    kind, collection, backend = case
    want = PPO_CASES[case]
    make = lambda: rr.PPO(_env(kind), collection=collection, gradient_backend=backend, **SMALL_ON)  # noqa: E731
    if isinstance(want, str):
        with pytest.raises(ConfigError, match=want.replace("(", r"\(").replace(")", r"\)")):
            make()
        return
    model = make()
    assert (model.paths["collection"].value, model.gradient_backend) == want
    model.learn(2 * 4 * 16, progress_bar=False)
    assert model.num_updates == 2 and "losses/value_loss" in model.metrics


@pytest.mark.parametrize("kwargs, match", [
    (dict(shared=True, gradient_backend="handwritten"), r"shared=False"),
    (dict(precision="bf16", gradient_backend="handwritten"), r"precision='bf16' needs gradient_backend='torch'"),
    (dict(recurrent="gru", gradient_backend="handwritten"), r"recurrent='none'"),
    (dict(device="meta", gradient_backend="handwritten"), r"device='cpu'"),
])
def test_what_the_compiled_ppo_backend_does_not_cover_is_an_error(kwargs, match):
    env = "CartPoleNoVel-v1" if "recurrent" in kwargs else "CartPole-v1"
    with pytest.raises(ConfigError, match=match):
        rr.PPO(env, **{**SMALL_ON, **kwargs})


@pytest.mark.parametrize("kwargs, backend, reason", [
    (dict(shared=True), "torch", "not handwritten (needs separate actor and critic MLPs (shared=False))"),
    (dict(precision="bf16"), "torch", "not handwritten (runs in float32"),
    (dict(), "handwritten", "auto: the first that applies"),
])
def test_auto_says_why_it_did_not_take_the_compiled_backend(kwargs, backend, reason):
    model = rr.PPO("CartPole-v1", **{**SMALL_ON, **kwargs})
    assert model.gradient_backend == backend and reason in model.paths["gradient_backend"].reason
    if kwargs.get("precision"):
        assert model.paths["precision"].value == "bf16"


@pytest.mark.parametrize("make, backends", [
    (lambda b: rr.A2C("CartPole-v1", gradient_backend=b, num_envs=2, seed=0), {"torch"}),
    (lambda b: rr.IMPALA("CartPole-v1", gradient_backend=b, num_envs=2, num_steps=8, seed=0), {"torch"}),
    (lambda b: rr.MAPPO("MPE/simple_spread-v3", gradient_backend=b, num_envs=6, num_steps=8, minibatch_size=24,
                        seed=0), {"handwritten", "torch"}),
    (lambda b: rr.DQN("CartPole-v1", gradient_backend=b, **LOGGED_OFF), {"handwritten", "torch"}),
    (lambda b: rr.DQN("CartPole-v1", gradient_backend=b, dueling=True, **LOGGED_OFF), {"torch"}),
    (lambda b: rr.SAC("Pendulum-v1", gradient_backend=b, **LOGGED_OFF), {"handwritten", "torch"}),
    (lambda b: rr.TD3("Pendulum-v1", gradient_backend=b, **LOGGED_OFF), {"handwritten", "torch"}),
    (lambda b: rr.PQN("CartPole-v1", gradient_backend=b, num_envs=4, num_steps=16, minibatch_size=32, seed=0),
     {"torch"}),
    (lambda b: rr.DDPG("Pendulum-v1", gradient_backend=b, **LOGGED_OFF), {"handwritten", "torch"}),
    (lambda b: rr.TQC("Pendulum-v1", gradient_backend=b, n_critics=2, n_quantiles=5, **LOGGED_OFF),
     {"handwritten", "torch"}),
    (lambda b: rr.CrossQ("Pendulum-v1", gradient_backend=b, critic_hidden=(16, 16), **LOGGED_OFF),
     {"handwritten", "torch"}),
    (lambda b: rr.SAC("PointReach-v0", gradient_backend=b, her=True, **LOGGED_OFF), {"handwritten", "torch"}),
    (lambda b: rr.BC(gradient_backend=b, dataset=_offline_data("Pendulum-v1"), **LOGGED_OFFLINE), {"torch"}),
    (lambda b: rr.BC(gradient_backend=b, dataset=_offline_data("CartPole-v1"), **LOGGED_OFFLINE), {"torch"}),
    (lambda b: rr.TD3BC(gradient_backend=b, dataset=_offline_data("Pendulum-v1"), **LOGGED_OFFLINE), {"torch"}),
    (lambda b: rr.IQL(gradient_backend=b, dataset=_offline_data("Pendulum-v1"), **LOGGED_OFFLINE), {"torch"}),
    (lambda b: rr.IQL(gradient_backend=b, dataset=_offline_data("Pendulum-v1"), offline_steps=32, buffer_size=500,
                      **LOGGED_OFFLINE), {"torch"}),
    (lambda b: rr.CQL(gradient_backend=b, dataset=_offline_data("Pendulum-v1"), cql_n_actions=2, **LOGGED_OFFLINE),
     {"torch"}),
    (lambda b: rr.DiscreteCQL(gradient_backend=b, dataset=_offline_data("CartPole-v1"), **LOGGED_OFFLINE), {"torch"}),
    (lambda b: rr.C51("CartPole-v1", gradient_backend=b, n_atoms=5, **LOGGED_OFF), {"handwritten", "torch"}),
    (lambda b: rr.Rainbow("CartPole-v1", gradient_backend=b, n_atoms=5, **LOGGED_OFF), {"torch"}),
    (lambda b: rr.QRDQN("CartPole-v1", gradient_backend=b, n_quantiles=4, **LOGGED_OFF), {"handwritten", "torch"}),
    (lambda b: rr.QRDQN("CartPole-v1", gradient_backend=b, n_quantiles=4, dueling=True, **LOGGED_OFF), {"torch"}),
    (lambda b: rr.IQN("CartPole-v1", gradient_backend=b, num_tau_samples=4, num_tau_prime_samples=4, **LOGGED_OFF),
     {"torch"}),
    (lambda b: rr.SACDiscrete("CartPole-v1", gradient_backend=b, **LOGGED_OFF), {"torch"}),
])
def test_every_algorithms_backends_run_or_are_refused(make, backends):
    """Each backend an algorithm offers trains (its losses are logged: 64 steps give every algorithm at least one
    logged update); the others are refused by name."""
    for backend in ("auto", "handwritten", "torch"):
        if backend != "auto" and backend not in backends:
            with pytest.raises(ConfigError, match=f"gradient_backend='{backend}'"):
                make(backend)
            continue
        model = make(backend)
        assert model.gradient_backend in backends and set(model.paths) >= {"gradient_backend", "collection",
                                                                            "precision"}
        if backend == "auto":
            assert model.gradient_backend == ("handwritten" if "handwritten" in backends else "torch")
        model.learn(64, progress_bar=False)
        losses = [k for k in model.metrics if k.startswith("losses/")]
        assert losses, f"{type(model).__name__} on {backend!r} logged no losses in 64 steps"


@pytest.mark.parametrize("offline_steps, collection", [(None, "dataset"), (8, "dataset+step")])
def test_offline_algorithms_say_where_their_minibatches_come_from(offline_steps, collection):
    model = rr.IQL(dataset=_offline_data("Pendulum-v1"), offline_steps=offline_steps, buffer_size=500,
                   **LOGGED_OFFLINE)
    assert model.paths["collection"].value == collection
    model.learn(16, progress_bar=False)
    assert len(model.buffer) == (0 if offline_steps is None else 8)  # env steps only after the switch


# (env kind, collection) -> the collection that runs, or the error's text: every value PQN's setting accepts
PQN_CASES = {
    ("builtin", "auto"): "fused",
    ("builtin", "fused"): "fused",
    ("builtin", "step"): "step",
    ("builtin", "device"): "collection must be one of 'auto', 'fused', 'step'",
    ("sync", "auto"): "step",
    ("sync", "fused"): "collection='fused' cannot run here: needs an env written as Numba functions",
    ("minatar", "auto"): "step",
    ("minatar", "fused"): "collection='fused' cannot run here",
}


@pytest.mark.parametrize("case", list(PQN_CASES), ids=lambda c: "-".join(c))
def test_every_pqn_collection_runs_or_is_refused(case):
    kind, collection = case
    want = PQN_CASES[case]
    env = "MinAtar/Breakout-v1" if kind == "minatar" else _env(kind)
    make = lambda: rr.PQN(env, collection=collection, **{**SMALL_ON, "hidden": (16,)})  # noqa: E731
    if want not in ("fused", "step"):
        with pytest.raises(ConfigError, match=want):
            make()
        return
    model = make()
    assert model.paths["collection"].value == want
    model.learn(2 * 4 * 16, progress_bar=False)
    assert model.num_updates == 2 and "losses/td_loss" in model.metrics


def test_paths_record_what_else_switches_the_code():
    """Beside the three settings, model.paths records async_collect, recurrent and advantages (on-policy) and acting
    (off-policy); what cannot run together is an error naming it."""
    def values(model):
        return {k: p.value for k, p in model.paths.items()}

    assert values(rr.PPO("CartPole-v1", **SMALL_ON)) == {
        "collection": "fused", "gradient_backend": "handwritten", "precision": "fp32", "async_collect": "off",
        "recurrent": "none", "advantages": "gae"}
    ppo = rr.PPO("CartPole-v1", async_collect=True, vtrace_advantages=True, **SMALL_ON)
    assert (values(ppo)["async_collect"], values(ppo)["advantages"]) == ("thread", "vtrace")
    ppo.async_collector.close()
    assert values(rr.A2C("CartPoleNoVel-v1", recurrent="gru", num_envs=4, hidden=(16,)))["recurrent"] == "gru"
    impala = rr.IMPALA("CartPole-v1", num_envs=4, num_steps=8, hidden=(16, 16), seed=0)
    assert (values(impala)["async_collect"], values(impala)["advantages"]) == ("thread", "vtrace")
    impala.async_collector.close()
    assert values(rr.DQN("CartPole-v1", **SMALL_OFF))["acting"] == "compiled"
    assert values(rr.DQN("CartPole-v1", gradient_backend="torch", **SMALL_OFF))["acting"] == "torch"
    assert values(rr.TD3("Pendulum-v1", **SMALL_OFF))["acting"] == "compiled"
    assert values(rr.TD3("Pendulum-v1", gradient_backend="torch", **SMALL_OFF))["acting"] == "torch"
    with pytest.raises(ConfigError, match="A2C has no asynchronous collection"):
        rr.A2C("CartPole-v1", async_collect=True, num_envs=4)
    torch_env = rr.make_vec("CartPole-v1", 4, seed=0, vectorization="torch")
    with pytest.raises(ConfigError, match=r"device.*supports none of async_collect, V-trace advantages"):
        rr.IMPALA(torch_env, num_envs=4, num_steps=8)


def test_torch_compile_needs_the_torch_backend():
    with pytest.raises(ConfigError, match="torch_compile=True traces the autograd update"):
        rr.SAC("Pendulum-v1", torch_compile=True, gradient_backend="handwritten", **SMALL_OFF)
    assert rr.SAC("Pendulum-v1", torch_compile=True, **SMALL_OFF).gradient_backend == "torch"


def test_legacy_settings_are_upgraded_with_a_warning(tmp_path):
    """Checkpoints and config.toml files written before the path settings keep loading."""
    with pytest.warns(DeprecationWarning, match="closed_form_grads, fused_update replaced by gradient_backend='torch'"):
        model = rr.PPO("CartPole-v1", closed_form_grads=True, fused_update=False, **SMALL_ON)
    assert model.gradient_backend == "torch"
    with pytest.warns(DeprecationWarning, match="fused_rollout replaced by collection='step'"):
        assert rr.PPO("CartPole-v1", fused_rollout="never", **SMALL_ON).paths["collection"].value == "step"
    path = rr.PPO("CartPole-v1", **SMALL_ON).save(tmp_path / "new.pt")
    payload = torch.load(path, weights_only=True)
    config = payload["config"]
    del config["gradient_backend"], config["collection"]
    del config["normalize_advantage"], config["log_every_steps"]
    payload["config"] = {**config, "closed_form_grads": True, "fused_update": True, "fused_rollout": "auto",
                         "norm_adv": "batch", "log_every": 2}
    torch.save(payload, tmp_path / "old.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = rr.PPO.load(tmp_path / "old.pt")
    assert old.gradient_backend == "handwritten" and old.paths["collection"].value == "fused"
    assert old.config.normalize_advantage == "batch" and old.config.log_every_steps == 2 * 16 * 4


@pytest.mark.parametrize("algo, old, new, said", [
    ("ppo", {"norm_adv": "none"}, {"normalize_advantage": "none"}, "norm_adv replaced by normalize_advantage='none'"),
    ("a2c", {"normalize_advantage": True}, {"normalize_advantage": "batch"},
     "normalize_advantage=True replaced by normalize_advantage='batch'"),
    ("impala", {"normalize_advantage": False}, {"normalize_advantage": "none"}, "normalize_advantage=False"),
    ("ppo", {"log_every": 3, "num_steps": 32, "num_envs": 8}, {"log_every_steps": 3 * 32 * 8},
     "log_every replaced by log_every_steps=768"),
    ("ppo", {"log_every": 1}, {"log_every_steps": 0}, "log_every replaced by log_every_steps=0"),
    ("dqn", {"log_interval": 10, "train_freq": 4, "gradient_steps": 2}, {"log_every_steps": 20},
     "log_interval replaced by log_every_steps=20"),  # 10 gradient steps take 20 env steps
    ("sac", {"compile": True}, {"torch_compile": True}, "compile replaced by torch_compile=True"),
    ("ddpg", {"policy_frequency": 1}, {"policy_delay": 1}, "policy_frequency replaced by policy_delay=1"),
])
def test_renamed_settings_are_upgraded_in_kwargs_and_config_files(tmp_path, algo, old, new, said):
    """Each renamed setting (issue 42's one vocabulary) under its old name: the value upgraded, a DeprecationWarning
    naming both, as constructor keywords and in a config file (``rapidrl train --config``)."""
    from rapidrl.algos.registry import get_algorithm
    from rapidrl.runs.config import resolve

    cls = get_algorithm(algo)
    with pytest.warns(DeprecationWarning, match=said):
        config = config_from_dict(cls.config_class, dict(old))
    assert {k: getattr(config, k) for k in new} == new
    env = "Pendulum-v1" if algo in ("sac", "ddpg") else "CartPole-v1"
    with pytest.warns(DeprecationWarning, match=said):
        run = resolve([("test.toml", {"run": {"algo": algo, "env": env}, "algo": dict(old)})])
    assert {k: getattr(run.algo_config, k) for k in new} == new


def test_minibatches_take_none_with_a_warning():
    buffer = rr.RolloutBuffer(2, 2, (1,))
    for _ in range(2):
        buffer.add(np.zeros((2, 1), np.float32), np.zeros(2, np.int64), np.zeros(2), np.zeros(2), np.ones(2),
                   np.zeros(2, bool), np.zeros(2, bool))
    buffer.compute_advantages(np.zeros(2, np.float32), gamma=0.9, lam=0.9)
    with pytest.warns(DeprecationWarning, match='normalize_advantages="none"'):
        (mb,) = list(buffer.minibatches(4, normalize_advantages=None))
    torch.testing.assert_close(mb.advantages.sort().values, buffer.tensors.advantages.reshape(-1).sort().values)


def test_the_docs_table_of_handwritten_backends_is_the_algorithms_declarations():
    """docs/precision.md's table lists, per algorithm, what its "handwritten" backend writes by hand: it is generated
    from each class's ``HandwrittenBackend`` and must stay equal to it; every algorithm with such a backend offers it
    (and only those do)."""
    import re
    from pathlib import Path

    from rapidrl.algos.registry import algorithms
    from rapidrl.train.path_settings import backend_table

    doc = (Path(__file__).resolve().parents[1] / "docs" / "precision.md").read_text()
    shown = re.search(r"<!-- handwritten backends -->\n(.*?)<!-- /handwritten backends -->", doc, re.S).group(1)
    assert shown == backend_table(algorithms())
    listed = set(re.findall(r"^\| `(\w+)` \|", shown, re.M))
    assert listed == {name for name, cls in algorithms().items() if cls.handwritten is not None}
    assert {"ppo", "dqn", "sac", "td3", "ddpg", "tqc", "crossq"} <= listed


def test_the_old_backend_name_compiled_is_upgraded_with_a_warning():
    renamed = "gradient_backend='compiled' replaced by gradient_backend='handwritten'"
    with pytest.warns(DeprecationWarning, match=renamed):
        model = rr.TD3("Pendulum-v1", gradient_backend="compiled", **SMALL_OFF)
    assert model.gradient_backend == "handwritten"
    from rapidrl.algos.ppo import PPOConfig

    with pytest.warns(DeprecationWarning, match="now called 'handwritten'"):
        config = PPOConfig(gradient_backend="compiled")
        config.validate()
    assert config.gradient_backend == "handwritten"
