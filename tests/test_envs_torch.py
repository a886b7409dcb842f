"""TorchVecEnv (PyTorch dynamics) against the Numba envs, on device="cpu"."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rapidrl.envs import BuiltinVecEnv, ClosedEnvError, TorchVecEnv
from rapidrl.envs.classic import CLASSIC_ENVS, get_spec

N = 8
# Numba reproduces Gymnasium's float32 rounding in MountainCarContinuous; torch runs it in float64.
ATOL = {"MountainCarContinuous-v0": 1e-4}


def _actions(spec, rng):
    if spec.action_kind == "discrete":
        return rng.integers(0, spec.action_size, N)
    return rng.uniform(1.5 * spec.action_low, 1.5 * spec.action_high, (N, 1)).astype(np.float32)


@pytest.mark.parametrize("env_id", list(CLASSIC_ENVS))
def test_same_trajectories_as_numba(env_id):
    spec = get_spec(env_id)
    limit = {"Acrobot-v1": 150, "MountainCarContinuous-v0": 300}.get(env_id)  # bound chaotic/f32 drift
    ref = BuiltinVecEnv(env_id, N, seed=0, max_episode_steps=limit)
    env = TorchVecEnv(env_id, N, seed=0, device="cpu", dtype=torch.float64, max_episode_steps=limit)
    ref_obs, _ = ref.reset()
    env.reset()
    for i in range(N):
        torch.testing.assert_close(env.set_state(i, ref.get_state()[:, i]), torch.from_numpy(ref_obs[i]))
    rng = np.random.default_rng(1)
    atol = ATOL.get(env_id, 1e-6)
    episodes = 0
    for t in range(700):
        a = _actions(spec, rng)
        o_ref, r_ref, te_ref, tr_ref, i_ref = ref.step(a)
        o, r, te, tr, info = env.step(torch.from_numpy(a))
        assert o.dtype == torch.float32 and r.dtype == torch.float32 and te.dtype == torch.bool
        msg = f"{env_id} step {t}"
        np.testing.assert_array_equal(te.numpy(), te_ref, err_msg=msg)
        np.testing.assert_array_equal(tr.numpy(), tr_ref, err_msg=msg)
        np.testing.assert_allclose(info["final_obs"].numpy()[te_ref | tr_ref], i_ref["final_obs"][te_ref | tr_ref],
                                   atol=atol, rtol=1e-5, err_msg=msg)
        np.testing.assert_allclose(r.numpy(), r_ref, atol=atol, rtol=1e-5, err_msg=msg)
        done = te_ref | tr_ref
        np.testing.assert_allclose(o.numpy()[~done], o_ref[~done], atol=atol, rtol=1e-5, err_msg=msg)
        np.testing.assert_array_equal(info["_episode"].numpy(), done)
        np.testing.assert_array_equal(info["episode"]["l"].numpy()[done], i_ref["episode"]["l"][done])
        np.testing.assert_allclose(info["episode"]["r"].numpy()[done], i_ref["episode"]["r"][done], rtol=1e-4,
                                   atol=1e-3)
        for i in np.flatnonzero(done).tolist():  # both reset to their own draws: share Numba's
            env.set_state(i, ref.get_state()[:, i])
            episodes += 1
    assert episodes >= 8


@pytest.mark.parametrize("mode", ["same_step", "next_step"])
def test_autoreset_and_episode_stats(mode):
    env = TorchVecEnv("CartPole-v1", 4, seed=3, autoreset_mode=mode, max_episode_steps=30)
    env.reset()
    ret, length, pending, ended = np.zeros(4), np.zeros(4, dtype=int), np.zeros(4, dtype=bool), 0
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        obs, r, te, tr, info = env.step(torch.randint(0, 2, (4,), generator=gen))
        done = (te | tr).numpy()
        if mode == "next_step":
            assert not info["_episode"].numpy()[pending].any() and (r.numpy()[pending] == 0).all()
            assert (obs.numpy()[pending].__abs__() <= 0.05).all()  # a fresh episode's first observation
            ret[pending], length[pending] = 0, 0
            live = ~pending
            ret[live] += r.numpy()[live]
            length[live] += 1
            pending = done
        else:
            ret += r.numpy()
            length += 1
            assert (obs.numpy()[done].__abs__() <= 0.05).all()
        for i in np.flatnonzero(done):
            assert info["episode"]["l"][i].item() == length[i]
            assert info["episode"]["r"][i].item() == pytest.approx(ret[i])
            if mode == "same_step":
                ret[i], length[i] = 0, 0
            ended += 1
    assert ended >= 10


def test_seeding_float32_numpy_actions_and_bad_inputs():
    def run(seed):
        env = TorchVecEnv("Pendulum-v1", 3, seed=seed, dtype=torch.float32)
        out = [env.reset()[0]]
        for _ in range(5):
            out.append(env.step(np.full((3, 1), 0.5, dtype=np.float32))[0])
        return torch.stack(out)

    torch.testing.assert_close(run(1), run(1), rtol=0, atol=0)
    assert not torch.equal(run(1), run(2))
    env = TorchVecEnv("CartPole-v1", 2, seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(torch.zeros(2, dtype=torch.int64))
    env.reset()
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(3, dtype=torch.int64))
    with pytest.raises(TypeError, match="integer"):
        env.step(torch.zeros(2))
    with pytest.raises(ValueError, match="lie in"):
        env.step(torch.tensor([0, 2]))
    with pytest.raises(TypeError):
        env.step([0, 1])
    pend = TorchVecEnv("Pendulum-v1", 2, seed=0)
    pend.reset()
    with pytest.raises(ValueError, match="NaN"):
        pend.step(torch.tensor([[0.0], [float("nan")]]))
    with pytest.raises(ValueError, match="dtype"):
        TorchVecEnv("Pendulum-v1", 2, dtype=torch.int32)
    pend.close()
    with pytest.raises(ClosedEnvError):
        pend.step(torch.zeros(2, 1))
    frames = TorchVecEnv("Acrobot-v1", 2, seed=0, render_mode="rgb_array")
    frames.reset()
    assert frames.render(env_ids=[1]).shape == (1, 500, 500, 3)
