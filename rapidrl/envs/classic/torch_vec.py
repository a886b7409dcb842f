"""The classic-control envs in PyTorch: state, observations and actions stay on the device.

``TorchVecEnv`` has the interface of ``NumbaVecEnv`` (same spaces, params, auto-reset modes, info
layout) but takes and returns ``torch.Tensor``s on ``device``. Every step is a fixed sequence of
batched tensor ops with no host synchronisation (resets are ``torch.where`` over freshly drawn states),
so it suits GPUs and CUDA graphs; pass ``validate_actions=False`` to also skip the action range check,
the one op that reads back a value.

The equations are Gymnasium's, as in the Numba functions (each env module of ``rapidrl.envs.classic`` holds both:
``torch_step``, ``torch_observe``, ``torch_initial``), evaluated in ``dtype`` (default float64 on the
CPU, float32 elsewhere); float32 rounding differs slightly from Gymnasium's (exact only in the Numba
envs). Initial states come from a ``torch.Generator`` on the device seeded with ``seed``.

Interop: observations of the Numba envs reach torch without a copy with ``torch.from_numpy(obs)``;
tensors of this env reach other frameworks (JAX, CuPy, NumPy on CPU) through DLPack
(``jax.dlpack.from_dlpack(obs)``, ``cupy.from_dlpack(obs)``), also without a copy.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rapidrl._device import resolve_device
from rapidrl.envs.classic import get_spec, module
from rapidrl.envs.core.actions import check_torch_actions
from rapidrl.envs.core.base import VecEnvBase
from rapidrl.kernels import rng
from rapidrl.kernels.validation import check_int


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
        super().__init__(spec.observation_space, spec.action_space, num_envs, autoreset_mode=autoreset_mode,
                         render_mode=render_mode)
        self.definition = spec
        self.env_id = env_id
        self.device = resolve_device(device)
        if dtype is None:
            dtype = torch.float64 if self.device.type == "cpu" else torch.float32
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.dtype = dtype
        self.metadata["render_fps"] = spec.render_fps
        self.max_episode_steps = int(params[0])
        self._params_np = params
        self._params = params.tolist()  # Python floats: no device reads in the step
        m = module(env_id)
        self._dynamics, self._observe, self._initial = m.torch_step, m.torch_observe, m.torch_initial
        self.validate_actions = bool(validate_actions)
        """Whether ``step`` checks action values (the one check that reads back from the device)."""
        self._next_step = self.autoreset_mode == gym.vector.AutoresetMode.NEXT_STEP
        n, dev = self.num_envs, self.device
        self._state = torch.zeros(spec.batch_state_shape(n), dtype=dtype, device=dev)
        self._elapsed = torch.zeros(n, dtype=torch.int32, device=dev)
        self._needs_reset = torch.zeros(n, dtype=torch.bool, device=dev)
        self._ep_return = torch.zeros(n, dtype=torch.float32, device=dev)
        self._ep_length = torch.zeros(n, dtype=torch.int32, device=dev)
        self._gen = torch.Generator(device=dev)
        self._seed(seed)
        self._ready = False

    @property
    def generator(self) -> torch.Generator:
        """The device generator the resets draw from (a CUDA graph registers it to advance on every replay)."""
        return self._gen

    def _seed(self, seed: int | None) -> None:
        self._gen.manual_seed(rng.seed_to_u64(seed) & ((1 << 63) - 1))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset every env (``seed`` reseeds the device generator); returns (obs tensor, {})."""
        self._check_open()
        if options:
            unknown = set(options) - set(self.definition.reset_params)
            if unknown:
                raise ValueError(f"reset options must be among {sorted(self.definition.reset_params)}")
            new = self._params_np.copy()
            slices = self.definition.param_slices()
            for key, value in options.items():
                new[slices[key]] = float(value)
            if self.definition.check_params is not None:
                self.definition.check_params(new)
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
        return check_torch_actions(actions, self.single_action_space, self.num_envs, self.device, self.validate_actions)

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
        return np.stack([self.definition.render(state[:, i], self._params_np) for i in ids])

    def close_extras(self, **kwargs) -> None:
        self._ready = False
        super().close_extras(**kwargs)

    def __repr__(self) -> str:
        return f"TorchVecEnv({self.env_id}, num_envs={self.num_envs}, device={self.device})"
