"""A mistake in an env's Numba functions is reported where it is made, in one line naming the function.

- a wrong arity or return type when the ``NumbaEnv`` is defined (``rapidrl.envs.core.contract``);
- an index out of range in the bounds-checked mode (``debug=True``, ``rapidrl.envs.check``): the function, the
  array and the index (``rapidrl.envs.core.debug``), where the normal mode would write into the next array.
"""

from __future__ import annotations

import gymnasium as gym
import numba
import numpy as np
import pytest

import rapidrl as rr
from rapidrl.envs.core.contract import contracts

SIZE = 4  # a walk on 4 cells: observation one-hot [4]


@numba.njit(cache=True)
def reset(state, i, params, rng_key, rng_counter):
    state[i, 0] = 0
    state[i, 1] = 0


@numba.njit(cache=True)
def step(state, i, actions, params, elapsed, rng_key, rng_counter):
    state[i, 0] = min(max(state[i, 0] + (1 if actions[i] == 1 else -1), 0), SIZE - 1)
    done = state[i, 0] == SIZE - 1
    return (1.0 if done else 0.0), done


@numba.njit(cache=True)
def observe(state, i, obs):
    obs[i, :] = 0.0
    obs[i, state[i, 0]] = 1.0


@numba.njit(cache=True)
def step_reward_only(state, i, actions, params, elapsed, rng_key, rng_counter):
    state[i, 0] = min(max(state[i, 0] + (1 if actions[i] == 1 else -1), 0), SIZE - 1)
    return 1.0 if state[i, 0] == SIZE - 1 else 0.0


@numba.njit(cache=True)
def step_three_args(state, i, actions):
    return 0.0, False


@numba.njit(cache=True)
def observe_returns_obs(state, i, obs):
    obs[i, :] = 0.0
    return obs


@numba.njit(cache=True)
def step_untyped(state, i, actions, params, elapsed, rng_key, rng_counter):
    return undefined_name(state), False  # noqa: F821


@numba.njit(cache=True)
def observe_past_the_end(state, i, obs):
    obs[i, :] = 0.0
    obs[i, state[i, 0]] = 1.0
    obs[i, SIZE] = 1.0  # one past the observation's width: lands in the next array


