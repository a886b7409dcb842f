"""FrameReplayBuffer against a plain reference that stores full stacked observations.

The streams are synthetic stacked-frame envs whose every frame is unique (the frame's pixels encode env,
episode and step), with random episode lengths, so a stack that mixed episodes, envs or steps would differ from
the reference's stored stack. Resets start with a stack of S distinct frames (not a repeat), as the ALE vector
env's no-op resets can give."""

import numpy as np
import pytest
import torch

from rapidrl.buffers.frame_replay import FrameReplayBuffer

S, H, W = 4, 6, 5


class StackedStream:
    """N envs emitting stacks [N, S, H, W] of unique frames; episodes end after random lengths (1 to 12)."""

    def __init__(self, n: int, seed: int):
        self.n, self.rng = n, np.random.default_rng(seed)
        self.counter = 0
        self.stacks = np.stack([self._reset_stack() for _ in range(n)])
        self.left = self.rng.integers(1, 13, n)

    def _frame(self) -> np.ndarray:
        """A frame no other frame equals: the counter's bytes in the first pixels, random pixels after."""
        self.counter += 1
        frame = self.rng.integers(0, 256, (H, W), dtype=np.uint8)
        frame.flat[:4] = np.frombuffer(np.int32(self.counter).tobytes(), np.uint8)
        return frame

    def _reset_stack(self) -> np.ndarray:
        return np.stack([self._frame() for _ in range(S)])

    def step(self):
        """-> (obs, next_obs stored (final obs at an end), terminated, truncated); advances to the next obs."""
        obs = self.stacks.copy()
        next_obs = np.concatenate([obs[:, 1:], np.stack([self._frame() for _ in range(self.n)])[:, None]], 1)
        self.left -= 1
        done = self.left == 0
        terminated = done & (self.rng.random(self.n) < 0.5)
        truncated = done & ~terminated
        self.stacks = next_obs.copy()
        for e in np.flatnonzero(done):
            self.stacks[e] = self._reset_stack()
            self.left[e] = self.rng.integers(1, 13)
        return obs, next_obs, terminated, truncated


def fill(buf: FrameReplayBuffer, steps: int, seed: int):
    """Add ``steps`` vector steps; returns the reference {(env, slot): (obs, next_obs, action, reward, term,
    trunc)} of the transitions that should still be stored (the last K per env, unless evicted)."""
    stream = StackedStream(buf.num_envs, seed)
    rng = np.random.default_rng(seed + 1)
    ref, written = {}, np.zeros(buf.num_envs, np.int64)
    K = buf.transitions_per_env
    for _ in range(steps):
        obs, next_obs, term, trunc = stream.step()
        actions = rng.integers(0, 6, buf.num_envs)
        rewards = rng.normal(size=buf.num_envs).astype(np.float32)
        buf.add(obs, actions, rewards, next_obs, term, trunc)
        for e in range(buf.num_envs):
            ref[(e, int(written[e] % K))] = (obs[e], next_obs[e], actions[e], rewards[e], term[e], trunc[e])
        written += 1
    return ref


def check_rows(batch, ref, K, gamma):
    for b in range(batch.indices.shape[0]):
        e, k = divmod(int(batch.indices[b]), K)
        obs, next_obs, action, reward, term, trunc = ref[(e, k)]
        np.testing.assert_array_equal(batch.obs[b], obs)
        np.testing.assert_array_equal(batch.next_obs[b], next_obs)
        assert batch.actions[b] == action and batch.rewards[b] == reward
        assert batch.terminated[b] == term and batch.truncated[b] == trunc
        assert batch.discounts[b] == np.float32(0.0 if term else gamma)


@pytest.mark.parametrize("capacity,num_envs", [(60, 3), (400, 4)])
def test_samples_equal_the_full_stack_reference(capacity, num_envs):
    buf = FrameReplayBuffer(capacity, (S, H, W), num_envs=num_envs, gamma=0.9, seed=0)
    ref = fill(buf, 150, seed=1)
    assert 0 < len(buf) <= capacity
    batch = buf.sample(len(buf))
    assert batch.obs.dtype == np.uint8 and batch.obs.shape == (len(buf), S, H, W)
    check_rows(batch, ref, buf.transitions_per_env, 0.9)
    # every stored transition, gathered explicitly, equals the reference
    K = buf.transitions_per_env
    state = buf._state
    envs = np.concatenate([np.full(state[e, 1], e) for e in range(num_envs)])
    slots = np.concatenate([(state[e, 0] - state[e, 1] + np.arange(state[e, 1])) % K for e in range(num_envs)])
    check_rows(buf.gather(envs, slots), ref, K, 0.9)


def test_a_stack_never_holds_frames_of_the_previous_episode():
    """Room for everything (no eviction): all 80 transitions of each env, ~12 episodes each, equal the reference."""
    buf = FrameReplayBuffer(2000, (S, H, W), num_envs=2, seed=0)
    ref = fill(buf, 80, seed=3)
    assert len(buf) == 160 == len(ref)
    batch = buf.gather(np.array([k[0] for k in ref]), np.array([k[1] for k in ref]))
    check_rows(batch, ref, buf.transitions_per_env, 0.99)
    assert batch.terminated.sum() + batch.truncated.sum() > 10


