"""Save/load round trips for every algorithm x normalize_obs x normalize_reward x recurrent option x observation kind.

Each combination trains two iterations with a checkpoint after the first (``Checkpointer``, as the CLI writes
them), then:
- every file holds only tensors and plain Python values and loads with ``torch.load(weights_only=True)``;
- the loaded model acts exactly as the trained one (deterministic actions; a recurrent policy's state too);
- the first checkpoint resumes to the end of the run; where the checkpoint holds the env's state (built-in envs)
  the resumed run ends with exactly the parameters, optimizer and normalizer state of the uninterrupted one.
A combination an algorithm cannot train is refused when the model is built, with a clear error.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from checkpoint_checks import assert_plain, same
from space_envs import DictCartPole  # noqa: F401  (registers the test env ids)

import rapidrl as rr
from rapidrl.algos.offpolicy import OffPolicyAlgorithm
from rapidrl.envs import make_vec
from rapidrl.train.checkpoint import Checkpointer, list_checkpoints
from rapidrl.train.config import ConfigError

# observation kinds: (discrete-action env, continuous-action env)
VECTOR = ("CartPole-v1", "Pendulum-v1")
IMAGE = ("MinAtar/Breakout-v1", "ImageSideContinuous-v0")
DICT = ("DictCartPole-v1", "DictPendulum-v1")
DICT_IMAGE = ("ImageSide-v0", None)  # an image beside a vector inside a Dict
KINDS = {"vector": VECTOR, "image": IMAGE, "dict": DICT, "dict_image": DICT_IMAGE}

SMALL = {
    "PPO": dict(num_envs=2, num_steps=8, minibatch_size=8, update_epochs=1, hidden=(16,), recurrent_size=8),
    "A2C": dict(num_envs=2, num_steps=5, hidden=(16,), recurrent_size=8),
    "IMPALA": dict(num_envs=2, num_steps=8, hidden=(16,)),
    "DQN": dict(learning_starts=8, batch_size=8, buffer_size=256, train_freq=4, gradient_steps=2, hidden=(16,),
                target_update_interval=8),
    "SAC": dict(learning_starts=8, batch_size=8, buffer_size=256, hidden=(16,)),
    "TD3": dict(learning_starts=8, batch_size=8, buffer_size=256, hidden=(16,), policy_delay=2),
    "Rainbow": dict(learning_starts=8, batch_size=8, buffer_size=256, train_freq=4, gradient_steps=2, hidden=(16,),
                    target_update_interval=8, n_atoms=5),
    "QRDQN": dict(learning_starts=8, batch_size=8, buffer_size=256, train_freq=4, gradient_steps=2, hidden=(16,),
                  target_update_interval=8, n_quantiles=4),
    "IQN": dict(learning_starts=8, batch_size=8, buffer_size=256, train_freq=4, gradient_steps=2, hidden=(16,),
                target_update_interval=8, num_tau_samples=4, num_tau_prime_samples=4, num_quantile_samples=4),
    "SACDiscrete": dict(learning_starts=8, batch_size=8, buffer_size=256, train_freq=4, gradient_steps=2,
                        hidden=(16,), target_update_interval=8),
}
ON_POLICY = ("PPO", "A2C", "IMPALA")


def iteration_steps(model) -> int:
    c = model.config
    return c.num_envs * (c.num_steps if hasattr(c, "num_steps") else c.train_freq)


def actions(model, obs: np.ndarray):
    """Deterministic actions (and, for a recurrent policy, the next state) for obs [B, ...]."""
    if getattr(getattr(model, "policy", None), "recurrent", False):
        a, state = model.predict(obs, deterministic=True)
        a2, state2 = model.predict(obs, state=state, episode_start=np.zeros(len(obs), bool), deterministic=True)
        return a, state, a2, state2
    return model.predict(obs, deterministic=True)


def round_trip(algo: str, env_id: str, tmp_path, **options) -> None:
    cls = getattr(rr, algo)
    model = cls(env_id, seed=0, **{**SMALL.get(algo, {}), **options})
    step = iteration_steps(model)
    off_policy = isinstance(model, OffPolicyAlgorithm)
    total = 2 * max(step, 16 if off_policy else step)
    total -= total % step
    directory = tmp_path / "checkpoints"
    model.learn(total, callback=Checkpointer(directory, every=total // 2), progress_bar=False)
    (first_step, first), (last_step, last) = list_checkpoints(directory)
    assert (first_step, last_step) == (total // 2, total)
    saved = model.save(tmp_path / "model.pt")
    for path in (first, last, saved):
        assert_plain(torch.load(path, map_location="cpu", weights_only=True), path.name)

    loaded = cls.load(saved)
    env = make_vec(env_id, 4, seed=1, flatten_observations=True)
    obs = np.array(env.reset(seed=1)[0])
    env.close()
    assert same(actions(loaded, obs), actions(model, obs))

    extra = {"include_buffer": True} if off_policy else {}
    resumed = cls.load(first, **extra)
    captured = bool(torch.load(first, weights_only=True)["training"]["env"])
    resumed.learn(total, resume=True, progress_bar=False)
    assert resumed.num_timesteps == total
    if captured:
        assert same(resumed._state(), model._state()), "the resumed run ended elsewhere"
    assert same(actions(resumed, obs), actions(model, obs)) or not captured
    for m in (model, loaded, resumed):
        m.env.close()


def on_policy_cases():
    for algo in ON_POLICY:
        for kind, (discrete, continuous) in KINDS.items():
            for env_id in (discrete, continuous):
                if env_id is None:
                    continue
                for recurrent in ("none", "lstm"):
                    for normalize_obs in (False, True):
                        for normalize_reward in (False, True):
                            yield pytest.param(algo, env_id, recurrent, normalize_obs, normalize_reward,
                                               id=f"{algo}-{kind}-{env_id.split('/')[-1]}-{recurrent}-"
                                                  f"obs{int(normalize_obs)}-rew{int(normalize_reward)}")


def refusal(algo: str, env_id: str, recurrent: str, normalize_obs: bool) -> str | None:
    """The error a combination must be refused with (None: it trains)."""
    if recurrent != "none" and algo == "IMPALA":
        return "no recurrent policies"
    if normalize_obs and env_id in ("MinAtar/Breakout-v1", "ImageSide-v0", "ImageSideContinuous-v0"):
        return "normalize_obs does not apply to image observations"
    return None


@pytest.mark.parametrize("algo, env_id, recurrent, normalize_obs, normalize_reward", list(on_policy_cases()))
def test_on_policy_round_trip(algo, env_id, recurrent, normalize_obs, normalize_reward, tmp_path):
    options = dict(recurrent=recurrent, normalize_obs=normalize_obs, normalize_reward=normalize_reward)
    if algo == "IMPALA":
        options["async_collect"] = True  # its default: the checkpoint holds the rollout in flight
    expected = refusal(algo, env_id, recurrent, normalize_obs)
    if expected is not None:
        with pytest.raises((ConfigError, ValueError), match=expected):
            getattr(rr, algo)(env_id, seed=0, **{**SMALL[algo], **options})
        return
    round_trip(algo, env_id, tmp_path, **options)


@pytest.mark.parametrize("algo", ["PPO", "A2C"])
@pytest.mark.parametrize("env_id", VECTOR)
def test_recurrent_critic_core_round_trip(algo, env_id, tmp_path):
    """The critic's own recurrent layer and MLP heads after the layers (critic_recurrent, head_hidden): the state
    of both layers is saved, acted on and resumed like a single layer's."""
    round_trip(algo, env_id, tmp_path, recurrent="lstm", critic_recurrent=True, head_hidden=(8,), normalize_obs=True)


