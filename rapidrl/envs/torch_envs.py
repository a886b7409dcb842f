"""The five built-in envs in PyTorch: state, observations and actions stay on the device.

``TorchVecEnv`` has the interface of ``BuiltinVecEnv`` (same spaces, params, auto-reset modes, info
layout) but takes and returns ``torch.Tensor``s on ``device``. Every step is a fixed sequence of
batched tensor ops with no host synchronisation (resets are ``torch.where`` over freshly drawn states),
so it suits GPUs and CUDA graphs; pass ``validate_actions=False`` to also skip the action range check,
the one op that reads back a value.

The equations are Gymnasium's, as in the Numba kernels, evaluated in ``dtype`` (default float64 on the
CPU, float32 elsewhere); float32 rounding differs slightly from Gymnasium's (exact only in the Numba
envs). Initial states come from a ``torch.Generator`` on the device seeded with ``seed``.

Interop: observations of the Numba envs reach torch without a copy with ``torch.from_numpy(obs)``;
tensors of this env reach other frameworks (JAX, CuPy, NumPy on CPU) through DLPack
(``jax.dlpack.from_dlpack(obs)``, ``cupy.from_dlpack(obs)``), also without a copy.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from rapidrl.envs import acrobot, cartpole, mountain_car, mountain_car_continuous, pendulum
from rapidrl.envs.base import VecEnvBase
from rapidrl.envs.builtin import get_spec
from rapidrl.kernels import rng
from rapidrl.kernels.validation import check_int

# -- dynamics: state [S, N] (modified in place), actions [N] or [N, A] -> (reward [N], terminated [N]) --


def _cartpole(state, actions, params):
    c = cartpole
    x, x_dot, theta, theta_dot = state
    force = torch.where(actions == 1, c.FORCE_MAG, -c.FORCE_MAG).to(state.dtype)
    costheta, sintheta = torch.cos(theta), torch.sin(theta)
    temp = (force + c.POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / c.TOTAL_MASS
    thetaacc = (c.GRAVITY * sintheta - costheta * temp) / (
        c.LENGTH * (4.0 / 3.0 - c.MASSPOLE * (costheta * costheta) / c.TOTAL_MASS)
    )
    xacc = temp - c.POLEMASS_LENGTH * thetaacc * costheta / c.TOTAL_MASS
    new = torch.stack([x + c.TAU * x_dot, x_dot + c.TAU * xacc, theta + c.TAU * theta_dot,
                       theta_dot + c.TAU * thetaacc])
    state.copy_(new)
    x, theta = state[0], state[2]
    term = (x < -c.X_THRESHOLD) | (x > c.X_THRESHOLD) | (theta < -c.THETA_THRESHOLD) | (theta > c.THETA_THRESHOLD)
    if params[1] != 0.0:
        return -term.to(state.dtype), term
    return torch.ones_like(x), term


def _acrobot_dsdt(a, th1, th2, dth1, dth2):
    m = acrobot
    d1 = m._D1_CONST + m._M2 * (m._D1_INNER + m._D1_COS * torch.cos(th2)) + m._I1 + m._I2
    d2 = m._M2 * (m._LC2**2 + m._D2_COS * torch.cos(th2)) + m._I2
    phi2 = m._PHI2_C * torch.cos(th1 + th2 - math.pi / 2.0)
    phi1 = (m._PHI1_A * (dth2 * dth2) * torch.sin(th2) - m._PHI1_B * dth2 * dth1 * torch.sin(th2)
            + m._PHI1_C * torch.cos(th1 - math.pi / 2) + phi2)
    ddth2 = (a + d2 / d1 * phi1 - m._DD2_C * (dth1 * dth1) * torch.sin(th2) - phi2) / (m._DD2_DEN - d2 * d2 / d1)
    ddth1 = -(d2 * ddth2 + phi1) / d1
    return torch.stack([dth1, dth2, ddth1, ddth2])


def _wrap(x):
    """Gymnasium's ``wrap`` to [-pi, pi] (one turn at most is ever needed after a 0.2 s step)."""
    two_pi = 2 * math.pi
    x = torch.where(x > math.pi, x - two_pi, x)
    return torch.where(x < -math.pi, x + two_pi, x)


