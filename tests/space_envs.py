"""Test environments with structured observations, registered as Gymnasium ids on import (shared by the tests
of spaces, of save/load round trips and of the presets)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class Switches(gym.Env):
    """Set each of three switches to the value the observation shows: MultiDiscrete([3, 3, 3]) observations and
    actions, reward = fraction of switches right, 20 steps. A uniform random policy earns 20/3 per episode."""

    def __init__(self, binary: bool = False):
        self.binary = binary
        self.observation_space = gym.spaces.MultiBinary(3) if binary else gym.spaces.MultiDiscrete([3, 3, 3])
        self.action_space = gym.spaces.MultiBinary(3) if binary else gym.spaces.MultiDiscrete([3, 3, 3], start=[1] * 3)

    def _draw(self):
        self.target = self.np_random.integers(0, 2 if self.binary else 3, 3)
        return self.target.astype(np.int8) if self.binary else self.target.copy()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, self.action_space.dtype)), action
        shift = 0 if self.binary else 1  # MultiDiscrete actions start at 1
        reward = float((np.asarray(action) - shift == self.target).sum()) / 3
        self.t += 1
        return self._draw(), reward, False, self.t >= 20, {}


for _id, _kw in (("Switches-v0", {}), ("BinarySwitches-v0", {"binary": True})):
    if _id not in gym.registry:
        gym.register(_id, entry_point=Switches, kwargs=_kw)



class DictCartPole(gym.ObservationWrapper):
    """CartPole whose observation is {"position": [x, theta], "velocity": [x_dot, theta_dot]} (a Dict-observation
    task whose solution needs both keys)."""

    def __init__(self, env):
        super().__init__(env)
        hi = env.observation_space.high
        self.observation_space = gym.spaces.Dict({
            "position": gym.spaces.Box(-hi[[0, 2]], hi[[0, 2]], dtype=np.float32),
            "velocity": gym.spaces.Box(-hi[[1, 3]], hi[[1, 3]], dtype=np.float32)})

    def observation(self, obs):
        return {"position": obs[[0, 2]], "velocity": obs[[1, 3]]}


def _dict_cartpole(**kw):
    return DictCartPole(gym.make("CartPole-v1", **kw))


if "DictCartPole-v1" not in gym.registry:
    gym.register("DictCartPole-v1", entry_point=_dict_cartpole)


class DictPendulum(gym.ObservationWrapper):
    """Pendulum whose observation is {"angle": [cos, sin], "speed": [theta_dot]} (continuous actions)."""

    def __init__(self, env):
        super().__init__(env)
        self.observation_space = gym.spaces.Dict({"angle": gym.spaces.Box(-1, 1, (2,), np.float32),
                                                  "speed": gym.spaces.Box(-8, 8, (1,), np.float32)})

    def observation(self, obs):
        return {"angle": obs[:2], "speed": obs[2:]}


if "DictPendulum-v1" not in gym.registry:
    gym.register("DictPendulum-v1", entry_point=lambda **kw: DictPendulum(gym.make("Pendulum-v1", **kw)))


class ImageSide(gym.Env):
    """Name the side of the picture a bright 3x3 patch is on (action 0 left, 1 right): reward 1 if right, 8 steps
    an episode. Observations {"image": uint8 [1, 10, 10] (the patch and dim noise), "time": [t / 8]}; only the
    image tells the answer (a random policy scores 4 an episode)."""

    observation_space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (1, 10, 10), np.uint8),
                                         "time": gym.spaces.Box(0.0, 1.0, (1,), np.float32)})
    action_space = gym.spaces.Discrete(2)

    def _observe(self):
        self.side = int(self.np_random.integers(2))
        image = self.np_random.integers(0, 40, (1, 10, 10), dtype=np.uint8)
        row, col = int(self.np_random.integers(8)), int(self.np_random.integers(3)) + 5 * self.side
        image[0, row:row + 3, col:col + 3] = 255
        return {"image": image, "time": np.array([self.t / 8], np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        reward = float(int(action) == self.side)
        self.t += 1
        return self._observe(), reward, self.t == 8, False, {}


if "ImageSide-v0" not in gym.registry:
    gym.register("ImageSide-v0", entry_point=ImageSide)


class ImageSideBytes(ImageSide):
    """ImageSide with the step as Discrete(9) and a MultiBinary flag (the side of the previous patch): every part
    fits a byte, so the encoded vector is uint8."""

    observation_space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (1, 10, 10), np.uint8),
                                         "time": gym.spaces.Discrete(9), "last": gym.spaces.MultiBinary(1)})

    def _observe(self):
        last = np.array([getattr(self, "side", 0)], np.int8)
        obs = super()._observe()
        return {"image": obs["image"], "time": self.t, "last": last}


if "ImageSideBytes-v0" not in gym.registry:
    gym.register("ImageSideBytes-v0", entry_point=ImageSideBytes)


class ImageSideContinuous(ImageSide):
    """ImageSide with one continuous action in [-1, 1] (its sign names the side) and the image alone as the
    observation (a uint8 Box): images for the algorithms with continuous actions."""

    observation_space = gym.spaces.Box(0, 255, (1, 10, 10), np.uint8)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def _observe(self):
        return super()._observe()["image"]

    def step(self, action):
        return super().step(int(float(np.asarray(action).reshape(-1)[0]) > 0))


if "ImageSideContinuous-v0" not in gym.registry:
    gym.register("ImageSideContinuous-v0", entry_point=ImageSideContinuous)


class PositionsOnly(gym.ObservationWrapper):
    """Gymnasium's CartPole observing the cart position and the pole angle only (columns 0 and 2; the velocities
    masked): the wrapper form of CartPoleNoVel, written here independently of rapidrl's built-in one."""

    def __init__(self, env):
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Box(box.low[[0, 2]], box.high[[0, 2]], dtype=np.float32)

    def observation(self, obs):
        return obs[[0, 2]]


if "PositionsOnlyCartPole-v1" not in gym.registry:
    gym.register("PositionsOnlyCartPole-v1", entry_point=lambda **kw: PositionsOnly(gym.make("CartPole-v1", **kw)))
