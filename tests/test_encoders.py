"""CNN encoders and the policies built on them: selection from the observation space, uint8 scaling inside the
network, memory-format equivalence, PPO/A2C/DQN with CNNs (uint8 storage, autograd path, async collection,
save/load), and the MLP paths left as they were."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import rapidrl as rr
from rapidrl.nn.encoders import MinAtarCNN, NatureCNN, encoder_for, make_encoder
from rapidrl.nn.policies import ActorCritic
from rapidrl.nn.qnets import QNetwork
from rapidrl.train.collect.step import normalized

ATARI = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
MINATAR = gym.spaces.Box(0, 1, (4, 10, 10), np.uint8)
VECTOR = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def test_encoder_for_picks_from_the_space_and_honours_overrides():
    assert encoder_for(ATARI) == "nature"
    assert encoder_for(MINATAR) == "minatar"
    assert encoder_for(VECTOR) == "mlp"
    assert encoder_for(gym.spaces.Box(0, 1, (4, 10, 10), np.float32)) == "mlp"  # not uint8: not an image
    assert encoder_for(ATARI, "minatar") == "minatar"
    assert encoder_for(MINATAR, "mlp") == "mlp"
    with pytest.raises(ValueError, match="encoder must be one of"):
        encoder_for(ATARI, "resnet")
    with pytest.raises(ValueError, match=r"\[C, H, W\]"):
        encoder_for(VECTOR, "nature")
    with pytest.raises(ValueError, match="too small"):
        NatureCNN((4, 10, 10))


def test_cnn_shapes_and_layers():
    nature = make_encoder(ATARI, "nature")
    assert isinstance(nature, NatureCNN) and nature.scale == pytest.approx(1 / 255)
    convs = [m for m in nature.convs if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size[0], c.stride[0]) for c in convs] == [(32, 8, 4), (64, 4, 2), (64, 3, 1)]
    assert nature.fc[0].in_features == 64 * 7 * 7 and nature.out_dim == 512
    x = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    assert nature(x).shape == (3, 512)
    minatar = make_encoder(MINATAR, "minatar")
    assert isinstance(minatar, MinAtarCNN) and minatar.scale == 1.0
    assert minatar.fc[0].in_features == 16 * 8 * 8 and minatar.out_dim == 128
    assert minatar(torch.randint(0, 2, (5, 4, 10, 10), dtype=torch.uint8)).shape == (5, 128)


def test_uint8_input_equals_the_scaled_float_input():
    """The network's own scaling: uint8 frames in == float frames divided by 255 into an unscaled copy."""
    torch.manual_seed(0)
    scaled = NatureCNN((4, 84, 84))
    plain = NatureCNN((4, 84, 84), scale=1.0)
    plain.load_state_dict(scaled.state_dict())
    x = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(scaled(x), plain(x.float() / 255.0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls,shape", [(NatureCNN, (4, 84, 84)), (MinAtarCNN, (4, 10, 10))])
def test_channels_last_and_contiguous_compute_the_same(cls, shape):
    a, b = cls(shape, channels_last=True), cls(shape, channels_last=False)
    b.load_state_dict(a.state_dict())
    x = torch.randint(0, 2, (3, *shape), dtype=torch.uint8)
    torch.testing.assert_close(a(x), b(x), rtol=1e-4, atol=1e-5)
    a(x).sum().backward()
    b(x).sum().backward()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, rtol=1e-4, atol=1e-5)
        assert pa.grad.is_contiguous()  # rapidrl.nn.optim's Adam step reads flat gradient views


def test_channels_last_input_on_the_cpu_only():
    """The first convolution sees a channels-last input on the CPU (measured faster there) and a contiguous one on
    any other device (measured slower on CUDA); the meta device stands in for the GPU."""
    seen = []
    for device in ("cpu", "meta"):
        net = NatureCNN((4, 84, 84)).to(device)
        net.convs[0].register_forward_pre_hook(lambda m, args: seen.append(
            (args[0].device.type, args[0].is_contiguous(memory_format=torch.channels_last),
             args[0].is_contiguous())))
        net(torch.zeros((2, 4, 84, 84), dtype=torch.uint8, device=device))
    assert seen == [("cpu", True, False), ("meta", False, True)]


def test_actor_critic_with_a_cnn_trunk():
    policy = ActorCritic(MINATAR, gym.spaces.Discrete(3))
    assert policy.encoder_kind == "minatar" and policy.shared and policy.input_dtype == np.uint8
    assert isinstance(policy.trunk, MinAtarCNN)
    obs = torch.randint(0, 2, (6, 4, 10, 10), dtype=torch.uint8)
    actions, logp, values = policy.act(obs)
    assert actions.shape == logp.shape == values.shape == (6,)
    new_logp, entropy, new_values = policy.evaluate(obs, actions)
    assert entropy.shape == (6,) and bool((entropy > 0).all())
    torch.testing.assert_close(new_logp, logp)
    torch.testing.assert_close(new_values, values)
    torch.testing.assert_close(policy.value(obs), values)
    mlp = ActorCritic(MINATAR, gym.spaces.Discrete(3), encoder="mlp")
    assert mlp.encoder_kind == "mlp" and mlp.input_dtype == np.float32 and mlp.obs_dim == 400


def test_normalized_passes_uint8_frames_through_without_a_copy():
    obs = np.zeros((2, 4, 10, 10), np.uint8)
    assert normalized(None, obs, np.uint8) is obs
    assert normalized(None, obs).dtype == np.float32


def test_qnetwork_with_a_cnn_plain_and_dueling():
    for dueling in (False, True):
        q = QNetwork(0, 5, (64,), dueling=dueling, encoder=make_encoder(MINATAR, "minatar"))
        out = q(torch.randint(0, 2, (7, 4, 10, 10), dtype=torch.uint8))
        assert out.shape == (7, 5)
        assert len(q.state_dict()) == len(set(q.state_dict()))
        assert sum(p.numel() for p in q.parameters()) == 16 * 4 * 9 + 16 + 1024 * 128 + 128 + (
            128 * 6 + 6 if dueling else 128 * 5 + 5)


def _predict_same(model, cls, tmp_path, obs):
    path = model.save(tmp_path / "m.pt")
    loaded = cls.load(path)
    np.testing.assert_array_equal(model.predict(obs, deterministic=True), loaded.predict(obs, deterministic=True))


@pytest.mark.parametrize("async_collect", [False, True])
def test_ppo_cnn_on_minatar_trains_with_uint8_storage(tmp_path, async_collect):
    model = rr.PPO("MinAtar/Breakout-v1", num_envs=4, num_steps=16, minibatch_size=32, update_epochs=2, seed=0,
                   async_collect=async_collect)
    assert model.policy.encoder_kind == "minatar"
    assert model.paths["collection"].value == "step"  # the fused MLP collector does not apply
    model.learn(256, progress_bar=False)
    assert model.buffer.obs.dtype == np.uint8 and model.buffer.obs.shape == (16, 4, 4, 10, 10)
    assert set(np.unique(model.buffer.obs)) <= {0, 1} and model.buffer.obs.any()
    assert model.gradient_backend == "torch" and model.paths["collection"].value == "step"
    obs, _ = rr.make_vec("MinAtar/Breakout-v1", 3, seed=1).reset(seed=1)
    _predict_same(model, rr.PPO, tmp_path, obs)


def test_ppo_cnn_is_deterministic_given_the_seed():
    runs = []
    for _ in range(2):
        m = rr.PPO("MinAtar/Breakout-v1", num_envs=2, num_steps=8, minibatch_size=8, update_epochs=1, seed=3)
        m.learn(32, progress_bar=False)
        runs.append([p.detach().clone() for p in m.policy.parameters()])
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a2c_cnn_on_minatar():
    model = rr.A2C("MinAtar/Breakout-v1", num_envs=4, num_steps=5, seed=0)
    model.learn(100, progress_bar=False)
    assert model.policy.encoder_kind == "minatar" and model.buffer.obs.dtype == np.uint8


@pytest.mark.parametrize("dueling", [False, True])
def test_dqn_cnn_on_minatar(tmp_path, dueling):
    model = rr.DQN("MinAtar/Breakout-v1", seed=0, learning_starts=64, train_freq=4, gradient_steps=1, batch_size=16,
                   buffer_size=1000, dueling=dueling)
    assert model.q_net.has_encoder and model._q_grad is None and model._acting_forward is None
    assert model.gradient_backend == "torch"
    assert model.buffer.arrays()["obs"].dtype == np.uint8
    model.learn(200, progress_bar=False)
    assert model.num_gradient_steps > 0
    obs, _ = rr.make_vec("MinAtar/Breakout-v1", 3, seed=1).reset(seed=1)
    _predict_same(model, rr.DQN, tmp_path, obs)


def test_mlp_paths_are_unchanged():
    ppo = rr.PPO("CartPole-v1", num_envs=4, num_steps=8, minibatch_size=32, seed=0)
    assert ppo.policy.encoder_kind == "mlp" and ppo.paths["collection"].value == "fused"
    assert ppo.gradient_backend == "handwritten"
    assert ppo.buffer.obs.dtype == np.float32
    dqn = rr.DQN("CartPole-v1", seed=0)
    assert not dqn.q_net.has_encoder and dqn._q_grad is not None and dqn.buffer.arrays()["obs"].dtype == np.float32
    assert dqn.gradient_backend == "handwritten"
    with pytest.raises(ValueError, match="encoder must be one of"):
        rr.PPO("CartPole-v1", encoder="resnet")
    with pytest.raises(ValueError, match="normalize_obs"):
        rr.PPO("MinAtar/Breakout-v1", num_envs=2, normalize_obs=True)
