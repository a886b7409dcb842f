"""MuJoCo continuous control, batched: Gymnasium's v5 tasks on one ``MjModel`` and N ``MjData``.

``MujocoVecEnv("HalfCheetah-v5", N)`` steps all N simulations per call (``mj_step`` with the task's frame skip,
then ``mj_rnePostConstraint``, exactly Gymnasium's ``MujocoEnv.do_simulation``) in one compiled loop per chunk of
envs that calls libmujoco through ctypes and holds no GIL, including the copies of the fields the task reads
(``_batch_stepper``; the ``mujoco`` bindings' ``mj_step`` holds the GIL), chunks spread over a thread pool, and
computes observations, rewards, terminations and the info reward terms of all envs at once in NumPy, in the
order Gymnasium's ``*_v5.py`` computes them, so that they are equal to Gymnasium's
(``tests/test_envs_mujoco.py`` compares every step of every task).

Tasks: HalfCheetah, Hopper, Walker2d, Ant, Humanoid, InvertedPendulum, InvertedDoublePendulum, Reacher,
Swimmer, Pusher (``-v5``). Each task's v5 keyword arguments (``ctrl_cost_weight``, ``reset_noise_scale``,
``frame_skip``, healthy ranges, observation switches, ...) are accepted with Gymnasium's defaults; an unknown
one is a ValueError naming the accepted ones.

Randomness: env ``i`` owns ``numpy.random.default_rng(seed + i)``, the generator Gymnasium's env has after
``reset(seed=seed + i)`` (what ``gymnasium.vector`` does), and draws its reset noise from it in Gymnasium's
order, so resets, the first and every later one (autoreset), equal Gymnasium's.

Outputs follow ``rapidrl.envs.VecEnvBase``: obs float64 ``[N, obs_dim]`` (the v5 observation dtype), rewards
float32 ``[N]``, autoreset in both modes (SAME_STEP: ``info["final_obs"]``; NEXT_STEP: the step after an episode
end resets the env, its action ignored), and per-step reward terms as float64 ``[N]`` arrays in ``info``
(``reward_forward``, ``reward_ctrl``, ``x_velocity``, ...; the terms of the final step for envs that reset in this
step). Episodes are truncated at the registered ``max_episode_steps`` (1000; Reacher 50, Pusher 100), as
``gymnasium.make``'s ``TimeLimit`` does; the time limit, the episode statistics and the autoreset flags are the
env core's (``VecEnvBase._record``).
"""

from __future__ import annotations

import ctypes
import functools
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from rapidrl._system import usable_cpu_count
from rapidrl.envs.core.base import VecEnvBase
from rapidrl.envs.core.seeding import env_generators

__all__ = ["MUJOCO_TASKS", "NOVEL_TASKS", "MujocoVecEnv", "is_mujoco_id", "make_novel", "mujoco_available",
           "register_novel"]


