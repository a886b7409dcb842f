"""A user's package of envs reaches every entry point (issue 46): ``module:EnvId`` in ``rapidrl train``, ``rapidrl
eval`` and ``ALGO.load`` in a new process (the run records the module), ``--import MODULE``, and an installed
package's ``rapidrl.envs`` entry point (the id known without an import; ``rapidrl list envs`` shows it).

The package is written to ``tmp_path`` with a ``.dist-info`` beside it (what ``pip install`` leaves in
site-packages: ``importlib.metadata`` finds its entry points on ``PYTHONPATH``), so nothing is installed into the
test's environment. Two processes: one trains from the command line; the other evaluates, reloads, lists and
trains again with ``--import``. Kernels compile once (the env's functions are the same for both ids).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rapidrl.runs.config import read_toml

ENVS = '''
import gymnasium as gym
import numba
import numpy as np

import rapidrl as rr

SIZE = 5


@numba.njit(cache=True)
def reset(state, i, params, rng_key, rng_counter):
    state[i, 0] = 0


@numba.njit(cache=True)
def step(state, i, actions, params, elapsed, rng_key, rng_counter):
    state[i, 0] = min(max(state[i, 0] + (1 if actions[i] == 1 else -1), 0), SIZE - 1)
    done = state[i, 0] == SIZE - 1
    return (1.0 if done else -0.1), done


@numba.njit(cache=True)
def observe(state, i, obs):
    obs[i, :] = 0.0
    obs[i, state[i, 0]] = 1.0


def corridor(env_id):
    return rr.envs.NumbaEnv(id=env_id, observation_space=gym.spaces.Box(0.0, 1.0, (SIZE,), np.float32),
                            action_space=gym.spaces.Discrete(2), state_shape=(None, 1), state_dtype=np.int64,
                            reset=reset, step=step, observe=observe, max_episode_steps=20)


rr.envs.register(corridor("TmpWalk-v0"))  # registered when the module is imported
CORRIDOR = corridor("TmpCorridor-v0")  # registered through the package's entry point
'''

SMALL = ["--timesteps", "256", "--headless", "--eval-episodes", "2", "--set", "algo.num_envs=4", "--set",
         "algo.num_steps=32", "--set", "algo.minibatch_size=64", "--set", "algo.update_epochs=1",
         "--set", "algo.collection=step", "--set", "algo.gradient_backend=torch"]  # nothing compiled but the env's

SECOND_PROCESS = textwrap.dedent('''
    import sys
    from pathlib import Path

    from rapidrl import cli

    run, run2 = Path(sys.argv[1]), Path(sys.argv[2])
    assert cli.main(["list", "envs"]) == 0  # the entry point's id, without importing the package
    assert "mypkg_rr" not in sys.modules, "listing imported the package"
    import rapidrl as rr

    envs = rr.make_vec("TmpCorridor-v0", 2, seed=0)  # found through the entry point
    assert envs.reset(seed=0)[0].shape == (2, 5) and "mypkg_rr.envs" in sys.modules
    assert cli.main(["eval", str(run), "--episodes", "2"]) == 0  # the run's module is imported again
    model = rr.PPO.load(run / "model.pt")
    print("ENV_ID", model.env_id)
    print("EVAL", model.evaluate(n_episodes=2))
    assert cli.main(["train", "ppo", "TmpWalk-v0", "--import", "mypkg_rr.envs", "--run-dir", str(run2),
                     *sys.argv[3:]]) == 0
''')


def _write_package(site: Path) -> None:
    (site / "mypkg_rr").mkdir(parents=True)
    (site / "mypkg_rr" / "__init__.py").write_text("")
    (site / "mypkg_rr" / "envs.py").write_text(ENVS)
    info = site / "mypkg_rr-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mypkg-rr\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rapidrl.envs]\nTmpCorridor-v0 = mypkg_rr.envs:CORRIDOR\n")


def _run(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_a_users_package_trains_evaluates_and_reloads_from_every_entry_point(tmp_path):
    site = tmp_path / "site"
    _write_package(site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    run, run2 = tmp_path / "run", tmp_path / "run2"
    trained = _run(["-m", "rapidrl", "train", "ppo", "mypkg_rr.envs:TmpWalk-v0", "--run-dir", str(run), *SMALL],
                   tmp_path, env)
    assert "eval return" in trained.stdout
    assert read_toml(run / "config.toml")["run"]["env"] == "mypkg_rr.envs:TmpWalk-v0"

    second = _run(["-c", SECOND_PROCESS, str(run), str(run2), *SMALL], tmp_path, env)
    listed = second.stdout.split("registered:")[1]
    assert "TmpCorridor-v0" in listed.split("presets")[0]
    assert "ENV_ID mypkg_rr.envs:TmpWalk-v0" in second.stdout and "EVAL (" in second.stdout
    assert "eval return" in second.stdout  # rapidrl eval's line
    # --import: the run records the module with the id, so it resumes and reloads without --import
    assert read_toml(run2 / "config.toml")["run"]["env"] == "mypkg_rr.envs:TmpWalk-v0"