@pytest.mark.parametrize("normalize_obs", [False, True])
@pytest.mark.parametrize("normalize_reward", [False, True])
@pytest.mark.parametrize("algo", ["MAPPO", "IPPO"])
def test_multi_agent_round_trip(algo, normalize_obs, normalize_reward, tmp_path):
    round_trip(algo, "MPE/simple_spread-v3", tmp_path, num_envs=6, num_steps=8, minibatch_size=24, update_epochs=1,
               hidden=(16,), normalize_obs=normalize_obs, normalize_reward=normalize_reward)


def off_policy_cases():
    for algo in ("DQN", "SAC", "TD3"):
        for kind, (discrete, continuous) in KINDS.items():
            env_id = discrete if algo == "DQN" else continuous
            if env_id is not None:
                yield pytest.param(algo, env_id, {}, id=f"{algo}-{kind}-{env_id.split('/')[-1]}")
    yield pytest.param("DQN", "CartPole-v1", {"prioritized": True}, id="DQN-vector-prioritized")
    yield pytest.param("DQN", "CartPole-v1", {"n_step": 3}, id="DQN-vector-n_step")
    yield pytest.param("SAC", "Pendulum-v1", {"replay_storage": "mmap"}, id="SAC-vector-mmap")
    for kind, (env_id, _) in KINDS.items():  # C51's networks, noise and prioritized n-step replay: DQN's core
        yield pytest.param("Rainbow", env_id, {}, id=f"Rainbow-{kind}-{env_id.split('/')[-1]}")
    for algo in ("QRDQN", "IQN"):  # DQN's collection and replay, their own networks (and IQN's fraction draws)
        for kind, (env_id, _) in KINDS.items():
            yield pytest.param(algo, env_id, {}, id=f"{algo}-{kind}-{env_id.split('/')[-1]}")
    for kind, (env_id, _) in KINDS.items():  # SAC-discrete: an encoder per network, the temperature, its targets
        yield pytest.param("SACDiscrete", env_id, {}, id=f"SACDiscrete-{kind}-{env_id.split('/')[-1]}")