def mujoco_available() -> bool:
    """True when the ``mujoco`` package imports (the ``mujoco`` extra)."""
    try:
        import mujoco  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _c_library():
    """libmujoco through ctypes, whose calls release the GIL (the ``mujoco`` bindings' ``mj_step`` holds it:
    two Python threads stepping MjData ran no faster than one). None where the library or the objects'
    ``_address`` are not found; the bindings are used then."""
    import mujoco

    found = sorted(Path(mujoco.__file__).parent.glob("libmujoco.so*")) + \
        sorted(Path(mujoco.__file__).parent.glob("libmujoco*.dylib"))
    if not found or not hasattr(mujoco.MjData, "_address"):
        return None
    try:
        lib = ctypes.CDLL(str(found[0]))
    except OSError:
        return None
    for name in ("mj_step", "mj_rnePostConstraint"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        getattr(lib, name).restype = None
    return lib


@functools.cache
def _batch_stepper():
    """A compiled step of envs [lo, hi) that holds no GIL from start to end, or None without ``_c_library()``.

    For each env: copy its control in, ``frame_skip`` x ``mj_step``, ``mj_rnePostConstraint``, copy the task's
    fields out into the batch arrays: the calls of the Python loop, in the same order (results are identical), as
    C calls from compiled code through ctypes function pointers (libmujoco's, and ``ctypes.memmove`` for the
    copies) that take addresses as uint64.

    Safety: every address is taken from an array that the env owns for its whole life and never reallocates (the
    ``MjData`` objects and their fields, the batch arrays ``s``, the float64 control buffer); the env computes the
    address tables once, when it is built. Envs [lo, hi) touch only their own ``MjData`` and rows, so threads given
    disjoint ranges never write the same memory.
    """
    lib = _c_library()
    if lib is None:
        return None
    import numba

    u64 = ctypes.c_uint64
    call2 = ctypes.CFUNCTYPE(None, u64, u64)
    mj_step = call2(ctypes.cast(lib.mj_step, ctypes.c_void_p).value)
    rne = call2(ctypes.cast(lib.mj_rnePostConstraint, ctypes.c_void_p).value)
    memmove = ctypes.CFUNCTYPE(u64, u64, u64, u64)(ctypes.cast(ctypes.memmove, ctypes.c_void_p).value)

    @numba.njit(nogil=True)
    def step_range(model, datas, ctrl_src, ctrl_dst, ctrl_bytes, field_src, field_dst, field_bytes, skip, lo, hi):
        for i in range(lo, hi):
            memmove(ctrl_dst[i], ctrl_src[i], ctrl_bytes)
            for _ in range(skip):
                mj_step(model, datas[i])
            rne(model, datas[i])
            for k in range(field_bytes.shape[0]):
                memmove(field_dst[i, k], field_src[i, k], field_bytes[k])

    return step_range


def _assets() -> Path:
    import gymnasium.envs.mujoco

    return Path(gymnasium.envs.mujoco.__file__).parent / "assets"


def _sum_sq(x: np.ndarray) -> np.ndarray:
    """Row sums of squares: x [N, ...] -> [N] in x's dtype (``np.sum(np.square(row))`` for each row)."""
    return np.square(x).reshape(len(x), -1).sum(axis=1)


def _norm(v: np.ndarray) -> np.ndarray:
    """Euclidean norm of each row (``np.linalg.norm(row)`` for each row)."""
    return np.array([np.linalg.norm(row) for row in v])


# -- tasks ---------------------------------------------------------------------------------------------
class Task:
    """One v5 task: its model file, frame skip, keyword arguments and batched observation/reward code.

    ``fields`` are the MjData arrays gathered after every step into ``s[name]`` ``[N, *shape]``; ``observe``,
    ``before`` and ``step`` read them. ``p`` holds the resolved keyword arguments.
    """

    xml = ""
    frame_skip = 5
    max_episode_steps = 1000
    defaults: ClassVar[dict] = {}
    fields: tuple[str, ...] = ("qpos", "qvel")

    def __init__(self, model, kwargs: dict):
        unknown = sorted(set(kwargs) - set(self.defaults) - {"xml_file", "frame_skip"})
        if unknown:
            raise ValueError(f"{type(self).__name__}: unknown keyword argument(s) {unknown}; accepted: "
                             f"{[*sorted(self.defaults), 'frame_skip', 'xml_file']}")
        self.p = {**self.defaults, **{k: v for k, v in kwargs.items() if k in self.defaults}}
        self.model = model

    def obs_dim(self, s: dict) -> int:
        return self.observe(s, slice(0, 1)).shape[1]

    def observe(self, s: dict, rows) -> np.ndarray:
        raise NotImplementedError

    def before(self, s: dict) -> np.ndarray | None:
        """What the reward needs from before the step (positions), copied."""
        return None

    def step(self, s: dict, before, actions: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray, dict]:
        """(reward float64 [N], terminated bool [N], info terms {name: float64 [N]}) after the step."""
        raise NotImplementedError

    def reset_state(self, rng: np.random.Generator, init_qpos: np.ndarray, init_qvel: np.ndarray):
        """Initial (qpos, qvel) of one env, drawn from its generator in Gymnasium's order."""
        noise = self.p["reset_noise_scale"]
        qpos = init_qpos + rng.uniform(low=-noise, high=noise, size=self.model.nq)
        qvel = init_qvel + rng.uniform(low=-noise, high=noise, size=self.model.nv)
        return qpos, qvel


def _gaussian_qvel_reset(self, rng, init_qpos, init_qvel):
    """Uniform qpos noise, Gaussian qvel noise (HalfCheetah, Ant, InvertedDoublePendulum)."""
    noise = self.p["reset_noise_scale"]
    qpos = init_qpos + rng.uniform(low=-noise, high=noise, size=self.model.nq)
    qvel = init_qvel + noise * rng.standard_normal(self.model.nv)
    return qpos, qvel


class HalfCheetah(Task):
    xml, frame_skip = "half_cheetah.xml", 5
    defaults: ClassVar[dict] = dict(forward_reward_weight=1.0, ctrl_cost_weight=0.1, reset_noise_scale=0.1,
                    exclude_current_positions_from_observation=True)
    reset_state = _gaussian_qvel_reset

    def observe(self, s, rows):
        skip = int(self.p["exclude_current_positions_from_observation"])
        return np.concatenate([s["qpos"][rows, skip:], s["qvel"][rows]], axis=1)

    def before(self, s):
        return s["qpos"][:, 0].copy()

    def step(self, s, before, actions, dt):
        x = s["qpos"][:, 0]
        x_velocity = (x - before) / dt
        forward = self.p["forward_reward_weight"] * x_velocity
        ctrl = self.p["ctrl_cost_weight"] * _sum_sq(actions)
        info = {"x_position": x.copy(), "x_velocity": x_velocity, "reward_forward": forward, "reward_ctrl": -ctrl}
        return forward - ctrl, np.zeros(len(x), bool), info


class _Planar(Task):
    """Hopper and Walker2d: forward reward + healthy reward - control cost, velocities clipped to +-10."""

    def __init__(self, model, kwargs):
        super().__init__(model, kwargs)
        self.init_z = float(model.qpos0[1])  # z_distance_from_origin is measured from the initial height

    def observe(self, s, rows):
        skip = int(self.p["exclude_current_positions_from_observation"])
        return np.concatenate([s["qpos"][rows, skip:], np.clip(s["qvel"][rows], -10, 10)], axis=1)

    def before(self, s):
        return s["qpos"][:, 0].copy()

    def healthy(self, s) -> np.ndarray:
        raise NotImplementedError

    def step(self, s, before, actions, dt):
        qpos = s["qpos"]
        x = qpos[:, 0]
        x_velocity = (x - before) / dt
        forward = self.p["forward_reward_weight"] * x_velocity
        healthy = self.healthy(s)
        survive = healthy * self.p["healthy_reward"]
        ctrl = self.p["ctrl_cost_weight"] * _sum_sq(actions)
        reward = (forward + survive) - ctrl
        terminated = ~healthy & bool(self.p["terminate_when_unhealthy"])
        info = {"x_position": x.copy(), "z_distance_from_origin": qpos[:, 1] - self.init_z, "x_velocity": x_velocity,
                "reward_forward": forward, "reward_ctrl": -ctrl, "reward_survive": np.asarray(survive, np.float64)}
        return reward, terminated, info


class Hopper(_Planar):
    xml, frame_skip = "hopper.xml", 4
    defaults: ClassVar[dict] = dict(forward_reward_weight=1.0, ctrl_cost_weight=1e-3, healthy_reward=1.0,
                    terminate_when_unhealthy=True,
                    healthy_state_range=(-100.0, 100.0), healthy_z_range=(0.7, float("inf")),
                    healthy_angle_range=(-0.2, 0.2), reset_noise_scale=5e-3,
                    exclude_current_positions_from_observation=True)

    def healthy(self, s):
        z, angle = s["qpos"][:, 1], s["qpos"][:, 2]
        state = np.concatenate([s["qpos"], s["qvel"]], axis=1)[:, 2:]
        lo, hi = self.p["healthy_state_range"]
        zlo, zhi = self.p["healthy_z_range"]
        alo, ahi = self.p["healthy_angle_range"]
        return ((lo < state) & (state < hi)).all(axis=1) & (zlo < z) & (z < zhi) & (alo < angle) & (angle < ahi)


class Walker2d(_Planar):
    xml, frame_skip = "walker2d_v5.xml", 4
    defaults: ClassVar[dict] = dict(forward_reward_weight=1.0, ctrl_cost_weight=1e-3, healthy_reward=1.0,
                    terminate_when_unhealthy=True,
                    healthy_z_range=(0.8, 2.0), healthy_angle_range=(-1.0, 1.0), reset_noise_scale=5e-3,
                    exclude_current_positions_from_observation=True)

    def healthy(self, s):
        z, angle = s["qpos"][:, 1], s["qpos"][:, 2]
        zlo, zhi = self.p["healthy_z_range"]
        alo, ahi = self.p["healthy_angle_range"]
        return (zlo < z) & (z < zhi) & (alo < angle) & (angle < ahi)


class Ant(Task):
    xml, frame_skip = "ant.xml", 5
    defaults: ClassVar[dict] = dict(forward_reward_weight=1.0, ctrl_cost_weight=0.5, contact_cost_weight=5e-4,
                    healthy_reward=1.0,
                    main_body=1, terminate_when_unhealthy=True, healthy_z_range=(0.2, 1.0),
                    contact_force_range=(-1.0, 1.0), reset_noise_scale=0.1,
                    exclude_current_positions_from_observation=True, include_cfrc_ext_in_observation=True)
    fields = ("qpos", "qvel", "cfrc_ext", "xpos")
    reset_state = _gaussian_qvel_reset

    def __init__(self, model, kwargs):
        super().__init__(model, kwargs)
        body = self.p["main_body"]
        self.body = body if isinstance(body, (int, np.integer)) else model.body(body).id

    def contact_forces(self, s, rows=slice(None)):
        lo, hi = self.p["contact_force_range"]
        return np.clip(s["cfrc_ext"][rows], lo, hi)

    def observe(self, s, rows):
        skip = 2 * int(self.p["exclude_current_positions_from_observation"])
        parts = [s["qpos"][rows, skip:], s["qvel"][rows]]
        if self.p["include_cfrc_ext_in_observation"]:
            forces = self.contact_forces(s, rows)[:, 1:]
            parts.append(forces.reshape(len(forces), -1))
        return np.concatenate(parts, axis=1)

    def before(self, s):
        return s["xpos"][:, self.body, :2].copy()

    def step(self, s, before, actions, dt):
        qpos = s["qpos"]
        velocity = (s["xpos"][:, self.body, :2] - before) / dt
        forward = velocity[:, 0] * self.p["forward_reward_weight"]
        state = np.concatenate([qpos, s["qvel"]], axis=1)
        zlo, zhi = self.p["healthy_z_range"]
        healthy = np.isfinite(state).all(axis=1) & (zlo <= state[:, 2]) & (state[:, 2] <= zhi)
        survive = healthy * self.p["healthy_reward"]
        ctrl = self.p["ctrl_cost_weight"] * _sum_sq(actions)
        contact = self.p["contact_cost_weight"] * _sum_sq(self.contact_forces(s))
        reward = (forward + survive) - (ctrl + contact)
        terminated = ~healthy & bool(self.p["terminate_when_unhealthy"])
        info = {"x_position": qpos[:, 0].copy(), "y_position": qpos[:, 1].copy(),
                "distance_from_origin": _norm(qpos[:, :2]), "x_velocity": velocity[:, 0].copy(),
                "y_velocity": velocity[:, 1].copy(), "reward_forward": forward, "reward_ctrl": -ctrl,
                "reward_contact": -contact, "reward_survive": np.asarray(survive, np.float64)}
        return reward, terminated, info


class Humanoid(Task):
    xml, frame_skip = "humanoid.xml", 5
    defaults: ClassVar[dict] = dict(forward_reward_weight=1.25, ctrl_cost_weight=0.1, contact_cost_weight=5e-7,
                    contact_cost_range=(-np.inf, 10.0), healthy_reward=5.0, terminate_when_unhealthy=True,
                    healthy_z_range=(1.0, 2.0), reset_noise_scale=1e-2, exclude_current_positions_from_observation=True,
                    include_cinert_in_observation=True, include_cvel_in_observation=True,
                    include_qfrc_actuator_in_observation=True, include_cfrc_ext_in_observation=True)
    fields = ("qpos", "qvel", "cinert", "cvel", "qfrc_actuator", "cfrc_ext", "xipos", "ctrl")

    def observe(self, s, rows):
        skip = 2 * int(self.p["exclude_current_positions_from_observation"])
        parts = [s["qpos"][rows, skip:], s["qvel"][rows]]
        for key, name in (("include_cinert_in_observation", "cinert"), ("include_cvel_in_observation", "cvel")):
            if self.p[key] is True:
                x = s[name][rows, 1:]
                parts.append(x.reshape(len(x), -1))
        if self.p["include_qfrc_actuator_in_observation"] is True:
            parts.append(s["qfrc_actuator"][rows, 6:])
        if self.p["include_cfrc_ext_in_observation"] is True:
            x = s["cfrc_ext"][rows, 1:]
            parts.append(x.reshape(len(x), -1))
        return np.concatenate(parts, axis=1)

    def mass_center(self, s) -> np.ndarray:
        mass = self.model.body_mass
        return np.stack([(np.einsum("b,bj->j", mass, xipos) / mass.sum())[0:2] for xipos in s["xipos"]])

    def before(self, s):
        return self.mass_center(s)

    def step(self, s, before, actions, dt):
        qpos = s["qpos"]
        velocity = (self.mass_center(s) - before) / dt
        forward = self.p["forward_reward_weight"] * velocity[:, 0]
        zlo, zhi = self.p["healthy_z_range"]
        healthy = (zlo < qpos[:, 2]) & (qpos[:, 2] < zhi)
        survive = healthy * self.p["healthy_reward"]
        ctrl = self.p["ctrl_cost_weight"] * _sum_sq(s["ctrl"])
        lo, hi = self.p["contact_cost_range"]
        contact = np.clip(self.p["contact_cost_weight"] * _sum_sq(s["cfrc_ext"]), lo, hi)
        reward = (forward + survive) - (ctrl + contact)
        terminated = ~healthy & bool(self.p["terminate_when_unhealthy"])
        info = {"x_position": qpos[:, 0].copy(), "y_position": qpos[:, 1].copy(),
                "distance_from_origin": _norm(qpos[:, :2]), "x_velocity": velocity[:, 0].copy(),
                "y_velocity": velocity[:, 1].copy(), "reward_survive": np.asarray(survive, np.float64),
                "reward_forward": forward, "reward_ctrl": -ctrl, "reward_contact": -contact}
        return reward, terminated, info


def _positions_velocities(s, rows) -> np.ndarray:
    """[rows, nq + nv]: the joint positions, then the joint velocities."""
    return np.concatenate([s["qpos"][rows], s["qvel"][rows]], axis=1)


class InvertedPendulum(Task):
    xml, frame_skip = "inverted_pendulum.xml", 2
    defaults: ClassVar[dict] = dict(reset_noise_scale=0.01)

    def observe(self, s, rows):
        return _positions_velocities(s, rows)

    def step(self, s, before, actions, dt):
        # Gymnasium's termination tests the whole state, whatever a subclass observes (NoVel hides the velocities)
        state = _positions_velocities(s, slice(None))
        terminated = ~np.isfinite(state).all(axis=1) | (np.abs(state[:, 1]) > 0.2)
        reward = (~terminated).astype(np.float64)
        return reward, terminated, {"reward_survive": reward.copy()}


class InvertedDoublePendulum(Task):
    xml, frame_skip = "inverted_double_pendulum.xml", 5
    defaults: ClassVar[dict] = dict(healthy_reward=10.0, reset_noise_scale=0.1)
    fields = ("qpos", "qvel", "qfrc_constraint", "site_xpos")
    reset_state = _gaussian_qvel_reset

    def observe(self, s, rows):
        qpos = s["qpos"][rows]
        return np.concatenate([qpos[:, :1], np.sin(qpos[:, 1:]), np.cos(qpos[:, 1:]), np.clip(s["qvel"][rows], -10, 10),
                               np.clip(s["qfrc_constraint"][rows], -10, 10)[:, :1]], axis=1)

    def step(self, s, before, actions, dt):
        x, y = s["site_xpos"][:, 0, 0], s["site_xpos"][:, 0, 2]
        terminated = y <= 1
        v1, v2 = s["qvel"][:, 1], s["qvel"][:, 2]
        distance = 0.01 * x ** 2 + (y - 2) ** 2
        velocity = 1e-3 * v1 ** 2 + 5e-3 * v2 ** 2
        alive = self.p["healthy_reward"] * (~terminated).astype(np.float64)
        reward = alive - distance - velocity
        return reward, terminated, {"reward_survive": alive, "distance_penalty": -distance,
                                    "velocity_penalty": -velocity}


class Swimmer(Task):
    xml, frame_skip = "swimmer.xml", 4
    defaults: ClassVar[dict] = dict(forward_reward_weight=1.0, ctrl_cost_weight=1e-4, reset_noise_scale=0.1,
                    exclude_current_positions_from_observation=True)

    def observe(self, s, rows):
        skip = 2 * int(self.p["exclude_current_positions_from_observation"])
        return np.concatenate([s["qpos"][rows, skip:], s["qvel"][rows]], axis=1)

    def before(self, s):
        return s["qpos"][:, 0:2].copy()

    def step(self, s, before, actions, dt):
        xy = s["qpos"][:, 0:2].copy()
        velocity = (xy - before) / dt
        forward = self.p["forward_reward_weight"] * velocity[:, 0]
        ctrl = self.p["ctrl_cost_weight"] * _sum_sq(actions)
        info = {"x_position": xy[:, 0].copy(), "y_position": xy[:, 1].copy(), "distance_from_origin": _norm(xy),
                "x_velocity": velocity[:, 0].copy(), "y_velocity": velocity[:, 1].copy(), "reward_forward": forward,
                "reward_ctrl": -ctrl}
        return forward - ctrl, np.zeros(len(xy), bool), info


class _Arm(Task):
    """Reacher and Pusher: rewards from distances between bodies (Gymnasium's ``get_body_com``: ``xpos``)."""

    fields = ("qpos", "qvel", "xpos")

    def __init__(self, model, kwargs):
        super().__init__(model, kwargs)
        self.body = {name: model.body(name).id for name in self.bodies}

    def com(self, s, name, rows=slice(None)) -> np.ndarray:
        return s["xpos"][rows, self.body[name]]


class Reacher(_Arm):
    xml, frame_skip, max_episode_steps = "reacher.xml", 2, 50
    defaults: ClassVar[dict] = dict(reward_dist_weight=1.0, reward_control_weight=1.0)
    bodies = ("fingertip", "target")

    def observe(self, s, rows):
        qpos = s["qpos"][rows]
        theta = qpos[:, :2]
        delta = self.com(s, "fingertip", rows) - self.com(s, "target", rows)
        return np.concatenate([np.cos(theta), np.sin(theta), qpos[:, 2:], s["qvel"][rows, :2], delta[:, :2]], axis=1)

    def step(self, s, before, actions, dt):
        dist = -_norm(self.com(s, "fingertip") - self.com(s, "target")) * self.p["reward_dist_weight"]
        ctrl = -_sum_sq(actions) * self.p["reward_control_weight"]
        return dist + ctrl, np.zeros(len(dist), bool), {"reward_dist": dist, "reward_ctrl": ctrl}

    def reset_state(self, rng, init_qpos, init_qvel):
        qpos = rng.uniform(low=-0.1, high=0.1, size=self.model.nq) + init_qpos
        while True:
            goal = rng.uniform(low=-0.2, high=0.2, size=2)
            if np.linalg.norm(goal) < 0.2:
                break
        qpos[-2:] = goal
        qvel = init_qvel + rng.uniform(low=-0.005, high=0.005, size=self.model.nv)
        qvel[-2:] = 0
        return qpos, qvel


class Pusher(_Arm):
    xml, frame_skip, max_episode_steps = "pusher_v5.xml", 5, 100
    defaults: ClassVar[dict] = dict(reward_near_weight=0.5, reward_dist_weight=1.0, reward_control_weight=0.1)
    bodies = ("tips_arm", "object", "goal")

    def observe(self, s, rows):
        return np.concatenate([s["qpos"][rows, :7], s["qvel"][rows, :7], self.com(s, "tips_arm", rows),
                               self.com(s, "object", rows), self.com(s, "goal", rows)], axis=1)

    def step(self, s, before, actions, dt):
        near = -_norm(self.com(s, "object") - self.com(s, "tips_arm")) * self.p["reward_near_weight"]
        dist = -_norm(self.com(s, "object") - self.com(s, "goal")) * self.p["reward_dist_weight"]
        ctrl = -_sum_sq(actions) * self.p["reward_control_weight"]
        reward = dist + ctrl + near
        return reward, np.zeros(len(near), bool), {"reward_dist": dist, "reward_ctrl": ctrl, "reward_near": near}

    def reset_state(self, rng, init_qpos, init_qvel):
        qpos = init_qpos.copy()
        goal = np.asarray([0, 0])
        while True:
            cylinder = np.concatenate([rng.uniform(low=-0.3, high=0, size=1), rng.uniform(low=-0.2, high=0.2, size=1)])
            if np.linalg.norm(cylinder - goal) > 0.17:
                break
        qpos[-4:-2] = cylinder
        qpos[-2:] = goal
        qvel = init_qvel + rng.uniform(low=-0.005, high=0.005, size=self.model.nv)
        qvel[-4:] = 0
        return qpos, qvel


def position_columns(nq: int, exclude_x: bool) -> int:
    """How many leading columns of a v5 task's observation are joint positions: nq, less the x position where the
    task excludes it (the batched ``NOVEL_TASKS`` and their Gymnasium twins, ``make_novel``, keep these)."""
    return nq - int(exclude_x)


def _positions_only(task: type[Task]) -> type[Task]:
    """``task`` observing its joint positions only, its velocities hidden (pomdp-baselines' "-P" tasks: a policy must
    infer the velocities from the positions it has seen). The same dynamics, rewards and terminations; the
    observation is the first nq - (1 if the x position is excluded) columns of the task's, which are its positions.
    Gymnasium's twin is ``MaskVelocity`` of those columns around the v5 env (``make_novel``)."""

    def observe(self, s, rows):
        keep = position_columns(self.model.nq, self.p.get("exclude_current_positions_from_observation", False))
        return task.observe(self, s, rows)[:, :keep]

    return type(f"{task.__name__}NoVel", (task,), {"observe": observe, "__doc__": _positions_only.__doc__})


NOVEL_TASKS = tuple(_positions_only(cls) for cls in (HalfCheetah, Hopper, Walker2d, InvertedPendulum))
"""The velocity-hidden tasks: HalfCheetahNoVel-v5 (8 of 17 observations), HopperNoVel-v5 (5 of 11), Walker2dNoVel-v5
(8 of 17), InvertedPendulumNoVel-v5 (2 of 4)."""

MUJOCO_TASKS: dict[str, type[Task]] = {f"{cls.__name__}-v5": cls for cls in (
    HalfCheetah, Hopper, Walker2d, Ant, Humanoid, InvertedPendulum, InvertedDoublePendulum, Reacher, Swimmer, Pusher,
    *NOVEL_TASKS)}
"""Env id -> task class of every batched MuJoCo task."""


def make_novel(env_id: str, **kwargs) -> gym.Env:
    """The Gymnasium env of a velocity-hidden id ("HopperNoVel-v5"): ``MaskVelocity`` of the position columns around
    ``gymnasium.make`` of the v5 task (the reference the tests compare the batched env with)."""
    from rapidrl.envs.pomdp.cartpole_novel import MaskVelocity

    base = env_id.replace("NoVel", "")
    env = gym.make(base, **kwargs)
    exclude_x = getattr(env.unwrapped, "_exclude_current_positions_from_observation", False)
    return MaskVelocity(env, tuple(range(position_columns(env.unwrapped.model.nq, exclude_x))))


def register_novel() -> None:
    """Register the velocity-hidden ids with Gymnasium (idempotent)."""
    for cls in NOVEL_TASKS:
        env_id = f"{cls.__name__}-v5"
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=make_novel, kwargs={"env_id": env_id})