@numba.njit(cache=True)
def step_past_the_state(state, i, actions, params, elapsed, rng_key, rng_counter):
    state[i, 0] = min(max(state[i, 0] + (1 if actions[i] == 1 else -1), 0), SIZE - 1)
    state[i, 1 + 2 * (state[i, 0] // (SIZE - 1))] = 7  # column 1, or 3 at the goal: past the state's 2 columns
    done = state[i, 0] == SIZE - 1
    return (1.0 if done else 0.0), done


def walk(**functions) -> rr.envs.NumbaEnv:
    return rr.envs.NumbaEnv(id="Walk-v0", observation_space=gym.spaces.Box(0.0, 1.0, (SIZE,), np.float32),
                            action_space=gym.spaces.Discrete(2), state_shape=(None, 2), state_dtype=np.int64,
                            max_episode_steps=20, **{"reset": reset, "step": step, "observe": observe, **functions})


def test_a_step_returning_only_the_reward_is_refused_in_one_line():
    with pytest.raises(TypeError) as e:
        walk(step=step_reward_only)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith("Walk-v0: step must return (reward, terminated)") and "step_reward_only" in message
    assert message.endswith("returns float64")


def test_a_wrong_arity_is_refused_naming_the_arguments():
    with pytest.raises(TypeError) as e:
        walk(step=step_three_args)
    assert str(e.value).startswith("Walk-v0: step must take 7 arguments (state, i, actions, params, elapsed, "
                                   "rng_key, rng_counter);")
    assert "takes (state, i, actions)" in str(e.value)


def test_observe_must_return_nothing():
    with pytest.raises(TypeError, match=r"^Walk-v0: observe must return nothing .* returns array\(float32, 2d, C\)$"):
        walk(observe=observe_returns_obs)


def test_a_body_that_does_not_type_names_the_function_and_its_argument_types():
    with pytest.raises(TypeError) as e:
        walk(step=step_untyped)
    first = str(e.value).splitlines()[0]
    assert first.startswith("Walk-v0: step (") and "step_untyped" in first
    assert "state array(int64, 2d, C), i int64" in first
    assert "undefined_name" in str(e.value)


def test_not_a_jitted_function():
    with pytest.raises(TypeError, match=r"observe must be a numba\.njit function"):
        walk(observe=observe.py_func)


def test_contract_table_names_every_function_once():
    for multi in (False, True):
        assert [c.name for c in contracts(multi)] == ["reset", "step", "observe", "mask"]
        assert [c.optional for c in contracts(multi)] == [False, False, False, True]  # action masks: docs/masks.md
    assert contracts(True)[1].args[-1] == "rewards"


def test_bounds_checked_mode_names_an_out_of_bounds_write_in_observe():
    envs = walk(observe=observe_past_the_end).make_vec(3, seed=0, debug=True)
    assert envs.debug and envs.kernel_key.endswith("@boundscheck")
    with pytest.raises(IndexError) as e:
        envs.reset(seed=0)
    line = observe_past_the_end.py_func.__code__.co_firstlineno + 4  # the decorator, def, two lines
    assert str(e.value) == ("Walk-v0: observe writes obs[i, SIZE] out of bounds: index 4 on axis 1 of obs, whose "
                            f"shape is (3, 4) (env 0; test_numba_env_errors.py:{line}: obs[i, SIZE] = 1.0  # one "
                            "past the observation's width: lands in the next array)")


def test_bounds_checked_mode_names_an_out_of_bounds_write_in_step_and_restores_the_env():
    envs = walk(step=step_past_the_state).make_vec(2, seed=0, debug=True)
    envs.reset(seed=0)
    envs.step(np.array([1, 0]))
    envs.step(np.array([1, 0]))
    before = envs.arena.copy()
    with pytest.raises(IndexError) as e:
        envs.step(np.array([1, 0]))  # env 0 reaches the goal: column 3
    assert str(e.value).startswith("Walk-v0: step writes state[i, 1 + 2 * (state[i, 0] // (SIZE - 1))] out of bounds: "
                                   "index 3 on axis 1 of state, whose shape is (2, 2) (env 0; ")
    np.testing.assert_array_equal(envs.arena, before)  # the env is as it was before the step


def test_the_normal_mode_does_not_see_it_and_check_does():
    """Without bounds checks the write lands in the arena's next array (what the issue saw); ``check`` runs a
    bounds-checked twin first and names the write."""
    definition = walk(observe=observe_past_the_end)
    envs = definition.make_vec(3, seed=0)
    assert not envs.debug and "@boundscheck" not in envs.kernel_key
    envs.reset(seed=0)  # no error: silent corruption
    with pytest.raises(IndexError, match=r"^Walk-v0: observe writes obs\[i, SIZE\] out of bounds"):
        rr.envs.check(envs, steps=50)


def test_a_correct_env_passes_check_in_both_modes():
    report = rr.envs.check(walk().make_vec(3, seed=0), steps=60)
    assert report.bounds_checked and report.episodes > 0
    assert rr.envs.check(walk().make_vec(3, seed=0, debug=True), steps=60).bounds_checked


# -- the registry: re-registering, module:EnvId, qualified ids ------------------------------------------------------

def test_registering_another_definition_under_a_taken_id_is_refused_or_overridden_with_a_warning():
    from rapidrl.envs import registry

    first = walk()
    rr.envs.register(walk())  # a definition equal to `first`
    rr.envs.register(first)  # the same definition again (a re-run cell): accepted quietly
    longer = rr.envs.NumbaEnv(**{**{f: getattr(first, f) for f in ("id", "observation_space", "action_space",
                                                                    "state_shape", "state_dtype", "reset", "step",
                                                                    "observe")}, "max_episode_steps": 99})
    with pytest.raises(ValueError, match=r"^env id 'Walk-v0' is already registered by module "
                                         r"'test_numba_env_errors' with another definition; register\(env, "
                                         r"override=True\) replaces it$"):
        rr.envs.register(longer)
    with pytest.warns(UserWarning, match="'Walk-v0' registered by module 'test_numba_env_errors' is replaced"):
        rr.envs.register(longer, override=True)
    assert rr.make_vec("Walk-v0", 2).max_episode_steps == 99
    assert registry.qualified_id("Walk-v0") == "test_numba_env_errors:Walk-v0"  # what a saved model records
    assert registry.qualified_id("CartPole-v1") == "CartPole-v1"


def test_module_colon_id_imports_the_module_first(tmp_path, monkeypatch):
    (tmp_path / "h46_user_envs.py").write_text(
        "import rapidrl as rr\nimport test_numba_env_errors as t\n\n"
        "ENV = rr.envs.NumbaEnv(**{**{f: getattr(t.walk(), f) for f in ('observation_space', 'action_space', "
        "'state_shape', 'state_dtype', 'reset', 'step', 'observe')}, 'id': 'H46Walk-v0'})\n"
        "rr.envs.register(ENV)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    envs = rr.make_vec("h46_user_envs:H46Walk-v0", 2, seed=0)
    assert envs.env_id == "H46Walk-v0" and envs.reset(seed=0)[0].shape == (2, SIZE)
    from rapidrl.envs import registry

    assert registry.qualified_id("H46Walk-v0") == "h46_user_envs:H46Walk-v0"
    with pytest.raises(ValueError, match=r"^env id 'h46_user_envs:Nope-v0': module 'h46_user_envs' was imported but "
                                         r"registered no env 'Nope-v0'"):
        rr.make_vec("h46_user_envs:Nope-v0", 2)
    with pytest.raises(ValueError, match=r"^env id 'h46_no_such_module:X-v0': cannot import module "
                                         r"'h46_no_such_module' \(ModuleNotFoundError"):
        rr.make_vec("h46_no_such_module:X-v0", 2)


def test_debug_is_for_envs_written_as_numba_functions():
    with pytest.raises(ValueError, match=r"^debug=True \(the bounds-checked mode\) is for envs written as Numba "
                                         r"functions; 'MemoryCue-v0' is not one$"):
        rr.make_vec("MemoryCue-v0", 2, debug=True)


def test_training_on_a_bounds_checked_env_collects_through_the_env():
    """The fused rollout could not say where an index is out of range: a bounds-checked env is stepped by
    ``NumbaVecEnv.step`` (collection "auto" picks "step")."""
    model = rr.PPO(walk().make_vec(4, seed=0, debug=True), num_envs=4, num_steps=8, minibatch_size=16, seed=0)
    assert model.paths["collection"].value == "step" and "debug=True" in model.paths["collection"].reason
