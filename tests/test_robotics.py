"""gymnasium-robotics through rapidrl (rapidrl.envs.adapters.robotics): the MuJoCo 4 joint-type fix against the
joint layout MuJoCo reports, nothing else of either package changed, and FetchReach-v4 through the Gymnasium adapter
step by step against the Gymnasium env, its HER goal spec rewarding as the env does, and SAC + HER on it."""

from __future__ import annotations

import gymnasium as gym
import gymnasium_robotics
import mujoco
import numpy as np
from gymnasium_robotics.utils import mujoco_utils

import rapidrl as rr
from rapidrl.envs.adapters import robotics
from rapidrl.envs.goal import goal_spec
from rapidrl.envs.spaces import encode_observation

gym.register_envs(gymnasium_robotics)

# one joint of each type; qpos widths 7/4/1/1, qvel widths 6/3/1/1
XML = """<mujoco><worldbody>
  <body><freejoint name="free"/><geom size=".1"/></body>
  <body pos="1 0 0"><joint name="ball" type="ball"/><geom size=".1"/></body>
  <body pos="2 0 0"><joint name="slide" type="slide"/><joint name="hinge" type="hinge"/><geom size=".1"/></body>
</worldbody></mujoco>"""


def test_fix_makes_gymnasium_robotics_joint_functions_read_and_write_the_joints_mujoco_lays_out():
    robotics.fix_joint_type_checks()
    model = mujoco.MjModel.from_xml_string(XML)
    data = mujoco.MjData(model)
    widths = {"free": (7, 6), "ball": (4, 3), "slide": (1, 1), "hinge": (1, 1)}
    for name, (nq, nv) in widths.items():
        j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        q0, v0 = model.jnt_qposadr[j], model.jnt_dofadr[j]
        qpos = np.arange(1.0, nq + 1) / 10 + j
        mujoco_utils.set_joint_qpos(model, data, name, qpos if nq > 1 else qpos[0])
        np.testing.assert_array_equal(data.qpos[q0:q0 + nq], qpos)
        np.testing.assert_array_equal(mujoco_utils.get_joint_qpos(model, data, name), qpos)
        qvel = -np.arange(1.0, nv + 1) - j
        mujoco_utils.set_joint_qvel(model, data, name, qvel if nv > 1 else qvel[0])
        np.testing.assert_array_equal(data.qvel[v0:v0 + nv], qvel)
    # every other name of the module is mujoco's own object; the joint types keep their values
    assert mujoco_utils.mujoco.mj_name2id is mujoco.mj_name2id and mujoco_utils.mujoco.mjtObj is mujoco.mjtObj
    assert {k: getattr(mujoco_utils.mujoco.mjtJoint, k) for k in mujoco.mjtJoint.__members__} == {
        k: int(v) for k, v in mujoco.mjtJoint.__members__.items()}
    assert mujoco.mjtJoint.mjJNT_HINGE in (mujoco.mjtJoint.mjJNT_HINGE,)  # mujoco itself untouched


def test_fix_applies_only_where_the_enum_comparison_fails_and_only_once():
    needed = not robotics.enum_compares_with_numpy_ints(mujoco)
    robotics.fix_joint_type_checks()
    fixed = mujoco_utils.mujoco
    assert (fixed is not mujoco) == needed
    assert robotics.fix_joint_type_checks() == needed and mujoco_utils.mujoco is fixed  # no proxy of a proxy


def test_robotics_ids_are_recognised():
    assert robotics.is_robotics_id("FetchReach-v4") and robotics.is_robotics_id("FetchPush-v4")
    assert not robotics.is_robotics_id("CartPole-v1") and not robotics.is_robotics_id("NoSuchEnv-v0")


def test_fetch_reach_through_the_adapter_steps_as_the_gymnasium_env_and_her_rewards_as_it_does():
    env = rr.make_vec("gymnasium_robotics:FetchReach-v4", 2, seed=3, flatten_observations=True)
    refs = [robotics.make("FetchReach-v4") for _ in range(2)]
    space = refs[0].observation_space
    obs, _ = env.reset(seed=3)
    for i, ref in enumerate(refs):
        np.testing.assert_array_equal(obs[i], encode_observation(space, ref.reset(seed=3 + i)[0], obs.dtype))
    spec = goal_spec(env)
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(55):  # across the 50-step time limit: the same-step reset included
        actions = rng.uniform(-1, 1, (2, 4)).astype(np.float32)
        obs, rewards, terminated, truncated, info = env.step(actions)
        final = obs.copy()
        for i, ref in enumerate(refs):
            o, r, term, trunc, _ = ref.step(actions[i])
            assert (rewards[i], terminated[i], truncated[i]) == (np.float32(r), term, trunc)
            if trunc:
                final[i] = info["final_obs"][i]
                np.testing.assert_array_equal(obs[i], encode_observation(space, ref.reset()[0], obs.dtype))
                ended += 1
            np.testing.assert_array_equal(final[i], encode_observation(space, o, obs.dtype))
        np.testing.assert_array_equal(spec.compute_reward(final[:, spec.achieved_goal], final[:, spec.desired_goal]),
                                      rewards)
    assert ended == 2
    env.close()


def test_her_finds_the_goals_of_fetch_envs_stepped_in_worker_processes():
    sync = rr.make_vec("gymnasium_robotics:FetchReach-v4", 1, seed=0, flatten_observations=True)
    workers = rr.make_vec("gymnasium_robotics:FetchReach-v4", 2, seed=0, vectorization="subprocess",
                          flatten_observations=True)
    a, b = goal_spec(sync), goal_spec(workers)
    assert (a.achieved_goal, a.desired_goal, a.observation) == (b.achieved_goal, b.desired_goal, b.observation)
    goals = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]), np.array([[0.0, 0.0, 0.01], [0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(b.compute_reward(*goals), [0.0, -1.0])
    sync.close()
    workers.close()


def test_sac_her_trains_on_fetch_reach():
    model = rr.SAC("gymnasium_robotics:FetchReach-v4", her=True, seed=0, learning_starts=64, batch_size=32,
                   hidden=(16, 16), gamma=0.95, torch_threads=1)
    model.learn(120, progress_bar=False)
    assert model.num_timesteps == 120 and model.buffer.goal.goal_dim == 3
    assert model.predict(np.zeros((1, 16), np.float32), deterministic=True).shape == (1, 4)
    model.env.close()