@pytest.mark.parametrize("algo, env_id, options", list(off_policy_cases()))
def test_off_policy_round_trip(algo, env_id, options, tmp_path):
    if algo in ("SAC", "TD3") and env_id in IMAGE:  # MLP networks: images are refused, naming the algorithms
        with pytest.raises(TypeError, match="image observations train with PPO, A2C or DQN"):
            getattr(rr, algo)(env_id, seed=0, **SMALL[algo])
        return
    round_trip(algo, env_id, tmp_path, **options)


@pytest.mark.parametrize("algo", ["SAC", "TD3", "DQN"])
def test_impossible_spaces_are_refused_before_the_replay_is_allocated(algo, monkeypatch):
    """SAC/TD3 on Discrete actions and DQN on Box actions fail on the space, not on a huge allocation."""
    from rapidrl.algos import offpolicy

    def no_allocation(*args, **kwargs):
        raise AssertionError("the replay buffer was sized before the spaces were checked")

    monkeypatch.setattr(offpolicy, "check_replay_fits", no_allocation)
    env_id = "Pendulum-v1" if algo == "DQN" else "CartPole-v1"
    with pytest.raises(TypeError, match="Discrete action space" if algo == "DQN" else "1-D Box action space"):
        getattr(rr, algo)(env_id, buffer_size=10**12)


def test_replay_larger_than_memory_is_a_clear_error_naming_the_remedies():
    with pytest.raises(ConfigError, match=r"buffer_size=1,000,000,000,000 .*replay_storage=\"mmap\""):
        rr.SAC("Pendulum-v1", buffer_size=10**12)


def test_memory_estimate_matches_the_allocated_arrays(tmp_path):
    """storage_bytes (used for the check) equals what the buffers then allocate."""
    from rapidrl.buffers import FrameReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer

    rb = ReplayBuffer(100, (3, 5), (2,), obs_dtype=np.uint8, action_dtype=np.float32)
    assert ReplayBuffer.storage_bytes(100, (3, 5), (2,), obs_dtype=np.uint8, action_dtype=np.float32) == \
        sum(a.nbytes for a in rb.arrays().values())
    per = PrioritizedReplayBuffer(100, (4,))
    assert PrioritizedReplayBuffer.storage_bytes(100, (4,)) == sum(a.nbytes for a in per.arrays().values()) + \
        sum(a.nbytes for a in per._tree.arrays)
    fb = FrameReplayBuffer(64, (4, 8, 8), num_envs=2, storage="mmap", path=tmp_path / "frames")
    assert FrameReplayBuffer.storage_bytes(64, (4, 8, 8), num_envs=2) == \
        sum(getattr(fb, f"_{n}").nbytes for n in fb._ARRAYS)
    assert (tmp_path / "frames" / "frames.npy").is_file()
