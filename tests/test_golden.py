"""Golden runs: short fixed-seed runs of every algorithm and of every path a setting selects, whose final state
(parameters, optimizer moments, normalizers) must not change when code moves.

``tests/golden/runs.json`` holds one recording per CPU it was made on (``capability()``: torch's CPU capability, the
vendor, the features that pick BLAS kernels, torch's version): per run,
a SHA-256 of the final state and, per tensor, its float64 sum and sum of squares. On a CPU with a recording, the
hash must match bit for bit: a refactor keeps training bitwise identical. On another instruction set (float rounding
may differ in the last bits), the sums must agree with every recording to 1e-4 relative: the same mathematics. The
recordings of different CPUs must agree with each other the same way.

One kind of run cannot be compared across CPUs: where the rows drawn depend on values the network computes
(prioritized replay samples by TD error), a last-bit difference eventually draws another row and the runs part
(measured: ``dqn_prioritized_nstep`` ends with sums 100% apart on AVX2 against AVX512, and again under
``ATEN_CPU_CAPABILITY=default``, while the same DQN without prioritization stays within 2e-6). Those runs
(``SAMPLING_FOLLOWS_VALUES``) are held bitwise on each recorded CPU; on a CPU without a recording they must still
train to the same floating-point tensors as recorded, every value finite. The SimBa runs with running observation
statistics (``ROUNDING_AMPLIFIED``) are held the same way: measured 2026-12-07 on one AMD EPYC, the same code under
``ATEN_CPU_CAPABILITY=avx2`` and ``=default`` ends ``td3_simba`` with actor Adam moments up to 2x apart (4,389 times
the tolerance; ``sac_simba`` 22 times), while the SimBa network without the statistics and the MLP with them stay
within it (1.2x and 0.3x of the tolerance).

A deliberate change re-records with

    python tests/test_golden.py            # all runs;  python tests/test_golden.py ppo_tanh sac   (some)

which records this CPU's runs and drops other CPUs' recordings of the runs it records (they are stale; those CPUs
fall back to comparing sums until re-recorded there); the commit message says which runs changed and why that is
correct. ``python tests/test_golden.py --add-this-cpu`` records unchanged code on another CPU beside the existing
recordings, after checking that each run is the same mathematics as theirs.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from tools.cpu_key import capability, fingerprint

GOLDEN = Path(__file__).resolve().parent / "golden" / "runs.json"

# name -> (algorithm, env id ("torch:<id>": the PyTorch env), hyperparameters, env steps). Each path a setting
# selects has a run of its own.
_PPO = dict(num_envs=4, num_steps=32, minibatch_size=64, update_epochs=2, hidden=(32, 32))
RUNS: dict[str, tuple[str, str, dict, int]] = {
    # PPO collection paths x gradient paths
    "ppo_discrete": ("PPO", "CartPole-v1", _PPO, 512),  # fused rollout, compiled epoch
    "ppo_discrete_autograd": ("PPO", "CartPole-v1", {**_PPO, "gradient_backend": "torch"}, 512),
    "ppo_discrete_per_step": ("PPO", "CartPole-v1", {**_PPO, "collection": "step"}, 512),
    "ppo_discrete_shared": ("PPO", "CartPole-v1", {**_PPO, "shared": True}, 512),
    "ppo_discrete_async": ("PPO", "CartPole-v1", {**_PPO, "async_collect": True}, 512),
    "ppo_discrete_vtrace": ("PPO", "CartPole-v1", {**_PPO, "async_collect": True, "vtrace_advantages": True}, 512),
    "ppo_discrete_bf16": ("PPO", "CartPole-v1", {**_PPO, "precision": "bf16"}, 512),
    "ppo_discrete_torch_env": ("PPO", "torch:CartPole-v1", {**_PPO, "collection": "device"}, 512),  # device path
    "ppo_gaussian": ("PPO", "Pendulum-v1", {**_PPO, "normalize_obs": True, "normalize_reward": True}, 512),
    "ppo_gaussian_autograd": ("PPO", "Pendulum-v1", {**_PPO, "gradient_backend": "torch"}, 512),
    "ppo_tanh": ("PPO", "Pendulum-v1", {**_PPO, "squash": "tanh"}, 512),
    "ppo_multidiscrete": ("PPO", "Switches-v0", {**_PPO, "num_steps": 16}, 256),
    "ppo_recurrent": ("PPO", "CartPoleNoVel-v1", {**_PPO, "recurrent": "lstm", "recurrent_size": 16}, 512),
    "ppo_recurrent_gru": ("PPO", "CartPoleNoVel-v1", {**_PPO, "recurrent": "gru", "recurrent_size": 16}, 512),
    "ppo_cnn": ("PPO", "MinAtar/Breakout-v1", {**_PPO, "num_steps": 16, "minibatch_size": 32}, 256),
    "a2c": ("A2C", "CartPole-v1", dict(num_envs=4, hidden=(32, 32)), 400),
    "a2c_recurrent": ("A2C", "CartPoleNoVel-v1", dict(num_envs=4, hidden=(32,), recurrent="gru",
                                                      recurrent_size=16), 400),
    "impala": ("IMPALA", "CartPole-v1", dict(num_envs=4, num_steps=32, hidden=(32, 32)), 512),
    "mappo": ("MAPPO", "MPE/simple_spread-v3", dict(num_envs=6, num_steps=16, minibatch_size=48, update_epochs=2,
                                                    hidden=(32, 32)), 384),
    "ippo": ("IPPO", "MPE/simple_spread-v3", dict(num_envs=6, num_steps=16, minibatch_size=48, update_epochs=2,
                                                  hidden=(32, 32)), 384),
    # off-policy update paths
    "dqn_mlp": ("DQN", "CartPole-v1", dict(learning_starts=64, batch_size=32, train_freq=16, gradient_steps=8,
                                           hidden=(32, 32), buffer_size=2000), 512),
    "dqn_mlp_autograd": ("DQN", "CartPole-v1", dict(learning_starts=64, batch_size=32, train_freq=16,
                                                    gradient_steps=8, hidden=(32, 32), buffer_size=2000,
                                                    dueling=True), 512),
    "dqn_mlp_torch": ("DQN", "CartPole-v1", dict(learning_starts=64, batch_size=32, train_freq=16, gradient_steps=8,
                                                 hidden=(32, 32), buffer_size=2000, gradient_backend="torch"), 512),
    "dqn_prioritized_nstep": ("DQN", "CartPole-v1", dict(learning_starts=64, batch_size=32, train_freq=16,
                                                         gradient_steps=8, hidden=(32, 32), buffer_size=2000,
                                                         prioritized=True, n_step=3), 512),
    "dqn_cnn": ("DQN", "MinAtar/Breakout-v1", dict(learning_starts=64, batch_size=32, train_freq=16,
                                                   gradient_steps=4, buffer_size=2000), 256),
    # C51 and Rainbow (categorical projection; Rainbow's noise from the model's torch_rng)
    "c51": ("C51", "CartPole-v1", dict(learning_starts=64, batch_size=32, train_freq=16, gradient_steps=8,
                                       hidden=(32, 32), buffer_size=2000, n_atoms=11, v_min=0.0, v_max=50.0), 512),
    "rainbow": ("Rainbow", "CartPole-v1", dict(learning_starts=64, batch_size=32, train_freq=16, gradient_steps=8,
                                               hidden=(32, 32), buffer_size=2000, n_atoms=11, v_min=0.0, v_max=50.0,
                                               per_beta_anneal_steps=100), 512),
    "rainbow_cnn": ("Rainbow", "MinAtar/Breakout-v1", dict(learning_starts=64, batch_size=32, train_freq=16,
                                                           gradient_steps=4, buffer_size=2000, n_atoms=11), 256),
    "sac": ("SAC", "Pendulum-v1", dict(learning_starts=64, batch_size=32, hidden=(32, 32), buffer_size=2000), 160),
    "sac_torch": ("SAC", "Pendulum-v1", dict(learning_starts=64, batch_size=32, hidden=(32, 32), buffer_size=2000,
                                             gradient_backend="torch"), 160),
    "td3": ("TD3", "Pendulum-v1", dict(learning_starts=64, batch_size=32, hidden=(32, 32), buffer_size=2000), 160),
    "td3_torch": ("TD3", "Pendulum-v1", dict(learning_starts=64, batch_size=32, hidden=(32, 32), buffer_size=2000,
                                             gradient_backend="torch"), 160),
    # PQN: step and fused collection, LayerNorm MLP and MinAtar CNN
    "pqn": ("PQN", "CartPole-v1", dict(num_envs=4, num_steps=16, minibatch_size=32, update_epochs=2, hidden=(32, 32),
                                       collection="step"), 512),
    "pqn_fused": ("PQN", "CartPole-v1", dict(num_envs=4, num_steps=16, minibatch_size=32, update_epochs=2,
                                             hidden=(32, 32)), 512),
    "pqn_cnn": ("PQN", "MinAtar/Breakout-v1", dict(num_envs=4, num_steps=16, minibatch_size=32, update_epochs=1), 256),
    "ddpg": ("DDPG", "Pendulum-v1", dict(learning_starts=64, batch_size=32, hidden=(32, 32), buffer_size=2000), 160),
    "ddpg_torch": ("DDPG", "Pendulum-v1", dict(learning_starts=64, batch_size=32, hidden=(32, 32), buffer_size=2000,
                                               gradient_backend="torch"), 160),
    "tqc": ("TQC", "Pendulum-v1", dict(learning_starts=64, batch_size=32, hidden=(32, 32), buffer_size=2000,
                                       n_critics=2, n_quantiles=5), 160),  # compiled quantile loss
    "tqc_torch": ("TQC", "Pendulum-v1", dict(learning_starts=64, batch_size=32, hidden=(32, 32), buffer_size=2000,
                                             n_critics=2, n_quantiles=5, gradient_backend="torch"), 160),
    # QR-DQN and IQN (quantile Huber loss shared with TQC; IQN's sampled fractions from the model's torch_rng)
    "qrdqn": ("QRDQN", "CartPole-v1", dict(learning_starts=64, batch_size=32, train_freq=16, gradient_steps=8,
                                           hidden=(32, 32), buffer_size=2000, n_quantiles=8), 512),
    "qrdqn_prioritized_nstep_double": ("QRDQN", "CartPole-v1", dict(learning_starts=64, batch_size=32, train_freq=16,
                                                                    gradient_steps=8, hidden=(32, 32),
                                                                    buffer_size=2000, n_quantiles=8, prioritized=True,
                                                                    n_step=3, double_q=True, dueling=True), 512),
    "iqn": ("IQN", "CartPole-v1", dict(learning_starts=64, batch_size=32, train_freq=16, gradient_steps=8,
                                       hidden=(32, 32), buffer_size=2000, num_tau_samples=8, num_tau_prime_samples=8,
                                       num_quantile_samples=4), 512),
    "iqn_cnn": ("IQN", "MinAtar/Breakout-v1", dict(learning_starts=64, batch_size=32, train_freq=16, gradient_steps=4,
                                                   buffer_size=2000, num_tau_samples=8, num_tau_prime_samples=8,
                                                   num_quantile_samples=4), 256),
    "sac_discrete": ("SACDiscrete", "CartPole-v1", dict(learning_starts=64, batch_size=32, train_freq=4,
                                                        hidden=(32, 32), buffer_size=2000, tau=0.02,
                                                        target_update_interval=1), 320),
    "sac_discrete_cnn": ("SACDiscrete", "MinAtar/Breakout-v1", dict(learning_starts=64, batch_size=32, train_freq=16,
                                                                    gradient_steps=4, buffer_size=2000), 256),
    # SimBa networks, running observation statistics and AdamW (torch backend)
    "sac_simba": ("SAC", "Pendulum-v1", dict(learning_starts=64, batch_size=32, buffer_size=2000, network="simba",
                                             actor_width=16, critic_width=16, critic_blocks=2, normalize_obs=True,
                                             weight_decay=0.01), 160),
    "td3_simba": ("TD3", "Pendulum-v1", dict(learning_starts=64, batch_size=32, buffer_size=2000, network="simba",
                                             actor_width=16, critic_width=16, normalize_obs=True), 160),
    "sac_simbav2": ("SAC", "Pendulum-v1", dict(learning_starts=64, batch_size=32, buffer_size=2000,
                                               network="simbav2", actor_width=16, critic_width=16, critic_blocks=2,
                                               critic_bins=21, normalize_obs=True), 160),
    "td3_simbav2": ("TD3", "Pendulum-v1", dict(learning_starts=64, batch_size=32, buffer_size=2000,
                                               network="simbav2", actor_width=16, critic_width=16, critic_blocks=1,
                                               normalize_obs=True), 160),
    # R2D2: sequence replay with burn-in (uniform; prioritized sequences with a GRU)
    "r2d2": ("R2D2", "CartPoleNoVel-v1", dict(num_envs=4, learning_starts=64, buffer_size=2000, batch_size=8,
                                              sequence_length=8, burn_in=2, n_step=3, hidden=(16,), recurrent_size=8,
                                              target_update_interval=64), 320),
    "r2d2_prioritized_gru": ("R2D2", "CartPoleNoVel-v1", dict(num_envs=4, learning_starts=64, buffer_size=2000,
                                                              batch_size=8, sequence_length=8, burn_in=2, n_step=3,
                                                              hidden=(16,), recurrent_size=8, cell="gru",
                                                              prioritized=True, dueling=True,
                                                              target_update_interval=64), 320),
    "recurrent_sac": ("RecurrentSAC", "PendulumNoVel-v1", dict(num_envs=2, learning_starts=64, buffer_size=2000,
                                                               batch_size=4, sequence_length=6, burn_in=2,
                                                               hidden=(16,), recurrent_size=8, head_hidden=(16, 16)),
                      160),
    "recurrent_td3": ("RecurrentTD3", "PendulumNoVel-v1", dict(num_envs=2, learning_starts=64, buffer_size=2000,
                                                               batch_size=4, sequence_length=6, burn_in=2,
                                                               hidden=(16,), recurrent_size=8, head_hidden=(16, 16)),
                      160),
    "crossq": ("CrossQ", "Pendulum-v1", dict(learning_starts=64, batch_size=32, hidden=(32, 32), buffer_size=2000,
                                             critic_hidden=(32, 32), renorm_warmup_steps=48), 160),  # renorm from 48
    "crossq_torch": ("CrossQ", "Pendulum-v1", dict(learning_starts=64, batch_size=32, hidden=(32, 32),
                                                   buffer_size=2000, critic_hidden=(32, 32), renorm_warmup_steps=48,
                                                   gradient_backend="torch"), 160),  # ReLU + renorm in PyTorch
    # hindsight relabelling (a Box and a Discrete goal task)
    "sac_her": ("SAC", "PointReach-v0", dict(her=True, learning_starts=64, batch_size=32, hidden=(32, 32),
                                             buffer_size=2000), 160),
    "dqn_her": ("DQN", "BitFlipping-v0", dict(her=True, her_goal_selection="episode", learning_starts=64,
                                              batch_size=32, train_freq=16, gradient_steps=8, hidden=(32, 32),
                                              buffer_size=2000), 512),
    # offline algorithms on a dataset of uniform-random actions (_offline_dataset), and IQL's switch to online
    "bc": ("BC", "Pendulum-v1", dict(dataset="golden/pendulum/random-v0", batch_size=32, hidden=(32, 32)), 64),
    "bc_discrete": ("BC", "CartPole-v1", dict(dataset="golden/cartpole/random-v0", batch_size=32, hidden=(32, 32)),
                    64),
    "td3_bc": ("TD3BC", "Pendulum-v1", dict(dataset="golden/pendulum/random-v0", batch_size=32, hidden=(32, 32)), 64),
    "iql": ("IQL", "Pendulum-v1", dict(dataset="golden/pendulum/random-v0", batch_size=32, hidden=(32, 32)), 64),
    "iql_deterministic": ("IQL", "Pendulum-v1", dict(dataset="golden/pendulum/random-v0", batch_size=32,
                                                     hidden=(32, 32), deterministic_actor=True,
                                                     normalize_reward=True), 64),
    "iql_online": ("IQL", "Pendulum-v1", dict(dataset="golden/pendulum/random-v0", batch_size=32, hidden=(32, 32),
                                              offline_steps=32, buffer_size=500, dataset_fraction=0.5), 96),
    "cql": ("CQL", "Pendulum-v1", dict(dataset="golden/pendulum/random-v0", batch_size=32, hidden=(32, 32),
                                       cql_n_actions=3), 64),
    "discrete_cql": ("DiscreteCQL", "CartPole-v1", dict(dataset="golden/cartpole/random-v0", batch_size=32,
                                                        hidden=(32, 32), target_update_gradient_steps=16), 64),
}


def _offline_dataset(dataset_id: str, root: Path) -> None:
    """The golden runs' datasets: 1,000 steps of uniform-random actions (seeded) in the env the id names."""
    from rapidrl.buffers.dataset import collect_episodes, write_dataset
    from rapidrl.envs import make_vec

    if (root / dataset_id).exists():
        return
    env_id = {"golden/pendulum/random-v0": "Pendulum-v1", "golden/cartpole/random-v0": "CartPole-v1"}[dataset_id]
    env = make_vec(env_id, 2, seed=0)
    space, rng = env.single_action_space, np.random.default_rng(0)
    if hasattr(space, "n"):
        act = lambda o: rng.integers(space.n, size=len(o))  # noqa: E731
    else:
        act = lambda o: rng.uniform(space.low, space.high, (len(o), *space.shape)).astype(np.float32)  # noqa: E731
    write_dataset(dataset_id, collect_episodes(env, act, 1000, seed=0), env.single_observation_space, space,
                  env_id=env_id, root=root)