def is_mujoco_id(env_id: str) -> bool:
    return env_id in MUJOCO_TASKS


# -- the vector env ---------------------------------------------------------------------------------------
class MujocoVecEnv(VecEnvBase):
    """N copies of one v5 task, stepped together (see the module docstring).

    Args:
        env_id: one of ``MUJOCO_TASKS`` (e.g. ``"HalfCheetah-v5"``).
        num_envs: N.
        seed: env i draws its reset noise from ``default_rng(seed + i)`` (None: fresh entropy).
        num_threads: threads stepping the simulations (None: one per core for models with nv >= 20, such as
            Humanoid, when N >= 2 * cores; else 1: measured faster for light models).
        max_episode_steps: truncation (None: the registered limit).
        **task_kwargs: the task's v5 keyword arguments (``ctrl_cost_weight=...``, ``frame_skip=...``, ...).
    """

    def __init__(self, env_id: str, num_envs: int, *, seed: int | None = None, num_threads: int | None = None,
                 max_episode_steps: int | None = None, autoreset_mode=AutoresetMode.SAME_STEP, copy: bool = False,
                 render_mode: str | None = None, **task_kwargs):
        import mujoco

        if env_id not in MUJOCO_TASKS:
            raise ValueError(f"{env_id!r} is not a batched MuJoCo task; known: {', '.join(MUJOCO_TASKS)}")
        cls = MUJOCO_TASKS[env_id]
        xml = task_kwargs.get("xml_file", cls.xml)
        path = Path(xml) if os.path.isabs(str(xml)) else _assets() / xml
        self._mj = mujoco
        self.model = mujoco.MjModel.from_xml_path(str(path))
        self.task = cls(self.model, task_kwargs)
        frame_skip = task_kwargs.get("frame_skip", cls.frame_skip)
        if isinstance(frame_skip, bool) or not isinstance(frame_skip, (int, np.integer)) or frame_skip < 1:
            raise ValueError(f"frame_skip must be a positive int, got {frame_skip!r}")
        self.frame_skip = int(frame_skip)
        self.dt = self.model.opt.timestep * self.frame_skip
        limit = cls.max_episode_steps if max_episode_steps is None else max_episode_steps
        if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
            raise ValueError(f"max_episode_steps must be a positive int, got {limit!r}")
        self.max_episode_steps = int(limit)
        self.env_id = env_id
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        n = int(num_envs)
        self.datas = [mujoco.MjData(self.model) for _ in range(n)]
        self._lib = _c_library()
        self._model_ptr = self.model._address if self._lib is not None else None
        self._data_ptrs = [d._address for d in self.datas] if self._lib is not None else []
        self.init_qpos = self.datas[0].qpos.ravel().copy()
        self.init_qvel = self.datas[0].qvel.ravel().copy()
        self.s = {f: np.zeros((n, *np.shape(getattr(self.datas[0], f))), np.float64) for f in self.task.fields}
        for i in range(n):
            self._gather(i)
        self._ctrl64 = np.zeros((n, self.model.nu), np.float64)  # the actions as MjData.ctrl takes them
        self._stepper = _batch_stepper() if self._lib is not None else None
        if self._stepper is not None:  # address tables of the GIL-free step (see _batch_stepper's safety note)
            u64 = np.uint64
            self._tables = (
                np.uint64(self._model_ptr), np.array(self._data_ptrs, u64),
                np.array([row.ctypes.data for row in self._ctrl64], u64),
                np.array([d.ctrl.ctypes.data for d in self.datas], u64), np.uint64(8 * self.model.nu),
                np.array([[getattr(d, f).ctypes.data for f in self.s] for d in self.datas], u64).reshape(n, -1),
                np.array([[arr[i].ctypes.data for arr in self.s.values()] for i in range(n)], u64).reshape(n, -1),
                np.array([arr[0].nbytes for arr in self.s.values()], u64),
            )
        obs_dim = self.task.obs_dim(self.s)
        low, high = self.model.actuator_ctrlrange.copy().astype(np.float32).T
        super().__init__(gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float64),
                         gym.spaces.Box(low=low, high=high, dtype=np.float32), n, autoreset_mode=autoreset_mode,
                         copy=copy, render_mode=render_mode)
        cores = usable_cpu_count()
        # Measured (rapidrl bench mujoco, 2 cores) with the earlier Python loop, which held the GIL between the C
        # calls: two threads gained 1.1x on Humanoid (nv 23) at 8 and 64 envs and lost 0.8-0.86x on HalfCheetah
        # (nv 9). The compiled step (_batch_stepper) holds no GIL for a whole chunk of envs, so every model gets a
        # thread per core from 2 * cores envs up; the Python loop (no ctypes) keeps the old rule.
        heavy = self.model.nv >= 20 or self._stepper is not None
        threads = (cores if heavy and n >= 2 * cores else 1) if num_threads is None else num_threads
        if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
            raise ValueError(f"num_threads must be a positive int, got {num_threads!r}")
        self.num_threads = min(int(threads), n)
        bounds = np.linspace(0, n, self.num_threads + 1).astype(int)
        self._chunks = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        self._pool = ThreadPoolExecutor(self.num_threads) if self.num_threads > 1 else None
        self._params = self.arrays.params
        self._params[0] = self.max_episode_steps  # the core's time limit
        self._rngs: list[np.random.Generator] = []
        self._seed = seed  # used by the first reset() that gives no seed
        self._ctrl: np.ndarray | None = None
        self._renderer = None
        self.reward_terms: dict[str, np.ndarray] = {}

    # -- simulation --------------------------------------------------------------------------------------
    def _gather(self, i: int) -> None:
        d = self.datas[i]
        for f, arr in self.s.items():
            arr[i] = getattr(d, f)

    def _step_range(self, bounds: tuple[int, int]) -> None:
        """Step envs [lo, hi): Gymnasium's ``do_simulation`` (frame_skip x ``mj_step``, ``mj_rnePostConstraint``)."""
        mj, model, ctrl, skip, lib = self._mj, self.model, self._ctrl, self.frame_skip, self._lib
        if lib is not None and self._stepper is not None:  # compiled, no GIL, results identical
            self._stepper(*self._tables, skip, *bounds)
            return
        for i in range(*bounds):
            d = self.datas[i]
            d.ctrl[:] = ctrl[i]
            if lib is None:
                mj.mj_step(model, d, nstep=skip)
                mj.mj_rnePostConstraint(model, d)
            else:  # the same calls through ctypes, without the GIL
                m_ptr, d_ptr = self._model_ptr, self._data_ptrs[i]
                for _ in range(skip):
                    lib.mj_step(m_ptr, d_ptr)
                lib.mj_rnePostConstraint(m_ptr, d_ptr)
            self._gather(i)

    def _reset_env(self, i: int) -> None:
        d = self.datas[i]
        self._mj.mj_resetData(self.model, d)
        qpos, qvel = self.task.reset_state(self._rngs[i], self.init_qpos, self.init_qvel)
        d.qpos[:] = qpos
        d.qvel[:] = qvel
        self._mj.mj_forward(self.model, d)
        self._gather(i)

    # -- the VectorEnv API ------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._check_open()
        if seed is None and not self._rngs:
            seed = self._seed
        if seed is not None or not self._rngs:
            self._rngs = env_generators(seed, self.num_envs)
        for i in range(self.num_envs):
            self._reset_env(i)
        self._obs[:] = self.task.observe(self.s, slice(None))
        self._clear()
        return self._reset_result()

    def step(self, actions):
        a = self._check_actions(actions)
        restart = np.flatnonzero(self.arrays.needs_reset)  # NEXT_STEP: envs whose episode ended last step
        before = self.task.before(self.s)
        self._ctrl = a
        np.copyto(self._ctrl64, a)
        if self._pool is None:
            self._step_range((0, self.num_envs))
        else:
            for f in [self._pool.submit(self._step_range, c) for c in self._chunks]:
                f.result()
        reward, terminated, terms = self.task.step(self.s, before, a, self.dt)
        self._obs[:] = self.task.observe(self.s, slice(None))
        self._rewards[:] = reward
        self._terminated[:] = terminated
        self._truncated[:] = False
        self.reward_terms = terms
        self._info.update(terms)
        if restart.size:  # they were reset instead of stepped (their physics step above is discarded)
            self._reset_rows(restart)
        if self._record() and self.autoreset_mode == AutoresetMode.SAME_STEP:
            rows = np.flatnonzero(self._done)
            self._final_obs[rows] = self._obs[rows]
            self._reset_rows(rows)
        return self._step_result()

    def _reset_rows(self, rows: np.ndarray) -> None:
        for i in rows:
            self._reset_env(int(i))
        self._obs[rows] = self.task.observe(self.s, rows)

    def render(self):
        """The first env as an RGB image [H, W, 3] uint8 through MuJoCo's renderer (needs an OpenGL backend)."""
        self._check_open()
        if self._renderer is None:
            try:
                self._renderer = self._mj.Renderer(self.model, 480, 480)
            except Exception as e:  # no EGL/OSMesa/GLFW context on this machine
                raise RuntimeError(
                    f"MuJoCo rendering needs an OpenGL backend and none could be created ({type(e).__name__}: {e}). "
                    "Install one (Debian: libegl1 for MUJOCO_GL=egl, libosmesa6 for MUJOCO_GL=osmesa) and set "
                    "MUJOCO_GL before importing mujoco.") from e
        self._renderer.update_scene(self.datas[0])
        return self._renderer.render()

    def close_extras(self, **kwargs) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        super().close_extras(**kwargs)


register_novel()  # gymnasium.make("HopperNoVel-v5") once this module is imported (the registry's MuJoCo family does)