def _acrobot(state, actions, params):
    m = acrobot
    a = actions.to(state.dtype) - 1.0
    y = state.clone()
    dt, dt2 = m.DT, m.DT / 2.0
    k1 = _acrobot_dsdt(a, *y)
    k2 = _acrobot_dsdt(a, *(y + dt2 * k1))
    k3 = _acrobot_dsdt(a, *(y + dt2 * k2))
    k4 = _acrobot_dsdt(a, *(y + dt * k3))
    ns = y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    state[0] = _wrap(ns[0])
    state[1] = _wrap(ns[1])
    state[2] = ns[2].clamp(-m.MAX_VEL_1, m.MAX_VEL_1)
    state[3] = ns[3].clamp(-m.MAX_VEL_2, m.MAX_VEL_2)
    term = -torch.cos(state[0]) - torch.cos(state[1] + state[0]) > 1.0
    return torch.where(term, 0.0, -1.0).to(state.dtype), term


def _mountain_car(state, actions, params):
    m = mountain_car
    position, velocity = state
    velocity = velocity + ((actions.to(state.dtype) - 1) * m.FORCE + torch.cos(3 * position) * (-m.GRAVITY))
    velocity = velocity.clamp(-m.MAX_SPEED, m.MAX_SPEED)
    position = (position + velocity).clamp(m.MIN_POSITION, m.MAX_POSITION)
    velocity = torch.where((position == m.MIN_POSITION) & (velocity < 0), 0.0, velocity)
    state[0], state[1] = position, velocity
    term = (position >= m.GOAL_POSITION) & (velocity >= params[1])
    return torch.full_like(position, -1.0), term


def _mountain_car_continuous(state, actions, params):
    m = mountain_car_continuous
    position, velocity = state
    a = actions[:, 0].to(state.dtype)
    force = a.clamp(m.MIN_ACTION, m.MAX_ACTION)
    velocity = (velocity + force * m.POWER - 0.0025 * torch.cos(3 * position)).clamp(-m.MAX_SPEED, m.MAX_SPEED)
    position = (position + velocity).clamp(m.MIN_POSITION, m.MAX_POSITION)
    velocity = torch.where((position == m.MIN_POSITION) & (velocity < 0), 0.0, velocity)
    state[0], state[1] = position, velocity
    term = (position >= m.GOAL_POSITION) & (velocity >= params[1])
    return torch.where(term, 100.0, 0.0).to(state.dtype) - a * a * 0.1, term


def _pendulum(state, actions, params):
    m = pendulum
    th, thdot = state
    u = actions[:, 0].to(torch.float32).clamp(-m.MAX_TORQUE, m.MAX_TORQUE)  # torque terms in float32, as Gymnasium
    an = torch.remainder(th + math.pi, 2 * math.pi) - math.pi
    costs = an * an + 0.1 * (thdot * thdot) + (0.001 * (u * u)).to(state.dtype)
    g = params[1]
    torque = (3.0 / (m.MASS * m.LENGTH**2) * u).to(state.dtype)
    newthdot = thdot + (3 * g / (2 * m.LENGTH) * torch.sin(th) + torque) * m.DT
    newthdot = newthdot.clamp(-m.MAX_SPEED, m.MAX_SPEED)
    state[0], state[1] = th + newthdot * m.DT, newthdot
    return -costs, torch.zeros_like(th, dtype=torch.bool)


# -- observations [N, O] and initial states [S, n] ---------------------------------------------------

def _obs_identity(state):
    return state.T


def _obs_acrobot(state):
    return torch.stack([torch.cos(state[0]), torch.sin(state[0]), torch.cos(state[1]), torch.sin(state[1]),
                        state[2], state[3]], dim=1)


def _obs_pendulum(state):
    return torch.stack([torch.cos(state[0]), torch.sin(state[0]), state[1]], dim=1)


def _uniform(gen, shape, low, high, like):
    return low + (high - low) * torch.rand(shape, generator=gen, device=like.device, dtype=like.dtype)


def _init_uniform4(gen, n, params, like, lo=2):
    return _uniform(gen, (4, n), params[lo], params[lo + 1], like)


def _init_acrobot(gen, n, params, like):
    return _init_uniform4(gen, n, params, like, lo=1).to(torch.float32).to(like.dtype)


def _init_mountain_car(gen, n, params, like):
    return torch.stack([_uniform(gen, (n,), params[2], params[3], like), torch.zeros(n, dtype=like.dtype,
                                                                                       device=like.device)])


def _init_pendulum(gen, n, params, like):
    x, y = params[2], params[3]
    return torch.stack([_uniform(gen, (n,), -x, x, like), _uniform(gen, (n,), -y, y, like)])