def test_short_episodes_evict_transitions_whose_frames_were_overwritten():
    """Episodes of length 1 need S + 1 frames per transition: the ring (K + 2S frames) keeps fewer than K."""
    buf = FrameReplayBuffer(40, (S, H, W), num_envs=1, seed=0)
    frames = np.arange(1, 1000, dtype=np.int64)
    for t in range(30):
        obs = np.broadcast_to(frames[5 * t: 5 * t + S, None, None], (S, H, W)).astype(np.uint8)[None]
        next_obs = np.concatenate([obs[:, 1:], np.full((1, 1, H, W), frames[5 * t + S] % 256, np.uint8)], 1)
        buf.add(obs, np.array([t]), np.zeros(1), next_obs, np.array([True]), np.array([False]))
    kept = len(buf)
    assert kept == (buf.frames_per_env) // (S + 1)  # 48 frames hold 9 whole 5-frame transitions
    batch = buf.gather(np.zeros(kept, np.int64), (np.arange(30 - kept, 30)) % buf.transitions_per_env)
    np.testing.assert_array_equal(batch.actions, np.arange(30 - kept, 30))
    with pytest.raises(ValueError, match="does not hold a stored transition"):
        buf.gather(np.array([0]), np.array([(30 - kept - 1) % buf.transitions_per_env]))


def test_bytes_per_transition_of_atari_frames():
    buf = FrameReplayBuffer(1_000_000, (4, 84, 84), num_envs=8)
    assert 84 * 84 < buf.bytes_per_transition < 84 * 84 * 1.01  # ~7.08 KB, against 2 * 4 * 84 * 84 = 56 KB
    assert buf.bytes_per_transition * 1_000_000 < 7.1e9


def test_bad_input_is_rejected_before_anything_is_written():
    buf = FrameReplayBuffer(20, (S, H, W), num_envs=2, seed=0)
    obs = np.zeros((2, S, H, W), np.uint8)
    acts, rew, flags = np.zeros(2, np.int64), np.zeros(2), np.zeros(2, bool)
    with pytest.raises(ValueError, match="obs must be a uint8"):
        buf.add(obs.astype(np.float32), acts, rew, obs, flags, flags)
    with pytest.raises(ValueError, match="next_obs must be"):
        buf.add(obs, acts, rew, obs[:1], flags, flags)
    with pytest.raises(ValueError, match="terminated must be a bool"):
        buf.add(obs, acts, rew, obs, np.zeros(2), flags)
    bad = obs.copy()
    bad[0, 2] = 7  # next_obs[:, :-1] != obs[:, 1:]
    with pytest.raises(ValueError, match="consecutive"):
        buf.add(obs, acts, rew, bad, flags, flags)
    assert len(buf) == 0
    buf.add(obs, acts, rew, obs, flags, flags)
    with pytest.raises(ValueError, match="previous next_obs"):
        buf.add(obs + 1, acts, rew, obs + 1, flags, flags)
    assert len(buf) == 2
    with pytest.raises(ValueError, match="larger than"):
        buf.sample(3)
    with pytest.raises(ValueError, match="does not hold"):
        buf.gather(np.array([5]), np.array([0]))


def test_sampling_is_seeded_and_as_torch_is_zero_copy():
    a = FrameReplayBuffer(100, (S, H, W), num_envs=2, seed=5)
    b = FrameReplayBuffer(100, (S, H, W), num_envs=2, seed=5)
    fill(a, 40, seed=2)
    fill(b, 40, seed=2)
    np.testing.assert_array_equal(a.sample(32).indices, b.sample(32).indices)
    t = a.sample(16, as_torch=True)
    assert isinstance(t.obs, torch.Tensor) and t.obs.dtype == torch.uint8
    assert t.obs.data_ptr() == a.sample(16).obs.ctypes.data


def test_kernels_run_as_python_too():
    """The compiled cores and their ``.py_func`` agree (coverage and debugging run the Python versions)."""
    from rapidrl.buffers import frame_replay as fr

    buf = FrameReplayBuffer(60, (S, H, W), num_envs=3, seed=0)
    fill(buf, 30, seed=4)
    envs, slots = np.array([0, 1, 2]), np.array([1, 2, 3])
    compiled = buf.gather(envs, slots)
    out = fr.ReplayBatch(*(np.zeros_like(x) for x in compiled))
    bad = fr._gather_core.py_func(buf._frames, buf._state, buf._slot_frame, buf._actions, buf._rewards,
                                  buf._terminated, buf._truncated, envs, slots, buf.gamma, out.obs, out.actions,
                                  out.rewards, out.next_obs, out.terminated, out.truncated, out.discounts, out.indices)
    assert bad == -1
    for x, y in zip(compiled[:7], out[:7]):
        np.testing.assert_array_equal(x, y)