def _register_test_envs() -> None:
    """Test-only env ids some runs use (a MultiDiscrete-action task)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import space_envs  # noqa: F401  (registers Switches-v0)


def final_state(name: str) -> dict:
    """Train run ``name`` from scratch and return its final ``_state()`` (tensors and plain values)."""
    import rapidrl as rr

    _register_test_envs()
    algo, env_id, hyperparameters, steps = RUNS[name]
    threads = torch.get_num_threads()
    saved_root = os.environ.get("MINARI_DATASETS_PATH")
    datasets = tempfile.TemporaryDirectory()
    try:
        if "dataset" in hyperparameters:
            os.environ["MINARI_DATASETS_PATH"] = datasets.name
            _offline_dataset(hyperparameters["dataset"], Path(datasets.name))
        env = env_id
        if env_id.startswith("torch:"):  # the built-in env's PyTorch dynamics (the device collection path)
            env = rr.make_vec(env_id[6:], hyperparameters["num_envs"], seed=0, vectorization="torch")
        model = getattr(rr, algo)(env, seed=0, torch_threads=1, **hyperparameters)
        model.learn(steps, progress_bar=False)
        state = model._state()
        model.env.close()
    finally:
        torch.set_num_threads(threads)
        if saved_root is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = saved_root
        datasets.cleanup()
    return state


SAMPLING_FOLLOWS_VALUES = frozenset({"dqn_prioritized_nstep", "qrdqn_prioritized_nstep_double", "rainbow",
                                     "rainbow_cnn", "r2d2_prioritized_gru"})
"""Runs whose sampled rows depend on computed values: bitwise per CPU, not comparable across CPUs (module doc)."""
ROUNDING_AMPLIFIED = frozenset({"sac_simba", "td3_simba"})
"""Runs that part across instruction sets on one machine (module doc): bitwise per CPU, tensors only across CPUs."""
TENSORS_ONLY_ACROSS_CPUS = SAMPLING_FOLLOWS_VALUES | ROUNDING_AMPLIFIED


def _recordings() -> dict[str, dict]:
    """capability -> {run name -> fingerprint}."""
    return json.loads(GOLDEN.read_text())["recordings"]


def _assert_same_tensors(name: str, got: dict, expected: dict, where: str) -> None:
    """The same floating-point tensors as ``expected``, every sum finite (no NaN/inf reached the state)."""
    assert got["sums"].keys() == expected["sums"].keys(), f"{name}: other tensors than {where}"
    assert np.all(np.isfinite(list(got["sums"].values()))), f"{name}: a tensor of its final state is not finite"


def _assert_same_mathematics(name: str, got: dict, expected: dict, where: str) -> None:
    """Per tensor, the sum of squares within 1e-4 relative, and the sum within 1e-4 of the larger of its size and the
    tensor's norm (sqrt of the sum of squares). Rounding differences scale with the summands, not with their sum: a
    tensor whose entries cancel (an Adam moment of a LayerNorm bias; measured on pqn_cnn: norm 1.38, sums -2.1e-7 on
    an Intel AVX-512 CPU against 1.3e-6 on AMD AVX2) would otherwise be compared on noise."""
    _assert_same_tensors(name, got, expected, where)
    for path, (s, ss) in expected["sums"].items():
        g, gs = got["sums"][path]
        scale = max(abs(s), float(np.sqrt(max(ss, 0.0))))
        assert abs(gs - ss) <= 1e-4 * abs(ss) + 1e-6 and abs(g - s) <= 1e-4 * scale + 1e-6, (
            f"{name}: {path} ({where}): sum {g!r} vs {s!r}, sum of squares {gs!r} vs {ss!r}")


@pytest.mark.parametrize("name", sorted(RUNS))
def test_golden_run(name):
    recordings = _recordings()
    assert any(name in runs for runs in recordings.values()), \
        f"{name} has no recording: python tests/test_golden.py {name}"
    here = recordings.get(capability(), {})
    got = fingerprint(final_state(name))
    if name in here:
        assert got["sha256"] == here[name]["sha256"], f"{name}: training is no longer bitwise identical"
    for cpu, runs in recordings.items():
        if name in runs:  # runs that part across CPUs: their tensors only (module doc)
            check = _assert_same_tensors if name in TENSORS_ONLY_ACROSS_CPUS else _assert_same_mathematics
            check(name, got, runs[name], f"recorded on {cpu}")


def test_the_recordings_of_different_cpus_are_the_same_mathematics():
    recordings = _recordings()
    cpus = sorted(recordings)
    compared = 0
    for i, a in enumerate(cpus):
        for b in cpus[i + 1:]:
            for name in sorted(set(recordings[a]) & set(recordings[b]) - TENSORS_ONLY_ACROSS_CPUS):
                _assert_same_mathematics(name, recordings[b][name], recordings[a][name], f"{b} against {a}")
                compared += 1
    assert len(cpus) < 2 or compared > 0


def record(names: list[str], keep_other_cpus: bool = False) -> None:
    """Record ``names`` on this CPU. A change drops other CPUs' recordings of them (stale); ``keep_other_cpus`` adds
    this CPU's recording beside theirs, once each run is the same mathematics as theirs (unchanged code)."""
    recordings = _recordings() if GOLDEN.is_file() else {}
    here = recordings.setdefault(capability(), {})
    for name in names:
        here[name] = fingerprint(final_state(name))
        for cpu, runs in recordings.items():
            if cpu == capability() or name not in runs:
                continue
            if not keep_other_cpus:
                runs.pop(name)
            else:
                check = _assert_same_tensors if name in TENSORS_ONLY_ACROSS_CPUS else _assert_same_mathematics
                check(name, here[name], runs[name], f"recorded on {cpu}")
        print(f"{name}: {here[name]['sha256'][:16]}")
    recordings = {cpu: dict(sorted(runs.items())) for cpu, runs in sorted(recordings.items()) if runs}
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps({"recordings": recordings}, indent=1) + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    keep = "--add-this-cpu" in args
    names = [a for a in args if a != "--add-this-cpu"]
    record(names or sorted(RUNS), keep_other_cpus=keep)