_ENVS = {
    "CartPole-v1": (_cartpole, _obs_identity, _init_uniform4),
    "Acrobot-v1": (_acrobot, _obs_acrobot, _init_acrobot),
    "MountainCar-v0": (_mountain_car, _obs_identity, _init_mountain_car),
    "MountainCarContinuous-v0": (_mountain_car_continuous, _obs_identity, _init_mountain_car),
    "Pendulum-v1": (_pendulum, _obs_pendulum, _init_pendulum),
}


class TorchVecEnv(VecEnvBase):
    """N copies of a built-in env as batched PyTorch ops on ``device`` (see the module docstring).

    ``step(actions)`` takes a tensor (or a NumPy array, moved to the device) and returns
    ``(obs, rewards, terminated, truncated, info)`` as tensors on the device: obs float32 [N, O],
    rewards float32 [N], flags bool [N]; ``info`` has BuiltinVecEnv's layout with tensors
    (``episode`` r/l of episodes that ended, ``_episode``, and ``final_obs``/``_final_obs`` in
    SAME_STEP mode). Returned tensors are fresh each step.
    """

    def __init__(self, env_id: str, num_envs: int, *, seed: int | None = None, device="cpu", dtype=None,
                 autoreset_mode="same_step", render_mode: str | None = None, max_episode_steps: int | None = None,
                 validate_actions: bool = True, **env_kwargs):
        spec = get_spec(env_id)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        params = spec.make_params(max_episode_steps, **env_kwargs)
        super().__init__(spec.observation_space(), spec.action_space(), num_envs, autoreset_mode=autoreset_mode,
                         render_mode=render_mode)
        self.spec_builtin = spec
        self.env_id = env_id
        self.device = torch.device(device)
        if dtype is None:
            dtype = torch.float64 if self.device.type == "cpu" else torch.float32
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.dtype = dtype
        self.metadata["render_fps"] = spec.render_fps
        self.max_episode_steps = int(params[0])
        self._params_np = params
        self._params = params.tolist()  # Python floats: no device reads in the step
        self._dynamics, self._observe, self._initial = _ENVS[env_id]
        self._validate = bool(validate_actions)
        self._next_step = self.autoreset_mode == gym.vector.AutoresetMode.NEXT_STEP
        n, dev = self.num_envs, self.device
        self._state = torch.zeros((spec.state_dim, n), dtype=dtype, device=dev)
        self._elapsed = torch.zeros(n, dtype=torch.int32, device=dev)
        self._needs_reset = torch.zeros(n, dtype=torch.bool, device=dev)
        self._ep_return = torch.zeros(n, dtype=torch.float32, device=dev)
        self._ep_length = torch.zeros(n, dtype=torch.int32, device=dev)
        self._gen = torch.Generator(device=dev)
        self._seed(seed)
        self._ready = False

    def _seed(self, seed: int | None) -> None:
        self._gen.manual_seed(rng.seed_to_u64(seed) & ((1 << 63) - 1))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset every env (``seed`` reseeds the device generator); returns (obs tensor, {})."""
        self._check_open()
        if options:
            unknown = set(options) - set(self.spec_builtin.reset_options)
            if unknown:
                raise ValueError(f"reset options must be among {sorted(self.spec_builtin.reset_options)}")
            new = self._params_np.copy()
            for key, value in options.items():
                new[1 + self.spec_builtin.param_names.index(self.spec_builtin.reset_options[key])] = float(value)
            self.spec_builtin.check_params(new)
            self._params_np, self._params = new, new.tolist()
        if seed is not None:
            self._seed(seed)
        self._state.copy_(self._initial(self._gen, self.num_envs, self._params, self._state))
        self._elapsed.zero_()
        self._needs_reset.zero_()
        self._ep_return.zero_()
        self._ep_length.zero_()
        self._ready = True
        return self._observe(self._state).to(torch.float32).contiguous(), {}

    def _to_actions(self, actions) -> torch.Tensor:
        self._check_open()
        if not self._ready:
            raise RuntimeError("call reset() before step()")
        if isinstance(actions, np.ndarray):
            actions = torch.as_tensor(actions, device=self.device)
        if not isinstance(actions, torch.Tensor):
            raise TypeError(f"actions must be a torch.Tensor or numpy.ndarray, got {type(actions).__name__}")
        if actions.device != self.device and not (actions.device.type == self.device.type == "cpu"):
            raise TypeError(f"actions are on {actions.device}, the env on {self.device}")
        want = tuple(self.action_space.shape)
        if tuple(actions.shape) != want:
            raise ValueError(f"actions must have shape {want}, got {tuple(actions.shape)}")
        if self.spec_builtin.action_kind == "discrete":
            if actions.dtype.is_floating_point or actions.dtype.is_complex or actions.dtype == torch.bool:
                raise TypeError(f"actions must have an integer dtype for a Discrete space, got {actions.dtype}")
            if self._validate and bool(((actions < 0) | (actions >= self.spec_builtin.action_size)).any()):
                raise ValueError(f"actions must lie in [0, {self.spec_builtin.action_size})")
        else:
            if not actions.dtype.is_floating_point:
                raise TypeError(f"actions must have a float dtype for a Box space, got {actions.dtype}")
            if self._validate and not bool(torch.isfinite(actions).all()):
                raise ValueError("actions contain NaN or inf")
        return actions

    def step(self, actions):
        """Step all envs (see the class docstring for the returned tensors)."""
        a = self._to_actions(actions)
        p, n = self._params, self.num_envs
        reward, term = self._dynamics(self._state, a, p)
        self._elapsed += 1
        trunc = self._elapsed >= int(p[0])
        if self._next_step:  # envs that ended last step are reset now instead of stepped
            m = self._needs_reset
            fresh = self._initial(self._gen, n, p, self._state)
            self._state.copy_(torch.where(m, fresh, self._state))
            reward = torch.where(m, 0.0, reward)
            term, trunc = term & ~m, trunc & ~m
            self._elapsed.masked_fill_(m, 0)
        reward = reward.to(torch.float32)
        self._ep_return += reward
        self._ep_length += 1
        if self._next_step:
            self._ep_return.masked_fill_(self._needs_reset, 0.0)
            self._ep_length.masked_fill_(self._needs_reset, 0)
        done = term | trunc
        obs = self._observe(self._state).to(torch.float32)
        info = {"episode": {"r": torch.where(done, self._ep_return, 0.0),
                            "l": torch.where(done, self._ep_length, 0)}, "_episode": done}
        if self._next_step:
            self._needs_reset = done.clone()
        else:
            info["final_obs"], info["_final_obs"] = obs, done
            fresh = self._initial(self._gen, n, p, self._state)
            self._state.copy_(torch.where(done, fresh, self._state))
            obs = torch.where(done[:, None], self._observe(self._state).to(torch.float32), obs)
            self._elapsed.masked_fill_(done, 0)
        self._ep_return.masked_fill_(done, 0.0)
        self._ep_length.masked_fill_(done, 0)
        return obs.contiguous(), reward, term, trunc, info

    def get_state(self) -> torch.Tensor:
        """A copy of the [S, N] state tensor (column i = Gymnasium's state vector of env i)."""
        return self._state.clone()

    def set_state(self, i: int, gym_state) -> torch.Tensor:
        """Set env i to Gymnasium's state vector and start a new episode there; returns its observation."""
        self._check_open()
        i = check_int("i", i, low=0, high=self.num_envs - 1)
        self._state[:, i] = torch.as_tensor(np.asarray(gym_state, dtype=np.float64).reshape(-1),
                                            dtype=self.dtype, device=self.device)
        self._elapsed[i] = 0
        self._needs_reset[i] = False
        self._ep_return[i] = 0.0
        self._ep_length[i] = 0
        self._ready = True
        return self._observe(self._state[:, i:i + 1]).to(torch.float32)[0]

    def render(self, env_ids=None):
        """uint8[len(env_ids) or N, H, W, 3] NumPy frames (drawn on the CPU from a copy of the state)."""
        self._check_open()
        if self.render_mode is None:
            gym.logger.warn("render() called without render_mode; use render_mode='rgb_array'")
            return None
        ids = range(self.num_envs) if env_ids is None else [check_int("env_ids[k]", i, low=0,
                                                                      high=self.num_envs - 1) for i in env_ids]
        state = self._state.detach().cpu().numpy()
        return np.stack([self.spec_builtin.render(state[:, i], self._params_np) for i in ids])

    def close_extras(self, **kwargs) -> None:
        self._ready = False
        super().close_extras(**kwargs)

    def __repr__(self) -> str:
        return f"TorchVecEnv({self.env_id}, num_envs={self.num_envs}, device={self.device})"
